// forward.c - CPU forward pass of a decoder-only transformer (Llama/SmolLM, Qwen2, Qwen3, Phi-3, Qwen2/3-MoE,
// Mixtral, Gemma 3), fp32.
//
// Every projection is one GEMM over all T tokens of the batch (util/blas: fixed tiles, so
// the bytes do not depend on the thread count); attention
// runs per (sequence, query head, block of BQ query rows) on OpenMP threads with an
// online softmax over key tiles, so no T x T score matrix exists at all. All scratch is sized once in
// oscar_forward_init from max_tokens; oscar_forward_run allocates nothing.
// Reductions that decide accuracy (RMSNorm sum of squares, softmax denominators)
// are accumulated in double. RoPE angles follow Hugging Face (fp32 inv_freq and
// fp32 angle = inv_freq * pos) so that captured Q/K match transformers bit-closely;
// the frequencies come from oscar_rope_inv_freq (plain, linear, Llama 3 or YaRN scaling,
// GGUF rope_freqs divisors; YaRN's attention factor multiplies cos/sin), only the first rope_dim dims of a head rotate
// (partial rotary), and sliding-window layers attend to their last W keys (with their own
// RoPE base when rope_theta_swa is set: Gemma's local layers). Gemma's other choices are
// parameters of the same pass: RMSNorms by (norm_offset + w), the GELU-tanh MLP, the score scale
// (oscar_attn_scale), the sqrt(C)-scaled embedding and the sandwich norms (post_norms). Sparse
// (mixture-of-experts) layers route each token to its top-k experts and run one GEMM per
// expert over the rows routed to it (moe_mlp).
//
// It refuses: batches larger than max_tokens, tokens outside [0, V), empty or
// unordered sequences, and models whose shapes do not fit together. The built-in
// attention sees only the tokens of the same sequence in this batch (there is no
// KV cache); a sequence fed in chunks needs an attention override that keeps one.
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "attention/attention.h"
#include "model/model.h"
#include "model/moe-route.h"
#include "util/blas.h"
#include "util/cli.h"

enum { ATT_BQ = 64 }; // query rows per attention task

struct oscar_forward {
    const struct oscar_model * m;
    struct oscar_forward_params p;
    int32_t n_threads;
    const struct oscar_batch * batch; // set by oscar_forward_begin
    float *   x;        // [T, C] residual stream
    float *   xn;       // [T, C] normed input of the current sub-layer; final normed hidden after a run
    float *   q;        // [T, Hq, D]
    float *   k;        // [T, Hkv, D]
    float *   v;        // [T, Hkv, D]
    float *   att;      // [T, Hq, D]
    float *   gate;     // [T, max(F, Fe, Fs)]
    float *   up;       // [T, max(F, Fe, Fs)]
    // sparse layers (NULL in a dense model)
    float *   probs;    // [T, E] router logits, then probabilities
    int32_t * top_e;    // [T, k] each token's experts, best first
    float *   top_w;    // [T, k] their weights
    int32_t * by_exp;   // [T * k] the (token, slot) entries t * k + j grouped by expert, tokens ascending
    int32_t * exp_n;    // [E + 1] offsets of each expert's entries in by_exp
    int32_t * exp_at;   // [E] fill cursors of the counting sort
    float *   rows;     // [T, C] one expert's gathered input rows, then the shared expert's output
    float *   ye;       // [T, C] one expert's output rows
    float *   slot;     // [T * k, C] each (token, slot)'s expert output
    float *   cos_t;    // [T, R/2], R = rotated dims (oscar_rope_dim)
    float *   sin_t;    // [T, R/2]
    float *   inv_freq; // [R/2]
    float *   cos_swa;  // [T, R/2] the sliding layers' tables when they have a RoPE base of their own, else NULL
    float *   sin_swa;
    float *   inv_swa;  // [R/2]
    int32_t * pos;      // [T] positions used by the last run
    int32_t   n_tokens; // T of the last run
    int32_t   rope_T;   // tokens cos_t/sin_t hold the angles of pos for (-1: none)
};

struct oscar_forward_params oscar_forward_default_params(void) {
    struct oscar_forward_params p = {0};
    p.n_threads  = 0;
    p.max_tokens = 512;
    return p;
}

static enum oscar_status check_model(const struct oscar_model * m) {
    const struct oscar_model_config * c = &m->config;
    if (c->n_layer <= 0 || c->n_embd <= 0 || c->n_head <= 0 || c->n_head_kv <= 0 || c->head_dim <= 0 ||
        c->n_ff <= 0 || c->n_vocab <= 0)
        return osc_error(OSCAR_ERR_INVALID, "%s: non-positive dimension in model config", m->source);
    if (c->head_dim > OSCAR_MAX_HEAD_DIM)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: head_dim %d > %d", m->source, c->head_dim, OSCAR_MAX_HEAD_DIM);
    if (c->head_dim % 2 != 0)
        return osc_error(OSCAR_ERR_INVALID, "%s: head_dim %d is odd (RoPE needs pairs)", m->source, c->head_dim);
    if (c->n_head % c->n_head_kv != 0)
        return osc_error(OSCAR_ERR_INVALID, "%s: n_head %d is not a multiple of n_head_kv %d", m->source,
                         c->n_head, c->n_head_kv);
    if (c->rope_dim < 0 || c->rope_dim > c->head_dim || c->rope_dim % 2 != 0 || c->sliding_window < 0)
        return osc_error(OSCAR_ERR_INVALID, "%s: rope_dim %d (even, <= head_dim %d) or sliding_window %d out of "
                         "range", m->source, c->rope_dim, c->head_dim, c->sliding_window);
    if (c->rope_scaling != OSCAR_ROPE_DEFAULT && !(c->rope_factor > 0.0f))
        return osc_error(OSCAR_ERR_INVALID, "%s: RoPE scaling factor %g is not positive", m->source,
                         (double)c->rope_factor);
    if ((unsigned)c->rope_scaling > OSCAR_ROPE_YARN || !(c->rope_attn_factor >= 0.0f) ||
        (c->rope_scaling == OSCAR_ROPE_YARN && c->rope_orig_ctx <= 0))
        return osc_error(OSCAR_ERR_INVALID, "%s: unknown RoPE scaling %d, negative attention factor or YaRN "
                         "without its original context", m->source, (int)c->rope_scaling);
    if (!(c->rope_theta > 0.0f) || !(c->rms_eps >= 0.0f) || !(c->rope_theta_swa >= 0.0f))
        return osc_error(OSCAR_ERR_INVALID, "%s: bad rope_theta, local RoPE base or rms_eps", m->source);
    if (!(c->attn_scale >= 0.0f) || !(c->norm_offset >= 0.0f) || c->swa_pattern < 0 ||
        (c->act != OSCAR_ACT_SILU && c->act != OSCAR_ACT_GELU_TANH) || (c->post_norms && c->n_expert > 0))
        return osc_error(OSCAR_ERR_INVALID, "%s: bad score scale, norm offset, swa_pattern or activation, or sandwich "
                         "norms with experts", m->source);
    if (c->n_expert < 0 || (c->n_expert > 0 && (c->n_expert_used <= 0 || c->n_expert_used > c->n_expert ||
                                                 c->n_ff_expert <= 0 || c->n_ff_shared < 0 || c->moe_step <= 0)))
        return osc_error(OSCAR_ERR_INVALID, "%s: bad experts (%d experts, top-%d, ff %d, shared ff %d, step %d)",
                         m->source, c->n_expert, c->n_expert_used, c->n_ff_expert, c->n_ff_shared, c->moe_step);
    if (!m->tok_embd || !m->output_norm || !m->layers)
        return osc_error(OSCAR_ERR_INVALID, "%s: missing embedding or output norm", m->source);
    return OSCAR_OK;
}

// Layer l's tensors are there (a streamed model reads a layer when it is acquired).
static enum oscar_status check_layer(const struct oscar_model * m, int32_t l) {
    const struct oscar_model_config * c = &m->config;
    const struct oscar_layer_weights * w = &m->layers[l];
    const bool moe = oscar_layer_is_moe(c, l);
    const bool mlp = moe ? w->router && w->exp_gate && w->exp_up && w->exp_down &&
                               (c->n_ff_shared <= 0 ||
                                (w->sh_gate && w->sh_up && w->sh_down && (c->shared_ungated || w->sh_scale))) &&
                               (!c->expert_bias || w->exp_bias)
                         : w->w_gate && w->w_up && w->w_down;
    if (!w->attn_norm || !w->wq || !w->wk || !w->wv || !w->wo || !w->ffn_norm || !mlp ||
        (c->post_norms && (!w->attn_post_norm || !w->ffn_post_norm)))
        return osc_error(OSCAR_ERR_INVALID, "%s: layer %d: weights not resident (oscar_model_layer_acquire) or "
                         "missing", m->source, l);
    if (c->qk_norm && (!w->q_norm || !w->k_norm))
        return osc_error(OSCAR_ERR_INVALID, "%s: layer %d: qk_norm set but q_norm/k_norm missing", m->source, l);
    if (c->qkv_bias && (!w->bq || !w->bk || !w->bv))
        return osc_error(OSCAR_ERR_INVALID, "%s: layer %d: qkv_bias set but a bias is missing", m->source, l);
    return OSCAR_OK;
}

void oscar_forward_free(struct oscar_forward * f) {
    if (!f) return;
    free(f->x);
    free(f->xn);
    free(f->q);
    free(f->k);
    free(f->v);
    free(f->att);
    free(f->gate);
    free(f->up);
    free(f->probs);
    free(f->top_e);
    free(f->top_w);
    free(f->by_exp);
    free(f->exp_n);
    free(f->exp_at);
    free(f->rows);
    free(f->ye);
    free(f->slot);
    free(f->cos_t);
    free(f->sin_t);
    free(f->inv_freq);
    free(f->cos_swa);
    free(f->sin_swa);
    free(f->inv_swa);
    free(f->pos);
    free(f);
}

static float * alloc_f(size_t n) {
    return malloc((n ? n : 1) * sizeof(float));
}

enum oscar_status oscar_forward_init(const struct oscar_model * m, const struct oscar_forward_params * params,
                                     struct oscar_forward ** out) {
    enum oscar_status st = OSCAR_ERR_NOMEM;
    struct oscar_forward * f = NULL;
    OSCAR_ASSERT(m && params && out);
    *out = NULL;
    st = check_model(m);
    if (st != OSCAR_OK) goto out;
    if (params->max_tokens <= 0 || params->n_threads < 0 || params->n_threads > OSC_MAX_THREADS) {
        st = osc_error(OSCAR_ERR_INVALID, "forward: max_tokens %d / n_threads %d out of range", params->max_tokens,
                       params->n_threads);
        goto out;
    }
    st = OSCAR_ERR_NOMEM;
    f = calloc(1, sizeof(*f));
    if (!f) goto fail_nomem;
    f->m         = m;
    f->p         = *params;
    f->n_threads = params->n_threads > 0 ? params->n_threads : omp_get_max_threads();
    const struct oscar_model_config * c = &m->config;
    size_t T = (size_t)params->max_tokens, C = (size_t)c->n_embd, D = (size_t)c->head_dim;
    size_t Q = (size_t)c->n_head * D, KV = (size_t)c->n_head_kv * D, F = (size_t)c->n_ff;
    f->x        = alloc_f(T * C);
    f->xn       = alloc_f(T * C);
    f->q        = alloc_f(T * Q);
    f->k        = alloc_f(T * KV);
    f->v        = alloc_f(T * KV);
    f->att      = alloc_f(T * Q);
    size_t FM = F > (size_t)c->n_ff_expert ? F : (size_t)c->n_ff_expert;
    FM = FM > (size_t)c->n_ff_shared ? FM : (size_t)c->n_ff_shared;
    f->gate     = alloc_f(T * FM);
    f->up       = alloc_f(T * FM);
    bool moe_ok = true;
    if (c->n_expert > 0) {
        const size_t E = (size_t)c->n_expert, K = (size_t)c->n_expert_used;
        f->probs  = alloc_f(T * E);
        f->top_e  = malloc(T * K * sizeof(int32_t));
        f->top_w  = alloc_f(T * K);
        f->by_exp = malloc(T * K * sizeof(int32_t));
        f->exp_n  = malloc((E + 1) * sizeof(int32_t));
        f->exp_at = malloc(E * sizeof(int32_t));
        f->rows   = alloc_f(T * C);
        f->ye     = alloc_f(T * C);
        f->slot   = alloc_f(T * K * C);
        moe_ok = f->probs && f->top_e && f->top_w && f->by_exp && f->exp_n && f->exp_at && f->rows && f->ye && f->slot;
    }
    const size_t R = (size_t)oscar_rope_dim(c);
    f->cos_t    = alloc_f(T * R / 2);
    f->sin_t    = alloc_f(T * R / 2);
    f->inv_freq = alloc_f(R / 2);
    f->pos      = malloc(T * sizeof(int32_t));
    f->rope_T   = -1;
    bool swa_ok = true;
    if (c->rope_theta_swa > 0.0f) {
        f->cos_swa = alloc_f(T * R / 2);
        f->sin_swa = alloc_f(T * R / 2);
        f->inv_swa = alloc_f(R / 2);
        swa_ok = f->cos_swa && f->sin_swa && f->inv_swa;
    }
    if (!f->x || !f->xn || !f->q || !f->k || !f->v || !f->att || !f->gate || !f->up || !f->cos_t || !f->sin_t ||
        !f->inv_freq || !f->pos || !moe_ok || !swa_ok)
        goto fail_nomem;
    oscar_rope_inv_freq(c, m->rope_freqs, f->inv_freq);
    for (int32_t l = 0; f->inv_swa && l < c->n_layer; l++) // the first sliding layer's (all of them are alike)
        if (oscar_layer_sliding(c, l)) {
            oscar_rope_inv_freq_layer(c, l, m->rope_freqs, f->inv_swa);
            break;
        }
    *out = f;
    f    = NULL;
    st   = OSCAR_OK;
    goto out;
fail_nomem:
    st = osc_error(OSCAR_ERR_NOMEM, "forward: out of memory for scratch of %d tokens", params->max_tokens);
out:
    oscar_forward_free(f);
    return st;
}

const float * oscar_forward_hidden(const struct oscar_forward * f, int32_t * n_tokens) {
    if (n_tokens) *n_tokens = f->n_tokens;
    return f->xn;
}

// ---- RoPE frequencies, windows ------------------------------------------------------------------

int32_t oscar_rope_dim(const struct oscar_model_config * c) { return c->rope_dim > 0 ? c->rope_dim : c->head_dim; }

bool oscar_layer_sliding(const struct oscar_model_config * c, int32_t layer) {
    return layer >= c->swa_first_layer && !(c->swa_pattern > 0 && (layer + 1) % c->swa_pattern == 0);
}

int32_t oscar_layer_window(const struct oscar_model_config * c, int32_t layer) {
    return c->sliding_window > 0 && oscar_layer_sliding(c, layer) ? c->sliding_window : 0;
}

int32_t oscar_model_window(const struct oscar_model_config * c) {
    for (int32_t l = c->swa_first_layer > 0 ? c->swa_first_layer : 0; c->sliding_window > 0 && l < c->n_layer; l++)
        if (oscar_layer_sliding(c, l)) return c->sliding_window;
    return 0;
}

float oscar_attn_scale(const struct oscar_model_config * c) {
    return c->attn_scale > 0.0f ? c->attn_scale : (float)(1.0 / sqrt((double)c->head_dim));
}

bool oscar_attn_scale_is_default(const struct oscar_model_config * c) {
    const double d = 1.0 / sqrt((double)c->head_dim);
    return fabs((double)oscar_attn_scale(c) - d) <= 1e-6 * d;
}

float oscar_attn_scale_param(const struct oscar_model_config * c) {
    return oscar_attn_scale_is_default(c) ? 0.0f : oscar_attn_scale(c);
}

// Llama 3.x (transformers' _compute_llama3_parameters, in fp32 like its torch ops): wavelengths
// 2 pi / f longer than orig_ctx / low_freq_factor are divided by factor, shorter than
// orig_ctx / high_freq_factor kept, and in between blended by
// s = (orig_ctx / wavelen - low) / (high - low): f' = (1 - s) f / factor + s f.
static float llama3_freq(const struct oscar_model_config * c, float f) {
    const float  factor = c->rope_factor, low = c->rope_low_freq_factor, high = c->rope_high_freq_factor;
    const float  orig = (float)c->rope_orig_ctx;
    const float  wavelen = (float)(2.0 * M_PI) / f;
    const float  low_wavelen = (float)((double)c->rope_orig_ctx / (double)low);
    const float  high_wavelen = (float)((double)c->rope_orig_ctx / (double)high);
    const float  scaled = wavelen > low_wavelen ? f / factor : f;
    if (wavelen < high_wavelen || wavelen > low_wavelen) return scaled;
    const float smooth = (orig / wavelen - low) / (float)((double)high - (double)low);
    return (1.0f - smooth) * scaled / factor + smooth * scaled;
}

// The dim (in [0, R - 1]) at which a frequency makes n_rot turns over orig_ctx positions, in double
// as transformers' find_correction_dim (Python floats).
static double yarn_dim(double n_rot, int32_t R, double theta, int32_t orig_ctx) {
    return (double)R * log((double)orig_ctx / (n_rot * 2.0 * M_PI)) / (2.0 * log(theta));
}

// YaRN (transformers' _compute_yarn_parameters, fp32 like its torch ops): frequency i is f (extrapolated)
// below the correction range [low, high] of dims, f / factor (interpolated) above it, and in between
// interp * (1 - e) + extrap * e with e = 1 - clamp((i - low) / (high - low), 0, 1). The range is where a
// frequency turns beta_fast .. beta_slow times over rope_orig_ctx, rounded outwards (floor / ceil) unless
// rope_no_truncate, clipped to [0, R - 1]. llama.cpp's ggml_rope_yarn_corr_dims computes the same range in
// fp32 and always rounds it (GGUF has no truncate key).
static float yarn_freq(const struct oscar_model_config * c, int32_t i, float pos_freq) {
    const int32_t R = oscar_rope_dim(c);
    // transformers: beta_fast or 32, beta_slow or 1
    const double  fast = c->rope_beta_fast > 0.0f ? (double)c->rope_beta_fast : 32.0;
    const double  slow = c->rope_beta_slow > 0.0f ? (double)c->rope_beta_slow : 1.0;
    double low = yarn_dim(fast, R, (double)c->rope_theta, c->rope_orig_ctx);
    double high = yarn_dim(slow, R, (double)c->rope_theta, c->rope_orig_ctx);
    if (!c->rope_no_truncate) low = floor(low), high = ceil(high);
    low = low > 0.0 ? low : 0.0, high = high < (double)(R - 1) ? high : (double)(R - 1);
    if (low == high) high += 0.001; // transformers' guard against a zero-width ramp
    const float extrap = 1.0f / pos_freq, interp = 1.0f / (c->rope_factor * pos_freq);
    float ramp = ((float)i - (float)low) / (float)(high - low);
    ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
    const float e = 1.0f - ramp;
    return interp * (1.0f - e) + extrap * e;
}

void oscar_rope_inv_freq(const struct oscar_model_config * c, const float * rope_freqs, float * out) {
    oscar_rope_inv_freq_layer(c, c->n_layer, rope_freqs, out); // no layer n_layer: the global frequencies
}

void oscar_rope_inv_freq_layer(const struct oscar_model_config * c, int32_t layer, const float * rope_freqs,
                               float * out) {
    const int32_t R = oscar_rope_dim(c);
    const bool    local = c->rope_theta_swa > 0.0f && layer < c->n_layer && oscar_layer_sliding(c, layer);
    const float   theta = local ? c->rope_theta_swa : c->rope_theta;
    for (int32_t i = 0; i < R / 2; i++) {
        // Hugging Face: inv_freq = 1 / theta ** (arange(0, R, 2) / R), all in fp32.
        const float pos_freq = powf(theta, (float)(2 * i) / (float)R);
        float f = 1.0f / pos_freq;
        // Gemma's local layers are unscaled
        if (!local && c->rope_scaling == OSCAR_ROPE_LINEAR) f = f / c->rope_factor;
        else if (!local && c->rope_scaling == OSCAR_ROPE_LLAMA3) f = llama3_freq(c, f);
        else if (!local && c->rope_scaling == OSCAR_ROPE_YARN) f = yarn_freq(c, i, pos_freq);
        // llama.cpp: theta_i / freq_factor_i
        out[i] = rope_freqs ? f / rope_freqs[i] : f;
    }
}

float oscar_rope_attn_factor_layer(const struct oscar_model_config * c, int32_t layer) {
    const bool local = c->rope_theta_swa > 0.0f && layer < c->n_layer && oscar_layer_sliding(c, layer);
    return local || !(c->rope_attn_factor > 0.0f) ? 1.0f : c->rope_attn_factor;
}

// ---- elementwise pieces ------------------------------------------------------------------------

// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * (off + w), sum of squares in double; off + w in fp32 as
// transformers' Gemma3RMSNorm (1.0 + weight.float()). y may be x.
static void rmsnorm(float * y, const float * x, const float * w, float off, int32_t T, int32_t C, float eps, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int32_t t = 0; t < T; t++) {
        const float * xr = x + (size_t)t * C;
        float *       yr = y + (size_t)t * C;
        double        ss = 0.0;
        for (int32_t i = 0; i < C; i++) ss += (double)xr[i] * (double)xr[i];
        float r = (float)(1.0 / sqrt(ss / (double)C + (double)eps));
        for (int32_t i = 0; i < C; i++) yr[i] = (off + w[i]) * (xr[i] * r);
    }
}

// y[T, N] = x[T, K] @ w[N, K]^T (+ b[N]), or y += ... when accumulate.
static void linear(float * y, const float * x, const float * w, const float * b, int32_t T, int32_t N, int32_t K,
                   bool accumulate, int nt) {
    osc_sgemm(nt, CblasNoTrans, CblasTrans, T, N, K, 1.0f, x, K, w, K, accumulate ? 1.0f : 0.0f, y, N);
    if (b) {
        for (int32_t t = 0; t < T; t++)
            for (int32_t i = 0; i < N; i++) y[(size_t)t * N + i] += b[i];
    }
}

// Per-head RMSNorm (Qwen3/Gemma q_norm/k_norm) then RoPE on rows [T, H, D] with layer l's tables,
// HF rotate_half convention over the first R dims (pairs (i, i + R/2)); dims R .. D-1 pass through.
static void norm_rope(struct oscar_forward * f, int32_t l, float * x, int32_t T, int32_t H, const float * norm_w) {
    const struct oscar_model_config * c = &f->m->config;
    const int32_t D = c->head_dim, h2 = oscar_rope_dim(c) / 2;
    const float   eps = c->rms_eps, off = c->norm_offset;
    const bool    local = f->cos_swa && oscar_layer_sliding(c, l);
    const float * cos_l = local ? f->cos_swa : f->cos_t, * sin_l = local ? f->sin_swa : f->sin_t;
#pragma omp parallel for schedule(static) num_threads(f->n_threads)
    for (int32_t t = 0; t < T; t++) {
        const float * cs = cos_l + (size_t)t * h2;
        const float * sn = sin_l + (size_t)t * h2;
        for (int32_t h = 0; h < H; h++) {
            float * r = x + ((size_t)t * H + h) * D;
            if (norm_w) {
                double ss = 0.0;
                for (int32_t i = 0; i < D; i++) ss += (double)r[i] * (double)r[i];
                float s = (float)(1.0 / sqrt(ss / (double)D + (double)eps));
                for (int32_t i = 0; i < D; i++) r[i] = (off + norm_w[i]) * (r[i] * s);
            }
            for (int32_t i = 0; i < h2; i++) {
                float a = r[i], b = r[i + h2];
                r[i]      = a * cs[i] - b * sn[i];
                r[i + h2] = b * cs[i] + a * sn[i];
            }
        }
    }
}

// cos/sin of the fp32 angles, times `scale` in fp32 (transformers: emb.cos() * attention_scaling; x 1 is exact).
static void fill_tables(const float * inv_freq, float scale, const int32_t * pos, int32_t T, int32_t h2,
                        float * cos_t, float * sin_t) {
    for (int32_t t = 0; t < T; t++) {
        float p = (float)pos[t];
        for (int32_t i = 0; i < h2; i++) {
            float a                    = inv_freq[i] * p; // fp32 angle, as transformers computes it
            cos_t[(size_t)t * h2 + i] = cosf(a) * scale;
            sin_t[(size_t)t * h2 + i] = sinf(a) * scale;
        }
    }
}

static void rope_tables(struct oscar_forward * f, int32_t T) {
    const struct oscar_model_config * c = &f->m->config;
    const int32_t h2 = oscar_rope_dim(c) / 2;
    fill_tables(f->inv_freq, oscar_rope_attn_factor_layer(c, c->n_layer), f->pos, T, h2, f->cos_t, f->sin_t);
    if (f->cos_swa) fill_tables(f->inv_swa, 1.0f, f->pos, T, h2, f->cos_swa, f->sin_swa);
}

// g = act(g) * u: SiLU, or the tanh GELU in fp32 as torch's gelu(approximate="tanh").
static void glu(float * g, const float * u, size_t n, enum oscar_act act, int nt) {
    if (act == OSCAR_ACT_GELU_TANH) {
        const float k0 = 0.7978845608028654f, k1 = 0.044715f; // sqrt(2 / pi)
#pragma omp parallel for schedule(static) num_threads(nt)
        for (size_t i = 0; i < n; i++) {
            float x = g[i];
            g[i]    = 0.5f * x * (1.0f + tanhf(k0 * (x + k1 * x * x * x))) * u[i];
        }
        return;
    }
#pragma omp parallel for schedule(static) num_threads(nt)
    for (size_t i = 0; i < n; i++) {
        float x = g[i];
        g[i]    = x / (1.0f + expf(-x)) * u[i];
    }
}

// ---- mixture of experts ------------------------------------------------------------------------

// Router: softmax over the E logits of each token (fp32 like transformers, the denominator in
// double), its top k (ties to the lower expert), renormalised to sum 1 when norm_topk.
static void route(struct oscar_forward * f, int32_t T) {
    const struct oscar_model_config * c = &f->m->config;
    const int32_t E = c->n_expert, K = c->n_expert_used;
#pragma omp parallel for schedule(static) num_threads(f->n_threads)
    for (int32_t t = 0; t < T; t++) {
        float * p = f->probs + (size_t)t * E;
        float   mx = p[0];
        for (int32_t e = 1; e < E; e++) mx = p[e] > mx ? p[e] : mx;
        double sum = 0.0;
        for (int32_t e = 0; e < E; e++) {
            p[e] = expf(p[e] - mx);
            sum += (double)p[e];
        }
        for (int32_t e = 0; e < E; e++) p[e] = (float)((double)p[e] / sum);
        int32_t * te = f->top_e + (size_t)t * K;
        float *   tw = f->top_w + (size_t)t * K;
        for (int32_t j = 0; j < K; j++) { // k passes: k is small
            int32_t best = -1;
            for (int32_t e = 0; e < E; e++) {
                bool taken = false;
                for (int32_t i = 0; i < j; i++) taken = taken || te[i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            te[j] = best, tw[j] = p[best];
        }
        if (c->expert_norm_topk) {
            float s = 0.0f;
            for (int32_t j = 0; j < K; j++) s += tw[j];
            for (int32_t j = 0; j < K; j++) tw[j] /= s;
        }
    }
}

// down(silu(gate x) * up x) of `n` rows x [n, C] into y [n, C], through f->gate / f->up.
static void expert_mlp(struct oscar_forward * f, const float * x, int32_t n, const float * wg, const float * wu,
                       const float * wd, int32_t Fe, float * y) {
    const int32_t C = f->m->config.n_embd;
    linear(f->gate, x, wg, NULL, n, Fe, C, false, f->n_threads);
    linear(f->up, x, wu, NULL, n, Fe, C, false, f->n_threads);
    glu(f->gate, f->up, (size_t)n * Fe, f->m->config.act, f->n_threads);
    linear(y, f->gate, wd, NULL, n, C, Fe, false, f->n_threads);
}

// The sparse MLP of layer w on the normed rows f->xn, added to the residual f->x. Tokens are
// grouped by expert (one GEMM per expert over its rows); each token's sum then runs over its
// experts in top-k order, then the shared expert: a fixed order whatever the batch or threads.
static void moe_mlp(struct oscar_forward * f, const struct oscar_layer_weights * w, int32_t T) {
    const struct oscar_model_config * c = &f->m->config;
    const int32_t E = c->n_expert, K = c->n_expert_used, C = c->n_embd, Fe = c->n_ff_expert, FS = c->n_ff_shared;
    linear(f->probs, f->xn, w->router, NULL, T, E, C, false, f->n_threads);
    if (c->expert_gating == OSCAR_GATING_SIGMOID) {
#pragma omp parallel for schedule(static) num_threads(f->n_threads)
        for (int32_t t = 0; t < T; t++)
            osc_moe_route_sigmoid(c, w->exp_bias, f->probs + (size_t)t * E, f->top_e + (size_t)t * K,
                                  f->top_w + (size_t)t * K);
    } else {
        route(f, T);
    }
    // counting sort of the (token, slot) entries by expert, tokens in order within an expert
    memset(f->exp_n, 0, (size_t)(E + 1) * sizeof(int32_t));
    for (int32_t i = 0; i < T * K; i++) f->exp_n[f->top_e[i] + 1]++;
    for (int32_t e = 0; e < E; e++) f->exp_n[e + 1] += f->exp_n[e];
    memcpy(f->exp_at, f->exp_n, (size_t)E * sizeof(int32_t));
    for (int32_t i = 0; i < T * K; i++) f->by_exp[f->exp_at[f->top_e[i]]++] = i;
    for (int32_t e = 0; e < E; e++) {
        const int32_t base = f->exp_n[e], n = f->exp_n[e + 1] - base;
        if (n == 0) continue;
        for (int32_t r = 0; r < n; r++)
            memcpy(f->rows + (size_t)r * C, f->xn + (size_t)(f->by_exp[base + r] / K) * C, (size_t)C * sizeof(float));
        const size_t ef = (size_t)e * Fe * C;
        expert_mlp(f, f->rows, n, w->exp_gate + ef, w->exp_up + ef, w->exp_down + ef, Fe, f->ye);
        for (int32_t r = 0; r < n; r++)
            memcpy(f->slot + (size_t)f->by_exp[base + r] * C, f->ye + (size_t)r * C, (size_t)C * sizeof(float));
    }
    if (FS > 0) expert_mlp(f, f->xn, T, w->sh_gate, w->sh_up, w->sh_down, FS, f->rows);
#pragma omp parallel for schedule(static) num_threads(f->n_threads)
    for (int32_t t = 0; t < T; t++) {
        float *       xr = f->x + (size_t)t * C;
        const float * tw = f->top_w + (size_t)t * K;
        float         g = 1.0f; // an ungated shared expert (glm4_moe) is added as is
        if (FS > 0 && w->sh_scale) { // sigmoid(shared_expert_gate . x)
            double d = 0.0;
            for (int32_t i = 0; i < C; i++) d += (double)f->xn[(size_t)t * C + i] * (double)w->sh_scale[i];
            g = 1.0f / (1.0f + expf(-(float)d));
        }
        for (int32_t i = 0; i < C; i++) {
            float acc = 0.0f;
            for (int32_t j = 0; j < K; j++) acc += tw[j] * f->slot[((size_t)t * K + j) * C + i];
            if (FS > 0) acc += g * f->rows[(size_t)t * C + i];
            xr[i] += acc;
        }
    }
}

// ---- attention ---------------------------------------------------------------------------------

static int32_t attention_threads(void * user) {
    const int32_t * nt = user;
    return nt && *nt > 0 ? *nt : omp_get_max_threads();
}

enum oscar_status oscar_attention_causal(void * user, int32_t layer, const struct oscar_capture_layer * in,
                                         float * out) {
    const struct oscar_model_config * c = in->config;
    const int64_t window = oscar_layer_window(c, layer);
    const int32_t Hq = c->n_head, Hkv = c->n_head_kv, D = c->head_dim, g = Hq / Hkv, nt = attention_threads(user);
    int32_t       n_max = 0;
    for (int32_t s = 0; s < in->n_seq; s++) {
        int32_t n = in->seq_start[s + 1] - in->seq_start[s];
        n_max = n > n_max ? n : n_max;
    }
    const size_t per_thread = oscar_attn_rows_scratch(ATT_BQ, n_max, D);
    const size_t kt_size = oscar_attn_keys_transposed_size(n_max, D);
    float *      scratch = malloc(sizeof(float) * per_thread * (size_t)nt);
    float *      kt = malloc(sizeof(float) * kt_size * (size_t)Hkv);   // one sequence's keys, per KV head
    if (!scratch || !kt) {
        free(scratch);
        free(kt);
        return osc_error(OSCAR_ERR_NOMEM, "attention: scratch for %d tokens x %d threads", n_max, nt);
    }
    const size_t rs = (size_t)Hkv * D, qs = (size_t)Hq * D;
    for (int32_t s = 0; s < in->n_seq; s++) {
        const int32_t s0 = in->seq_start[s], n = in->seq_start[s + 1] - s0;
        const int32_t nb = (n + ATT_BQ - 1) / ATT_BQ, n_tasks = nb * Hq;
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int32_t kh = 0; kh < Hkv; kh++)
            oscar_attn_keys_transpose(in->k + (size_t)s0 * rs + (size_t)kh * D, rs, n, D, kt + kt_size * (size_t)kh);
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
        for (int32_t task = 0; task < n_tasks; task++) {
            // later blocks are the most expensive: hand them out first
            const int32_t blk = nb - 1 - task / Hq, h = task % Hq;
            const int32_t i0 = blk * ATT_BQ, i1 = i0 + ATT_BQ < n ? i0 + ATT_BQ : n;
            int64_t       t[ATT_BQ];
            for (int32_t i = i0; i < i1; i++) t[i - i0] = i;
            const struct oscar_attn_keys kv = {.head_dim = D, .row_stride = rs,
                                               .k = in->k + (size_t)s0 * rs + (size_t)(h / g) * D,
                                               .v = in->v + (size_t)s0 * rs + (size_t)(h / g) * D,
                                               .kt = kt + kt_size * (size_t)(h / g), .window = window,
                                               .scale = oscar_attn_scale(c)};
            const size_t q0 = (size_t)(s0 + i0) * qs + (size_t)h * D;
            oscar_attn_rows(&kv, i1 - i0, in->q + q0, qs, t, NULL, NULL, out + q0, qs,
                            scratch + per_thread * (size_t)omp_get_thread_num());
        }
    }
    free(scratch);
    free(kt);
    return OSCAR_OK;
}

// ---- the pass ----------------------------------------------------------------------------------

static enum oscar_status check_batch(const struct oscar_forward * f, const struct oscar_batch * b) {
    if (!b || b->n_seq <= 0 || !b->seq_start || !b->tokens)
        return osc_error(OSCAR_ERR_INVALID, "forward: empty batch or missing seq_start/tokens");
    if (b->seq_start[0] != 0) return osc_error(OSCAR_ERR_INVALID, "forward: seq_start[0] = %d, not 0", b->seq_start[0]);
    for (int32_t s = 0; s < b->n_seq; s++)
        if (b->seq_start[s + 1] <= b->seq_start[s])
            return osc_error(OSCAR_ERR_INVALID, "forward: sequence %d is empty or seq_start decreases", s);
    const int32_t T = b->seq_start[b->n_seq];
    if (T > f->p.max_tokens)
        return osc_error(OSCAR_ERR_INVALID, "forward: batch of %d tokens exceeds max_tokens %d", T, f->p.max_tokens);
    for (int32_t t = 0; t < T; t++) {
        if (b->tokens[t] < 0 || b->tokens[t] >= f->m->config.n_vocab)
            return osc_error(OSCAR_ERR_INVALID, "forward: token %d at index %d outside vocabulary of %d",
                             b->tokens[t], t, f->m->config.n_vocab);
        if (b->pos && b->pos[t] < 0) return osc_error(OSCAR_ERR_INVALID, "forward: negative position at %d", t);
    }
    return OSCAR_OK;
}

// x += rmsnorm(xn) with weights w: a sandwich norm's sub-layer output added to the residual.
static void add_normed(struct oscar_forward * f, const float * w, int32_t T) {
    const struct oscar_model_config * c = &f->m->config;
    rmsnorm(f->xn, f->xn, w, c->norm_offset, T, c->n_embd, c->rms_eps, f->n_threads);
    const size_t n = (size_t)T * (size_t)c->n_embd;
#pragma omp parallel for schedule(static) num_threads(f->n_threads)
    for (size_t i = 0; i < n; i++) f->x[i] += f->xn[i];
}

static enum oscar_status run_layer(struct oscar_forward * f, const struct oscar_batch * b, int32_t l) {
    const struct oscar_model_config *  c = &f->m->config;
    const struct oscar_layer_weights * w = &f->m->layers[l];
    const int32_t T = b->seq_start[b->n_seq], C = c->n_embd, D = c->head_dim;
    const int32_t Q = c->n_head * D, KV = c->n_head_kv * D, F = c->n_ff;
    enum oscar_status st = check_layer(f->m, l);
    if (st != OSCAR_OK) return st;

    const float off = c->norm_offset;
    rmsnorm(f->xn, f->x, w->attn_norm, off, T, C, c->rms_eps, f->n_threads);
    linear(f->q, f->xn, w->wq, w->bq, T, Q, C, false, f->n_threads);
    linear(f->k, f->xn, w->wk, w->bk, T, KV, C, false, f->n_threads);
    linear(f->v, f->xn, w->wv, w->bv, T, KV, C, false, f->n_threads);
    norm_rope(f, l, f->q, T, c->n_head, c->qk_norm ? w->q_norm : NULL);
    norm_rope(f, l, f->k, T, c->n_head_kv, c->qk_norm ? w->k_norm : NULL);

    struct oscar_capture_layer cap = {
        .layer = l, .n_tokens = T, .n_seq = b->n_seq, .seq_start = b->seq_start, .pos = f->pos,
        .q = f->q, .k = f->k, .v = f->v, .attn_out = NULL, .wo = w->wo, .resid_out = NULL, .config = c,
    };
    if (f->p.attention) {
        st = f->p.attention->attend(f->p.attention->user, l, &cap, f->att);
        if (st != OSCAR_OK) return osc_error_prefix(st, "layer %d: attention override", l);
    } else {
        st = oscar_attention_causal(&f->n_threads, l, &cap, f->att);
        if (st != OSCAR_OK) return st;
    }
    // residual += attn @ W_O^T, or with sandwich norms += post_norm(attn @ W_O^T) (xn is free again here)
    if (c->post_norms) {
        linear(f->xn, f->att, w->wo, NULL, T, C, Q, false, f->n_threads);
        add_normed(f, w->attn_post_norm, T);
    } else {
        linear(f->x, f->att, w->wo, NULL, T, C, Q, true, f->n_threads);
    }

    rmsnorm(f->xn, f->x, w->ffn_norm, off, T, C, c->rms_eps, f->n_threads);
    if (oscar_layer_is_moe(c, l)) {
        moe_mlp(f, w, T);
    } else {
        linear(f->gate, f->xn, w->w_gate, NULL, T, F, C, false, f->n_threads);
        linear(f->up, f->xn, w->w_up, NULL, T, F, C, false, f->n_threads);
        glu(f->gate, f->up, (size_t)T * F, c->act, f->n_threads);
        if (c->post_norms) {
            linear(f->xn, f->gate, w->w_down, NULL, T, C, F, false, f->n_threads);
            add_normed(f, w->ffn_post_norm, T);
        } else {
            linear(f->x, f->gate, w->w_down, NULL, T, C, F, true, f->n_threads);
        }
    }

    const struct oscar_capture_hook * hk = f->p.hook;
    if (hk && hk->on_layer && (!hk->want || hk->want(hk->user, l))) {
        cap.attn_out  = f->att;
        cap.resid_out = f->x;
        st            = hk->on_layer(hk->user, &cap);
        if (st != OSCAR_OK) return osc_error_prefix(st, "layer %d: capture hook", l);
    }
    return OSCAR_OK;
}

enum oscar_status oscar_forward_begin(struct oscar_forward * f, const struct oscar_batch * batch) {
    OSCAR_ASSERT(f);
    f->batch    = NULL;
    f->n_tokens = 0;
    enum oscar_status st = check_batch(f, batch);
    if (st != OSCAR_OK) return st;
    // The layer-major calibration pass begins every batch once per layer with
    // the same positions: the tables are kept when nothing changed.
    const int32_t T = batch->seq_start[batch->n_seq];
    bool same = T == f->rope_T;
    for (int32_t s = 0; s < batch->n_seq; s++)
        for (int32_t t = batch->seq_start[s]; t < batch->seq_start[s + 1]; t++) {
            const int32_t p = batch->pos ? batch->pos[t] : t - batch->seq_start[s];
            same = same && f->pos[t] == p;
            f->pos[t] = p;
        }
    if (!same) rope_tables(f, T);
    f->rope_T = T;
    f->batch = batch;
    return OSCAR_OK;
}

void oscar_forward_embed(struct oscar_forward * f) {
    OSCAR_ASSERT(f && f->batch);
    const struct oscar_batch * b = f->batch;
    const size_t C = (size_t)f->m->config.n_embd;
    for (int32_t t = 0; t < b->seq_start[b->n_seq]; t++)
        memcpy(f->x + (size_t)t * C, f->m->tok_embd + (size_t)b->tokens[t] * C, C * sizeof(float));
    if (f->m->config.embed_scale) { // Gemma: * sqrt(C) rounded to fp32, an fp32 product (transformers' embed_scale)
        const float  s = (float)sqrt((double)C);
        const size_t n = (size_t)b->seq_start[b->n_seq] * C;
        for (size_t i = 0; i < n; i++) f->x[i] *= s;
    }
}

float * oscar_forward_residual(struct oscar_forward * f) { return f->x; }

enum oscar_status oscar_forward_layer(struct oscar_forward * f, int32_t layer) {
    OSCAR_ASSERT(f && f->batch && layer >= 0 && layer < f->m->config.n_layer);
    return run_layer(f, f->batch, layer);
}

enum oscar_status oscar_forward_run(struct oscar_forward * f, const struct oscar_batch * batch, float * logits) {
    enum oscar_status st = oscar_forward_begin(f, batch);
    if (st != OSCAR_OK) return st;
    const struct oscar_model_config * c = &f->m->config;
    const int32_t T = batch->seq_start[batch->n_seq], C = c->n_embd;
    oscar_forward_embed(f);
    for (int32_t l = 0; l < c->n_layer; l++) {
        st = run_layer(f, batch, l);
        if (st != OSCAR_OK) return st;
    }
    rmsnorm(f->xn, f->x, f->m->output_norm, c->norm_offset, T, C, c->rms_eps, f->n_threads);
    f->n_tokens = T;
    if (logits && !f->m->output)
        return osc_error(OSCAR_ERR_INVALID, "forward: %s was opened without its LM head: no logits", f->m->source);
    if (logits) linear(logits, f->xn, f->m->output, NULL, T, c->n_vocab, C, false, f->n_threads);
    for (int32_t t = 0; logits && t < T; t++)
        for (int32_t i = 0; i < c->n_vocab; i += 97) // cheap NaN/Inf screen (stride: not a full pass)
            if (!isfinite(logits[(size_t)t * c->n_vocab + i]))
                return osc_error(OSCAR_ERR_NUMERIC, "forward: non-finite logit at token %d", t);
    return OSCAR_OK;
}
