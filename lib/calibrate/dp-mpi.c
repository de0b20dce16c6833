// dp-mpi.c - the process group over MPI (dp.h), for ranks started by mpirun.
// Errors return (MPI_ERRORS_RETURN) and become OSCAR_ERR_IO naming the call;
// payloads go as bytes, refused beyond INT_MAX per rank (MPI's int counts).
#ifdef OSCAR_USE_MPI
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>

#include "calibrate/dp.h"

static enum oscar_status mpi_fail(int rc, const char * call) {
    char text[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, text, &n) != MPI_SUCCESS) n = 0;
    text[n] = '\0';
    return osc_error(OSCAR_ERR_IO, "MPI: %s failed: %s", call, n ? text : "unknown error");
}
#define MPI_TRY(call, name)                                                                                         \
    do {                                                                                                            \
        int rc_ = (call);                                                                                           \
        if (rc_ != MPI_SUCCESS) return mpi_fail(rc_, name);                                                         \
    } while (0)

static enum oscar_status check_size(size_t n, const char * what) {
    if (n > INT_MAX) return osc_error(OSCAR_ERR_UNSUPPORTED, "MPI: %s of %zu bytes (more than %d per rank)", what, n,
                                      INT_MAX);
    return OSCAR_OK;
}

static enum oscar_status mpi_gather(struct osc_dp * dp, const void * send, size_t n, void ** recv, size_t * counts) {
    *recv = NULL;
    enum oscar_status st = check_size(n, "gather");
    if (st != OSCAR_OK) return st;
    int mine = (int) n, * cnt = NULL, * disp = NULL;
    if (dp->rank == 0) {
        cnt = calloc((size_t) dp->size, sizeof(int)), disp = calloc((size_t) dp->size, sizeof(int));
        if (!cnt || !disp) return free(cnt), free(disp), osc_error(OSCAR_ERR_NOMEM, "gather: out of memory");
    }
    int rc = MPI_Gather(&mine, 1, MPI_INT, cnt, 1, MPI_INT, 0, MPI_COMM_WORLD);
    size_t total = 0;
    if (rc == MPI_SUCCESS && dp->rank == 0) {
        for (int r = 0; r < dp->size; r++) {
            if (total + (size_t) cnt[r] > INT_MAX) {
                free(cnt), free(disp);
                return osc_error(OSCAR_ERR_UNSUPPORTED, "MPI: gather of more than %d bytes in all", INT_MAX);
            }
            disp[r] = (int) total, counts[r] = (size_t) cnt[r], total += (size_t) cnt[r];
        }
        if (!(*recv = malloc(total ? total : 1))) {
            free(cnt), free(disp);
            return osc_error(OSCAR_ERR_NOMEM, "gather: out of memory for %zu bytes", total);
        }
    }
    if (rc == MPI_SUCCESS) rc = MPI_Gatherv(send, mine, MPI_BYTE, *recv, cnt, disp, MPI_BYTE, 0, MPI_COMM_WORLD);
    free(cnt), free(disp);
    if (rc != MPI_SUCCESS) {
        free(*recv), *recv = NULL;
        return mpi_fail(rc, "MPI_Gatherv");
    }
    return OSCAR_OK;
}

static enum oscar_status mpi_bcast(struct osc_dp * dp, void * buf, size_t n) {
    (void) dp;
    enum oscar_status st = check_size(n, "broadcast");
    if (st != OSCAR_OK) return st;
    MPI_TRY(MPI_Bcast(buf, (int) n, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
    return OSCAR_OK;
}

static enum oscar_status mpi_scatter(struct osc_dp * dp, const void * send, const size_t * counts, void * recv,
                                     size_t n) {
    enum oscar_status st = check_size(n, "scatter");
    if (st != OSCAR_OK) return st;
    int * cnt = NULL, * disp = NULL;
    if (dp->rank == 0) {
        cnt = calloc((size_t) dp->size, sizeof(int)), disp = calloc((size_t) dp->size, sizeof(int));
        if (!cnt || !disp) return free(cnt), free(disp), osc_error(OSCAR_ERR_NOMEM, "scatter: out of memory");
        size_t total = 0;
        for (int r = 0; r < dp->size; r++) {
            if (total + counts[r] > INT_MAX) {
                free(cnt), free(disp);
                return osc_error(OSCAR_ERR_UNSUPPORTED, "MPI: scatter of more than %d bytes in all", INT_MAX);
            }
            cnt[r] = (int) counts[r], disp[r] = (int) total, total += counts[r];
        }
    }
    int rc = MPI_Scatterv(send, cnt, disp, MPI_BYTE, recv, (int) n, MPI_BYTE, 0, MPI_COMM_WORLD);
    free(cnt), free(disp);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Scatterv");
    return OSCAR_OK;
}

static void mpi_abort(struct osc_dp * dp, int code) {
    (void) dp;
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code); // not reached
}

static void mpi_close(struct osc_dp * dp) {
    (void) dp;
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
}

static const struct osc_dp_ops mpi_ops = {mpi_gather, mpi_bcast, mpi_scatter, mpi_abort, mpi_close};
static struct osc_dp group = {.engine = "mpi", .ops = &mpi_ops};

enum oscar_status osc_dp_open_mpi(int * argc, char *** argv, struct osc_dp ** out) {
    int rank = 0, size = 1;
    MPI_TRY(MPI_Init(argc, argv), "MPI_Init");
    MPI_TRY(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    MPI_TRY(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
    MPI_TRY(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
    group.rank = rank, group.size = size;
    *out = &group;
    return OSCAR_OK;
}
#else
typedef int osc_dp_mpi_not_built; // ISO C wants a translation unit to declare something
#endif
