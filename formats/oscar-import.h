// oscar-import.h - reference OSCAR rotation .pt files (the published rotation
// zoo, the SGLang fork's inputs, OptR's per-KV-head files) -> an oscar artifact.
//
// Sources (formats/README.md, "Importing .pt rotations"):
//   - a directory, e.g. a zoo folder <Model>/seq<T>_prompt<N>_group<G>/, holding
//     exactly one k_rotation*.pt and one v_rotation*.pt (and at most one
//     k_mean*.pt) and no oscar.safetensors;
//   - one of the two files: its partner is the only v_rotation*.pt (or
//     k_rotation*.pt) beside it;
//   - the two files, K first.
// Each file is {"format_version": 1|2, "objective": str, "source_grouping":
// "layer"|"kv_head", "layers": {i: {"layer_id": i, "rotation": [D,D] | [Hkv,D,D],
// "eigenvalues": [D] | [Hkv,D] | None, ...}}, ...}; layer keys are ints or
// their strings, and must be 0..L-1. Files are read by formats/pt-reader.h.
//
// The artifact records what the files do not know as unknown: eigenvalues
// missing -> zeros and oscar.eigenvalues = "unknown ..."; clips: the fixed
// engine-wide ratios (SGLang SGLANG_OSCAR_{K,V}_CLIP_RATIO defaults 0.96 / 0.92,
// or the caller's), oscar.clip_mode = fixed; query heads (and KV heads for
// per-layer files without k_mean) without a model -> oscar.num_heads_source =
// "unknown ..." (oscar_artifact_check_shape then compares layers and head_dim
// only); calibration fields from the zoo folder name when it has the
// seq<T>_prompt<N>_group<G> form. Provenance: oscar.imported_from (each file
// with its sha256), oscar.imported_format_version.
#ifndef OSCAR_FORMATS_OSCAR_IMPORT_H
#define OSCAR_FORMATS_OSCAR_IMPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "formats/oscar-artifact.h"
#include "util/error.h"

#define OSCAR_IMPORT_K_CLIP 0.96f // SGLANG_OSCAR_K_CLIP_RATIO default
#define OSCAR_IMPORT_V_CLIP 0.92f // SGLANG_OSCAR_V_CLIP_RATIO default

// What is known of the model the rotations are for (zeros / NULLs: unknown).
struct oscar_import_model {
    int32_t      n_layer, n_head, n_head_kv, head_dim;
    const char * name;         // display name -> oscar.base_model
    const char * sha256;       // identity -> oscar.base_model_sha256
    const char * architecture; // -> oscar.architecture
};

struct oscar_import_opts {
    const char *                      k_mean;                 // a k_mean .pt, or NULL
    float                             k_clip, v_clip;         // clip ratios in [0,1]; < 0: the engine defaults
    const char *                      tool;                   // oscar.tool, or NULL
    const char *                      base_model_id;          // oscar.base_model_id, or NULL
    const char *                      base_model_id_source;
    const struct oscar_import_model * model;                  // NULL: shapes from the tensors
};

// The default options (engine-default clips, no model).
struct oscar_import_opts oscar_import_default_opts(void);

// True when path is a .pt file, or a directory with no oscar.safetensors that
// holds a k_rotation*.pt or v_rotation*.pt.
bool oscar_import_is_source(const char * path);

// The K, V and (optional, else NULL) k_mean files of a source (see above);
// src2 is the V file when two files are given, else NULL. Malloc'ed paths.
enum oscar_status oscar_import_find(const char * src, const char * src2, char ** k_path, char ** v_path,
                                    char ** k_mean_path);

// Reads the pair (and o->k_mean) into a new artifact, structure-validated
// (oscar_artifact_validate without the orthogonality check, which
// oscar_artifact_write and oscar_artifact_load make).
enum oscar_status oscar_import_pt(const char * k_path, const char * v_path, const struct oscar_import_opts * o,
                                  struct oscar_artifact ** out);

// oscar_import_find + oscar_import_pt with the k_mean found beside the pair
// (unless o->k_mean is set).
enum oscar_status oscar_import_source(const char * src, const char * src2, const struct oscar_import_opts * o,
                                      struct oscar_artifact ** out);

#endif
