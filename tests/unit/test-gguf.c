// test-gguf.c - GGUF reader and dequantization against the gguf Python package.
//
// Fixtures: tests/fixtures/gguf (from tests/oracle/gguf_oracle.py, see its
// header), or $OSCAR_GGUF_FIXTURES (the integration test points this at a
// freshly generated set). Dequantized values must be bit-identical to
// gguf.quants.dequantize: both evaluate the same float32 expressions in the
// same order (scale products first), so no tolerance is needed.
// Bad-input cases: every truncation of a valid file, random byte flips and
// hand-built malformed headers must give FORMAT/UNSUPPORTED naming the file.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "formats/gguf.h"
#include "oscar.h"
#include "util/fs.h"

static char fixdir[512];

#define TEST_TMPDIR_NAME "gguf"
#include "test-tmpdir.h"

static int setup_gguf(void ** state) {
    const char * e = getenv("OSCAR_GGUF_FIXTURES");
    snprintf(fixdir, sizeof fixdir, "%s", e && *e ? e : "tests/fixtures/gguf");
    return setup(state);
}

static char * fixture(const char * name) {
    return osc_path_join(fixdir, name);
}

static bool bits_equal(float a, float b) {
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return x == y;
}

// ---- metadata against meta.json ----------------------------------------------
static void check_scalar(struct osc_gguf * g, const char * key, int type, json_t * v) {
    switch (type) {
    case OSC_GGUF_UINT8: case OSC_GGUF_UINT16: case OSC_GGUF_UINT32: case OSC_GGUF_UINT64: {
        uint64_t u;
        assert_int_equal(osc_gguf_get_u64(g, key, &u), OSCAR_OK);
        // json integers are signed 64-bit: the oracle writes the u64 value 2^63+i as a string
        if (json_is_integer(v)) assert_true(u == (uint64_t) json_integer_value(v));
        else assert_true(u == strtoull(json_string_value(v), NULL, 10));
        break;
    }
    case OSC_GGUF_INT8: case OSC_GGUF_INT16: case OSC_GGUF_INT32: case OSC_GGUF_INT64: {
        int64_t i;
        assert_int_equal(osc_gguf_get_i64(g, key, &i), OSCAR_OK);
        assert_true(i == json_integer_value(v));
        uint32_t u;
        assert_int_equal(osc_gguf_get_u32(g, key, &u), OSCAR_ERR_FORMAT); // negative
        break;
    }
    case OSC_GGUF_FLOAT32: {
        float f;
        assert_int_equal(osc_gguf_get_f32(g, key, &f), OSCAR_OK);
        assert_true(bits_equal(f, (float) json_real_value(v)));
        break;
    }
    case OSC_GGUF_FLOAT64: {
        double d;
        assert_int_equal(osc_gguf_get_f64(g, key, &d), OSCAR_OK);
        assert_true(d == json_real_value(v));
        break;
    }
    case OSC_GGUF_BOOL: {
        bool b;
        assert_int_equal(osc_gguf_get_bool(g, key, &b), OSCAR_OK);
        assert_int_equal(b, json_is_true(v));
        break;
    }
    case OSC_GGUF_STRING: {
        const char * s;
        size_t len;
        assert_int_equal(osc_gguf_get_str(g, key, &s, &len), OSCAR_OK);
        assert_int_equal(len, strlen(json_string_value(v)));
        assert_memory_equal(s, json_string_value(v), len);
        uint32_t u;
        assert_int_equal(osc_gguf_get_u32(g, key, &u), OSCAR_ERR_FORMAT);
        break;
    }
    default:
        fail_msg("unexpected type %d for %s", type, key);
    }
}

static void check_array(struct osc_gguf * g, const char * key, json_t * e, json_t * v) {
    enum osc_gguf_type et;
    uint64_t n;
    assert_int_equal(osc_gguf_get_arr(g, key, &et, &n), OSCAR_OK);
    assert_int_equal(n, json_array_size(v));
    assert_int_equal(et, json_integer_value(json_object_get(e, "elem_type")));
    const void * data = NULL;
    if (et == OSC_GGUF_STRING) {
        for (uint64_t i = 0; i < n; i++) {
            const char * s;
            size_t len;
            assert_int_equal(osc_gguf_get_arr_str(g, key, i, &s, &len), OSCAR_OK);
            assert_int_equal(len, strlen(json_string_value(json_array_get(v, i))));
            assert_memory_equal(s, json_string_value(json_array_get(v, i)), len);
        }
        assert_int_equal(osc_gguf_get_arr_str(g, key, n, &(const char *) {0}, &(size_t) {0}), OSCAR_ERR_INVALID);
        assert_int_equal(osc_gguf_get_arr_data(g, key, &data), OSCAR_ERR_FORMAT);
        return;
    }
    if (et == OSC_GGUF_ARRAY) { // nested: count only
        assert_int_equal(osc_gguf_get_arr_data(g, key, &data), OSCAR_ERR_FORMAT);
        return;
    }
    assert_int_equal(osc_gguf_get_arr_data(g, key, &data), OSCAR_OK);
    const uint8_t * p = data;
    for (uint64_t i = 0; i < n; i++) {
        json_t * x = json_array_get(v, i);
        switch (et) {
        case OSC_GGUF_INT32: { int32_t a; memcpy(&a, p + 4 * i, 4); assert_true(a == json_integer_value(x)); break; }
        case OSC_GGUF_UINT8: assert_true(p[i] == json_integer_value(x)); break;
        case OSC_GGUF_BOOL: assert_true(p[i] == (json_is_true(x) ? 1 : 0)); break;
        case OSC_GGUF_FLOAT32: { float a; memcpy(&a, p + 4 * i, 4); assert_true(bits_equal(a, (float) json_real_value(x))); break; }
        case OSC_GGUF_FLOAT64: { double a; memcpy(&a, p + 8 * i, 8); assert_true(a == json_real_value(x)); break; }
        default: fail_msg("unexpected array type %d", et);
        }
    }
}

static void check_meta(const char * file, const char * section, uint32_t version) {
    char * path = fixture(file);
    char * mpath = fixture("meta.json");
    struct osc_gguf * g = NULL;
    assert_int_equal(osc_gguf_open(path, &g), OSCAR_OK);
    assert_int_equal(osc_gguf_version(g), version);
    json_error_t jerr;
    json_t * root = json_load_file(mpath, 0, &jerr);
    assert_non_null(root);
    json_t * meta = json_object_get(root, section);
    assert_non_null(meta);
    assert_int_equal(osc_gguf_n_kv(g), json_object_size(meta));
    const char * key;
    json_t * e;
    json_object_foreach(meta, key, e) {
        int64_t i = osc_gguf_find_key(g, key);
        assert_true(i >= 0);
        assert_string_equal(osc_gguf_key(g, i), key);
        int type = (int) json_integer_value(json_object_get(e, "type"));
        assert_int_equal(osc_gguf_kv_type(g, i), type);
        json_t * v = json_object_get(e, "value");
        if (type == OSC_GGUF_ARRAY) check_array(g, key, e, v);
        else check_scalar(g, key, type, v);
    }
    assert_int_equal(osc_gguf_find_key(g, "no.such.key"), -1);
    uint32_t u;
    assert_int_equal(osc_gguf_get_u32(g, "no.such.key", &u), OSCAR_ERR_NOT_FOUND);
    assert_non_null(strstr(oscar_last_error(), "no.such.key"));
    assert_non_null(strstr(oscar_last_error(), file));
    json_decref(root);
    osc_gguf_close(g);
    free(path);
    free(mpath);
}

static void test_metadata(void ** state) {
    (void) state;
    check_meta("types.gguf", "types", 3);
    check_meta("types-v2.gguf", "types", 2);
    check_meta("align64.gguf", "align64", 3);
}

// ---- tensors against expect.gguf --------------------------------------------------
static void check_tensors(const char * file, const char * prefix, int expect_n) {
    char * path = fixture(file);
    char * epath = fixture("expect.gguf");
    struct osc_gguf *g = NULL, *ex = NULL;
    assert_int_equal(osc_gguf_open(path, &g), OSCAR_OK);
    assert_int_equal(osc_gguf_open(epath, &ex), OSCAR_OK);
    assert_int_equal(osc_gguf_n_tensors(g), expect_n);
    for (int64_t i = 0; i < osc_gguf_n_tensors(g); i++) {
        const struct osc_gguf_tensor * t = osc_gguf_tensor(g, i);
        assert_ptr_equal(osc_gguf_find_tensor(g, t->name), t);
        char ename[300];
        snprintf(ename, sizeof ename, "%s/%s", prefix, t->name);
        const struct osc_gguf_tensor * e = osc_gguf_find_tensor(ex, ename);
        assert_non_null(e);
        assert_int_equal(e->type, OSC_GGML_F32);
        assert_int_equal(e->n_elements, t->n_elements);
        for (int d = 0; d < 4; d++) assert_int_equal(e->ne[d], t->ne[d]);
        float * y = malloc((size_t) t->n_elements * sizeof *y);
        assert_int_equal(osc_ggml_dequantize(t->type, t->data, y, t->n_elements), OSCAR_OK);
        int64_t bad = 0;
        for (int64_t j = 0; j < t->n_elements; j++) {
            float r;
            memcpy(&r, (const float *) e->data + j, 4);
            if (!bits_equal(r, y[j])) bad++;
        }
        if (bad) fail_msg("%s %s: %lld of %lld values differ from gguf.quants.dequantize", file, t->name,
                          (long long) bad, (long long) t->n_elements);
        free(y);
    }
    assert_null(osc_gguf_find_tensor(g, "nope"));
    osc_gguf_close(g);
    osc_gguf_close(ex);
    free(path);
    free(epath);
}

static void test_dequant_vs_oracle(void ** state) {
    (void) state;
    check_tensors("types.gguf", "types", 13);
    check_tensors("types-v2.gguf", "types", 13);
    check_tensors("align64.gguf", "align64", 3);
}

static void test_type_info(void ** state) {
    (void) state;
    size_t bb;
    int64_t be;
    assert_true(osc_ggml_type_info(OSC_GGML_Q4_1, &bb, &be));
    assert_int_equal(bb, 20);
    assert_int_equal(be, 32);
    assert_true(osc_ggml_type_info(OSC_GGML_Q6_K, &bb, &be));
    assert_int_equal(bb, 210);
    assert_int_equal(be, 256);
    assert_false(osc_ggml_type_info((enum osc_ggml_type) 4, &bb, &be));  // removed Q4_2
    assert_false(osc_ggml_type_info((enum osc_ggml_type) 42, &bb, &be)); // fork Q2_0
    // the refusal's list of readable types is exactly what type_info accepts, each named
    char list[256];
    snprintf(list, sizeof list, ", %s,", osc_ggml_supported_types());
    int n_ok = 0;
    for (uint32_t id = 0; id < 64; id++) {
        const char * name = osc_ggml_type_id_name(id);
        const bool ok = osc_ggml_type_info((enum osc_ggml_type) id, NULL, NULL);
        char item[64];
        snprintf(item, sizeof item, ", %s,", name ? name : "?");
        if (ok != (name && strstr(list, item) != NULL)) fail_msg("type %u (%s): readable %d, listed %d", id, name, ok, !ok);
        n_ok += ok;
    }
    assert_int_equal(n_ok, 13);
    assert_string_equal(osc_ggml_type_id_name(16), "IQ2_XXS");
    assert_string_equal(osc_ggml_type_id_name(39), "MXFP4");
    assert_null(osc_ggml_type_id_name(9999));
    float y[32];
    assert_int_equal(osc_ggml_dequantize(OSC_GGML_Q8_0, y, y, 31), OSCAR_ERR_INVALID);
    assert_int_equal(osc_ggml_dequantize((enum osc_ggml_type) 99, y, y, 32), OSCAR_ERR_UNSUPPORTED);
    // f16 corner cases: subnormal min, max normal, -0, inf
    uint16_t h[4] = {0x0001, 0x7bff, 0x8000, 0x7c00};
    assert_int_equal(osc_ggml_dequantize(OSC_GGML_F16, h, y, 4), OSCAR_OK);
    assert_true(y[0] == ldexpf(1.0f, -24));
    assert_true(y[1] == 65504.0f);
    assert_true(y[2] == 0.0f && signbit(y[2]));
    assert_true(isinf(y[3]) && y[3] > 0);
}

// ---- bad input ---------------------------------------------------------------------
static void write_file(const char * path, const void * data, size_t n) {
    FILE * f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

// Opens `data` as a file; must not crash; on failure the status is a
// FORMAT/UNSUPPORTED and the message names the file. On success every
// tensor must be dequantizable (the data pointers are in bounds).
static enum oscar_status try_open(const void * data, size_t n) {
    char * path = osc_path_join(tmpdir, "bad.gguf");
    write_file(path, data, n);
    struct osc_gguf * g = NULL;
    enum oscar_status st = osc_gguf_open(path, &g);
    if (st == OSCAR_OK) {
        for (int64_t i = 0; i < osc_gguf_n_tensors(g); i++) {
            const struct osc_gguf_tensor * t = osc_gguf_tensor(g, i);
            float * y = malloc((size_t) t->n_elements * sizeof *y);
            assert_non_null(y);
            assert_int_equal(osc_ggml_dequantize(t->type, t->data, y, t->n_elements), OSCAR_OK);
            free(y);
        }
        osc_gguf_close(g);
    } else {
        assert_true(st == OSCAR_ERR_FORMAT || st == OSCAR_ERR_UNSUPPORTED);
        assert_null(g);
        if (!strstr(oscar_last_error(), path)) fail_msg("message does not name the file: %s", oscar_last_error());
    }
    free(path);
    return st;
}

static void test_truncations(void ** state) {
    (void) state;
    char * path = fixture("types.gguf");
    struct osc_mapped_file m;
    assert_int_equal(osc_map_file(path, &m), OSCAR_OK);
    // The writer pads the data section after the last tensor: only cuts
    // before the end of the last tensor's data must be rejected.
    struct osc_gguf * g = NULL;
    assert_int_equal(osc_gguf_open(path, &g), OSCAR_OK);
    size_t end = 0;
    for (int64_t i = 0; i < osc_gguf_n_tensors(g); i++) {
        const struct osc_gguf_tensor * t = osc_gguf_tensor(g, i);
        size_t e = (size_t) (osc_gguf_data_offset(g) + t->offset) + t->nbytes;
        end = e > end ? e : end;
    }
    assert_int_equal(osc_gguf_alignment(g), 32);
    osc_gguf_close(g);
    assert_true(end > m.size - 32 && end <= m.size);
    for (size_t n = 0; n < end; n++) {
        enum oscar_status st = try_open(m.data, n);
        if (st == OSCAR_OK) fail_msg("truncation at %zu of %zu accepted", n, m.size);
    }
    assert_int_equal(try_open(m.data, m.size), OSCAR_OK);
    osc_unmap_file(&m);
    free(path);
}

static void test_byte_flips(void ** state) {
    (void) state;
    unsigned seed = (unsigned) time(NULL);
    printf("byte flip seed %u\n", seed);
    srand(seed);
    char * path = fixture("align64.gguf");
    struct osc_mapped_file m;
    assert_int_equal(osc_map_file(path, &m), OSCAR_OK);
    uint8_t * buf = malloc(m.size);
    int rejected = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(buf, m.data, m.size);
        int nflip = 1 + rand() % 3;
        for (int k = 0; k < nflip; k++) {
            // bias towards the header, where the structure is
            size_t pos = (size_t) rand() % (rand() % 2 ? m.size : (m.size < 1024 ? m.size : 1024));
            buf[pos] = rand() % 2 ? (uint8_t) rand() : (uint8_t) (buf[pos] ^ (1u << (rand() % 8)));
        }
        rejected += try_open(buf, m.size) != OSCAR_OK;
    }
    printf("byte flips: %d of 3000 rejected\n", rejected);
    assert_true(rejected > 0);
    free(buf);
    osc_unmap_file(&m);
    free(path);
}

// A tiny GGUF builder for hand-made malformed files.
struct buf {
    uint8_t d[4096];
    size_t n;
};

static void put(struct buf * b, const void * p, size_t n) {
    assert_true(b->n + n <= sizeof b->d);
    memcpy(b->d + b->n, p, n);
    b->n += n;
}
static void put_u32(struct buf * b, uint32_t v) { put(b, &v, 4); }
static void put_u64(struct buf * b, uint64_t v) { put(b, &v, 8); }
static void put_str(struct buf * b, const char * s) { put_u64(b, strlen(s)); put(b, s, strlen(s)); }

// One KV "general.alignment"=align, one tensor with the given fields, data.
static void build(struct buf * b, uint32_t version, uint32_t align, uint32_t n_dims, const uint64_t * ne,
                  uint32_t type, uint64_t offset, size_t data_bytes) {
    memset(b, 0, sizeof *b);
    put(b, "GGUF", 4);
    put_u32(b, version);
    put_u64(b, 1);
    put_u64(b, 1);
    put_str(b, "general.alignment");
    put_u32(b, OSC_GGUF_UINT32);
    put_u32(b, align);
    put_str(b, "t");
    put_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) put_u64(b, ne[i]);
    put_u32(b, type);
    put_u64(b, offset);
    while (b->n % 32) b->d[b->n++] = 0;
    b->n += data_bytes;
}

static void expect_error(const struct buf * b, enum oscar_status want, const char * words) {
    enum oscar_status st = try_open(b->d, b->n);
    if (st != want) fail_msg("expected %s, got %s: %s", oscar_status_str(want), oscar_status_str(st),
                             oscar_last_error());
    if (!strstr(oscar_last_error(), words)) fail_msg("message lacks '%s': %s", words, oscar_last_error());
}

static void test_malformed_headers(void ** state) {
    (void) state;
    struct buf b;
    uint64_t ne[5] = {32, 2, 1, 1, 1};
    build(&b, 3, 32, 2, ne, OSC_GGML_F32, 0, 256);
    assert_int_equal(try_open(b.d, b.n), OSCAR_OK);
    build(&b, 3, 32, 2, ne, OSC_GGML_F32, 0, 255);
    expect_error(&b, OSCAR_ERR_FORMAT, "past the end");
    build(&b, 3, 32, 2, ne, OSC_GGML_F32, 64, 256);
    expect_error(&b, OSCAR_ERR_FORMAT, "'t'");
    build(&b, 3, 32, 2, ne, OSC_GGML_F32, 1, 512);
    expect_error(&b, OSCAR_ERR_FORMAT, "alignment");
    build(&b, 3, 32, 2, ne, 4, 0, 256);
    expect_error(&b, OSCAR_ERR_UNSUPPORTED, "ggml type Q4_2 (removed from ggml) (4) is not supported");
    build(&b, 3, 32, 2, ne, 16, 0, 256); // the types people meet: named, with what would work
    expect_error(&b, OSCAR_ERR_UNSUPPORTED, "ggml type IQ2_XXS (16) is not supported; oscar reads F32, F16,");
    build(&b, 3, 32, 2, ne, 34, 0, 256);
    expect_error(&b, OSCAR_ERR_UNSUPPORTED, "ggml type TQ1_0 (34)");
    build(&b, 3, 32, 2, ne, 39, 0, 256);
    expect_error(&b, OSCAR_ERR_UNSUPPORTED, "ggml type MXFP4 (39)");
    build(&b, 3, 32, 2, ne, 9999, 0, 256);
    expect_error(&b, OSCAR_ERR_UNSUPPORTED, "unknown ggml type 9999");
    build(&b, 3, 32, 5, ne, OSC_GGML_F32, 0, 256);
    expect_error(&b, OSCAR_ERR_FORMAT, "n_dims");
    build(&b, 3, 32, 0, ne, OSC_GGML_F32, 0, 256);
    expect_error(&b, OSCAR_ERR_FORMAT, "n_dims");
    uint64_t ne0[2] = {32, 0};
    build(&b, 3, 32, 2, ne0, OSC_GGML_F32, 0, 256);
    expect_error(&b, OSCAR_ERR_FORMAT, "zero");
    uint64_t nebig[4] = {1u << 31, 1u << 31, 1u << 31, 4};
    build(&b, 3, 32, 4, nebig, OSC_GGML_F32, 0, 256);
    expect_error(&b, OSCAR_ERR_FORMAT, "overflow");
    uint64_t nehuge[2] = {UINT64_MAX, 1};
    build(&b, 3, 32, 2, nehuge, OSC_GGML_F32, 0, 256);
    expect_error(&b, OSCAR_ERR_FORMAT, "dimension");
    uint64_t neq[2] = {33, 1};
    build(&b, 3, 32, 2, neq, OSC_GGML_Q4_1, 0, 256);
    expect_error(&b, OSCAR_ERR_FORMAT, "block size");
    build(&b, 3, 24, 2, ne, OSC_GGML_F32, 0, 256);
    expect_error(&b, OSCAR_ERR_FORMAT, "power of two");
    build(&b, 3, 0, 2, ne, OSC_GGML_F32, 0, 256);
    expect_error(&b, OSCAR_ERR_FORMAT, "power of two");
    build(&b, 1, 32, 2, ne, OSC_GGML_F32, 0, 256);
    expect_error(&b, OSCAR_ERR_UNSUPPORTED, "version 1");
    build(&b, 0x03000000, 32, 2, ne, OSC_GGML_F32, 0, 256);
    expect_error(&b, OSCAR_ERR_UNSUPPORTED, "big-endian");
    build(&b, 3, 32, 2, ne, OSC_GGML_F32, 0, 256);
    b.d[0] = 'X';
    expect_error(&b, OSCAR_ERR_FORMAT, "magic");
    // huge counts
    build(&b, 3, 32, 2, ne, OSC_GGML_F32, 0, 256);
    uint64_t huge = UINT64_MAX / 2;
    memcpy(b.d + 8, &huge, 8);
    expect_error(&b, OSCAR_ERR_FORMAT, "tensor count");
    build(&b, 3, 32, 2, ne, OSC_GGML_F32, 0, 256);
    memcpy(b.d + 16, &huge, 8);
    expect_error(&b, OSCAR_ERR_FORMAT, "key/value count");
    // string length past the end
    build(&b, 3, 32, 2, ne, OSC_GGML_F32, 0, 256);
    memcpy(b.d + 24, &huge, 8);
    expect_error(&b, OSCAR_ERR_FORMAT, "length");
    // alignment of the wrong type
    build(&b, 3, 32, 2, ne, OSC_GGML_F32, 0, 256);
    uint32_t t_i32 = OSC_GGUF_INT32;
    memcpy(b.d + 24 + 8 + 17, &t_i32, 4);
    expect_error(&b, OSCAR_ERR_FORMAT, "general.alignment");
    // unknown value type
    uint32_t t_bad = 13;
    memcpy(b.d + 24 + 8 + 17, &t_bad, 4);
    expect_error(&b, OSCAR_ERR_FORMAT, "unknown value type");
}

static void test_arrays_and_duplicates(void ** state) {
    (void) state;
    struct buf b;
    // huge array count, deep nesting, bad bool, duplicate key, duplicate tensor
    memset(&b, 0, sizeof b);
    put(&b, "GGUF", 4); put_u32(&b, 3); put_u64(&b, 0); put_u64(&b, 1);
    put_str(&b, "a"); put_u32(&b, OSC_GGUF_ARRAY); put_u32(&b, OSC_GGUF_UINT64); put_u64(&b, 1ull << 60);
    expect_error(&b, OSCAR_ERR_FORMAT, "does not fit");

    memset(&b, 0, sizeof b);
    put(&b, "GGUF", 4); put_u32(&b, 3); put_u64(&b, 0); put_u64(&b, 1);
    put_str(&b, "deep");
    put_u32(&b, OSC_GGUF_ARRAY);
    for (int i = 0; i < 6; i++) { put_u32(&b, OSC_GGUF_ARRAY); put_u64(&b, 1); }
    put_u32(&b, OSC_GGUF_UINT8); put_u64(&b, 1); put_u32(&b, 0);
    expect_error(&b, OSCAR_ERR_FORMAT, "nested");

    memset(&b, 0, sizeof b);
    put(&b, "GGUF", 4); put_u32(&b, 3); put_u64(&b, 0); put_u64(&b, 1);
    put_str(&b, "flag"); put_u32(&b, OSC_GGUF_BOOL); put(&b, "\x02", 1);
    expect_error(&b, OSCAR_ERR_FORMAT, "bool");

    memset(&b, 0, sizeof b);
    put(&b, "GGUF", 4); put_u32(&b, 3); put_u64(&b, 0); put_u64(&b, 2);
    put_str(&b, "k"); put_u32(&b, OSC_GGUF_UINT8); put(&b, "\x01", 1);
    put_str(&b, "k"); put_u32(&b, OSC_GGUF_UINT8); put(&b, "\x01", 1);
    expect_error(&b, OSCAR_ERR_FORMAT, "duplicate key 'k'");

    memset(&b, 0, sizeof b);
    put(&b, "GGUF", 4); put_u32(&b, 3); put_u64(&b, 2); put_u64(&b, 0);
    for (int i = 0; i < 2; i++) {
        put_str(&b, "w"); put_u32(&b, 1); put_u64(&b, 8); put_u32(&b, OSC_GGML_F32); put_u64(&b, (uint64_t) i * 32);
    }
    while (b.n % 32) b.d[b.n++] = 0;
    b.n += 64;
    expect_error(&b, OSCAR_ERR_FORMAT, "duplicate tensor 'w'");

    memset(&b, 0, sizeof b);
    put(&b, "GGUF", 4); put_u32(&b, 3); put_u64(&b, 2); put_u64(&b, 0);
    put_str(&b, "x"); put_u32(&b, 1); put_u64(&b, 16); put_u32(&b, OSC_GGML_F32); put_u64(&b, 0);
    put_str(&b, "y"); put_u32(&b, 1); put_u64(&b, 8); put_u32(&b, OSC_GGML_F32); put_u64(&b, 32);
    while (b.n % 32) b.d[b.n++] = 0;
    b.n += 64;
    expect_error(&b, OSCAR_ERR_FORMAT, "overlap");

    // a file with no tensors and no data section is fine
    memset(&b, 0, sizeof b);
    put(&b, "GGUF", 4); put_u32(&b, 3); put_u64(&b, 0); put_u64(&b, 1);
    put_str(&b, "s"); put_u32(&b, OSC_GGUF_STRING); put_str(&b, "v");
    assert_int_equal(try_open(b.d, b.n), OSCAR_OK);
}

static void test_missing_file(void ** state) {
    (void) state;
    struct osc_gguf * g = NULL;
    assert_int_equal(osc_gguf_open("/nonexistent/x.gguf", &g), OSCAR_ERR_IO);
    assert_null(g);
    assert_non_null(strstr(oscar_last_error(), "/nonexistent/x.gguf"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metadata),
        cmocka_unit_test(test_dequant_vs_oracle),
        cmocka_unit_test(test_type_info),
        cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_byte_flips),
        cmocka_unit_test(test_malformed_headers),
        cmocka_unit_test(test_arrays_and_duplicates),
        cmocka_unit_test(test_missing_file),
    };
    return cmocka_run_group_tests(tests, setup_gguf, teardown);
}
