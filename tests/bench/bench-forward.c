// bench-forward.c - CPU prefill throughput of the forward pass and its efficiency against OpenBLAS sgemm.
//
//   bench-forward [model.gguf|hf-dir] [--tokens T] [--reps N] [--threads N]
//
// Without a model path (or when it cannot be loaded) it runs a model with SmolLM2-135M's shape
// and seeded random weights, which costs the same. FLOP count of one forward call (T tokens, logits
// for all T, formula also printed):
//   matmuls   2 * T * P,  P = L * (C*Hq*D + 2*C*Hkv*D + Hq*D*C + 3*C*F) + V*C  (all weight matrices)
//   attention L * Hq * 4 * D * T*(T+1)/2  (q.k and p.v over the causal triangle)
// sgemm peak is measured in the same run on [T, F] = [T, C] x [C, F]^T (model-shaped) and on
// 1024^3, with the same thread count; the forward's GFLOP/s is reported as a fraction of the larger.
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/log.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (float)((double)((rng * 2685821657736338717ull) >> 11) / 9007199254740992.0 - 0.5) * 0.04f;
}

static double sgemm_gflops(int M, int N, int K, int reps) {
    float * a = malloc(sizeof(float) * (size_t)M * K), * b = malloc(sizeof(float) * (size_t)N * K);
    float * c = malloc(sizeof(float) * (size_t)M * N);
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = frand();
    for (size_t i = 0; i < (size_t)N * K; i++) b[i] = frand();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N); // warm-up
    double t0 = osc_now();
    for (int r = 0; r < reps; r++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
    double dt = osc_now() - t0;
    free(a);
    free(b);
    free(c);
    return 2.0 * M * N * (double)K * reps / dt / 1e9;
}

int main(int argc, char ** argv) {
    const char * path = NULL;
    int T = 512, reps = 5, threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc) T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else path = argv[i];
    }
    if (T < 1 || reps < 1) {
        fprintf(stderr, "usage: bench-forward [model] [--tokens T] [--reps N] [--threads N]\n");
        return 2;
    }
    const struct oscar_model * m = NULL;
    struct oscar_model * loaded = NULL;
    if (path && oscar_model_load(path, &loaded) == OSCAR_OK) m = loaded;
    else if (path) fprintf(stderr, "cannot load %s (%s); using random weights\n", path, oscar_last_error());
    if (!m) { // SmolLM2-135M's shape
        struct oscar_model_config cfg = {.arch = OSCAR_ARCH_LLAMA, .n_layer = 30, .n_embd = 576, .n_head = 9,
                                         .n_head_kv = 3, .head_dim = 64, .n_ff = 1536, .n_vocab = 49152,
                                         .n_ctx_train = 8192, .rope_theta = 100000.0f, .rms_eps = 1e-5f,
                                         .tied_embeddings = true};
        snprintf(cfg.name, sizeof cfg.name, "SmolLM2-135M shape");
        if (oscar_model_init_random(&cfg, 1, &loaded) != OSCAR_OK) {
            fprintf(stderr, "init_random: %s\n", oscar_last_error());
            return 1;
        }
        m = loaded;
    }
    const struct oscar_model_config * c = &m->config;
    if (threads > 0) openblas_set_num_threads(threads);
    int nt = threads > 0 ? threads : omp_get_max_threads();

    struct oscar_forward_params fp = oscar_forward_default_params();
    fp.max_tokens = T;
    fp.n_threads  = threads;
    struct oscar_forward * f = NULL;
    if (oscar_forward_init(m, &fp, &f) != OSCAR_OK) {
        fprintf(stderr, "forward_init: %s\n", oscar_last_error());
        return 1;
    }
    int32_t * tok = malloc(sizeof(int32_t) * (size_t)T);
    float * logits = malloc(sizeof(float) * (size_t)T * (size_t)c->n_vocab);
    for (int i = 0; i < T; i++) tok[i] = (int32_t)((i * 7919u + 13u) % (unsigned)c->n_vocab);
    int32_t ss[2] = {0, T};
    struct oscar_batch b = {1, ss, tok, NULL};
    if (oscar_forward_run(f, &b, logits) != OSCAR_OK) { // warm-up
        fprintf(stderr, "forward: %s\n", oscar_last_error());
        return 1;
    }
    double sum = 0, sum2 = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = osc_now();
        if (oscar_forward_run(f, &b, logits) != OSCAR_OK) return 1;
        double dt = osc_now() - t0;
        sum += dt;
        sum2 += dt * dt;
    }
    double mean = sum / reps, sd = reps > 1 ? sqrt(fmax(0.0, (sum2 - sum * sum / reps) / (reps - 1))) : 0.0;

    const double C = c->n_embd, D = c->head_dim, Hq = c->n_head, Hkv = c->n_head_kv, F = c->n_ff, L = c->n_layer;
    const double P = L * (C * Hq * D + 2 * C * Hkv * D + Hq * D * C + 3 * C * F) + (double)c->n_vocab * C;
    const double flop_mm = 2.0 * T * P, flop_att = L * Hq * 4 * D * (double)T * (T + 1) / 2;
    const double gflops = (flop_mm + flop_att) / mean / 1e9;
    double peak_model = sgemm_gflops(T, c->n_ff, c->n_embd, 20);
    double peak_cube  = sgemm_gflops(1024, 1024, 1024, 5);
    double peak       = peak_model > peak_cube ? peak_model : peak_cube;

    printf("model        %s (%s)\n", c->name[0] ? c->name : "?", path && m->source[0] ? m->source : "random weights");
    printf("threads      %d\n", nt);
    printf("tokens       %d per call, %d reps\n", T, reps);
    printf("prefill      %.1f tok/s  (%.3f +- %.3f s per call)\n", T / mean, mean, sd);
    printf("flops/call   %.2f GFLOP = 2*T*P (P = %.1fM weights) %.2f + attention %.2f\n", (flop_mm + flop_att) / 1e9,
           P / 1e6, flop_mm / 1e9, flop_att / 1e9);
    printf("forward      %.1f GFLOP/s\n", gflops);
    printf("sgemm peak   %.1f GFLOP/s ([%d,%d]x[%d,%d]^T), %.1f GFLOP/s (1024^3)\n", peak_model, T, c->n_embd,
           c->n_ff, c->n_embd, peak_cube);
    printf("efficiency   %.1f %% of sgemm peak\n", 100.0 * gflops / peak);
    free(tok);
    free(logits);
    oscar_forward_free(f);
    oscar_model_free(loaded);
    return 0;
}
