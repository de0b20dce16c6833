// test-artifact.c - formats/oscar-artifact: write/read round trip bit-exact
// (per-layer and per-head layouts), truncated / corrupted oscar.safetensors,
// a missing tensor, tensor shapes that disagree with the metadata, a
// non-orthogonal rotation (rejected when checked, accepted when not), an
// existing non-artifact directory that must not be overwritten; the
// orthogonality bound against single bit flips (D = 64, 128), and
// oscar_artifact_load's integrity checks (recorded sha256, orthogonality, the
// model's identity) with and without force.
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

#include <jansson.h>

#include "formats/oscar-artifact.h"
#include "hub/hub.h"
#include "rotation/rotation.h"
#include "util/fs.h"
#include "util/sha256.h"

#define SEED 777u
enum { L = 2, HQ = 4, HKV = 2, D = 8 };

#include "test-rng.h"

static char tmpdir[256];

// Random orthogonal n x n: Gram-Schmidt of a random matrix in fp64, rounded to fp32.
static void rand_orth_n(float * R, int n) {
    double * M = malloc(sizeof(double) * (size_t) (n * n));
    assert_non_null(M);
    for (int i = 0; i < n * n; i++) M[i] = urand() - 0.5;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < i; k++) {
            double d = 0;
            for (int j = 0; j < n; j++) d += M[i * n + j] * M[k * n + j];
            for (int j = 0; j < n; j++) M[i * n + j] -= d * M[k * n + j];
        }
        double nn = 0;
        for (int j = 0; j < n; j++) nn += M[i * n + j] * M[i * n + j];
        for (int j = 0; j < n; j++) M[i * n + j] /= sqrt(nn), R[i * n + j] = (float) M[i * n + j];
    }
    free(M);
}

static void rand_orth(float * R) { rand_orth_n(R, D); }

static struct oscar_artifact * make(bool per_head) {
    struct oscar_artifact * a;
    assert_int_equal(oscar_artifact_init(L, HQ, HKV, D, per_head, per_head, false, &a), OSCAR_OK);
    int32_t R = per_head ? HKV : 1;
    for (int32_t i = 0; i < L * R; i++) {
        rand_orth(a->rot.k + (size_t) i * D * D);
        rand_orth(a->rot.v + (size_t) i * D * D);
        for (int d = 0; d < D; d++) {
            a->rot.k_eig[i * D + d] = (float) (d + urand());
            a->rot.v_eig[i * D + d] = (float) (d + urand());
        }
    }
    for (int32_t i = 0; i < L * R; i++) a->rot.k_clip[i] = 0.9f + 0.01f * (float) i, a->rot.v_clip[i] = 0.88f;
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
        assert_int_equal(b->rot.n_rot > 1, ph);
        assert_int_equal(b->rot.n_clip > 1, ph);
        assert_memory_equal(a->rot.k, b->rot.k, nr * sizeof(float));
        assert_memory_equal(a->rot.v, b->rot.v, nr * sizeof(float));
        assert_memory_equal(a->rot.k_eig, b->rot.k_eig, ne * sizeof(float));
        assert_memory_equal(a->rot.v_eig, b->rot.v_eig, ne * sizeof(float));
        assert_memory_equal(a->rot.k_clip, b->rot.k_clip, nc * sizeof(float));
        assert_memory_equal(a->rot.v_clip, b->rot.v_clip, nc * sizeof(float));
        assert_string_equal(oscar_artifact_get_meta(b, "oscar.tool"), "1");
        assert_int_equal(oscar_artifact_check_shape(b, L, HQ, HKV, D, "m"), OSCAR_OK);
        assert_int_equal(oscar_artifact_check_shape(b, L, HQ, HKV, 2 * D, "m"), OSCAR_ERR_INVALID);
        // rewriting over an existing artifact replaces it
        assert_int_equal(oscar_artifact_write(a, dir), OSCAR_OK);
        oscar_artifact_free(a);
        oscar_artifact_free(b);
    }
}

// Lets edit() change dir/oscar.safetensors in place (oscar.json is left as it was).
static void rewrite_tensors(const char * dir, void (*edit)(char * buf, size_t * n)) {
    char f[600];
    snprintf(f, sizeof f, "%s/%s", dir, OSCAR_ARTIFACT_TENSORS);
    char * buf = NULL;
    size_t n = 0;
    assert_int_equal(osc_read_file(f, 1 << 24, &buf, &n), OSCAR_OK);
    edit(buf, &n);
    FILE * fp = fopen(f, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, n, fp), n);
    fclose(fp);
    free(buf);
}

// Writes an artifact, lets edit() change its oscar.safetensors, expects read to fail with want.
static void tamper(const char * name, void (*edit)(char * buf, size_t * n), enum oscar_status want, bool orth) {
    struct oscar_artifact * a = make(false), * b = NULL;
    char dir[512];
    path(dir, sizeof dir, name);
    assert_int_equal(oscar_artifact_write(a, dir), OSCAR_OK);
    rewrite_tensors(dir, edit);
    enum oscar_status st = oscar_artifact_read(dir, orth, &b);
    if (st != want) fail_msg("%s: read gave %d, want %d (%s)", name, (int) st, (int) want, oscar_last_error());
    printf("%s: %s\n", name, st == OSCAR_OK ? "ok" : oscar_last_error());
    oscar_artifact_free(b);
    oscar_artifact_free(a);
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
// The first element of layers.1.k_rotation in a loaded oscar.safetensors.
static float * rot_elem(char * buf) {
    uint64_t hl;
    memcpy(&hl, buf, 8);
    char * p = strstr(header_find(buf, "\"layers.1.k_rotation\""), "data_offsets");
    assert_non_null(p);
    unsigned long long off = 0;
    assert_int_equal(sscanf(p, "data_offsets\":[%llu", &off), 1);
    return (float *) (void *) (buf + 8 + hl + off);
}
static void ed_nonorth(char * buf, size_t * n) {
    (void) n;
    float two = 2.0f;
    memcpy(rot_elem(buf), &two, 4);   // R[0][0] = 2: far from orthogonal, still finite
}
static void flip_bit(char * buf, int bit) {
    uint32_t u;
    memcpy(&u, rot_elem(buf), 4);
    u ^= 1u << bit;
    memcpy(rot_elem(buf), &u, 4);
}
static void ed_flip_low(char * buf, size_t * n) { (void) n, flip_bit(buf, 0); }    // lowest mantissa bit
static void ed_flip_exp(char * buf, size_t * n) { (void) n, flip_bit(buf, 23); }   // lowest exponent bit

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
    a->rot.v[3] += 0.01f;   // off by 1e-2 >> the 1e-5 tolerance
    assert_int_equal(oscar_artifact_validate(a, false), OSCAR_OK);
    assert_int_not_equal(oscar_artifact_validate(a, true), OSCAR_OK);
    char dir[512];
    path(dir, sizeof dir, "never");
    assert_int_not_equal(oscar_artifact_write(a, dir), OSCAR_OK);   // the writer checks orthogonality
    assert_int_equal(access(dir, F_OK), -1);
    a->rot.v[3] -= 0.01f;
    a->rot.k_clip[0] = 1.5f;
    assert_int_not_equal(oscar_artifact_validate(a, false), OSCAR_OK);
    a->rot.k_clip[0] = 0.9f;
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

// oscar.grouping_layers (--rotation-grouping auto): written and read back; a list of the wrong
// length or words, a "kv_head" layer in [D,D] tensors, or a "layer" layer whose heads differ
// (without OptR's oscar.refine) is refused.
static void test_grouping_layers(void ** state) {
    (void) state;
    struct oscar_artifact * a = make(true);
    const size_t dd = (size_t) D * D;
    memcpy(a->rot.k + 3 * dd, a->rot.k + 2 * dd, dd * sizeof(float));   // layer 1: one rotation
    memcpy(a->rot.v + 3 * dd, a->rot.v + 2 * dd, dd * sizeof(float));
    ok(oscar_artifact_set_meta(a, "oscar.grouping_layers", "kv_head,layer"));
    ok(oscar_artifact_validate(a, true));
    char dir[512];
    path(dir, sizeof dir, "auto");
    ok(oscar_artifact_write(a, dir));
    struct oscar_artifact * b = NULL;
    ok(oscar_artifact_read(dir, true, &b));
    assert_string_equal(oscar_artifact_get_meta(b, "oscar.grouping_layers"), "kv_head,layer");
    oscar_artifact_free(b);
    const char * bad[] = {"layer,layer", "kv_head", "kv_head,layer,layer", "kv_head,bogus", "kv_head;layer", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ok(oscar_artifact_set_meta(a, "oscar.grouping_layers", bad[i]));
        assert_int_equal(oscar_artifact_validate(a, true), OSCAR_ERR_FORMAT);
        assert_non_null(strstr(oscar_last_error(), "oscar.grouping_layers"));
    }
    ok(oscar_artifact_set_meta(a, "oscar.grouping_layers", "layer,layer"));
    ok(oscar_artifact_set_meta(a, "oscar.refine", "optr"));   // OptR refined each head from the layer's base
    ok(oscar_artifact_validate(a, true));
    oscar_artifact_free(a);
    a = make(false);
    ok(oscar_artifact_set_meta(a, "oscar.grouping_layers", "layer,layer"));
    ok(oscar_artifact_validate(a, true));
    ok(oscar_artifact_set_meta(a, "oscar.grouping_layers", "layer,kv_head"));
    assert_int_equal(oscar_artifact_validate(a, true), OSCAR_ERR_FORMAT);
    oscar_artifact_free(a);
}

// Flipping one bit of an element of size >= 1/sqrt(D) (every row has one) must fail the
// orthogonality bound for the sign, every exponent bit and the mantissa bits from
// 4 + log2(D) up (their diagonal change 1.5·x²·2^(k-24) >= 1.5·2^(k-24)/D exceeds 8 eps32 plus
// the < eps32 of the fp32 rounding); the lowest mantissa bit stays invisible to it (the
// sha256 check of oscar_artifact_load catches that one).
static void test_orth_bit_flips(void ** state) {
    (void) state;
    for (int32_t dim = 64, lg = 6; dim <= 128; dim *= 2, lg++) {
        struct oscar_artifact * a = NULL;
        ok(oscar_artifact_init(1, 1, 1, dim, false, false, false, &a));
        rand_orth_n(a->rot.k, dim);
        rand_orth_n(a->rot.v, dim);
        for (int i = 0; oscar_artifact_required_meta[i]; i++)
            ok(oscar_artifact_set_meta(a, oscar_artifact_required_meta[i], "1"));
        ok(oscar_artifact_validate(a, true));
        int32_t row = dim / 3, c = 0;
        float * r = a->rot.v + (size_t) row * (size_t) dim;
        for (int32_t j = 1; j < dim; j++)
            if (fabsf(r[j]) > fabsf(r[c])) c = j;
        assert_true(fabsf(r[c]) >= 1.0f / sqrtf((float) dim));
        for (int bit = 31; bit >= 0; bit--) {
            uint32_t u;
            memcpy(&u, &r[c], 4);
            u ^= 1u << bit;
            memcpy(&r[c], &u, 4);
            enum oscar_status st = oscar_artifact_validate(a, true);
            if (bit >= 4 + lg && st != OSCAR_ERR_NUMERIC)
                fail_msg("D %d: flipping bit %d of R[%d][%d] passed the orthogonality check", (int) dim, bit,
                         (int) row, (int) c);
            if (bit == 0 && st != OSCAR_OK)
                fail_msg("D %d: the lowest mantissa bit: %s", (int) dim, oscar_last_error());
            u ^= 1u << bit;
            memcpy(&r[c], &u, 4);
        }
        ok(oscar_artifact_validate(a, true));
        oscar_artifact_free(a);
    }
}

// Rewrites dir/oscar.json: sha256 of oscar.safetensors set to `sha` (NULL: the record removed).
static void set_recorded_sha(const char * dir, const char * sha) {
    char f[600];
    snprintf(f, sizeof f, "%s/%s", dir, OSCAR_ARTIFACT_JSON);
    json_error_t err;
    json_t * root = json_load_file(f, 0, &err);
    assert_non_null(root);
    json_t * rec = json_object_get(json_object_get(root, "files"), OSCAR_ARTIFACT_TENSORS);
    assert_non_null(rec);
    if (sha) json_object_set_new(rec, "sha256", json_string(sha));
    else json_object_del(rec, "sha256");
    assert_int_equal(json_dump_file(root, f, 0), 0);
    json_decref(root);
}

static void expect_load(const char * what, const char * dir, const struct oscar_artifact_trust * t,
                        enum oscar_status want, const char * msg) {
    struct oscar_artifact * b = NULL;
    enum oscar_status st = oscar_artifact_load(dir, t, &b);
    if (st != want) fail_msg("%s: load gave %d, want %d (%s)", what, (int) st, (int) want, oscar_last_error());
    if (msg && !strstr(oscar_last_error(), msg)) fail_msg("%s: '%s' lacks '%s'", what, oscar_last_error(), msg);
    printf("%s: %s\n", what, st == OSCAR_OK ? "ok" : oscar_last_error());
    assert_true((st == OSCAR_OK) == (b != NULL));
    oscar_artifact_free(b);
}

// oscar_artifact_load: the recorded sha256, orthogonality, the model's identity; force.
static void test_load_integrity(void ** state) {
    (void) state;
    const struct oscar_artifact_trust model = {.model_sha256 = "1", .model_label = "m.gguf"};
    const struct oscar_artifact_trust other = {.model_sha256 = "abc", .model_label = "other.gguf"};
    const struct oscar_artifact_trust unknown = {.model_sha256 = "", .model_label = "random"};
    const struct oscar_artifact_trust force = {.force = true};
    const struct oscar_artifact_trust other_forced = {.model_sha256 = "abc", .model_label = "other.gguf",
                                                      .force = true};
    struct oscar_artifact * a = make(false);
    char dir[512], f[600], sha[65];
    path(dir, sizeof dir, "load");
    ok(oscar_artifact_write(a, dir));
    expect_load("intact", dir, NULL, OSCAR_OK, NULL);
    expect_load("intact, its model", dir, &model, OSCAR_OK, NULL);
    snprintf(f, sizeof f, "%s/%s", dir, OSCAR_ARTIFACT_TENSORS);
    expect_load("the file itself", f, &model, OSCAR_OK, NULL);
    // (c) another model, or one without an identity
    expect_load("other model", dir, &other, OSCAR_ERR_INVALID,
                "calibrated on 1 (oscar.base_model_sha256 1), but other.gguf has sha256 abc");
    expect_load("unknown model", dir, &unknown, OSCAR_ERR_INVALID, "against random: the model has no sha256 identity");
    expect_load("other model, forced", dir, &other_forced, OSCAR_OK, NULL);
    ok(oscar_artifact_set_meta(a, "oscar.base_model_sha256", ""));   // e.g. a random-init calibration
    path(dir, sizeof dir, "load-noid");
    ok(oscar_artifact_write(a, dir));
    expect_load("artifact without an identity", dir, &model, OSCAR_ERR_INVALID,
                "records no oscar.base_model_sha256");
    path(dir, sizeof dir, "load");
    // (a) a low mantissa bit that orthogonality cannot see: the hash does
    rewrite_tensors(dir, ed_flip_low);
    struct oscar_artifact * b = NULL;
    ok(oscar_artifact_read(dir, true, &b));
    oscar_artifact_free(b);
    expect_load("low bit flipped", dir, NULL, OSCAR_ERR_FORMAT, "was modified or corrupted");
    expect_load("low bit flipped, via the file", f, NULL, OSCAR_ERR_FORMAT, "was modified or corrupted");
    expect_load("low bit flipped, forced", dir, &force, OSCAR_OK, NULL);
    // (b) an exponent bit with a matching record (a writer that hashed bad data): orthogonality
    rewrite_tensors(dir, ed_flip_low);
    rewrite_tensors(dir, ed_flip_exp);
    ok(osc_sha256_file(f, sha));
    set_recorded_sha(dir, sha);
    expect_load("exponent bit flipped, hash matches", dir, NULL, OSCAR_ERR_NUMERIC,
                "layers.1.k_rotation is not orthogonal");
    expect_load("exponent bit flipped, forced", dir, &force, OSCAR_OK, NULL);
    rewrite_tensors(dir, ed_flip_exp);
    ok(osc_sha256_file(f, sha));
    set_recorded_sha(dir, sha);
    expect_load("restored", dir, &model, OSCAR_OK, NULL);
    // a missing record, a missing or broken oscar.json
    set_recorded_sha(dir, NULL);
    expect_load("no recorded sha256", dir, NULL, OSCAR_ERR_FORMAT, "no sha256 (64 hex digits) recorded");
    expect_load("no recorded sha256, forced", dir, &force, OSCAR_OK, NULL);
    set_recorded_sha(dir, "0123");
    expect_load("malformed sha256", dir, NULL, OSCAR_ERR_FORMAT, "no sha256 (64 hex digits) recorded");
    char j[600];
    snprintf(j, sizeof j, "%s/%s", dir, OSCAR_ARTIFACT_JSON);
    ok(osc_write_file_atomic(j, "{\"files\": [", 11));
    expect_load("broken oscar.json", dir, NULL, OSCAR_ERR_FORMAT, "not valid JSON");
    assert_int_equal(unlink(j), 0);
    expect_load("no oscar.json", dir, NULL, OSCAR_ERR_FORMAT, "oscar.json: missing");
    expect_load("no oscar.json, forced", dir, &force, OSCAR_OK, NULL);
    // every failure forced at once still loads; structural errors are never forced
    expect_load("no oscar.json, other model, forced", dir, &other_forced, OSCAR_OK, NULL);
    rewrite_tensors(dir, ed_truncate);
    expect_load("truncated, forced", dir, &force, OSCAR_ERR_FORMAT, NULL);
    oscar_artifact_free(a);
}

// The card of a written artifact: what the YAML carries (only valid ids and
// licence identifiers), that it passes the libyaml check, and that its text
// agrees with the YAML (base model, licence, datasets, gate).
static char * card_of(const struct oscar_artifact * a, const char * name) {
    char dir[512], * text = NULL;
    size_t n = 0;
    path(dir, sizeof dir, name);
    ok(oscar_artifact_write(a, dir));
    char f[600];
    snprintf(f, sizeof f, "%s/%s", dir, OSCAR_ARTIFACT_README);
    ok(osc_read_file(f, 1 << 20, &text, &n));
    if (oscar_hub_check_card(text, n, f) != OSCAR_OK) fail_msg("%s: %s", name, oscar_last_error());
    return text;
}

static void has(const char * text, const char * needle, bool want) {
    if ((strstr(text, needle) != NULL) != want)
        fail_msg("card %s '%s':\n%.1500s", want ? "lacks" : "has", needle, text);
}

static void test_card(void ** state) {
    (void) state;
    struct oscar_artifact * a = make(false);
    ok(oscar_artifact_set_meta(a, "oscar.base_model", "Smollm2 135M"));
    ok(oscar_artifact_set_meta(a, "oscar.base_model_id", "HuggingFaceTB/SmolLM2-135M-Instruct"));
    ok(oscar_artifact_set_meta(a, "oscar.base_model_id_source", "--base-model"));
    ok(oscar_artifact_set_meta(a, "oscar.base_model_license", "apache-2.0"));
    ok(oscar_artifact_set_meta(a, "oscar.calib_datasets", "me/austen,bad id,other/brown"));
    ok(oscar_artifact_set_meta(a, "oscar.gate", "fail"));
    ok(oscar_artifact_set_meta(a, "oscar.sink", "32")); // windows and group SGLang can serve
    ok(oscar_artifact_set_meta(a, "oscar.recent", "128"));
    ok(oscar_artifact_set_meta(a, "oscar.group_size", "8"));
    ok(oscar_artifact_set_summary(a, "{}", "## Gate: table\n\n**FAILED**: not below both.\n"));
    char * c = card_of(a, "card-id");
    has(c, "license: apache-2.0\nlibrary_name: oscar\n", true);
    has(c, "\nbase_model:\n- HuggingFaceTB/SmolLM2-135M-Instruct\n", true);
    has(c, "\ndatasets:\n- me/austen\n- other/brown\noscar_gate: fail\n---\n", true); // "bad id" left out
    has(c, "bad id", false);
    has(c, "# OSCAR rotations for HuggingFaceTB/SmolLM2-135M-Instruct (1)", true);
    has(c, "(Smollm2 135M; Hub id from --base-model)", true);
    has(c, "licence of the base model: `apache-2.0`", true);
    has(c, "## Calibration data\n\n- corpus: `1`, sha256 `1`", true);
    has(c, "[`me/austen`](https://huggingface.co/datasets/me/austen)", true);
    has(c, "**The calibration gate FAILED**", true);
    has(c, "This artifact's gate: **FAILED**.", true);
    has(c, "With `--strict`, a failed gate exits 1 and writes nothing", true);
    has(c, "passed", false);
    has(c, "```sh\noscar-zoo pull <repo> --path <path>", true);
    has(c, "oscar-zoo export <repo>:<path> --target sglang --out rot/\n", true);
    has(c, "--target llamacpp --base \"$M\"", true);
    // Serving: the SGLang recipe with the usage block's file names and the Hub id as MODEL's default
    has(c, "## Serving\n", true);
    has(c, "export SGLANG_ENABLE_MIXED_KV_WINDOWS=1\n", true);
    has(c, "export SGLANG_OSCAR_K_ROTATION_PATH=rot/k_rotation_", true);
    has(c, "export MODEL=\"${MODEL:-HuggingFaceTB/SmolLM2-135M-Instruct}\"\n", true);
    has(c, "--kv-cache-dtype int2 --kv-cache-quant-group-size 8\n", true);
    has(c, "- the OSCAR llama.cpp fork: not servable: target llamacpp: the artifact is for a 1 model", true);
    has(c, "the model calibrated on, HuggingFaceTB/SmolLM2-135M-Instruct", true);
    has(c, "```bibtex\n@misc{zhou2026oscar,\n  title         = {{OSCAR}: Offline Spectral Covariance-Aware "
           "Rotation for 2-bit {KV} Cache Quantization},", true);
    has(c, "eprint        = {2605.17757},\n  archivePrefix = {arXiv},\n  primaryClass  = {cs.LG},", true);
    free(c);
    // no Hub id, a licence that is not an identifier, no datasets, a passed gate
    struct oscar_artifact * b = make(false);
    ok(oscar_artifact_set_meta(b, "oscar.base_model", "Smollm2 135M"));
    ok(oscar_artifact_set_meta(b, "oscar.base_model_license", "Apache License 2.0"));
    ok(oscar_artifact_set_meta(b, "oscar.gate", "pass"));
    c = card_of(b, "card-noid");
    has(c, "\nbase_model:", false);
    has(c, "\ndatasets:", false);
    has(c, "license: other\n", true);
    has(c, "oscar_gate: pass\n", true);
    has(c, "base model: Smollm2 135M (no Hub id known; pass --base-model)", true);
    has(c, "licence of the base model: `Apache License 2.0`", true);
    has(c, "no Hub dataset recorded", true);
    has(c, "This artifact's gate: **PASS**.", true);
    has(c, "FAILED**", false);
    free(c);
    // an id that is not valid never reaches the YAML; no licence at all
    ok(oscar_artifact_set_meta(b, "oscar.base_model_id", "not: an id\n- x"));
    ok(oscar_artifact_set_meta(b, "oscar.base_model_license", ""));
    c = card_of(b, "card-badid");
    has(c, "\nbase_model:", false);
    has(c, "not: an id", false);
    has(c, "license: other\n", true);
    has(c, "licence of the base model not recorded; check the base model's card", true);
    has(c, "OptR", false); // per layer, no key mean: both forks' recipes cover it
    free(c);
    // per KV head with a key mean: neither fork serves it, the card names what the OptR engine reads
    struct oscar_artifact * h = make(true);
    h->rot.k_mean = calloc((size_t) L * HKV * D, sizeof(float));
    assert_non_null(h->rot.k_mean);
    c = card_of(h, "card-perhead");
    has(c, "- the SGLang OSCAR fork: not servable: target sglang: the artifact has per-KV-head rotations", true);
    has(c, "- the OptR SGLang engine (daniel-eai/Output-Aware-INT2-KV-Cache-Quantization) loads per-KV-head "
           "rotations and the key mean: `oscar-zoo export <repo>:<path> --target oscar --format pt --out rot/` "
           "writes `rot/k_rotation_perhead.pt`, `rot/v_rotation_perhead.pt` and `rot/k_mean_decode.pt`", true);
    has(c, "`SGLANG_OSCAR_K_MEAN_PATH` to `k_mean_decode.pt` with `SGLANG_OSCAR_K_MEAN_IN_POOL=1`", true);
    free(c);
    oscar_artifact_free(h);
    oscar_artifact_free(a);
    oscar_artifact_free(b);
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
                                       cmocka_unit_test(test_validate_and_refuse), cmocka_unit_test(test_orth_bit_flips),
                                       cmocka_unit_test(test_grouping_layers),
                                       cmocka_unit_test(test_load_integrity), cmocka_unit_test(test_card)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
