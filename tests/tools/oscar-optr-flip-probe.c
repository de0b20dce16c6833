// oscar-optr-flip-probe - how far OptR's CPU loss and gradient move when the key rotation
// moves by one ulp, on test-optr-device's centred head_dim-128 layer (d128-gqa4): the size of
// the rounding differences between the CPU and the GPU, which compute x·R in another order.
// Each trial nudges every element of R up or down by one ulp (seeded), evaluates the K loss and
// gradient at R and at the nudged R, and classifies every code residual of the quantized rows:
// |Δc| > 0.5 a flipped code, 1e-4 < |Δc| <= 0.5 a residual moved by a group's half-precision
// scale or zero rounding to its other neighbour, smaller the fp32 rounding alone. It prints each
// trial with a flip and, per class, the largest relative loss and gradient change.
//
//   oscar-optr-flip-probe [--meta f32|f16|bf16] [--trials N] [--seed N]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gpu/optr-layer.h"

static double rel(double a, double ref) { return fabs(a - ref) / fmax(fabs(ref), 1e-300); }

int main(int argc, char ** argv) {
    enum oscar_quant_meta_dtype meta = OSCAR_META_F16;
    int trials = 40;
    uint64_t seed = 9;   // test-optr-device's seed for this layer (its default 7, + case index 2)
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--meta") && i + 1 < argc) {
            const char * m = argv[++i];
            if (!strcmp(m, "f32")) meta = OSCAR_META_F32;
            else if (!strcmp(m, "f16")) meta = OSCAR_META_F16;
            else if (!strcmp(m, "bf16")) meta = OSCAR_META_BF16;
            else return fprintf(stderr, "oscar-optr-flip-probe: --meta %s: expected f32, f16 or bf16\n", m), 2;
        } else if (!strcmp(argv[i], "--trials") && i + 1 < argc) {
            trials = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 10);
        } else {
            return fprintf(stderr, "usage: %s [--meta f32|f16|bf16] [--trials N] [--seed N]\n", argv[0]), 2;
        }
    }
    if (trials < 1) return fprintf(stderr, "oscar-optr-flip-probe: --trials must be at least 1\n"), 2;
    const struct lcase c = {"d128-gqa4", 128, 8, 2, 256, 128, true, meta, 3, {200, 200, 170}, 2, {180, 160}, 30, 5,
                            16, 32, 24};
    struct layer l;
    layer_init(&c, seed, &l);
    const int32_t Hkv = c.Hkv, D = c.D;
    const size_t DD = (size_t) D * D, HDD = (size_t) Hkv * DD;
    float * km = calloc((size_t) Hkv * D, sizeof(float)), * R2 = malloc(HDD * sizeof(float));
    double loss[2][8], * grad[2] = {malloc(HDD * sizeof(double)), malloc(HDD * sizeof(double))};
    struct osc_optr_state * st[2] = {NULL, NULL};
    oscar_optr_key_mean(&l.in.train, Hkv, D, km);
    enum oscar_status e = osc_optr_prepare(&l.in, &l.p, km, &st[0]);
    if (e == OSCAR_OK) e = osc_optr_prepare(&l.in, &l.p, km, &st[1]);
    if (e == OSCAR_OK) e = osc_optr_set_loss(st[0], 0, false, l.kb, false, loss[0], grad[0]);
    double worst[2][2] = {{0, 0}, {0, 0}};   // [no flip, flip][loss, gradient]
    int n_flip = 0;
    for (int t = 0; t < trials && e == OSCAR_OK; t++) {
        xn_state = 1000 + (uint64_t) t;
        for (size_t i = 0; i < HDD; i++) R2[i] = nextafterf(l.kb[i], xn_normal() > 0.0 ? INFINITY : -INFINITY);
        if ((e = osc_optr_set_loss(st[1], 0, false, R2, false, loss[1], grad[1])) != OSCAR_OK) break;
        int64_t codes = 0, moved = 0, rows = 0;
        for (int32_t s = 0; s < osc_optr_set_n_seq(st[0], false); s++)
            for (int32_t h = 0; h < Hkv; h++) {
                const struct osc_optr_item * a = osc_optr_set_item(st[0], false, h, s);
                const struct osc_optr_item * b = osc_optr_set_item(st[1], false, h, s);
                const size_t n = (size_t) (a->q1 - a->q0) * D;
                for (size_t i = 0; i < n; i++) {
                    const float d = fabsf(a->lin.c[i] - b->lin.c[i]);
                    codes += d > 0.5f, moved += d > 1e-4f && d <= 0.5f;
                }
                rows += a->q1 - a->q0;
            }
        double wl = 0.0, wg = 0.0;
        for (int32_t h = 0; h < Hkv; h++) {
            double n2 = 0.0, d2 = 0.0;
            for (size_t i = h * DD; i < (h + 1) * DD; i++) {
                const double d = grad[1][i] - grad[0][i];
                n2 += grad[0][i] * grad[0][i], d2 += d * d;
            }
            wl = fmax(wl, rel(loss[1][h], loss[0][h])), wg = fmax(wg, sqrt(d2 / fmax(n2, 1e-300)));
        }
        const int flipped = codes || moved;
        worst[flipped][0] = fmax(worst[flipped][0], wl), worst[flipped][1] = fmax(worst[flipped][1], wg);
        n_flip += flipped;
        if (flipped)
            printf("trial %d: %lld codes flipped, %lld residuals moved by a metadata flip (%lld rows x %d): loss rel "
                   "%.2e, gradient rel %.2e\n", t, (long long) codes, (long long) moved, (long long) rows, (int) D, wl, wg);
    }
    if (e != OSCAR_OK) fprintf(stderr, "oscar-optr-flip-probe: %s\n", oscar_last_error());
    else
        printf("%s metadata, %d trials: %d without a flip (loss rel <= %.2e, gradient rel <= %.2e), %d with one "
               "(loss rel <= %.2e, gradient rel <= %.2e)\n",
               meta == OSCAR_META_F32 ? "f32" : meta == OSCAR_META_F16 ? "f16" : "bf16", trials, trials - n_flip,
               worst[0][0], worst[0][1], n_flip, worst[1][0], worst[1][1]);
    osc_optr_state_free(st[0]), osc_optr_state_free(st[1]);
    free(km), free(R2), free(grad[0]), free(grad[1]);
    layer_free(&l);
    return e == OSCAR_OK ? 0 : 1;
}
