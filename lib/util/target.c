// target.c - the target profiles (see target.h). Every engine fact below was
// read in FutureMLS-Lab/OSCAR: main @ 473ff3f9 for SGLang (sglang-research/),
// branch zhongzhu/llamacpp @ 4570ea60 for llama.cpp.
#include "util/target.h"

#include <string.h>

// SGLang fork:
//  - clips: python/sglang/srt/environ.py SGLANG_OSCAR_K_CLIP_RATIO / _V_CLIP_RATIO,
//    two floats for every layer (mem_cache/memory_pool.py OscarRotationConfig);
//  - rotations: memory_pool.py load_oscar_rotations wants "rotation" [head_dim, head_dim]
//    per layer and raises ValueError on any other shape (no per-KV-head form on any branch);
//  - cache: uniform min-max INT2 in groups of --kv-cache-quant-group-size along head_dim
//    (default head_dim), scale/zero in SGLANG_MIXED_KV_SCALE_DTYPE (mem_cache/unified_kv_pool.py);
//  - windows: SGLANG_MIXED_KV_PREFIX_TOKENS = 32, SGLANG_MIXED_KV_RECENT_TOKENS = 128 (environ.py),
//    each a multiple of N_Q = 4 * itemsize(SGLANG_MIXED_KV_HP_DTYPE) = 8 for bfloat16, else
//    UnifiedInt2HPKVPool raises ValueError (unified_kv_pool.py compute_page_geometry);
//  - architectures: the pool sits under every full-attention model (hybrid SWA models are excluded
//    in server_args.py _unified_mixed_kv_active), but the Triton backend turns the mixed INT2 path
//    and its rotations off whenever the model has a sliding window (layers/attention/triton_backend.py:
//    enable_mixed_kv needs model_runner.sliding_window_size None, which is set from the model's
//    get_attention_sliding_window_size: gemma3_causal.py has one). Of oscar's architectures that is
//    gemma3; glm4moe (Glm4MoeForCausalLM, full attention) and the MoE models stay on the pool.
// llama.cpp fork:
//  - clips: ggml/src/ggml-quants.c q2_0_clip_ratio reads one LLAMA_KV_CLIP_RATIO for K and V
//    (0 when unset = no clip);
//  - cache: GGML_TYPE_Q2_0 (ggml-common.h block_q2_0: 32 elements, f16 d and m, 2-bit codes),
//    lib/quant/q2-0.c;
//  - windows: src/llama-kv-cache.cpp reads LLAMA_KV_HP_SINK / LLAMA_KV_HP_RECENT with atoi,
//    0 when unset (no high-precision buffer); its README runs 512 / 2048;
//  - rotations: src/models/qwen3.cpp alone creates blk.%d.attn_k_rot / attn_v_rot ([D, D] per
//    layer); other architectures reject the extra tensors ("wrong number of tensors").
static const char * const llamacpp_archs[] = {"qwen3", NULL};
static const char * const sglang_refused[] = {"gemma3", NULL};

static const struct oscar_target_profile profiles[] = {
    {.id = OSCAR_TARGET_OSCAR, .name = "oscar", .engine = "oscar (no engine restrictions)",
     .clips = OSCAR_TARGET_CLIPS_LAYER, .clip_quant = "oscar",
     .cache = "uniform asymmetric INT2 with the run's group size and scale dtype", .has_window = false,
     .window_align = 1, .per_head_rotations = true, .per_head_clips = true, .archs = NULL, .format = NULL},
    {.id = OSCAR_TARGET_SGLANG, .name = "sglang", .engine = "the SGLang OSCAR fork",
     .clips = OSCAR_TARGET_CLIPS_KV, .clip_quant = "oscar",
     .cache = "uniform asymmetric INT2 (--kv-cache-dtype int2) with the run's group size and scale dtype",
     .has_window = true, .sink = 32, .recent = 128, .window_align = 8, .per_head_rotations = false,
     .per_head_clips = false, .archs = NULL, .archs_refused = sglang_refused,
     .refused_why = "its Triton backend serves a model with sliding-window layers without the INT2 cache and "
                    "its rotations (triton_backend.py: enable_mixed_kv needs sliding_window_size None)",
     .format = "pt"},
    {.id = OSCAR_TARGET_LLAMACPP, .name = "llamacpp", .engine = "the OSCAR llama.cpp fork",
     .clips = OSCAR_TARGET_CLIPS_ONE, .clip_quant = "q2_0",
     .cache = "Q2_0 (--cache-type-k/v q2_0: 32-element Lloyd-Max blocks, f16 scale and mean)",
     .has_window = true, .sink = 0, .recent = 0, .window_align = 1, .per_head_rotations = false,
     .per_head_clips = false, .archs = llamacpp_archs, .format = "gguf"},
};
#define N_PROFILES (sizeof profiles / sizeof profiles[0])

const struct oscar_target_profile * oscar_target_get(enum oscar_target t) {
    for (size_t i = 0; i < N_PROFILES; i++)
        if (profiles[i].id == t) return &profiles[i];
    return &profiles[0];
}

const struct oscar_target_profile * oscar_target_find(const char * name) {
    for (size_t i = 0; name && i < N_PROFILES; i++)
        if (!strcmp(profiles[i].name, name)) return &profiles[i];
    return NULL;
}

enum oscar_status osc_parse_target(const char * opt, const char * text, const struct oscar_target_profile ** out) {
    const struct oscar_target_profile * p = oscar_target_find(text);
    if (!p)
        return osc_error(OSCAR_ERR_INVALID, "%s: '%s' is not a target (oscar, sglang, llamacpp)", opt, text);
    *out = p;
    return OSCAR_OK;
}

bool oscar_target_arch_ok(const struct oscar_target_profile * p, const char * arch) {
    for (const char * const * a = p->archs_refused; a && *a; a++)
        if (arch && !strcmp(*a, arch)) return false;
    if (!p->archs) return true;
    for (const char * const * a = p->archs; *a; a++)
        if (arch && !strcmp(*a, arch)) return true;
    return false;
}

const char * oscar_target_arch_list(const struct oscar_target_profile * p) {
    return p->archs ? p->archs[0] : "any"; // one entry today (llamacpp: qwen3)
}

const char * oscar_target_clips_name(enum oscar_target_clips c) {
    switch (c) {
    case OSCAR_TARGET_CLIPS_LAYER: return "per layer";
    case OSCAR_TARGET_CLIPS_KV: return "one K and one V for the model";
    case OSCAR_TARGET_CLIPS_ONE: return "one for K and V of the model";
    }
    return "?";
}
