// verify.h - the oscar-verify driver: every KV-cache method of a run evaluated
// on the same tokens, in one process (method.md §16).
//
// oscar_verify_run does, for each method of params.methods:
//   (1) per-layer metrics (K/V relMSE, logit error, attention KL, post-W_O
//       error; lib/verify/metrics.h) and the hidden-state drift after every
//       layer, on the first metric_tokens tokens (one sequence, decode tiering);
//   (2) perplexity over n_windows = floor(tokens / ctx) non-overlapping windows
//       of ctx tokens (targets 1..ctx-1 of each, the HF stride = ctx
//       convention); quantized methods run through oscar_kv_sim, i.e. a BF16
//       sink + recent and an INT2 (or INT4 / KIVI) middle written by prefill
//       and by decode demotion in pages of `page` tokens; targets from
//       score_from on. With bf16 among the methods (it runs first), every
//       method's next-token distribution on those positions is compared with
//       bf16's (KL, top-1, Δp: token-stats.h), from the same logits.
// It reads nothing from disk and writes nothing: the caller loads the model,
// artifact and tokens, and writes the report (report.h).
#ifndef OSCAR_VERIFY_VERIFY_H
#define OSCAR_VERIFY_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "formats/oscar-artifact.h"
#include "model/model.h"
#include "verify/recall.h"
#include "verify/report.h"

#define OSCAR_VERIFY_MAX_METHODS 16

// Method names accepted in params.methods (comma separated):
//   bf16         the exact model (no cache quantization)
//   naive        symmetric INT2, no rotation, no clip
//   hadamard     asymmetric INT2 after a Hadamard rotation, no clip
//   oscar        the artifact's rotations + its (searched) per-layer clips
//   oscar-fixed  the artifact's rotations + fixed clips 0.96 (K) / 0.92 (V)
//   oscar-lm     the artifact's rotations + Lloyd-Max INT2 (group = head_dim)
//   int4-bdh     SAW-INT4: block Hadamard + per-row INT4
//   kivi         KIVI INT2: per-channel K over 32-token blocks, per-token V
//   q2_0         the OSCAR llama.cpp fork's cache: the artifact's per-layer rotations,
//                Q2_0 K and V, one clip (the artifact's oscar.k_clip_ratio, as served), fp16 sink/recent ring (not in the defaults)
//   q2_0-attn-rot  q2_0 with the fork's default attention Hadamard after the rotation (served
//                unless LLAMA_ATTN_ROT_DISABLE=1, which the export's recipe sets)
//   oscar-omni   OScaR: Hadamard + omni-token K scaling, KIVI-granularity INT2 (not in the defaults)
// The oscar* methods and q2_0(-attn-rot) need an artifact.
#define OSCAR_VERIFY_METHODS_ALL "bf16,naive,hadamard,oscar,oscar-fixed,oscar-lm,int4-bdh,kivi"
#define OSCAR_VERIFY_METHODS_NO_ARTIFACT "bf16,naive,hadamard,int4-bdh,kivi"

struct oscar_verify_params {
    const char * methods;                 // comma list (see above)
    int32_t ctx;                          // window length [2048]
    int32_t sink, recent;                 // BF16 tiers [32, 128]
    int32_t page;                         // decode demotion page (flush period) [8]
    int32_t prompt;                       // tokens of each window served as the prefill chunk, 0 = sink.
                                          // INT2 rows written by prefill use the method's quantizer (for
                                          // oscar-lm: Lloyd-Max); rows demoted in decode use the uniform
                                          // flush quantizer (method.md §10), so with prompt = sink
                                          // oscar-lm equals oscar-fixed. Queries inside the prompt see
                                          // bf16 rows only (prefill attention).
    int32_t group_size;                   // INT2 group, 0 = head_dim
    enum oscar_quant_meta_dtype scale_dtype; // [float32]
    int64_t tokens;                       // perplexity tokens, 0 = ctx (one window)
    int32_t metric_tokens;                // tokens of the metrics / drift pass [512]
    int32_t n_threads;                    // 0 = all cores
    const char * device;                  // where the forward passes run: "cpu" (NULL: lib/model
                                          // forward + the CPU simulation, with quantizer stats) or a
                                          // backend such as "cuda": one device pass (bf16 weights and
                                          // activations) made before any other work serves the metrics /
                                          // drift pass (its metrics computed on the host from the layers
                                          // it copies back), every method's perplexity (windows batched,
                                          // scored on the device) and the recall probes. The quantized
                                          // cache is simulated inside that pass where kv-sim-forward.h
                                          // covers the method (every quantized method at head_dim
                                          // 32/64/128/256), else on the CPU (warned; kv_sim "cpu").
                                          // The model may be opened with
                                          // oscar_model_open_lazy: nothing here reads its host weights.
    bool gpu_fp32;                        // device forward pass in fp32 (oscar_fwd_params.fp32)
    int64_t ref_logits_budget;            // cpu: bytes of bf16 logits kept for the next-token comparison
                                          // (0: 512 MiB; < 0: none): beyond it bf16's final hidden states
                                          // are kept and its logits recomputed per block (the same bits,
                                          // one more LM-head GEMM per method)
    int32_t score_from;                   // perplexity / next-token statistics score the targets j >=
                                          // score_from of each window (j >= 1 always); 0 <= score_from < ctx
                                          // [0: targets 1..ctx-1]. llama-perplexity's default (it scores
                                          // from logit ctx/2) is score_from = ctx/2 + 1.
    const struct oscar_verify_recall * recall; // NULL, or the verbatim-recall probes (recall.h): each
                                          // a window of ctx tokens of the corpus as filler, one
                                          // forward per probe and method; answers of <= 64 tokens
};

struct oscar_verify_params oscar_verify_default_params(void);

// Splits and checks a method list: names[i] get the canonical names, *n the
// count. OSCAR_ERR_INVALID for an unknown or repeated name, an empty list,
// more than OSCAR_VERIFY_MAX_METHODS, or an oscar* method when !have_artifact.
enum oscar_status oscar_verify_parse_methods(const char * list, bool have_artifact,
                                             char names[OSCAR_VERIFY_MAX_METHODS][32], int32_t * n);

// Runs the evaluation on tokens ids[0..n_ids). art may be NULL (then no
// oscar* method). Fills *rep (numbers and config; the caller sets the model,
// rotations and corpus labels); free it with oscar_verify_report_free.
// Errors: OSCAR_ERR_INVALID for bad parameters, too few tokens for the windows
// asked for (oscar_verify_check_tokens), or an artifact whose shape does not match the model.
enum oscar_status oscar_verify_run(const struct oscar_model * m, const struct oscar_artifact * art,
                                   const int32_t * ids, size_t n_ids, const struct oscar_verify_params * p,
                                   struct oscar_verify_report * rep);

void oscar_verify_report_free(struct oscar_verify_report * rep);

// Checks that the corpus holds what p asks for: one window of ctx tokens and
// the whole windows of p->tokens and the --metric-tokens prefix (never clamped
// to a shorter corpus).
// OSCAR_ERR_INVALID "the corpus has N tokens, fewer than ..." naming the request.
enum oscar_status oscar_verify_check_tokens(const struct oscar_verify_params * p, size_t n_ids);

// Writes dir/report.json, dir/layers.svg and dir/summary.md as a whole: into a
// staging directory that then replaces dir (util/fs.h osc_dir_stage; parents
// are created). A dir that is a file or holds other files is refused.
enum oscar_status oscar_verify_write_dir(const struct oscar_verify_report * rep, const char * dir);
// The checks of oscar_verify_write_dir alone, to run before the evaluation.
enum oscar_status oscar_verify_check_report_dir(const char * dir);

// The human table: one row per method (BPE, perplexity, Δ vs the first
// method, mean K/V relMSE, KL, post-W_O error, last-layer drift, seconds and
// cost relative to bf16), then a line with the run's settings.
void oscar_verify_print_table(const struct oscar_verify_report * rep, FILE * f);

#endif
