// finish-split.h - the finisher's stages split over the ranks of a data-parallel
// pass. Per layer, in this order on every rank: the fit's shares (fit.c,
// oscar_calib_fit_items), the layer's held-out rows broadcast from rank 0
// (osc_calib_split_rows), with --rotation-grouping auto each candidate's clip
// grid split as below (grouping.c), --sign-search on rank 0 alone, --refine
// optr's KV-head shares (refine.c, optr-route.h), then the clip search and gate
// (this file, finish-split.c): rank 0 broadcasts the layer's final rotations; every rank
// evaluates its contiguous share of the clip grid (osc_dp_share of the G
// candidates) on all held-out rows, with the whole grid's bits
// (oscar_verify_candidate_errors_part); the shares come back to rank 0 in rank
// order (osc_dp_gather_shares: placement, no arithmetic), which chooses as one
// process would; then the gate's methods go one per rank (OSCAR on rank 0, as
// it needs the chosen clips; naive and Hadamard on ranks 1 and 2, or both on
// rank 1), each the bits of the three evaluated together. So the artifact is
// byte-identical to the one-process artifact for every rank count.
// Why inside each layer rather than whole layers per rank: the pass meets at
// every layer end (sums gathered, pass-1 sums broadcast), so a rank finishing a
// whole layer would hold every rank's next layer back by that long, unless all
// layers' held-out rows were kept for the end; this way each rank keeps one slot
// and every result is on rank 0 (checkpoints, --resume unchanged).
// Both evaluators take part: the CPU's (lib/verify) and the device's (a part of
// the grid gets the whole grid's bits on each).
#ifndef OSCAR_CALIBRATE_FINISH_SPLIT_H
#define OSCAR_CALIBRATE_FINISH_SPLIT_H

#include "calibrate/calibrate.h"
#include "calibrate/dp.h"

struct osc_calib_split;
// Whether the split applies (decided alike on every rank): several ranks (any evaluator: a part of
// the clip grid gets the whole grid's bits on the cpu and on a device alike).
bool osc_calib_split_applies(const struct osc_dp * dp);
// h: the held-out rows' shape (one layer slot on ranks other than 0, filled by the split).
// plan, optr: the calibration sequences and this rank's part of --refine optr's training rows (or NULL).
enum oscar_status osc_calib_split_open(struct osc_dp * dp, const struct oscar_calib_params * p,
                                       const struct oscar_calib_heldout * h, const struct oscar_calib_plan * plan,
                                       const struct oscar_calib_optr_rows * optr, struct osc_calib_split ** out);
void osc_calib_split_free(struct osc_calib_split * s);
// Every rank, after layer l's fit (rank 0 first): the layer's held-out rows, from rank 0 into every
// rank's slot; the sign search, OptR, the clip search and the gate all read them.
enum oscar_status osc_calib_split_rows(struct osc_calib_split * s, const struct oscar_calib_heldout * h, int32_t l);
// Rank 0, in place of oscar_calib_clip_layer for one of auto's candidates (grouping.c): f's rotations
// of layer l scored on ev's rows over every rank's share of the grid, the choice into c.
enum oscar_status osc_calib_split_candidate(struct osc_calib_split * s, struct oscar_eval_dev * ev, int32_t l,
                                            struct oscar_calib_fit * f, struct oscar_calib_clip * c,
                                            struct oscar_calib_timing * t);
// Rank 0, in place of the clip search and gate of layer l: fin's layer rotations final, its
// evaluator on layer l's rows (finish.c; every rank has them from osc_calib_split_rows).
enum oscar_status osc_calib_split_finish(struct osc_calib_split * s, struct oscar_calib_finisher * fin, int32_t l);
// The other ranks: their part of layer l (its rows arrive into h's slot).
enum oscar_status osc_calib_split_work(struct osc_calib_split * s, struct oscar_calib_heldout * h, int32_t l);
// Bytes this rank has sent and received for the split so far (every stage).
void osc_calib_split_bytes(int64_t * sent, int64_t * received);

// ---- the collectives of the finishing stages, counted by stage ----------------------------------
// Every stage of the finisher moves its data with these (dp.h's table: MPI and NCCL carry them),
// so -v can say how many bytes each stage sent and received on this rank.
enum osc_split_stage {
    OSC_SPLIT_FIT,        // covariances out, rotations back (fit.c)
    OSC_SPLIT_ROWS,       // the held-out rows of the layer (every later stage reads them)
    OSC_SPLIT_SIGNS,      // the sign search per KV head (signs.c)
    OSC_SPLIT_OPTR,       // OptR: base rotations, key mean, training rows, results (refine.c)
    OSC_SPLIT_CLIP_GATE,  // rotations, clip-grid shares, gate errors (this file)
    OSC_SPLIT_STAGES
};
const char * osc_calib_split_stage_name(enum osc_split_stage s);
void osc_calib_split_stage_bytes(enum osc_split_stage s, int64_t * sent, int64_t * received);
enum oscar_status osc_calib_bcast(struct osc_dp * dp, enum osc_split_stage s, void * buf, size_t n);
enum oscar_status osc_calib_gather_shares(struct osc_dp * dp, enum osc_split_stage s, int64_t n, size_t item,
                                          const void * mine, void * all);
enum oscar_status osc_calib_scatter_shares(struct osc_dp * dp, enum osc_split_stage s, int64_t n, size_t item,
                                           const void * all, void * mine);
// dp->ops->gather / scatter, counted.
enum oscar_status osc_calib_gather(struct osc_dp * dp, enum osc_split_stage s, const void * send, size_t n,
                                   void ** recv, size_t * counts);
enum oscar_status osc_calib_scatter(struct osc_dp * dp, enum osc_split_stage s, const void * send,
                                    const size_t * counts, void * recv, size_t n);

#endif
