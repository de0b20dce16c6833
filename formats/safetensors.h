// safetensors.h - safetensors reader (single file or sharded) and writer.
//
// Layout: u64 LE N | N bytes of JSON header (starts with '{', may be padded
// with spaces) | byte buffer. Header:
//   {"__metadata__": {str: str}?, "<name>": {"dtype": "F32", "shape": [..],
//    "data_offsets": [begin, end]}, ...}   offsets relative to the buffer, end exclusive.
//
// The reader maps each file read-only and validates at open: header length
// (<= 100,000,000 and inside the file), JSON syntax and no duplicate keys,
// known dtypes, shape product x dtype size == end - begin (overflow-safe),
// offsets inside the buffer, tensors contiguous and covering the buffer
// exactly, __metadata__ values being strings. A sharded model is opened through
// model.safetensors.index.json ("weight_map": name -> shard file in the same
// directory). Malformed input gives OSCAR_ERR_FORMAT (unknown dtype:
// OSCAR_ERR_UNSUPPORTED) naming the file and the tensor.
//
// The writer produces files the reference implementation accepts: sorted
// keys, header padded with spaces to a multiple of 8, tensors laid out by
// descending dtype alignment then name, written atomically (util/fs.h).
#ifndef OSCAR_FORMATS_SAFETENSORS_H
#define OSCAR_FORMATS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

#define OSC_ST_MAX_DIMS 8

enum osc_st_dtype {
    OSC_ST_F32  = 0,
    OSC_ST_F16  = 1,
    OSC_ST_BF16 = 2,
    OSC_ST_I32  = 3,
    OSC_ST_U8   = 4,
};

struct osc_st_tensor {
    const char *      name;      // NUL-terminated, owned by the reader
    enum osc_st_dtype dtype;
    int32_t           n_dims;    // 0 for a scalar
    int64_t           shape[OSC_ST_MAX_DIMS]; // numpy order: shape[n_dims-1] varies fastest
    int64_t           n_elements;
    size_t            nbytes;
    const void *      data;      // into the mapping (may be unaligned for F16/BF16 only in odd files)
    const char *      file;      // the shard it lives in
};

struct osc_safetensors;

// path: a .safetensors file, a model.safetensors.index.json, or a directory
// holding one of model.safetensors.index.json / model.safetensors.
enum oscar_status osc_safetensors_open(const char * path, struct osc_safetensors ** out);
void osc_safetensors_close(struct osc_safetensors * st);

int64_t osc_safetensors_n_tensors(const struct osc_safetensors * st);
const struct osc_st_tensor * osc_safetensors_tensor(const struct osc_safetensors * st, int64_t i);
// NULL when absent.
const struct osc_st_tensor * osc_safetensors_find(const struct osc_safetensors * st, const char * name);

// __metadata__ of the (first) file: count, i-th pair, lookup (NULL when absent).
int64_t      osc_safetensors_n_metadata(const struct osc_safetensors * st);
void         osc_safetensors_metadata_at(const struct osc_safetensors * st, int64_t i, const char ** key,
                                         const char ** value);
const char * osc_safetensors_metadata(const struct osc_safetensors * st, const char * key);

const char * osc_st_dtype_name(enum osc_st_dtype dtype);
size_t       osc_st_dtype_size(enum osc_st_dtype dtype);

// Converts an F32/F16/BF16 tensor to fp32 (dst holds n_elements floats).
// Other dtypes: OSCAR_ERR_UNSUPPORTED naming the tensor.
enum oscar_status osc_st_to_f32(const struct osc_st_tensor * t, float * dst);

// ---- writer ----------------------------------------------------------------------------
struct osc_st_write_tensor {
    const char *      name;
    enum osc_st_dtype dtype;      // F32, I32 or U8
    int32_t           n_dims;     // 0..OSC_ST_MAX_DIMS
    const int64_t *   shape;      // [n_dims]
    const void *      data;       // product(shape) elements, little-endian
};

// Writes tensors (names unique, not "__metadata__") and string metadata
// (meta[2*i] = key, meta[2*i+1] = value, n_meta pairs) to `path` atomically.
enum oscar_status osc_safetensors_write(const char * path, const struct osc_st_write_tensor * tensors,
                                        size_t n_tensors, const char * const * meta, size_t n_meta);

#endif
