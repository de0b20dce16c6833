// replay.c - calibration from an HDF5 activation store (--from-activations)
// instead of a forward pass: the plan, the held-out rows and both passes'
// statistics from the stored rows, replayed in the batches a forward run would
// use; plus the held-out rows' release and the peak RSS report.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/resource.h>

#include "backend/backend.h"
#include "calibrate/actstore.h"
#include "calibrate/calibrate.h"
#include "util/log.h"

void oscar_calib_heldout_free(struct oscar_calib_heldout * h) {
    if (h->pinned) {
        void * slot[4] = {h->q[0], h->k[0], h->v[0], h->wo_block};
        for (int i = 0; i < 4; i++) h->pinned->host_unpin(slot[i]);
    }
    for (int32_t l = 0; h->q && l < (h->n_slot == 1 ? 1 : h->n_layer); l++) {   // one slot: shared by all
        free(h->q[l]);
        free(h->k[l]);
        free(h->v[l]);
    }
    free(h->q);
    free(h->k);
    free(h->v);
    free(h->wo);
    free(h->wo_block);
    free(h->seq_start);
    free(h->window);
    memset(h, 0, sizeof(*h));
}

int32_t * oscar_calib_layer_windows(const struct oscar_model_config * c) {
    int32_t * w = malloc(((size_t) c->n_layer + 1) * sizeof(int32_t));
    for (int32_t l = 0; w && l < c->n_layer; l++) w[l] = oscar_layer_window(c, l);
    return w;
}

// ---- replay from an activation store ---------------------------------------------------------
double oscar_calib_peak_rss_mb(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0.0;
    return (double) ru.ru_maxrss / 1024.0;   // Linux: KiB
}

static int32_t * offsets(const int32_t * lens, int32_t n) {
    int32_t * o = malloc(((size_t) n + 1) * sizeof(int32_t));
    if (!o) return NULL;
    o[0] = 0;
    for (int32_t i = 0; i < n; i++) o[i + 1] = o[i] + lens[i];
    return o;
}

enum oscar_status oscar_calib_plan_from_store(struct oscar_actstore * s, struct oscar_calib_plan * plan) {
    int32_t nc, nh;
    const int32_t * lc = oscar_actstore_seq_lens(s, OSCAR_ACT_CALIB, &nc), * lh = oscar_actstore_seq_lens(s, OSCAR_ACT_HELDOUT, &nh);
    memset(plan, 0, sizeof(*plan));
    if (nc < 1 || nh < 1)
        return osc_error(OSCAR_ERR_FORMAT, "activation store: %d calibration and %d held-out sequences (need >= 1 each)",
                         (int) nc, (int) nh);
    plan->n_seq = nc;
    plan->n_heldout = nh;
    plan->seq_start = offsets(lc, nc);
    plan->heldout_start = offsets(lh, nh);
    if (!plan->seq_start || !plan->heldout_start) {
        oscar_calib_plan_free(plan);
        return osc_error(OSCAR_ERR_NOMEM, "activation store: out of memory");
    }
    plan->n_tokens = plan->seq_start[nc];
    return OSCAR_OK;
}

static enum oscar_status check_model(const struct oscar_actstore_info * in, const struct oscar_model_config * c) {
    if (in->n_layer != c->n_layer || in->n_head != c->n_head || in->n_head_kv != c->n_head_kv ||
        in->head_dim != c->head_dim || in->n_embd != c->n_embd)
        return osc_error(OSCAR_ERR_INVALID, "activation store: made for L %d Hq %d Hkv %d D %d C %d, model has %d %d %d %d %d",
                         (int) in->n_layer, (int) in->n_head, (int) in->n_head_kv, (int) in->head_dim, (int) in->n_embd,
                         (int) c->n_layer, (int) c->n_head, (int) c->n_head_kv, (int) c->head_dim, (int) c->n_embd);
    return OSCAR_OK;
}

enum oscar_status oscar_calib_heldout_from_store(struct oscar_actstore * s, const struct oscar_model * m,
                                                 struct oscar_calib_heldout * h, struct oscar_calib_timing * t) {
    const struct oscar_model_config * c = &m->config;
    double t0 = osc_now();
    memset(h, 0, sizeof(*h));
    enum oscar_status st = check_model(oscar_actstore_get_info(s), c);
    if (st != OSCAR_OK) return st;
    int32_t nh;
    const int32_t * lens = oscar_actstore_seq_lens(s, OSCAR_ACT_HELDOUT, &nh);
    h->n_layer = c->n_layer, h->n_head = c->n_head, h->n_head_kv = c->n_head_kv, h->head_dim = c->head_dim;
    h->n_embd = c->n_embd, h->attn_scale = oscar_attn_scale_param(c), h->window = oscar_calib_layer_windows(c);
    h->n_seq = nh;
    h->seq_start = offsets(lens, nh);
    size_t L = (size_t) c->n_layer, D = (size_t) c->head_dim;
    h->q = calloc(L, sizeof(float *)), h->k = calloc(L, sizeof(float *)), h->v = calloc(L, sizeof(float *));
    h->wo = calloc(L, sizeof(float *));
    if (!h->seq_start || !h->q || !h->k || !h->v || !h->wo || !h->window) goto nomem;
    h->n_rows = h->seq_start[nh];
    size_t T = (size_t) h->n_rows;
    for (size_t l = 0; l < L && st == OSCAR_OK; l++) {
        h->q[l] = malloc(T * (size_t) c->n_head * D * sizeof(float) + 1);
        h->k[l] = malloc(T * (size_t) c->n_head_kv * D * sizeof(float) + 1);
        h->v[l] = malloc(T * (size_t) c->n_head_kv * D * sizeof(float) + 1);
        h->wo[l] = m->layers[l].wo;
        if (!h->q[l] || !h->k[l] || !h->v[l]) goto nomem;
        st = oscar_actstore_read(s, OSCAR_ACT_HELDOUT, (int32_t) l, 0, (int32_t) T, h->q[l], h->k[l], h->v[l]);
    }
    if (st != OSCAR_OK) oscar_calib_heldout_free(h);
    if (t) t->store += osc_now() - t0;
    return st;
nomem:
    oscar_calib_heldout_free(h);
    return osc_error(OSCAR_ERR_NOMEM, "held-out rows from the store: out of memory");
}

enum oscar_status oscar_calib_accumulate_from_store(struct oscar_actstore * s, const struct oscar_calib_plan * plan,
                                                    const struct oscar_calib_params * p, float attn_scale,
                                                    const int32_t * window,
                                                    struct oscar_stats ** out, struct oscar_calib_timing * t) {
    const struct oscar_actstore_info * in = oscar_actstore_get_info(s);
    struct oscar_stats_params sp = oscar_stats_default_params();
    sp.n_layer = in->n_layer, sp.n_head = in->n_head, sp.n_head_kv = in->n_head_kv, sp.head_dim = in->head_dim;
    sp.attn_scale = attn_scale;
    sp.kinds = oscar_calib_stats_kinds(p);
    sp.n_threads = p->n_threads;
    int32_t maxrows = 0;   // rows of the largest batch, as a forward run would batch them
    for (int32_t s0 = 0; s0 < plan->n_seq; s0 += p->batch) {
        int32_t s1 = s0 + p->batch < plan->n_seq ? s0 + p->batch : plan->n_seq;
        if (plan->seq_start[s1] - plan->seq_start[s0] > maxrows) maxrows = plan->seq_start[s1] - plan->seq_start[s0];
    }
    sp.max_tokens = maxrows;
    size_t D = (size_t) in->head_dim, R = (size_t) maxrows;
    float * q = malloc(R * (size_t) in->n_head * D * sizeof(float) + 1);
    float * k = malloc(R * (size_t) in->n_head_kv * D * sizeof(float) + 1);
    float * v = malloc(R * (size_t) in->n_head_kv * D * sizeof(float) + 1);
    int32_t * sbuf = malloc(((size_t) p->batch + 1) * sizeof(int32_t));
    struct oscar_stats * st_acc = NULL;
    enum oscar_status st = OSCAR_OK;
    *out = NULL;
    if (!q || !k || !v || !sbuf) {
        st = osc_error(OSCAR_ERR_NOMEM, "replay: out of memory (%d rows)", (int) maxrows);
        goto out;
    }
    if ((st = oscar_stats_init(&sp, &st_acc)) != OSCAR_OK) goto out;
    for (int pass = 1; pass <= 2 && st == OSCAR_OK; pass++) {
        if (pass == 2 && oscar_stats_phase(st_acc) != 2) break;
        for (int32_t s0 = 0; s0 < plan->n_seq && st == OSCAR_OK; s0 += p->batch) {
            int32_t s1 = s0 + p->batch < plan->n_seq ? s0 + p->batch : plan->n_seq;
            int32_t r0 = plan->seq_start[s0], n = plan->seq_start[s1] - r0;
            for (int32_t i = s0; i <= s1; i++) sbuf[i - s0] = plan->seq_start[i] - r0;
            for (int32_t l = 0; l < in->n_layer && st == OSCAR_OK; l++) {
                double t0 = osc_now();
                if ((st = oscar_actstore_read(s, OSCAR_ACT_CALIB, l, r0, n, q, k, v)) != OSCAR_OK) break;
                double t1 = osc_now();
                struct oscar_stats_chunk ch = {.layer = l, .n_tokens = n, .n_seq = s1 - s0, .seq_start = sbuf,
                                               .q = q, .k = k, .v = v, .window = window ? window[l] : 0};
                st = oscar_stats_add(st_acc, &ch);
                t->store += t1 - t0;
                t->accumulate += osc_now() - t1;
            }
        }
        double t0 = osc_now();
        if (st == OSCAR_OK) st = oscar_stats_end_pass(st_acc);
        t->accumulate += osc_now() - t0;
    }
    if (st == OSCAR_OK) {
        *out = st_acc;
        st_acc = NULL;
    }
out:
    oscar_stats_free(st_acc);
    free(q); free(k); free(v); free(sbuf);
    return st;
}
