// stats-partials.h - the accumulator's side of a data-parallel pass: several
// processes each feed their share of a layer's tokens, and one of them must
// end up with exactly the sums a single process would have (stats.h: each
// full block of OSCAR_STATS_BLOCK rows is reduced into a zeroed scratch and
// added to the accumulator, blocks in token order).
//
// With partials kept, a process's accumulator is left untouched: each block's
// reduction (and, for the weighted kinds, its per-token weights) is kept as a
// "part", in order. Ending a layer's pass calls the layer hook after the last
// flush; there the caller moves the parts of every process to one of them,
// which replays them in global token order (oscar_stats_replay_parts): the
// same additions in the same order as a single process, so the sums are equal
// bit for bit whenever every process's share starts at a block boundary of the
// global stream (its first token's index is a multiple of OSCAR_STATS_BLOCK).
// Pass 1 must end with the group's sums on every process (pass 2's weights use
// the final A_h): oscar_stats_layer_export / _import carry them.
//
// A part is part_doubles(pass) doubles: [0] its row count, then H·D·D per kind
// of the pass (pass 1: KTK, VTV, QQT, VATT of those on; pass 2: SST), then the
// weights [H, B] of the weighted kind (VATT or SST), then SST's clamp counts [H].
#ifndef OSCAR_STATS_PARTIALS_H
#define OSCAR_STATS_PARTIALS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

struct oscar_stats;

// Called when layer `layer` ends pass `pass` (1 or 2), after its last flush and before its
// phase advances; an error fails oscar_stats_end_layer_pass (the phase stays).
typedef enum oscar_status (*oscar_stats_layer_hook)(void * user, struct oscar_stats * s, int32_t layer, int32_t pass);

// Keeps block partials from now on (every unfinished layer's accumulator must still be empty)
// and sets the hook (NULL: none). OSCAR_ERR_INVALID if such a layer has already seen a token.
enum oscar_status oscar_stats_keep_partials(struct oscar_stats * s, oscar_stats_layer_hook hook, void * user);

// Doubles in one part of pass `pass`.
size_t oscar_stats_part_doubles(const struct oscar_stats * s, int32_t pass);
// This process's parts of layer `layer`'s current pass, in order (valid in the hook).
const double * oscar_stats_layer_parts(const struct oscar_stats * s, int32_t layer, size_t * n_parts);
// Sets layer `layer`'s sums and token count of its current pass to the replay of n_parts parts
// (parts of every process, in global token order), replacing what it had. OSCAR_ERR_INVALID on a
// bad row count in a part.
enum oscar_status oscar_stats_replay_parts(struct oscar_stats * s, int32_t layer, const double * parts,
                                           size_t n_parts);
// Layer `layer`'s pass-1 sums (matrices of the pass-1 kinds, VATT weight sums, token count) as
// export_doubles() doubles, and back: import keeps this process's own pass-1 count for
// pass 2's check and takes the group's.
size_t oscar_stats_export_doubles(const struct oscar_stats * s);
void oscar_stats_layer_export(const struct oscar_stats * s, int32_t layer, double * out);
enum oscar_status oscar_stats_layer_import(struct oscar_stats * s, int32_t layer, const double * in);

// Whole-layer sums (the CUDA pass adds one layer's device totals, oscar_stats_add_layer_sums, and
// keeps no parts): layer `layer`'s sums of its current pass as layer_sums_doubles(pass) doubles
// (pass 1: as layer_export; pass 2: SST [H, D, D], weight sums [H], clamp counts [H], token
// count), and back (pass 1: as layer_import, this process's own count kept for pass 2's check).
size_t oscar_stats_layer_sums_doubles(const struct oscar_stats * s, int32_t pass);
void oscar_stats_layer_sums_get(const struct oscar_stats * s, int32_t layer, double * out);
enum oscar_status oscar_stats_layer_sums_set(struct oscar_stats * s, int32_t layer, const double * in);

#endif
