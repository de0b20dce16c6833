// cuda-common.cuh - shared helpers for the CUDA kernels: the OSCAR_CUDA_CHECK
// macro (statement, function, file:line and device into the oscar error
// message, then `return` of an enum oscar_status) and small device helpers.
// Never aborts; never uses fast-math intrinsics for quantizer arithmetic.
#ifndef OSCAR_KERNELS_CUDA_COMMON_CUH
#define OSCAR_KERNELS_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "util/error.h"
}

// Records "CUDA error: <msg> in <stmt> (<func> at <file>:<line>, device <n>)".
enum oscar_status osc_cuda_error(cudaError_t e, const char * stmt, const char * func, const char * file, int line);

#define OSCAR_CUDA_CHECK(x)                                                         \
    do {                                                                            \
        cudaError_t osc_cuda_e_ = (x);                                              \
        if (osc_cuda_e_ != cudaSuccess)                                             \
            return osc_cuda_error(osc_cuda_e_, #x, __func__, __FILE__, __LINE__);   \
    } while (0)

// OSCAR_OK when a CUDA device is usable; otherwise OSCAR_ERR_UNSUPPORTED with
// "<what>no CUDA device (<reason>)" (what: a message prefix such as "forward: ").
enum oscar_status osc_cuda_require_device(const char * what);

// After a launch: catches configuration errors (and, with OSCAR_CUDA_SYNC_CHECK
// defined, execution errors too).
#define OSCAR_CUDA_CHECK_LAUNCH() OSCAR_CUDA_CHECK(cudaGetLastError())



// Variant for functions with a single exit: sets `st` and jumps to `out`.
#define OSCAR_CUDA_TRY(x)                                                           \
    do {                                                                            \
        cudaError_t osc_cuda_e_ = (x);                                              \
        if (osc_cuda_e_ != cudaSuccess) {                                           \
            st = osc_cuda_error(osc_cuda_e_, #x, __func__, __FILE__, __LINE__);     \
            goto out;                                                               \
        }                                                                           \
    } while (0)
#endif
