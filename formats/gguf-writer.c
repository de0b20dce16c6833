// gguf-writer.c - GGUF v3 writer (see gguf-writer.h).
//
// KVs are serialised into one byte buffer as they are added; tensor infos are
// kept as descriptions with borrowed data pointers and laid out at write
// time. Little-endian hosts only (as the reader).
#include "formats/gguf-writer.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fs.h"

#define GGUF_WRITER_MAX_NAME 255

struct wtensor {
    char               name[GGUF_WRITER_MAX_NAME + 1];
    enum osc_ggml_type type;
    uint32_t           n_dims;
    int64_t            ne[4];
    const void *       data;
    size_t             nbytes;
};

struct osc_gguf_writer {
    uint64_t         alignment;
    uint8_t *        kv;     // serialised key/value pairs
    size_t           kv_n, kv_cap;
    char **          keys;   // for duplicate checks
    uint64_t         n_kv, keys_cap;
    struct wtensor * t;
    uint64_t         n_t, t_cap;
};

static enum oscar_status grow(void ** p, uint64_t * cap, uint64_t need, size_t elem) {
    if (need <= *cap) return OSCAR_OK;
    uint64_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void * q = realloc(*p, (size_t) c * elem);
    if (!q) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    *p   = q;
    *cap = c;
    return OSCAR_OK;
}

static enum oscar_status put(struct osc_gguf_writer * w, const void * src, size_t n) {
    if (n == 0) return OSCAR_OK;
    uint64_t cap = w->kv_cap;
    void *   p   = w->kv;
    enum oscar_status st = grow(&p, &cap, (uint64_t) w->kv_n + n, 1);
    w->kv     = p;
    w->kv_cap = (size_t) cap;
    if (st != OSCAR_OK) return st;
    memcpy(w->kv + w->kv_n, src, n);
    w->kv_n += n;
    return OSCAR_OK;
}

static enum oscar_status put_u32(struct osc_gguf_writer * w, uint32_t v) { return put(w, &v, 4); }
static enum oscar_status put_u64(struct osc_gguf_writer * w, uint64_t v) { return put(w, &v, 8); }

static enum oscar_status put_str(struct osc_gguf_writer * w, const char * s, size_t len) {
    enum oscar_status st = put_u64(w, len);
    return st != OSCAR_OK ? st : put(w, s, len);
}

enum oscar_status osc_gguf_writer_new(uint64_t alignment, struct osc_gguf_writer ** out) {
    *out = NULL;
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
        return osc_error(OSCAR_ERR_INVALID, "gguf writer: alignment %llu is not a power of two",
                         (unsigned long long) alignment);
    struct osc_gguf_writer * w = calloc(1, sizeof *w);
    if (!w) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    w->alignment = alignment;
    *out         = w;
    return OSCAR_OK;
}

void osc_gguf_writer_free(struct osc_gguf_writer * w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys);
    free(w->kv);
    free(w->t);
    free(w);
}

// Registers `key` (refusing duplicates) and writes key + type.
static enum oscar_status begin_kv(struct osc_gguf_writer * w, const char * key, enum osc_gguf_type type) {
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], key)) return osc_error(OSCAR_ERR_INVALID, "gguf writer: duplicate key '%s'", key);
    void *            p  = w->keys;
    enum oscar_status st = grow(&p, &w->keys_cap, w->n_kv + 1, sizeof(char *));
    w->keys              = p;
    if (st != OSCAR_OK) return st;
    if (!(w->keys[w->n_kv] = strdup(key))) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    w->n_kv++;
    if ((st = put_str(w, key, strlen(key))) != OSCAR_OK) return st;
    return put_u32(w, (uint32_t) type);
}

enum oscar_status osc_gguf_writer_kv(struct osc_gguf_writer * w, const char * key, enum osc_gguf_type type,
                                     const void * value) {
    size_t n = osc_gguf_value_size(type);
    if (n == 0) return osc_error(OSCAR_ERR_INVALID, "gguf writer: key '%s': type %d is not a scalar", key, (int) type);
    if (!strcmp(key, "general.alignment")) {
        uint32_t a;
        memcpy(&a, value, sizeof a);
        if (type != OSC_GGUF_UINT32 || a != w->alignment)
            return osc_error(OSCAR_ERR_INVALID, "gguf writer: general.alignment must be the u32 %llu",
                             (unsigned long long) w->alignment);
    }
    enum oscar_status st = begin_kv(w, key, type);
    return st != OSCAR_OK ? st : put(w, value, n);
}

enum oscar_status osc_gguf_writer_kv_str(struct osc_gguf_writer * w, const char * key, const char * s, size_t len) {
    enum oscar_status st = begin_kv(w, key, OSC_GGUF_STRING);
    return st != OSCAR_OK ? st : put_str(w, s, len);
}

enum oscar_status osc_gguf_writer_kv_arr(struct osc_gguf_writer * w, const char * key, enum osc_gguf_type elem,
                                         const void * data, uint64_t n) {
    size_t es = osc_gguf_value_size(elem);
    if (es == 0)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "gguf writer: key '%s': arrays of type %d are not written", key,
                         (int) elem);
    enum oscar_status st = begin_kv(w, key, OSC_GGUF_ARRAY);
    if (st == OSCAR_OK) st = put_u32(w, (uint32_t) elem);
    if (st == OSCAR_OK) st = put_u64(w, n);
    if (st == OSCAR_OK) st = put(w, data, (size_t) n * es);
    return st;
}

enum oscar_status osc_gguf_writer_kv_arr_str(struct osc_gguf_writer * w, const char * key, const char * const * s,
                                             const size_t * len, uint64_t n) {
    enum oscar_status st = begin_kv(w, key, OSC_GGUF_ARRAY);
    if (st == OSCAR_OK) st = put_u32(w, (uint32_t) OSC_GGUF_STRING);
    if (st == OSCAR_OK) st = put_u64(w, n);
    for (uint64_t i = 0; i < n && st == OSCAR_OK; i++) st = put_str(w, s[i], len[i]);
    return st;
}

enum oscar_status osc_gguf_writer_kv_u32(struct osc_gguf_writer * w, const char * key, uint32_t v) {
    return osc_gguf_writer_kv(w, key, OSC_GGUF_UINT32, &v);
}

enum oscar_status osc_gguf_writer_kv_f32(struct osc_gguf_writer * w, const char * key, float v) {
    return osc_gguf_writer_kv(w, key, OSC_GGUF_FLOAT32, &v);
}

enum oscar_status osc_gguf_writer_kv_cstr(struct osc_gguf_writer * w, const char * key, const char * s) {
    return osc_gguf_writer_kv_str(w, key, s, strlen(s));
}

enum oscar_status osc_gguf_writer_tensor(struct osc_gguf_writer * w, const char * name, enum osc_ggml_type type,
                                         uint32_t n_dims, const int64_t * ne, const void * data, size_t nbytes) {
    size_t  bb;
    int64_t be;
    if (strlen(name) > GGUF_WRITER_MAX_NAME || n_dims < 1 || n_dims > 4)
        return osc_error(OSCAR_ERR_INVALID, "gguf writer: tensor '%s': bad name length or %u dims", name, n_dims);
    if (!osc_ggml_type_info(type, &bb, &be))
        return osc_error(OSCAR_ERR_UNSUPPORTED, "gguf writer: tensor '%s': unknown ggml type %d", name, (int) type);
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] <= 0) return osc_error(OSCAR_ERR_INVALID, "gguf writer: tensor '%s': ne[%u] = %lld", name, d,
                                         (long long) ne[d]);
        n_el *= (uint64_t) ne[d];
    }
    if (ne[0] % be != 0 || n_el / (uint64_t) be * bb != nbytes)
        return osc_error(OSCAR_ERR_INVALID, "gguf writer: tensor '%s': %zu bytes do not match %s of %llu elements",
                         name, nbytes, osc_ggml_type_name(type), (unsigned long long) n_el);
    for (uint64_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return osc_error(OSCAR_ERR_INVALID, "gguf writer: duplicate tensor '%s'", name);
    void *            p  = w->t;
    enum oscar_status st = grow(&p, &w->t_cap, w->n_t + 1, sizeof *w->t);
    w->t                 = p;
    if (st != OSCAR_OK) return st;
    struct wtensor * t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type   = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < 4; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->data   = data;
    t->nbytes = nbytes;
    return OSCAR_OK;
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static bool wr(FILE * fp, const void * p, size_t n) { return n == 0 || fwrite(p, 1, n, fp) == n; }

static bool write_zeros(FILE * fp, uint64_t n) {
    static const uint8_t zero[256];
    while (n > 0) {
        size_t k = n > sizeof zero ? sizeof zero : (size_t) n;
        if (!wr(fp, zero, k)) return false;
        n -= k;
    }
    return true;
}

enum oscar_status osc_gguf_writer_write(struct osc_gguf_writer * w, const char * path) {
    const uint16_t one = 1;
    if (*(const uint8_t *) &one != 1) return osc_error(OSCAR_ERR_UNSUPPORTED, "big-endian hosts are not supported");
    struct osc_atomic_file f;
    enum oscar_status      st = osc_atomic_open(&f, path);
    if (st != OSCAR_OK) return st;
    FILE *   fp  = f.fp;
    uint32_t ver = 3;
    uint64_t pos = 4 + 4 + 8 + 8 + w->kv_n, off = 0;
    bool     ok  = wr(fp, "GGUF", 4) && wr(fp, &ver, 4) && wr(fp, &w->n_t, 8) && wr(fp, &w->n_kv, 8) &&
              wr(fp, w->kv, w->kv_n);
    for (uint64_t i = 0; ok && i < w->n_t; i++) {
        const struct wtensor * t  = &w->t[i];
        uint64_t               nl = strlen(t->name);
        uint32_t               ty = (uint32_t) t->type;
        ok = wr(fp, &nl, 8) && wr(fp, t->name, nl) && wr(fp, &t->n_dims, 4) && wr(fp, t->ne, 8 * t->n_dims) &&
             wr(fp, &ty, 4) && wr(fp, &off, 8);
        pos += 8 + nl + 4 + 8 * (uint64_t) t->n_dims + 4 + 8;
        off = align_up(off + t->nbytes, w->alignment);
    }
    ok = ok && write_zeros(fp, align_up(pos, w->alignment) - pos);
    off = 0;
    for (uint64_t i = 0; ok && i < w->n_t; i++) {
        const struct wtensor * t = &w->t[i];
        ok = wr(fp, t->data, t->nbytes) && write_zeros(fp, align_up(off + t->nbytes, w->alignment) - off - t->nbytes);
        off = align_up(off + t->nbytes, w->alignment);
    }
    if (!ok) {
        osc_atomic_abort(&f);
        return osc_error(OSCAR_ERR_IO, "%s: write failed", path);
    }
    return osc_atomic_commit(&f);
}

// ---- copying the KVs of an open file -----------------------------------------

static enum oscar_status copy_scalar(struct osc_gguf_writer * w, const struct osc_gguf * g, const char * key,
                                     enum osc_gguf_type t) {
    union { uint8_t u8; uint16_t u16; uint32_t u32; uint64_t u64; float f32; double f64; } v;
    enum oscar_status st;
    uint64_t          u = 0;
    int64_t           s = 0;
    bool              b = false;
    switch (t) {
        case OSC_GGUF_UINT8: case OSC_GGUF_UINT16: case OSC_GGUF_UINT32: case OSC_GGUF_UINT64:
            if ((st = osc_gguf_get_u64(g, key, &u)) != OSCAR_OK) return st;
            v.u64 = u;
            break;
        case OSC_GGUF_INT8: case OSC_GGUF_INT16: case OSC_GGUF_INT32: case OSC_GGUF_INT64:
            if ((st = osc_gguf_get_i64(g, key, &s)) != OSCAR_OK) return st;
            v.u64 = (uint64_t) s;
            break;
        case OSC_GGUF_FLOAT32:
            if ((st = osc_gguf_get_f32(g, key, &v.f32)) != OSCAR_OK) return st;
            break;
        case OSC_GGUF_FLOAT64:
            if ((st = osc_gguf_get_f64(g, key, &v.f64)) != OSCAR_OK) return st;
            break;
        case OSC_GGUF_BOOL:
            if ((st = osc_gguf_get_bool(g, key, &b)) != OSCAR_OK) return st;
            v.u8 = b;
            break;
        default: return osc_error(OSCAR_ERR_INVALID, "copy_scalar: type %d", (int) t);
    }
    // Narrow in place (little-endian: the low bytes come first).
    size_t  n = osc_gguf_value_size(t);
    uint8_t bytes[8];
    if (t == OSC_GGUF_FLOAT32) memcpy(bytes, &v.f32, 4);
    else if (t == OSC_GGUF_FLOAT64) memcpy(bytes, &v.f64, 8);
    else if (t == OSC_GGUF_BOOL) bytes[0] = v.u8;
    else memcpy(bytes, &v.u64, n);
    return osc_gguf_writer_kv(w, key, t, bytes);
}

static enum oscar_status copy_array(struct osc_gguf_writer * w, const struct osc_gguf * g, const char * key) {
    enum osc_gguf_type et;
    uint64_t           n;
    enum oscar_status  st = osc_gguf_get_arr(g, key, &et, &n);
    if (st != OSCAR_OK) return st;
    if (et == OSC_GGUF_STRING) {
        const char ** s   = malloc((size_t) (n ? n : 1) * sizeof *s);
        size_t *      len = malloc((size_t) (n ? n : 1) * sizeof *len);
        st = s && len ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "out of memory");
        for (uint64_t i = 0; i < n && st == OSCAR_OK; i++) st = osc_gguf_get_arr_str(g, key, i, &s[i], &len[i]);
        if (st == OSCAR_OK) st = osc_gguf_writer_kv_arr_str(w, key, (const char * const *) s, len, n);
        free(s);
        free(len);
        return st;
    }
    if (osc_gguf_value_size(et) == 0)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: key '%s': nested arrays are not copied", osc_gguf_path(g), key);
    const void * data = NULL;
    if (n > 0 && (st = osc_gguf_get_arr_data(g, key, &data)) != OSCAR_OK) return st;
    return osc_gguf_writer_kv_arr(w, key, et, data, n);
}

enum oscar_status osc_gguf_copy_kvs(struct osc_gguf_writer * w, const struct osc_gguf * g) {
    enum oscar_status st = OSCAR_OK;
    for (int64_t i = 0; i < osc_gguf_n_kv(g) && st == OSCAR_OK; i++) {
        const char *       key = osc_gguf_key(g, i);
        enum osc_gguf_type t   = osc_gguf_kv_type(g, i);
        if (t == OSC_GGUF_STRING) {
            const char * s;
            size_t       len;
            st = osc_gguf_get_str(g, key, &s, &len);
            if (st == OSCAR_OK) st = osc_gguf_writer_kv_str(w, key, s, len);
        } else if (t == OSC_GGUF_ARRAY) {
            st = copy_array(w, g, key);
        } else {
            st = copy_scalar(w, g, key, t);
        }
    }
    return st;
}
