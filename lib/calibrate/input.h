// input.h - what a calibration reads, opened and checked by the library: the model
// (a file read a layer at a time, a whole model for a store replay, or a --random-init
// shape), its tokenizer, and the rows, either the corpus (or synthetic tokens) through
// the layer-major pass, or an activation store made with the same model and tokenizer.
//
// Usage (oscar-calibrate):
//   struct oscar_calib_input in = {.model = path, .corpus = src, .n_corpus = 1};
//   oscar_calib_input_open(&in, p.seed, &shape, &engine, &tok);
//   oscar_calib_input_pass(&in, &engine, tok, &p, &rows);   // finished: rows.fin holds the results
#ifndef OSCAR_CALIBRATE_INPUT_H
#define OSCAR_CALIBRATE_INPUT_H

#include "calibrate/actstore.h"
#include "calibrate/calibrate.h"

struct oscar_calib_input {
    const char * model;        // --model: a .gguf or Hugging Face directory (a Hub id resolved already);
                               // unused with random_init
    const char * tokenizer;    // a tokenizer for a model without its own (file or directory), or NULL
    const char * random_init;  // the --random-init shape's name (its config in oscar_calib_input_open's shape)
    const char * device;       // NULL or "cpu", or "cuda"
    bool         gpu_fp32;     // cuda: fp32 weights, activations and GEMMs (else bf16)
    const struct oscar_calib_source * corpus; // the corpus sources (PATH or a mix of PATH@SHARE)
    int32_t      n_corpus;
    const char * jsonl_field;  // the field of JSONL records, or NULL
    const char * save_act;     // also write the pass's rows to this activation store, or NULL
    const char * from_act;     // replay this activation store instead of a forward pass, or NULL
};

// What the pass made (freed by oscar_calib_rows_free): the corpus's identity (a store's
// recorded one), the plan, the held-out rows, the statistics and the finished layers.
struct oscar_calib_rows {
    struct oscar_actstore *     store;   // --from-activations (open until freed), or NULL
    struct oscar_calib_corpus   corpus;
    struct oscar_calib_plan     plan;
    struct oscar_calib_heldout  held;
    struct oscar_stats *        stats;
    struct oscar_calib_finisher fin;     // fit .. gate of every layer, ended
    struct oscar_calib_timing   t;
};

// The model and tokenizer of `in` into e (e->device, e->fp32 from in; e->dp left NULL) and *tok:
// the layers read on demand (CUDA: the embedding too), the whole model for a store replay (it reads
// every layer's W_O), or with random_init the host weights made layer by layer from seed, or on
// CUDA the shape alone (shape, filled by the caller with the shape's config and name; e->m points at
// it and random_on_device is set). No tokenizer for random_init (*tok NULL). Free e->m with
// oscar_model_free unless random_on_device.
enum oscar_status oscar_calib_input_open(const struct oscar_calib_input * in, uint64_t seed, struct oscar_model * shape,
                                         struct oscar_calib_engine * e, struct oscar_tokenizer ** tok);

// The rows of `in` through every stage: from the corpus (tokenized for p->n_tokens plus the held-out
// sequences, its ids checked against the model's vocabulary) or synthetic tokens for random_init, the
// plan and the layer-major pass with the finisher, writing in->save_act if asked; or from
// in->from_act, refused (OSCAR_ERR_INVALID naming both) when made with another model or tokenizer,
// taking its seq_len, capture dtype and held-out count into p, replayed and finished layer by
// layer. rows is zeroed first.
enum oscar_status oscar_calib_input_pass(const struct oscar_calib_input * in, const struct oscar_calib_engine * e,
                                         struct oscar_tokenizer * tok, struct oscar_calib_params * p,
                                         struct oscar_calib_rows * rows);
void oscar_calib_rows_free(struct oscar_calib_rows * rows);

#endif
