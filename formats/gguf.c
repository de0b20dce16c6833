// gguf.c - GGUF v2/v3 reader over a read-only memory mapping (see gguf.h).
//
// Everything is validated once in osc_gguf_open(): header, every key/value
// (nested arrays included, depth-limited), general.alignment, every tensor
// info (name, n_dims <= 4, ne > 0, known type, whole blocks per row,
// overflow-free sizes, aligned offsets, data inside the file, no overlap).
// Afterwards the getters only read indexed positions. It refuses GGUF v1
// (32-bit lengths), big-endian files, duplicate keys and duplicate tensor
// names. Counts taken from the file are bounded by the bytes left before
// anything is allocated, so a hostile header cannot make it allocate more
// than a small multiple of the file size.
#include "formats/gguf.h"

#include <stdlib.h>
#include <string.h>

#include "util/fs.h"

#define GGUF_MAX_DEPTH     4  // nesting of arrays in a value
#define GGUF_DEFAULT_ALIGN 32
#define GGUF_NAME_MAX      255

struct gguf_kv {
    char *             key;       // NUL-terminated copy
    enum osc_gguf_type type;
    // scalar values
    uint64_t           u;         // unsigned integers and bool
    int64_t            i;         // signed integers
    double             f;         // floats
    // strings: offset and length in the mapping
    size_t             str_off;
    size_t             str_len;
    // arrays
    enum osc_gguf_type arr_type;
    uint64_t           arr_n;
    size_t             arr_off;   // first element
    uint64_t *         arr_str;   // [arr_n] offsets of the length prefix of each string (string arrays)
};

struct osc_gguf {
    struct osc_mapped_file  map;
    uint32_t                version;
    int64_t                 n_kv;
    struct gguf_kv *        kv;          // [n_kv]
    int64_t                 n_tensors;
    struct osc_gguf_tensor * tensors;    // [n_tensors]
    int64_t *               tensor_sorted; // [n_tensors] indices sorted by name
    int64_t *               kv_sorted;     // [n_kv] indices sorted by key
    uint64_t                alignment;
    uint64_t                data_offset;
};

struct cursor {
    const uint8_t * p;
    size_t          size;
    size_t          pos;
    const char *    path;
};

static size_t cur_left(const struct cursor * c) {
    return c->size - c->pos;
}

static enum oscar_status cur_need(const struct cursor * c, size_t n, const char * what) {
    if (n > cur_left(c)) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: truncated at byte %zu reading %s (%zu bytes needed, %zu left)",
                         c->path, c->pos, what, n, cur_left(c));
    }
    return OSCAR_OK;
}

static enum oscar_status cur_read(struct cursor * c, void * dst, size_t n, const char * what) {
    enum oscar_status st = cur_need(c, n, what);
    if (st != OSCAR_OK) return st;
    memcpy(dst, c->p + c->pos, n);
    c->pos += n;
    return OSCAR_OK;
}

static enum oscar_status cur_u32(struct cursor * c, uint32_t * v, const char * what) {
    return cur_read(c, v, 4, what);
}

static enum oscar_status cur_u64(struct cursor * c, uint64_t * v, const char * what) {
    return cur_read(c, v, 8, what);
}

// Reads a gguf_str: sets *off to the first byte and *len.
static enum oscar_status cur_str(struct cursor * c, size_t * off, size_t * len, const char * what) {
    uint64_t n;
    enum oscar_status st = cur_u64(c, &n, what);
    if (st != OSCAR_OK) return st;
    if (n > cur_left(c)) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: %s at byte %zu has length %llu past the end of the file",
                         c->path, what, c->pos - 8, (unsigned long long) n);
    }
    *off = c->pos;
    *len = (size_t) n;
    c->pos += (size_t) n;
    return OSCAR_OK;
}

static const char * type_name(uint32_t t) {
    static const char * names[] = {"uint8", "int8",  "uint16", "int16", "uint32", "int32", "float32",
                                   "bool",  "string", "array", "uint64", "int64", "float64"};
    return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

size_t osc_gguf_value_size(uint32_t t) {
    switch (t) {
    case OSC_GGUF_UINT8: case OSC_GGUF_INT8: case OSC_GGUF_BOOL: return 1;
    case OSC_GGUF_UINT16: case OSC_GGUF_INT16: return 2;
    case OSC_GGUF_UINT32: case OSC_GGUF_INT32: case OSC_GGUF_FLOAT32: return 4;
    case OSC_GGUF_UINT64: case OSC_GGUF_INT64: case OSC_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

// Smallest encoded size of one element of type t (for bounding counts).
static size_t min_size(uint32_t t) {
    if (t == OSC_GGUF_STRING) return 8;
    if (t == OSC_GGUF_ARRAY) return 12;
    return osc_gguf_value_size(t);
}

// Validates (and skips) one value of type t; depth counts array nesting.
static enum oscar_status skip_value(struct cursor * c, uint32_t t, int depth, const char * key) {
    size_t fs = osc_gguf_value_size(t);
    if (fs) {
        if (t == OSC_GGUF_BOOL && cur_left(c) >= 1 && c->p[c->pos] > 1) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: key '%s': bool value %u at byte %zu is not 0 or 1", c->path,
                             key, c->p[c->pos], c->pos);
        }
        enum oscar_status st = cur_need(c, fs, key);
        if (st == OSCAR_OK) c->pos += fs;
        return st;
    }
    if (t == OSC_GGUF_STRING) {
        size_t off, len;
        return cur_str(c, &off, &len, key);
    }
    if (t != OSC_GGUF_ARRAY) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: key '%s': unknown value type %u at byte %zu", c->path, key, t,
                         c->pos);
    }
    if (depth >= GGUF_MAX_DEPTH) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: key '%s': arrays nested deeper than %d", c->path, key,
                         GGUF_MAX_DEPTH);
    }
    uint32_t et;
    uint64_t n;
    enum oscar_status st = cur_u32(c, &et, key);
    if (st == OSCAR_OK) st = cur_u64(c, &n, key);
    if (st != OSCAR_OK) return st;
    size_t ms = min_size(et);
    if (ms == 0) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: key '%s': unknown array element type %u", c->path, key, et);
    }
    if (n > cur_left(c) / ms) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: key '%s': array of %llu %s elements does not fit in the file",
                         c->path, key, (unsigned long long) n, type_name(et));
    }
    if (osc_gguf_value_size(et) && et != OSC_GGUF_BOOL) {
        c->pos += (size_t) n * ms;
        return OSCAR_OK;
    }
    for (uint64_t i = 0; i < n; i++) {
        st = skip_value(c, et, depth + 1, key);
        if (st != OSCAR_OK) return st;
    }
    return OSCAR_OK;
}

static void read_scalar(struct gguf_kv * kv, const uint8_t * p) {
    uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32; float f32;
    switch (kv->type) {
    case OSC_GGUF_UINT8:   memcpy(&u8, p, 1); kv->u = u8; break;
    case OSC_GGUF_BOOL:    memcpy(&u8, p, 1); kv->u = u8; break;
    case OSC_GGUF_INT8:    memcpy(&i8, p, 1); kv->i = i8; break;
    case OSC_GGUF_UINT16:  memcpy(&u16, p, 2); kv->u = u16; break;
    case OSC_GGUF_INT16:   memcpy(&i16, p, 2); kv->i = i16; break;
    case OSC_GGUF_UINT32:  memcpy(&u32, p, 4); kv->u = u32; break;
    case OSC_GGUF_INT32:   memcpy(&i32, p, 4); kv->i = i32; break;
    case OSC_GGUF_FLOAT32: memcpy(&f32, p, 4); kv->f = (double) f32; break;
    case OSC_GGUF_UINT64:  memcpy(&kv->u, p, 8); break;
    case OSC_GGUF_INT64:   memcpy(&kv->i, p, 8); break;
    case OSC_GGUF_FLOAT64: memcpy(&kv->f, p, 8); break;
    default: break;
    }
}

static enum oscar_status parse_kv(struct cursor * c, struct gguf_kv * kv, int64_t idx) {
    size_t off, len;
    enum oscar_status st = cur_str(c, &off, &len, "key");
    if (st != OSCAR_OK) return st;
    if (len == 0 || memchr(c->p + off, 0, len)) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: key %lld at byte %zu is empty or contains NUL", c->path,
                         (long long) idx, off);
    }
    kv->key = malloc(len + 1);
    if (!kv->key) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", c->path);
    memcpy(kv->key, c->p + off, len);
    kv->key[len] = 0;
    uint32_t t;
    st = cur_u32(c, &t, kv->key);
    if (st != OSCAR_OK) return st;
    kv->type = (enum osc_gguf_type) t;
    size_t start = c->pos;
    st = skip_value(c, t, 0, kv->key);
    if (st != OSCAR_OK) return st;
    if (osc_gguf_value_size(t)) {
        read_scalar(kv, c->p + start);
    } else if (t == OSC_GGUF_STRING) {
        kv->str_off = start + 8;
        kv->str_len = c->pos - kv->str_off;
    } else { // array: header already validated by skip_value
        uint32_t et;
        memcpy(&et, c->p + start, 4);
        memcpy(&kv->arr_n, c->p + start + 4, 8);
        kv->arr_type = (enum osc_gguf_type) et;
        kv->arr_off = start + 12;
        if (et == OSC_GGUF_STRING && kv->arr_n > 0) {
            kv->arr_str = malloc((size_t) kv->arr_n * sizeof *kv->arr_str);
            if (!kv->arr_str) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", c->path);
            size_t p = kv->arr_off;
            for (uint64_t i = 0; i < kv->arr_n; i++) {
                uint64_t l;
                kv->arr_str[i] = p;
                memcpy(&l, c->p + p, 8);
                p += 8 + (size_t) l;
            }
        }
    }
    return OSCAR_OK;
}

static uint64_t align_up(uint64_t x, uint64_t a) {
    return (x + a - 1) / a * a;
}

static enum oscar_status parse_tensor_info(struct cursor * c, struct osc_gguf_tensor * t, int64_t idx) {
    size_t off, len;
    enum oscar_status st = cur_str(c, &off, &len, "tensor name");
    if (st != OSCAR_OK) return st;
    if (len == 0 || len > GGUF_NAME_MAX || memchr(c->p + off, 0, len)) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: tensor %lld: name of length %zu is empty, longer than %d "
                         "or contains NUL", c->path, (long long) idx, len, GGUF_NAME_MAX);
    }
    memcpy(t->name, c->p + off, len);
    t->name[len] = 0;
    st = cur_u32(c, &t->n_dims, t->name);
    if (st != OSCAR_OK) return st;
    if (t->n_dims < 1 || t->n_dims > 4) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s': n_dims %u not in 1..4", c->path, t->name, t->n_dims);
    }
    int64_t n = 1;
    for (int d = 0; d < 4; d++) {
        t->ne[d] = 1;
        if ((uint32_t) d >= t->n_dims) continue;
        uint64_t v;
        st = cur_u64(c, &v, t->name);
        if (st != OSCAR_OK) return st;
        if (v == 0 || v > (uint64_t) INT64_MAX || (int64_t) v > INT64_MAX / n) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s': dimension %d = %llu is zero or overflows",
                             c->path, t->name, d, (unsigned long long) v);
        }
        t->ne[d] = (int64_t) v;
        n *= (int64_t) v;
    }
    t->n_elements = n;
    uint32_t type;
    st = cur_u32(c, &type, t->name);
    if (st == OSCAR_OK) st = cur_u64(c, &t->offset, t->name);
    if (st != OSCAR_OK) return st;
    size_t bb;
    int64_t be;
    if (!osc_ggml_type_info((enum osc_ggml_type) type, &bb, &be)) {
        const char * tn = osc_ggml_type_id_name(type);
        if (!tn) {
            return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: tensor '%s': unknown ggml type %u (newer than this build, or "
                             "a corrupt file)", c->path, t->name, type);
        }
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: tensor '%s': ggml type %s (%u) is not supported; oscar reads %s "
                         "(re-quantize the model to one of them)", c->path, t->name, tn, type,
                         osc_ggml_supported_types());
    }
    t->type = (enum osc_ggml_type) type;
    if (t->ne[0] % be != 0) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s': row length %lld is not a multiple of the %s block "
                         "size %lld", c->path, t->name, (long long) t->ne[0], osc_ggml_type_name(t->type),
                         (long long) be);
    }
    uint64_t nblocks = (uint64_t) (n / be);
    if (nblocks > SIZE_MAX / bb) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s': byte size overflows", c->path, t->name);
    }
    t->nbytes = (size_t) nblocks * bb;
    return OSCAR_OK;
}

static _Thread_local const struct osc_gguf * sort_ctx;

static int cmp_kv_idx(const void * a, const void * b) {
    return strcmp(sort_ctx->kv[*(const int64_t *) a].key, sort_ctx->kv[*(const int64_t *) b].key);
}

static int cmp_tensor_idx(const void * a, const void * b) {
    return strcmp(sort_ctx->tensors[*(const int64_t *) a].name, sort_ctx->tensors[*(const int64_t *) b].name);
}

static int cmp_tensor_off(const void * a, const void * b) {
    uint64_t x = sort_ctx->tensors[*(const int64_t *) a].offset, y = sort_ctx->tensors[*(const int64_t *) b].offset;
    return x < y ? -1 : x > y;
}

// Builds the sorted name indices and rejects duplicates and overlapping data.
static enum oscar_status build_indices(struct osc_gguf * g) {
    enum oscar_status st = OSCAR_OK;
    int64_t * by_off = NULL;
    g->kv_sorted = malloc(((size_t) g->n_kv + 1) * sizeof(int64_t));
    g->tensor_sorted = malloc(((size_t) g->n_tensors + 1) * sizeof(int64_t));
    by_off = malloc(((size_t) g->n_tensors + 1) * sizeof(int64_t));
    if (!g->kv_sorted || !g->tensor_sorted || !by_off) {
        st = osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", g->map.path);
        goto out;
    }
    for (int64_t i = 0; i < g->n_kv; i++) g->kv_sorted[i] = i;
    for (int64_t i = 0; i < g->n_tensors; i++) g->tensor_sorted[i] = by_off[i] = i;
    // qsort has no context argument: sort_ctx is thread-local and set only
    // for the duration of these sorts.
    sort_ctx = g;
    qsort(g->kv_sorted, (size_t) g->n_kv, sizeof(int64_t), cmp_kv_idx);
    qsort(g->tensor_sorted, (size_t) g->n_tensors, sizeof(int64_t), cmp_tensor_idx);
    qsort(by_off, (size_t) g->n_tensors, sizeof(int64_t), cmp_tensor_off);
    sort_ctx = NULL;
    for (int64_t i = 1; i < g->n_kv; i++) {
        if (strcmp(g->kv[g->kv_sorted[i - 1]].key, g->kv[g->kv_sorted[i]].key) == 0) {
            st = osc_error(OSCAR_ERR_FORMAT, "%s: duplicate key '%s'", g->map.path, g->kv[g->kv_sorted[i]].key);
            goto out;
        }
    }
    for (int64_t i = 1; i < g->n_tensors; i++) {
        const struct osc_gguf_tensor * a = &g->tensors[g->tensor_sorted[i - 1]];
        const struct osc_gguf_tensor * b = &g->tensors[g->tensor_sorted[i]];
        if (strcmp(a->name, b->name) == 0) {
            st = osc_error(OSCAR_ERR_FORMAT, "%s: duplicate tensor '%s'", g->map.path, a->name);
            goto out;
        }
        a = &g->tensors[by_off[i - 1]];
        b = &g->tensors[by_off[i]];
        if (a->offset + a->nbytes > b->offset) {
            st = osc_error(OSCAR_ERR_FORMAT, "%s: data of tensors '%s' and '%s' overlap", g->map.path, a->name,
                           b->name);
            goto out;
        }
    }
out:
    free(by_off);
    return st;
}

static enum oscar_status read_alignment(struct osc_gguf * g) {
    int64_t i = -1;
    for (int64_t j = 0; j < g->n_kv; j++) {
        if (strcmp(g->kv[j].key, "general.alignment") == 0) i = j;
    }
    g->alignment = GGUF_DEFAULT_ALIGN;
    if (i < 0) return OSCAR_OK;
    if (g->kv[i].type != OSC_GGUF_UINT32) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: general.alignment has type %s, expected uint32", g->map.path,
                         type_name(g->kv[i].type));
    }
    uint64_t a = g->kv[i].u;
    if (a == 0 || (a & (a - 1)) != 0) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: general.alignment %llu is not a power of two", g->map.path,
                         (unsigned long long) a);
    }
    g->alignment = a;
    return OSCAR_OK;
}

static enum oscar_status place_tensors(struct osc_gguf * g, size_t header_end) {
    g->data_offset = align_up(header_end, g->alignment);
    if (g->n_tensors == 0) return OSCAR_OK;
    if (g->data_offset > g->map.size) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: data section at byte %llu starts past the end of the file "
                         "(%zu bytes)", g->map.path, (unsigned long long) g->data_offset, g->map.size);
    }
    uint64_t avail = g->map.size - g->data_offset;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        struct osc_gguf_tensor * t = &g->tensors[i];
        if (t->offset % g->alignment != 0) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s': offset %llu is not a multiple of the alignment "
                             "%llu", g->map.path, t->name, (unsigned long long) t->offset,
                             (unsigned long long) g->alignment);
        }
        if (t->offset > avail || t->nbytes > avail - t->offset) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s': data [%llu, +%zu) runs past the end of the file "
                             "(%llu data bytes)", g->map.path, t->name, (unsigned long long) t->offset, t->nbytes,
                             (unsigned long long) avail);
        }
        t->data = g->map.data + g->data_offset + t->offset;
    }
    return OSCAR_OK;
}

static enum oscar_status parse_header(struct osc_gguf * g, struct cursor * c) {
    uint8_t magic[4];
    uint64_t n_tensors, n_kv;
    enum oscar_status st = cur_read(c, magic, 4, "magic");
    if (st != OSCAR_OK) return st;
    if (memcmp(magic, "GGUF", 4) != 0) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: not a GGUF file (bad magic)", c->path);
    }
    st = cur_u32(c, &g->version, "version");
    if (st != OSCAR_OK) return st;
    if (g->version == 1) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: GGUF version 1 is not supported (re-convert the model)",
                         c->path);
    }
    if (g->version != 2 && g->version != 3) {
        bool swapped = (g->version & 0xffff) == 0;
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: GGUF version %u is not supported%s", c->path, g->version,
                         swapped ? " (big-endian file?)" : "");
    }
    st = cur_u64(c, &n_tensors, "tensor count");
    if (st == OSCAR_OK) st = cur_u64(c, &n_kv, "key/value count");
    if (st != OSCAR_OK) return st;
    if (n_kv > cur_left(c) / 13) { // key len 8 + >=1 byte + type 4 + >= 1 byte value... (lower bound 13)
        return osc_error(OSCAR_ERR_FORMAT, "%s: key/value count %llu does not fit in the file", c->path,
                         (unsigned long long) n_kv);
    }
    if (n_tensors > cur_left(c) / 32) { // name 8+1, n_dims 4, ne 8, type 4, offset 8 = 33 > 32
        return osc_error(OSCAR_ERR_FORMAT, "%s: tensor count %llu does not fit in the file", c->path,
                         (unsigned long long) n_tensors);
    }
    g->n_kv = (int64_t) n_kv;
    g->n_tensors = (int64_t) n_tensors;
    g->kv = calloc((size_t) n_kv + 1, sizeof *g->kv);
    g->tensors = calloc((size_t) n_tensors + 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", c->path);
    return OSCAR_OK;
}

enum oscar_status osc_gguf_open(const char * path, struct osc_gguf ** out) {
    *out = NULL;
    enum oscar_status st = OSCAR_ERR_NOMEM;
    struct osc_gguf * g = calloc(1, sizeof *g);
    if (!g) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
    st = osc_map_file(path, &g->map);
    if (st != OSCAR_OK) goto out;
    struct cursor c = {g->map.data, g->map.size, 0, g->map.path};
    st = parse_header(g, &c);
    if (st != OSCAR_OK) goto out;
    for (int64_t i = 0; i < g->n_kv; i++) {
        st = parse_kv(&c, &g->kv[i], i);
        if (st != OSCAR_OK) goto out;
    }
    st = read_alignment(g);
    if (st != OSCAR_OK) goto out;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        st = parse_tensor_info(&c, &g->tensors[i], i);
        if (st != OSCAR_OK) goto out;
    }
    st = place_tensors(g, c.pos);
    if (st != OSCAR_OK) goto out;
    st = build_indices(g);
    if (st != OSCAR_OK) goto out;
    *out = g;
    g = NULL;
out:
    osc_gguf_close(g);
    return st;
}

void osc_gguf_close(struct osc_gguf * g) {
    if (!g) return;
    if (g->kv) {
        for (int64_t i = 0; i < g->n_kv; i++) {
            free(g->kv[i].key);
            free(g->kv[i].arr_str);
        }
    }
    free(g->kv);
    free(g->tensors);
    free(g->kv_sorted);
    free(g->tensor_sorted);
    osc_unmap_file(&g->map);
    free(g);
}

const char * osc_gguf_path(const struct osc_gguf * g) {
    return g->map.path;
}

uint32_t osc_gguf_version(const struct osc_gguf * g) {
    return g->version;
}

int64_t osc_gguf_n_kv(const struct osc_gguf * g) {
    return g->n_kv;
}

int64_t osc_gguf_find_key(const struct osc_gguf * g, const char * key) {
    int64_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->kv[g->kv_sorted[mid]].key, key);
        if (c == 0) return g->kv_sorted[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

const char * osc_gguf_key(const struct osc_gguf * g, int64_t i) {
    OSCAR_ASSERT(i >= 0 && i < g->n_kv);
    return g->kv[i].key;
}

enum osc_gguf_type osc_gguf_kv_type(const struct osc_gguf * g, int64_t i) {
    OSCAR_ASSERT(i >= 0 && i < g->n_kv);
    return g->kv[i].type;
}

static enum oscar_status lookup(const struct osc_gguf * g, const char * key, const struct gguf_kv ** kv) {
    int64_t i = osc_gguf_find_key(g, key);
    if (i < 0) return osc_error(OSCAR_ERR_NOT_FOUND, "%s: key '%s' not found", g->map.path, key);
    *kv = &g->kv[i];
    return OSCAR_OK;
}

static bool is_unsigned(enum osc_gguf_type t) {
    return t == OSC_GGUF_UINT8 || t == OSC_GGUF_UINT16 || t == OSC_GGUF_UINT32 || t == OSC_GGUF_UINT64;
}

static bool is_signed(enum osc_gguf_type t) {
    return t == OSC_GGUF_INT8 || t == OSC_GGUF_INT16 || t == OSC_GGUF_INT32 || t == OSC_GGUF_INT64;
}

// Integer value of a key as (negative?, magnitude-ish) for range checks.
static enum oscar_status get_int(const struct osc_gguf * g, const char * key, bool * neg, uint64_t * u,
                                 int64_t * s) {
    const struct gguf_kv * kv = NULL;
    enum oscar_status st = lookup(g, key, &kv);
    if (st != OSCAR_OK) return st;
    if (is_unsigned(kv->type)) {
        *neg = false;
        *u = kv->u;
        *s = kv->u > (uint64_t) INT64_MAX ? INT64_MAX : (int64_t) kv->u;
        return OSCAR_OK;
    }
    if (is_signed(kv->type)) {
        *neg = kv->i < 0;
        *u = kv->i < 0 ? 0 : (uint64_t) kv->i;
        *s = kv->i;
        return OSCAR_OK;
    }
    return osc_error(OSCAR_ERR_FORMAT, "%s: key '%s' has type %s, expected an integer", g->map.path, key,
                     type_name(kv->type));
}

enum oscar_status osc_gguf_get_u32(const struct osc_gguf * g, const char * key, uint32_t * out) {
    bool neg;
    uint64_t u;
    int64_t s;
    enum oscar_status st = get_int(g, key, &neg, &u, &s);
    if (st != OSCAR_OK) return st;
    if (neg || u > UINT32_MAX) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: key '%s' value %lld does not fit in uint32", g->map.path, key,
                         (long long) s);
    }
    *out = (uint32_t) u;
    return OSCAR_OK;
}

enum oscar_status osc_gguf_get_u64(const struct osc_gguf * g, const char * key, uint64_t * out) {
    bool neg;
    uint64_t u;
    int64_t s;
    enum oscar_status st = get_int(g, key, &neg, &u, &s);
    if (st != OSCAR_OK) return st;
    if (neg) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: key '%s' value %lld is negative", g->map.path, key, (long long) s);
    }
    *out = u;
    return OSCAR_OK;
}

enum oscar_status osc_gguf_get_i64(const struct osc_gguf * g, const char * key, int64_t * out) {
    bool neg;
    uint64_t u;
    int64_t s;
    enum oscar_status st = get_int(g, key, &neg, &u, &s);
    if (st != OSCAR_OK) return st;
    if (!neg && u > (uint64_t) INT64_MAX) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: key '%s' value %llu does not fit in int64", g->map.path, key,
                         (unsigned long long) u);
    }
    *out = s;
    return OSCAR_OK;
}

enum oscar_status osc_gguf_get_f64(const struct osc_gguf * g, const char * key, double * out) {
    const struct gguf_kv * kv = NULL;
    enum oscar_status st = lookup(g, key, &kv);
    if (st != OSCAR_OK) return st;
    if (kv->type != OSC_GGUF_FLOAT32 && kv->type != OSC_GGUF_FLOAT64) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: key '%s' has type %s, expected a float", g->map.path, key,
                         type_name(kv->type));
    }
    *out = kv->f;
    return OSCAR_OK;
}

enum oscar_status osc_gguf_get_f32(const struct osc_gguf * g, const char * key, float * out) {
    double d;
    enum oscar_status st = osc_gguf_get_f64(g, key, &d);
    if (st == OSCAR_OK) *out = (float) d;
    return st;
}

enum oscar_status osc_gguf_get_bool(const struct osc_gguf * g, const char * key, bool * out) {
    const struct gguf_kv * kv = NULL;
    enum oscar_status st = lookup(g, key, &kv);
    if (st != OSCAR_OK) return st;
    if (kv->type != OSC_GGUF_BOOL) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: key '%s' has type %s, expected bool", g->map.path, key,
                         type_name(kv->type));
    }
    *out = kv->u != 0;
    return OSCAR_OK;
}

enum oscar_status osc_gguf_get_str(const struct osc_gguf * g, const char * key, const char ** s, size_t * len) {
    const struct gguf_kv * kv = NULL;
    enum oscar_status st = lookup(g, key, &kv);
    if (st != OSCAR_OK) return st;
    if (kv->type != OSC_GGUF_STRING) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: key '%s' has type %s, expected string", g->map.path, key,
                         type_name(kv->type));
    }
    *s = (const char *) g->map.data + kv->str_off;
    *len = kv->str_len;
    return OSCAR_OK;
}

static enum oscar_status lookup_arr(const struct osc_gguf * g, const char * key, const struct gguf_kv ** kv) {
    enum oscar_status st = lookup(g, key, kv);
    if (st != OSCAR_OK) return st;
    if ((*kv)->type != OSC_GGUF_ARRAY) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: key '%s' has type %s, expected array", g->map.path, key,
                         type_name((*kv)->type));
    }
    return OSCAR_OK;
}

enum oscar_status osc_gguf_get_arr(const struct osc_gguf * g, const char * key, enum osc_gguf_type * elem_type,
                                   uint64_t * n) {
    const struct gguf_kv * kv = NULL;
    enum oscar_status st = lookup_arr(g, key, &kv);
    if (st != OSCAR_OK) return st;
    *elem_type = kv->arr_type;
    *n = kv->arr_n;
    return OSCAR_OK;
}

enum oscar_status osc_gguf_get_arr_str(const struct osc_gguf * g, const char * key, uint64_t i, const char ** s,
                                       size_t * len) {
    const struct gguf_kv * kv = NULL;
    enum oscar_status st = lookup_arr(g, key, &kv);
    if (st != OSCAR_OK) return st;
    if (kv->arr_type != OSC_GGUF_STRING) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: key '%s' is an array of %s, expected strings", g->map.path, key,
                         type_name(kv->arr_type));
    }
    if (i >= kv->arr_n) {
        return osc_error(OSCAR_ERR_INVALID, "%s: key '%s': index %llu out of range (%llu elements)", g->map.path,
                         key, (unsigned long long) i, (unsigned long long) kv->arr_n);
    }
    uint64_t l;
    memcpy(&l, g->map.data + kv->arr_str[i], 8);
    *s = (const char *) g->map.data + kv->arr_str[i] + 8;
    *len = (size_t) l;
    return OSCAR_OK;
}

enum oscar_status osc_gguf_get_arr_data(const struct osc_gguf * g, const char * key, const void ** data) {
    const struct gguf_kv * kv = NULL;
    enum oscar_status st = lookup_arr(g, key, &kv);
    if (st != OSCAR_OK) return st;
    if (!osc_gguf_value_size(kv->arr_type)) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: key '%s' is an array of %s, expected numbers", g->map.path, key,
                         type_name(kv->arr_type));
    }
    *data = g->map.data + kv->arr_off;
    return OSCAR_OK;
}

uint64_t osc_gguf_data_offset(const struct osc_gguf * g) {
    return g->data_offset;
}

uint64_t osc_gguf_alignment(const struct osc_gguf * g) {
    return g->alignment;
}

int64_t osc_gguf_n_tensors(const struct osc_gguf * g) {
    return g->n_tensors;
}

const struct osc_gguf_tensor * osc_gguf_tensor(const struct osc_gguf * g, int64_t i) {
    OSCAR_ASSERT(i >= 0 && i < g->n_tensors);
    return &g->tensors[i];
}

const struct osc_gguf_tensor * osc_gguf_find_tensor(const struct osc_gguf * g, const char * name) {
    int64_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->tensors[g->tensor_sorted[mid]].name, name);
        if (c == 0) return &g->tensors[g->tensor_sorted[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}
