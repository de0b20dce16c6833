// optr-device.cu - OptR for one layer on the GPU (contract in optr-device.cuh): the rows of
// both sets cut into (sequence, KV head) items on the device, the losses and gradients as
// cuBLAS GEMMs plus kernels/optr-loss.cu, the Adam loop of each phase with the held-out early
// stopping of lib/rotation/optr.c (same steps, same keep-or-revert rule).
//
// Layout: a set's items are in (sequence, head) order; a group is a run of consecutive
// sequences of one length, whose items share every shape and lie at a fixed stride in each
// array, so each GEMM is one strided batch per group. The per-head matrices (R, W_O's Grams)
// are replicated per item for that. Row-wise arrays (the quantizer's rows) are flat over the set.
extern "C" {
#include "rotation/optr-internal.h"
#include "util/log.h"
}
#include "kernels/cublas-check.cuh"
#include "kernels/cuda-common.cuh"
#include "kernels/optr-device.cuh"
#include "kernels/optr-expm.cuh"
#include "kernels/optr-loss.cuh"
#include "kernels/optr-quant.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BLAS_WS_BYTES ((size_t) 32 << 20)   // cuBLAS workspace, fixed (its size can change algorithms)

struct group {                  // sequences [s0, s0 + ns) of a set, all of L rows
    struct osc_optr_geom geo;
    int32_t nr, s0, ns, n, i0;  // INT2 rows per item, items [i0, i0 + n)
    int64_t oLD, oQD, oQL, oQ, oRD;   // offsets of item i0 in [L, D], [g·nq, D], [g·nq, L], [g·nq], [nr, D] arrays
};

struct set {
    int32_t n_seq, n_items, n_grp;
    int32_t * seq;              // host [n_seq]: the sequences used (indices into the rows)
    struct group * grp;         // host [n_grp]
    int64_t n_rows;             // INT2 rows of all items (the flat quantizer arrays)
    char * arena;               // every device array below
    float * kc, * v, * kh;      // [items][L, D] centred keys, values, keys through INT2
    float * q, * pv, * m, * gm; // [items][g·nq, D] queries, P·V, the post-W_O residual m and m·Γ
    float * p, * s, * ds;       // [items][g·nq, L] exact P, scores / P̂, dP̂ / dS (ds: training set only)
    float * y, * yh, * dq;      // [n_rows, D] rotated rows, their INT2 values, gradients
    float * dr;                 // [items, D, D] dL/dR of each item (training set only)
    float * rrep, * grep;       // [items, D, D] R of the item's head, [items, g, D, D] its Grams
    struct osc_optr_dev_lin lin;
    double * rowval;            // [items][g·nq] per query row sums
    double * plogp, * cross, * quad;   // [items, g]
    double * iloss;             // [items]
};

struct osc_cuda_optr {
    const struct oscar_optr_layer * in;
    const struct oscar_optr_params * p;
    struct osc_optr_dev_opts opts;
    int32_t Hq, Hkv, g, D, C;
    double mean_heads;          // the layer's KV heads (n_head_kv_layer when these are a part): Adam's mean
    float sc;
    struct osc_optr_dev_quant qk, qv;
    cudaStream_t stream;
    cublasHandle_t blas;
    void * blas_ws;
    struct osc_optr_expm_ws * ex;
    struct set sets[2];         // training, held-out
    float * gram;               // [Hq, D, D]
    float * R, * best_R, * base;   // [Hkv, D, D] the current, best held-out and base rotations
    double * Rb64, * A, * am, * av, * gA, * dR;   // [Hkv, D, D] fp64
    double * loss, * train_loss;   // [Hkv], [steps, Hkv]
    int32_t * bad;              // a quantized row was not finite
};

// ---- helpers --------------------------------------------------------------------------------

static __global__ void to_f64_kernel(const float * x, long long n, double * y) {
    const long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = (double) x[i];
}
static __global__ void to_f32_kernel(const double * x, long long n, float * y) {
    const long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __double2float_rn(x[i]);
}

static unsigned blocks(long long n) { return (unsigned) ((n + 255) / 256); }

// Row-major C_b [M, N] = alpha·op(A_b)·op(B_b) + beta·C_b, b < n (strides in floats), fp32 in,
// out and accumulation (CUBLAS_COMPUTE_32F in the default math mode: no TF32).
static enum oscar_status sgemm(struct osc_cuda_optr * d, bool ta, bool tb, int M, int N, int K, float alpha, const float * A,
                               int lda, long long sa, const float * B, int ldb, long long sb, float beta, float * C,
                               int ldc, long long sc, int n) {
    OSCAR_CUBLAS_CHECK(cublasGemmStridedBatchedEx(d->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                  N, M, K, &alpha, B, CUDA_R_32F, ldb, sb, A, CUDA_R_32F, lda, sa, &beta,
                                                  C, CUDA_R_32F, ldc, sc, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return OSCAR_OK;
}

#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        enum oscar_status try_st_ = (x);                                                                               \
        if (try_st_ != OSCAR_OK) return try_st_;                                                                       \
    } while (0)

// ---- sets: layout, upload, exact attention ------------------------------------------------------

static void set_free(struct set * s) {
    cudaFree(s->arena);
    free(s->seq), free(s->grp);
    memset(s, 0, sizeof *s);
}

// The set's sequences and groups (host) from the rows.
static enum oscar_status set_plan(struct osc_cuda_optr * d, const struct oscar_optr_rows * r, int32_t max_seq, bool held,
                                  struct set * s) {
    s->seq = (int32_t *) malloc(((size_t) r->n_seq + 1) * sizeof(int32_t));
    s->grp = (struct group *) calloc((size_t) r->n_seq + 1, sizeof(struct group));
    if (!s->seq || !s->grp) return osc_error(OSCAR_ERR_NOMEM, "cuda optr: out of host memory");
    s->n_seq = osc_optr_pick_sequences(d->p, r->seq_start, r->n_seq, max_seq, s->seq);
    if (s->n_seq == 0)
        return osc_error(OSCAR_ERR_INVALID, "optr: layer %d: no %s sequence has the %d rows OptR needs (sink %d + "
                         "recent %d + 8)", (int) d->in->layer, held ? "held-out" : "training",
                         (int) (d->p->sink + d->p->recent + 8), (int) d->p->sink, (int) d->p->recent);
    s->n_items = s->n_seq * d->Hkv;
    int64_t oLD = 0, oQ = 0, oQL = 0, oRD = 0;
    for (int32_t i = 0; i < s->n_seq; i++) {
        const int32_t L = r->seq_start[s->seq[i] + 1] - r->seq_start[s->seq[i]];
        if (s->n_grp == 0 || s->grp[s->n_grp - 1].geo.L != L) {   // a new run of sequences of L rows
            struct group * gr = &s->grp[s->n_grp++];
            osc_optr_item_geom(d->p, L, &gr->geo);
            gr->nr = gr->geo.q1 - gr->geo.q0, gr->s0 = i, gr->i0 = i * d->Hkv;
            gr->oLD = oLD, gr->oQ = oQ, gr->oQD = oQ * d->D, gr->oQL = oQL, gr->oRD = oRD;
        }
        struct group * gr = &s->grp[s->n_grp - 1];
        gr->ns++, gr->n += d->Hkv;
        oLD += (int64_t) d->Hkv * L * d->D, oQ += (int64_t) d->Hkv * d->g * gr->geo.nq;
        oQL += (int64_t) d->Hkv * d->g * gr->geo.nq * L, oRD += (int64_t) d->Hkv * gr->nr * d->D;
    }
    // carve the arena: floats, then doubles, then int16 and bytes (each array 256-byte aligned)
    const int64_t DD = (int64_t) d->D * d->D, rows = oRD / d->D, ngm = d->qk.n_group > d->qv.n_group ? d->qk.n_group
                                                                                                     : d->qv.n_group;
    s->n_rows = rows;
    struct { void ** ptr; int64_t bytes; } parts[] = {
        {(void **) &s->kc, oLD * 4}, {(void **) &s->v, oLD * 4}, {(void **) &s->kh, oLD * 4},
        {(void **) &s->q, oQ * d->D * 4}, {(void **) &s->pv, oQ * d->D * 4}, {(void **) &s->m, oQ * d->D * 4},
        {(void **) &s->gm, oQ * d->D * 4}, {(void **) &s->p, oQL * 4}, {(void **) &s->s, oQL * 4},
        {(void **) &s->ds, held ? 0 : oQL * 4}, {(void **) &s->y, oRD * 4}, {(void **) &s->yh, oRD * 4},
        {(void **) &s->dq, oRD * 4}, {(void **) &s->lin.c, oRD * 4}, {(void **) &s->lin.clampv, rows * 4},
        {(void **) &s->lin.scale, rows * ngm * 4}, {(void **) &s->dr, held ? 0 : s->n_items * DD * 4},
        {(void **) &s->rrep, s->n_items * DD * 4}, {(void **) &s->grep, (int64_t) s->n_items * d->g * DD * 4},
        {(void **) &s->rowval, oQ * 8}, {(void **) &s->plogp, (int64_t) s->n_items * d->g * 8},
        {(void **) &s->cross, (int64_t) s->n_items * d->g * 8}, {(void **) &s->quad, (int64_t) s->n_items * d->g * 8},
        {(void **) &s->iloss, (int64_t) s->n_items * 8}, {(void **) &s->lin.imax, rows * ngm * 2},
        {(void **) &s->lin.imin, rows * ngm * 2}, {(void **) &s->lin.clipped, oRD},
    };
    const int n_parts = (int) (sizeof parts / sizeof parts[0]);
    int64_t total = 0;
    for (int i = 0; i < n_parts; i++) total += (parts[i].bytes + 255) / 256 * 256;
    OSCAR_CUDA_CHECK(cudaMalloc((void **) &s->arena, (size_t) total));
    total = 0;
    for (int i = 0; i < n_parts; i++) {
        *parts[i].ptr = parts[i].bytes ? s->arena + total : NULL;
        total += (parts[i].bytes + 255) / 256 * 256;
    }
    return OSCAR_OK;
}

// The set's rows on the device, head-major per item (keys centred with k_mean), then its exact
// attention P, Σ P log P and P·V; kh starts as kc (its rows outside [q0, q1) stay exact).
static enum oscar_status set_upload(struct osc_cuda_optr * d, const struct oscar_optr_rows * r, const float * k_mean_dev,
                                    float * stage, struct set * s) {
    const int32_t Hkv = d->Hkv, Hq = d->Hq, D = d->D, g = d->g;
    for (int32_t gi = 0; gi < s->n_grp; gi++) {
        const struct group * gr = &s->grp[gi];
        const int32_t L = gr->geo.L, nq = gr->geo.nq;
        for (int32_t k = 0; k < gr->ns; k++) {
            const int64_t r0 = r->seq_start[s->seq[gr->s0 + k]];
            const int64_t kv = (int64_t) L * Hkv * D, qn = (int64_t) nq * Hq * D;
            float * kst = stage, * vst = stage + kv, * qst = vst + kv;
            OSCAR_CUDA_CHECK(cudaMemcpyAsync(kst, r->k + r0 * Hkv * D, kv * 4, cudaMemcpyHostToDevice, d->stream));
            OSCAR_CUDA_CHECK(cudaMemcpyAsync(vst, r->v + r0 * Hkv * D, kv * 4, cudaMemcpyHostToDevice, d->stream));
            OSCAR_CUDA_CHECK(cudaMemcpyAsync(qst, r->q + (r0 + gr->geo.lo) * Hq * D, qn * 4, cudaMemcpyHostToDevice,
                                             d->stream));
            TRY(osc_optr_heads_major(s->kc + gr->oLD + k * kv, kst, L, Hkv, D, k_mean_dev, d->stream));
            TRY(osc_optr_heads_major(s->v + gr->oLD + k * kv, vst, L, Hkv, D, NULL, d->stream));
            TRY(osc_optr_heads_major(s->q + gr->oQD + k * qn, qst, nq, Hq, D, NULL, d->stream));
        }
        const int64_t sLD = (int64_t) L * D, sQD = (int64_t) g * nq * D, sQL = (int64_t) g * nq * L;
        TRY(sgemm(d, false, true, g * nq, L, D, d->sc, s->q + gr->oQD, D, sQD, s->kc + gr->oLD, D, sLD, 0.0f,
                  s->p + gr->oQL, L, sQL, gr->n));
        TRY(osc_optr_softmax_rows(s->p + gr->oQL, NULL, sQL, gr->n, g * nq, nq, L, gr->geo.lo, s->rowval + gr->oQ,
                                  d->stream));
        TRY(osc_optr_sum_runs(s->rowval + gr->oQ, nq, (int64_t) gr->n * g, s->plogp + (int64_t) gr->i0 * g, d->stream));
        TRY(sgemm(d, false, false, g * nq, D, L, 1.0f, s->p + gr->oQL, L, sQL, s->v + gr->oLD, D, sLD, 0.0f,
                  s->pv + gr->oQD, D, sQD, gr->n));
    }
    const struct group * last = &s->grp[s->n_grp - 1];
    const int64_t n_ld = last->oLD + (int64_t) last->n * last->geo.L * D;
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(s->kh, s->kc, (size_t) n_ld * 4, cudaMemcpyDeviceToDevice, d->stream));
    return osc_optr_replicate(s->grep, d->gram, s->n_items, (int64_t) g * D * D, Hkv, d->stream);
}

// ---- losses and gradients over a set ------------------------------------------------------------

// Loss per head [Hkv] of the K (phase 0) or V (phase 1) loss at d->R into out (device); with
// grad (training set) dL/dR into d->dR. phat_only (K): stop once P̂ is in s->s (the V phase's input).
static enum oscar_status set_loss(struct osc_cuda_optr * d, struct set * s, int phase, bool grad, bool phat_only, double * out) {
    const int32_t D = d->D, g = d->g, Hkv = d->Hkv;
    const int64_t DD = (int64_t) D * D;
    const struct osc_optr_dev_quant * qz = phase ? &d->qv : &d->qk;
    float * x = phase ? s->v : s->kc;   // the rows this phase rotates and quantizes
    const double w = 1.0 / s->n_seq, wj = 1.0 / g;
    TRY(osc_optr_replicate(s->rrep, d->R, s->n_items, DD, Hkv, d->stream));
    for (int32_t gi = 0; gi < s->n_grp; gi++) {   // Y = X[Q]·R
        const struct group * gr = &s->grp[gi];
        TRY(sgemm(d, false, false, gr->nr, D, D, 1.0f, x + gr->oLD + (int64_t) gr->geo.q0 * D, D,
                  (int64_t) gr->geo.L * D, s->rrep + gr->i0 * DD, D, DD, 0.0f, s->y + gr->oRD, D, (int64_t) gr->nr * D,
                  gr->n));
    }
    TRY(osc_cuda_optr_quant_fwd(qz, s->y, s->n_rows, s->yh, &s->lin, d->bad, d->stream));
    for (int32_t gi = 0; gi < s->n_grp; gi++) {
        const struct group * gr = &s->grp[gi];
        const int32_t L = gr->geo.L, nq = gr->geo.nq, q0 = gr->geo.q0, nr = gr->nr, n = gr->n;
        const int64_t sLD = (int64_t) L * D, sQD = (int64_t) g * nq * D, sQL = (int64_t) g * nq * L, sRD = (int64_t) nr * D;
        const double wo = 1.0 / ((double) nq * d->C);
        float * rrep = s->rrep + gr->i0 * DD;
        if (phase == 0) {   // K̂[Q] = Ŷ·Rᵀ, S = sc·q·K̂ᵀ, P̂ = softmax(S), the KL's cross term
            TRY(sgemm(d, false, true, nr, D, D, 1.0f, s->yh + gr->oRD, D, sRD, rrep, D, DD, 0.0f,
                      s->kh + gr->oLD + (int64_t) q0 * D, D, sLD, n));
            TRY(sgemm(d, false, true, g * nq, L, D, d->sc, s->q + gr->oQD, D, sQD, s->kh + gr->oLD, D, sLD, 0.0f,
                      s->s + gr->oQL, L, sQL, n));
            TRY(osc_optr_softmax_rows(s->s + gr->oQL, s->p + gr->oQL, sQL, n, g * nq, nq, L, gr->geo.lo,
                                      s->rowval + gr->oQ, d->stream));
            if (phat_only) continue;
            TRY(osc_optr_sum_runs(s->rowval + gr->oQ, nq, (int64_t) n * g, s->cross + (int64_t) gr->i0 * g, d->stream));
            // m = P̂·V − P·V
            TRY(sgemm(d, false, false, g * nq, D, L, 1.0f, s->s + gr->oQL, L, sQL, s->v + gr->oLD, D, sLD, 0.0f,
                      s->m + gr->oQD, D, sQD, n));
            TRY(osc_optr_sub_items(s->m + gr->oQD, 0, s->pv + gr->oQD, 0, (int64_t) n * sQD, 1, d->stream));
        } else {            // ΔV = V̂[Q] − V[Q], m = P̂[:, Q]·ΔV
            TRY(sgemm(d, false, true, nr, D, D, 1.0f, s->yh + gr->oRD, D, sRD, rrep, D, DD, 0.0f, s->y + gr->oRD, D,
                      sRD, n));
            TRY(osc_optr_sub_items(s->y + gr->oRD, sRD, s->v + gr->oLD + (int64_t) q0 * D, sLD, sRD, n, d->stream));
            TRY(sgemm(d, false, false, g * nq, D, nr, 1.0f, s->s + gr->oQL + q0, L, sQL, s->y + gr->oRD, D, sRD, 0.0f,
                      s->m + gr->oQD, D, sQD, n));
        }
        // the post-W_O term: Σ m·Γ_j·mᵀ per query head, then each item's loss
        TRY(sgemm(d, false, false, nq, D, D, 1.0f, s->m + gr->oQD, D, (int64_t) nq * D, s->grep + (int64_t) gr->i0 * g * DD,
                  D, DD, 0.0f, s->gm + gr->oQD, D, (int64_t) nq * D, n * g));
        TRY(osc_optr_dot_slices(s->m + gr->oQD, s->gm + gr->oQD, (int64_t) nq * D, (int64_t) n * g,
                                s->quad + (int64_t) gr->i0 * g, d->stream));
        TRY(osc_optr_item_loss(s->plogp + (int64_t) gr->i0 * g, s->cross + (int64_t) gr->i0 * g,
                               s->quad + (int64_t) gr->i0 * g, n, g, nq, wo, wj, w, d->p->lambda, phase,
                               s->iloss + gr->i0, d->stream));
        if (!grad) continue;
        // backward to dŶ's source: dX̂[Q] into dq
        if (phase == 0) {   // dP̂ = (2λ·wo)·gm·Vᵀ, dS, dK̂[Q] = sc·dS[:, Q]ᵀ·q
            TRY(sgemm(d, false, true, g * nq, L, D, (float) (2.0 * d->p->lambda * wo), s->gm + gr->oQD, D, sQD,
                      s->v + gr->oLD, D, sLD, 0.0f, s->ds + gr->oQL, L, sQL, n));
            TRY(osc_optr_dscore_rows(s->ds + gr->oQL, s->s + gr->oQL, s->p + gr->oQL, sQL, n, g * nq, nq, L, gr->geo.lo,
                                     q0, gr->geo.q1, wj, d->stream));
            TRY(sgemm(d, true, false, nr, D, g * nq, d->sc, s->ds + gr->oQL + q0, L, sQL, s->q + gr->oQD, D, sQD, 0.0f,
                      s->dq + gr->oRD, D, sRD, n));
        } else {            // dV̂[Q] = (2·wo·wj)·P̂[:, Q]ᵀ·gm
            TRY(sgemm(d, true, false, nr, D, g * nq, (float) (2.0 * wo * wj), s->s + gr->oQL + q0, L, sQL,
                      s->gm + gr->oQD, D, sQD, 0.0f, s->dq + gr->oRD, D, sRD, n));
        }
        // dR = dX̂ᵀ·Ŷ (X̂ = Ŷ·Rᵀ), and dŶ = dX̂·R for the straight-through step
        TRY(sgemm(d, true, false, D, D, nr, 1.0f, s->dq + gr->oRD, D, sRD, s->yh + gr->oRD, D, sRD, 0.0f,
                  s->dr + gr->i0 * DD, D, DD, n));
        TRY(sgemm(d, false, false, nr, D, D, 1.0f, s->dq + gr->oRD, D, sRD, rrep, D, DD, 0.0f, s->y + gr->oRD, D, sRD,
                  n));
    }
    if (phat_only) return OSCAR_OK;
    TRY(osc_optr_head_loss(s->iloss, s->n_seq, Hkv, out, d->stream));
    if (!grad) return OSCAR_OK;
    TRY(osc_cuda_optr_quant_back(qz, &s->lin, s->y, s->n_rows, s->dq, d->opts.drop_ste_range, d->stream));
    for (int32_t gi = 0; gi < s->n_grp; gi++) {   // dR += X[Q]ᵀ·dY (Y = X·R)
        const struct group * gr = &s->grp[gi];
        const int64_t sRD = (int64_t) gr->nr * D;
        TRY(sgemm(d, true, false, D, D, gr->nr, 1.0f, x + gr->oLD + (int64_t) gr->geo.q0 * D, D,
                  (int64_t) gr->geo.L * D, s->dq + gr->oRD, D, sRD, 1.0f, s->dr + gr->i0 * DD, D, DD, gr->n));
    }
    return osc_optr_grad_reduce(s->dr, s->n_seq, Hkv, (int32_t) DD, w, d->dR, d->stream);
}

// Waits for the stream; OSCAR_ERR_NUMERIC when a quantized row was not finite.
static enum oscar_status sync_checked(struct osc_cuda_optr * d, const char * what, int32_t step) {
    int32_t bad = 0;
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(&bad, d->bad, sizeof bad, cudaMemcpyDeviceToHost, d->stream));
    OSCAR_CUDA_CHECK(cudaStreamSynchronize(d->stream));
    if (bad)
        return osc_error(OSCAR_ERR_NUMERIC, "optr: layer %d: a rotated %s row is not finite (step %d on cuda)",
                         (int) d->in->layer, what, (int) step);
    return OSCAR_OK;
}

// Held-out loss per head at d->R into host h[Hkv].
static enum oscar_status held_loss(struct osc_cuda_optr * d, int phase, int32_t step, double * h) {
    TRY(set_loss(d, &d->sets[1], phase, false, false, d->loss));
    TRY(sync_checked(d, phase ? "value" : "key", step));
    OSCAR_CUDA_CHECK(cudaMemcpy(h, d->loss, (size_t) d->Hkv * sizeof(double), cudaMemcpyDeviceToHost));
    return OSCAR_OK;
}

// ---- the training loop (optr.c run_phase) ----------------------------------------------------------

static enum oscar_status run_phase(struct osc_cuda_optr * d, int phase, const float * base, double margin, float * out_R,
                                   double * train, double * held, int32_t * best_step) {
    const int32_t Hkv = d->Hkv, D = d->D, steps = d->p->steps;
    const int64_t DD = (int64_t) D * D, HDD = Hkv * DD;
    double * loss = (double *) malloc((size_t) Hkv * sizeof(double)), * best = (double *) malloc((size_t) Hkv * sizeof(double));
    double * base_held = (double *) malloc((size_t) Hkv * sizeof(double));
    enum oscar_status st = OSCAR_OK;
    if (!loss || !best || !base_held) {
        st = osc_error(OSCAR_ERR_NOMEM, "cuda optr: out of host memory");
        goto out;
    }
    OSCAR_CUDA_TRY(cudaMemcpyAsync(d->base, base, (size_t) HDD * 4, cudaMemcpyHostToDevice, d->stream));
    to_f64_kernel<<<blocks(HDD), 256, 0, d->stream>>>(d->base, HDD, d->Rb64);
    OSCAR_CUDA_TRY(cudaGetLastError());
    OSCAR_CUDA_TRY(cudaMemcpyAsync(d->R, d->base, (size_t) HDD * 4, cudaMemcpyDeviceToDevice, d->stream));
    OSCAR_CUDA_TRY(cudaMemcpyAsync(d->best_R, d->base, (size_t) HDD * 4, cudaMemcpyDeviceToDevice, d->stream));
    OSCAR_CUDA_TRY(cudaMemsetAsync(d->A, 0, (size_t) 3 * HDD * sizeof(double), d->stream));   // A, m, v
    for (int64_t i = 0; i < (int64_t) (steps + 1) * Hkv; i++) held[i] = NAN;
    if ((st = held_loss(d, phase, -1, base_held)) != OSCAR_OK) goto out;
    for (int32_t h = 0; h < Hkv; h++) held[h] = best[h] = base_held[h], best_step[h] = -1;
    for (int32_t step = 0; step < steps; step++) {
        if ((st = set_loss(d, &d->sets[0], phase, true, false, d->train_loss + (int64_t) step * Hkv)) != OSCAR_OK ||
            (st = osc_optr_expm_grad_a(d->ex, d->Rb64, d->A, d->dR, d->gA)) != OSCAR_OK ||
            (st = osc_optr_dev_adam(d->A, d->am, d->av, d->gA, HDD, d->mean_heads, d->p->lr, 1.0 - pow(0.9, step + 1),
                                1.0 - pow(0.999, step + 1), d->stream)) != OSCAR_OK ||
            (st = osc_optr_expm_rotation(d->ex, d->Rb64, d->A, d->R)) != OSCAR_OK)
            goto out;
        if (step % d->p->eval_every != 0 && step != steps - 1) continue;
        if ((st = held_loss(d, phase, step, loss)) != OSCAR_OK) goto out;
        for (int32_t h = 0; h < Hkv; h++) {
            held[(int64_t) (step + 1) * Hkv + h] = loss[h];
            if (loss[h] < best[h]) {
                best[h] = loss[h], best_step[h] = step;
                OSCAR_CUDA_TRY(cudaMemcpyAsync(d->best_R + h * DD, d->R + h * DD, (size_t) DD * 4,
                                               cudaMemcpyDeviceToDevice, d->stream));
            }
        }
    }
    if ((st = sync_checked(d, phase ? "value" : "key", steps - 1)) != OSCAR_OK) goto out;
    OSCAR_CUDA_TRY(cudaMemcpy(train, d->train_loss, (size_t) steps * Hkv * sizeof(double), cudaMemcpyDeviceToHost));
    OSCAR_CUDA_TRY(cudaMemcpy(out_R, d->best_R, (size_t) HDD * 4, cudaMemcpyDeviceToHost));
    for (int32_t h = 0; h < Hkv; h++) {   // optr.c's keep-or-revert rule
        const bool keep = best_step[h] >= 0 && best[h] < base_held[h] * (1.0 - margin);
        if (!keep) best_step[h] = -1, memcpy(out_R + h * DD, base + h * DD, (size_t) DD * 4);
    }
out:
    free(loss), free(best), free(base_held);
    return st;
}

// ---- opening and closing a layer ----------------------------------------------------------------

static void dev_free(struct osc_cuda_optr * d) {
    if (d->stream) cudaStreamSynchronize(d->stream);
    for (int k = 0; k < 2; k++) set_free(&d->sets[k]);
    osc_optr_expm_free(d->ex);
    cudaFree(d->gram), cudaFree(d->R), cudaFree(d->Rb64), cudaFree(d->loss), cudaFree(d->bad), cudaFree(d->blas_ws);
    if (d->blas) cublasDestroy(d->blas);
    if (d->stream) cudaStreamDestroy(d->stream);
}

// W_O's per-query-head Grams Γ_j = W_jᵀ·W_j (fp64 products and sums, stored fp32).
static enum oscar_status make_grams(struct osc_cuda_optr * d) {
    const int32_t D = d->D, Hq = d->Hq, C = d->C, K = Hq * D;
    const int64_t n = (int64_t) C * K, DD = (int64_t) D * D;
    float * w32 = NULL;
    double * w64 = NULL, * g64 = NULL;
    enum oscar_status st = OSCAR_OK;
    const double one = 1.0, zero = 0.0;
    OSCAR_CUDA_TRY(cudaMalloc((void **) &w32, (size_t) n * 4));
    OSCAR_CUDA_TRY(cudaMalloc((void **) &w64, (size_t) n * 8));
    OSCAR_CUDA_TRY(cudaMalloc((void **) &g64, (size_t) Hq * DD * 8));
    OSCAR_CUDA_TRY(cudaMemcpyAsync(w32, d->in->wo, (size_t) n * 4, cudaMemcpyHostToDevice, d->stream));
    to_f64_kernel<<<blocks(n), 256, 0, d->stream>>>(w32, n, w64);
    OSCAR_CUDA_TRY(cudaGetLastError());
    // row-major Γ_j [D, D] = W_jᵀ·W_j, W_j = columns jD.. of W_O [C, Hq·D]: column-major Γ_jᵀ = Γ_j
    OSCAR_CUBLAS_TRY(cublasDgemmStridedBatched(d->blas, CUBLAS_OP_N, CUBLAS_OP_T, D, D, C, &one, w64, K, D, w64, K, D,
                                               &zero, g64, D, DD, Hq));
    to_f32_kernel<<<blocks(Hq * DD), 256, 0, d->stream>>>(g64, Hq * DD, d->gram);
    OSCAR_CUDA_TRY(cudaGetLastError());
    OSCAR_CUDA_TRY(cudaStreamSynchronize(d->stream));
out:
    cudaFree(w32), cudaFree(w64), cudaFree(g64);
    return st;
}

static enum oscar_status dev_open(struct osc_cuda_optr * d, const float * k_mean) {
    const struct oscar_optr_layer * in = d->in;
    const int32_t Hkv = d->Hkv, D = d->D;
    const int64_t HDD = (int64_t) Hkv * D * D;
    enum oscar_status st = OSCAR_OK;
    float * k_mean_dev = NULL, * stage = NULL;
    int64_t stage_n = 1;
    TRY(osc_optr_dev_quant_of(&d->p->k_quant, &d->qk));
    TRY(osc_optr_dev_quant_of(&d->p->v_quant, &d->qv));
    TRY(osc_cuda_require_device("cuda optr: "));
    OSCAR_CUDA_CHECK(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking));
    OSCAR_CUBLAS_CHECK(cublasCreate(&d->blas));
    OSCAR_CUBLAS_CHECK(cublasSetStream(d->blas, d->stream));
    OSCAR_CUBLAS_CHECK(cublasSetMathMode(d->blas, CUBLAS_DEFAULT_MATH));   // fp32 stays fp32: no TF32
    OSCAR_CUDA_CHECK(cudaMalloc(&d->blas_ws, BLAS_WS_BYTES));
    OSCAR_CUBLAS_CHECK(cublasSetWorkspace(d->blas, d->blas_ws, BLAS_WS_BYTES));
    TRY(osc_optr_expm_open(d->blas, d->stream, Hkv, D, &d->ex));
    OSCAR_CUDA_CHECK(cudaMalloc((void **) &d->gram, (size_t) d->Hq * D * D * 4));
    OSCAR_CUDA_CHECK(cudaMalloc((void **) &d->R, (size_t) 3 * HDD * 4));
    d->best_R = d->R + HDD, d->base = d->best_R + HDD;
    OSCAR_CUDA_CHECK(cudaMalloc((void **) &d->Rb64, (size_t) 6 * HDD * 8));
    d->A = d->Rb64 + HDD, d->am = d->A + HDD, d->av = d->am + HDD, d->gA = d->av + HDD, d->dR = d->gA + HDD;
    OSCAR_CUDA_CHECK(cudaMalloc((void **) &d->loss, ((size_t) d->p->steps + 1) * Hkv * sizeof(double)));
    d->train_loss = d->loss + Hkv;
    OSCAR_CUDA_CHECK(cudaMalloc((void **) &d->bad, sizeof(int32_t)));
    OSCAR_CUDA_CHECK(cudaMemsetAsync(d->bad, 0, sizeof(int32_t), d->stream));
    TRY(make_grams(d));
    const struct oscar_optr_rows * rows[2] = {&in->train, &in->held};
    for (int k = 0; k < 2; k++) {
        TRY(set_plan(d, rows[k], k ? 0 : d->p->max_train_seq, k == 1, &d->sets[k]));
        for (int32_t i = 0; i < d->sets[k].n_seq; i++) {
            const int32_t s = d->sets[k].seq[i], L = rows[k]->seq_start[s + 1] - rows[k]->seq_start[s];
            const int64_t need = (int64_t) L * Hkv * D * 2 + (int64_t) d->p->qwin * d->Hq * D;
            stage_n = need > stage_n ? need : stage_n;
        }
    }
    OSCAR_CUDA_TRY(cudaMalloc((void **) &stage, (size_t) stage_n * 4));
    if (k_mean) {
        OSCAR_CUDA_TRY(cudaMalloc((void **) &k_mean_dev, (size_t) Hkv * D * 4));
        OSCAR_CUDA_TRY(cudaMemcpyAsync(k_mean_dev, k_mean, (size_t) Hkv * D * 4, cudaMemcpyHostToDevice, d->stream));
    }
    for (int k = 0; k < 2 && st == OSCAR_OK; k++) st = set_upload(d, rows[k], k_mean_dev, stage, &d->sets[k]);
    if (st == OSCAR_OK) OSCAR_CUDA_TRY(cudaStreamSynchronize(d->stream));   // the staging buffer is freed below
out:
    if (d->stream) cudaStreamSynchronize(d->stream);
    cudaFree(stage), cudaFree(k_mean_dev);
    return st;
}

// ---- the test API (optr-device.cuh) and the layer ------------------------------------------------

extern "C" void osc_cuda_optr_close(struct osc_cuda_optr * d) {
    if (!d) return;
    dev_free(d);
    free(d);
}

extern "C" enum oscar_status osc_cuda_optr_open(const struct oscar_optr_layer * in, const struct oscar_optr_params * p,
                                                const float * k_mean, const struct osc_optr_dev_opts * opts,
                                                struct osc_cuda_optr ** out) {
    *out = NULL;
    enum oscar_status st = osc_optr_check(in, p);
    if (st != OSCAR_OK) return st;
    struct osc_cuda_optr * d = (struct osc_cuda_optr *) calloc(1, sizeof *d);
    if (!d) return osc_error(OSCAR_ERR_NOMEM, "cuda optr: out of host memory");
    d->in = in, d->p = p;
    if (opts) d->opts = *opts;
    d->Hq = in->n_head, d->Hkv = in->n_head_kv, d->g = in->n_head / in->n_head_kv, d->D = in->head_dim;
    d->C = in->n_embd, d->mean_heads = in->n_head_kv_layer > 0 ? in->n_head_kv_layer : in->n_head_kv;
    d->sc = in->attn_scale > 0.0f ? in->attn_scale : 1.0f / sqrtf((float) in->head_dim);
    if ((st = osc_optr_check_finite(in, p->n_threads)) != OSCAR_OK || (st = dev_open(d, k_mean)) != OSCAR_OK) {
        osc_cuda_optr_close(d);
        return st;
    }
    *out = d;
    return OSCAR_OK;
}

extern "C" enum oscar_status osc_cuda_optr_loss(struct osc_cuda_optr * d, int phase, bool held, const float * R,
                                                double * loss, double * dR, float * c) {
    struct set * s = &d->sets[held ? 1 : 0];
    const size_t HDD = (size_t) d->Hkv * d->D * d->D;
    if (dR && held) return osc_error(OSCAR_ERR_INVALID, "cuda optr: no gradient on the held-out set");
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(d->R, R, HDD * 4, cudaMemcpyHostToDevice, d->stream));
    TRY(set_loss(d, s, phase, dR != NULL, false, d->loss));
    TRY(sync_checked(d, phase ? "value" : "key", -1));
    OSCAR_CUDA_CHECK(cudaMemcpy(loss, d->loss, (size_t) d->Hkv * sizeof(double), cudaMemcpyDeviceToHost));
    if (dR) OSCAR_CUDA_CHECK(cudaMemcpy(dR, d->dR, HDD * sizeof(double), cudaMemcpyDeviceToHost));
    if (c) OSCAR_CUDA_CHECK(cudaMemcpy(c, s->lin.c, (size_t) s->n_rows * d->D * 4, cudaMemcpyDeviceToHost));
    return OSCAR_OK;
}

// P̂ of both sets under the key rotations R_k (host): the V phase's input.
extern "C" enum oscar_status osc_cuda_optr_phat(struct osc_cuda_optr * d, const float * R_k) {
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(d->R, R_k, (size_t) d->Hkv * d->D * d->D * 4, cudaMemcpyHostToDevice, d->stream));
    for (int k = 0; k < 2; k++) TRY(set_loss(d, &d->sets[k], 0, false, true, d->loss));
    return sync_checked(d, "key", -1);
}

extern "C" enum oscar_status osc_cuda_optr_step(struct osc_cuda_optr * d, const float * R_base, double * A, double * m,
                                                double * v, const double * dR, int32_t step, float * R) {
    const int64_t HDD = (int64_t) d->Hkv * d->D * d->D;
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(d->base, R_base, (size_t) HDD * 4, cudaMemcpyHostToDevice, d->stream));
    to_f64_kernel<<<blocks(HDD), 256, 0, d->stream>>>(d->base, HDD, d->Rb64);
    OSCAR_CUDA_CHECK_LAUNCH();
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(d->A, A, (size_t) HDD * 8, cudaMemcpyHostToDevice, d->stream));
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(d->am, m, (size_t) HDD * 8, cudaMemcpyHostToDevice, d->stream));
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(d->av, v, (size_t) HDD * 8, cudaMemcpyHostToDevice, d->stream));
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(d->dR, dR, (size_t) HDD * 8, cudaMemcpyHostToDevice, d->stream));
    TRY(osc_optr_expm_grad_a(d->ex, d->Rb64, d->A, d->dR, d->gA));
    TRY(osc_optr_dev_adam(d->A, d->am, d->av, d->gA, HDD, d->mean_heads, d->p->lr, 1.0 - pow(0.9, step + 1),
                          1.0 - pow(0.999, step + 1), d->stream));
    TRY(osc_optr_expm_rotation(d->ex, d->Rb64, d->A, d->R));
    OSCAR_CUDA_CHECK(cudaStreamSynchronize(d->stream));
    OSCAR_CUDA_CHECK(cudaMemcpy(A, d->A, (size_t) HDD * 8, cudaMemcpyDeviceToHost));
    OSCAR_CUDA_CHECK(cudaMemcpy(m, d->am, (size_t) HDD * 8, cudaMemcpyDeviceToHost));
    OSCAR_CUDA_CHECK(cudaMemcpy(v, d->av, (size_t) HDD * 8, cudaMemcpyDeviceToHost));
    OSCAR_CUDA_CHECK(cudaMemcpy(R, d->R, (size_t) HDD * 4, cudaMemcpyDeviceToHost));
    return OSCAR_OK;
}

extern "C" enum oscar_status osc_cuda_optr_refine_layer_opts(const struct oscar_optr_layer * in,
                                                             const struct oscar_optr_params * p,
                                                             struct oscar_optr_result * r,
                                                             const struct osc_optr_dev_opts * opts) {
    enum oscar_status st = osc_optr_result_init(in, p, r);
    if (st != OSCAR_OK) return st;
    struct osc_cuda_optr * d = NULL;
    const double t0 = osc_now();
    double t1 = t0, t2 = t0;
    if ((st = osc_cuda_optr_open(in, p, p->center ? r->k_mean : NULL, opts, &d)) != OSCAR_OK) goto out;
    r->n_train_seq = d->sets[0].n_seq, r->n_held_seq = d->sets[1].n_seq;
    t1 = osc_now();
    if ((st = run_phase(d, 0, in->k_rot_base, p->margin_k, r->k_rot, r->k_train, r->k_held, r->k_best)) != OSCAR_OK)
        goto out;
    t2 = osc_now();
    if ((st = osc_cuda_optr_phat(d, r->k_rot)) != OSCAR_OK ||
        (st = run_phase(d, 1, in->v_rot_base, p->margin_v, r->v_rot, r->v_train, r->v_held, r->v_best)) != OSCAR_OK)
        goto out;
    osc_debug("cuda optr layer %d: rows and exact attention %.3f s, K phase %.3f s, V phase %.3f s (%d + %d sequences)",
              (int) in->layer, t1 - t0, t2 - t1, osc_now() - t2, (int) r->n_train_seq, (int) r->n_held_seq);
out:
    osc_cuda_optr_close(d);
    if (st != OSCAR_OK) oscar_optr_result_free(r);
    return st;
}

extern "C" enum oscar_status osc_cuda_optr_refine_layer(const struct oscar_optr_layer * in,
                                                        const struct oscar_optr_params * p,
                                                        struct oscar_optr_result * out) {
    return osc_cuda_optr_refine_layer_opts(in, p, out, NULL);
}
