// gguf.h - read-only GGUF (v2, v3) reader over a memory mapping.
//
// Layout (little-endian):
//   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x { gguf_str key | u32 type | value }
//   n_tensors x { gguf_str name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   padding to general.alignment (default 32) | tensor data (offsets relative to here)
//   gguf_str = u64 len | bytes (no NUL); array value = u32 elem_type | u64 n | elements
//
// Every offset, length, count, type and shape is validated at open; a
// malformed file gives OSCAR_ERR_FORMAT naming the file and the field, never
// a crash. Strings returned point into the mapping (not NUL-terminated) and
// stay valid until osc_gguf_close().
#ifndef OSCAR_FORMATS_GGUF_H
#define OSCAR_FORMATS_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

enum osc_gguf_type {
    OSC_GGUF_UINT8   = 0,
    OSC_GGUF_INT8    = 1,
    OSC_GGUF_UINT16  = 2,
    OSC_GGUF_INT16   = 3,
    OSC_GGUF_UINT32  = 4,
    OSC_GGUF_INT32   = 5,
    OSC_GGUF_FLOAT32 = 6,
    OSC_GGUF_BOOL    = 7,
    OSC_GGUF_STRING  = 8,
    OSC_GGUF_ARRAY   = 9,
    OSC_GGUF_UINT64  = 10,
    OSC_GGUF_INT64   = 11,
    OSC_GGUF_FLOAT64 = 12,
};

// Encoded size of one value of a fixed-size type; 0 for string, array and unknown ids.
size_t osc_gguf_value_size(uint32_t type);

// ggml tensor types (ids as in ggml.h). Only the listed ones are read.
enum osc_ggml_type {
    OSC_GGML_F32  = 0,
    OSC_GGML_F16  = 1,
    OSC_GGML_Q4_0 = 2,
    OSC_GGML_Q4_1 = 3,
    OSC_GGML_Q5_0 = 6,
    OSC_GGML_Q5_1 = 7,
    OSC_GGML_Q8_0 = 8,
    OSC_GGML_Q2_K = 10,
    OSC_GGML_Q3_K = 11,
    OSC_GGML_Q4_K = 12,
    OSC_GGML_Q5_K = 13,
    OSC_GGML_Q6_K = 14,
    OSC_GGML_BF16 = 30,
};

struct osc_gguf;

struct osc_gguf_tensor {
    char               name[256]; // NUL-terminated copy
    enum osc_ggml_type type;
    uint32_t           n_dims;
    int64_t            ne[4];     // ne[0] varies fastest (a row); unused dims are 1
    int64_t            n_elements;
    uint64_t           offset;    // relative to the data section
    size_t             nbytes;
    const void *       data;      // into the mapping
};

enum oscar_status osc_gguf_open(const char * path, struct osc_gguf ** out);
void osc_gguf_close(struct osc_gguf * g);

const char * osc_gguf_path(const struct osc_gguf * g);
uint32_t     osc_gguf_version(const struct osc_gguf * g);

// ---- metadata ----------------------------------------------------------------
int64_t            osc_gguf_n_kv(const struct osc_gguf * g);
// Index of `key`, or -1 when absent.
int64_t            osc_gguf_find_key(const struct osc_gguf * g, const char * key);
// Key name of entry i (NUL-terminated copy owned by g).
const char *       osc_gguf_key(const struct osc_gguf * g, int64_t i);
enum osc_gguf_type osc_gguf_kv_type(const struct osc_gguf * g, int64_t i);

// Typed getters by key name. Integers accept any integer type whose value
// fits; floats accept FLOAT32/FLOAT64. Missing key -> OSCAR_ERR_NOT_FOUND,
// wrong type -> OSCAR_ERR_FORMAT; both name the file and the key.
enum oscar_status osc_gguf_get_u32(const struct osc_gguf * g, const char * key, uint32_t * out);
enum oscar_status osc_gguf_get_u64(const struct osc_gguf * g, const char * key, uint64_t * out);
enum oscar_status osc_gguf_get_i64(const struct osc_gguf * g, const char * key, int64_t * out);
enum oscar_status osc_gguf_get_f32(const struct osc_gguf * g, const char * key, float * out);
enum oscar_status osc_gguf_get_f64(const struct osc_gguf * g, const char * key, double * out);
enum oscar_status osc_gguf_get_bool(const struct osc_gguf * g, const char * key, bool * out);
enum oscar_status osc_gguf_get_str(const struct osc_gguf * g, const char * key, const char ** s, size_t * len);

// Arrays: element type and count.
enum oscar_status osc_gguf_get_arr(const struct osc_gguf * g, const char * key,
                                   enum osc_gguf_type * elem_type, uint64_t * n);
// Element i of a string array (O(1); offsets are indexed at open).
enum oscar_status osc_gguf_get_arr_str(const struct osc_gguf * g, const char * key, uint64_t i,
                                       const char ** s, size_t * len);
// Raw little-endian elements of a numeric array (unaligned: copy with memcpy).
enum oscar_status osc_gguf_get_arr_data(const struct osc_gguf * g, const char * key, const void ** data);

// ---- tensors -----------------------------------------------------------------
// File offset of the data section (tensor offsets are relative to it) and
// its alignment (general.alignment, default 32).
uint64_t osc_gguf_data_offset(const struct osc_gguf * g);
uint64_t osc_gguf_alignment(const struct osc_gguf * g);
int64_t osc_gguf_n_tensors(const struct osc_gguf * g);
const struct osc_gguf_tensor * osc_gguf_tensor(const struct osc_gguf * g, int64_t i);
// NULL when absent.
const struct osc_gguf_tensor * osc_gguf_find_tensor(const struct osc_gguf * g, const char * name);

// ---- dequantization (formats/ggml-dequant.c) --------------------------------------
// Bytes per block and elements per block of a type; false for unknown types.
bool osc_ggml_type_info(enum osc_ggml_type type, size_t * block_bytes, int64_t * block_elems);
const char * osc_ggml_type_name(enum osc_ggml_type type);
// ggml's name for any type id of its enum (IQ2_XXS, TQ1_0, MXFP4, ...), supported or not; NULL past it.
const char * osc_ggml_type_id_name(uint32_t id);
// "F32, F16, BF16, Q4_0, ...": the types osc_ggml_type_info accepts, for refusals.
const char * osc_ggml_supported_types(void);
// Dequantizes n elements (a multiple of the block size) to fp32.
enum oscar_status osc_ggml_dequantize(enum osc_ggml_type type, const void * src, float * dst, int64_t n);

#endif
