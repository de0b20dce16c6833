// test-verify-sim.c - oscar_verify_run with --device cuda against the CPU run: the
// quantized cache simulated inside the CUDA forward (kv-sim-forward.h) for INT2, SAW-INT4,
// KIVI and OScaR on a random-init Llama-shaped model (D 128 GQA 4) and the SmolLM2 shape
// (D 64 GQA 3), and the CPU-simulation fallback for a head_dim (48) the device transform lacks.
//
//   test-verify-sim [--seed N]      exit 0 pass, 1 fail, 77 no CUDA backend
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/forward-backend.h"
#include "model/model.h"
#include "verify/verify.h"

// oscar_verify_run with --device cuda --gpu-precision fp32 against the CPU run: every forward
// pass (metrics slice, drift, perplexity windows) on the device. The fp32 device pass equals
// the CPU pass to ~1e-6 (test-forward-gpu), so perplexities differ by what the kv simulation
// may move: 4e-3 in ln for the CUDA simulation (lib/verify's row bits, an fp32 attention in
// another summation order: a consistency bound; test-fwd-kvsim bounds the attention itself),
// and for the CPU simulation (the same code on inputs within ~1e-6) only by rare flipped
// codes: 1e-3. The per-layer metrics, computed by the same host code on inputs within ~1e-6,
// differ by far less than 1e-2 relative (a flipped INT2 code among the slice's 128 x 2 rows
// moves out_rel by ~1e-3).
// Method 1's quantized cache must have been simulated on `want_sim`.
static int verify_run_compare(const struct oscar_model * model, const int32_t * tok, int32_t N, const char * methods,
                              const char * want_sim, double ppl_bound) {
    struct oscar_verify_params vp = oscar_verify_default_params();
    vp.methods = methods, vp.ctx = 256, vp.sink = 16, vp.recent = 64, vp.tokens = 512;
    vp.metric_tokens = 128;
    struct oscar_verify_report rc, rg;
    memset(&rc, 0, sizeof rc), memset(&rg, 0, sizeof rg);
    enum oscar_status st = oscar_verify_run(model, NULL, tok, (size_t) N, &vp, &rc);
    vp.device = "cuda", vp.gpu_fp32 = true;
    if (st == OSCAR_OK) st = oscar_verify_run(model, NULL, tok, (size_t) N, &vp, &rg);
    double dppl = 0.0, dout = 0.0;
    for (int32_t i = 0; st == OSCAR_OK && i < rc.n_methods; i++) {
        dppl = fmax(dppl, fabs(log(rg.methods[i].ppl) - log(rc.methods[i].ppl)));
        for (int32_t l = 0; l < rc.n_layer; l++) {
            double a = rg.methods[i].layers[l].out_rel, b0 = rc.methods[i].layers[l].out_rel;
            dout = fmax(dout, b0 > 0.0 ? fabs(a - b0) / b0 : fabs(a));
        }
    }
    const char * sim = st == OSCAR_OK && rg.n_methods > 1 ? rg.methods[1].kv_sim : "?";
    int ok = st == OSCAR_OK && dppl <= ppl_bound && dout <= 1e-2 && strcmp(sim, want_sim) == 0;
    printf("%s VERIFY_RUN(cuda fp32 vs cpu, %s, %s D=%d, ctx 256 x 2, metrics 128): kv sim %s (want %s), ppl cpu "
           "%.6f cuda %.6f, max |d ln ppl| %.3e (bound %.0e), max layer out_rel rel diff %.3e (bound 1e-2)%s%s\n",
           ok ? "ok  " : "FAIL", methods, model->config.name, model->config.head_dim, sim, want_sim,
           rc.n_methods > 1 ? rc.methods[1].ppl : 0.0, rg.n_methods > 1 ? rg.methods[1].ppl : 0.0, dppl, ppl_bound,
           dout, st ? " " : "", st ? oscar_last_error() : "");
    oscar_verify_report_free(&rc);
    oscar_verify_report_free(&rg);
    return ok;
}

int main(int argc, char ** argv) {
    uint64_t seed = 7;
    int fail = 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
    const struct oscar_backend_i * be;
    if (oscar_backend_get("cuda", &be) != OSCAR_OK) {
        printf("skip: %s\n", oscar_last_error());
        return 77;
    }
    printf("seed %llu\n", (unsigned long long) seed);
    struct oscar_model_config c = {.arch = OSCAR_ARCH_LLAMA, .n_layer = 4, .n_embd = 256, .n_head = 8,
                                   .n_head_kv = 2, .head_dim = 128, .n_ff = 512, .n_vocab = 512, .n_ctx_train = 4096,
                                   .rope_theta = 1e4f, .rms_eps = 1e-5f};
    strcpy(c.name, "random-llama-d128");
    struct oscar_model * model = NULL;
    const int32_t N = 1024;
    int32_t * tok = malloc(sizeof(int32_t) * (size_t) N);
    uint64_t x = seed | 1;
    for (int32_t i = 0; i < N; i++) {   // a stream with repeats so attention has something to find
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tok[i] = i >= 64 && (x & 3) == 0 ? tok[i - 64] : (int32_t) (x % (uint64_t) c.n_vocab);
    }
    enum oscar_status st = oscar_model_init_random(&c, seed, &model);
    fail |= st != OSCAR_OK;
    // oscar_verify_run end to end, --device cuda --gpu-precision fp32 vs the CPU (see
    // verify_run_compare): INT2, SAW-INT4, KIVI and OScaR on the CUDA simulation (D 128 GQA 4;
    // D 64 GQA 3 as in SmolLM2), then the fallback to the CPU simulation under the device forward
    // for a head_dim the device transform lacks.
    if (st == OSCAR_OK) {
        fail |= !verify_run_compare(model, tok, N, "bf16,hadamard", "cuda", 4e-3);
        fail |= !verify_run_compare(model, tok, N, "bf16,int4-bdh", "cuda", 4e-3);
        fail |= !verify_run_compare(model, tok, N, "bf16,kivi", "cuda", 4e-3);
        fail |= !verify_run_compare(model, tok, N, "bf16,oscar-omni", "cuda", 4e-3);
        const struct { int32_t n_head, head_dim; const char * name, * methods, * sim; double bound; } shapes[2] = {
            { 6, 64, "random-llama-d64-gqa3", "bf16,hadamard", "cuda", 4e-3 },
            { 4, 48, "random-llama-d48", "bf16,naive", "cpu", 1e-3 } };   // 48: no device transform, no Hadamard
        for (int i = 0; i < 2; i++) {
            struct oscar_model_config cm = c;
            cm.n_head = shapes[i].n_head, cm.head_dim = shapes[i].head_dim;
            snprintf(cm.name, sizeof cm.name, "%s", shapes[i].name);
            struct oscar_model * mi = NULL;
            st = oscar_model_init_random(&cm, seed + 1 + (uint64_t) i, &mi);
            fail |= st != OSCAR_OK || !verify_run_compare(mi, tok, N, shapes[i].methods, shapes[i].sim, shapes[i].bound);
            oscar_model_free(mi);
        }
    }
    oscar_model_free(model);
    free(tok);
    printf("test-verify-sim: %s\n", fail ? "FAIL" : "PASS");
    return fail;
}
