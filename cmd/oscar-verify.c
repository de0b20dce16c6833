// oscar-verify.c - what an artifact does to attention and to perplexity,
// against every baseline (method.md §16). Thin CLI over lib/verify.
//
// Per run: (1) per-layer metrics and hidden drift on the first --metric-tokens
// tokens of the corpus (one sequence, decode tiering); (2) perplexity over
// --tokens tokens in non-overlapping windows of --ctx tokens (HF stride = ctx
// convention: targets 1..ctx-1 of each window), every method in the same
// process, quantized methods through the simulated serving cache.
// Exit codes: 0 ok, 1 runtime failure, 2 bad usage / input.
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/oscar-artifact.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "verify/metrics.h"
#include "verify/report.h"

struct opts {
    const char * model, * rotations, * corpus, * methods, * report_dir, * scale_dtype;
    int32_t ctx, sink, recent, group_size, threads, metric_tokens, flush;
    int64_t tokens;
    bool json, quiet, update_card;
};

static void usage(FILE * f) {
    fprintf(f, "usage: oscar-verify --model M.gguf --corpus TEXT [--rotations ARTIFACT_DIR] [--ctx 2048]\n"
               "  [--sink 32] [--recent 128] [--page 8] [--group-size 0(=D)] [--scale-dtype float32|float16|bfloat16]\n"
               "  [--methods bf16,naive,hadamard,oscar] [--tokens N (default ctx)] [--metric-tokens 512]\n"
               "  [--report DIR] [--threads N] [--json] [--quiet] [--update-card]\n"
               "methods: bf16 naive hadamard oscar oscar-searched oscar-lm int4-bdh kivi\n");
}

static int parse(int argc, char ** argv, struct opts * o) {
    *o = (struct opts){.methods = "bf16,naive,hadamard,oscar", .scale_dtype = "float32", .ctx = 2048, .sink = 32,
                       .recent = 128, .metric_tokens = 512, .flush = 8};
    for (int i = 1; i < argc; i++) {
        const char * a = argv[i], * v = i + 1 < argc ? argv[i + 1] : NULL;
#define STR(flag, field) if (!strcmp(a, flag) && v) { o->field = v; i++; continue; }
#define INT(flag, field) if (!strcmp(a, flag) && v) { o->field = atoi(v); i++; continue; }
        STR("--model", model) STR("--rotations", rotations) STR("--corpus", corpus) STR("--methods", methods)
        STR("--report", report_dir) STR("--scale-dtype", scale_dtype) INT("--ctx", ctx) INT("--sink", sink)
        INT("--recent", recent) INT("--group-size", group_size) INT("--threads", threads)
        INT("--metric-tokens", metric_tokens) INT("--page", flush)
        if (!strcmp(a, "--tokens") && v) { o->tokens = atoll(v); i++; continue; }
        if (!strcmp(a, "--json")) { o->json = true; continue; }
        if (!strcmp(a, "--quiet")) { o->quiet = true; continue; }
        if (!strcmp(a, "--update-card")) { o->update_card = true; continue; }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); exit(0); }
        fprintf(stderr, "oscar-verify: unknown or incomplete option '%s'\n", a);
        return 2;
    }
    if (!o->model || !o->corpus || o->ctx < 2 || o->sink < 0 || o->recent < 0 || o->flush < 1 || o->metric_tokens < 2) {
        usage(stderr);
        return 2;
    }
    if (o->update_card && !o->rotations) {
        fprintf(stderr, "oscar-verify: --update-card needs --rotations\n");
        return 2;
    }
    if (o->tokens <= 0) o->tokens = o->ctx;
    return 0;
}

// ---- hidden-state capture -------------------------------------------------------------
struct resid_cap {
    float * ref;      // [L, T, C] reference residual stream, or NULL when filling
    float * cur;      // [L, T, C] being captured
    int32_t C;
};
static enum oscar_status cap_layer(void * user, const struct oscar_capture_layer * c) {
    struct resid_cap * r = user;
    size_t n = (size_t) c->n_tokens * r->C;
    memcpy(r->cur + (size_t) c->layer * n, c->resid_out, sizeof(float) * n);
    return OSCAR_OK;
}

// Metrics hook (reference pass): per-layer metrics of every method.
struct metric_cap {
    struct oscar_kv_transform * tfs;
    struct oscar_verify_method * ms;
    int32_t n, threads;
};
static enum oscar_status metric_layer(void * user, const struct oscar_capture_layer * c) {
    struct metric_cap * mc = user;
    struct oscar_layer_input in = {.layer = c->layer, .n_tokens = c->n_tokens, .n_seq = c->n_seq,
                                   .seq_start = c->seq_start, .q = c->q, .k = c->k, .v = c->v, .wo = c->wo,
                                   .n_head = c->config->n_head, .n_head_kv = c->config->n_head_kv,
                                   .head_dim = c->config->head_dim, .n_embd = c->config->n_embd};
    for (int32_t i = 0; i < mc->n; i++) {
        enum oscar_status st = oscar_verify_layer_metrics(&mc->tfs[i], &in, mc->threads, &mc->ms[i].layers[c->layer]);
        if (st != OSCAR_OK) return st;
    }
    return OSCAR_OK;
}

// NLL of targets 1..T-1 from the final hidden states, in blocks of rows.
static double window_nll(const struct oscar_model * m, const float * hidden, const int32_t * tok, int32_t T,
                         float * logits, int32_t blk) {
    int32_t C = m->config.n_embd, V = m->config.n_vocab;
    double nll = 0;
    for (int32_t r0 = 0; r0 < T - 1; r0 += blk) {
        int32_t nb = T - 1 - r0 < blk ? T - 1 - r0 : blk;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, V, C, 1.0f, hidden + (size_t) r0 * C, C, m->output,
                    C, 0.0f, logits, V);
        for (int32_t i = 0; i < nb; i++) {
            const float * lg = logits + (size_t) i * V;
            double mx = -INFINITY, z = 0;
            for (int32_t j = 0; j < V; j++) mx = fmax(mx, (double) lg[j]);
            for (int32_t j = 0; j < V; j++) z += exp((double) lg[j] - mx);
            nll += mx + log(z) - (double) lg[tok[r0 + i + 1]];
        }
    }
    return nll;
}

static enum oscar_status parse_dtype(const char * s, enum oscar_quant_meta_dtype * d) {
    if (!strcmp(s, "float32")) *d = OSCAR_META_F32;
    else if (!strcmp(s, "float16")) *d = OSCAR_META_F16;
    else if (!strcmp(s, "bfloat16")) *d = OSCAR_META_BF16;
    else return osc_error(OSCAR_ERR_INVALID, "--scale-dtype '%s': float32, float16 or bfloat16", s);
    return OSCAR_OK;
}

static int run(const struct opts * o) {
    double t0 = osc_now();
    struct oscar_model * m = NULL;
    struct oscar_tokenizer * tok = NULL;
    struct oscar_artifact * art = NULL;
    struct oscar_forward * f = NULL;
    char * text = NULL, * md = NULL;
    int32_t * ids = NULL;
    size_t n_ids = 0, text_len = 0;
    struct oscar_kv_transform tfs[16];
    struct oscar_verify_method ms[16];
    struct oscar_kv_sim * sims[16] = {0};
    float * resid_ref = NULL, * resid_cur = NULL, * logits = NULL;
    int32_t nm = 0, rc = 1;
    memset(ms, 0, sizeof ms);
    enum oscar_quant_meta_dtype md_t = OSCAR_META_F32;
    enum oscar_status st = parse_dtype(o->scale_dtype, &md_t);
    if (st == OSCAR_OK) st = oscar_model_load(o->model, &m);
    if (st == OSCAR_OK) st = oscar_tokenizer_load(o->model, &tok);
    if (st == OSCAR_OK) st = osc_read_file(o->corpus, (size_t) 1 << 30, &text, &text_len);
    if (st == OSCAR_OK) st = oscar_tokenizer_encode(tok, text, text_len, false, &ids, &n_ids);
    if (st == OSCAR_OK && o->rotations) st = oscar_artifact_read(o->rotations, true, &art);
    const struct oscar_model_config * c = m ? &m->config : NULL;
    if (st == OSCAR_OK && art)
        st = oscar_artifact_check_shape(art, c->n_layer, c->n_head, c->n_head_kv, c->head_dim, c->name);
    if (st != OSCAR_OK) {
        rc = 2;
        goto out;
    }
    int32_t L = c->n_layer, C = c->n_embd, T = o->ctx;
    int64_t n_win = o->tokens / T;
    if (n_win < 1 || (int64_t) n_ids < (int64_t) T) {
        st = osc_error(OSCAR_ERR_INVALID, "%s: %zu tokens, need at least one window of %d", o->corpus, n_ids, T);
        rc = 2;
        goto out;
    }
    if (n_win * T > (int64_t) n_ids) n_win = (int64_t) n_ids / T;
    int32_t MT = o->metric_tokens < (int32_t) n_ids ? o->metric_tokens : (int32_t) n_ids;
    struct oscar_tiering tr = {.mode = OSCAR_TIERS_DECODE, .n_sink = o->sink, .n_recent = o->recent,
                               .n_flush = o->flush, .prompt_len = o->sink, .block = 1};
    // methods
    char list[512];
    snprintf(list, sizeof list, "%s", o->methods);
    for (char * sp = NULL, * name = strtok_r(list, ",", &sp); name; name = strtok_r(NULL, ",", &sp)) {
        if (nm == 16) break;
        st = oscar_kv_transform_preset(name, L, c->n_head_kv, c->head_dim, o->group_size, md_t, &tr,
                                       art ? art->per_head : false, art ? art->k_rotation : NULL,
                                       art ? art->v_rotation : NULL, art ? art->clip_per_head : false,
                                       art ? art->k_clip : NULL, art ? art->v_clip : NULL, &tfs[nm]);
        if (st != OSCAR_OK) {
            rc = 2;
            goto out;
        }
        snprintf(ms[nm].name, sizeof ms[nm].name, "%s", name);
        ms[nm].bpe = oscar_kv_transform_bpe(&tfs[nm], T);
        ms[nm].layers = calloc((size_t) L, sizeof *ms[nm].layers);
        ms[nm].drift = calloc((size_t) L, sizeof(double));
        if (!ms[nm].layers || !ms[nm].drift) {
            st = osc_error(OSCAR_ERR_NOMEM, "method tables");
            goto out;
        }
        nm++;
    }
    int32_t maxT = T > MT ? T : MT;
    for (int32_t i = 0; i < nm && st == OSCAR_OK; i++)
        if (tfs[i].quant != OSCAR_KVQ_IDENTITY) st = oscar_kv_sim_init(&tfs[i], c, maxT, o->threads, &sims[i]);
    resid_ref = malloc(sizeof(float) * (size_t) L * MT * C);
    resid_cur = malloc(sizeof(float) * (size_t) L * MT * C);
    logits = malloc(sizeof(float) * 64 * (size_t) c->n_vocab);
    if (st == OSCAR_OK && (!resid_ref || !resid_cur || !logits)) st = osc_error(OSCAR_ERR_NOMEM, "buffers");
    if (st != OSCAR_OK) goto out;

    // (1) metrics + hidden drift on the first MT tokens
    struct metric_cap mcap = {.tfs = tfs, .ms = ms, .n = nm, .threads = o->threads};
    struct resid_cap rcap = {.cur = resid_ref, .C = C};
    int32_t ss_m[2] = {0, MT};
    struct oscar_batch bm = {.n_seq = 1, .seq_start = ss_m, .tokens = ids, .pos = NULL};
    struct osc_progress pg;
    osc_progress_init(&pg, "metrics", "methods", nm);
    for (int32_t i = -1; i < nm && st == OSCAR_OK; i++) {
        // i = -1: reference pass with the metric hook; then one pass per method for the drift
        struct oscar_capture_hook hk_m = {.on_layer = metric_layer, .user = &mcap};
        struct oscar_capture_hook hk_r = {.on_layer = cap_layer, .user = &rcap};
        struct oscar_attention_override ov = sims[i < 0 ? 0 : i] && i >= 0 ? oscar_kv_sim_override(sims[i])
                                                                          : (struct oscar_attention_override){0};
        struct oscar_forward_params fp = oscar_forward_default_params();
        fp.n_threads = o->threads, fp.max_tokens = MT;
        fp.hook = i < 0 ? &hk_m : &hk_r;
        fp.attention = (i >= 0 && sims[i]) ? &ov : NULL;
        rcap.cur = i < 0 ? resid_ref : resid_cur;
        st = oscar_forward_init(m, &fp, &f);
        if (st == OSCAR_OK && i < 0) {
            // the reference pass also records the reference residual stream
            struct oscar_forward * f2 = NULL;
            struct oscar_forward_params fp2 = fp;
            fp2.hook = &hk_r;
            st = oscar_forward_run(f, &bm, NULL);
            if (st == OSCAR_OK) st = oscar_forward_init(m, &fp2, &f2);
            if (st == OSCAR_OK) st = oscar_forward_run(f2, &bm, NULL);
            oscar_forward_free(f2);
        } else if (st == OSCAR_OK) {
            st = oscar_forward_run(f, &bm, NULL);
            for (int32_t l = 0; l < L && st == OSCAR_OK; l++) {
                double num = 0, den = 0;
                size_t n = (size_t) MT * C, off = (size_t) l * n;
                for (size_t j = 0; j < n; j++) {
                    double d = (double) resid_cur[off + j] - (double) resid_ref[off + j];
                    num += d * d, den += (double) resid_ref[off + j] * (double) resid_ref[off + j];
                }
                ms[i].drift[l] = den > 0 ? num / den : 0;
            }
            osc_progress_update(&pg, i + 1);
        }
        oscar_forward_free(f);
        f = NULL;
    }
    osc_progress_finish(&pg);
    if (st != OSCAR_OK) goto out;

    // (2) perplexity, all methods, same windows
    osc_progress_init(&pg, "perplexity", "tokens", n_win * T * nm);
    for (int32_t i = 0; i < nm && st == OSCAR_OK; i++) {
        struct oscar_attention_override ov = sims[i] ? oscar_kv_sim_override(sims[i])
                                                     : (struct oscar_attention_override){0};
        struct oscar_forward_params fp = oscar_forward_default_params();
        fp.n_threads = o->threads, fp.max_tokens = T, fp.attention = sims[i] ? &ov : NULL;
        st = oscar_forward_init(m, &fp, &f);
        double ts = osc_now();
        for (int64_t w = 0; w < n_win && st == OSCAR_OK; w++) {
            int32_t ss[2] = {0, T};
            struct oscar_batch b = {.n_seq = 1, .seq_start = ss, .tokens = ids + w * T, .pos = NULL};
            st = oscar_forward_run(f, &b, NULL);
            int32_t th = 0;
            const float * hid = st == OSCAR_OK ? oscar_forward_hidden(f, &th) : NULL;
            if (hid) {
                ms[i].nll_sum += window_nll(m, hid, ids + w * T, T, logits, 64);
                ms[i].n_scored += T - 1;
            }
            osc_progress_update(&pg, (int64_t) i * n_win * T + (w + 1) * T);
        }
        ms[i].seconds = osc_now() - ts;
        ms[i].ppl = ms[i].n_scored ? exp(ms[i].nll_sum / (double) ms[i].n_scored) : 0;
        if (sims[i]) oscar_kv_sim_stats(sims[i], &ms[i].k_stats, &ms[i].v_stats);
        oscar_forward_free(f);
        f = NULL;
    }
    osc_progress_finish(&pg);
    if (st != OSCAR_OK) goto out;

    struct oscar_verify_report rep = {.n_layer = L, .ctx = T, .sink = o->sink, .recent = o->recent,
                                      .n_flush = o->flush, .group_size = o->group_size ? o->group_size : c->head_dim,
                                      .n_windows = (int32_t) n_win, .metric_tokens = MT, .n_tokens = (int64_t) n_ids,
                                      .n_methods = nm, .methods = ms};
    snprintf(rep.model, sizeof rep.model, "%s", o->model);
    snprintf(rep.model_name, sizeof rep.model_name, "%s", c->name);
    snprintf(rep.rotations, sizeof rep.rotations, "%s", o->rotations ? o->rotations : "");
    const char * base = strrchr(o->corpus, '/');
    snprintf(rep.corpus, sizeof rep.corpus, "%s", base ? base + 1 : o->corpus);
    snprintf(rep.scale_dtype, sizeof rep.scale_dtype, "%s", o->scale_dtype);
    rep.wall_seconds = osc_now() - t0;
    st = oscar_verify_markdown(&rep, &md);
    if (st != OSCAR_OK) goto out;
    if (o->report_dir) {
        char p[1024];
        st = osc_mkdirs(o->report_dir);
        snprintf(p, sizeof p, "%s/report.json", o->report_dir);
        if (st == OSCAR_OK) st = oscar_verify_write_json(&rep, p);
        snprintf(p, sizeof p, "%s/layers.svg", o->report_dir);
        if (st == OSCAR_OK) st = oscar_verify_write_svg(&rep, p);
        snprintf(p, sizeof p, "%s/summary.md", o->report_dir);
        if (st == OSCAR_OK) st = osc_write_file_atomic(p, md, strlen(md));
    }
    if (st == OSCAR_OK && o->update_card) {
        char p[1024];
        snprintf(p, sizeof p, "%s/README.md", o->rotations);
        st = oscar_verify_update_card(p, md);
    }
    if (st != OSCAR_OK) goto out;
    if (o->json) {
        char p[] = "/tmp/oscar-verify-XXXXXX";
        int fd = mkstemp(p);
        if (fd >= 0) {
            fclose(fdopen(fd, "w"));
            st = oscar_verify_write_json(&rep, p);
            char * j = NULL;
            size_t jn = 0;
            if (st == OSCAR_OK) st = osc_read_file(p, (size_t) 1 << 28, &j, &jn);
            if (j) fputs(j, stdout);
            free(j);
            remove(p);
        }
    } else if (!o->quiet) {
        printf("%-15s %7s %10s %10s %11s %11s %11s %11s\n", "method", "BPE", "ppl", "sec", "K relMSE", "V relMSE",
               "KL", "postWO");
        for (int32_t i = 0; i < nm; i++) {
            struct oscar_layer_metrics a = {0};
            for (int32_t l = 0; l < L; l++) oscar_layer_metrics_add(&a, &ms[i].layers[l]);
            printf("%-15s %7.3f %10.4f %10.1f %11.3e %11.3e %11.3e %11.3e\n", ms[i].name, ms[i].bpe, ms[i].ppl,
                   ms[i].seconds, a.k_rel_mse, a.v_rel_mse, a.kl, a.out_rel);
        }
        printf("wall %.1f s; %lld window(s) x %d tokens; sink %d recent %d page %d\n", rep.wall_seconds,
               (long long) n_win, T, o->sink, o->recent, o->flush);
    }
    rc = st == OSCAR_OK ? 0 : 1;
out:
    if (st != OSCAR_OK) fprintf(stderr, "oscar-verify: %s\n", oscar_last_error());
    for (int32_t i = 0; i < 16; i++) {
        oscar_kv_sim_free(sims[i]);
        free(ms[i].layers);
        free(ms[i].drift);
    }
    oscar_forward_free(f);
    oscar_artifact_free(art);
    oscar_tokenizer_free(tok);
    oscar_model_free(m);
    free(text);
    free(ids);
    free(md);
    free(resid_ref);
    free(resid_cur);
    free(logits);
    return rc;
}

int main(int argc, char ** argv) {
    struct opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    if (o.quiet || o.json) oscar_log_set_level(OSCAR_LOG_ERROR);
    return run(&o);
}
