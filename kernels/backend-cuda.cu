// backend-cuda.cu - the CUDA backend behind struct oscar_backend_i: copies host
// arrays to the device, runs kernels/int2-quantize and kernels/decode-attention,
// copies results back. A test/reference path: every call allocates its own
// device buffers (the serving path keeps pools resident and calls the kernels).
extern "C" {
#include "backend/backend.h"
}
#include "kernels/cuda-common.cuh"
#include "kernels/decode-attention.cuh"
#include "kernels/int2-quantize.cuh"
#include "kernels/layer-eval.cuh"
#include "kernels/optr-device.cuh"

#include <stdlib.h>
#include <string.h>

struct oscar_backend_kv {
    struct oscar_cuda_kv_view v;
    int32_t n_seq, ng_k, ng_v, n_sm;
    int64_t q_rows;             // S_q * Hkv
    int64_t max_len[3];         // longest tier run over the sequences
    struct oscar_int2_params pk, pv;
    void * buf[10];             // device allocations
};

template <typename T> static cudaError_t dev_copy(T ** d, const void * h, size_t bytes) {
    cudaError_t e = cudaMalloc((void **) d, bytes ? bytes : 1);
    if (e == cudaSuccess && bytes) e = cudaMemcpy(*d, h, bytes, cudaMemcpyHostToDevice);
    return e;
}

static enum oscar_status check_quant(const struct oscar_int2_params * p) {
    enum oscar_status st = oscar_int2_params_check(p);
    if (st != OSCAR_OK) return st;
    if (p->scheme != OSCAR_INT2_ASYM)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda int2: only the ASYM scheme");
    return OSCAR_OK;
}

static void fill_write(struct oscar_cuda_int2_write * a, const struct oscar_int2_params * p) {
    memset(a, 0, sizeof *a);
    a->head_dim = p->head_dim;
    a->group_size = p->group_size > 0 ? p->group_size : p->head_dim;
    a->meta_dtype = (int32_t) p->meta_dtype;
    a->clip_idx = oscar_clip_index(p->clip_ratio, p->head_dim);
    a->clip_bisect = p->clip_algo == OSCAR_CLIP_BISECT || (p->clip_algo == OSCAR_CLIP_FLUSH && p->head_dim >= 64);
}

static enum oscar_status cuda_rotate_quantize(const struct oscar_int2_params * p, const float * R, const uint16_t * x,
                                              int64_t n_rows, uint8_t * codes, void * meta) {
    enum oscar_status st = check_quant(p);
    if (st != OSCAR_OK) return st;
    size_t D = (size_t) p->head_dim, cb = oscar_int2_code_bytes(p), mb = oscar_int2_meta_bytes(p);
    uint16_t * dx = NULL;
    float * dR = NULL;
    uint8_t * dc = NULL;
    void * dm = NULL;
    struct oscar_cuda_int2_write a;
    fill_write(&a, p);
    OSCAR_CUDA_TRY(dev_copy(&dx, x, (size_t) n_rows * D * 2));
    if (R) OSCAR_CUDA_TRY(dev_copy(&dR, R, D * D * sizeof(float)));
    OSCAR_CUDA_TRY(cudaMalloc((void **) &dc, (size_t) n_rows * cb + 1));
    OSCAR_CUDA_TRY(cudaMalloc(&dm, (size_t) n_rows * mb + 1));
    a.x = dx, a.rot = dR, a.codes = dc, a.meta = dm, a.n_rows = n_rows;
    st = oscar_cuda_int2_write(&a, NULL);
    if (st != OSCAR_OK) goto out;
    OSCAR_CUDA_TRY(cudaMemcpy(codes, dc, (size_t) n_rows * cb, cudaMemcpyDeviceToHost));
    OSCAR_CUDA_TRY(cudaMemcpy(meta, dm, (size_t) n_rows * mb, cudaMemcpyDeviceToHost));
out:
    cudaFree(dx), cudaFree(dR), cudaFree(dc), cudaFree(dm);
    return st;
}

static void cuda_kv_free(struct oscar_backend_kv * kv) {
    if (!kv) return;
    for (int i = 0; i < 10; i++) cudaFree(kv->buf[i]);
    free(kv);
}

// Block tables [n_seq, stride] from the per-sequence page lists (unused entries 0).
static int32_t * gather_pt(const struct oscar_kv_cache * c, int which, int32_t * stride) {
    int32_t n = c->p.n_seq_max, s = 1;
    for (int32_t i = 0; i < n; i++) {
        const struct oscar_kv_seq * q = &c->seqs[i];
        int32_t k = which == 0 ? q->n_sink_pages : which == 1 ? q->n_int2_pages
                                                              : (int32_t) (c->ring_slots / c->p.page_size);
        if (k > s) s = k;
    }
    int32_t * t = (int32_t *) calloc((size_t) n * s, sizeof(int32_t));
    for (int32_t i = 0; t && i < n; i++) {
        const struct oscar_kv_seq * q = &c->seqs[i];
        if (which == 0) memcpy(t + (size_t) i * s, q->sink_pages, (size_t) q->n_sink_pages * sizeof(int32_t));
        if (which == 1) memcpy(t + (size_t) i * s, q->int2_pages, (size_t) q->n_int2_pages * sizeof(int32_t));
        if (which == 2) {
            for (int64_t k = 0; k < c->ring_slots / c->p.page_size; k++)
                t[(size_t) i * s + k] = q->recent_pages[k] < 0 ? 0 : q->recent_pages[k];
        }
    }
    *stride = s;
    return t;
}

static enum oscar_status cuda_kv_upload(const struct oscar_kv_cache * c, struct oscar_backend_kv ** out) {
    enum oscar_status st = check_quant(&c->p.k_quant);
    if (st == OSCAR_OK) st = check_quant(&c->p.v_quant);
    if (st != OSCAR_OK) return st;
    // The decode kernel dequantizes in fp32; bf16_dequant (the Triton GQA kernel's bf16 scale, zero and
    // arithmetic, lib/quant/int2.c) would give other scores than the CPU reference: refuse, not approximate.
    if (c->p.k_quant.bf16_dequant || c->p.v_quant.bf16_dequant)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda decode: bf16_dequant (bf16 scale/zero arithmetic) is not "
                         "emulated by the CUDA decode kernel; use the CPU backend");
    if (c->p.k_quant.meta_dtype != c->p.v_quant.meta_dtype)   // the kernel's view has one meta dtype for both
        return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda decode: K and V metadata dtypes differ");
    struct oscar_backend_kv * kv = (struct oscar_backend_kv *) calloc(1, sizeof *kv);
    int32_t * pt[3] = { NULL, NULL, NULL };
    int32_t * info = NULL;
    if (!kv) return osc_error(OSCAR_ERR_NOMEM, "cuda kv upload");
    {
        int64_t Hkv = c->p.n_head_kv, D = c->p.head_dim, ps = c->p.page_size;
        int64_t Shp = c->p.n_hp_pages * ps, Sq = c->p.n_int2_pages * ps;
        kv->n_seq = c->p.n_seq_max, kv->q_rows = Sq * Hkv, kv->pk = c->p.k_quant, kv->pv = c->p.v_quant;
        kv->ng_k = c->n_groups_k, kv->ng_v = c->n_groups_v;
        if (kv->ng_k != 1 || kv->ng_v != 1) {
            st = osc_error(OSCAR_ERR_UNSUPPORTED, "cuda decode: one group per row only (G = D)");
            goto out;
        }
        int dev = 0;
        OSCAR_CUDA_TRY(cudaGetDevice(&dev));
        OSCAR_CUDA_TRY(cudaDeviceGetAttribute(&kv->n_sm, cudaDevAttrMultiProcessorCount, dev));
        struct oscar_cuda_kv_view * v = &kv->v;
        v->n_head_kv = (int32_t) Hkv, v->head_dim = (int32_t) D, v->page_size = (int32_t) ps;
        v->ring_slots = (int32_t) c->ring_slots, v->meta_dtype = (int32_t) c->p.k_quant.meta_dtype;
        size_t mk = oscar_int2_meta_bytes(&c->p.k_quant), mv = oscar_int2_meta_bytes(&c->p.v_quant);
        OSCAR_CUDA_TRY(dev_copy((uint16_t **) &kv->buf[0], c->hp_k, (size_t) (Shp * Hkv * D) * 2));
        OSCAR_CUDA_TRY(dev_copy((uint16_t **) &kv->buf[1], c->hp_v, (size_t) (Shp * Hkv * D) * 2));
        OSCAR_CUDA_TRY(dev_copy((uint8_t **) &kv->buf[2], c->q_k, (size_t) (Sq * Hkv * D / 4)));
        OSCAR_CUDA_TRY(dev_copy((uint8_t **) &kv->buf[3], c->q_v, (size_t) (Sq * Hkv * D / 4)));
        OSCAR_CUDA_TRY(dev_copy((uint8_t **) &kv->buf[4], c->q_k_meta, (size_t) (Sq * Hkv) * mk));
        OSCAR_CUDA_TRY(dev_copy((uint8_t **) &kv->buf[5], c->q_v_meta, (size_t) (Sq * Hkv) * mv));
        info = (int32_t *) calloc((size_t) kv->n_seq * 4, sizeof(int32_t));
        int32_t strides[3];
        for (int t = 0; t < 3; t++) pt[t] = gather_pt(c, t, &strides[t]);
        if (!info || !pt[0] || !pt[1] || !pt[2]) {
            st = osc_error(OSCAR_ERR_NOMEM, "cuda kv upload: block tables");
            goto out;
        }
        for (int32_t s = 0; s < kv->n_seq; s++) {
            const struct oscar_kv_seq * q = &c->seqs[s];
            int64_t n3[3] = { q->n_sink, q->n_int2, q->n_recent };
            for (int t = 0; t < 3; t++) {
                info[4 * s + t] = (int32_t) n3[t];
                if (n3[t] > kv->max_len[t]) kv->max_len[t] = n3[t];
            }
            info[4 * s + 3] = (int32_t) q->len;
        }
        OSCAR_CUDA_TRY(dev_copy((int32_t **) &kv->buf[6], info, (size_t) kv->n_seq * 4 * sizeof(int32_t)));
        for (int t = 0; t < 3; t++)
            OSCAR_CUDA_TRY(dev_copy((int32_t **) &kv->buf[7 + t], pt[t], (size_t) kv->n_seq * strides[t] * sizeof(int32_t)));
        v->hp_k = (const uint16_t *) kv->buf[0], v->hp_v = (const uint16_t *) kv->buf[1];
        v->q_k = (const uint8_t *) kv->buf[2], v->q_v = (const uint8_t *) kv->buf[3];
        v->q_k_meta = kv->buf[4], v->q_v_meta = kv->buf[5];
        v->seq_info = (const int32_t *) kv->buf[6];
        v->sink_pt = (const int32_t *) kv->buf[7], v->int2_pt = (const int32_t *) kv->buf[8];
        v->recent_pt = (const int32_t *) kv->buf[9];
        v->sink_pt_stride = strides[0], v->int2_pt_stride = strides[1], v->recent_pt_stride = strides[2];
    }
out:
    free(info), free(pt[0]), free(pt[1]), free(pt[2]);
    if (st != OSCAR_OK) {
        cuda_kv_free(kv);
        kv = NULL;
    }
    *out = kv;
    return st;
}

static enum oscar_status cuda_kv_write_int2(struct oscar_backend_kv * kv, int which, const struct oscar_int2_params * p,
                                            const uint16_t * x, const int64_t * pool_row, int64_t n_rows) {
    enum oscar_status st = check_quant(p);
    if (st != OSCAR_OK) return st;
    uint16_t * dx = NULL;
    int64_t * dd = NULL;
    struct oscar_cuda_int2_write a;
    fill_write(&a, p);
    for (int64_t i = 0; i < n_rows; i++) {
        if (pool_row[i] < 0 || pool_row[i] >= kv->q_rows)
            return osc_error(OSCAR_ERR_INVALID, "cuda kv write: pool row %lld outside [0, %lld)",
                             (long long) pool_row[i], (long long) kv->q_rows);
    }
    OSCAR_CUDA_TRY(dev_copy(&dx, x, (size_t) n_rows * p->head_dim * 2));
    OSCAR_CUDA_TRY(dev_copy(&dd, pool_row, (size_t) n_rows * sizeof(int64_t)));
    a.x = dx, a.dst = dd, a.n_rows = n_rows;
    a.codes = (uint8_t *) kv->buf[which ? 3 : 2];
    a.meta = kv->buf[which ? 5 : 4];
    st = oscar_cuda_int2_write(&a, NULL);
    if (st == OSCAR_OK) OSCAR_CUDA_TRY(cudaDeviceSynchronize());
out:
    cudaFree(dx), cudaFree(dd);
    return st;
}

static enum oscar_status cuda_kv_read_int2(const struct oscar_backend_kv * kv, int which, uint8_t * codes, void * meta) {
    enum oscar_status st = OSCAR_OK;
    const struct oscar_int2_params * p = which ? &kv->pv : &kv->pk;
    OSCAR_CUDA_TRY(cudaMemcpy(codes, kv->buf[which ? 3 : 2], (size_t) kv->q_rows * oscar_int2_code_bytes(p),
                              cudaMemcpyDeviceToHost));
    OSCAR_CUDA_TRY(cudaMemcpy(meta, kv->buf[which ? 5 : 4], (size_t) kv->q_rows * oscar_int2_meta_bytes(p),
                              cudaMemcpyDeviceToHost));
out:
    return st;
}

static enum oscar_status cuda_decode(struct oscar_backend_kv * kv, int32_t n_seq, const float * q, int32_t n_head,
                                     const float * r_v, float * out_h) {
    enum oscar_status st = OSCAR_OK;
    int32_t D = kv->v.head_dim;
    float * dq = NULL, * drv = NULL, * dop = NULL, * dl = NULL, * dout = NULL, * rvt = NULL;
    struct oscar_cuda_decode_args a;
    memset(&a, 0, sizeof a);
    if (n_seq < 1 || n_seq > kv->n_seq) return osc_error(OSCAR_ERR_INVALID, "cuda decode: %d sequences", n_seq);
    oscar_cuda_decode_splits(n_seq, kv->v.n_head_kv, kv->n_sm, 0, kv->max_len, a.splits);
    {
        int64_t S = a.splits[0] + a.splits[1] + a.splits[2], rows = (int64_t) n_seq * n_head;
        OSCAR_CUDA_TRY(dev_copy(&dq, q, (size_t) (rows * D) * sizeof(float)));
        if (r_v) {
            rvt = (float *) malloc((size_t) D * D * sizeof(float));
            if (!rvt) {
                st = osc_error(OSCAR_ERR_NOMEM, "cuda decode");
                goto out;
            }
            for (int32_t d = 0; d < D; d++)
                for (int32_t e = 0; e < D; e++) rvt[e * D + d] = r_v[d * D + e];
            OSCAR_CUDA_TRY(dev_copy(&drv, rvt, (size_t) D * D * sizeof(float)));
        }
        OSCAR_CUDA_TRY(cudaMalloc((void **) &dop, (size_t) (rows * S * D) * sizeof(float)));
        OSCAR_CUDA_TRY(cudaMalloc((void **) &dl, (size_t) (rows * S) * sizeof(float)));
        OSCAR_CUDA_TRY(cudaMalloc((void **) &dout, (size_t) (rows * D) * sizeof(float)));
        a.kv = kv->v, a.n_seq = n_seq, a.n_head = n_head, a.q = dq, a.rv_t = drv;
        a.o_part = dop, a.lse_part = dl, a.out = dout;
        st = oscar_cuda_decode_attention(&a, NULL);
        if (st != OSCAR_OK) goto out;
        OSCAR_CUDA_TRY(cudaDeviceSynchronize());
        OSCAR_CUDA_TRY(cudaMemcpy(out_h, dout, (size_t) (rows * D) * sizeof(float), cudaMemcpyDeviceToHost));
    }
out:
    free(rvt);
    cudaFree(dq), cudaFree(drv), cudaFree(dop), cudaFree(dl), cudaFree(dout);
    return st;
}

// What the kernels cover: the write kernel's D and G, the decode kernel's D and GQA
// group, and one (scale, zero) group per row in the decode kernel.
static enum oscar_status cuda_kv_supports(int32_t head_dim, int32_t n_head, int32_t n_head_kv, int32_t group_size) {
    enum oscar_status st = oscar_cuda_int2_write_supports(head_dim, group_size);
    if (st == OSCAR_OK) st = oscar_cuda_decode_supports(head_dim, n_head, n_head_kv);
    if (st == OSCAR_OK && group_size > 0 && group_size != head_dim)
        st = osc_error(OSCAR_ERR_UNSUPPORTED, "cuda decode: group size %d (one group per row only: G = D = %d)",
                       group_size, head_dim);
    return st;
}

static enum oscar_status cuda_host_pin(void * p, size_t n) {
    cudaError_t e = cudaHostRegister(p, n, cudaHostRegisterDefault);
    if (e == cudaSuccess) return OSCAR_OK;
    cudaGetLastError();   // not sticky: later calls must not see it
    return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda: cannot page-lock %zu bytes: %s", n, cudaGetErrorString(e));
}

static void cuda_host_unpin(void * p) {
    if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

static const struct oscar_backend_i cuda_backend = {
    "cuda", cuda_rotate_quantize, cuda_kv_upload, cuda_kv_write_int2, cuda_kv_read_int2, cuda_decode, cuda_kv_free,
    osc_cuda_eval_open, osc_cuda_eval_layer, osc_cuda_eval_out_err, osc_cuda_eval_candidates, osc_cuda_eval_free,
    cuda_kv_supports, cuda_host_pin, cuda_host_unpin, osc_cuda_optr_refine_layer,
};

extern "C" enum oscar_status osc_backend_cuda(const struct oscar_backend_i ** out) {
    *out = NULL;
    enum oscar_status st = osc_cuda_require_device("");
    if (st == OSCAR_OK) *out = &cuda_backend;
    return st;
}
