// artifact.c - run parameters, and assembling the artifact: tensors from the
// fit and the clip choice, provenance metadata, the JSON summary (gate, clip,
// timing) and the model-card gate table.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate/base-model.h"
#include "calibrate/calibrate.h"
#include "formats/oscar-artifact.h"
#include "rotation/optr.h"

struct oscar_calib_params oscar_calib_default_params(void) {
    struct oscar_calib_params p;
    memset(&p, 0, sizeof(p));
    p.n_tokens = 20000;
    p.seq_len = 512;
    p.batch = 4;
    p.n_heldout = 2;
    p.grouping = OSCAR_GROUP_LAYER;
    p.k_objective = OSCAR_STATS_QQT;
    p.v_objective = OSCAR_STATS_SST;
    p.composition = OSCAR_COMP_R_H_PBR;
    p.group_size = 0;
    p.scale_dtype = OSCAR_META_F32;
    p.sink = 64;
    p.recent = 256;
    p.clip_search = true;
    p.k_clip = 0.96;
    p.v_clip = 0.92;
    p.optr_center = true;
    p.sign_passes = 2;
    oscar_calib_parse_grid("1.00:0.80:0.02", &p);
    return p;
}

enum oscar_status oscar_calib_check_tiers(const struct oscar_calib_params * p) {
    if ((int64_t) p->seq_len > (int64_t) p->sink + p->recent) return OSCAR_OK;
    return osc_error(OSCAR_ERR_INVALID, "--seq-len %d <= --sink %d + --recent %d: every held-out row stays BF16, so "
                     "the clip search and the gate would compare nothing; use a longer --seq-len or a smaller "
                     "--sink/--recent", (int) p->seq_len, (int) p->sink, (int) p->recent);
}

enum oscar_status oscar_calib_check_target(const struct oscar_calib_params * p, const char * arch) {
    const struct oscar_target_profile * t = oscar_target_get(p->target);
    if (!t->per_head_rotations && p->grouping != OSCAR_GROUP_LAYER)
        return osc_error(OSCAR_ERR_INVALID, "--target %s: %s loads one [D,D] rotation per layer, not one per KV "
                         "head; use --rotation-grouping layer (or --target oscar)", t->name, t->engine);
    if (arch && !oscar_target_arch_ok(t, arch) && !t->archs)
        return osc_error(OSCAR_ERR_INVALID, "--target %s: the model is %s, and %s: %s; use --target oscar for it",
                         t->name, arch, t->engine, t->refused_why);
    if (arch && !oscar_target_arch_ok(t, arch))
        return osc_error(OSCAR_ERR_INVALID, "--target %s: %s applies rotations only in %s graphs, and the model is "
                         "%s; use %s for it", t->name, t->engine, oscar_target_arch_list(t), arch,
                         oscar_target_arch_ok(oscar_target_get(OSCAR_TARGET_SGLANG), arch) ? "--target sglang or oscar"
                                                                                         : "--target oscar");
    if (p->sink % t->window_align || p->recent % t->window_align)
        return osc_error(OSCAR_ERR_INVALID, "--target %s: %s needs --sink and --recent in multiples of %d (its "
                         "page of INT2 tokens with a bfloat16 high-precision tier), not %d and %d", t->name,
                         t->engine, (int) t->window_align, (int) p->sink, (int) p->recent);
    if (t->clips == OSCAR_TARGET_CLIPS_ONE && !p->clip_search && p->k_clip != p->v_clip)
        return osc_error(OSCAR_ERR_INVALID, "--target %s: %s takes one clip ratio for K and V; give --clip R,R "
                         "(not %.2f,%.2f) or search it", t->name, t->engine, p->k_clip, p->v_clip);
    if (strcmp(t->clip_quant, "oscar") && p->clip_search && p->eval_device && strcmp(p->eval_device, "cpu"))
        return osc_error(OSCAR_ERR_INVALID, "--target %s: the clip search simulates %s, which only the CPU "
                         "evaluator has; drop --device %s", t->name, t->cache, p->eval_device);
    return OSCAR_OK;
}

uint32_t oscar_calib_stats_kinds(const struct oscar_calib_params * p) {
    uint32_t k = (uint32_t) p->k_objective | (uint32_t) p->v_objective;
    if (p->v_objective == OSCAR_STATS_SST) k |= OSCAR_STATS_QQT; // the SST weights need QᵀQ
    return k;
}

enum oscar_status oscar_calib_parse_grid(const char * text, struct oscar_calib_params * p) {
    double a, b, s;
    char tail;
    p->n_grid = 0;
    if (sscanf(text, "%lf:%lf:%lf%c", &a, &b, &s, &tail) == 3) {
        if (!(s > 0.0) || a > 1.0 || b < 0.0 || b > a)
            return osc_error(OSCAR_ERR_INVALID, "clip grid '%s': need 1 >= start >= stop >= 0 and step > 0", text);
        for (int32_t i = 0; p->n_grid < OSCAR_CLIP_GRID_MAX; i++) {
            double r = a - i * s;
            if (r < b - 1e-9) break;
            p->grid[p->n_grid++] = (double) (long) (r * 1e6 + 0.5) / 1e6;
        }
        return OSCAR_OK;
    }
    const char * c = text;
    while (*c) {
        char * end;
        double r = strtod(c, &end);
        if (end == c || !(r > 0.0 && r <= 1.0) || p->n_grid >= OSCAR_CLIP_GRID_MAX)
            return osc_error(OSCAR_ERR_INVALID, "clip grid '%s': expected start:stop:step or ratios in (0, 1]", text);
        p->grid[p->n_grid++] = r;
        c = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return osc_error(OSCAR_ERR_INVALID, "clip grid '%s': bad separator", text);
    }
    if (p->n_grid == 0) return osc_error(OSCAR_ERR_INVALID, "clip grid is empty");
    return OSCAR_OK;
}

static const char * kind_name(enum oscar_stats_kind k) {
    switch (k) {
    case OSCAR_STATS_KTK: return "ktk";
    case OSCAR_STATS_VTV: return "vtv";
    case OSCAR_STATS_QQT: return "qqt";
    case OSCAR_STATS_SST: return "sst";
    case OSCAR_STATS_VATT: return "vatt";
    }
    return "?";
}

static const char * dtype_name(enum oscar_quant_meta_dtype t) {
    return t == OSCAR_META_F16 ? "float16" : t == OSCAR_META_BF16 ? "bfloat16" : "float32";
}

#define SETF(key, ...)                                                    \
    do {                                                                  \
        snprintf(buf, sizeof(buf), __VA_ARGS__);                          \
        if ((st = oscar_artifact_set_meta(a, key, buf)) != OSCAR_OK) goto out; \
    } while (0)

// The sign search's per-layer objectives as JSON ("signs" of the summary) and one card line.
static void summary_signs(FILE * J, FILE * M, const struct oscar_calib_signs * sg) {
    if (!sg) {
        fprintf(J, ", \"signs\": {\"mode\": \"canonical\"}");
        fprintf(M, "\nEigenvector signs: canonical (each eigenvector's largest-magnitude component positive).\n");
        return;
    }
    const double * arr[4] = {sg->k_before, sg->k_after, sg->v_before, sg->v_after};
    const char * name[4] = {"k_before", "k_after", "v_before", "v_after"};
    fprintf(J, ", \"signs\": {\"mode\": \"searched\", \"max_passes\": %d, \"objective\": \"clip_search\", "
               "\"mean\": {\"k_before\": %.6g, \"k_after\": %.6g, \"v_before\": %.6g, \"v_after\": %.6g}",
            (int) sg->max_passes, sg->mean_k_before, sg->mean_k_after, sg->mean_v_before, sg->mean_v_after);
    for (int a = 0; a < 4; a++) {
        fprintf(J, ", \"%s\": [", name[a]);
        for (int32_t l = 0; l < sg->n_layer; l++) fprintf(J, "%s%.6g", l ? ", " : "", arr[a][l]);
        fprintf(J, "]");
    }
    const int32_t * ia[3] = {sg->k_flips, sg->v_flips, sg->evals};
    const char * iname[3] = {"k_flips", "v_flips", "evaluations"};
    for (int a = 0; a < 3; a++) {
        fprintf(J, ", \"%s\": [", iname[a]);
        for (int32_t l = 0; l < sg->n_layer; l++) fprintf(J, "%s%d", l ? ", " : "", (int) ia[a][l]);
        fprintf(J, "]");
    }
    fprintf(J, "}");
    fprintf(M, "\nEigenvector signs: searched on the held-out rows (at most %d passes): mean K objective %.4g -> "
               "%.4g, V %.4g -> %.4g.\n", (int) sg->max_passes, sg->mean_k_before, sg->mean_k_after,
            sg->mean_v_before, sg->mean_v_after);
}

static void summary_grouping(FILE * J, FILE * M, const struct oscar_calib_params * p, const struct oscar_calib_fit * f);

static enum oscar_status summary(const struct oscar_calib_params * p, const struct oscar_calib_fit * f, int32_t group,
                                 const struct oscar_calib_clip * c,
                                 const struct oscar_calib_gate * g, const struct oscar_calib_signs * sg,
                                 const struct oscar_calib_timing * t, struct oscar_artifact * a) {
    char * js = NULL, * md = NULL;
    size_t jn = 0, mn = 0;
    FILE * J = open_memstream(&js, &jn), * M = open_memstream(&md, &mn);
    if (!J || !M) {
        if (J) fclose(J);
        if (M) fclose(M);
        free(js);
        free(md);
        return osc_error(OSCAR_ERR_NOMEM, "summary: out of memory");
    }
    fprintf(J, "{\"gate\": {\"metric\": \"post_wo_rel_err\", \"pass\": %s, \"mean\": {\"naive\": %.6g, "
               "\"hadamard\": %.6g, \"oscar\": %.6g}, \"layers\": [",
            g->pass ? "true" : "false", g->mean_naive, g->mean_hadamard, g->mean_oscar);
    fprintf(M, "## Gate: post-W_O relative attention error on held-out sequences\n\n"
               "**%s**: the mean OSCAR error %.4g is %s Hadamard's %.4g and naive INT2's %.4g.%s\n\n"
               "Sink %d, recent %d tokens in BF16; INT2 group %d; naive = symmetric INT2 without rotation; "
               "Hadamard = Sylvester H with clips 0.96/0.92.\n\n| layer | naive INT2 | Hadamard | OSCAR | K clip | V clip |\n"
               "|---:|---:|---:|---:|---:|---:|\n",
            g->pass ? "PASS" : "FAILED", g->mean_oscar, g->pass ? "below" : "not below both", g->mean_hadamard,
            g->mean_naive, g->pass ? "" : " These rotations were written without --strict; on this data they do "
            "not improve on the baselines.", (int) p->sink, (int) p->recent, (int) group);
    const struct oscar_rotations * r = &f->rot;
    for (int32_t l = 0; l < g->n_layer; l++) {   // the card shows head 0's clips
        fprintf(J, "%s[%.6g, %.6g, %.6g]", l ? ", " : "", g->naive[l], g->hadamard[l], g->oscar[l]);
        fprintf(M, "| %d | %.4g | %.4g | %.4g | %.2f | %.2f |\n", (int) l, g->naive[l], g->hadamard[l], g->oscar[l],
                (double) *oscar_rotations_k_clip(r, l, 0), (double) *oscar_rotations_v_clip(r, l, 0));
    }
    fprintf(M, "| **mean** | **%.4g** | **%.4g** | **%.4g** | %.2f | %.2f |\n", g->mean_naive, g->mean_hadamard,
            g->mean_oscar, c->k_global, c->v_global);
    fprintf(J, "]}, \"clip\": {\"mode\": \"%s\", \"target\": \"%s\", \"k_global\": %.4g, \"v_global\": %.4g, "
               "\"per_head\": %s, \"k\": [",
            p->clip_search ? "searched" : "fixed", oscar_target_get(p->target)->name, c->k_global, c->v_global,
            c->n_clip > 1 ? "true" : "false");
    for (int32_t l = 0; l < r->n_layer; l++)   // [L, n_clip] in layer-major order
        for (int32_t h = 0; h < r->n_clip; h++)
            fprintf(J, "%s%.2f", l || h ? ", " : "", (double) *oscar_rotations_k_clip(r, l, h));
    fprintf(J, "], \"v\": [");
    for (int32_t l = 0; l < r->n_layer; l++)
        for (int32_t h = 0; h < r->n_clip; h++)
            fprintf(J, "%s%.2f", l || h ? ", " : "", (double) *oscar_rotations_v_clip(r, l, h));
    fprintf(J, "]}");
    summary_signs(J, M, sg);
    summary_grouping(J, M, p, f);
    fprintf(J, "}"); // timings stay out of the artifact so that reruns are byte-identical
    (void) t;
    fclose(J);
    fclose(M);
    enum oscar_status st = oscar_artifact_set_summary(a, js, md);
    free(js);
    free(md);
    return st;
}

// --rotation-grouping auto: what it chose per layer and on what evidence, or why it became "layer".
// Runs with layer or head asked write none of these (their bytes stay as before auto existed).
static enum oscar_status grouping_meta(const struct oscar_calib_params * p, const struct oscar_calib_fit * f,
                                       struct oscar_artifact * a) {
    if (p->grouping_why[0]) {
        char buf[256];
        snprintf(buf, sizeof buf, "resolved to layer: %s", p->grouping_why);
        return oscar_artifact_set_meta(a, "oscar.grouping_auto", buf);
    }
    if (!f->rot.head_layer) return OSCAR_OK;
    enum oscar_status st = oscar_artifact_set_meta(a, "oscar.grouping_auto",
                                                   "per layer by held-out post-W_O error; ties keep layer");
    char * list = NULL;
    size_t n = 0;
    FILE * m = open_memstream(&list, &n);
    if (!m) return osc_error(OSCAR_ERR_NOMEM, "artifact: out of memory");
    for (int32_t l = 0; l < f->rot.n_layer; l++)
        fprintf(m, "%s%s", l ? "," : "", oscar_rotations_layer_per_head(&f->rot, l) ? "kv_head" : "layer");
    if (fclose(m) != 0) st = osc_error(OSCAR_ERR_NOMEM, "artifact: out of memory");
    else if (st == OSCAR_OK) st = oscar_artifact_set_meta(a, "oscar.grouping_layers", list);
    free(list);
    return st;
}

// The grouping choice for the summary ("grouping") and the card; nothing for layer / head asked.
static void summary_grouping(FILE * J, FILE * M, const struct oscar_calib_params * p, const struct oscar_calib_fit * f) {
    if (p->grouping_why[0]) {
        fprintf(J, ", \"grouping\": {\"mode\": \"auto\", \"resolved\": \"layer\", \"why\": \"%s\"}",
                p->grouping_why);   // fixed text without quotes or backslashes (grouping.c)
        fprintf(M, "\nRotation grouping: auto, resolved to one rotation per layer (%s).\n", p->grouping_why);
        return;
    }
    const struct oscar_rotations * r = &f->rot;
    if (!r->head_layer) return;
    const int32_t nh = oscar_rotations_n_head_layers(r), L = r->n_layer;
    fprintf(J, ", \"grouping\": {\"mode\": \"auto\", \"rule\": \"held-out post-W_O error, ties keep layer\", "
               "\"n_head\": %d, \"layers\": [", (int) nh);
    for (int32_t l = 0; l < L; l++)
        fprintf(J, "%s\"%s\"", l ? ", " : "", oscar_rotations_layer_per_head(r, l) ? "kv_head" : "layer");
    fprintf(J, "], \"err_layer\": [");
    for (int32_t l = 0; l < L; l++) fprintf(J, "%s%.6g", l ? ", " : "", f->err_layer[l]);
    fprintf(J, "], \"err_head\": [");
    for (int32_t l = 0; l < L; l++) fprintf(J, "%s%.6g", l ? ", " : "", f->err_head[l]);
    fprintf(J, "]}");
    fprintf(M, "\nRotation grouping: auto, chosen per layer by the held-out post-W_O error of each candidate at its "
               "own searched or fixed clips (ties keep one rotation per layer): %d of %d layers keep per-KV-head "
               "rotations.\n\n| layer | one per layer | per KV head | kept |\n|---:|---:|---:|:---|\n",
            (int) nh, (int) L);
    for (int32_t l = 0; l < L; l++)
        fprintf(M, "| %d | %.4g | %.4g | %s |\n", (int) l, f->err_layer[l], f->err_head[l],
                oscar_rotations_layer_per_head(r, l) ? "kv_head" : "layer");
}

// oscar.base_model_id / _license (each with where it came from) when known,
// and oscar.calib_datasets ("a/b,c/d") when --dataset was given.
static enum oscar_status set_base_model(struct oscar_artifact * a, const struct oscar_calib_provenance * prov) {
    const struct oscar_base_model * b = prov->base;
    enum oscar_status st = OSCAR_OK;
    if (b && b->id[0] && ((st = oscar_artifact_set_meta(a, "oscar.base_model_id", b->id)) != OSCAR_OK ||
                          (st = oscar_artifact_set_meta(a, "oscar.base_model_id_source", b->id_from)) != OSCAR_OK))
        return st;
    if (b && b->license[0] &&
        ((st = oscar_artifact_set_meta(a, "oscar.base_model_license", b->license)) != OSCAR_OK ||
         (st = oscar_artifact_set_meta(a, "oscar.base_model_license_source", b->license_from)) != OSCAR_OK))
        return st;
    if (prov->n_datasets == 0) return OSCAR_OK;
    char * list = NULL;
    size_t n = 0;
    FILE * f = open_memstream(&list, &n);
    if (!f) return osc_error(OSCAR_ERR_NOMEM, "artifact: out of memory");
    for (int32_t i = 0; i < prov->n_datasets; i++) fprintf(f, "%s%s", i ? "," : "", prov->datasets[i]);
    if (fclose(f) != 0) st = osc_error(OSCAR_ERR_NOMEM, "artifact: out of memory");
    else st = oscar_artifact_set_meta(a, "oscar.calib_datasets", list);
    free(list);
    return st;
}

enum oscar_status oscar_calib_build_artifact(const struct oscar_calib_provenance * prov,
                                             const struct oscar_calib_params * p, const struct oscar_calib_fit * f,
                                             const struct oscar_calib_signs * sg,
                                             const struct oscar_calib_clip * c, const struct oscar_calib_gate * g,
                                             const struct oscar_calib_timing * t, struct oscar_artifact ** out) {
    const struct oscar_model_config * mc = &prov->model->config;
    struct oscar_artifact * a = NULL;
    char buf[512];
    int32_t G = p->group_size > 0 ? p->group_size : mc->head_dim;
    const struct oscar_rotations * r = &f->rot;
    // auto with every layer on its one rotation (no OptR): written as grouping "layer", head 0 of each
    const bool narrow = r->head_layer && !p->refine_optr && !r->k_mean && oscar_rotations_n_head_layers(r) == 0;
    enum oscar_status st = oscar_artifact_init(mc->n_layer, mc->n_head, mc->n_head_kv, mc->head_dim,
                                               !narrow && r->n_rot > 1, !narrow && r->n_clip > 1, r->k_mean != NULL, &a);
    if (st != OSCAR_OK) return st;
    oscar_rotations_copy(&a->rot, r);
    const char * comp = oscar_composition_name(p->composition);
    SETF("oscar.k_objective", "%s_%s", kind_name(p->k_objective), comp);
    SETF("oscar.v_objective", "%s_%s", kind_name(p->v_objective), comp);
    SETF("oscar.composition", "%s", comp);
    SETF("oscar.base_model", "%s", mc->name[0] ? mc->name : "unknown"); // the display name
    if ((st = set_base_model(a, prov)) != OSCAR_OK) goto out;
    SETF("oscar.base_model_sha256", "%s", prov->model->source_sha256);
    SETF("oscar.architecture", "%s", oscar_arch_name(mc->arch));
    SETF("oscar.bits", "2");
    SETF("oscar.group_size", "%d", (int) G);
    SETF("oscar.scale_dtype", "%s", dtype_name(p->scale_dtype));
    SETF("oscar.sink", "%d", (int) p->sink);
    SETF("oscar.recent", "%d", (int) p->recent);
    SETF("oscar.clip_mode", "%s", p->clip_search ? "searched" : "fixed");
    SETF("oscar.target", "%s", oscar_target_get(p->target)->name); // the engine the clips were chosen for
    SETF("oscar.clip_granularity", "%s", oscar_target_get(p->target)->clips == OSCAR_TARGET_CLIPS_LAYER
                                             ? (c->n_clip > 1 ? "layer_head" : "layer")
                                             : oscar_target_get(p->target)->clips == OSCAR_TARGET_CLIPS_KV ? "model_kv"
                                                                                                       : "model");
    SETF("oscar.k_clip_ratio", "%.2f", c->k_global);
    SETF("oscar.v_clip_ratio", "%.2f", c->v_global);
    oscar_calib_tag(prov->plan, G, buf, sizeof(buf));
    if ((st = oscar_artifact_set_meta(a, "oscar.calib_tag", buf)) != OSCAR_OK) goto out;
    SETF("oscar.calib_corpus", "%s", prov->corpus->name);
    SETF("oscar.calib_sha256", "%s", prov->corpus->sha256);
    if (prov->corpus->sources && // a mix: the list (longer than buf, so set as is)
        (st = oscar_artifact_set_meta(a, "oscar.calib_corpus_sources", prov->corpus->sources)) != OSCAR_OK)
        goto out;
    SETF("oscar.calib_tokens", "%lld", (long long) prov->plan->n_tokens);
    SETF("oscar.capture_dtype", "%s", p->capture_bf16 ? "bfloat16" : "float32"); // of the q/k/v the sums saw
    SETF("oscar.calib_sequences", "%d", (int) prov->plan->n_seq);
    SETF("oscar.calib_heldout_tokens", "%d",
         (int) (prov->plan->heldout_start[prov->plan->n_heldout] - prov->plan->heldout_start[0]));
    SETF("oscar.seq_len", "%d", (int) p->seq_len);
    if (prov->tok) {
        SETF("oscar.tokenizer_hash", "%016llx", (unsigned long long) oscar_tokenizer_hash_fnv1a64(prov->tok));
    } else {
        SETF("oscar.tokenizer_hash", "%s", "none (synthetic tokens)");
    }
    SETF("oscar.seed", "%llu", (unsigned long long) p->seed);
    SETF("oscar.tool", "oscar-calibrate %s (%s)", OSCAR_CALIBRATE_VERSION, oscar_build_commit());
    SETF("oscar.gate", "%s", g->pass ? "pass" : "fail");
    if (p->refine_optr) {   // what refine.c did (the per-layer kept heads are in the log with -v)
        struct oscar_optr_params op = oscar_optr_default_params(mc->head_dim, G);
        SETF("oscar.refine", "optr steps=%d lr=%g lambda=%g eval_every=%d qwin=%d train_sequences=%d clip_k=%.2f "
             "clip_v=%.2f center=%s", (int) (p->optr_steps > 0 ? p->optr_steps : op.steps), op.lr, op.lambda,
             (int) op.eval_every, (int) op.qwin, (int) p->optr_train_seq, p->k_clip, p->v_clip,
             f->rot.k_mean ? "k_mean" : "none");
    }
    if ((st = grouping_meta(p, f, a)) != OSCAR_OK) goto out;
    if (sg) {   // what the search gained on its own objective (per layer in the summary's "signs")
        int32_t kf = 0, vf = 0;
        for (int32_t l = 0; l < sg->n_layer; l++) kf += sg->k_flips[l], vf += sg->v_flips[l];
        SETF("oscar.signs", "searched passes=%d k_flips=%d v_flips=%d k_objective=%.6g->%.6g v_objective=%.6g->%.6g "
             "clip_k=%.2f clip_v=%.2f", (int) sg->max_passes, (int) kf, (int) vf, sg->mean_k_before,
             sg->mean_k_after, sg->mean_v_before, sg->mean_v_after, p->k_clip, p->v_clip);
    } else {
        SETF("oscar.signs", "%s", "canonical");
    }
    st = summary(p, f, G, c, g, sg, t, a);
out:
    if (st != OSCAR_OK) oscar_artifact_free(a);
    else *out = a;
    return st;
}
