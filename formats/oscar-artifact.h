// oscar-artifact.h - the oscar rotation artifact: reader, validator, writer.
//
// An artifact is a DIRECTORY holding three files (spec: formats/README.md):
//   oscar.safetensors  F32 tensors + string __metadata__
//   oscar.json         the same metadata + the gate / verification summary
//   README.md          Hub model card (YAML front matter + gate table)
//
// Tensors, per layer i (R = 1 for grouping "layer", R = Hkv for "kv_head"):
//   layers.{i}.k_rotation    [D,D] (layer) or [Hkv,D,D] (kv_head)   x_rot = x·R, HF head-dim order
//   layers.{i}.v_rotation    same
//   layers.{i}.k_eigenvalues [D] or [Hkv,D]   eigh order (ascending), fp32
//   layers.{i}.v_eigenvalues same
//   layers.{i}.k_clip        [] or [Hkv]      clip RATIOS in [0,1], 0 = clip off
//   layers.{i}.v_clip        same
//   layers.{i}.k_mean        [Hkv,D] optional key mean (unrotated post-RoPE basis)
//
// In memory the per-layer tensors are stacked into contiguous arrays over
// layers: struct oscar_rotations (rotation/rotations.h), which says what
// applies to each (layer, KV head). Metadata is a list of string pairs; the
// writer fills the architecture numbers (oscar.num_layers, ...) and
// oscar.format_version / format itself from the struct, the caller sets the
// provenance keys (objectives, base model, calibration, ...).
//
// Writes are atomic at the directory level (util/fs.h, osc_dir_stage): the
// three files are written into "<parent>/.<name>.tmp.<pid>", fsync'ed, and the
// directory is put in place at <name>, swapped with an existing artifact
// directory in one rename (RENAME_EXCHANGE), whose old contents are then
// removed. A crash leaves the old artifact or the new one, never a half-written
// one nor none; the next write removes the temporaries of a dead writer. A
// <name> that is a file, or a directory holding anything but the three files,
// is refused.
//
// Usage:
//   struct oscar_artifact * a;
//   if (oscar_artifact_read("zoo/smollm2-135m/seq20000_prompt40_group64", true, &a) != OSCAR_OK)
//       fprintf(stderr, "%s\n", oscar_last_error());
//   const float * rk = oscar_rotations_k(&a->rot, layer, head);   // [D, D]
//   oscar_artifact_free(a);
#ifndef OSCAR_FORMATS_OSCAR_ARTIFACT_H
#define OSCAR_FORMATS_OSCAR_ARTIFACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rotation/rotations.h"
#include "util/error.h"

#define OSCAR_ARTIFACT_FORMAT_VERSION 1
#define OSCAR_ARTIFACT_TENSORS "oscar.safetensors"
#define OSCAR_ARTIFACT_JSON    "oscar.json"
#define OSCAR_ARTIFACT_README  "README.md"
// Orthogonality bound of the reader and the writer: max |R·Rᵀ − I| over the
// entries. Rounding an exactly orthogonal matrix to fp32 moves R·Rᵀ by at most
// 2u + u² < eps32 (u = 2^-24 per element, Cauchy-Schwarz over unit rows), and
// the fp64 fit before it adds ~D·eps64, nothing at fp32 scale: real artifacts
// measure <= 0.7·eps32 whatever D (every composition on SmolLM2, both
// groupings; synthetic D = 64..256). 8·eps32 (9.5e-7) leaves margin and still
// fails one flipped exponent bit, or mantissa bit >= 4 + log2(D), of any
// element of size >= 1/√D (every row has one), and its flipped sign unless the
// rest of its column is ~0. Smaller flips are the job of the sha256 check
// (oscar_artifact_load).
#define OSCAR_ARTIFACT_ORTH_TOL (8.0 * 1.1920928955078125e-7)

struct oscar_artifact {
    int32_t n_layer;       // L
    int32_t n_head;        // Hq
    int32_t n_head_kv;     // Hkv
    int32_t head_dim;      // D
    // The tensors (owned), of the same L, Hkv and D: rot.n_rot = Hkv for grouping "kv_head", 1 for
    // "layer"; rot.n_clip = Hkv for clip tensors [Hkv], 1 for []; rot.k_mean or NULL; rot.head_layer
    // from oscar.grouping_layers when it is there (--rotation-grouping auto), else NULL.
    struct oscar_rotations rot;
    // String metadata (owned): keys[i] -> values[i]. Order is insertion order;
    // the safetensors writer sorts.
    int32_t n_meta;
    int32_t cap_meta;
    char ** meta_keys;
    char ** meta_values;
    // Writer only (owned, may be NULL): a JSON object text merged into
    // oscar.json under "summary" (gate table, clip table, timings), and a
    // markdown fragment placed in README.md after the front matter.
    char * summary_json;
    char * card_markdown;
};

// Allocates an artifact with zeroed tensors of the given shape (k_mean NULL
// unless with_k_mean; no head_layer). Free with oscar_artifact_free().
enum oscar_status oscar_artifact_init(int32_t n_layer, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                                      bool per_head, bool clip_per_head, bool with_k_mean,
                                      struct oscar_artifact ** out);
void oscar_artifact_free(struct oscar_artifact * a);

// Metadata: set (copies; replaces an existing key), get (NULL when absent).
enum oscar_status oscar_artifact_set_meta(struct oscar_artifact * a, const char * key, const char * value);
const char * oscar_artifact_get_meta(const struct oscar_artifact * a, const char * key);
// Takes ownership-free copies of the writer extras (NULL clears).
enum oscar_status oscar_artifact_set_summary(struct oscar_artifact * a, const char * summary_json,
                                             const char * card_markdown);

// Metadata keys the writer requires the caller to set (NULL-terminated list).
// The writer itself sets: format, oscar.format_version, oscar.source_grouping,
// oscar.num_layers, oscar.num_heads, oscar.num_kv_heads, oscar.head_dim, oscar.qk_order.
extern const char * const oscar_artifact_required_meta[];

// The README.md model card of `a` (formats/oscar-card.c; spec: formats/README.md)
// as malloc'ed text in *text, *len bytes. Only valid Hub ids (oscar.base_model_id,
// oscar.calib_datasets) and licence identifiers (oscar.base_model_license) reach its
// YAML front matter, which always passes oscar_hub_check_card.
enum oscar_status oscar_artifact_card(const struct oscar_artifact * a, char ** text, size_t * len);

// Validates the in-memory artifact: shapes > 0, finite values, clip ratios in
// [0, 1], eigenvalues finite, required metadata present and consistent with
// the struct, and (check_orth) every rotation orthogonal to
// OSCAR_ARTIFACT_ORTH_TOL. Errors name the layer / tensor / key.
enum oscar_status oscar_artifact_validate(const struct oscar_artifact * a, bool check_orth);

// Reads an artifact directory (or a path to its oscar.safetensors). Every
// tensor must be present with the shape the metadata implies, no unknown
// tensors, metadata complete (OSCAR_ERR_FORMAT naming what is wrong; a newer
// oscar.format_version gives OSCAR_ERR_UNSUPPORTED). oscar.json and README.md
// are not required by the reader (they are derived files).
enum oscar_status oscar_artifact_read(const char * path, bool check_orth, struct oscar_artifact ** out);

// What the loading tool knows: the identity of the model the artifact is for
// (NULL: no model, e.g. an export) and whether the user forces the load.
struct oscar_artifact_trust {
    const char * model_sha256; // oscar_model.source_sha256 of that model ("" = unknown)
    const char * model_label;  // how the user named the model, for messages
    bool         force;        // integrity failures become warnings
};

// Reads an artifact (oscar_artifact_read: structure, shapes, finite values)
// and checks its integrity, the one path every tool loads artifacts by:
//   (a) the sha256 of oscar.safetensors equals the one oscar.json records for
//       it (a missing oscar.json or record fails too): OSCAR_ERR_FORMAT;
//   (b) every rotation is orthogonal to OSCAR_ARTIFACT_ORTH_TOL: OSCAR_ERR_NUMERIC;
//   (c) with trust->model_sha256: it equals oscar.base_model_sha256, the
//       identity of the model the artifact was calibrated on: OSCAR_ERR_INVALID
//       naming both.
// With trust->force each failure is logged as a warning and the artifact is
// returned anyway; structural errors are never forced. trust NULL: no model,
// no force.
// A path that oscar_import_is_source accepts (a reference .pt pair, one of its
// files, a zoo folder) is imported in memory instead (formats/oscar-import.h):
// (a) does not apply, (b) does, and (c) warns, when the import records no
// identity, that only the shapes can be checked.
enum oscar_status oscar_artifact_load(const char * path, const struct oscar_artifact_trust * trust,
                                      struct oscar_artifact ** out);

// Checks the artifact against a model's attention shape (layers, heads, D;
// for an import that knows no heads, oscar.num_heads_source "unknown ...",
// layers and D, and KV heads only when its tensors depend on them):
// OSCAR_ERR_INVALID "artifact has 30 layers of head_dim 64, model ... has ...".
enum oscar_status oscar_artifact_check_shape(const struct oscar_artifact * a, int32_t n_layer, int32_t n_head,
                                             int32_t n_head_kv, int32_t head_dim, const char * model_name);

// Validates (with the orthogonality check) and writes the artifact directory
// atomically (see the header comment). The parent directory is created.
enum oscar_status oscar_artifact_write(const struct oscar_artifact * a, const char * dir);
// The destination checks of oscar_artifact_write alone (a name, a parent we
// can create and write in, no foreign file or directory in the way), to run
// before the compute that produces the artifact. The parent is created.
enum oscar_status oscar_artifact_check_dest(const char * dir);

#endif
