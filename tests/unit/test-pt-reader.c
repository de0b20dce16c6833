// test-pt-reader.c - the restricted .pt reader (formats/pt-reader.h):
// what pt-writer writes reads back bit-exactly; hand-made pickles exercise
// shared and strided storages, deflated records and protocol-4 opcodes; hostile
// inputs (code globals, BUILD, nesting bombs, bad memo indices, storages
// larger than their records, tensors outside their storage, truncated
// archives (ZIP64 ones too: torch.save writes that layout), "../" names) are refused with a message naming the file and
// the problem.
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

#include "formats/pt-reader.h"
#include "formats/pt-writer.h"
#include "util/fs.h"

// ---- a growable buffer and a tiny ZIP writer (stored or deflated records) ------------
struct buf {
    uint8_t * p;
    size_t    n, cap;
};

static void put(struct buf * b, const void * s, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p   = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static void put_u8(struct buf * b, unsigned v) { uint8_t x = (uint8_t) v; put(b, &x, 1); }
static void put_u16(struct buf * b, unsigned v) { put_u8(b, v & 0xff); put_u8(b, (v >> 8) & 0xff); }
static void put_u32(struct buf * b, uint32_t v) { put_u16(b, v & 0xffff); put_u16(b, v >> 16); }
static void put_str(struct buf * b, const char * s) { put(b, s, strlen(s)); }
static void put_u64(struct buf * b, uint64_t v) { put_u32(b, (uint32_t) v); put_u32(b, (uint32_t) (v >> 32)); }

struct rec {
    const char * name;
    const void * data;
    size_t       n;
};

// A ZIP of the records; deflate: every record compressed (raw deflate). zip64: as torch.save
// writes them: central entries with sizes and offset saturated at 0xffffffff and given in a
// zip64 extra field, a ZIP64 end record and locator, the classic end record saturated too.
static struct buf make_zip_as(const struct rec * r, int n, bool deflated, bool zip64) {
    struct buf z = { 0 }, cd = { 0 };
    for (int i = 0; i < n; i++) {
        uint32_t   crc = (uint32_t) crc32(0, r[i].data, (uInt) r[i].n);
        struct buf body = { 0 };
        if (deflated) {
            z_stream s = { 0 };
            assert_int_equal(deflateInit2(&s, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
            uLong cap = deflateBound(&s, (uLong) r[i].n);
            body.p = malloc(cap + 1);
            s.next_in = (Bytef *) (uintptr_t) r[i].data;
            s.avail_in = (uInt) r[i].n;
            s.next_out = body.p;
            s.avail_out = (uInt) cap;
            assert_int_equal(deflate(&s, Z_FINISH), Z_STREAM_END);
            body.n = s.total_out;
            deflateEnd(&s);
        } else {
            put(&body, r[i].data, r[i].n);
        }
        uint32_t off = (uint32_t) z.n;
        put_u32(&z, 0x04034b50u); put_u16(&z, 20); put_u16(&z, 0); put_u16(&z, deflated ? 8 : 0);
        put_u16(&z, 0); put_u16(&z, 0x21); put_u32(&z, crc); put_u32(&z, (uint32_t) body.n); put_u32(&z, (uint32_t) r[i].n);
        put_u16(&z, (unsigned) strlen(r[i].name)); put_u16(&z, 0); put_str(&z, r[i].name);
        if (body.n) put(&z, body.p, body.n);
        uint32_t sat = 0xffffffffu;
        put_u32(&cd, 0x02014b50u); put_u16(&cd, 45); put_u16(&cd, 45); put_u16(&cd, 0); put_u16(&cd, deflated ? 8 : 0);
        put_u16(&cd, 0); put_u16(&cd, 0x21); put_u32(&cd, crc); put_u32(&cd, zip64 ? sat : (uint32_t) body.n);
        put_u32(&cd, zip64 ? sat : (uint32_t) r[i].n);
        put_u16(&cd, (unsigned) strlen(r[i].name)); put_u16(&cd, zip64 ? 4 + 24 : 0); put_u16(&cd, 0); put_u16(&cd, 0);
        put_u16(&cd, 0); put_u32(&cd, 0); put_u32(&cd, zip64 ? sat : off); put_str(&cd, r[i].name);
        if (zip64) {   // uncompressed size, compressed size, local header offset
            put_u16(&cd, 0x0001); put_u16(&cd, 24); put_u64(&cd, r[i].n); put_u64(&cd, body.n); put_u64(&cd, off);
        }
        free(body.p);
    }
    uint32_t cd_off = (uint32_t) z.n;
    put(&z, cd.p, cd.n);
    if (zip64) {
        uint64_t z64 = z.n;
        put_u32(&z, 0x06064b50u); put_u64(&z, 44); put_u16(&z, 45); put_u16(&z, 45); put_u32(&z, 0); put_u32(&z, 0);
        put_u64(&z, (uint64_t) n); put_u64(&z, (uint64_t) n); put_u64(&z, cd.n); put_u64(&z, cd_off);
        put_u32(&z, 0x07064b50u); put_u32(&z, 0); put_u64(&z, z64); put_u32(&z, 1);
    }
    put_u32(&z, 0x06054b50u); put_u16(&z, 0); put_u16(&z, 0); put_u16(&z, zip64 ? 0xffffu : (unsigned) n);
    put_u16(&z, zip64 ? 0xffffu : (unsigned) n); put_u32(&z, zip64 ? 0xffffffffu : (uint32_t) cd.n);
    put_u32(&z, zip64 ? 0xffffffffu : cd_off); put_u16(&z, 0);
    free(cd.p);
    return z;
}

static struct buf make_zip(const struct rec * r, int n, bool deflated) { return make_zip_as(r, n, deflated, false); }

// ---- pickle snippets -------------------------------------------------------------------
static void pk_str(struct buf * b, const char * s) { put_u8(b, 'X'); put_u32(b, (uint32_t) strlen(s)); put_str(b, s); }
static void pk_global(struct buf * b, const char * mod, const char * name) {
    put_u8(b, 'c'); put_str(b, mod); put_u8(b, '\n'); put_str(b, name); put_u8(b, '\n');
}
static void pk_int(struct buf * b, unsigned v) { put_u8(b, 'K'); put_u8(b, v); }

// _rebuild_tensor_v2(('storage', FloatStorage, key, 'cpu', numel), offset, (sizes), (strides), False, OrderedDict())
static void pk_tensor(struct buf * b, const char * key, unsigned numel, unsigned offset, int nd, const unsigned * size,
                      const unsigned * stride) {
    pk_global(b, "torch._utils", "_rebuild_tensor_v2");
    put_u8(b, '(');
    put_u8(b, '(');
    pk_str(b, "storage");
    pk_global(b, "torch", "FloatStorage");
    pk_str(b, key);
    pk_str(b, "cpu");
    put_u8(b, 'M'); put_u16(b, numel);
    put_u8(b, 't');
    put_u8(b, 'Q');
    pk_int(b, offset);
    put_u8(b, '(');
    for (int d = 0; d < nd; d++) pk_int(b, size[d]);
    put_u8(b, 't');
    put_u8(b, '(');
    for (int d = 0; d < nd; d++) pk_int(b, stride[d]);
    put_u8(b, 't');
    put_u8(b, 0x89);
    pk_global(b, "collections", "OrderedDict");
    put_u8(b, ')');
    put_u8(b, 'R');
    put_u8(b, 't');
    put_u8(b, 'R');
}

static float g_data[64]; // storage "0": 0, 1, 2, ...

// Opens archive/data.pkl = pkl with archive/data/0 = g_data (n_floats of it).
static enum oscar_status open_pickle(const struct buf * pkl, size_t n_floats, struct osc_pt ** f) {
    for (int i = 0; i < 64; i++) g_data[i] = (float) i;
    struct rec r[] = { { "archive/data.pkl", pkl->p, pkl->n }, { "archive/byteorder", "little", 6 },
                       { "archive/data/0", g_data, n_floats * sizeof(float) } };
    struct buf z = make_zip(r, 3, false);
    enum oscar_status st = osc_pt_open_mem(z.p, z.n, "t.pt", f);
    free(z.p);
    return st;
}

// The pickle must be refused with a message holding `want` (and the file's name).
static void refused(struct buf * pkl, size_t n_floats, const char * want) {
    struct osc_pt * f = NULL;
    enum oscar_status st = open_pickle(pkl, n_floats, &f);
    if (st == OSCAR_OK || !strstr(oscar_last_error(), want) || !strstr(oscar_last_error(), "t.pt"))
        fail_msg("want an error with '%s', got status %d: %s", want, (int) st, oscar_last_error());
    assert_null(f);
    free(pkl->p);
    memset(pkl, 0, sizeof *pkl);
}

// ---- tests -----------------------------------------------------------------------------
static void test_writer_round_trip(void ** state) {
    (void) state;
    char dir[] = "/tmp/oscar-test-pt.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *  path = osc_path_join(dir, "k_rotation_x.pt");
    float   rot[2 * 3 * 4 * 4], eig[2 * 3 * 4];
    for (size_t i = 0; i < sizeof rot / sizeof rot[0]; i++) rot[i] = (float) i * 0.37f - 3.0f;
    for (size_t i = 0; i < sizeof eig / sizeof eig[0]; i++) eig[i] = 1.0f / (float) (i + 1);
    struct oscar_pt_rotations r = { 2, "qqt_x", 2, 3, 4, rot, eig };
    assert_int_equal(oscar_pt_write_rotations(path, &r), OSCAR_OK);
    struct osc_pt * f = NULL;
    assert_int_equal(osc_pt_open(path, &f), OSCAR_OK);
    const struct osc_pt_value * root = osc_pt_root(f), * layers = osc_pt_get(root, "layers");
    assert_int_equal(osc_pt_get(root, "format_version")->i, 2);
    assert_string_equal(osc_pt_get(root, "source_grouping")->str, "kv_head");
    assert_string_equal(osc_pt_get(root, "objective")->str, "qqt_x");
    for (int l = 0; l < 2; l++) {
        const struct osc_pt_value * e = osc_pt_get_index(layers, l), * t = osc_pt_get(e, "rotation");
        assert_int_equal(osc_pt_get(e, "layer_id")->i, l);
        assert_int_equal(t->ndim, 3);
        assert_int_equal(t->shape[0], 3);
        float got[48], ge[12];
        osc_pt_tensor_f32(t, got);
        assert_memory_equal(got, rot + l * 48, sizeof got);
        osc_pt_tensor_f32(osc_pt_get(e, "eigenvalues"), ge);
        assert_memory_equal(ge, eig + l * 12, sizeof ge);
    }
    assert_null(osc_pt_get_index(layers, 2));
    osc_pt_close(f);
    unlink(path);
    free(path);
    rmdir(dir);
}

// {"a": t[2,3] (offset 1), "b": its transpose view (strides 1,3), "c": [1.5, None, True], "d": shared storage}
static void test_views_and_values(void ** state) {
    (void) state;
    for (int deflate = 0; deflate < 2; deflate++) {
        struct buf b = { 0 };
        unsigned   s23[2] = { 2, 3 }, st31[2] = { 3, 1 }, s32[2] = { 3, 2 }, st13[2] = { 1, 3 };
        put_u8(&b, 0x80); put_u8(&b, 2);
        put_u8(&b, '}'); put_u8(&b, 'q'); put_u8(&b, 0);
        put_u8(&b, '(');
        pk_str(&b, "a"); pk_tensor(&b, "0", 8, 1, 2, s23, st31);
        pk_str(&b, "b"); pk_tensor(&b, "0", 8, 1, 2, s32, st13);
        pk_str(&b, "c"); put_u8(&b, ']'); put_u8(&b, '(');
        put_u8(&b, 'G'); const uint8_t onefive[8] = { 0x3f, 0xf8, 0, 0, 0, 0, 0, 0 }; put(&b, onefive, 8);
        put_u8(&b, 'N'); put_u8(&b, 0x88); put_u8(&b, 'e');
        put_u8(&b, 0x8a); put_u8(&b, 2); put_u8(&b, 0xff); put_u8(&b, 0xff); // LONG1 -1 as the key
        put_u8(&b, 0x8c); put_u8(&b, 3); put_str(&b, "neg");                  // SHORT_BINUNICODE value
        put_u8(&b, 'u');
        put_u8(&b, '.');
        for (int i = 0; i < 64; i++) g_data[i] = (float) i;
        struct rec r[] = { { "whatever/data.pkl", b.p, b.n }, { "whatever/data/0", g_data, 8 * sizeof(float) },
                           { "whatever/version", "3\n", 2 } };
        struct buf z = make_zip(r, 3, deflate);
        struct osc_pt * f = NULL;
        assert_int_equal(osc_pt_open_mem(z.p, z.n, "v.pt", &f), OSCAR_OK);
        const struct osc_pt_value * root = osc_pt_root(f);
        float a[6], t[6];
        osc_pt_tensor_f32(osc_pt_get(root, "a"), a);
        osc_pt_tensor_f32(osc_pt_get(root, "b"), t);
        const float want_a[6] = { 1, 2, 3, 4, 5, 6 }, want_t[6] = { 1, 4, 2, 5, 3, 6 };
        assert_memory_equal(a, want_a, sizeof a);
        assert_memory_equal(t, want_t, sizeof t);
        assert_ptr_equal(osc_pt_get(root, "a")->data, osc_pt_get(root, "b")->data); // one storage, read once
        const struct osc_pt_value * c = osc_pt_get(root, "c");
        assert_int_equal(c->kind, OSC_PT_LIST);
        assert_int_equal(c->n, 3);
        assert_true(c->items[0]->kind == OSC_PT_FLOAT && c->items[0]->f == 1.5);
        assert_int_equal(c->items[1]->kind, OSC_PT_NONE);
        assert_true(c->items[2]->kind == OSC_PT_BOOL && c->items[2]->b);
        assert_string_equal(osc_pt_get_index(root, -1)->str, "neg");
        osc_pt_close(f);
        free(z.p);
        free(b.p);
    }
}

static void test_hostile_pickles(void ** state) {
    (void) state;
    struct buf b = { 0 };
    // os.system("echo pwned") via GLOBAL + REDUCE: refused at the GLOBAL, nothing runs
    put_u8(&b, 0x80); put_u8(&b, 2); pk_global(&b, "os", "system"); pk_str(&b, "echo pwned"); put_u8(&b, 0x85);
    put_u8(&b, 'R'); put_u8(&b, '.');
    refused(&b, 8, "global 'os.system' is not allowed");
    put_u8(&b, 0x80); put_u8(&b, 2); pk_global(&b, "builtins", "eval"); pk_str(&b, "1+1"); put_u8(&b, 0x85);
    put_u8(&b, 'R'); put_u8(&b, '.');
    refused(&b, 8, "global 'builtins.eval'");
    put_u8(&b, 0x80); put_u8(&b, 4); pk_str(&b, "posix"); pk_str(&b, "system"); put_u8(&b, 0x93); put_u8(&b, '.');
    refused(&b, 8, "global 'posix.system'");
    // a storage type called directly, and BUILD / INST / NEWOBJ
    put_u8(&b, 0x80); put_u8(&b, 2); pk_global(&b, "torch", "FloatStorage"); put_u8(&b, ')'); put_u8(&b, 'R'); put_u8(&b, '.');
    refused(&b, 8, "only appear inside a persistent id");
    put_u8(&b, 0x80); put_u8(&b, 2); put_u8(&b, '}'); put_u8(&b, '}'); put_u8(&b, 'b'); put_u8(&b, '.');
    refused(&b, 8, "opcode BUILD (0x62) is not allowed");
    put_u8(&b, 0x80); put_u8(&b, 2); put_u8(&b, '('); put_u8(&b, 'i'); put_str(&b, "os\nsystem\n"); put_u8(&b, '.');
    refused(&b, 8, "opcode INST");
    put_u8(&b, 0x80); put_u8(&b, 2); put_u8(&b, ')'); put_u8(&b, ')'); put_u8(&b, 0x81); put_u8(&b, '.');
    refused(&b, 8, "opcode NEWOBJ");
    // nesting bombs: MARKs, and lists appended into lists
    put_u8(&b, 0x80); put_u8(&b, 2);
    for (int i = 0; i < 100000; i++) put_u8(&b, '(');
    refused(&b, 8, "more than 64 nested MARKs");
    put_u8(&b, 0x80); put_u8(&b, 2);
    for (int i = 0; i < 100; i++) put_u8(&b, ']');
    for (int i = 0; i < 99; i++) put_u8(&b, 'a');
    put_u8(&b, '.');
    refused(&b, 8, "nested deeper than 64");
    // memo index out of range
    put_u8(&b, 0x80); put_u8(&b, 2); put_u8(&b, '}'); put_u8(&b, 'q'); put_u8(&b, 0); put_u8(&b, 'h'); put_u8(&b, 5);
    put_u8(&b, '.');
    refused(&b, 8, "memo index 5 was never stored");
    put_u8(&b, 0x80); put_u8(&b, 2); put_u8(&b, 'N'); put_u8(&b, 'r'); put_u32(&b, 0x7fffffffu); put_u8(&b, '.');
    refused(&b, 8, "beyond the 2^20-slot limit");
    // storages and tensors that do not fit
    unsigned s4[1] = { 4 }, st1[1] = { 1 }, st9[1] = { 9 };
    put_u8(&b, 0x80); put_u8(&b, 2); pk_tensor(&b, "0", 100, 0, 1, s4, st1); put_u8(&b, '.');
    refused(&b, 4, "storage '0' declares 100 float32 elements (4 bytes each), but data/0 holds 16 bytes");
    put_u8(&b, 0x80); put_u8(&b, 2); pk_tensor(&b, "0", 8, 0, 1, s4, st9); put_u8(&b, '.');
    refused(&b, 8, "tensor lies outside its storage");
    put_u8(&b, 0x80); put_u8(&b, 2); pk_tensor(&b, "7", 8, 0, 1, s4, st1); put_u8(&b, '.');
    refused(&b, 8, "storage '7' has no record archive/data/7");
    put_u8(&b, 0x80); put_u8(&b, 2); pk_tensor(&b, "../0", 8, 0, 1, s4, st1); put_u8(&b, '.');
    refused(&b, 8, "not a plain record name");
    // truncated pickles
    put_u8(&b, 0x80); put_u8(&b, 2); put_u8(&b, '}');
    refused(&b, 8, "no STOP opcode");
    put_u8(&b, 0x80); put_u8(&b, 2); put_u8(&b, 'X'); put_u32(&b, 1000); put_str(&b, "abc");
    refused(&b, 8, "runs past the end");
    put_u8(&b, 0x80); put_u8(&b, 2); put_u8(&b, 'N'); put_u8(&b, 'N'); put_u8(&b, '.');
    refused(&b, 8, "STOP leaves 2 values");
}

static void expect_zip_error(const struct buf * z, const char * want) {
    struct osc_pt * f = NULL;
    enum oscar_status st = osc_pt_open_mem(z->p, z->n, "z.pt", &f);
    if (st == OSCAR_OK || !strstr(oscar_last_error(), want) || !strstr(oscar_last_error(), "z.pt"))
        fail_msg("want an error with '%s', got status %d: %s", want, (int) st, oscar_last_error());
    assert_null(f);
}

static void test_hostile_zips(void ** state) {
    (void) state;
    struct buf pkl = { 0 };
    put_u8(&pkl, 0x80); put_u8(&pkl, 2); put_u8(&pkl, '}'); put_u8(&pkl, '.');
    struct rec good[] = { { "a/data.pkl", pkl.p, pkl.n }, { "a/version", "3\n", 2 } };
    struct buf z = make_zip(good, 2, false);
    struct osc_pt * f = NULL;
    assert_int_equal(osc_pt_open_mem(z.p, z.n, "z.pt", &f), OSCAR_OK);
    assert_int_equal(osc_pt_root(f)->kind, OSC_PT_DICT);
    osc_pt_close(f);
    // every truncation fails cleanly
    for (size_t cut = 0; cut < z.n; cut += 7) {
        struct buf t = { z.p, cut, cut };
        expect_zip_error(&t, "z.pt");
    }
    struct buf t = { z.p, z.n / 2, z.n / 2 };
    expect_zip_error(&t, "no ZIP end record");
    // a flipped data byte: CRC
    z.p[30 + strlen("a/data.pkl") + 2] ^= 0x01;
    expect_zip_error(&z, "CRC-32");
    free(z.p);
    struct rec evil[] = { { "a/../../etc/data.pkl", pkl.p, pkl.n } };
    z = make_zip(evil, 1, false);
    expect_zip_error(&z, "'a/../../etc/data.pkl' is not a plain relative path");
    free(z.p);
    struct rec abs_name[] = { { "/a/data.pkl", pkl.p, pkl.n } };
    z = make_zip(abs_name, 1, false);
    expect_zip_error(&z, "not a plain relative path");
    free(z.p);
    struct rec twice[] = { { "a/data.pkl", pkl.p, pkl.n }, { "a/data.pkl", pkl.p, pkl.n } };
    z = make_zip(twice, 2, false);
    expect_zip_error(&z, "appears twice");
    free(z.p);
    struct rec nopkl[] = { { "a/version", "3\n", 2 } };
    z = make_zip(nopkl, 1, false);
    expect_zip_error(&z, "no a/data.pkl");
    free(z.p);
    struct rec big[] = { { "a/data.pkl", pkl.p, pkl.n }, { "a/byteorder", "big", 3 } };
    z = make_zip(big, 2, false);
    expect_zip_error(&z, "big-endian");
    // a ZIP64 end locator pointing at no ZIP64 end record
    struct buf z64 = { 0 };
    put(&z64, z.p, z.n - 22);
    put_u32(&z64, 0x07064b50u); put_u32(&z64, 0); put_u32(&z64, 0); put_u32(&z64, 0); put_u32(&z64, 1);
    put(&z64, z.p + z.n - 22, 22);
    expect_zip_error(&z64, "ZIP64 end record missing");
    free(z64.p);
    free(z.p);
    // torch.save's ZIP64 layout opens, deflated too; saturated sizes without their extra field do not
    for (int d = 0; d < 2; d++) {
        z = make_zip_as(good, 2, d, true);
        f = NULL;
        assert_int_equal(osc_pt_open_mem(z.p, z.n, "z.pt", &f), OSCAR_OK);
        assert_int_equal(osc_pt_root(f)->kind, OSC_PT_DICT);
        osc_pt_close(f);
        for (size_t cut = 0; cut < z.n; cut += 5) {   // every truncation of a ZIP64 archive fails cleanly
            struct buf tz = { z.p, cut, cut };
            expect_zip_error(&tz, "z.pt");
        }
        free(z.p);
    }
    z = make_zip_as(good, 2, false, true);
    size_t cd0 = 0;
    for (size_t i = 0; i + 4 <= z.n; i++)
        if (!memcmp(z.p + i, "PK\x01\x02", 4)) { cd0 = i; break; }
    z.p[cd0 + 30] = 0;   // the first central entry's extra length: its zip64 field is gone
    expect_zip_error(&z, "z.pt");
    free(z.p);
    struct buf junk = { (uint8_t *) "PK\x05\x06 not a zip at all, just text", 36, 36 };
    expect_zip_error(&junk, "z.pt");
    free(pkl.p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writer_round_trip),
        cmocka_unit_test(test_views_and_values),
        cmocka_unit_test(test_hostile_pickles),
        cmocka_unit_test(test_hostile_zips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
