// bench-stats.c - throughput of the streaming accumulators and of the
// rotation fit at real model shapes (random data; numbers only, no checks).
//
//   bench-stats [--tokens N] [--chunk N] [--threads N] [--reps N]
// Prints a markdown table: shape, estimators, tokens/s (mean ± sd over reps),
// and eigendecomposition + composition time for every layer (r_h_pbr).
// tokens/s counts a token once per pass over all layers (the whole model).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "oscar.h"
#include "rotation/fit.h"
#include "stats/stats.h"

struct shape { const char * name; int L, Hq, Hkv, D; };

static float * rnd(size_t n, uint64_t s) {
    float * x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float) ((double) (s >> 11) / 9007199254740992.0 - 0.5);
    }
    return x;
}

// One full accumulation (all passes) of n_tok tokens; returns seconds.
static double cpu_s; // process CPU seconds of the last run (all threads)

static double run(const struct shape * sh, uint32_t kinds, int n_tok, int chunk, int threads, struct oscar_stats ** keep) {
    struct oscar_stats_params p = oscar_stats_default_params();
    p.n_layer = sh->L; p.n_head = sh->Hq; p.n_head_kv = sh->Hkv; p.head_dim = sh->D;
    p.kinds = kinds; p.n_threads = threads; p.max_tokens = chunk;
    struct oscar_stats * s = NULL;
    if (oscar_stats_init(&p, &s) != OSCAR_OK) { fprintf(stderr, "%s\n", oscar_last_error()); exit(1); }
    float * q = rnd((size_t) chunk * sh->Hq * sh->D, 1), * k = rnd((size_t) chunk * sh->Hkv * sh->D, 2);
    float * v = rnd((size_t) chunk * sh->Hkv * sh->D, 3);
    const int passes = (kinds & OSCAR_STATS_SST) ? 2 : 1;
    const double t0 = osc_now();
    const clock_t c0 = clock();
    for (int pass = 0; pass < passes; pass++) {
        for (int t = 0; t < n_tok; t += chunk) {
            int32_t st[2] = {0, chunk};
            for (int l = 0; l < sh->L; l++) {
                struct oscar_stats_chunk c = {l, chunk, 1, st, q, k, v, 0};
                if (oscar_stats_add(s, &c) != OSCAR_OK) { fprintf(stderr, "%s\n", oscar_last_error()); exit(1); }
            }
        }
        oscar_stats_end_pass(s);
    }
    const double dt = osc_now() - t0;
    cpu_s = (double) (clock() - c0) / CLOCKS_PER_SEC;
    free(q); free(k); free(v);
    if (keep) *keep = s;
    else oscar_stats_free(s);
    return dt;
}

int main(int argc, char ** argv) {
    int n_tok = 2048, chunk = 512, threads = 0, reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--tokens")) n_tok = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--chunk")) chunk = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    }
    n_tok = (n_tok + chunk - 1) / chunk * chunk;
    oscar_log_set_level(OSCAR_LOG_ERROR);
    const struct shape shapes[] = {{"SmolLM2-135M", 30, 9, 3, 64}, {"Qwen3-8B", 36, 32, 8, 128}};
    const struct { const char * name; uint32_t kinds; } sets[] = {
        {"qqt+sst (2 passes)", OSCAR_STATS_QQT | OSCAR_STATS_SST},
        {"ktk+vtv", OSCAR_STATS_KTK | OSCAR_STATS_VTV},
        {"vatt (attention mass)", OSCAR_STATS_VATT},
    };
    printf("| shape | estimators | threads | tokens | tokens/s (mean ± sd, %d reps) | tokens per CPU-second |\n|---|---|---|---|---|---|\n", reps);
    for (int si = 0; si < 2; si++) {
        for (int k = 0; k < 3; k++) {
            double sum = 0, sum2 = 0, cpu = 0;
            run(&shapes[si], sets[k].kinds, chunk, chunk, threads, NULL); // warm-up
            for (int r = 0; r < reps; r++) {
                const double tps = n_tok / run(&shapes[si], sets[k].kinds, n_tok, chunk, threads, NULL);
                sum += tps; sum2 += tps * tps; cpu += cpu_s;
            }
            const double m = sum / reps, sd = sqrt(fmax(0.0, sum2 / reps - m * m));
            printf("| %s | %s | %d | %d | %.0f ± %.0f | %.0f |\n", shapes[si].name, sets[k].name, threads, n_tok, m, sd,
                   (double) n_tok * reps / cpu);
        }
    }
    printf("\n| shape | fit | matrices | seconds (all layers) |\n|---|---|---|---|\n");
    for (int si = 0; si < 2; si++) {
        struct oscar_stats * s = NULL;
        run(&shapes[si], OSCAR_STATS_QQT | OSCAR_STATS_SST, chunk, chunk, threads, &s);
        const struct shape * sh = &shapes[si];
        const size_t n = (size_t) sh->L * sh->Hkv;
        float * R = malloc(n * sh->D * sh->D * sizeof *R), * E = malloc(n * sh->D * sizeof *E);
        for (int g = 0; g < 2; g++) {
            const double t0 = osc_now();
            oscar_fit_stats(s, OSCAR_STATS_QQT, (enum oscar_rotation_grouping) g, OSCAR_COMP_R_H_PBR, R, E, NULL);
            const double dt = osc_now() - t0;
            printf("| %s | qqt r_h_pbr, %s | %d | %.3f |\n", sh->name, g ? "per KV head" : "per layer",
                   g ? sh->L * sh->Hkv : sh->L, dt);
        }
        free(R); free(E);
        oscar_stats_free(s);
    }
    return 0;
}
