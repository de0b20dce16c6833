// bench-layer-pass.c - calibration capture, in one process on the same model,
// plan and threads:
//   - the layer-major single pass (oscar_calib_capture) on the model held
//     resident (oscar_model_load: every layer in host memory before the pass);
//   - the same pass streaming the layers from the file as oscar-calibrate does
//     (read, dequantised and, on a device, uploaded when the pass reaches
//     them, the next one prefetched): what streaming costs over resident;
//   - on the CPU, the two whole forward passes oscar-calibrate ran before
//     (held-out pass, pass 1, pass 2 through oscar_forward_run with a capture
//     hook feeding lib/stats).
// Checks that all of them give the same accumulator bytes. The resident model is
// read first, so both layer-major passes run on a warm page cache: the streamed
// one pays for reading and dequantising inside the pass, not for the disk.
//
//   bench-layer-pass MODEL CORPUS.txt [--tokens N] [-c SEQ] [-b BATCH] [-t THREADS]
//                    [--device cpu|cuda] [--no-two-pass]
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
    const char * model = NULL, * corpus = NULL, * device = "cpu";
    bool two_pass = true;
    for (int i = 1; i < argc; i++) {
        enum oscar_status st = OSCAR_OK;
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc) st = osc_parse_i64("--tokens", argv[++i], 1, 1 << 24, &p.n_tokens);
        else if (!strcmp(argv[i], "-c") && i + 1 < argc) st = osc_parse_i32("-c", argv[++i], 16, 8192, &p.seq_len);
        else if (!strcmp(argv[i], "-b") && i + 1 < argc) st = osc_parse_i32("-b", argv[++i], 1, 64, &p.batch);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) st = osc_parse_threads("-t", argv[++i], &p.n_threads);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--no-two-pass")) two_pass = false;
        else if (!model) model = argv[i];
        else corpus = argv[i];
        if (st != OSCAR_OK) return fprintf(stderr, "bench-layer-pass: %s\n", oscar_last_error()), 2;
    }
    if (!model || !corpus) {
        fprintf(stderr, "usage: bench-layer-pass MODEL CORPUS [--tokens N] [-c SEQ] [-b BATCH] [-t THREADS] "
                        "[--device cpu|cuda] [--no-two-pass]\n");
        return 2;
    }
    oscar_log_set_level(OSCAR_LOG_ERROR);
    const bool cpu = !strcmp(device, "cpu");
    two_pass = two_pass && cpu; // the old passes ran on the CPU only
    p.capture_bf16 = !cpu;      // the device pass's bf16 Gram GEMMs read bf16 q/k/v (as oscar-calibrate sets)
    struct oscar_model * m = NULL, * ms = NULL;
    struct oscar_tokenizer * tok = NULL;
    struct oscar_calib_corpus cp = {0};
    struct oscar_calib_plan plan = {0};
    double t0 = osc_now();
    if (oscar_model_load(model, &m) != OSCAR_OK) return fprintf(stderr, "bench-layer-pass: %s\n", oscar_last_error()), 1;
    const double t_load = osc_now() - t0;
    if (oscar_tokenizer_load(model, &tok) ||
        oscar_calib_corpus_load(tok, corpus, NULL, p.n_tokens + (int64_t) p.n_heldout * p.seq_len, &cp) ||
        oscar_calib_plan_make(&cp, &p, &plan)) {
        fprintf(stderr, "bench-layer-pass: %s\n", oscar_last_error());
        return 1;
    }
    struct oscar_stats * a = NULL, * res = NULL, * str = NULL;
    double t_two = 0.0;
    if (two_pass) {
        t0 = osc_now();
        if (two_passes(m, &plan, &p, &a) != OSCAR_OK) return fprintf(stderr, "%s\n", oscar_last_error()), 1;
        t_two = osc_now() - t0;
    }
    struct oscar_calib_timing tr = {0}, ts = {0};
    struct oscar_calib_heldout held = {0};
    int64_t n_held = 0;
    t0 = osc_now();
    if (oscar_calib_capture(&(struct oscar_calib_engine){.device = device, .m = m}, &plan, &p, NULL, &res, &held,
                            &tr) != OSCAR_OK)
        return fprintf(stderr, "%s\n", oscar_last_error()), 1;
    const double t_res = osc_now() - t0;
    n_held = held.n_rows;
    oscar_calib_heldout_free(&held);
    oscar_model_free(m); // before the streamed pass: it holds at most two layers
    // oscar-calibrate's way of opening: the embedding read for the upload only on a device
    t0 = osc_now();
    enum oscar_status st = cpu ? oscar_model_open_no_head(model, &ms) : oscar_model_open_lazy(model, &ms);
    if (st == OSCAR_OK)
        st = oscar_calib_capture(&(struct oscar_calib_engine){.device = device, .m = ms}, &plan, &p, NULL, &str, &held,
                                 &ts);
    if (st != OSCAR_OK) return fprintf(stderr, "%s\n", oscar_last_error()), 1;
    const double t_str = osc_now() - t0;
    const double n = (double) plan.n_tokens;
    printf("calibration capture on %s, %lld tokens (+%lld held-out), seq %d, batch %d, threads %d\n", device,
           (long long) plan.n_tokens, (long long) n_held, p.seq_len, p.batch, p.n_threads);
    printf("  model read resident %8.2f s (before the passes; warms the page cache)\n", t_load);
    if (two_pass) printf("  two passes   %8.2f s  %8.1f tok/s\n", t_two, n / t_two);
    printf("  layer-major, resident  %8.2f s  %8.1f tok/s  (forward %.2f s, sums %.2f s, held-out %.2f s, "
           "layers to the backend %.2f s)\n", t_res, n / t_res, tr.forward, tr.accumulate, tr.heldout, tr.load);
    printf("  layer-major, streamed  %8.2f s  %8.1f tok/s  (forward %.2f s, sums %.2f s, held-out %.2f s, "
           "layers read + to the backend %.2f s; opening included)\n", t_str, n / t_str, ts.forward, ts.accumulate,
           ts.heldout, ts.load);
    printf("  streaming costs %+.1f %% over resident\n", 100.0 * (t_str / t_res - 1.0));
    int ok = same_state(res, str);
    if (two_pass) {
        printf("  speed-up of the layer-major pass over two passes %.2fx\n", t_two / t_res);
        ok = ok && same_state(a, res);
    }
    printf("  accumulators identical: %s\n", ok ? "yes" : "NO");
    oscar_stats_free(a), oscar_stats_free(res), oscar_stats_free(str);
    oscar_calib_heldout_free(&held), oscar_calib_plan_free(&plan), oscar_calib_corpus_free(&cp);
    oscar_tokenizer_free(tok), oscar_model_free(ms);
    return ok ? 0 : 1;
}
