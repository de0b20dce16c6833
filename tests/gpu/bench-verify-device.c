// bench-verify-device.c - quantized-cache perplexity throughput on the GPU: the windows
// of each method through one resident CUDA forward (random-init weights made on the
// device, bf16), its cache simulated inside the pass (oscar_fwd_set_attention with a
// struct oscar_fwd_kvsim), against the exact (bf16) pass in the same process. Also the
// path it replaces: lib/verify's CPU simulation as a host override (q/k/v copied to the
// host per layer), one window at the first context only.
//
//   bench-verify-device [--shape qwen3-8b] [--ctx 2048,32768] [--windows N] [--no-host]
//
// Per method and context: scored tokens/s (T - 1 per window) of the forward alone
// (logits NULL), with every row scored on the device against the exact pass (what
// oscar-verify --device cuda runs), and with the [T, V] fp32 logits copied to the host
// (the path before device scoring), each as a ratio to the exact pass. Methods: naive (SYM INT2),
// hadamard (ASYM INT2), oscar (ASYM INT2 with per-layer orthogonal matrices, clips 0.96 / 0.92),
// int4-bdh (SAW-INT4, block Hadamard of order 128), kivi (KIVI INT2, f16 metadata), oscar-lm (Lloyd-Max
// prefill rows), oscar-omni (OScaR), q2_0 and q2_0-attn-rot (the llama.cpp fork's cache); decode tiering
// sink 32, recent 128, page 64 (oscar-verify's defaults; q2_0 keeps the fork's ring of 128).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/forward-backend.h"
#include "calibrate/random-source.h"
#include "util/log.h"
#include "verify/kv-sim-forward.h"
#include "verify/metrics.h"
#include "hadamard-rotations.h"

// Seconds for n_win windows of T tokens through f (logits: host buffer or NULL).
static double time_windows(struct oscar_fwd * f, const int32_t * tok, int32_t T, int32_t n_win, float * logits,
                           enum oscar_status * st) {
    int32_t ss[2] = {0, T};
    const double t0 = osc_now();
    for (int32_t w = 0; w < n_win && *st == OSCAR_OK; w++) {
        struct oscar_batch b = {.n_seq = 1, .seq_start = ss, .tokens = tok + (size_t) w * T, .pos = NULL};
        *st = oscar_fwd_run(f, &b, logits);
    }
    return osc_now() - t0;
}

// The same, each window scored on the device against the exact pass's rows (oscar-verify's
// path); the exact pass itself fills the reference store (save_ref).
static double time_scored(struct oscar_fwd * f, const int32_t * tok, int32_t T, int32_t n_win, bool is_ref,
                          struct oscar_fwd_score * out, enum oscar_status * st) {
    int32_t ss[2] = {0, T};
    const double t0 = osc_now();
    for (int32_t w = 0; w < n_win && *st == OSCAR_OK; w++) {
        struct oscar_batch b = {.n_seq = 1, .seq_start = ss, .tokens = tok + (size_t) w * T, .pos = NULL};
        *st = oscar_fwd_run_scored(f, &b, 0, T - 1, tok + (size_t) w * T + 1, (int64_t) w * (T - 1), is_ref, out);
    }
    return osc_now() - t0;
}

int main(int argc, char ** argv) {
    const char * shape = "qwen3-8b", * ctx_list = "2048,32768";
    int32_t n_win = 4;
    bool host = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shape") && i + 1 < argc) shape = argv[++i];
        else if (!strcmp(argv[i], "--ctx") && i + 1 < argc) ctx_list = argv[++i];
        else if (!strcmp(argv[i], "--windows") && i + 1 < argc) n_win = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-host")) host = false;
        else { fprintf(stderr, "usage: %s [--shape S] [--ctx A,B] [--windows N] [--no-host]\n", argv[0]); return 2; }
    }
    struct oscar_model_config c;
    enum oscar_status st = oscar_calib_random_config(shape, &c);
    if (st != OSCAR_OK) { fprintf(stderr, "%s\n", oscar_last_error()); return 1; }
    int32_t ctxs[4], n_ctx = 0, T_max = 0;
    for (const char * p = ctx_list; *p && n_ctx < 4; p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p)) {
        ctxs[n_ctx] = atoi(p);
        if (ctxs[n_ctx] > T_max) T_max = ctxs[n_ctx];
        n_ctx++;
    }
    const int32_t L = c.n_layer, Hkv = c.n_head_kv, D = c.head_dim, V = c.n_vocab;
    struct oscar_tiering tr = {.mode = OSCAR_TIERS_DECODE, .n_sink = 32, .n_recent = 128, .n_flush = 64,
                               .prompt_len = 32, .block = 1};
    float * rot = malloc(sizeof(float) * (size_t) L * D * D);
    hadamard_rotations(rot, L, D, 88172645463325252ull);
    enum { NM = 9 };
    const char * names[NM] = {"naive", "hadamard", "oscar", "int4-bdh", "kivi", "oscar-lm", "oscar-omni", "q2_0",
                              "q2_0-attn-rot"};
    struct oscar_kv_transform tf[NM];
    struct oscar_kv_fwd_sim fs[NM];
    memset(fs, 0, sizeof fs);
    for (int i = 0; i < NM && st == OSCAR_OK; i++) {
        st = oscar_kv_transform_preset(names[i], L, Hkv, D, 0, OSCAR_META_F32, &tr, false, rot, rot, false, NULL,
                                       NULL, &tf[i]);
        if (st == OSCAR_OK) st = oscar_kv_fwd_sim_init(&tf[i], &fs[i]);
    }
    struct oscar_fwd_params fp = oscar_fwd_default_params();
    fp.device = "cuda", fp.max_tokens = T_max;
    struct oscar_fwd * f = NULL;
    if (st == OSCAR_OK) st = oscar_fwd_init_random(&c, 1, &fp, &f);
    if (st != OSCAR_OK) {
        printf("bench-verify-device: %s\n", oscar_last_error());
        return st == OSCAR_ERR_UNSUPPORTED ? 77 : 1;
    }
    struct oscar_fwd_info info;
    oscar_fwd_info(f, &info);
    int64_t n_tok = (int64_t) T_max * n_win;
    int32_t * tok = malloc(sizeof(int32_t) * (size_t) n_tok);
    uint64_t x = 12345;
    for (int64_t i = 0; i < n_tok; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, tok[i] = (int32_t) (x % (uint64_t) V);
    float * logits = malloc(sizeof(float) * (size_t) T_max * V);
    struct oscar_fwd_score * scores = malloc(sizeof *scores * (size_t) T_max);
    if (oscar_fwd_ref_init(f, (int64_t) n_win * T_max) != OSCAR_OK) {
        printf("bench-verify-device: %s\n", oscar_last_error());
        return 1;
    }
    printf("## bench-verify-device: %s shape (L %d, %d/%d heads of %d, V %d), %s, bf16 pass, decode tiers 32/128/64\n\n",
           shape, L, c.n_head, Hkv, D, V, info.device);
    printf("| ctx | method | windows | forward tok/s | vs exact | + scored on the device tok/s | vs exact | + logits "
           "to host tok/s | vs exact |\n");
    printf("|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int k = 0; k < n_ctx && st == OSCAR_OK; k++) {
        const int32_t T = ctxs[k], nw = T >= 16384 ? 1 : n_win;   // long windows: one each
        double base_f = 0, base_l = 0, base_s = 0;
        for (int i = -1; i < NM && st == OSCAR_OK; i++) {
            st = oscar_fwd_set_attention(f, i < 0 ? NULL : &fs[i].desc, NULL);
            if (k == 0) {   // warm-up: kernels, workspace, the first touch of the host logits
                time_windows(f, tok, T, 1, NULL, &st);
                time_windows(f, tok, T, 1, logits, &st);
            }
            const double tf_ = time_windows(f, tok, T, nw, NULL, &st);
            const double ts = time_scored(f, tok, T, nw, i < 0, scores, &st);
            const double tl = time_windows(f, tok, T, nw, logits, &st);
            const double rf = (double) nw * (T - 1) / tf_, rl = (double) nw * (T - 1) / tl;
            const double rs = (double) nw * (T - 1) / ts;
            if (i < 0) base_f = rf, base_l = rl, base_s = rs;
            printf("| %d | %s | %d | %.0f | %.2fx | %.0f | %.2fx | %.0f | %.2fx |\n", T,
                   i < 0 ? "exact (bf16)" : names[i], nw, rf, rf / base_f, rs, rs / base_s, rl, rl / base_l);
            fflush(stdout);
        }
        if (host && k == 0 && st == OSCAR_OK) {   // the host path this replaces: one window
            for (int i = 1; i < 5 && st == OSCAR_OK; i++) {
                if (i == 3) continue;   // hadamard, oscar, kivi
                struct oscar_kv_sim * cpu = NULL;
                st = oscar_kv_sim_init(&tf[i], &c, T, 0, &cpu);
                struct oscar_attention_override ov = {0};
                if (st == OSCAR_OK) ov = oscar_kv_sim_override(cpu), st = oscar_fwd_set_attention(f, NULL, &ov);
                const double th = time_windows(f, tok, T, 1, logits, &st);
                printf("| %d | %s, host CPU sim (old path) | 1 | | | | | %.0f | %.2fx |\n", T, names[i], (T - 1) / th,
                       (T - 1) / th / base_l);
                oscar_fwd_set_attention(f, NULL, NULL);
                oscar_kv_sim_free(cpu);
            }
        }
    }
    oscar_fwd_info(f, &info);
    printf("\ndevice memory used (peak): %.2f GiB\n", (double) info.device_used_bytes / (1 << 30));
    if (st != OSCAR_OK) printf("bench-verify-device: %s\n", oscar_last_error());
    oscar_fwd_free(f);
    for (int i = 0; i < NM; i++) oscar_kv_fwd_sim_free(&fs[i]);
    free(rot), free(tok), free(logits), free(scores);
    return st == OSCAR_OK ? 0 : 1;
}
