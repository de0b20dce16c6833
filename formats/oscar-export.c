// oscar-export.c - artifact -> reference .pt pair / llama.cpp-fork GGUF (see oscar-export.h).
//
// Refuses: artifacts whose K rotations are not in HF order (oscar.qk_order),
// per-head or k_mean artifacts for GGUF (the llama.cpp fork reads neither), a
// base GGUF whose layer count or head_dim does not match the artifact, and a
// base that already carries rotation tensors or oscar.* keys.
#include "formats/oscar-export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/gguf-writer.h"
#include "formats/gguf.h"
#include "formats/oscar-serve.h"
#include "formats/pt-writer.h"
#include "util/fs.h"

static const char * meta_or(const struct oscar_artifact * a, const char * key, const char * dflt) {
    const char * v = oscar_artifact_get_meta(a, key);
    return v ? v : dflt;
}

// Objective names become file names: letters, digits, '_', '-', '.' only.
static enum oscar_status check_objective(const char * key, const char * v) {
    if (!v || !*v) return osc_error(OSCAR_ERR_FORMAT, "artifact: metadata '%s' missing", key);
    for (const char * p = v; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
              *p == '-' || *p == '.'))
            return osc_error(OSCAR_ERR_FORMAT, "artifact: metadata '%s' = '%s' is not usable in a file name", key, v);
    return OSCAR_OK;
}

static enum oscar_status check_hf_order(const struct oscar_artifact * a) {
    const char * o = meta_or(a, "oscar.qk_order", "hf");
    if (strcmp(o, "hf"))
        return osc_error(OSCAR_ERR_UNSUPPORTED, "artifact: oscar.qk_order '%s' (only 'hf' artifacts are exported)", o);
    return OSCAR_OK;
}

// Per-layer pairs keep the reference names k_rotation_<objective>.pt (the OSCAR SGLang fork's zoo
// folders, export_rot_kv_gguf.py); per-KV-head pairs take the zoo's per-head names, so a folder
// never offers a [Hkv,D,D] file under the name the per-layer loaders look for (formats/README.md).
static void pair_names(const struct oscar_artifact * a, const char * ko, const char * vo, char * kn, char * vn,
                       size_t n) {
    if (a->rot.n_rot > 1) {
        snprintf(kn, n, "%s", OSCAR_EXPORT_K_PERHEAD_PT);
        snprintf(vn, n, "%s", OSCAR_EXPORT_V_PERHEAD_PT);
    } else {
        snprintf(kn, n, "k_rotation_%s.pt", ko);
        snprintf(vn, n, "v_rotation_%s.pt", vo);
    }
}

static enum oscar_status write_k_mean(const struct oscar_artifact * a, const char * path) {
    struct oscar_pt_k_mean m = {
        .note = "oscar-calibrate key mean per (layer, KV head): post-RoPE, unrotated basis, Hugging Face "
                "head-dim order; subtract before the K rotation",
        .n_layer = a->n_layer, .n_head_kv = a->n_head_kv, .head_dim = a->head_dim, .mu = a->rot.k_mean,
    };
    return oscar_pt_write_k_mean(path, &m);
}

enum oscar_status oscar_export_pt_all(const struct oscar_artifact * a, const char * out_dir, char ** k_path,
                                      char ** v_path, char ** mean_path) {
    const char * ko = oscar_artifact_get_meta(a, "oscar.k_objective");
    const char * vo = oscar_artifact_get_meta(a, "oscar.v_objective");
    char *       kp = NULL, * vp = NULL, * mp = NULL, kn[256], vn[256];
    enum oscar_status st;
    if (k_path) *k_path = NULL;
    if (v_path) *v_path = NULL;
    if (mean_path) *mean_path = NULL;
    if ((st = check_objective("oscar.k_objective", ko)) != OSCAR_OK ||
        (st = check_objective("oscar.v_objective", vo)) != OSCAR_OK || (st = check_hf_order(a)) != OSCAR_OK)
        return st;
    if ((st = osc_mkdirs(out_dir)) != OSCAR_OK) return st;
    pair_names(a, ko, vo, kn, vn, sizeof kn);
    kp = osc_path_join(out_dir, kn);
    vp = osc_path_join(out_dir, vn);
    if (a->rot.k_mean) mp = osc_path_join(out_dir, OSCAR_EXPORT_K_MEAN_PT);
    if (!kp || !vp || (a->rot.k_mean && !mp)) {
        st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
        goto out;
    }
    struct oscar_pt_rotations r = {
        .format_version = a->rot.n_rot > 1 ? 2 : 1, .objective = ko, .n_layer = a->n_layer,
        .n_rot = a->rot.n_rot, .head_dim = a->head_dim,
        .rotation = a->rot.k, .eigenvalues = a->rot.k_eig,
    };
    if ((st = oscar_pt_write_rotations(kp, &r)) != OSCAR_OK) goto out;
    r.objective   = vo;
    r.rotation    = a->rot.v;
    r.eigenvalues = a->rot.v_eig;
    if ((st = oscar_pt_write_rotations(vp, &r)) != OSCAR_OK) {
        unlink(kp); // do not leave a K file without its V partner
        goto out;
    }
    if (mp && (st = write_k_mean(a, mp)) != OSCAR_OK) {
        unlink(kp); // the rotations were chosen for centred keys: not without their mean
        unlink(vp);
        goto out;
    }
    if (k_path) { *k_path = kp; kp = NULL; }
    if (v_path) { *v_path = vp; vp = NULL; }
    if (mean_path) { *mean_path = mp; mp = NULL; }
out:
    free(kp);
    free(vp);
    free(mp);
    return st;
}

enum oscar_status oscar_export_pt(const struct oscar_artifact * a, const char * out_dir, char ** k_path,
                                  char ** v_path) {
    return oscar_export_pt_all(a, out_dir, k_path, v_path, NULL);
}

void oscar_export_rot_to_ggml(const float * src, float * dst, int32_t D, bool permute) {
    OSCAR_ASSERT(!permute || D % 2 == 0);
    int32_t h = D / 2;
    for (int32_t i = 0; i < D; i++) {
        int32_t r = !permute ? i : (i < h ? 2 * i : 2 * (i - h) + 1); // row of M that holds src row i
        for (int32_t j = 0; j < D; j++) dst[(size_t) j * (size_t) D + (size_t) r] = src[(size_t) i * (size_t) D + (size_t) j];
    }
}

// ---- GGUF ----------------------------------------------------------------------

static enum oscar_status check_base(const struct oscar_artifact * a, const struct osc_gguf * g, const char * arch) {
    const char * path = osc_gguf_path(g);
    char         key[160];
    uint32_t     n_layer = 0, n_head = 0, emb = 0, kl = 0;
    snprintf(key, sizeof key, "%s.block_count", arch);
    if (osc_gguf_get_u32(g, key, &n_layer) != OSCAR_OK) return osc_error_prefix(OSCAR_ERR_FORMAT, "base model");
    snprintf(key, sizeof key, "%s.attention.key_length", arch);
    if (osc_gguf_get_u32(g, key, &kl) != OSCAR_OK) {
        snprintf(key, sizeof key, "%s.attention.head_count", arch);
        enum oscar_status st = osc_gguf_get_u32(g, key, &n_head);
        snprintf(key, sizeof key, "%s.embedding_length", arch);
        if (st != OSCAR_OK || osc_gguf_get_u32(g, key, &emb) != OSCAR_OK || n_head == 0)
            return osc_error(OSCAR_ERR_FORMAT, "%s: cannot tell the head_dim (no %s.attention.key_length, "
                             "head_count or embedding_length)", path, arch);
        kl = emb / n_head;
    }
    if ((int32_t) n_layer != a->n_layer || (int32_t) kl != a->head_dim)
        return osc_error(OSCAR_ERR_INVALID, "%s: base model has %u layers of head_dim %u, the artifact %d of %d",
                         path, n_layer, kl, (int) a->n_layer, (int) a->head_dim);
    for (int64_t i = 0; i < osc_gguf_n_tensors(g); i++)
        if (strstr(osc_gguf_tensor(g, i)->name, "_rot.weight"))
            return osc_error(OSCAR_ERR_INVALID, "%s: already has rotation tensor '%s'", path,
                             osc_gguf_tensor(g, i)->name);
    for (int64_t i = 0; i < osc_gguf_n_kv(g); i++)
        if (!strncmp(osc_gguf_key(g, i), "oscar.", 6))
            return osc_error(OSCAR_ERR_INVALID, "%s: already has oscar metadata ('%s')", path, osc_gguf_key(g, i));
    return OSCAR_OK;
}

static enum oscar_status add_meta(struct osc_gguf_writer * w, const struct oscar_artifact * a, bool permuted) {
    static const char * const str_keys[] = { "oscar.base_model", "oscar.architecture", "oscar.k_objective",
                                             "oscar.v_objective", "oscar.composition", "oscar.calib_tag",
                                             "oscar.tool", NULL };
    enum oscar_status st = osc_gguf_writer_kv_u32(w, "oscar.format_version", OSCAR_ARTIFACT_FORMAT_VERSION);
    for (int i = 0; str_keys[i] && st == OSCAR_OK; i++) {
        const char * v = oscar_artifact_get_meta(a, str_keys[i]);
        if (v) st = osc_gguf_writer_kv_cstr(w, str_keys[i], v);
    }
    if (st == OSCAR_OK) st = osc_gguf_writer_kv_cstr(w, "oscar.qk_order", permuted ? "ggml" : "hf");
    if (st == OSCAR_OK) st = osc_gguf_writer_kv_u32(w, "oscar.num_layers", (uint32_t) a->n_layer);
    if (st == OSCAR_OK) st = osc_gguf_writer_kv_u32(w, "oscar.head_dim", (uint32_t) a->head_dim);
    if (st == OSCAR_OK) st = osc_gguf_writer_kv_f32(w, "oscar.k_clip_ratio", strtof(meta_or(a, "oscar.k_clip_ratio", "0"), NULL));
    if (st == OSCAR_OK) st = osc_gguf_writer_kv_f32(w, "oscar.v_clip_ratio", strtof(meta_or(a, "oscar.v_clip_ratio", "0"), NULL));
    uint64_t nc = (uint64_t) a->n_layer * (uint64_t) (a->rot.n_clip);
    if (st == OSCAR_OK) st = osc_gguf_writer_kv_arr(w, "oscar.k_clip", OSC_GGUF_FLOAT32, a->rot.k_clip, nc);
    if (st == OSCAR_OK) st = osc_gguf_writer_kv_arr(w, "oscar.v_clip", OSC_GGUF_FLOAT32, a->rot.v_clip, nc);
    return st;
}

enum oscar_status oscar_export_gguf(const struct oscar_artifact * a, const char * out_path,
                                    const struct oscar_export_gguf_opts * o, bool * permuted_out) {
    struct osc_gguf *        g   = NULL;
    struct osc_gguf_writer * w   = NULL;
    float *                  rot = NULL;
    const char *             arch;
    size_t                   arch_len = 0;
    char                     arch_buf[64];
    enum oscar_status        st;
    if (a->rot.n_rot > 1)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "artifact has per-KV-head rotations [%d,%d,%d]; the llama.cpp fork "
                         "creates blk.N.attn_k_rot/attn_v_rot as one [D,D] tensor per layer (src/models/qwen3.cpp) "
                         "and has no per-head form: calibrate with --rotation-grouping layer, or export --format pt "
                         "(k_rotation_perhead.pt, format_version 2, which the OptR SGLang engine loads)",
                         (int) a->n_head_kv, (int) a->head_dim, (int) a->head_dim);
    if (a->rot.k_mean)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "artifact centres keys on k_mean [%d,%d,%d]; the llama.cpp fork "
                         "reads no key-mean tensor (src/models/qwen3.cpp creates only blk.N.attn_k_rot/attn_v_rot; "
                         "its q2_0 subtracts each row's own mean) and would serve uncentred keys: calibrate with "
                         "--no-optr-center, or export --format pt (k_mean_decode.pt, which the OptR SGLang "
                         "engine loads)", (int) a->n_layer, (int) a->n_head_kv, (int) a->head_dim);
    if ((st = check_hf_order(a)) != OSCAR_OK) return st;
    if (o->base) {
        if ((st = osc_gguf_open(o->base, &g)) != OSCAR_OK) return osc_error_prefix(st, "--base");
        if ((st = osc_gguf_get_str(g, "general.architecture", &arch, &arch_len)) != OSCAR_OK) goto out;
        snprintf(arch_buf, sizeof arch_buf, "%.*s", (int) (arch_len < 63 ? arch_len : 63), arch);
        if ((st = check_base(a, g, arch_buf)) != OSCAR_OK) goto out;
    } else {
        snprintf(arch_buf, sizeof arch_buf, "%s", meta_or(a, "oscar.architecture", ""));
    }
    struct oscar_serve_gguf sg = {.base_arch = o->base ? arch_buf : NULL};
    if (o->target && (st = oscar_serve_check(a, o->target, &sg)) != OSCAR_OK) goto out;
    bool permute = o->qk_order == OSCAR_EXPORT_QK_GGML || (o->qk_order == OSCAR_EXPORT_QK_AUTO && !strcmp(arch_buf, "llama"));
    if (permute && a->head_dim % 2) {
        st = osc_error(OSCAR_ERR_INVALID, "cannot permute an odd head_dim %d", (int) a->head_dim);
        goto out;
    }
    size_t D = (size_t) a->head_dim, L = (size_t) a->n_layer;
    if (!(rot = malloc(2 * L * D * D * sizeof *rot))) {
        st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t l = 0; l < L; l++) {
        oscar_export_rot_to_ggml(oscar_rotations_k(&a->rot, (int32_t) l, 0), rot + 2 * l * D * D, a->head_dim, permute);
        oscar_export_rot_to_ggml(oscar_rotations_v(&a->rot, (int32_t) l, 0), rot + (2 * l + 1) * D * D, a->head_dim, false);
    }
    if ((st = osc_gguf_writer_new(g ? osc_gguf_alignment(g) : 32, &w)) != OSCAR_OK) goto out;
    if (g) st = osc_gguf_copy_kvs(w, g);
    else st = osc_gguf_writer_kv_u32(w, "general.alignment", 32);
    if (st == OSCAR_OK) st = add_meta(w, a, permute);
    for (int64_t i = 0; g && i < osc_gguf_n_tensors(g) && st == OSCAR_OK; i++) {
        const struct osc_gguf_tensor * t = osc_gguf_tensor(g, i);
        st = osc_gguf_writer_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes);
    }
    int64_t ne[2] = { a->head_dim, a->head_dim };
    char    name[64];
    for (size_t l = 0; l < L && st == OSCAR_OK; l++) {
        snprintf(name, sizeof name, "blk.%zu.attn_k_rot.weight", l);
        st = osc_gguf_writer_tensor(w, name, OSC_GGML_F32, 2, ne, rot + 2 * l * D * D, D * D * sizeof(float));
        snprintf(name, sizeof name, "blk.%zu.attn_v_rot.weight", l);
        if (st == OSCAR_OK)
            st = osc_gguf_writer_tensor(w, name, OSC_GGML_F32, 2, ne, rot + (2 * l + 1) * D * D, D * D * sizeof(float));
    }
    if (st == OSCAR_OK) st = osc_gguf_writer_write(w, out_path);
    if (st == OSCAR_OK && permuted_out) *permuted_out = permute;
out:
    osc_gguf_writer_free(w);
    osc_gguf_close(g);
    free(rot);
    return st;
}
