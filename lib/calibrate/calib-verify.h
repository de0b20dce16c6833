// calib-verify.h - how calibrate describes its methods to lib/verify: the
// tiering of the gate and the clip search (one final prefill chunk per
// held-out sequence: BF16 sink/recent, INT2 middle, method.md §11.3), the
// per-layer input of the held-out rows, and the KV transforms of the fitted
// rotations. No error metric is computed here (lib/verify/metrics.h does).
#ifndef OSCAR_CALIB_VERIFY_H
#define OSCAR_CALIB_VERIFY_H

#include "calibrate/calibrate.h"
#include "verify/eval-device.h"
#include "verify/metrics.h"

// STATIC tiering with the run's sink/recent.
struct oscar_tiering osc_calib_tiering(const struct oscar_calib_params * p);
// The held-out rows of one layer as a verify input (W_O included).
struct oscar_layer_input osc_calib_layer_input(const struct oscar_calib_heldout * h, int32_t layer);
// preset "naive" | "hadamard" | "oscar" | "oscar-searched" | "q2_0" with the run's group
// size, scale dtype and tiering, for r's shape; the rotations methods take r's rotations, its key
// mean and (oscar-searched) its clips.
enum oscar_status osc_calib_transform(const char * preset, const struct oscar_calib_params * p,
                                      const struct oscar_rotations * r, struct oscar_kv_transform * out);
// A layer evaluator on p->eval_device sized for the held-out rows and max_cand candidates.
enum oscar_status osc_calib_eval_open(const struct oscar_calib_heldout * h, const struct oscar_calib_params * p,
                                      int32_t max_cand, struct oscar_eval_dev ** out);

#endif
