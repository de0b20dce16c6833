// stats-internal.h - the layout of struct oscar_stats, shared by the files of
// lib/stats/ only. Not part of the public API.
//
// L = n_layer, Hq, Hkv, D, g = Hq/Hkv, B = OSCAR_STATS_BLOCK.
#ifndef OSCAR_STATS_INTERNAL_H
#define OSCAR_STATS_INTERNAL_H

#include <stdbool.h>

#include "stats/stats.h"
#include "stats/stats-partials.h"

struct oscar_stats {
    struct oscar_stats_params p;
    int32_t * phase; // [L] 1, 2, 3: layers advance on their own (a layer-major caller
                     // ends layer l's pass 1 before layer l+1 has seen a token)
    int32_t g;     // Hq / Hkv
    size_t  dd;    // D * D

    // fp64 accumulators, NULL when the kind is off. Matrices are filled in
    // full (SST/VATT, from DGEMM) or upper triangle only (KTK/VTV/QQT, DSYRK).
    double * ktk;  // [L, Hkv, D, D]
    double * vtv;  // [L, Hkv, D, D]
    double * qqt;  // [L, Hkv, D, D]  Σ over the g query heads of the group
    double * sst;  // [L, Hkv, D, D]  Σ_t w v vᵀ
    double * vatt; // [L, Hkv, D, D]  Σ_t w_att v vᵀ
    double * sst_wsum;  // [L, Hkv]
    double * vatt_wsum; // [L, Hkv]
    int64_t * sst_nneg; // [L, Hkv]
    int64_t * n_tok1;   // [L]
    int64_t * n_tok2;   // [L]

    // staging: rows of the current (incomplete) block of each layer
    int32_t * n_pend; // [L]
    float *   st_q;   // [L, B, Hq, D]   when QQT
    float *   st_k;   // [L, B, Hkv, D]  when KTK or SST
    float *   st_v;   // [L, B, Hkv, D]  when VTV, SST or VATT
    double *  st_w;   // [L, B, Hkv]     when VATT: attention-mass weights

    // scratch, sized once
    int32_t  n_threads;
    size_t   scr_per_thread; // doubles
    double * scr;            // [n_threads, scr_per_thread]
    int32_t  max_tokens;
    double * wchunk;         // [max_tokens, Hkv] VATT weights of the current chunk
    size_t   att_per_thread; // doubles
    double * att_scr;        // [n_threads, att_per_thread]

    // data-parallel runs (partials.c): block partials of the current layer and pass kept in
    // order instead of added, and a hook each layer's pass end calls
    bool     keep_parts;
    double * parts;          // [n_parts, part_size(phase)]
    size_t   n_parts, cap_parts_doubles;
    bool     parts_lost;     // a part could not be allocated (reported at the layer's end)
    int32_t  parts_layer;
    int64_t * n_tok1_own;    // [L] this process's own pass-1 tokens (n_tok1 becomes the group's)
    oscar_stats_layer_hook layer_hook;
    void *   hook_user;
};

static inline bool osc_stats_has_q(const struct oscar_stats * s) { return s->p.kinds & OSCAR_STATS_QQT; }
static inline bool osc_stats_has_k(const struct oscar_stats * s) {
    return s->p.kinds & (OSCAR_STATS_KTK | OSCAR_STATS_SST);
}
static inline bool osc_stats_has_v(const struct oscar_stats * s) {
    return s->p.kinds & (OSCAR_STATS_VTV | OSCAR_STATS_SST | OSCAR_STATS_VATT);
}
static inline bool osc_stats_has_w(const struct oscar_stats * s) { return s->p.kinds & OSCAR_STATS_VATT; }

// Validates params (shape limits, kinds) and allocates everything.
enum oscar_status osc_stats_alloc(const struct oscar_stats_params * p, struct oscar_stats ** out);

// Reduces the staged rows of `layer` (n_pend of them, may be < B at the end of
// a pass) into the accumulators of the current phase and empties the stage.
void osc_stats_flush_layer(struct oscar_stats * s, int32_t layer);

// Keeping partials: a new zeroed part for the block of layer l about to be flushed (its row
// count set), and where item (ki-th kind of the phase's list, KV head h) writes in it.
double * osc_stats_new_part(struct oscar_stats * s, int32_t l);
// OSCAR_ERR_NOMEM if a part of layer l could not be kept (flushes cannot fail), else OK.
enum oscar_status osc_stats_parts_status(const struct oscar_stats * s, int32_t l);
void osc_stats_parts_clear(struct oscar_stats * s);
void osc_stats_part_target(const struct oscar_stats * s, double * part, int32_t phase, int32_t ki, int32_t h,
                           double ** acc, double ** wlog, double ** nneg);

// Fills s->wchunk [T, Hkv] with the attention-mass weights of chunk c.
void osc_stats_attn_mass(struct oscar_stats * s, const struct oscar_stats_chunk * c);

#endif
