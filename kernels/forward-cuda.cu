// forward-cuda.cu - the CUDA forward pass behind lib/backend/forward-backend.h:
// bf16 weights resident on the device (q/k/v and gate/up fused into one matrix
// each), cuBLAS GEMMs with bf16 inputs and fp32 accumulation and output, an fp32
// residual stream, the q/k/v epilogue and flash-style causal attention of
// kernels/fwd-kernels.cu, and device-side capture sums (KTK, VTV, grouped QQT in
// pass 1; SST in pass 2) handed to lib/stats at the end of each pass.
// The layer is the CPU forward's (lib/model/forward.c) for every dense architecture:
// Llama/SmolLM, Qwen2/3 (q/k norms, biases), Mistral and Qwen sliding windows, Phi-3 and GLM
// partial rotary, and Gemma 3's layer ((1 + w) RMSNorms, sandwich norms, GELU-tanh MLP,
// sqrt(C)-scaled embedding, query_pre_attn_scalar score scale, local/global RoPE bases on
// its sliding/global layers), and the mixture-of-experts layers of Qwen2/3-MoE, Mixtral and
// GLM-4.x MoE (kernels/fwd-moe.cu: device routing, experts grouped by a stable sort, one GEMM
// pair per expert, a fixed-order combine); their dense layers run the dense MLP.
// fp32 mode (oscar_fwd_params.fp32): the same pass with every weight matrix, embedding
// and GEMM input (xn, att, h, pass-1 Gram inputs) in fp32 and the fp32 attention
// kernel. One mechanism carries both: those buffers are `void *` of f->esize bytes per
// element and cuBLAS type f->wtype, and the act_* helpers pick the kernel overload.
//
// Memory: weights and a workspace sized once from max_tokens at init; run and
// end_pass allocate nothing on the device. The layer-major pass (p.layered; the
// section at the end) keeps the embedding and two layer slots instead of every
// layer, the hidden states of all rows of the pass, and one layer's kept K/V. It refuses head_dim > 256 or odd and
// batches the CPU pass would refuse. An attention override
// (oscar-verify's simulated quantized cache) runs on the host: q/k/v go to the
// host, the callback's output comes back (a verification path, not a fast one).
//
// T = tokens, C = n_embd, Hq/Hkv = heads, D = head_dim, F = n_ff, V = n_vocab,
// L = n_layer, Q = Hq D, KV = Hkv D, NQKV = Q + 2 KV.
extern "C" {
#include "attention/attention.h"
#include "backend/forward-ops.h"
#include "quant/quant.h"
#include "stats/stats-sums.h"
}

#include "kernels/cublas-check.cuh"
#include "kernels/cuda-common.cuh"
#include "kernels/fwd-kernels.cuh"
#include "kernels/fwd-kvsim.cuh"
#include "kernels/fwd-moe.cuh"
#include "kernels/fwd-score.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_ALLOCS = 96 };
static const int32_t LOGIT_ROWS = 512; // LM-head rows per GEMM (logits leave the device in chunks)
static const size_t STAGE_ELEMS = (size_t) 16 << 20; // per page-locked bf16 staging chunk (32 MB; two alternate)
static const size_t BLAS_WS_BYTES = (size_t) 32 << 20;
// Pass-1 Gram matrices: T is cut into at most GRAM_MAX_CHUNKS chunks of >= GRAM_MIN_ROWS
// rows so that chunks x matrices fills the GPU (one D x D tile per matrix and chunk
// is too little parallelism for cuBLAS); chunk sums are fp32, then added in fp64.
enum { GRAM_MAX_CHUNKS = 16, GRAM_MIN_ROWS = 256, GRAM_TARGET_TILES = 528, N_STAGES = 6 };
// VATT: query rows per score block (scores [VATT_ROWS, keys] fp32 live in vatt_s).
enum { VATT_ROWS = 512 };

struct dlayer {
    float * attn_norm;   // [C]
    float * ffn_norm;    // [C]
    float * attn_post_norm; // [C] sandwich norms (post_norms: Gemma), else NULL
    float * ffn_post_norm;  // [C]
    float * q_norm;      // [D] or NULL
    float * k_norm;      // [D] or NULL
    float * bqkv;        // [NQKV] or NULL
    // matrices: bf16, or fp32 in the fp32 mode (struct cuda_fwd's esize / wtype)
    void * wqkv;         // [NQKV, C]
    void * wo;           // [C, Q]
    void * wgu;          // [2F, C]: gate rows, then up rows (dense layers)
    void * wdown;        // [C, F]
    struct osc_moe_dlayer moe; // sparse layers (oscar_layer_is_moe); a layered slot holds both kinds
};

struct cuda_fwd {
    struct oscar_model_config c;
    struct oscar_fwd_params p;
    int32_t max_tokens;
    cudaStream_t stream;
    cublasHandle_t blas;
    uint64_t seed;        // of the random weights (init_random)
    void * allocs[MAX_ALLOCS];
    int32_t n_allocs;
    int64_t weight_bytes, work_bytes, used_max;
    char name[128];
    // element type of weight matrices, embeddings and GEMM activations (xn, att, h):
    // bf16 (2 bytes, CUDA_R_16BF) by default, fp32 (4, CUDA_R_32F) when p.fp32
    size_t esize;
    cudaDataType_t wtype;
    // weights
    void * embd;          // [V, C]
    void * out_w;         // [V, C] (== embd when tied)
    float * out_norm;     // [C]
    float * inv_freq;     // [R/2], R = rotated dims (oscar_rope_dim)
    float * inv_freq_swa; // [R/2] the sliding layers' frequencies when they have a RoPE base of their own, else NULL
    struct dlayer * layers; // host array [L] of device pointers (layered: into the slots)
    struct dlayer slots[2]; // layered: layer l runs from slot l % 2
    uint16_t * hstage;      // bf16 weight uploads: two page-locked host chunks [2][STAGE_ELEMS] (made on first use)
    cudaEvent_t staged[2];  // each chunk's last copy to the device
    // workspace
    int32_t * d_tok;      // [T]
    int32_t * d_pos;      // [T]
    struct osc_att_block * d_blocks; // [T]
    float * x;            // [T, C] residual
    float * big;          // [T, max(NQKV, 2F)]: qkv, then gate/up, then capture scratch
    float * q;            // [T, Hq, D]
    float * k;            // [T, Hkv, D]
    float * v;            // [T, Hkv, D]
    osc_bf16 * qb;        // [T, Hq, D] bf16 copies of q/k/v (tensor-core attention, pass-1 GEMMs);
    osc_bf16 * kb;        // [T, Hkv, D]  NULL in the fp32 mode (which reads q/k/v themselves)
    osc_bf16 * vb;        // [T, Hkv, D]
    bool att_tc;          // tensor-core attention (head_dim % 8 == 0, <= 128; never in the fp32 mode)
    void * xn;            // [T, C] esize bytes per element, as the weights
    void * att;           // [T, Q]
    void * h;             // [T, F]
    float * logit_buf;    // [LOGIT_ROWS, V]
    uint8_t * blas_ws;
    int32_t * h_pos;      // host [T]
    struct osc_att_block * h_blocks; // host [T]
    // capture
    int32_t pass;         // 0 none, 1, 2, 3 done
    uint32_t kinds;
    int64_t n_tok;        // tokens of the current pass
    double * acc_ktk, * acc_vtv, * acc_qqt, * acc_sst, * acc_wsum; // [L, Hkv, D, D] / [L, Hkv]
    double * acc_vatt, * acc_vwsum; // [L, Hkv, D, D] / [L, Hkv]: VATT (pass 1)
    float * vatt_s;       // [VATT_ROWS, T] score block
    double * vatt_lz;     // [VATT_ROWS] log-normalisers of its rows
    double ** v_acc;      // device [L, Hkv]: VATT accumulators
    int64_t * acc_nneg;   // [L, Hkv]
    float * cbuf;         // [Hkv, D, D]
    float * amat;         // [L, Hkv, D, D] fp32 A_h for pass 2
    double * wbuf;        // [Hkv, T] SST (pass 2) or attention-mass (pass 1) weights
    uint8_t * negbuf;     // [Hkv, T]
    // pass-1 Gram matrices (wtype inputs, fp32 chunk sums): slots [K heads | V heads | Q heads]
    int32_t n_kv_slot, n_slot, n_gout;  // KTK + VTV slots, all slots, fp64 outputs per layer
    float * gpart;                      // [GRAM_MAX_CHUNKS + 1, n_slot, D, D]
    const void ** g_ab;                 // device [2 groups][GRAM_MAX_CHUNKS + 1][n_slot]: X pointers
    void ** g_c;                        // device, same shape: part pointers
    const void ** h_ab;                 // host staging of g_ab / g_c
    void ** h_c;
    int32_t * g_first, * g_per;         // device [n_gout]
    double ** g_acc;                    // device [L, n_gout]: fp64 accumulator of each output
    int32_t g_T;                        // T the pointer tables were built for (0 none)
    float * spart;                      // pass 2: [GRAM_MAX_CHUNKS + 1, Hkv, D, D] chunk sums of zᵀv
    int32_t * s_first, * s_per;         // device [Hkv]: 0..Hkv-1, 1
    double ** s_acc;                    // device [L, Hkv]: SST accumulators
    // profile (OSCAR_FWD_PROFILE=1)
    cudaEvent_t * ev;                   // [L, N_STAGES + 1] or NULL
    double stage_ms[N_STAGES];
    cudaEvent_t * moe_ev;               // [L, 4] the sparse MLP's phases (fwd-moe.cuh), or NULL
    double moe_ms[3];
    // layer-major pass
    float * rows;                       // [n_rows, C] hidden states of every row of the pass
    float * keep_k, * keep_v;           // [n_keep, Hkv, D] this layer's calibration K/V (SST), or NULL
    int64_t n_rows, n_keep;
    int64_t layer_tok;                  // tokens of this layer's sums so far
    bool sums_now;                      // the batch in flight feeds the sums
    // simulated quantized cache (oscar_fwd_set_attention), or NULL
    struct osc_kvsim * kvsim;
    // device scoring (oscar_fwd_ref_init / run_scored)
    void * ref_store;                   // [ref_rows, C] reference rows (esize), or NULL
    int64_t ref_rows;
    float * ref_buf;                    // [LOGIT_ROWS, V] reference logits of a chunk
    int32_t * d_next;                   // [LOGIT_ROWS]
    struct oscar_fwd_score * d_scores;  // [LOGIT_ROWS]
    // host hook staging
    float * hq, * hk, * hv, * hatt, * hx;
    float * h_wo;                       // pinned [C, Q] staging of copy_wo (allocated at first use)
    // mixture of experts: which MLP kinds the layers use, the sparse MLP's scratch
    bool has_dense, has_moe;
    float * xr;                         // [T, C] fp32 normed rows for the router (bf16 mode; fp32: xn)
    struct osc_moe_work mw;
};

// ---- small helpers -----------------------------------------------------------------------

template <typename T> static cudaError_t dalloc(struct cuda_fwd * f, T ** p, size_t n, bool weight) {
    *p = NULL;
    if (f->n_allocs == MAX_ALLOCS) return cudaErrorMemoryAllocation;
    const size_t bytes = (n ? n : 1) * sizeof(T);
    cudaError_t e = cudaMalloc((void **) p, bytes);
    if (e != cudaSuccess) return e;
    f->allocs[f->n_allocs++] = *p;
    if (weight) f->weight_bytes += (int64_t) bytes;
    else f->work_bytes += (int64_t) bytes;
    return cudaSuccess;
}

// n elements of the weight / GEMM-activation type (f->esize bytes each).
static cudaError_t dalloc_w(struct cuda_fwd * f, void ** p, size_t n, bool weight) {
    uint8_t * b = NULL;
    const cudaError_t e = dalloc(f, &b, n * f->esize, weight);
    *p = b;
    return e;
}

// Element i of a weight / GEMM-activation buffer.
static void * at(const struct cuda_fwd * f, void * base, size_t i) { return (char *) base + i * f->esize; }

static void note_used(struct cuda_fwd * f) {
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) == cudaSuccess && (int64_t) (tot - fr) > f->used_max) f->used_max = (int64_t) (tot - fr);
}

// Y [T, N] fp32 (+)= X [T, K] . W [N, K]ᵀ, X and W of type f->wtype (bf16, or fp32 in the
// fp32 mode), fp32 accumulation (CUBLAS_COMPUTE_32F, default math mode: no TF32), row-major.
static cublasStatus_t gemm_w(struct cuda_fwd * f, float * Y, const void * X, const void * W, int32_t T, int32_t N,
                             int32_t K, float beta) {
    const float one = 1.0f;
    return cublasGemmEx(f->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &one, W, f->wtype, K, X, f->wtype, K, &beta, Y,
                        CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

// C_b [D, D] = A_b . B_bᵀ (or A_b . B_b) for b < batch, fp32 (CUBLAS_COMPUTE_32F with the
// default math mode: no TF32; not _PEDANTIC, which measured ~4 TFLOP/s here), column-major.
static cublasStatus_t gemm_f32_batched(struct cuda_fwd * f, cublasOperation_t tb, int32_t m, int32_t n, int32_t k,
                                       const float * A, int32_t lda, long long sa, const float * B, int32_t ldb,
                                       long long sb, float beta, float * C, int32_t ldc, long long sc,
                                       int32_t batch) {
    const float one = 1.0f;
    return cublasGemmStridedBatchedEx(f->blas, CUBLAS_OP_N, tb, m, n, k, &one, A, CUDA_R_32F, lda, sa, B, CUDA_R_32F,
                                      ldb, sb, &beta, C, CUDA_R_32F, ldc, sc, batch, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT);
}

// ---- weights -------------------------------------------------------------------------

// dst[0 .. n) = bf16(src[0 .. n)): rounded on the host (RNE, the device conversion's bits for every
// finite value) into two page-locked chunks that alternate, each copied to the device while the next
// is rounded. Half the bytes of an fp32 upload, at the page-locked copy rate (a pageable fp32 upload
// of the Qwen3-8B shape's layers took 5.3 s on an H100).
static enum oscar_status upload_bf16(struct cuda_fwd * f, osc_bf16 * dst, const float * src, size_t n) {
    if (!f->hstage) {
        OSCAR_CUDA_CHECK(cudaMallocHost((void **) &f->hstage, 2 * STAGE_ELEMS * sizeof(uint16_t)));
        for (int k = 0; k < 2; k++) OSCAR_CUDA_CHECK(cudaEventCreateWithFlags(&f->staged[k], cudaEventDisableTiming));
    }
    for (size_t i = 0, k = 0; i < n; i += STAGE_ELEMS, k ^= 1) {
        const size_t m = n - i < STAGE_ELEMS ? n - i : STAGE_ELEMS;
        uint16_t * chunk = f->hstage + k * STAGE_ELEMS;
        OSCAR_CUDA_CHECK(cudaEventSynchronize(f->staged[k])); // the chunk's last copy has left it
        oscar_f32_to_bf16_array(src + i, chunk, m);
        OSCAR_CUDA_CHECK(cudaMemcpyAsync(dst + i, chunk, m * sizeof(uint16_t), cudaMemcpyHostToDevice, f->stream));
        OSCAR_CUDA_CHECK(cudaEventRecord(f->staged[k], f->stream));
    }
    return OSCAR_OK;
}

static enum oscar_status upload_f32(struct cuda_fwd * f, float * dst, const float * src, size_t n) {
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, f->stream));
    return OSCAR_OK;
}

// A weight matrix or embedding: converted to bf16, or copied as is in the fp32 mode.
static enum oscar_status upload_w(struct cuda_fwd * f, void * dst, const float * src, size_t n) {
    if (f->p.fp32) return upload_f32(f, (float *) dst, src, n);
    return upload_bf16(f, (osc_bf16 *) dst, src, n);
}

// Floats (fp32 slab) and matrix elements (wtype slab) of one layer's weights; a layered slot
// (sparse < 0) holds what any layer may need.
static void layer_sizes(const struct cuda_fwd * f, int sparse, size_t * n_norm, size_t * n_mat) {
    const struct oscar_model_config * c = &f->c;
    const size_t C = (size_t) c->n_embd, D = (size_t) c->head_dim, Q = (size_t) c->n_head * D;
    const size_t KV = (size_t) c->n_head_kv * D, F = (size_t) c->n_ff, NQKV = Q + 2 * KV;
    const size_t E = (size_t) c->n_expert, Fe = (size_t) c->n_ff_expert, Fs = (size_t) c->n_ff_shared;
    const bool dense = sparse < 0 ? f->has_dense : sparse == 0, moe = sparse < 0 ? f->has_moe : sparse == 1;
    *n_norm = 2 * C + (c->post_norms ? 2 * C : 0) + (c->qk_norm ? 2 * D : 0) + (c->qkv_bias ? NQKV : 0);
    *n_mat = NQKV * C + C * Q + (dense ? 3 * F * C : 0);
    if (moe) {
        *n_norm += (E + (osc_moe_has_gate_row(c) ? 1 : 0)) * C + (c->expert_bias ? E : 0);
        *n_mat += E * 3 * Fe * C + 3 * Fs * C;
    }
}

static enum oscar_status alloc_weights(struct cuda_fwd * f) {
    const struct oscar_model_config * c = &f->c;
    const size_t C = (size_t) c->n_embd, D = (size_t) c->head_dim, Q = (size_t) c->n_head * D;
    const size_t KV = (size_t) c->n_head_kv * D, F = (size_t) c->n_ff, V = (size_t) c->n_vocab;
    const size_t NQKV = Q + 2 * KV, E = (size_t) c->n_expert, Fe = (size_t) c->n_ff_expert;
    const size_t Fs = (size_t) c->n_ff_shared;
    f->layers = (struct dlayer *) calloc((size_t) c->n_layer, sizeof(struct dlayer));
    if (!f->layers) return osc_error(OSCAR_ERR_NOMEM, "forward-cuda: out of host memory");
    OSCAR_CUDA_CHECK(dalloc_w(f, &f->embd, V * C, true));
    f->out_w = f->embd;
    if (!c->tied_embeddings && !f->p.layered) OSCAR_CUDA_CHECK(dalloc_w(f, &f->out_w, V * C, true));
    OSCAR_CUDA_CHECK(dalloc(f, &f->out_norm, C, true));
    // one slab per kind of tensor keeps the allocation count independent of L
    const size_t L = f->p.layered ? 2 : (size_t) c->n_layer; // layered: the two slots
    size_t tot_norm = 0, tot_mat = 0, n_norm, n_mat;
    for (size_t l = 0; l < L; l++) {
        layer_sizes(f, f->p.layered ? -1 : oscar_layer_is_moe(c, (int32_t) l), &n_norm, &n_mat);
        tot_norm += n_norm, tot_mat += n_mat;
    }
    float * norms;
    void * mats;
    OSCAR_CUDA_CHECK(dalloc(f, &norms, tot_norm, true));
    OSCAR_CUDA_CHECK(dalloc_w(f, &mats, tot_mat, true));
    float * p = norms;
    size_t m = 0; // element offset in mats
    for (size_t l = 0; l < L; l++) {
        struct dlayer * w = f->p.layered ? &f->slots[l] : &f->layers[l];
        const int sparse = f->p.layered ? -1 : oscar_layer_is_moe(c, (int32_t) l);
        const bool dense = sparse < 0 ? f->has_dense : sparse == 0, moe = sparse < 0 ? f->has_moe : sparse == 1;
        w->attn_norm = p, p += C;
        w->ffn_norm = p, p += C;
        if (c->post_norms) w->attn_post_norm = p, p += C, w->ffn_post_norm = p, p += C;
        if (c->qk_norm) w->q_norm = p, p += D, w->k_norm = p, p += D;
        if (c->qkv_bias) w->bqkv = p, p += NQKV;
        w->wqkv = at(f, mats, m), m += NQKV * C;
        w->wo = at(f, mats, m), m += C * Q;
        if (dense) {
            w->wgu = at(f, mats, m), m += 2 * F * C;
            w->wdown = at(f, mats, m), m += C * F;
        }
        if (moe) {
            w->moe.router = p, p += (E + (osc_moe_has_gate_row(c) ? 1 : 0)) * C;
            if (c->expert_bias) w->moe.exp_bias = p, p += E;
            w->moe.exp_gu = at(f, mats, m), m += E * 2 * Fe * C;
            w->moe.exp_down = at(f, mats, m), m += E * C * Fe;
            if (Fs > 0) {
                w->moe.sh_gu = at(f, mats, m), m += 2 * Fs * C;
                w->moe.sh_down = at(f, mats, m), m += C * Fs;
            }
        }
    }
    return OSCAR_OK;
}

static enum oscar_status upload_layer(struct cuda_fwd * f, const struct dlayer * d, const struct oscar_layer_weights * w);

// A [V, C] tensor (the LM head if output) into dst: the model's resident copy, else a copy read
// from its file for this upload only (oscar_model_open_lazy: one such block on the host at a time).
static enum oscar_status upload_vocab(struct cuda_fwd * f, void * dst, const struct oscar_model * mdl, bool output) {
    const size_t n = (size_t) f->c.n_vocab * (size_t) f->c.n_embd;
    const float * src = output ? mdl->output : mdl->tok_embd;
    float * copy = NULL;
    enum oscar_status st = src ? OSCAR_OK : oscar_model_read_vocab(mdl, output, &copy);
    if (st == OSCAR_OK) st = upload_w(f, dst, src ? src : copy, n);
    if (st == OSCAR_OK) OSCAR_CUDA_TRY(cudaStreamSynchronize(f->stream)); // before the copy goes
out:
    free(copy);
    return st;
}

// Layer l: the resident one, or a copy read for this upload only (a model opened lazily).
static enum oscar_status upload_model_layer(struct cuda_fwd * f, const struct oscar_model * mdl, int32_t l) {
    if (oscar_model_layer_resident(mdl, l)) return upload_layer(f, &f->layers[l], &mdl->layers[l]);
    float * block = NULL;
    struct oscar_layer_weights w;
    enum oscar_status st = oscar_model_read_layer(mdl, l, &block, &w);
    if (st == OSCAR_OK) st = upload_layer(f, &f->layers[l], &w);
    if (st == OSCAR_OK) OSCAR_CUDA_TRY(cudaStreamSynchronize(f->stream)); // before the copy goes
out:
    free(block);
    return st;
}

static enum oscar_status upload_model(struct cuda_fwd * f, const struct oscar_model * mdl) {
    const struct oscar_model_config * c = &f->c;
    const size_t C = (size_t) c->n_embd;
    enum oscar_status st = OSCAR_OK;
#define UP(call) do { st = (call); if (st != OSCAR_OK) return st; } while (0)
    UP(upload_vocab(f, f->embd, mdl, false));
    if (!c->tied_embeddings && !f->p.layered) UP(upload_vocab(f, f->out_w, mdl, true));
    UP(upload_f32(f, f->out_norm, mdl->output_norm, C));
    for (int32_t l = 0; l < c->n_layer && !f->p.layered; l++) UP(upload_model_layer(f, mdl, l));
#undef UP
    OSCAR_CUDA_CHECK(cudaStreamSynchronize(f->stream));
    return st;
}

// A sparse layer's MLP weights (model.h's stacked experts) into d.
static enum oscar_status upload_moe(struct cuda_fwd * f, const struct osc_moe_dlayer * d,
                                    const struct oscar_layer_weights * w) {
    const struct oscar_model_config * c = &f->c;
    const size_t C = (size_t) c->n_embd, E = (size_t) c->n_expert, Fe = (size_t) c->n_ff_expert;
    const size_t Fs = (size_t) c->n_ff_shared;
    const bool gate_row = osc_moe_has_gate_row(c);
    enum oscar_status st = OSCAR_OK;
    if (!d->exp_gu || !w->exp_gate || !w->exp_up || !w->exp_down || (c->expert_bias && !w->exp_bias) ||
        (Fs > 0 && (!w->sh_gate || !w->sh_up || !w->sh_down || (gate_row && !w->sh_scale))))
        return osc_error(OSCAR_ERR_INVALID, "forward-cuda: a sparse layer's router, experts or shared expert is "
                         "missing");
#define UP(call) do { st = (call); if (st != OSCAR_OK) return st; } while (0)
    UP(upload_f32(f, d->router, w->router, E * C));
    if (gate_row) UP(upload_f32(f, d->router + E * C, w->sh_scale, C));
    if (c->expert_bias) UP(upload_f32(f, d->exp_bias, w->exp_bias, E));
    for (size_t e = 0; e < E; e++) { // each expert's gate rows, then its up rows
        UP(upload_w(f, at(f, d->exp_gu, e * 2 * Fe * C), w->exp_gate + e * Fe * C, Fe * C));
        UP(upload_w(f, at(f, d->exp_gu, (e * 2 + 1) * Fe * C), w->exp_up + e * Fe * C, Fe * C));
    }
    UP(upload_w(f, d->exp_down, w->exp_down, E * C * Fe));
    if (Fs > 0) {
        UP(upload_w(f, d->sh_gu, w->sh_gate, Fs * C));
        UP(upload_w(f, at(f, d->sh_gu, Fs * C), w->sh_up, Fs * C));
        UP(upload_w(f, d->sh_down, w->sh_down, C * Fs));
    }
#undef UP
    return st;
}

// One layer's host fp32 weights into d (bf16, or fp32 in the fp32 mode).
static enum oscar_status upload_layer(struct cuda_fwd * f, const struct dlayer * d, const struct oscar_layer_weights * w) {
    const struct oscar_model_config * c = &f->c;
    const size_t C = (size_t) c->n_embd, D = (size_t) c->head_dim, Q = (size_t) c->n_head * D;
    const size_t KV = (size_t) c->n_head_kv * D, F = (size_t) c->n_ff;
    enum oscar_status st = OSCAR_OK;
#define UP(call) do { st = (call); if (st != OSCAR_OK) return st; } while (0)
    {
        UP(upload_f32(f, d->attn_norm, w->attn_norm, C));
        UP(upload_f32(f, d->ffn_norm, w->ffn_norm, C));
        if (c->post_norms) {
            if (!w->attn_post_norm || !w->ffn_post_norm)
                return osc_error(OSCAR_ERR_INVALID, "forward-cuda: post_norms set but a sandwich norm is missing");
            UP(upload_f32(f, d->attn_post_norm, w->attn_post_norm, C));
            UP(upload_f32(f, d->ffn_post_norm, w->ffn_post_norm, C));
        }
        if (c->qk_norm) {
            UP(upload_f32(f, d->q_norm, w->q_norm, D));
            UP(upload_f32(f, d->k_norm, w->k_norm, D));
        }
        if (c->qkv_bias) {
            UP(upload_f32(f, d->bqkv, w->bq, Q));
            UP(upload_f32(f, d->bqkv + Q, w->bk, KV));
            UP(upload_f32(f, d->bqkv + Q + KV, w->bv, KV));
        }
        UP(upload_w(f, d->wqkv, w->wq, Q * C));
        UP(upload_w(f, at(f, d->wqkv, Q * C), w->wk, KV * C));
        UP(upload_w(f, at(f, d->wqkv, (Q + KV) * C), w->wv, KV * C));
        UP(upload_w(f, d->wo, w->wo, C * Q));
        if (w->router) return upload_moe(f, &d->moe, w);
        if (!d->wgu || !w->w_gate || !w->w_up || !w->w_down)
            return osc_error(OSCAR_ERR_INVALID, "forward-cuda: a dense layer's MLP is missing");
        UP(upload_w(f, d->wgu, w->w_gate, F * C));
        UP(upload_w(f, at(f, d->wgu, F * C), w->w_up, F * C));
        UP(upload_w(f, d->wdown, w->w_down, C * F));
    }
#undef UP
    return st;
}

// A weight matrix or embedding of N(0, 0.02^2) values: bf16, or fp32 in the fp32 mode (the
// same values before rounding).
static cudaError_t random_w(struct cuda_fwd * f, void * dst, int64_t n, uint64_t seed, uint64_t tensor) {
    if (f->p.fp32) return osc_fwd_random_f32((float *) dst, n, seed, tensor, false, f->stream);
    return osc_fwd_random_bf16((osc_bf16 *) dst, n, seed, tensor, f->stream);
}

static enum oscar_status random_layer(struct cuda_fwd * f, const struct dlayer * d, int32_t l, uint64_t seed);

// A norm's weights: ones, or 1 - norm_offset where the norm multiplies by norm_offset + w (the
// factor is 1 either way, as in lib/model's random models).
static cudaError_t random_norm(struct cuda_fwd * f, float * dst, int64_t n, uint64_t seed, uint64_t tensor) {
    if (f->c.norm_offset == 0.0f) return osc_fwd_random_f32(dst, n, seed, tensor, true, f->stream);
    return osc_fwd_fill_f32(dst, n, 1.0f - f->c.norm_offset, f->stream);
}

// Tensor ids for the generator: 1 + 16 l + kind (0 for the embedding, 15 for the LM head).
static enum oscar_status random_model(struct cuda_fwd * f, uint64_t seed) {
    const struct oscar_model_config * c = &f->c;
    const int64_t C = c->n_embd, V = c->n_vocab;
    cudaStream_t s = f->stream;
    OSCAR_CUDA_CHECK(random_w(f, f->embd, V * C, seed, 0));
    if (!c->tied_embeddings && !f->p.layered) OSCAR_CUDA_CHECK(random_w(f, f->out_w, V * C, seed, 15));
    OSCAR_CUDA_CHECK(random_norm(f, f->out_norm, C, seed, 14));
    for (int32_t l = 0; l < c->n_layer && !f->p.layered; l++) {
        enum oscar_status st = random_layer(f, &f->layers[l], l, seed);
        if (st != OSCAR_OK) return st;
    }
    OSCAR_CUDA_CHECK(cudaStreamSynchronize(s));
    return OSCAR_OK;
}

// Layer l's random weights into d (the tensor ids of random_model).
static enum oscar_status random_layer(struct cuda_fwd * f, const struct dlayer * d, int32_t l, uint64_t seed) {
    const struct oscar_model_config * c = &f->c;
    const int64_t C = c->n_embd, D = c->head_dim, Q = (int64_t) c->n_head * D, KV = (int64_t) c->n_head_kv * D;
    const int64_t F = c->n_ff, NQKV = Q + 2 * KV;
    cudaStream_t s = f->stream;
    {
        const uint64_t id = 1 + 16 * (uint64_t) l;
        OSCAR_CUDA_CHECK(random_norm(f, d->attn_norm, C, seed, id + 0));
        OSCAR_CUDA_CHECK(random_norm(f, d->ffn_norm, C, seed, id + 1));
        if (c->qk_norm) {
            OSCAR_CUDA_CHECK(random_norm(f, d->q_norm, D, seed, id + 2));
            OSCAR_CUDA_CHECK(random_norm(f, d->k_norm, D, seed, id + 3));
        }
        if (c->post_norms) {
            OSCAR_CUDA_CHECK(random_norm(f, d->attn_post_norm, C, seed, id + 9));
            OSCAR_CUDA_CHECK(random_norm(f, d->ffn_post_norm, C, seed, id + 10));
        }
        if (c->qkv_bias) OSCAR_CUDA_CHECK(osc_fwd_random_f32(d->bqkv, NQKV, seed, id + 4, false, s));
        OSCAR_CUDA_CHECK(random_w(f, d->wqkv, NQKV * C, seed, id + 5));
        OSCAR_CUDA_CHECK(random_w(f, d->wo, C * Q, seed, id + 6));
        if (oscar_layer_is_moe(c, l)) {
            // the sparse MLP's tensors: ids of their own (bit 40), 16 per layer as above
            const int64_t E = c->n_expert, Fe = c->n_ff_expert, Fs = c->n_ff_shared;
            const uint64_t mid = id + ((uint64_t) 1 << 40);
            const int64_t NR = E + (osc_moe_has_gate_row(c) ? 1 : 0);
            OSCAR_CUDA_CHECK(osc_fwd_random_f32(d->moe.router, NR * C, seed, mid + 0, false, s));
            if (c->expert_bias) OSCAR_CUDA_CHECK(osc_fwd_random_f32(d->moe.exp_bias, E, seed, mid + 1, false, s));
            OSCAR_CUDA_CHECK(random_w(f, d->moe.exp_gu, E * 2 * Fe * C, seed, mid + 2));
            OSCAR_CUDA_CHECK(random_w(f, d->moe.exp_down, E * C * Fe, seed, mid + 3));
            if (Fs > 0) {
                OSCAR_CUDA_CHECK(random_w(f, d->moe.sh_gu, 2 * Fs * C, seed, mid + 4));
                OSCAR_CUDA_CHECK(random_w(f, d->moe.sh_down, C * Fs, seed, mid + 5));
            }
        } else {
            OSCAR_CUDA_CHECK(random_w(f, d->wgu, 2 * F * C, seed, id + 7));
            OSCAR_CUDA_CHECK(random_w(f, d->wdown, C * F, seed, id + 8));
        }
    }
    return OSCAR_OK;
}

// ---- init / free ---------------------------------------------------------------------------

static void cuda_free(void * ctx) {
    struct cuda_fwd * f = (struct cuda_fwd *) ctx;
    if (!f) return;
    if (f->stream) cudaStreamSynchronize(f->stream);
    for (int32_t i = 0; i < f->n_allocs; i++) cudaFree(f->allocs[i]);
    if (f->blas) cublasDestroy(f->blas);
    if (f->stream) cudaStreamDestroy(f->stream);
    if (f->ev)
        for (int32_t i = 0; i < f->c.n_layer * (N_STAGES + 1); i++)
            if (f->ev[i]) cudaEventDestroy(f->ev[i]);
    if (f->moe_ev)
        for (int32_t i = 0; i < f->c.n_layer * 4; i++)
            if (f->moe_ev[i]) cudaEventDestroy(f->moe_ev[i]);
    free(f->ev), free(f->moe_ev), free(f->h_ab), free(f->h_c);
    free(f->layers), free(f->h_pos), free(f->h_blocks);
    osc_kvsim_free(f->kvsim);
    cudaFreeHost(f->hq), cudaFreeHost(f->hk), cudaFreeHost(f->hv), cudaFreeHost(f->hatt), cudaFreeHost(f->hx);
    cudaFreeHost(f->h_wo);
    cudaFreeHost(f->mw.h_cnt);
    cudaFreeHost(f->hstage);
    for (int k = 0; k < 2; k++)
        if (f->staged[k]) cudaEventDestroy(f->staged[k]);
    cudaGetLastError();
    free(f);
}

static enum oscar_status check_config(const struct oscar_model_config * c, const struct oscar_fwd_params * p) {
    if (c->n_layer <= 0 || c->n_embd <= 0 || c->n_head <= 0 || c->n_head_kv <= 0 || c->head_dim <= 0 ||
        c->n_ff <= 0 || c->n_vocab <= 0 || c->n_head % c->n_head_kv != 0)
        return osc_error(OSCAR_ERR_INVALID, "forward-cuda: bad model shape");
    if (c->head_dim % 2 != 0 || c->head_dim > OSC_FWD_MAX_HEAD_DIM)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "forward-cuda: head_dim %d (even, <= %d)", c->head_dim,
                         OSC_FWD_MAX_HEAD_DIM);
    if (!(c->rope_theta > 0.0f) || !(c->rms_eps >= 0.0f))
        return osc_error(OSCAR_ERR_INVALID, "forward-cuda: bad rope_theta or rms_eps");
    if (c->n_expert < 0 || c->n_expert > OSCAR_MAX_EXPERTS ||
        (c->n_expert > 0 && (c->n_expert_used <= 0 || c->n_expert_used > c->n_expert || c->n_ff_expert <= 0 ||
                             c->n_ff_shared < 0 || c->moe_step <= 0 || c->post_norms)))
        return osc_error(OSCAR_ERR_INVALID, "forward-cuda: bad experts (%d experts, top-%d, ff %d, shared ff %d, "
                         "step %d, sandwich norms %d)", c->n_expert, c->n_expert_used, c->n_ff_expert,
                         c->n_ff_shared, c->moe_step, (int) c->post_norms);
    if (c->n_expert > 0 && c->expert_gating == OSCAR_GATING_SIGMOID) {
        const int32_t G = c->n_expert_group > 1 ? c->n_expert_group : 1;
        if (G > OSC_MOE_MAX_GROUPS || c->n_expert % G != 0 || (G > 1 && (c->n_expert / G < 2 || c->n_group_used < 1 ||
            c->n_group_used > G || c->n_expert_used > c->n_group_used * (c->n_expert / G))))
            return osc_error(OSCAR_ERR_UNSUPPORTED, "forward-cuda: expert groups (n_group %d, topk_group %d, %d "
                             "experts, top-%d): groups of >= 2 that hold the top-k, at most %d groups",
                             c->n_expert_group, c->n_group_used, c->n_expert, c->n_expert_used, OSC_MOE_MAX_GROUPS);
    } else if (c->n_expert > 0 && c->expert_gating != OSCAR_GATING_SOFTMAX) {
        return osc_error(OSCAR_ERR_INVALID, "forward-cuda: unknown expert gating %d", (int) c->expert_gating);
    }
    // the rest of the layer is the CPU pass's (lib/model/forward.c check_model: the same ranges)
    if (c->rope_dim < 0 || c->rope_dim > c->head_dim || c->rope_dim % 2 != 0 || c->sliding_window < 0 ||
        c->swa_pattern < 0 || !(c->rope_theta_swa >= 0.0f) || !(c->attn_scale >= 0.0f) || !(c->norm_offset >= 0.0f) ||
        (c->act != OSCAR_ACT_SILU && c->act != OSCAR_ACT_GELU_TANH))
        return osc_error(OSCAR_ERR_INVALID, "forward-cuda: bad rope_dim %d, sliding_window %d, swa_pattern %d, local "
                         "RoPE base, score scale, norm offset or activation", c->rope_dim, c->sliding_window,
                         c->swa_pattern);
    if (p->max_tokens <= 0) return osc_error(OSCAR_ERR_INVALID, "forward-cuda: max_tokens %d", p->max_tokens);
    if (p->attention && !p->attention->attend)
        return osc_error(OSCAR_ERR_INVALID, "forward-cuda: attention override without a callback");
    if (p->stats) {
        const struct oscar_stats_params sp = oscar_stats_get_params(p->stats);
        if (sp.n_layer != c->n_layer || sp.n_head != c->n_head || sp.n_head_kv != c->n_head_kv ||
            sp.head_dim != c->head_dim)
            return osc_error(OSCAR_ERR_INVALID, "forward-cuda: stats shape does not match the model");
        if (oscar_stats_phase(p->stats) == 3)
            return osc_error(OSCAR_ERR_INVALID, "forward-cuda: the stats accumulator is already finished");
    }
    return OSCAR_OK;
}

// Slot and output tables of the pass-1 Gram matrices (see capture_pass1).
static enum oscar_status alloc_gram(struct cuda_fwd * f) {
    const struct oscar_model_config * c = &f->c;
    const int32_t H = c->n_head_kv, Hq = c->n_head, g = Hq / H, L = c->n_layer;
    const int64_t DD = (int64_t) c->head_dim * c->head_dim, HDD = H * DD;
    const uint32_t k = f->kinds;
    f->n_kv_slot = ((k & OSCAR_STATS_KTK) ? H : 0) + ((k & OSCAR_STATS_VTV) ? H : 0);
    f->n_slot = f->n_kv_slot + ((k & OSCAR_STATS_QQT) ? Hq : 0);
    f->n_gout = f->n_kv_slot + ((k & OSCAR_STATS_QQT) ? H : 0);
    if (k & (OSCAR_STATS_SST | OSCAR_STATS_VATT)) {   // weighted Gram sums: chunk buffer + pointer tables
        int32_t idx[OSC_FWD_MAX_HEAD_DIM], one[OSC_FWD_MAX_HEAD_DIM];
        double ** sa = (double **) calloc((size_t) L * H, sizeof(double *));
        double ** va = (double **) calloc((size_t) L * H, sizeof(double *));
        if (!sa || !va || H > OSC_FWD_MAX_HEAD_DIM) {
            free(sa), free(va);
            return osc_error(OSCAR_ERR_NOMEM, "forward-cuda: out of host memory (or > %d KV heads)",
                             OSC_FWD_MAX_HEAD_DIM);
        }
        for (int32_t h = 0; h < H; h++) idx[h] = h, one[h] = 1;
        for (int32_t l = 0; l < L; l++)
            for (int32_t h = 0; h < H; h++) {
                if (f->acc_sst) sa[(size_t) l * H + h] = f->acc_sst + l * HDD + h * DD;
                if (f->acc_vatt) va[(size_t) l * H + h] = f->acc_vatt + l * HDD + h * DD;
            }
        cudaError_t e = dalloc(f, &f->spart, (size_t) (GRAM_MAX_CHUNKS + 1) * HDD, false);
        if (e == cudaSuccess) e = dalloc(f, &f->s_first, (size_t) H, false);
        if (e == cudaSuccess) e = dalloc(f, &f->s_per, (size_t) H, false);
        if (e == cudaSuccess) e = cudaMemcpy(f->s_first, idx, H * sizeof(int32_t), cudaMemcpyHostToDevice);
        if (e == cudaSuccess) e = cudaMemcpy(f->s_per, one, H * sizeof(int32_t), cudaMemcpyHostToDevice);
        if (e == cudaSuccess && f->acc_sst) e = dalloc(f, &f->s_acc, (size_t) L * H, false);
        if (e == cudaSuccess && f->acc_sst)
            e = cudaMemcpy(f->s_acc, sa, (size_t) L * H * sizeof(double *), cudaMemcpyHostToDevice);
        if (e == cudaSuccess && f->acc_vatt) e = dalloc(f, &f->v_acc, (size_t) L * H, false);
        if (e == cudaSuccess && f->acc_vatt)
            e = cudaMemcpy(f->v_acc, va, (size_t) L * H * sizeof(double *), cudaMemcpyHostToDevice);
        free(sa), free(va);
        OSCAR_CUDA_CHECK(e);
    }
    if (f->n_slot == 0) return OSCAR_OK;
    const size_t n_ptr = 2 * (size_t) (GRAM_MAX_CHUNKS + 1) * f->n_slot;
    OSCAR_CUDA_CHECK(dalloc(f, &f->gpart, (size_t) (GRAM_MAX_CHUNKS + 1) * f->n_slot * DD, false));
    OSCAR_CUDA_CHECK(dalloc(f, &f->g_ab, n_ptr, false));
    OSCAR_CUDA_CHECK(dalloc(f, &f->g_c, n_ptr, false));
    OSCAR_CUDA_CHECK(dalloc(f, &f->g_first, (size_t) f->n_gout, false));
    OSCAR_CUDA_CHECK(dalloc(f, &f->g_per, (size_t) f->n_gout, false));
    OSCAR_CUDA_CHECK(dalloc(f, &f->g_acc, (size_t) L * f->n_gout, false));
    f->h_ab = (const void **) calloc(n_ptr, sizeof(void *));
    f->h_c = (void **) calloc(n_ptr, sizeof(void *));
    int32_t * first = (int32_t *) calloc((size_t) f->n_gout, sizeof(int32_t));
    int32_t * per = (int32_t *) calloc((size_t) f->n_gout, sizeof(int32_t));
    double ** acc = (double **) calloc((size_t) L * f->n_gout, sizeof(double *));
    enum oscar_status st = OSCAR_OK;
    if (!f->h_ab || !f->h_c || !first || !per || !acc) {
        st = osc_error(OSCAR_ERR_NOMEM, "forward-cuda: out of host memory");
        goto out;
    }
    for (int32_t l = 0; l < L; l++) {
        int32_t o = 0, slot = 0;
        double ** a = acc + (size_t) l * f->n_gout;
        for (int32_t kind = 0; kind < 3; kind++) {
            double * base = kind == 0 ? f->acc_ktk : kind == 1 ? f->acc_vtv : f->acc_qqt;
            if (!base) continue;
            for (int32_t h = 0; h < H; h++, o++) {
                a[o] = base + l * HDD + h * DD;
                first[o] = slot, per[o] = kind == 2 ? g : 1;
                slot += per[o];
            }
        }
    }
    OSCAR_CUDA_TRY(cudaMemcpy(f->g_first, first, f->n_gout * sizeof(int32_t), cudaMemcpyHostToDevice));
    OSCAR_CUDA_TRY(cudaMemcpy(f->g_per, per, f->n_gout * sizeof(int32_t), cudaMemcpyHostToDevice));
    OSCAR_CUDA_TRY(cudaMemcpy(f->g_acc, acc, (size_t) L * f->n_gout * sizeof(double *), cudaMemcpyHostToDevice));
out:
    free(first), free(per), free(acc);
    return st;
}

// rope_freqs: the model's GGUF frequency divisors, or NULL.
// Pinned host copies of q/k/v (and the attention, the residual) for the host hook and a host
// attention override, so the per-layer copies run at full link speed; what is missing only.
static enum oscar_status alloc_host_staging(struct cuda_fwd * f) {
    const size_t T = (size_t) f->max_tokens, Q = (size_t) f->c.n_head * f->c.head_dim;
    const size_t KV = (size_t) f->c.n_head_kv * f->c.head_dim, C = (size_t) f->c.n_embd;
    const bool hook_all = f->p.hook && !f->p.hook->qkv_only;
    if (!f->p.hook && !f->p.attention) return OSCAR_OK;
    if ((!f->hq && cudaMallocHost((void **) &f->hq, T * Q * sizeof(float)) != cudaSuccess) ||
        (!f->hk && cudaMallocHost((void **) &f->hk, T * KV * sizeof(float)) != cudaSuccess) ||
        (!f->hv && cudaMallocHost((void **) &f->hv, T * KV * sizeof(float)) != cudaSuccess) ||
        ((hook_all || f->p.attention) && !f->hatt &&
         cudaMallocHost((void **) &f->hatt, T * Q * sizeof(float)) != cudaSuccess) ||
        (hook_all && !f->hx && cudaMallocHost((void **) &f->hx, T * C * sizeof(float)) != cudaSuccess))
        return osc_error(OSCAR_ERR_NOMEM, "forward-cuda: out of pinned host memory for hook staging");
    return OSCAR_OK;
}

static enum oscar_status alloc_workspace(struct cuda_fwd * f, const float * rope_freqs) {
    const struct oscar_model_config * c = &f->c;
    const size_t T = (size_t) f->max_tokens, C = (size_t) c->n_embd, D = (size_t) c->head_dim;
    const size_t Q = (size_t) c->n_head * D, KV = (size_t) c->n_head_kv * D, F = (size_t) c->n_ff;
    const size_t NQKV = Q + 2 * KV, L = (size_t) c->n_layer, H = (size_t) c->n_head_kv;
    // the MLP's widest GEMM output and activation per token: the dense MLP's, or the experts'
    // (osc_moe_rows rows of 2 Fe: K per token and the padding, rounded up to whole tokens) and
    // the shared expert's
    const size_t RM = f->has_moe ? osc_moe_rows(c, T) : 0;
    const size_t KFe = f->has_moe ? (RM * (size_t) c->n_ff_expert + T - 1) / T : 0;
    const size_t Fs = f->has_moe ? (size_t) c->n_ff_shared : 0;
    const size_t FD = f->has_dense ? F : 0, FH0 = FD > KFe ? FD : KFe, FH = FH0 > Fs ? FH0 : Fs;
    const size_t wide0 = NQKV > 2 * FH ? NQKV : 2 * FH, wide = wide0 > C ? wide0 : C; // C: a sandwich norm's input
    const size_t lr = T < (size_t) LOGIT_ROWS ? T : (size_t) LOGIT_ROWS;
    OSCAR_CUDA_CHECK(dalloc(f, &f->d_tok, T, false));
    OSCAR_CUDA_CHECK(dalloc(f, &f->d_pos, T, false));
    OSCAR_CUDA_CHECK(dalloc(f, &f->d_blocks, T, false));
    if (!f->p.layered) OSCAR_CUDA_CHECK(dalloc(f, &f->x, T * C, false)); // layered: x points into rows
    OSCAR_CUDA_CHECK(dalloc(f, &f->big, T * wide, false));
    OSCAR_CUDA_CHECK(dalloc(f, &f->q, T * Q, false));
    OSCAR_CUDA_CHECK(dalloc(f, &f->k, T * KV, false));
    OSCAR_CUDA_CHECK(dalloc(f, &f->v, T * KV, false));
    if (!f->p.fp32) { // the fp32 mode reads q/k/v themselves
        OSCAR_CUDA_CHECK(dalloc(f, &f->qb, T * Q, false));
        OSCAR_CUDA_CHECK(dalloc(f, &f->kb, T * KV, false));
        OSCAR_CUDA_CHECK(dalloc(f, &f->vb, T * KV, false));
    }
    OSCAR_CUDA_CHECK(dalloc_w(f, &f->xn, T * C, false));
    OSCAR_CUDA_CHECK(dalloc_w(f, &f->att, T * Q, false));
    OSCAR_CUDA_CHECK(dalloc_w(f, &f->h, T * FH, false));
    if (!f->p.layered) OSCAR_CUDA_CHECK(dalloc(f, &f->logit_buf, lr * (size_t) c->n_vocab, false));
    OSCAR_CUDA_CHECK(dalloc(f, &f->blas_ws, BLAS_WS_BYTES, false));
    OSCAR_CUDA_CHECK(dalloc(f, &f->inv_freq, D / 2, false));
    if (c->rope_theta_swa > 0.0f) OSCAR_CUDA_CHECK(dalloc(f, &f->inv_freq_swa, D / 2, false));
    if (f->p.stats) {
        const uint32_t k = f->kinds;
        const size_t mats = L * H * D * D;
        if (k & OSCAR_STATS_KTK) OSCAR_CUDA_CHECK(dalloc(f, &f->acc_ktk, mats, false));
        if (k & OSCAR_STATS_VTV) OSCAR_CUDA_CHECK(dalloc(f, &f->acc_vtv, mats, false));
        if (k & OSCAR_STATS_QQT) OSCAR_CUDA_CHECK(dalloc(f, &f->acc_qqt, mats, false));
        if (k & OSCAR_STATS_SST) {
            OSCAR_CUDA_CHECK(dalloc(f, &f->acc_sst, mats, false));
            OSCAR_CUDA_CHECK(dalloc(f, &f->acc_wsum, L * H, false));
            OSCAR_CUDA_CHECK(dalloc(f, &f->acc_nneg, L * H, false));
            OSCAR_CUDA_CHECK(dalloc(f, &f->amat, mats, false));
            OSCAR_CUDA_CHECK(dalloc(f, &f->negbuf, H * T, false));
        }
        if (k & OSCAR_STATS_VATT) {
            OSCAR_CUDA_CHECK(dalloc(f, &f->acc_vatt, mats, false));
            OSCAR_CUDA_CHECK(dalloc(f, &f->acc_vwsum, L * H, false));
            OSCAR_CUDA_CHECK(dalloc(f, &f->vatt_s, (size_t) VATT_ROWS * T, false));
            OSCAR_CUDA_CHECK(dalloc(f, &f->vatt_lz, (size_t) VATT_ROWS, false));
        }
        if (k & (OSCAR_STATS_SST | OSCAR_STATS_VATT)) OSCAR_CUDA_CHECK(dalloc(f, &f->wbuf, H * T, false));
        OSCAR_CUDA_CHECK(dalloc(f, &f->cbuf, H * D * D, false));
        enum oscar_status st = alloc_gram(f);
        if (st != OSCAR_OK) return st;
    }
    f->h_pos = (int32_t *) malloc(T * sizeof(int32_t));
    f->h_blocks = (struct osc_att_block *) malloc(T * sizeof(struct osc_att_block));
    const enum oscar_status staged = alloc_host_staging(f);
    if (staged != OSCAR_OK) return staged;
    if (!f->h_pos || !f->h_blocks) return osc_error(OSCAR_ERR_NOMEM, "forward-cuda: out of host memory");
    // the CPU pass's frequencies (RoPE scaling, YaRN's included, GGUF rope_freqs divisors; the sliding
    // layers' own base); YaRN's attention factor goes to the epilogue per layer
    float inv[OSC_FWD_MAX_HEAD_DIM / 2];
    const size_t R2 = (size_t) oscar_rope_dim(c) / 2;
    oscar_rope_inv_freq(c, rope_freqs, inv);
    OSCAR_CUDA_CHECK(cudaMemcpy(f->inv_freq, inv, R2 * sizeof(float), cudaMemcpyHostToDevice));
    for (int32_t l = 0; f->inv_freq_swa && l < c->n_layer; l++) // the first sliding layer's (all of them are alike)
        if (oscar_layer_sliding(c, l)) {
            oscar_rope_inv_freq_layer(c, l, rope_freqs, inv);
            OSCAR_CUDA_CHECK(cudaMemcpy(f->inv_freq_swa, inv, R2 * sizeof(float), cudaMemcpyHostToDevice));
            break;
        }
    return OSCAR_OK;
}

// The sparse MLP's scratch for max_tokens tokens (fwd-moe.cuh); f->big and f->h were sized
// for its gate/up outputs and activations.
static enum oscar_status alloc_moe_work(struct cuda_fwd * f) {
    const struct oscar_model_config * c = &f->c;
    const size_t T = (size_t) f->max_tokens, C = (size_t) c->n_embd, E = (size_t) c->n_expert;
    const size_t n = T * (size_t) c->n_expert_used, NR = E + (osc_moe_has_gate_row(c) ? 1 : 0);
    const size_t R = osc_moe_rows(c, T);
    struct osc_moe_work * k = &f->mw;
    if (!f->p.fp32) OSCAR_CUDA_CHECK(dalloc(f, &f->xr, T * C, false));
    OSCAR_CUDA_CHECK(dalloc(f, &k->logit, T * NR, false));
    OSCAR_CUDA_CHECK(dalloc(f, &k->choice, T * E, false));
    OSCAR_CUDA_CHECK(dalloc(f, &k->top_e, n, false));
    OSCAR_CUDA_CHECK(dalloc(f, &k->top_w, n, false));
    OSCAR_CUDA_CHECK(dalloc(f, &k->row_of, n, false));
    OSCAR_CUDA_CHECK(dalloc(f, &k->cnt, E, false));
    OSCAR_CUDA_CHECK(dalloc_w(f, &k->xg, R * C, false));
    OSCAR_CUDA_CHECK(dalloc(f, &k->ye, R * C, false));
    OSCAR_CUDA_CHECK(cudaMallocHost((void **) &k->h_cnt, E * sizeof(int32_t)));
    k->gu = f->big, k->h = f->h;
    return OSCAR_OK;
}

static enum oscar_status zero_pass_acc(struct cuda_fwd * f);
static enum oscar_status load_amat(struct cuda_fwd * f);

static enum oscar_status cuda_init(const struct oscar_model * m, const struct oscar_model_config * cfg, uint64_t seed,
                                   const struct oscar_fwd_params * p, void ** ctx) {
    *ctx = NULL;
    const struct oscar_model_config * c = m ? &m->config : cfg;
    enum oscar_status st = check_config(c, p);
    if (st != OSCAR_OK) return st;
    struct cuda_fwd * f = (struct cuda_fwd *) calloc(1, sizeof *f);
    if (!f) return osc_error(OSCAR_ERR_NOMEM, "forward-cuda: out of host memory");
    f->c = *c;
    f->p = *p;
    f->max_tokens = p->max_tokens;
    f->esize = p->fp32 ? sizeof(float) : sizeof(osc_bf16);
    f->wtype = p->fp32 ? CUDA_R_32F : CUDA_R_16BF;
    cudaDeviceProp prop;
    int dev = 0;
    OSCAR_CUDA_TRY(cudaGetDevice(&dev));
    OSCAR_CUDA_TRY(cudaGetDeviceProperties(&prop, dev));
    snprintf(f->name, sizeof f->name, "%.120s", prop.name);
    OSCAR_CUDA_TRY(cudaStreamCreateWithFlags(&f->stream, cudaStreamNonBlocking));
    OSCAR_CUBLAS_TRY(cublasCreate(&f->blas));
    OSCAR_CUBLAS_TRY(cublasSetStream(f->blas, f->stream));
    if (p->stats) {
        f->kinds = oscar_stats_get_params(p->stats).kinds;
        f->pass = p->layered ? 0 : oscar_stats_phase(p->stats); // layered: each layer ends on its own
    }
    if (p->layered && !p->fp32 && !p->capture_bf16) {
        st = osc_error(OSCAR_ERR_INVALID, "forward-cuda: the bf16 layer-major pass captures bf16 (its Gram GEMMs "
                       "read bf16 q/k/v): set capture_bf16, or fp32 for an fp32 capture");
        goto out;
    }
    for (int32_t l = 0; l < c->n_layer; l++) {
        if (oscar_layer_is_moe(c, l)) f->has_moe = true;
        else f->has_dense = true;
    }
    st = alloc_weights(f);
    if (st == OSCAR_OK) st = alloc_workspace(f, m ? m->rope_freqs : NULL);
    if (st == OSCAR_OK && f->has_moe) st = alloc_moe_work(f);
    if (st != OSCAR_OK) goto out;
    OSCAR_CUBLAS_TRY(cublasSetWorkspace(f->blas, f->blas_ws, BLAS_WS_BYTES));
    {
        const char * att = getenv("OSCAR_FWD_ATT"); // "fp32" forces the fp32 kernel (benchmarks)
        f->att_tc = !p->fp32 && osc_fwd_attention_tc_ok(c->head_dim) && !(att && !strcmp(att, "fp32"));
        const char * prof = getenv("OSCAR_FWD_PROFILE");
        if (prof && !strcmp(prof, "1")) {
            const int32_t n = c->n_layer * (N_STAGES + 1);
            f->ev = (cudaEvent_t *) calloc((size_t) n, sizeof(cudaEvent_t));
            if (!f->ev) {
                st = osc_error(OSCAR_ERR_NOMEM, "forward-cuda: out of host memory");
                goto out;
            }
            for (int32_t i = 0; i < n; i++) OSCAR_CUDA_TRY(cudaEventCreate(&f->ev[i]));
            if (f->has_moe) {
                f->moe_ev = (cudaEvent_t *) calloc((size_t) c->n_layer * 4, sizeof(cudaEvent_t));
                if (!f->moe_ev) {
                    st = osc_error(OSCAR_ERR_NOMEM, "forward-cuda: out of host memory");
                    goto out;
                }
                for (int32_t i = 0; i < c->n_layer * 4; i++) OSCAR_CUDA_TRY(cudaEventCreate(&f->moe_ev[i]));
            }
        }
    }
    f->seed = seed;
    st = m ? upload_model(f, m) : random_model(f, seed);
    // cudaMalloc does not clear: every accumulator starts at zero (layered: each layer's slice
    // is summed once, so this is its only reset)
    if (st == OSCAR_OK && (f->pass > 0 || (p->layered && p->stats))) st = zero_pass_acc(f);
    if (st == OSCAR_OK && f->pass == 2) st = load_amat(f); // a resumed accumulator: pass 1 already ended
    note_used(f);
out:
    if (st != OSCAR_OK) {
        cuda_free(f);
        return osc_error_prefix(st, "forward-cuda init (%s)", m ? m->source : "random weights");
    }
    *ctx = f;
    return OSCAR_OK;
}

// ---- the pass ------------------------------------------------------------------------------

static enum oscar_status check_batch(const struct cuda_fwd * f, const struct oscar_batch * b) {
    if (!b || b->n_seq <= 0 || !b->seq_start || !b->tokens)
        return osc_error(OSCAR_ERR_INVALID, "forward-cuda: empty batch or missing seq_start/tokens");
    if (b->seq_start[0] != 0)
        return osc_error(OSCAR_ERR_INVALID, "forward-cuda: seq_start[0] = %d, not 0", b->seq_start[0]);
    for (int32_t s = 0; s < b->n_seq; s++)
        if (b->seq_start[s + 1] <= b->seq_start[s])
            return osc_error(OSCAR_ERR_INVALID, "forward-cuda: sequence %d is empty or seq_start decreases", s);
    const int32_t T = b->seq_start[b->n_seq];
    if (T > f->max_tokens)
        return osc_error(OSCAR_ERR_INVALID, "forward-cuda: batch of %d tokens exceeds max_tokens %d", T,
                         f->max_tokens);
    for (int32_t t = 0; t < T; t++) {
        if (b->tokens[t] < 0 || b->tokens[t] >= f->c.n_vocab)
            return osc_error(OSCAR_ERR_INVALID, "forward-cuda: token %d at index %d outside vocabulary of %d",
                             b->tokens[t], t, f->c.n_vocab);
        if (b->pos && b->pos[t] < 0) return osc_error(OSCAR_ERR_INVALID, "forward-cuda: negative position at %d", t);
    }
    return OSCAR_OK;
}

static int cmp_blocks(const void * a, const void * b) {
    const struct osc_att_block * x = (const struct osc_att_block *) a, * y = (const struct osc_att_block *) b;
    const int32_t wx = x->q1 - x->s0, wy = y->q1 - y->s0; // keys the block reads: heaviest first
    if (wx != wy) return wx > wy ? -1 : 1;
    return x->q0 < y->q0 ? -1 : x->q0 > y->q0;
}

// Positions and attention work items of the batch; returns the number of items.
static int32_t plan_batch(struct cuda_fwd * f, const struct oscar_batch * b) {
    int32_t n = 0;
    for (int32_t s = 0; s < b->n_seq; s++) {
        const int32_t s0 = b->seq_start[s], s1 = b->seq_start[s + 1];
        for (int32_t t = s0; t < s1; t++) f->h_pos[t] = b->pos ? b->pos[t] : t - s0;
        for (int32_t q0 = s0; q0 < s1; q0 += OSC_ATT_BQ) {
            struct osc_att_block blk = {q0, q0 + OSC_ATT_BQ < s1 ? q0 + OSC_ATT_BQ : s1, s0, 0};
            f->h_blocks[n++] = blk;
        }
    }
    qsort(f->h_blocks, (size_t) n, sizeof *f->h_blocks, cmp_blocks);
    return n;
}

// Pointer tables of the pass-1 Gram GEMMs for batches of T rows: group 0 = the K/V slots
// (row stride Hkv D), group 1 = the Q slots (row stride Hq D); entry (c, e) of a group is
// chunk c (rows [c R, c R + R), the remainder rows as chunk n_chunk) of slot e.
static void gram_plan(const struct cuda_fwd * f, int32_t T, int32_t * n_chunk, int32_t * rows) {
    int32_t n = (GRAM_TARGET_TILES + f->n_slot - 1) / f->n_slot;
    const int32_t by_rows = (T + GRAM_MIN_ROWS - 1) / GRAM_MIN_ROWS;
    if (n > by_rows) n = by_rows;
    if (n > GRAM_MAX_CHUNKS) n = GRAM_MAX_CHUNKS;
    if (n < 1) n = 1;
    *n_chunk = n, *rows = T / n;
}

static enum oscar_status gram_tables(struct cuda_fwd * f, int32_t T) {
    const int32_t D = f->c.head_dim, H = f->c.n_head_kv, Hq = f->c.n_head, S = f->n_slot;
    const int64_t DD = (int64_t) D * D;
    const size_t per_group = (size_t) (GRAM_MAX_CHUNKS + 1) * S;
    int32_t n_chunk, R;
    gram_plan(f, T, &n_chunk, &R);
    // inputs of type f->wtype: the bf16 copies, or q/k/v themselves in the fp32 mode
    char * qs = f->p.fp32 ? (char *) f->q : (char *) f->qb;
    char * ks = f->p.fp32 ? (char *) f->k : (char *) f->kb;
    char * vs = f->p.fp32 ? (char *) f->v : (char *) f->vb;
    for (int32_t c = 0; c <= n_chunk; c++) {
        const size_t r0 = (size_t) c * R;
        for (int32_t e = 0; e < S; e++) {
            const void * x;
            size_t grp, idx;
            if (e < f->n_kv_slot) { // K heads first (if KTK), then V heads
                const bool is_k = (f->kinds & OSCAR_STATS_KTK) && e < H;
                const int32_t h = is_k ? e : e - ((f->kinds & OSCAR_STATS_KTK) ? H : 0);
                x = at(f, is_k ? ks : vs, r0 * H * D + (size_t) h * D);
                grp = 0, idx = (size_t) c * f->n_kv_slot + e;
            } else {
                x = at(f, qs, r0 * Hq * D + (size_t) (e - f->n_kv_slot) * D);
                grp = 1, idx = (size_t) c * (S - f->n_kv_slot) + (e - f->n_kv_slot);
            }
            f->h_ab[grp * per_group + idx] = x;
            f->h_c[grp * per_group + idx] = f->gpart + ((size_t) c * S + e) * DD;
        }
    }
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(f->g_ab, f->h_ab, 2 * per_group * sizeof(void *), cudaMemcpyHostToDevice,
                                     f->stream));
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(f->g_c, f->h_c, 2 * per_group * sizeof(void *), cudaMemcpyHostToDevice,
                                     f->stream));
    f->g_T = T;
    return OSCAR_OK;
}

// One group's Gram GEMMs: C_i [D, D] = X_iᵀ X_i, X_i [rows, D] of type f->wtype (bf16, fp32 in
// the fp32 mode) with row stride ld, fp32 accumulation and output (CUBLAS_COMPUTE_32F, no
// TF32; cuBLAS views X_i as the D x rows column-major matrix X_iᵀ).
static cublasStatus_t gram_batched(struct cuda_fwd * f, size_t off, int32_t rows, int32_t ld, int32_t count) {
    const float one = 1.0f, zero = 0.0f;
    const int32_t D = f->c.head_dim;
    return cublasGemmBatchedEx(f->blas, CUBLAS_OP_N, CUBLAS_OP_T, D, D, rows, &one, f->g_ab + off, f->wtype, ld,
                               f->g_ab + off, f->wtype, ld, &zero, f->g_c + off, CUDA_R_32F, D, count,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

// Pass 1 of layer l: KTK, VTV and grouped QQT from the bf16 copies of k, v, q (fp32 mode: from
// k, v, q themselves). Per chunk,
// one GEMM per slot (fp32 sums over <= T/n_chunk rows); then the fp64 accumulators get
// Σ_chunk Σ_(query heads of the group) in a fixed order (osc_fwd_gram_reduce).
static enum oscar_status capture_pass1(struct cuda_fwd * f, int32_t l, int32_t T) {
    const int32_t D = f->c.head_dim, H = f->c.n_head_kv, Hq = f->c.n_head, S = f->n_slot;
    const size_t per_group = (size_t) (GRAM_MAX_CHUNKS + 1) * S;
    int32_t n_chunk, R;
    enum oscar_status st = OSCAR_OK;
    if (S == 0) return OSCAR_OK;
    if (f->g_T != T) {
        st = gram_tables(f, T);
        if (st != OSCAR_OK) return st;
    }
    gram_plan(f, T, &n_chunk, &R);
    const int32_t rem = T - n_chunk * R, nq = S - f->n_kv_slot;
    if (f->n_kv_slot) {
        OSCAR_CUBLAS_TRY(gram_batched(f, 0, R, H * D, n_chunk * f->n_kv_slot));
        if (rem) OSCAR_CUBLAS_TRY(gram_batched(f, (size_t) n_chunk * f->n_kv_slot, rem, H * D, f->n_kv_slot));
    }
    if (nq) {
        OSCAR_CUBLAS_TRY(gram_batched(f, per_group, R, Hq * D, n_chunk * nq));
        if (rem) OSCAR_CUBLAS_TRY(gram_batched(f, per_group + (size_t) n_chunk * nq, rem, Hq * D, nq));
    }
    OSCAR_CUDA_TRY(osc_fwd_gram_reduce(f->g_acc + (size_t) l * f->n_gout, f->gpart, f->g_first, f->g_per, f->n_gout,
                                       n_chunk + (rem ? 1 : 0), S, (int64_t) D * D, f->stream));
out:
    return st;
}

// acc_tab[h] (fp64, the layer's [Hkv] accumulator pointers) += Σ_t z_{h,t} v_{h,t}ᵀ, z [Hkv, T, D]:
// per head in row chunks (parallelism, as pass 1), strict fp32 per chunk, fp64 in a fixed order.
static enum oscar_status weighted_gram(struct cuda_fwd * f, const float * z, double * const * acc_tab, int32_t T) {
    const int32_t D = f->c.head_dim, H = f->c.n_head_kv, ldkv = H * D;
    const int64_t DD = (int64_t) D * D, HDD = (int64_t) H * DD;
    const int32_t n_chunk = T < GRAM_MAX_CHUNKS * GRAM_MIN_ROWS ? (T + GRAM_MIN_ROWS - 1) / GRAM_MIN_ROWS
                                                                 : GRAM_MAX_CHUNKS;
    const int32_t R = T / n_chunk, rem = T - n_chunk * R;
    enum oscar_status st = OSCAR_OK;
    for (int32_t c = 0; c <= n_chunk; c++) {
        const int32_t rows = c < n_chunk ? R : rem;
        if (rows == 0) continue;
        const size_t r0 = (size_t) c * R;
        OSCAR_CUBLAS_TRY(gemm_f32_batched(f, CUBLAS_OP_T, D, D, rows, z + r0 * D, D, (long long) T * D, f->v + r0 * ldkv,
                                  ldkv, D, 0.0f, f->spart + (size_t) c * HDD, D, DD, H));
    }
    OSCAR_CUDA_TRY(osc_fwd_gram_reduce(acc_tab, f->spart, f->s_first, f->s_per, H, n_chunk + (rem ? 1 : 0), H, DD,
                                       f->stream));
out:
    return st;
}

// Pass 1, VATT of layer l (lib/stats/attn-mass.c on the device): per sequence, KV head h and
// query head j of its group (in that order), score blocks of VATT_ROWS query rows against
// their causal keys (fp32 GEMM; a sliding layer's softmax and sums take its window only), fp64 softmax and Σ p² per key into wbuf [Hkv, T]; then
// Σ_t w v vᵀ and Σ_t w into the accumulators.
static enum oscar_status capture_vatt(struct cuda_fwd * f, const struct oscar_batch * b, int32_t l, int32_t T) {
    const int32_t D = f->c.head_dim, H = f->c.n_head_kv, Hq = f->c.n_head, g = Hq / H;
    // the accumulator's score scale (the forward checked it is the model's), as attn-mass.c takes it
    const double scale = oscar_attn_score_scale(oscar_stats_get_params(f->p.stats).attn_scale, D);
    const float one = 1.0f, zero = 0.0f;
    float * z = f->big;   // [H, T, D]
    enum oscar_status st = OSCAR_OK;
    OSCAR_CUDA_TRY(cudaMemsetAsync(f->wbuf, 0, (size_t) H * T * sizeof(double), f->stream));
    for (int32_t s = 0; s < b->n_seq; s++) {
        const int32_t a0 = b->seq_start[s], n = b->seq_start[s + 1] - a0;
        for (int32_t h = 0; h < H; h++)
            for (int32_t j = h * g; j < (h + 1) * g; j++)
                for (int32_t i0 = 0; i0 < n; i0 += VATT_ROWS) {
                    const int32_t rows = n - i0 < VATT_ROWS ? n - i0 : VATT_ROWS, nk = i0 + rows;
                    // vatt_s [rows, nk] (row-major) = q_i . k_t, i in [i0, i0+rows), t < nk
                    OSCAR_CUBLAS_TRY(cublasSgemm(f->blas, CUBLAS_OP_T, CUBLAS_OP_N, nk, rows, D, &one,
                                         f->k + ((size_t) a0 * H + h) * D, H * D,
                                         f->q + ((size_t) (a0 + i0) * Hq + j) * D, Hq * D, &zero, f->vatt_s, nk));
                    OSCAR_CUDA_TRY(osc_fwd_vatt_block(f->wbuf + (size_t) h * T + a0, f->vatt_lz, f->vatt_s, i0, rows,
                                                      scale, oscar_layer_window(&f->c, l), f->stream));
                }
    }
    OSCAR_CUDA_TRY(osc_fwd_scale_rows(z, f->wbuf, f->v, T, H, D, f->stream));
    if ((st = weighted_gram(f, z, f->v_acc + (size_t) l * H, T)) != OSCAR_OK) return st;
    OSCAR_CUDA_TRY(osc_fwd_sst_reduce(f->acc_vwsum + (size_t) l * H, NULL, f->wbuf, NULL, T, H, f->stream));
out:
    return st;
}

// Pass 2 of layer l: SST of the T rows in f->k / f->v, weighted with the layer's A_h in f->amat.
static enum oscar_status capture_sst(struct cuda_fwd * f, int32_t l, int32_t T) {
    const int32_t D = f->c.head_dim, H = f->c.n_head_kv;
    const int64_t DD = (int64_t) D * D, HDD = (int64_t) H * DD, lo = (int64_t) l * HDD;
    const int32_t ldkv = H * D;
    enum oscar_status st = OSCAR_OK;
    float * y = f->big;                              // [H, T, D]
    float * z = f->big + (size_t) H * T * D;         // [H, T, D]
    OSCAR_CUBLAS_TRY(gemm_f32_batched(f, CUBLAS_OP_N, D, T, D, f->amat + lo, D, DD, f->k, ldkv, D, 0.0f, y, D,
                                      (long long) T * D, H));
    OSCAR_CUDA_TRY(osc_fwd_sst_weights(f->wbuf, f->negbuf, z, y, f->k, f->v, T, H, D, f->stream));
    if ((st = weighted_gram(f, z, f->s_acc + (size_t) l * H, T)) != OSCAR_OK) return st;
    OSCAR_CUDA_TRY(osc_fwd_sst_reduce(f->acc_wsum + (size_t) l * H, f->acc_nneg + (size_t) l * H, f->wbuf,
                                      f->negbuf, T, H, f->stream));
out:
    return st;
}

static enum oscar_status capture_layer(struct cuda_fwd * f, const struct oscar_batch * b, int32_t l, int32_t T) {
    enum oscar_status st = OSCAR_OK;
    if (f->pass == 1 || f->sums_now) {
        st = capture_pass1(f, l, T);
        if (st == OSCAR_OK && f->acc_vatt) st = capture_vatt(f, b, l, T);
    } else if (f->pass == 2) {
        st = capture_sst(f, l, T);
    }
    return st;
}

// q, k, v [T, ...] fp32 of the layer into the pinned host staging (asynchronous).
static cudaError_t qkv_to_host(struct cuda_fwd * f, int32_t T) {
    const size_t Q = (size_t) f->c.n_head * f->c.head_dim, KV = (size_t) f->c.n_head_kv * f->c.head_dim;
    cudaError_t e = cudaMemcpyAsync(f->hq, f->q, T * Q * sizeof(float), cudaMemcpyDeviceToHost, f->stream);
    if (e == cudaSuccess) e = cudaMemcpyAsync(f->hk, f->k, T * KV * sizeof(float), cudaMemcpyDeviceToHost, f->stream);
    if (e == cudaSuccess) e = cudaMemcpyAsync(f->hv, f->v, T * KV * sizeof(float), cudaMemcpyDeviceToHost, f->stream);
    return e;
}

// Copies the layer's tensors to the host and calls the user's hook (tests; slow).
static enum oscar_status host_hook(struct cuda_fwd * f, const struct oscar_batch * b, int32_t l, int32_t T) {
    const struct oscar_capture_hook * hk = f->p.hook;
    if (!hk || !hk->on_layer || (hk->want && !hk->want(hk->user, l))) return OSCAR_OK;
    const size_t Q = (size_t) f->c.n_head * f->c.head_dim, C = (size_t) f->c.n_embd;
    OSCAR_CUDA_CHECK(qkv_to_host(f, T));
    if (!hk->qkv_only) {
        const float * att = (const float *) f->att; // fp32 mode: already fp32
        if (!f->p.fp32) {
            OSCAR_CUDA_CHECK(osc_fwd_bf16_to_f32(f->big, (const osc_bf16 *) f->att, (int64_t) T * (int64_t) Q,
                                                 f->stream));
            att = f->big;
        }
        OSCAR_CUDA_CHECK(cudaMemcpyAsync(f->hatt, att, T * Q * sizeof(float), cudaMemcpyDeviceToHost, f->stream));
        OSCAR_CUDA_CHECK(cudaMemcpyAsync(f->hx, f->x, T * C * sizeof(float), cudaMemcpyDeviceToHost, f->stream));
    }
    OSCAR_CUDA_CHECK(cudaStreamSynchronize(f->stream));
    struct oscar_capture_layer cap;
    memset(&cap, 0, sizeof cap);
    cap.layer = l, cap.n_tokens = T, cap.n_seq = b->n_seq, cap.seq_start = b->seq_start, cap.pos = f->h_pos;
    cap.q = f->hq, cap.k = f->hk, cap.v = f->hv, cap.attn_out = f->hatt, cap.wo = NULL, cap.resid_out = f->hx;
    cap.config = &f->c;
    enum oscar_status st = hk->on_layer(hk->user, &cap);
    if (st != OSCAR_OK) return osc_error_prefix(st, "layer %d: capture hook", l);
    return OSCAR_OK;
}

// Kernels that write GEMM activations or read the embedding, on the pass's element type.
// Gemma's embedding scale: sqrt(C) rounded to fp32 (the CPU's oscar_forward_embed), else 1.
static cudaError_t act_embed(struct cuda_fwd * f, int32_t T) {
    const float sc = f->c.embed_scale ? (float) sqrt((double) f->c.n_embd) : 1.0f;
    if (f->p.fp32) return osc_fwd_embed(f->x, (const float *) f->embd, f->d_tok, T, f->c.n_embd, sc, f->stream);
    return osc_fwd_embed(f->x, (const osc_bf16 *) f->embd, f->d_tok, T, f->c.n_embd, sc, f->stream);
}

static cudaError_t act_rmsnorm(struct cuda_fwd * f, void * y, const float * x, const float * w, int32_t T) {
    const int32_t C = f->c.n_embd;
    const float off = f->c.norm_offset;
    if (f->p.fp32) return osc_fwd_rmsnorm((float *) y, x, w, off, T, C, f->c.rms_eps, f->stream);
    return osc_fwd_rmsnorm((osc_bf16 *) y, x, w, off, T, C, f->c.rms_eps, f->stream);
}

// f->h = act(gate) * up of the gate/up GEMM output in f->big (SiLU, or Gemma's GELU-tanh)
static cudaError_t act_swiglu(struct cuda_fwd * f, int32_t T) {
    const bool gelu = f->c.act == OSCAR_ACT_GELU_TANH;
    if (f->p.fp32) return osc_fwd_swiglu((float *) f->h, f->big, T, f->c.n_ff, gelu, f->stream);
    return osc_fwd_swiglu((osc_bf16 *) f->h, f->big, T, f->c.n_ff, gelu, f->stream);
}

// Layer l's attention rule: its sliding window (0: none) and the score scale, as the CPU's
// oscar_attention_causal.
static struct osc_att_rule att_rule(const struct cuda_fwd * f, int32_t l) {
    struct osc_att_rule r;
    r.window = oscar_layer_window(&f->c, l);
    r.scale = oscar_attn_scale(&f->c);
    return r;
}

// f->att = the fp32 attention kernel on f->q, f->k, f->v
static cudaError_t act_attention(struct cuda_fwd * f, int32_t l, int32_t n_blocks) {
    const struct oscar_model_config * c = &f->c;
    if (f->p.fp32)
        return osc_fwd_attention((float *) f->att, f->q, f->k, f->v, f->d_blocks, n_blocks, c->n_head, c->n_head_kv,
                                 c->head_dim, att_rule(f, l), f->stream);
    return osc_fwd_attention((osc_bf16 *) f->att, f->q, f->k, f->v, f->d_blocks, n_blocks, c->n_head, c->n_head_kv,
                             c->head_dim, att_rule(f, l), f->stream);
}

// f->att [n] (bf16, or fp32 in the fp32 mode) = src [n] fp32 on the device, on f->stream
// (for an attention computed elsewhere, e.g. an override's result copied back).
static cudaError_t att_from_f32(struct cuda_fwd * f, const float * src, int64_t n) {
    if (f->p.fp32)
        return cudaMemcpyAsync(f->att, src, (size_t) n * sizeof(float), cudaMemcpyDeviceToDevice, f->stream);
    return osc_fwd_to_bf16((osc_bf16 *) f->att, src, n, f->stream);
}

// The caller's attention override (e.g. a simulated quantized KV cache) on the host: q/k/v
// of the layer go to the host, the callback writes [T, Hq, D], which comes back into f->att.
static enum oscar_status host_attention(struct cuda_fwd * f, const struct oscar_batch * b, int32_t l, int32_t T) {
    const struct oscar_attention_override * ov = f->p.attention;
    const size_t Q = (size_t) f->c.n_head * f->c.head_dim;
    OSCAR_CUDA_CHECK(qkv_to_host(f, T));
    OSCAR_CUDA_CHECK(cudaStreamSynchronize(f->stream));
    struct oscar_capture_layer cap;
    memset(&cap, 0, sizeof cap);
    cap.layer = l, cap.n_tokens = T, cap.n_seq = b->n_seq, cap.seq_start = b->seq_start, cap.pos = f->h_pos;
    cap.q = f->hq, cap.k = f->hk, cap.v = f->hv, cap.config = &f->c;
    enum oscar_status st = ov->attend(ov->user, l, &cap, f->hatt);
    if (st != OSCAR_OK) return osc_error_prefix(st, "layer %d: attention override", l);
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(f->big, f->hatt, T * Q * sizeof(float), cudaMemcpyHostToDevice, f->stream));
    OSCAR_CUDA_CHECK(att_from_f32(f, f->big, (int64_t) T * (int64_t) Q));
    return OSCAR_OK;
}

static enum oscar_status run_layer(struct cuda_fwd * f, const struct oscar_batch * b, int32_t l, int32_t T,
                                   int32_t n_blocks) {
    const struct oscar_model_config * c = &f->c;
    const struct dlayer * w = &f->layers[l];
    const int32_t C = c->n_embd, D = c->head_dim, Q = c->n_head * D, KV = c->n_head_kv * D, F = c->n_ff;
    const int32_t NQKV = Q + 2 * KV;
    cudaStream_t s = f->stream;
    enum oscar_status st = OSCAR_OK;
    cudaEvent_t * ev = f->ev ? f->ev + (size_t) l * (N_STAGES + 1) : NULL;
    const bool bf16_copies = !f->p.fp32 && (f->att_tc || ((f->pass == 1 || f->sums_now) && f->n_slot > 0));
    // Gemma's local layers rotate with their own base
    const float * inv_freq = f->inv_freq_swa && oscar_layer_sliding(c, l) ? f->inv_freq_swa : f->inv_freq;
#define STAGE(i) do { if (ev) OSCAR_CUDA_TRY(cudaEventRecord(ev[i], s)); } while (0)
    STAGE(0);
    OSCAR_CUDA_TRY(act_rmsnorm(f, f->xn, f->x, w->attn_norm, T));
    OSCAR_CUBLAS_TRY(gemm_w(f, f->big, f->xn, w->wqkv, T, NQKV, C, 0.0f));
    STAGE(1);
    OSCAR_CUDA_TRY(osc_fwd_qkv_epilogue(f->q, f->k, f->v, bf16_copies ? f->qb : NULL, bf16_copies ? f->kb : NULL,
                                        bf16_copies ? f->vb : NULL, f->big, w->bqkv, w->q_norm, w->k_norm,
                                        c->norm_offset, f->d_pos, inv_freq, oscar_rope_attn_factor_layer(c, l),
                                        oscar_rope_dim(c), T, c->n_head,
                                        c->n_head_kv, D, c->rms_eps, s));
    STAGE(2);
    if (f->kvsim) {
        st = osc_kvsim_attend(f->kvsim, l, f->q, f->att_tc ? f->qb : NULL, f->k, f->v, T, f->d_blocks, n_blocks,
                              att_rule(f, l), f->att, f->p.fp32, s);
        if (st != OSCAR_OK) goto out;
    } else if (f->p.attention) {
        if ((st = host_attention(f, b, l, T)) != OSCAR_OK) goto out;
    } else if (f->att_tc)
        OSCAR_CUDA_TRY(osc_fwd_attention_tc((osc_bf16 *) f->att, f->qb, f->kb, f->vb, f->d_blocks, n_blocks,
                                            c->n_head, c->n_head_kv, D, att_rule(f, l), s));
    else
        OSCAR_CUDA_TRY(act_attention(f, l, n_blocks));
    STAGE(3);
    if (c->post_norms) { // sandwich norm: residual += post_norm(attn . W_Oᵀ), the product in f->big
        OSCAR_CUBLAS_TRY(gemm_w(f, f->big, f->att, w->wo, T, C, Q, 0.0f));
        OSCAR_CUDA_TRY(osc_fwd_add_rmsnorm(f->x, f->big, w->attn_post_norm, c->norm_offset, T, C, c->rms_eps, s));
    } else {
        OSCAR_CUBLAS_TRY(gemm_w(f, f->x, f->att, w->wo, T, C, Q, 1.0f)); // residual += attn . W_Oᵀ
    }
    STAGE(4);
    OSCAR_CUDA_TRY(act_rmsnorm(f, f->xn, f->x, w->ffn_norm, T));
    if (oscar_layer_is_moe(c, l)) { // the router reads fp32 normed rows, the experts xn (no sandwich norms here)
        const float * xr = (const float *) f->xn;
        if (!f->p.fp32) {
            OSCAR_CUDA_TRY(osc_fwd_rmsnorm(f->xr, f->x, w->ffn_norm, c->norm_offset, T, C, c->rms_eps, s));
            xr = f->xr;
        }
        cudaEvent_t * mev = f->moe_ev ? f->moe_ev + (size_t) l * 4 : NULL;
        if ((st = osc_moe_mlp(f->blas, s, f->wtype, c, &w->moe, &f->mw, f->x, xr, f->xn, T, mev)) != OSCAR_OK) goto out;
    } else {
        OSCAR_CUBLAS_TRY(gemm_w(f, f->big, f->xn, w->wgu, T, 2 * F, C, 0.0f));
        OSCAR_CUDA_TRY(act_swiglu(f, T));
        if (c->post_norms) { // f->big is free again: the gate/up output is in f->h
            OSCAR_CUBLAS_TRY(gemm_w(f, f->big, f->h, w->wdown, T, C, F, 0.0f));
            OSCAR_CUDA_TRY(osc_fwd_add_rmsnorm(f->x, f->big, w->ffn_post_norm, c->norm_offset, T, C, c->rms_eps, s));
        } else {
            OSCAR_CUBLAS_TRY(gemm_w(f, f->x, f->h, w->wdown, T, C, F, 1.0f));
        }
    }
    STAGE(5);
    if (f->p.layered && f->p.capture_bf16) { // every consumer below sees the bf16 values
        const int64_t nq = (int64_t) T * Q, nkv = (int64_t) T * KV;
        OSCAR_CUDA_TRY(osc_fwd_round_bf16(f->q, nq, s));
        OSCAR_CUDA_TRY(osc_fwd_round_bf16(f->k, nkv, s));
        OSCAR_CUDA_TRY(osc_fwd_round_bf16(f->v, nkv, s));
    }
    if (f->p.stats) st = capture_layer(f, b, l, T);
    if (st == OSCAR_OK) STAGE(6);
#undef STAGE
    if (st == OSCAR_OK) st = host_hook(f, b, l, T);
out:
    return st;
}

static enum oscar_status lm_head(struct cuda_fwd * f, int32_t T, float * logits) {
    const int32_t C = f->c.n_embd, V = f->c.n_vocab;
    enum oscar_status st = OSCAR_OK;
    OSCAR_CUDA_TRY(act_rmsnorm(f, f->xn, f->x, f->out_norm, T));
    for (int32_t r0 = 0; r0 < T; r0 += LOGIT_ROWS) {
        const int32_t n = T - r0 < LOGIT_ROWS ? T - r0 : LOGIT_ROWS;
        OSCAR_CUBLAS_TRY(gemm_w(f, f->logit_buf, at(f, f->xn, (size_t) r0 * C), f->out_w, n, V, C, 0.0f));
        OSCAR_CUDA_TRY(cudaMemcpyAsync(logits + (size_t) r0 * V, f->logit_buf, (size_t) n * V * sizeof(float),
                                       cudaMemcpyDeviceToHost, f->stream));
        OSCAR_CUDA_TRY(cudaStreamSynchronize(f->stream)); // logit_buf is reused
    }
    for (int32_t t = 0; t < T; t++)
        for (int32_t i = 0; i < V; i += 97) // cheap NaN/Inf screen, as the CPU pass
            if (!isfinite(logits[(size_t) t * V + i]))
                return osc_error(OSCAR_ERR_NUMERIC, "forward-cuda: non-finite logit at token %d", t);
out:
    return st;
}

// Layer l's stage (and sparse MLP phase) times of its last run into the profile sums, after a sync.
static enum oscar_status add_profile(struct cuda_fwd * f, int32_t l) {
    float ms = 0.0f;
    for (int32_t i = 0; f->ev && i < N_STAGES; i++) {
        cudaEvent_t * e = f->ev + (size_t) l * (N_STAGES + 1);
        OSCAR_CUDA_CHECK(cudaEventElapsedTime(&ms, e[i], e[i + 1]));
        f->stage_ms[i] += (double) ms;
    }
    for (int32_t i = 0; f->moe_ev && oscar_layer_is_moe(&f->c, l) && i < 3; i++) {
        cudaEvent_t * e = f->moe_ev + (size_t) l * 4;
        OSCAR_CUDA_CHECK(cudaEventElapsedTime(&ms, e[i], e[i + 1]));
        f->moe_ms[i] += (double) ms;
    }
    return OSCAR_OK;
}

static enum oscar_status cuda_run(void * ctx, const struct oscar_batch * b, float * logits) {
    struct cuda_fwd * f = (struct cuda_fwd *) ctx;
    if (f->p.layered) return osc_error(OSCAR_ERR_INVALID, "forward-cuda: whole passes on a layer-major pass");
    enum oscar_status st = check_batch(f, b);
    if (st != OSCAR_OK) return st;
    const int32_t T = b->seq_start[b->n_seq];
    const int32_t n_blocks = plan_batch(f, b);
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(f->d_tok, b->tokens, T * sizeof(int32_t), cudaMemcpyHostToDevice, f->stream));
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(f->d_pos, f->h_pos, T * sizeof(int32_t), cudaMemcpyHostToDevice, f->stream));
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(f->d_blocks, f->h_blocks, n_blocks * sizeof(struct osc_att_block),
                                     cudaMemcpyHostToDevice, f->stream));
    if (f->kvsim && (st = osc_kvsim_plan(f->kvsim, b, f->stream)) != OSCAR_OK) return st;
    OSCAR_CUDA_CHECK(act_embed(f, T));
    for (int32_t l = 0; l < f->c.n_layer && st == OSCAR_OK; l++) st = run_layer(f, b, l, T, n_blocks);
    if (st == OSCAR_OK && logits) st = lm_head(f, T, logits);
    if (st != OSCAR_OK) return st;
    OSCAR_CUDA_CHECK(cudaStreamSynchronize(f->stream));
    for (int32_t l = 0; l < f->c.n_layer && st == OSCAR_OK; l++) st = add_profile(f, l);
    if (st != OSCAR_OK) return st;
    if (f->pass == 1 || f->pass == 2) f->n_tok += T;
    note_used(f);
    return OSCAR_OK;
}

// ---- passes ----------------------------------------------------------------------------------

static enum oscar_status zero_pass_acc(struct cuda_fwd * f) {
    const size_t mats = (size_t) f->c.n_layer * f->c.n_head_kv * f->c.head_dim * f->c.head_dim * sizeof(double);
    const size_t lh = (size_t) f->c.n_layer * f->c.n_head_kv;
    if (f->acc_ktk) OSCAR_CUDA_CHECK(cudaMemsetAsync(f->acc_ktk, 0, mats, f->stream));
    if (f->acc_vtv) OSCAR_CUDA_CHECK(cudaMemsetAsync(f->acc_vtv, 0, mats, f->stream));
    if (f->acc_qqt) OSCAR_CUDA_CHECK(cudaMemsetAsync(f->acc_qqt, 0, mats, f->stream));
    if (f->acc_vatt) {
        OSCAR_CUDA_CHECK(cudaMemsetAsync(f->acc_vatt, 0, mats, f->stream));
        OSCAR_CUDA_CHECK(cudaMemsetAsync(f->acc_vwsum, 0, lh * sizeof(double), f->stream));
    }
    if (f->acc_sst) {
        OSCAR_CUDA_CHECK(cudaMemsetAsync(f->acc_sst, 0, mats, f->stream));
        OSCAR_CUDA_CHECK(cudaMemsetAsync(f->acc_wsum, 0, lh * sizeof(double), f->stream));
        OSCAR_CUDA_CHECK(cudaMemsetAsync(f->acc_nneg, 0, lh * sizeof(int64_t), f->stream));
    }
    OSCAR_CUDA_CHECK(cudaStreamSynchronize(f->stream));
    f->n_tok = 0;
    return OSCAR_OK;
}

// amat = fp32 A_h = the FINAL finalised QQT of every (layer, KV head), read back from
// lib/stats so pass 2 weights exactly the matrices the CPU pass 2 would use.
static enum oscar_status load_amat(struct cuda_fwd * f) {
    const size_t D = (size_t) f->c.head_dim, DD = D * D, H = (size_t) f->c.n_head_kv, L = (size_t) f->c.n_layer;
    double * a = (double *) malloc(DD * sizeof(double));
    float * h = (float *) malloc(L * H * DD * sizeof(float));
    enum oscar_status st = OSCAR_OK;
    if (!a || !h) {
        st = osc_error(OSCAR_ERR_NOMEM, "forward-cuda: out of host memory");
        goto out;
    }
    for (size_t l = 0; l < L && st == OSCAR_OK; l++) {
        for (size_t hh = 0; hh < H && st == OSCAR_OK; hh++) {
            st = oscar_stats_sigma(f->p.stats, OSCAR_STATS_QQT, (int32_t) l, (int32_t) hh, a);
            for (size_t i = 0; i < DD; i++) h[(l * H + hh) * DD + i] = (float) a[i];
        }
    }
    if (st == OSCAR_OK) OSCAR_CUDA_TRY(cudaMemcpy(f->amat, h, L * H * DD * sizeof(float), cudaMemcpyHostToDevice));
out:
    free(a), free(h);
    return st;
}

static enum oscar_status download(double ** dst, const double * src, size_t n) {
    *dst = NULL;
    if (!src) return OSCAR_OK;
    *dst = (double *) malloc(n * sizeof(double));
    if (!*dst) return osc_error(OSCAR_ERR_NOMEM, "forward-cuda: out of host memory for capture sums");
    OSCAR_CUDA_CHECK(cudaMemcpy(*dst, src, n * sizeof(double), cudaMemcpyDeviceToHost));
    return OSCAR_OK;
}

static enum oscar_status cuda_end_pass(void * ctx) {
    struct cuda_fwd * f = (struct cuda_fwd *) ctx;
    if (!f->p.stats) return osc_error(OSCAR_ERR_INVALID, "forward-cuda: end_pass without a stats accumulator");
    if (f->p.layered) return osc_error(OSCAR_ERR_INVALID, "forward-cuda: a layer-major pass ends layer by layer");
    if (f->pass != 1 && f->pass != 2) return osc_error(OSCAR_ERR_INVALID, "forward-cuda: every pass has ended");
    const size_t lh = (size_t) f->c.n_layer * f->c.n_head_kv, mats = lh * f->c.head_dim * f->c.head_dim;
    double * ktk = NULL, * vtv = NULL, * qqt = NULL, * sst = NULL, * wsum = NULL, * vatt = NULL, * vwsum = NULL;
    int64_t * nneg = NULL;
    struct oscar_stats_sums x;
    memset(&x, 0, sizeof x);
    x.pass = f->pass;
    x.n_tokens = f->n_tok;
    enum oscar_status st = OSCAR_OK;
    if (f->pass == 1) {
        st = download(&ktk, f->acc_ktk, mats);
        if (st == OSCAR_OK) st = download(&vtv, f->acc_vtv, mats);
        if (st == OSCAR_OK) st = download(&qqt, f->acc_qqt, mats);
        if (st == OSCAR_OK) st = download(&vatt, f->acc_vatt, mats);
        if (st == OSCAR_OK) st = download(&vwsum, f->acc_vwsum, lh);
        x.ktk = ktk, x.vtv = vtv, x.qqt = qqt, x.vatt = vatt, x.vatt_wsum = vwsum;
    } else {
        st = download(&sst, f->acc_sst, mats);
        if (st == OSCAR_OK) st = download(&wsum, f->acc_wsum, lh);
        if (st == OSCAR_OK) {
            nneg = (int64_t *) malloc(lh * sizeof(int64_t));
            if (!nneg) st = osc_error(OSCAR_ERR_NOMEM, "forward-cuda: out of host memory");
        }
        if (st == OSCAR_OK) OSCAR_CUDA_TRY(cudaMemcpy(nneg, f->acc_nneg, lh * sizeof(int64_t), cudaMemcpyDeviceToHost));
        x.sst = sst, x.sst_wsum = wsum, x.sst_nneg = nneg;
    }
    if (st == OSCAR_OK) st = oscar_stats_add_sums(f->p.stats, &x);
    if (st == OSCAR_OK) st = oscar_stats_end_pass(f->p.stats);
    if (st == OSCAR_OK) {
        f->pass = oscar_stats_phase(f->p.stats);
        if (f->pass == 2) st = load_amat(f);
        if (st == OSCAR_OK && f->pass == 2) st = zero_pass_acc(f);
    }
out:
    free(ktk), free(vtv), free(qqt), free(sst), free(wsum), free(nneg), free(vatt), free(vwsum);
    return st;
}

static void cuda_info(const void * ctx, struct oscar_fwd_info * out) {
    const struct cuda_fwd * f = (const struct cuda_fwd *) ctx;
    snprintf(out->device, sizeof out->device, "%.120s", f->name);
    out->on_device = true;
    out->layer_sums = true;
    out->weight_bytes = f->weight_bytes;
    out->workspace_bytes = f->work_bytes;
    out->device_used_bytes = f->used_max;
    for (int i = 0; i < N_STAGES; i++) out->stage_ms[i] = f->stage_ms[i];
    for (int i = 0; i < 3; i++) out->moe_ms[i] = f->moe_ms[i];
    out->attention_tc = f->att_tc ? 1 : 0;
}

static enum oscar_status cuda_set_attention(void * ctx, const struct oscar_fwd_kvsim * kvsim,
                                            const struct oscar_attention_override * ov) {
    struct cuda_fwd * f = (struct cuda_fwd *) ctx;
    if (f->p.layered) return osc_error(OSCAR_ERR_INVALID, "forward-cuda: set_attention on a layer-major pass");
    if (ov && !ov->attend) return osc_error(OSCAR_ERR_INVALID, "forward-cuda: attention override without a callback");
    OSCAR_CUDA_CHECK(cudaStreamSynchronize(f->stream));   // no run reads the old one
    osc_kvsim_free(f->kvsim);
    f->kvsim = NULL, f->p.attention = ov;
    enum oscar_status st = alloc_host_staging(f);
    if (st == OSCAR_OK && kvsim) st = osc_kvsim_open(kvsim, &f->c, f->max_tokens, f->stream, &f->kvsim);
    if (st == OSCAR_OK) note_used(f);
    return st;
}

static enum oscar_status cuda_set_hook(void * ctx, const struct oscar_capture_hook * hook) {
    struct cuda_fwd * f = (struct cuda_fwd *) ctx;
    if (f->p.layered) return osc_error(OSCAR_ERR_INVALID, "forward-cuda: set_hook on a layer-major pass");
    OSCAR_CUDA_CHECK(cudaStreamSynchronize(f->stream));   // no run reads the old one
    f->p.hook = hook;
    return alloc_host_staging(f);
}

static enum oscar_status cuda_ref_init(void * ctx, int64_t n_rows) {
    struct cuda_fwd * f = (struct cuda_fwd *) ctx;
    if (f->p.layered) return osc_error(OSCAR_ERR_INVALID, "forward-cuda: scoring on a layer-major pass");
    if (f->ref_store) return osc_error(OSCAR_ERR_INVALID, "forward-cuda: the reference store exists already");
    const size_t lr = (size_t) LOGIT_ROWS, V = (size_t) f->c.n_vocab;
    cudaError_t e = dalloc_w(f, &f->ref_store, (size_t) n_rows * (size_t) f->c.n_embd, false);
    if (e == cudaSuccess) e = dalloc(f, &f->ref_buf, lr * V, false);
    if (e == cudaSuccess && !f->d_next) e = dalloc(f, &f->d_next, lr, false);
    if (e == cudaSuccess && !f->d_scores) e = dalloc(f, &f->d_scores, lr, false);
    if (e != cudaSuccess)
        return osc_error(OSCAR_ERR_NOMEM, "forward-cuda: reference store of %lld rows (%.2f GiB) and its logits: %s",
                         (long long) n_rows, (double) n_rows * f->c.n_embd * f->esize / (1 << 30),
                         cudaGetErrorString(e));
    f->ref_rows = n_rows;
    note_used(f);
    return OSCAR_OK;
}

static enum oscar_status cuda_run_scored(void * ctx, const struct oscar_batch * b, int32_t row0, int32_t n,
                                         const int32_t * next, int64_t ref_row, bool save_ref,
                                         struct oscar_fwd_score * out) {
    struct cuda_fwd * f = (struct cuda_fwd *) ctx;
    const int32_t C = f->c.n_embd, V = f->c.n_vocab, T = b->seq_start[b->n_seq];
    const int64_t n_all = (int64_t) b->n_seq * n;
    if ((ref_row >= 0 || save_ref) && (!f->ref_store || ref_row + n_all > f->ref_rows))
        return osc_error(OSCAR_ERR_INVALID, "forward-cuda: reference rows [%lld, %lld) outside the store of %lld",
                         (long long) ref_row, (long long) (ref_row + n_all), (long long) f->ref_rows);
    for (int64_t i = 0; i < n_all; i++)
        if (next[i] < 0 || next[i] >= V)
            return osc_error(OSCAR_ERR_INVALID, "forward-cuda: target %d of scored row %lld outside the vocabulary "
                             "(%d)", next[i], (long long) i, V);
    if (!f->d_next) {
        OSCAR_CUDA_CHECK(dalloc(f, &f->d_next, (size_t) LOGIT_ROWS, false));
        OSCAR_CUDA_CHECK(dalloc(f, &f->d_scores, (size_t) LOGIT_ROWS, false));
    }
    enum oscar_status st = cuda_run(ctx, b, NULL);
    if (st != OSCAR_OK) return st;
    OSCAR_CUDA_CHECK(act_rmsnorm(f, f->xn, f->x, f->out_norm, T));
    for (int32_t q = 0; q < b->n_seq; q++) {
        const size_t first = (size_t) b->seq_start[q] + (size_t) row0;   // batch row of this sequence's row0
        const int64_t k = (int64_t) q * n;                                // its scored rows in next / out / store
        if (save_ref)
            OSCAR_CUDA_CHECK(cudaMemcpyAsync(at(f, f->ref_store, (size_t) (ref_row + k) * C), at(f, f->xn, first * C),
                                             (size_t) n * C * f->esize, cudaMemcpyDeviceToDevice, f->stream));
        for (int32_t r0 = 0; r0 < n; r0 += LOGIT_ROWS) {
            const int32_t m = n - r0 < LOGIT_ROWS ? n - r0 : LOGIT_ROWS;
            OSCAR_CUBLAS_TRY(gemm_w(f, f->logit_buf, at(f, f->xn, (first + r0) * C), f->out_w, m, V, C, 0.0f));
            if (ref_row >= 0)
                OSCAR_CUBLAS_TRY(gemm_w(f, f->ref_buf, at(f, f->ref_store, (size_t) (ref_row + k + r0) * C), f->out_w,
                                        m, V, C, 0.0f));
            OSCAR_CUDA_TRY(cudaMemcpyAsync(f->d_next, next + k + r0, (size_t) m * sizeof(int32_t),
                                           cudaMemcpyHostToDevice, f->stream));
            OSCAR_CUDA_TRY(osc_fwd_score_rows(f->logit_buf, ref_row >= 0 ? f->ref_buf : NULL, f->d_next, m, V,
                                              f->d_scores, f->stream));
            OSCAR_CUDA_TRY(cudaMemcpyAsync(out + k + r0, f->d_scores, (size_t) m * sizeof *out, cudaMemcpyDeviceToHost,
                                           f->stream));
            OSCAR_CUDA_TRY(cudaStreamSynchronize(f->stream)); // the buffers are reused by the next chunk
        }
    }
    for (int64_t i = 0; i < n_all; i++)
        if (!out[i].finite)
            return osc_error(OSCAR_ERR_NUMERIC, "forward-cuda: non-finite logit in scored row %lld (sequence %lld, "
                             "row %lld)", (long long) i, (long long) (i / (n ? n : 1)),
                             (long long) (row0 + i % (n ? n : 1)));
out:
    return st;
}

static enum oscar_status cuda_copy_wo(void * ctx, int32_t layer, float * out) {
    struct cuda_fwd * f = (struct cuda_fwd *) ctx;
    if (layer < 0 || layer >= f->c.n_layer)
        return osc_error(OSCAR_ERR_INVALID, "forward-cuda: layer %d out of range", layer);
    const size_t n = (size_t) f->c.n_embd * (size_t) f->c.n_head * (size_t) f->c.head_dim;
    const size_t wide = (size_t) f->max_tokens * (size_t) (f->c.n_head + 2 * f->c.n_head_kv) * (size_t) f->c.head_dim;
    float * d = f->big;   // [T, wide] scratch, free between passes; a temporary buffer if W_O does not fit
    const float * src = (const float *) f->layers[layer].wo; // fp32 mode: the weights as they are
    enum oscar_status st = OSCAR_OK;
    if (!f->p.fp32 && n > wide) OSCAR_CUDA_CHECK(cudaMalloc((void **) &d, n * sizeof(float)));
    if (!f->h_wo) OSCAR_CUDA_TRY(cudaMallocHost((void **) &f->h_wo, n * sizeof(float)));
    if (!f->p.fp32) {
        OSCAR_CUDA_TRY(osc_fwd_bf16_to_f32(d, (const osc_bf16 *) f->layers[layer].wo, (int64_t) n, f->stream));
        src = d;
    }
    OSCAR_CUDA_TRY(cudaMemcpyAsync(f->h_wo, src, n * sizeof(float), cudaMemcpyDeviceToHost, f->stream));
    OSCAR_CUDA_TRY(cudaStreamSynchronize(f->stream));
    memcpy(out, f->h_wo, n * sizeof(float));
out:
    if (d != f->big) cudaFree(d);
    return st;
}

// ---- the layer-major pass (forward-backend.h) ----------------------------------------------

static enum oscar_status cuda_rows_init(void * ctx, int64_t n_rows, int64_t n_keep) {
    struct cuda_fwd * f = (struct cuda_fwd *) ctx;
    if (!f->p.layered || f->rows) return osc_error(OSCAR_ERR_INVALID, "forward-cuda: rows_init needs a new layer-major pass");
    const size_t C = (size_t) f->c.n_embd, KV = (size_t) f->c.n_head_kv * f->c.head_dim;
    cudaError_t e = dalloc(f, &f->rows, (size_t) n_rows * C, false);
    if (e == cudaSuccess && f->acc_sst && n_keep > 0) e = dalloc(f, &f->keep_k, (size_t) n_keep * KV, false);
    if (e == cudaSuccess && f->acc_sst && n_keep > 0) e = dalloc(f, &f->keep_v, (size_t) n_keep * KV, false);
    if (e != cudaSuccess)
        return osc_error(OSCAR_ERR_NOMEM, "forward-cuda: no device memory for the hidden states of %lld rows (%s)",
                         (long long) n_rows, cudaGetErrorString(e));
    f->n_rows = n_rows, f->n_keep = n_keep;
    note_used(f);
    return OSCAR_OK;
}

// Layer l into slot l % 2: the host weights converted, or the random ones made there. The
// stream orders it after every use of the slot by layer l - 2.
static enum oscar_status cuda_layer_set(void * ctx, int32_t l, const struct oscar_layer_weights * w) {
    struct cuda_fwd * f = (struct cuda_fwd *) ctx;
    if (!f->p.layered) return osc_error(OSCAR_ERR_INVALID, "forward-cuda: layer_set outside a layer-major pass");
    if (l < 0 || l >= f->c.n_layer) return osc_error(OSCAR_ERR_INVALID, "forward-cuda: layer %d out of range", l);
    f->layers[l] = f->slots[l % 2];
    enum oscar_status st = w ? upload_layer(f, &f->layers[l], w) : random_layer(f, &f->layers[l], l, f->seed);
    if (st == OSCAR_OK) OSCAR_CUDA_CHECK(cudaStreamSynchronize(f->stream)); // w may be released now
    return st;
}

static enum oscar_status cuda_layer_run(void * ctx, int32_t l, const struct oscar_batch * b, int64_t row0, bool sums) {
    struct cuda_fwd * f = (struct cuda_fwd *) ctx;
    if (!f->rows) return osc_error(OSCAR_ERR_INVALID, "forward-cuda: layer_run before rows_init");
    enum oscar_status st = check_batch(f, b);
    if (st != OSCAR_OK) return st;
    const int32_t T = b->seq_start[b->n_seq];
    const size_t C = (size_t) f->c.n_embd, KV = (size_t) f->c.n_head_kv * f->c.head_dim;
    sums = sums && f->p.stats;
    if (row0 < 0 || row0 + T > f->n_rows || (sums && f->keep_k && row0 + T > f->n_keep))
        return osc_error(OSCAR_ERR_INVALID, "forward-cuda: rows [%lld, %lld) outside the pass's %lld rows (%lld kept)",
                         (long long) row0, (long long) (row0 + T), (long long) f->n_rows, (long long) f->n_keep);
    const int32_t n_blocks = plan_batch(f, b);
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(f->d_tok, b->tokens, T * sizeof(int32_t), cudaMemcpyHostToDevice, f->stream));
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(f->d_pos, f->h_pos, T * sizeof(int32_t), cudaMemcpyHostToDevice, f->stream));
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(f->d_blocks, f->h_blocks, n_blocks * sizeof(struct osc_att_block),
                                     cudaMemcpyHostToDevice, f->stream));
    f->x = f->rows + (size_t) row0 * C; // the layer runs on its rows in place
    if (l == 0) OSCAR_CUDA_CHECK(act_embed(f, T));
    f->sums_now = sums;
    st = run_layer(f, b, l, T, n_blocks);
    f->sums_now = false;
    if (st == OSCAR_OK && sums && f->keep_k) {
        OSCAR_CUDA_CHECK(cudaMemcpyAsync(f->keep_k + (size_t) row0 * KV, f->k, (size_t) T * KV * sizeof(float),
                                         cudaMemcpyDeviceToDevice, f->stream));
        OSCAR_CUDA_CHECK(cudaMemcpyAsync(f->keep_v + (size_t) row0 * KV, f->v, (size_t) T * KV * sizeof(float),
                                         cudaMemcpyDeviceToDevice, f->stream));
    }
    if (st == OSCAR_OK && sums) f->layer_tok += T;
    // the caller times each batch (forward vs held-out); a few syncs per layer cost nothing
    if (st == OSCAR_OK) OSCAR_CUDA_CHECK(cudaStreamSynchronize(f->stream));
    if (st == OSCAR_OK) st = add_profile(f, l);
    note_used(f);
    return st;
}

// n values of layer l's slice (offset l * per) of a device accumulator into host dst, or NULL.
static cudaError_t layer_slice(double * dst, const double * acc, int32_t l, size_t per) {
    if (!acc) return cudaSuccess;
    return cudaMemcpy(dst, acc + (size_t) l * per, per * sizeof(double), cudaMemcpyDeviceToHost);
}

// Layer l's pass-1 sums into p.stats, and its pass ended (A_h finalised).
static enum oscar_status end_layer_pass1(struct cuda_fwd * f, int32_t l, double * buf) {
    const size_t H = (size_t) f->c.n_head_kv, HDD = H * f->c.head_dim * f->c.head_dim;
    double * ktk = buf, * vtv = buf + HDD, * qqt = buf + 2 * HDD, * vatt = buf + 3 * HDD, * vw = buf + 4 * HDD;
    OSCAR_CUDA_CHECK(cudaStreamSynchronize(f->stream));
    OSCAR_CUDA_CHECK(layer_slice(ktk, f->acc_ktk, l, HDD));
    OSCAR_CUDA_CHECK(layer_slice(vtv, f->acc_vtv, l, HDD));
    OSCAR_CUDA_CHECK(layer_slice(qqt, f->acc_qqt, l, HDD));
    OSCAR_CUDA_CHECK(layer_slice(vatt, f->acc_vatt, l, HDD));
    OSCAR_CUDA_CHECK(layer_slice(vw, f->acc_vwsum, l, H));
    struct oscar_stats_sums x;
    memset(&x, 0, sizeof x);
    x.pass = 1, x.n_tokens = f->layer_tok;
    x.ktk = f->acc_ktk ? ktk : NULL, x.vtv = f->acc_vtv ? vtv : NULL, x.qqt = f->acc_qqt ? qqt : NULL;
    x.vatt = f->acc_vatt ? vatt : NULL, x.vatt_wsum = f->acc_vatt ? vw : NULL;
    enum oscar_status st = oscar_stats_add_layer_sums(f->p.stats, l, &x);
    return st == OSCAR_OK ? oscar_stats_end_layer_pass(f->p.stats, l) : st;
}

// Layer l's pass 2: A_h from lib/stats, SST over the kept K/V in slices of max_tokens rows.
static enum oscar_status end_layer_pass2(struct cuda_fwd * f, int32_t l, double * buf) {
    const size_t D = (size_t) f->c.head_dim, DD = D * D, H = (size_t) f->c.n_head_kv, KV = H * D;
    float * a = (float *) (buf + H * DD);            // [H, D, D] fp32 after the fp64 [D, D] scratch
    enum oscar_status st = OSCAR_OK;
    for (size_t h = 0; h < H && st == OSCAR_OK; h++) {
        st = oscar_stats_sigma(f->p.stats, OSCAR_STATS_QQT, l, (int32_t) h, buf);
        for (size_t i = 0; i < DD; i++) a[h * DD + i] = (float) buf[i];
    }
    if (st != OSCAR_OK) return st;
    OSCAR_CUDA_CHECK(cudaMemcpy(f->amat + (size_t) l * H * DD, a, H * DD * sizeof(float), cudaMemcpyHostToDevice));
    for (int64_t r0 = 0; r0 < f->n_keep && st == OSCAR_OK; r0 += f->max_tokens) {
        const int32_t n = (int32_t) (f->n_keep - r0 < f->max_tokens ? f->n_keep - r0 : f->max_tokens);
        OSCAR_CUDA_CHECK(cudaMemcpyAsync(f->k, f->keep_k + (size_t) r0 * KV, (size_t) n * KV * sizeof(float),
                                         cudaMemcpyDeviceToDevice, f->stream));
        OSCAR_CUDA_CHECK(cudaMemcpyAsync(f->v, f->keep_v + (size_t) r0 * KV, (size_t) n * KV * sizeof(float),
                                         cudaMemcpyDeviceToDevice, f->stream));
        st = capture_sst(f, l, n);
    }
    if (st != OSCAR_OK) return st;
    int64_t nneg[OSC_FWD_MAX_HEAD_DIM];
    OSCAR_CUDA_CHECK(cudaStreamSynchronize(f->stream));
    OSCAR_CUDA_CHECK(layer_slice(buf, f->acc_sst, l, H * DD));
    OSCAR_CUDA_CHECK(layer_slice(buf + H * DD, f->acc_wsum, l, H));
    OSCAR_CUDA_CHECK(cudaMemcpy(nneg, f->acc_nneg + (size_t) l * H, H * sizeof(int64_t), cudaMemcpyDeviceToHost));
    struct oscar_stats_sums x;
    memset(&x, 0, sizeof x);
    x.pass = 2, x.n_tokens = f->layer_tok, x.sst = buf, x.sst_wsum = buf + H * DD, x.sst_nneg = nneg;
    st = oscar_stats_add_layer_sums(f->p.stats, l, &x);
    return st == OSCAR_OK ? oscar_stats_end_layer_pass(f->p.stats, l) : st;
}

static enum oscar_status cuda_layer_end(void * ctx, int32_t l) {
    struct cuda_fwd * f = (struct cuda_fwd *) ctx;
    if (!f->p.stats) return OSCAR_OK;
    if (l < 0 || l >= f->c.n_layer) return osc_error(OSCAR_ERR_INVALID, "forward-cuda: layer %d out of range", l);
    const size_t H = (size_t) f->c.n_head_kv, HDD = H * f->c.head_dim * f->c.head_dim;
    double * buf = (double *) malloc((5 * HDD + H) * sizeof(double)); // pass 1's five arrays; pass 2 reuses it
    if (!buf) return osc_error(OSCAR_ERR_NOMEM, "forward-cuda: out of host memory");
    enum oscar_status st = end_layer_pass1(f, l, buf);
    if (st == OSCAR_OK && oscar_stats_layer_phase(f->p.stats, l) == 2) st = end_layer_pass2(f, l, buf);
    free(buf);
    f->layer_tok = 0;
    return st;
}

static enum oscar_status cuda_rows_copy(void * ctx, float * host, bool to_host) {
    struct cuda_fwd * f = (struct cuda_fwd *) ctx;
    if (!f->rows) return osc_error(OSCAR_ERR_INVALID, "forward-cuda: rows_copy before rows_init");
    const size_t bytes = (size_t) f->n_rows * (size_t) f->c.n_embd * sizeof(float);
    OSCAR_CUDA_CHECK(cudaStreamSynchronize(f->stream));
    OSCAR_CUDA_CHECK(cudaMemcpy(to_host ? (void *) host : (void *) f->rows, to_host ? (const void *) f->rows : host, bytes,
                                to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice));
    return OSCAR_OK;
}

static const struct osc_fwd_ops cuda_ops = {
    "cuda", cuda_init, cuda_run, cuda_end_pass, cuda_info, cuda_free, cuda_copy_wo, cuda_set_attention,
    cuda_ref_init, cuda_run_scored,
    cuda_rows_init, cuda_layer_set, cuda_layer_run, cuda_layer_end, cuda_rows_copy, cuda_set_hook,
};

extern "C" enum oscar_status osc_fwd_ops_cuda(const struct osc_fwd_ops ** out) {
    *out = NULL;
    enum oscar_status st = osc_cuda_require_device("forward: ");
    if (st == OSCAR_OK) *out = &cuda_ops;
    return st;
}
