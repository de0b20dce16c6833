// layer-eval.cuh - layer error evaluation on the GPU: the backend ops eval_*
// of backend/backend.h (contract there and in verify/eval-device.h), used by
// the calibration gate and the clip-ratio search with --device cuda.
//
// Per layer the held-out q/k/v and W_O live on the device; a method's K/V rows
// are transformed there exactly as lib/verify's kv-transform does it (fp64
// rotation sums in ascending order, bf16 rounding, the lib/quant clip rules and
// INT2 ASYM/SYM quantizer with the same IEEE operations, dequantization through
// the stored metadata dtype), and the attention and W_O products are fp32 cuBLAS
// GEMMs with fp64 softmax and fp64 sums of squares in a fixed order
// (deterministic). Refuses (UNSUPPORTED): head_dim not in {32, 64, 128, 256},
// Lloyd-Max, bf16_dequant.
#ifndef OSCAR_KERNELS_LAYER_EVAL_CUH
#define OSCAR_KERNELS_LAYER_EVAL_CUH

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/backend.h"

enum oscar_status osc_cuda_eval_open(const struct oscar_eval_shape * s, struct oscar_backend_eval ** out);
enum oscar_status osc_cuda_eval_layer(struct oscar_backend_eval * e, const struct oscar_eval_layer * in);
enum oscar_status osc_cuda_eval_out_err(struct oscar_backend_eval * e, const struct oscar_eval_method * m,
                                        double * num, double * den);
enum oscar_status osc_cuda_eval_candidates(struct oscar_backend_eval * e, const struct oscar_eval_method * m,
                                           int32_t n_cand, bool v_per_head, double * k_num, double * k_den,
                                           double * v_num, double * v_den);
void osc_cuda_eval_free(struct oscar_backend_eval * e);

#ifdef __cplusplus
}
#endif
#endif
