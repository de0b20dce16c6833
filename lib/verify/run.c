// run.c - the oscar-verify driver (verify.h): method list, per-layer metrics
// and hidden drift pass, quantized-cache perplexity of every method on the
// same windows, report files and the stdout table. No file reading here; no
// exit() on bad input.
#include "verify/verify.h"

#include "util/blas.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/forward-backend.h"
#include "formats/oscar-serve.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/mem.h"
#include "verify/kv-sim-forward.h"
#include "verify/plot.h"
#include "verify/token-stats.h"

struct oscar_verify_params oscar_verify_default_params(void) {
    return (struct oscar_verify_params){.methods = NULL, .ctx = 2048, .sink = 32, .recent = 128, .page = 8,
                                        .group_size = 0, .scale_dtype = OSCAR_META_F32, .tokens = 0,
                                        .metric_tokens = 512, .n_threads = 0, .score_from = 0};
}

// ---- methods --------------------------------------------------------------------------
// CLI name -> lib/verify/kv-transform.c preset name.
static const struct { const char * name, * preset; bool needs_art; } method_table[] = {
    {"bf16", "bf16", false},         {"naive", "naive", false},       {"hadamard", "hadamard", false},
    {"oscar", "oscar-searched", true}, {"oscar-fixed", "oscar", true}, {"oscar-lm", "oscar-lm", true},
    {"int4-bdh", "int4-bdh", false}, {"kivi", "kivi", false},     {"q2_0", "q2_0", true},
    {"q2_0-attn-rot", "q2_0-attn-rot", true}, {"oscar-omni", "oscar-omni", false},
};
enum { N_METHOD_TABLE = (int) (sizeof method_table / sizeof method_table[0]) };

static int method_index(const char * name) {
    for (int i = 0; i < N_METHOD_TABLE; i++)
        if (!strcmp(method_table[i].name, name)) return i;
    return -1;
}

enum oscar_status oscar_verify_parse_methods(const char * list, bool have_artifact,
                                             char names[OSCAR_VERIFY_MAX_METHODS][32], int32_t * n) {
    char buf[512];
    *n = 0;
    if (!list || strlen(list) >= sizeof buf) return osc_error(OSCAR_ERR_INVALID, "--methods: empty or too long");
    snprintf(buf, sizeof buf, "%s", list);
    for (char * sp = NULL, * name = strtok_r(buf, ",", &sp); name; name = strtok_r(NULL, ",", &sp)) {
        int k = method_index(name);
        if (k < 0)
            return osc_error(OSCAR_ERR_INVALID, "--methods: unknown method '%s' (known: %s)", name,
                             OSCAR_VERIFY_METHODS_ALL);
        if (method_table[k].needs_art && !have_artifact)
            return osc_error(OSCAR_ERR_INVALID, "--methods: '%s' needs --rotations", name);
        for (int32_t i = 0; i < *n; i++)
            if (!strcmp(names[i], name)) return osc_error(OSCAR_ERR_INVALID, "--methods: '%s' given twice", name);
        if (*n == OSCAR_VERIFY_MAX_METHODS)
            return osc_error(OSCAR_ERR_INVALID, "--methods: more than %d methods", OSCAR_VERIFY_MAX_METHODS);
        snprintf(names[(*n)++], 32, "%s", name);
    }
    if (*n == 0) return osc_error(OSCAR_ERR_INVALID, "--methods: empty list");
    return OSCAR_OK;
}

// ---- per-run state ----------------------------------------------------------------------
struct vrun {
    const struct oscar_model * m;
    const struct oscar_verify_params * p;
    int32_t nm, L, C, MT;
    struct oscar_kv_transform tfs[OSCAR_VERIFY_MAX_METHODS];
    struct oscar_kv_sim * sims[OSCAR_VERIFY_MAX_METHODS];
    // with p->device: the cache simulated inside the device forward (perplexity), when it covers the method
    struct oscar_kv_fwd_sim fsims[OSCAR_VERIFY_MAX_METHODS];
    bool has_fsim[OSCAR_VERIFY_MAX_METHODS];
    struct oscar_fwd * dev_f;          // with p->device: the one forward every pass runs on (one upload)
    float * wo;                        // device runs: [C, Hq D] the metrics' W_O of the current layer
    struct oscar_attention_override dev_ov;   // the host override the device pass holds (device_attention)
    int32_t dev_windows;               // windows per device run of a method simulated inside the pass
    struct oscar_verify_method * ms;   // [nm] (owned by the report)
    float * resid_ref;                 // [L, MT, C] reference residual stream after each layer
    float * resid_cur;                 // [L, MT, C] the same under one method
    float * logits;                    // [LOGIT_BLOCK, V]
    // next-token statistics against bf16 (token-stats.h): the bf16 method runs first and
    // keeps what later methods compare against; nr scored rows per window from row0
    int32_t i_ref;                     // the bf16 method, -1 if not run (no KL)
    int32_t row0, nr;                  // logits rows row0 .. row0+nr-1 (targets row0+1 ..) of a window
    // cpu, one of: bf16's logits of every scored row when they fit p->ref_logits_budget, else its
    // final hidden states, from which each block of its logits is recomputed by the same GEMM
    float * ref_logits;                // [n_win, nr, V]
    float * ref_hidden;                // [n_win, nr, C]
    float * ref_block;                 // [LOGIT_BLOCK, V] bf16's logits of the current block (ref_hidden)
    struct osc_token_ref * refs;       // [n_win, nr] bf16's lse / nll / argmax per scored row
    double t_score;                    // seconds of the current method in LM head + scoring (logged)
    int32_t recall_pos[OSCAR_RECALL_MAX_PROBES]; // where each recall probe put its needle
};
enum { LOGIT_BLOCK = 64 };
// Tokens of one device run of the perplexity windows (windows batched up to it; a longer window
// runs alone): the Qwen3-8B shape at ctx 2048 runs 4 windows at a time.
enum { DEVICE_BATCH_TOKENS = 8192 };
// Bytes of bf16 logits the CPU keeps rather than recompute, by default (one 2048-token window of
// SmolLM2: 402 MB).
#define REF_LOGITS_BUDGET ((int64_t) 512 << 20)
_Static_assert(OSCAR_VERIFY_MAX_METHODS <= OSCAR_METRICS_MAX_CACHES, "one metrics call takes every method");

static bool on_device(const struct vrun * r) { return r->p->device && strcmp(r->p->device, "cpu") != 0; }

static enum oscar_status setup_methods(struct vrun * r, const struct oscar_artifact * art, int32_t maxT) {
    const struct oscar_model_config * c = &r->m->config;
    const struct oscar_verify_params * p = r->p;
    char names[OSCAR_VERIFY_MAX_METHODS][32];
    enum oscar_status st = oscar_verify_parse_methods(p->methods, art != NULL, names, &r->nm);
    if (st != OSCAR_OK) return st;
    struct oscar_tiering tr = {.mode = OSCAR_TIERS_DECODE, .n_sink = p->sink, .n_recent = p->recent,
                               .n_flush = p->page, .prompt_len = p->prompt ? p->prompt : p->sink, .block = 1};
    r->ms = calloc((size_t) r->nm, sizeof *r->ms);
    if (!r->ms) return osc_error(OSCAR_ERR_NOMEM, "method table");
    const struct oscar_backend_i * be = NULL;   // a usable device, checked before any method falls back from it
    if (on_device(r) && (st = oscar_backend_get(p->device, &be)) != OSCAR_OK)
        return osc_error_prefix(st, "verify --device %s", p->device);
    for (int32_t i = 0; i < r->nm && st == OSCAR_OK; i++) {
        const char * preset = method_table[method_index(names[i])].preset;
        st = oscar_kv_transform_preset_rot(preset, r->L, c->n_head_kv, c->head_dim, p->group_size, p->scale_dtype, &tr,
                                       art ? &art->rot : NULL, &r->tfs[i]);
        if (st != OSCAR_OK) break;
        // q2_0 serves the artifact's one ratio for K and V (LLAMA_KV_CLIP_RATIO of the export's
        // recipe), read as the fork reads it (atof, then float)
        if (art && r->tfs[i].quant == OSCAR_KVQ_Q2_0)
            r->tfs[i].k_clip = r->tfs[i].v_clip = (float) atof(oscar_serve_llamacpp_clip(art));
        // the artifact's key mean (OptR centering) goes with its rotations
        if (art && method_table[method_index(names[i])].needs_art && !strncmp(names[i], "oscar", 5))
            r->tfs[i].k_mean = art->rot.k_mean;
        struct oscar_verify_method * mt = &r->ms[i];
        snprintf(mt->name, sizeof mt->name, "%s", names[i]);
        mt->bpe = oscar_kv_transform_bpe(&r->tfs[i], p->ctx);
        mt->layers = calloc((size_t) r->L, sizeof *mt->layers);
        mt->drift = calloc((size_t) r->L, sizeof(double));
        if (!mt->layers || !mt->drift) st = osc_error(OSCAR_ERR_NOMEM, "method %s: layer tables", names[i]);
        if (st == OSCAR_OK && r->tfs[i].quant != OSCAR_KVQ_IDENTITY)
            st = oscar_kv_sim_init(&r->tfs[i], c, maxT, p->n_threads, &r->sims[i]);
        if (st == OSCAR_OK && r->sims[i]) snprintf(mt->kv_sim, sizeof mt->kv_sim, "cpu");
        if (st == OSCAR_OK && r->sims[i] && be) {
            // Inside the device forward where it covers the method; what it does not cover (a
            // head_dim) keeps the CPU simulation as its attention. The forward passes stay on
            // the device.
            st = oscar_kv_fwd_sim_init(&r->tfs[i], &r->fsims[i]);
            r->has_fsim[i] = st == OSCAR_OK;
            if (st == OSCAR_ERR_UNSUPPORTED) {
                osc_warn("verify: method %s: %s; its quantized cache is simulated on the CPU", names[i],
                         oscar_last_error());
                st = OSCAR_OK;
            } else if (st == OSCAR_OK) {
                snprintf(mt->kv_sim, sizeof mt->kv_sim, "%s", p->device);
            } else {
                osc_error_prefix(st, "method %s on %s", names[i], p->device);
            }
        }
    }
    return st;
}

// The host attention of a quantized method: the CPU simulation. Zero (exact attention) for bf16.
static struct oscar_attention_override method_override(const struct vrun * r, int32_t i) {
    if (r->sims[i]) return oscar_kv_sim_override(r->sims[i]);
    return (struct oscar_attention_override){0};
}

// ---- (1) metrics and hidden drift -----------------------------------------------------------
struct ref_hook { struct vrun * r; bool metrics; float * resid; };

static enum oscar_status on_layer(void * user, const struct oscar_capture_layer * cl) {
    struct ref_hook * h = user;
    struct vrun * r = h->r;
    size_t n = (size_t) cl->n_tokens * (size_t) r->C;
    memcpy(h->resid + (size_t) cl->layer * n, cl->resid_out, sizeof(float) * n);
    if (!h->metrics) return OSCAR_OK;
    const struct oscar_model_config * c = cl->config;
    // The device pass does not hand out W_O (nor does a lazily opened model): its copy, as it uses it.
    const float * wo = cl->wo;
    if (!wo && r->dev_f) {
        enum oscar_status st = oscar_fwd_copy_wo(r->dev_f, cl->layer, r->wo);
        if (st != OSCAR_OK) return st;
        wo = r->wo;
    }
    if (!wo) wo = r->m->layers[cl->layer].wo;
    struct oscar_layer_input in = {.layer = cl->layer, .n_tokens = cl->n_tokens, .n_seq = cl->n_seq,
                                   .seq_start = cl->seq_start, .q = cl->q, .k = cl->k, .v = cl->v, .wo = wo,
                                   .n_head = c->n_head, .n_head_kv = c->n_head_kv, .head_dim = c->head_dim,
                                   .n_embd = c->n_embd, .attn_scale = oscar_attn_scale_param(c),
                                   .window = oscar_layer_window(c, cl->layer)};
    // Every method in one call: the exact attention they are measured against is computed once.
    struct oscar_layer_metrics lm[OSCAR_VERIFY_MAX_METHODS];
    enum oscar_status st = oscar_verify_layer_metrics_methods(r->tfs, r->nm, &in, r->p->n_threads, lm);
    for (int32_t i = 0; i < r->nm && st == OSCAR_OK; i++) r->ms[i].layers[cl->layer] = lm[i];
    return st;
}

// The attention method i runs on the device pass: the cache simulated inside it where it covers
// the method, else the method's host override (none for bf16).
// The pass keeps the override's address: it lives in r.
static enum oscar_status device_attention(struct vrun * r, int32_t i) {
    r->dev_ov = i >= 0 ? method_override(r, i) : (struct oscar_attention_override){0};
    const bool in_pass = i >= 0 && r->has_fsim[i];
    return oscar_fwd_set_attention(r->dev_f, in_pass ? &r->fsims[i].desc : NULL,
                                   !in_pass && r->dev_ov.attend ? &r->dev_ov : NULL);
}

// One forward over the metric slice; method < 0: the exact model with the metrics hook. On a
// device, the resident pass with the hook set for this run (its host hook copies each layer's
// tensors back); on the CPU, lib/model's forward.
static enum oscar_status metric_forward(struct vrun * r, const int32_t * ids, int32_t method) {
    struct ref_hook h = {.r = r, .metrics = method < 0, .resid = method < 0 ? r->resid_ref : r->resid_cur};
    struct oscar_capture_hook hk = {.on_layer = on_layer, .user = &h};
    int32_t ss[2] = {0, r->MT};
    struct oscar_batch b = {.n_seq = 1, .seq_start = ss, .tokens = ids, .pos = NULL};
    if (r->dev_f) {
        enum oscar_status st = device_attention(r, method);
        if (st == OSCAR_OK) st = oscar_fwd_set_hook(r->dev_f, &hk);
        if (st == OSCAR_OK) st = oscar_fwd_run(r->dev_f, &b, NULL);
        enum oscar_status st2 = oscar_fwd_set_hook(r->dev_f, NULL);
        return st != OSCAR_OK ? st : st2;
    }
    struct oscar_attention_override ov = {0};
    if (method >= 0) ov = method_override(r, method);
    struct oscar_fwd_params fp = oscar_fwd_default_params();
    fp.device = r->p->device, fp.n_threads = r->p->n_threads, fp.max_tokens = r->MT, fp.hook = &hk;
    fp.attention = ov.attend ? &ov : NULL;
    struct oscar_fwd * f = NULL;
    enum oscar_status st = oscar_fwd_init(r->m, &fp, &f);
    if (st == OSCAR_OK) st = oscar_fwd_run(f, &b, NULL);
    oscar_fwd_free(f);
    return st;
}

static void drift_of(const struct vrun * r, double * drift) {
    size_t n = (size_t) r->MT * (size_t) r->C;
    for (int32_t l = 0; l < r->L; l++) {
        const float * a = r->resid_cur + (size_t) l * n, * b = r->resid_ref + (size_t) l * n;
        double num = 0, den = 0;
        for (size_t j = 0; j < n; j++) {
            double d = (double) a[j] - (double) b[j];
            num += d * d, den += (double) b[j] * (double) b[j];
        }
        drift[l] = den > 0 ? num / den : 0;
    }
}

static enum oscar_status metrics_pass(struct vrun * r, const int32_t * ids) {
    struct osc_progress pg;
    osc_progress_init(&pg, "metrics", "method", r->nm);
    enum oscar_status st = metric_forward(r, ids, -1);
    for (int32_t i = 0; i < r->nm && st == OSCAR_OK; i++) {
        if (r->sims[i]) { // identity methods have zero drift by construction
            st = metric_forward(r, ids, i);
            if (st == OSCAR_OK) drift_of(r, r->ms[i].drift);
        }
        osc_progress_update(&pg, i + 1);
    }
    osc_progress_finish(&pg);
    return st;
}

// ---- (2) perplexity --------------------------------------------------------------------------
// Scores n rows of logits [n, V] against targets next[0..n): returns Σ_i -log softmax(logits[i])[next[i]]
// (fp64), the rows over nt threads LOGIT_BLOCK at a time and their terms summed in row order (the
// same bits for any thread count), and appends every row to acc. With bf16's rows b [n, V] and their
// cache ref[0..n) each row is compared against them (KL, top-1, Δp); fill_ref: this is the bf16
// pass, which first caches its own rows in ref (then b, bf16's logits as later methods will see
// them, must give KL 0).
static double rows_score(const float * logits, int32_t n, int32_t V, const int32_t * next, int32_t nt,
                         const float * b, struct osc_token_ref * ref, bool fill_ref, struct osc_token_acc * acc) {
    struct osc_token_row row[LOGIT_BLOCK];
    double nll = 0;
    for (int32_t r0 = 0; r0 < n; r0 += LOGIT_BLOCK) {
        int32_t nb = n - r0 < LOGIT_BLOCK ? n - r0 : LOGIT_BLOCK;
#pragma omp parallel for schedule(static) num_threads(nt > 0 ? nt : omp_get_max_threads())
        for (int32_t i = 0; i < nb; i++) {
            const float * lg = logits + (size_t) (r0 + i) * V;
            if (fill_ref) osc_token_ref_row(lg, V, next[r0 + i], &ref[r0 + i]);
            osc_token_score_row(lg, V, next[r0 + i], b ? b + (size_t) (r0 + i) * V : NULL, b ? &ref[r0 + i] : NULL,
                                &row[i]);
        }
        for (int32_t i = 0; i < nb; i++) nll += row[i].nll;
        osc_token_acc_add(acc, row, nb);
    }
    return nll;
}

// NLL of the scored targets (row0+1 .. T-1) of window w of method i from its final hidden states
// [T, C], LOGIT_BLOCK rows at a time. The bf16 pass keeps its logits (or its hidden rows, from
// which every method, bf16 too, recomputes bf16's logits of the block by the same GEMM: the
// same bits) for the comparison.
static double window_nll(struct vrun * r, int32_t i, const float * hidden, const int32_t * tok, int64_t w,
                         struct osc_token_acc * acc) {
    const struct oscar_model * m = r->m;
    int32_t C = m->config.n_embd, V = m->config.n_vocab, T = r->p->ctx, nt = r->p->n_threads;
    bool is_ref = i == r->i_ref, cmp = r->i_ref >= 0 && (r->ref_hidden || r->ref_logits);
    double nll = 0, t0 = osc_now();
    for (int32_t r0 = r->row0; r0 < T - 1; r0 += LOGIT_BLOCK) {
        int32_t nb = T - 1 - r0 < LOGIT_BLOCK ? T - 1 - r0 : LOGIT_BLOCK;
        size_t k = (size_t) w * (size_t) r->nr + (size_t) (r0 - r->row0);   // scored row of the run
        osc_sgemm(0, CblasNoTrans, CblasTrans, nb, V, C, 1.0f, hidden + (size_t) r0 * C, C, m->output,
                    C, 0.0f, r->logits, V);
        const float * ref = NULL;   // bf16's logits of the block
        if (cmp && r->ref_logits) {
            float * kept = r->ref_logits + k * (size_t) V;
            if (is_ref) memcpy(kept, r->logits, sizeof(float) * (size_t) nb * V);
            ref = kept;
        } else if (cmp) {
            if (is_ref) memcpy(r->ref_hidden + k * C, hidden + (size_t) r0 * C, sizeof(float) * (size_t) nb * C);
            osc_sgemm(0, CblasNoTrans, CblasTrans, nb, V, C, 1.0f, r->ref_hidden + k * C, C, m->output, C, 0.0f,
                      r->ref_block, V);
            ref = r->ref_block;
        }
        nll += rows_score(r->logits, nb, V, tok + r0 + 1, nt, ref, cmp ? r->refs + k : NULL, is_ref && cmp, acc);
    }
    r->t_score += osc_now() - t0;
    return nll;
}

// The windows of method i through the forward backend on p->device (bf16 weights and
// activations on cuda unless p->gpu_fp32), the method's simulated cache inside the pass or as its
// host override. One resident pass serves every method; the logits never leave the device: each
// row is scored there (oscar_fwd_run_scored), bf16's final hidden rows kept there as the reference.
static enum oscar_status ppl_windows_device(struct vrun * r, int32_t i, int32_t k_ord, const int32_t * ids,
                                           int64_t n_win, struct osc_token_acc * acc, struct osc_progress * pg) {
    const int32_t T = r->p->ctx, nr = r->nr;
    struct oscar_verify_method * mt = &r->ms[i];
    const bool is_ref = i == r->i_ref, cmp = r->i_ref >= 0;
    // several windows per run where the pass simulates the cache itself (a host simulation is
    // sized for one window)
    const int32_t wpb = r->sims[i] && !r->has_fsim[i] ? 1 : r->dev_windows;
    struct oscar_fwd_score * sc = malloc(sizeof *sc * (size_t) nr * wpb);
    struct osc_token_row * rows = malloc(sizeof *rows * (size_t) nr);
    int32_t * next = malloc(sizeof *next * (size_t) nr * wpb), * ss = malloc(sizeof *ss * (size_t) (wpb + 1));
    enum oscar_status st = sc && rows && next && ss ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "method %s: scores", mt->name);
    struct oscar_fwd * f = r->dev_f;
    if (st == OSCAR_OK) st = device_attention(r, i);
    for (int64_t w0 = 0; w0 < n_win && st == OSCAR_OK; w0 += wpb) {
        const int32_t nw = n_win - w0 < wpb ? (int32_t) (n_win - w0) : wpb;
        for (int32_t q = 0; q <= nw; q++) ss[q] = q * T;
        for (int32_t q = 0; q < nw; q++)
            memcpy(next + (size_t) q * nr, ids + (w0 + q) * T + r->row0 + 1, sizeof *next * (size_t) nr);
        struct oscar_batch b = {.n_seq = nw, .seq_start = ss, .tokens = ids + w0 * T, .pos = NULL};
        st = oscar_fwd_run_scored(f, &b, r->row0, nr, next, cmp ? w0 * nr : -1, is_ref, sc);
        for (int32_t q = 0; q < nw && st == OSCAR_OK; q++) {
            for (int32_t j = 0; j < nr; j++) {   // summed in row order, as the CPU path
                const struct oscar_fwd_score * e = &sc[(size_t) q * nr + j];
                rows[j] = (struct osc_token_row){.nll = e->nll, .nll_ref = e->nll_ref, .kl = e->kl, .dp = e->dp,
                                                 .same_top = e->same_top};
                mt->nll_sum += e->nll;
            }
            osc_token_acc_add(acc, rows, nr);
            mt->n_scored += nr;
        }
        osc_progress_update(pg, ((int64_t) k_ord * n_win + w0 + nw) * T);
    }
    free(sc), free(rows), free(next), free(ss);
    return st;
}

static enum oscar_status ppl_method(struct vrun * r, int32_t i, int32_t k_ord, const int32_t * ids, int64_t n_win,
                                    struct osc_progress * pg) {
    int32_t T = r->p->ctx;
    struct oscar_verify_method * mt = &r->ms[i];
    struct oscar_attention_override ov = {0};
    struct oscar_forward_params fp = oscar_forward_default_params();
    fp.n_threads = r->p->n_threads, fp.max_tokens = T;
    ov = method_override(r, i);
    if (ov.attend) fp.attention = &ov;
    struct oscar_forward * f = NULL;
    double t0 = osc_now();
    bool dev = on_device(r);
    r->t_score = 0;
    struct osc_token_acc acc;
    enum oscar_status st =
        osc_token_acc_init(&acc, n_win * r->nr, r->i_ref >= 0 && (r->ref_hidden || r->ref_logits || dev));
    if (st == OSCAR_OK)
        st = dev ? ppl_windows_device(r, i, k_ord, ids, n_win, &acc, pg) : oscar_forward_init(r->m, &fp, &f);
    for (int64_t w = 0; w < n_win && st == OSCAR_OK && !dev; w++) {
        int32_t ss[2] = {0, T}, th = 0;
        struct oscar_batch b = {.n_seq = 1, .seq_start = ss, .tokens = ids + w * T, .pos = NULL};
        st = oscar_forward_run(f, &b, NULL);
        const float * hid = st == OSCAR_OK ? oscar_forward_hidden(f, &th) : NULL;
        if (st == OSCAR_OK && (!hid || th != T)) st = osc_error(OSCAR_ERR_NUMERIC, "method %s: no hidden state", mt->name);
        if (st != OSCAR_OK) break;
        mt->nll_sum += window_nll(r, i, hid, ids + w * T, w, &acc);
        mt->n_scored += r->nr;
        osc_progress_update(pg, ((int64_t) k_ord * n_win + w + 1) * T);
    }
    mt->seconds = osc_now() - t0;
    mt->ppl = mt->n_scored ? exp(mt->nll_sum / (double) mt->n_scored) : 0;
    if (dev)
        osc_info("verify: %s: %.1f s on %s, LM head and scoring there%s", mt->name, mt->seconds, r->p->device,
                 acc.has_ref ? " (with the next-token comparison against bf16)" : "");
    else
        osc_info("verify: %s: %.1f s, of which %.1f s LM head and scoring%s", mt->name, mt->seconds, r->t_score,
                 acc.has_ref ? " (with the next-token comparison against bf16)" : "");
    if (st == OSCAR_OK) {
        // the report's perplexity is the one above (its sum, its bits); the spread comes from the rows
        osc_token_acc_finish(&acc, &mt->tok);
        mt->tok.ppl = mt->ppl, mt->tok.ppl_stderr = mt->ppl * mt->tok.nll_stderr;
        if (mt->tok.has_ref) mt->tok.dppl = mt->ppl - r->ms[r->i_ref].ppl;
    }
    osc_token_acc_free(&acc);
    if (r->sims[i]) oscar_kv_sim_stats(r->sims[i], &mt->k_stats, &mt->v_stats);
    oscar_forward_free(f);
    return st;
}

// ---- (3) verbatim recall (recall.h) ----------------------------------------------------------
// Every probe of method i: one forward of the laid-out window through the method's cache, then
// the argmax of each answer row (CPU: the LM head on the final hidden states of those rows;
// device: the pass's logits).
static enum oscar_status recall_method(struct vrun * r, int32_t i, int32_t k_ord, const int32_t * ids,
                                       struct osc_progress * pg) {
    const struct oscar_verify_recall * rc = r->p->recall;
    const struct oscar_model * m = r->m;
    const int32_t T = r->p->ctx, V = m->config.n_vocab, C = m->config.n_embd;
    struct oscar_verify_method * mt = &r->ms[i];
    struct oscar_attention_override ov = method_override(r, i);
    bool dev = on_device(r);
    int32_t * seq = malloc(sizeof(int32_t) * (size_t) T);
    float * logits = dev ? osc_alloc_large((size_t) T * (size_t) V * sizeof(float)) : r->logits;
    struct oscar_forward * f = NULL;
    struct oscar_fwd * fd = r->dev_f;
    enum oscar_status st = seq && logits ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "recall: buffers of %d tokens", T);
    if (st == OSCAR_OK && dev) {
        st = device_attention(r, i);
    } else if (st == OSCAR_OK) {
        struct oscar_forward_params fp = oscar_forward_default_params();
        fp.n_threads = r->p->n_threads, fp.max_tokens = T, fp.attention = ov.attend ? &ov : NULL;
        st = oscar_forward_init(m, &fp, &f);
    }
    for (int32_t k = 0; k < rc->n_probes && st == OSCAR_OK; k++) {
        const struct oscar_recall_probe * pr = &rc->probes[k];
        int32_t at, ss[2] = {0, T}, th = 0;
        r->recall_pos[k] = osc_recall_build(rc, k, ids, T, seq, &at);
        struct oscar_batch b = {.n_seq = 1, .seq_start = ss, .tokens = seq, .pos = NULL};
        const float * rows = NULL;
        if (dev && (st = oscar_fwd_run(fd, &b, logits)) == OSCAR_OK) rows = logits + (size_t) (at - 1) * V;
        if (!dev && (st = oscar_forward_run(f, &b, NULL)) == OSCAR_OK) {
            const float * hid = oscar_forward_hidden(f, &th);
            if (!hid || th != T) {
                st = osc_error(OSCAR_ERR_NUMERIC, "recall: method %s: no hidden state", mt->name);
                break;
            }
            osc_sgemm(0, CblasNoTrans, CblasTrans, pr->n_answer, V, C, 1.0f, hid + (size_t) (at - 1) * C, C,
                      m->output, C, 0.0f, logits, V);
            rows = logits;
        }
        if (st == OSCAR_OK) mt->recall_right[k] = osc_recall_prefix(rows, V, pr->answer, pr->n_answer);
        osc_progress_update(pg, (int64_t) k_ord * rc->n_probes + k + 1);
    }
    oscar_forward_free(f);
    if (dev) free(logits);
    free(seq);
    return st;
}

// What the bf16 pass keeps for the comparison: on the CPU its logits of the scored rows when they
// fit p->ref_logits_budget, else its final hidden states (n_win·nr·C values; the logits are
// recomputed by the same GEMM); on a device its hidden rows in the pass's reference store
// (oscar_fwd_ref_init). Without bf16 there is no KL (warned).
static enum oscar_status ref_setup(struct vrun * r, int64_t n_win) {
    const int32_t C = r->m->config.n_embd, V = r->m->config.n_vocab;
    r->row0 = r->p->score_from > 1 ? r->p->score_from - 1 : 0;
    r->nr = r->p->ctx - 1 - r->row0;
    for (int32_t i = 0; i < r->nm; i++)
        if (!strcmp(r->ms[i].name, "bf16")) r->i_ref = i;
    if (r->i_ref < 0) {
        osc_warn("verify: bf16 is not in --methods: no next-token KL / top-1 / Δp against it");
        return OSCAR_OK;
    }
    if (on_device(r)) return OSCAR_OK;   // the device keeps bf16's rows itself (ppl_windows_device)
    size_t rows = (size_t) n_win * (size_t) r->nr;
    r->refs = malloc(rows * sizeof *r->refs);
    const int64_t budget = r->p->ref_logits_budget ? r->p->ref_logits_budget : REF_LOGITS_BUDGET;
    if (budget > 0 && (double) rows * V * sizeof(float) <= (double) budget) {
        r->ref_logits = osc_alloc_large(rows * (size_t) V * sizeof(float));
    } else {
        r->ref_hidden = osc_alloc_large(rows * (size_t) C * sizeof(float));
        r->ref_block = malloc(sizeof(float) * LOGIT_BLOCK * (size_t) V);
    }
    if (!r->refs || (!r->ref_logits && (!r->ref_hidden || !r->ref_block)))
        return osc_error(OSCAR_ERR_NOMEM, "verify: bf16 rows of %zu positions for the next-token KL", rows);
    return OSCAR_OK;
}

// With p->device: the one forward every pass runs on (the model goes up once; bf16's reference
// rows stay beside it), made before any pass so that the host need not hold the model's layers
// (a model opened with oscar_model_open_lazy).
static enum oscar_status device_open(struct vrun * r, int64_t n_win) {
    const struct oscar_model_config * c = &r->m->config;
    struct oscar_fwd_params fp = oscar_fwd_default_params();
    fp.device = r->p->device, fp.n_threads = r->p->n_threads, fp.fp32 = r->p->gpu_fp32;
    r->dev_windows = DEVICE_BATCH_TOKENS / r->p->ctx;
    if (r->dev_windows < 1) r->dev_windows = 1;
    if (r->dev_windows > n_win) r->dev_windows = (int32_t) n_win;
    const int32_t batch = r->dev_windows * r->p->ctx;
    fp.max_tokens = batch > r->MT ? batch : r->MT;
    r->wo = malloc(sizeof(float) * (size_t) c->n_embd * (size_t) c->n_head * (size_t) c->head_dim);
    if (!r->wo) return osc_error(OSCAR_ERR_NOMEM, "verify: W_O buffer");
    enum oscar_status st = oscar_fwd_init(r->m, &fp, &r->dev_f);
    if (st == OSCAR_OK && r->i_ref >= 0) st = oscar_fwd_ref_init(r->dev_f, n_win * r->nr);
    return st;
}

// ---- driver ------------------------------------------------------------------------------------
enum oscar_status oscar_verify_check_tokens(const struct oscar_verify_params * p, size_t n_ids) {
    int64_t T = p->ctx > 0 ? p->ctx : 1, n_win = p->tokens / T > 1 ? p->tokens / T : 1;
    if ((size_t) p->metric_tokens > n_ids)
        return osc_error(OSCAR_ERR_INVALID, "the corpus has %zu tokens, fewer than the %d of --metric-tokens", n_ids,
                         p->metric_tokens);
    if (n_win * T <= (int64_t) n_ids) return OSCAR_OK;
    if (!p->tokens || n_win == 1)
        return osc_error(OSCAR_ERR_INVALID, "the corpus has %zu tokens, need at least one window of %d", n_ids, p->ctx);
    return osc_error(OSCAR_ERR_INVALID, "the corpus has %zu tokens, fewer than the %lld that --tokens %lld asks for "
                     "(%lld windows of %d)", n_ids, (long long) (n_win * T), (long long) p->tokens,
                     (long long) n_win, p->ctx);
}

static enum oscar_status check_params(const struct oscar_model * m, const struct oscar_artifact * art,
                                      size_t n_ids, const struct oscar_verify_params * p) {
    const struct oscar_model_config * c = &m->config;
    if (p->ctx < 2 || p->sink < 0 || p->recent < 0 || p->page < 1 || p->metric_tokens < 2 || p->tokens < 0 ||
        p->group_size < 0 || p->prompt < 0 || (p->prompt && p->prompt < p->sink) || p->prompt > p->ctx ||
        p->score_from < 0 || p->score_from >= p->ctx)
        return osc_error(OSCAR_ERR_INVALID, "verify: ctx %d sink %d recent %d page %d prompt %d metric_tokens %d "
                         "tokens %lld group_size %d score_from %d out of range (score_from must be < ctx)", p->ctx,
                         p->sink, p->recent, p->page, p->prompt, p->metric_tokens, (long long) p->tokens,
                         p->group_size, p->score_from);
    if ((size_t) p->ctx > n_ids)
        return osc_error(OSCAR_ERR_INVALID, "verify: the corpus has %zu tokens, need at least one window of %d",
                         n_ids, p->ctx);
    if (p->recall) {
        enum oscar_status st = osc_recall_check(p->recall, p->ctx, n_ids);
        if (st != OSCAR_OK) return st;
        for (int32_t k = 0; k < p->recall->n_probes; k++)
            if (p->recall->probes[k].n_answer > LOGIT_BLOCK)
                return osc_error(OSCAR_ERR_INVALID, "recall: probe %d: answer of %d tokens (at most %d)", k,
                                 p->recall->probes[k].n_answer, LOGIT_BLOCK);
    }
    if (art) return oscar_artifact_check_shape(art, c->n_layer, c->n_head, c->n_head_kv, c->head_dim, c->name);
    return OSCAR_OK;
}

enum oscar_status oscar_verify_run(const struct oscar_model * m, const struct oscar_artifact * art,
                                   const int32_t * ids, size_t n_ids, const struct oscar_verify_params * p,
                                   struct oscar_verify_report * rep) {
    double t0 = osc_now();
    memset(rep, 0, sizeof *rep);
    struct vrun r = {.m = m, .p = p, .L = m->config.n_layer, .C = m->config.n_embd, .i_ref = -1};
    enum oscar_status st = check_params(m, art, n_ids, p);
    if (st != OSCAR_OK) return st;
    int32_t T = p->ctx;
    if ((st = oscar_verify_check_tokens(p, n_ids)) != OSCAR_OK) return st;
    int64_t n_win = (p->tokens ? p->tokens : T) / T;
    if (n_win < 1) n_win = 1;
    r.MT = p->metric_tokens; // <= n_ids (oscar_verify_check_tokens)
    if (r.MT <= p->sink + p->recent)
        osc_warn("verify: metric_tokens %d <= sink %d + recent %d: nothing is INT2 in the metrics pass, the "
                 "per-layer metrics and drift only show the bf16 rounding", r.MT, p->sink, p->recent);
    st = setup_methods(&r, art, T > r.MT ? T : r.MT);
    if (st == OSCAR_OK) st = ref_setup(&r, n_win);
    // the device pass first: the host's peak is then the upload's one [V, C] block, not that plus these
    if (st == OSCAR_OK && on_device(&r)) st = device_open(&r, n_win);
    size_t nres = (size_t) r.L * (size_t) r.MT * (size_t) r.C;
    if (st == OSCAR_OK) {
        r.resid_ref = malloc(sizeof(float) * nres);
        r.resid_cur = malloc(sizeof(float) * nres);
        r.logits = malloc(sizeof(float) * LOGIT_BLOCK * (size_t) m->config.n_vocab);
        if (!r.resid_ref || !r.resid_cur || !r.logits) st = osc_error(OSCAR_ERR_NOMEM, "verify: buffers");
    }
    if (st == OSCAR_OK) st = metrics_pass(&r, ids);
    if (st == OSCAR_OK) {
        // bf16 first: every other method's rows are compared with what it leaves behind. Each
        // method's numbers depend only on its own pass, so the order changes no existing number.
        int32_t order[OSCAR_VERIFY_MAX_METHODS], k = 0;
        if (r.i_ref >= 0) order[k++] = r.i_ref;
        for (int32_t i = 0; i < r.nm; i++)
            if (i != r.i_ref) order[k++] = i;
        struct osc_progress pg;
        osc_progress_init(&pg, "perplexity", "tokens", n_win * T * r.nm);
        for (k = 0; k < r.nm && st == OSCAR_OK; k++) st = ppl_method(&r, order[k], k, ids, n_win, &pg);
        osc_progress_finish(&pg);
        // after the perplexity: the quantizer statistics above stay those of the windows alone
        if (st == OSCAR_OK && p->recall) {
            osc_progress_init(&pg, "recall", "probes", (int64_t) r.nm * p->recall->n_probes);
            for (k = 0; k < r.nm && st == OSCAR_OK; k++) st = recall_method(&r, order[k], k, ids, &pg);
            osc_progress_finish(&pg);
        }
    }
    *rep = (struct oscar_verify_report){
        .n_layer = r.L, .ctx = T, .sink = p->sink, .recent = p->recent, .n_flush = p->page,
        .group_size = p->group_size ? p->group_size : m->config.head_dim, .n_windows = (int32_t) n_win,
        .metric_tokens = r.MT, .prompt = p->prompt ? p->prompt : p->sink, .n_tokens = (int64_t) n_ids, .n_methods = r.nm, .methods = r.ms,
        .score_from = p->score_from, .n_recall = p->recall ? p->recall->n_probes : 0};
    for (int32_t k = 0; k < rep->n_recall; k++) {
        rep->recall_pos[k] = r.recall_pos[k], rep->recall_depth[k] = p->recall->probes[k].depth;
        rep->recall_len[k] = p->recall->probes[k].n_answer;
    }
    snprintf(rep->model_name, sizeof rep->model_name, "%s", m->config.name);
    snprintf(rep->scale_dtype, sizeof rep->scale_dtype, "%s",
             p->scale_dtype == OSCAR_META_F16 ? "float16" : p->scale_dtype == OSCAR_META_BF16 ? "bfloat16" : "float32");
    for (int32_t i = 0; i < OSCAR_VERIFY_MAX_METHODS; i++) {
        oscar_kv_sim_free(r.sims[i]);
        oscar_kv_fwd_sim_free(&r.fsims[i]);
    }
    oscar_fwd_free(r.dev_f);
    free(r.wo);
    free(r.resid_ref);
    free(r.resid_cur);
    free(r.logits);
    free(r.ref_logits);
    free(r.ref_hidden);
    free(r.ref_block);
    free(r.refs);
    rep->wall_seconds = osc_now() - t0;
    if (st != OSCAR_OK) oscar_verify_report_free(rep);
    return st;
}

void oscar_verify_report_free(struct oscar_verify_report * rep) {
    if (!rep) return;
    for (int32_t i = 0; rep->methods && i < rep->n_methods; i++) {
        free(rep->methods[i].layers);
        free(rep->methods[i].drift);
    }
    free(rep->methods);
    rep->methods = NULL;
    rep->n_methods = 0;
}

// ---- outputs ---------------------------------------------------------------------------------
static const char * const report_files[] = {"report.json", "layers.svg", "summary.md", NULL};

enum oscar_status oscar_verify_check_report_dir(const char * dir) {
    return osc_dir_check_dest(dir, "an oscar-verify report", report_files);
}

// The three files go into a staging directory that replaces dir whole (util/fs.h).
enum oscar_status oscar_verify_write_dir(const struct oscar_verify_report * rep, const char * dir) {
    char p[4096];
    char * md = NULL;
    struct osc_dir_stage sd;
    enum oscar_status st = osc_dir_stage_open(&sd, dir, "an oscar-verify report", report_files);
    if (st != OSCAR_OK) return st;
    if (snprintf(p, sizeof p, "%s/report.json", sd.tmp) >= (int) sizeof p)
        st = osc_error(OSCAR_ERR_INVALID, "%s: path too long", dir);
    if (st == OSCAR_OK) st = oscar_verify_write_json(rep, p);
    snprintf(p, sizeof p, "%s/layers.svg", sd.tmp);
    if (st == OSCAR_OK) st = oscar_verify_write_svg(rep, p);
    snprintf(p, sizeof p, "%s/summary.md", sd.tmp);
    if (st == OSCAR_OK) st = oscar_verify_markdown(rep, &md);
    if (st == OSCAR_OK) st = osc_write_file_atomic(p, md, strlen(md));
    free(md);
    if (st != OSCAR_OK) {
        osc_dir_stage_abort(&sd);
        return st;
    }
    return osc_dir_stage_commit(&sd);
}

// The next-token block: each method's output distribution against bf16's on the scored positions.
static void print_token_table(const struct oscar_verify_report * rep, FILE * f) {
    int32_t n_ref = 0;
    for (int32_t i = 0; i < rep->n_methods; i++) n_ref += rep->methods[i].tok.has_ref;
    if (!n_ref) {
        fprintf(f, "next-token KL: not computed (bf16 is not among the methods)\n");
        return;
    }
    fprintf(f, "\nnext token vs bf16, %lld positions per method (targets %d..%d of each window):\n",
            (long long) rep->methods[0].n_scored, rep->score_from > 1 ? rep->score_from : 1, rep->ctx - 1);
    fprintf(f, "%-12s %21s %10s %10s %10s %10s %10s %16s %16s %18s\n", "method", "KL mean +/- se", "median", "p90",
            "p95", "p99", "max", "same top1 %", "RMS dp %", "dppl +/- se");
    for (int32_t i = 0; i < rep->n_methods; i++) {
        const struct oscar_token_stats * t = &rep->methods[i].tok;
        if (!t->has_ref) continue;
        fprintf(f, "%-12s %10.3e+/-%8.1e %10.3e %10.3e %10.3e %10.3e %10.3e %7.3f+/-%6.3f %7.3f+/-%6.3f %+9.4f+/-%7.4f\n",
                rep->methods[i].name, t->kl_mean, t->kl_stderr, t->kl_median, t->kl_p90, t->kl_p95, t->kl_p99,
                t->kl_max, 100 * t->same_top1, 100 * t->same_top1_stderr, 100 * t->dp_rms, 100 * t->dp_rms_stderr,
                t->dppl, t->dppl_stderr);
    }
}

// One line per method: exact retrieval (1/0) per probe depth.
static void print_recall(const struct oscar_verify_report * rep, FILE * f) {
    if (!rep->n_recall) return;
    fprintf(f, "\nverbatim recall (%d-token passcode, greedy, exact = 1) at depth:", rep->recall_len[0]);
    for (int32_t k = 0; k < rep->n_recall; k++) fprintf(f, " %.2f", rep->recall_depth[k]);
    fprintf(f, "\n");
    for (int32_t i = 0; i < rep->n_methods; i++) {
        int32_t n = 0;
        fprintf(f, "%-12s", rep->methods[i].name);
        for (int32_t k = 0; k < rep->n_recall; k++) {
            bool e = rep->methods[i].recall_right[k] == rep->recall_len[k];
            n += e;
            fprintf(f, " %4d", e);
        }
        fprintf(f, "   %d/%d\n", n, rep->n_recall);
    }
}

void oscar_verify_print_table(const struct oscar_verify_report * rep, FILE * f) {
    double base = rep->n_methods ? rep->methods[0].ppl : 0, t_bf16 = 0;
    for (int32_t i = 0; i < rep->n_methods; i++)
        if (!strcmp(rep->methods[i].name, "bf16")) base = rep->methods[i].ppl, t_bf16 = rep->methods[i].seconds;
    fprintf(f, "%-12s %6s %9s %8s %9s %10s %10s %10s %10s %10s %8s %6s\n", "method", "BPE", "ppl", "+/-", "dppl",
            "K relMSE", "V relMSE", "KL", "postWO", "drift", "sec", "cost");
    for (int32_t i = 0; i < rep->n_methods; i++) {
        const struct oscar_verify_method * m = &rep->methods[i];
        struct oscar_layer_metrics a = {0};
        for (int32_t l = 0; l < rep->n_layer; l++) oscar_layer_metrics_add(&a, &m->layers[l]);
        fprintf(f, "%-12s %6.3f %9.4f %8.4f %+9.4f %10.3e %10.3e %10.3e %10.3e %10.3e %8.1f %5.2fx\n", m->name,
                m->bpe, m->ppl, m->tok.ppl_stderr, m->ppl - base, a.k_rel_mse, a.v_rel_mse, a.kl, a.out_rel,
                rep->n_layer ? m->drift[rep->n_layer - 1] : 0.0, m->seconds, t_bf16 > 0 ? m->seconds / t_bf16 : 0.0);
    }
    fprintf(f, "%d window(s) x %d tokens of %s; sink %d recent %d page %d prompt %d group %d %s; metrics on %d "
            "tokens; wall %.1f s\n", rep->n_windows, rep->ctx, rep->corpus, rep->sink, rep->recent, rep->n_flush,
            rep->prompt, rep->group_size, rep->scale_dtype, rep->metric_tokens, rep->wall_seconds);
    print_token_table(rep, f);
    print_recall(rep, f);
}
