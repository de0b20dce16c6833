// backend.h - compute backends behind one vtable (style.md rule 8): the CPU
// reference is always built; the CUDA backend exists only in CUDA=1 builds and
// only when a device is present. Algorithm code never checks for CUDA:
// lib/backend/registry.c is the one C file that does.
//
// A backend works on host arrays (it copies to and from its device itself), so
// tests can run the same call on every backend and compare. Kernels that need
// device-resident data for timing use the kernels/*.cuh entry points directly.
//
// Usage:
//   const struct oscar_backend_i * be;
//   if (oscar_backend_get("cuda", &be) != OSCAR_OK) puts(oscar_last_error());
//   struct oscar_backend_kv * kv; be->kv_upload(cache, &kv);
//   be->decode_attention(kv, n_seq, q_rot, Hq, r_v, out); be->kv_free(kv);
#ifndef OSCAR_BACKEND_H
#define OSCAR_BACKEND_H

#include <stdint.h>

#include "attention/kv-cache.h"
#include "quant/quant.h"
#include "util/error.h"

struct oscar_backend_kv;   // a backend's copy of (or handle to) a struct oscar_kv_cache

struct oscar_backend_i {
    const char * name;
    // INT2 write path: y = bf16(x . R) (R [D, D] fp32, or NULL: rows already rotated),
    // then clip + ASYM quantize + pack with p. x bf16 bits [n_rows, D]; codes [n_rows, D/4],
    // meta [n_rows, 2*ng] (p->meta_dtype). The rotation sums k ascending with fused
    // multiply-adds: y[j] = fma(x[k], R[k][j], y[j]) for k = 0..D-1 (fp32, from 0).
    enum oscar_status (*int2_rotate_quantize)(const struct oscar_int2_params * p, const float * R,
                                              const uint16_t * x, int64_t n_rows, uint8_t * codes, void * meta);
    // Mirrors cache c (pools, block tables, tier counts of every sequence). The
    // handle is owned by the caller (kv_free); c must outlive it on the CPU backend.
    enum oscar_status (*kv_upload)(const struct oscar_kv_cache * c, struct oscar_backend_kv ** out);
    // Paged write into the mirror's INT2 pool (which: 0 = K, 1 = V): x bf16 [n_rows, D],
    // pool_row[i] = slot * Hkv + head. NULL on backends that cannot write (CPU: use the cache).
    enum oscar_status (*kv_write_int2)(struct oscar_backend_kv * kv, int which, const struct oscar_int2_params * p,
                                       const uint16_t * x, const int64_t * pool_row, int64_t n_rows);
    // Copies the mirror's INT2 pool back: codes [S_q * Hkv, D/4], meta [S_q * Hkv, 2*ng].
    enum oscar_status (*kv_read_int2)(const struct oscar_backend_kv * kv, int which, uint8_t * codes, void * meta);
    // Decode attention for sequences [0, n_seq) of the mirror: q [n_seq, Hq, D] rotated;
    // out [n_seq, Hq, D] = attention . R_V^T (r_v [D, D]) or the rotated output (r_v NULL).
    enum oscar_status (*decode_attention)(struct oscar_backend_kv * kv, int32_t n_seq, const float * q,
                                          int32_t n_head, const float * r_v, float * out);
    void (*kv_free)(struct oscar_backend_kv * kv);
};

// "cpu" (always) or "cuda". Returns OSCAR_ERR_UNSUPPORTED with "CUDA backend not
// compiled in" or "no CUDA device: ..." when CUDA is unavailable. *out is static.
enum oscar_status oscar_backend_get(const char * name, const struct oscar_backend_i ** out);

// Backend instances (registry.c calls these; osc_backend_cuda only exists in CUDA builds).
const struct oscar_backend_i * osc_backend_cpu(void);
enum oscar_status osc_backend_cuda(const struct oscar_backend_i ** out);

#endif
