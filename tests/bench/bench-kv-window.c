// bench-kv-window.c - quantized-cache perplexity of one window on the CPU: the
// one-pass closed form oscar-verify runs (oscar_kv_sim) against the serving
// cache advanced token by token (kv-decode.h: inside one forward, and as a
// server runs it, one forward per token), per method, in one process, with
// the bf16 one-pass window as the baseline. Also prints the largest
// log-likelihood difference between the paths: 0 for decode-in-one-forward
// by construction, and exits 1 otherwise. For one forward per token the
// GEMMs round differently and quantizer codes flip (BENCHMARKS.md).
//
//   bench-kv-window MODEL.gguf CORPUS.txt [--ctx N] [--sink N] [--recent N] [--page N] [-t THREADS]
//                   [--no-steps]   (skip the one-forward-per-token path, O(ctx) forwards)
//                   [--methods LIST]  (a comma list of the methods below; default all)
//                   [--one-pass]  (time the one pass alone: no token-by-token path, no equality check)
//   bench-kv-window --random L [options]   (instead of MODEL and CORPUS: SmolLM2-135M's widths, C 576,
//                   9/3 heads of 64, FF 1536, with L layers, a 4096-token vocabulary, random weights and
//                   tokens, n_ctx_train = ctx: long contexts at a cost a CPU can time)
//
// "oscar" uses identity rotations with the reference clips: the cost of a
// rotated ASYM INT2 cache, not a calibrated artifact's accuracy.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate/calibrate.h"
#include "calibrate/random-source.h"
#include "util/cli.h"
#include "util/log.h"
#include "verify/kv-decode.h"

static const char * const methods[] = {"bf16", "naive", "hadamard", "oscar", "int4-bdh", "kivi"};
enum { N_METHODS = sizeof methods / sizeof methods[0] };

struct opts {
    const char * model, * corpus, * methods;
    int32_t ctx, sink, recent, page, n_threads, random_layers;
    bool steps, oracle;
};

static int parse(int argc, char ** argv, struct opts * o) {
    *o = (struct opts){.ctx = 512, .sink = 32, .recent = 128, .page = 64, .steps = true, .oracle = true};
    for (int i = 1; i < argc; i++) {
        enum oscar_status st = OSCAR_OK;
        const char * a = argv[i];
        if (!strcmp(a, "--ctx") && i + 1 < argc) st = osc_parse_i32(a, argv[++i], 2, 1 << 16, &o->ctx);
        else if (!strcmp(a, "--sink") && i + 1 < argc) st = osc_parse_i32(a, argv[++i], 0, 1 << 16, &o->sink);
        else if (!strcmp(a, "--recent") && i + 1 < argc) st = osc_parse_i32(a, argv[++i], 0, 1 << 16, &o->recent);
        else if (!strcmp(a, "--page") && i + 1 < argc) st = osc_parse_i32(a, argv[++i], 1, 1 << 16, &o->page);
        else if (!strcmp(a, "-t") && i + 1 < argc) st = osc_parse_threads(a, argv[++i], &o->n_threads);
        else if (!strcmp(a, "--no-steps")) o->steps = false;
        else if (!strcmp(a, "--one-pass")) o->steps = o->oracle = false;
        else if (!strcmp(a, "--methods") && i + 1 < argc) o->methods = argv[++i];
        else if (!strcmp(a, "--random") && i + 1 < argc) st = osc_parse_i32(a, argv[++i], 1, 64, &o->random_layers);
        else if (!o->model) o->model = a;
        else if (!o->corpus) o->corpus = a;
        else st = osc_error(OSCAR_ERR_INVALID, "unexpected argument '%s'", a);
        if (st != OSCAR_OK) return fprintf(stderr, "bench-kv-window: %s\n", oscar_last_error()), 2;
    }
    // --random replaces MODEL and CORPUS: a stray word beside it is refused, not read as a path
    if (o->random_layers ? o->model || o->corpus : !o->model || !o->corpus) {
        fprintf(stderr, "usage: bench-kv-window MODEL CORPUS | --random L  [--ctx N] [--sink N] [--recent N] "
                        "[--page N] [-t THREADS] [--no-steps] [--one-pass] [--methods LIST]\n");
        return 2;
    }
    return 0;
}

// Is method k in the --methods list (NULL: all)? Unknown names are refused in main.
static bool wanted(const char * list, const char * name) {
    if (!list) return true;
    const size_t n = strlen(name);
    for (const char * p = list; *p;) {
        const char * e = strchr(p, ',');
        const size_t len = e ? (size_t) (e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return true;
        p += len + (e != NULL);
    }
    return false;
}

// Every name of the list known, none twice (each known name matches at most one item).
static int check_methods(const char * list) {
    int n = 0;
    for (int k = 0; k < N_METHODS; k++) n += wanted(list, methods[k]);
    int items = 0;
    for (const char * p = list; p && *p; p++) items += *p == ',';
    if (list && n != items + 1) {
        fprintf(stderr, "bench-kv-window: --methods %s: a name is unknown or repeated (bf16, naive, hadamard, oscar, "
                        "int4-bdh, kivi)\n", list);
        return 2;
    }
    return 0;
}

// The --random model: SmolLM2-135M's widths with L layers and a small vocabulary, and ctx tokens.
static enum oscar_status random_model(int32_t L, int32_t ctx, struct oscar_model ** m, struct oscar_calib_corpus * cp) {
    struct oscar_model_config c = {.arch = OSCAR_ARCH_LLAMA, .n_layer = L, .n_embd = 576, .n_head = 9, .n_head_kv = 3,
                                   .head_dim = 64, .n_ff = 1536, .n_vocab = 4096, .n_ctx_train = ctx,
                                   .rope_theta = 1e5f, .rms_eps = 1e-5f};
    snprintf(c.name, sizeof c.name, "random-smollm2-widths-l%d", L);
    enum oscar_status st = oscar_model_init_random(&c, 1, m);
    if (st == OSCAR_OK) st = oscar_calib_synthetic_corpus(ctx, c.n_vocab, 7, cp);
    return st;
}

static double max_diff(const double * a, const double * b, int32_t n) {
    double w = 0;
    for (int32_t i = 0; i < n; i++) w = fmax(w, fabs(a[i] - b[i]));
    return w;
}

// Tokens whose log-likelihoods differ by more than tol.
static int32_t n_differ(const double * a, const double * b, int32_t n, double tol) {
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) k += fabs(a[i] - b[i]) > tol;
    return k;
}

// Seconds of one window on path, log-likelihoods into ll.
static double timed(const struct oscar_model * m, const struct oscar_kv_transform * tf, enum oscar_kv_path path,
                    const int32_t * tok, int32_t n, int32_t threads, double * ll) {
    double t0 = osc_now();
    if (oscar_kv_window_loglik(m, tf, path, tok, n, threads, ll) != OSCAR_OK) {
        fprintf(stderr, "bench-kv-window: %s\n", oscar_last_error());
        exit(1);
    }
    return osc_now() - t0;
}

int main(int argc, char ** argv) {
    struct opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    oscar_log_set_level(OSCAR_LOG_ERROR);
    struct oscar_model * m = NULL;
    struct oscar_tokenizer * tok = NULL;
    struct oscar_calib_corpus cp = {0};
    if (check_methods(o.methods)) return 2;
    if (o.random_layers ? random_model(o.random_layers, o.ctx, &m, &cp) != OSCAR_OK
                        : oscar_model_load(o.model, &m) || oscar_tokenizer_load(o.model, &tok) ||
                              oscar_calib_corpus_load(tok, o.corpus, NULL, o.ctx, &cp)) {
        fprintf(stderr, "bench-kv-window: %s\n", oscar_last_error());
        return 1;
    }
    if (cp.n < (int64_t) o.ctx) return fprintf(stderr, "bench-kv-window: %s has %lld tokens\n", o.corpus,
                                               (long long) cp.n), 1;
    if (o.ctx > m->config.n_ctx_train)
        return fprintf(stderr, "bench-kv-window: --ctx %d beyond the model's %d\n", o.ctx, m->config.n_ctx_train), 2;
    const struct oscar_model_config * c = &m->config;
    const size_t L = (size_t) c->n_layer, D = (size_t) c->head_dim;
    float * eye = calloc(L * D * D, sizeof(float));
    float kc[1] = {0.96f}, vc[1] = {0.92f};
    double * ll[3];
    for (int i = 0; i < 3; i++) ll[i] = malloc(sizeof(double) * (size_t) o.ctx);
    if (!eye || !ll[0] || !ll[1] || !ll[2]) return fprintf(stderr, "bench-kv-window: out of memory\n"), 1;
    for (size_t l = 0; l < L; l++)
        for (size_t i = 0; i < D; i++) eye[(l * D + i) * D + i] = 1.0f;
    const struct oscar_tiering tiers = {.mode = OSCAR_TIERS_DECODE, .n_sink = o.sink, .n_recent = o.recent,
                                        .n_flush = o.page, .prompt_len = o.sink, .block = 1};
    printf("quantized-cache window, %s, ctx %d, sink %d, recent %d, page %d, threads %d\n", c->name, o.ctx, o.sink,
           o.recent, o.page, o.n_threads);
    printf("| method | one pass (s) | tok/s | vs bf16 one pass | decode in one forward (s) | one forward per token "
           "(s) | one pass speed-up over per token | max dll batch | max dll steps | tokens dll steps > 1e-3 |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    double t_bf16 = 0;
    int bad = 0;
    for (int k = 0; k < N_METHODS; k++) {
        if (!wanted(o.methods, methods[k])) continue;
        struct oscar_kv_transform tf;
        if (oscar_kv_transform_preset(methods[k], c->n_layer, c->n_head_kv, c->head_dim, 0, OSCAR_META_F32, &tiers,
                                      false, eye, eye, false, kc, vc, &tf) != OSCAR_OK) {
            fprintf(stderr, "bench-kv-window: %s: %s\n", methods[k], oscar_last_error());
            return 1;
        }
        const int32_t n = o.ctx, t = o.n_threads;
        const double t1 = timed(m, &tf, OSCAR_KV_ONE_PASS, cp.tokens, n, t, ll[0]);
        const double t2 = o.oracle ? timed(m, &tf, OSCAR_KV_DECODE_BATCH, cp.tokens, n, t, ll[1]) : (double) NAN;
        const double t3 = o.steps ? timed(m, &tf, OSCAR_KV_DECODE_STEPS, cp.tokens, n, t, ll[2]) : (double) NAN;
        if (t_bf16 == 0) t_bf16 = t1;   // the first method run (bf16 when listed)
        const double db = o.oracle ? max_diff(ll[0], ll[1], n - 1) : (double) NAN;
        const double ds = o.steps ? max_diff(ll[0], ll[2], n - 1) : (double) NAN;
        bad |= o.oracle && db != 0.0; // the same schedule and arithmetic: bitwise equal (kv-decode.h)
        printf("| %s | %.3f | %.0f | %.2fx | %.3f | %.3f | %.1fx | %.3g | %.3g | %d / %d |\n", methods[k], t1,
               (n - 1) / t1, t_bf16 / t1, t2, t3, t3 / t1, db, ds, o.steps ? (int) n_differ(ll[0], ll[2], n - 1, 1e-3) : 0,
               (int) (n - 1));
    }
    for (int i = 0; i < 3; i++) free(ll[i]);
    free(eye);
    oscar_calib_corpus_free(&cp), oscar_tokenizer_free(tok), oscar_model_free(m);
    if (bad) fprintf(stderr, "bench-kv-window: the one-pass and decode-in-one-forward log-likelihoods differ\n");
    return bad;
}
