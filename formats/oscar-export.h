// oscar-export.h - oscar artifact -> engine formats (reference .pt pair, llama.cpp-fork GGUF).
//
// .pt (SGLang OSCAR fork and OptR engine, load_oscar_rotations): two files in an
// output directory in the reference schema (method.md §7): format_version 1 with
// [D,D] per layer as k_rotation_<oscar.k_objective>.pt / v_rotation_<oscar.v_objective>.pt,
// or 2 with [Hkv,D,D] for per-KV-head artifacts as k_rotation_perhead.pt /
// v_rotation_perhead.pt; plus k_mean_decode.pt ({layers: {i: {mu: [Hkv,D]}}})
// when the artifact centres keys.
//
// GGUF (OSCAR llama.cpp fork, ecosystem.md §5.2): tensors
// blk.{i}.attn_k_rot.weight / blk.{i}.attn_v_rot.weight, F32, ne = [D, D],
// holding Mᵀ (row j of the stored matrix = column j of M), so that
// ggml_mul_mat(rot, k) = k·M. For a llama-architecture consumer the K rotation
// (stored in Hugging Face head-dim order) is row-permuted into ggml order
// first: R_ggml[π(i),:] = R_HF[i,:], π(i) = 2i, π(i+D/2) = 2i+1 (method.md §1.1).
// Either a standalone file (oscar.* metadata + rotation tensors) or, with a
// base GGUF, the base's metadata and tensors copied unchanged (tensor bytes
// identical) plus the oscar.* keys and the rotation tensors. Per-KV-head and
// k_mean artifacts are refused for GGUF (the fork reads one [D,D] rotation per
// layer and no key mean).
//
// Every output file is written atomically; on a failure nothing new is left
// behind (the .pt pair: the K file is removed when the V file fails).
#ifndef OSCAR_FORMATS_OSCAR_EXPORT_H
#define OSCAR_FORMATS_OSCAR_EXPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "formats/oscar-artifact.h"
#include "util/error.h"

// File names of the .pt export (formats/README.md says which loader reads which).
#define OSCAR_EXPORT_K_PERHEAD_PT "k_rotation_perhead.pt" // per-KV-head pair: the OSCAR zoo's per-head names
#define OSCAR_EXPORT_V_PERHEAD_PT "v_rotation_perhead.pt"
#define OSCAR_EXPORT_K_MEAN_PT    "k_mean_decode.pt"       // the OptR pipeline's key-mean file

// Writes the .pt pair into out_dir (created), and k_mean_decode.pt when the artifact has a k_mean.
// *k_path / *v_path / *mean_path (malloc'ed, may be NULL pointers to skip) receive the file paths
// (*mean_path NULL without a k_mean). On a failure none of the three is left behind.
enum oscar_status oscar_export_pt_all(const struct oscar_artifact * a, const char * out_dir, char ** k_path,
                                      char ** v_path, char ** mean_path);

// oscar_export_pt_all without the key-mean path.
enum oscar_status oscar_export_pt(const struct oscar_artifact * a, const char * out_dir, char ** k_path,
                                  char ** v_path);

enum oscar_export_qk_order {
    OSCAR_EXPORT_QK_AUTO = 0, // ggml order when the target architecture is "llama", else HF order
    OSCAR_EXPORT_QK_HF,       // never permute
    OSCAR_EXPORT_QK_GGML,     // always permute the K rotation
};

struct oscar_target_profile;

struct oscar_export_gguf_opts {
    const char *               base;     // base model GGUF to bake into, or NULL for a standalone file
    enum oscar_export_qk_order qk_order;
    const struct oscar_target_profile * target; // refuse what it cannot load (oscar-serve.h), or NULL
};

// Writes the GGUF export to out_path. *permuted (may be NULL) tells whether
// the K rotation was moved to ggml order. With o->target, oscar_serve_check runs
// first on the base's architecture (nothing is written when it refuses).
enum oscar_status oscar_export_gguf(const struct oscar_artifact * a, const char * out_path,
                                    const struct oscar_export_gguf_opts * o, bool * permuted);

// dst = the stored GGUF matrix for rotation src [D,D] (row-major, x·src):
// dst[j][r] = M[r][j] with M = src (permute false) or M = the ggml-order
// row permutation of src (permute true; D even).
void oscar_export_rot_to_ggml(const float * src, float * dst, int32_t D, bool permute);

#endif
