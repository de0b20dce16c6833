// finish-split.h - the finisher's clip search and gate split over the ranks of
// a data-parallel pass (finish-split.c). Per layer, once rank 0 has fitted it
// (and run --sign-search / --refine optr on it, which stay on rank 0): rank 0
// broadcasts the layer's held-out rows and final rotations; every rank
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
// It applies when the evaluator is the CPU's (lib/verify); a device evaluator
// (--device cuda) scores whole grids, and rank 0 finishes alone there.
#ifndef OSCAR_CALIBRATE_FINISH_SPLIT_H
#define OSCAR_CALIBRATE_FINISH_SPLIT_H

#include "calibrate/calibrate.h"
#include "calibrate/dp.h"

struct osc_calib_split;
// Whether the split applies (decided alike on every rank): several ranks (any evaluator: a part of
// the clip grid gets the whole grid's bits on the cpu and on a device alike).
bool osc_calib_split_applies(const struct osc_dp * dp);
// h: the held-out rows' shape (one layer slot on ranks other than 0, filled by the split).
enum oscar_status osc_calib_split_open(struct osc_dp * dp, const struct oscar_calib_params * p,
                                       const struct oscar_calib_heldout * h, struct osc_calib_split ** out);
void osc_calib_split_free(struct osc_calib_split * s);
// Rank 0, in place of the clip search and gate of layer l: fin's layer rotations final, its
// evaluator on layer l's rows h (finish.c).
enum oscar_status osc_calib_split_finish(struct osc_calib_split * s, struct oscar_calib_finisher * fin,
                                         const struct oscar_calib_heldout * h, int32_t l);
// The other ranks: their part of layer l (its rows arrive into h's slot).
enum oscar_status osc_calib_split_work(struct osc_calib_split * s, struct oscar_calib_heldout * h, int32_t l);
// Bytes this rank has sent and received for the split so far.
void osc_calib_split_bytes(int64_t * sent, int64_t * received);

#endif
