// bench-attention-window.c - the forward pass's own attention (oscar_attention_causal, lib/attention/rows.c)
// on one sequence of T tokens, full causal and with sliding windows, in one run.
//
//   bench-attention-window [--tokens T] [--reps N] [--threads N] [--window W]...
//
// Shape: SmolLM2-135M's attention (9 query heads, 3 KV heads, head_dim 64), random q/k/v. Prints
// seconds per call (best of reps) and the speed against full causal attention in the same run;
// windowed work is O(T·W) instead of O(T²/2).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/log.h"

static double best_of(const struct oscar_capture_layer * in, float * out, int32_t nt, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = osc_now();
        if (oscar_attention_causal(&nt, 0, in, out) != OSCAR_OK) {
            fprintf(stderr, "attention: %s\n", oscar_last_error());
            exit(1);
        }
        double dt = osc_now() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}

int main(int argc, char ** argv) {
    int32_t T = 2048, reps = 5, threads = 0, n_win = 0, windows[8];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc) T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--window") && i + 1 < argc && n_win < 8) windows[n_win++] = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench-attention-window [--tokens T] [--reps N] [--threads N] [--window W]...\n");
            return 2;
        }
    }
    if (T < 1 || reps < 1) return 2;
    struct oscar_model_config c = {.n_layer = 1, .n_head = 9, .n_head_kv = 3, .head_dim = 64};
    const size_t nq = (size_t) T * 9 * 64, nkv = (size_t) T * 3 * 64;
    float * q = malloc(sizeof(float) * nq), * k = malloc(sizeof(float) * nkv), * v = malloc(sizeof(float) * nkv);
    float * out = malloc(sizeof(float) * nq);
    int32_t * pos = malloc(sizeof(int32_t) * (size_t) T), ss[2] = {0, T};
    if (!q || !k || !v || !out || !pos) return 1;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < nq; i++) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        q[i] = (float) ((double) ((x * 2685821657736338717ull) >> 11) / 9007199254740992.0 - 0.5);
        if (i < nkv) k[i] = q[i] * 0.5f, v[i] = q[i] * 2.0f;
    }
    for (int32_t t = 0; t < T; t++) pos[t] = t;
    struct oscar_capture_layer in = {.n_tokens = T, .n_seq = 1, .seq_start = ss, .pos = pos, .q = q, .k = k, .v = v,
                                     .config = &c};
    const double full = best_of(&in, out, threads, reps);
    printf("T %d, threads %d, best of %d\n| window | s per call | vs full causal |\n|---:|---:|---:|\n", T, threads,
           reps);
    printf("| full | %.4f | 1.00x |\n", full);
    for (int i = 0; i < n_win; i++) {
        c.sliding_window = windows[i];
        const double w = best_of(&in, out, threads, reps);
        printf("| %d | %.4f | %.2fx |\n", windows[i], w, full / w);
    }
    free(q), free(k), free(v), free(out), free(pos);
    return 0;
}
