// test-export.c - GGUF writer (every metadata type, alignment, KV copy), the
// GGUF rotation layout (Mᵀ, llama q/k permutation), the .pt zip structure,
// and Hub spec parsing.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "formats/gguf-writer.h"
#include "formats/gguf.h"
#include "formats/oscar-export.h"
#include "formats/pt-writer.h"
#include "hub/hub.h"
#include "util/fs.h"

static char g_dir[64];

static int setup(void ** state) {
    (void) state;
    snprintf(g_dir, sizeof g_dir, "/tmp/oscar-test-export.XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void ** state) {
    (void) state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static char * tmp_path(const char * name) { return osc_path_join(g_dir, name); }

// Writes one key of every type plus two tensors.
static void write_all_types(const char * path, const float * t0, const uint8_t * t1) {
    struct osc_gguf_writer * w;
    assert_int_equal(osc_gguf_writer_new(32, &w), OSCAR_OK);
    uint8_t u8 = 200; int8_t i8 = -100; uint16_t u16 = 60000; int16_t i16 = -30000; uint32_t u32 = 4000000000u;
    int32_t i32 = -2000000000; float f32 = 0.1f; uint8_t b = 1; uint64_t u64 = 18000000000000000000ull;
    int64_t i64 = -9000000000000000000ll; double f64 = 1e300;
    assert_int_equal(osc_gguf_writer_kv(w, "t.u8", OSC_GGUF_UINT8, &u8), OSCAR_OK);
    assert_int_equal(osc_gguf_writer_kv(w, "t.i8", OSC_GGUF_INT8, &i8), OSCAR_OK);
    assert_int_equal(osc_gguf_writer_kv(w, "t.u16", OSC_GGUF_UINT16, &u16), OSCAR_OK);
    assert_int_equal(osc_gguf_writer_kv(w, "t.i16", OSC_GGUF_INT16, &i16), OSCAR_OK);
    assert_int_equal(osc_gguf_writer_kv(w, "t.u32", OSC_GGUF_UINT32, &u32), OSCAR_OK);
    assert_int_equal(osc_gguf_writer_kv(w, "t.i32", OSC_GGUF_INT32, &i32), OSCAR_OK);
    assert_int_equal(osc_gguf_writer_kv(w, "t.f32", OSC_GGUF_FLOAT32, &f32), OSCAR_OK);
    assert_int_equal(osc_gguf_writer_kv(w, "t.bool", OSC_GGUF_BOOL, &b), OSCAR_OK);
    assert_int_equal(osc_gguf_writer_kv(w, "t.u64", OSC_GGUF_UINT64, &u64), OSCAR_OK);
    assert_int_equal(osc_gguf_writer_kv(w, "t.i64", OSC_GGUF_INT64, &i64), OSCAR_OK);
    assert_int_equal(osc_gguf_writer_kv(w, "t.f64", OSC_GGUF_FLOAT64, &f64), OSCAR_OK);
    assert_int_equal(osc_gguf_writer_kv_cstr(w, "t.str", "héllo"), OSCAR_OK);
    int16_t arr[3] = { -1, 2, -3 };
    assert_int_equal(osc_gguf_writer_kv_arr(w, "t.arr_i16", OSC_GGUF_INT16, arr, 3), OSCAR_OK);
    assert_int_equal(osc_gguf_writer_kv_arr(w, "t.arr_empty", OSC_GGUF_FLOAT32, NULL, 0), OSCAR_OK);
    const char * s[2] = { "a", "" };
    size_t       sl[2] = { 1, 0 };
    assert_int_equal(osc_gguf_writer_kv_arr_str(w, "t.arr_str", s, sl, 2), OSCAR_OK);
    // refusals
    assert_int_equal(osc_gguf_writer_kv(w, "t.u8", OSC_GGUF_UINT8, &u8), OSCAR_ERR_INVALID);
    assert_int_equal(osc_gguf_writer_kv_u32(w, "general.alignment", 64), OSCAR_ERR_INVALID);
    assert_int_equal(osc_gguf_writer_kv(w, "t.bad", OSC_GGUF_STRING, &u8), OSCAR_ERR_INVALID);
    int64_t ne0[2] = { 3, 5 }, ne1[1] = { 32 };
    assert_int_equal(osc_gguf_writer_tensor(w, "a", OSC_GGML_F32, 2, ne0, t0, 15 * 4), OSCAR_OK);
    assert_int_equal(osc_gguf_writer_tensor(w, "b", OSC_GGML_Q8_0, 1, ne1, t1, 34), OSCAR_OK);
    assert_int_equal(osc_gguf_writer_tensor(w, "a", OSC_GGML_F32, 2, ne0, t0, 15 * 4), OSCAR_ERR_INVALID);
    assert_int_equal(osc_gguf_writer_tensor(w, "c", OSC_GGML_F32, 2, ne0, t0, 14 * 4), OSCAR_ERR_INVALID);
    assert_int_equal(osc_gguf_writer_write(w, path), OSCAR_OK);
    osc_gguf_writer_free(w);
}

static void check_all_types(const char * path, const float * t0, const uint8_t * t1) {
    struct osc_gguf * g;
    assert_int_equal(osc_gguf_open(path, &g), OSCAR_OK);
    assert_int_equal(osc_gguf_version(g), 3);
    uint64_t u; int64_t i; double d; float f; bool b; const char * s; size_t n;
    assert_int_equal(osc_gguf_get_u64(g, "t.u8", &u), OSCAR_OK); assert_int_equal(u, 200);
    assert_int_equal(osc_gguf_get_i64(g, "t.i8", &i), OSCAR_OK); assert_int_equal(i, -100);
    assert_int_equal(osc_gguf_get_u64(g, "t.u16", &u), OSCAR_OK); assert_int_equal(u, 60000);
    assert_int_equal(osc_gguf_get_i64(g, "t.i16", &i), OSCAR_OK); assert_int_equal(i, -30000);
    assert_int_equal(osc_gguf_get_u64(g, "t.u32", &u), OSCAR_OK); assert_true(u == 4000000000u);
    assert_int_equal(osc_gguf_get_i64(g, "t.i32", &i), OSCAR_OK); assert_true(i == -2000000000);
    assert_int_equal(osc_gguf_get_f32(g, "t.f32", &f), OSCAR_OK); assert_true(f == 0.1f);
    assert_int_equal(osc_gguf_get_bool(g, "t.bool", &b), OSCAR_OK); assert_true(b);
    assert_int_equal(osc_gguf_get_u64(g, "t.u64", &u), OSCAR_OK); assert_true(u == 18000000000000000000ull);
    assert_int_equal(osc_gguf_get_i64(g, "t.i64", &i), OSCAR_OK); assert_true(i == -9000000000000000000ll);
    assert_int_equal(osc_gguf_get_f64(g, "t.f64", &d), OSCAR_OK); assert_true(d == 1e300);
    assert_int_equal(osc_gguf_get_str(g, "t.str", &s, &n), OSCAR_OK);
    assert_true(n == 6 && !memcmp(s, "héllo", 6));
    enum osc_gguf_type et;
    const void *       data;
    assert_int_equal(osc_gguf_get_arr(g, "t.arr_i16", &et, &u), OSCAR_OK);
    assert_true(et == OSC_GGUF_INT16 && u == 3);
    assert_int_equal(osc_gguf_get_arr_data(g, "t.arr_i16", &data), OSCAR_OK);
    int16_t a16[3];
    memcpy(a16, data, sizeof a16);
    assert_true(a16[0] == -1 && a16[1] == 2 && a16[2] == -3);
    assert_int_equal(osc_gguf_get_arr(g, "t.arr_empty", &et, &u), OSCAR_OK);
    assert_true(et == OSC_GGUF_FLOAT32 && u == 0);
    assert_int_equal(osc_gguf_get_arr_str(g, "t.arr_str", 1, &s, &n), OSCAR_OK);
    assert_int_equal(n, 0);
    assert_int_equal(osc_gguf_get_arr_str(g, "t.arr_str", 0, &s, &n), OSCAR_OK);
    assert_true(n == 1 && s[0] == 'a');
    assert_int_equal(osc_gguf_n_tensors(g), 2);
    const struct osc_gguf_tensor * ta = osc_gguf_find_tensor(g, "a"), * tb = osc_gguf_find_tensor(g, "b");
    assert_non_null(ta);
    assert_non_null(tb);
    assert_true(ta->ne[0] == 3 && ta->ne[1] == 5 && ta->type == OSC_GGML_F32);
    assert_memory_equal(ta->data, t0, 60);
    assert_memory_equal(tb->data, t1, 34);
    assert_int_equal(tb->offset % 32, 0);
    assert_int_equal(osc_gguf_data_offset(g) % 32, 0);
    osc_gguf_close(g);
}

static void test_gguf_writer_types(void ** state) {
    (void) state;
    float   t0[15];
    uint8_t t1[34];
    for (int i = 0; i < 15; i++) t0[i] = (float) i - 7.5f;
    for (int i = 0; i < 34; i++) t1[i] = (uint8_t) (i * 7);
    char * p = tmp_path("types.gguf"), * q = tmp_path("copy.gguf");
    write_all_types(p, t0, t1);
    check_all_types(p, t0, t1);
    // copy every KV and tensor of p into q: q reads back identically
    struct osc_gguf *        g;
    struct osc_gguf_writer * w;
    assert_int_equal(osc_gguf_open(p, &g), OSCAR_OK);
    assert_int_equal(osc_gguf_writer_new(osc_gguf_alignment(g), &w), OSCAR_OK);
    assert_int_equal(osc_gguf_copy_kvs(w, g), OSCAR_OK);
    for (int64_t i = 0; i < osc_gguf_n_tensors(g); i++) {
        const struct osc_gguf_tensor * t = osc_gguf_tensor(g, i);
        assert_int_equal(osc_gguf_writer_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes), OSCAR_OK);
    }
    assert_int_equal(osc_gguf_writer_write(w, q), OSCAR_OK);
    osc_gguf_writer_free(w);
    osc_gguf_close(g);
    check_all_types(q, t0, t1);
    // identical input -> identical bytes
    char * a = NULL, * b = NULL;
    size_t na, nb;
    assert_int_equal(osc_read_file(p, 1 << 20, &a, &na), OSCAR_OK);
    assert_int_equal(osc_read_file(q, 1 << 20, &b, &nb), OSCAR_OK);
    assert_true(na == nb && !memcmp(a, b, na));
    free(a); free(b); free(p); free(q);
}

// ggml_mul_mat(stored, k_ggml)[j] = Σ_r stored[j][r]·k_ggml[r] must equal (k_HF·R)[j], with
// k_ggml[π(i)] = k_HF[i] (method.md §1.1). Small integers keep every sum exact in fp32.
static void test_rot_to_ggml_permutation(void ** state) {
    (void) state;
    enum { D = 8 };
    float R[D * D], T[D * D], k[D], kg[D];
    unsigned seed = 1234;
    printf("seed %u\n", seed);
    srand(seed);
    for (int i = 0; i < D * D; i++) R[i] = (float) (rand() % 9 - 4);
    for (int i = 0; i < D; i++) k[i] = (float) (rand() % 9 - 4);
    for (int pass = 0; pass < 2; pass++) {
        bool perm = pass == 1;
        oscar_export_rot_to_ggml(R, T, D, perm);
        for (int i = 0; i < D; i++) kg[perm ? (i < D / 2 ? 2 * i : 2 * (i - D / 2) + 1) : i] = k[i];
        for (int j = 0; j < D; j++) {
            float got = 0, ref = 0;
            for (int r = 0; r < D; r++) got += T[j * D + r] * kg[r];
            for (int i = 0; i < D; i++) ref += k[i] * R[i * D + j];
            assert_true(got == ref);
        }
    }
    // the permuted layout is a different matrix (the test above could not pass by accident)
    float T0[D * D];
    oscar_export_rot_to_ggml(R, T0, D, false);
    assert_memory_not_equal(T, T0, sizeof T);
    // HF layout: stored = Rᵀ
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) assert_true(T0[j * D + i] == R[i * D + j]);
}

static uint32_t rd32(const uint8_t * p) { return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24; }
static uint16_t rd16(const uint8_t * p) { return (uint16_t) (p[0] | p[1] << 8); }

static void test_pt_zip_layout(void ** state) {
    (void) state;
    enum { L = 2, R = 3, D = 4 };
    float rot[L * R * D * D], eig[L * R * D];
    for (int i = 0; i < L * R * D * D; i++) rot[i] = (float) i * 0.25f;
    for (int i = 0; i < L * R * D; i++) eig[i] = (float) -i;
    struct oscar_pt_rotations r = { 2, "qqt_r_h_pbr", L, R, D, rot, eig };
    char * p = tmp_path("k_rotation_x.pt");
    assert_int_equal(oscar_pt_write_rotations(p, &r), OSCAR_OK);
    char * buf;
    size_t n;
    assert_int_equal(osc_read_file(p, 1 << 20, &buf, &n), OSCAR_OK);
    const uint8_t * z = (const uint8_t *) buf;
    // end of central directory: 22 bytes at the end, no comment
    const uint8_t * e = z + n - 22;
    assert_int_equal(rd32(e), 0x06054b50u);
    uint16_t nrec = rd16(e + 10);
    uint32_t cd_size = rd32(e + 12), cd_off = rd32(e + 16);
    assert_int_equal(nrec, 4 + 2 * L + 2);
    assert_int_equal(cd_off + cd_size, n - 22);
    const uint8_t * c = z + cd_off;
    int n_data = 0;
    for (int i = 0; i < nrec; i++) {
        assert_int_equal(rd32(c), 0x02014b50u);
        uint32_t crc = rd32(c + 16), size = rd32(c + 20), off = rd32(c + 42);
        uint16_t nl = rd16(c + 28);
        assert_int_equal(rd16(c + 10), 0); // stored
        const char * name = (const char *) c + 46;
        assert_true(nl > 13 && !memcmp(name, "k_rotation_x/", 13));
        const uint8_t * h = z + off;
        assert_int_equal(rd32(h), 0x04034b50u);
        assert_int_equal(rd16(h + 26), nl);
        uint32_t data_off = off + 30 + nl + rd16(h + 28);
        assert_int_equal(crc, (uint32_t) crc32(0, z + data_off, size));
        if (nl > 18 && !memcmp(name + 13, "data/", 5)) {
            assert_int_equal(data_off % 64, 0);
            int key = atoi(name + 18), l = key / 2;
            const void * src = key % 2 ? (const void *) (eig + l * R * D) : (const void *) (rot + l * R * D * D);
            assert_int_equal(size, key % 2 ? R * D * 4 : R * D * D * 4);
            assert_memory_equal(z + data_off, src, size);
            n_data++;
        }
        if (nl == 21 && !memcmp(name + 13, "data.pkl", 8)) {
            assert_true(z[data_off] == 0x80 && z[data_off + 1] == 2 && z[data_off + size - 1] == '.');
        }
        c += 46 + nl + rd16(c + 30) + rd16(c + 32);
    }
    assert_int_equal(n_data, 2 * L);
    free(buf);
    // format 1 with per-head tensors is refused, nothing written
    char * q = tmp_path("bad.pt");
    r.format_version = 1;
    assert_int_equal(oscar_pt_write_rotations(q, &r), OSCAR_ERR_INVALID);
    assert_int_equal(access(q, F_OK), -1);
    free(q);
    free(p);
}

static void test_hub_spec(void ** state) {
    (void) state;
    char * repo, * rev, * path;
    assert_int_equal(oscar_hub_parse_spec("me/zoo@v1.0:m/t", &repo, &rev, &path), OSCAR_OK);
    assert_string_equal(repo, "me/zoo"); assert_string_equal(rev, "v1.0"); assert_string_equal(path, "m/t");
    free(repo); free(rev); free(path);
    assert_int_equal(oscar_hub_parse_spec("me/zoo", &repo, &rev, &path), OSCAR_OK);
    assert_string_equal(repo, "me/zoo"); assert_null(rev); assert_null(path);
    free(repo);
    assert_int_equal(oscar_hub_parse_spec("me/zoo:a@b.gguf", &repo, &rev, &path), OSCAR_OK);
    assert_null(rev); assert_string_equal(path, "a@b.gguf");
    free(repo); free(path);
    const char * bad[] = { "zoo", "a/b/c", "me/zoo@", "me/zoo:", "me/zoo:../x", "me/z oo", "/abs/path" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(oscar_hub_parse_spec(bad[i], &repo, &rev, &path), OSCAR_ERR_INVALID);
        assert_null(repo);
    }
    // an existing local path is returned untouched, without touching the network
    struct oscar_hub hub;
    assert_int_equal(oscar_hub_init(&hub), OSCAR_OK);
    char * local = NULL;
    assert_int_equal(oscar_hub_resolve_local(&hub, g_dir, &local), OSCAR_OK);
    assert_string_equal(local, g_dir);
    free(local);
    hub.offline = 1;
    assert_int_equal(oscar_hub_resolve_local(&hub, "no such thing", &local), OSCAR_ERR_INVALID);
    assert_null(local);
    oscar_hub_free(&hub);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_writer_types),
        cmocka_unit_test(test_rot_to_ggml_permutation),
        cmocka_unit_test(test_pt_zip_layout),
        cmocka_unit_test(test_hub_spec),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
