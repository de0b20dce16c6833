// report.h - oscar-verify results: report.json, markdown summary, and the
// atomic model-card update (the per-layer SVG plot: plot.h). Schema: lib/verify/README.md.
// Writes only through osc_write_file_atomic; never reads the model.
#ifndef OSCAR_VERIFY_REPORT_H
#define OSCAR_VERIFY_REPORT_H

#include <stdint.h>

#include "quant/quant.h"
#include "verify/recall.h"
#include "verify/metrics.h"
#include "verify/token-stats.h"

#define OSCAR_VERIFY_REPORT_VERSION 1

struct oscar_verify_method {
    char   name[32];
    double bpe;                             // at the evaluated context
    double nll_sum;                         // natural log
    int64_t n_scored;
    double ppl;
    double seconds;                         // perplexity forward time of this method
    char   kv_sim[16];                      // where its quantized cache was simulated: "cpu", a backend
                                            // name, or "" (bf16: no quantized cache)
    struct oscar_layer_metrics * layers;    // [n_layer] (held-out slice)
    double * drift;                         // [n_layer] hidden-state relative MSE after each layer
    struct oscar_quant_stats k_stats, v_stats;
    struct oscar_token_stats tok;           // perplexity spread; next-token KL/top-1/Δp vs bf16 (has_ref)
    int32_t recall_right[OSCAR_RECALL_MAX_PROBES]; // answer tokens right before the first miss, per probe
};

struct oscar_verify_report {
    char model[512], model_name[128], rotations[512], corpus[512];
    char corpus_sha256[65];                 // of the corpus bytes read (lib/tokenizer/corpus.h), or ""
    int32_t n_layer, ctx, sink, recent, n_flush, group_size, n_windows, metric_tokens;
    int32_t prompt;                         // prefill chunk per window (>= sink)
    int32_t score_from;                     // first scored target of each window (0 = 1: all)
    int32_t n_recall;                       // recall probes run (0: none)
    int32_t recall_pos[OSCAR_RECALL_MAX_PROBES], recall_len[OSCAR_RECALL_MAX_PROBES]; // needle position,
    double  recall_depth[OSCAR_RECALL_MAX_PROBES];                                   // answer tokens, depth
    char scale_dtype[16];
    int64_t n_tokens;                       // corpus tokens available
    double wall_seconds;
    int32_t n_methods;
    struct oscar_verify_method * methods;   // [n_methods]
};

enum oscar_status oscar_verify_write_json(const struct oscar_verify_report * r, const char * path);
// The same JSON text (malloc'ed, caller frees).
enum oscar_status oscar_verify_json_text(const struct oscar_verify_report * r, char ** out);
// Markdown summary (malloc'ed, caller frees).
enum oscar_status oscar_verify_markdown(const struct oscar_verify_report * r, char ** out);
// Replaces the text between "<!-- oscar-verify:begin -->" and
// "<!-- oscar-verify:end -->" in readme (appends the block when absent), atomically.
// Idempotent: a second call with the same markdown leaves the file byte-identical.
enum oscar_status oscar_verify_update_card(const char * readme, const char * markdown);

#endif
