// fwd-kvsim.cuh - the simulated quantized KV cache of the CUDA forward pass
// (forward-backend.h, struct oscar_fwd_kvsim): per layer the K/V rows are
// transformed on the device by the layer evaluator's row transform
// (eval-transform.cuh: lib/verify's bits) into HP and INT2 row sets, then the
// tiered attention (fwd-kernels.cuh) reads each (query, key) pair from the set
// the tier rule names. No host copy of q/k/v.
#ifndef OSCAR_KERNELS_FWD_KVSIM_CUH
#define OSCAR_KERNELS_FWD_KVSIM_CUH

#include <cuda_runtime.h>

#include "kernels/fwd-kernels.cuh"

extern "C" {
#include "backend/forward-backend.h"
}

struct osc_kvsim;

// Checks what the device transform supports (head_dim 32/64/128/256; check_quant's quantizers),
// uploads the rotations (and their transposes), clip indices and key mean of every layer and sizes
// the row sets for max_tokens rows.
enum oscar_status osc_kvsim_open(const struct oscar_fwd_kvsim * d, const struct oscar_model_config * c,
                                 int32_t max_tokens, cudaStream_t s, struct osc_kvsim ** out);
void osc_kvsim_free(struct osc_kvsim * k);
// The tier plan of a batch (every sequence starting at position 0): lo/hi of every query row,
// the quantizer of every INT2 row and (KIVI, OScaR) the first rows of the K blocks, on the device.
enum oscar_status osc_kvsim_plan(struct osc_kvsim * k, const struct oscar_batch * b, cudaStream_t s);
// Layer l of the planned batch: out [T, Hq, D] (bf16, or fp32 when out_f32) = the attention of
// q over the transformed k/v [T, Hkv, D] under the layer's rule r (window, score scale). With
// qb (the bf16 copy of q) and a bf16 out, the tensor-core kernel on bf16 copies of the rows (the
// bf16 pass's exact attention numerics: q, K, V and P in bf16); else the fp32 kernel (lib/verify's
// arithmetic up to summation order).
enum oscar_status osc_kvsim_attend(struct osc_kvsim * k, int32_t l, const float * q, const osc_bf16 * qb,
                                   const float * kx, const float * vx, int32_t T, const struct osc_att_block * blocks,
                                   int32_t n_blocks, struct osc_att_rule r, void * out, bool out_f32,
                                   cudaStream_t s);

#endif
