// load-internal.h - shared model-loading machinery for the per-format loaders.
#ifndef OSCAR_MODEL_LOAD_INTERNAL_H
#define OSCAR_MODEL_LOAD_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

enum osc_wkind {
    OSC_W_EMBD, OSC_W_OUT_NORM, OSC_W_OUTPUT,
    OSC_W_ATTN_NORM, OSC_W_Q, OSC_W_K, OSC_W_V, OSC_W_BQ, OSC_W_BK, OSC_W_BV, OSC_W_QNORM, OSC_W_KNORM,
    OSC_W_O, OSC_W_FFN_NORM, OSC_W_GATE, OSC_W_UP, OSC_W_DOWN,
    // sparse layers: the router [E, C], the E experts stacked ([E * rows of one expert, cols]: a
    // format that stores one tensor per expert reads them in expert order), the shared expert
    OSC_W_ROUTER, OSC_W_EXP_GATE, OSC_W_EXP_UP, OSC_W_EXP_DOWN,
    OSC_W_SH_GATE, OSC_W_SH_UP, OSC_W_SH_DOWN, OSC_W_SH_SCALE, // SH_SCALE: shared_expert_gate [C]
    OSC_W_ROPE_FREQS, // [rope_dim/2], only when config.has_rope_freqs (GGUF rope_freqs.weight)
    OSC_W_POST_ATTN_NORM, OSC_W_POST_FFN_NORM, // sandwich norms [C] (config.post_norms)
    OSC_W_EXP_BIAS,   // [E] the router's choice-only bias, only when config.expert_bias
    OSC_W_N_KINDS
};

// A format's view of its tensors. get() fills dst [rows, cols] (cols = 0 for
// a vector of `rows`) in HF layout, or returns OSCAR_ERR_NOT_FOUND (with a
// message naming the tensor) when absent; shape mismatches are FORMAT errors.
// With dst == NULL it only checks presence and shape (osc_model_attach does
// that for every tensor before it allocates anything).
// get() is never called from two threads at once (load.c runs one read at a
// time: the caller's or the prefetch thread's). close() frees ctx; NULL when
// there is nothing to free.
struct osc_weight_source {
    enum oscar_status (*get)(void * ctx, enum osc_wkind kind, int32_t layer, int64_t rows, int64_t cols,
                             float * dst);
    void (*close)(void * ctx);
    void * ctx;
};

// Checks every tensor of m->config (already set) against src, then reads the
// tensors outside the layers (embedding, output norm, output); the model owns
// src from here on (even on failure) and reads layers from it on demand
// (oscar_model_layer_acquire). output absent -> tied to tok_embd (unless
// config.tied_embeddings is false and `tie_if_missing` is false).
// What attach reads of the [V, C] tensors: both, the embedding only (the LM head is checked but
// not read: m->output NULL unless tied), or neither (m->tok_embd and m->output NULL; read copies
// with oscar_model_read_vocab).
enum osc_vocab_read { OSC_READ_VOCAB_ALL, OSC_READ_VOCAB_NO_HEAD, OSC_READ_VOCAB_NONE };
enum oscar_status osc_model_attach(struct oscar_model * m, const struct osc_weight_source * src, bool tie_if_missing,
                                   enum osc_vocab_read vocab);

// Checks a config for consistency (positive sizes, heads divide, products of
// sizes without overflow and below 2^40 floats); names `what`.
enum oscar_status osc_model_config_check(const struct oscar_model_config * c, const char * what);

// FORMAT error naming `tensor` when it is named "<prefix>N.<rest>"
// ("model.layers.", "blk.") with N >= n_layer, the config's `field`: weights
// with more layers than the config declares would otherwise load as a
// truncated model. Other names pass.
enum oscar_status osc_model_check_layer(const char * what, const char * tensor, const char * prefix,
                                        int32_t n_layer, const char * field);

// Source bytes the safetensors reader converts per slice of a tensor (0: the default, 64 MiB);
// for tests of the slicing (the result does not depend on it).
void osc_st_set_slice_bytes(size_t bytes);

// Read the config and check the layer names of a GGUF file or an HF directory,
// set m->config and m->source_sha256, and hand back the open weight source
// (the caller owns it: osc_model_attach or src->close).
enum oscar_status osc_model_open_gguf(const char * path, struct oscar_model * m, struct osc_weight_source * src);
enum oscar_status osc_model_open_hf(const char * dir, struct oscar_model * m, struct osc_weight_source * src);

#endif
