// test-verify-kl-device.c - oscar-verify's next-token statistics (KL, top-1, dp, uncertainty)
// on the device: oscar_verify_run on a random-init model through the cpu, cuda bf16, cuda fp32
// and cuda with --score-from; fails unless bf16 against itself is KL 0 and top-1 1 and every
// other method has a reference and KL > 0. Run by tests/gpu/gpu-check.sh.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/model.h"
#include "verify/verify.h"
#include "util/error.h"
int main(int argc, char ** argv) {
    (void) argc, (void) argv; // gpu-check passes --seed: the model and tokens here are fixed
    struct oscar_model_config cfg = {.arch = OSCAR_ARCH_LLAMA, .n_layer = 2, .n_embd = 256, .n_head = 4,
                                     .n_head_kv = 2, .head_dim = 64, .n_ff = 384, .n_vocab = 512, .n_ctx_train = 1024,
                                     .rope_theta = 10000.0f, .rms_eps = 1e-5f};
    struct oscar_model * m;
    if (oscar_model_init_random(&cfg, 7, &m)) return printf("init: %s\n", oscar_last_error()), 1;
    enum { NT = 600 };
    static int32_t toks[NT];
    unsigned s = 1;
    for (int i = 0; i < NT; i++) s = s * 1103515245u + 12345u, toks[i] = (int32_t) ((s >> 8) % 512);
    int bad = 0;
    for (int pass = 0; pass < 4; pass++) {
        struct oscar_verify_params p = oscar_verify_default_params();
        p.methods = "hadamard,bf16,kivi";
        p.ctx = 256, p.tokens = 512, p.sink = 8, p.recent = 32, p.metric_tokens = 128, p.n_threads = 4;
        p.device = pass == 0 ? NULL : "cuda";
        p.gpu_fp32 = pass == 2;
        p.score_from = pass == 3 ? 200 : 0;
        struct oscar_verify_report r;
        if (oscar_verify_run(m, NULL, toks, NT, &p, &r)) { printf("pass %d: %s\n", pass, oscar_last_error()); return 1; }
        for (int i = 0; i < r.n_methods; i++) {
            const struct oscar_verify_method * x = &r.methods[i];
            printf("pass %d (%s%s sf %d) %-9s kv_sim %-5s ppl %.5f +- %.4f n %lld | ref %d KL %.4e p99 %.4e top1 %.4f dp_rms %.4e dppl %+.4f\n",
                   pass, p.device ? p.device : "cpu", p.gpu_fp32 ? " fp32" : "", p.score_from, x->name, x->kv_sim, x->ppl,
                   x->tok.ppl_stderr, (long long) x->n_scored, x->tok.has_ref, x->tok.kl_mean, x->tok.kl_p99,
                   x->tok.same_top1, x->tok.dp_rms, x->tok.dppl);
            if (!x->tok.has_ref) bad++;
            if (!strcmp(x->name, "bf16") && (x->tok.kl_max != 0 || x->tok.same_top1 != 1)) bad++;
            if (strcmp(x->name, "bf16") && !(x->tok.kl_mean > 0)) bad++;
        }
        oscar_verify_report_free(&r);
    }
    oscar_model_free(m);
    printf("%s\n", bad ? "FAIL" : "ALL OK");
    return bad != 0;
}
