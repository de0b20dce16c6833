// oscar-zoo-layout.h - an oscar artifact in the published OSCAR rotation zoo's layout.
//
// The zoo (the reference OSCAR repository's rotation releases) keeps one folder per model and
// calibration, <Model>/seq<T>_prompt<N>_group<G>/, holding k_rotation_<objective>.pt and
// v_rotation_<objective>.pt (e.g. k_rotation_qqt_r_h_pbr.pt, v_rotation_sst_r_h_pbr.pt).
// `oscar-zoo push --layout zoo` uploads an artifact there with the .pt pair (formats/pt-writer.h)
// beside oscar.safetensors / oscar.json / README.md, so that both the reference tools (the .pt files)
// and oscar (the artifact, with its clips and provenance) read the same folder.
//
// The folder name: <Model> is the last part of oscar.base_model_id (the Hub id, e.g. Qwen3-8B), else
// oscar.base_model, with characters other than [A-Za-z0-9._-] made '-'; the leaf is oscar.calib_tag,
// which oscar-calibrate writes as seq<T>_prompt<N>_group<G> (lib/calibrate/corpus.c).
#ifndef OSCAR_FORMATS_OSCAR_ZOO_LAYOUT_H
#define OSCAR_FORMATS_OSCAR_ZOO_LAYOUT_H

#include <stddef.h>

#include "formats/oscar-artifact.h"
#include "util/error.h"

// "<Model>/seq<T>_prompt<N>_group<G>" of `a` into buf; `model` overrides <Model> when not NULL.
// Refuses (naming the key) an artifact without a model name or whose calib_tag is not of that form.
enum oscar_status oscar_zoo_layout_path(const struct oscar_artifact * a, const char * model, char * buf, size_t n);

// A new temporary folder (under $TMPDIR, else /tmp) holding copies of the regular files of the
// artifact directory `dir` (its own .pt files left out) and the .pt pair exported from `a`.
// *stage is malloc'ed; remove it with oscar_zoo_layout_unstage.
enum oscar_status oscar_zoo_layout_stage(const char * dir, const struct oscar_artifact * a, char ** stage);

// Removes the folder made by oscar_zoo_layout_stage (its files, then itself) and frees the path.
void oscar_zoo_layout_unstage(char * stage);

#endif
