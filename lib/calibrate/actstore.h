// actstore.h - the HDF5 activation store of oscar-calibrate
// (--save-activations / --from-activations; ecosystem.md §6 conventions).
//
// Layout (format "oscar-activations", version 1):
//   /                      attributes: format, format_version, model, model_sha256,
//                          tokenizer_hash, corpus, corpus_sha256, n_layer, n_head,
//                          n_head_kv, head_dim, n_embd, seq_len, rope_theta,
//                          oscar_version, dtype ("bfloat16" | "float32"),
//                          corpus_sources (a --corpus mix's source list, JSON; only for a mix)
//   /layer_%03d/{q,k,v}    [T, H, D] calibration rows of pass 1, H = n_head for q,
//                          n_head_kv for k/v; attribute dtype; chunked (~1 MiB
//                          chunks of whole rows), shuffle + zstd (filter 32015,
//                          registered in-process over libzstd; frames carry the
//                          content size) + fletcher32 (corruption is detected)
//   /layer_%03d/seq_lens   int32 [n_seq] sequence lengths (the same in every layer)
//   /heldout/layer_%03d/…  the held-out rows, same layout
// bfloat16 is stored as uint16 (the top half of the fp32 bit pattern) with the
// attribute dtype="bfloat16". Rows are appended batch by batch (nothing grows
// in memory with the token budget); the file is written under PATH.tmp.PID and
// renamed to PATH by oscar_actstore_commit. Readers refuse a file whose
// attributes, shapes or sequence lengths disagree, and report HDF5 / filter /
// checksum failures naming the dataset.
#ifndef OSCAR_ACTSTORE_H
#define OSCAR_ACTSTORE_H

#include <stdbool.h>
#include <stdint.h>

#include "util/error.h"

struct oscar_actstore_info {
    char model[256], model_sha256[65], tokenizer_hash[17], corpus[256], corpus_sha256[65], oscar_version[32];
    int32_t n_layer, n_head, n_head_kv, head_dim, n_embd, seq_len;
    double rope_theta;
    char corpus_sources[8192]; // oscar_calib_corpus.sources, "" for one corpus
    bool bf16;   // rows stored as bfloat16 (exact only for bf16-rounded activations)
};

enum oscar_actstore_set { OSCAR_ACT_CALIB = 0, OSCAR_ACT_HELDOUT = 1 };

struct oscar_actstore;

// Writer. The datasets are created at once; nothing appears at `path` until commit.
enum oscar_status oscar_actstore_create(const char * path, const struct oscar_actstore_info * info,
                                        struct oscar_actstore ** out);
// Appends one layer's rows of a batch: q [T, Hq, D], k/v [T, Hkv, D]
// (rounded to bf16 when the store is bf16), seq lens [n_seq].
enum oscar_status oscar_actstore_append(struct oscar_actstore * s, enum oscar_actstore_set set, int32_t layer,
                                        int32_t n_tokens, int32_t n_seq, const int32_t * seq_start, const float * q,
                                        const float * k, const float * v);
// Closes, fsyncs and renames to the final path; frees s (also on failure).
enum oscar_status oscar_actstore_commit(struct oscar_actstore * s);

// Reader: checks attributes, shapes and sequence lengths of every layer.
enum oscar_status oscar_actstore_open(const char * path, struct oscar_actstore ** out);
const struct oscar_actstore_info * oscar_actstore_get_info(const struct oscar_actstore * s);
// Sequence lengths of a set (not owned; valid until free).
const int32_t * oscar_actstore_seq_lens(const struct oscar_actstore * s, enum oscar_actstore_set set, int32_t * n_seq);
// Rows [row0, row0 + n) of one layer as fp32.
enum oscar_status oscar_actstore_read(struct oscar_actstore * s, enum oscar_actstore_set set, int32_t layer,
                                      int64_t row0, int32_t n, float * q, float * k, float * v);

// Writer: aborts (closes and removes the temporary file). Reader: closes.
void oscar_actstore_free(struct oscar_actstore * s);

#endif
