// pt-reader.c - torch.save archive -> unpickled values with checked tensors (see pt-reader.h).
//
// The archive's folder is the part before the first '/' of its first record
// (as torch's reader takes it); data.pkl and data/<key> are looked up under
// it. Storages are read when the pickle names them, once per key.
#include "formats/pt-reader.h"

#include <stdlib.h>
#include <string.h>

#include "formats/pt-internal.h"
#include "quant/quant.h"
#include "util/fs.h"

#define PT_MAX_PICKLE (64ull << 20)
#define PT_MAX_RECORD (4ull << 30)

struct pt_storage {
    char *          key;
    const uint8_t * data;
    uint64_t        nbytes;
    uint8_t *       owned; // inflated copy, or NULL (points into the archive)
};

struct osc_pt {
    struct osc_mapped_file      map; // osc_pt_open only
    char *                      label;
    struct osc_zip              zip;
    char *                      prefix; // "<archive>/"
    struct pt_storage *         st;
    size_t                      n_st, cap_st;
    uint8_t *                   pkl_owned;
    struct osc_pt_vm *          vm;
    const struct osc_pt_value * root;
};

static enum oscar_status load_storage(void * ctx, const char * key, const uint8_t ** data, uint64_t * nbytes) {
    struct osc_pt * f = ctx;
    for (size_t i = 0; i < f->n_st; i++) {
        if (!strcmp(f->st[i].key, key)) {
            *data   = f->st[i].data;
            *nbytes = f->st[i].nbytes;
            return OSCAR_OK;
        }
    }
    size_t n    = strlen(f->prefix) + strlen(key) + 6;
    char * name = malloc(n);
    if (!name) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    snprintf(name, n, "%sdata/%s", f->prefix, key);
    const struct osc_zip_entry * e = osc_zip_find(&f->zip, name);
    free(name);
    if (!e) return osc_error(OSCAR_ERR_FORMAT, "storage '%s' has no record %sdata/%s", key, f->prefix, key);
    if (f->n_st == f->cap_st) {
        size_t              cap = f->cap_st ? 2 * f->cap_st : 16;
        struct pt_storage * s   = realloc(f->st, cap * sizeof *s);
        if (!s) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
        f->st     = s;
        f->cap_st = cap;
    }
    struct pt_storage * s = &f->st[f->n_st];
    memset(s, 0, sizeof *s);
    if (!(s->key = strdup(key))) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    enum oscar_status st = osc_zip_read(&f->zip, e, PT_MAX_RECORD, &s->data, &s->owned);
    if (st != OSCAR_OK) {
        free(s->key);
        return st;
    }
    s->nbytes = e->usize;
    f->n_st++;
    *data   = s->data;
    *nbytes = s->nbytes;
    return OSCAR_OK;
}

// The record <prefix><name>, or NULL.
static const struct osc_zip_entry * record(const struct osc_pt * f, const char * name) {
    char buf[512];
    if ((size_t) snprintf(buf, sizeof buf, "%s%s", f->prefix, name) >= sizeof buf) return NULL;
    return osc_zip_find(&f->zip, buf);
}

static enum oscar_status check_byteorder(struct osc_pt * f) {
    const struct osc_zip_entry * e = record(f, "byteorder");
    const uint8_t *              p = NULL;
    uint8_t *                    owned = NULL;
    if (!e) return OSCAR_OK; // files before torch 1.10 have none: little-endian
    enum oscar_status st = osc_zip_read(&f->zip, e, 64, &p, &owned);
    if (st != OSCAR_OK) return st;
    bool little = e->usize == 6 && !memcmp(p, "little", 6);
    free(owned);
    if (!little) return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: byteorder is not 'little' (big-endian files are not supported)", f->label);
    return OSCAR_OK;
}

static enum oscar_status parse(struct osc_pt * f, const uint8_t * data, size_t size) {
    enum oscar_status st = osc_zip_open(&f->zip, data, size, f->label);
    if (st != OSCAR_OK) return st;
    const char * first = f->zip.e[0].name, * slash = strchr(first, '/');
    if (!slash) return osc_error(OSCAR_ERR_FORMAT, "%s: not a torch.save archive: record '%s' is not inside a folder", f->label, first);
    if (!(f->prefix = strndup(first, (size_t) (slash - first) + 1))) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    const struct osc_zip_entry * pk = record(f, "data.pkl");
    if (!pk) return osc_error(OSCAR_ERR_FORMAT, "%s: not a torch.save archive: no %sdata.pkl", f->label, f->prefix);
    if ((st = check_byteorder(f)) != OSCAR_OK) return st;
    const uint8_t * pkl = NULL;
    if ((st = osc_zip_read(&f->zip, pk, PT_MAX_PICKLE, &pkl, &f->pkl_owned)) != OSCAR_OK) return st;
    return osc_pt_unpickle(pkl, (size_t) pk->usize, f->label, load_storage, f, &f->vm, &f->root);
}

static enum oscar_status finish(struct osc_pt * f, const uint8_t * data, size_t size, struct osc_pt ** out) {
    enum oscar_status st = f->label ? parse(f, data, size) : osc_error(OSCAR_ERR_NOMEM, "out of memory");
    if (st != OSCAR_OK) {
        osc_pt_close(f);
        return st;
    }
    *out = f;
    return OSCAR_OK;
}

enum oscar_status osc_pt_open_mem(const uint8_t * data, size_t size, const char * label, struct osc_pt ** out) {
    *out             = NULL;
    struct osc_pt * f = calloc(1, sizeof *f);
    if (!f) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    f->label = strdup(label);
    return finish(f, data, size, out);
}

enum oscar_status osc_pt_open(const char * path, struct osc_pt ** out) {
    *out             = NULL;
    struct osc_pt * f = calloc(1, sizeof *f);
    if (!f) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    enum oscar_status st = osc_map_file(path, &f->map);
    if (st != OSCAR_OK) {
        free(f);
        return st;
    }
    f->label = strdup(path);
    return finish(f, f->map.data, f->map.size, out);
}

void osc_pt_close(struct osc_pt * f) {
    if (!f) return;
    osc_pt_vm_free(f->vm);
    for (size_t i = 0; i < f->n_st; i++) {
        free(f->st[i].key);
        free(f->st[i].owned);
    }
    free(f->st);
    free(f->pkl_owned);
    free(f->prefix);
    osc_zip_close(&f->zip);
    if (f->map.path) osc_unmap_file(&f->map);
    free(f->label);
    free(f);
}

const struct osc_pt_value * osc_pt_root(const struct osc_pt * f) { return f->root; }
const char *                osc_pt_label(const struct osc_pt * f) { return f->label; }

const struct osc_pt_value * osc_pt_get(const struct osc_pt_value * v, const char * key) {
    if (!v || v->kind != OSC_PT_DICT) return NULL;
    for (size_t i = 0; i + 1 < v->n; i += 2)
        if (v->items[i]->kind == OSC_PT_STR && !strcmp(v->items[i]->str, key)) return v->items[i + 1];
    return NULL;
}

const struct osc_pt_value * osc_pt_get_index(const struct osc_pt_value * v, int64_t key) {
    char buf[24];
    snprintf(buf, sizeof buf, "%lld", (long long) key);
    if (!v || v->kind != OSC_PT_DICT) return NULL;
    for (size_t i = 0; i + 1 < v->n; i += 2)
        if (v->items[i]->kind == OSC_PT_INT && v->items[i]->i == key) return v->items[i + 1];
    return osc_pt_get(v, buf);
}

uint64_t osc_pt_numel(const struct osc_pt_value * t) {
    uint64_t n = 1;
    for (int32_t d = 0; d < t->ndim; d++) n *= (uint64_t) t->shape[d];
    return n;
}

static float element(const struct osc_pt_value * t, uint64_t at) {
    const uint8_t * p = t->data;
    switch (t->dtype) {
        case OSC_PT_F32: { float x; memcpy(&x, p + 4 * at, 4); return x; }
        case OSC_PT_F64: { double x; memcpy(&x, p + 8 * at, 8); return (float) x; }
        case OSC_PT_F16: return oscar_f16_to_f32((uint16_t) (p[2 * at] | p[2 * at + 1] << 8));
        case OSC_PT_BF16: return oscar_bf16_to_f32((uint16_t) (p[2 * at] | p[2 * at + 1] << 8));
    }
    return 0.0f;
}

void osc_pt_tensor_f32(const struct osc_pt_value * t, float * dst) {
    uint64_t n = osc_pt_numel(t), idx[OSC_PT_MAX_DIMS] = { 0 };
    for (uint64_t i = 0; i < n; i++) {
        uint64_t at = (uint64_t) t->offset;
        for (int32_t d = 0; d < t->ndim; d++) at += idx[d] * (uint64_t) t->stride[d];
        dst[i] = element(t, at); // in bounds: checked when the tensor was rebuilt
        for (int32_t d = t->ndim - 1; d >= 0; d--) { // next index in C order
            if (++idx[d] < (uint64_t) t->shape[d]) break;
            idx[d] = 0;
        }
    }
}
