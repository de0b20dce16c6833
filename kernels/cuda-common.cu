// cuda-common.cu - the CUDA and cuBLAS error reporters behind OSCAR_CUDA_CHECK and
// OSCAR_CUBLAS_CHECK.
#include "kernels/cublas-check.cuh"
#include "kernels/cuda-common.cuh"

enum oscar_status osc_cuda_error(cudaError_t e, const char * stmt, const char * func, const char * file, int line) {
    int dev = -1;
    cudaGetDevice(&dev);
    cudaGetLastError();   // clear a sticky-free error so the next call starts clean
    enum oscar_status s = e == cudaErrorMemoryAllocation ? OSCAR_ERR_NOMEM : OSCAR_ERR_UNSUPPORTED;
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
        return osc_error(s, "no CUDA device (%s) in %s (%s at %s:%d)", cudaGetErrorString(e), stmt, func, file, line);
    return osc_error(s, "CUDA error: %s in %s (%s at %s:%d, device %d)", cudaGetErrorString(e), stmt, func, file,
                     line, dev);
}

enum oscar_status osc_cublas_error(cublasStatus_t s, const char * stmt, const char * func, const char * file, int line) {
    return osc_error(s == CUBLAS_STATUS_ALLOC_FAILED ? OSCAR_ERR_NOMEM : OSCAR_ERR_UNSUPPORTED,
                     "cuBLAS error: %s in %s (%s at %s:%d)", cublasGetStatusString(s), stmt, func, file, line);
}

enum oscar_status osc_cuda_require_device(const char * what) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError(); // clear the error so later calls start clean
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%sno CUDA device (%s)", what,
                         e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    return OSCAR_OK;
}
