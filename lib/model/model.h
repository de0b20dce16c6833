// model.h - decoder-only transformer description, CPU forward pass, capture hooks.
//
// One model description serves every file format and backend: weights are
// held in fp32, row-major [out, in] like a Hugging Face nn.Linear, and q/k
// projection rows are in the Hugging Face head-dim order (RoPE pairs (i, i+D/2)).
// Llama-architecture GGUF files store q/k rows permuted for adjacent-pair RoPE;
// the GGUF loader undoes that at load (method.md §1.1), so captured Q/K and every
// rotation oscar writes are in the order HF-based engines use.
//
// T = tokens in a batch, C = n_embd, Hq/Hkv = heads, D = head_dim, F = n_ff, V = n_vocab.
#ifndef OSCAR_MODEL_MODEL_H
#define OSCAR_MODEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "util/error.h"

enum oscar_arch {
    OSCAR_ARCH_LLAMA = 0, // Llama, SmolLM, Mistral
    OSCAR_ARCH_QWEN2 = 1, // q/k/v bias
    OSCAR_ARCH_QWEN3 = 2, // q_norm/k_norm, explicit head_dim
    OSCAR_ARCH_PHI3  = 3, // Llama's layer; fused qkv_proj / gate_up_proj split at load
    OSCAR_ARCH_QWEN2_MOE = 4, // Qwen2's attention, routed experts + a sigmoid-gated shared expert
    OSCAR_ARCH_QWEN3_MOE = 5, // Qwen3's attention, routed experts
    OSCAR_ARCH_MIXTRAL   = 6, // Llama's (Mistral's) attention, routed experts w1/w3/w2, top-k renormalised
    OSCAR_ARCH_GEMMA3    = 7, // Qwen3's q/k norms, sandwich norms, (1 + w) RMSNorms, GELU-tanh, local/global layers
    OSCAR_ARCH_GLM4_MOE  = 8, // GLM-4.x MoE: q/k/v bias, q/k norms, partial rotary, sigmoid grouped routing
};

// The MLP's activation: down(act(gate x) * up x).
enum oscar_act {
    OSCAR_ACT_SILU      = 0, // SwiGLU (Llama, Qwen, Phi-3)
    OSCAR_ACT_GELU_TANH = 1, // GeGLU with the tanh GELU (Gemma's gelu_pytorch_tanh)
};

// Mixture-of-experts MLP (n_expert > 0). In a sparse layer each token's MLP is
//   sum over its top-k experts e of  w_e * down_e(silu(gate_e x) * up_e x)
//   (+ sigmoid(shared_gate . x) * shared(x) when n_ff_shared > 0),
// w = the top-k of softmax(router x) over all experts, divided by their sum iff
// expert_norm_topk. A layer is sparse iff (l + 1) % moe_step == 0 and l is not one of
// dense_layers (transformers' decoder_sparse_step / mlp_only_layers); the others are
// dense MLPs of n_ff. Mixtral's experts are its intermediate_size wide (n_ff_expert = n_ff).
// With expert_gating SIGMOID (glm4_moe, DeepSeek-V3's noaux_tc) the router instead scores
// s = sigmoid(router x); the experts are chosen by s + exp_bias (the choice only): when
// n_expert_group > 1 the experts form that many equal groups, each group is ranked by the sum
// of its two best biased scores and only the n_group_used best groups compete; the top-k's
// weights are their unbiased s (divided by their sum iff expert_norm_topk), times
// expert_scale when it is not 0. With shared_ungated the shared expert is added as is (glm4_moe).
#define OSCAR_MAX_DENSE_LAYERS 64
#define OSCAR_MAX_EXPERTS 4096 // routed experts a config may declare

enum oscar_expert_gating {
    OSCAR_GATING_SOFTMAX = 0,
    OSCAR_GATING_SIGMOID = 1,
};

// How RoPE's inverse frequencies are derived from rope_theta (0 = unscaled).
enum oscar_rope_scaling {
    OSCAR_ROPE_DEFAULT = 0,
    OSCAR_ROPE_LINEAR  = 1, // inv_freq / rope_factor
    OSCAR_ROPE_LLAMA3  = 2, // Llama 3.x: low frequencies / rope_factor, high kept, a smooth ramp between
    OSCAR_ROPE_YARN    = 3, // YaRN: frequencies / rope_factor past the correction range, kept before it, a
                            // linear ramp over it (rope_beta_fast/slow, rope_orig_ctx); cos/sin x rope_attn_factor
};

const char * oscar_arch_name(enum oscar_arch arch);

struct oscar_model_config {
    enum oscar_arch arch;
    int32_t n_layer;
    int32_t n_embd;        // C
    int32_t n_head;        // Hq
    int32_t n_head_kv;     // Hkv
    int32_t head_dim;      // D
    int32_t n_ff;          // F
    int32_t n_vocab;       // V (rows of the embedding)
    int32_t n_ctx_train;
    float   rope_theta;
    // RoPE variants; all zero = plain RoPE over the whole head. The rotated
    // dims are the first rope_dim of each head, paired (i, i + rope_dim/2);
    // the rest pass through (Phi-3 partial_rotary_factor).
    int32_t rope_dim;              // 0 = head_dim
    enum oscar_rope_scaling rope_scaling;
    float   rope_factor;           // LINEAR, LLAMA3, YARN
    float   rope_low_freq_factor;  // LLAMA3
    float   rope_high_freq_factor; // LLAMA3
    int32_t rope_orig_ctx;         // LLAMA3, YARN: original_max_position_embeddings
    float   rope_beta_fast;        // YARN: rotations bounding the correction range (transformers: 32, 1)
    float   rope_beta_slow;
    bool    rope_no_truncate;      // YARN: the range is not rounded to whole dims (transformers' truncate false)
    float   rope_attn_factor;      // the global layers' cos/sin are multiplied by it (YaRN's attention factor,
                                   // mscale); 0 = 1
    // Sliding-window attention: in the sliding layers a token at t sees keys j
    // with t - sliding_window < j <= t; sliding_window 0 = full causal attention
    // everywhere. Layer l is a sliding layer iff l >= swa_first_layer and, when
    // swa_pattern > 0, (l + 1) % swa_pattern != 0 (Gemma 3: every 6th is global).
    int32_t sliding_window;
    int32_t swa_first_layer;
    int32_t swa_pattern;
    // > 0: the sliding layers rotate with this base and no scaling (Gemma's
    // rope_local_base_freq); rope_theta and rope_scaling are then the global layers'.
    float   rope_theta_swa;
    float   rms_eps;
    bool    qkv_bias;
    bool    qk_norm;
    bool    tied_embeddings;
    bool    has_rope_freqs;  // the file holds per-frequency RoPE divisors (GGUF rope_freqs.weight)
    // Gemma-style choices; all zero = the Llama layer.
    float   norm_offset;     // every RMSNorm multiplies by (norm_offset + w): 1 for Gemma's HF weights, 0 in GGUF
    enum oscar_act act;
    float   attn_scale;      // softmax scale of q.k; 0 = head_dim^-1/2 (see oscar_attn_scale)
    bool    embed_scale;     // the embedding rows are multiplied by sqrt(n_embd) (in fp32)
    bool    post_norms;      // sandwich norms: each sub-layer's output is RMSNormed before the residual add
    int32_t n_expert;         // E routed experts; 0 = dense model
    int32_t n_expert_used;    // k, experts per token
    int32_t n_ff_expert;      // Fe, each routed expert's intermediate size
    int32_t n_ff_shared;      // Fs, the shared expert's (qwen2_moe); 0 = none
    bool    expert_norm_topk; // renormalise the top-k weights to sum 1
    int32_t moe_step;         // decoder_sparse_step (>= 1 when n_expert > 0)
    int32_t n_dense_layers;   // mlp_only_layers
    int32_t dense_layers[OSCAR_MAX_DENSE_LAYERS];
    enum oscar_expert_gating expert_gating; // see the MoE comment above
    bool    expert_bias;      // sparse layers hold exp_bias [E] (e_score_correction_bias)
    bool    shared_ungated;   // the shared expert is added as is (no shared_expert_gate)
    int32_t n_expert_group;   // 0 or 1: no groups
    int32_t n_group_used;     // groups competing per token (when n_expert_group > 1)
    float   expert_scale;     // routed_scaling_factor; 0 = none (1)
    int32_t n_layer_nextn;    // NextN (multi-token prediction) layers the file holds after n_layer: not run
    char    name[128];     // human-readable model name (GGUF general.name, HF _name_or_path)
};

// All pointers are fp32 and owned by the model. Optional tensors are NULL.
struct oscar_layer_weights {
    float * attn_norm; // [C]
    float * wq;        // [Hq*D, C]
    float * wk;        // [Hkv*D, C]
    float * wv;        // [Hkv*D, C]
    float * bq;        // [Hq*D]  (qwen2) or NULL
    float * bk;        // [Hkv*D] (qwen2) or NULL
    float * bv;        // [Hkv*D] (qwen2) or NULL
    float * q_norm;    // [D] (qwen3) or NULL
    float * k_norm;    // [D] (qwen3) or NULL
    float * wo;        // [C, Hq*D]
    float * ffn_norm;  // [C]
    float * attn_post_norm; // [C] (post_norms) or NULL
    float * ffn_post_norm;  // [C] (post_norms) or NULL
    float * w_gate;    // [F, C]
    float * w_up;      // [F, C]
    float * w_down;    // [C, F]
    // sparse layers (oscar_layer_is_moe): w_gate/w_up/w_down are NULL, the experts are stacked
    float * router;    // [E, C]      mlp.gate
    float * exp_gate;  // [E, Fe, C]
    float * exp_up;    // [E, Fe, C]
    float * exp_down;  // [E, C, Fe]
    float * sh_gate;   // [Fs, C]     shared expert (qwen2_moe) or NULL
    float * sh_up;     // [Fs, C]
    float * sh_down;   // [C, Fs]
    float * sh_scale;  // [C]         shared_expert_gate (one output row), NULL when shared_ungated
    float * exp_bias;  // [E]         choice-only router bias (expert_bias) or NULL
};

struct oscar_model {
    struct oscar_model_config   config;
    float *                     tok_embd;    // [V, C]
    float *                     output_norm; // [C]
    float *                     output;      // [V, C]; == tok_embd when tied
    float *                     rope_freqs;  // [rope_dim/2] frequency divisors (GGUF rope_freqs.weight) or NULL
    struct oscar_layer_weights * layers;     // [n_layer]
    char                        source[512]; // file or directory it was loaded from
    char                        source_sha256[65]; // of the model file (GGUF) or config.json; "" if unknown
    void *                      storage;     // owned allocations (implementation detail)
};

// Loads a .gguf file or a Hugging Face model directory (config.json +
// model.safetensors or model.safetensors.index.json). Unknown architectures,
// missing tensors and shape mismatches fail with a message naming the file
// and tensor. The caller frees with oscar_model_free().
enum oscar_status oscar_model_load(const char * path, struct oscar_model ** out);

// A model with the given shape and weights drawn from a seeded normal
// distribution (std 0.02, norms 1): for tests and shape benchmarks.
enum oscar_status oscar_model_init_random(const struct oscar_model_config * cfg, uint64_t seed,
                                          struct oscar_model ** out);

void oscar_model_free(struct oscar_model * m);

// Whether layer l's MLP is the mixture of experts (see n_expert above).
bool oscar_layer_is_moe(const struct oscar_model_config * c, int32_t layer);

// Rotated dims per head (rope_dim, or head_dim when 0).
int32_t oscar_rope_dim(const struct oscar_model_config * c);
// Whether `layer` is a sliding (local) layer (see sliding_window above).
bool oscar_layer_sliding(const struct oscar_model_config * c, int32_t layer);
// The window of `layer`'s attention (keys seen per token, itself included), 0 = full causal.
int32_t oscar_layer_window(const struct oscar_model_config * c, int32_t layer);
// The softmax scale of the attention scores q.k (attn_scale, or head_dim^-1/2 when 0).
float oscar_attn_scale(const struct oscar_model_config * c);
// Whether that scale is head_dim^-1/2 (within fp32 rounding).
bool oscar_attn_scale_is_default(const struct oscar_model_config * c);
// The scale as the `attn_scale` parameter of the code that rebuilds attention from captured Q/K/V
// (lib/stats, lib/verify, the calibration evaluator): 0 when it is head_dim^-1/2, so that those
// compute 1/sqrt(D) exactly as they always did (same bits), else oscar_attn_scale (Gemma 3).
float oscar_attn_scale_param(const struct oscar_model_config * c);
// The window of the model's sliding layers, 0 when no layer slides. Sequences of at most this many
// tokens attend exactly as with full causal attention (code that assumes it checks this).
int32_t oscar_model_window(const struct oscar_model_config * c);
// RoPE inverse frequencies out [oscar_rope_dim(c) / 2] in fp32 as transformers computes them
// (rope_theta, rope_scaling), each divided by rope_freqs[i] when rope_freqs is not NULL.
// These are the global layers' frequencies; oscar_rope_inv_freq_layer gives `layer`'s (the sliding
// layers' differ when rope_theta_swa > 0).
void oscar_rope_inv_freq(const struct oscar_model_config * c, const float * rope_freqs, float * out);
void oscar_rope_inv_freq_layer(const struct oscar_model_config * c, int32_t layer, const float * rope_freqs,
                               float * out);
// What `layer`'s cos/sin are multiplied by: rope_attn_factor (1 when 0) in the global layers, 1 in the
// sliding layers of a model whose local layers have their own base (rope_theta_swa > 0: unscaled).
float oscar_rope_attn_factor_layer(const struct oscar_model_config * c, int32_t layer);

// ---- layers on demand ------------------------------------------------------------
// oscar_model_open checks the file exactly as oscar_model_load does (config,
// every tensor's presence and shape) and reads the embedding, output norm and
// output, but no layer: m->layers[l] is all NULL until layer l is acquired,
// and the file stays open. A layer-major caller holds one or two layers:
//   oscar_model_layer_acquire(m, l);      // reads l (or waits for its prefetch)
//   oscar_model_layer_prefetch(m, l + 1); // reads l + 1 on a thread of its own
//   ... run layer l ...
//   oscar_model_layer_release(m, l);      // frees l; m->layers[l] is NULL again
// A layer reads the same bytes whichever way it is read. oscar_model_load is
// open + acquire every layer + close the file: its release is a no-op.
// oscar_model_open_random is oscar_model_init_random's model, read the same way.
enum oscar_status oscar_model_open(const char * path, struct oscar_model ** out);
// The same without the LM head of an untied model: its tensor is checked but not read, and
// m->output is NULL (runs asking for logits are refused). For a calibration pass, which
// computes no logits (the Qwen3-8B shape: 2.5 GB less fp32 host memory).
enum oscar_status oscar_model_open_no_head(const char * path, struct oscar_model ** out);
enum oscar_status oscar_model_open_random(const struct oscar_model_config * cfg, uint64_t seed,
                                          struct oscar_model ** out);
// For a device backend, which converts weights as it uploads them: the same checks, but neither
// the embedding nor the LM head is read (m->tok_embd and m->output are NULL; the host forward
// refuses such a model). The backend reads one copy at a time with oscar_model_read_vocab and
// oscar_model_read_layer, so the host holds at most one [V, C] fp32 block (the Qwen3-8B shape:
// 2.5 GB, where oscar_model_load holds 33 GB).
enum oscar_status oscar_model_open_lazy(const char * path, struct oscar_model ** out);
// A new fp32 copy [V, C] of the token embedding (output false) or of the LM head (true; the
// embedding when tied): the resident one, else read from the file. The caller frees *out.
enum oscar_status oscar_model_read_vocab(const struct oscar_model * m, bool output, float ** out);
// A new copy of layer l read from the file (the model is not changed): w points into *block,
// which the caller frees. Not while a prefetch of m runs (one read of the file at a time).
enum oscar_status oscar_model_read_layer(const struct oscar_model * m, int32_t l, float ** block,
                                         struct oscar_layer_weights * w);
enum oscar_status oscar_model_layer_acquire(struct oscar_model * m, int32_t layer);
void oscar_model_layer_prefetch(struct oscar_model * m, int32_t layer); // best effort: acquire reads it otherwise
void oscar_model_layer_release(struct oscar_model * m, int32_t layer);
bool oscar_model_layer_resident(const struct oscar_model * m, int32_t layer);
bool oscar_model_streamed(const struct oscar_model * m);                // opened: release frees layers
int64_t oscar_model_layer_bytes(const struct oscar_model * m);          // fp32 bytes of the largest layer

// ---- capture hooks ---------------------------------------------------------------
// Called at the end of each layer the hook wants, with that layer's tensors.
// Pointers are valid only during the call (scratch is reused).
struct oscar_capture_layer {
    int32_t layer;
    int32_t n_tokens;                  // T: all sequences of the batch, concatenated
    int32_t n_seq;
    const int32_t * seq_start;         // [n_seq + 1] token offsets; sequence s is [seq_start[s], seq_start[s+1])
    const int32_t * pos;               // [T] position of each token in its sequence
    const float * q;                   // [T, Hq, D]  after q_norm and RoPE, not scaled
    const float * k;                   // [T, Hkv, D] after k_norm and RoPE
    const float * v;                   // [T, Hkv, D] as projected (+ bias)
    const float * attn_out;            // [T, Hq, D]  attention output before W_O
    const float * wo;                  // [C, Hq*D]   the layer's W_O
    const float * resid_out;           // [T, C]      residual stream after the whole layer
    const struct oscar_model_config * config;
};

struct oscar_capture_hook {
    // Asked once per layer per forward call; NULL means "every layer".
    bool (*want)(void * user, int32_t layer);
    enum oscar_status (*on_layer)(void * user, const struct oscar_capture_layer * cap);
    void * user;
    bool qkv_only;   // the hook reads only q/k/v (device backends then copy nothing else)
};

// Replaces the forward pass's own causal attention (e.g. by attention over a
// simulated quantized KV cache). Receives post-RoPE q/k and raw v of the
// batch and writes out [T, Hq, D]. Sequences in the batch start at position
// pos[seq_start[s]], which is > 0 when the caller feeds a sequence in chunks.
struct oscar_attention_override {
    enum oscar_status (*attend)(void * user, int32_t layer,
                                const struct oscar_capture_layer * in, // q, k, v, pos, seq_start set
                                float * out);                          // [T, Hq, D]
    void * user;
};

// The forward pass's own exact causal attention, in the override's signature:
// each token attends to the tokens of its sequence in this batch up to itself
// (the last oscar_layer_window(config, layer) of them for sliding-window layers)
// (softmax(q k^T * oscar_attn_scale) v, GQA grouping, online softmax with double sums).
// user: NULL or a const int32_t * thread count (0 = all cores). Allocates nothing.
// Fails (UNSUPPORTED) only if head_dim > OSCAR_MAX_HEAD_DIM.
#define OSCAR_MAX_HEAD_DIM 512
enum oscar_status oscar_attention_causal(void * user, int32_t layer, const struct oscar_capture_layer * in,
                                         float * out);

// ---- forward pass --------------------------------------------------------------
struct oscar_batch {
    int32_t         n_seq;
    const int32_t * seq_start; // [n_seq + 1]
    const int32_t * tokens;    // [T]
    const int32_t * pos;       // [T] or NULL (then each sequence starts at 0)
};

struct oscar_forward_params {
    int32_t n_threads;                                // 0 = all cores
    int32_t max_tokens;                               // largest batch (T) this context accepts
    const struct oscar_capture_hook *       hook;     // NULL: no capture, no cost
    const struct oscar_attention_override * attention; // NULL: exact causal attention
};

struct oscar_forward_params oscar_forward_default_params(void);

struct oscar_forward;

// Allocates all scratch for batches of up to params.max_tokens tokens once.
enum oscar_status oscar_forward_init(const struct oscar_model * m, const struct oscar_forward_params * params,
                                     struct oscar_forward ** out);
void oscar_forward_free(struct oscar_forward * f);

// Runs the batch. logits: [T, V] or NULL (then the LM head is skipped).
enum oscar_status oscar_forward_run(struct oscar_forward * f, const struct oscar_batch * batch, float * logits);

// Layer by layer (a layer-major caller such as calibration, which advances all
// its sequences through layer l before layer l+1). oscar_forward_begin checks
// the batch and sets its positions; oscar_forward_residual is the residual
// stream [T, C] of that batch, which oscar_forward_embed fills with the token
// embeddings (the input of layer 0) or the caller fills with the output of an
// earlier layer; oscar_forward_layer runs layer l on it in place (capture hook
// and attention override as in a run). oscar_forward_run is begin, embed,
// every layer, the final norm and the LM head: the same arithmetic. The batch
// passed to begin must stay valid until the next begin or run.
enum oscar_status oscar_forward_begin(struct oscar_forward * f, const struct oscar_batch * batch);
void oscar_forward_embed(struct oscar_forward * f);
float * oscar_forward_residual(struct oscar_forward * f);
enum oscar_status oscar_forward_layer(struct oscar_forward * f, int32_t layer);

// The final normed hidden state [T, C] of the last successful run (the LM head's
// input: logits = hidden @ output^T), and its T. Owned by f; valid until the next
// run or oscar_forward_free. T is 0 before the first run or after a failed one.
const float * oscar_forward_hidden(const struct oscar_forward * f, int32_t * n_tokens);

// ---- perplexity ---------------------------------------------------------------------
// Sliding windows, Hugging Face convention: window w covers tokens [b, e) with
// b = w * stride and e = min(b + n_ctx, N); the last window is the first that
// reaches N. Window w scores the targets j in [max(e_prev, b + 1), e) (e_prev =
// end of the previous window, 0 for the first), token j predicted from the
// logits at j - 1 inside the window. With stride < n_ctx every token but the
// first is scored once (n_scored = N - 1); with stride == n_ctx the first token
// of each window has no context and is not scored, exactly like the HF loop.
// max_windows > 0 stops after that many windows. NLL is natural-log, summed in
// double. Progress (tokens/s, ETA) goes to stderr through osc_progress.
struct oscar_ppl_params {
    int32_t n_ctx;      // window length (tokens)
    int32_t stride;     // window advance; tokens scored per window after the first (HF convention)
    int32_t n_threads;
    int32_t max_windows; // 0 = all
    const struct oscar_attention_override * attention; // NULL = exact attention
};

struct oscar_ppl_result {
    double  nll_sum;     // natural log
    int64_t n_scored;
    double  ppl;         // exp(nll_sum / n_scored)
    double  seconds;
};

enum oscar_status oscar_perplexity(const struct oscar_model * m, const int32_t * tokens, int64_t n_tokens,
                                   const struct oscar_ppl_params * params, struct oscar_ppl_result * out);

#endif
