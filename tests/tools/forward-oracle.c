// forward-oracle.c - compares the CPU forward pass (and perplexity) of a model with a transformers fixture.
//
//   forward-oracle MODEL FIXTURE_DIR [--ppl] [--threads N]
//
// MODEL is anything oscar_model_load takes; FIXTURE_DIR is tests/fixtures/forward/<name>/ as written by
// tests/oracle/make_model_fixtures.py (index.json + raw little-endian arrays). Checks, all by relative
// L2 error <= 1e-4: logits (all rows, or the rows in index.json "logit_pos"), the final normed hidden
// state when hidden.f32 exists, and captured q/k/v of the layers in index.json "layers". With --ppl it
// also computes the perplexity described by ppl.json over ppl-tokens.i32 and requires agreement within
// 0.5 %. Exit status: 0 pass, 1 mismatch, 2 usage or load failure.
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/log.h"
#include "../unit/forward-fixture.h"

// 1e-4: the acceptance bar for fp32 against transformers (which also runs fp32); measured
// errors are ~1e-6 (summation order only).
#define TOL 1e-4
#define PPL_TOL 0.005

static int check(const char * what, double e, double tol) {
    printf("%-24s rel err %.3e  (tol %.0e)  %s\n", what, e, tol, e <= tol ? "ok" : "FAIL");
    return e <= tol ? 0 : 1;
}

static int run_ppl(const struct oscar_model * m, const char * dir, int32_t threads) {
    char path[1024];
    json_error_t jerr;
    snprintf(path, sizeof path, "%s/ppl.json", dir);
    json_t * pj = json_load_file(path, 0, &jerr);
    if (!pj) {
        fprintf(stderr, "%s: %s\n", path, jerr.text);
        return 2;
    }
    int64_t n = json_integer_value(json_object_get(pj, "n_tokens"));
    struct oscar_ppl_params pp = {.n_ctx = (int32_t)json_integer_value(json_object_get(pj, "n_ctx")),
                                  .stride = (int32_t)json_integer_value(json_object_get(pj, "stride")),
                                  .n_threads = threads};
    double ref = json_number_value(json_object_get(pj, "ppl"));
    int64_t ref_scored = json_integer_value(json_object_get(pj, "n_scored"));
    json_decref(pj);
    int32_t * tok = fx_read(dir, "ppl-tokens.i32", (size_t)n * 4);
    if (!tok) return 2;
    struct oscar_ppl_result r;
    enum oscar_status st = oscar_perplexity(m, tok, n, &pp, &r);
    free(tok);
    if (st != OSCAR_OK) {
        fprintf(stderr, "perplexity: %s\n", oscar_last_error());
        return 2;
    }
    printf("perplexity n_ctx %d stride %d: %.4f over %lld tokens (transformers %.4f over %lld) in %.1f s\n",
           pp.n_ctx, pp.stride, r.ppl, (long long)r.n_scored, ref, (long long)ref_scored, r.seconds);
    if (r.n_scored != ref_scored) return 1;
    return check("perplexity", fabs(r.ppl - ref) / ref, PPL_TOL);
}

int main(int argc, char ** argv) {
    const char * mpath = NULL, * dir = NULL;
    int do_ppl = 0, threads = 0, fails = 0, rc = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ppl")) do_ppl = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!mpath) mpath = argv[i];
        else dir = argv[i];
    }
    if (!mpath || !dir) {
        fprintf(stderr, "usage: forward-oracle MODEL FIXTURE_DIR [--ppl] [--threads N]\n");
        return 2;
    }
    struct oscar_model *   m = NULL;
    struct oscar_forward * f = NULL;
    json_t *               idx = NULL;
    int32_t * tokens = NULL, * seq_start = NULL;
    float * logits = NULL, * ref = NULL;
    struct fx_capture cap = {0};
    char path[1024];
    json_error_t jerr;

    if (oscar_model_load(mpath, &m) != OSCAR_OK) {
        fprintf(stderr, "%s: %s\n", mpath, oscar_last_error());
        goto out;
    }
    snprintf(path, sizeof path, "%s/index.json", dir);
    idx = json_load_file(path, 0, &jerr);
    if (!idx) {
        fprintf(stderr, "%s: %s\n", path, jerr.text);
        goto out;
    }
    const struct oscar_model_config * c = &m->config;
    const int32_t T = (int32_t)json_integer_value(json_object_get(idx, "n_tokens"));
    const int32_t n_seq = (int32_t)json_integer_value(json_object_get(idx, "n_seq"));
    const size_t V = (size_t)c->n_vocab;
    json_t * layers = json_object_get(idx, "layers");
    cap.n_layers = (int32_t)json_array_size(layers);
    if (T <= 0 || n_seq <= 0 || cap.n_layers > 8) goto out;
    for (int32_t i = 0; i < cap.n_layers; i++) cap.layers[i] = (int32_t)json_integer_value(json_array_get(layers, i));
    tokens    = fx_read(dir, "tokens.i32", (size_t)T * 4);
    seq_start = fx_read(dir, "seq_start.i32", (size_t)(n_seq + 1) * 4);
    logits    = malloc((size_t)T * V * sizeof(float));
    if (!tokens || !seq_start || !logits) goto out;

    struct oscar_capture_hook hook = {fx_capture_want, fx_capture_on_layer, &cap, false};
    struct oscar_forward_params fp = oscar_forward_default_params();
    fp.max_tokens = T;
    fp.n_threads  = threads;
    fp.hook       = &hook;
    struct oscar_batch b = {n_seq, seq_start, tokens, NULL};
    if (oscar_forward_init(m, &fp, &f) != OSCAR_OK || oscar_forward_run(f, &b, logits) != OSCAR_OK) {
        fprintf(stderr, "forward: %s\n", oscar_last_error());
        goto out;
    }
    printf("%s: %d tokens in %d sequences\n", c->name, T, n_seq);

    // logits: all rows, or the subset named by logit_pos
    json_t * lp = json_object_get(idx, "logit_pos");
    size_t n_rows = lp ? json_array_size(lp) : (size_t)T;
    ref = fx_read(dir, "logits.f32", n_rows * V * 4);
    if (!ref) goto out;
    if (lp) { // gather our rows into the front of `logits` (rows ascend, so in place is safe)
        for (size_t r = 0; r < n_rows; r++) {
            size_t row = (size_t)json_integer_value(json_array_get(lp, r));
            if (row >= (size_t)T) goto out;
            memmove(logits + r * V, logits + row * V, V * sizeof(float));
        }
    }
    fails += check("logits", fx_rel_l2(logits, ref, n_rows * V), TOL);
    free(ref);
    ref = NULL;

    snprintf(path, sizeof path, "%s/hidden.f32", dir);
    FILE * hf = fopen(path, "rb");
    if (hf) {
        fclose(hf);
        ref = fx_read(dir, "hidden.f32", (size_t)T * (size_t)c->n_embd * 4);
        if (!ref) goto out;
        fails += check("final hidden (all T)", fx_rel_l2(oscar_forward_hidden(f, NULL), ref,
                                                          (size_t)T * (size_t)c->n_embd), TOL);
        free(ref);
        ref = NULL;
    }
    const size_t nq = (size_t)T * (size_t)c->n_head * (size_t)c->head_dim;
    const size_t nkv = (size_t)T * (size_t)c->n_head_kv * (size_t)c->head_dim;
    for (int32_t i = 0; i < cap.n_layers; i++) {
        const char * kinds = "qkv";
        for (int k = 0; k < 3; k++) {
            char name[32], what[32];
            size_t n = k == 0 ? nq : nkv;
            snprintf(name, sizeof name, "%c%d.f32", kinds[k], cap.layers[i]);
            snprintf(what, sizeof what, "layer %d %c", cap.layers[i], kinds[k]);
            ref = fx_read(dir, name, n * 4);
            const float * got = k == 0 ? cap.q[i] : k == 1 ? cap.k[i] : cap.v[i];
            if (!ref || !got) goto out;
            fails += check(what, fx_rel_l2(got, ref, n), TOL);
            free(ref);
            ref = NULL;
        }
    }
    if (do_ppl) {
        int r = run_ppl(m, dir, threads);
        if (r == 2) goto out;
        fails += r;
    }
    rc = fails ? 1 : 0;
    printf("%s\n", fails ? "FAIL" : "PASS");
out:
    fx_capture_free(&cap);
    free(ref);
    free(logits);
    free(tokens);
    free(seq_start);
    if (idx) json_decref(idx);
    oscar_forward_free(f);
    oscar_model_free(m);
    return rc;
}
