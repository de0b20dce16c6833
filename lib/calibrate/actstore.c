// actstore.c - HDF5 activation store (layout in actstore.h). Writes through
// the zstd filter 32015 registered here over libzstd; refuses to read a file
// that is not exactly what the writer produces (format attribute, shapes,
// sequence lengths). HDF5's own error printing is switched off; failures are
// reported through osc_error naming the file and dataset.
#include "calibrate/actstore.h"

#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "quant/quant.h"

#define ZSTD_FILTER_ID 32015
#define ZSTD_LEVEL 3
#define CHUNK_BYTES (1u << 20)
#define FORMAT_NAME "oscar-activations"

// ---- zstd filter -------------------------------------------------------------------------
static size_t zstd_filter(unsigned int flags, size_t cd_nelmts, const unsigned int cd_values[], size_t nbytes,
                          size_t * buf_size, void ** buf) {
    void * out = NULL;
    size_t n;
    if (flags & H5Z_FLAG_REVERSE) {
        unsigned long long sz = ZSTD_getFrameContentSize(*buf, nbytes);
        if (sz == ZSTD_CONTENTSIZE_ERROR || sz == ZSTD_CONTENTSIZE_UNKNOWN || sz > (1ull << 34)) return 0;
        if (!(out = H5allocate_memory((size_t) sz, false))) return 0;
        n = ZSTD_decompress(out, (size_t) sz, *buf, nbytes);
        if (ZSTD_isError(n) || n != sz) goto fail;
    } else {
        int level = cd_nelmts > 0 ? (int) cd_values[0] : ZSTD_LEVEL;
        size_t cap = ZSTD_compressBound(nbytes);
        if (!(out = H5allocate_memory(cap, false))) return 0;
        n = ZSTD_compress(out, cap, *buf, nbytes, level);   // the frame header records the content size
        if (ZSTD_isError(n)) goto fail;
    }
    H5free_memory(*buf);
    *buf = out;
    *buf_size = n;
    return n;
fail:
    H5free_memory(out);
    return 0;
}

static enum oscar_status register_zstd(void) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (H5Zfilter_avail(ZSTD_FILTER_ID) > 0) return OSCAR_OK;
    static const H5Z_class2_t cls = {H5Z_CLASS_T_VERS, ZSTD_FILTER_ID, 1, 1, "zstd", NULL, NULL, zstd_filter};
    if (H5Zregister(&cls) < 0) return osc_error(OSCAR_ERR_IO, "HDF5: cannot register the zstd filter");
    return OSCAR_OK;
}

// ---- shared state ----------------------------------------------------------------------------
struct act_layer {
    hid_t q, k, v, lens;   // datasets
    int64_t rows, seqs;
};

struct oscar_actstore {
    struct oscar_actstore_info info;
    char * path, * tmp;
    hid_t file;
    bool writer;
    struct act_layer * set[2];   // [L] each
    int32_t * lens[2];           // reader: seq lens of layer 0
    int64_t n_lens[2];
    uint16_t * u16;              // bf16 conversion scratch (grows to the largest batch once)
    size_t u16_n;
    int32_t * lbuf;              // writer: seq lens of a batch
    int32_t lbuf_n;
};

static const char * set_prefix(enum oscar_actstore_set set) { return set == OSCAR_ACT_HELDOUT ? "/heldout" : ""; }

static void close_layers(struct oscar_actstore * s) {
    for (int i = 0; i < 2; i++) {
        for (int32_t l = 0; s->set[i] && l < s->info.n_layer; l++) {
            struct act_layer * a = &s->set[i][l];
            hid_t ids[4] = {a->q, a->k, a->v, a->lens};
            for (int j = 0; j < 4; j++)
                if (ids[j] > 0) H5Dclose(ids[j]);
        }
        free(s->set[i]);
        s->set[i] = NULL;
        free(s->lens[i]);
        s->lens[i] = NULL;
    }
}

void oscar_actstore_free(struct oscar_actstore * s) {
    if (!s) return;
    close_layers(s);
    if (s->file > 0) H5Fclose(s->file);
    if (s->writer && s->tmp) unlink(s->tmp);
    free(s->path);
    free(s->tmp);
    free(s->u16);
    free(s->lbuf);
    free(s);
}

const struct oscar_actstore_info * oscar_actstore_get_info(const struct oscar_actstore * s) { return &s->info; }

// ---- attributes --------------------------------------------------------------------------------
static herr_t put_str(hid_t obj, const char * name, const char * val) {
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
    H5Tset_size(t, strlen(val) + 1);
    hid_t a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = a < 0 ? -1 : H5Awrite(a, t, val);
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
    return r;
}

static herr_t put_num(hid_t obj, const char * name, hid_t type, const void * val) {
    hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = a < 0 ? -1 : H5Awrite(a, type, val);
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    return r;
}

static bool get_str(hid_t obj, const char * name, char * out, size_t n) {
    if (H5Aexists(obj, name) <= 0) return false;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT), ft = a < 0 ? -1 : H5Aget_type(a);
    bool ok = false;
    if (ft >= 0 && H5Tget_class(ft) == H5T_STRING && !H5Tis_variable_str(ft) && H5Tget_size(ft) <= n) {
        hid_t mt = H5Tcopy(ft);
        ok = H5Aread(a, mt, out) >= 0;
        out[n - 1] = 0;
        H5Tclose(mt);
    }
    if (ft >= 0) H5Tclose(ft);
    if (a >= 0) H5Aclose(a);
    return ok;
}

static bool get_num(hid_t obj, const char * name, hid_t mem_type, void * out) {
    if (H5Aexists(obj, name) <= 0) return false;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    bool ok = a >= 0 && H5Aread(a, mem_type, out) >= 0;
    if (a >= 0) H5Aclose(a);
    return ok;
}

static herr_t put_info(hid_t f, const struct oscar_actstore_info * in) {
    int32_t ver = 1;
    herr_t r = 0;
    r |= put_str(f, "format", FORMAT_NAME);
    r |= put_num(f, "format_version", H5T_NATIVE_INT32, &ver);
    r |= put_str(f, "model", in->model);
    r |= put_str(f, "model_sha256", in->model_sha256);
    r |= put_str(f, "tokenizer_hash", in->tokenizer_hash);
    r |= put_str(f, "corpus", in->corpus);
    r |= put_str(f, "corpus_sha256", in->corpus_sha256);
    if (in->corpus_sources[0]) r |= put_str(f, "corpus_sources", in->corpus_sources); // absent: one corpus
    r |= put_str(f, "oscar_version", in->oscar_version);
    r |= put_str(f, "dtype", in->bf16 ? "bfloat16" : "float32");
    r |= put_num(f, "n_layer", H5T_NATIVE_INT32, &in->n_layer);
    r |= put_num(f, "n_head", H5T_NATIVE_INT32, &in->n_head);
    r |= put_num(f, "n_head_kv", H5T_NATIVE_INT32, &in->n_head_kv);
    r |= put_num(f, "head_dim", H5T_NATIVE_INT32, &in->head_dim);
    r |= put_num(f, "n_embd", H5T_NATIVE_INT32, &in->n_embd);
    r |= put_num(f, "seq_len", H5T_NATIVE_INT32, &in->seq_len);
    r |= put_num(f, "rope_theta", H5T_NATIVE_DOUBLE, &in->rope_theta);
    return r;
}

// ---- writer ------------------------------------------------------------------------------------
static hid_t make_rows(hid_t g, const char * name, int32_t H, int32_t D, bool bf16) {
    hsize_t dims[3] = {0, (hsize_t) H, (hsize_t) D}, maxd[3] = {H5S_UNLIMITED, (hsize_t) H, (hsize_t) D};
    size_t row = (size_t) H * (size_t) D * (bf16 ? 2 : 4);
    hsize_t crow = row >= CHUNK_BYTES ? 1 : CHUNK_BYTES / row;   // whole rows, <= 1 MiB (fits the chunk cache)
    hsize_t chunk[3] = {crow, (hsize_t) H, (hsize_t) D};
    unsigned level = ZSTD_LEVEL;
    hid_t sp = H5Screate_simple(3, dims, maxd), dc = H5Pcreate(H5P_DATASET_CREATE), d = -1;
    hid_t type = bf16 ? H5T_STD_U16LE : H5T_IEEE_F32LE;
    if (H5Pset_chunk(dc, 3, chunk) >= 0 && H5Pset_shuffle(dc) >= 0 &&
        H5Pset_filter(dc, ZSTD_FILTER_ID, H5Z_FLAG_MANDATORY, 1, &level) >= 0 && H5Pset_fletcher32(dc) >= 0)
        d = H5Dcreate2(g, name, type, sp, H5P_DEFAULT, dc, H5P_DEFAULT);
    if (d >= 0 && put_str(d, "dtype", bf16 ? "bfloat16" : "float32") < 0) {
        H5Dclose(d);
        d = -1;
    }
    H5Pclose(dc);
    H5Sclose(sp);
    return d;
}

static hid_t make_lens(hid_t g) {
    hsize_t dims[1] = {0}, maxd[1] = {H5S_UNLIMITED}, chunk[1] = {1024};
    hid_t sp = H5Screate_simple(1, dims, maxd), dc = H5Pcreate(H5P_DATASET_CREATE), d = -1;
    if (H5Pset_chunk(dc, 1, chunk) >= 0 && H5Pset_fletcher32(dc) >= 0)
        d = H5Dcreate2(g, "seq_lens", H5T_STD_I32LE, sp, H5P_DEFAULT, dc, H5P_DEFAULT);
    H5Pclose(dc);
    H5Sclose(sp);
    return d;
}

static enum oscar_status create_set(struct oscar_actstore * s, enum oscar_actstore_set set) {
    const struct oscar_actstore_info * in = &s->info;
    s->set[set] = calloc((size_t) in->n_layer, sizeof(struct act_layer));
    if (!s->set[set]) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", s->path);
    if (set == OSCAR_ACT_HELDOUT) {
        hid_t g = H5Gcreate2(s->file, "heldout", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (g < 0) return osc_error(OSCAR_ERR_IO, "%s: cannot create /heldout", s->tmp);
        H5Gclose(g);
    }
    for (int32_t l = 0; l < in->n_layer; l++) {
        char name[64];
        snprintf(name, sizeof(name), "%s/layer_%03d", set_prefix(set), (int) l);
        hid_t g = H5Gcreate2(s->file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        struct act_layer * a = &s->set[set][l];
        if (g >= 0) {
            a->q = make_rows(g, "q", in->n_head, in->head_dim, in->bf16);
            a->k = make_rows(g, "k", in->n_head_kv, in->head_dim, in->bf16);
            a->v = make_rows(g, "v", in->n_head_kv, in->head_dim, in->bf16);
            a->lens = make_lens(g);
            H5Gclose(g);
        }
        if (g < 0 || a->q < 0 || a->k < 0 || a->v < 0 || a->lens < 0)
            return osc_error(OSCAR_ERR_IO, "%s: cannot create %s", s->tmp, name);
    }
    return OSCAR_OK;
}

enum oscar_status oscar_actstore_create(const char * path, const struct oscar_actstore_info * info,
                                        struct oscar_actstore ** out) {
    enum oscar_status st = register_zstd();
    if (st != OSCAR_OK) return st;
    struct oscar_actstore * s = calloc(1, sizeof(*s));
    if (!s) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
    s->info = *info;
    s->writer = true;
    s->path = strdup(path);
    s->tmp = malloc(strlen(path) + 32);
    if (!s->path || !s->tmp) {
        oscar_actstore_free(s);
        return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
    }
    sprintf(s->tmp, "%s.tmp.%ld", path, (long) getpid());
    s->file = H5Fcreate(s->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (s->file < 0) {
        st = osc_error(OSCAR_ERR_IO, "%s: cannot create the activation store", s->tmp);
        free(s->tmp);
        s->tmp = NULL;   // nothing to remove
        oscar_actstore_free(s);
        return st;
    }
    if (put_info(s->file, info) < 0) st = osc_error(OSCAR_ERR_IO, "%s: cannot write attributes", s->tmp);
    if (st == OSCAR_OK) st = create_set(s, OSCAR_ACT_CALIB);
    if (st == OSCAR_OK) st = create_set(s, OSCAR_ACT_HELDOUT);
    if (st != OSCAR_OK) {
        oscar_actstore_free(s);
        return st;
    }
    *out = s;
    return OSCAR_OK;
}

static herr_t append_rows(hid_t d, int64_t row0, int32_t n, int32_t H, int32_t D, const float * x, bool bf16,
                          void * scratch) {
    hsize_t dims[3] = {(hsize_t) (row0 + n), (hsize_t) H, (hsize_t) D};
    hsize_t start[3] = {(hsize_t) row0, 0, 0}, cnt[3] = {(hsize_t) n, (hsize_t) H, (hsize_t) D};
    if (H5Dset_extent(d, dims) < 0) return -1;
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(3, cnt, NULL);
    herr_t r = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
    size_t m = (size_t) n * (size_t) H * (size_t) D;
    if (r >= 0 && bf16) {
        uint16_t * u = scratch;
        for (size_t i = 0; i < m; i++) u[i] = oscar_f32_to_bf16(x[i]); // round to nearest even
        r = H5Dwrite(d, H5T_NATIVE_UINT16, ms, fs, H5P_DEFAULT, u);
    } else if (r >= 0) {
        r = H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, x);
    }
    H5Sclose(ms);
    H5Sclose(fs);
    return r;
}

enum oscar_status oscar_actstore_append(struct oscar_actstore * s, enum oscar_actstore_set set, int32_t layer,
                                        int32_t n_tokens, int32_t n_seq, const int32_t * seq_start, const float * q,
                                        const float * k, const float * v) {
    const struct oscar_actstore_info * in = &s->info;
    if (!s->writer || layer < 0 || layer >= in->n_layer)
        return osc_error(OSCAR_ERR_INVALID, "%s: bad append (layer %d)", s->path, (int) layer);
    struct act_layer * a = &s->set[set][layer];
    size_t need = (size_t) n_tokens * (size_t) in->n_head * (size_t) in->head_dim;
    if (in->bf16 && need > s->u16_n) {
        uint16_t * u = realloc(s->u16, need * sizeof(uint16_t));   // grows to the largest batch once
        if (!u) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", s->path);
        s->u16 = u;
        s->u16_n = need;
    }
    if (n_seq > s->lbuf_n) {
        int32_t * b = realloc(s->lbuf, (size_t) n_seq * sizeof(int32_t));
        if (!b) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", s->path);
        s->lbuf = b;
        s->lbuf_n = n_seq;
    }
    int32_t * lens = s->lbuf;
    for (int32_t i = 0; i < n_seq; i++) lens[i] = seq_start[i + 1] - seq_start[i];
    hsize_t ld[1] = {(hsize_t) (a->seqs + n_seq)}, st0[1] = {(hsize_t) a->seqs}, cnt[1] = {(hsize_t) n_seq};
    herr_t r = append_rows(a->q, a->rows, n_tokens, in->n_head, in->head_dim, q, in->bf16, s->u16);
    if (r >= 0) r = append_rows(a->k, a->rows, n_tokens, in->n_head_kv, in->head_dim, k, in->bf16, s->u16);
    if (r >= 0) r = append_rows(a->v, a->rows, n_tokens, in->n_head_kv, in->head_dim, v, in->bf16, s->u16);
    if (r >= 0 && n_seq > 0 && (r = H5Dset_extent(a->lens, ld)) >= 0) {
        hid_t fs = H5Dget_space(a->lens), ms = H5Screate_simple(1, cnt, NULL);
        r = H5Sselect_hyperslab(fs, H5S_SELECT_SET, st0, NULL, cnt, NULL);
        if (r >= 0) r = H5Dwrite(a->lens, H5T_NATIVE_INT32, ms, fs, H5P_DEFAULT, lens);
        H5Sclose(ms);
        H5Sclose(fs);
    }
    if (r < 0)
        return osc_error(OSCAR_ERR_IO, "%s: writing %s/layer_%03d rows %lld..%lld failed (disk full?)", s->tmp,
                         set_prefix(set), (int) layer, (long long) a->rows, (long long) (a->rows + n_tokens));
    a->rows += n_tokens;
    a->seqs += n_seq;
    return OSCAR_OK;
}

enum oscar_status oscar_actstore_commit(struct oscar_actstore * s) {
    enum oscar_status st = OSCAR_OK;
    close_layers(s);
    herr_t r = H5Fclose(s->file);
    s->file = -1;
    int fd = r < 0 ? -1 : open(s->tmp, O_RDONLY);
    if (r < 0 || fd < 0 || fsync(fd) != 0 || rename(s->tmp, s->path) != 0)
        st = osc_error(OSCAR_ERR_IO, "%s: cannot finish the activation store", s->path);
    if (fd >= 0) close(fd);
    if (st == OSCAR_OK) s->writer = false;   // renamed: nothing to remove
    oscar_actstore_free(s);
    return st;
}

// ---- reader --------------------------------------------------------------------------------------
static bool dims_are(hid_t d, int rank, const hsize_t * want, hsize_t * got0) {
    hid_t sp = H5Dget_space(d);
    hsize_t dims[3] = {0};
    bool ok = sp >= 0 && H5Sget_simple_extent_ndims(sp) == rank && H5Sget_simple_extent_dims(sp, dims, NULL) == rank;
    for (int i = 1; ok && i < rank; i++) ok = dims[i] == want[i];
    if (sp >= 0) H5Sclose(sp);
    if (ok) *got0 = dims[0];
    return ok;
}

static enum oscar_status open_set(struct oscar_actstore * s, enum oscar_actstore_set set) {
    const struct oscar_actstore_info * in = &s->info;
    s->set[set] = calloc((size_t) in->n_layer, sizeof(struct act_layer));
    if (!s->set[set]) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", s->path);
    for (int32_t l = 0; l < in->n_layer; l++) {
        char name[64], dn[80];
        snprintf(name, sizeof(name), "%s/layer_%03d", set_prefix(set), (int) l);
        struct act_layer * a = &s->set[set][l];
        const char * parts[4] = {"q", "k", "v", "seq_lens"};
        hid_t * ids[4] = {&a->q, &a->k, &a->v, &a->lens};
        for (int j = 0; j < 4; j++) {
            snprintf(dn, sizeof(dn), "%s/%s", name, parts[j]);
            *ids[j] = H5Lexists(s->file, name, H5P_DEFAULT) > 0 && H5Lexists(s->file, dn, H5P_DEFAULT) > 0
                          ? H5Dopen2(s->file, dn, H5P_DEFAULT) : -1;
            if (*ids[j] < 0) return osc_error(OSCAR_ERR_FORMAT, "%s: dataset %s missing or unreadable", s->path, dn);
        }
        hsize_t wq[3] = {0, (hsize_t) in->n_head, (hsize_t) in->head_dim};
        hsize_t wk[3] = {0, (hsize_t) in->n_head_kv, (hsize_t) in->head_dim}, tq, tk, tv, ns;
        if (!dims_are(a->q, 3, wq, &tq) || !dims_are(a->k, 3, wk, &tk) || !dims_are(a->v, 3, wk, &tv) ||
            !dims_are(a->lens, 1, wq, &ns) || tq != tk || tq != tv)
            return osc_error(OSCAR_ERR_FORMAT, "%s: %s: shapes do not match [T, %d|%d, %d]", s->path, name,
                             (int) in->n_head, (int) in->n_head_kv, (int) in->head_dim);
        a->rows = (int64_t) tq;
        a->seqs = (int64_t) ns;
        int32_t * lens = malloc(((size_t) ns + 1) * sizeof(int32_t));
        if (!lens) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", s->path);
        if (ns > 0 && H5Dread(a->lens, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, lens) < 0) {
            free(lens);
            return osc_error(OSCAR_ERR_FORMAT, "%s: %s/seq_lens: read failed (corrupted?)", s->path, name);
        }
        int64_t sum = 0;
        bool ok = true;
        for (hsize_t i = 0; i < ns; i++) ok = ok && lens[i] > 0, sum += lens[i];
        if (l == 0) {
            s->lens[set] = lens, s->n_lens[set] = (int64_t) ns;
        } else {
            ok = ok && (int64_t) ns == s->n_lens[set] && !memcmp(lens, s->lens[set], (size_t) ns * sizeof(int32_t));
            free(lens);
        }
        if (!ok || sum != a->rows)
            return osc_error(OSCAR_ERR_FORMAT, "%s: %s/seq_lens do not add up to the %lld rows (or differ from layer 0)",
                             s->path, name, (long long) a->rows);
    }
    return OSCAR_OK;
}

static enum oscar_status read_info(struct oscar_actstore * s) {
    struct oscar_actstore_info * in = &s->info;
    char fmt[64] = "", dtype[32] = "";
    int32_t ver = 0;
    hid_t f = s->file;
    if (!get_str(f, "format", fmt, sizeof(fmt)) || strcmp(fmt, FORMAT_NAME) || !get_num(f, "format_version", H5T_NATIVE_INT32, &ver) ||
        ver != 1)
        return osc_error(OSCAR_ERR_FORMAT, "%s: not an oscar activation store (format '%s' version %d)", s->path, fmt,
                         (int) ver);
    bool ok = get_str(f, "model", in->model, sizeof(in->model)) &&
              get_str(f, "model_sha256", in->model_sha256, sizeof(in->model_sha256)) &&
              get_str(f, "tokenizer_hash", in->tokenizer_hash, sizeof(in->tokenizer_hash)) &&
              get_str(f, "corpus", in->corpus, sizeof(in->corpus)) &&
              get_str(f, "corpus_sha256", in->corpus_sha256, sizeof(in->corpus_sha256)) &&
              get_str(f, "oscar_version", in->oscar_version, sizeof(in->oscar_version)) &&
              get_str(f, "dtype", dtype, sizeof(dtype)) &&
              get_num(f, "n_layer", H5T_NATIVE_INT32, &in->n_layer) && get_num(f, "n_head", H5T_NATIVE_INT32, &in->n_head) &&
              get_num(f, "n_head_kv", H5T_NATIVE_INT32, &in->n_head_kv) &&
              get_num(f, "head_dim", H5T_NATIVE_INT32, &in->head_dim) &&
              get_num(f, "n_embd", H5T_NATIVE_INT32, &in->n_embd) && get_num(f, "seq_len", H5T_NATIVE_INT32, &in->seq_len) &&
              get_num(f, "rope_theta", H5T_NATIVE_DOUBLE, &in->rope_theta);
    if (!ok) return osc_error(OSCAR_ERR_FORMAT, "%s: provenance attributes missing or malformed", s->path);
    in->corpus_sources[0] = '\0';
    if (H5Aexists(f, "corpus_sources") > 0 && !get_str(f, "corpus_sources", in->corpus_sources, sizeof in->corpus_sources))
        return osc_error(OSCAR_ERR_FORMAT, "%s: attribute corpus_sources malformed", s->path);
    if (strcmp(dtype, "bfloat16") && strcmp(dtype, "float32"))
        return osc_error(OSCAR_ERR_FORMAT, "%s: unknown dtype '%s'", s->path, dtype);
    in->bf16 = !strcmp(dtype, "bfloat16");
    if (in->n_layer < 1 || in->n_layer > 4096 || in->n_head < 1 || in->n_head_kv < 1 || in->n_head % in->n_head_kv ||
        in->head_dim < 1 || in->head_dim > 1024 || in->n_embd < 1 || in->seq_len < 1)
        return osc_error(OSCAR_ERR_FORMAT, "%s: implausible shape attributes (L %d Hq %d Hkv %d D %d)", s->path,
                         (int) in->n_layer, (int) in->n_head, (int) in->n_head_kv, (int) in->head_dim);
    return OSCAR_OK;
}

enum oscar_status oscar_actstore_open(const char * path, struct oscar_actstore ** out) {
    enum oscar_status st = register_zstd();
    if (st != OSCAR_OK) return st;
    struct oscar_actstore * s = calloc(1, sizeof(*s));
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
    }
    if (access(path, R_OK) != 0) st = osc_error(OSCAR_ERR_IO, "%s: cannot read the activation store", path);
    else if (H5Fis_hdf5(path) <= 0 || (s->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0)
        st = osc_error(OSCAR_ERR_FORMAT, "%s: not a readable HDF5 file (truncated or corrupted?)", path);
    if (st == OSCAR_OK) st = read_info(s);
    if (st == OSCAR_OK) st = open_set(s, OSCAR_ACT_CALIB);
    if (st == OSCAR_OK) st = open_set(s, OSCAR_ACT_HELDOUT);
    if (st != OSCAR_OK) {
        oscar_actstore_free(s);
        return st;
    }
    *out = s;
    return OSCAR_OK;
}

const int32_t * oscar_actstore_seq_lens(const struct oscar_actstore * s, enum oscar_actstore_set set, int32_t * n_seq) {
    *n_seq = (int32_t) s->n_lens[set];
    return s->lens[set];
}

static herr_t read_rows(struct oscar_actstore * s, hid_t d, int64_t row0, int32_t n, int32_t H, float * x) {
    int32_t D = s->info.head_dim;
    hsize_t start[3] = {(hsize_t) row0, 0, 0}, cnt[3] = {(hsize_t) n, (hsize_t) H, (hsize_t) D};
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(3, cnt, NULL);
    herr_t r = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
    size_t m = (size_t) n * (size_t) H * (size_t) D;
    if (r >= 0 && s->info.bf16) {
        if (m > s->u16_n) {
            uint16_t * u = realloc(s->u16, m * sizeof(uint16_t));
            if (!u) r = -1;
            else s->u16 = u, s->u16_n = m;
        }
        if (r >= 0) r = H5Dread(d, H5T_NATIVE_UINT16, ms, fs, H5P_DEFAULT, s->u16);
        for (size_t i = 0; r >= 0 && i < m; i++) x[i] = oscar_bf16_to_f32(s->u16[i]);
    } else if (r >= 0) {
        r = H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, x);
    }
    H5Sclose(ms);
    H5Sclose(fs);
    return r;
}

enum oscar_status oscar_actstore_read(struct oscar_actstore * s, enum oscar_actstore_set set, int32_t layer,
                                      int64_t row0, int32_t n, float * q, float * k, float * v) {
    const struct oscar_actstore_info * in = &s->info;
    if (s->writer || layer < 0 || layer >= in->n_layer || row0 < 0 || n < 0 || row0 + n > s->set[set][layer].rows)
        return osc_error(OSCAR_ERR_INVALID, "%s: bad read (layer %d rows %lld+%d)", s->path, (int) layer,
                         (long long) row0, (int) n);
    struct act_layer * a = &s->set[set][layer];
    if (n == 0) return OSCAR_OK;
    if (read_rows(s, a->q, row0, n, in->n_head, q) < 0 || read_rows(s, a->k, row0, n, in->n_head_kv, k) < 0 ||
        read_rows(s, a->v, row0, n, in->n_head_kv, v) < 0)
        return osc_error(OSCAR_ERR_FORMAT, "%s: %s/layer_%03d rows %lld..%lld: read failed (corrupted data or "
                         "checksum mismatch)", s->path, set_prefix(set), (int) layer, (long long) row0,
                         (long long) (row0 + n));
    return OSCAR_OK;
}
