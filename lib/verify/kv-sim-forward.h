// kv-sim-forward.h - a method's simulated quantized cache as the forward backend
// runs it on the device (backend/forward-backend.h, struct oscar_fwd_kvsim):
// the same transform and tier rule as metrics.h's oscar_kv_sim, with q/k/v never
// leaving the device. Covers every quantized method (INT2 ASYM / SYM / Lloyd-Max prefill rows,
// SAW-INT4, KIVI, OScaR, the llama.cpp fork's Q2_0 with or without its attention Hadamard), with
// the artifact's key mean (k_mean) where it has one, at head_dim 32/64/128/256; other head dims are
// refused (OSCAR_ERR_UNSUPPORTED, with the reason) and keep a host simulation.
#ifndef OSCAR_VERIFY_KV_SIM_FORWARD_H
#define OSCAR_VERIFY_KV_SIM_FORWARD_H

#include "backend/forward-backend.h"
#include "verify/metrics.h"

struct oscar_kv_fwd_sim {
    struct oscar_fwd_kvsim desc;   // what oscar_fwd_set_attention takes
    double * clip;                 // owned: [2][L, Nc] clip ratios behind desc.k.clip / desc.v.clip
};

// tf must outlive *out (the tier callbacks read tf->tiers; the rotations are read at set time).
enum oscar_status oscar_kv_fwd_sim_init(const struct oscar_kv_transform * tf, struct oscar_kv_fwd_sim * out);
void oscar_kv_fwd_sim_free(struct oscar_kv_fwd_sim * s);

#endif
