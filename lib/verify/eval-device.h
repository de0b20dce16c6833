// eval-device.h - the layer errors of the calibration gate (post-W_O relative
// error, metrics.h out_rel) and of the clip-ratio search (metrics.h
// oscar_verify_candidate_errors) on a compute backend:
//   "cpu"   lib/verify's reference itself (oscar_verify_layer_metrics,
//           oscar_kv_transform_layer + oscar_verify_candidate_errors);
//   "cuda"  the backend's eval_* ops (kernels/layer-eval.cu): the same K/V
//           transform bit for bit, attention and W_O products as fp32 GEMMs with
//           fp64 softmax and sums, so errors agree with "cpu" to ~1e-6 relative.
// The device path refuses (UNSUPPORTED) what it does not implement: quantizers
// other than INT2 ASYM/SYM, Lloyd-Max, bf16 dequantization, key-mean centring,
// the query-dependent DECODE tiering and KIVI blocks, head_dim outside
// {32, 64, 128, 256}. It never falls back to the CPU silently.
//
// Usage (per layer l):
//   oscar_eval_dev_open("cuda", &shape, n_threads, &ev);
//   oscar_eval_dev_layer(ev, &in);             // in (and its arrays) must stay valid
//   oscar_eval_dev_out_rel(ev, &tf, &err);      // any number of methods
//   oscar_eval_dev_out_rel_methods(ev, tfs, n, errs);   // or n of them at once
//   oscar_eval_dev_candidates(ev, &tf, G, grid, per_head, ...);
//   oscar_eval_dev_free(ev);
#ifndef OSCAR_VERIFY_EVAL_DEVICE_H
#define OSCAR_VERIFY_EVAL_DEVICE_H

#include "backend/backend.h"
#include "verify/metrics.h"

#define OSCAR_EVAL_MAX_CAND 128   // clip candidates per call (calibrate's OSCAR_CLIP_GRID_MAX)

struct oscar_eval_dev;

// shape: heads, head_dim, n_embd and the largest layer input (tokens, sequence
// length, candidates) the evaluator must hold. n_threads: cpu (0 = all cores).
enum oscar_status oscar_eval_dev_open(const char * backend, const struct oscar_eval_shape * shape, int32_t n_threads,
                                      struct oscar_eval_dev ** out);
void oscar_eval_dev_free(struct oscar_eval_dev * ev);
const char * oscar_eval_dev_backend(const struct oscar_eval_dev * ev);

// The layer the next calls evaluate (copied to the device at the first call that needs it).
enum oscar_status oscar_eval_dev_layer(struct oscar_eval_dev * ev, const struct oscar_layer_input * in);

// out_rel of transform tf on the current layer (tf's own clip ratios).
enum oscar_status oscar_eval_dev_out_rel(struct oscar_eval_dev * ev, const struct oscar_kv_transform * tf,
                                         double * out_rel);
// out_rel[i] of each of the n transforms (1 to OSCAR_METRICS_MAX_CACHES), the same bits as n
// calls of oscar_eval_dev_out_rel; on the cpu the exact attention is computed once for all n.
enum oscar_status oscar_eval_dev_out_rel_methods(struct oscar_eval_dev * ev, const struct oscar_kv_transform * tf,
                                                 int32_t n, double * out_rel);

// oscar_verify_candidate_errors for the n_cand variants of tf with k_clip = v_clip =
// ratios[c] (tf must not carry per-layer clip arrays). Output shapes as there.
enum oscar_status oscar_eval_dev_candidates(struct oscar_eval_dev * ev, const struct oscar_kv_transform * tf,
                                            int32_t n_cand, const double * ratios, bool v_per_head, double * k_num,
                                            double * k_den, double * v_num, double * v_den);

// Candidates [c0, c1) of those n_cand alone (oscar_verify_candidate_errors_part: the whole call's
// bits in their rows, k_den, and v_den unless NULL): a clip search split over ranks. On a device
// every candidate is evaluated on its own (its bits do not depend on the others).
enum oscar_status oscar_eval_dev_candidates_part(struct oscar_eval_dev * ev, const struct oscar_kv_transform * tf,
                                                 int32_t n_cand, int32_t c0, int32_t c1, const double * ratios,
                                                 bool v_per_head, double * k_num, double * k_den, double * v_num,
                                                 double * v_den);

// The sums of oscar_eval_dev_candidates for ONE variant of tf whose current-layer
// rotations are k_rot / v_rot ([R, D, D] each, R = tf->rots.n_rot; read only),
// at tf's own clips (scalars or per-layer arrays); tf must be a ROT_MATRIX method.
// The same rotations give the same bits whatever was evaluated before (the sign
// search compares these numbers with each other).
enum oscar_status oscar_eval_dev_rotations(struct oscar_eval_dev * ev, const struct oscar_kv_transform * tf,
                                           float * k_rot, float * v_rot, bool v_per_head,
                                           double * k_num, double * k_den, double * v_num, double * v_den);

#endif
