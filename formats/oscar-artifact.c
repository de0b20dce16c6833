// oscar-artifact.c - oscar rotation artifact: validation, safetensors I/O,
// oscar.json + README.md, atomic directory replacement (spec: formats/README.md).
// Refuses: missing or extra tensors, shapes that disagree with the metadata,
// non-finite values, clip ratios outside [0, 1], newer format versions.
#include "formats/oscar-artifact.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/oscar-import.h"
#include "formats/safetensors.h"
#include "hub/hub-internal.h"
#include "rotation/fit.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/sha256.h"

const char * const oscar_artifact_required_meta[] = {
    "oscar.k_objective", "oscar.v_objective", "oscar.composition", "oscar.base_model",
    "oscar.base_model_sha256", "oscar.architecture", "oscar.bits", "oscar.group_size",
    "oscar.scale_dtype", "oscar.sink", "oscar.recent", "oscar.clip_mode", "oscar.k_clip_ratio",
    "oscar.v_clip_ratio", "oscar.calib_tag", "oscar.calib_corpus", "oscar.calib_sha256",
    "oscar.calib_tokens", "oscar.tokenizer_hash", "oscar.seed", "oscar.tool", NULL,
};

enum oscar_status oscar_artifact_init(int32_t n_layer, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                                      bool per_head, bool clip_per_head, bool with_k_mean,
                                      struct oscar_artifact ** out) {
    *out = NULL;
    if (n_layer < 1 || n_head < 1 || n_head_kv < 1 || head_dim < 1 || n_head % n_head_kv != 0 ||
        head_dim > 4096 || n_layer > 100000 || n_head_kv > 4096) {
        return osc_error(OSCAR_ERR_INVALID, "artifact: bad shape L=%d Hq=%d Hkv=%d D=%d", (int) n_layer,
                         (int) n_head, (int) n_head_kv, (int) head_dim);
    }
    struct oscar_artifact * a = calloc(1, sizeof(*a));
    if (!a) return osc_error(OSCAR_ERR_NOMEM, "artifact: out of memory");
    a->n_layer = n_layer;
    a->n_head = n_head;
    a->n_head_kv = n_head_kv;
    a->head_dim = head_dim;
    if (oscar_rotations_alloc(&a->rot, n_layer, n_head_kv, head_dim, per_head ? n_head_kv : 1,
                              clip_per_head ? n_head_kv : 1, with_k_mean, false) != OSCAR_OK) {
        oscar_artifact_free(a);
        return osc_error(OSCAR_ERR_NOMEM, "artifact: out of memory (L=%d D=%d)", (int) n_layer, (int) head_dim);
    }
    *out = a;
    return OSCAR_OK;
}

void oscar_artifact_free(struct oscar_artifact * a) {
    if (!a) return;
    oscar_rotations_free(&a->rot);
    for (int32_t i = 0; i < a->n_meta; i++) {
        free(a->meta_keys[i]);
        free(a->meta_values[i]);
    }
    free(a->meta_keys);
    free(a->meta_values);
    free(a->summary_json);
    free(a->card_markdown);
    free(a);
}

enum oscar_status oscar_artifact_set_meta(struct oscar_artifact * a, const char * key, const char * value) {
    for (int32_t i = 0; i < a->n_meta; i++) {
        if (strcmp(a->meta_keys[i], key) == 0) {
            char * v = strdup(value);
            if (!v) return osc_error(OSCAR_ERR_NOMEM, "artifact: out of memory");
            free(a->meta_values[i]);
            a->meta_values[i] = v;
            return OSCAR_OK;
        }
    }
    if (a->n_meta == a->cap_meta) {
        int32_t cap = a->cap_meta ? 2 * a->cap_meta : 32;
        char ** k = realloc(a->meta_keys, (size_t) cap * sizeof(char *));
        if (!k) return osc_error(OSCAR_ERR_NOMEM, "artifact: out of memory");
        a->meta_keys = k;
        char ** v = realloc(a->meta_values, (size_t) cap * sizeof(char *));
        if (!v) return osc_error(OSCAR_ERR_NOMEM, "artifact: out of memory");
        a->meta_values = v;
        a->cap_meta = cap;
    }
    char * k = strdup(key), * v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return osc_error(OSCAR_ERR_NOMEM, "artifact: out of memory");
    }
    a->meta_keys[a->n_meta] = k;
    a->meta_values[a->n_meta] = v;
    a->n_meta++;
    return OSCAR_OK;
}

const char * oscar_artifact_get_meta(const struct oscar_artifact * a, const char * key) {
    for (int32_t i = 0; i < a->n_meta; i++) {
        if (strcmp(a->meta_keys[i], key) == 0) return a->meta_values[i];
    }
    return NULL;
}

enum oscar_status oscar_artifact_set_summary(struct oscar_artifact * a, const char * summary_json,
                                             const char * card_markdown) {
    char * s = summary_json ? strdup(summary_json) : NULL;
    char * c = card_markdown ? strdup(card_markdown) : NULL;
    if ((summary_json && !s) || (card_markdown && !c)) {
        free(s);
        free(c);
        return osc_error(OSCAR_ERR_NOMEM, "artifact: out of memory");
    }
    free(a->summary_json);
    free(a->card_markdown);
    a->summary_json = s;
    a->card_markdown = c;
    return OSCAR_OK;
}

// ---- validation ----------------------------------------------------------------------
static enum oscar_status check_finite(const char * what, int32_t layer, const float * x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) {
            return osc_error(OSCAR_ERR_NUMERIC, "artifact: layers.%d.%s element %zu is not finite", (int) layer,
                             what, i);
        }
    }
    return OSCAR_OK;
}

// Every K and V rotation orthogonal to OSCAR_ARTIFACT_ORTH_TOL; names the first that is not.
// The errors are independent (computed in parallel), the first is found in (layer, head, K/V) order.
static enum oscar_status check_orthogonal(const struct oscar_artifact * a) {
    const int64_t n = (int64_t) a->n_layer * a->rot.n_rot * 2;
    double * err = malloc((size_t) (n > 0 ? n : 1) * sizeof(double));
    if (!err) return osc_error(OSCAR_ERR_NOMEM, "artifact: out of memory for %lld orthogonality checks", (long long) n);
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t i = 0; i < n; i++) {
        const int32_t R = a->rot.n_rot, l = (int32_t) (i / (2 * R)), h = (int32_t) (i / 2 % R), kv = (int32_t) (i % 2);
        const float * r = kv ? oscar_rotations_v(&a->rot, l, h) : oscar_rotations_k(&a->rot, l, h);
        err[i] = oscar_fit_orth_error_f32(a->head_dim, r);
    }
    enum oscar_status st = OSCAR_OK;
    for (int64_t i = 0; i < n && st == OSCAR_OK; i++) {
        if (err[i] <= OSCAR_ARTIFACT_ORTH_TOL) continue;
        const int32_t R = a->rot.n_rot, l = (int32_t) (i / (2 * R)), h = (int32_t) (i / 2 % R), kv = (int32_t) (i % 2);
        char head[32] = "";
        if (a->rot.n_rot > 1) snprintf(head, sizeof head, " (KV head %d)", (int) h);
        st = osc_error(OSCAR_ERR_NUMERIC,
                       "artifact: layers.%d.%c_rotation%s is not orthogonal: max|R·Rᵀ−I| = %.3g > %.3g (8·eps32)",
                       (int) l, kv ? 'v' : 'k', head, err[i], OSCAR_ARTIFACT_ORTH_TOL);
    }
    free(err);
    return st;
}

static enum oscar_status check_meta_int(const struct oscar_artifact * a, const char * key, int32_t want) {
    const char * v = oscar_artifact_get_meta(a, key);
    if (!v) return OSCAR_OK; // the writer sets it; the reader requires it separately
    char * end = NULL;
    long x = strtol(v, &end, 10);
    if (end == v || *end != '\0' || x != want) {
        return osc_error(OSCAR_ERR_FORMAT, "artifact: metadata %s = '%s' but the tensors imply %d", key, v,
                         (int) want);
    }
    return OSCAR_OK;
}

// oscar.grouping_layers (--rotation-grouping auto): one "layer" or "kv_head" per layer. A layer-
// grouped layer of per-head tensors holds its one rotation in every head (unless OptR then refined
// each head: oscar.refine), and per-layer tensors cannot carry a "kv_head" layer.
static enum oscar_status check_grouping_layers(const struct oscar_artifact * a) {
    const char * v = oscar_artifact_get_meta(a, "oscar.grouping_layers");
    if (!v) return OSCAR_OK;
    const bool refined = oscar_artifact_get_meta(a, "oscar.refine") != NULL;
    const size_t DD = (size_t) a->head_dim * (size_t) a->head_dim;
    const char * c = v;
    for (int32_t l = 0; l < a->n_layer; l++) {
        const bool head = strncmp(c, "kv_head", 7) == 0, layer = strncmp(c, "layer", 5) == 0;
        const char * end = c + (head ? 7 : layer ? 5 : 0);
        if ((!head && !layer) || (l + 1 < a->n_layer ? *end != ',' : *end != '\0'))
            return osc_error(OSCAR_ERR_FORMAT, "artifact: oscar.grouping_layers must list 'layer' or 'kv_head' for "
                             "each of the %d layers (entry %d of '%.64s' is not)", (int) a->n_layer, (int) l, v);
        if (head && a->rot.n_rot == 1)
            return osc_error(OSCAR_ERR_FORMAT, "artifact: oscar.grouping_layers says layer %d is per KV head but the "
                             "rotations are [D,D] per layer", (int) l);
        for (int32_t h = 1; layer && !refined && h < a->rot.n_rot; h++) {
            if (memcmp(oscar_rotations_k(&a->rot, l, h), oscar_rotations_k(&a->rot, l, 0), DD * sizeof(float)) ||
                memcmp(oscar_rotations_v(&a->rot, l, h), oscar_rotations_v(&a->rot, l, 0), DD * sizeof(float)))
                return osc_error(OSCAR_ERR_FORMAT, "artifact: oscar.grouping_layers says layer %d has one rotation "
                                 "but its KV head %d differs from head 0", (int) l, (int) h);
        }
        c = end + 1;
    }
    return OSCAR_OK;
}

enum oscar_status oscar_artifact_validate(const struct oscar_artifact * a, bool check_orth) {
    enum oscar_status st = OSCAR_OK;
    const struct oscar_rotations * r = &a->rot;
    size_t D = (size_t) a->head_dim, R = (size_t) r->n_rot;
    for (const char * const * k = oscar_artifact_required_meta; *k; k++) {
        if (!oscar_artifact_get_meta(a, *k)) return osc_error(OSCAR_ERR_FORMAT, "artifact: metadata %s missing", *k);
    }
    if ((st = check_meta_int(a, "oscar.num_layers", a->n_layer)) != OSCAR_OK) return st;
    if ((st = check_meta_int(a, "oscar.num_heads", a->n_head)) != OSCAR_OK) return st;
    if ((st = check_meta_int(a, "oscar.num_kv_heads", a->n_head_kv)) != OSCAR_OK) return st;
    if ((st = check_meta_int(a, "oscar.head_dim", a->head_dim)) != OSCAR_OK) return st;
    const char * grp = oscar_artifact_get_meta(a, "oscar.source_grouping");
    if (grp && strcmp(grp, r->n_rot > 1 ? "kv_head" : "layer") != 0) {
        return osc_error(OSCAR_ERR_FORMAT, "artifact: oscar.source_grouping = '%s' but rotations are %s", grp,
                         r->n_rot > 1 ? "per KV head" : "per layer");
    }
    if ((st = check_grouping_layers(a)) != OSCAR_OK) return st;
    for (int32_t l = 0; l < a->n_layer; l++) {
        if ((st = check_finite("k_rotation", l, oscar_rotations_k(r, l, 0), R * D * D)) != OSCAR_OK) return st;
        if ((st = check_finite("v_rotation", l, oscar_rotations_v(r, l, 0), R * D * D)) != OSCAR_OK) return st;
        if ((st = check_finite("k_eigenvalues", l, oscar_rotations_k_eig(r, l, 0), R * D)) != OSCAR_OK) return st;
        if ((st = check_finite("v_eigenvalues", l, oscar_rotations_v_eig(r, l, 0), R * D)) != OSCAR_OK) return st;
        if (r->k_mean &&
            (st = check_finite("k_mean", l, oscar_rotations_k_mean(r, l, 0), (size_t) a->n_head_kv * D)) != OSCAR_OK) {
            return st;
        }
        for (int32_t c = 0; c < r->n_clip; c++) {
            float kc = *oscar_rotations_k_clip(r, l, c), vc = *oscar_rotations_v_clip(r, l, c);
            if (!(kc >= 0.0f && kc <= 1.0f) || !(vc >= 0.0f && vc <= 1.0f)) {
                return osc_error(OSCAR_ERR_FORMAT, "artifact: layers.%d clip ratio %g/%g outside [0, 1]", (int) l,
                                 (double) kc, (double) vc);
            }
        }
    }
    return check_orth ? check_orthogonal(a) : OSCAR_OK;
}

// An import without a model knows no query heads, and no KV heads unless its
// tensors are per KV head or it has a k_mean (oscar-import.h).
static bool heads_unknown(const struct oscar_artifact * a) {
    const char * src = oscar_artifact_get_meta(a, "oscar.num_heads_source");
    return src && !strncmp(src, "unknown", 7);
}

enum oscar_status oscar_artifact_check_shape(const struct oscar_artifact * a, int32_t n_layer, int32_t n_head,
                                             int32_t n_head_kv, int32_t head_dim, const char * model_name) {
    bool unknown = heads_unknown(a), kv_known = a->rot.n_rot > 1 || a->rot.k_mean;
    if (a->n_layer != n_layer || a->head_dim != head_dim || (!unknown && a->n_head != n_head) ||
        ((!unknown || kv_known) && a->n_head_kv != n_head_kv)) {
        if (unknown)
            return osc_error(OSCAR_ERR_INVALID, "imported rotations have %d layers of head_dim %d%s; model %s has %d "
                             "layers, %d KV heads, head_dim %d", (int) a->n_layer, (int) a->head_dim,
                             kv_known ? " for that many KV heads" : "", model_name ? model_name : "", (int) n_layer,
                             (int) n_head_kv, (int) head_dim);
        return osc_error(OSCAR_ERR_INVALID,
                         "artifact has %d layers, %d/%d heads, head_dim %d; model %s has %d layers, %d/%d heads, "
                         "head_dim %d",
                         (int) a->n_layer, (int) a->n_head, (int) a->n_head_kv, (int) a->head_dim,
                         model_name ? model_name : "", (int) n_layer, (int) n_head, (int) n_head_kv,
                         (int) head_dim);
    }
    return OSCAR_OK;
}

// ---- reader ------------------------------------------------------------------------------
// oscar.grouping_layers (checked by oscar_artifact_validate) as rot.head_layer: the layers that
// keep a rotation per KV head.
static enum oscar_status read_grouping_layers(struct oscar_artifact * a) {
    const char * c = oscar_artifact_get_meta(a, "oscar.grouping_layers");
    if (!c) return OSCAR_OK;
    if (!(a->rot.head_layer = calloc((size_t) a->n_layer, sizeof(int32_t))))
        return osc_error(OSCAR_ERR_NOMEM, "artifact: out of memory");
    for (int32_t l = 0; c && l < a->n_layer; l++) {
        a->rot.head_layer[l] = strncmp(c, "kv_head", 7) == 0;
        if ((c = strchr(c, ','))) c++;
    }
    return OSCAR_OK;
}

static enum oscar_status meta_int(const struct osc_safetensors * st, const char * path, const char * key,
                                  int32_t * out) {
    const char * v = osc_safetensors_metadata(st, key);
    if (!v) return osc_error(OSCAR_ERR_FORMAT, "%s: metadata %s missing", path, key);
    char * end = NULL;
    long x = strtol(v, &end, 10);
    if (end == v || *end != '\0' || x < 1 || x > 1000000) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: metadata %s = '%s' is not a positive integer", path, key, v);
    }
    *out = (int32_t) x;
    return OSCAR_OK;
}

static enum oscar_status read_tensor(const struct osc_safetensors * st, const char * path, int32_t layer,
                                     const char * what, int32_t n_dims, const int64_t * shape, float * dst) {
    char name[96];
    snprintf(name, sizeof(name), "layers.%d.%s", (int) layer, what);
    const struct osc_st_tensor * t = osc_safetensors_find(st, name);
    if (!t) return osc_error(OSCAR_ERR_FORMAT, "%s: tensor %s missing", path, name);
    bool ok = t->dtype == OSC_ST_F32 && t->n_dims == n_dims;
    for (int32_t d = 0; ok && d < n_dims; d++) ok = t->shape[d] == shape[d];
    if (!ok) {
        char want[64] = "", got[64] = "";
        for (int32_t d = 0; d < n_dims; d++)
            snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%lld", d ? "," : "", (long long) shape[d]);
        for (int32_t d = 0; d < t->n_dims && d < 4; d++)
            snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%lld", d ? "," : "", (long long) t->shape[d]);
        return osc_error(OSCAR_ERR_FORMAT, "%s: tensor %s is %s [%s], expected F32 [%s]", path, name,
                         osc_st_dtype_name(t->dtype), got, want);
    }
    memcpy(dst, t->data, t->nbytes);
    return OSCAR_OK;
}

static enum oscar_status read_layers(const struct osc_safetensors * st, const char * path,
                                     struct oscar_artifact * a, int64_t * n_expected) {
    enum oscar_status s = OSCAR_OK;
    int64_t D = a->head_dim, H = a->n_head_kv;
    int64_t rot_shape[3] = {H, D, D}, eig_shape[2] = {H, D}, clip_shape[1] = {H};
    const struct oscar_rotations * r = &a->rot;
    const bool ph = r->n_rot > 1;
    int32_t rd = ph ? 3 : 2, ed = ph ? 2 : 1, cd = r->n_clip > 1 ? 1 : 0;
    const int64_t * rs = ph ? rot_shape : rot_shape + 1;
    const int64_t * es = ph ? eig_shape : eig_shape + 1;
    *n_expected = 0;
    for (int32_t l = 0; l < a->n_layer; l++) {
        if ((s = read_tensor(st, path, l, "k_rotation", rd, rs, oscar_rotations_k(r, l, 0))) != OSCAR_OK ||
            (s = read_tensor(st, path, l, "v_rotation", rd, rs, oscar_rotations_v(r, l, 0))) != OSCAR_OK ||
            (s = read_tensor(st, path, l, "k_eigenvalues", ed, es, oscar_rotations_k_eig(r, l, 0))) != OSCAR_OK ||
            (s = read_tensor(st, path, l, "v_eigenvalues", ed, es, oscar_rotations_v_eig(r, l, 0))) != OSCAR_OK ||
            (s = read_tensor(st, path, l, "k_clip", cd, clip_shape, oscar_rotations_k_clip(r, l, 0))) != OSCAR_OK ||
            (s = read_tensor(st, path, l, "v_clip", cd, clip_shape, oscar_rotations_v_clip(r, l, 0))) != OSCAR_OK) {
            return s;
        }
        *n_expected += 6;
        if (r->k_mean) {
            if ((s = read_tensor(st, path, l, "k_mean", 2, eig_shape, oscar_rotations_k_mean(r, l, 0))) !=
                OSCAR_OK) {
                return s;
            }
            *n_expected += 1;
        }
    }
    return OSCAR_OK;
}

// The oscar.safetensors of an artifact given as its directory or as the file itself (malloc'ed).
static enum oscar_status tensors_file(const char * path, char ** file) {
    struct stat sb;
    *file = NULL;
    if (stat(path, &sb) != 0) return osc_error(OSCAR_ERR_NOT_FOUND, "%s: %s", path, strerror(errno));
    *file = S_ISDIR(sb.st_mode) ? osc_path_join(path, OSCAR_ARTIFACT_TENSORS) : strdup(path);
    return *file ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "out of memory");
}

enum oscar_status oscar_artifact_read(const char * path, bool check_orth, struct oscar_artifact ** out) {
    enum oscar_status s = OSCAR_ERR_FORMAT;
    struct osc_safetensors * st = NULL;
    struct oscar_artifact * a = NULL;
    char * file = NULL;
    *out = NULL;
    if ((s = tensors_file(path, &file)) != OSCAR_OK) goto out;
    if ((s = osc_safetensors_open(file, &st)) != OSCAR_OK) goto out;
    const char * ver = osc_safetensors_metadata(st, "oscar.format_version");
    if (!ver) {
        s = osc_error(OSCAR_ERR_FORMAT, "%s: not an oscar artifact (metadata oscar.format_version missing)", file);
        goto out;
    }
    if (atoi(ver) > OSCAR_ARTIFACT_FORMAT_VERSION) {
        s = osc_error(OSCAR_ERR_UNSUPPORTED, "%s: oscar.format_version %s is newer than this reader (%d)", file, ver,
                      OSCAR_ARTIFACT_FORMAT_VERSION);
        goto out;
    }
    if (atoi(ver) < 1) {
        s = osc_error(OSCAR_ERR_FORMAT, "%s: bad oscar.format_version '%s'", file, ver);
        goto out;
    }
    int32_t L, Hq, Hkv, D;
    if ((s = meta_int(st, file, "oscar.num_layers", &L)) != OSCAR_OK ||
        (s = meta_int(st, file, "oscar.num_heads", &Hq)) != OSCAR_OK ||
        (s = meta_int(st, file, "oscar.num_kv_heads", &Hkv)) != OSCAR_OK ||
        (s = meta_int(st, file, "oscar.head_dim", &D)) != OSCAR_OK) {
        goto out;
    }
    const char * grp = osc_safetensors_metadata(st, "oscar.source_grouping");
    if (!grp || (strcmp(grp, "layer") != 0 && strcmp(grp, "kv_head") != 0)) {
        s = osc_error(OSCAR_ERR_FORMAT, "%s: oscar.source_grouping must be 'layer' or 'kv_head' (got '%s')", file,
                      grp ? grp : "(missing)");
        goto out;
    }
    const struct osc_st_tensor * c0 = osc_safetensors_find(st, "layers.0.k_clip");
    bool clip_per_head = c0 && c0->n_dims == 1;
    bool has_mean = osc_safetensors_find(st, "layers.0.k_mean") != NULL;
    if ((s = oscar_artifact_init(L, Hq, Hkv, D, strcmp(grp, "kv_head") == 0, clip_per_head, has_mean, &a)) !=
        OSCAR_OK) {
        s = osc_error_prefix(OSCAR_ERR_FORMAT, "%s", file);
        goto out;
    }
    int64_t n_expected = 0;
    if ((s = read_layers(st, file, a, &n_expected)) != OSCAR_OK) goto out;
    if (n_expected != osc_safetensors_n_tensors(st)) {
        for (int64_t i = 0; i < osc_safetensors_n_tensors(st); i++) {
            const char * nm = osc_safetensors_tensor(st, i)->name;
            long li = -1;
            char rest[64] = "";
            if (sscanf(nm, "layers.%ld.%63s", &li, rest) != 2 || li < 0 || li >= L) {
                s = osc_error(OSCAR_ERR_FORMAT, "%s: unexpected tensor '%s' (artifact has %d layers)", file, nm, (int) L);
                goto out;
            }
        }
        s = osc_error(OSCAR_ERR_FORMAT, "%s: %lld tensors, expected %lld (mixed optional tensors?)", file,
                      (long long) osc_safetensors_n_tensors(st), (long long) n_expected);
        goto out;
    }
    for (int64_t i = 0; i < osc_safetensors_n_metadata(st); i++) {
        const char * k, * v;
        osc_safetensors_metadata_at(st, i, &k, &v);
        if ((s = oscar_artifact_set_meta(a, k, v)) != OSCAR_OK) goto out;
    }
    if ((s = oscar_artifact_validate(a, check_orth)) != OSCAR_OK) {
        s = osc_error_prefix(s, "%s", file);
        goto out;
    }
    if ((s = read_grouping_layers(a)) != OSCAR_OK) goto out;
    *out = a;
    a = NULL;
    s = OSCAR_OK;
out:
    oscar_artifact_free(a);
    osc_safetensors_close(st);
    free(file);
    return s;
}

// ---- integrity (oscar_artifact_load) ---------------------------------------------------------
// The file `name` in the directory of `file` (malloc'ed).
static char * sibling(const char * file, const char * name) {
    const char * slash = strrchr(file, '/');
    if (!slash) return strdup(name);
    char * dir = strndup(file, (size_t) (slash - file) + (slash == file));
    char * p = dir ? osc_path_join(dir, name) : NULL;
    free(dir);
    return p;
}

// The sha256 oscar.json records for oscar.safetensors (64 hex digits) into want.
static enum oscar_status recorded_sha256(const char * json_path, char want[65]) {
    char * text = NULL;
    size_t n = 0;
    if (access(json_path, F_OK) != 0)
        return osc_error(OSCAR_ERR_FORMAT, "%s: missing, so there is no recorded sha256 to check %s against",
                         json_path, OSCAR_ARTIFACT_TENSORS);
    enum oscar_status s = osc_read_file(json_path, (size_t) 64 << 20, &text, &n);
    if (s != OSCAR_OK) return s == OSCAR_ERR_INVALID ? OSCAR_ERR_FORMAT : s; // too large: not an oscar.json
    json_error_t err;
    json_t * root = json_loadb(text, n, 0, &err);
    free(text);
    if (!root) return osc_error(OSCAR_ERR_FORMAT, "%s: not valid JSON (line %d: %s)", json_path, err.line, err.text);
    const char * sha = json_string_value(
        json_object_get(json_object_get(json_object_get(root, "files"), OSCAR_ARTIFACT_TENSORS), "sha256"));
    bool hex = sha && strlen(sha) == 64 && strspn(sha, "0123456789abcdefABCDEF") == 64;
    if (hex) snprintf(want, 65, "%s", sha);
    json_decref(root);
    if (!hex)
        return osc_error(OSCAR_ERR_FORMAT, "%s: no sha256 (64 hex digits) recorded for %s (files.\"%s\".sha256)",
                         json_path, OSCAR_ARTIFACT_TENSORS, OSCAR_ARTIFACT_TENSORS);
    return OSCAR_OK;
}

// (a) the tensors file is the one its oscar.json describes.
static enum oscar_status check_file_hash(const char * file) {
    char want[65], got[65];
    char * json_path = sibling(file, OSCAR_ARTIFACT_JSON);
    if (!json_path) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    enum oscar_status s = recorded_sha256(json_path, want);
    if (s == OSCAR_OK) s = osc_sha256_file(file, got);
    if (s == OSCAR_OK && strcasecmp(want, got) != 0)
        s = osc_error(OSCAR_ERR_FORMAT, "%s: sha256 %s, but %s records %s: the file was modified or corrupted", file,
                      got, json_path, want);
    free(json_path);
    return s;
}

// (c) the artifact was calibrated on the model it is used with.
static enum oscar_status check_model(const struct oscar_artifact * a, const struct oscar_artifact_trust * t) {
    const char * base = oscar_artifact_get_meta(a, "oscar.base_model");
    const char * rec = oscar_artifact_get_meta(a, "oscar.base_model_sha256");
    const char * label = t->model_label ? t->model_label : "the model";
    if (!t->model_sha256[0])
        return osc_error(OSCAR_ERR_INVALID, "cannot check the artifact against %s: the model has no sha256 identity",
                         label);
    if (!rec[0] && oscar_artifact_get_meta(a, "oscar.imported_from")) {
        // Imported .pt rotations carry no model identity: nothing to contradict.
        osc_warn("imported rotations record no model identity; only their shapes were checked against %s", label);
        return OSCAR_OK;
    }
    if (!rec[0])
        return osc_error(OSCAR_ERR_INVALID, "cannot check the artifact against %s: it records no "
                         "oscar.base_model_sha256 (calibrated on %s)", label, base);
    if (strcasecmp(rec, t->model_sha256) != 0)
        return osc_error(OSCAR_ERR_INVALID,
                         "artifact was calibrated on %s (oscar.base_model_sha256 %s), but %s has sha256 %s",
                         base, rec, label, t->model_sha256);
    return OSCAR_OK;
}

// A failed check s (its message prefixed with `where` when given) is an error,
// or with force a warning and OSCAR_OK (running out of memory stays an error).
static enum oscar_status verdict(enum oscar_status s, const char * where, const struct oscar_artifact_trust * t) {
    if (s == OSCAR_OK) return s;
    if (where) osc_error_prefix(s, "%s", where);
    if (!t || !t->force || s == OSCAR_ERR_NOMEM) return s;
    osc_warn("%s (forced: using the artifact anyway)", oscar_last_error());
    osc_error_clear();
    return OSCAR_OK;
}

enum oscar_status oscar_artifact_load(const char * path, const struct oscar_artifact_trust * trust,
                                      struct oscar_artifact ** out) {
    struct oscar_artifact * a = NULL;
    char * file = NULL;
    *out = NULL;
    enum oscar_status s;
    if (oscar_import_is_source(path)) { // a reference .pt pair or a zoo folder: imported in memory
        s = oscar_import_source(path, NULL, NULL, &a);
        if (s == OSCAR_OK) s = verdict(check_orthogonal(a), path, trust);
    } else {
        s = oscar_artifact_read(path, false, &a);
        if (s == OSCAR_OK) s = tensors_file(path, &file);
        if (s == OSCAR_OK) s = verdict(check_file_hash(file), NULL, trust);
        if (s == OSCAR_OK) s = verdict(check_orthogonal(a), file, trust);
    }
    if (s == OSCAR_OK && trust && trust->model_sha256) s = verdict(check_model(a, trust), path, trust);
    free(file);
    if (s != OSCAR_OK) {
        oscar_artifact_free(a);
        return s;
    }
    *out = a;
    return OSCAR_OK;
}

// ---- writer --------------------------------------------------------------------------
static enum oscar_status set_num(struct oscar_artifact * a, const char * key, long v) {
    char buf[32];
    snprintf(buf, sizeof(buf), "%ld", v);
    return oscar_artifact_set_meta(a, key, buf);
}

static enum oscar_status fill_meta(struct oscar_artifact * a) {
    enum oscar_status s;
    char ver[16];
    snprintf(ver, sizeof(ver), "%d", OSCAR_ARTIFACT_FORMAT_VERSION);
    if ((s = oscar_artifact_set_meta(a, "format", "pt")) != OSCAR_OK ||
        (s = oscar_artifact_set_meta(a, "oscar.format_version", ver)) != OSCAR_OK ||
        (s = oscar_artifact_set_meta(a, "oscar.source_grouping", a->rot.n_rot > 1 ? "kv_head" : "layer")) != OSCAR_OK ||
        (s = oscar_artifact_set_meta(a, "oscar.qk_order", "hf")) != OSCAR_OK ||
        (s = set_num(a, "oscar.num_layers", a->n_layer)) != OSCAR_OK ||
        (s = set_num(a, "oscar.num_heads", a->n_head)) != OSCAR_OK ||
        (s = set_num(a, "oscar.num_kv_heads", a->n_head_kv)) != OSCAR_OK ||
        (s = set_num(a, "oscar.head_dim", a->head_dim)) != OSCAR_OK) {
        return s;
    }
    return OSCAR_OK;
}

static enum oscar_status write_tensors(const struct oscar_artifact * a, const char * file) {
    enum oscar_status s = OSCAR_ERR_NOMEM;
    const struct oscar_rotations * r = &a->rot;
    int32_t L = a->n_layer, per = r->k_mean ? 7 : 6;
    size_t n = (size_t) L * (size_t) per;
    struct osc_st_write_tensor * t = calloc(n, sizeof(*t));
    char (*names)[64] = calloc(n, sizeof(*names));
    const char ** meta = calloc(2 * (size_t) a->n_meta, sizeof(char *));
    int64_t D = a->head_dim, H = a->n_head_kv;
    int64_t rot_shape[3] = {H, D, D}, eig_shape[2] = {H, D}, clip_shape[1] = {H};
    if (!t || !names || !meta) {
        s = osc_error(OSCAR_ERR_NOMEM, "artifact: out of memory");
        goto out;
    }
    const bool ph = r->n_rot > 1, ch = r->n_clip > 1;
    size_t i = 0;
    for (int32_t l = 0; l < L; l++) {
        const char * what[7] = {"k_rotation", "v_rotation", "k_eigenvalues", "v_eigenvalues", "k_clip", "v_clip",
                                "k_mean"};
        const void * data[7] = {oscar_rotations_k(r, l, 0), oscar_rotations_v(r, l, 0), oscar_rotations_k_eig(r, l, 0),
                                oscar_rotations_v_eig(r, l, 0), oscar_rotations_k_clip(r, l, 0),
                                oscar_rotations_v_clip(r, l, 0), oscar_rotations_k_mean(r, l, 0)};
        int32_t dims[7] = {ph ? 3 : 2, ph ? 3 : 2, ph ? 2 : 1, ph ? 2 : 1, ch ? 1 : 0, ch ? 1 : 0, 2};
        const int64_t * shp[7] = {ph ? rot_shape : rot_shape + 1, ph ? rot_shape : rot_shape + 1,
                                  ph ? eig_shape : eig_shape + 1, ph ? eig_shape : eig_shape + 1,
                                  clip_shape, clip_shape, eig_shape};
        for (int32_t w = 0; w < per; w++, i++) {
            snprintf(names[i], sizeof(names[i]), "layers.%d.%s", (int) l, what[w]);
            t[i].name = names[i];
            t[i].dtype = OSC_ST_F32;
            t[i].n_dims = dims[w];
            t[i].shape = shp[w];
            t[i].data = data[w];
        }
    }
    for (int32_t m = 0; m < a->n_meta; m++) {
        meta[2 * m] = a->meta_keys[m];
        meta[2 * m + 1] = a->meta_values[m];
    }
    s = osc_safetensors_write(file, t, n, meta, (size_t) a->n_meta);
out:
    free(t);
    free(names);
    free(meta);
    return s;
}

static enum oscar_status write_json(const struct oscar_artifact * a, const char * dir, const char * st_path) {
    enum oscar_status s = OSCAR_ERR_NOMEM;
    json_t * root = json_object(), * md = json_object(), * files = json_object(), * f = json_object();
    char * text = NULL, * path = osc_path_join(dir, OSCAR_ARTIFACT_JSON);
    char sha[65];
    int64_t size = 0;
    if (!root || !md || !files || !f || !path) {
        s = osc_error(OSCAR_ERR_NOMEM, "artifact: out of memory");
        goto out;
    }
    // keys in sorted order for a stable file
    int32_t * ord = malloc((size_t) (a->n_meta ? a->n_meta : 1) * sizeof(int32_t));
    if (!ord) goto out;
    for (int32_t i = 0; i < a->n_meta; i++) ord[i] = i;
    for (int32_t i = 1; i < a->n_meta; i++) {
        for (int32_t j = i; j > 0 && strcmp(a->meta_keys[ord[j - 1]], a->meta_keys[ord[j]]) > 0; j--) {
            int32_t tmp = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = tmp;
        }
    }
    for (int32_t i = 0; i < a->n_meta; i++) json_object_set_new(md, a->meta_keys[ord[i]], json_string(a->meta_values[ord[i]]));
    free(ord);
    if ((s = osc_hash_file(st_path, sha, NULL, &size)) != OSCAR_OK) goto out;
    json_object_set_new(f, "sha256", json_string(sha));
    json_object_set_new(f, "size", json_integer(size));
    json_object_set(files, OSCAR_ARTIFACT_TENSORS, f);
    json_object_set(root, "metadata", md);
    json_object_set(root, "files", files);
    if (a->summary_json) {
        json_error_t err;
        json_t * sum = json_loads(a->summary_json, 0, &err);
        if (!sum) {
            s = osc_error(OSCAR_ERR_INVALID, "artifact: summary is not valid JSON: %s", err.text);
            goto out;
        }
        json_object_set_new(root, "summary", sum);
    }
    text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!text) goto out;
    size_t len = strlen(text);
    text[len] = '\0';
    char * t2 = realloc(text, len + 2);
    if (!t2) goto out;
    text = t2;
    text[len] = '\n';
    text[len + 1] = '\0';
    s = osc_write_file_atomic(path, text, len + 1);
out:
    json_decref(root);
    json_decref(md);
    json_decref(files);
    json_decref(f);
    free(text);
    free(path);
    return s;
}

static enum oscar_status write_card(const struct oscar_artifact * a, const char * dir) {
    char * path = osc_path_join(dir, OSCAR_ARTIFACT_README), * text = NULL;
    size_t len  = 0;
    enum oscar_status s = path ? oscar_artifact_card(a, &text, &len) : osc_error(OSCAR_ERR_NOMEM, "out of memory");
    if (s == OSCAR_OK) s = osc_write_file_atomic(path, text, len);
    free(text);
    free(path);
    return s;
}

// The files an artifact directory may hold: only such a directory is replaced.
static const char * const artifact_files[] = {OSCAR_ARTIFACT_TENSORS, OSCAR_ARTIFACT_JSON, OSCAR_ARTIFACT_README,
                                              NULL};

enum oscar_status oscar_artifact_check_dest(const char * dir) {
    return osc_dir_check_dest(dir, "an oscar artifact", artifact_files);
}

enum oscar_status oscar_artifact_write(const struct oscar_artifact * a_in, const char * dir) {
    enum oscar_status s;
    char * st_path = NULL;
    struct oscar_artifact * a = NULL;
    struct osc_dir_stage stage;
    bool staged = false;
    // copy the metadata so the writer can add its own keys without touching the input
    if ((s = oscar_artifact_init(a_in->n_layer, a_in->n_head, a_in->n_head_kv, a_in->head_dim, a_in->rot.n_rot > 1,
                                 a_in->rot.n_clip > 1, false, &a)) != OSCAR_OK) {
        goto out;
    }
    {
        // shallow view of the input tensors
        oscar_rotations_free(&a->rot);
        a->rot = a_in->rot;
        a->summary_json = a_in->summary_json;
        a->card_markdown = a_in->card_markdown;
    }
    for (int32_t i = 0; i < a_in->n_meta; i++) {
        if ((s = oscar_artifact_set_meta(a, a_in->meta_keys[i], a_in->meta_values[i])) != OSCAR_OK) goto out;
    }
    if ((s = fill_meta(a)) != OSCAR_OK) goto out;
    if ((s = oscar_artifact_validate(a, true)) != OSCAR_OK) goto out;
    if ((s = osc_dir_stage_open(&stage, dir, "an oscar artifact", artifact_files)) != OSCAR_OK) goto out;
    staged = true;
    st_path = osc_path_join(stage.tmp, OSCAR_ARTIFACT_TENSORS);
    if (!st_path) {
        s = osc_error(OSCAR_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((s = write_tensors(a, st_path)) != OSCAR_OK) goto out;
    if ((s = write_json(a, stage.tmp, st_path)) != OSCAR_OK) goto out;
    if ((s = write_card(a, stage.tmp)) != OSCAR_OK) goto out;
    staged = false;
    s = osc_dir_stage_commit(&stage);
out:
    if (staged) osc_dir_stage_abort(&stage);
    if (a) {
        memset(&a->rot, 0, sizeof a->rot);
        a->summary_json = a->card_markdown = NULL;
        oscar_artifact_free(a);
    }
    free(st_path);
    return s;
}
