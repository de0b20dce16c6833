// rotations.h - one model's K/V rotations as the pipeline carries them: what
// oscar-calibrate fits, clip-searches, gates and writes, and what oscar-verify
// and the exports read back from an artifact (formats/oscar-artifact.h).
//
// Layout (flat arrays over layers, as the artifact stacks them and the device
// evaluators upload them):
//   k, v          [L, n_rot, D, D]  x_rot = x·R; n_rot = 1 (one per layer) or Hkv (one per KV head)
//   k_eig, v_eig  [L, n_rot, D]     eigh order (ascending)
//   k_clip,v_clip [L, n_clip]       clip ratios in [0, 1] (0: clip off); n_clip = 1 or Hkv
//   k_mean        [L, Hkv, D]       key mean subtracted before rotation (OptR centring), or NULL
//   head_layer    [L]               with n_rot = Hkv and a per-layer choice (--rotation-grouping
//                                   auto): 1 = layer l's heads have rotations of their own, 0 = the
//                                   layer's one rotation is replicated in every head; NULL: every
//                                   layer is as n_rot says
// Which matrix, eigenvalues, clip and mean apply to (layer l, KV head h) is
// decided here alone (oscar_rotations_k and its siblings); no caller indexes
// the arrays by hand.
//
// A struct may own its arrays (oscar_rotations_alloc / _free) or be a view
// into another's (oscar_rotations_layer_view, a KV transform's copy): a view is
// never freed.
//
// Usage:
//   struct oscar_rotations r;
//   oscar_rotations_alloc(&r, L, Hkv, D, Hkv, Hkv, false, false);
//   float * rk = oscar_rotations_k(&r, layer, head);   // [D, D]
//   oscar_rotations_free(&r);
#ifndef OSCAR_ROTATION_ROTATIONS_H
#define OSCAR_ROTATION_ROTATIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

struct oscar_rotations {
    int32_t n_layer, n_head_kv, head_dim;
    int32_t n_rot;              // matrices per layer: 1 or n_head_kv
    int32_t n_clip;             // clip ratios per layer: 1 or n_head_kv
    float * k, * v;             // [L, n_rot, D, D]
    float * k_eig, * v_eig;     // [L, n_rot, D] (NULL in a view that needs none)
    float * k_clip, * v_clip;   // [L, n_clip] or NULL (a method with fixed ratios)
    float * k_mean;             // [L, Hkv, D] or NULL
    int32_t * head_layer;       // [L] or NULL (see above)
};

// Zeroed arrays of the given shape (n_rot, n_clip: 1 or n_head_kv), k_mean with
// with_mean, head_layer with per_layer_choice. OSCAR_ERR_INVALID on a bad shape,
// OSCAR_ERR_NOMEM; on failure r holds nothing.
enum oscar_status oscar_rotations_alloc(struct oscar_rotations * r, int32_t n_layer, int32_t n_head_kv,
                                        int32_t head_dim, int32_t n_rot, int32_t n_clip, bool with_mean,
                                        bool per_layer_choice);
// Frees what alloc made (not for a view) and zeroes r.
void oscar_rotations_free(struct oscar_rotations * r);

// Whether layer l has a rotation per KV head: its choice where r has one, else n_rot > 1.
bool oscar_rotations_layer_per_head(const struct oscar_rotations * r, int32_t l);
// Layers with a rotation per KV head.
int32_t oscar_rotations_n_head_layers(const struct oscar_rotations * r);

// The (layer, KV head) lookup: the matrix [D, D] / eigenvalues [D] applying to head h of layer l
// (per-layer rotations: the layer's one, whatever h). Layer l's block of n_rot matrices starts at
// head 0.
float * oscar_rotations_k(const struct oscar_rotations * r, int32_t l, int32_t h);
float * oscar_rotations_v(const struct oscar_rotations * r, int32_t l, int32_t h);
float * oscar_rotations_k_eig(const struct oscar_rotations * r, int32_t l, int32_t h);
float * oscar_rotations_v_eig(const struct oscar_rotations * r, int32_t l, int32_t h);
// Where the clip ratio of head h of layer l is stored (r's clips must be present).
float * oscar_rotations_k_clip(const struct oscar_rotations * r, int32_t l, int32_t h);
float * oscar_rotations_v_clip(const struct oscar_rotations * r, int32_t l, int32_t h);
// The key mean [D] of head h of layer l, or NULL without one.
float * oscar_rotations_k_mean(const struct oscar_rotations * r, int32_t l, int32_t h);

// Layer l's clips all set to k / v (a choice pooled over the heads, or fixed ratios).
void oscar_rotations_set_layer_clips(struct oscar_rotations * r, int32_t l, float k, float v);

// A view of flat arrays laid out as above (nothing owned, never written through): k, v, clips and
// k_mean may be NULL.
struct oscar_rotations oscar_rotations_view(int32_t n_layer, int32_t n_head_kv, int32_t head_dim, int32_t n_rot,
                                            const float * k, const float * v, int32_t n_clip, const float * k_clip,
                                            const float * v_clip, const float * k_mean);
// A one-layer view of layer l (n_layer 1; every array at layer l's slices, nothing owned).
struct oscar_rotations oscar_rotations_layer_view(const struct oscar_rotations * r, int32_t l);

// Every layer of src into dst of the same L, Hkv and D, at dst's own widths: dst's head h gets what
// applies to head h in src (a per-layer src is replicated; a narrower dst takes head 0). Eigenvalues,
// clips, the key mean and the choice where both have them.
void oscar_rotations_copy(struct oscar_rotations * dst, const struct oscar_rotations * src);

#endif
