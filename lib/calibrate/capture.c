// capture.c - forward passes with the capture hook: held-out rows, pass 1
// (qqt / ktk / vtv / vatt) and pass 2 (sst with the final A_h), checkpoints;
// optional bf16 rounding of the captured rows and their copy into the HDF5
// activation store; the replay of a store instead of the forward pass.
//
// Checkpoint file (native little-endian, written atomically): struct
// ckpt_header (version 2) then the lib/stats checkpoint bytes. The header holds
// the plan (tokens, sequences, seq_len, batch, stats kinds, capture dtype) and
// what the sums were made of: the model's attention shape (layers, heads, KV
// heads, head_dim, n_embd), the model's sha256 (the one the artifact records),
// the tokenizer hash and the corpus sha256. A resume refuses a checkpoint that
// differs in any of them, naming it, and checks the statistics' own shape
// against the model before a single row is added (their buffers are sized by
// it). Checkpoints are taken at batch boundaries, so the batches of a
// resumed run are exactly those of an uninterrupted one, and the accumulator
// state (lib/stats, chunking- and thread-invariant) makes the result identical.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/resource.h>

#include "calibrate/actstore.h"
#include "calibrate/calibrate.h"
#include "quant/quant.h"
#include "util/fs.h"
#include "util/log.h"

#define CKPT_MAGIC "OSCCALCK"
#define CKPT_VERSION 2u

struct ckpt_header {
    char     magic[8];
    uint32_t version;
    uint32_t pass;
    int32_t  next_seq;
    int32_t  n_seq;
    int64_t  n_tokens;
    int32_t  seq_len;
    int32_t  batch;
    uint32_t kinds;
    uint32_t capture_bf16;
    int32_t  n_layer, n_head, n_head_kv, head_dim, n_embd;
    uint32_t pad;
    uint64_t tokenizer_hash;
    uint64_t stats_size;
    char     model_sha256[72];  // NUL-terminated hex (or empty)
    char     corpus_sha256[72];
    char     model[512];        // names, for the messages only
    char     corpus[256];
};

struct hook_ctx {
    struct oscar_stats * stats;        // accumulate mode
    struct oscar_calib_heldout * held; // held-out mode
    int64_t row0;                      // held-out row offset of this batch
    double t_accum, t_store;
    enum oscar_status err;
    float * rq, * rk, * rv;            // bf16-rounded rows [max_tokens, H, D] (capture_bf16) or NULL
    struct oscar_actstore * store;     // copy rows here when set
    enum oscar_actstore_set store_set;
};

static void round_rows(const float * x, size_t n, float * out) {
    for (size_t i = 0; i < n; i++) out[i] = oscar_bf16_round(x[i]);
}

static bool hook_bufs(struct hook_ctx * h, const struct oscar_calib_params * p, const struct oscar_model_config * c) {
    if (!p->capture_bf16) return true;
    size_t T = (size_t) p->batch * (size_t) p->seq_len, D = (size_t) c->head_dim;
    h->rq = malloc(T * (size_t) c->n_head * D * sizeof(float));
    h->rk = malloc(T * (size_t) c->n_head_kv * D * sizeof(float));
    h->rv = malloc(T * (size_t) c->n_head_kv * D * sizeof(float));
    return h->rq && h->rk && h->rv;
}

static void hook_free(struct hook_ctx * h) {
    free(h->rq); free(h->rk); free(h->rv);
    h->rq = h->rk = h->rv = NULL;
}

static enum oscar_status on_layer(void * user, const struct oscar_capture_layer * cap) {
    struct hook_ctx * h = user;
    const struct oscar_model_config * c = cap->config;
    size_t T = (size_t) cap->n_tokens, D = (size_t) c->head_dim;
    size_t nq = T * (size_t) c->n_head * D, nk = T * (size_t) c->n_head_kv * D;
    const float * q = cap->q, * k = cap->k, * v = cap->v;
    if (h->rq) { // the reference captures bf16: every consumer sees the rounded rows
        round_rows(q, nq, h->rq), round_rows(k, nk, h->rk), round_rows(v, nk, h->rv);
        q = h->rq, k = h->rk, v = h->rv;
    }
    if (h->store) {
        double t0 = osc_now();
        enum oscar_status st = oscar_actstore_append(h->store, h->store_set, cap->layer, cap->n_tokens, cap->n_seq,
                                                     cap->seq_start, q, k, v);
        h->t_store += osc_now() - t0;
        if (st != OSCAR_OK) return st;
    }
    if (h->held) {
        size_t r0 = (size_t) h->row0;
        memcpy(h->held->q[cap->layer] + r0 * (size_t) c->n_head * D, q, nq * sizeof(float));
        memcpy(h->held->k[cap->layer] + r0 * (size_t) c->n_head_kv * D, k, nk * sizeof(float));
        memcpy(h->held->v[cap->layer] + r0 * (size_t) c->n_head_kv * D, v, nk * sizeof(float));
        return OSCAR_OK;
    }
    double t0 = osc_now();
    struct oscar_stats_chunk ch = {
        .layer = cap->layer, .n_tokens = cap->n_tokens, .n_seq = cap->n_seq, .seq_start = cap->seq_start,
        .q = q, .k = k, .v = v,
    };
    enum oscar_status st = oscar_stats_add(h->stats, &ch);
    h->t_accum += osc_now() - t0;
    return st;
}

// Runs sequences [s0, s1) of `starts` (offsets into tokens) as one batch.
static enum oscar_status run_batch(struct oscar_forward * f, const int32_t * tokens, const int32_t * starts, int32_t s0,
                                   int32_t s1, int32_t * seq_start_buf) {
    for (int32_t s = s0; s <= s1; s++) seq_start_buf[s - s0] = starts[s] - starts[s0];
    struct oscar_batch b = {.n_seq = s1 - s0, .seq_start = seq_start_buf, .tokens = tokens + starts[s0], .pos = NULL};
    return oscar_forward_run(f, &b, NULL);
}

static struct oscar_forward_params fwd_params(const struct oscar_calib_params * p, struct oscar_capture_hook * hook) {
    struct oscar_forward_params fp = oscar_forward_default_params();
    fp.n_threads = p->n_threads;
    fp.max_tokens = p->batch * p->seq_len;
    fp.hook = hook;
    return fp;
}

void oscar_calib_heldout_free(struct oscar_calib_heldout * h) {
    for (int32_t l = 0; h->q && l < h->n_layer; l++) {
        free(h->q[l]);
        free(h->k[l]);
        free(h->v[l]);
    }
    free(h->q);
    free(h->k);
    free(h->v);
    free(h->wo);
    free(h->seq_start);
    memset(h, 0, sizeof(*h));
}

enum oscar_status oscar_calib_capture_heldout(const struct oscar_model * m, const struct oscar_calib_plan * plan,
                                              const struct oscar_calib_params * p, struct oscar_calib_heldout * h,
                                              struct oscar_calib_timing * t) {
    const struct oscar_model_config * c = &m->config;
    enum oscar_status st = OSCAR_ERR_NOMEM;
    struct oscar_forward * f = NULL;
    int32_t * sbuf = NULL;
    struct hook_ctx hc = {0};
    double t0 = osc_now();
    memset(h, 0, sizeof(*h));
    h->n_layer = c->n_layer;
    h->n_head = c->n_head;
    h->n_head_kv = c->n_head_kv;
    h->head_dim = c->head_dim;
    h->n_embd = c->n_embd;
    h->n_seq = plan->n_heldout;
    h->n_rows = plan->heldout_start[plan->n_heldout] - plan->heldout_start[0];
    size_t L = (size_t) c->n_layer, T = (size_t) h->n_rows, D = (size_t) c->head_dim;
    h->q = calloc(L, sizeof(float *));
    h->k = calloc(L, sizeof(float *));
    h->v = calloc(L, sizeof(float *));
    h->wo = calloc(L, sizeof(float *));
    h->seq_start = malloc(((size_t) h->n_seq + 1) * sizeof(int32_t));
    sbuf = malloc(((size_t) p->batch + 1) * sizeof(int32_t));
    if (!h->q || !h->k || !h->v || !h->wo || !h->seq_start || !sbuf) goto fail;
    for (size_t l = 0; l < L; l++) {
        h->q[l] = malloc(T * (size_t) c->n_head * D * sizeof(float));
        h->k[l] = malloc(T * (size_t) c->n_head_kv * D * sizeof(float));
        h->v[l] = malloc(T * (size_t) c->n_head_kv * D * sizeof(float));
        h->wo[l] = m->layers[l].wo;
        if (!h->q[l] || !h->k[l] || !h->v[l]) goto fail;
    }
    for (int32_t s = 0; s <= h->n_seq; s++) h->seq_start[s] = plan->heldout_start[s] - plan->heldout_start[0];
    hc.held = h, hc.store = p->act_out, hc.store_set = OSCAR_ACT_HELDOUT;
    if (!hook_bufs(&hc, p, c)) goto fail;
    struct oscar_capture_hook hook = {.want = NULL, .on_layer = on_layer, .user = &hc};
    struct oscar_forward_params fp = fwd_params(p, &hook);
    if ((st = oscar_forward_init(m, &fp, &f)) != OSCAR_OK) goto fail;
    for (int32_t s0 = 0; s0 < h->n_seq; s0 += p->batch) {
        int32_t s1 = s0 + p->batch < h->n_seq ? s0 + p->batch : h->n_seq;
        hc.row0 = h->seq_start[s0];
        if ((st = run_batch(f, plan->tokens, plan->heldout_start, s0, s1, sbuf)) != OSCAR_OK) goto fail;
    }
    oscar_forward_free(f);
    free(sbuf);
    hook_free(&hc);
    if (t) t->heldout += osc_now() - t0;
    return OSCAR_OK;
fail:
    if (st == OSCAR_ERR_NOMEM) osc_error(OSCAR_ERR_NOMEM, "held-out rows: out of memory (%zu rows)", T);
    oscar_forward_free(f);
    free(sbuf);
    hook_free(&hc);
    oscar_calib_heldout_free(h);
    return st;
}

// ---- checkpoints ---------------------------------------------------------------------------
static uint32_t stats_kinds(const struct oscar_calib_params * p) {
    uint32_t k = (uint32_t) p->k_objective | (uint32_t) p->v_objective;
    if (p->v_objective == OSCAR_STATS_SST) k |= OSCAR_STATS_QQT;
    return k;
}

static void fill_header(struct ckpt_header * hd, const struct oscar_model * m, const struct oscar_calib_plan * plan,
                        const struct oscar_calib_params * p, uint32_t pass, int32_t next_seq) {
    const struct oscar_model_config * c = &m->config;
    memset(hd, 0, sizeof(*hd));
    memcpy(hd->magic, CKPT_MAGIC, 8);
    hd->version = CKPT_VERSION;
    hd->pass = pass;
    hd->next_seq = next_seq;
    hd->n_seq = plan->n_seq;
    hd->n_tokens = plan->n_tokens;
    hd->seq_len = p->seq_len;
    hd->batch = p->batch;
    hd->kinds = stats_kinds(p);
    hd->capture_bf16 = p->capture_bf16;
    hd->n_layer = c->n_layer, hd->n_head = c->n_head, hd->n_head_kv = c->n_head_kv;
    hd->head_dim = c->head_dim, hd->n_embd = c->n_embd;
    snprintf(hd->model_sha256, sizeof hd->model_sha256, "%s", m->source_sha256);
    snprintf(hd->model, sizeof hd->model, "%s", c->name[0] ? c->name : m->source);
    if (plan->corpus) {
        hd->tokenizer_hash = plan->corpus->tokenizer_hash;
        snprintf(hd->corpus_sha256, sizeof hd->corpus_sha256, "%s", plan->corpus->sha256);
        snprintf(hd->corpus, sizeof hd->corpus, "%s", plan->corpus->name);
    }
}

static enum oscar_status save_ckpt(const char * path, const struct oscar_stats * s, const struct ckpt_header * hd0) {
    struct ckpt_header hd = *hd0;
    hd.stats_size = oscar_stats_checkpoint_size(s);
    size_t n = sizeof(hd) + hd.stats_size;
    uint8_t * buf = malloc(n);
    if (!buf) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory for the checkpoint", path);
    memcpy(buf, &hd, sizeof(hd));
    enum oscar_status st = oscar_stats_save(s, buf + sizeof(hd), hd.stats_size);
    if (st == OSCAR_OK) st = osc_write_file_atomic(path, buf, n);
    free(buf);
    return st;
}

// What the checkpoint's sums were made of must be what this run feeds them.
static enum oscar_status check_source(const char * path, const struct ckpt_header * hd, const struct ckpt_header * now) {
    if (hd->n_layer != now->n_layer || hd->n_head != now->n_head || hd->n_head_kv != now->n_head_kv ||
        hd->head_dim != now->head_dim || hd->n_embd != now->n_embd)
        return osc_error(OSCAR_ERR_INVALID,
                         "%s: checkpoint was made for model %s with %d layers, %d heads, %d KV heads, head_dim %d, "
                         "n_embd %d; --model %s has %d layers, %d heads, %d KV heads, head_dim %d, n_embd %d",
                         path, hd->model, (int) hd->n_layer, (int) hd->n_head, (int) hd->n_head_kv,
                         (int) hd->head_dim, (int) hd->n_embd, now->model, (int) now->n_layer, (int) now->n_head,
                         (int) now->n_head_kv, (int) now->head_dim, (int) now->n_embd);
    if (strcmp(hd->model_sha256, now->model_sha256) != 0)
        return osc_error(OSCAR_ERR_INVALID, "%s: checkpoint was made with model %s (sha256 %.16s...); --model %s has "
                         "sha256 %.16s...", path, hd->model, hd->model_sha256, now->model, now->model_sha256);
    if (hd->tokenizer_hash != now->tokenizer_hash)
        return osc_error(OSCAR_ERR_INVALID, "%s: checkpoint was made with tokenizer %016llx; --model's is %016llx",
                         path, (unsigned long long) hd->tokenizer_hash, (unsigned long long) now->tokenizer_hash);
    if (strcmp(hd->corpus_sha256, now->corpus_sha256) != 0)
        return osc_error(OSCAR_ERR_INVALID, "%s: checkpoint was made on corpus %s (sha256 %.16s...); --corpus %s has "
                         "sha256 %.16s...", path, hd->corpus, hd->corpus_sha256, now->corpus, now->corpus_sha256);
    if (hd->n_seq != now->n_seq || hd->n_tokens != now->n_tokens || hd->seq_len != now->seq_len ||
        hd->batch != now->batch || hd->kinds != now->kinds || hd->capture_bf16 != now->capture_bf16)
        return osc_error(OSCAR_ERR_INVALID,
                         "%s: checkpoint was made with a different plan (tokens %lld seq-len %d batch %d kinds %u "
                         "capture %s; now %lld %d %d %u %s)",
                         path, (long long) hd->n_tokens, (int) hd->seq_len, (int) hd->batch, hd->kinds,
                         hd->capture_bf16 ? "bf16" : "fp32", (long long) now->n_tokens, (int) now->seq_len,
                         (int) now->batch, now->kinds, now->capture_bf16 ? "bf16" : "fp32");
    return OSCAR_OK;
}

// The statistics' own shape sizes their buffers: it must be the model's, whatever the header says.
static enum oscar_status check_stats_shape(const char * path, const struct oscar_stats * s, const struct ckpt_header * now) {
    struct oscar_stats_params sp = oscar_stats_get_params(s);
    if (sp.n_layer != now->n_layer || sp.n_head != now->n_head || sp.n_head_kv != now->n_head_kv ||
        sp.head_dim != now->head_dim || sp.kinds != now->kinds)
        return osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint statistics are for %d layers, %d heads, %d KV heads, "
                         "head_dim %d, kinds %u, not the model's (corrupt file)", path, (int) sp.n_layer,
                         (int) sp.n_head, (int) sp.n_head_kv, (int) sp.head_dim, sp.kinds);
    return OSCAR_OK;
}

static enum oscar_status load_ckpt(const char * path, const struct oscar_model * m, const struct oscar_calib_plan * plan,
                                   const struct oscar_calib_params * p, struct oscar_stats ** out, uint32_t * pass,
                                   int32_t * next_seq) {
    struct osc_mapped_file mf;
    enum oscar_status st = osc_map_file(path, &mf);
    if (st != OSCAR_OK) return st;
    struct ckpt_header hd, now;
    fill_header(&now, m, plan, p, 0, 0);
    if (mf.size < 8 || memcmp(mf.data, CKPT_MAGIC, 8) != 0) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: not an oscar-calibrate checkpoint (bad magic)", path);
        goto out;
    }
    if (mf.size < sizeof hd) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint truncated (%zu bytes)", path, mf.size);
        goto out;
    }
    memcpy(&hd, mf.data, sizeof hd);
    if (hd.version != CKPT_VERSION) {
        st = osc_error(OSCAR_ERR_UNSUPPORTED, "%s: checkpoint format version %u, this oscar-calibrate reads %u; "
                       "remove it to start over", path, (unsigned) hd.version, CKPT_VERSION);
        goto out;
    }
    // the names are only printed, but never past their arrays
    hd.model_sha256[sizeof hd.model_sha256 - 1] = hd.corpus_sha256[sizeof hd.corpus_sha256 - 1] = '\0';
    hd.model[sizeof hd.model - 1] = hd.corpus[sizeof hd.corpus - 1] = '\0';
    if ((st = check_source(path, &hd, &now)) != OSCAR_OK) goto out;
    if ((hd.pass != 1 && hd.pass != 2) || hd.next_seq < 0 || hd.next_seq > hd.n_seq ||
        hd.stats_size != mf.size - sizeof(hd)) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint header corrupted", path);
        goto out;
    }
    if ((st = oscar_stats_load(mf.data + sizeof(hd), hd.stats_size, p->n_threads, p->batch * p->seq_len, out)) !=
        OSCAR_OK) {
        st = osc_error_prefix(st, "%s", path);
        goto out;
    }
    if ((st = check_stats_shape(path, *out, &now)) != OSCAR_OK ||
        (oscar_stats_phase(*out) != (int32_t) hd.pass &&
         (st = osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint of pass %u holds statistics of phase %d (corrupt file)",
                         path, (unsigned) hd.pass, (int) oscar_stats_phase(*out))))) {
        oscar_stats_free(*out);
        *out = NULL;
        goto out;
    }
    *pass = hd.pass;
    *next_seq = hd.next_seq;
out:
    osc_unmap_file(&mf);
    return st;
}

// ---- accumulation ---------------------------------------------------------------------------
static enum oscar_status run_pass(struct oscar_forward * f, const struct oscar_model * m, struct hook_ctx * hc,
                                  const struct oscar_calib_plan * plan,
                                  const struct oscar_calib_params * p, uint32_t pass, int32_t first_seq,
                                  int32_t * sbuf, struct oscar_calib_timing * t) {
    struct osc_progress pr;
    char label[32];
    snprintf(label, sizeof(label), "pass %u", pass);
    osc_progress_init(&pr, label, "tok", plan->n_tokens);
    int64_t since = 0;
    enum oscar_status st = OSCAR_OK;
    for (int32_t s0 = first_seq; s0 < plan->n_seq; s0 += p->batch) {
        int32_t s1 = s0 + p->batch < plan->n_seq ? s0 + p->batch : plan->n_seq;
        double t0 = osc_now(), a0 = hc->t_accum, w0 = hc->t_store;
        if ((st = run_batch(f, plan->tokens, plan->seq_start, s0, s1, sbuf)) != OSCAR_OK) return st;
        int64_t nt = plan->seq_start[s1] - plan->seq_start[s0];
        t->forward += osc_now() - t0 - (hc->t_accum - a0) - (hc->t_store - w0);
        t->tokens_forwarded += nt;
        since += nt;
        osc_progress_update(&pr, plan->seq_start[s1]);
        if (p->checkpoint_path && p->checkpoint_every > 0 && since >= p->checkpoint_every && s1 < plan->n_seq) {
            struct ckpt_header hd;
            fill_header(&hd, m, plan, p, pass, s1);
            if ((st = save_ckpt(p->checkpoint_path, hc->stats, &hd)) != OSCAR_OK) return st;
            since = 0;
        }
    }
    osc_progress_finish(&pr);
    double t0 = osc_now();
    st = oscar_stats_end_pass(hc->stats);
    t->accumulate += osc_now() - t0;
    if (st == OSCAR_OK && p->checkpoint_path && p->checkpoint_every > 0 && pass == 1 &&
        oscar_stats_phase(hc->stats) == 2) {
        struct ckpt_header hd;
        fill_header(&hd, m, plan, p, 2, 0);
        st = save_ckpt(p->checkpoint_path, hc->stats, &hd);
    }
    return st;
}

enum oscar_status oscar_calib_accumulate(const struct oscar_model * m, const struct oscar_calib_plan * plan,
                                         const struct oscar_calib_params * p, struct oscar_stats ** out,
                                         struct oscar_calib_timing * t) {
    const struct oscar_model_config * c = &m->config;
    struct oscar_stats * s = NULL;
    struct oscar_forward * f = NULL;
    int32_t * sbuf = malloc(((size_t) p->batch + 1) * sizeof(int32_t));
    enum oscar_status st = OSCAR_ERR_NOMEM;
    uint32_t pass = 1;
    int32_t next_seq = 0;
    struct hook_ctx hc = {0};
    *out = NULL;
    if (!sbuf || !hook_bufs(&hc, p, c)) goto out;
    if (p->resume && p->checkpoint_path && access(p->checkpoint_path, F_OK) == 0) {
        if ((st = load_ckpt(p->checkpoint_path, m, plan, p, &s, &pass, &next_seq)) != OSCAR_OK) goto out;
        osc_info("resuming pass %u at sequence %d/%d from %s", pass, (int) next_seq, (int) plan->n_seq,
                 p->checkpoint_path);
    } else {
        struct oscar_stats_params sp = oscar_stats_default_params();
        sp.n_layer = c->n_layer;
        sp.n_head = c->n_head;
        sp.n_head_kv = c->n_head_kv;
        sp.head_dim = c->head_dim;
        sp.kinds = stats_kinds(p);
        sp.n_threads = p->n_threads;
        sp.max_tokens = p->batch * p->seq_len;
        if ((st = oscar_stats_init(&sp, &s)) != OSCAR_OK) goto out;
    }
    hc.stats = s;
    hc.store = pass == 1 && next_seq == 0 ? p->act_out : NULL;   // pass-1 rows only, from the start
    hc.store_set = OSCAR_ACT_CALIB;
    if (p->act_out && !hc.store) {
        st = osc_error(OSCAR_ERR_INVALID, "--save-activations needs pass 1 from the start (not a resumed run)");
        goto out;
    }
    struct oscar_capture_hook hook = {.want = NULL, .on_layer = on_layer, .user = &hc};
    struct oscar_forward_params fp = fwd_params(p, &hook);
    if ((st = oscar_forward_init(m, &fp, &f)) != OSCAR_OK) goto out;
    if (pass == 1) {
        if ((st = run_pass(f, m, &hc, plan, p, 1, next_seq, sbuf, t)) != OSCAR_OK) goto out;
        next_seq = 0;
    }
    hc.store = NULL;
    if (oscar_stats_phase(s) == 2 && (st = run_pass(f, m, &hc, plan, p, 2, next_seq, sbuf, t)) != OSCAR_OK) goto out;
    t->accumulate += hc.t_accum;
    t->store += hc.t_store;
    *out = s;
    s = NULL;
    st = OSCAR_OK;
out:
    if (st == OSCAR_ERR_NOMEM && !sbuf) osc_error(OSCAR_ERR_NOMEM, "out of memory");
    oscar_forward_free(f);
    oscar_stats_free(s);
    free(sbuf);
    hook_free(&hc);
    return st;
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
    h->n_embd = c->n_embd;
    h->n_seq = nh;
    h->seq_start = offsets(lens, nh);
    size_t L = (size_t) c->n_layer, D = (size_t) c->head_dim;
    h->q = calloc(L, sizeof(float *)), h->k = calloc(L, sizeof(float *)), h->v = calloc(L, sizeof(float *));
    h->wo = calloc(L, sizeof(float *));
    if (!h->seq_start || !h->q || !h->k || !h->v || !h->wo) goto nomem;
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
                                                    const struct oscar_calib_params * p, struct oscar_stats ** out,
                                                    struct oscar_calib_timing * t) {
    const struct oscar_actstore_info * in = oscar_actstore_get_info(s);
    struct oscar_stats_params sp = oscar_stats_default_params();
    sp.n_layer = in->n_layer, sp.n_head = in->n_head, sp.n_head_kv = in->n_head_kv, sp.head_dim = in->head_dim;
    sp.kinds = stats_kinds(p);
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
                                               .q = q, .k = k, .v = v};
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
