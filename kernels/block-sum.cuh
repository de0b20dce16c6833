// block-sum.cuh - fp64 block-wide sum or max in a fixed order (the layer evaluator's
// deterministic reductions: layer-eval.cu, eval-quad.cu).
#ifndef OSCAR_KERNELS_BLOCK_SUM_CUH
#define OSCAR_KERNELS_BLOCK_SUM_CUH

// Every thread returns the same value: each warp reduces by butterfly, then lane 0 of each
// warp is combined in warp order. red holds blockDim.x / 32 doubles.
static __device__ double block_reduce(double v, double * red, bool is_max) {
    for (int o = 16; o > 0; o >>= 1) {
        const double w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmax(v, w) : v + w;
    }
    __syncthreads();   // red may still be read by the previous call
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    double r = is_max ? -INFINITY : 0.0;
    for (int i = 0; i < (int) (blockDim.x >> 5); i++) r = is_max ? fmax(r, red[i]) : r + red[i];
    return r;
}

#endif
