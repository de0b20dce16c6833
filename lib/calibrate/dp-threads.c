// dp-threads.c - the process group as threads of one process (dp.h): the ranks
// of `oscar-calibrate --ranks N`, each a thread running the whole calibration
// with its share of the batches, as mpirun's processes do. The collectives
// copy host bytes between the ranks' buffers: every rank publishes its buffer
// in a slot, all meet at a barrier, the readers copy, all meet again (so no
// buffer is reused or freed while another rank reads it). Rank order and the
// bytes are those of the MPI engine, so a run gives the artifact `mpirun -np N`
// gives. A failed rank ends the process (_exit): the other ranks may be waiting
// at a barrier, and nothing may be written after a failure.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calibrate/dp.h"

struct thread_group;
struct thread_rank {
    struct osc_dp dp; // first: the ops get this pointer
    struct thread_group * g;
};

struct thread_group {
    pthread_barrier_t barrier;
    atomic_int open_ranks;      // the last rank to close frees the group
    const void ** buf;          // [size] what each rank published for the current collective
    size_t * len;               // [size]
    const size_t * counts;      // the root's (scatter)
    struct thread_rank * ranks; // [size]
    struct osc_dp ** handles;   // [size] &ranks[r].dp
};

static void meet(struct thread_group * g) { pthread_barrier_wait(&g->barrier); }
static struct thread_group * group_of(struct osc_dp * dp) { return ((struct thread_rank *) dp)->g; }

static enum oscar_status threads_gather(struct osc_dp * dp, const void * send, size_t n, void ** recv,
                                        size_t * counts) {
    struct thread_group * g = group_of(dp);
    *recv = NULL;
    g->buf[dp->rank] = send, g->len[dp->rank] = n;
    meet(g);
    enum oscar_status st = OSCAR_OK;
    if (dp->rank == 0) {
        size_t total = 0;
        for (int32_t r = 0; r < dp->size; r++) total += g->len[r];
        char * all = malloc(total ? total : 1);
        if (!all) st = osc_error(OSCAR_ERR_NOMEM, "gather: out of memory for %zu bytes", total);
        size_t off = 0;
        for (int32_t r = 0; all && r < dp->size; off += g->len[r], r++) {
            if (g->len[r]) memcpy(all + off, g->buf[r], g->len[r]);
            counts[r] = g->len[r];
        }
        *recv = all;
    }
    meet(g);
    return st;
}

static enum oscar_status threads_bcast(struct osc_dp * dp, void * buf, size_t n) {
    struct thread_group * g = group_of(dp);
    if (dp->rank == 0) g->buf[0] = buf, g->len[0] = n;
    meet(g);
    enum oscar_status st = OSCAR_OK;
    if (dp->rank != 0 && g->len[0] != n)
        st = osc_error(OSCAR_ERR_INVALID, "broadcast: rank %d expected %zu bytes, rank 0 sent %zu", (int) dp->rank, n,
                       g->len[0]);
    else if (dp->rank != 0 && n)
        memcpy(buf, g->buf[0], n);
    meet(g);
    return st;
}

static enum oscar_status threads_scatter(struct osc_dp * dp, const void * send, const size_t * counts, void * recv,
                                         size_t n) {
    struct thread_group * g = group_of(dp);
    if (dp->rank == 0) g->buf[0] = send, g->counts = counts;
    meet(g);
    size_t off = 0;
    for (int32_t r = 0; r < dp->rank; r++) off += g->counts[r];
    enum oscar_status st = OSCAR_OK;
    if (g->counts[dp->rank] != n)
        st = osc_error(OSCAR_ERR_INVALID, "scatter: rank %d expected %zu bytes, rank 0 sent %zu", (int) dp->rank, n,
                       g->counts[dp->rank]);
    else if (n && recv != (const char *) g->buf[0] + off)
        memmove(recv, (const char *) g->buf[0] + off, n);
    meet(g);
    return st;
}

static void threads_abort(struct osc_dp * dp, int code) {
    (void) dp;
    fflush(NULL);
    _exit(code); // the whole process: the other ranks may be waiting at a barrier
}

static void group_free(struct thread_group * g) {
    pthread_barrier_destroy(&g->barrier);
    free(g->buf), free(g->len), free(g->ranks), free(g->handles);
    free(g);
}

static void threads_close(struct osc_dp * dp) {
    struct thread_group * g = group_of(dp);
    if (atomic_fetch_sub(&g->open_ranks, 1) == 1) group_free(g);
}

static const struct osc_dp_ops threads_ops = {threads_gather, threads_bcast, threads_scatter, threads_abort,
                                              threads_close};

enum oscar_status osc_dp_open_threads(int32_t n, struct osc_dp *** ranks) {
    *ranks = NULL;
    if (n < 1) return osc_error(OSCAR_ERR_INVALID, "--ranks %d: at least 1", (int) n);
    struct thread_group * g = calloc(1, sizeof *g);
    if (!g) return osc_error(OSCAR_ERR_NOMEM, "--ranks: out of memory");
    g->buf = calloc((size_t) n, sizeof *g->buf), g->len = calloc((size_t) n, sizeof *g->len);
    g->ranks = calloc((size_t) n, sizeof *g->ranks), g->handles = calloc((size_t) n, sizeof *g->handles);
    if (!g->buf || !g->len || !g->ranks || !g->handles || pthread_barrier_init(&g->barrier, NULL, (unsigned) n) != 0) {
        free(g->buf), free(g->len), free(g->ranks), free(g->handles), free(g);
        return osc_error(OSCAR_ERR_NOMEM, "--ranks %d: out of memory", (int) n);
    }
    atomic_init(&g->open_ranks, n);
    for (int32_t r = 0; r < n; r++) {
        g->ranks[r] = (struct thread_rank){.dp = {.rank = r, .size = n, .engine = "threads", .ops = &threads_ops},
                                           .g = g};
        g->handles[r] = &g->ranks[r].dp;
    }
    *ranks = g->handles;
    return OSCAR_OK;
}
