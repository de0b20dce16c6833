// hf-config.h - Hugging Face config.json -> struct oscar_model_config.
//
// Accepts model_type llama, mistral, qwen2, qwen3 (architectures[0] is
// checked against them too). Refuses, with a message naming the file and
// the value: unknown model types (OSCAR_ERR_UNSUPPORTED), rope_scaling other
// than null / {"rope_type": "default"} (UNSUPPORTED), an enabled sliding
// window (UNSUPPORTED), missing or non-positive sizes, heads that do not
// divide, and malformed JSON (OSCAR_ERR_FORMAT).
#ifndef OSCAR_FORMATS_HF_CONFIG_H
#define OSCAR_FORMATS_HF_CONFIG_H

#include <stddef.h>

#include "model/model.h"
#include "util/error.h"

enum oscar_status osc_hf_config_load(const char * path, struct oscar_model_config * out);
// The same from memory; `name` is used in error messages.
enum oscar_status osc_hf_config_parse(const char * json, size_t len, const char * name,
                                      struct oscar_model_config * out);

#endif
