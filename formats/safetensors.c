// safetensors.c - safetensors reader (single/sharded) and atomic writer (see safetensors.h).
//
// Refuses: headers over 100 MB or not starting with '{', duplicate JSON keys,
// dtypes other than F32/F16/BF16/I32/U8, more than 8 dimensions, byte ranges
// that disagree with the shape, overlap, holes or trailing bytes, shard file
// names with '/', tensors listed in the index but missing from their shard.
#include "formats/safetensors.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/gguf.h"
#include "util/fs.h"

#define ST_MAX_HEADER 100000000ull

struct st_file {
    struct osc_mapped_file map;
    const uint8_t *        buf;      // byte buffer start
    uint64_t               buf_size;
};

struct osc_safetensors {
    struct st_file *       files;
    int                    n_files;
    struct osc_st_tensor * tensors;
    int64_t                n_tensors;
    int64_t                cap;
    int64_t *              sorted;   // indices by name
    char **                meta;     // key, value pairs (owned)
    int64_t                n_meta;
};

static const struct {
    const char *      name;
    enum osc_st_dtype dtype;
    size_t            size;
} DTYPES[] = {
    {"F32", OSC_ST_F32, 4}, {"F16", OSC_ST_F16, 2}, {"BF16", OSC_ST_BF16, 2},
    {"I32", OSC_ST_I32, 4}, {"U8", OSC_ST_U8, 1},
};

static const char * KNOWN_UNSUPPORTED[] = {"BOOL", "F4", "F6_E2M3", "F6_E3M2", "I8", "F8_E5M2", "F8_E4M3",
                                           "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "U32",
                                           "C64", "F64", "I64", "U64"};

const char * osc_st_dtype_name(enum osc_st_dtype dtype) {
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++) {
        if (DTYPES[i].dtype == dtype) return DTYPES[i].name;
    }
    return "unknown";
}

size_t osc_st_dtype_size(enum osc_st_dtype dtype) {
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++) {
        if (DTYPES[i].dtype == dtype) return DTYPES[i].size;
    }
    return 0;
}

static enum oscar_status parse_dtype(const char * path, const char * tname, json_t * j, enum osc_st_dtype * out) {
    const char * s = json_string_value(j);
    if (!s) return osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s': dtype is not a string", path, tname);
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++) {
        if (strcmp(s, DTYPES[i].name) == 0) {
            *out = DTYPES[i].dtype;
            return OSCAR_OK;
        }
    }
    for (size_t i = 0; i < sizeof KNOWN_UNSUPPORTED / sizeof KNOWN_UNSUPPORTED[0]; i++) {
        if (strcmp(s, KNOWN_UNSUPPORTED[i]) == 0) {
            return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: tensor '%s': dtype %s is not supported (F32, F16, BF16, "
                             "I32, U8 are)", path, tname, s);
        }
    }
    return osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%.40s'", path, tname, s);
}

static enum oscar_status grow(struct osc_safetensors * st) {
    if (st->n_tensors < st->cap) return OSCAR_OK;
    int64_t cap = st->cap ? st->cap * 2 : 64;
    struct osc_st_tensor * t = realloc(st->tensors, (size_t) cap * sizeof *t);
    if (!t) return osc_error(OSCAR_ERR_NOMEM, "safetensors: out of memory");
    st->tensors = t;
    st->cap = cap;
    return OSCAR_OK;
}

static enum oscar_status parse_entry(struct osc_safetensors * st, struct st_file * f, const char * key,
                                     json_t * v) {
    const char * path = f->map.path;
    if (!json_is_object(v)) return osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s' is not an object", path, key);
    enum oscar_status s = grow(st);
    if (s != OSCAR_OK) return s;
    struct osc_st_tensor * t = &st->tensors[st->n_tensors];
    memset(t, 0, sizeof *t);
    s = parse_dtype(path, key, json_object_get(v, "dtype"), &t->dtype);
    if (s != OSCAR_OK) return s;
    json_t * shape = json_object_get(v, "shape");
    json_t * offs = json_object_get(v, "data_offsets");
    if (!json_is_array(shape) || json_array_size(shape) > OSC_ST_MAX_DIMS) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s': shape missing or more than %d dimensions", path, key,
                         OSC_ST_MAX_DIMS);
    }
    t->n_dims = (int32_t) json_array_size(shape);
    int64_t n = 1;
    for (int32_t d = 0; d < t->n_dims; d++) {
        json_t * x = json_array_get(shape, (size_t) d);
        json_int_t e = json_is_integer(x) ? json_integer_value(x) : -1;
        if (e < 0 || (e > 0 && n > INT64_MAX / e)) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s': dimension %d is not a non-negative integer or "
                             "the shape overflows", path, key, d);
        }
        t->shape[d] = e;
        n *= e;
    }
    t->n_elements = n;
    json_t * b = json_array_get(offs, 0);
    json_t * e = json_array_get(offs, 1);
    if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_is_integer(b) || !json_is_integer(e) ||
        json_integer_value(b) < 0 || json_integer_value(e) < json_integer_value(b)) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s': data_offsets is not [begin, end] with 0 <= begin <= "
                         "end", path, key);
    }
    uint64_t ob = (uint64_t) json_integer_value(b), oe = (uint64_t) json_integer_value(e);
    size_t es = osc_st_dtype_size(t->dtype);
    if ((uint64_t) n > UINT64_MAX / es || (uint64_t) n * es != oe - ob) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s': %lld %s elements need %llu bytes but data_offsets "
                         "span %llu", path, key, (long long) n, osc_st_dtype_name(t->dtype),
                         (unsigned long long) ((uint64_t) n * es), (unsigned long long) (oe - ob));
    }
    if (oe > f->buf_size) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s': data_offsets end %llu past the end of the buffer "
                         "(%llu bytes)", path, key, (unsigned long long) oe, (unsigned long long) f->buf_size);
    }
    t->nbytes = (size_t) (oe - ob);
    t->data = f->buf + ob;
    t->file = path;
    t->name = strdup(key);
    if (!t->name) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
    st->n_tensors++;
    return OSCAR_OK;
}

static enum oscar_status parse_metadata(struct osc_safetensors * st, const char * path, json_t * m) {
    if (!json_is_object(m)) return osc_error(OSCAR_ERR_FORMAT, "%s: __metadata__ is not an object", path);
    if (st->meta) return OSCAR_OK; // keep the first shard's
    size_t n = json_object_size(m);
    st->meta = calloc(2 * n + 1, sizeof *st->meta);
    if (!st->meta) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
    const char * k;
    json_t * v;
    json_object_foreach(m, k, v) {
        if (!json_is_string(v)) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: __metadata__ value of '%s' is not a string", path, k);
        }
        st->meta[2 * st->n_meta] = strdup(k);
        st->meta[2 * st->n_meta + 1] = strdup(json_string_value(v));
        st->n_meta++;
        if (!st->meta[2 * st->n_meta - 2] || !st->meta[2 * st->n_meta - 1]) {
            return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
        }
    }
    return OSCAR_OK;
}

static _Thread_local const struct osc_safetensors * sort_st;

static int cmp_off(const void * a, const void * b) {
    const struct osc_st_tensor * x = &sort_st->tensors[*(const int64_t *) a];
    const struct osc_st_tensor * y = &sort_st->tensors[*(const int64_t *) b];
    if (x->data != y->data) return (const uint8_t *) x->data < (const uint8_t *) y->data ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int cmp_name(const void * a, const void * b) {
    return strcmp(sort_st->tensors[*(const int64_t *) a].name, sort_st->tensors[*(const int64_t *) b].name);
}

// Tensors of file f (indices [first, n_tensors)) must tile the buffer exactly.
static enum oscar_status check_coverage(struct osc_safetensors * st, struct st_file * f, int64_t first) {
    int64_t n = st->n_tensors - first;
    int64_t * idx = malloc((size_t) (n + 1) * sizeof *idx);
    if (!idx) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", f->map.path);
    for (int64_t i = 0; i < n; i++) idx[i] = first + i;
    sort_st = st;
    qsort(idx, (size_t) n, sizeof *idx, cmp_off);
    sort_st = NULL;
    uint64_t pos = 0;
    enum oscar_status s = OSCAR_OK;
    for (int64_t i = 0; i < n && s == OSCAR_OK; i++) {
        const struct osc_st_tensor * t = &st->tensors[idx[i]];
        uint64_t b = (uint64_t) ((const uint8_t *) t->data - f->buf);
        if (b != pos) {
            s = osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s' starts at buffer byte %llu, expected %llu (%s)",
                          f->map.path, t->name, (unsigned long long) b, (unsigned long long) pos,
                          b < pos ? "overlap" : "hole");
        }
        pos = b + t->nbytes;
    }
    if (s == OSCAR_OK && pos != f->buf_size) {
        s = osc_error(OSCAR_ERR_FORMAT, "%s: %llu trailing bytes after the last tensor", f->map.path,
                      (unsigned long long) (f->buf_size - pos));
    }
    free(idx);
    return s;
}

static enum oscar_status open_file(struct osc_safetensors * st, struct st_file * f, const char * path) {
    enum oscar_status s = osc_map_file(path, &f->map);
    if (s != OSCAR_OK) return s;
    json_t * root = NULL;
    uint64_t hn;
    if (f->map.size < 8) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: %zu bytes is too short for a safetensors header", path,
                         f->map.size);
    }
    memcpy(&hn, f->map.data, 8);
    if (hn > ST_MAX_HEADER || hn > f->map.size - 8) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: header length %llu exceeds the file (%zu bytes) or the 100 MB "
                         "limit", path, (unsigned long long) hn, f->map.size);
    }
    if (hn < 2 || f->map.data[8] != '{') {
        return osc_error(OSCAR_ERR_FORMAT, "%s: header does not start with '{'", path);
    }
    f->buf = f->map.data + 8 + hn;
    f->buf_size = f->map.size - 8 - hn;
    json_error_t err;
    root = json_loadb((const char *) f->map.data + 8, (size_t) hn, JSON_REJECT_DUPLICATES, &err);
    if (!root || !json_is_object(root)) {
        s = osc_error(OSCAR_ERR_FORMAT, "%s: bad JSON header: %s (line %d)", path, root ? "not an object" : err.text,
                      err.line);
        goto out;
    }
    int64_t first = st->n_tensors;
    const char * key;
    json_t * v;
    json_object_foreach(root, key, v) {
        s = strcmp(key, "__metadata__") == 0 ? parse_metadata(st, path, v) : parse_entry(st, f, key, v);
        if (s != OSCAR_OK) goto out;
    }
    s = check_coverage(st, f, first);
out:
    json_decref(root);
    return s;
}

static enum oscar_status build_index(struct osc_safetensors * st) {
    st->sorted = malloc((size_t) (st->n_tensors + 1) * sizeof *st->sorted);
    if (!st->sorted) return osc_error(OSCAR_ERR_NOMEM, "safetensors: out of memory");
    for (int64_t i = 0; i < st->n_tensors; i++) st->sorted[i] = i;
    sort_st = st;
    qsort(st->sorted, (size_t) st->n_tensors, sizeof *st->sorted, cmp_name);
    sort_st = NULL;
    for (int64_t i = 1; i < st->n_tensors; i++) {
        const struct osc_st_tensor * a = &st->tensors[st->sorted[i - 1]];
        const struct osc_st_tensor * b = &st->tensors[st->sorted[i]];
        if (strcmp(a->name, b->name) == 0) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s' appears in %s too", b->file, b->name, a->file);
        }
    }
    return OSCAR_OK;
}

static bool has_suffix(const char * s, const char * suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

// Sharded: parses the index, opens each distinct shard once, checks the map.
static enum oscar_status open_index(struct osc_safetensors * st, const char * path) {
    enum oscar_status s;
    json_error_t err;
    json_t * root = NULL;
    char * dir = strdup(path);
    const char ** shards = NULL;
    if (!dir) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
    char * slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else strcpy(dir, ".");
    char * text = NULL;
    size_t len;
    s = osc_require_regular(path);
    if (s == OSCAR_OK) s = osc_read_file(path, 64u << 20, &text, &len);
    if (s != OSCAR_OK) goto out;
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    json_t * wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        s = osc_error(OSCAR_ERR_FORMAT, "%s: %s", path, root ? "no \"weight_map\" object" : err.text);
        goto out;
    }
    size_t nw = json_object_size(wm);
    shards = calloc(nw + 1, sizeof *shards);
    st->files = calloc(nw + 1, sizeof *st->files);
    if (!shards || !st->files) {
        s = osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    const char * key;
    json_t * v;
    json_object_foreach(wm, key, v) {
        const char * fn = json_string_value(v);
        if (!fn || !*fn || strchr(fn, '/') || strcmp(fn, "..") == 0) {
            s = osc_error(OSCAR_ERR_FORMAT, "%s: weight_map entry '%s' is not a plain file name", path, key);
            goto out;
        }
        int k = 0;
        while (k < st->n_files && strcmp(shards[k], fn) != 0) k++;
        if (k < st->n_files) continue;
        shards[st->n_files] = fn;
        char * sp = osc_path_join(dir, fn);
        if (!sp) {
            s = osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
            goto out;
        }
        s = open_file(st, &st->files[st->n_files++], sp);
        free(sp);
        if (s != OSCAR_OK) goto out;
    }
    s = build_index(st);
    if (s != OSCAR_OK) goto out;
    json_object_foreach(wm, key, v) {
        const struct osc_st_tensor * t = osc_safetensors_find(st, key);
        if (!t || !has_suffix(t->file, json_string_value(v))) {
            s = osc_error(OSCAR_ERR_FORMAT, "%s: tensor '%s' is not in shard %s", path, key, json_string_value(v));
            goto out;
        }
    }
    if ((size_t) st->n_tensors != nw) {
        s = osc_error(OSCAR_ERR_FORMAT, "%s: the shards hold %lld tensors, the weight_map lists %zu", path,
                      (long long) st->n_tensors, nw);
    }
out:
    json_decref(root);
    free(text);
    free(shards);
    free(dir);
    return s;
}

enum oscar_status osc_safetensors_open(const char * path, struct osc_safetensors ** out) {
    *out = NULL;
    enum oscar_status s;
    char * p = NULL;
    struct osc_safetensors * st = calloc(1, sizeof *st);
    if (!st) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
    if (has_suffix(path, ".json")) {
        s = open_index(st, path);
    } else if (has_suffix(path, ".safetensors")) {
        st->files = calloc(1, sizeof *st->files);
        s = st->files ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
        if (s == OSCAR_OK) {
            st->n_files = 1;
            s = open_file(st, &st->files[0], path);
        }
        if (s == OSCAR_OK) s = build_index(st);
    } else { // a directory
        p = osc_path_join(path, "model.safetensors.index.json");
        struct stat sb;
        if (p && stat(p, &sb) == 0) { // not opened here: a FIFO would block
            s = open_index(st, p);
        } else {
            free(p);
            p = osc_path_join(path, "model.safetensors");
            st->files = calloc(1, sizeof *st->files);
            s = (p && st->files) ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
            if (s == OSCAR_OK) {
                st->n_files = 1;
                s = open_file(st, &st->files[0], p);
            }
            if (s == OSCAR_OK) s = build_index(st);
        }
    }
    if (s == OSCAR_OK) {
        *out = st;
        st = NULL;
    }
    free(p);
    osc_safetensors_close(st);
    return s;
}

void osc_safetensors_close(struct osc_safetensors * st) {
    if (!st) return;
    for (int64_t i = 0; i < st->n_tensors; i++) free((char *) (uintptr_t) st->tensors[i].name);
    free(st->tensors);
    for (int i = 0; i < st->n_files; i++) osc_unmap_file(&st->files[i].map);
    free(st->files);
    free(st->sorted);
    if (st->meta) {
        for (int64_t i = 0; i < 2 * st->n_meta; i++) free(st->meta[i]);
    }
    free(st->meta);
    free(st);
}

int64_t osc_safetensors_n_tensors(const struct osc_safetensors * st) {
    return st->n_tensors;
}

const struct osc_st_tensor * osc_safetensors_tensor(const struct osc_safetensors * st, int64_t i) {
    OSCAR_ASSERT(i >= 0 && i < st->n_tensors);
    return &st->tensors[i];
}

const struct osc_st_tensor * osc_safetensors_find(const struct osc_safetensors * st, const char * name) {
    int64_t lo = 0, hi = st->n_tensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->tensors[st->sorted[mid]].name, name);
        if (c == 0) return &st->tensors[st->sorted[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

int64_t osc_safetensors_n_metadata(const struct osc_safetensors * st) {
    return st->n_meta;
}

void osc_safetensors_metadata_at(const struct osc_safetensors * st, int64_t i, const char ** key,
                                 const char ** value) {
    OSCAR_ASSERT(i >= 0 && i < st->n_meta);
    *key = st->meta[2 * i];
    *value = st->meta[2 * i + 1];
}

const char * osc_safetensors_metadata(const struct osc_safetensors * st, const char * key) {
    for (int64_t i = 0; i < st->n_meta; i++) {
        if (strcmp(st->meta[2 * i], key) == 0) return st->meta[2 * i + 1];
    }
    return NULL;
}

enum oscar_status osc_st_to_f32(const struct osc_st_tensor * t, float * dst) {
    switch (t->dtype) {
    case OSC_ST_F32:  return osc_ggml_dequantize(OSC_GGML_F32, t->data, dst, t->n_elements);
    case OSC_ST_F16:  return osc_ggml_dequantize(OSC_GGML_F16, t->data, dst, t->n_elements);
    case OSC_ST_BF16: return osc_ggml_dequantize(OSC_GGML_BF16, t->data, dst, t->n_elements);
    default:
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: tensor '%s': cannot convert %s to fp32", t->file, t->name,
                         osc_st_dtype_name(t->dtype));
    }
}

// ---- writer ----------------------------------------------------------------------
static _Thread_local const struct osc_st_write_tensor * sort_w;

static int cmp_write(const void * a, const void * b) {
    const struct osc_st_write_tensor * x = &sort_w[*(const size_t *) a];
    const struct osc_st_write_tensor * y = &sort_w[*(const size_t *) b];
    size_t ax = osc_st_dtype_size(x->dtype), ay = osc_st_dtype_size(y->dtype);
    if (ax != ay) return ax > ay ? -1 : 1;
    return strcmp(x->name, y->name);
}

static enum oscar_status build_header(const char * path, const struct osc_st_write_tensor * t, size_t n,
                                      const size_t * order, const char * const * meta, size_t n_meta,
                                      char ** out, uint64_t * total) {
    json_t * root = json_object();
    enum oscar_status s = OSCAR_ERR_NOMEM;
    if (!root) goto out;
    if (n_meta) {
        json_t * m = json_object();
        if (!m || json_object_set_new(root, "__metadata__", m)) goto out;
        for (size_t i = 0; i < n_meta; i++) {
            if (json_object_set_new(m, meta[2 * i], json_string(meta[2 * i + 1]))) goto out;
        }
    }
    uint64_t off = 0;
    for (size_t k = 0; k < n; k++) {
        const struct osc_st_write_tensor * w = &t[order[k]];
        json_t * e = json_object();
        json_t * shape = json_array();
        json_t * offs = json_array();
        if (!e || !shape || !offs) goto out;
        uint64_t ne = 1;
        for (int32_t d = 0; d < w->n_dims; d++) {
            json_array_append_new(shape, json_integer(w->shape[d]));
            ne *= (uint64_t) w->shape[d];
        }
        uint64_t nb = ne * osc_st_dtype_size(w->dtype);
        json_array_append_new(offs, json_integer((json_int_t) off));
        json_array_append_new(offs, json_integer((json_int_t) (off + nb)));
        off += nb;
        json_object_set_new(e, "dtype", json_string(osc_st_dtype_name(w->dtype)));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", offs);
        if (json_object_set_new(root, w->name, e)) goto out;
    }
    *out = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    *total = off;
    s = *out ? OSCAR_OK : OSCAR_ERR_NOMEM;
out:
    json_decref(root);
    if (s != OSCAR_OK) osc_error(s, "%s: cannot build the safetensors header (out of memory or bad UTF-8)", path);
    return s;
}

static enum oscar_status check_write_args(const char * path, const struct osc_st_write_tensor * t, size_t n,
                                          const char * const * meta, size_t n_meta) {
    for (size_t i = 0; i < n; i++) {
        if (!t[i].name || !*t[i].name || strcmp(t[i].name, "__metadata__") == 0 ||
            (t[i].dtype != OSC_ST_F32 && t[i].dtype != OSC_ST_I32 && t[i].dtype != OSC_ST_U8) || t[i].n_dims < 0 ||
            t[i].n_dims > OSC_ST_MAX_DIMS) {
            return osc_error(OSCAR_ERR_INVALID, "%s: tensor %zu ('%s'): bad name, dtype or rank", path, i,
                             t[i].name ? t[i].name : "(null)");
        }
        for (int32_t d = 0; d < t[i].n_dims; d++) {
            if (t[i].shape[d] < 0 || t[i].shape[d] > (1ll << 40)) {
                return osc_error(OSCAR_ERR_INVALID, "%s: tensor '%s': bad dimension %lld", path, t[i].name,
                                 (long long) t[i].shape[d]);
            }
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(t[i].name, t[j].name) == 0) {
                return osc_error(OSCAR_ERR_INVALID, "%s: duplicate tensor name '%s'", path, t[i].name);
            }
        }
    }
    for (size_t i = 0; i < n_meta; i++) {
        if (!meta[2 * i] || !meta[2 * i + 1]) {
            return osc_error(OSCAR_ERR_INVALID, "%s: metadata pair %zu has a NULL key or value", path, i);
        }
    }
    return OSCAR_OK;
}

enum oscar_status osc_safetensors_write(const char * path, const struct osc_st_write_tensor * tensors,
                                        size_t n_tensors, const char * const * meta, size_t n_meta) {
    enum oscar_status s = check_write_args(path, tensors, n_tensors, meta, n_meta);
    if (s != OSCAR_OK) return s;
    size_t * order = malloc((n_tensors + 1) * sizeof *order);
    char * hdr = NULL;
    uint64_t total = 0;
    struct osc_atomic_file f = {0};
    if (!order) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n_tensors; i++) order[i] = i;
    sort_w = tensors;
    qsort(order, n_tensors, sizeof *order, cmp_write);
    sort_w = NULL;
    s = build_header(path, tensors, n_tensors, order, meta, n_meta, &hdr, &total);
    if (s != OSCAR_OK) goto out;
    size_t hl = strlen(hdr);
    uint64_t padded = (hl + 7) / 8 * 8;
    s = osc_atomic_open(&f, path);
    if (s != OSCAR_OK) goto out;
    bool ok = fwrite(&padded, 8, 1, f.fp) == 1 && fwrite(hdr, 1, hl, f.fp) == hl;
    for (uint64_t i = hl; ok && i < padded; i++) ok = fputc(' ', f.fp) != EOF;
    for (size_t k = 0; ok && k < n_tensors; k++) {
        const struct osc_st_write_tensor * w = &tensors[order[k]];
        size_t nb = osc_st_dtype_size(w->dtype);
        for (int32_t d = 0; d < w->n_dims; d++) nb *= (size_t) w->shape[d];
        ok = nb == 0 || fwrite(w->data, 1, nb, f.fp) == nb;
    }
    if (!ok) {
        osc_atomic_abort(&f);
        s = osc_error(OSCAR_ERR_IO, "%s: write failed", path);
        goto out;
    }
    s = osc_atomic_commit(&f);
out:
    free(hdr);
    free(order);
    return s;
}
