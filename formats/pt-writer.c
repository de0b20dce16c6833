// pt-writer.c - torch.save-compatible .pt writer (see pt-writer.h).
//
// Two pieces: a protocol-2 pickle emitter for the fixed rotation dict (only
// the opcodes torch's weights_only unpickler accepts, only the three globals
// it allows for tensors) and a STORED-only ZIP writer that pads each local
// header's extra field so every record's data starts on a 64-byte boundary,
// as torch's PyTorchStreamWriter does. No compression, no ZIP64, no data
// descriptors: sizes and CRC-32s (zlib) are known before each header.
#include "formats/pt-writer.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "util/fs.h"

#define PT_ALIGN       64
#define PT_MAX_RECORDS 65535u
#define PT_MAX_OFFSET  0xffffffffull

// ---- growable byte buffer ----------------------------------------------------

struct pbuf {
    uint8_t * p;
    size_t    n, cap;
    bool      oom;
};

static void put(struct pbuf * b, const void * src, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        uint8_t * q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p   = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_u8(struct pbuf * b, uint8_t v) { put(b, &v, 1); }
static void put_u16(struct pbuf * b, uint16_t v) { uint8_t x[2] = { (uint8_t) v, (uint8_t) (v >> 8) }; put(b, x, 2); }
static void put_u32(struct pbuf * b, uint32_t v) {
    uint8_t x[4] = { (uint8_t) v, (uint8_t) (v >> 8), (uint8_t) (v >> 16), (uint8_t) (v >> 24) };
    put(b, x, 4);
}

// ---- pickle (protocol 2) -----------------------------------------------------

enum {
    PK_PROTO = 0x80, PK_STOP = '.', PK_MARK = '(', PK_EMPTY_DICT = '}', PK_SETITEMS = 'u', PK_BINUNICODE = 'X',
    PK_BININT = 'J', PK_BININT1 = 'K', PK_BININT2 = 'M', PK_GLOBAL = 'c', PK_TUPLE = 't', PK_EMPTY_TUPLE = ')',
    PK_REDUCE = 'R', PK_BINPERSID = 'Q', PK_NEWFALSE = 0x89, PK_BINPUT = 'q', PK_BINGET = 'h',
};

static void pk_int(struct pbuf * b, int64_t v) {
    OSCAR_ASSERT(v >= INT32_MIN && v <= INT32_MAX);
    if (v >= 0 && v < 256) {
        put_u8(b, PK_BININT1);
        put_u8(b, (uint8_t) v);
    } else if (v >= 0 && v < 65536) {
        put_u8(b, PK_BININT2);
        put_u16(b, (uint16_t) v);
    } else {
        put_u8(b, PK_BININT);
        put_u32(b, (uint32_t) (int32_t) v);
    }
}

static void pk_str(struct pbuf * b, const char * s) {
    put_u8(b, PK_BINUNICODE);
    put_u32(b, (uint32_t) strlen(s));
    put(b, s, strlen(s));
}

// Globals are emitted once and memoised: memo slot m, then BINGET m.
struct pk_globals {
    int rebuild, storage, odict, next_memo;
};

static void pk_global(struct pbuf * b, int * slot, int * next_memo, const char * module, const char * name) {
    if (*slot >= 0) {
        put_u8(b, PK_BINGET);
        put_u8(b, (uint8_t) *slot);
        return;
    }
    put_u8(b, PK_GLOBAL);
    put(b, module, strlen(module));
    put_u8(b, '\n');
    put(b, name, strlen(name));
    put_u8(b, '\n');
    *slot = (*next_memo)++;
    OSCAR_ASSERT(*slot < 256);
    put_u8(b, PK_BINPUT);
    put_u8(b, (uint8_t) *slot);
}

// _rebuild_tensor_v2(("storage", FloatStorage, key, "cpu", numel), 0, size, stride, False, OrderedDict())
static void pk_tensor(struct pbuf * b, struct pk_globals * g, int key, int n_dims, const int64_t * size) {
    char    kbuf[16];
    int64_t numel = 1, stride[3];
    for (int d = n_dims - 1; d >= 0; d--) {
        stride[d] = numel;
        numel *= size[d];
    }
    snprintf(kbuf, sizeof kbuf, "%d", key);
    pk_global(b, &g->rebuild, &g->next_memo, "torch._utils", "_rebuild_tensor_v2");
    put_u8(b, PK_MARK);
    put_u8(b, PK_MARK);
    pk_str(b, "storage");
    pk_global(b, &g->storage, &g->next_memo, "torch", "FloatStorage");
    pk_str(b, kbuf);
    pk_str(b, "cpu");
    pk_int(b, numel);
    put_u8(b, PK_TUPLE);
    put_u8(b, PK_BINPERSID);
    pk_int(b, 0); // storage offset
    put_u8(b, PK_MARK);
    for (int d = 0; d < n_dims; d++) pk_int(b, size[d]);
    put_u8(b, PK_TUPLE);
    put_u8(b, PK_MARK);
    for (int d = 0; d < n_dims; d++) pk_int(b, stride[d]);
    put_u8(b, PK_TUPLE);
    put_u8(b, PK_NEWFALSE); // requires_grad
    pk_global(b, &g->odict, &g->next_memo, "collections", "OrderedDict");
    put_u8(b, PK_EMPTY_TUPLE);
    put_u8(b, PK_REDUCE);
    put_u8(b, PK_TUPLE);
    put_u8(b, PK_REDUCE);
}

static void pk_rotations(struct pbuf * b, const struct oscar_pt_rotations * r) {
    struct pk_globals g = { -1, -1, -1, 0 };
    int64_t           D = r->head_dim, H = r->n_rot;
    int64_t           rs[3] = { H, D, D }, es[2] = { H, D };
    bool              v2 = r->format_version >= 2;
    put_u8(b, PK_PROTO);
    put_u8(b, 2);
    put_u8(b, PK_EMPTY_DICT);
    put_u8(b, PK_MARK);
    pk_str(b, "format_version");
    pk_int(b, r->format_version);
    pk_str(b, "objective");
    pk_str(b, r->objective);
    pk_str(b, "source_grouping");
    pk_str(b, v2 ? "kv_head" : "layer");
    pk_str(b, "layers");
    put_u8(b, PK_EMPTY_DICT);
    put_u8(b, PK_MARK);
    for (int32_t l = 0; l < r->n_layer; l++) {
        pk_int(b, l);
        put_u8(b, PK_EMPTY_DICT);
        put_u8(b, PK_MARK);
        pk_str(b, "layer_id");
        pk_int(b, l);
        pk_str(b, "rotation");
        pk_tensor(b, &g, 2 * l, v2 ? 3 : 2, v2 ? rs : rs + 1);
        pk_str(b, "eigenvalues");
        pk_tensor(b, &g, 2 * l + 1, v2 ? 2 : 1, v2 ? es : es + 1);
        put_u8(b, PK_SETITEMS);
    }
    put_u8(b, PK_SETITEMS); // layers
    put_u8(b, PK_SETITEMS); // top level
    put_u8(b, PK_STOP);
}

// ---- ZIP (stored) ------------------------------------------------------------

struct zrec {
    char *        name;
    const void *  data;
    uint64_t      size;
    uint32_t      crc;
    uint64_t      offset; // of the local header
};

struct zwriter {
    FILE *        fp;
    const char *  path;
    uint64_t      pos;
    struct zrec * rec;
    uint32_t      n, cap;
    enum oscar_status st;
};

static void zw_bytes(struct zwriter * z, const void * p, size_t n) {
    if (z->st != OSCAR_OK || n == 0) return;
    if (fwrite(p, 1, n, z->fp) != n) {
        z->st = osc_error(OSCAR_ERR_IO, "%s: write failed at byte %llu", z->path, (unsigned long long) z->pos);
        return;
    }
    z->pos += n;
}

static uint32_t crc_of(const void * p, uint64_t n) {
    uLong          c = crc32(0L, Z_NULL, 0);
    const Bytef *  q = p;
    while (n > 0) { // crc32 takes uInt lengths
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt) n;
        c      = crc32(c, q, k);
        q += k;
        n -= k;
    }
    return (uint32_t) c;
}

static void zw_record(struct zwriter * z, const char * stem, const char * name, const void * data, uint64_t size) {
    if (z->st != OSCAR_OK) return;
    if (z->n >= PT_MAX_RECORDS) {
        z->st = osc_error(OSCAR_ERR_UNSUPPORTED, "%s: more than %u records would need ZIP64", z->path, PT_MAX_RECORDS);
        return;
    }
    if (z->n == z->cap) {
        uint32_t      cap = z->cap ? 2 * z->cap : 16;
        struct zrec * r   = realloc(z->rec, cap * sizeof *r);
        if (!r) {
            z->st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
            return;
        }
        z->rec = r;
        z->cap = cap;
    }
    struct zrec * r = &z->rec[z->n];
    size_t        nl = strlen(stem) + 1 + strlen(name);
    r->name          = malloc(nl + 1);
    if (!r->name) {
        z->st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
        return;
    }
    snprintf(r->name, nl + 1, "%s/%s", stem, name);
    z->n++;
    r->data   = data;
    r->size   = size;
    r->crc    = crc_of(data, size);
    r->offset = z->pos;
    // Pad the extra field (id "FB", torch's choice) so the data lands on PT_ALIGN.
    uint64_t pad = (PT_ALIGN - (z->pos + 30 + nl) % PT_ALIGN) % PT_ALIGN;
    if (pad > 0 && pad < 4) pad += PT_ALIGN;
    if (z->pos + 30 + nl + pad + size > PT_MAX_OFFSET || nl > 0xffff) {
        z->st = osc_error(OSCAR_ERR_UNSUPPORTED, "%s: record '%s' ends past 4 GiB; ZIP64 is not supported", z->path,
                          r->name);
        return;
    }
    struct pbuf h = { 0 };
    put_u32(&h, 0x04034b50u);
    put_u16(&h, 20);     // version needed
    put_u16(&h, 0);      // flags
    put_u16(&h, 0);      // method: stored
    put_u16(&h, 0);      // time 00:00:00
    put_u16(&h, 0x21);   // date 1980-01-01
    put_u32(&h, r->crc);
    put_u32(&h, (uint32_t) size);
    put_u32(&h, (uint32_t) size);
    put_u16(&h, (uint16_t) nl);
    put_u16(&h, (uint16_t) pad);
    put(&h, r->name, nl);
    if (pad > 0) {
        put_u16(&h, 0x4246); // "FB"
        put_u16(&h, (uint16_t) (pad - 4));
        for (uint64_t i = 4; i < pad; i++) put_u8(&h, 'Z');
    }
    if (h.oom) z->st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
    zw_bytes(z, h.p, h.n);
    free(h.p);
    OSCAR_ASSERT(z->st != OSCAR_OK || z->pos % PT_ALIGN == 0);
    zw_bytes(z, data, size);
}

static void zw_finish(struct zwriter * z) {
    if (z->st != OSCAR_OK) return;
    struct pbuf c = { 0 };
    for (uint32_t i = 0; i < z->n; i++) {
        const struct zrec * r = &z->rec[i];
        put_u32(&c, 0x02014b50u);
        put_u16(&c, 20); // version made by
        put_u16(&c, 20); // version needed
        put_u16(&c, 0);
        put_u16(&c, 0);
        put_u16(&c, 0);
        put_u16(&c, 0x21);
        put_u32(&c, r->crc);
        put_u32(&c, (uint32_t) r->size);
        put_u32(&c, (uint32_t) r->size);
        put_u16(&c, (uint16_t) strlen(r->name));
        put_u16(&c, 0); // extra
        put_u16(&c, 0); // comment
        put_u16(&c, 0); // disk
        put_u16(&c, 0); // internal attributes
        put_u32(&c, 0); // external attributes
        put_u32(&c, (uint32_t) r->offset);
        put(&c, r->name, strlen(r->name));
    }
    uint64_t cd_off = z->pos, cd_size = c.n;
    if (cd_off + c.n + 22 > PT_MAX_OFFSET) {
        z->st = osc_error(OSCAR_ERR_UNSUPPORTED, "%s: archive larger than 4 GiB; ZIP64 is not supported", z->path);
    }
    put_u32(&c, 0x06054b50u);
    put_u16(&c, 0);
    put_u16(&c, 0);
    put_u16(&c, (uint16_t) z->n);
    put_u16(&c, (uint16_t) z->n);
    put_u32(&c, (uint32_t) cd_size);
    put_u32(&c, (uint32_t) cd_off);
    put_u16(&c, 0);
    if (c.oom && z->st == OSCAR_OK) z->st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
    zw_bytes(z, c.p, c.n);
    free(c.p);
}

// ---- the rotation file -------------------------------------------------------

// "dir/k_rotation_x.pt" -> "k_rotation_x" (malloc'ed).
static char * file_stem(const char * path) {
    const char * base = strrchr(path, '/');
    base              = base ? base + 1 : path;
    const char * dot  = strrchr(base, '.');
    size_t       n    = dot && dot != base ? (size_t) (dot - base) : strlen(base);
    char *       s    = malloc(n + 1);
    if (s) {
        memcpy(s, base, n);
        s[n] = '\0';
    }
    return s;
}

static enum oscar_status check_args(const char * path, const struct oscar_pt_rotations * r) {
    if (r->format_version != 1 && r->format_version != 2)
        return osc_error(OSCAR_ERR_INVALID, "%s: format_version %d (want 1 or 2)", path, (int) r->format_version);
    if (r->n_layer < 1 || r->head_dim < 1 || r->n_rot < 1 || (r->format_version == 1 && r->n_rot != 1))
        return osc_error(OSCAR_ERR_INVALID, "%s: bad shape L=%d R=%d D=%d for format_version %d", path,
                         (int) r->n_layer, (int) r->n_rot, (int) r->head_dim, (int) r->format_version);
    if (!r->objective || !r->rotation || !r->eigenvalues)
        return osc_error(OSCAR_ERR_INVALID, "%s: missing objective or tensors", path);
    if ((uint64_t) r->n_rot * (uint64_t) r->head_dim * (uint64_t) r->head_dim > INT32_MAX)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: a %dx%dx%d tensor is too large for this writer", path,
                         (int) r->n_rot, (int) r->head_dim, (int) r->head_dim);
    const uint16_t one = 1;
    if (*(const uint8_t *) &one != 1) return osc_error(OSCAR_ERR_UNSUPPORTED, "big-endian hosts are not supported");
    return OSCAR_OK;
}

// One storage record per tensor, keyed "0", "1", ... in the order the pickle names them.
struct pt_storage {
    const void * data;
    uint64_t     size;
};

// The archive around pickle `pk` with storages s[0..n): torch.save's record order.
static enum oscar_status write_archive(const char * path, const struct pbuf * pk, const struct pt_storage * s,
                                       size_t n) {
    struct zwriter         z    = { 0 };
    struct osc_atomic_file f    = { 0 };
    char *                 stem = file_stem(path);
    enum oscar_status      st;
    if (!stem || pk->oom) {
        free(stem);
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    if ((st = osc_atomic_open(&f, path)) != OSCAR_OK) goto out;
    z.fp   = f.fp;
    z.path = path;
    char sid[48], key[32];
    zw_record(&z, stem, "data.pkl", pk->p, pk->n);
    zw_record(&z, stem, ".format_version", "1", 1);
    zw_record(&z, stem, ".storage_alignment", "64", 2);
    zw_record(&z, stem, "byteorder", "little", 6);
    for (size_t i = 0; i < n && z.st == OSCAR_OK; i++) {
        snprintf(key, sizeof key, "data/%zu", i);
        zw_record(&z, stem, key, s[i].data, s[i].size);
    }
    zw_record(&z, stem, "version", "3\n", 2);
    // Deterministic id: digits of the CRC of the pickle and of the first storage.
    snprintf(sid, sizeof sid, "%010u%010u", z.n > 0 ? (unsigned) z.rec[0].crc : 0u,
             z.n > 4 ? (unsigned) z.rec[4].crc : 0u);
    zw_record(&z, stem, ".data/serialization_id", sid, strlen(sid));
    zw_finish(&z);
    if ((st = z.st) != OSCAR_OK) {
        osc_atomic_abort(&f);
        goto out;
    }
    st = osc_atomic_commit(&f);
out:
    for (uint32_t i = 0; i < z.n; i++) free(z.rec[i].name);
    free(z.rec);
    free(stem);
    return st;
}

enum oscar_status oscar_pt_write_rotations(const char * path, const struct oscar_pt_rotations * r) {
    enum oscar_status st = check_args(path, r);
    if (st != OSCAR_OK) return st;
    size_t              D = (size_t) r->head_dim, R = (size_t) r->n_rot, L = (size_t) r->n_layer;
    struct pt_storage * s = malloc(2 * L * sizeof *s);
    struct pbuf         pk = { 0 };
    if (!s) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    for (size_t l = 0; l < L; l++) {
        s[2 * l]     = (struct pt_storage) { r->rotation + l * R * D * D, R * D * D * sizeof(float) };
        s[2 * l + 1] = (struct pt_storage) { r->eigenvalues + l * R * D, R * D * sizeof(float) };
    }
    pk_rotations(&pk, r);
    st = write_archive(path, &pk, s, 2 * L);
    free(pk.p);
    free(s);
    return st;
}

// ---- the key-mean file -------------------------------------------------------

// {"format_version": 1, "note": note, "layers": {i: {"layer_id": i, "mu": [Hkv, D]}}}
static void pk_k_mean(struct pbuf * b, const struct oscar_pt_k_mean * m) {
    struct pk_globals g     = { -1, -1, -1, 0 };
    int64_t           ms[2] = { m->n_head_kv, m->head_dim };
    put_u8(b, PK_PROTO);
    put_u8(b, 2);
    put_u8(b, PK_EMPTY_DICT);
    put_u8(b, PK_MARK);
    pk_str(b, "format_version");
    pk_int(b, 1);
    pk_str(b, "note");
    pk_str(b, m->note);
    pk_str(b, "layers");
    put_u8(b, PK_EMPTY_DICT);
    put_u8(b, PK_MARK);
    for (int32_t l = 0; l < m->n_layer; l++) {
        pk_int(b, l);
        put_u8(b, PK_EMPTY_DICT);
        put_u8(b, PK_MARK);
        pk_str(b, "layer_id");
        pk_int(b, l);
        pk_str(b, "mu");
        pk_tensor(b, &g, l, 2, ms);
        put_u8(b, PK_SETITEMS);
    }
    put_u8(b, PK_SETITEMS); // layers
    put_u8(b, PK_SETITEMS); // top level
    put_u8(b, PK_STOP);
}

enum oscar_status oscar_pt_write_k_mean(const char * path, const struct oscar_pt_k_mean * m) {
    if (m->n_layer < 1 || m->n_head_kv < 1 || m->head_dim < 1 || !m->mu || !m->note)
        return osc_error(OSCAR_ERR_INVALID, "%s: bad k_mean shape L=%d Hkv=%d D=%d", path, (int) m->n_layer,
                         (int) m->n_head_kv, (int) m->head_dim);
    const uint16_t one = 1;
    if (*(const uint8_t *) &one != 1) return osc_error(OSCAR_ERR_UNSUPPORTED, "big-endian hosts are not supported");
    size_t              HD = (size_t) m->n_head_kv * (size_t) m->head_dim, L = (size_t) m->n_layer;
    struct pt_storage * s  = malloc(L * sizeof *s);
    struct pbuf         pk = { 0 };
    if (!s) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    for (size_t l = 0; l < L; l++) s[l] = (struct pt_storage) { m->mu + l * HD, HD * sizeof(float) };
    pk_k_mean(&pk, m);
    enum oscar_status st = write_archive(path, &pk, s, L);
    free(pk.p);
    free(s);
    return st;
}
