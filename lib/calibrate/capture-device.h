// capture-device.h - calibration capture on a forward device (lib/backend/forward-backend.h):
// the held-out rows and both accumulation passes of oscar-calibrate through oscar_fwd_*
// on "cpu" or "cuda" (capture sums summed on the device, see forward-backend.h), plus
// random-init models of a named shape with a synthetic token stream (benchmarks: no
// weights, tokenizer or corpus needed).
//
// Hook-up in cmd/oscar-calibrate.c (replaces oscar_calib_capture when --device /
// --random-init are given; this path still runs two whole passes):
//   struct oscar_calib_device d = {.device = "cuda", .model = m};         // or .random = &cfg
//   oscar_calib_device_heldout(&d, &plan, &p, &held, &t) ||
//   oscar_calib_device_accumulate(&d, &plan, &p, &st, &t)
// No checkpoints on this path (p->checkpoint_path is refused): a device pass over a
// calibration budget takes seconds.
#ifndef OSCAR_CALIBRATE_CAPTURE_DEVICE_H
#define OSCAR_CALIBRATE_CAPTURE_DEVICE_H

#include "calibrate/calibrate.h"

struct oscar_calib_device {
    const char *                      device; // "cpu" or "cuda" (NULL: cpu)
    const struct oscar_model *        model;  // host weights, or NULL with random
    const struct oscar_model_config * random; // random-init model of this shape (oscar_fwd_init_random)
    uint64_t                          seed;   // of the random weights
    bool                              fp32;   // cuda: fp32 weights, activations and GEMMs
                                              // (oscar_fwd_params.fp32); false: bf16
};

// Shapes for --random-init: "qwen3-8b" (36 layers, 4096, 32/8 heads of 128, ff 12288,
// vocab 151936, q/k-norm, theta 1e6) and "smollm2-135m". Unknown name: OSCAR_ERR_INVALID.
enum oscar_status oscar_calib_random_config(const char * name, struct oscar_model_config * out);

// A synthetic corpus of n tokens uniform in [0, n_vocab) from seed (xorshift64); sha256 of
// the token bytes, name "synthetic:<seed>". Free with oscar_calib_corpus_free.
enum oscar_status oscar_calib_synthetic_corpus(int64_t n, int32_t n_vocab, uint64_t seed,
                                               struct oscar_calib_corpus * out);

// Held-out rows (plan->heldout_start) through a capture-free pass on d with a host hook;
// out->wo points at W_O copies in out->wo_block (oscar_fwd_copy_wo). Free with
// oscar_calib_heldout_free.
enum oscar_status oscar_calib_device_heldout(const struct oscar_calib_device * d, const struct oscar_calib_plan * plan,
                                             const struct oscar_calib_params * p, struct oscar_calib_heldout * out,
                                             struct oscar_calib_timing * t);

// Pass 1 and pass 2 over plan's sequences in batches of p->batch on d; *out = the
// finished accumulator (the kinds oscar_calib_capture uses). t->forward gets the
// pass wall time, t->accumulate the end-of-pass time (download + lib/stats).
enum oscar_status oscar_calib_device_accumulate(const struct oscar_calib_device * d,
                                                const struct oscar_calib_plan * plan,
                                                const struct oscar_calib_params * p, struct oscar_stats ** out,
                                                struct oscar_calib_timing * t);

#endif
