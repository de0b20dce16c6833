// layer-ckpt.c - checkpoints of the layer-major calibration pass, taken
// between layers (--checkpoint-every, --resume).
//
// File (native little-endian, written atomically): struct ckpt_header
// (version 4), then the lib/stats checkpoint bytes, the hidden states
// [n_rows, C] f32 entering layer next_layer, and the held-out rows q, k, v of
// layers 0 .. next_layer-1. The header holds the plan (tokens, sequences,
// seq_len, batch, stats kinds, capture dtype, the backend and its precision) and
// what the sums were made of:
// the model's attention shape, the model's sha256 (the one the artifact
// records), the tokenizer hash and the corpus sha256. A resume refuses a
// checkpoint that differs in any of them, naming it; every size is computed
// from the model and the plan, never taken from the file, and must match it
// exactly. Resuming at a layer boundary replays exactly the batches of an
// uninterrupted run, so the artifact is the same byte for byte.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate/layer-ckpt.h"
#include "util/fs.h"

#define CKPT_MAGIC "OSCCALCK"
#define CKPT_VERSION 4u

struct ckpt_header {
    char     magic[8];
    uint32_t version;
    int32_t  next_layer;
    int32_t  n_seq, n_heldout;
    int64_t  n_tokens, n_rows, n_held_rows;
    int32_t  seq_len, batch;
    uint32_t kinds, capture_bf16;
    int32_t  n_layer, n_head, n_head_kv, head_dim, n_embd;
    uint32_t fp32;             // the backend's precision (cuda)
    char     device[16];       // the backend that made the sums
    uint64_t tokenizer_hash;
    uint64_t stats_size;
    char     model_sha256[72]; // NUL-terminated hex (or empty)
    char     corpus_sha256[72];
    char     model[512];       // names, for the messages only
    char     corpus[256];
};

static void fill_header(struct ckpt_header * hd, const struct osc_layer_ckpt * k, int32_t next_layer) {
    const struct oscar_model_config * c = &k->m->config;
    const struct oscar_calib_plan * plan = k->plan;
    memset(hd, 0, sizeof *hd);
    memcpy(hd->magic, CKPT_MAGIC, 8);
    hd->version = CKPT_VERSION;
    hd->next_layer = next_layer;
    hd->n_seq = plan->n_seq, hd->n_heldout = plan->n_heldout;
    hd->n_tokens = plan->n_tokens, hd->n_rows = k->n_rows, hd->n_held_rows = k->held->n_rows;
    hd->seq_len = k->p->seq_len, hd->batch = k->p->batch;
    hd->kinds = k->kinds, hd->capture_bf16 = k->p->capture_bf16, hd->fp32 = k->fp32;
    snprintf(hd->device, sizeof hd->device, "%s", k->device ? k->device : "cpu");
    hd->n_layer = c->n_layer, hd->n_head = c->n_head, hd->n_head_kv = c->n_head_kv;
    hd->head_dim = c->head_dim, hd->n_embd = c->n_embd;
    snprintf(hd->model_sha256, sizeof hd->model_sha256, "%s", k->m->source_sha256);
    snprintf(hd->model, sizeof hd->model, "%s", c->name[0] ? c->name : k->m->source);
    if (plan->corpus) {
        hd->tokenizer_hash = plan->corpus->tokenizer_hash;
        snprintf(hd->corpus_sha256, sizeof hd->corpus_sha256, "%s", plan->corpus->sha256);
        snprintf(hd->corpus, sizeof hd->corpus, "%s", plan->corpus->name);
    }
}

static size_t x_bytes(const struct osc_layer_ckpt * k) {
    return (size_t) k->n_rows * (size_t) k->m->config.n_embd * sizeof(float);
}

// Bytes of one layer's held-out q, k and v.
static size_t held_layer_bytes(const struct oscar_calib_heldout * h) {
    return (size_t) h->n_rows * (size_t) (h->n_head + 2 * h->n_head_kv) * (size_t) h->head_dim * sizeof(float);
}

enum oscar_status osc_layer_ckpt_save(const struct osc_layer_ckpt * k, const struct oscar_stats * s,
                                      int32_t next_layer) {
    struct ckpt_header hd;
    fill_header(&hd, k, next_layer);
    hd.stats_size = oscar_stats_checkpoint_size(s);
    void * sb = malloc(hd.stats_size);
    if (!sb) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory for the checkpoint", k->path);
    enum oscar_status st = oscar_stats_save(s, sb, hd.stats_size);
    struct osc_atomic_file f;
    if (st == OSCAR_OK) st = osc_atomic_open(&f, k->path);
    if (st != OSCAR_OK) {
        free(sb);
        return st;
    }
    const struct oscar_calib_heldout * h = k->held;
    const size_t T = (size_t) h->n_rows, D = (size_t) h->head_dim;
    bool ok = fwrite(&hd, sizeof hd, 1, f.fp) == 1 && fwrite(sb, 1, hd.stats_size, f.fp) == hd.stats_size &&
              fwrite(k->x, 1, x_bytes(k), f.fp) == x_bytes(k);
    for (int32_t l = 0; ok && l < next_layer; l++) {
        ok = fwrite(h->q[l], sizeof(float), T * (size_t) h->n_head * D, f.fp) == T * (size_t) h->n_head * D &&
             fwrite(h->k[l], sizeof(float), T * (size_t) h->n_head_kv * D, f.fp) == T * (size_t) h->n_head_kv * D &&
             fwrite(h->v[l], sizeof(float), T * (size_t) h->n_head_kv * D, f.fp) == T * (size_t) h->n_head_kv * D;
    }
    free(sb);
    if (!ok) {
        osc_atomic_abort(&f);
        return osc_error(OSCAR_ERR_IO, "%s: writing the checkpoint failed (disk full?)", k->path);
    }
    return osc_atomic_commit(&f);
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
    if (hd->n_seq != now->n_seq || hd->n_heldout != now->n_heldout || hd->n_tokens != now->n_tokens ||
        hd->seq_len != now->seq_len || hd->batch != now->batch || hd->kinds != now->kinds ||
        hd->capture_bf16 != now->capture_bf16 || hd->n_rows != now->n_rows || hd->n_held_rows != now->n_held_rows)
        return osc_error(OSCAR_ERR_INVALID,
                         "%s: checkpoint was made with a different plan (tokens %lld seq-len %d batch %d held-out %d "
                         "kinds %u capture %s; now %lld %d %d %d %u %s)",
                         path, (long long) hd->n_tokens, (int) hd->seq_len, (int) hd->batch, (int) hd->n_heldout,
                         hd->kinds, hd->capture_bf16 ? "bf16" : "fp32", (long long) now->n_tokens, (int) now->seq_len,
                         (int) now->batch, (int) now->n_heldout, now->kinds, now->capture_bf16 ? "bf16" : "fp32");
    if (strncmp(hd->device, now->device, sizeof hd->device) != 0 || hd->fp32 != now->fp32)
        return osc_error(OSCAR_ERR_INVALID, "%s: checkpoint was made on --device %.16s%s; this run uses %.16s%s (the "
                         "sums of one backend do not continue on another)", path, hd->device,
                         hd->fp32 ? " (fp32)" : "", now->device, now->fp32 ? " (fp32)" : "");
    return OSCAR_OK;
}

// The statistics' own shape sizes their buffers: it must be the model's, whatever the header says.
static enum oscar_status check_stats_shape(const char * path, const struct oscar_stats * s,
                                           const struct ckpt_header * now, int32_t next_layer) {
    struct oscar_stats_params sp = oscar_stats_get_params(s);
    if (sp.n_layer != now->n_layer || sp.n_head != now->n_head || sp.n_head_kv != now->n_head_kv ||
        sp.head_dim != now->head_dim || sp.kinds != now->kinds)
        return osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint statistics are for %d layers, %d heads, %d KV heads, "
                         "head_dim %d, kinds %u, not the model's (corrupt file)", path, (int) sp.n_layer,
                         (int) sp.n_head, (int) sp.n_head_kv, (int) sp.head_dim, sp.kinds);
    for (int32_t l = 0; l < sp.n_layer; l++)
        if ((oscar_stats_layer_phase(s, l) == 3) != (l < next_layer))
            return osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint statistics of layer %d do not match its next layer %d "
                             "(corrupt file)", path, (int) l, (int) next_layer);
    return OSCAR_OK;
}

enum oscar_status osc_layer_ckpt_load(const struct osc_layer_ckpt * k, struct oscar_stats ** stats,
                                      int32_t * next_layer) {
    struct osc_mapped_file mf;
    enum oscar_status st = osc_map_file(k->path, &mf);
    if (st != OSCAR_OK) return st;
    struct ckpt_header hd, now;
    struct oscar_stats * s = NULL;
    fill_header(&now, k, 0);
    if (mf.size < 12 || memcmp(mf.data, CKPT_MAGIC, 8) != 0) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: not an oscar-calibrate checkpoint (bad magic)", k->path);
        goto out;
    }
    uint32_t version;
    memcpy(&version, (const uint8_t *) mf.data + 8, sizeof version);
    if (version != CKPT_VERSION) {
        st = osc_error(OSCAR_ERR_UNSUPPORTED, "%s: checkpoint version %u, this build resumes version %u (start afresh)",
                       k->path, (unsigned) version, CKPT_VERSION);
        goto out;
    }
    if (mf.size < sizeof hd) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint truncated (%zu bytes)", k->path, mf.size);
        goto out;
    }
    memcpy(&hd, mf.data, sizeof hd);
    hd.model[sizeof hd.model - 1] = hd.corpus[sizeof hd.corpus - 1] = '\0';
    hd.model_sha256[sizeof hd.model_sha256 - 1] = hd.corpus_sha256[sizeof hd.corpus_sha256 - 1] = '\0';
    if ((st = check_source(k->path, &hd, &now)) != OSCAR_OK) goto out;
    if (hd.next_layer < 1 || hd.next_layer >= now.n_layer) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint resumes at layer %d of %d (corrupt file)", k->path,
                       (int) hd.next_layer, (int) now.n_layer);
        goto out;
    }
    const size_t held = (size_t) hd.next_layer * held_layer_bytes(k->held);
    if (hd.stats_size > mf.size - sizeof hd || mf.size - sizeof hd - hd.stats_size != x_bytes(k) + held) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint of %zu bytes, its model and plan need %zu + statistics "
                       "(truncated or corrupt)", k->path, mf.size, sizeof hd + x_bytes(k) + held);
        goto out;
    }
    const uint8_t * at = (const uint8_t *) mf.data + sizeof hd;
    if ((st = oscar_stats_load(at, hd.stats_size, k->p->n_threads, k->p->batch * k->p->seq_len, &s)) != OSCAR_OK) {
        st = osc_error_prefix(st, "%s", k->path);
        goto out;
    }
    if ((st = check_stats_shape(k->path, s, &now, hd.next_layer)) != OSCAR_OK) goto out;
    at += hd.stats_size;
    memcpy(k->x, at, x_bytes(k));
    at += x_bytes(k);
    const struct oscar_calib_heldout * h = k->held;
    const size_t T = (size_t) h->n_rows, D = (size_t) h->head_dim;
    for (int32_t l = 0; l < hd.next_layer; l++) {
        const size_t nq = T * (size_t) h->n_head * D * sizeof(float), nkv = T * (size_t) h->n_head_kv * D * sizeof(float);
        memcpy(h->q[l], at, nq), at += nq;
        memcpy(h->k[l], at, nkv), at += nkv;
        memcpy(h->v[l], at, nkv), at += nkv;
    }
    *stats = s;
    s = NULL;
    *next_layer = hd.next_layer;
out:
    oscar_stats_free(s);
    osc_unmap_file(&mf);
    return st;
}
