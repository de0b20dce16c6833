// bench-layer-pass.c - CPU calibration capture: the layer-major single pass
// (oscar_calib_capture) against the two whole forward passes oscar-calibrate
// ran before (held-out pass, pass 1, pass 2 through oscar_forward_run with a
// capture hook feeding lib/stats), on the same model, plan and threads, in
// one process; checks that both give the same accumulator bytes.
//
//   bench-layer-pass MODEL.gguf CORPUS.txt [--tokens N] [-c SEQ] [-b BATCH] [-t THREADS]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate/calibrate.h"
#include "util/cli.h"
#include "util/log.h"

struct two_pass {
    struct oscar_stats * s;
    bool held; // held-out rows are only copied (their cost), not summed
    float * sink;
};

static enum oscar_status hook(void * user, const struct oscar_capture_layer * cap) {
    struct two_pass * r = user;
    const size_t n = (size_t) cap->n_tokens * (size_t) cap->config->n_head_kv * (size_t) cap->config->head_dim;
    if (r->held) {
        memcpy(r->sink, cap->k, n * sizeof(float));
        return OSCAR_OK;
    }
    struct oscar_stats_chunk ch = {.layer = cap->layer, .n_tokens = cap->n_tokens, .n_seq = cap->n_seq,
                                   .seq_start = cap->seq_start, .q = cap->q, .k = cap->k, .v = cap->v};
    return oscar_stats_add(r->s, &ch);
}

static enum oscar_status batches(struct oscar_forward * f, const int32_t * tokens, const int32_t * starts, int32_t n,
                                 int32_t batch, int32_t * sb) {
    for (int32_t s0 = 0; s0 < n; s0 += batch) {
        int32_t s1 = s0 + batch < n ? s0 + batch : n;
        for (int32_t s = s0; s <= s1; s++) sb[s - s0] = starts[s] - starts[s0];
        struct oscar_batch b = {.n_seq = s1 - s0, .seq_start = sb, .tokens = tokens + starts[s0], .pos = NULL};
        enum oscar_status st = oscar_forward_run(f, &b, NULL);
        if (st != OSCAR_OK) return st;
    }
    return OSCAR_OK;
}

static enum oscar_status two_passes(const struct oscar_model * m, const struct oscar_calib_plan * plan,
                                    const struct oscar_calib_params * p, struct oscar_stats ** out) {
    const struct oscar_model_config * c = &m->config;
    struct oscar_stats_params sp = oscar_stats_default_params();
    sp.n_layer = c->n_layer, sp.n_head = c->n_head, sp.n_head_kv = c->n_head_kv, sp.head_dim = c->head_dim;
    sp.kinds = OSCAR_STATS_QQT | OSCAR_STATS_SST, sp.n_threads = p->n_threads, sp.max_tokens = p->batch * p->seq_len;
    struct two_pass r = {0};
    enum oscar_status st = oscar_stats_init(&sp, &r.s);
    int32_t * sb = malloc(((size_t) p->batch + 1) * sizeof(int32_t));
    r.sink = malloc((size_t) sp.max_tokens * (size_t) c->n_head_kv * (size_t) c->head_dim * sizeof(float));
    struct oscar_capture_hook hk = {.on_layer = hook, .user = &r};
    struct oscar_forward_params fp = oscar_forward_default_params();
    fp.n_threads = p->n_threads, fp.max_tokens = sp.max_tokens, fp.hook = &hk;
    struct oscar_forward * f = NULL;
    if (st == OSCAR_OK) st = oscar_forward_init(m, &fp, &f);
    r.held = true;
    if (st == OSCAR_OK) st = batches(f, plan->tokens, plan->heldout_start, plan->n_heldout, p->batch, sb);
    r.held = false;
    for (int pass = 1; pass <= 2 && st == OSCAR_OK; pass++) {
        st = batches(f, plan->tokens, plan->seq_start, plan->n_seq, p->batch, sb);
        if (st == OSCAR_OK) st = oscar_stats_end_pass(r.s);
    }
    oscar_forward_free(f);
    free(sb);
    free(r.sink);
    if (st == OSCAR_OK) *out = r.s;
    else oscar_stats_free(r.s);
    return st;
}

static int same_state(const struct oscar_stats * a, const struct oscar_stats * b) {
    size_t na = oscar_stats_checkpoint_size(a), nb = oscar_stats_checkpoint_size(b);
    void * x = malloc(na), * y = malloc(nb);
    int same = na == nb && oscar_stats_save(a, x, na) == OSCAR_OK && oscar_stats_save(b, y, nb) == OSCAR_OK &&
               memcmp(x, y, na) == 0;
    free(x), free(y);
    return same;
}

int main(int argc, char ** argv) {
    struct oscar_calib_params p = oscar_calib_default_params();
    p.n_tokens = 4096, p.n_heldout = 2;
    const char * model = NULL, * corpus = NULL;
    for (int i = 1; i < argc; i++) {
        enum oscar_status st = OSCAR_OK;
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc) st = osc_parse_i64("--tokens", argv[++i], 1, 1 << 24, &p.n_tokens);
        else if (!strcmp(argv[i], "-c") && i + 1 < argc) st = osc_parse_i32("-c", argv[++i], 16, 8192, &p.seq_len);
        else if (!strcmp(argv[i], "-b") && i + 1 < argc) st = osc_parse_i32("-b", argv[++i], 1, 64, &p.batch);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) st = osc_parse_threads("-t", argv[++i], &p.n_threads);
        else if (!model) model = argv[i];
        else corpus = argv[i];
        if (st != OSCAR_OK) return fprintf(stderr, "bench-layer-pass: %s\n", oscar_last_error()), 2;
    }
    if (!model || !corpus) {
        fprintf(stderr, "usage: bench-layer-pass MODEL CORPUS [--tokens N] [-c SEQ] [-b BATCH] [-t THREADS]\n");
        return 2;
    }
    oscar_log_set_level(OSCAR_LOG_ERROR);
    struct oscar_model * m = NULL;
    struct oscar_tokenizer * tok = NULL;
    struct oscar_calib_corpus cp = {0};
    struct oscar_calib_plan plan = {0};
    struct oscar_calib_heldout held = {0};
    struct oscar_stats * a = NULL, * b = NULL;
    struct oscar_calib_timing t = {0};
    if (oscar_model_load(model, &m) || oscar_tokenizer_load(model, &tok) ||
        oscar_calib_corpus_load(tok, corpus, NULL, p.n_tokens + (int64_t) p.n_heldout * p.seq_len, &cp) ||
        oscar_calib_plan_make(&cp, &p, &plan)) {
        fprintf(stderr, "bench-layer-pass: %s\n", oscar_last_error());
        return 1;
    }
    double t0 = osc_now();
    if (two_passes(m, &plan, &p, &a) != OSCAR_OK) return fprintf(stderr, "%s\n", oscar_last_error()), 1;
    double t_two = osc_now() - t0;
    t0 = osc_now();
    if (oscar_calib_capture(&(struct oscar_calib_engine){.m = m}, &plan, &p, NULL, &b, &held, &t) != OSCAR_OK) return fprintf(stderr, "%s\n", oscar_last_error()), 1;
    double t_one = osc_now() - t0;
    const double n = (double) plan.n_tokens;
    printf("calibration capture, %lld tokens (+%lld held-out), seq %d, batch %d, threads %d\n",
           (long long) plan.n_tokens, (long long) held.n_rows, p.seq_len, p.batch, p.n_threads);
    printf("  two passes   %8.2f s  %8.1f tok/s\n", t_two, n / t_two);
    printf("  layer-major  %8.2f s  %8.1f tok/s  (forward %.2f s, sums %.2f s, held-out %.2f s)\n", t_one, n / t_one,
           t.forward, t.accumulate, t.heldout);
    printf("  speed-up     %8.2fx   accumulators identical: %s\n", t_two / t_one, same_state(a, b) ? "yes" : "NO");
    int ok = same_state(a, b);
    oscar_stats_free(a), oscar_stats_free(b);
    oscar_calib_heldout_free(&held), oscar_calib_plan_free(&plan), oscar_calib_corpus_free(&cp);
    oscar_tokenizer_free(tok), oscar_model_free(m);
    return ok ? 0 : 1;
}
