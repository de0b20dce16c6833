// oscar-serve.h - what an engine target can load from an artifact, and the
// recipe that serves an export there: the environment the fork reads and the
// command that starts it, as lines a shell can run (serve.env).
//
//   oscar_serve_check(a, t, &g)      -> OSCAR_ERR_UNSUPPORTED saying why and what would work
//   oscar_serve_recipe(a, t, &f, &r) -> r.env[], r.command, r.notes[] (what differs from what
//                                       oscar measured: shared clips, another quantizer, ...)
//   oscar_serve_text(&r, header, &s) -> "# ...\nexport VAR=value\n...\ncommand\n"
//
// Every variable and flag is the fork's own (util/target.c cites where each is read):
// SGLang: SGLANG_ENABLE_MIXED_KV_WINDOWS, SGLANG_MIXED_KV_{PREFIX,RECENT}_TOKENS,
// SGLANG_MIXED_KV_{HP,SCALE}_DTYPE, SGLANG_OSCAR_{K,V}_ROTATION_PATH, SGLANG_OSCAR_{K,V}_CLIP_RATIO,
// SGLANG_OSCAR_ABSORB_V_ROTATION; python -m sglang.launch_server --attention-backend triton
// --kv-cache-dtype int2 --kv-cache-quant-group-size G. llama.cpp: LLAMA_KV_NO_HADAMARD,
// LLAMA_KV_CLIP_RATIO, LLAMA_KV_HP_SINK, LLAMA_KV_HP_RECENT; llama-cli -m FILE
// --cache-type-k q2_0 --cache-type-v q2_0 -fa on (a quantized V cache needs flash attention).
#ifndef OSCAR_FORMATS_OSCAR_SERVE_H
#define OSCAR_FORMATS_OSCAR_SERVE_H

#include <stdbool.h>

#include "formats/oscar-artifact.h"
#include "util/error.h"
#include "util/target.h"

#define OSCAR_SERVE_MAX_ENV   16
#define OSCAR_SERVE_MAX_NOTES 8

// What the GGUF export bakes into (llamacpp): the base model's general.architecture, or NULL for a
// standalone rotation file.
struct oscar_serve_gguf {
    const char * base_arch;
};

// Refuses (OSCAR_ERR_UNSUPPORTED, a message naming the target, why, and what would work) what
// target t cannot load: per-KV-head rotations (sglang, llamacpp), a k_mean (llamacpp), a sink/recent off the engine's
// alignment (sglang), an architecture whose graph does not apply the rotations (llamacpp: the
// artifact's and the base GGUF's), a standalone GGUF (llamacpp reads the tensors from the model).
// The oscar target refuses nothing. g: NULL unless the export is a GGUF.
enum oscar_status oscar_serve_check(const struct oscar_artifact * a, const struct oscar_target_profile * t,
                                    const struct oscar_serve_gguf * g);

struct oscar_serve_files {
    const char * k_pt, * v_pt; // sglang: the .pt pair, as the recipe names them
    const char * gguf;         // llamacpp: the baked model GGUF
};

struct oscar_serve_env {
    char name[48];
    char value[1024];
};

struct oscar_serve_recipe {
    const struct oscar_target_profile * target;
    int32_t n_env;
    struct oscar_serve_env env[OSCAR_SERVE_MAX_ENV];
    char model_line[1200];  // sglang: the line that sets $MODEL (a default when the Hub id is known)
    char command[2600];     // the launch command, shell-quoted
    int32_t n_notes;
    char notes[OSCAR_SERVE_MAX_NOTES][480]; // where serving differs from what oscar measured
};

// The llama.cpp fork's one clip ratio for K and V (LLAMA_KV_CLIP_RATIO, which the fork reads with
// atof): the artifact's oscar.k_clip_ratio as written in it, "0.96" (the fork's README) when absent.
// The recipe exports it and oscar-verify's q2_0 simulates it.
const char * oscar_serve_llamacpp_clip(const struct oscar_artifact * a);

// The recipe of an artifact that passed oscar_serve_check for t (sglang or llamacpp; the oscar
// target has none: OSCAR_ERR_INVALID).
enum oscar_status oscar_serve_recipe(const struct oscar_artifact * a, const struct oscar_target_profile * t,
                                     const struct oscar_serve_files * f, struct oscar_serve_recipe * r);

// serve.env text: header comment lines (header may hold several '\n'-separated lines, or be NULL),
// one "# note: ..." per note, "export NAME=value" per variable (shell-quoted), the model line and
// the command. *text malloc'ed (caller frees).
enum oscar_status oscar_serve_text(const struct oscar_serve_recipe * r, const char * header, char ** text);

// s quoted for a POSIX shell: bare when it has only [A-Za-z0-9_./:@%+=,-], else '...' with
// embedded quotes as '\''. Into buf (n bytes); false if it does not fit.
bool oscar_serve_shell_quote(const char * s, char * buf, size_t n);

#endif
