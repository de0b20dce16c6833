// pt-reader.h - a restricted reader of torch.save files (.pt): data, never code.
//
// A torch.save file is a ZIP archive whose records share one top-level folder
// (the file stem at save time, any name):
//   <archive>/data.pkl      pickle (protocol 2) of the object; tensors as
//                           torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
//                           requires_grad, backward_hooks[, metadata]), each storage a
//                           persistent id ('storage', torch.<Dtype>Storage, key, location, numel)
//   <archive>/data/<key>    the storage's raw little-endian bytes (numel · element size)
//   <archive>/byteorder     "little" (absent in old files: little)
//   <archive>/version, .format_version, .storage_alignment, .data/serialization_id (ignored)
// Records may be stored (torch) or deflated (zip tools); torch.save's ZIP64 layout is read.
//
// The unpickler is a small interpreter of an allow-list of opcodes (those
// Python's pickler emits for dicts, lists, tuples, str, int, float, bool, None,
// memo references, globals and persistent ids, protocols 2 to 4) and calls only
// four known globals: _rebuild_tensor_v2, _rebuild_parameter,
// collections.OrderedDict (empty) and the storage classes Float/Double/Half/
// BFloat16Storage (only inside a persistent id). Anything else - another
// global (os.system, builtins.eval, ...), BUILD, INST, OBJ, NEWOBJ, EXT*, the
// text-protocol opcodes - is refused naming the file, the opcode or global and
// its offset in data.pkl. Limits: 64 nested containers, 2^20 memo slots and
// values, 1 MiB strings, 8 tensor dimensions, 2^28 elements per tensor;
// every tensor's offset, sizes and strides must lie inside its storage, and a
// storage's numel · element size must equal its record's length.
//
// Usage:
//   struct osc_pt * f;
//   if (osc_pt_open("k_rotation_qqt_r_h_pbr.pt", &f) != OSCAR_OK) puts(oscar_last_error());
//   const struct osc_pt_value * layers = osc_pt_get(osc_pt_root(f), "layers");
//   const struct osc_pt_value * r = osc_pt_get(osc_pt_get_index(layers, 0), "rotation");
//   if (r && r->kind == OSC_PT_TENSOR) osc_pt_tensor_f32(r, dst); // osc_pt_numel(r) floats
//   osc_pt_close(f);
#ifndef OSCAR_FORMATS_PT_READER_H
#define OSCAR_FORMATS_PT_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

#define OSC_PT_MAX_DIMS 8

enum osc_pt_kind {
    OSC_PT_NONE, OSC_PT_BOOL, OSC_PT_INT, OSC_PT_FLOAT, OSC_PT_STR, OSC_PT_TUPLE, OSC_PT_LIST, OSC_PT_DICT,
    OSC_PT_TENSOR,
    OSC_PT_GLOBAL,  // an allowed global not (yet) called
    OSC_PT_STORAGE, // a persistent id's storage
};

enum osc_pt_dtype { OSC_PT_F32, OSC_PT_F64, OSC_PT_F16, OSC_PT_BF16 };

// One unpickled value (owned by its struct osc_pt; read-only for callers).
struct osc_pt_value {
    enum osc_pt_kind kind;
    int32_t          depth; // containers: 1 + the deepest child at insertion
    bool             b;     // BOOL
    int64_t          i;     // INT; GLOBAL: which one (pt-pickle.c)
    double           f;     // FLOAT
    const char *     str;   // STR (NUL-terminated, UTF-8 as pickled), len bytes
    size_t           len;
    // TUPLE, LIST: n items; DICT: n / 2 pairs, key items[2k], value items[2k+1]
    struct osc_pt_value ** items;
    size_t                 n, cap;
    // TENSOR and STORAGE
    enum osc_pt_dtype dtype;
    const uint8_t *   data;          // the storage's bytes
    uint64_t          storage_numel; // elements in the storage
    int32_t           ndim;          // TENSOR
    int64_t           shape[OSC_PT_MAX_DIMS], stride[OSC_PT_MAX_DIMS], offset;
};

struct osc_pt;

// Reads a .pt file (mapped) or an in-memory copy (`label` names it in errors).
enum oscar_status osc_pt_open(const char * path, struct osc_pt ** out);
enum oscar_status osc_pt_open_mem(const uint8_t * data, size_t size, const char * label, struct osc_pt ** out);
void              osc_pt_close(struct osc_pt * f);

const struct osc_pt_value * osc_pt_root(const struct osc_pt * f);
const char *                osc_pt_label(const struct osc_pt * f);

// Dict lookups (NULL when v is not a dict or has no such key): by a string
// key, or by an integer key or its decimal string (layer ids are either).
const struct osc_pt_value * osc_pt_get(const struct osc_pt_value * v, const char * key);
const struct osc_pt_value * osc_pt_get_index(const struct osc_pt_value * v, int64_t key);

// Elements of a tensor (product of its shape).
uint64_t osc_pt_numel(const struct osc_pt_value * t);
// Its elements in C order as fp32 (F64 rounded, F16/BF16 exact), following
// its strides; dst holds osc_pt_numel(t) floats.
void osc_pt_tensor_f32(const struct osc_pt_value * t, float * dst);

const char * osc_pt_kind_name(enum osc_pt_kind k);
const char * osc_pt_dtype_name(enum osc_pt_dtype d);

#endif
