// fwd-kvsim.cu - the CUDA forward's simulated quantized KV cache (contract in
// fwd-kvsim.cuh and forward-backend.h).
#include "kernels/fwd-kvsim.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda-common.cuh"
#include "kernels/eval-transform.cuh"

extern "C" {
#include "quant/quant.h"
}

struct osc_kvsim {
    struct oscar_fwd_kvsim d;         // params and callbacks (the host arrays are not kept)
    int32_t L, Hq, Hkv, D, max_tokens;
    int32_t n_rot[2];                 // K, V
    float * rot[2];                   // device [L, n_rot, D, D] R, then [L, n_rot, D, D] Rᵀ (MATRIX)
    int32_t * clip_idx;               // device [2][L, Hkv] (-1: no clip)
    float * k_mean;                   // device [L, Hkv, D] or NULL
    float * k_hp, * v_hp, * k_q, * v_q; // device [max_tokens, Hkv, D]
    osc_bf16 * rows_bf16;             // device [4][max_tokens, Hkv, D]: the same, for the tensor cores (lazy)
    uint8_t * mode;                   // device [max_tokens]: 0 HP only, 1 INT2 by sort, 2 INT2 by bisection;
                                      // | 4: written by the prefill path
    int32_t * lo, * hi;               // device [max_tokens]
    uint8_t * h_mode;                 // host staging
    int32_t * h_lo, * h_hi;
    int32_t * kblocks, * h_kblocks;   // KIVI, OScaR: device / host [max_tokens] first rows of the K blocks
    int32_t n_kblocks;
    float * omni_y, * omni_norm;      // OScaR: device [max_tokens, Hkv, D] scaled K, [max_tokens] norms
};

void osc_kvsim_free(struct osc_kvsim * k) {
    if (!k) return;
    cudaFree(k->rot[0]), cudaFree(k->rot[1]), cudaFree(k->clip_idx), cudaFree(k->k_mean);
    cudaFree(k->k_hp), cudaFree(k->rows_bf16), cudaFree(k->mode), cudaFree(k->lo), cudaFree(k->kblocks);
    cudaFree(k->omni_y);
    free(k->h_mode), free(k->h_lo), free(k->h_kblocks);
    cudaGetLastError();
    free(k);
}

static bool k_blocks(const struct oscar_fwd_kvsim * d) {
    return d->quant == OSCAR_FWD_KVQ_KIVI || d->quant == OSCAR_FWD_KVQ_OMNI;
}

// The clip index of ratio r: oscar_clip_index's, or Q2_0's within its group of n (q2-0.c: fp32
// product, truncated; clips only strictly inside (0, 1)).
static int32_t clip_index(const struct oscar_fwd_kvsim * d, double r, int32_t D) {
    if (d->quant == OSCAR_FWD_KVQ_Q2_0) {
        const float cr = (float) r;
        const int32_t n = D >= OSCAR_Q2_0_GROUP ? OSCAR_Q2_0_GROUP : OSCAR_Q2_0_BLOCK;
        if (!(cr > 0.0f && cr < 1.0f)) return -1;
        const int32_t idx = (int32_t) (cr * (float) n);
        return idx < n ? idx : n - 1;
    }
    return d->int2.scheme == OSCAR_INT2_SYM ? -1 : oscar_clip_index(r, D);
}

// What the device transform has (else UNSUPPORTED, naming it).
static enum oscar_status check_quant(const struct oscar_fwd_kvsim * d, int32_t D) {
    const int32_t G = d->int2.group_size > 0 ? d->int2.group_size : D;
    bool ok = false;
    switch (d->quant) {
    case OSCAR_FWD_KVQ_INT2:
        ok = !d->int2.bf16_dequant && G > 0 && D % G == 0 &&
             (d->int2.scheme == OSCAR_INT2_ASYM || d->int2.scheme == OSCAR_INT2_SYM ||
              (d->int2.scheme == OSCAR_INT2_LLOYD_MAX && G == D));
        break;
    case OSCAR_FWD_KVQ_INT4_BDH:
        ok = d->int4_order > 0 && !(d->int4_order & (d->int4_order - 1)) && D % d->int4_order == 0;
        break;
    case OSCAR_FWD_KVQ_KIVI:
    case OSCAR_FWD_KVQ_OMNI:
        ok = d->kivi.k_block_tokens > 0 && d->kivi.v_group_size > 0 && D % d->kivi.v_group_size == 0;
        break;
    case OSCAR_FWD_KVQ_Q2_0: ok = D % OSCAR_Q2_0_BLOCK == 0; break;
    }
    if (d->quant == OSCAR_FWD_KVQ_OMNI && (d->k.rot != OSCAR_EVAL_ROT_HADAMARD || d->v.rot != OSCAR_EVAL_ROT_HADAMARD))
        ok = false;
    if (!ok)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "forward-cuda: simulated cache: quantizer %d with these parameters (INT2 "
                         "ASYM / SYM / Lloyd-Max with groups dividing head_dim and no bf16 dequantization, SAW-INT4 of a "
                         "power-of-two order dividing head_dim, KIVI or OScaR with V groups dividing head_dim, Q2_0)",
                         (int) d->quant);
    return OSCAR_OK;
}

// oscar_clip_tau's rule for a clip algorithm at head_dim D.
static bool bisects(enum oscar_clip_algo a, int32_t D) {
    return a == OSCAR_CLIP_BISECT || (a == OSCAR_CLIP_FLUSH && D >= 64);
}

static enum oscar_status check_side(const struct oscar_fwd_kvsim_side * s, const char * which, int32_t Hkv) {
    if (s->rot == OSCAR_EVAL_ROT_MATRIX && (!s->rot_mat || (s->n_rot != 1 && s->n_rot != Hkv)))
        return osc_error(OSCAR_ERR_INVALID, "forward-cuda: %s rotation: %d matrices per layer (1 or %d)", which,
                         s->n_rot, Hkv);
    if (!s->clip || (s->n_clip != 1 && s->n_clip != Hkv))
        return osc_error(OSCAR_ERR_INVALID, "forward-cuda: %s clips: %d per layer (1 or %d)", which, s->n_clip, Hkv);
    return OSCAR_OK;
}

// R then Rᵀ of every layer for one side.
static enum oscar_status upload_rot(struct osc_kvsim * k, int side, const struct oscar_fwd_kvsim_side * s) {
    if (s->rot != OSCAR_EVAL_ROT_MATRIX) return OSCAR_OK;
    const size_t DD = (size_t) k->D * k->D, n = (size_t) k->L * s->n_rot;
    float * h = (float *) malloc(2 * n * DD * sizeof(float));
    if (!h) return osc_error(OSCAR_ERR_NOMEM, "forward-cuda: rotations of the simulated cache");
    for (size_t m = 0; m < n; m++)
        for (int32_t i = 0; i < k->D; i++)
            for (int32_t j = 0; j < k->D; j++) {
                const float x = s->rot_mat[m * DD + (size_t) i * k->D + j];
                h[m * DD + (size_t) i * k->D + j] = x;
                h[(n + m) * DD + (size_t) j * k->D + i] = x;
            }
    k->n_rot[side] = s->n_rot;
    cudaError_t e = cudaMalloc((void **) &k->rot[side], 2 * n * DD * sizeof(float));
    if (e == cudaSuccess) e = cudaMemcpy(k->rot[side], h, 2 * n * DD * sizeof(float), cudaMemcpyHostToDevice);
    free(h);
    OSCAR_CUDA_CHECK(e);
    return OSCAR_OK;
}

enum oscar_status osc_kvsim_open(const struct oscar_fwd_kvsim * d, const struct oscar_model_config * c,
                                 int32_t max_tokens, cudaStream_t s, struct osc_kvsim ** out) {
    (void) s;
    *out = NULL;
    const int32_t D = c->head_dim, Hkv = c->n_head_kv, L = c->n_layer;
    if (D != 32 && D != 64 && D != 128 && D != 256)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "forward-cuda: simulated cache at head_dim %d (32, 64, 128, 256)", D);
    enum oscar_status st = check_quant(d, D);
    if (st != OSCAR_OK) return st;
    const bool blocks = k_blocks(d), omni = d->quant == OSCAR_FWD_KVQ_OMNI;
    if (!d->int2_range || !d->from_prefill)
        return osc_error(OSCAR_ERR_INVALID, "forward-cuda: simulated cache without a tier rule");
    st = check_side(&d->k, "K", Hkv);
    if (st == OSCAR_OK) st = check_side(&d->v, "V", Hkv);
    if (st != OSCAR_OK) return st;
    struct osc_kvsim * k = (struct osc_kvsim *) calloc(1, sizeof *k);
    if (!k) return osc_error(OSCAR_ERR_NOMEM, "forward-cuda: simulated cache");
    k->d = *d, k->L = L, k->Hq = c->n_head, k->Hkv = Hkv, k->D = D, k->max_tokens = max_tokens;
    k->d.k.rot_mat = k->d.v.rot_mat = NULL, k->d.k.clip = k->d.v.clip = NULL, k->d.k_mean = NULL;
    int32_t * hc = (int32_t *) malloc(2 * (size_t) L * Hkv * sizeof(int32_t));
    k->h_mode = (uint8_t *) malloc((size_t) max_tokens);
    k->h_lo = (int32_t *) malloc(2 * (size_t) max_tokens * sizeof(int32_t));
    if (blocks) k->h_kblocks = (int32_t *) malloc((size_t) max_tokens * sizeof(int32_t));
    if (!hc || !k->h_mode || !k->h_lo || (blocks && !k->h_kblocks))
        st = osc_error(OSCAR_ERR_NOMEM, "forward-cuda: simulated cache");
    if (st == OSCAR_OK) st = upload_rot(k, 0, &d->k);
    if (st == OSCAR_OK) st = upload_rot(k, 1, &d->v);
    if (st == OSCAR_OK) {
        k->h_hi = k->h_lo + max_tokens;
        for (int side = 0; side < 2; side++) {
            const struct oscar_fwd_kvsim_side * sd = side ? &d->v : &d->k;
            for (int32_t l = 0; l < L; l++)
                for (int32_t h = 0; h < Hkv; h++) {
                    const double r = sd->clip[(size_t) l * sd->n_clip + (sd->n_clip > 1 ? h : 0)];
                    hc[((size_t) side * L + l) * Hkv + h] = clip_index(d, r, D);
                }
        }
        const size_t rows = (size_t) max_tokens * Hkv * D;
        cudaError_t e = cudaMalloc((void **) &k->clip_idx, 2 * (size_t) L * Hkv * sizeof(int32_t));
        if (e == cudaSuccess)
            e = cudaMemcpy(k->clip_idx, hc, 2 * (size_t) L * Hkv * sizeof(int32_t), cudaMemcpyHostToDevice);
        const size_t n_mean = (size_t) L * Hkv * D;
        if (e == cudaSuccess && d->k_mean) e = cudaMalloc((void **) &k->k_mean, n_mean * sizeof(float));
        if (e == cudaSuccess && d->k_mean) e = cudaMemcpy(k->k_mean, d->k_mean, n_mean * sizeof(float), cudaMemcpyHostToDevice);
        if (e == cudaSuccess) e = cudaMalloc((void **) &k->k_hp, 4 * rows * sizeof(float));
        if (e == cudaSuccess) e = cudaMalloc((void **) &k->mode, (size_t) max_tokens);
        if (e == cudaSuccess) e = cudaMalloc((void **) &k->lo, 2 * (size_t) max_tokens * sizeof(int32_t));
        if (e == cudaSuccess && blocks) e = cudaMalloc((void **) &k->kblocks, (size_t) max_tokens * sizeof(int32_t));
        if (e == cudaSuccess && omni) e = cudaMalloc((void **) &k->omni_y, (rows + (size_t) max_tokens) * sizeof(float));
        if (e != cudaSuccess) st = osc_cuda_error(e, "simulated cache buffers", __func__, __FILE__, __LINE__);
        else k->v_hp = k->k_hp + rows, k->k_q = k->k_hp + 2 * rows, k->v_q = k->k_hp + 3 * rows, k->hi = k->lo + max_tokens;
        if (omni && e == cudaSuccess) k->omni_norm = k->omni_y + rows;
    }
    free(hc);
    if (st != OSCAR_OK) {
        osc_kvsim_free(k);
        return st;
    }
    *out = k;
    return OSCAR_OK;
}

enum oscar_status osc_kvsim_plan(struct osc_kvsim * k, const struct oscar_batch * b, cudaStream_t s) {
    const int32_t T = b->seq_start[b->n_seq];
    if (T > k->max_tokens) return osc_error(OSCAR_ERR_INVALID, "forward-cuda: %d tokens > %d", T, k->max_tokens);
    const uint8_t pre = bisects(k->d.int2.clip_algo, k->D) ? 2 : 1, dem = bisects(k->d.demote_clip_algo, k->D) ? 2 : 1;
    int32_t n_kb = 0;
    for (int32_t q = 0; q < b->n_seq; q++) {
        const int32_t s0 = b->seq_start[q], len = b->seq_start[q + 1] - s0;
        if (b->pos)
            for (int32_t t = 0; t < len; t++)
                if (b->pos[s0 + t] != t)
                    return osc_error(OSCAR_ERR_INVALID, "forward-cuda: the simulated cache needs sequences from "
                                     "position 0 (row %d is at %d)", s0 + t, b->pos[s0 + t]);
        int64_t lo = 0, hi = 0;
        for (int32_t t = 0; t < len; t++) {
            k->d.int2_range(k->d.user, t, len, &lo, &hi);
            if (hi > t + 1) hi = t + 1;
            if (lo > hi) lo = hi;
            k->h_lo[s0 + t] = s0 + (int32_t) lo, k->h_hi[s0 + t] = s0 + (int32_t) hi;
        }
        // the INT2 rows: the last query's set, the largest (lo, hi of t = len - 1 above)
        for (int32_t p = 0; p < len; p++)
            k->h_mode[s0 + p] = p < lo || p >= hi ? 0 : k->d.from_prefill(k->d.user, p, len) ? 4 | pre : dem;
        // KIVI / OScaR K: the full blocks of that set, from lo (lib/verify kv-transform.c kivi_k_seq)
        for (int64_t b0 = lo, B = k->d.kivi.k_block_tokens; k_blocks(&k->d) && b0 + B <= hi; b0 += B)
            k->h_kblocks[n_kb++] = s0 + (int32_t) b0;
    }
    k->n_kblocks = n_kb;
    if (n_kb) OSCAR_CUDA_CHECK(cudaMemcpyAsync(k->kblocks, k->h_kblocks, (size_t) n_kb * sizeof(int32_t),
                                               cudaMemcpyHostToDevice, s));
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(k->mode, k->h_mode, (size_t) T, cudaMemcpyHostToDevice, s));
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(k->lo, k->h_lo, (size_t) T * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(k->hi, k->h_hi, (size_t) T * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    // the host staging is reused by the next plan: wait for these copies
    OSCAR_CUDA_CHECK(cudaStreamSynchronize(s));
    return OSCAR_OK;
}

static enum oscar_status transform(struct osc_kvsim * k, int side, int32_t l, const float * x, int32_t T,
                                   float * hp, float * q, cudaStream_t s) {
    const struct oscar_fwd_kvsim_side * sd = side ? &k->d.v : &k->d.k;
    const size_t DD = (size_t) k->D * k->D, n = (size_t) k->L * (k->n_rot[side] > 0 ? k->n_rot[side] : 1);
    struct osc_eval_transform a;
    memset(&a, 0, sizeof a);
    a.head_dim = k->D, a.n_head_kv = k->Hkv, a.n_rot = k->n_rot[side] > 0 ? k->n_rot[side] : 1, a.rot = sd->rot;
    a.had_scale = (float) (1.0 / sqrt((double) k->D));
    if (sd->rot == OSCAR_EVAL_ROT_MATRIX) {
        a.R = k->rot[side] + (size_t) l * a.n_rot * DD;
        a.Rt = k->rot[side] + (n + (size_t) l * a.n_rot) * DD;
    }
    a.x = x, a.int2_row = k->mode, a.clip_idx = k->clip_idx + ((size_t) side * k->L + l) * k->Hkv, a.n_cand = 1;
    const struct oscar_fwd_kvsim * d = &k->d;
    a.sym = d->int2.scheme == OSCAR_INT2_SYM, a.bisect = 0;   // per row: mode 2 bisects
    a.hp_bf16 = d->hp_bf16, a.meta_dtype = (int32_t) d->int2.meta_dtype;
    a.group_size = d->int2.group_size > 0 ? d->int2.group_size : k->D;
    a.engine_hadamard = sd->engine_hadamard;
    switch (d->quant) {
    case OSCAR_FWD_KVQ_INT2:
        a.lloyd_max = d->int2.scheme == OSCAR_INT2_LLOYD_MAX;
        oscar_lloyd_max_constants(&a.lm_t, &a.lm_k, &a.lm_z0);
        break;
    case OSCAR_FWD_KVQ_INT4_BDH: a.int4_order = d->int4_order; break;
    case OSCAR_FWD_KVQ_KIVI:
    case OSCAR_FWD_KVQ_OMNI:   // V per token in groups; K's INT2 values come per block
        a.kivi_group = side ? d->kivi.v_group_size : 0, a.hp_only = side == 0;
        a.meta_dtype = (int32_t) d->kivi.meta_dtype;
        a.kivi_round_values = d->quant == OSCAR_FWD_KVQ_OMNI;
        break;
    case OSCAR_FWD_KVQ_Q2_0:   // the fork's HP buffer is F16; Q2_0 quantizes the fp32 row
        a.q2_0 = 1, a.hp_f16 = 1;
        oscar_q2_0_constants(a.q2_levels, &a.q2_t);
        break;
    }
    a.mu = side == 0 && k->k_mean ? k->k_mean + (size_t) l * k->Hkv * k->D : NULL;
    a.out = q, a.out_hp = hp, a.out_stride = (int64_t) T * k->Hkv * k->D, a.n_rows = (int64_t) T * k->Hkv;
    return osc_cuda_eval_transform(&a, s);
}

// OScaR K (lib/verify kv-omni.c): every row's HP value per token, the K blocks quantized in the
// scaled basis and multiplied back by each token's norm; the other rows keep their HP value.
static enum oscar_status omni_k(struct osc_kvsim * k, const float * kx, int32_t T, cudaStream_t s) {
    const size_t n = (size_t) T * k->Hkv * k->D;
    const int32_t B = k->d.kivi.k_block_tokens;
    enum oscar_status st = osc_cuda_omni_k_tokens(kx, k->omni_y, k->omni_norm, k->k_hp, T, k->Hkv, k->D, s);
    if (st != OSCAR_OK) return st;
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(k->k_q, k->k_hp, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
    st = osc_cuda_kivi_k_blocks(k->omni_y, k->omni_y, k->kblocks, k->n_kblocks, B, k->Hkv, k->D,
                                (int32_t) k->d.kivi.meta_dtype, true, s);
    if (st == OSCAR_OK)
        st = osc_cuda_omni_k_unscale(k->omni_y, k->omni_norm, k->kblocks, k->n_kblocks, B, k->Hkv, k->D, k->k_q, s);
    return st;
}

enum oscar_status osc_kvsim_attend(struct osc_kvsim * k, int32_t l, const float * q, const osc_bf16 * qb,
                                   const float * kx, const float * vx, int32_t T, const struct osc_att_block * blocks,
                                   int32_t n_blocks, struct osc_att_rule r, void * out, bool out_f32, cudaStream_t s) {
    enum oscar_status st = k->d.quant == OSCAR_FWD_KVQ_OMNI ? omni_k(k, kx, T, s)
                                                            : transform(k, 0, l, kx, T, k->k_hp, k->k_q, s);
    if (st == OSCAR_OK) st = transform(k, 1, l, vx, T, k->v_hp, k->v_q, s);
    if (st == OSCAR_OK && k->n_kblocks && k->d.quant == OSCAR_FWD_KVQ_KIVI)
        st = osc_cuda_kivi_k_blocks(k->k_hp, k->k_q, k->kblocks, k->n_kblocks, k->d.kivi.k_block_tokens, k->Hkv, k->D,
                                    (int32_t) k->d.kivi.meta_dtype, false, s);
    if (st != OSCAR_OK) return st;
    if (qb && !out_f32 && osc_fwd_attention_tc_ok(k->D)) {   // the bf16 pass: tensor cores, as its exact attention
        const size_t rows = (size_t) k->max_tokens * k->Hkv * k->D, n = (size_t) T * k->Hkv * k->D;
        if (!k->rows_bf16) OSCAR_CUDA_CHECK(cudaMalloc((void **) &k->rows_bf16, 4 * rows * sizeof(osc_bf16)));
        osc_bf16 * kh = k->rows_bf16, * vh = kh + rows, * kq = kh + 2 * rows, * vq = kh + 3 * rows;
        OSCAR_CUDA_CHECK(osc_fwd_to_bf16(kh, k->k_hp, (int64_t) n, s));
        OSCAR_CUDA_CHECK(osc_fwd_to_bf16(vh, k->v_hp, (int64_t) n, s));
        OSCAR_CUDA_CHECK(osc_fwd_to_bf16(kq, k->k_q, (int64_t) n, s));
        OSCAR_CUDA_CHECK(osc_fwd_to_bf16(vq, k->v_q, (int64_t) n, s));
        const struct osc_att_tiers_bf16 tb = {kq, vq, k->lo, k->hi};
        OSCAR_CUDA_CHECK(osc_fwd_attention_tc_tiered((osc_bf16 *) out, qb, kh, vh, &tb, blocks, n_blocks, k->Hq,
                                                     k->Hkv, k->D, r, s));
        return OSCAR_OK;
    }
    const struct osc_att_tiers t = {k->k_q, k->v_q, k->lo, k->hi};
    if (out_f32)
        OSCAR_CUDA_CHECK(osc_fwd_attention_tiered((float *) out, q, k->k_hp, k->v_hp, &t, blocks, n_blocks, k->Hq,
                                                  k->Hkv, k->D, r, s));
    else
        OSCAR_CUDA_CHECK(osc_fwd_attention_tiered((osc_bf16 *) out, q, k->k_hp, k->v_hp, &t, blocks, n_blocks, k->Hq,
                                                  k->Hkv, k->D, r, s));
    return OSCAR_OK;
}
