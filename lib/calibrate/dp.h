// dp.h - the process group of a data-parallel calibration pass: who this
// rank is (rank of size) and the three collectives the layer-major pass needs,
// behind one small table. Implementations: one process (dp.c, every call a
// copy or a no-op); MPI (dp-mpi.c, compiled with MPI=1 or when `make` finds
// Open MPI; used when the process was started by mpirun); NCCL (dp-nccl.c,
// over MPI's processes or over in-process ranks); threads of one process
// (dp-threads.c, oscar-calibrate --ranks N).
//
// Every collective is called by every rank in the same order; payloads are
// bytes; rank 0 is the root. Errors come back as OSCAR_ERR_IO naming the call.
// Users: the pass's sums (dp-stats.c), its checkpoints (layer-pass.c) and the
// finisher's split of each layer's fit, sign search, OptR, clip search and gate
// (finish-split.c, fit.c, signs.c, refine.c, optr-route.c: broadcasts, gathers and
// scatters per layer), so every engine carries all of them.
#ifndef OSCAR_CALIBRATE_DP_H
#define OSCAR_CALIBRATE_DP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

struct osc_dp;
struct osc_dp_ops {
    // Root receives every rank's n bytes in rank order: counts [size] and one buffer (malloc'd,
    // the caller frees it) holding them back to back; other ranks get *recv = NULL.
    enum oscar_status (*gather)(struct osc_dp * dp, const void * send, size_t n, void ** recv, size_t * counts);
    // The root's n bytes into buf on every rank (n must be the same on every rank).
    enum oscar_status (*bcast)(struct osc_dp * dp, void * buf, size_t n);
    // Root sends rank r counts[r] bytes from send (back to back, rank order); each rank receives its
    // n bytes into recv (n must equal the root's counts[rank]).
    enum oscar_status (*scatter)(struct osc_dp * dp, const void * send, const size_t * counts, void * recv, size_t n);
    // Ends the whole group at once with exit code `code` (a failed rank: nothing may be written).
    void (*abort)(struct osc_dp * dp, int code);
    void (*close)(struct osc_dp * dp);
};

struct osc_dp {
    int32_t rank, size;
    const char * engine; // "single", "mpi" or "nccl"
    const struct osc_dp_ops * ops;
};

// The group this process belongs to: MPI when started by Open MPI's mpirun (the
// OMPI_COMM_WORLD_SIZE variable) and built with MPI, else one process. OSCAR_DP=nccl under
// mpirun: the NCCL engine (builds with NCCL=1), OSCAR_DP=mpi or unset: MPI.
// OSCAR_ERR_UNSUPPORTED when mpirun started several ranks of a build without MPI.
enum oscar_status osc_dp_open(int * argc, char *** argv, struct osc_dp ** out);
// The one-process group (tests, and builds without MPI).
struct osc_dp * osc_dp_single(void);
// n ranks in this process (dp-threads.c: oscar-calibrate --ranks n), one thread each: *ranks [n]
// is rank r's group handle, to be used (and closed) by that rank's thread only. Host-memory
// collectives in rank order, the MPI engine's bytes; abort ends the process.
enum oscar_status osc_dp_open_threads(int32_t n, struct osc_dp *** ranks);
// oscar-calibrate --ranks n: the in-process group of OSCAR_DP's engine: threads (unset or "mpi": the
// host-memory engine above, which any backend's host payloads suit) or "nccl" (cuda true: one GPU
// per rank, the communicators from ncclCommInitAll; needs n GPUs).
enum oscar_status osc_dp_open_ranks(int32_t n, bool cuda, struct osc_dp *** ranks);
#ifdef OSCAR_USE_MPI
enum oscar_status osc_dp_open_mpi(int * argc, char *** argv, struct osc_dp ** out);
#endif
#ifdef OSCAR_USE_NCCL
// Over an open MPI group: binds the local GPU, NCCL communicator from rank 0's unique id (dp-nccl.c).
enum oscar_status osc_dp_open_nccl(struct osc_dp * mpi, struct osc_dp ** out);
// n ranks of this process on GPUs 0 .. n-1, their communicators from ncclCommInitAll; each rank's
// thread binds its GPU (osc_dp_use_local_gpu) before its first collective.
enum oscar_status osc_dp_open_nccl_ranks(int32_t n, struct osc_dp *** ranks);
#endif
void osc_dp_close(struct osc_dp * dp);
// Binds this rank to its GPU (dp-device.c): the node-local rank modulo the device count; logs the
// choice. Call before any CUDA work. OSCAR_ERR_UNSUPPORTED without CUDA or a device.
enum oscar_status osc_dp_use_local_gpu(const struct osc_dp * dp, int * device);

// Rank r's share [*b0, *b1) of n items in contiguous blocks: floor(r·n/size) .. floor((r+1)·n/size).
void osc_dp_share(const struct osc_dp * dp, int32_t rank, int64_t n, int64_t * b0, int64_t * b1);

// Every rank's share (osc_dp_share) of n items of `item` bytes, mine holding this rank's, put
// together on the root in rank order into all ([n] items, each at its index; other ranks may pass
// NULL). A share of the wrong size is an error naming the rank. The finisher's split (finish-split.c)
// combines its parts this way: placement only, no arithmetic, so the root holds what one
// process computing every item would.
enum oscar_status osc_dp_gather_shares(struct osc_dp * dp, int64_t n, size_t item, const void * mine, void * all);
// The reverse: the root's all [n items] cut into the shares, rank r receiving its items into mine
// (other ranks may pass all = NULL). Placement only.
enum oscar_status osc_dp_scatter_shares(struct osc_dp * dp, int64_t n, size_t item, const void * all, void * mine);

// ---- the statistics of a data-parallel pass (dp-stats.c) ----------------------------------
struct oscar_stats;
// Makes s keep block partials (stats-partials.h) and exchange them over dp at every layer's pass
// end: rank 0 replays every rank's parts in rank order, so with each rank's share of every
// layer's stream contiguous and in rank order it holds the single-process sums (bit for bit
// when every share starts on a block boundary); after pass 1 the group's sums are broadcast,
// so every rank weighs its SST rows with the same final A_h. Pass-2 sums end on rank 0 only.
enum oscar_status osc_dp_stats_attach(struct osc_dp * dp, struct oscar_stats * s);
// The same for a pass that adds whole-layer totals (the CUDA forward pass's device sums): each
// rank's layer sums go to rank 0 and are added in rank order; equal to the one-device sums up to
// fp64 rounding of the re-associated additions (the README's bound), bit for bit at one rank.
enum oscar_status osc_dp_stats_attach_sums(struct osc_dp * dp, struct oscar_stats * s);
// Bytes this rank has sent and received in those exchanges so far.
void osc_dp_stats_bytes(int64_t * sent, int64_t * received);

#endif
