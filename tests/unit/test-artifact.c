// test-artifact.c - formats/oscar-artifact: write/read round trip bit-exact
// (per-layer and per-head layouts), truncated / corrupted oscar.safetensors,
// a missing tensor, tensor shapes that disagree with the metadata, a
// non-orthogonal rotation (rejected when checked, accepted when not), and an
// existing non-artifact directory that must not be overwritten.
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
#include "rotation/rotation.h"
#include "util/fs.h"

#define SEED 777u
enum { L = 2, HQ = 4, HKV = 2, D = 8 };

#include "test-rng.h"

static char tmpdir[256];

// Random orthogonal D x D: Gram-Schmidt of a random matrix in fp64, rounded to fp32.
static void rand_orth(float * R) {
    double M[D][D];
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) M[i][j] = urand() - 0.5;
    for (int i = 0; i < D; i++) {
        for (int k = 0; k < i; k++) {
            double d = 0;
            for (int j = 0; j < D; j++) d += M[i][j] * M[k][j];
            for (int j = 0; j < D; j++) M[i][j] -= d * M[k][j];
        }
        double n = 0;
        for (int j = 0; j < D; j++) n += M[i][j] * M[i][j];
        for (int j = 0; j < D; j++) M[i][j] /= sqrt(n), R[i * D + j] = (float) M[i][j];
    }
}

static struct oscar_artifact * make(bool per_head) {
    struct oscar_artifact * a;
    assert_int_equal(oscar_artifact_init(L, HQ, HKV, D, per_head, per_head, false, &a), OSCAR_OK);
    int32_t R = per_head ? HKV : 1;
    for (int32_t i = 0; i < L * R; i++) {
        rand_orth(a->k_rotation + (size_t) i * D * D);
        rand_orth(a->v_rotation + (size_t) i * D * D);
        for (int d = 0; d < D; d++) {
            a->k_eigenvalues[i * D + d] = (float) (d + urand());
            a->v_eigenvalues[i * D + d] = (float) (d + urand());
        }
    }
    for (int32_t i = 0; i < L * R; i++) a->k_clip[i] = 0.9f + 0.01f * (float) i, a->v_clip[i] = 0.88f;
    for (int i = 0; oscar_artifact_required_meta[i]; i++)
        assert_int_equal(oscar_artifact_set_meta(a, oscar_artifact_required_meta[i], "1"), OSCAR_OK);
    return a;
}

static void ok(enum oscar_status st) {
    if (st != OSCAR_OK) fail_msg("%s", oscar_last_error());
}

static void path(char * buf, size_t n, const char * name) { snprintf(buf, n, "%s/%s", tmpdir, name); }

static void test_round_trip(void ** state) {
    (void) state;
    printf("seed %u\n", SEED);
    for (int ph = 0; ph < 2; ph++) {
        struct oscar_artifact * a = make(ph), * b = NULL;
        char dir[512];
        path(dir, sizeof dir, ph ? "rt-head" : "rt-layer");
        ok(oscar_artifact_write(a, dir));
        ok(oscar_artifact_read(dir, true, &b));
        size_t R = ph ? HKV : 1, nr = (size_t) L * R * D * D, ne = (size_t) L * R * D, nc = (size_t) L * R;
        assert_int_equal(b->per_head, ph);
        assert_int_equal(b->clip_per_head, ph);
        assert_memory_equal(a->k_rotation, b->k_rotation, nr * sizeof(float));
        assert_memory_equal(a->v_rotation, b->v_rotation, nr * sizeof(float));
        assert_memory_equal(a->k_eigenvalues, b->k_eigenvalues, ne * sizeof(float));
        assert_memory_equal(a->v_eigenvalues, b->v_eigenvalues, ne * sizeof(float));
        assert_memory_equal(a->k_clip, b->k_clip, nc * sizeof(float));
        assert_memory_equal(a->v_clip, b->v_clip, nc * sizeof(float));
        assert_string_equal(oscar_artifact_get_meta(b, "oscar.tool"), "1");
        assert_int_equal(oscar_artifact_check_shape(b, L, HQ, HKV, D, "m"), OSCAR_OK);
        assert_int_equal(oscar_artifact_check_shape(b, L, HQ, HKV, 2 * D, "m"), OSCAR_ERR_INVALID);
        // rewriting over an existing artifact replaces it
        assert_int_equal(oscar_artifact_write(a, dir), OSCAR_OK);
        oscar_artifact_free(a);
        oscar_artifact_free(b);
    }
}

// Loads dir/oscar.safetensors, lets edit() change it, writes it back, expects read to fail with want.
static void tamper(const char * name, void (*edit)(char * buf, size_t * n), enum oscar_status want, bool orth) {
    struct oscar_artifact * a = make(false), * b = NULL;
    char dir[512], f[600];
    path(dir, sizeof dir, name);
    assert_int_equal(oscar_artifact_write(a, dir), OSCAR_OK);
    snprintf(f, sizeof f, "%s/%s", dir, OSCAR_ARTIFACT_TENSORS);
    char * buf = NULL;
    size_t n = 0;
    assert_int_equal(osc_read_file(f, 1 << 24, &buf, &n), OSCAR_OK);
    edit(buf, &n);
    FILE * fp = fopen(f, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, n, fp), n);
    fclose(fp);
    enum oscar_status st = oscar_artifact_read(dir, orth, &b);
    if (st != want) fail_msg("%s: read gave %d, want %d (%s)", name, (int) st, (int) want, oscar_last_error());
    printf("%s: %s\n", name, st == OSCAR_OK ? "ok" : oscar_last_error());
    oscar_artifact_free(b);
    oscar_artifact_free(a);
    free(buf);
}

static char * header_find(char * buf, const char * s) {
    uint64_t hl;
    memcpy(&hl, buf, 8);
    char save = buf[8 + hl];
    buf[8 + hl] = 0;
    char * p = strstr(buf + 8, s);
    buf[8 + hl] = save;
    assert_non_null(p);
    return p;
}

static void ed_truncate(char * buf, size_t * n) { (void) buf, *n /= 2; }
static void ed_header_len(char * buf, size_t * n) {
    uint64_t huge = (uint64_t) *n * 4;
    memcpy(buf, &huge, 8);
}
static void ed_header_json(char * buf, size_t * n) { (void) n, buf[8] = '['; }
static void ed_missing(char * buf, size_t * n) { (void) n, memcpy(header_find(buf, "layers.1.v_clip"), "layers.1.x", 10); }
static void ed_layers(char * buf, size_t * n) {
    (void) n;
    char * p = header_find(buf, "\"oscar.num_layers\":\"2\"");
    p[strlen("\"oscar.num_layers\":\"")] = '3';   // metadata says 3 layers, tensors exist for 2
}
static void ed_head_dim(char * buf, size_t * n) {
    (void) n;
    char * p = header_find(buf, "\"oscar.head_dim\":\"8\"");
    p[strlen("\"oscar.head_dim\":\"")] = '4';     // tensors are [8, 8]
}
static void ed_nonorth(char * buf, size_t * n) {
    (void) n;
    uint64_t hl;
    memcpy(&hl, buf, 8);
    char * p = strstr(header_find(buf, "\"layers.1.k_rotation\""), "data_offsets");
    assert_non_null(p);
    unsigned long long off = 0;
    assert_int_equal(sscanf(p, "data_offsets\":[%llu", &off), 1);
    float two = 2.0f;
    memcpy(buf + 8 + hl + off, &two, 4);   // R[0][0] = 2: far from orthogonal, still finite
}

static void test_corrupt(void ** state) {
    (void) state;
    tamper("truncated", ed_truncate, OSCAR_ERR_FORMAT, true);
    tamper("header-len", ed_header_len, OSCAR_ERR_FORMAT, true);
    tamper("header-json", ed_header_json, OSCAR_ERR_FORMAT, true);
    tamper("missing", ed_missing, OSCAR_ERR_FORMAT, true);
    tamper("layers", ed_layers, OSCAR_ERR_FORMAT, true);
    tamper("head-dim", ed_head_dim, OSCAR_ERR_FORMAT, true);
    tamper("nonorth-unchecked", ed_nonorth, OSCAR_OK, false);
    tamper("nonorth-checked", ed_nonorth, OSCAR_ERR_NUMERIC, true);
}

static void test_validate_and_refuse(void ** state) {
    (void) state;
    struct oscar_artifact * a = make(false);
    ok(oscar_artifact_validate(a, true));
    a->v_rotation[3] += 0.01f;   // off by 1e-2 >> the 1e-5 tolerance
    assert_int_equal(oscar_artifact_validate(a, false), OSCAR_OK);
    assert_int_not_equal(oscar_artifact_validate(a, true), OSCAR_OK);
    char dir[512];
    path(dir, sizeof dir, "never");
    assert_int_not_equal(oscar_artifact_write(a, dir), OSCAR_OK);   // the writer checks orthogonality
    assert_int_equal(access(dir, F_OK), -1);
    a->v_rotation[3] -= 0.01f;
    a->k_clip[0] = 1.5f;
    assert_int_not_equal(oscar_artifact_validate(a, false), OSCAR_OK);
    a->k_clip[0] = 0.9f;
    // an existing directory that is not an artifact is refused and left alone
    path(dir, sizeof dir, "precious");
    char f[600];
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(f, sizeof f, "%s/notes.txt", dir);
    assert_int_equal(osc_write_file_atomic(f, "keep me", 7), OSCAR_OK);
    assert_int_not_equal(oscar_artifact_write(a, dir), OSCAR_OK);
    char * buf = NULL;
    size_t n = 0;
    assert_int_equal(osc_read_file(f, 100, &buf, &n), OSCAR_OK);
    assert_int_equal(n, 7);
    assert_memory_equal(buf, "keep me", 7);
    snprintf(f, sizeof f, "%s/%s", dir, OSCAR_ARTIFACT_TENSORS);
    assert_int_equal(access(f, F_OK), -1);
    free(buf);
    oscar_artifact_free(a);
}

static int setup(void ** state) {
    (void) state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/oscar-test-artifact-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void ** state) {
    (void) state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_round_trip), cmocka_unit_test(test_corrupt),
                                       cmocka_unit_test(test_validate_and_refuse)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
