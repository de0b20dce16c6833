// forward-ops.h - the vtable behind oscar_fwd_* (lib/backend/forward-backend.c).
// registry.c hands out the instance for a device name; only it knows whether
// the CUDA one was compiled in. Not a public API.
#ifndef OSCAR_BACKEND_FORWARD_OPS_H
#define OSCAR_BACKEND_FORWARD_OPS_H

#include "backend/forward-backend.h"

struct osc_fwd_ops {
    const char * name;
    // m == NULL: random weights of shape cfg from seed (cfg/seed unused otherwise).
    enum oscar_status (*init)(const struct oscar_model * m, const struct oscar_model_config * cfg, uint64_t seed,
                              const struct oscar_fwd_params * p, void ** ctx);
    enum oscar_status (*run)(void * ctx, const struct oscar_batch * b, float * logits);
    enum oscar_status (*end_pass)(void * ctx);
    void (*info)(const void * ctx, struct oscar_fwd_info * out);
    void (*free)(void * ctx);
    enum oscar_status (*copy_wo)(void * ctx, int32_t layer, float * out); // [C, Hq D] fp32
    enum oscar_status (*set_attention)(void * ctx, const struct oscar_fwd_kvsim * kvsim,
                                       const struct oscar_attention_override * ov);
    enum oscar_status (*ref_init)(void * ctx, int64_t n_rows);   // NULL: not on this backend
    enum oscar_status (*run_scored)(void * ctx, const struct oscar_batch * b, int32_t row0, int32_t n,
                                    const int32_t * next, int64_t ref_row, bool save_ref,
                                    struct oscar_fwd_score * out);
    // the layer-major pass (forward-backend.h)
    enum oscar_status (*rows_init)(void * ctx, int64_t n_rows, int64_t n_keep);
    enum oscar_status (*layer_set)(void * ctx, int32_t l, const struct oscar_layer_weights * w);
    enum oscar_status (*layer_run)(void * ctx, int32_t l, const struct oscar_batch * b, int64_t row0, bool sums);
    enum oscar_status (*layer_end)(void * ctx, int32_t l);
    enum oscar_status (*rows_copy)(void * ctx, float * host, bool to_host);
    enum oscar_status (*set_hook)(void * ctx, const struct oscar_capture_hook * hook);
};

enum oscar_status osc_fwd_ops_get(const char * device, const struct osc_fwd_ops ** out);
const struct osc_fwd_ops * osc_fwd_ops_cpu(void);
enum oscar_status osc_fwd_ops_cuda(const struct osc_fwd_ops ** out); // CUDA builds only

#endif
