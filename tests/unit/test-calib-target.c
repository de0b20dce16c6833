// test-calib-target.c - target profiles (util/target.h) and the clip search
// that honours them (lib/calibrate/clip.c), on synthetic held-out rows.
//
// The oracle for a shared clip is the per-layer path itself: a search over a
// grid of ONE ratio r reports each layer's objective at r, so summing those
// over layers for every r of the grid and taking the smallest sum must give
// the model-wide choice (sglang: K and V separately; llamacpp: K + V, with the
// Q2_0 quantizer, whose one-ratio searches are compared the same way).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate/calibrate.h"
#include "util/log.h"
#include "util/target.h"

#define SEED 19
#include "test-rng.h"
#include "calib-stages.h"

// L layers, Hq query heads over Hkv = 1 KV head of D = 32 (a shape the fork's Q2_0
// accepts: n_head_kv * D < 128), two held-out sequences of T tokens.
enum { L = 3, HQ = 2, HKV = 1, D = 32, C = 48, T = 96, NSEQ = 2 };

struct fixture {
    struct oscar_calib_heldout h;
    struct oscar_calib_fit     f;
};

// Heavy-tailed rows (a Gaussian scale mixture, heavier in later layers): clipping pays
// off, by different amounts for K and V and per layer.
static float * rows(size_t n, double s, double tail) {
    float * x = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = (float) (s * nrand() * exp(tail * nrand()));
    return x;
}

static void fixture_init(struct fixture * fx) {
    memset(fx, 0, sizeof *fx);
    struct oscar_calib_heldout * h = &fx->h;
    h->n_layer = L, h->n_head = HQ, h->n_head_kv = HKV, h->head_dim = D, h->n_embd = C, h->n_seq = NSEQ;
    h->seq_start = malloc((NSEQ + 1) * sizeof(int32_t));
    for (int32_t s = 0; s <= NSEQ; s++) h->seq_start[s] = s * T;
    h->n_rows = NSEQ * T;
    h->q = calloc(L, sizeof(float *)), h->k = calloc(L, sizeof(float *)), h->v = calloc(L, sizeof(float *));
    h->wo = calloc(L, sizeof(float *));
    h->wo_block = rnd((size_t) L * C * HQ * D, 0.1);
    for (int32_t l = 0; l < L; l++) {
        h->q[l] = rows((size_t) h->n_rows * HQ * D, 1.0, 0.2);
        h->k[l] = rows((size_t) h->n_rows * HKV * D, 1.0, 0.25 * l);
        h->v[l] = rows((size_t) h->n_rows * HKV * D, 1.0, 0.6 - 0.2 * l);
        h->wo[l] = h->wo_block + (size_t) l * C * HQ * D;
    }
    struct oscar_calib_fit * f = &fx->f; // identity rotations: the clip search alone is under test
    assert_int_equal(oscar_rotations_alloc(&f->rot, L, HKV, D, 1, 1, false, false), OSCAR_OK);
    for (int32_t l = 0; l < L; l++)
        for (int32_t i = 0; i < D; i++)
            oscar_rotations_k(&f->rot, l, 0)[i * D + i] = oscar_rotations_v(&f->rot, l, 0)[i * D + i] = 1.0f;
}

static void fixture_free(struct fixture * fx) {
    oscar_calib_heldout_free(&fx->h); // frees q/k/v/wo, wo_block and seq_start
    oscar_rotations_free(&fx->f.rot);
}

// The ratio clip_search_all chose for layer l (into the fixture's rotations, one per layer).
#define KC(fx, l) (*oscar_rotations_k_clip(&(fx).f.rot, (l), 0))
#define VC(fx, l) (*oscar_rotations_v_clip(&(fx).f.rot, (l), 0))

static struct oscar_calib_params params(enum oscar_target t) {
    struct oscar_calib_params p = oscar_calib_default_params();
    p.sink = 8, p.recent = 16, p.n_threads = 1, p.target = t;
    assert_int_equal(oscar_calib_parse_grid("1.00:0.80:0.04", &p), OSCAR_OK);
    return p;
}

// Σ_l objective at each grid ratio alone, from one-ratio searches of target t (per-layer
// path for oscar; for llamacpp the model-wide path, whose one-candidate choice is that ratio).
static void one_ratio_sums(struct fixture * fx, enum oscar_target t, double * k_sum, double * v_sum) {
    struct oscar_calib_params full = params(t);
    for (int32_t g = 0; g < full.n_grid; g++) {
        struct oscar_calib_params p = full;
        p.n_grid = 1, p.grid[0] = full.grid[g];
        struct oscar_calib_clip c;
        assert_int_equal(clip_search_all(&fx->h, &fx->f, &p, &c), OSCAR_OK);
        k_sum[g] = v_sum[g] = 0.0;
        for (int32_t l = 0; l < L; l++) k_sum[g] += c.k_err[l], v_sum[g] += c.v_err[l];
        oscar_calib_clip_free(&c);
    }
}

static int32_t argmin(const double * a, const double * b, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (a[i] + (b ? b[i] : 0.0) < a[best] + (b ? b[best] : 0.0)) best = i;
    return best;
}

static void test_profiles(void ** state) {
    (void) state;
    const struct oscar_target_profile * t = NULL;
    assert_int_equal(osc_parse_target("--target", "sglang", &t), OSCAR_OK);
    assert_int_equal(t->id, OSCAR_TARGET_SGLANG);
    assert_int_equal(t->clips, OSCAR_TARGET_CLIPS_KV);
    assert_int_equal(t->sink, 32);
    assert_int_equal(t->recent, 128);
    assert_false(t->per_head_rotations);
    assert_string_equal(t->format, "pt");
    assert_false(oscar_target_arch_ok(t, "gemma3"));    // sliding windows: the fork's Triton backend drops INT2
    assert_true(oscar_target_arch_ok(t, "glm4moe"));    // full attention: served on the INT2 pool
    assert_true(oscar_target_arch_ok(t, "qwen3moe"));
    assert_int_equal(osc_parse_target("--target", "llamacpp", &t), OSCAR_OK);
    assert_int_equal(t->clips, OSCAR_TARGET_CLIPS_ONE);
    assert_string_equal(t->clip_quant, "q2_0");
    assert_true(oscar_target_arch_ok(t, "qwen3"));
    assert_false(oscar_target_arch_ok(t, "llama"));
    assert_string_equal(t->format, "gguf");
    assert_int_equal(osc_parse_target("--target", "oscar", &t), OSCAR_OK);
    assert_true(oscar_target_arch_ok(t, "phi3"));
    assert_true(t->per_head_rotations && t->per_head_clips);
    assert_int_equal(osc_parse_target("--target", "vllm", &t), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "--target: 'vllm' is not a target (oscar, sglang, llamacpp)"));
    assert_int_equal(osc_parse_target("--target", "SGLang", &t), OSCAR_ERR_INVALID);
    assert_int_equal(osc_parse_target("--target", "", &t), OSCAR_ERR_INVALID);
}

static void test_check_target(void ** state) {
    (void) state;
    struct oscar_calib_params p = params(OSCAR_TARGET_SGLANG);
    p.sink = 32, p.recent = 128;
    assert_int_equal(oscar_calib_check_target(&p, "llama"), OSCAR_OK);
    assert_int_equal(oscar_calib_check_target(&p, "gemma3"), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "the model is gemma3, and the SGLang OSCAR fork: its Triton backend"));
    assert_int_equal(oscar_calib_check_target(&p, "glm4moe"), OSCAR_OK);
    p.sink = 30;
    assert_int_equal(oscar_calib_check_target(&p, "llama"), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "multiples of 8"));
    p.sink = 32, p.grouping = OSCAR_GROUP_HEAD;
    assert_int_equal(oscar_calib_check_target(&p, NULL), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "--rotation-grouping layer"));
    p = params(OSCAR_TARGET_LLAMACPP);
    assert_int_equal(oscar_calib_check_target(&p, "qwen3"), OSCAR_OK);
    assert_int_equal(oscar_calib_check_target(&p, "llama"), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "only in qwen3 graphs, and the model is llama"));
    assert_non_null(strstr(oscar_last_error(), "use --target sglang or oscar"));
    assert_int_equal(oscar_calib_check_target(&p, "gemma3"), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "and the model is gemma3; use --target oscar for it"));
    p.clip_search = false, p.k_clip = 0.96, p.v_clip = 0.92;
    assert_int_equal(oscar_calib_check_target(&p, "qwen3"), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "one clip ratio for K and V"));
    p = params(OSCAR_TARGET_LLAMACPP);
    p.eval_device = "cuda";
    assert_int_equal(oscar_calib_check_target(&p, "qwen3"), OSCAR_ERR_INVALID);
    p = params(OSCAR_TARGET_OSCAR);
    p.grouping = OSCAR_GROUP_HEAD, p.sink = 3;
    assert_int_equal(oscar_calib_check_target(&p, "phi3"), OSCAR_OK);
}

static void test_sglang_one_k_one_v(void ** state) {
    (void) state;
    struct fixture fx;
    fixture_init(&fx);
    struct oscar_calib_params p = params(OSCAR_TARGET_SGLANG);
    struct oscar_calib_clip c, o;
    assert_int_equal(clip_search_all(&fx.h, &fx.f, &p, &c), OSCAR_OK);
    assert_int_equal(c.n_clip, 1);
    for (int32_t l = 1; l < L; l++) {
        assert_true(KC(fx, l) == KC(fx, 0));
        assert_true(VC(fx, l) == VC(fx, 0));
    }
    assert_true((float) c.k_global == KC(fx, 0) && (float) c.v_global == VC(fx, 0));
    double ks[OSCAR_CLIP_GRID_MAX], vs[OSCAR_CLIP_GRID_MAX];
    one_ratio_sums(&fx, OSCAR_TARGET_OSCAR, ks, vs);
    // the fixture tells the three sums apart, so a K/V mix-up in the choice would fail below
    assert_int_not_equal(argmin(ks, NULL, p.n_grid), argmin(vs, NULL, p.n_grid));
    assert_int_not_equal(argmin(ks, NULL, p.n_grid), argmin(ks, vs, p.n_grid));
    assert_true(c.k_global == p.grid[argmin(ks, NULL, p.n_grid)]);
    assert_true(c.v_global == p.grid[argmin(vs, NULL, p.n_grid)]);
    // each layer records its own objective at the shared ratio: the per-layer search's value there
    int32_t bk = argmin(ks, NULL, p.n_grid);
    struct oscar_calib_params one = params(OSCAR_TARGET_OSCAR);
    one.n_grid = 1, one.grid[0] = p.grid[bk];
    assert_int_equal(clip_search_all(&fx.h, &fx.f, &one, &o), OSCAR_OK);
    for (int32_t l = 0; l < L; l++) assert_true(c.k_err[l] == o.k_err[l]);
    oscar_calib_clip_free(&o);
    // the per-layer (oscar) search on the same rows chooses per layer, and differs here
    struct oscar_calib_params per_layer = params(OSCAR_TARGET_OSCAR);
    assert_int_equal(clip_search_all(&fx.h, &fx.f, &per_layer, &o), OSCAR_OK);
    bool differ = false;
    for (int32_t l = 1; l < L; l++) differ = differ || KC(fx, l) != KC(fx, 0) || VC(fx, l) != VC(fx, 0);
    assert_true(differ); // else this fixture would not tell the two apart
    oscar_calib_clip_free(&o);
    oscar_calib_clip_free(&c);
    fixture_free(&fx);
}

static void test_llamacpp_one_ratio(void ** state) {
    (void) state;
    struct fixture fx;
    fixture_init(&fx);
    struct oscar_calib_params p = params(OSCAR_TARGET_LLAMACPP);
    struct oscar_calib_clip c;
    assert_int_equal(clip_search_all(&fx.h, &fx.f, &p, &c), OSCAR_OK);
    for (int32_t l = 0; l < L; l++) {
        assert_true(KC(fx, l) == KC(fx, 0));
        assert_true(VC(fx, l) == KC(fx, 0));
    }
    assert_true(c.k_global == c.v_global);
    double ks[OSCAR_CLIP_GRID_MAX], vs[OSCAR_CLIP_GRID_MAX];
    one_ratio_sums(&fx, OSCAR_TARGET_LLAMACPP, ks, vs);
    assert_true(c.k_global == p.grid[argmin(ks, vs, p.n_grid)]);
    // Q2_0 is not the uniform INT2: the same ratio gives other objectives than the oscar search
    double ko[OSCAR_CLIP_GRID_MAX], vo[OSCAR_CLIP_GRID_MAX];
    one_ratio_sums(&fx, OSCAR_TARGET_OSCAR, ko, vo);
    assert_true(ks[0] != ko[0]);
    oscar_calib_clip_free(&c);
    fixture_free(&fx);
}

static void test_fixed_clips_keep_their_values(void ** state) {
    (void) state;
    struct fixture fx;
    fixture_init(&fx);
    struct oscar_calib_params p = params(OSCAR_TARGET_SGLANG);
    p.clip_search = false, p.k_clip = 0.9, p.v_clip = 0.85;
    struct oscar_calib_clip c;
    assert_int_equal(clip_search_all(&fx.h, &fx.f, &p, &c), OSCAR_OK);
    for (int32_t l = 0; l < L; l++) assert_true(KC(fx, l) == 0.9f && VC(fx, l) == 0.85f);
    oscar_calib_clip_free(&c);
    fixture_free(&fx);
}

int main(void) {
    oscar_log_set_level(OSCAR_LOG_ERROR);
    printf("# seed %d\n", SEED);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profiles),
        cmocka_unit_test(test_check_target),
        cmocka_unit_test(test_sglang_one_k_one_v),
        cmocka_unit_test(test_llamacpp_one_ratio),
        cmocka_unit_test(test_fixed_clips_keep_their_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
