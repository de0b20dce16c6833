// cublas-check.cuh - cuBLAS status checks, the same as OSCAR_CUDA_CHECK / _TRY: the
// statement, function and file:line go into the oscar error message.
#ifndef OSCAR_KERNELS_CUBLAS_CHECK_CUH
#define OSCAR_KERNELS_CUBLAS_CHECK_CUH

#include <cublas_v2.h>

#include "kernels/cuda-common.cuh"

// Records "cuBLAS error: <status> in <stmt> (<func> at <file>:<line>)"; an allocation
// failure maps to OSCAR_ERR_NOMEM.
enum oscar_status osc_cublas_error(cublasStatus_t s, const char * stmt, const char * func, const char * file, int line);

#define OSCAR_CUBLAS_CHECK(x) OSC_STATUS_CHECK(cublasStatus_t, CUBLAS_STATUS_SUCCESS, osc_cublas_error, (x), #x)
#define OSCAR_CUBLAS_TRY(x)   OSC_STATUS_TRY(cublasStatus_t, CUBLAS_STATUS_SUCCESS, osc_cublas_error, (x), #x)
#endif
