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

// Status checks for libraries whose calls return a status code (CUDA runtime, cuBLAS):
// a code other than `ok` becomes an oscar error through report(code, text, __func__,
// __FILE__, __LINE__) and is returned (CHECK) or stored in `st` with a jump to `out` (TRY,
// for functions with a single exit). text is the call as written.
#define OSC_STATUS_CHECK(type, ok, report, call, text)                              \
    do {                                                                            \
        type osc_status_ = (call);                                                  \
        if (osc_status_ != (ok)) return report(osc_status_, text, __func__, __FILE__, __LINE__); \
    } while (0)
#define OSC_STATUS_TRY(type, ok, report, call, text)                                \
    do {                                                                            \
        type osc_status_ = (call);                                                  \
        if (osc_status_ != (ok)) {                                                  \
            st = report(osc_status_, text, __func__, __FILE__, __LINE__);           \
            goto out;                                                               \
        }                                                                           \
    } while (0)

#define OSCAR_CUDA_CHECK(x) OSC_STATUS_CHECK(cudaError_t, cudaSuccess, osc_cuda_error, (x), #x)
#define OSCAR_CUDA_TRY(x)   OSC_STATUS_TRY(cudaError_t, cudaSuccess, osc_cuda_error, (x), #x)

// OSCAR_OK when a CUDA device is usable; otherwise OSCAR_ERR_UNSUPPORTED with
// "<what>no CUDA device (<reason>)" (what: a message prefix such as "forward: ").
enum oscar_status osc_cuda_require_device(const char * what);

// After a launch: catches configuration errors (and, with OSCAR_CUDA_SYNC_CHECK
// defined, execution errors too).
#define OSCAR_CUDA_CHECK_LAUNCH() OSCAR_CUDA_CHECK(cudaGetLastError())

#endif
