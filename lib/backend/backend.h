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

#include <stdbool.h>
#include <stdint.h>

#include "attention/kv-cache.h"
#include "quant/quant.h"
#include "rotation/optr.h"
#include "util/error.h"

struct oscar_backend_kv;   // a backend's copy of (or handle to) a struct oscar_kv_cache
struct oscar_backend_eval; // a backend's workspace for layer error evaluation

// ---- layer error evaluation (the calibration gate and clip search; verify/eval-device.h) ----
// Sizes every device buffer once: largest layer (tokens), longest sequence, most candidates.
struct oscar_eval_shape {
    int32_t n_head, n_head_kv, head_dim, n_embd;
    int32_t max_tokens, max_len, max_cand;
    float attn_scale;           // scores q·k·attn_scale; 0 = D^-1/2 (oscar_attn_scale_param)
};
// One layer's held-out rows (host arrays, copied by eval_layer).
struct oscar_eval_layer {
    int32_t n_tokens, n_seq;
    const int32_t * seq_start;  // [n_seq + 1], every sequence starts at position 0
    const uint8_t * int2_row;   // [T] 1: every query sees the row's INT2 value (query-independent tiering)
    const float * q;            // [T, Hq, D] post-RoPE
    const float * k, * v;       // [T, Hkv, D]
    const float * wo;           // [C, Hq*D]
    int32_t window;             // the layer's sliding window (query t sees keys t - window < p <= t); 0 = full causal
};
enum oscar_eval_rot { OSCAR_EVAL_ROT_IDENTITY = 0, OSCAR_EVAL_ROT_HADAMARD = 1, OSCAR_EVAL_ROT_MATRIX = 2 };
// How one of K / V is stored by a method, for this layer: y = bf16((x - mu).R) (hp_bf16), the
// HP value y.R^T + mu, the INT2 value Q(y).R^T + mu with clip ratio clip[c * n_clip + head]
// (0 = none).
struct oscar_eval_kv {
    enum oscar_eval_rot rot;
    const float * rot_mat;      // [n_rot, D, D] (MATRIX), n_rot 1 or Hkv
    int32_t n_rot;
    const double * clip;        // [n_cand, n_clip]
    int32_t n_clip;             // 1 or Hkv
    const float * mu;           // [Hkv, D] the key mean of a centring method (K only), or NULL
};
struct oscar_eval_method {
    struct oscar_int2_params int2;   // ASYM or SYM, group size, meta dtype, clip algorithm
    bool hp_bf16;
    struct oscar_eval_kv k, v;
};

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

    // Layer error evaluation (NULL on the CPU backend: lib/verify is the reference there).
    enum oscar_status (*eval_open)(const struct oscar_eval_shape * s, struct oscar_backend_eval ** out);
    enum oscar_status (*eval_layer)(struct oscar_backend_eval * e, const struct oscar_eval_layer * in);
    // Gate: num = sum ||(o^ - o).W_O^T||^2 (o^ over the method's cache, candidate 0), den = sum ||o.W_O^T||^2.
    enum oscar_status (*eval_out_err)(struct oscar_backend_eval * e, const struct oscar_eval_method * m,
                                      double * num, double * den);
    // Clip search: the sums of oscar_verify_candidate_errors (verify/metrics.h) for the
    // method's n_cand clip candidates.
    enum oscar_status (*eval_candidates)(struct oscar_backend_eval * e, const struct oscar_eval_method * m,
                                         int32_t n_cand, bool v_per_head, double * k_num, double * k_den,
                                         double * v_num, double * v_den);
    void (*eval_free)(struct oscar_backend_eval * e);

    // OSCAR_OK when the INT2 write path and decode attention cover head_dim, n_head query
    // heads over n_head_kv KV heads and INT2 group size group_size (0: head_dim); else
    // OSCAR_ERR_UNSUPPORTED with a message naming what is missing. NULL: every shape.
    enum oscar_status (*kv_supports)(int32_t head_dim, int32_t n_head, int32_t n_head_kv, int32_t group_size);

    // Page-locks host memory that the backend copies from or to often (the held-out rows of
    // every layer: transfers at the bus's rate), until host_unpin. NULL on the CPU backend.
    // A failure costs only speed (the memory stays pageable).
    enum oscar_status (*host_pin)(void * p, size_t n);
    void (*host_unpin)(void * p);

    // OptR for one layer, rotation/optr.h's contract and result: "cpu" is the reference
    // (lib/rotation/optr.c), "cuda" kernels/optr-device.cu (fp32 GEMMs, fp64 sums, softmax
    // normalisers, expm and Adam; deterministic; agreement with the reference in its header).
    enum oscar_status (*optr_refine_layer)(const struct oscar_optr_layer * in, const struct oscar_optr_params * p,
                                           struct oscar_optr_result * out);
};

// "cpu" (always) or "cuda". Returns OSCAR_ERR_UNSUPPORTED with "CUDA backend not
// compiled in" or "no CUDA device: ..." when CUDA is unavailable. *out is static.
enum oscar_status oscar_backend_get(const char * name, const struct oscar_backend_i ** out);

// Backend instances (registry.c calls these; osc_backend_cuda only exists in CUDA builds).
const struct oscar_backend_i * osc_backend_cpu(void);
enum oscar_status osc_backend_cuda(const struct oscar_backend_i ** out);

#endif
