// capture-device.c - calibration capture through oscar_fwd_* (see capture-device.h): the
// held-out rows (host hook on a capture-free pass), both accumulation passes with the
// sums kept on the device, named random-init shapes and a synthetic token stream.
// Refuses checkpoints (the CPU path in capture.c has them).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/forward-backend.h"
#include "calibrate/capture-device.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/sha256.h"

enum oscar_status oscar_calib_random_config(const char * name, struct oscar_model_config * c) {
    memset(c, 0, sizeof *c);
    if (name && !strcmp(name, "qwen3-8b")) {
        c->arch = OSCAR_ARCH_QWEN3, c->n_layer = 36, c->n_embd = 4096, c->n_head = 32, c->n_head_kv = 8;
        c->head_dim = 128, c->n_ff = 12288, c->n_vocab = 151936, c->n_ctx_train = 40960;
        c->rope_theta = 1000000.0f, c->rms_eps = 1e-6f, c->qk_norm = true;
    } else if (name && !strcmp(name, "smollm2-135m")) {
        c->arch = OSCAR_ARCH_LLAMA, c->n_layer = 30, c->n_embd = 576, c->n_head = 9, c->n_head_kv = 3;
        c->head_dim = 64, c->n_ff = 1536, c->n_vocab = 49152, c->n_ctx_train = 8192;
        c->rope_theta = 100000.0f, c->rms_eps = 1e-5f, c->tied_embeddings = true;
    } else {
        return osc_error(OSCAR_ERR_INVALID, "random-init: unknown shape '%s' (qwen3-8b, smollm2-135m)",
                         name ? name : "(null)");
    }
    snprintf(c->name, sizeof c->name, "%s shape (random init)", name);
    return OSCAR_OK;
}

enum oscar_status oscar_calib_synthetic_corpus(int64_t n, int32_t n_vocab, uint64_t seed,
                                               struct oscar_calib_corpus * out) {
    memset(out, 0, sizeof *out);
    if (n <= 0 || n_vocab <= 0) return osc_error(OSCAR_ERR_INVALID, "synthetic corpus: %lld tokens, vocab %d",
                                                 (long long) n, (int) n_vocab);
    out->tokens = malloc((size_t) n * sizeof(int32_t));
    if (!out->tokens) return osc_error(OSCAR_ERR_NOMEM, "synthetic corpus: out of memory (%lld tokens)", (long long) n);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        out->tokens[i] = (int32_t) (x % (uint64_t) n_vocab);
    }
    out->n = n;
    out->n_docs = 1;
    osc_sha256_hex(out->tokens, (size_t) n * sizeof(int32_t), out->sha256);
    snprintf(out->name, sizeof out->name, "synthetic:%llu", (unsigned long long) seed);
    return OSCAR_OK;
}

static enum oscar_status make_fwd(const struct oscar_calib_device * d, const struct oscar_calib_params * p,
                                  struct oscar_stats * s, const struct oscar_capture_hook * hook,
                                  struct oscar_fwd ** f) {
    struct oscar_fwd_params fp = oscar_fwd_default_params();
    fp.device = d->device ? d->device : "cpu";
    fp.n_threads = p->n_threads;
    fp.max_tokens = p->batch * p->seq_len;
    fp.stats = s;
    fp.hook = hook;
    fp.fp32 = d->fp32;
    if (d->model) return oscar_fwd_init(d->model, &fp, f);
    if (!d->random) return osc_error(OSCAR_ERR_INVALID, "calibrate: no model and no random-init shape");
    return oscar_fwd_init_random(d->random, d->seed, &fp, f);
}

// Device memory of the pass into t (largest seen) and the log.
static void note_device(struct oscar_fwd * f, const char * what, struct oscar_calib_timing * t) {
    struct oscar_fwd_info fi;
    oscar_fwd_info(f, &fi);
    if (!fi.device_used_bytes) return;
    if (t && fi.device_used_bytes > t->device_peak_bytes) t->device_peak_bytes = fi.device_used_bytes;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    osc_info("%s on %s: weights %.2f GiB, workspace %.2f GiB, device memory in use at most %.2f GiB", what, fi.device,
             (double) fi.weight_bytes / gib, (double) fi.workspace_bytes / gib, (double) fi.device_used_bytes / gib);
}

static const struct oscar_model_config * dev_config(const struct oscar_calib_device * d) {
    return d->model ? &d->model->config : d->random;
}

// Sequences [s0, s1) of starts (offsets into tokens) as one batch.
static enum oscar_status run_batch(struct oscar_fwd * f, const int32_t * tokens, const int32_t * starts, int32_t s0,
                                   int32_t s1, int32_t * sbuf) {
    for (int32_t s = s0; s <= s1; s++) sbuf[s - s0] = starts[s] - starts[s0];
    const struct oscar_batch b = {.n_seq = s1 - s0, .seq_start = sbuf, .tokens = tokens + starts[s0], .pos = NULL};
    return oscar_fwd_run(f, &b, NULL);
}

struct held_ctx {
    struct oscar_calib_heldout * h;
    int64_t row0;
};

static enum oscar_status on_held(void * user, const struct oscar_capture_layer * cap) {
    struct held_ctx * hc = user;
    const struct oscar_model_config * c = cap->config;
    const size_t T = (size_t) cap->n_tokens, D = (size_t) c->head_dim, r0 = (size_t) hc->row0;
    const size_t nq = (size_t) c->n_head * D, nkv = (size_t) c->n_head_kv * D;
    memcpy(hc->h->q[cap->layer] + r0 * nq, cap->q, T * nq * sizeof(float));
    memcpy(hc->h->k[cap->layer] + r0 * nkv, cap->k, T * nkv * sizeof(float));
    memcpy(hc->h->v[cap->layer] + r0 * nkv, cap->v, T * nkv * sizeof(float));
    return OSCAR_OK;
}

enum oscar_status oscar_calib_device_heldout(const struct oscar_calib_device * d, const struct oscar_calib_plan * plan,
                                             const struct oscar_calib_params * p, struct oscar_calib_heldout * h,
                                             struct oscar_calib_timing * t) {
    const struct oscar_model_config * c = dev_config(d);
    const double t0 = osc_now();
    struct oscar_fwd * f = NULL;
    int32_t * sbuf = malloc(((size_t) p->batch + 1) * sizeof(int32_t));
    enum oscar_status st = OSCAR_OK;
    memset(h, 0, sizeof *h);
    if (!c) return osc_error(OSCAR_ERR_INVALID, "calibrate: no model and no random-init shape");
    h->n_layer = c->n_layer, h->n_head = c->n_head, h->n_head_kv = c->n_head_kv, h->head_dim = c->head_dim;
    h->n_embd = c->n_embd, h->n_seq = plan->n_heldout;
    h->n_rows = plan->heldout_start[plan->n_heldout] - plan->heldout_start[0];
    const size_t L = (size_t) c->n_layer, T = (size_t) h->n_rows, D = (size_t) c->head_dim;
    const size_t nwo = (size_t) c->n_embd * (size_t) c->n_head * D;
    h->q = calloc(L, sizeof(float *)), h->k = calloc(L, sizeof(float *)), h->v = calloc(L, sizeof(float *));
    h->wo = calloc(L, sizeof(float *));
    h->seq_start = malloc(((size_t) h->n_seq + 1) * sizeof(int32_t));
    float * wo = h->wo_block = osc_alloc_large(L * nwo * sizeof(float));
    if (!h->wo || !wo) goto nomem;
    for (size_t l = 0; l < L; l++) h->wo[l] = wo + l * nwo;
    if (!h->q || !h->k || !h->v || !h->seq_start || !sbuf) goto nomem;
    for (size_t l = 0; l < L; l++) {
        h->q[l] = osc_alloc_large(T * (size_t) c->n_head * D * sizeof(float));
        h->k[l] = osc_alloc_large(T * (size_t) c->n_head_kv * D * sizeof(float));
        h->v[l] = osc_alloc_large(T * (size_t) c->n_head_kv * D * sizeof(float));
        if (!h->q[l] || !h->k[l] || !h->v[l]) goto nomem;
    }
    for (int32_t s = 0; s <= h->n_seq; s++) h->seq_start[s] = plan->heldout_start[s] - plan->heldout_start[0];
    struct held_ctx hc = {h, 0};
    const struct oscar_capture_hook hook = {.want = NULL, .on_layer = on_held, .user = &hc, .qkv_only = true};
    if ((st = make_fwd(d, p, NULL, &hook, &f)) != OSCAR_OK) goto fail;
    const double t_init = osc_now();
    for (int32_t s0 = 0; s0 < h->n_seq && st == OSCAR_OK; s0 += p->batch) {
        const int32_t s1 = s0 + p->batch < h->n_seq ? s0 + p->batch : h->n_seq;
        hc.row0 = h->seq_start[s0];
        st = run_batch(f, plan->tokens, plan->heldout_start, s0, s1, sbuf);
    }
    const double t_rows = osc_now();
    for (size_t l = 0; l < L && st == OSCAR_OK; l++) st = oscar_fwd_copy_wo(f, (int32_t) l, wo + l * nwo);
    if (st != OSCAR_OK) goto fail;
    note_device(f, "held-out pass", t);
    osc_debug("held-out: forward pass built in %.2f s, %zu rows captured in %.2f s, W_O copied in %.2f s",
              t_init - t0, T, t_rows - t_init, osc_now() - t_rows);
    oscar_fwd_free(f);
    free(sbuf);
    if (t) t->heldout += osc_now() - t0;
    return OSCAR_OK;
nomem:
    st = osc_error(OSCAR_ERR_NOMEM, "held-out rows: out of memory (%zu rows)", T);
fail:
    oscar_fwd_free(f);
    free(sbuf);
    oscar_calib_heldout_free(h);
    return st;
}

enum oscar_status oscar_calib_device_accumulate(const struct oscar_calib_device * d,
                                                const struct oscar_calib_plan * plan,
                                                const struct oscar_calib_params * p, struct oscar_stats ** out,
                                                struct oscar_calib_timing * t) {
    const struct oscar_model_config * c = dev_config(d);
    struct oscar_stats * s = NULL;
    struct oscar_fwd * f = NULL;
    int32_t * sbuf = malloc(((size_t) p->batch + 1) * sizeof(int32_t));
    enum oscar_status st = OSCAR_OK;
    *out = NULL;
    if (!c) {
        st = osc_error(OSCAR_ERR_INVALID, "calibrate: no model and no random-init shape");
        goto out;
    }
    if (p->checkpoint_path) {
        st = osc_error(OSCAR_ERR_UNSUPPORTED, "calibrate: checkpoints are not available with --device/--random-init");
        goto out;
    }
    if (!sbuf) {
        st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
        goto out;
    }
    struct oscar_stats_params sp = oscar_stats_default_params();
    sp.n_layer = c->n_layer, sp.n_head = c->n_head, sp.n_head_kv = c->n_head_kv, sp.head_dim = c->head_dim;
    sp.kinds = oscar_calib_stats_kinds(p), sp.n_threads = p->n_threads, sp.max_tokens = p->batch * p->seq_len;
    if ((st = oscar_stats_init(&sp, &s)) != OSCAR_OK) goto out;
    if ((st = make_fwd(d, p, s, NULL, &f)) != OSCAR_OK) goto out;
    for (int32_t pass = 1; pass <= 2 && oscar_stats_phase(s) == pass; pass++) {
        double t0 = osc_now();
        for (int32_t s0 = 0; s0 < plan->n_seq && st == OSCAR_OK; s0 += p->batch) {
            const int32_t s1 = s0 + p->batch < plan->n_seq ? s0 + p->batch : plan->n_seq;
            st = run_batch(f, plan->tokens, plan->seq_start, s0, s1, sbuf);
        }
        if (st != OSCAR_OK) goto out;
        t->forward += osc_now() - t0;
        t0 = osc_now();
        if ((st = oscar_fwd_end_pass(f)) != OSCAR_OK) goto out;
        t->accumulate += osc_now() - t0;
        osc_info("pass %d: %lld tokens on %s", (int) pass, (long long) plan->n_tokens, d->device ? d->device : "cpu");
    }
    note_device(f, "capture passes", t);
    *out = s;
    s = NULL;
out:
    oscar_fwd_free(f);
    oscar_stats_free(s);
    free(sbuf);
    return st;
}
