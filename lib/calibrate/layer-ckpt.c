// layer-ckpt.c - checkpoints of the layer-major calibration pass, taken
// between layers (--checkpoint-every, --resume).
//
// File (native little-endian, written atomically): struct ckpt_header
// (version 7), then the lib/stats checkpoint bytes, the hidden states
// [n_rows, C] f32 entering layer next_layer, the held-out rows q, k, v of
// layers 0 .. next_layer-1 when every layer's rows are kept (no finisher, or
// one whose gate waits for a model-wide clip), and with a finisher the finished
// layers' results: every array of result_table below, layers 0 .. next_layer-1
// each, in the table's order. CRC-32s in the header cover the hidden states and held-out rows
// (states_crc), the results (results_crc) and the header itself (header_crc, taken with that
// field zero; lib/stats has its own); a flipped byte anywhere is refused, and so is a
// hidden state or held-out value that is not finite (no forward pass hands one on). The header holds the plan (tokens, sequences,
// seq_len, batch, stats kinds, capture dtype, the backend and its precision) and
// what the sums were made of:
// the model's attention shape, the model's sha256 (the one the artifact
// records), the tokenizer hash and the corpus sha256, and the settings the
// results depend on (finish_params). Text fields are NUL-padded: a byte after
// the NUL that is not zero is a corrupt header. A resume refuses a
// checkpoint that differs in any of them, naming it; every size is computed
// from the model and the plan, never taken from the file, and must match it
// exactly. Resuming at a layer boundary replays exactly the batches of an
// uninterrupted run, so the artifact is the same byte for byte.
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "calibrate/layer-ckpt.h"
#include "util/fs.h"

#define CKPT_MAGIC "OSCCALCK"
#define CKPT_VERSION 7u

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
    // v5: the finisher's results
    uint32_t finish;           // 1: a finisher ran and its results follow; 0: none
    uint32_t held_layers;      // layers of held-out rows that follow: next_layer, or 0 (one slot)
    double   orth_err_max;     // the fit's so far
    uint64_t results_size;
    uint32_t results_crc;      // CRC-32 of the results bytes
    uint32_t states_crc;       // v6: CRC-32 of the hidden states and held-out rows
    char     finish_params[512]; // the settings the results depend on
    uint32_t header_crc;       // v6: CRC-32 of this header with this field zero
    uint32_t reserved;         // zero
};
_Static_assert(sizeof(struct ckpt_header) == 1584, "layer checkpoint header layout (no padding)");
_Static_assert(offsetof(struct ckpt_header, header_crc) == 1576, "layer checkpoint header layout");

static uint32_t header_crc(const struct ckpt_header * hd) {
    struct ckpt_header c = *hd;
    c.header_crc = 0;
    return (uint32_t) crc32_z(crc32_z(0, NULL, 0), (const Bytef *) &c, sizeof c);
}

// The finished layers' result arrays: where each is and its bytes per layer.
struct result_array {
    const char * name;
    void *       base;
    size_t       per_layer;
};
#define MAX_RESULT_ARRAYS 40

static int32_t result_table(const struct oscar_calib_finisher * fin, struct result_array * out) {
    int32_t n = 0;
    const struct oscar_calib_fit * f = &fin->fit;
    const struct oscar_rotations * rot = &f->rot;
    const size_t D = (size_t) rot->head_dim, R = (size_t) rot->n_rot, Hkv = (size_t) fin->n_head_kv;
#define ADD(nm, ptr, bytes) do { if (ptr) out[n++] = (struct result_array){nm, (void *) (ptr), (bytes)}; } while (0)
    ADD("fit k_rot", rot->k, R * D * D * sizeof(float));
    ADD("fit v_rot", rot->v, R * D * D * sizeof(float));
    ADD("fit k_eig", rot->k_eig, R * D * sizeof(float));
    ADD("fit v_eig", rot->v_eig, R * D * sizeof(float));
    ADD("fit k_mean", rot->k_mean, Hkv * D * sizeof(float));
    ADD("fit chosen_head", rot->head_layer, sizeof(int32_t));   // v7: --rotation-grouping auto's choice
    ADD("fit err_layer", f->err_layer, sizeof(double)); ADD("fit err_head", f->err_head, sizeof(double));
    const struct oscar_calib_signs * g = &fin->signs;
    const size_t NS = (size_t) g->n_rot * D;
    ADD("signs k_sign", g->k_sign, NS); ADD("signs v_sign", g->v_sign, NS);
    ADD("signs k_before", g->k_before, sizeof(double)); ADD("signs k_after", g->k_after, sizeof(double));
    ADD("signs v_before", g->v_before, sizeof(double)); ADD("signs v_after", g->v_after, sizeof(double));
    ADD("signs k_flips", g->k_flips, sizeof(int32_t)); ADD("signs v_flips", g->v_flips, sizeof(int32_t));
    ADD("signs evals", g->evals, sizeof(int32_t));
    const struct oscar_calib_refine * r = &fin->refine;
    ADD("refine k_kept", r->k_kept, sizeof(int32_t)); ADD("refine v_kept", r->v_kept, sizeof(int32_t));
    ADD("refine k_base", r->k_base, sizeof(double)); ADD("refine k_best", r->k_best, sizeof(double));
    ADD("refine v_base", r->v_base, sizeof(double)); ADD("refine v_best", r->v_best, sizeof(double));
    const struct oscar_calib_clip * c = &fin->clip;
    const size_t NC = (size_t) c->n_clip;   // the fit's clips are as wide as the search's record
    ADD("clip k", rot->k_clip, NC * sizeof(float)); ADD("clip v", rot->v_clip, NC * sizeof(float));
    ADD("clip k_err", c->k_err, NC * sizeof(double)); ADD("clip v_err", c->v_err, NC * sizeof(double));
    ADD("clip k_err1", c->k_err1, NC * sizeof(double)); ADD("clip v_err1", c->v_err1, NC * sizeof(double));
    ADD("clip grid_k", c->grid_k, (size_t) c->n_grid * sizeof(double));
    ADD("clip grid_v", c->grid_v, (size_t) c->n_grid * sizeof(double));
    const struct oscar_calib_gate * q = &fin->gate;
    ADD("gate naive", q->naive, sizeof(double)); ADD("gate hadamard", q->hadamard, sizeof(double));
    ADD("gate oscar", q->oscar, sizeof(double));
#undef ADD
    return n;
}

static size_t results_bytes(const struct osc_layer_ckpt * k, int32_t next_layer) {
    if (!k->fin) return 0;
    struct result_array t[MAX_RESULT_ARRAYS];
    size_t per = 0;
    for (int32_t i = 0, n = result_table(k->fin, t); i < n; i++) per += t[i].per_layer;
    return per * (size_t) next_layer;
}

// The settings a finished layer's results depend on, as text (grid as a hash).
static void finish_params(const struct oscar_calib_params * p, char * out, size_t n) {
    uint64_t gh = 1469598103934665603ull;   // FNV-1a of the grid's doubles
    for (int32_t i = 0; i < p->n_grid; i++) {
        const unsigned char * b = (const unsigned char *) &p->grid[i];
        for (size_t j = 0; j < sizeof(double); j++) gh = (gh ^ b[j]) * 1099511628211ull;
    }
    snprintf(out, n, "grouping %d composition %s k %d v %d group %d scale %d sink %d recent %d clips %s %.17g %.17g "
             "grid %d/%016llx target %s signs %d/%d optr %d eval %s", (int) p->grouping,
             oscar_composition_name(p->composition), (int) p->k_objective, (int) p->v_objective, (int) p->group_size,
             (int) p->scale_dtype, (int) p->sink, (int) p->recent, p->clip_search ? "searched" : "fixed", p->k_clip,
             p->v_clip, (int) p->n_grid, (unsigned long long) gh, oscar_target_get(p->target)->name,
             (int) p->sign_search, (int) p->sign_passes, (int) p->refine_optr,
             p->eval_device ? p->eval_device : "cpu");
    const size_t used = strlen(out);
    if (p->refine_optr && used < n)   // OptR's settings change its layers' results
        snprintf(out + used, n - used, " optr steps %d train %d center %d", (int) p->optr_steps,
                 (int) p->optr_train_seq, (int) p->optr_center);
}

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
    hd->finish = k->fin != NULL;
    hd->held_layers = k->held->n_slot == 1 ? 0 : (uint32_t) next_layer;
    if (k->fin) finish_params(k->p, hd->finish_params, sizeof hd->finish_params);
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
    struct result_array tab[MAX_RESULT_ARRAYS];
    const int32_t n_tab = k->fin ? result_table(k->fin, tab) : 0;
    hd.results_size = results_bytes(k, next_layer);
    if (k->fin) hd.orth_err_max = k->fin->fit.orth_err_max;
    uLong crc = crc32_z(0, NULL, 0);
    for (int32_t i = 0; i < n_tab; i++)
        crc = crc32_z(crc, (const Bytef *) tab[i].base, tab[i].per_layer * (size_t) next_layer);
    hd.results_crc = (uint32_t) crc;
    crc = crc32_z(crc32_z(0, NULL, 0), (const Bytef *) k->x, x_bytes(k));
    for (int32_t l = 0; l < (int32_t) hd.held_layers; l++) {
        crc = crc32_z(crc, (const Bytef *) h->q[l], T * (size_t) h->n_head * D * sizeof(float));
        crc = crc32_z(crc, (const Bytef *) h->k[l], T * (size_t) h->n_head_kv * D * sizeof(float));
        crc = crc32_z(crc, (const Bytef *) h->v[l], T * (size_t) h->n_head_kv * D * sizeof(float));
    }
    hd.states_crc = (uint32_t) crc;
    hd.header_crc = header_crc(&hd);
    bool ok = fwrite(&hd, sizeof hd, 1, f.fp) == 1 && fwrite(sb, 1, hd.stats_size, f.fp) == hd.stats_size &&
              fwrite(k->x, 1, x_bytes(k), f.fp) == x_bytes(k);
    for (int32_t l = 0; ok && l < (int32_t) hd.held_layers; l++) {
        ok = fwrite(h->q[l], sizeof(float), T * (size_t) h->n_head * D, f.fp) == T * (size_t) h->n_head * D &&
             fwrite(h->k[l], sizeof(float), T * (size_t) h->n_head_kv * D, f.fp) == T * (size_t) h->n_head_kv * D &&
             fwrite(h->v[l], sizeof(float), T * (size_t) h->n_head_kv * D, f.fp) == T * (size_t) h->n_head_kv * D;
    }
    for (int32_t i = 0; ok && i < n_tab; i++) {
        const size_t n = tab[i].per_layer * (size_t) next_layer;
        ok = fwrite(tab[i].base, 1, n, f.fp) == n;
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
    if (hd->finish != now->finish)
        return osc_error(OSCAR_ERR_INVALID, "%s: checkpoint was made %s finishing layers as they end; this run %s", path,
                         hd->finish ? "with" : "without", now->finish ? "finishes them" : "does not");
    if (strcmp(hd->finish_params, now->finish_params) != 0)
        return osc_error(OSCAR_ERR_INVALID, "%s: checkpoint's finished layers were made with settings '%s'; this run "
                         "has '%s'", path, hd->finish_params, now->finish_params);
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

// A text field: a NUL within it, then zeros only.
static bool nul_padded(const char * f, size_t n) {
    const char * z = memchr(f, '\0', n);
    if (!z) return false;
    for (const char * c = z; c < f + n; c++)
        if (*c) return false;
    return true;
}

// What fill_header leaves zero must be zero (else the bytes would not be their own re-serialisation).
static enum oscar_status check_padding(const char * path, const struct ckpt_header * hd) {
    const struct { const char * name; const char * f; size_t n; } text[] = {
        {"device", hd->device, sizeof hd->device}, {"model_sha256", hd->model_sha256, sizeof hd->model_sha256},
        {"corpus_sha256", hd->corpus_sha256, sizeof hd->corpus_sha256}, {"model", hd->model, sizeof hd->model},
        {"corpus", hd->corpus, sizeof hd->corpus},
        {"finish_params", hd->finish_params, sizeof hd->finish_params},
    };
    for (size_t i = 0; i < sizeof text / sizeof text[0]; i++)
        if (!nul_padded(text[i].f, text[i].n))
            return osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint header field %s is not NUL-padded (corrupt file)", path,
                             text[i].name);
    if (hd->reserved != 0 || hd->finish > 1 || hd->capture_bf16 > 1 || hd->fp32 > 1)
        return osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint header: reserved %u, finish %u, capture_bf16 %u, fp32 %u "
                         "(each 0 or 1, reserved 0: corrupt file)", path, (unsigned) hd->reserved,
                         (unsigned) hd->finish, (unsigned) hd->capture_bf16, (unsigned) hd->fp32);
    return OSCAR_OK;
}

// The index of the first NaN or infinity among the n bytes of floats at b (any alignment), or -1.
static int64_t first_non_finite(const uint8_t * b, size_t n) {
    for (size_t i = 0; i + sizeof(float) <= n; i += sizeof(float)) {
        float v;
        memcpy(&v, b + i, sizeof v);
        if (!isfinite(v)) return (int64_t) (i / sizeof(float));
    }
    return -1;
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
    if (version == 4u) {   // v4 kept every layer's held-out rows and no results: this build needs them
        st = osc_error(OSCAR_ERR_UNSUPPORTED, "%s: checkpoint version 4 (an older oscar-calibrate: no finished layers' "
                       "results in it); this build resumes version %u only: remove it and start afresh", k->path,
                       CKPT_VERSION);
        goto out;
    }
    if (version == 5u) {   // v5 had no CRC over its header and hidden states
        st = osc_error(OSCAR_ERR_UNSUPPORTED, "%s: checkpoint version 5 (an older oscar-calibrate: no CRC over its "
                       "header and hidden states); this build resumes version %u only: remove it and start afresh",
                       k->path, CKPT_VERSION);
        goto out;
    }
    if (version == 6u) {   // v6 had no --rotation-grouping auto choice among its results
        st = osc_error(OSCAR_ERR_UNSUPPORTED, "%s: checkpoint version 6 (an older oscar-calibrate: no rotation-grouping "
                       "choice in its results); this build resumes version %u only: remove it and start afresh",
                       k->path, CKPT_VERSION);
        goto out;
    }
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
    if (header_crc(&hd) != hd.header_crc) {   // before any field of it is trusted
        st = osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint header fails its CRC (corrupt file)", k->path);
        goto out;
    }
    if ((st = check_padding(k->path, &hd)) != OSCAR_OK) goto out;
    if ((st = check_source(k->path, &hd, &now)) != OSCAR_OK) goto out;
    if (hd.next_layer < 1 || hd.next_layer >= now.n_layer) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint resumes at layer %d of %d (corrupt file)", k->path,
                       (int) hd.next_layer, (int) now.n_layer);
        goto out;
    }
    const uint32_t held_layers = k->held->n_slot == 1 ? 0 : (uint32_t) hd.next_layer;
    if (hd.held_layers != held_layers) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint holds the held-out rows of %u layers, its plan %u (corrupt "
                       "file)", k->path, (unsigned) hd.held_layers, (unsigned) held_layers);
        goto out;
    }
    const size_t held = (size_t) held_layers * held_layer_bytes(k->held), res = results_bytes(k, hd.next_layer);
    if (hd.results_size != res) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint results of %llu bytes, its layers need %zu (corrupt file)",
                       k->path, (unsigned long long) hd.results_size, res);
        goto out;
    }
    if (hd.stats_size > mf.size - sizeof hd || mf.size - sizeof hd - hd.stats_size != x_bytes(k) + held + res) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint of %zu bytes, its model and plan need %zu + statistics "
                       "(truncated or corrupt)", k->path, mf.size, sizeof hd + x_bytes(k) + held + res);
        goto out;
    }
    const uint8_t * res_at = (const uint8_t *) mf.data + mf.size - res;
    if ((uint32_t) crc32_z(crc32_z(0, NULL, 0), res_at, res) != hd.results_crc) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint results fail their CRC (corrupt file)", k->path);
        goto out;
    }
    const uint8_t * states_at = (const uint8_t *) mf.data + sizeof hd + hd.stats_size;
    if ((uint32_t) crc32_z(crc32_z(0, NULL, 0), states_at, x_bytes(k) + held) != hd.states_crc) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint hidden states fail their CRC (corrupt file)", k->path);
        goto out;
    }
    const int64_t bad = first_non_finite(states_at, x_bytes(k) + held);
    if (bad >= 0) {   // a forward pass never hands on one (lib/stats refuses a non-finite q)
        const int64_t nx = (int64_t) (x_bytes(k) / sizeof(float));
        st = osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint %s value %lld is not finite (corrupt file)", k->path,
                       bad < nx ? "hidden state" : "held-out row", (long long) (bad < nx ? bad : bad - nx));
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
    for (int32_t l = 0; l < (int32_t) held_layers; l++) {
        const size_t nq = T * (size_t) h->n_head * D * sizeof(float), nkv = T * (size_t) h->n_head_kv * D * sizeof(float);
        memcpy(h->q[l], at, nq), at += nq;
        memcpy(h->k[l], at, nkv), at += nkv;
        memcpy(h->v[l], at, nkv), at += nkv;
    }
    if (k->fin) {
        struct result_array tab[MAX_RESULT_ARRAYS];
        for (int32_t i = 0, n = result_table(k->fin, tab); i < n; i++) {
            const size_t b = tab[i].per_layer * (size_t) hd.next_layer;
            memcpy(tab[i].base, at, b), at += b;
        }
        const int32_t * chosen = k->fin->fit.rot.head_layer;
        for (int32_t l = 0; chosen && l < hd.next_layer; l++)
            if (chosen[l] != 0 && chosen[l] != 1) {
                st = osc_error(OSCAR_ERR_FORMAT, "%s: checkpoint grouping choice %d of layer %d is not 0 or 1 (corrupt "
                               "file)", k->path, (int) chosen[l], (int) l);
                goto out;
            }
        k->fin->fit.orth_err_max = hd.orth_err_max;
        k->fin->n_done = hd.next_layer;
    }
    *stats = s;
    s = NULL;
    *next_layer = hd.next_layer;
out:
    oscar_stats_free(s);
    osc_unmap_file(&mf);
    return st;
}
