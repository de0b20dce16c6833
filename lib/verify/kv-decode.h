// kv-decode.h - the serving cache of one request simulated step by step: the
// oracle of the one-pass quantized-cache attention (metrics.h, oscar_kv_sim).
//
// oscar_kv_sim scores a whole window in ONE prefill-style pass: query t reads
// key p's INT2 value iff oscar_tier_int2_range(t) says so, and every INT2 row
// was quantized once, by the prefill quantizer if oscar_tier_from_prefill(p)
// else by the flush (demotion) quantizer. That closed form is exact because
// (1) the tier of key p when query t attends is a fixed function of (p, t,
// sink, recent, page, prompt): the serving policy never looks at the data, and
// (2) a row's INT2 value depends only on the row and on which path wrote it
// (per-token quantizers; KIVI K blocks only on their own rows).
//
// This file does NOT use that closed form. It keeps, per layer, the cache a
// server would hold and advances it in serving order with lib/attention's
// tier simulator (oscar_tier_sim: §11.3 prefill layout, §11.4 flush counter
// and page demotion):
//   - a call whose sequence starts at position 0 resets the layer and takes
//     its first S0 = min(prompt_len or sink, n) rows as the final prefill chunk:
//     those queries attend to the chunk's HP rows (prefill attention); then the
//     chunk's INT2-tier rows are quantized by the PREFILL quantizer;
//   - every later token (in the same call or a later one, positions in order)
//     is a decode step: the tier simulator demotes its pages first, each newly
//     demoted row is quantized by the FLUSH quantizer (block > 1, KIVI: rows
//     turn INT2 only when their whole block of `block` positions from the first
//     non-sink position is demoted; then the K block is quantized per channel),
//     the new row enters the recent tier as HP, and the query attends to the
//     cache as it is at that step.
// Row values come from oscar_kv_transform_row / _kivi_block and attention from
// oscar_kv_attend_query, the same arithmetic as oscar_kv_sim, so on the same
// q/k/v the two paths agree bit for bit exactly when the schedules agree.
// One sequence per call.
#ifndef OSCAR_VERIFY_KV_DECODE_H
#define OSCAR_VERIFY_KV_DECODE_H

#include "verify/metrics.h"

struct oscar_kv_decode;

// max_len: longest request (positions 0 .. max_len-1). n_threads 0 = all cores.
enum oscar_status oscar_kv_decode_init(const struct oscar_kv_transform * tf, const struct oscar_model_config * cfg,
                                       int32_t max_len, int32_t n_threads, struct oscar_kv_decode ** out);
void oscar_kv_decode_free(struct oscar_kv_decode * d);
struct oscar_attention_override oscar_kv_decode_override(struct oscar_kv_decode * d);

// How oscar_kv_window_loglik runs a window.
enum oscar_kv_path {
    OSCAR_KV_ONE_PASS     = 0, // one forward, oscar_kv_sim (the closed form; what oscar-verify runs)
    OSCAR_KV_DECODE_BATCH = 1, // one forward, oscar_kv_decode advanced token by token inside each layer
    OSCAR_KV_DECODE_STEPS = 2, // serving: one forward for the prompt, then one forward per token
};

// ll[i] = ln p(tok[i+1] | tok[0..i]) for i in [0, n-1) of one window under tf's
// cache (tf NULL or identity: the exact model). Logits in fp32, log-softmax in fp64.
enum oscar_status oscar_kv_window_loglik(const struct oscar_model * m, const struct oscar_kv_transform * tf,
                                         enum oscar_kv_path path, const int32_t * tok, int32_t n, int32_t n_threads,
                                         double * ll);

#endif
