// int2-quantize.cuh - the INT2 write path on the GPU: rotate (bf16 rows . R in
// fp32), bf16-round, per-row clip, asymmetric min/max quantize and quartered
// pack into a paged INT2 pool (codes + interleaved scale/zero), or store the
// rotated row in the BF16 pool. Used for prefill batches (sort clip) and for
// decode demotion of a page (bisection clip, rows read back from the HP pool).
//
// Bit contract (method.md §8.5, quant.h): with the same fp32 inputs the codes
// and metadata equal oscar_int2_quantize_rows (ASYM scheme): IEEE division
// (__fdiv_rn), explicit __fadd_rn, no FMA contraction in the quantizer; the
// codes use the unrounded fp32 (scale, zero) and only the stored copy is
// rounded (RNE) to fp16 or bf16, as lib/quant does. The rotation is
// y[j] = fma(x[D-1], R[D-1][j], ... fma(x[0], R[0][j], 0)) in ascending k
// (the CPU harness replays that order with fmaf).
// Shapes: D 64, 128, 256 (one kernel instance each), G a power of two in [32, D].
// Refuses other shapes and the Lloyd-Max/SYM schemes.
#ifndef OSCAR_KERNELS_INT2_QUANTIZE_CUH
#define OSCAR_KERNELS_INT2_QUANTIZE_CUH

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "quant/quant.h"
#include "util/error.h"

struct oscar_cuda_int2_write {
    int32_t head_dim;          // D: 64, 128 or 256
    int32_t group_size;        // G: a power of two in [32, D]
    int32_t meta_dtype;        // enum oscar_quant_meta_dtype of the stored (scale, zero): f32, f16, bf16
    int32_t clip_idx;          // oscar_clip_index(ratio, D); -1 disables the clip
    int32_t clip_bisect;       // 1: bisection (flush kernel), 0: exact order statistic
    const uint16_t * x;        // device [n_src, D] bf16 source rows
    const float * rot;         // device [D, D] fp32 (x . R) or NULL (rows already rotated)
    const int64_t * src;       // device [n_rows] source row of x, or NULL (row r)
    const int64_t * dst;       // device [n_rows]: >= 0 INT2 pool row, < 0 BF16 row -1-dst; NULL = row r
    uint8_t * codes;           // device [*, D/4]
    void * meta;               // device [*, 2*D/G]
    uint16_t * hp;             // device [*, D] bf16 (needed only when some dst < 0)
    int64_t n_rows;
};

// OSCAR_OK when the write kernel covers head_dim D and group size G (0: D); else
// OSCAR_ERR_UNSUPPORTED with a message naming the shape and what is built.
enum oscar_status oscar_cuda_int2_write_supports(int32_t head_dim, int32_t group_size);
// Launches on `stream` (a cudaStream_t, NULL = default). Asynchronous.
enum oscar_status oscar_cuda_int2_write(const struct oscar_cuda_int2_write * a, void * stream);

#ifdef __cplusplus
}
#endif
#endif
