// base-model.h - the Hub id and licence of the model an artifact was
// calibrated on, for the model card's `base_model:` and `license:`.
//
// The id, first found wins:
//   1. --base-model OWNER/NAME;
//   2. --model given as a Hub spec owner/name[@rev][:path] (not a local path);
//   3. a path in the HF cache layout .../models--OWNER--NAME/snapshots/<commit>/...;
//   4. a GGUF's metadata: general.source.huggingface.repository,
//      general.source.repo_url, general.source.url (the repo the GGUF was
//      converted from), then general.base_model.0.repo_url and
//      general.base_model.0.organization + .name (the model it derives
//      from); URLs only on huggingface.co, and org + name only when they form
//      a valid id as written (llama.cpp writes them as titles: "Smollm2 135M").
// Otherwise there is no id. The licence: a GGUF's general.license, or the
// `license:` of a Hugging Face model directory's README.md front matter.
#ifndef OSCAR_CALIBRATE_BASE_MODEL_H
#define OSCAR_CALIBRATE_BASE_MODEL_H

#include <stddef.h>

#include "util/error.h"

#define OSCAR_BASE_MODEL_ID_MAX 200 // owner (96) + '/' + name (96) + NUL, rounded up

struct oscar_base_model {
    char id[OSCAR_BASE_MODEL_ID_MAX]; // "owner/name", or "" when no Hub id is known
    char id_from[96];                 // where the id came from, for the card ("--base-model", ...)
    char license[128];                // "" when not recorded
    char license_from[96];
};

// "owner/name" of a Hub spec owner/name[@rev][:path] into id[n]; 0 when spec is none.
int oscar_base_model_id_from_spec(const char * spec, char * id, size_t n);
// OWNER/NAME of the last ".../models--OWNER--NAME/snapshots/<commit>[/...]" in path; 0 when none.
int oscar_base_model_id_from_cache_path(const char * path, char * id, size_t n);
// OWNER/NAME of "http(s)://[www.]huggingface.co/OWNER/NAME[.git][/...][?#...]", or of a
// bare "OWNER/NAME"; 0 for other hosts and for Hub pages that are not model repos
// (datasets/, spaces/, papers/, ...).
int oscar_base_model_id_from_url(const char * url, char * id, size_t n);
// Id and licence from a GGUF file's metadata (fields left as they are when absent).
enum oscar_status oscar_base_model_from_gguf(const char * path, struct oscar_base_model * out);

// The whole rule above. explicit_id: --base-model (already validated) or NULL;
// model_arg: --model as given, or NULL (--random-init); model_path: the local
// file or directory it resolved to, or NULL. A model README.md whose front
// matter does not parse leaves the licence unknown, with a warning.
enum oscar_status oscar_base_model_detect(const char * explicit_id, const char * model_arg, const char * model_path,
                                          struct oscar_base_model * out);

#endif
