// oscar-import.c - a reference .pt pair (+ optional k_mean) -> oscar artifact (see oscar-import.h).
#include "formats/oscar-import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/pt-reader.h"
#include "util/sha256.h"
#include "util/version.h"

#define IMPORT_MAX_LAYERS 100000
#define IMPORT_MAX_DIM    4096

// One rotation file, stacked over layers.
struct side {
    const char * path;
    int64_t      format_version; // 0 when the file records none
    char         objective[65];
    int32_t      L, R, D; // R: rotations per layer (1 for [D,D] tensors)
    bool         per_head, eig_known;
    float *      rot, * eig; // [L, R, D, D], [L, R, D]
    char         sha[65];
};

struct oscar_import_opts oscar_import_default_opts(void) {
    return (struct oscar_import_opts){ .k_clip = -1.0f, .v_clip = -1.0f };
}

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}

// The objective: the file's "objective", else the <obj> of k_rotation_<obj>.pt.
static enum oscar_status objective_of(const struct osc_pt_value * root, const char * path, struct side * s) {
    const struct osc_pt_value * o    = osc_pt_get(root, "objective");
    const char *                base = strrchr(path, '/');
    char                        from_name[80] = "unknown";
    base                                      = base ? base + 1 : path;
    size_t n                                  = strlen(base);
    if (n > 14 && (base[0] == 'k' || base[0] == 'v') && !strncmp(base + 1, "_rotation_", 10) && !strcmp(base + n - 3, ".pt"))
        snprintf(from_name, sizeof from_name, "%.*s", (int) (n - 14 < 70 ? n - 14 : 70), base + 11);
    const char * v  = o && o->kind == OSC_PT_STR ? o->str : from_name;
    size_t       vn = strlen(v);
    bool         ok = vn > 0 && vn <= 64;
    for (size_t i = 0; ok && i < vn; i++) ok = name_char(v[i]);
    if (!ok) return osc_error(OSCAR_ERR_FORMAT, "%s: objective '%.64s' is not 1-64 letters, digits, '_', '-', '.'", path, v);
    memcpy(s->objective, v, vn + 1); // vn <= 64 < sizeof s->objective
    return OSCAR_OK;
}

// The layer dict of layer l, or NULL.
static const struct osc_pt_value * layer(const struct osc_pt_value * layers, int32_t l) {
    const struct osc_pt_value * e = osc_pt_get_index(layers, l);
    return e && e->kind == OSC_PT_DICT ? e : NULL;
}

// "layers" must hold exactly the keys 0..L-1 (ints or their strings); L into *L.
static enum oscar_status layer_count(const struct osc_pt_value * layers, const char * path, int32_t * L) {
    size_t n = layers->n / 2;
    if (n == 0 || n > IMPORT_MAX_LAYERS)
        return osc_error(OSCAR_ERR_FORMAT, "%s: 'layers' holds %zu entries (want 1 to %d)", path, n, IMPORT_MAX_LAYERS);
    for (int32_t l = 0; l < (int32_t) n; l++)
        if (!layer(layers, l))
            return osc_error(OSCAR_ERR_FORMAT, "%s: 'layers' has %zu entries but no layer %d dict (keys must be 0..%zu)",
                             path, n, (int) l, n - 1);
    *L = (int32_t) n;
    return OSCAR_OK;
}

static bool shape_is(const struct osc_pt_value * t, int32_t ndim, const int64_t * want) {
    if (!t || t->kind != OSC_PT_TENSOR || t->ndim != ndim) return false;
    for (int32_t d = 0; d < ndim; d++)
        if (t->shape[d] != want[d]) return false;
    return true;
}

// The shape of layer 0's rotation sets R, D and the grouping; every layer must match.
static enum oscar_status rotation_shape(const struct osc_pt_value * root, const struct osc_pt_value * r0,
                                        const char * path, struct side * s) {
    if (!r0 || r0->kind != OSC_PT_TENSOR || (r0->ndim != 2 && r0->ndim != 3) ||
        r0->shape[r0->ndim - 1] != r0->shape[r0->ndim - 2] || r0->shape[r0->ndim - 1] < 1 ||
        r0->shape[r0->ndim - 1] > IMPORT_MAX_DIM || (r0->ndim == 3 && (r0->shape[0] < 1 || r0->shape[0] > IMPORT_MAX_DIM)))
        return osc_error(OSCAR_ERR_FORMAT, "%s: layers[0].rotation is not a [D,D] or [Hkv,D,D] tensor (D <= %d)", path,
                         IMPORT_MAX_DIM);
    s->per_head = r0->ndim == 3;
    s->R        = s->per_head ? (int32_t) r0->shape[0] : 1;
    s->D        = (int32_t) r0->shape[r0->ndim - 1];
    const struct osc_pt_value * g = osc_pt_get(root, "source_grouping");
    if (g && g->kind == OSC_PT_STR && strcmp(g->str, s->per_head ? "kv_head" : "layer"))
        return osc_error(OSCAR_ERR_FORMAT, "%s: source_grouping '%.32s' but the rotations are %s", path, g->str,
                         s->per_head ? "[Hkv,D,D] (per KV head)" : "[D,D] (per layer)");
    return OSCAR_OK;
}

static enum oscar_status read_side(const char * path, struct side * s) {
    struct osc_pt *   f  = NULL;
    enum oscar_status st = osc_pt_open(path, &f);
    if (st != OSCAR_OK) return st;
    s->path                          = path;
    const struct osc_pt_value * root = osc_pt_root(f), * layers = osc_pt_get(root, "layers"),
                              * fv = osc_pt_get(root, "format_version");
    if (!layers || layers->kind != OSC_PT_DICT) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: no 'layers' dict (not an OSCAR rotation file)", path);
        goto out;
    }
    s->format_version = fv && fv->kind == OSC_PT_INT ? fv->i : 0;
    if ((st = objective_of(root, path, s)) || (st = layer_count(layers, path, &s->L)) ||
        (st = rotation_shape(root, osc_pt_get(layer(layers, 0), "rotation"), path, s)))
        goto out;
    size_t L = (size_t) s->L, R = (size_t) s->R, D = (size_t) s->D;
    s->rot       = malloc(L * R * D * D * sizeof(float));
    s->eig       = calloc(L * R * D, sizeof(float));
    s->eig_known = true;
    if (!s->rot || !s->eig) {
        st = osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    int64_t rs[3] = { s->R, s->D, s->D }, es[2] = { s->R, s->D };
    for (int32_t l = 0; l < s->L; l++) {
        const struct osc_pt_value * e = layer(layers, l), * r = osc_pt_get(e, "rotation"), * ev = osc_pt_get(e, "eigenvalues");
        if (!shape_is(r, s->per_head ? 3 : 2, s->per_head ? rs : rs + 1)) {
            st = osc_error(OSCAR_ERR_FORMAT, "%s: layers[%d].rotation is missing or not %s like layer 0's", path, (int) l,
                           s->per_head ? "[Hkv,D,D]" : "[D,D]");
            goto out;
        }
        osc_pt_tensor_f32(r, s->rot + (size_t) l * R * D * D);
        if (shape_is(ev, s->per_head ? 2 : 1, s->per_head ? es : es + 1)) osc_pt_tensor_f32(ev, s->eig + (size_t) l * R * D);
        else s->eig_known = false;
    }
    if (!s->eig_known) memset(s->eig, 0, L * R * D * sizeof(float)); // all or none
    st = osc_sha256_file(path, s->sha);
out:
    osc_pt_close(f);
    return st;
}

// k_mean file: {"layers": {i: {"mu": [Hkv, D]}}} over the same layers and D.
static enum oscar_status read_mean(const char * path, int32_t L, int32_t D, float ** mean, int32_t * hkv) {
    struct osc_pt *   f  = NULL;
    enum oscar_status st = osc_pt_open(path, &f);
    if (st != OSCAR_OK) return st;
    const struct osc_pt_value * layers = osc_pt_get(osc_pt_root(f), "layers");
    const struct osc_pt_value * m0     = osc_pt_get(layer(layers, 0), "mu");
    int32_t                     n      = 0;
    if (!layers || layers->kind != OSC_PT_DICT) st = osc_error(OSCAR_ERR_FORMAT, "%s: no 'layers' dict (not a k_mean file)", path);
    else if ((st = layer_count(layers, path, &n)) != OSCAR_OK) goto out;
    else if (n != L) st = osc_error(OSCAR_ERR_INVALID, "%s: %d layers, the rotations %d", path, (int) n, (int) L);
    else if (!m0 || m0->kind != OSC_PT_TENSOR || m0->ndim != 2 || m0->shape[1] != D || m0->shape[0] < 1 || m0->shape[0] > IMPORT_MAX_DIM)
        st = osc_error(OSCAR_ERR_FORMAT, "%s: layers[0].mu is not a [Hkv,%d] tensor", path, (int) D);
    if (st != OSCAR_OK) goto out;
    *hkv          = (int32_t) m0->shape[0];
    int64_t ms[2] = { *hkv, D };
    if (!(*mean = malloc((size_t) L * (size_t) *hkv * (size_t) D * sizeof(float)))) {
        st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int32_t l = 0; l < L; l++) {
        const struct osc_pt_value * mu = osc_pt_get(layer(layers, l), "mu");
        if (!shape_is(mu, 2, ms)) {
            st = osc_error(OSCAR_ERR_FORMAT, "%s: layers[%d].mu is missing or not [%d,%d]", path, (int) l, (int) *hkv, (int) D);
            free(*mean);
            *mean = NULL;
            goto out;
        }
        osc_pt_tensor_f32(mu, *mean + (size_t) l * (size_t) *hkv * (size_t) D);
    }
out:
    osc_pt_close(f);
    return st;
}

// seq<T>_prompt<N>_group<G> as the K file's folder; its parent names the model.
struct zoo_tag {
    bool ok;
    long T, N, G;
    char tag[96], model[128];
};

static void parse_tag(const char * k_path, struct zoo_tag * z) {
    char         buf[1024];
    memset(z, 0, sizeof *z);
    snprintf(buf, sizeof buf, "%s", k_path);
    char * slash = strrchr(buf, '/');
    if (!slash) return;
    *slash           = '\0';
    char * leaf      = strrchr(buf, '/');
    char * leaf_name = leaf ? leaf + 1 : buf;
    int    used      = 0;
    if (sscanf(leaf_name, "seq%ld_prompt%ld_group%ld%n", &z->T, &z->N, &z->G, &used) != 3 || leaf_name[used] ||
        z->T < 0 || z->N < 0 || z->G < 1)
        return;
    z->ok = true;
    snprintf(z->tag, sizeof z->tag, "%.95s", leaf_name);
    if (leaf) {
        *leaf        = '\0';
        char * model = strrchr(buf, '/');
        snprintf(z->model, sizeof z->model, "%.127s", model ? model + 1 : buf);
    }
}

// "qqt_r_h_pbr" -> "r_h_pbr" for the estimators oscar and the reference name.
static const char * composition_of(const char * objective) {
    static const char * const est[] = { "qqt_", "ktk_", "sst_", "vtv_", "vatt_", NULL };
    for (int i = 0; est[i]; i++)
        if (!strncmp(objective, est[i], strlen(est[i]))) return objective + strlen(est[i]);
    return NULL;
}

static enum oscar_status check_pair(const struct side * k, const struct side * v) {
    if (k->L != v->L || k->D != v->D || k->R != v->R || k->per_head != v->per_head)
        return osc_error(OSCAR_ERR_INVALID, "%s has %d layers of %d [%d,%d] rotations, %s has %d of %d [%d,%d]: not a pair",
                         k->path, (int) k->L, (int) k->R, (int) k->D, (int) k->D, v->path, (int) v->L, (int) v->R,
                         (int) v->D, (int) v->D);
    return OSCAR_OK;
}

// Heads: the model's when known; Hkv from per-head tensors or k_mean must agree with it.
static enum oscar_status heads(const struct side * k, int32_t mean_hkv, const struct oscar_import_model * m,
                               int32_t * hq, int32_t * hkv, bool * known) {
    int32_t t_hkv = k->per_head ? k->R : mean_hkv; // 0: the tensors do not say
    if (k->per_head && mean_hkv && mean_hkv != k->R)
        return osc_error(OSCAR_ERR_INVALID, "k_mean has %d KV heads, the rotations %d", (int) mean_hkv, (int) k->R);
    if (m && m->n_layer) {
        if (m->n_layer != k->L || m->head_dim != k->D || (t_hkv && t_hkv != m->n_head_kv)) {
            char kv[48] = "";
            if (t_hkv) snprintf(kv, sizeof kv, " and %d KV heads", (int) t_hkv);
            return osc_error(OSCAR_ERR_INVALID, "%s: %d layers of head_dim %d%s, but the model %s has %d layers of "
                             "head_dim %d and %d KV heads", k->path, (int) k->L, (int) k->D, kv,
                             m->name ? m->name : "", (int) m->n_layer, (int) m->head_dim, (int) m->n_head_kv);
        }
        *hq    = m->n_head;
        *hkv   = m->n_head_kv;
        *known = true;
        return OSCAR_OK;
    }
    *hkv   = t_hkv ? t_hkv : 1;
    *hq    = *hkv;
    *known = false;
    return OSCAR_OK;
}

#define SET(key, ...)                                                              \
    do {                                                                           \
        snprintf(buf, sizeof buf, __VA_ARGS__);                                    \
        if ((st = oscar_artifact_set_meta(a, key, buf)) != OSCAR_OK) return st;     \
    } while (0)

static enum oscar_status set_meta(struct oscar_artifact * a, const struct side * k, const struct side * v,
                                  const char * mean_path, const char * mean_sha, const struct oscar_import_opts * o,
                                  bool heads_known, float kc, float vc) {
    const struct oscar_import_model * m = o->model;
    enum oscar_status                 st;
    char                              buf[1400];
    struct zoo_tag                    z;
    parse_tag(k->path, &z);
    const char * ck = composition_of(k->objective), * cv = composition_of(v->objective);
    SET("oscar.k_objective", "%s", k->objective);
    SET("oscar.v_objective", "%s", v->objective);
    SET("oscar.composition", "%s", ck && cv && !strcmp(ck, cv) ? ck : "unknown");
    SET("oscar.base_model", "%s", m && m->name && *m->name ? m->name : z.model[0] ? z.model : "unknown");
    if (o->base_model_id) {
        SET("oscar.base_model_id", "%s", o->base_model_id);
        SET("oscar.base_model_id_source", "%s", o->base_model_id_source ? o->base_model_id_source : "--base-model");
    }
    SET("oscar.base_model_sha256", "%s", m && m->sha256 ? m->sha256 : ""); // "": no identity recorded
    SET("oscar.architecture", "%s", m && m->architecture ? m->architecture : "unknown");
    SET("oscar.num_heads_source", "%s", heads_known ? "model" : "unknown (imported without a model; the per-layer "
                                        "rotations do not depend on it)");
    SET("oscar.bits", "2");
    if (z.ok) SET("oscar.group_size", "%ld", z.G);
    else SET("oscar.group_size", "unknown");
    SET("oscar.scale_dtype", "unknown");
    SET("oscar.sink", "unknown");
    SET("oscar.recent", "unknown");
    SET("oscar.clip_mode", "fixed");
    SET("oscar.k_clip_ratio", "%.2f", (double) kc);
    SET("oscar.v_clip_ratio", "%.2f", (double) vc);
    SET("oscar.clip_source", "%s", o->k_clip < 0 && o->v_clip < 0
                                       ? "engine defaults (SGLANG_OSCAR_K_CLIP_RATIO / SGLANG_OSCAR_V_CLIP_RATIO); the "
                                         ".pt files record no clips"
                                       : "given at import; the .pt files record no clips");
    SET("oscar.calib_tag", "%s", z.ok ? z.tag : "imported");
    SET("oscar.calib_tokens", "%ld", z.ok ? z.T : 0L);
    if (z.ok) SET("oscar.calib_sequences", "%ld", z.N);
    SET("oscar.calib_corpus", "unknown");
    SET("oscar.calib_sha256", "unknown");
    SET("oscar.tokenizer_hash", "unknown");
    SET("oscar.seed", "unknown");
    SET("oscar.tool", "%s", o->tool ? o->tool : "oscar import");
    SET("oscar.imported_from", "%.600s sha256:%s, %.600s sha256:%s", k->path, k->sha, v->path, v->sha);
    if (mean_path) SET("oscar.imported_k_mean", "%.1200s sha256:%s", mean_path, mean_sha);
    SET("oscar.imported_format_version", "%lld", (long long) k->format_version);
    SET("oscar.eigenvalues", "%s", k->eig_known && v->eig_known ? "imported"
                                   : !k->eig_known && !v->eig_known ? "unknown (none of the rotations' shape in the .pt files; zeros)"
                                   : k->eig_known ? "K imported; V unknown (zeros)" : "K unknown (zeros); V imported");
    return OSCAR_OK;
}

enum oscar_status oscar_import_pt(const char * k_path, const char * v_path, const struct oscar_import_opts * o_in,
                                  struct oscar_artifact ** out) {
    struct oscar_import_opts o = o_in ? *o_in : oscar_import_default_opts();
    struct side              k = { 0 }, v = { 0 };
    struct oscar_artifact *  a = NULL;
    float *                  mean = NULL;
    int32_t                  mean_hkv = 0, hq = 0, hkv = 0;
    bool                     known = false;
    char                     mean_sha[65] = "";
    float                    kc = o.k_clip < 0 ? OSCAR_IMPORT_K_CLIP : o.k_clip, vc = o.v_clip < 0 ? OSCAR_IMPORT_V_CLIP : o.v_clip;
    enum oscar_status        st;
    *out = NULL;
    if (!(kc <= 1.0f && vc <= 1.0f)) return osc_error(OSCAR_ERR_INVALID, "clip ratios must lie in [0, 1]");
    if ((st = read_side(k_path, &k)) || (st = read_side(v_path, &v)) || (st = check_pair(&k, &v))) goto out;
    if (o.k_mean && ((st = read_mean(o.k_mean, k.L, k.D, &mean, &mean_hkv)) || (st = osc_sha256_file(o.k_mean, mean_sha))))
        goto out;
    if ((st = heads(&k, mean_hkv, o.model, &hq, &hkv, &known))) goto out;
    if (mean && mean_hkv != hkv) {
        st = osc_error(OSCAR_ERR_INVALID, "%s: %d KV heads, the model %d", o.k_mean, (int) mean_hkv, (int) hkv);
        goto out;
    }
    if ((st = oscar_artifact_init(k.L, hq, hkv, k.D, k.per_head, false, mean != NULL, &a))) goto out;
    size_t nr = (size_t) k.L * (size_t) k.R * (size_t) k.D;
    memcpy(a->rot.k, k.rot, nr * (size_t) k.D * sizeof(float));
    memcpy(a->rot.v, v.rot, nr * (size_t) k.D * sizeof(float));
    memcpy(a->rot.k_eig, k.eig, nr * sizeof(float));
    memcpy(a->rot.v_eig, v.eig, nr * sizeof(float));
    if (mean) memcpy(a->rot.k_mean, mean, (size_t) k.L * (size_t) hkv * (size_t) k.D * sizeof(float));
    for (int32_t l = 0; l < k.L; l++) oscar_rotations_set_layer_clips(&a->rot, l, kc, vc);
    if ((st = set_meta(a, &k, &v, o.k_mean, mean_sha, &o, known, kc, vc))) goto out;
    if ((st = oscar_artifact_validate(a, false))) st = osc_error_prefix(st, "%s", k_path);
out:
    free(k.rot);
    free(k.eig);
    free(v.rot);
    free(v.eig);
    free(mean);
    if (st != OSCAR_OK) oscar_artifact_free(a);
    else *out = a;
    return st;
}

enum oscar_status oscar_import_source(const char * src, const char * src2, const struct oscar_import_opts * o,
                                      struct oscar_artifact ** out) {
    char *                   k = NULL, * v = NULL, * mean = NULL;
    struct oscar_import_opts oo = o ? *o : oscar_import_default_opts();
    enum oscar_status        st = oscar_import_find(src, src2, &k, &v, &mean);
    *out                        = NULL;
    if (st == OSCAR_OK) {
        if (!oo.k_mean) oo.k_mean = mean;
        st = oscar_import_pt(k, v, &oo, out);
    }
    free(k);
    free(v);
    free(mean);
    return st;
}
