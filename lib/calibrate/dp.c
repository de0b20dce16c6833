// dp.c - the process group (dp.h): opening it, the one-process engine, the
// contiguous share of a rank.
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate/dp.h"

static enum oscar_status single_gather(struct osc_dp * dp, const void * send, size_t n, void ** recv,
                                       size_t * counts) {
    (void) dp;
    *recv = malloc(n ? n : 1);
    if (!*recv) return osc_error(OSCAR_ERR_NOMEM, "gather: out of memory for %zu bytes", n);
    if (n) memcpy(*recv, send, n);
    counts[0] = n;
    return OSCAR_OK;
}

static enum oscar_status single_bcast(struct osc_dp * dp, void * buf, size_t n) {
    (void) dp, (void) buf, (void) n;
    return OSCAR_OK;
}

static enum oscar_status single_scatter(struct osc_dp * dp, const void * send, const size_t * counts, void * recv,
                                        size_t n) {
    (void) dp;
    if (counts[0] != n) return osc_error(OSCAR_ERR_INVALID, "scatter: %zu bytes sent, %zu expected", counts[0], n);
    if (n && recv != send) memmove(recv, send, n);
    return OSCAR_OK;
}

static void single_abort(struct osc_dp * dp, int code) {
    (void) dp;
    exit(code);
}

static void single_close(struct osc_dp * dp) { (void) dp; }

static const struct osc_dp_ops single_ops = {single_gather, single_bcast, single_scatter, single_abort, single_close};
static struct osc_dp single = {.rank = 0, .size = 1, .engine = "single", .ops = &single_ops};

struct osc_dp * osc_dp_single(void) { return &single; }

enum oscar_status osc_dp_open(int * argc, char *** argv, struct osc_dp ** out) {
    *out = &single;
    const char * n = getenv("OMPI_COMM_WORLD_SIZE");
    const char * eng = getenv("OSCAR_DP");
    const bool nccl = eng && strcmp(eng, "nccl") == 0;
    if (eng && *eng && !nccl && strcmp(eng, "mpi") != 0)
        return osc_error(OSCAR_ERR_INVALID, "OSCAR_DP=%s: the engines are mpi (the default) and nccl", eng);
#ifndef OSCAR_USE_NCCL
    if (n && nccl) return osc_error(OSCAR_ERR_UNSUPPORTED, "OSCAR_DP=nccl, but this build has no NCCL "
                                    "(make CUDA=1 NCCL=1 MPI=1)");
#endif
#ifdef OSCAR_USE_MPI
    if (!n) return OSCAR_OK;
    enum oscar_status st = osc_dp_open_mpi(argc, argv, out);
#ifdef OSCAR_USE_NCCL
    if (st == OSCAR_OK && nccl) {
        struct osc_dp * mpi = *out;
        if ((st = osc_dp_open_nccl(mpi, out)) != OSCAR_OK) { // every rank fails alike or the job ends
            *out = mpi;
            fprintf(stderr, "oscar-calibrate: %s\n", oscar_last_error()); // it names the rank
            mpi->ops->abort(mpi, 1);
        }
    }
#endif
    return st;
#else
    (void) argc, (void) argv;
    if (n && atoi(n) > 1)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "started by mpirun with %s ranks, but this build has no MPI "
                         "(install libopenmpi-dev and rebuild, or make MPI=1)", n);
#endif
    return OSCAR_OK;
}

enum oscar_status osc_dp_open_ranks(int32_t n, bool cuda, struct osc_dp *** ranks) {
    *ranks = NULL;
    const char * eng = getenv("OSCAR_DP");
    if (!eng || !*eng || strcmp(eng, "mpi") == 0) return osc_dp_open_threads(n, ranks);
    if (strcmp(eng, "nccl") != 0)
        return osc_error(OSCAR_ERR_INVALID, "OSCAR_DP=%s: the engines are mpi (the default) and nccl", eng);
    if (!cuda) return osc_error(OSCAR_ERR_INVALID, "OSCAR_DP=nccl: NCCL's ranks are GPUs (--device cuda)");
#ifdef OSCAR_USE_NCCL
    return osc_dp_open_nccl_ranks(n, ranks);
#else
    return osc_error(OSCAR_ERR_UNSUPPORTED, "OSCAR_DP=nccl, but this build has no NCCL (make CUDA=1 NCCL=1 MPI=1)");
#endif
}

void osc_dp_close(struct osc_dp * dp) {
    if (dp) dp->ops->close(dp);
}

void osc_dp_share(const struct osc_dp * dp, int32_t rank, int64_t n, int64_t * b0, int64_t * b1) {
    *b0 = n * rank / dp->size;
    *b1 = n * (rank + 1) / dp->size;
}

enum oscar_status osc_dp_gather_shares(struct osc_dp * dp, int64_t n, size_t item, const void * mine, void * all) {
    int64_t b0, b1;
    osc_dp_share(dp, dp->rank, n, &b0, &b1);
    size_t * counts = calloc((size_t) dp->size, sizeof(size_t));
    if (!counts) return osc_error(OSCAR_ERR_NOMEM, "gather of shares: out of memory");
    void * got = NULL;
    enum oscar_status st = dp->ops->gather(dp, mine, (size_t) (b1 - b0) * item, &got, counts);
    size_t off = 0;   // rank r's items arrive after ranks 0 .. r-1's and go to [r0, r1)
    for (int32_t r = 0; st == OSCAR_OK && dp->rank == 0 && r < dp->size; r++) {
        int64_t r0, r1;
        osc_dp_share(dp, r, n, &r0, &r1);
        if (counts[r] != (size_t) (r1 - r0) * item) {
            st = osc_error(OSCAR_ERR_IO, "gather of shares: rank %d sent %zu bytes, its %lld items are %zu", (int) r,
                           counts[r], (long long) (r1 - r0), (size_t) (r1 - r0) * item);
            break;
        }
        if (counts[r]) memcpy((char *) all + (size_t) r0 * item, (const char *) got + off, counts[r]);
        off += counts[r];
    }
    free(got), free(counts);
    return st;
}

enum oscar_status osc_dp_scatter_shares(struct osc_dp * dp, int64_t n, size_t item, const void * all, void * mine) {
    int64_t b0, b1;
    osc_dp_share(dp, dp->rank, n, &b0, &b1);
    size_t * counts = calloc((size_t) dp->size, sizeof(size_t));
    if (!counts) return osc_error(OSCAR_ERR_NOMEM, "scatter of shares: out of memory");
    for (int32_t r = 0; r < dp->size; r++) {   // rank r's items [r0, r1) are back to back in all
        int64_t r0, r1;
        osc_dp_share(dp, r, n, &r0, &r1);
        counts[r] = (size_t) (r1 - r0) * item;
    }
    enum oscar_status st = dp->ops->scatter(dp, all, counts, mine, (size_t) (b1 - b0) * item);
    free(counts);
    return st;
}
