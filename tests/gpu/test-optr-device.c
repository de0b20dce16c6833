// test-optr-device.c - OptR on the GPU (kernels/optr-device.cu) against the CPU reference
// (lib/rotation/optr.c), which stays the oracle:
//   1. the straight-through quantizer on the same rows (kernels/optr-quant.cu against
//      optr-loss.c osc_optr_quant_rows): values, code residuals, clip flags and thresholds,
//      arg-max / arg-min and scales bit for bit, over D 64/128/256, groups D and 32, fp32/fp16/
//      bf16 metadata, sort / bisection / no clip, and rows made to hit code boundaries, ties,
//      constant and tiny groups;
//   2. whole layers (D 64 and 128, GQA groups 1 and 4, with and without key centring, sequences
//      of several lengths and one too short to use): per-step losses, kept steps and the final
//      rotations against the CPU within the bounds below; the same layer twice on the GPU
//      bit-identical; and a control that must fail: the GPU with the straight-through
//      gradient's range terms left out (a wrong gradient) must break a bound.
//   --bench: one layer of the Qwen3-8B shape (Hq 32, Hkv 8, D 128, C 4096, 15 training + 1
//      held-out sequences of 2048 rows, OptR's defaults): the GPU's time for the full 80 + 80
//      steps, and the CPU's for --cpu-steps steps per phase (default 8; the CPU's cost after its
//      exact-attention setup, also timed, is linear in the steps), with their agreement.
//
//   test-optr-device [--seed N] [--small] [--bench [--cpu-steps N]]   exit 0 pass, 1 fail, 77 no CUDA
// --small: the quantizer on few rows and one tiny layer (for compute-sanitizer).
//
// Bounds (relative to the CPU's value; rotations absolute, their entries are O(D^-1/2)):
//   K losses at the base rotations (step 0, train and held-out)   1e-4
//   every per-step loss (train and held-out, K and V)              1e-3
//   final rotations, max |R_gpu − R_cpu|                           1e-3
//   kept step of every head                                        equal
// Why: both sides run the same algorithm with fp32 products and fp64 sums; they differ in the
// order of the fp32 GEMMs' sums (~sqrt(K)·2^-24 ≈ 1e-7..1e-6 relative per product), of the fp64
// sums, and in expf's last bit. At the base rotations the KL term, a difference of two sums of
// size ~log L (Σ P log P − Σ P log P̂), loses up to two digits to cancellation: ~1e-5. A rotated
// value within an ulp of a code boundary can take the other code on one side (the quantizer
// itself is bit-exact, part 1, so only its inputs differ); one such code moves an item's loss by
// ~1/(rows·D) of it (~1e-5 here). Over the steps Adam turns gradient differences δ into update
// differences ~lr·δ per step, so 30 steps keep losses within ~1e-4 and rotations within ~1e-4;
// the bounds leave a factor 10. Adam's first step is lr·sign(g): a gradient element within
// rounding of zero could take the other sign and move one (i, j) pair of A by 2·lr; such a case
// would break the rotation bound and is reported with the element, not hidden.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "kernels/optr-device.cuh"
#include "kernels/optr-quant.cuh"
#include "rotation/optr-internal.h"
#include "xorshift-normal.h"

#define B_STEP0 1e-4
#define B_LOSS  1e-3
#define B_ROT   1e-3

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double) t.tv_sec + 1e-9 * (double) t.tv_nsec;
}

// ---- 1. the quantizer ------------------------------------------------------------------------

// Row r of kind r % 8 (see the header).
static void quant_row(int32_t r, int32_t D, int32_t G, float * x) {
    const int kind = r % 8;
    for (int32_t d = 0; d < D; d++) {
        const double z = xn_normal();
        switch (kind) {
        case 4: x[d] = 0.75f; break;                                        // constant: degenerate groups
        case 5: x[d] = (float) (0.25 * floor(4.0 * z)); if (x[d] == 0.0f && d % 2) x[d] = -0.0f; break;   // ties, ±0
        case 6: {                                                           // t = x/scale + zero + 1/2 on integers
            static const float lv[6] = {0.5f, 1.5f, 2.5f, 1.0f, 2.0f, 0.25f};
            const int32_t k = d % G;
            x[d] = k == 0 ? 0.0f : k == 1 ? 3.0f : lv[(d * 7 + r) % 6];
            break;
        }
        case 7: x[d] = (float) (1e-9 * z); break;                           // range below the 1e-8 floor
        default: x[d] = (float) ((d % 5 == 0 ? 2.0 : 0.3 * (d % 3)) + (d % 29 == 3 ? 5.0 : 1.0) * z);
        }
    }
}

static int check_quant(int small) {
    const int32_t dims[3] = {64, 128, 256};
    const struct { enum oscar_clip_algo algo; double ratio; } clips[3] = {
        {OSCAR_CLIP_SORT, 0.96}, {OSCAR_CLIP_BISECT, 0.9}, {OSCAR_CLIP_SORT, 0.0}};
    const int32_t n = small ? 24 : 640;
    int fail = 0, n_cfg = 0;
    for (int di = 0; di < 3; di++)
        for (int gi = 0; gi < 2; gi++)
            for (int mi = 0; mi < 3; mi++)
                for (int ci = 0; ci < 3; ci++) {
                    const int32_t D = dims[di], G = gi ? 32 : D, ng = D / G;
                    if (small && (di == 2 || mi > 0)) continue;
                    struct oscar_int2_params p = oscar_int2_default_params(D);
                    p.group_size = G, p.meta_dtype = (enum oscar_quant_meta_dtype) mi;
                    p.clip_algo = clips[ci].algo, p.clip_ratio = clips[ci].ratio;
                    const size_t nD = (size_t) n * D, nG = (size_t) n * ng;
                    float * y = malloc(nD * 4), * yh[2] = {malloc(nD * 4), malloc(nD * 4)};
                    struct osc_optr_lin lin[2];
                    for (int s = 0; s < 2; s++) {
                        lin[s].c = malloc(nD * 4), lin[s].clampv = malloc((size_t) n * 4);
                        lin[s].clipped = malloc(nD), lin[s].imax = malloc(nG * 2), lin[s].imin = malloc(nG * 2);
                        lin[s].scale = malloc(nG * 4);
                    }
                    for (int32_t r = 0; r < n; r++) quant_row(r, D, G, y + (size_t) r * D);
                    struct osc_optr_scratch scr;
                    enum oscar_status st = osc_optr_scratch_init(&scr, n, 1, D, ng) ? OSCAR_OK : OSCAR_ERR_NOMEM;
                    if (st == OSCAR_OK) st = osc_optr_quant_rows(&p, y, n, false, &lin[0], yh[0], &scr);
                    if (st == OSCAR_OK) st = osc_cuda_optr_quant_rows(&p, y, n, yh[1], &lin[1]);
                    int bad = st != OSCAR_OK;
                    const char * what = st != OSCAR_OK ? oscar_last_error() : "";
                    size_t first = 0;
#define SAME(field, bytes)                                                                                             \
    if (!bad && memcmp(field[0], field[1], bytes)) {                                                                   \
        bad = 1, what = #field;                                                                                        \
        for (first = 0; first < (bytes) && ((const char *) field[0])[first] == ((const char *) field[1])[first]; first++) \
            ;                                                                                                          \
    }
                    float * c2[2] = {lin[0].c, lin[1].c}, * cl2[2] = {lin[0].clampv, lin[1].clampv};
                    float * sc2[2] = {lin[0].scale, lin[1].scale};
                    uint8_t * fl2[2] = {lin[0].clipped, lin[1].clipped};
                    int16_t * ia2[2] = {lin[0].imax, lin[1].imax}, * ii2[2] = {lin[0].imin, lin[1].imin};
                    SAME(yh, nD * 4) SAME(c2, nD * 4) SAME(cl2, (size_t) n * 4) SAME(fl2, nD) SAME(ia2, nG * 2)
                    SAME(ii2, nG * 2) SAME(sc2, nG * 4)
#undef SAME
                    n_cfg++;
                    if (bad) {
                        printf("FAIL QUANT D %d G %d meta %d clip %s %.2f: %s differs (byte %zu)\n", (int) D, (int) G,
                               mi, clips[ci].algo == OSCAR_CLIP_BISECT ? "bisect" : "sort", clips[ci].ratio, what,
                               first);
                        fail = 1;
                    }
                    osc_optr_scratch_free(&scr);
                    for (int s = 0; s < 2; s++) {
                        free(yh[s]), free(lin[s].c), free(lin[s].clampv), free(lin[s].clipped), free(lin[s].imax);
                        free(lin[s].imin), free(lin[s].scale);
                    }
                    free(y);
                }
    printf("%s QUANT: %d configurations x %d rows, values and linearisation bit-identical to the CPU\n",
           fail ? "FAIL" : "ok  ", n_cfg, (int) n);
    return fail;
}

// ---- 2. layers --------------------------------------------------------------------------------

struct lcase {
    const char * name;
    int32_t D, Hq, Hkv, C, G;
    bool center;
    enum oscar_quant_meta_dtype meta;
    int32_t n_train, train_len[16], n_held, held_len[3];
    int32_t steps, eval_every, sink, recent, qwin;
};

struct layer {
    int32_t train_start[17], held_start[4];
    float * q[2], * k[2], * v[2], * wo, * kb, * vb;
    struct oscar_optr_layer in;
    struct oscar_optr_params p;
};

// Keys with per-channel offsets and a few outlier channels (what INT2 struggles with).
static void fill_rows(const struct lcase * c, int32_t T, float * q, float * k, float * v) {
    const int32_t D = c->D;
    for (int32_t t = 0; t < T; t++) {
        for (int32_t i = 0; i < c->Hq * D; i++) q[(size_t) t * c->Hq * D + i] = (float) xn_normal();
        for (int32_t h = 0; h < c->Hkv; h++)
            for (int32_t d = 0; d < D; d++) {
                const double off = d % 5 == 0 ? 2.0 : 0.5 * (d % 3), amp = d % 29 == 3 ? 4.0 : 1.0;
                k[((size_t) t * c->Hkv + h) * D + d] = (float) (off + amp * xn_normal());
                v[((size_t) t * c->Hkv + h) * D + d] = (float) ((d % 31 == 7 ? 3.0 : 1.0) * xn_normal());
            }
    }
}

// A random rotation: expm of a random skew-symmetric matrix (fp64).
static void random_rotation(int32_t D, float * R) {
    double * X = malloc((size_t) D * D * 8), * E = malloc((size_t) D * D * 8), * w = malloc((size_t) 4 * D * D * 8);
    for (int32_t i = 0; i < D; i++)
        for (int32_t j = 0; j <= i; j++) {
            const double a = i == j ? 0.0 : 0.5 * xn_normal();
            X[(size_t) i * D + j] = a, X[(size_t) j * D + i] = -a;
        }
    osc_optr_expm(X, D, E, w);
    for (size_t i = 0; i < (size_t) D * D; i++) R[i] = (float) E[i];
    free(X), free(E), free(w);
}

static void layer_init(const struct lcase * c, uint64_t seed, struct layer * l) {
    memset(l, 0, sizeof *l);
    xn_state = seed * 2654435761u + 1;
    const int32_t D = c->D;
    for (int32_t i = 0; i < c->n_train; i++) l->train_start[i + 1] = l->train_start[i] + c->train_len[i];
    for (int32_t i = 0; i < c->n_held; i++) l->held_start[i + 1] = l->held_start[i] + c->held_len[i];
    const int32_t T[2] = {l->train_start[c->n_train], l->held_start[c->n_held]};
    for (int s = 0; s < 2; s++) {
        l->q[s] = malloc((size_t) T[s] * c->Hq * D * 4);
        l->k[s] = malloc((size_t) T[s] * c->Hkv * D * 4);
        l->v[s] = malloc((size_t) T[s] * c->Hkv * D * 4);
        fill_rows(c, T[s], l->q[s], l->k[s], l->v[s]);
    }
    l->wo = malloc((size_t) c->C * c->Hq * D * 4);
    for (size_t i = 0; i < (size_t) c->C * c->Hq * D; i++) l->wo[i] = (float) (0.05 * xn_normal());
    l->kb = malloc((size_t) c->Hkv * D * D * 4), l->vb = malloc((size_t) c->Hkv * D * D * 4);
    for (int32_t h = 0; h < c->Hkv; h++) random_rotation(D, l->kb + (size_t) h * D * D);
    for (int32_t h = 0; h < c->Hkv; h++) random_rotation(D, l->vb + (size_t) h * D * D);
    l->in = (struct oscar_optr_layer){.layer = 3, .n_head = c->Hq, .n_head_kv = c->Hkv, .head_dim = D,
                                      .n_embd = c->C, .wo = l->wo, .k_rot_base = l->kb, .v_rot_base = l->vb};
    l->in.train = (struct oscar_optr_rows){c->n_train, l->train_start, l->q[0], l->k[0], l->v[0]};
    l->in.held = (struct oscar_optr_rows){c->n_held, l->held_start, l->q[1], l->k[1], l->v[1]};
    l->p = oscar_optr_default_params(D, c->G);
    l->p.k_quant.meta_dtype = l->p.v_quant.meta_dtype = c->meta;
    l->p.center = c->center, l->p.steps = c->steps, l->p.eval_every = c->eval_every;
    l->p.sink = c->sink, l->p.recent = c->recent, l->p.qwin = c->qwin;
}

static void layer_free(struct layer * l) {
    for (int s = 0; s < 2; s++) free(l->q[s]), free(l->k[s]), free(l->v[s]);
    free(l->wo), free(l->kb), free(l->vb);
}

struct agreement {
    double step0, loss, rot;
    int rot_at[4];             // K/V, head, row, column of the largest rotation difference
    int best_diff, shape_diff;
};

static double rel(double a, double ref) { return fabs(a - ref) / fmax(fabs(ref), 1e-300); }

static void loss_diff(const double * a, const double * b, size_t n, double * worst, int * shape_diff) {
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) {
            *shape_diff |= isnan(a[i]) != isnan(b[i]);
            continue;
        }
        *worst = fmax(*worst, rel(b[i], a[i]));
    }
}

// a: the CPU's result, b: the GPU's.
static struct agreement compare(const struct oscar_optr_result * a, const struct oscar_optr_result * b) {
    struct agreement g;
    memset(&g, 0, sizeof g);
    const int32_t H = a->n_head_kv, D = a->head_dim, S = a->steps;
    g.shape_diff = a->n_train_seq != b->n_train_seq || a->n_held_seq != b->n_held_seq ||
                   memcmp(a->k_mean, b->k_mean, (size_t) H * D * 4) != 0;
    for (int32_t h = 0; h < H; h++) g.step0 = fmax(g.step0, fmax(rel(b->k_train[h], a->k_train[h]),
                                                                  rel(b->k_held[h], a->k_held[h])));
    loss_diff(a->k_train, b->k_train, (size_t) S * H, &g.loss, &g.shape_diff);
    loss_diff(a->v_train, b->v_train, (size_t) S * H, &g.loss, &g.shape_diff);
    loss_diff(a->k_held, b->k_held, (size_t) (S + 1) * H, &g.loss, &g.shape_diff);
    loss_diff(a->v_held, b->v_held, (size_t) (S + 1) * H, &g.loss, &g.shape_diff);
    for (int kv = 0; kv < 2; kv++)
        for (size_t i = 0; i < (size_t) H * D * D; i++) {
            const double d = fabs((double) (kv ? b->v_rot : b->k_rot)[i] - (double) (kv ? a->v_rot : a->k_rot)[i]);
            if (d > g.rot)
                g.rot = d, g.rot_at[0] = kv, g.rot_at[1] = (int) (i / ((size_t) D * D)),
                g.rot_at[2] = (int) (i / D % D), g.rot_at[3] = (int) (i % D);
        }
    for (int32_t h = 0; h < H; h++) g.best_diff += (a->k_best[h] != b->k_best[h]) + (a->v_best[h] != b->v_best[h]);
    return g;
}

static bool within(const struct agreement * g) {
    return !g->shape_diff && !g->best_diff && g->step0 <= B_STEP0 && g->loss <= B_LOSS && g->rot <= B_ROT;
}

static void print_agreement(const char * tag, const char * name, const struct agreement * g, bool ok) {
    printf("%s %s(%s): K step-0 loss rel %.2e (bound %.0e), losses rel %.2e (%.0e), rotations max abs %.2e (%.0e; "
           "%s head %d [%d][%d]), kept steps differing %d, sets/k_mean %s\n", ok ? "ok  " : "FAIL", tag, name, g->step0,
           B_STEP0, g->loss, B_LOSS, g->rot, B_ROT, g->rot_at[0] ? "V" : "K", g->rot_at[1], g->rot_at[2], g->rot_at[3],
           g->best_diff, g->shape_diff ? "DIFFER" : "equal");
}

static bool same_bits(const struct oscar_optr_result * a, const struct oscar_optr_result * b) {
    const size_t H = (size_t) a->n_head_kv, DD = (size_t) a->head_dim * a->head_dim, S = (size_t) a->steps;
    return !memcmp(a->k_rot, b->k_rot, H * DD * 4) && !memcmp(a->v_rot, b->v_rot, H * DD * 4) &&
           !memcmp(a->k_train, b->k_train, S * H * 8) && !memcmp(a->v_train, b->v_train, S * H * 8) &&
           !memcmp(a->k_held, b->k_held, (S + 1) * H * 8) && !memcmp(a->v_held, b->v_held, (S + 1) * H * 8) &&
           !memcmp(a->k_best, b->k_best, H * 4) && !memcmp(a->v_best, b->v_best, H * 4);
}

static void print_trajectory(const struct oscar_optr_result * r) {
    const int32_t H = r->n_head_kv, S = r->steps;
    printf("     head 0: K train %.5g -> %.5g, held %.5g -> kept step %d; V train %.5g -> %.5g, held %.5g -> kept %d\n",
           r->k_train[0], r->k_train[(size_t) (S - 1) * H], r->k_held[0], r->k_best[0], r->v_train[0],
           r->v_train[(size_t) (S - 1) * H], r->v_held[0], r->v_best[0]);
}

static int check_layer(const struct lcase * c, uint64_t seed, bool control) {
    struct layer l;
    layer_init(c, seed, &l);
    struct oscar_optr_result cpu, gpu, gpu2, bad;
    int fail = 0;
    double t0 = now();
    enum oscar_status st = oscar_optr_refine_layer(&l.in, &l.p, &cpu);
    const double t_cpu = now() - t0;
    if (st != OSCAR_OK) {
        printf("FAIL LAYER(%s): cpu: %s\n", c->name, oscar_last_error());
        layer_free(&l);
        return 1;
    }
    t0 = now();
    st = osc_cuda_optr_refine_layer(&l.in, &l.p, &gpu);
    const double t_gpu = now() - t0;
    if (st != OSCAR_OK) {
        printf("FAIL LAYER(%s): cuda: %s\n", c->name, oscar_last_error());
        oscar_optr_result_free(&cpu);
        layer_free(&l);
        return 1;
    }
    const struct agreement g = compare(&cpu, &gpu);
    const bool ok = within(&g);
    print_agreement("LAYER", c->name, &g, ok);
    print_trajectory(&cpu);
    printf("     %d + %d sequences, %d steps per phase: cpu %.2f s, cuda %.2f s\n", (int) cpu.n_train_seq,
           (int) cpu.n_held_seq, (int) c->steps, t_cpu, t_gpu);
    fail |= !ok;
    if (osc_cuda_optr_refine_layer(&l.in, &l.p, &gpu2) != OSCAR_OK) {
        printf("FAIL DETERMINISM(%s): second run: %s\n", c->name, oscar_last_error());
        fail = 1;
    } else {
        const bool same = same_bits(&gpu, &gpu2);
        printf("%s DETERMINISM(%s): two cuda runs %s\n", same ? "ok  " : "FAIL", c->name,
               same ? "bit-identical" : "DIFFER");
        fail |= !same;
        oscar_optr_result_free(&gpu2);
    }
    if (control) {
        const struct osc_optr_dev_opts o = {.drop_ste_range = true};
        if (osc_cuda_optr_refine_layer_opts(&l.in, &l.p, &bad, &o) != OSCAR_OK) {
            printf("FAIL CONTROL(%s): %s\n", c->name, oscar_last_error());
            fail = 1;
        } else {
            const struct agreement gb = compare(&cpu, &bad);
            const bool caught = !within(&gb);
            print_agreement("CONTROL (the gradient without the STE range terms must break a bound)", c->name, &gb,
                            caught);
            fail |= !caught;
            oscar_optr_result_free(&bad);
        }
    }
    oscar_optr_result_free(&cpu), oscar_optr_result_free(&gpu);
    layer_free(&l);
    return fail;
}

// ---- --bench: the Qwen3-8B shape ----------------------------------------------------------------

static int bench(uint64_t seed, int32_t cpu_steps) {
    const struct lcase c = {"qwen3-8b", 128, 32, 8, 4096, 0, true, OSCAR_META_F32, 15,
                            {2048, 2048, 2048, 2048, 2048, 2048, 2048, 2048, 2048, 2048, 2048, 2048, 2048, 2048, 2048},
                            1, {2048}, 80, 20, 64, 256, 64};
    printf("bench: one layer of the Qwen3-8B shape, 15 training + 1 held-out sequences of 2048 rows\n");
    struct layer l;
    layer_init(&c, seed, &l);
    struct oscar_optr_result gpu, cpu, gpu_s;
    double t0 = now();
    if (osc_cuda_optr_refine_layer(&l.in, &l.p, &gpu) != OSCAR_OK) {
        printf("FAIL bench: cuda: %s\n", oscar_last_error());
        return 1;
    }
    const double t_first = now() - t0;
    oscar_optr_result_free(&gpu);
    t0 = now();
    if (osc_cuda_optr_refine_layer(&l.in, &l.p, &gpu) != OSCAR_OK) return printf("FAIL bench: %s\n", oscar_last_error()), 1;
    const double t_gpu = now() - t0;
    printf("bench cuda: %d steps per phase: %.3f s per layer (first call, with CUDA / cuBLAS start-up: %.3f s); "
           "x 36 layers = %.1f s\n", (int) c.steps, t_gpu, t_first, 36 * t_gpu);
    print_trajectory(&gpu);
    oscar_optr_result_free(&gpu);
    // the CPU: its exact-attention setup alone, then cpu_steps steps per phase (the GPU the same, to compare)
    struct oscar_optr_params ps = l.p;
    ps.steps = cpu_steps, ps.eval_every = cpu_steps > 1 ? cpu_steps - 1 : 1;
    float * k_mean = malloc((size_t) c.Hkv * c.D * 4);
    oscar_optr_key_mean(&l.in.train, c.Hkv, c.D, k_mean);
    struct osc_optr_state * stt = NULL;
    t0 = now();
    enum oscar_status st = osc_optr_prepare(&l.in, &ps, k_mean, &stt);
    const double t_prep = now() - t0;
    osc_optr_state_free(stt);
    free(k_mean);
    if (st != OSCAR_OK) return printf("FAIL bench: cpu prepare: %s\n", oscar_last_error()), 1;
    t0 = now();
    if (oscar_optr_refine_layer(&l.in, &ps, &cpu) != OSCAR_OK) return printf("FAIL bench: cpu: %s\n", oscar_last_error()), 1;
    const double t_cpu = now() - t0;
    t0 = now();
    if (osc_cuda_optr_refine_layer(&l.in, &ps, &gpu_s) != OSCAR_OK) return printf("FAIL bench: %s\n", oscar_last_error()), 1;
    const double t_gpu_s = now() - t0;
    const double t_cpu80 = t_prep + (t_cpu - t_prep) * (double) c.steps / cpu_steps;
    printf("bench cpu (%d threads): setup %.2f s; %d steps per phase %.2f s (cuda %.3f s); linear in the steps after "
           "the setup: %d steps ~ %.1f s per layer, x 36 layers ~ %.0f s\n", omp_get_max_threads(), t_prep, (int) cpu_steps,
           t_cpu, t_gpu_s, (int) c.steps, t_cpu80, 36 * t_cpu80);
    const struct agreement g = compare(&cpu, &gpu_s);
    print_agreement("BENCH", "qwen3-8b", &g, within(&g));
    oscar_optr_result_free(&cpu), oscar_optr_result_free(&gpu_s);
    layer_free(&l);
    return 0;
}

int main(int argc, char ** argv) {
    uint64_t seed = 7;
    int small = 0, do_bench = 0;
    int32_t cpu_steps = 8;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--small")) small = 1;
        else if (!strcmp(argv[i], "--bench")) do_bench = 1;
        else if (!strcmp(argv[i], "--cpu-steps") && i + 1 < argc) cpu_steps = atoi(argv[++i]);
        else return fprintf(stderr, "usage: %s [--seed N] [--small] [--bench [--cpu-steps N]]\n", argv[0]), 2;
    }
    const struct oscar_backend_i * be;
    if (oscar_backend_get("cuda", &be) != OSCAR_OK) {
        printf("skip: %s\n", oscar_last_error());
        return 77;
    }
    printf("seed %llu\n", (unsigned long long) seed);
    if (do_bench) return bench(seed, cpu_steps > 0 ? cpu_steps : 8);
    xn_state = seed;
    int fail = check_quant(small);
    //   name, D, Hq, Hkv, C, G, centre, meta, train sequences (one too short: skipped), held-out, steps, eval, sink, recent, qwin
    const struct lcase cases[] = {
        {"d64-gqa1", 64, 3, 3, 160, 32, true, OSCAR_META_F32, 4, {176, 40, 176, 150}, 2, {150, 140}, 30, 5, 16, 32, 24},
        {"d64-gqa4-nocenter", 64, 8, 2, 192, 64, false, OSCAR_META_F32, 3, {160, 180, 160}, 1, {170}, 30, 5, 16, 32, 24},
        {"d128-gqa4", 128, 8, 2, 256, 128, true, OSCAR_META_F16, 3, {200, 200, 170}, 2, {180, 160}, 30, 5, 16, 32, 24},
        {"d128-gqa1-nocenter", 128, 2, 2, 256, 32, false, OSCAR_META_BF16, 3, {190, 150, 150}, 2, {150, 150}, 30, 5,
         16, 32, 24},
    };
    const struct lcase tiny = {"tiny", 64, 4, 2, 64, 32, true, OSCAR_META_F32, 2, {72, 64}, 1, {68}, 3, 2, 8, 16, 8};
    if (small) fail |= check_layer(&tiny, seed, false);
    else
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) fail |= check_layer(&cases[i], seed + i, i == 2);
    printf("test-optr-device: %s\n", fail ? "FAIL" : "PASS");
    return fail;
}
