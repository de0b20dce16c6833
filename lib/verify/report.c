// report.c - report.json (jansson), the markdown summary and the model-card
// section update (the SVG plot is plot.c). All outputs are atomic.
#include "verify/report.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fs.h"
#include "util/strbuf.h"

// ---- JSON -----------------------------------------------------------------------------
static json_t * layer_json(const struct oscar_layer_metrics * m, double drift) {
    return json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:I,s:I,s:I}", "k_rel_mse", m->k_rel_mse, "v_rel_mse",
                     m->v_rel_mse, "logit_err", m->logit_err, "kl", m->kl, "out_rel", m->out_rel, "hidden_drift",
                     drift, "n_rows", (json_int_t) m->n_rows, "n_rows_int2", (json_int_t) m->n_rows_int2, "n_pairs",
                     (json_int_t) m->n_pairs, "n_pairs_int2", (json_int_t) m->n_pairs_int2);
}

// The next-token statistics against bf16 (token-stats.h), or null when bf16 was not run.
static json_t * next_token_json(const struct oscar_token_stats * t) {
    if (!t->has_ref) return json_null();
    return json_pack("{s:s,s:I,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "reference", "bf16",
                     "n", (json_int_t) t->n, "kl_mean", t->kl_mean, "kl_stderr", t->kl_stderr, "kl_median",
                     t->kl_median, "kl_p90", t->kl_p90, "kl_p95", t->kl_p95, "kl_p99", t->kl_p99, "kl_max", t->kl_max,
                     "same_top1", t->same_top1, "same_top1_stderr", t->same_top1_stderr, "dp_rms", t->dp_rms,
                     "dp_rms_stderr", t->dp_rms_stderr, "ln_ppl_ratio", t->ln_ppl_ratio, "ln_ppl_ratio_stderr",
                     t->ln_ppl_ratio_stderr, "dppl", t->dppl, "dppl_stderr", t->dppl_stderr);
}

// The recall probe (recall.h): per method, exact retrieval and answer tokens right per probe.
static json_t * recall_json(const struct oscar_verify_report * r, const struct oscar_verify_method * m) {
    if (!r->n_recall) return json_null();
    json_t * ex = json_array(), * right = json_array();
    int32_t n_exact = 0;
    for (int32_t k = 0; k < r->n_recall; k++) {
        bool e = m->recall_right[k] == r->recall_len[k];
        n_exact += e;
        json_array_append_new(ex, json_boolean(e));
        json_array_append_new(right, json_integer(m->recall_right[k]));
    }
    return json_pack("{s:o,s:o,s:f}", "exact", ex, "tokens_right", right, "exact_fraction",
                     (double) n_exact / (double) r->n_recall);
}

static json_t * recall_config_json(const struct oscar_verify_report * r) {
    if (!r->n_recall) return json_null();
    json_t * d = json_array(), * pos = json_array(), * len = json_array();
    for (int32_t k = 0; k < r->n_recall; k++) {
        json_array_append_new(d, json_real(r->recall_depth[k]));
        json_array_append_new(pos, json_integer(r->recall_pos[k]));
        json_array_append_new(len, json_integer(r->recall_len[k]));
    }
    return json_pack("{s:o,s:o,s:o}", "depths", d, "needle_positions", pos, "answer_tokens", len);
}

static json_t * report_json(const struct oscar_verify_report * r) {
    json_t * root = json_pack(
        "{s:i,s:s,s:s,s:s,s:s,s:s,s:{s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:i,s:i,s:s},s:I,s:f}", "version",
        OSCAR_VERIFY_REPORT_VERSION, "model", r->model, "model_name", r->model_name, "rotations", r->rotations,
        "corpus", r->corpus, "corpus_sha256", r->corpus_sha256, "config", "ctx", r->ctx, "sink", r->sink, "recent",
        r->recent, "page_size", r->n_flush, "prompt", r->prompt, "group_size", r->group_size, "scale_dtype", r->scale_dtype, "windows",
        r->n_windows, "metric_tokens", r->metric_tokens, "tiering", "decode", "corpus_tokens", (json_int_t) r->n_tokens,
        "wall_seconds", r->wall_seconds);
    if (!root) return NULL;
    json_t * ms = json_array();
    for (int32_t i = 0; i < r->n_methods; i++) {
        const struct oscar_verify_method * m = &r->methods[i];
        json_t * layers = json_array();
        struct oscar_layer_metrics all = {0};
        double drift_last = 0;
        for (int32_t l = 0; l < r->n_layer; l++) {
            json_array_append_new(layers, layer_json(&m->layers[l], m->drift[l]));
            oscar_layer_metrics_add(&all, &m->layers[l]);
            drift_last = m->drift[l];
        }
        json_t * o = json_pack("{s:s,s:f,s:f,s:f,s:I,s:f,s:s,s:o,s:o,s:{s:I,s:I,s:I},s:{s:I,s:I,s:I}}", "name",
                               m->name, "bpe", m->bpe, "ppl", m->ppl, "nll_sum", m->nll_sum, "n_scored",
                               (json_int_t) m->n_scored, "seconds", m->seconds, "kv_sim",
                               m->kv_sim[0] ? m->kv_sim : "none", "mean",
                               layer_json(&all, drift_last), "layers", layers, "k_quant", "rows",
                               (json_int_t) m->k_stats.n_rows, "degenerate", (json_int_t) m->k_stats.n_degenerate,
                               "clipped", (json_int_t) m->k_stats.n_clipped, "v_quant", "rows",
                               (json_int_t) m->v_stats.n_rows, "degenerate", (json_int_t) m->v_stats.n_degenerate,
                               "clipped", (json_int_t) m->v_stats.n_clipped);
        if (o) {
            json_object_set_new(o, "ppl_stderr", json_real(m->tok.ppl_stderr));
            json_object_set_new(o, "nll_stderr", json_real(m->tok.nll_stderr));
            json_object_set_new(o, "next_token", next_token_json(&m->tok));
            json_object_set_new(o, "recall", recall_json(r, m));
        }
        json_array_append_new(ms, o);
    }
    json_object_set_new(json_object_get(root, "config"), "score_from", json_integer(r->score_from));
    json_object_set_new(json_object_get(root, "config"), "recall", recall_config_json(r));
    json_object_set_new(root, "methods", ms);
    return root;
}

enum oscar_status oscar_verify_json_text(const struct oscar_verify_report * r, char ** out) {
    json_t * root = report_json(r);
    *out = root ? json_dumps(root, JSON_INDENT(1) | JSON_REAL_PRECISION(10)) : NULL;
    json_decref(root);
    return *out ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "report JSON encoding failed");
}

enum oscar_status oscar_verify_write_json(const struct oscar_verify_report * r, const char * path) {
    char * txt = NULL;
    enum oscar_status st = oscar_verify_json_text(r, &txt);
    if (st == OSCAR_OK) st = osc_write_file_atomic(path, txt, strlen(txt));
    free(txt);
    return st;
}

// ---- markdown and card --------------------------------------------------------------------
enum oscar_status oscar_verify_markdown(const struct oscar_verify_report * r, char ** out) {
    struct osc_strbuf b = {0};
    osc_sb_printf(&b, "### KV-cache quantization quality (oscar-verify)\n\n");
    osc_sb_printf(&b, "Model `%s`, held-out corpus `%s`, %d window(s) of %d tokens, BF16 sink %d + recent %d "
                  "(page %d, decode demotion after a %d-token prefill), group size %d, %s scale/zero.\n\n",
              r->model_name, r->corpus, r->n_windows, r->ctx, r->sink, r->recent, r->n_flush, r->prompt, r->group_size,
              r->scale_dtype);
    osc_sb_printf(&b, "| method | BPE | perplexity | Δppl vs bf16 | K relMSE | V relMSE | KL (nats) | post-W_O rel. err "
                  "| hidden drift (last layer) | next-token KL vs bf16 (mean / p99) | same top-1 |\n");
    osc_sb_printf(&b, "|---|---|---|---|---|---|---|---|---|---|---|\n");
    double base = r->n_methods ? r->methods[0].ppl : 0;
    for (int32_t i = 0; i < r->n_methods; i++)
        if (!strcmp(r->methods[i].name, "bf16")) base = r->methods[i].ppl;
    for (int32_t i = 0; i < r->n_methods; i++) {
        const struct oscar_verify_method * m = &r->methods[i];
        struct oscar_layer_metrics all = {0};
        for (int32_t l = 0; l < r->n_layer; l++) oscar_layer_metrics_add(&all, &m->layers[l]);
        osc_sb_printf(&b, "| %s | %.3f | %.4f ± %.4f | %+.4f | %.3e | %.3e | %.3e | %.3e | %.3e |", m->name, m->bpe,
                  m->ppl, m->tok.ppl_stderr, m->ppl - base, all.k_rel_mse, all.v_rel_mse, all.kl, all.out_rel,
                  r->n_layer ? m->drift[r->n_layer - 1] : 0.0);
        if (m->tok.has_ref)
            osc_sb_printf(&b, " %.3e / %.3e | %.2f %% |\n", m->tok.kl_mean, m->tok.kl_p99, 100 * m->tok.same_top1);
        else
            osc_sb_printf(&b, " - | - |\n");
    }
    osc_sb_printf(&b, "\nMetrics (means over layers) on the first %d tokens; perplexity (± its standard error) and the "
                  "next-token comparison over %d × %d tokens", r->metric_tokens, r->n_windows, r->ctx);
    if (r->score_from > 1) osc_sb_printf(&b, ", scoring targets %d..%d of each window", r->score_from, r->ctx - 1);
    osc_sb_printf(&b, ".\n");
    if (r->n_recall) {   // --recall: exact retrievals of the passcode per method
        osc_sb_printf(&b, "\nVerbatim recall (a passcode at %d depths of a %d-token window, greedy):", r->n_recall, r->ctx);
        for (int32_t i = 0; i < r->n_methods; i++) {
            int32_t n = 0;
            for (int32_t k = 0; k < r->n_recall; k++) n += r->methods[i].recall_right[k] == r->recall_len[k];
            osc_sb_printf(&b, "%s %s %d/%d", i ? "," : "", r->methods[i].name, n, r->n_recall);
        }
        osc_sb_printf(&b, ".\n");
    }
    if (b.oom) {
        free(b.s);
        return osc_error(OSCAR_ERR_NOMEM, "markdown summary");
    }
    *out = b.s;
    return OSCAR_OK;
}

#define CARD_BEGIN "<!-- oscar-verify:begin -->"
#define CARD_END   "<!-- oscar-verify:end -->"

enum oscar_status oscar_verify_update_card(const char * readme, const char * md) {
    char * old = NULL;
    size_t n = 0;
    enum oscar_status st = osc_read_file(readme, (size_t) 1 << 24, &old, &n);
    if (st != OSCAR_OK) return st;
    struct osc_strbuf b = {0};
    char * s = strstr(old, CARD_BEGIN), * e = s ? strstr(s, CARD_END) : NULL;
    if (s && e) {
        // same bytes as the append branch below: BEGIN \n md \n END
        osc_sb_printf(&b, "%.*s%s\n%s\n%s", (int) (s - old), old, CARD_BEGIN, md, e);
    } else {
        osc_sb_printf(&b, "%s%s\n%s\n%s\n%s\n", old, (n && old[n - 1] != '\n') ? "\n" : "", CARD_BEGIN, md, CARD_END);
    }
    st = b.oom ? osc_error(OSCAR_ERR_NOMEM, "%s: card text", readme) : osc_write_file_atomic(readme, b.s, b.n);
    free(b.s);
    free(old);
    return st;
}
