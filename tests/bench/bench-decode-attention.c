// bench-decode-attention.c - CPU reference decode attention over a long cache:
// tiered INT2 (sink 64 + INT2 + recent 256) vs an all-BF16 tiered cache vs plain
// fp32 dense attention. Reports decode steps/s and KV bytes read per step, as
// ratios, for SmolLM2-like (Hq 9 / Hkv 3 / D 64) and Qwen3-8B-like (32 / 8 / 128)
// shapes.  Usage: bench-decode-attention [context_len=32768] [steps=20]
//
// Bytes read per step: INT2 tier = D/4 code bytes + metadata per (token, head) for
// K and V; BF16 rows 2*D bytes; fp32 rows 4*D bytes. This is the CPU reference, not
// a kernel: the ratio of bytes is the point, the absolute speed is secondary.
#include <stdio.h>
#include <stdlib.h>

#include "oscar.h"
#include "attention/attention.h"
#include "attention/kv-cache.h"

static uint64_t rs = 88172645463325252ull;
static float nrand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float) ((double) (rs >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static double time_tiered(struct oscar_kv_cache * c, const float * q, int Hq, int D, int steps) {
    float * out = malloc((size_t) Hq * D * sizeof(float));
    struct oscar_attn_tiered_opts o = oscar_attn_tiered_default_opts();
    oscar_attn_tiered_decode(c, 0, q, Hq, &o, out);   // warm-up
    double t0 = osc_now();
    for (int s = 0; s < steps; s++) oscar_attn_tiered_decode(c, 0, q, Hq, &o, out);
    double dt = osc_now() - t0;
    free(out);
    return steps / dt;
}

static int run_shape(const char * name, int Hq, int Hkv, int D, int64_t L, int steps) {
    int64_t row = (int64_t) Hkv * D;
    float * k = malloc((size_t) (L * row) * sizeof(float)), * v = malloc((size_t) (L * row) * sizeof(float));
    float * q = malloc((size_t) Hq * D * sizeof(float)), * out = malloc((size_t) Hq * D * sizeof(float));
    if (!k || !v || !q || !out) return 1;
    for (int64_t i = 0; i < L * row; i++) k[i] = nrand(), v[i] = nrand();
    for (int64_t i = 0; i < (int64_t) Hq * D; i++) q[i] = nrand();
    double sps[3];
    int64_t bytes[3];
    for (int mode = 0; mode < 2; mode++) {   // 0 INT2 tiered, 1 all-BF16 tiered
        struct oscar_kv_cache_params p = oscar_kv_cache_default_params(Hkv, D);
        p.max_seq_len = L + 1;
        if (mode == 1) p.n_recent = (int32_t) L, p.n_int2_pages = 1;
        struct oscar_kv_cache * c;
        if (oscar_kv_cache_init(&p, &c) != OSCAR_OK || oscar_kv_cache_prefill(c, 0, k, v, L, true) != OSCAR_OK) {
            fprintf(stderr, "%s\n", oscar_last_error());
            return 1;
        }
        sps[mode]   = time_tiered(c, q, Hq, D, steps);
        bytes[mode] = oscar_kv_cache_bytes_read(c, 0);
        oscar_kv_cache_free(c);
    }
    struct oscar_attn_shape sh = { Hq, Hkv, D };
    oscar_attn_dense(&sh, q, 1, L - 1, k, v, L, true, OSCAR_ACCUM_F32, out);
    double t0 = osc_now();
    for (int s = 0; s < steps; s++) oscar_attn_dense(&sh, q, 1, L - 1, k, v, L, true, OSCAR_ACCUM_F32, out);
    sps[2]   = steps / (osc_now() - t0);
    bytes[2] = L * row * 4 * 2;
    const char * names[3] = { "INT2 tiered (sink 64 + recent 256)", "BF16 tiered (all HP)", "fp32 dense" };
    for (int m = 0; m < 3; m++)
        printf("| %s | %d/%d/%d | %lld | %s | %.1f | %.2f | %.2f | %.3f |\n", name, Hq, Hkv, D, (long long) L, names[m],
               sps[m], sps[m] / sps[1], (double) bytes[m] / (1 << 20), (double) bytes[m] / (double) bytes[1]);
    free(k), free(v), free(q), free(out);
    return 0;
}

int main(int argc, char ** argv) {
    int64_t L = argc > 1 ? atoll(argv[1]) : 32768;
    int steps = argc > 2 ? atoi(argv[2]) : 20;
    if (L < 512 || steps < 1) {
        fprintf(stderr, "usage: %s [context_len >= 512] [steps >= 1]\n", argv[0]);
        return 2;
    }
    printf("| shape | Hq/Hkv/D | context | cache | decode steps/s | speed vs BF16 | KV MiB read/step | bytes vs BF16 |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    if (run_shape("SmolLM2-135M-like", 9, 3, 64, L, steps)) return 1;
    if (run_shape("Qwen3-8B-like", 32, 8, 128, L, steps)) return 1;
    return 0;
}
