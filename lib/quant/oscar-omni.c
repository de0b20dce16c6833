// oscar-omni.c - OScaR (arXiv 2605.19660, "Omni-Scaled Canalized Rotation") as its
// release computes it: ZunhaiSu/OScaR-KV-Quant @ d2109f5, setup of eval_longbench.py
// (num_bits 2, quant_mode "k-channel", group_size 32, kv_rotation "hadamard", kv_norm "1",
// --offline_v_hadamard); method.md §18.2.
//
//   K (csrc/oscar/src/k_preprocess.cu, preprocess_k_cache_kernel_*): per KV head a normalized
//     Sylvester Hadamard of size D (H_128 = H_16 (x) H_8 on tensor cores = natural order),
//     the result stored as bf16; the token norm n = sqrt of the sum of squares of the fp32
//     rotated values over ALL KV heads and D (1 if not > 0), kept as fp32; then
//     y = bf16(bf16(Hx) / n). Attention multiplies each logit column by n (apply_token_norm).
//   V: Hadamard folded offline into v_proj / o_proj, so the cache holds bf16(H v).
//   Quantizer (include/qpack.h, compute_affine_asym_params): KIVI granularity, see kivi.c;
//     K per channel over 32-token blocks, V per token over 32-channel groups; scale and
//     zero_dequant stored as a half2 / bfloat162 of the model dtype, dequantized with
//     hfma2 in that dtype (so each x^ is rounded to it).
//   Bits: K 2 + 32/32, V 2 + 32/32, plus a 32-bit norm per token for all heads.
//
// Our choices where the kernel has no CPU meaning: the norm's sum of squares is fp64 in
// (head, channel) order (the kernel's warp reduction order is not reproducible); the FWHT is
// lib/rotation's fp32 butterfly (stages 1, 2, 4, ..., then one 1/sqrt(D) factor).
#include "quant/quant-internal.h"

#include <math.h>
#include <stdlib.h>

#include "rotation/rotation.h"

struct oscar_omni_params oscar_omni_default_params(int32_t n_head_kv, int32_t head_dim) {
    struct oscar_omni_params p = {.n_head_kv = n_head_kv, .kivi = oscar_kivi_default_params(head_dim)};
    p.kivi.meta_dtype = OSCAR_META_BF16;   // Params2 = bfloat162 for bf16 models
    return p;
}

enum oscar_status oscar_omni_params_check(const struct oscar_omni_params * p) {
    const struct oscar_kivi_params * k = &p->kivi;
    if (p->n_head_kv < 1 || p->n_head_kv > 256 || !oscar_is_pow2(k->head_dim) || k->head_dim < 4 ||
        k->head_dim > 1024 || k->k_block_tokens < 4 || k->k_block_tokens > 1024 || k->k_block_tokens % 4 ||
        k->v_group_size < 1 || k->head_dim % k->v_group_size || (unsigned) k->meta_dtype > OSCAR_META_BF16)
        return osc_error(OSCAR_ERR_INVALID, "oscar-omni: bad shape (Hkv %d, D %d power of two, K block %d, V group %d, "
                         "meta %d)", p->n_head_kv, k->head_dim, k->k_block_tokens, k->v_group_size,
                         (int) k->meta_dtype);
    return OSCAR_OK;
}

// The dequantized value as the kernel's hfma2 leaves it: rounded to the element dtype.
static float elem_round(enum oscar_quant_meta_dtype t, float v) {
    if (t == OSCAR_META_BF16) return oscar_bf16_round(v);
    if (t == OSCAR_META_F16) return oscar_f16_to_f32(oscar_f32_to_f16(v));
    return v;
}

enum oscar_status oscar_omni_k_scale_token(const struct oscar_omni_params * p, const float * x, float * y,
                                           float * norm) {
    enum oscar_status st = oscar_omni_params_check(p);
    if (st != OSCAR_OK) return st;
    int32_t D = p->kivi.head_dim, n = p->n_head_kv * D;
    if ((st = oscar_quant_check_finite("oscar-omni K token", x, 1, n)) != OSCAR_OK) return st;
    double ss = 0.0;
    for (int32_t h = 0; h < p->n_head_kv; h++) {
        float * r = y + (size_t) h * D;
        for (int32_t c = 0; c < D; c++) r[c] = x[(size_t) h * D + c];
        oscar_fwht_f32(r, D);
        for (int32_t c = 0; c < D; c++) {
            ss += (double) r[c] * (double) r[c];   // the fp32 rotated value, before its bf16 store
            r[c] = oscar_bf16_round(r[c]);
        }
    }
    float nt = (float) sqrt(ss);
    if (!(nt > 0.0f)) nt = 1.0f;
    for (int32_t i = 0; i < n; i++) y[i] = oscar_bf16_round(y[i] / nt);
    *norm = nt;
    return OSCAR_OK;
}

void oscar_omni_k_unscale_token(const struct oscar_omni_params * p, const float * y, float norm, float * out) {
    int32_t D = p->kivi.head_dim;
    for (int32_t i = 0; i < p->n_head_kv * D; i++) out[i] = y[i] * norm;
    for (int32_t h = 0; h < p->n_head_kv; h++) oscar_fwht_f32(out + (size_t) h * D, D);   // H = H^T = H^-1
}

enum oscar_status oscar_omni_quantize_k_block(const struct oscar_omni_params * p, const float * y,
                                              uint8_t * codes, void * meta, struct oscar_quant_stats * stats) {
    enum oscar_status st = oscar_omni_params_check(p);
    if (st != OSCAR_OK) return st;
    int32_t D = p->kivi.head_dim, B = p->kivi.k_block_tokens, Hkv = p->n_head_kv;
    size_t es = oscar_meta_dtype_size(p->kivi.meta_dtype);
    for (int32_t h = 0; h < Hkv && st == OSCAR_OK; h++)
        st = oscar_kivi_quantize_k_block(&p->kivi, y + (size_t) h * D, (int64_t) Hkv * D,
                                         codes + (size_t) h * D * (B / 4), (uint8_t *) meta + (size_t) h * D * 2 * es,
                                         stats);
    return st == OSCAR_OK ? st : osc_error_prefix(st, "oscar-omni K block");
}

void oscar_omni_dequantize_k_block(const struct oscar_omni_params * p, const uint8_t * codes, const void * meta,
                                   float * out) {
    int32_t D = p->kivi.head_dim, B = p->kivi.k_block_tokens, Hkv = p->n_head_kv;
    size_t es = oscar_meta_dtype_size(p->kivi.meta_dtype);
    for (int32_t h = 0; h < Hkv; h++)
        oscar_kivi_dequantize_k_block(&p->kivi, codes + (size_t) h * D * (B / 4),
                                      (const uint8_t *) meta + (size_t) h * D * 2 * es, out + (size_t) h * D,
                                      (int64_t) Hkv * D);
    for (size_t i = 0; i < (size_t) B * Hkv * D; i++) out[i] = elem_round(p->kivi.meta_dtype, out[i]);
}

enum oscar_status oscar_omni_quantize_v_rows(const struct oscar_omni_params * p, const float * x, int64_t n_rows,
                                             uint8_t * codes, void * meta, struct oscar_quant_stats * stats) {
    enum oscar_status st = oscar_omni_params_check(p);
    if (st != OSCAR_OK) return st;
    int32_t D = p->kivi.head_dim;
    if ((st = oscar_quant_check_finite("oscar-omni V", x, n_rows, D)) != OSCAR_OK) return st;
    float * r = malloc(sizeof(float) * (size_t) D);
    if (!r) return osc_error(OSCAR_ERR_NOMEM, "oscar-omni V row");
    size_t es = oscar_meta_dtype_size(p->kivi.meta_dtype), mrow = 2 * (size_t) (D / p->kivi.v_group_size) * es;
    for (int64_t i = 0; i < n_rows && st == OSCAR_OK; i++) {
        for (int32_t c = 0; c < D; c++) r[c] = x[i * D + c];
        oscar_fwht_f32(r, D);
        oscar_bf16_round_array(r, (size_t) D);   // the cache holds bf16(H v)
        st = oscar_kivi_quantize_v_rows(&p->kivi, r, 1, codes + i * (D / 4), (uint8_t *) meta + (size_t) i * mrow,
                                        stats);
    }
    free(r);
    return st;
}

void oscar_omni_dequantize_v_rows(const struct oscar_omni_params * p, const uint8_t * codes, const void * meta,
                                  int64_t n_rows, bool unrotate, float * out) {
    int32_t D = p->kivi.head_dim;
    oscar_kivi_dequantize_v_rows(&p->kivi, codes, meta, n_rows, out);
    for (int64_t i = 0; i < n_rows * D; i++) out[i] = elem_round(p->kivi.meta_dtype, out[i]);
    if (unrotate)
        for (int64_t i = 0; i < n_rows; i++) oscar_fwht_f32(out + i * D, D);
}
