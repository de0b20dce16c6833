// hf-config.h - Hugging Face config.json -> struct oscar_model_config.
//
// Accepts model_type llama, mistral, qwen2, qwen3, phi3, qwen2_moe, qwen3_moe, mixtral, glm4_moe, gemma3_text and
// gemma3 (the text model of its text_config) (architectures[0] is
// checked against them too), RoPE types default, linear, llama3 and yarn
// (rope_parameters or rope_scaling), phi3's and glm4_moe's partial_rotary_factor, and
// sliding windows as transformers applies them (hf-config.c). Refuses, with a
// message naming the file, the field and the value: unknown model types and
// RoPE types (dynamic, longrope, ...), layer patterns it cannot express
// (OSCAR_ERR_UNSUPPORTED), missing or non-positive sizes, heads that do not
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
