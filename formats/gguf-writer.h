// gguf-writer.h - GGUF v3 writer (metadata of every gguf_type, tensors by reference).
//
// Collects key/value pairs (serialised on add) and tensor descriptions whose
// data the caller keeps alive until osc_gguf_writer_write() returns; then
// writes header, KVs, tensor infos, padding and the data blob with every
// tensor offset a multiple of the alignment (general.alignment, default 32),
// atomically (temp + fsync + rename). It refuses duplicate keys and tensor
// names, > 4 dims, and a general.alignment key whose value differs from the
// writer's alignment. Nested arrays (arrays of arrays) are not written.
//
// osc_gguf_copy_kvs() re-emits every key of an open GGUF with its original
// type (the --base bake path of oscar-zoo export).
#ifndef OSCAR_FORMATS_GGUF_WRITER_H
#define OSCAR_FORMATS_GGUF_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "formats/gguf.h"
#include "util/error.h"

struct osc_gguf_writer;

// alignment: a power of two (32 = the GGUF default).
enum oscar_status osc_gguf_writer_new(uint64_t alignment, struct osc_gguf_writer ** out);
void osc_gguf_writer_free(struct osc_gguf_writer * w);

// A scalar of a fixed-size type (not STRING / ARRAY); `value` points to the
// little-endian C value (uint8_t, int16_t, float, double, bool as uint8_t ...).
enum oscar_status osc_gguf_writer_kv(struct osc_gguf_writer * w, const char * key, enum osc_gguf_type type,
                                     const void * value);
enum oscar_status osc_gguf_writer_kv_str(struct osc_gguf_writer * w, const char * key, const char * s, size_t len);
// Array of n fixed-size elements (raw little-endian bytes, may be unaligned).
enum oscar_status osc_gguf_writer_kv_arr(struct osc_gguf_writer * w, const char * key, enum osc_gguf_type elem,
                                         const void * data, uint64_t n);
// Array of n strings.
enum oscar_status osc_gguf_writer_kv_arr_str(struct osc_gguf_writer * w, const char * key, const char * const * s,
                                             const size_t * len, uint64_t n);
// Convenience scalars.
enum oscar_status osc_gguf_writer_kv_u32(struct osc_gguf_writer * w, const char * key, uint32_t v);
enum oscar_status osc_gguf_writer_kv_f32(struct osc_gguf_writer * w, const char * key, float v);
enum oscar_status osc_gguf_writer_kv_cstr(struct osc_gguf_writer * w, const char * key, const char * s);

// A tensor: ne[0] varies fastest; nbytes must match type and shape. `data` is
// referenced, not copied.
enum oscar_status osc_gguf_writer_tensor(struct osc_gguf_writer * w, const char * name, enum osc_ggml_type type,
                                         uint32_t n_dims, const int64_t * ne, const void * data, size_t nbytes);

enum oscar_status osc_gguf_writer_write(struct osc_gguf_writer * w, const char * path);

// Copies every key/value of `g` (types preserved) into `w`.
enum oscar_status osc_gguf_copy_kvs(struct osc_gguf_writer * w, const struct osc_gguf * g);

#endif
