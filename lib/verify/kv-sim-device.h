// kv-sim-device.h - the simulated quantized-cache attention of metrics.h
// (oscar_kv_sim) evaluated through a compute backend (lib/backend: "cuda" runs
// the fused INT2 decode kernel, "cpu" the lib/attention tiered reference), for
// `oscar-verify --device cuda` and the calibration gate.
//
// Per layer call (a perplexity window of complete sequences): every K/V row is
// centred (K mean), rotated (fp64 sums, oscar_kv_rotate_row, as the CPU sim)
// and bf16-rounded on the host; the rows that are INT2 for some query go
// through the backend's write path (clip + quantize + pack, prefill rows with
// int2.clip_algo, demoted rows with demote_clip_algo), the others only into
// the BF16 pool. Then ONE decode-attention call evaluates every query: query
// position t of sequence b is its own "sequence" of the batch, with sink
// [0, lo), INT2 [lo, hi(t)) and recent [hi(t), t] (oscar_tier_int2_range);
// all of them share the same physical pages. Outputs are rotated back with
// R_V^T (fp64) on the host.
//
// Refuses (UNSUPPORTED): anything but INT2 ASYM with G = D, fp32/bf16 metadata,
// bf16_dequant, hp_bf16 = false, KIVI blocks, and tierings whose INT2 range
// does not start at the same position for every query of a sequence. The CUDA
// backend further needs D = 128 and Hq/Hkv <= 8.
#ifndef OSCAR_VERIFY_KV_SIM_DEVICE_H
#define OSCAR_VERIFY_KV_SIM_DEVICE_H

#include "verify/metrics.h"

struct oscar_kv_sim_dev;

// backend: "cpu" or "cuda" (oscar_backend_get). max_tokens: largest batch.
enum oscar_status oscar_kv_sim_dev_init(const char * backend, const struct oscar_kv_transform * tf,
                                        const struct oscar_model_config * cfg, int32_t max_tokens,
                                        struct oscar_kv_sim_dev ** out);
void oscar_kv_sim_dev_free(struct oscar_kv_sim_dev * s);
struct oscar_attention_override oscar_kv_sim_dev_override(struct oscar_kv_sim_dev * s);

#endif
