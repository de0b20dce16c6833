// pt-writer.h - torch.save-compatible .pt writer for the reference OSCAR rotation schema.
//
// Writes what `torch.save(obj, path)` writes for a plain dict of fp32 CPU
// tensors (ecosystem.md §4.1): a ZIP of STORED records under one top-level
// folder named after the file stem:
//   <stem>/data.pkl             pickle protocol 2 (the object, tensors as persistent ids)
//   <stem>/.format_version      "1"
//   <stem>/.storage_alignment   "64"
//   <stem>/byteorder            "little"
//   <stem>/data/<key>           raw little-endian storage bytes, 64-byte aligned in the file
//   <stem>/version              "3\n"
//   <stem>/.data/serialization_id
// The object is the reference rotation dict (method.md §7):
//   {"format_version": 1|2, "objective": str, "source_grouping": "layer"|"kv_head",
//    "layers": {int i: {"layer_id": i, "rotation": f32 [D,D] | [Hkv,D,D],
//                       "eigenvalues": f32 [D] | [Hkv,D]}}}
// Each tensor is torch._utils._rebuild_tensor_v2(("storage", torch.FloatStorage,
// key, "cpu", numel), 0, size, stride, False, collections.OrderedDict()).
//
// It refuses archives that would need ZIP64 (> 4 GiB or > 65535 records). The
// file is written atomically (temp + fsync + rename).
#ifndef OSCAR_FORMATS_PT_WRITER_H
#define OSCAR_FORMATS_PT_WRITER_H

#include <stdint.h>

#include "util/error.h"

struct oscar_pt_rotations {
    int32_t      format_version;  // 1 (per layer) or 2 (per KV head)
    const char * objective;       // e.g. "qqt_r_h_pbr"
    int32_t      n_layer;         // L
    int32_t      n_rot;           // 1 for format 1 (tensors [D,D], [D]); Hkv for format 2 ([Hkv,D,D], [Hkv,D])
    int32_t      head_dim;        // D
    const float * rotation;       // [L, n_rot, D, D]
    const float * eigenvalues;    // [L, n_rot, D]
};

// Writes the rotation dict to `path` (the zip folder is the file stem).
enum oscar_status oscar_pt_write_rotations(const char * path, const struct oscar_pt_rotations * r);

// The key-mean file of the OptR pipeline (rotation/compute_k_mean.py writes it, the OptR SGLang
// engine's unified_kv_pool.py _load_oscar_k_means reads it; formats/README.md):
//   {"format_version": 1, "note": str, "layers": {int i: {"layer_id": i, "mu": f32 [Hkv,D]}}}
struct oscar_pt_k_mean {
    const char *  note;      // what the mean is (free text)
    int32_t       n_layer;   // L
    int32_t       n_head_kv; // Hkv
    int32_t       head_dim;  // D
    const float * mu;        // [L, Hkv, D]
};

// Writes the key-mean dict to `path`, atomically like the rotations.
enum oscar_status oscar_pt_write_k_mean(const char * path, const struct oscar_pt_k_mean * m);

#endif
