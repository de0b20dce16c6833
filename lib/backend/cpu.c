// cpu.c - the reference backend: the lib/quant quantizer and lib/attention
// tiered decode behind the backend vtable. The cache handle is the caller's
// struct oscar_kv_cache itself (no copy); writes into it are not offered.
#include "backend/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention/attention.h"
#include "rotation/rotation.h"

struct oscar_backend_kv {
    const struct oscar_kv_cache * c;
};

static enum oscar_status cpu_rotate_quantize(const struct oscar_int2_params * p, const float * R, const uint16_t * x,
                                             int64_t n_rows, uint8_t * codes, void * meta) {
    int32_t D = p->head_dim;
    float * y = malloc((size_t) (n_rows > 0 ? n_rows : 1) * (size_t) D * sizeof(float));
    if (!y) return osc_error(OSCAR_ERR_NOMEM, "cpu rotate-quantize: %lld rows", (long long) n_rows);
    for (int64_t r = 0; r < n_rows; r++) {
        const uint16_t * xr = x + r * D;
        for (int32_t j = 0; j < D; j++) {
            float acc = 0.0f;
            if (R) {
                for (int32_t k = 0; k < D; k++) acc = fmaf(oscar_bf16_to_f32(xr[k]), R[(int64_t) k * D + j], acc);
            } else {
                acc = oscar_bf16_to_f32(xr[j]);
            }
            y[r * D + j] = oscar_bf16_round(acc);
        }
    }
    enum oscar_status st = oscar_int2_quantize_rows(p, y, n_rows, codes, meta, NULL);
    free(y);
    return st;
}

static enum oscar_status cpu_kv_upload(const struct oscar_kv_cache * c, struct oscar_backend_kv ** out) {
    *out = malloc(sizeof **out);
    if (!*out) return osc_error(OSCAR_ERR_NOMEM, "cpu kv handle");
    (*out)->c = c;
    return OSCAR_OK;
}

static enum oscar_status cpu_kv_read_int2(const struct oscar_backend_kv * kv, int which, uint8_t * codes, void * meta) {
    const struct oscar_kv_cache * c = kv->c;
    int64_t rows = c->p.n_int2_pages * c->p.page_size * c->p.n_head_kv;
    const struct oscar_int2_params * p = which ? &c->p.v_quant : &c->p.k_quant;
    memcpy(codes, which ? c->q_v : c->q_k, (size_t) rows * oscar_int2_code_bytes(p));
    memcpy(meta, which ? c->q_v_meta : c->q_k_meta, (size_t) rows * oscar_int2_meta_bytes(p));
    return OSCAR_OK;
}

static enum oscar_status cpu_decode(struct oscar_backend_kv * kv, int32_t n_seq, const float * q, int32_t n_head,
                                    const float * r_v, float * out) {
    const struct oscar_kv_cache * c = kv->c;
    int32_t D = c->p.head_dim;
    struct oscar_attn_tiered_opts o = oscar_attn_tiered_default_opts();
    float * tmp = malloc((size_t) n_head * (size_t) D * sizeof(float));
    if (!tmp) return osc_error(OSCAR_ERR_NOMEM, "cpu decode");
    enum oscar_status st = OSCAR_OK;
    for (int32_t s = 0; s < n_seq && st == OSCAR_OK; s++) {
        float * o_s = out + (int64_t) s * n_head * D;
        st = oscar_attn_tiered_decode(c, s, q + (int64_t) s * n_head * D, n_head, &o, r_v ? tmp : o_s);
        if (st == OSCAR_OK && r_v) oscar_rotation_apply_rows(r_v, D, tmp, n_head, o_s, true);
    }
    free(tmp);
    return st;
}

static void cpu_kv_free(struct oscar_backend_kv * kv) { free(kv); }

const struct oscar_backend_i * osc_backend_cpu(void) {
    static const struct oscar_backend_i be = {
        .name = "cpu",
        .int2_rotate_quantize = cpu_rotate_quantize,
        .kv_upload = cpu_kv_upload,
        .kv_write_int2 = NULL,
        .kv_read_int2 = cpu_kv_read_int2,
        .decode_attention = cpu_decode,
        .kv_free = cpu_kv_free,
        .optr_refine_layer = oscar_optr_refine_layer,
    };
    return &be;
}
