// optr-route.h - --refine optr split over the ranks of a data-parallel pass by
// KV head (refine.c): which rows and heads each rank holds and needs, and the
// routing of the training rows to the ranks that refine their heads.
//
// Rank r refines KV heads osc_dp_share(r, Hkv); OptR's loss of one head reads only
// that head's rows (its g query heads, its keys and values), W_O columns and base
// rotations, so a rank gets those alone. The training rows (the leading
// sequences that hold every OptR training sequence) were computed by the ranks
// whose batches hold them: rank k has rows [start[k], start[k + 1]) of them
// (osc_optr_parts), in the single-process row order. They move over dp.h's
// table, whose collectives are rooted at rank 0: for each rank d in turn, the
// other ranks' parts of d's heads are gathered on rank 0, which passes them on
// to d with a scatter (rank 0's own go straight). d puts every part at its rows:
// the single-process order, bit for bit.
#ifndef OSCAR_CALIBRATE_OPTR_ROUTE_H
#define OSCAR_CALIBRATE_OPTR_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include "calibrate/dp.h"
#include "util/error.h"

// start [size + 1]: rank k's part of the first n_rows rows is [start[k], start[k + 1]), given each
// rank's rows (rank_rows [size], contiguous in rank order). OSCAR_ERR_INVALID when the ranks
// together hold fewer than n_rows.
enum oscar_status osc_optr_parts(const int64_t * rank_rows, int32_t size, int64_t n_rows, int64_t * start);

// out [n, nh·D] = heads [h0, h0 + nh) of rows [n, heads·D] (a row's heads are contiguous).
void osc_optr_pack_heads(const float * rows, int64_t n, int32_t heads, int32_t h0, int32_t nh, int32_t D,
                         float * out);

// The shape of a layer's rows and the KV heads [h0, h0 + nh) a rank refines.
struct osc_optr_heads {
    int32_t n_head, n_head_kv, head_dim;   // Hq, Hkv, D
    int32_t h0, nh;
};
// Floats per row of the q, k and v slices of those heads.
size_t osc_optr_q_width(const struct osc_optr_heads * hs);
size_t osc_optr_kv_width(const struct osc_optr_heads * hs);

// A part of m rows as it travels: q [m, nh·g·D], then k and v [m, nh·D], of rows [m, Hq·D] / [m, Hkv·D].
size_t osc_optr_part_bytes(const struct osc_optr_heads * hs, int64_t m);
void osc_optr_pack_part(const struct osc_optr_heads * hs, int64_t m, const float * q, const float * k, const float * v,
                        void * msg);
// A part's message into rows [r0, r0 + m) of q, k, v (the heads' slices, [n_rows, width]).
void osc_optr_unpack_part(const struct osc_optr_heads * hs, int64_t r0, int64_t m, const void * msg, float * q,
                          float * k, float * v);

// This rank's rows of a set, every head: rows [row0, row0 + n) of it.
struct osc_optr_source {
    const float * q, * k, * v;
    int64_t row0, n;
};
// The training rows of this rank's heads, rows 0 .. n_rows-1 in order: q [n_rows, nh·g·D], k, v
// [n_rows, nh·D]. When nothing moves (one rank, every head and row its own), the source itself.
struct osc_optr_routed {
    const float * q, * k, * v;
    float * owned;   // the buffer behind them, or NULL (the source's)
};
// Every rank, in the same order: the rows of start [size + 1] (osc_optr_parts) routed to the ranks
// refining their heads (this rank's in hs). Counts its bytes as OptR's (finish-split.h).
enum oscar_status osc_optr_route(struct osc_dp * dp, const int64_t * start, const struct osc_optr_source * mine,
                                 const struct osc_optr_heads * hs, struct osc_optr_routed * out);
void osc_optr_routed_free(struct osc_optr_routed * r);

#endif
