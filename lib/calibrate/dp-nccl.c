// dp-nccl.c - the process group over NCCL (dp.h), with OSCAR_DP=nccl, for GPU
// ranks either started by mpirun (one process per GPU: its node-local rank's,
// dp-device.c; the communicator made by ncclCommInitRank from a unique id that
// rank 0 broadcasts over MPI, so one node or several work the same way; MPI
// stays for the bootstrap and for ending the job, MPI_Abort) or in one process
// (oscar-calibrate --ranks N: one thread per GPU, the N communicators from
// ncclCommInitAll; a failed rank ends the process).
//
// Payloads are host bytes (the stats' fp64 sums live on the host once a layer
// ends): they pass through one device buffer of this rank, grown on demand,
// then ncclSend/ncclRecv in a group (gather, scatter) or ncclBroadcast.
// Errors name the NCCL or CUDA call. NVLink multicast is left off
// (NCCL_NVLS_ENABLE=0 unless the caller set it).
#if defined(OSCAR_USE_NCCL) && defined(OSCAR_USE_MPI) && defined(OSCAR_USE_CUDA)
#include <cuda_runtime_api.h>
#include <mpi.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes" // nccl.h declares f() for f(void)
#include <nccl.h>
#pragma GCC diagnostic pop
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calibrate/dp.h"

struct nccl_group {
    struct osc_dp dp; // first: the ops get this pointer
    struct osc_dp * mpi;   // the bootstrap group under mpirun, NULL for in-process ranks
    atomic_int * open_ranks; // in-process: the group's ranks not yet closed (the last frees the arrays)
    struct osc_dp ** handles; // in-process: [size] the ranks' handles
    ncclComm_t comm;
    cudaStream_t stream;
    char * dev;       // the staging buffer
    size_t dev_cap;
    uint64_t * counts_dev; // [size] for the gather's byte counts
};

static enum oscar_status nccl_fail(ncclResult_t r, const char * call) {
    return osc_error(OSCAR_ERR_IO, "NCCL: %s failed: %s (set NCCL_DEBUG=WARN for more)", call, ncclGetErrorString(r));
}
static enum oscar_status cuda_fail(cudaError_t e, const char * call) {
    return osc_error(OSCAR_ERR_IO, "NCCL engine: %s failed: %s", call, cudaGetErrorString(e));
}
#define NCCL_TRY(call, name)                                                                                        \
    do {                                                                                                            \
        ncclResult_t r_ = (call);                                                                                   \
        if (r_ != ncclSuccess) return nccl_fail(r_, name);                                                          \
    } while (0)
#define CU_TRY(call, name)                                                                                          \
    do {                                                                                                            \
        cudaError_t e_ = (call);                                                                                    \
        if (e_ != cudaSuccess) return cuda_fail(e_, name);                                                          \
    } while (0)

static enum oscar_status stage(struct nccl_group * g, size_t n) {
    if (n <= g->dev_cap) return OSCAR_OK;
    if (g->dev) cudaFree(g->dev), g->dev = NULL, g->dev_cap = 0;
    CU_TRY(cudaMalloc((void **) &g->dev, n), "cudaMalloc (staging buffer)");
    g->dev_cap = n;
    return OSCAR_OK;
}

static enum oscar_status nccl_gather(struct osc_dp * dp, const void * send, size_t n, void ** recv, size_t * counts) {
    struct nccl_group * g = (struct nccl_group *) dp;
    const int P = (int) dp->size, me = (int) dp->rank;
    *recv = NULL;
    uint64_t mine = n, * all = calloc((size_t) P, sizeof(uint64_t));
    if (!all) return osc_error(OSCAR_ERR_NOMEM, "gather: out of memory");
    enum oscar_status st = OSCAR_OK;
    cudaError_t e = cudaMemcpyAsync(g->counts_dev + me, &mine, sizeof mine, cudaMemcpyHostToDevice, g->stream);
    ncclResult_t r = e == cudaSuccess ? ncclAllGather(g->counts_dev + me, g->counts_dev, 1, ncclUint64, g->comm,
                                                      g->stream) : ncclSuccess;
    if (e == cudaSuccess && r == ncclSuccess)
        e = cudaMemcpyAsync(all, g->counts_dev, (size_t) P * sizeof(uint64_t), cudaMemcpyDeviceToHost, g->stream);
    if (e == cudaSuccess && r == ncclSuccess) e = cudaStreamSynchronize(g->stream);
    st = r != ncclSuccess ? nccl_fail(r, "ncclAllGather (byte counts)") : e != cudaSuccess ? cuda_fail(e, "cudaMemcpyAsync (byte counts)") : OSCAR_OK;
    size_t total = 0;
    for (int i = 0; i < P; i++) total += (size_t) all[i];
    if (st == OSCAR_OK) st = stage(g, me == 0 ? total : n);
    if (st == OSCAR_OK && me == 0 && !(*recv = malloc(total ? total : 1)))
        st = osc_error(OSCAR_ERR_NOMEM, "gather: out of memory for %zu bytes", total);
    if (st == OSCAR_OK && me != 0 && n)
        e = cudaMemcpyAsync(g->dev, send, n, cudaMemcpyHostToDevice, g->stream);
    if (st == OSCAR_OK && e == cudaSuccess) {
        r = ncclGroupStart();
        size_t off = all[0];
        for (int i = 1; r == ncclSuccess && i < P; off += (size_t) all[i], i++) {
            if (me == 0 && all[i]) r = ncclRecv(g->dev + off, (size_t) all[i], ncclChar, i, g->comm, g->stream);
            else if (me == i && n) r = ncclSend(g->dev, n, ncclChar, 0, g->comm, g->stream);
        }
        ncclResult_t r2 = ncclGroupEnd();
        if (r == ncclSuccess) r = r2;
        if (r != ncclSuccess) st = nccl_fail(r, "ncclSend/ncclRecv (gather)");
    } else if (st == OSCAR_OK) st = cuda_fail(e, "cudaMemcpyAsync (gather)");
    if (st == OSCAR_OK && me == 0 && total > all[0]) {
        e = cudaMemcpyAsync((char *) *recv + all[0], g->dev + all[0], total - all[0], cudaMemcpyDeviceToHost, g->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(g->stream);
        if (e != cudaSuccess) st = cuda_fail(e, "cudaMemcpyAsync (gather)");
    } else if (st == OSCAR_OK && (e = cudaStreamSynchronize(g->stream)) != cudaSuccess)
        st = cuda_fail(e, "cudaStreamSynchronize (gather)");
    if (st == OSCAR_OK && me == 0) {
        if (n) memcpy(*recv, send, n); // rank 0's own bytes need no trip
        for (int i = 0; i < P; i++) counts[i] = (size_t) all[i];
    }
    free(all);
    if (st != OSCAR_OK) free(*recv), *recv = NULL;
    return st;
}

static enum oscar_status nccl_bcast(struct osc_dp * dp, void * buf, size_t n) {
    struct nccl_group * g = (struct nccl_group *) dp;
    if (!n) return OSCAR_OK;
    enum oscar_status st = stage(g, n);
    if (st != OSCAR_OK) return st;
    if (dp->rank == 0) CU_TRY(cudaMemcpyAsync(g->dev, buf, n, cudaMemcpyHostToDevice, g->stream), "cudaMemcpyAsync (broadcast)");
    NCCL_TRY(ncclBroadcast(g->dev, g->dev, n, ncclChar, 0, g->comm, g->stream), "ncclBroadcast");
    if (dp->rank != 0) CU_TRY(cudaMemcpyAsync(buf, g->dev, n, cudaMemcpyDeviceToHost, g->stream), "cudaMemcpyAsync (broadcast)");
    CU_TRY(cudaStreamSynchronize(g->stream), "cudaStreamSynchronize (broadcast)");
    return OSCAR_OK;
}

static enum oscar_status nccl_scatter(struct osc_dp * dp, const void * send, const size_t * counts, void * recv,
                                      size_t n) {
    struct nccl_group * g = (struct nccl_group *) dp;
    const int P = (int) dp->size, me = (int) dp->rank;
    size_t total = 0;
    for (int i = 0; me == 0 && i < P; i++) total += counts[i];
    if (me == 0 && counts[0] != n) return osc_error(OSCAR_ERR_INVALID, "scatter: %zu bytes for rank 0, %zu expected", counts[0], n);
    enum oscar_status st = stage(g, me == 0 ? total : n);
    if (st != OSCAR_OK) return st;
    if (me == 0 && total > n)
        CU_TRY(cudaMemcpyAsync(g->dev + n, (const char *) send + n, total - n, cudaMemcpyHostToDevice, g->stream),
               "cudaMemcpyAsync (scatter)");
    NCCL_TRY(ncclGroupStart(), "ncclGroupStart");
    ncclResult_t r = ncclSuccess;
    size_t off = me == 0 ? counts[0] : 0;
    for (int i = 1; r == ncclSuccess && i < P; i++) {
        if (me == 0 && counts[i]) r = ncclSend(g->dev + off, counts[i], ncclChar, i, g->comm, g->stream);
        else if (me == i && n) r = ncclRecv(g->dev, n, ncclChar, 0, g->comm, g->stream);
        if (me == 0) off += counts[i];
    }
    ncclResult_t r2 = ncclGroupEnd();
    if (r == ncclSuccess) r = r2;
    if (r != ncclSuccess) return nccl_fail(r, "ncclSend/ncclRecv (scatter)");
    if (me != 0 && n) CU_TRY(cudaMemcpyAsync(recv, g->dev, n, cudaMemcpyDeviceToHost, g->stream), "cudaMemcpyAsync (scatter)");
    CU_TRY(cudaStreamSynchronize(g->stream), "cudaStreamSynchronize (scatter)");
    if (me == 0 && n && recv != send) memmove(recv, send, n);
    return OSCAR_OK;
}

static void nccl_abort(struct osc_dp * dp, int code) {
    struct nccl_group * g = (struct nccl_group *) dp;
    if (g->comm) ncclCommAbort(g->comm), g->comm = NULL; // peers blocked in a collective see it fail
    if (g->mpi) g->mpi->ops->abort(g->mpi, code);
    fflush(NULL);
    _exit(code); // in-process ranks: the whole process
}

static void nccl_close(struct osc_dp * dp) {
    struct nccl_group * g = (struct nccl_group *) dp;
    if (g->comm) ncclCommDestroy(g->comm), g->comm = NULL;
    if (g->dev) cudaFree(g->dev), g->dev = NULL;
    if (g->counts_dev) cudaFree(g->counts_dev), g->counts_dev = NULL;
    if (g->stream) cudaStreamDestroy(g->stream), g->stream = NULL;
    if (g->mpi) g->mpi->ops->close(g->mpi);
    else if (atomic_fetch_sub(g->open_ranks, 1) == 1) { // the last rank frees the group's arrays
        struct osc_dp ** handles = g->handles;
        free(g->open_ranks), free(g - g->dp.rank), free(handles);
    }
}

static const struct osc_dp_ops nccl_ops = {nccl_gather, nccl_bcast, nccl_scatter, nccl_abort, nccl_close};
static struct nccl_group group = {.dp = {.engine = "nccl", .ops = &nccl_ops}};

// Rank r's stream and byte-count buffer, on the device that is current.
static enum oscar_status group_buffers(struct nccl_group * g) {
    CU_TRY(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    CU_TRY(cudaMalloc((void **) &g->counts_dev, (size_t) g->dp.size * sizeof(uint64_t)), "cudaMalloc (byte counts)");
    return OSCAR_OK;
}

enum oscar_status osc_dp_open_nccl_ranks(int32_t n, struct osc_dp *** ranks) {
    *ranks = NULL;
    int devices = 0;
    CU_TRY(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    if (n > devices)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "OSCAR_DP=nccl: %d ranks need %d GPUs, this process sees %d (NCCL "
                         "takes one GPU per rank; the default threads engine shares them)", (int) n, (int) n, devices);
    setenv("NCCL_NVLS_ENABLE", "0", 0); // NVLink multicast off unless asked for
    struct nccl_group * g = calloc((size_t) n, sizeof *g);
    struct osc_dp ** handles = calloc((size_t) n, sizeof *handles);
    ncclComm_t * comms = calloc((size_t) n, sizeof *comms);
    atomic_int * open_ranks = malloc(sizeof *open_ranks);
    if (!g || !handles || !comms || !open_ranks) {
        free(g), free(handles), free(comms), free(open_ranks);
        return osc_error(OSCAR_ERR_NOMEM, "OSCAR_DP=nccl: out of memory");
    }
    atomic_init(open_ranks, n);
    ncclResult_t r = ncclCommInitAll(comms, (int) n, NULL); // GPUs 0 .. n-1
    enum oscar_status st = r == ncclSuccess ? OSCAR_OK : nccl_fail(r, "ncclCommInitAll");
    for (int32_t k = 0; st == OSCAR_OK && k < n; k++) {
        g[k] = (struct nccl_group){.dp = {.rank = k, .size = n, .engine = "nccl", .ops = &nccl_ops},
                                   .open_ranks = open_ranks, .handles = handles, .comm = comms[k]};
        handles[k] = &g[k].dp;
        cudaError_t e = cudaSetDevice((int) k);
        st = e == cudaSuccess ? group_buffers(&g[k]) : cuda_fail(e, "cudaSetDevice");
    }
    free(comms);
    if (st != OSCAR_OK) return st; // the process exits: nothing was started
    *ranks = handles;
    return OSCAR_OK;
}

enum oscar_status osc_dp_open_nccl(struct osc_dp * mpi, struct osc_dp ** out) {
    group.mpi = mpi, group.dp.rank = mpi->rank, group.dp.size = mpi->size;
    int dev = -1;
    enum oscar_status st = osc_dp_use_local_gpu(&group.dp, &dev);
    if (st != OSCAR_OK) return st;
    setenv("NCCL_NVLS_ENABLE", "0", 0); // NVLink multicast off unless asked for
    ncclUniqueId id;
    if (mpi->rank == 0) NCCL_TRY(ncclGetUniqueId(&id), "ncclGetUniqueId");
    if ((st = mpi->ops->bcast(mpi, &id, sizeof id)) != OSCAR_OK) return st;
    if ((st = group_buffers(&group)) != OSCAR_OK) return st;
    NCCL_TRY(ncclCommInitRank(&group.comm, (int) mpi->size, id, (int) mpi->rank), "ncclCommInitRank");
    *out = &group.dp;
    return OSCAR_OK;
}
#else
typedef int osc_dp_nccl_not_built; // ISO C wants a translation unit to declare something
#endif
