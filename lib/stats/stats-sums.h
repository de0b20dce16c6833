// stats-sums.h - adds sums accumulated elsewhere (the CUDA forward pass keeps
// its own fp64 accumulators on the device) into a struct oscar_stats, so the
// finalisation, checkpoints and getters of lib/stats serve both paths.
//
// The caller owns the arrays; they are read during the call only. Matrices
// are [L, Hkv, D, D] fp64 and symmetric up to rounding (either triangle or
// both may be filled; lib/stats reads the upper one of KTK/VTV/QQT and the
// whole SST matrix, exactly like its own DSYRK/DGEMM sums).
//
// L = n_layer, Hkv = n_head_kv, D = head_dim.
#ifndef OSCAR_STATS_SUMS_H
#define OSCAR_STATS_SUMS_H

#include <stdint.h>

#include "stats/stats.h"

struct oscar_stats_sums {
    int32_t         pass;      // 1 (KTK, VTV, QQT) or 2 (SST); must equal oscar_stats_phase()
    int64_t         n_tokens;  // tokens every layer saw in this pass
    const double *  ktk;       // [L, Hkv, D, D] pass 1, non-NULL iff the kind is on
    const double *  vtv;       // [L, Hkv, D, D]
    const double *  qqt;       // [L, Hkv, D, D] Σ over the g query heads of each group
    const double *  vatt;      // [L, Hkv, D, D] pass 1: Σ_t w v vᵀ, w the attention-mass weights
    const double *  vatt_wsum; // [L, Hkv]       pass 1: Σ_t w
    const double *  sst;       // [L, Hkv, D, D] pass 2: Σ_t w v vᵀ
    const double *  sst_wsum;  // [L, Hkv]       pass 2: Σ_t w (after clamping)
    const int64_t * sst_nneg;  // [L, Hkv]       pass 2: weights clamped to 0
};

// Adds x into the accumulators of s's current pass and counts its tokens.
// Fails (OSCAR_ERR_INVALID, s unchanged) if the pass does not match or a kind
// of s is missing from x (or x has a kind s lacks). VATT sums must come with
// the attention-mass weights of attn-mass.c (w_t = Σ_j Σ_{i>=t} p_{j,i,t}²)
// computed by the caller. Does not end the pass.
enum oscar_status oscar_stats_add_sums(struct oscar_stats * s, const struct oscar_stats_sums * x);
// The same for one layer (a layer-major pass): x's arrays hold that layer only ([Hkv, D, D],
// [Hkv]), x->pass must equal oscar_stats_layer_phase(s, layer), and only that layer's
// token count grows. Does not end the layer's pass (oscar_stats_end_layer_pass).
enum oscar_status oscar_stats_add_layer_sums(struct oscar_stats * s, int32_t layer, const struct oscar_stats_sums * x);

#endif
