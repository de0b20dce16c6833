// oscar-serve.c - engine loadability checks and serve recipes (see oscar-serve.h).
// The forks' sources these follow are cited in lib/util/target.c.
#include "formats/oscar-serve.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hub/hub.h"

static const char * meta_or(const struct oscar_artifact * a, const char * key, const char * dflt) {
    const char * v = oscar_artifact_get_meta(a, key);
    return v && *v ? v : dflt;
}

// The target the artifact's clips were chosen for (artifacts before oscar.target: oscar).
static const struct oscar_target_profile * calibrated_for(const struct oscar_artifact * a) {
    const struct oscar_target_profile * t = oscar_target_find(meta_or(a, "oscar.target", "oscar"));
    return t ? t : oscar_target_get(OSCAR_TARGET_OSCAR);
}

static int32_t meta_int(const struct oscar_artifact * a, const char * key, int32_t dflt) {
    const char * v = oscar_artifact_get_meta(a, key);
    char *       end = NULL;
    long         x = v ? strtol(v, &end, 10) : 0;
    return v && *v && end && !*end && x >= 0 && x <= (1L << 30) ? (int32_t) x : dflt;
}

enum oscar_status oscar_serve_check(const struct oscar_artifact * a, const struct oscar_target_profile * t,
                                    const struct oscar_serve_gguf * g) {
    if (t->id == OSCAR_TARGET_OSCAR) return OSCAR_OK;
    const char * arch = meta_or(a, "oscar.architecture", "unknown");
    if (a->rot.n_rot > 1 && !t->per_head_rotations)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "target %s: the artifact has per-KV-head rotations [%d,%d,%d] and %s "
                         "loads one [D,D] rotation per layer%s; calibrate with --rotation-grouping layer%s", t->name,
                         (int) a->n_head_kv, (int) a->head_dim, (int) a->head_dim, t->engine,
                         t->id == OSCAR_TARGET_SGLANG ? " (load_oscar_rotations raises ValueError on any other shape)"
                                                      : " (blk.N.attn_k_rot)",
                         t->id == OSCAR_TARGET_SGLANG ? " (or export --format pt --target oscar: "
                                                        "k_rotation_perhead.pt, format_version 2, which the OptR "
                                                        "SGLang engine loads)" : "");
    if (a->rot.k_mean && t->id == OSCAR_TARGET_LLAMACPP)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "target %s: the artifact centres keys on k_mean and %s reads no "
                         "key-mean tensor (src/models/qwen3.cpp: blk.N.attn_k_rot/attn_v_rot only), so it would "
                         "serve uncentred keys; calibrate with --no-optr-center, or export --format pt "
                         "(k_mean_decode.pt, which the OptR SGLang engine loads)", t->name, t->engine);
    int32_t sink = meta_int(a, "oscar.sink", t->sink), recent = meta_int(a, "oscar.recent", t->recent);
    if (sink % t->window_align || recent % t->window_align)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "target %s: the artifact was measured with sink %d / recent %d, and %s "
                         "needs multiples of %d (SGLANG_MIXED_KV_PREFIX/RECENT_TOKENS must be multiples of N_Q = 8 "
                         "with a bfloat16 HP tier); recalibrate with such --sink/--recent (its defaults are %d/%d)",
                         t->name, (int) sink, (int) recent, t->engine, (int) t->window_align, (int) t->sink,
                         (int) t->recent);
    int32_t group = meta_int(a, "oscar.group_size", a->head_dim);
    if (t->id == OSCAR_TARGET_SGLANG && (group <= 0 || a->head_dim % group))
        return osc_error(OSCAR_ERR_UNSUPPORTED, "target %s: INT2 group %d does not divide head_dim %d, which %s "
                         "refuses (_resolve_quant_grouping); recalibrate with a --group-size that divides it",
                         t->name, (int) group, (int) a->head_dim, t->engine);
    if (!oscar_target_arch_ok(t, arch) && !t->archs)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "target %s: the artifact is for a %s model, and %s: %s", t->name,
                         arch, t->engine, t->refused_why);
    if (!oscar_target_arch_ok(t, arch))
        return osc_error(OSCAR_ERR_UNSUPPORTED, "target %s: the artifact is for a %s model, and %s applies rotation "
                         "tensors only in %s graphs (src/models/qwen3.cpp; another architecture's GGUF fails to load "
                         "with \"wrong number of tensors\"); %s", t->name, arch, t->engine, oscar_target_arch_list(t),
                         oscar_target_arch_ok(oscar_target_get(OSCAR_TARGET_SGLANG), arch)
                             ? "serve this one with SGLang (--format pt)"
                             : "no OSCAR engine serves its rotations (--target oscar for oscar-verify)");
    if (g && !g->base_arch)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "target %s: %s reads the rotation tensors from the model's own GGUF, "
                         "so a standalone rotation file cannot be served; pass --base MODEL.gguf (or --target oscar "
                         "for the standalone file)", t->name, t->engine);
    if (g && !oscar_target_arch_ok(t, g->base_arch))
        return osc_error(OSCAR_ERR_UNSUPPORTED, "target %s: --base is a %s GGUF, and %s applies rotation tensors only "
                         "in %s graphs (it would fail with \"wrong number of tensors\"); use a %s GGUF of the model",
                         t->name, g->base_arch, t->engine, oscar_target_arch_list(t), oscar_target_arch_list(t));
    if (t->id == OSCAR_TARGET_LLAMACPP && ((int64_t) a->n_head_kv * a->head_dim) % 32)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "target %s: a KV row of %d x %d values is not a whole number of Q2_0 "
                         "blocks of 32", t->name, (int) a->n_head_kv, (int) a->head_dim);
    return OSCAR_OK;
}

// ---- recipe ------------------------------------------------------------------------------

static void env(struct oscar_serve_recipe * r, const char * name, const char * fmt, ...) {
    if (r->n_env >= OSCAR_SERVE_MAX_ENV) return;
    struct oscar_serve_env * e = &r->env[r->n_env++];
    snprintf(e->name, sizeof e->name, "%s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->value, sizeof e->value, fmt, ap);
    va_end(ap);
}

static void note(struct oscar_serve_recipe * r, const char * fmt, ...) {
    if (r->n_notes >= OSCAR_SERVE_MAX_NOTES) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->notes[r->n_notes++], sizeof r->notes[0], fmt, ap);
    va_end(ap);
}

bool oscar_serve_shell_quote(const char * s, char * buf, size_t n) {
    bool bare = *s != '\0';
    for (const char * p = s; *p && bare; p++)
        bare = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
               strchr("_./:@%+=,-", *p);
    size_t k = 0;
    if (bare) return (size_t) snprintf(buf, n, "%s", s) < n;
    if (k + 1 >= n) return false;
    buf[k++] = '\'';
    for (const char * p = s; *p; p++) {
        const char * piece = *p == '\'' ? "'\\''" : NULL;
        size_t       len = piece ? 4 : 1;
        if (k + len + 2 > n) return false;
        if (piece) memcpy(buf + k, piece, len);
        else buf[k] = *p;
        k += len;
    }
    buf[k++] = '\'';
    buf[k] = '\0';
    return true;
}

// Notes shared by both engines: what the served cache does not reproduce of oscar's measurement.
static void common_notes(const struct oscar_artifact * a, const struct oscar_target_profile * t,
                         struct oscar_serve_recipe * r) {
    const struct oscar_target_profile * c = calibrated_for(a);
    bool searched = strcmp(meta_or(a, "oscar.clip_mode", "searched"), "fixed") != 0;
    if (c->id != t->id && searched && c->clips != t->clips)
        note(r, "the clips were chosen for target %s (%s clips); %s takes %s: recalibrate with --target %s for "
             "clips searched for this engine", c->name, oscar_target_clips_name(c->clips), t->engine,
             oscar_target_clips_name(t->clips), t->name);
    if (a->rot.k_mean)
        note(r, "the artifact centres keys on k_mean: the export writes it to k_mean_decode.pt, which only the OptR "
             "SGLang engine reads (SGLANG_OSCAR_K_MEAN_PATH with SGLANG_OSCAR_K_MEAN_IN_POOL=1); %s does not, "
             "and serves uncentred keys", t->engine);
    if (oscar_artifact_get_meta(a, "oscar.imported_from"))
        note(r, "imported rotations: sink/recent/group come from the import (%s)",
             meta_or(a, "oscar.imported_from", "?"));
}

static void sglang_recipe(const struct oscar_artifact * a, const struct oscar_target_profile * t,
                          const struct oscar_serve_files * f, struct oscar_serve_recipe * r) {
    const char * arch = meta_or(a, "oscar.architecture", "unknown");
    env(r, "SGLANG_ENABLE_MIXED_KV_WINDOWS", "1");
    env(r, "SGLANG_MIXED_KV_PREFIX_TOKENS", "%d", (int) meta_int(a, "oscar.sink", t->sink));
    env(r, "SGLANG_MIXED_KV_RECENT_TOKENS", "%d", (int) meta_int(a, "oscar.recent", t->recent));
    env(r, "SGLANG_MIXED_KV_HP_DTYPE", "bfloat16");
    env(r, "SGLANG_MIXED_KV_SCALE_DTYPE", "%s", meta_or(a, "oscar.scale_dtype", "float32"));
    env(r, "SGLANG_OSCAR_K_ROTATION_PATH", "%s", f->k_pt);
    env(r, "SGLANG_OSCAR_V_ROTATION_PATH", "%s", f->v_pt);
    env(r, "SGLANG_OSCAR_K_CLIP_RATIO", "%s", meta_or(a, "oscar.k_clip_ratio", "0.96"));
    env(r, "SGLANG_OSCAR_V_CLIP_RATIO", "%s", meta_or(a, "oscar.v_clip_ratio", "0.92"));
    // models/qwen3.py (and glm4_moe.py) fold R_V into qkv_proj; other models rotate V in the pool
    env(r, "SGLANG_OSCAR_ABSORB_V_ROTATION", "%d", !strcmp(arch, "qwen3") ? 1 : 0);
    const char * id = oscar_artifact_get_meta(a, "oscar.base_model_id");
    if (id && oscar_hub_repo_id_valid(id))
        snprintf(r->model_line, sizeof r->model_line, "export MODEL=\"${MODEL:-%s}\"", id);
    else
        snprintf(r->model_line, sizeof r->model_line, ": \"${MODEL:?set MODEL to the Hugging Face model the "
                 "rotations were calibrated on}\"");
    snprintf(r->command, sizeof r->command, "python -m sglang.launch_server --model-path \"$MODEL\" "
             "--attention-backend triton --kv-cache-dtype int2 --kv-cache-quant-group-size %d",
             (int) meta_int(a, "oscar.group_size", a->head_dim));
}

const char * oscar_serve_llamacpp_clip(const struct oscar_artifact * a) {
    return meta_or(a, "oscar.k_clip_ratio", "0.96");
}

static void llamacpp_recipe(const struct oscar_artifact * a, const struct oscar_target_profile * t,
                            const struct oscar_serve_files * f, struct oscar_serve_recipe * r) {
    const char * kc = oscar_serve_llamacpp_clip(a), * vc = meta_or(a, "oscar.v_clip_ratio", kc);
    env(r, "LLAMA_KV_NO_HADAMARD", "1"); // the rotation is in the graph; the quantizer must not add its own
    // nor the attention: upstream llama.cpp rotates Q/K (H_128 at head_dim 128) and V (H_64) of a
    // quantized cache again after the model's rotation (src/llama-kv-cache.cpp attn_rot_k/_v), which
    // undoes what the calibration chose (served-engine check: ppl 12068 with it, 1443 without);
    // oscar-verify's q2_0 is this recipe, q2_0-attn-rot the fork's default
    env(r, "LLAMA_ATTN_ROT_DISABLE", "1");
    env(r, "LLAMA_KV_CLIP_RATIO", "%s", kc);
    env(r, "LLAMA_KV_HP_SINK", "%d", (int) meta_int(a, "oscar.sink", t->sink));
    env(r, "LLAMA_KV_HP_RECENT", "%d", (int) meta_int(a, "oscar.recent", t->recent));
    if (strcmp(kc, vc))
        note(r, "the fork takes one clip ratio for K and V: K's %s is used, V's %s is not", kc, vc);
    if (calibrated_for(a)->id != OSCAR_TARGET_LLAMACPP)
        note(r, "the clips were searched for uniform INT2, and the fork stores Q2_0 (Lloyd-Max levels, f16 scale "
             "and mean per 32): oscar-verify --methods q2_0 simulates what it serves");
    char q[1100];
    if (!oscar_serve_shell_quote(f->gguf, q, sizeof q)) snprintf(q, sizeof q, "MODEL.gguf");
    snprintf(r->command, sizeof r->command, "\"${LLAMA_CPP_BIN:-./build/bin}/llama-cli\" -m %s --cache-type-k q2_0 "
             "--cache-type-v q2_0 -fa on", q);
}

enum oscar_status oscar_serve_recipe(const struct oscar_artifact * a, const struct oscar_target_profile * t,
                                     const struct oscar_serve_files * f, struct oscar_serve_recipe * r) {
    memset(r, 0, sizeof *r);
    r->target = t;
    if (t->id == OSCAR_TARGET_SGLANG && f->k_pt && f->v_pt) sglang_recipe(a, t, f, r);
    else if (t->id == OSCAR_TARGET_LLAMACPP && f->gguf) llamacpp_recipe(a, t, f, r);
    else return osc_error(OSCAR_ERR_INVALID, "target %s has no serve recipe for these files", t->name);
    common_notes(a, t, r);
    return OSCAR_OK;
}

enum oscar_status oscar_serve_text(const struct oscar_serve_recipe * r, const char * header, char ** text) {
    size_t n = 0;
    FILE * m = open_memstream(text, &n);
    if (!m) return osc_error(OSCAR_ERR_NOMEM, "serve recipe: out of memory");
    for (const char * h = header; h && *h;) {
        size_t len = strcspn(h, "\n");
        fprintf(m, "# %.*s\n", (int) len, h);
        h += len + (h[len] == '\n');
    }
    for (int32_t i = 0; i < r->n_notes; i++) fprintf(m, "# note: %s\n", r->notes[i]);
    char q[2200];
    for (int32_t i = 0; i < r->n_env; i++)
        fprintf(m, "export %s=%s\n", r->env[i].name,
                oscar_serve_shell_quote(r->env[i].value, q, sizeof q) ? q : "''");
    if (r->model_line[0]) fprintf(m, "%s\n", r->model_line);
    fprintf(m, "%s\n", r->command);
    if (fclose(m) != 0) {
        free(*text);
        *text = NULL;
        return osc_error(OSCAR_ERR_NOMEM, "serve recipe: out of memory");
    }
    return OSCAR_OK;
}
