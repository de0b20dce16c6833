// test-grouping.c - --rotation-grouping auto (lib/calibrate/grouping.c) through the
// finisher on planted synthetic layers (K objective ktk, V objective vtv, so the sums
// need k and v rows only):
//   layer 0: the two KV heads draw from different anisotropic distributions, in the
//            calibration and the held-out rows alike -> per-head rotations win;
//   layer 1: both KV heads see the very same rows, so each head's fit is the layer's
//            (its covariance is half the layer's) and both candidates score the same:
//            the tie keeps one rotation per layer. (A layer strictly better than its
//            heads is the tiny Qwen3-MoE fixture's layer 2 in test-calibrate-grouping.sh.)
// Checked: the choice, the record (errors of both candidates), that the gate's OSCAR
// error of each layer is the kept candidate's and equals what a run with that grouping
// forced gives, that a layer-grouped layer holds its one rotation in every head, and
// the artifact (mixed: per-head tensors and the list; every layer kept per layer: written
// as grouping layer, the layer run's tensors), and the resolution of auto to layer for
// --target sglang and --sign-search.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate/calib-verify.h"
#include "calibrate/calibrate.h"
#include "formats/oscar-artifact.h"

#include "test-splitmix.h"

enum { L = 2, HQ = 4, HKV = 2, D = 16, C = 32, LEN = 64, NCAL = 16, NHELD = 4, TC = NCAL * LEN, TH = NHELD * LEN };

// Two distributions per tensor (k, v): x = M_X · (s ⊙ z), M_X orthonormal (Gram-Schmidt of random
// vectors), s strongly anisotropic, z uniform.
struct dists {
    double m[2][2][D * D];   // [k/v][X][D·D]
};

static void orthonormal(double * u, uint64_t * s) {
    for (int a = 0; a < D * D; a++) u[a] = splitmix_unif(s);
    for (int j = 0; j < D; j++) {
        for (int jj = 0; jj < j; jj++) {
            double dot = 0.0;
            for (int a = 0; a < D; a++) dot += u[a * D + j] * u[a * D + jj];
            for (int a = 0; a < D; a++) u[a * D + j] -= dot * u[a * D + jj];
        }
        double nn = 0.0;
        for (int a = 0; a < D; a++) nn += u[a * D + j] * u[a * D + j];
        for (int a = 0; a < D; a++) u[a * D + j] /= sqrt(nn);
    }
}

static void draw(const double * m, uint64_t * s, float * out) {
    double z[D];
    for (int d = 0; d < D; d++) z[d] = splitmix_unif(s) * pow(1.6, d - D / 2);   // scales 0.02 .. 28
    for (int a = 0; a < D; a++) {
        double x = 0.0;
        for (int d = 0; d < D; d++) x += m[a * D + d] * z[d];
        out[a] = (float) x;
    }
}

// Rows [T, Hkv, D] of layer l: head h draws from distribution X = h in layer 0; in layer 1 every
// head holds head 0's row.
static bool same_heads_everywhere;   // every layer like layer 1 (test_all_layer_narrow)

static void rows(const struct dists * ds, int32_t l, int64_t T, uint64_t * s, float * k, float * v) {
    for (int64_t t = 0; t < T; t++)
        for (int h = 0; h < HKV; h++) {
            float * kk = k + ((size_t) t * HKV + (size_t) h) * D, * vv = v + ((size_t) t * HKV + (size_t) h) * D;
            if ((l == 1 || same_heads_everywhere) && h > 0) {
                memcpy(kk, k + (size_t) t * HKV * D, D * sizeof(float));
                memcpy(vv, v + (size_t) t * HKV * D, D * sizeof(float));
                continue;
            }
            draw(ds->m[0][h], s, kk);
            draw(ds->m[1][h], s, vv);
        }
}

struct world {
    struct oscar_stats * st;
    struct oscar_calib_heldout h;
    int32_t seq_start[NHELD + 1];
    float * q[L], * k[L], * v[L], * wo[L];
    const float * woc[L];
};

static void world_make(struct world * w, uint64_t seed) {
    memset(w, 0, sizeof(*w));
    uint64_t s = seed;
    static struct dists ds;
    for (int a = 0; a < 2; a++)
        for (int x = 0; x < 2; x++) orthonormal(ds.m[a][x], &s);
    struct oscar_stats_params sp = oscar_stats_default_params();
    sp.n_layer = L, sp.n_head = HQ, sp.n_head_kv = HKV, sp.head_dim = D, sp.n_threads = 1, sp.max_tokens = TC;
    sp.kinds = OSCAR_STATS_KTK | OSCAR_STATS_VTV;
    assert_int_equal(oscar_stats_init(&sp, &w->st), OSCAR_OK);
    float * k = malloc(sizeof(float) * TC * HKV * D), * v = malloc(sizeof(float) * TC * HKV * D);
    for (int l = 0; l < L; l++) {
        rows(&ds, l, TC, &s, k, v);
        struct oscar_stats_chunk c = {.layer = l, .n_tokens = TC, .k = k, .v = v};
        assert_int_equal(oscar_stats_add(w->st, &c), OSCAR_OK);
    }
    free(k), free(v);
    assert_int_equal(oscar_stats_end_pass(w->st), OSCAR_OK);
    for (int i = 0; i <= NHELD; i++) w->seq_start[i] = i * LEN;
    for (int l = 0; l < L; l++) {
        w->q[l] = malloc(sizeof(float) * TH * HQ * D), w->k[l] = malloc(sizeof(float) * TH * HKV * D);
        w->v[l] = malloc(sizeof(float) * TH * HKV * D), w->wo[l] = malloc(sizeof(float) * C * HQ * D);
        w->woc[l] = w->wo[l];
        rows(&ds, l, TH, &s, w->k[l], w->v[l]);
        for (int i = 0; i < TH * HQ * D; i++) w->q[l][i] = (float) (splitmix_unif(&s) * 0.5);
        for (int i = 0; i < C * HQ * D; i++) w->wo[l][i] = (float) (splitmix_unif(&s) * 0.2);
    }
    w->h = (struct oscar_calib_heldout){.n_layer = L, .n_head = HQ, .n_head_kv = HKV, .head_dim = D, .n_embd = C,
                                        .n_seq = NHELD, .seq_start = w->seq_start, .n_rows = TH, .q = w->q,
                                        .k = w->k, .v = w->v, .wo = w->woc};
}

static void world_free(struct world * w) {
    oscar_stats_free(w->st);
    for (int l = 0; l < L; l++) free(w->q[l]), free(w->k[l]), free(w->v[l]), free(w->wo[l]);
}

static struct oscar_calib_params params(enum oscar_rotation_grouping g, bool search) {
    struct oscar_calib_params p = oscar_calib_default_params();
    p.grouping = g, p.n_threads = 1, p.sink = 4, p.recent = 8, p.seq_len = LEN;
    p.k_objective = OSCAR_STATS_KTK, p.v_objective = OSCAR_STATS_VTV;
    p.clip_search = search;
    if (search) assert_int_equal(oscar_calib_parse_grid("1,0.96,0.9,0.84", &p), OSCAR_OK);
    return p;
}

static void finish(const struct world * w, const struct oscar_calib_params * p, struct oscar_calib_finisher * fin) {
    assert_int_equal(oscar_calib_finish_begin(fin, p, &w->h, NULL, NULL, NULL), OSCAR_OK);
    assert_int_equal(oscar_calib_finish_all(fin, w->st, &w->h), OSCAR_OK);
}

static uint64_t test_seed(void) {
    const char * e = getenv("OSCAR_TEST_SEED");
    uint64_t seed = e ? strtoull(e, NULL, 10) : 14;
    print_message("test-grouping seed %llu (set OSCAR_TEST_SEED to change)\n", (unsigned long long) seed);
    return seed;
}

static void check_choice(bool search) {
    struct world w;
    world_make(&w, test_seed());
    struct oscar_calib_params pa = params(OSCAR_GROUP_AUTO, search), pl = params(OSCAR_GROUP_LAYER, search),
                              ph = params(OSCAR_GROUP_HEAD, search);
    struct oscar_calib_finisher fa, fl, fh;
    finish(&w, &pa, &fa);
    finish(&w, &pl, &fl);
    finish(&w, &ph, &fh);
    const struct oscar_calib_fit * f = &fa.fit;
    const struct oscar_rotations * ra = &f->rot, * rl = &fl.fit.rot, * rh = &fh.fit.rot;
    assert_non_null(ra->head_layer);
    assert_int_equal(ra->n_rot, HKV);
    assert_int_equal(fa.clip.n_clip, HKV);
    for (int l = 0; l < L; l++)
        print_message("%s clips, layer %d: layer %.6g (gate %.6g)  head %.6g (gate %.6g)  -> %s\n",
                      search ? "searched" : "fixed", l, f->err_layer[l], fl.gate.oscar[l], f->err_head[l],
                      fh.gate.oscar[l], ra->head_layer[l] ? "kv_head" : "layer");
    assert_int_equal(ra->head_layer[0], 1);   // planted: heads differ -> per head
    assert_true(f->err_head[1] == f->err_layer[1]);   // planted: identical heads -> a tie
    assert_int_equal(ra->head_layer[1], 0);           // ... kept as one rotation per layer
    assert_int_equal(oscar_rotations_n_head_layers(ra), 1);
    for (int l = 0; l < L; l++) {
        // each candidate scored as the run with that grouping forced scores it (same clips, same evaluator)
        assert_true(fabs(f->err_layer[l] - fl.gate.oscar[l]) <= 1e-9 * fl.gate.oscar[l]);
        assert_true(fabs(f->err_head[l] - fh.gate.oscar[l]) <= 1e-9 * fh.gate.oscar[l]);
        // the gate's error is the kept candidate's, the smaller one
        double kept = ra->head_layer[l] ? f->err_head[l] : f->err_layer[l];
        assert_true(kept <= f->err_layer[l] && kept <= f->err_head[l]);
        assert_true(fabs(fa.gate.oscar[l] - kept) <= 1e-12 * kept);
    }
    assert_true(fa.gate.mean_oscar < fl.gate.mean_oscar && fa.gate.mean_oscar <= fh.gate.mean_oscar);
    // layer 1 (layer-grouped): the layer run's rotation in both heads, the layer run's clips in both
    const size_t dd = (size_t) D * D;
    for (int h = 0; h < HKV; h++) {
        assert_memory_equal(oscar_rotations_k(ra, 1, h), oscar_rotations_k(rl, 1, h), dd * sizeof(float));
        assert_memory_equal(oscar_rotations_v(ra, 1, h), oscar_rotations_v(rl, 1, h), dd * sizeof(float));
        assert_true(*oscar_rotations_k_clip(ra, 1, h) == *oscar_rotations_k_clip(rl, 1, h) &&
                    *oscar_rotations_v_clip(ra, 1, h) == *oscar_rotations_v_clip(rl, 1, h));
        // layer 0 (per head): the head run's rotations and clips
        assert_memory_equal(oscar_rotations_k(ra, 0, h), oscar_rotations_k(rh, 0, h), dd * sizeof(float));
        assert_true(*oscar_rotations_k_clip(ra, 0, h) == *oscar_rotations_k_clip(rh, 0, h) &&
                    *oscar_rotations_v_clip(ra, 0, h) == *oscar_rotations_v_clip(rh, 0, h));
    }
    oscar_calib_finish_free(&fa), oscar_calib_finish_free(&fl), oscar_calib_finish_free(&fh);
    world_free(&w);
}

static void test_planted_choice_searched_clips(void ** state) {
    (void) state;
    check_choice(true);
}

static void test_planted_choice_fixed_clips(void ** state) {
    (void) state;
    check_choice(false);
}

// The artifact of an auto run: mixed -> per-head tensors with the list; every layer kept per layer
// (no OptR) -> written as grouping layer, [D,D] and one clip, the layer run's rotations and clips.
static struct oscar_artifact * artifact(const struct oscar_calib_params * p, const struct oscar_calib_finisher * fin) {
    static struct oscar_model m;
    memset(&m, 0, sizeof m);
    m.config = (struct oscar_model_config){.arch = OSCAR_ARCH_LLAMA, .n_layer = L, .n_embd = C, .n_head = HQ,
                                           .n_head_kv = HKV, .head_dim = D};
    snprintf(m.source_sha256, sizeof m.source_sha256, "%064d", 0);
    static int32_t seq[2] = {0, TC}, held[NHELD + 1] = {TC, TC + LEN, TC + 2 * LEN, TC + 3 * LEN, TC + 4 * LEN};
    struct oscar_calib_corpus corpus = {.n = TC + TH};
    snprintf(corpus.name, sizeof corpus.name, "synthetic");
    snprintf(corpus.sha256, sizeof corpus.sha256, "%064d", 1);
    struct oscar_calib_plan plan = {.n_seq = 1, .seq_start = seq, .n_heldout = NHELD, .heldout_start = held,
                                    .n_tokens = TC, .corpus = &corpus};
    struct oscar_calib_provenance prov = {.model = &m, .corpus = &corpus, .plan = &plan};
    struct oscar_artifact * a = NULL;
    assert_int_equal(oscar_calib_build_artifact(&prov, p, &fin->fit, NULL, &fin->clip, &fin->gate, NULL, &a), OSCAR_OK);
    assert_int_equal(oscar_artifact_validate(a, true), OSCAR_OK);
    return a;
}

static void test_artifact_mixed_and_narrow(void ** state) {
    (void) state;
    for (int all = 0; all < 2; all++) {
        same_heads_everywhere = all;
        struct world w;
        world_make(&w, test_seed());
        struct oscar_calib_params pa = params(OSCAR_GROUP_AUTO, true), pl = params(OSCAR_GROUP_LAYER, true);
        struct oscar_calib_finisher fa, fl;
        finish(&w, &pa, &fa);
        finish(&w, &pl, &fl);
        struct oscar_artifact * a = artifact(&pa, &fa);
        assert_string_equal(oscar_artifact_get_meta(a, "oscar.grouping_layers"), all ? "layer,layer" : "kv_head,layer");
        assert_non_null(strstr(oscar_artifact_get_meta(a, "oscar.grouping_auto"), "ties keep layer"));
        assert_int_equal(a->rot.n_rot > 1, !all);
        assert_int_equal(a->rot.n_clip > 1, !all);
        if (all) {   // the layer run's tensors exactly
            struct oscar_artifact * b = artifact(&pl, &fl);
            assert_memory_equal(a->rot.k, b->rot.k, (size_t) L * D * D * sizeof(float));
            assert_memory_equal(a->rot.v, b->rot.v, (size_t) L * D * D * sizeof(float));
            assert_memory_equal(a->rot.k_clip, b->rot.k_clip, (size_t) L * sizeof(float));
            assert_memory_equal(a->rot.v_clip, b->rot.v_clip, (size_t) L * sizeof(float));
            assert_null(oscar_artifact_get_meta(b, "oscar.grouping_layers"));   // a forced grouping: as before
            oscar_artifact_free(b);
        }
        oscar_artifact_free(a);
        oscar_calib_finish_free(&fa), oscar_calib_finish_free(&fl);
        world_free(&w);
    }
    same_heads_everywhere = false;
}

static void test_resolved_to_layer(void ** state) {
    (void) state;
    struct oscar_calib_params p = params(OSCAR_GROUP_AUTO, true);
    oscar_calib_resolve_grouping(&p);   // target oscar: stays auto
    assert_int_equal(p.grouping, OSCAR_GROUP_AUTO);
    assert_string_equal(p.grouping_why, "");
    p.target = OSCAR_TARGET_SGLANG, p.sink = 32, p.recent = 128;   // the engine's page alignment
    oscar_calib_resolve_grouping(&p);
    assert_int_equal(p.grouping, OSCAR_GROUP_LAYER);
    assert_non_null(strstr(p.grouping_why, "--target sglang"));
    assert_int_equal(oscar_calib_check_target(&p, NULL), OSCAR_OK);
    p = params(OSCAR_GROUP_AUTO, true);
    p.target = OSCAR_TARGET_LLAMACPP;
    oscar_calib_resolve_grouping(&p);
    assert_int_equal(p.grouping, OSCAR_GROUP_LAYER);
    assert_non_null(strstr(p.grouping_why, "--target llamacpp"));
    p = params(OSCAR_GROUP_AUTO, true);
    p.sign_search = true;
    oscar_calib_resolve_grouping(&p);
    assert_int_equal(p.grouping, OSCAR_GROUP_LAYER);
    assert_non_null(strstr(p.grouping_why, "--sign-search"));
    // unresolved auto for an engine that loads one rotation per layer is refused, not written
    p = params(OSCAR_GROUP_AUTO, true);
    p.target = OSCAR_TARGET_SGLANG, p.sink = 32, p.recent = 128;
    assert_int_equal(oscar_calib_check_target(&p, NULL), OSCAR_ERR_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_planted_choice_searched_clips),
        cmocka_unit_test(test_planted_choice_fixed_clips),
        cmocka_unit_test(test_artifact_mixed_and_narrow),
        cmocka_unit_test(test_resolved_to_layer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
