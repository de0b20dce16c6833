// report.c - report.json (jansson), the hand-written SVG plot, the markdown
// summary and the model-card section update. All outputs are atomic.
#include "verify/report.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fs.h"

// ---- growable string --------------------------------------------------------------
struct sbuf {
    char * s;
    size_t n, cap;
    bool oom;
};

static void sb_printf(struct sbuf * b, const char * fmt, ...) {
    va_list ap;
    for (;;) {
        size_t room = b->cap - b->n;
        va_start(ap, fmt);
        int k = b->s ? vsnprintf(b->s + b->n, room, fmt, ap) : -1;
        va_end(ap);
        if (k >= 0 && (size_t) k < room) {
            b->n += (size_t) k;
            return;
        }
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (k >= 0 && nc < b->n + (size_t) k + 1) nc *= 2;
        char * ns = realloc(b->s, nc);
        if (!ns) {
            b->oom = true;
            return;
        }
        b->s = ns, b->cap = nc;
    }
}

// ---- JSON -----------------------------------------------------------------------------
static json_t * layer_json(const struct oscar_layer_metrics * m, double drift) {
    return json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:I,s:I,s:I}", "k_rel_mse", m->k_rel_mse, "v_rel_mse",
                     m->v_rel_mse, "logit_err", m->logit_err, "kl", m->kl, "out_rel", m->out_rel, "hidden_drift",
                     drift, "n_rows", (json_int_t) m->n_rows, "n_rows_int2", (json_int_t) m->n_rows_int2, "n_pairs",
                     (json_int_t) m->n_pairs, "n_pairs_int2", (json_int_t) m->n_pairs_int2);
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
        json_array_append_new(ms, o);
    }
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

// ---- SVG ------------------------------------------------------------------------------
static const char * const colors[] = {"#000000", "#d62728", "#ff7f0e", "#1f77b4", "#2ca02c",
                                      "#9467bd", "#8c564b", "#e377c2", "#17becf"};

enum oscar_status oscar_verify_write_svg(const struct oscar_verify_report * r, const char * path) {
    const double W = 720, H = 420, x0 = 70, y0 = 30, pw = 480, ph = 330;
    double lo = INFINITY, hi = -INFINITY;
    for (int32_t i = 0; i < r->n_methods; i++)
        for (int32_t l = 0; l < r->n_layer; l++) {
            double v = r->methods[i].layers[l].out_rel;
            if (v > 0) lo = fmin(lo, log10(v)), hi = fmax(hi, log10(v));
        }
    if (isinf(lo)) lo = -6, hi = 0;
    lo = floor(lo), hi = ceil(hi);
    if (hi <= lo) hi = lo + 1;
    struct sbuf b = {0};
    sb_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    sb_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
                  "font-size=\"12\">\n", W, H);
    sb_printf(&b, "<title>per-layer post-W_O relative error, %s</title>\n", r->model_name);
    sb_printf(&b, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", W, H);
    sb_printf(&b, "<g id=\"axes\" stroke=\"black\" fill=\"none\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/></g>\n",
              x0, y0 + ph, x0 + pw, y0 + ph, x0, y0, x0, y0 + ph);
    for (double e = lo; e <= hi + 1e-9; e += 1) {
        double y = y0 + ph - (e - lo) / (hi - lo) * ph;
        sb_printf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">1e%d</text>\n", x0 - 6, y + 4, (int) e);
        sb_printf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x0, y, x0 + pw, y);
    }
    int32_t L = r->n_layer > 1 ? r->n_layer : 2;
    for (int32_t l = 0; l < r->n_layer; l += (r->n_layer > 10 ? 5 : 1))
        sb_printf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>\n",
                  x0 + (double) l / (L - 1) * pw, y0 + ph + 16, l);
    sb_printf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">layer</text>\n", x0 + pw / 2, H - 8);
    sb_printf(&b, "<text x=\"14\" y=\"%.1f\" transform=\"rotate(-90 14 %.1f)\" text-anchor=\"middle\">post-W_O "
                  "relative error</text>\n", y0 + ph / 2, y0 + ph / 2);
    for (int32_t i = 0; i < r->n_methods; i++) {
        const char * c = colors[i % (int32_t) (sizeof colors / sizeof colors[0])];
        sb_printf(&b, "<polyline class=\"method\" data-method=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                      "points=\"", r->methods[i].name, c);
        for (int32_t l = 0; l < r->n_layer; l++) {
            double v = r->methods[i].layers[l].out_rel;
            double e = v > 0 ? log10(v) : lo;
            if (e < lo) e = lo;
            sb_printf(&b, "%s%.1f,%.1f", l ? " " : "", x0 + (double) l / (L - 1) * pw,
                      y0 + ph - (e - lo) / (hi - lo) * ph);
        }
        sb_printf(&b, "\"/>\n");
        double ly = y0 + 10 + 18 * i;
        sb_printf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>"
                      "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", x0 + pw + 15, ly, x0 + pw + 40, ly, c, x0 + pw + 46,
                  ly + 4, r->methods[i].name);
    }
    sb_printf(&b, "</svg>\n");
    enum oscar_status st = b.oom ? osc_error(OSCAR_ERR_NOMEM, "%s: SVG text", path)
                                 : osc_write_file_atomic(path, b.s, b.n);
    free(b.s);
    return st;
}

// ---- markdown and card --------------------------------------------------------------------
enum oscar_status oscar_verify_markdown(const struct oscar_verify_report * r, char ** out) {
    struct sbuf b = {0};
    sb_printf(&b, "### KV-cache quantization quality (oscar-verify)\n\n");
    sb_printf(&b, "Model `%s`, held-out corpus `%s`, %d window(s) of %d tokens, BF16 sink %d + recent %d "
                  "(page %d, decode demotion after a %d-token prefill), group size %d, %s scale/zero.\n\n",
              r->model_name, r->corpus, r->n_windows, r->ctx, r->sink, r->recent, r->n_flush, r->prompt, r->group_size,
              r->scale_dtype);
    sb_printf(&b, "| method | BPE | perplexity | Δppl vs bf16 | K relMSE | V relMSE | KL (nats) | post-W_O rel. err "
                  "| hidden drift (last layer) |\n");
    sb_printf(&b, "|---|---|---|---|---|---|---|---|---|\n");
    double base = r->n_methods ? r->methods[0].ppl : 0;
    for (int32_t i = 0; i < r->n_methods; i++)
        if (!strcmp(r->methods[i].name, "bf16")) base = r->methods[i].ppl;
    for (int32_t i = 0; i < r->n_methods; i++) {
        const struct oscar_verify_method * m = &r->methods[i];
        struct oscar_layer_metrics all = {0};
        for (int32_t l = 0; l < r->n_layer; l++) oscar_layer_metrics_add(&all, &m->layers[l]);
        sb_printf(&b, "| %s | %.3f | %.4f | %+.4f | %.3e | %.3e | %.3e | %.3e | %.3e |\n", m->name, m->bpe, m->ppl,
                  m->ppl - base, all.k_rel_mse, all.v_rel_mse, all.kl, all.out_rel,
                  r->n_layer ? m->drift[r->n_layer - 1] : 0.0);
    }
    sb_printf(&b, "\nMetrics (means over layers) on the first %d tokens; perplexity over %d × %d tokens.\n",
              r->metric_tokens, r->n_windows, r->ctx);
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
    struct sbuf b = {0};
    char * s = strstr(old, CARD_BEGIN), * e = s ? strstr(s, CARD_END) : NULL;
    if (s && e) {
        // same bytes as the append branch below: BEGIN \n md \n END
        sb_printf(&b, "%.*s%s\n%s\n%s", (int) (s - old), old, CARD_BEGIN, md, e);
    } else {
        sb_printf(&b, "%s%s\n%s\n%s\n%s\n", old, (n && old[n - 1] != '\n') ? "\n" : "", CARD_BEGIN, md, CARD_END);
    }
    st = b.oom ? osc_error(OSCAR_ERR_NOMEM, "%s: card text", readme) : osc_write_file_atomic(readme, b.s, b.n);
    free(b.s);
    free(old);
    return st;
}
