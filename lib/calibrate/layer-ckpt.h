// layer-ckpt.h - checkpoints of the layer-major calibration pass (layer-ckpt.c
// has the file layout and the checks a resume makes). Internal to lib/calibrate.
#ifndef OSCAR_CALIBRATE_LAYER_CKPT_H
#define OSCAR_CALIBRATE_LAYER_CKPT_H

#include "calibrate/calibrate.h"

// What a checkpoint holds besides the accumulator, and what it must match.
struct osc_layer_ckpt {
    const char * path;
    const struct oscar_model * m;
    const struct oscar_calib_plan * plan;       // plan->corpus: the identities checked on resume
    const struct oscar_calib_params * p;
    const char * device;                        // the backend that made the sums ("cpu", "cuda")
    bool fp32;                                  // cuda: fp32 precision
    uint32_t kinds;                             // the accumulator's kinds
    float * x;                                  // [n_rows, C] hidden states entering next_layer
    int64_t n_rows;
    const struct oscar_calib_heldout * held;    // rows of layers < next_layer are saved / restored unless
                                                // held->n_slot == 1 (a finisher has their results)
    struct oscar_calib_finisher * fin;          // the finished layers' results saved / restored, or NULL
};

// Writes the state after layers 0 .. next_layer-1 (atomically).
enum oscar_status osc_layer_ckpt_save(const struct osc_layer_ckpt * k, const struct oscar_stats * s,
                                      int32_t next_layer);
// Reads it back into k->x, k->held (sized by the caller from the model and
// plan) and k->fin (begun, layers < next_layer then finished) and a new accumulator; refuses a checkpoint of another model, tokenizer,
// corpus, plan, capture dtype, backend or finishing settings (OSCAR_ERR_INVALID), a corrupt or truncated one
// (OSCAR_ERR_FORMAT), another version (OSCAR_ERR_UNSUPPORTED).
enum oscar_status osc_layer_ckpt_load(const struct osc_layer_ckpt * k, struct oscar_stats ** stats,
                                      int32_t * next_layer);

#endif
