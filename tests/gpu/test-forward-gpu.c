// test-forward-gpu.c - the CUDA forward pass (oscar_fwd, device "cuda") against the CPU
// reference, and its calibration-shape benchmark. Built and run by gpu-forward-check.sh.
//
//   test-forward-gpu check [--seed N] [--small] [--moe] [--model GGUF --corpus TEXT]
//                                                 correctness (exit 0 pass, 1 fail, 77 no device);
//                                                 --model adds the real model on 3 x 512 corpus tokens;
//                                                 --moe: the MoE fixtures and controls only
//   test-forward-gpu bench [--seqs 15] [--len 2048] [--layers 36] [--reps 3] [--hf file.csv]
//   test-forward-gpu moebench [--seqs 15] [--len 2048] [--layers 8] [--reps 3]
//                                                 the sparse MLP vs a dense one of equal FLOPs
//
// check, per model (tiny-llama, tiny-qwen2, tiny-qwen3, tiny-llama3 (+ GGUF), tiny-mistral (+ GGUF:
// sliding window 16), tiny-phi3 (+ GGUF; window 20, partial rotary 8 of 16 dims), tiny-qwen3-yarn (+ GGUF:
// YaRN factor 4 over 64 positions, cos/sin x 1.1386), tiny-gemma3-hub (bf16
// safetensors, + GGUF: Gemma 3's layer, local/global layers), the mixture-of-experts tiny-qwen3-moe,
// tiny-qwen2-moe (gated shared expert), tiny-mixtral and tiny-glm4-moe (+ GGUF: sigmoid grouped routing,
// choice-only bias, routed scale, ungated shared expert, a dense first layer; experts bf16 on the
// device, the router fp32 on both sides) fixtures, and a random-init
// SmolLM2-135M-shaped model, a head_dim-128 model rotating 64 dims under a window of 100 and a
// head_dim-256 model with Gemma 3's layer unless --small), on one batch of 3 sequences (fixtures
// 100, 37, 190 tokens, random models 256, 128, 201: several windows long, so windowed blocks skip
// key tiles):
//  1. logits: GPU vs CPU run with the same weights pre-rounded to bf16 (the GPU stores
//     matrices and embeddings as bf16; norms and biases stay fp32 on both sides).
//     Tolerance 1e-2 relative L2. Derivation: what remains different is the GPU's bf16
//     activations at the GEMM inputs (normed x, attention output, SwiGLU output), each
//     rounded with relative error <= 2^-9 (rms 2^-9/sqrt(3) ~ 1.1e-3). A K-term dot product
//     of independently rounded terms keeps that relative rms (~1e-3); three roundings per
//     layer add in quadrature (~2e-3) and the residual stream damps rather than compounds
//     them, so a few 1e-3 is expected: 1e-2 leaves ~3x headroom, and a real bug (wrong RoPE
//     pair, mask, GQA map) moves logits by O(1). The tensor-core attention (head_dim % 8 == 0,
//     <= 128: every model here) adds roundings of q, k, v and of the probabilities P to bf16
//     (as torch sdpa in bf16): 4 more terms of ~1.1e-3 rms in quadrature per layer, so the
//     per-layer rms grows from ~2e-3 to ~2.7e-3 - the 1e-2 bound still has ~3x headroom.
//  2. capture on the same tokens: the device sums (KTK, VTV, grouped QQT, VATT, pass-2 SST) vs
//     lib/stats fed on the host with the very q/k/v the GPU produced (through a host hook).
//     Pass 1 on the device reads the bf16 copies of q/k/v (tensor-core GEMMs, fp32
//     accumulation), so the hook's pass-1 feed rounds q/k/v to bf16 first (the same inputs);
//     pass 2 (SST) reads fp32 k/v on both sides, and so does pass-1 VATT (attention-mass
//     weights from fp32 scores, fp64 softmax; compared with lib/stats fed the unrounded rows).
//     Tolerance 1e-3 relative Frobenius (the
//     issue's bar). Expected: fp32 sums over <= T rows (chunks) then fp64 adds, ~sqrt(T) 2^-24
//     ~ 1e-6; SST adds fp32 w·v (2^-24) -> ~1e-6. What the bf16 inputs cost against fp32 q/k/v
//     is item 3: relative rounding 2^-9 per factor, zero-mean, so a sum of T outer products
//     moves by ~2^-9 sqrt(2/3) / sqrt(T_eff) relative - well inside 1e-2.
//  3. end-to-end capture: device sums vs lib/stats fed by the fp32 CPU forward pass (pre-
//     rounded weights). Reported, and gated at 1e-2 (the same bf16-activation argument as 1:
//     rounding noise in q/k/v is zero-mean, so sums of outer products see it squared).
//  4. determinism: a second GPU run gives bit-identical logits and capture sums.
// tiny-gemma3 (query_pre_attn_scalar 24 != head_dim 32) is checked in full with accumulators of its
// score scale, and an accumulator made for head_dim^-1/2 must be refused. Controls (fp32 mode, cheap): the GPU run with one feature
// switched off in its config - tiny-mistral's window, tiny-phi3's partial rotary, tiny-gemma3's
// embedding scale, tiny-qwen3-yarn's attention factor - must MISS the CPU logits by more than 10x the fp32 bound (1e-3), so the rows
// above pass because the feature is computed, not because it does not matter on these fixtures
// (measured on the CPU pass, feature on vs off: mistral's window 0.56, phi3's partial rotary
// 9e-3 - its tiny random weights make RoPE a small effect -, gemma3's embedding scale 1.07).
// The MoE routing has controls of the same kind: tiny-glm4-moe without its e_score_correction_bias
// or without grouped top-k, tiny-qwen3-moe without the top-k renormalisation. Item 4 covers the
// sparse MLP's determinism (its combine adds each token's experts in top-k order, no atomics).
//
// The same model also runs in the fp32 mode (oscar_fwd_params.fp32: fp32 weights, activations
// and GEMM inputs, CUBLAS_COMPUTE_32F without TF32, the fp32 attention kernel, pass-1 Gram
// GEMMs on fp32 q/k/v) against the CPU pass on the UNROUNDED weights (before round_model),
// printed as a second table with items 1-4 (the same-token hook feeds unrounded q/k/v).
// Tolerance 1e-4 relative for the logits and for every covariance, same-token and e2e.
// Derivation: both sides now evaluate the same fp32 expressions; what differs is the order
// of the sums (cuBLAS tiles vs OpenBLAS kernels; the attention's key tiles and its fp32 vs
// double normaliser), <= 2 ulp in the device expf/cosf/sinf, and FMA contraction on the
// device. A K-term fp32 dot product carries a rounding error of rms ~u sqrt(K/6) relative
// to its value (u = 2^-24; partial sums grow as sqrt(k), so the K roundings add up to ~u K
// / sqrt(6) times a term, while the result is ~sqrt(K) terms); two summation orders differ
// by sqrt(2) of that, ~0.6 sqrt(K) u: 1.4e-6 for K = 1536 (n_ff, the largest here), 8.6e-7
// for K = 576. Four GEMMs per layer in quadrature: ~2.5e-6 per layer. Attention: a score
// error of ~u sqrt(D) |s| (~1e-5 for the largest scores of a real model, |s| ~ 30)
// perturbs the probabilities by that relative amount, and the output averages it over the
// attended keys: at most ~1e-5 per layer. Propagation: the bf16 mode shows how per-layer
// noise of rms ~2.7e-3 (bf16 rounding, item 1) reaches the outputs - logits 2.65e-3 ..
// 5.5e-3 over the fixtures and the SmolLM2-shaped model (BENCHMARKS.md), e2e covariances
// 1.1e-3 .. 2.8e-3 on the real SmolLM2-135M: the residual stream adds the layers' noise
// rather than compounding it (a factor ~1-2). The same linear propagation of 2.5e-6 ..
// 1e-5 per layer gives ~5e-6 .. 2e-5 end to end, so 1e-4 leaves >= 5x headroom over the
// worst case. It still fails anything that is not fp32 throughout: one bf16 rounding left
// in the path costs ~1e-3 (item 1), and TF32 (GEMM inputs rounded to 2^-11, 8x finer than
// bf16) costs ~1/8 of the bf16 figures, 3e-4 .. 7e-4. Same-token sums: both sides sum the
// same fp32 q/k/v (device: fp32 chunks, then fp64; host: fp64), ~sqrt(T) u ~ 1e-6 (the bf16
// mode measures 1.3e-7 .. 3e-7 for the same arithmetic): 1e-4, the e2e bar, is loose there
// (item 2 explains why rounded Gram inputs would move these sums by only ~2^-9 / sqrt(T_eff):
// the e2e columns, not this one, are what catch them).
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/forward-backend.h"
#include "calibrate/calibrate.h"
#include "calibrate/random-source.h"
#include "model/model.h"
#include "stats/stats.h"

static uint64_t rng_state;
static uint64_t rnd_u64(void) {
    uint64_t x = rng_state;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return rng_state = x;
}

static int g_fail = 0;
static int g_n_sensitive = 0; // bf16 rows not gated on logits / e2e (compare_mode)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return x;
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

static void round_tensor(float * w, size_t n) {
    for (size_t i = 0; i < n; i++) w[i] = bf16_round(w[i]);
}

// What a model visitor does to each tensor the GPU keeps as bf16.
enum tensor_op { ROUND_BF16, NUDGE, RESTORE };
struct tensor_visit {
    enum tensor_op op;
    float * saved;  // NUDGE saves every value here, RESTORE reads them back (in visiting order)
    size_t  at, counter;
};

static void visit_tensor(struct tensor_visit * v, float * w, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (v->op == RESTORE) {
            w[i] = v->saved[v->at++];
        } else if (v->op == ROUND_BF16) {
            w[i] = bf16_round(w[i]);
        } else { // x (1 +- 2^-9), half a bf16 ulp, by a fixed pseudo-random sign: the size of bf16 rounding
            v->saved[v->at++] = w[i];
            const uint64_t h = (++v->counter) * 0x9e3779b97f4a7c15ull;
            w[i] *= (h >> 63) ? 1.0f + 0x1p-9f : 1.0f - 0x1p-9f;
        }
    }
}

// Applies v to the tensors the GPU keeps as bf16 (matrices, embeddings), in a fixed order.
static void visit_model(struct oscar_model * m, struct tensor_visit * v) {
    const struct oscar_model_config * c = &m->config;
    const size_t C = (size_t) c->n_embd, D = (size_t) c->head_dim, Q = (size_t) c->n_head * D;
    const size_t KV = (size_t) c->n_head_kv * D, F = (size_t) c->n_ff, V = (size_t) c->n_vocab;
    visit_tensor(v, m->tok_embd, V * C);
    if (m->output != m->tok_embd) visit_tensor(v, m->output, V * C);
    for (int32_t l = 0; l < c->n_layer; l++) {
        struct oscar_layer_weights * w = &m->layers[l];
        visit_tensor(v, w->wq, Q * C), visit_tensor(v, w->wk, KV * C), visit_tensor(v, w->wv, KV * C);
        visit_tensor(v, w->wo, C * Q);
        if (w->router) { // a sparse layer: the experts are bf16 on the device, the router stays fp32
            const size_t E = (size_t) c->n_expert, Fe = (size_t) c->n_ff_expert, Fs = (size_t) c->n_ff_shared;
            visit_tensor(v, w->exp_gate, E * Fe * C), visit_tensor(v, w->exp_up, E * Fe * C);
            visit_tensor(v, w->exp_down, E * C * Fe);
            if (Fs > 0) visit_tensor(v, w->sh_gate, Fs * C), visit_tensor(v, w->sh_up, Fs * C), visit_tensor(v, w->sh_down, C * Fs);
        } else {
            visit_tensor(v, w->w_gate, F * C), visit_tensor(v, w->w_up, F * C), visit_tensor(v, w->w_down, C * F);
        }
    }
}

static size_t model_bf16_values(const struct oscar_model * m) {
    const struct oscar_model_config * c = &m->config;
    const size_t C = (size_t) c->n_embd, D = (size_t) c->head_dim, Q = (size_t) c->n_head * D;
    const size_t KV = (size_t) c->n_head_kv * D, F = (size_t) c->n_ff, V = (size_t) c->n_vocab;
    size_t n = V * C * (m->output != m->tok_embd ? 2 : 1);
    for (int32_t l = 0; l < c->n_layer; l++) {
        n += Q * C + 2 * KV * C + C * Q;
        if (m->layers[l].router)
            n += 3 * (size_t) c->n_expert * (size_t) c->n_ff_expert * C + 3 * (size_t) c->n_ff_shared * C;
        else
            n += 3 * F * C;
    }
    return n;
}

static void round_model(struct oscar_model * m) {
    struct tensor_visit v = {ROUND_BF16, NULL, 0, 0};
    visit_model(m, &v);
}

static double rel_l2(const float * a, const float * b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double) a[i] - (double) b[i];
        num += d * d, den += (double) b[i] * (double) b[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

// The benchmark captures what calibration uses by default; the check adds the attention-mass
// VATT kind (its own device path: score blocks, fp64 softmax, Σ p² per key).
static const uint32_t KINDS = OSCAR_STATS_KTK | OSCAR_STATS_VTV | OSCAR_STATS_QQT | OSCAR_STATS_SST;
static const uint32_t CHECK_KINDS = KINDS | OSCAR_STATS_VATT;

static struct oscar_stats * new_stats(const struct oscar_model_config * c, uint32_t kinds) {
    struct oscar_stats_params sp = oscar_stats_default_params();
    sp.n_layer = c->n_layer, sp.n_head = c->n_head, sp.n_head_kv = c->n_head_kv, sp.head_dim = c->head_dim;
    sp.kinds = kinds, sp.attn_scale = oscar_attn_scale_param(c); // the model's score scale (Gemma 3)
    struct oscar_stats * s = NULL;
    if (oscar_stats_init(&sp, &s) != OSCAR_OK) {
        fprintf(stderr, "stats: %s\n", oscar_last_error());
        exit(1);
    }
    return s;
}

// Largest relative Frobenius difference over layers of one kind (per-layer matrices).
static double stats_diff(const struct oscar_stats * a, const struct oscar_stats * b, enum oscar_stats_kind kind,
                         int32_t L, int32_t D, bool * bit_equal) {
    double * x = malloc(sizeof(double) * (size_t) D * D), * y = malloc(sizeof(double) * (size_t) D * D), worst = 0.0;
    *bit_equal = true;
    for (int32_t l = 0; l < L; l++) {
        if (oscar_stats_sigma(a, kind, l, -1, x) != OSCAR_OK || oscar_stats_sigma(b, kind, l, -1, y) != OSCAR_OK) {
            fprintf(stderr, "sigma: %s\n", oscar_last_error());
            worst = INFINITY;
            break;
        }
        double num = 0.0, den = 0.0;
        for (int32_t i = 0; i < D * D; i++) num += (x[i] - y[i]) * (x[i] - y[i]), den += y[i] * y[i];
        if (memcmp(x, y, sizeof(double) * (size_t) D * D) != 0) *bit_equal = false;
        const double r = den > 0.0 ? sqrt(num / den) : sqrt(num);
        if (!(r <= worst)) worst = r;
    }
    free(x), free(y);
    return worst;
}

// s: the same-token reference of the device sums; s_vatt: the VATT reference, always fed the
// unrounded rows (the device computes attention-mass weights from fp32 q/k/v in both modes,
// while its bf16-mode pass-1 Gram matrices read bf16 copies).
struct hook_feed { struct oscar_stats * s, * s_vatt; float * buf; bool fp32; };
static enum oscar_status feed(void * user, const struct oscar_capture_layer * cap) {
    struct hook_feed * h = user;
    const struct oscar_model_config * mc = cap->config;
    const float * q = cap->q, * k = cap->k, * v = cap->v;
    if (h->s_vatt && oscar_stats_phase(h->s_vatt) == 1) {
        // the layer's own window, as the device's VATT capture takes it
        const struct oscar_stats_chunk c32 = {cap->layer, cap->n_tokens, cap->n_seq, cap->seq_start, q, k, v,
                                              oscar_layer_window(mc, cap->layer)};
        enum oscar_status st = oscar_stats_add(h->s_vatt, &c32);
        if (st != OSCAR_OK) return st;
    }
    if (!h->fp32 && oscar_stats_phase(h->s) == 1) { // bf16 pass 1 reads bf16 q/k/v: feed the same
        const size_t T = (size_t) cap->n_tokens, nq = T * (size_t) mc->n_head * (size_t) mc->head_dim;
        const size_t nkv = T * (size_t) mc->n_head_kv * (size_t) mc->head_dim;
        float * b = h->buf = realloc(h->buf, sizeof(float) * (nq + 2 * nkv));
        if (!b) return OSCAR_ERR_NOMEM;
        memcpy(b, q, nq * sizeof(float)), memcpy(b + nq, k, nkv * sizeof(float));
        memcpy(b + nq + nkv, v, nkv * sizeof(float));
        round_tensor(b, nq + 2 * nkv);
        q = b, k = b + nq, v = b + nq + nkv;
    }
    const struct oscar_stats_chunk c = {cap->layer, cap->n_tokens, cap->n_seq, cap->seq_start, q, k, v,
                                        oscar_layer_window(mc, cap->layer)};
    return oscar_stats_add(h->s, &c);
}

#define TRY(x)                                                                              \
    do {                                                                                    \
        if ((x) != OSCAR_OK) {                                                              \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, oscar_last_error()); \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

// Two passes over one batch on device dev (fp32: the cuda fp32 mode); logits of pass 1 into logits.
static void run_passes(const struct oscar_model * m, const char * dev, bool fp32, const struct oscar_batch * b,
                       int32_t T, struct oscar_stats * s, struct oscar_stats * hook_s, struct oscar_stats * hook_vatt,
                       float * logits, double * secs) {
    struct oscar_fwd_params p = oscar_fwd_default_params();
    p.device = dev, p.max_tokens = T, p.stats = s, p.fp32 = fp32;
    struct hook_feed hf = {hook_s, hook_vatt, NULL, fp32};
    struct oscar_capture_hook hk = {NULL, feed, &hf, false};
    if (hook_s) p.hook = &hk;
    struct oscar_fwd * f = NULL;
    TRY(oscar_fwd_init(m, &p, &f));
    const double t0 = now_s();
    TRY(oscar_fwd_run(f, b, logits));
    *secs = now_s() - t0;
    TRY(oscar_fwd_end_pass(f));
    if (hook_s) TRY(oscar_stats_end_pass(hook_s));
    if (hook_vatt) TRY(oscar_stats_end_pass(hook_vatt));
    TRY(oscar_fwd_run(f, b, NULL));
    TRY(oscar_fwd_end_pass(f));
    if (hook_s) TRY(oscar_stats_end_pass(hook_s));
    oscar_fwd_free(f);
    free(hf.buf);
}

// The fp32 table's rows, printed after the bf16 table (check_model runs both modes per model).
static char g_fp32_rows[16384];
static size_t g_fp32_len = 0;

// Appends to the fp32 rows (fp32) or prints (bf16).
static void out_row(bool fp32, const char * fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_row(bool fp32, const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (!fp32) {
        vprintf(fmt, ap);
    } else if (g_fp32_len < sizeof g_fp32_rows) {
        const int n = vsnprintf(g_fp32_rows + g_fp32_len, sizeof g_fp32_rows - g_fp32_len, fmt, ap);
        if (n > 0) g_fp32_len += (size_t) n;
        if (g_fp32_len > sizeof g_fp32_rows - 1) g_fp32_len = sizeof g_fp32_rows - 1;
    }
    va_end(ap);
}

// One table row: the CPU pass vs the cuda pass in one mode (bf16: the caller has rounded m's
// matrices to bf16; fp32: m as loaded) on batch b, against the bounds derived above. cpu_io: the
// fp32 mode stores the CPU logits of the unrounded model there; the bf16 mode reads them back to
// measure how far the CPU pass itself moves when only the matrices are rounded; cpu_nudged (bf16
// mode): the CPU logits with every bf16 weight moved by half an ulp (see ROUTING-SENSITIVE below).
static void compare_mode(const char * name, const struct oscar_model * m, const struct oscar_batch * b, bool fp32,
                         float * cpu_io, const float * cpu_nudged) {
    const struct oscar_model_config * c = &m->config;
    const int32_t T = b->seq_start[b->n_seq];
    const size_t V = (size_t) c->n_vocab;
    const double max_logit = fp32 ? 1e-4 : 1e-2, max_same = fp32 ? 1e-4 : 1e-3, max_e2e = fp32 ? 1e-4 : 1e-2;
    float * lc = malloc(sizeof(float) * T * V), * lg = malloc(sizeof(float) * T * V), * lg2 = malloc(sizeof(float) * T * V);
    struct oscar_stats * s_cpu = new_stats(c, CHECK_KINDS), * s_gpu = new_stats(c, CHECK_KINDS);
    struct oscar_stats * s_hook = new_stats(c, CHECK_KINDS), * s_gpu2 = new_stats(c, CHECK_KINDS);
    struct oscar_stats * s_vatt = new_stats(c, OSCAR_STATS_VATT);
    double t_cpu, t_gpu, t_gpu2;
    run_passes(m, "cpu", false, b, T, s_cpu, NULL, NULL, lc, &t_cpu);
    run_passes(m, "cuda", fp32, b, T, s_gpu, s_hook, s_vatt, lg, &t_gpu);
    run_passes(m, "cuda", fp32, b, T, s_gpu2, NULL, NULL, lg2, &t_gpu2);
    const double e_logit = rel_l2(lg, lc, (size_t) T * V);
    const bool det_logits = memcmp(lg, lg2, sizeof(float) * T * V) == 0;
    double sens = 0.0;
    if (fp32) memcpy(cpu_io, lc, sizeof(float) * T * V);
    else sens = fmax(rel_l2(lc, cpu_io, (size_t) T * V), rel_l2(cpu_nudged, lc, (size_t) T * V));
    // ROUTING-SENSITIVE: a model whose CPU pass moves by more than the bf16 logit bound under a
    // bf16-sized change of its matrices (rounding fp32 weights to bf16, or scaling every bf16 weight
    // by 1 +- 2^-9 with a fixed pseudo-random sign: the second also probes a file already in bf16)
    // flips expert choices under any such perturbation (tiny-glm4-moe and its GGUF, 3.5e-2 .. 1.3e-1,
    // where the dense fixtures move by 2e-3 .. 4e-3), so it cannot meet the bf16 logit and e2e
    // bounds, whose derivation assumes smooth propagation; its bf16 row is printed, its same-token
    // sums and determinism are gated, and its fp32 row (1e-4) checks the pass itself
    const bool sensitive = !fp32 && !(sens <= max_logit);
    out_row(fp32, "| %s%s | %d | %.2e | %s |", name, sensitive ? " (routing-sensitive)" : "", T, e_logit,
            det_logits ? "yes" : "NO");
    if ((!sensitive && !(e_logit <= max_logit)) || !det_logits) g_fail = 1;
    if (sensitive) g_n_sensitive++;
    const enum oscar_stats_kind kinds[5] = {OSCAR_STATS_KTK, OSCAR_STATS_VTV, OSCAR_STATS_QQT, OSCAR_STATS_SST,
                                            OSCAR_STATS_VATT};
    bool all_det = true;
    for (int i = 0; i < 5; i++) {
        bool eq, det;
        const struct oscar_stats * ref = kinds[i] == OSCAR_STATS_VATT ? s_vatt : s_hook;
        const double same = stats_diff(s_gpu, ref, kinds[i], c->n_layer, c->head_dim, &eq);
        const double e2e = stats_diff(s_gpu, s_cpu, kinds[i], c->n_layer, c->head_dim, &eq);
        stats_diff(s_gpu, s_gpu2, kinds[i], c->n_layer, c->head_dim, &det);
        all_det = all_det && det;
        out_row(fp32, " %.1e / %.1e |", same, e2e);
        if (!(same <= max_same) || (!sensitive && !(e2e <= max_e2e))) g_fail = 1;
    }
    out_row(fp32, " %s | %.3f / %.3f |", all_det ? "yes" : "NO", t_cpu, t_gpu2);
    if (sensitive) out_row(fp32, " the CPU pass moves %.1e under bf16-sized changes of its matrices: logits and e2e not gated here |", sens);
    out_row(fp32, "\n");
    if (!all_det) g_fail = 1;
    fflush(stdout);
    oscar_stats_free(s_cpu), oscar_stats_free(s_gpu), oscar_stats_free(s_hook), oscar_stats_free(s_gpu2);
    oscar_stats_free(s_vatt);
    free(lc), free(lg), free(lg2);
}

// The logits of one cuda run of m (cfg: the config the device pass uses; m's weights) on b.
static void cuda_logits(const struct oscar_model * m, const struct oscar_model_config * cfg, bool fp32,
                        const struct oscar_batch * b, float * logits) {
    struct oscar_model mm = *m; // a shallow copy: the same weights under cfg
    mm.config = *cfg;
    struct oscar_fwd_params p = oscar_fwd_default_params();
    p.device = "cuda", p.max_tokens = b->seq_start[b->n_seq], p.fp32 = fp32;
    struct oscar_fwd * f = NULL;
    TRY(oscar_fwd_init(&mm, &p, &f));
    TRY(oscar_fwd_run(f, b, logits));
    oscar_fwd_free(f);
}

// Control: the fp32 cuda pass with cfg (m's config with one feature off) must miss the CPU
// logits of m by more than 10x the fp32 bound.
static void control_off(const char * name, const char * what, const struct oscar_model * m,
                        const struct oscar_model_config * cfg, const struct oscar_batch * b) {
    const size_t n = (size_t) b->seq_start[b->n_seq] * (size_t) m->config.n_vocab;
    float * lc = malloc(sizeof(float) * n), * lg = malloc(sizeof(float) * n);
    struct oscar_fwd_params p = oscar_fwd_default_params();
    p.device = "cpu", p.max_tokens = b->seq_start[b->n_seq];
    struct oscar_fwd * f = NULL;
    TRY(oscar_fwd_init(m, &p, &f));
    TRY(oscar_fwd_run(f, b, lc));
    oscar_fwd_free(f);
    cuda_logits(m, cfg, true, b, lg);
    const double e = rel_l2(lg, lc, n);
    const bool missed = e > 1e-3;
    printf("control %s without %s: logits rel L2 %.2e vs CPU (%s)\n", name, what, e,
           missed ? "misses, as it must" : "DOES NOT MISS: the feature is not exercised");
    g_fail |= !missed;
    free(lc), free(lg);
}

// tokens: the batch's token ids, or NULL for random ones. Runs the fp32 mode on m as given,
// then rounds m's matrices to bf16 in place and runs the bf16 mode.
static void check_model(const char * name, struct oscar_model * m, const int32_t * lens, int32_t n_seq,
                        const int32_t * tokens) {
    const struct oscar_model_config * c = &m->config;
    int32_t seq_start[8] = {0};
    for (int32_t s = 0; s < n_seq; s++) seq_start[s + 1] = seq_start[s] + lens[s];
    const int32_t T = seq_start[n_seq];
    int32_t * tok = malloc(sizeof(int32_t) * (size_t) T);
    for (int32_t t = 0; t < T; t++) tok[t] = tokens ? tokens[t] : (int32_t) (rnd_u64() % (uint64_t) c->n_vocab);
    const struct oscar_batch b = {n_seq, seq_start, tok, NULL};
    float * cpu_logits = malloc(sizeof(float) * (size_t) T * (size_t) c->n_vocab);
    compare_mode(name, m, &b, true, cpu_logits, NULL);
    round_model(m);
    // the CPU pass with every bf16 weight moved by half an ulp, then the weights restored bit for bit
    float * nudged = malloc(sizeof(float) * (size_t) T * (size_t) c->n_vocab);
    struct tensor_visit v = {NUDGE, malloc(sizeof(float) * model_bf16_values(m)), 0, 0};
    struct oscar_stats * s_probe = new_stats(c, CHECK_KINDS);
    double t_probe;
    if (!nudged || !v.saved) {
        fprintf(stderr, "%s: out of memory for the bf16 sensitivity probe\n", name);
        exit(1);
    }
    visit_model(m, &v);
    run_passes(m, "cpu", false, &b, T, s_probe, NULL, NULL, nudged, &t_probe);
    v.op = RESTORE, v.at = 0;
    visit_model(m, &v);
    compare_mode(name, m, &b, false, cpu_logits, nudged);
    oscar_stats_free(s_probe);
    free(v.saved);
    free(nudged);
    free(cpu_logits);
    free(tok);
}

// The real model at `model` on the first 3 x 512 tokens of `corpus` (both paths see the same
// weights - fp32 as loaded, then bf16-rounded - and the same tokens).
static void check_real(const char * model, const char * corpus) {
    struct oscar_model * m = NULL;
    struct oscar_tokenizer * tok = NULL;
    struct oscar_calib_corpus cc;
    memset(&cc, 0, sizeof cc);
    TRY(oscar_model_load(model, &m));
    TRY(oscar_tokenizer_load(model, &tok));
    TRY(oscar_calib_corpus_load(tok, corpus, NULL, 3 * 512, &cc));
    if (cc.n < 3 * 512) {
        fprintf(stderr, "%s: only %lld tokens\n", corpus, (long long) cc.n);
        exit(1);
    }
    const int32_t lens[3] = {512, 512, 512};
    check_model(m->config.name, m, lens, 3, cc.tokens);
    oscar_calib_corpus_free(&cc);
    oscar_tokenizer_free(tok);
    oscar_model_free(m);
}

// Columns: logits rel L2 of the GPU vs the CPU pass; per covariance kind "same-tok / e2e" =
// relative Frobenius difference (worst layer) of the device sums vs lib/stats fed the GPU's
// own q/k/v (same-tok) and vs the CPU pass's capture (e2e); then bit-identity of a second run.
static const char * const TABLE_HEAD =
    "| model | T | logits rel L2 vs CPU | logits deterministic | KTK same-tok / e2e | VTV same-tok / e2e |"
    " QQT same-tok / e2e | SST same-tok / e2e | VATT same-tok / e2e | capture deterministic |"
    " CPU s / GPU s (pass 1) |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|\n";

static bool is_moe_fixture(const char * name) { return strstr(name, "moe") || strstr(name, "mixtral"); }

// moe_only: the MoE fixtures and their controls alone (the memcheck of the sparse MLP).
static int do_check(bool small, bool moe_only, const char * real_model, const char * corpus) {
    struct oscar_fwd_params p = oscar_fwd_default_params();
    p.device = "cuda";
    struct oscar_model * m = NULL;
    TRY(oscar_model_load("tests/fixtures/models/tiny-qwen3", &m));
    struct oscar_fwd * f = NULL;
    if (oscar_fwd_init(m, &p, &f) != OSCAR_OK) {
        printf("no CUDA forward pass: %s\n", oscar_last_error());
        oscar_model_free(m);
        return 77;
    }
    oscar_fwd_free(f);
    oscar_model_free(m);
    printf("bf16 mode (default): CPU pass on bf16-rounded weights; bounds: logits 1e-2, same-tok 1e-3, e2e 1e-2\n\n");
    printf("%s", TABLE_HEAD);
    const int32_t lens[3] = {100, 37, 190};
    // tiny-llama / tiny-qwen2 / tiny-qwen3 (+ GGUFs: llama's q/k un-permuted at load, qwen2's biases, qwen3's norms);
    // tiny-llama3: Llama 3.x RoPE scaling from config.json, and from the GGUF's rope_freqs.weight;
    // tiny-mistral / tiny-phi3: sliding windows (phi3: partial rotary too); tiny-gemma3-hub:
    // Gemma 3's layer with its local (window 12, base 10^4) and global layers
    // tiny-qwen3-yarn (+ GGUF): YaRN's frequencies (from the host) and its attention factor on cos/sin;
    // tiny-phi3.gguf: the fused tensors split at load;
    // the mixture-of-experts fixtures: softmax top-k renormalised (qwen3-moe, mixtral), with a
    // sigmoid-gated shared expert (qwen2-moe), glm4_moe's sigmoid grouped routing with a choice-only
    // bias, routed scale, an ungated shared expert and a dense first layer (glm4-moe)
    const char * tiny[] = {"tiny-llama",  "tiny-llama.gguf", "tiny-qwen2", "tiny-qwen2.gguf", "tiny-qwen3",
                           "tiny-qwen3.gguf", "tiny-llama3",
                           "tiny-llama3.gguf", "tiny-mistral", "tiny-mistral.gguf", "tiny-phi3", "tiny-phi3.gguf",
                           "tiny-gemma3-hub",  "tiny-gemma3-hub.gguf", "tiny-qwen3-yarn", "tiny-qwen3-yarn.gguf",
                           "tiny-qwen3-moe", "tiny-qwen2-moe", "tiny-mixtral", "tiny-glm4-moe", "tiny-glm4-moe.gguf"};
    for (size_t i = 0; i < sizeof tiny / sizeof tiny[0]; i++) {
        if (moe_only && !is_moe_fixture(tiny[i])) continue;
        char dir[256];
        snprintf(dir, sizeof dir, "tests/fixtures/models/%s", tiny[i]);
        TRY(oscar_model_load(dir, &m));
        check_model(tiny[i], m, lens, 3, NULL);
        oscar_model_free(m);
    }
    if (!moe_only) {   // tiny-gemma3: query_pre_attn_scalar 24, head_dim 32: everything with its score scale (the
        // attention-mass sums included); an accumulator made for head_dim^-1/2 is refused
        int32_t seq_start[4] = {0};
        for (int32_t s = 0; s < 3; s++) seq_start[s + 1] = seq_start[s] + lens[s];
        int32_t tok[327];
        TRY(oscar_model_load("tests/fixtures/models/tiny-gemma3", &m));
        for (int32_t t = 0; t < seq_start[3]; t++) tok[t] = (int32_t) (rnd_u64() % (uint64_t) m->config.n_vocab);
        const struct oscar_batch b = {3, seq_start, tok, NULL};
        struct oscar_model_config off = m->config;
        off.embed_scale = false;
        control_off("tiny-gemma3", "the sqrt(C) embedding scale", m, &off, &b);
        off = m->config;
        off.attn_scale = 0.0f; // head_dim^-1/2
        struct oscar_stats * s = new_stats(&off, KINDS);
        struct oscar_fwd_params ps = p;
        ps.stats = s, ps.max_tokens = seq_start[3];
        f = NULL;
        const enum oscar_status st = oscar_fwd_init(m, &ps, &f);
        const bool ok = st != OSCAR_OK && strstr(oscar_last_error(), "score scale");
        printf("tiny-gemma3 with default-scale stats on cuda: %s (%s)\n", ok ? "refused" : "NOT REFUSED",
               oscar_last_error());
        g_fail |= !ok;
        oscar_fwd_free(f);
        oscar_stats_free(s);
        check_model("tiny-gemma3", m, lens, 3, NULL);
        oscar_model_free(m);
        // the controls of the windows and of partial rotary, on unrounded weights
        TRY(oscar_model_load("tests/fixtures/models/tiny-mistral", &m));
        off = m->config;
        off.sliding_window = 0;
        control_off("tiny-mistral", "its sliding window", m, &off, &b);
        oscar_model_free(m);
        TRY(oscar_model_load("tests/fixtures/models/tiny-phi3", &m));
        off = m->config;
        off.rope_dim = 0; // every dim rotated
        control_off("tiny-phi3", "partial rotary", m, &off, &b);
        oscar_model_free(m);
        TRY(oscar_model_load("tests/fixtures/models/tiny-qwen3-yarn", &m));
        off = m->config;
        off.rope_attn_factor = 1.0f; // YaRN's frequencies, cos/sin unscaled
        int32_t tok_y[327]; // its vocabulary is 128
        for (int32_t t = 0; t < seq_start[3]; t++) tok_y[t] = tok[t] % m->config.n_vocab;
        const struct oscar_batch by = {3, seq_start, tok_y, NULL};
        control_off("tiny-qwen3-yarn", "YaRN's attention factor", m, &off, &by);
        oscar_model_free(m);
    }
    {   // MoE controls: the device routing without one of its rules must miss the CPU logits
        int32_t seq_start[4] = {0};
        for (int32_t s = 0; s < 3; s++) seq_start[s + 1] = seq_start[s] + lens[s];
        int32_t tok[327];
        TRY(oscar_model_load("tests/fixtures/models/tiny-glm4-moe", &m));
        for (int32_t t = 0; t < seq_start[3]; t++) tok[t] = (int32_t) (rnd_u64() % 128); // both vocabularies
        const struct oscar_batch b = {3, seq_start, tok, NULL};
        struct oscar_model_config off = m->config;
        off.expert_bias = false;
        control_off("tiny-glm4-moe", "the e_score_correction_bias", m, &off, &b);
        off = m->config;
        off.n_expert_group = 1, off.n_group_used = 1;
        control_off("tiny-glm4-moe", "grouped top-k", m, &off, &b);
        oscar_model_free(m);
        TRY(oscar_model_load("tests/fixtures/models/tiny-qwen3-moe", &m));
        off = m->config;
        off.expert_norm_topk = false;
        control_off("tiny-qwen3-moe", "top-k renormalisation", m, &off, &b);
        oscar_model_free(m);
    }
    if (real_model) check_real(real_model, corpus);
    if (!small && !moe_only) {
        struct oscar_model_config c;
        memset(&c, 0, sizeof c);
        c.arch = OSCAR_ARCH_LLAMA, c.n_layer = 30, c.n_embd = 576, c.n_head = 9, c.n_head_kv = 3, c.head_dim = 64;
        c.n_ff = 1536, c.n_vocab = 49152, c.n_ctx_train = 8192, c.rope_theta = 100000.0f, c.rms_eps = 1e-5f;
        c.tied_embeddings = true;
        snprintf(c.name, sizeof c.name, "SmolLM2-135M shape (random)");
        TRY(oscar_model_init_random(&c, rnd_u64(), &m));
        const int32_t slens[3] = {256, 128, 201};
        check_model("smollm2-135m-random", m, slens, 3, NULL);
        oscar_model_free(m);
        // the shapes the fixtures do not reach: head_dim 128 rotating its first 64 dims (GLM's
        // partial rotary; 2 pass-through dims per lane) under a window of 100 (tiles skipped in
        // the 256-token sequence), and head_dim 256 (the fp32 attention kernel in both modes)
        // with Gemma 3's layer, local layers on their own RoPE base
        struct oscar_model_config pr = c;
        pr.n_layer = 4, pr.n_embd = 512, pr.n_head = 8, pr.n_head_kv = 2, pr.head_dim = 128, pr.rope_dim = 64;
        pr.n_ff = 1024, pr.n_vocab = 1000, pr.sliding_window = 100;
        snprintf(pr.name, sizeof pr.name, "partial rotary 64/128, window 100 (random)");
        TRY(oscar_model_init_random(&pr, rnd_u64(), &m));
        check_model("rope64-of-128-window100-random", m, slens, 3, NULL);
        oscar_model_free(m);
        struct oscar_model_config g3 = pr;
        g3.arch = OSCAR_ARCH_GEMMA3, g3.n_layer = 6, g3.n_head = 4, g3.head_dim = 256, g3.rope_dim = 0;
        g3.rope_theta = 1000000.0f, g3.rope_theta_swa = 10000.0f, g3.swa_pattern = 3, g3.rms_eps = 1e-6f;
        g3.qk_norm = true, g3.post_norms = true, g3.embed_scale = true, g3.act = OSCAR_ACT_GELU_TANH;
        g3.norm_offset = 1.0f;
        snprintf(g3.name, sizeof g3.name, "Gemma 3 layer, head_dim 256 (random)");
        TRY(oscar_model_init_random(&g3, rnd_u64(), &m));
        check_model("gemma3-d256-random", m, slens, 3, NULL);
        oscar_model_free(m);
    }
    printf("\nfp32 mode (oscar_fwd_params.fp32): CPU pass on the unrounded weights; bounds: logits 1e-4,"
           " same-tok 1e-4, e2e 1e-4\n\n");
    printf("%s%s", TABLE_HEAD, g_fp32_rows);
    printf("check: %s (%d routing-sensitive bf16 row(s) gated on same-token sums and determinism only)\n",
           g_fail ? "FAIL" : "PASS", g_n_sensitive);
    return g_fail;
}

// ---- bench -------------------------------------------------------------------------------

static double bench_runs(struct oscar_fwd * f, const struct oscar_batch * b, int reps) {
    double best = INFINITY;
    for (int r = 0; r < reps; r++) {
        const double t0 = now_s();
        TRY(oscar_fwd_run(f, b, NULL));
        const double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

// Stage breakdown (OSCAR_FWD_PROFILE=1): per-run device ms of the bare run and of pass 1 / 2
// (end info: pass 1 + pass 2 runs summed), and the attention kernel alone with the fp32
// kernel for comparison (a fresh bare pass with OSCAR_FWD_ATT=fp32).
static void print_profile(const struct oscar_fwd_info * bare, const struct oscar_fwd_info * p1,
                          const struct oscar_fwd_info * p12, int runs, int32_t T,
                          int32_t layers, const struct oscar_model_config * c, const struct oscar_batch * b) {
    static const char * names[6] = {"rmsnorm + qkv GEMM", "q/k/v epilogue", "attention", "o GEMM",
                                    "MLP (norm, GEMMs, SwiGLU)", "capture"};
    struct oscar_fwd_params p = oscar_fwd_default_params();
    p.device = "cuda", p.max_tokens = T;
    struct oscar_fwd * f = NULL;
    struct oscar_fwd_info f32;
    memset(&f32, 0, sizeof f32);
    setenv("OSCAR_FWD_ATT", "fp32", 1);
    if (oscar_fwd_init_random(c, 42, &p, &f) == OSCAR_OK && oscar_fwd_run(f, b, NULL) == OSCAR_OK) oscar_fwd_info(f, &f32);
    oscar_fwd_free(f);
    unsetenv("OSCAR_FWD_ATT");
    double flops = 0.0; // causal attention: 4 D per (query, key <= query) pair per head
    for (int32_t s = 0; s < b->n_seq; s++) {
        const double n = b->seq_start[s + 1] - b->seq_start[s];
        flops += 4.0 * c->head_dim * c->n_head * n * (n + 1) / 2 * layers;
    }
    printf("\nStage breakdown (device ms per run of %d tokens, cudaEvents, mean of %d runs; attention %s)\n\n", T,
           runs, bare->attention_tc ? "tensor-core" : "fp32");
    printf("| stage | bare | pass 1 | pass 2 | bare, fp32 attention kernel (1 run) |\n|---|---|---|---|---|\n");
    double tot[4] = {0, 0, 0, 0};
    for (int i = 0; i < 6; i++) {
        const double x[4] = {bare->stage_ms[i] / runs, p1->stage_ms[i] / runs,
                             (p12->stage_ms[i] - p1->stage_ms[i]) / runs, f32.stage_ms[i]};
        printf("| %s | %.1f | %.1f | %.1f | %.1f |\n", names[i], x[0], x[1], x[2], x[3]);
        for (int j = 0; j < 4; j++) tot[j] += x[j];
    }
    printf("| sum | %.1f | %.1f | %.1f | %.1f |\n", tot[0], tot[1], tot[2], tot[3]);
    printf("| attention TFLOP/s | %.0f | | %.0f |\n", flops / (bare->stage_ms[2] / runs * 1e-3) * 1e-12,
           f32.stage_ms[2] > 0.0 ? flops / (f32.stage_ms[2] * 1e-3) * 1e-12 : 0.0);
}

static int do_bench(int32_t n_seq, int32_t len, int32_t layers, int reps, const char * hf_csv) {
    struct oscar_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = OSCAR_ARCH_QWEN3, c.n_layer = layers, c.n_embd = 4096, c.n_head = 32, c.n_head_kv = 8, c.head_dim = 128;
    c.n_ff = 12288, c.n_vocab = 151936, c.n_ctx_train = 40960, c.rope_theta = 1000000.0f, c.rms_eps = 1e-6f;
    c.qk_norm = true;
    const int32_t T = n_seq * len;
    int32_t * seq_start = malloc(sizeof(int32_t) * (size_t) (n_seq + 1)), * tok = malloc(sizeof(int32_t) * (size_t) T);
    for (int32_t s = 0; s <= n_seq; s++) seq_start[s] = s * len;
    for (int32_t t = 0; t < T; t++) tok[t] = (int32_t) (rnd_u64() % (uint64_t) c.n_vocab);
    const struct oscar_batch b = {n_seq, seq_start, tok, NULL};
    struct oscar_fwd_params p = oscar_fwd_default_params();
    p.device = "cuda", p.max_tokens = T;
    struct oscar_fwd * f = NULL;
    struct oscar_fwd_info info;
    double t0 = now_s();
    if (oscar_fwd_init_random(&c, 42, &p, &f) != OSCAR_OK) {
        printf("bench: %s\n", oscar_last_error());
        return 77;
    }
    const double t_init = now_s() - t0;
    TRY(oscar_fwd_run(f, &b, NULL)); // warm-up (cuBLAS heuristics, module load)
    const double t_bare = bench_runs(f, &b, reps);
    oscar_fwd_info(f, &info);
    const struct oscar_fwd_info bare = info;
    oscar_fwd_free(f);

    struct oscar_stats * s = new_stats(&c, KINDS);
    p.stats = s;
    TRY(oscar_fwd_init_random(&c, 42, &p, &f));
    TRY(oscar_fwd_run(f, &b, NULL));
    const double t_p1 = bench_runs(f, &b, reps);
    struct oscar_fwd_info info1;
    oscar_fwd_info(f, &info1);
    t0 = now_s();
    TRY(oscar_fwd_end_pass(f));
    const double t_end1 = now_s() - t0;
    TRY(oscar_fwd_run(f, &b, NULL)); // pass 2 must see as many tokens as pass 1 (warm-up + reps)
    const double t_p2 = bench_runs(f, &b, reps);
    t0 = now_s();
    TRY(oscar_fwd_end_pass(f));
    const double t_end2 = now_s() - t0;
    oscar_fwd_info(f, &info);
    oscar_fwd_free(f);
    oscar_stats_free(s);

    const double GiB = 1024.0 * 1024.0 * 1024.0;
    if (bare.stage_ms[0] > 0.0) print_profile(&bare, &info1, &info, reps + 1, T, layers, &c, &b);
    printf("\nQwen3-8B shape (%d layers, random bf16 weights on the device, init %.1f s), %d x %d = %d tokens, "
           "best of %d, device %s\n\n", layers, t_init, n_seq, len, T, reps, bare.device);
    printf("| run | seconds | tokens/s | overhead vs bare | device memory used (GiB) |\n|---|---|---|---|---|\n");
    printf("| oscar bare prefill (no LM head) | %.3f | %.0f | - | %.1f (weights %.1f, workspace %.1f) |\n", t_bare,
           T / t_bare, (double) bare.device_used_bytes / GiB, (double) bare.weight_bytes / GiB,
           (double) bare.workspace_bytes / GiB);
    printf("| oscar capture pass 1 (KTK, VTV, QQT) | %.3f | %.0f | %+.1f%% | %.1f |\n", t_p1, T / t_p1,
           100.0 * (t_p1 / t_bare - 1.0), (double) info.device_used_bytes / GiB);
    printf("| oscar capture pass 2 (SST) | %.3f | %.0f | %+.1f%% | %.1f |\n", t_p2, T / t_p2,
           100.0 * (t_p2 / t_bare - 1.0), (double) info.device_used_bytes / GiB);
    printf("| end_pass 1 / 2 (download + lib/stats) | %.3f / %.3f | | | |\n", t_end1, t_end2);
    if (hf_csv) { // written by bench-prefill-hf.py: label,seconds,tokens,peak_gib
        FILE * fp = fopen(hf_csv, "r");
        char label[128];
        double sec, peak;
        long tokens;
        while (fp && fscanf(fp, "%127[^,],%lf,%ld,%lf\n", label, &sec, &tokens, &peak) == 4)
            printf("| %s | %.3f | %.0f | %+.1f%% vs oscar bare | %.1f (torch peak allocated) |\n", label, sec,
                   (double) tokens / sec, 100.0 * (sec / t_bare - 1.0), peak);
        if (fp) fclose(fp);
        else printf("| transformers | (no %s) | | | |\n", hf_csv);
    }
    free(seq_start), free(tok);
    return 0;
}

// The bare pass's MLP stage (OSCAR_FWD_PROFILE=1 cudaEvents, stage 4 -> 5) of model c: device ms
// per layer and run, best of reps after a warm-up on b[0], run r on b[r + 1] (other tokens: other
// routings, as the layers of a calibration see); *secs the best run's wall time, phase[3] the
// sparse MLP's phases of that run (ms per layer).
static double mlp_ms(const struct oscar_model_config * c, const struct oscar_batch * b, int reps, double * secs,
                     double * phase) {
    struct oscar_fwd_params p = oscar_fwd_default_params();
    p.device = "cuda", p.max_tokens = b->seq_start[b->n_seq];
    struct oscar_fwd * f = NULL;
    struct oscar_fwd_info a, z;
    TRY(oscar_fwd_init_random(c, 42, &p, &f));
    TRY(oscar_fwd_run(f, &b[0], NULL)); // warm-up
    double best = INFINITY;
    *secs = INFINITY;
    for (int r = 0; r < reps; r++) {
        oscar_fwd_info(f, &a);
        const double t0 = now_s();
        TRY(oscar_fwd_run(f, &b[r + 1], NULL));
        const double dt = now_s() - t0;
        oscar_fwd_info(f, &z);
        const double ms = (z.stage_ms[4] - a.stage_ms[4]) / c->n_layer;
        if (ms < best) {
            best = ms;
            for (int i = 0; i < 3; i++) phase[i] = (z.moe_ms[i] - a.moe_ms[i]) / c->n_layer;
        }
        if (dt < *secs) *secs = dt;
    }
    oscar_fwd_free(f);
    return best;
}

// moebench: the Qwen3-30B-A3B shape's sparse MLP (routing, the counting sort, the gather, one
// GEMM pair per expert, the combine) against a dense MLP of equal FLOPs (n_ff = k Fe, the same
// model otherwise), both in this process on the same token sets.
static int do_moebench(int32_t n_seq, int32_t len, int32_t layers, int reps) {
    struct oscar_model_config moe, dense;
    TRY(oscar_calib_random_config("qwen3-30b-a3b", &moe));
    moe.n_layer = layers;
    dense = moe;
    dense.arch = OSCAR_ARCH_QWEN3, dense.n_expert = 0, dense.n_expert_used = 0, dense.n_ff_expert = 0;
    dense.moe_step = 0, dense.expert_norm_topk = false, dense.n_ff = moe.n_expert_used * moe.n_ff_expert;
    const int32_t T = n_seq * len;
    int32_t * seq_start = malloc(sizeof(int32_t) * (size_t) (n_seq + 1));
    int32_t * tok = malloc(sizeof(int32_t) * (size_t) T * (size_t) (reps + 1));
    struct oscar_batch * b = malloc(sizeof *b * (size_t) (reps + 1));
    for (int32_t s = 0; s <= n_seq; s++) seq_start[s] = s * len;
    for (int r = 0; r <= reps; r++) { // a token set per run
        for (int32_t t = 0; t < T; t++) tok[(size_t) r * T + t] = (int32_t) (rnd_u64() % (uint64_t) moe.n_vocab);
        b[r] = (struct oscar_batch){n_seq, seq_start, tok + (size_t) r * T, NULL};
    }
    setenv("OSCAR_FWD_PROFILE", "1", 1);
    double s_moe, s_dense, ph[3], ph_dense[3];
    const double m_moe = mlp_ms(&moe, b, reps, &s_moe, ph), m_dense = mlp_ms(&dense, b, reps, &s_dense, ph_dense);
    unsetenv("OSCAR_FWD_PROFILE");
    // 3 GEMMs of 2 C (k Fe) FLOPs per token: the same for both
    const double flop = 6.0 * T * moe.n_embd * (double) moe.n_expert_used * moe.n_ff_expert;
    printf("\nMLP at equal FLOPs: Qwen3-30B-A3B shape (%d layers, %d tokens = %d x %d; 128 experts of 768, top-8) vs "
           "dense n_ff %d; device ms per layer (cudaEvents), best of %d\n\n", layers, T, n_seq, len, dense.n_ff, reps);
    printf("| MLP | ms per layer | TFLOP/s | rate vs dense | bare prefill s (%d layers) |\n|---|---|---|---|---|\n", layers);
    printf("| sparse: route + sort + gather + expert GEMMs + combine | %.2f | %.0f | %.0f%% | %.3f |\n", m_moe,
           flop / (m_moe * 1e-3) * 1e-12, 100.0 * m_dense / m_moe, s_moe);
    printf("| dense, n_ff = k Fe | %.2f | %.0f | 100%% | %.3f |\n", m_dense, flop / (m_dense * 1e-3) * 1e-12, s_dense);
    printf("\nsparse MLP phases (ms per layer): router GEMM + routing + grouping + gather %.2f, expert GEMMs + "
           "activation %.2f (%.0f TFLOP/s, %.0f%% of the dense MLP's rate), combine %.2f\n", ph[0], ph[1],
           flop / (ph[1] * 1e-3) * 1e-12, 100.0 * m_dense / ph[1], ph[2]);
    free(seq_start), free(tok), free(b);
    return 0;
}

int main(int argc, char ** argv) {
    uint64_t seed = (uint64_t) time(NULL);
    bool small = false, moe_only = false;
    int32_t n_seq = 15, len = 2048, layers = 36, reps = 3;
    const char * hf = NULL, * real = NULL, * corpus = NULL;
    if (argc < 2) {
        fprintf(stderr, "usage: %s check|bench [options]\n", argv[0]);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--small")) small = true;
        else if (!strcmp(argv[i], "--moe")) moe_only = true;
        else if (!strcmp(argv[i], "--seqs") && i + 1 < argc) n_seq = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--len") && i + 1 < argc) len = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hf") && i + 1 < argc) hf = argv[++i];
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) real = argv[++i];
        else if (!strcmp(argv[i], "--corpus") && i + 1 < argc) corpus = argv[++i];
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    printf("seed %llu\n", (unsigned long long) seed);
    rng_state = seed | 1;
    if (real && !corpus) {
        fprintf(stderr, "--model needs --corpus\n");
        return 2;
    }
    if (!strcmp(argv[1], "check")) return do_check(small, moe_only, real, corpus);
    if (!strcmp(argv[1], "bench")) return do_bench(n_seq, len, layers, reps, hf);
    if (!strcmp(argv[1], "moebench")) return do_moebench(n_seq, len, layers, reps);
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
}
