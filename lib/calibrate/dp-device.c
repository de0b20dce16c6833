// dp-device.c - the GPU of a data-parallel rank (dp.h): one rank drives one
// device, the node-local rank (Open MPI's OMPI_COMM_WORLD_LOCAL_RANK) modulo
// the devices this process sees, so `mpirun -np 8` on an 8-GPU node puts one
// rank on each GPU and more ranks than GPUs share them round-robin.
#include <stdlib.h>

#include "calibrate/dp.h"
#include "util/log.h"

#ifdef OSCAR_USE_CUDA
#include <cuda_runtime_api.h>

enum oscar_status osc_dp_use_local_gpu(const struct osc_dp * dp, int * device) {
    const char * lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    const int local = lr ? atoi(lr) : (int) dp->rank;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "rank %d of %d: no CUDA device (%s)", (int) dp->rank, (int) dp->size,
                         e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    *device = (local < 0 ? 0 : local) % n;
    if ((e = cudaSetDevice(*device)) != cudaSuccess)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "rank %d of %d: cudaSetDevice(%d) failed: %s", (int) dp->rank,
                         (int) dp->size, *device, cudaGetErrorString(e));
    osc_info("rank %d of %d (%s): CUDA device %d of %d (node-local rank %d)", (int) dp->rank, (int) dp->size,
             dp->engine, *device, n, local);
    return OSCAR_OK;
}
#else
enum oscar_status osc_dp_use_local_gpu(const struct osc_dp * dp, int * device) {
    *device = -1;
    return osc_error(OSCAR_ERR_UNSUPPORTED, "rank %d of %d: this build has no CUDA (make CUDA=1)", (int) dp->rank,
                     (int) dp->size);
}
#endif
