// test-eval-device.c - the calibration gate's and clip search's layer errors on
// the "cuda" backend (kernels/layer-eval.cu) against lib/verify on the CPU, over
// head dims 32..256, GQA 1..4, one to three sequences, NONE/STATIC tierings,
// fp32/bf16/fp16 metadata, group sizes D and 32, sort and bisection clips, and
// the naive / Hadamard / OSCAR (per-layer, per-head, searched clips) methods, the
// OSCAR ones also with a key mean (OptR's centring) on keys offset per channel.
//
//   test-eval-device [--seed N] [--small]   exit 0 pass, 1 fail, 77 no CUDA backend
// --small: only the cases of <= 80 rows (for compute-sanitizer).
//
// Tolerance 1e-5 relative: the K/V transform uses the CPU's arithmetic (fp64
// rotation sums in the same order, the same IEEE quantizer steps), so the
// quantized rows agree exactly; what differs is the summation order of the fp32
// GEMMs in scores, P.V and the W_O product (~sqrt(K) 2^-24, 1e-7..1e-6 relative
// per product; measured on the H200: <= 4e-7 over all cases). One INT2 code
// that differs in the small cases (63-80 rows) moves k_num or out_rel by ~1e-2.
// Also checks that two device runs give bit-identical numbers.
#include "eval-compare.h"

int main(int argc, char ** argv) {
    uint64_t seed = 11;
    int small = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        if (!strcmp(argv[i], "--small")) small = 1;
    }
    const struct oscar_backend_i * be;
    if (oscar_backend_get("cuda", &be) != OSCAR_OK) {
        printf("skip: %s\n", oscar_last_error());
        return 77;
    }
    printf("seed %llu\n", (unsigned long long) seed);
    const struct ec_case cases[] = {
        {"smollm2-like", 64, 9, 3, 576, 2, {300, 129, 0}, OSCAR_TIERS_STATIC, 8, 32, 0, OSCAR_META_F32,
         OSCAR_CLIP_SORT, 0.0f, 0, 0},
        {"qwen3-like", 128, 32, 8, 1024, 1, {700, 0, 0}, OSCAR_TIERS_STATIC, 64, 256, 32, OSCAR_META_BF16,
         OSCAR_CLIP_SORT, 0.0f, 0, 0},
        {"small-f16-bisect", 128, 8, 2, 256, 2, {40, 23, 0}, OSCAR_TIERS_STATIC, 4, 8, 0, OSCAR_META_F16,
         OSCAR_CLIP_BISECT, 0.0f, 0, 0},
        {"d32-none", 32, 4, 4, 128, 3, {50, 17, 13}, OSCAR_TIERS_NONE, 0, 0, 0, OSCAR_META_F32, OSCAR_CLIP_SORT, 0.0f, 0, 0},
        {"d256-mqa", 256, 4, 1, 256, 1, {64, 0, 0}, OSCAR_TIERS_STATIC, 4, 16, 64, OSCAR_META_BF16,
         OSCAR_CLIP_SORT, 0.0f, 0, 0},
        // Gemma 3 27B's head_dim 128 and query_pre_attn_scalar 168 (the score scale 168^-1/2, not 128^-1/2)
        {"gemma3-scale", 128, 8, 4, 256, 2, {60, 19, 0}, OSCAR_TIERS_STATIC, 4, 8, 0, OSCAR_META_F32, OSCAR_CLIP_SORT,
         0.0771516749810459862f, 0, 0},
        // a Gemma 3 local layer: a window of 16 keys, shorter than both sequences (softmax and logit sums in it)
        {"gemma3-window", 128, 8, 4, 256, 2, {60, 19, 0}, OSCAR_TIERS_STATIC, 4, 8, 0, OSCAR_META_F32, OSCAR_CLIP_SORT,
         0.0771516749810459862f, 16, 0},
        // keys offset per channel, the OSCAR methods centred (OptR's k_mean): Qwen3's shape, fp16 groups of 32
        {"qwen3-centred", 128, 8, 2, 256, 2, {90, 41, 0}, OSCAR_TIERS_STATIC, 4, 16, 32, OSCAR_META_F16,
         OSCAR_CLIP_SORT, 0.0f, 0, 1},
        {"d64-centred", 64, 4, 2, 128, 2, {40, 30, 0}, OSCAR_TIERS_STATIC, 4, 8, 0, OSCAR_META_F32, OSCAR_CLIP_BISECT,
         0.0f, 0, 1},
    };
    int fail = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double rel = 1.0;
        int det = 0;
        if (small && cases[c].lens[0] + cases[c].lens[1] + cases[c].lens[2] > 80) continue;
        printf("case %s (D %d, Hq %d, Hkv %d, C %d)\n", cases[c].name, cases[c].D, cases[c].Hq, cases[c].Hkv,
               cases[c].C);
        enum oscar_status st = ec_run("cuda", &cases[c], seed + c, &rel, &det);
        int ok = st == OSCAR_OK && rel <= 1e-5 && det;
        printf("%s EVAL_DEVICE(%s): max rel diff %.2e (bound 1e-5), deterministic %s%s%s\n", ok ? "ok  " : "FAIL",
               cases[c].name, rel, det ? "yes" : "NO", st ? ": " : "", st ? oscar_last_error() : "");
        fail |= !ok;
    }
    printf("%s\n", fail ? "test-eval-device: FAIL" : "test-eval-device: PASS");
    return fail;
}
