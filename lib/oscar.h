// oscar.h - the public API of liboscar, in one header.
//
// oscar calibrates, verifies and shares OSCAR rotations for 2-bit KV caches.
// Every fallible call returns enum oscar_status (0 = OSCAR_OK) and records a
// message for oscar_last_error(); nothing in the library exits or aborts on
// bad input.
//
// Dimension vocabulary used across the library and its comments:
//   T = n_tokens, L = n_layer, Hq = n_head, Hkv = n_head_kv,
//   D = head_dim, g = Hq / Hkv (query heads per KV head), C = n_embd.
// Arrays are row-major; "[T, Hkv, D]" means D varies fastest.
//
// The pipeline, stage by stage (see cmd/oscar-calibrate.c):
//   oscar_model_open -> oscar_tokenizer_load -> oscar_corpus_tokenize
//   -> oscar_calib_capture: layer by layer (each layer's weights read when it
//      runs, oscar_model_layer_acquire), oscar_forward_layer with an
//      oscar_capture_hook feeding oscar_stats_add
//   -> oscar_fit_stats (rotations) -> clip search + gate (lib/calibrate)
//   -> oscar_artifact_write; oscar-verify measures an artifact (lib/verify),
//   oscar-zoo moves it (lib/hub) and exports it (formats/oscar-export.h); both
//   load it with oscar_artifact_load (sha256, orthogonality, model identity).
#ifndef OSCAR_H
#define OSCAR_H

#include "util/version.h"

#include "util/error.h"
#include "util/log.h"

#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/corpus.h"
#include "stats/stats.h"
#include "rotation/rotation.h"
#include "rotation/fit.h"
#include "quant/quant.h"
#include "attention/attention.h"
#include "attention/kv-cache.h"
#include "calibrate/calibrate.h"
#include "verify/metrics.h"
#include "verify/report.h"
#include "hub/hub.h"
#include "backend/backend.h"
#include "backend/forward-backend.h"
#include "formats/oscar-artifact.h"
#include "formats/oscar-export.h"

#endif
