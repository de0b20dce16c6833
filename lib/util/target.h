// target.h - target profiles: what the engine that serves an artifact can
// represent. One table (target.c) says, per target, how clips are shared, the
// quantizer the clip search simulates, the BF16 sink/recent the engine uses
// when nothing is set, whether rotations or clips may differ per KV head, the
// architectures whose graphs apply the rotations, and the export format the
// engine reads. oscar-calibrate, oscar-verify and oscar-zoo export take
// --target NAME through osc_parse_target. Facts are cited in target.c.
//
//   oscar     everything oscar can express (per layer [x KV head] clips, any
//             architecture oscar loads); no engine loads all of it
//   sglang    the SGLang OSCAR fork (FutureMLS-Lab/OSCAR sglang-research)
//   llamacpp  the OSCAR llama.cpp fork (FutureMLS-Lab/OSCAR zhongzhu/llamacpp)
#ifndef OSCAR_UTIL_TARGET_H
#define OSCAR_UTIL_TARGET_H

#include <stdbool.h>
#include <stdint.h>

#include "util/error.h"

enum oscar_target {
    OSCAR_TARGET_OSCAR    = 0,
    OSCAR_TARGET_SGLANG   = 1,
    OSCAR_TARGET_LLAMACPP = 2,
};

enum oscar_target_clips {
    OSCAR_TARGET_CLIPS_LAYER = 0, // one K and one V ratio per layer (x KV head with per-head rotations)
    OSCAR_TARGET_CLIPS_KV    = 1, // one K and one V ratio for the whole model
    OSCAR_TARGET_CLIPS_ONE   = 2, // one ratio for K and V of the whole model
};

struct oscar_target_profile {
    enum oscar_target       id;
    const char *            name;          // "oscar" | "sglang" | "llamacpp"
    const char *            engine;        // for messages
    enum oscar_target_clips clips;
    const char *            clip_quant;    // lib/verify preset the clip search simulates: "oscar" | "q2_0"
    const char *            cache;         // the engine's INT2 cache format, in words
    bool                    has_window;    // sink/recent below are the engine's defaults (else the tool's own)
    int32_t                 sink, recent;  // engine defaults (tokens)
    int32_t                 window_align;  // sink and recent must be multiples of this (1: any)
    bool                    per_head_rotations, per_head_clips;
    const char * const *    archs;         // NULL-terminated oscar_arch_name() list; NULL = every one
    const char * const *    archs_refused; // of those, the ones the engine serves without rotations (NULL: none)
    const char *            refused_why;   // why, for the message naming the architecture
    const char *            format;        // oscar-zoo export --format the engine reads, or NULL (any)
};

// The profile of t (never NULL for a valid enum).
const struct oscar_target_profile * oscar_target_get(enum oscar_target t);
// By name; NULL when unknown.
const struct oscar_target_profile * oscar_target_find(const char * name);
// --target NAME: oscar | sglang | llamacpp, else OSCAR_ERR_INVALID naming opt and the choices.
enum oscar_status osc_parse_target(const char * opt, const char * text, const struct oscar_target_profile ** out);
// Whether the engine's graphs apply rotations for this architecture (oscar_arch_name spelling).
bool oscar_target_arch_ok(const struct oscar_target_profile * p, const char * arch);
// "qwen3" or "llama, qwen2, ..." for messages (static; "any" when every architecture).
const char * oscar_target_arch_list(const struct oscar_target_profile * p);
// "per layer" | "one K and one V for the model" | "one for K and V of the model"
const char * oscar_target_clips_name(enum oscar_target_clips c);

#endif
