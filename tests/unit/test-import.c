// test-import.c - oscar-import (formats/oscar-import.h): an artifact exported
// as a .pt pair imports back with bit-identical rotations and eigenvalues (per
// layer and per KV head), through oscar_artifact_load too; zoo folder names
// give the calibration fields; shape checks against a model (layers, head_dim,
// KV heads of per-head files); mismatched pairs and bad sources are refused.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/oscar-artifact.h"
#include "formats/oscar-export.h"
#include "formats/oscar-import.h"
#include "formats/pt-writer.h"
#include "util/fs.h"

static char g_dir[64];

static int setup(void ** state) {
    (void) state;
    snprintf(g_dir, sizeof g_dir, "/tmp/oscar-test-import.XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void ** state) {
    (void) state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static char * path_in(const char * name) { return osc_path_join(g_dir, name); }

// Givens-rotation products: exactly representable, orthogonal to fp32 rounding.
static void rotation(float * r, int32_t D, int seed) {
    for (int32_t i = 0; i < D * D; i++) r[i] = (i % (D + 1)) == 0 ? 1.0f : 0.0f;
    for (int32_t p = 0; p + 1 < D; p += 2) {
        double a = 0.3 + 0.1 * seed + 0.05 * p, c = cos(a), s = sin(a);
        r[p * D + p] = (float) c, r[p * D + p + 1] = (float) -s;
        r[(p + 1) * D + p] = (float) s, r[(p + 1) * D + p + 1] = (float) c;
    }
}

static struct oscar_artifact * make(int32_t L, int32_t Hq, int32_t Hkv, int32_t D, bool per_head) {
    struct oscar_artifact * a = NULL;
    assert_int_equal(oscar_artifact_init(L, Hq, Hkv, D, per_head, false, false, &a), OSCAR_OK);
    int32_t R = per_head ? Hkv : 1;
    for (int32_t l = 0; l < L; l++)
        for (int32_t h = 0; h < R; h++) {
            rotation(oscar_rotations_k(&a->rot, l, h), D, l * 7 + h);
            rotation(oscar_rotations_v(&a->rot, l, h), D, l * 5 + h + 1);
        }
    for (size_t i = 0; i < (size_t) (L * R * D); i++) {
        a->rot.k_eig[i] = (float) i * 0.125f;
        a->rot.v_eig[i] = 1.0f / (float) (i + 1);
    }
    const char * meta[][2] = { { "oscar.k_objective", "qqt_r_h_pbr" }, { "oscar.v_objective", "sst_r_h_pbr" } };
    for (size_t i = 0; i < 2; i++) assert_int_equal(oscar_artifact_set_meta(a, meta[i][0], meta[i][1]), OSCAR_OK);
    return a;
}

static void same_tensors(const struct oscar_artifact * a, const struct oscar_artifact * b) {
    int32_t R = a->rot.n_rot;
    size_t  n = (size_t) a->n_layer * (size_t) R * (size_t) a->head_dim;
    assert_int_equal(a->n_layer, b->n_layer);
    assert_int_equal(a->head_dim, b->head_dim);
    assert_int_equal(a->rot.n_rot > 1, b->rot.n_rot > 1);
    assert_memory_equal(a->rot.k, b->rot.k, n * (size_t) a->head_dim * sizeof(float));
    assert_memory_equal(a->rot.v, b->rot.v, n * (size_t) a->head_dim * sizeof(float));
    assert_memory_equal(a->rot.k_eig, b->rot.k_eig, n * sizeof(float));
    assert_memory_equal(a->rot.v_eig, b->rot.v_eig, n * sizeof(float));
}

static void test_round_trip_per_layer(void ** state) {
    (void) state;
    struct oscar_artifact * a = make(3, 4, 2, 8, false), * b = NULL, * c = NULL;
    char * zoo = path_in("Tiny-Model/seq2048_prompt4_group8"), * kp = NULL, * vp = NULL;
    assert_int_equal(oscar_export_pt(a, zoo, &kp, &vp), OSCAR_OK);
    assert_int_equal(oscar_import_source(zoo, NULL, NULL, &b), OSCAR_OK);
    same_tensors(a, b);
    assert_string_equal(oscar_artifact_get_meta(b, "oscar.calib_tag"), "seq2048_prompt4_group8");
    assert_string_equal(oscar_artifact_get_meta(b, "oscar.calib_tokens"), "2048");
    assert_string_equal(oscar_artifact_get_meta(b, "oscar.group_size"), "8");
    assert_string_equal(oscar_artifact_get_meta(b, "oscar.base_model"), "Tiny-Model");
    assert_string_equal(oscar_artifact_get_meta(b, "oscar.composition"), "r_h_pbr");
    assert_string_equal(oscar_artifact_get_meta(b, "oscar.eigenvalues"), "imported");
    assert_string_equal(oscar_artifact_get_meta(b, "oscar.imported_format_version"), "1");
    assert_non_null(strstr(oscar_artifact_get_meta(b, "oscar.imported_from"), "k_rotation_qqt_r_h_pbr.pt sha256:"));
    assert_float_equal(b->rot.k_clip[2], OSCAR_IMPORT_K_CLIP, 0.0);
    assert_float_equal(b->rot.v_clip[0], OSCAR_IMPORT_V_CLIP, 0.0);
    // heads unknown: the shape check compares layers and head_dim only
    assert_int_equal(oscar_artifact_check_shape(b, 3, 9, 3, 8, "m"), OSCAR_OK);
    assert_int_equal(oscar_artifact_check_shape(b, 4, 9, 3, 8, "m"), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "imported rotations have 3 layers of head_dim 8"));
    // written and read back as an artifact, and loaded straight from the .pt file (the other half found)
    char * out = path_in("imported");
    assert_int_equal(oscar_artifact_write(b, out), OSCAR_OK);
    assert_int_equal(oscar_artifact_load(out, NULL, &c), OSCAR_OK);
    same_tensors(a, c);
    oscar_artifact_free(c);
    struct oscar_artifact_trust trust = { .model_sha256 = "abc", .model_label = "m" };
    assert_int_equal(oscar_artifact_load(vp, &trust, &c), OSCAR_OK); // no identity recorded: a warning only
    same_tensors(a, c);
    assert_int_equal(oscar_artifact_check_shape(c, 3, 4, 2, 8, "m"), OSCAR_OK);
    oscar_artifact_free(c);
    oscar_artifact_free(a);
    oscar_artifact_free(b);
    free(zoo), free(kp), free(vp), free(out);
}

static void test_round_trip_per_head_and_model(void ** state) {
    (void) state;
    struct oscar_artifact * a = make(2, 6, 3, 4, true), * b = NULL;
    char * dir = path_in("ph"), * kp = NULL, * vp = NULL;
    assert_int_equal(oscar_export_pt(a, dir, &kp, &vp), OSCAR_OK);
    struct oscar_import_model m    = { .n_layer = 2, .n_head = 6, .n_head_kv = 3, .head_dim = 4, .name = "tiny",
                                       .sha256 = "feed", .architecture = "llama" };
    struct oscar_import_opts  o    = oscar_import_default_opts();
    o.model                        = &m;
    o.k_clip                       = 0.5f;
    assert_int_equal(oscar_import_pt(kp, vp, &o, &b), OSCAR_OK);
    same_tensors(a, b);
    assert_int_equal(b->n_head, 6);
    assert_string_equal(oscar_artifact_get_meta(b, "oscar.base_model_sha256"), "feed");
    assert_string_equal(oscar_artifact_get_meta(b, "oscar.num_heads_source"), "model");
    assert_string_equal(oscar_artifact_get_meta(b, "oscar.imported_format_version"), "2");
    assert_string_equal(oscar_artifact_get_meta(b, "oscar.k_clip_ratio"), "0.50");
    assert_string_equal(oscar_artifact_get_meta(b, "oscar.calib_tag"), "imported");
    oscar_artifact_free(b);
    b = NULL;
    // per-head files know their KV heads: a model with other counts, layers or head_dim is refused
    const struct { int32_t L, Hkv, D; } bad[] = { { 2, 2, 4 }, { 3, 3, 4 }, { 2, 3, 8 } };
    for (size_t i = 0; i < 3; i++) {
        m.n_layer = bad[i].L, m.n_head_kv = bad[i].Hkv, m.head_dim = bad[i].D, m.n_head = 2 * bad[i].Hkv;
        assert_int_equal(oscar_import_pt(kp, vp, &o, &b), OSCAR_ERR_INVALID);
        assert_null(b);
        assert_non_null(strstr(oscar_last_error(), "but the model tiny has"));
    }
    // without a model: Hkv from the tensors; check_shape compares it
    assert_int_equal(oscar_import_pt(kp, vp, NULL, &b), OSCAR_OK);
    assert_int_equal(b->n_head_kv, 3);
    assert_int_equal(oscar_artifact_check_shape(b, 2, 12, 3, 4, "m"), OSCAR_OK);
    assert_int_equal(oscar_artifact_check_shape(b, 2, 8, 2, 4, "m"), OSCAR_ERR_INVALID);
    oscar_artifact_free(b);
    oscar_artifact_free(a);
    free(dir), free(kp), free(vp);
}

// A key mean goes out as k_mean_decode.pt beside the per-head pair and comes back bit for bit.
static void test_round_trip_k_mean(void ** state) {
    (void) state;
    struct oscar_artifact * a = make(2, 4, 2, 4, true), * b = NULL;
    size_t                  n = 2 * 2 * 4;
    a->rot.k_mean                 = malloc(n * sizeof(float));
    assert_non_null(a->rot.k_mean);
    for (size_t i = 0; i < n; i++) a->rot.k_mean[i] = (float) i * 0.375f - 2.0f;
    char * dir = path_in("km"), * kp = NULL, * vp = NULL, * mp = NULL;
    assert_int_equal(oscar_export_pt_all(a, dir, &kp, &vp, &mp), OSCAR_OK);
    assert_non_null(strstr(kp, "/km/k_rotation_perhead.pt"));
    assert_non_null(strstr(vp, "/km/v_rotation_perhead.pt"));
    assert_non_null(strstr(mp, "/km/k_mean_decode.pt"));
    assert_int_equal(oscar_import_source(dir, NULL, NULL, &b), OSCAR_OK);
    same_tensors(a, b);
    assert_non_null(b->rot.k_mean);
    assert_memory_equal(a->rot.k_mean, b->rot.k_mean, n * sizeof(float));
    assert_non_null(strstr(oscar_artifact_get_meta(b, "oscar.imported_k_mean"), "k_mean_decode.pt sha256:"));
    oscar_artifact_free(b);
    // without a key mean: no file, no path
    free(a->rot.k_mean);
    a->rot.k_mean = NULL;
    char * dir2 = path_in("nokm"), * kp2 = NULL, * vp2 = NULL, * mp2 = dir2; // must come back NULL
    assert_int_equal(oscar_export_pt_all(a, dir2, &kp2, &vp2, &mp2), OSCAR_OK);
    assert_null(mp2);
    assert_int_equal(oscar_import_source(dir2, NULL, NULL, &b), OSCAR_OK);
    assert_null(b->rot.k_mean);
    oscar_artifact_free(b);
    oscar_artifact_free(a);
    free(dir), free(kp), free(vp), free(mp), free(dir2), free(kp2), free(vp2);
}

static void test_bad_sources(void ** state) {
    (void) state;
    struct oscar_artifact * a = make(2, 2, 1, 4, false), * b = make(3, 2, 1, 4, false), * c = NULL;
    char * d1 = path_in("two"), * d2 = path_in("three"), * k1 = NULL, * v1 = NULL, * k2 = NULL, * v2 = NULL;
    assert_int_equal(oscar_export_pt(a, d1, &k1, &v1), OSCAR_OK);
    assert_int_equal(oscar_export_pt(b, d2, &k2, &v2), OSCAR_OK);
    assert_int_equal(oscar_import_pt(k1, v2, NULL, &c), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "not a pair"));
    assert_int_equal(oscar_import_source(v1, k1, NULL, &c), OSCAR_ERR_INVALID); // V given first
    assert_non_null(strstr(oscar_last_error(), "K file comes first"));
    // two K files in one folder: ambiguous
    char * extra = path_in("two/k_rotation_other.pt");
    assert_int_equal(symlink(k1, extra), 0);
    assert_int_equal(oscar_import_source(d1, NULL, NULL, &c), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "more than one k_rotation"));
    unlink(extra);
    // a folder without a V file, a file that is not named k_/v_rotation
    assert_int_equal(unlink(v1), 0);
    assert_int_equal(oscar_import_source(d1, NULL, NULL, &c), OSCAR_ERR_NOT_FOUND);
    assert_non_null(strstr(oscar_last_error(), "holds no v_rotation"));
    char * odd = path_in("rot.pt");
    assert_int_equal(rename(k1, odd), 0);
    assert_int_equal(oscar_import_source(odd, NULL, NULL, &c), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "cannot tell whether"));
    // a one-layer pair (the smallest source)
    float rot[16], eig[4];
    rotation(rot, 4, 0);
    memset(eig, 0, sizeof eig);
    char * gk = path_in("one/k_rotation_x.pt"), * gv = path_in("one/v_rotation_x.pt"), * gdir = path_in("one");
    assert_int_equal(osc_mkdirs(gdir), OSCAR_OK);
    struct oscar_pt_rotations r = { 1, "x", 1, 1, 4, rot, eig };
    assert_int_equal(oscar_pt_write_rotations(gk, &r), OSCAR_OK);
    assert_int_equal(oscar_pt_write_rotations(gv, &r), OSCAR_OK);
    assert_int_equal(oscar_import_source(gdir, NULL, NULL, &c), OSCAR_OK);
    assert_int_equal(c->n_layer, 1);
    assert_string_equal(oscar_artifact_get_meta(c, "oscar.composition"), "unknown"); // objective 'x'
    char * art = path_in("art");
    assert_int_equal(oscar_artifact_write(c, art), OSCAR_OK); // an import has every required key
    oscar_artifact_free(c);
    c = NULL;
    // a .pt file and a folder of them are import sources; an artifact directory is not
    assert_false(oscar_import_is_source(art));
    assert_true(oscar_import_is_source(k2));
    assert_true(oscar_import_is_source(d2));
    free(art);
    oscar_artifact_free(a);
    oscar_artifact_free(b);
    free(d1), free(d2), free(k1), free(v1), free(k2), free(v2), free(extra), free(odd), free(gk), free(gv), free(gdir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_per_layer),
        cmocka_unit_test(test_round_trip_per_head_and_model),
        cmocka_unit_test(test_round_trip_k_mean),
        cmocka_unit_test(test_bad_sources),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
