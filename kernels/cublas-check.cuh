// cublas-check.cuh - cuBLAS status checks in the style of OSCAR_CUDA_CHECK: the
// statement, function and file:line go into the oscar error message.
#ifndef OSCAR_KERNELS_CUBLAS_CHECK_CUH
#define OSCAR_KERNELS_CUBLAS_CHECK_CUH

#include <cublas_v2.h>

#include "kernels/cuda-common.cuh"

// Records "cuBLAS error: <status> in <stmt> (<func> at <file>:<line>)"; an allocation
// failure maps to OSCAR_ERR_NOMEM.
enum oscar_status osc_cublas_error(cublasStatus_t s, const char * stmt, const char * func, const char * file, int line);

#define OSCAR_CUBLAS_CHECK(x)                                                       \
    do {                                                                            \
        cublasStatus_t osc_blas_s_ = (x);                                           \
        if (osc_blas_s_ != CUBLAS_STATUS_SUCCESS)                                   \
            return osc_cublas_error(osc_blas_s_, #x, __func__, __FILE__, __LINE__); \
    } while (0)

// Variant for functions with a single exit: sets `st` and jumps to `out`.
#define OSCAR_CUBLAS_TRY(x)                                                         \
    do {                                                                            \
        cublasStatus_t osc_blas_s_ = (x);                                           \
        if (osc_blas_s_ != CUBLAS_STATUS_SUCCESS) {                                 \
            st = osc_cublas_error(osc_blas_s_, #x, __func__, __FILE__, __LINE__);   \
            goto out;                                                               \
        }                                                                           \
    } while (0)
#endif
