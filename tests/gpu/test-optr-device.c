// test-optr-device.c - OptR on the GPU (kernels/optr-device.cu) against the CPU reference
// (lib/rotation/optr.c), which stays the oracle:
//   1. QUANT: the straight-through quantizer on the same rows (kernels/optr-quant.cu against
//      optr-loss.c osc_optr_quant_rows): values, code residuals, clip flags and thresholds,
//      arg-max / arg-min and scales bit for bit, over D 64/128/256, groups D and 32, fp32/fp16/
//      bf16 metadata, sort / bisection / no clip, and rows made to hit code boundaries, ties,
//      constant and tiny groups;
//   2. per layer (D 64 and 128, GQA groups 1 and 4, with and without key centring, sequences of
//      several lengths and one too short to use):
//      LOCKSTEP: the CPU's training loop step for step (both phases, every held-out evaluation);
//        at every evaluation the GPU computes the loss and gradient at the CPU's rotation, and at
//        every step the GPU's optimizer step (dL/dA through expm, Adam, the new rotation) starts
//        from the CPU's A, m, v and gradient; each is compared with the CPU's;
//      CONTROL: the same with the GPU's straight-through gradient missing its range terms (a
//        wrong gradient) must break a bound;
//      RUN: the production path (osc_cuda_optr_refine_layer) free-running: the sets, the key mean
//        and the losses at the base rotations as the CPU's; the kept held-out losses printed next
//        to the CPU's and to the CPU's own with 1-ulp nudges in its keys;
//      DETERMINISM: two GPU runs bit-identical.
//   --bench: one layer of the Qwen3-8B shape (Hq 32, Hkv 8, D 128, C 4096, 15 training + 1
//      held-out sequences of 2048 rows, OptR's defaults): the GPU's time for the full 80 + 80
//      steps, the CPU's for --cpu-steps steps per phase (default 8; its cost after the exact-
//      attention setup, timed apart, is linear in the steps), and 2 lockstep steps per phase.
//
//   test-optr-device [--seed N] [--small] [--bench [--cpu-steps N]]   exit 0 pass, 1 fail, 77 no CUDA
// --small: the quantizer on few rows and one tiny layer (for compute-sanitizer).
//
// Why lockstep, not whole trajectories: OptR's training is chaotic. Nudging a seventh of the
// training keys by one ulp moves the CPU's own K training losses by > 1e-3 after about 5 steps and
// by 10-40 % after 30, and its final rotations by up to 0.6 (measured with this file's layers on
// the CPU): Adam normalises every element's step, and the INT2 codes switch discretely, so any
// rounding difference grows by ~10x a step. Two implementations that round differently can
// only be compared step by step from the same state, which is what LOCKSTEP does.
//
// Bounds, and why (the CPU and the GPU run the same algorithm: fp32 products, fp64 sums; they
// differ in the order of the fp32 GEMMs' sums, ~sqrt(K)·2^-24 relative per product, in the
// order of fp64 sums, and in expf's last bit):
//   losses at the same rotation, no code flipped        1e-5 relative (1-ulp input nudges move
//                                                        the CPU's by 1e-8..1e-7)
//   gradients dL/dR, same                                1e-4 relative Frobenius per head (CPU
//                                                        under nudges: 4e-7..8e-7)
//   an evaluation where codes flipped                    losses 1e-3, gradients 3e-2: a rotated
//     value within an ulp of a code boundary takes the other code on one side (the quantizer is
//     bit-exact, part 1, so only its input differs); each such code is counted (|Δc| ~ 1 in the
//     code residuals, ~1e-6 otherwise) and reported. One flipped code moves an item's loss by
//     ~1/(rows·D) and one column of its gradient by ~1/sqrt(rows) of it. The same holds for a
//     group's fp16 / bf16 scale or zero whose fp32 value lies within an ulp of a rounding midpoint:
//     it rounds to the other neighbour (a half-precision ulp, 2^-11 or 2^-8 relative), which moves
//     every residual of the group by ~1e-3; counted apart and given the same bounds.
//   the optimizer step from the same state               R 1e-6 absolute (fp32 of fp64 results),
//                                                        A, m, v 1e-12 absolute (fp64)
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "kernels/optr-device.cuh"
#include "kernels/optr-quant.cuh"
#include "optr-layer.h"
#include "rotation/optr-internal.h"

#define B_LOSS  1e-5   // lockstep evaluations (no code flipped): losses
#define B_GRAD  1e-4   //                                       gradients (relative Frobenius per head)
#define B_STEP0 1e-3   // the free-running layer (the production path) at the base rotations: the tight
                       // bounds are the lockstep's; this allows a flipped code (~1e-4 here)

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
    int64_t n_nan = 0;   // NaN values on both sides
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
                    float * y = calloc(1, nD * 4), * yh[2] = {calloc(1, nD * 4), calloc(1, nD * 4)};
                    struct osc_optr_lin lin[2];
                    for (int s = 0; s < 2; s++) {
                        lin[s].c = calloc(1, nD * 4), lin[s].clampv = calloc(1, (size_t) n * 4);
                        lin[s].clipped = calloc(1, nD), lin[s].imax = calloc(1, nG * 2), lin[s].imin = calloc(1, nG * 2);
                        lin[s].scale = calloc(1, nG * 4);
                    }
                    for (int32_t r = 0; r < n; r++) quant_row(r, D, G, y + (size_t) r * D);
                    struct osc_optr_scratch scr;
                    enum oscar_status st = osc_optr_scratch_init(&scr, n, 1, D, ng) ? OSCAR_OK : OSCAR_ERR_NOMEM;
                    if (st == OSCAR_OK) st = osc_optr_quant_rows(&p, y, n, false, &lin[0], yh[0], &scr);
                    if (st == OSCAR_OK) st = osc_cuda_optr_quant_rows(&p, y, n, yh[1], &lin[1]);
                    int bad = st != OSCAR_OK;
                    const char * what = st != OSCAR_OK ? oscar_last_error() : "";
                    size_t first = 0;
                    // floats: the same bits, or NaN on both sides (a constant row with fp16 metadata
                    // stores zero = -inf and scale 0: (c - zero)·scale is NaN on both, with the host's
                    // and the device's NaN payloads)
#define SAME(field, count, is_float)                                                                                   \
    for (size_t i_ = 0; !bad && i_ < (size_t) (count); i_++) {                                                         \
        const size_t w_ = sizeof field[0][0];                                                                          \
        const bool nan2_ = is_float && isnan((double) field[0][i_]) && isnan((double) field[1][i_]);                   \
        if (!nan2_ && memcmp(&field[0][i_], &field[1][i_], w_)) bad = 1, what = #field, first = i_;                    \
    }
                    float * c2[2] = {lin[0].c, lin[1].c}, * cl2[2] = {lin[0].clampv, lin[1].clampv};
                    float * sc2[2] = {lin[0].scale, lin[1].scale};
                    uint8_t * fl2[2] = {lin[0].clipped, lin[1].clipped};
                    int16_t * ia2[2] = {lin[0].imax, lin[1].imax}, * ii2[2] = {lin[0].imin, lin[1].imin};
                    SAME(yh, nD, 1) SAME(c2, nD, 1) SAME(cl2, n, 1) SAME(fl2, nD, 0) SAME(ia2, nG, 0) SAME(ii2, nG, 0)
                    SAME(sc2, nG, 1)
#undef SAME
                    for (size_t i = 0; i < nD; i++) n_nan += isnan(yh[0][i]) != 0;
                    n_cfg++;
                    if (bad) {
                        printf("FAIL QUANT D %d G %d meta %d clip %s %.2f: %s differs (element %zu)\n", (int) D, (int) G,
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
    printf("%s QUANT: %d configurations x %d rows, values and linearisation bit-identical to the CPU (%lld values NaN "
           "on both: constant rows with fp16 metadata)\n", fail ? "FAIL" : "ok  ", n_cfg, (int) n, (long long) n_nan);
    return fail;
}

// ---- 2. layers --------------------------------------------------------------------------------

// ---- 2a. lockstep: the CPU's training loop, the GPU from the CPU's state at every step ----------

struct lock {
    double loss, grad;          // worst relative differences at evaluations without a flip (code or metadata)
    double loss_f, grad_f;      // the same at evaluations with one
    int64_t flips, meta, evals, evals_flipped;   // codes flipped, residuals moved by a half-precision flip
    double step_rot, step_a;    // optimizer step from the same state: max |ΔR|, max |ΔA|, |Δm|, |Δv|
};

static double rel(double a, double ref) { return fabs(a - ref) / fmax(fabs(ref), 1e-300); }

// Codes that differ between the CPU's set (its items' residuals) and the GPU's c: |Δc| is ~1 for a
// flipped code, ~1e-6 otherwise. A group whose fp16 / bf16 scale or zero rounded to the other
// neighbour (its fp32 input within an ulp of the midpoint) moves its residuals by |Δc| ~ 1e-3
// (a half-precision ulp times the code): counted apart, in *meta, one per element.
static int64_t count_flips(const struct osc_optr_state * st, bool held, int32_t Hkv, int32_t D, const float * c,
                           int64_t * meta) {
    int64_t flips = 0;
    const float * g = c;
    for (int32_t s = 0; s < osc_optr_set_n_seq(st, held); s++)
        for (int32_t h = 0; h < Hkv; h++) {
            const struct osc_optr_item * it = osc_optr_set_item(st, held, h, s);
            const size_t n = (size_t) (it->q1 - it->q0) * D;
            for (size_t i = 0; i < n; i++) {
                const float d = fabsf(g[i] - it->lin.c[i]);
                flips += d > 0.5f;
                *meta += d > 1e-4f && d <= 0.5f;
            }
            g += n;
        }
    return flips;
}

static int64_t set_rows(const struct osc_optr_state * st, bool held, int32_t Hkv) {
    int64_t n = 0;
    for (int32_t s = 0; s < osc_optr_set_n_seq(st, held); s++)
        for (int32_t h = 0; h < Hkv; h++) {
            const struct osc_optr_item * it = osc_optr_set_item(st, held, h, s);
            n += it->q1 - it->q0;
        }
    return n;
}

// One evaluation on both at the same R: losses, gradients (training set), flips.
static enum oscar_status eval_both(struct osc_optr_state * st, struct osc_cuda_optr * dv, int phase, bool held,
                                   const float * R, int32_t Hkv, int32_t D, double * lc, double * dRc, double * lg,
                                   double * dRg, float * cg, struct lock * k) {
    enum oscar_status e = osc_optr_set_loss(st, phase, held, R, false, lc, held ? NULL : dRc);
    if (e == OSCAR_OK) e = osc_cuda_optr_loss(dv, phase, held, R, lg, held ? NULL : dRg, cg);
    if (e != OSCAR_OK) return e;
    int64_t meta = 0;
    const int64_t flips = count_flips(st, held, Hkv, D, cg, &meta);
    const size_t DD = (size_t) D * D;
    double wl = 0.0, wg = 0.0;
    for (int32_t h = 0; h < Hkv; h++) {
        wl = fmax(wl, rel(lg[h], lc[h]));
        if (held) continue;
        double n2 = 0.0, d2 = 0.0;
        for (size_t i = h * DD; i < (h + 1) * DD; i++) n2 += dRc[i] * dRc[i], d2 += (dRg[i] - dRc[i]) * (dRg[i] - dRc[i]);
        wg = fmax(wg, sqrt(d2 / fmax(n2, 1e-300)));
    }
    k->evals++, k->flips += flips, k->meta += meta;
    if (flips || meta) k->evals_flipped++, k->loss_f = fmax(k->loss_f, wl), k->grad_f = fmax(k->grad_f, wg);
    else k->loss = fmax(k->loss, wl), k->grad = fmax(k->grad, wg);
    return OSCAR_OK;
}

// optr.c run_phase step for step on the CPU (at most max_steps steps per phase); at every step the
// GPU evaluates the same R and takes an optimizer step from the same (A, m, v, dR).
static enum oscar_status lockstep(struct layer * l, const struct osc_optr_dev_opts * opts, int32_t max_steps,
                                  struct lock * k) {
    const int32_t Hkv = l->in.n_head_kv, D = l->in.head_dim, S = l->p.steps < max_steps ? l->p.steps : max_steps;
    const size_t DD = (size_t) D * D, HDD = Hkv * DD;
    const double heads = l->in.n_head_kv_layer > 0 ? l->in.n_head_kv_layer : Hkv;   // optr.c's mean over heads
    memset(k, 0, sizeof *k);
    float * km = NULL;
    if (l->p.center) {
        km = calloc(1, (size_t) Hkv * D * 4);
        oscar_optr_key_mean(&l->in.train, Hkv, D, km);
    }
    struct osc_optr_state * st = NULL;
    struct osc_cuda_optr * dv = NULL;
    enum oscar_status e = osc_optr_prepare(&l->in, &l->p, km, &st);
    if (e == OSCAR_OK) e = osc_cuda_optr_open(&l->in, &l->p, km, opts, &dv);
    const int64_t rows = e == OSCAR_OK ? fmax(set_rows(st, false, Hkv), set_rows(st, true, Hkv)) : 0;
    float * R = calloc(1, HDD * 4), * Rn = calloc(1, HDD * 4), * Rg = calloc(1, HDD * 4), * Rk = calloc(1, HDD * 4);
    float * bestR = calloc(1, HDD * 4), * cg = calloc(1, (size_t) (rows + 1) * D * 4);
    double * A = calloc(HDD, 8), * m = calloc(HDD, 8), * v = calloc(HDD, 8), * Ag = calloc(1, HDD * 8);
    double * mg = calloc(1, HDD * 8), * vg = calloc(1, HDD * 8), * dRc = calloc(1, HDD * 8), * dRg = calloc(1, HDD * 8);
    double * gA = calloc(1, HDD * 8), * work = calloc(1, 13 * DD * 8), lc[64], lg[64], best[64];
    for (int phase = 0; phase < 2 && e == OSCAR_OK; phase++) {
        const float * base = phase ? l->vb : l->kb;
        if (phase && (e = osc_optr_set_phat(st, Rk)) == OSCAR_OK) e = osc_cuda_optr_phat(dv, Rk);
        memcpy(R, base, HDD * 4), memcpy(bestR, base, HDD * 4);
        memset(A, 0, HDD * 8), memset(m, 0, HDD * 8), memset(v, 0, HDD * 8);
        if (e == OSCAR_OK) e = eval_both(st, dv, phase, true, R, Hkv, D, lc, dRc, lg, dRg, cg, k);
        for (int32_t h = 0; h < Hkv; h++) best[h] = lc[h];
        for (int32_t step = 0; step < S && e == OSCAR_OK; step++) {
            if ((e = eval_both(st, dv, phase, false, R, Hkv, D, lc, dRc, lg, dRg, cg, k)) != OSCAR_OK) break;
            memcpy(Ag, A, HDD * 8), memcpy(mg, m, HDD * 8), memcpy(vg, v, HDD * 8);
            for (int32_t h = 0; h < Hkv; h++) {
                osc_optr_grad_a(base + h * DD, A + h * DD, dRc + h * DD, D, gA + h * DD, work);
                osc_optr_adam(A + h * DD, m + h * DD, v + h * DD, gA + h * DD, DD, heads, l->p.lr, step);
                osc_optr_rotation(base + h * DD, A + h * DD, D, Rn + h * DD, work);
            }
            if ((e = osc_cuda_optr_step(dv, base, Ag, mg, vg, dRc, step, Rg)) != OSCAR_OK) break;
            for (size_t i = 0; i < HDD; i++) {
                k->step_rot = fmax(k->step_rot, fabs((double) Rg[i] - (double) Rn[i]));
                k->step_a = fmax(k->step_a, fmax(fabs(Ag[i] - A[i]), fmax(fabs(mg[i] - m[i]), fabs(vg[i] - v[i]))));
            }
            memcpy(R, Rn, HDD * 4);
            if (step % l->p.eval_every != 0 && step != S - 1) continue;
            if ((e = eval_both(st, dv, phase, true, R, Hkv, D, lc, dRc, lg, dRg, cg, k)) != OSCAR_OK) break;
            for (int32_t h = 0; h < Hkv; h++)
                if (lc[h] < best[h]) best[h] = lc[h], memcpy(bestR + h * DD, R + h * DD, DD * 4);
        }
        if (!phase) memcpy(Rk, bestR, HDD * 4);   // the kept key rotations (margin 0)
    }
    osc_optr_state_free(st), osc_cuda_optr_close(dv);
    free(km), free(R), free(Rn), free(Rg), free(Rk), free(bestR), free(cg), free(A), free(m), free(v), free(Ag);
    free(mg), free(vg), free(dRc), free(dRg), free(gA), free(work);
    return e;
}

#define B_LOSS_FLIP 1e-3   // an evaluation where codes flipped: losses
#define B_GRAD_FLIP 3e-2   //                                       and gradients
#define B_STEP_ROT  1e-6   // the optimizer step from the same state: rotations (fp32 of fp64 results)
#define B_STEP_A    1e-12  //                                         A, m, v (fp64)

static bool lock_ok(const struct lock * k) {
    return k->loss <= B_LOSS && k->grad <= B_GRAD && k->loss_f <= B_LOSS_FLIP && k->grad_f <= B_GRAD_FLIP &&
           k->step_rot <= B_STEP_ROT && k->step_a <= B_STEP_A;
}

static void print_lock(const char * tag, const char * name, const struct lock * k, bool ok) {
    printf("%s %s(%s): %lld evaluations at the CPU's rotations: losses rel %.2e (bound %.0e), gradients rel %.2e (%.0e); "
           "%lld codes flipped, %lld residuals moved by a metadata rounding flip, in %lld evaluations (losses %.2e, gradients %.2e; bounds %.0e, %.0e); optimizer step "
           "from the CPU's state: R %.2e (%.0e), A/m/v %.2e (%.0e)\n", ok ? "ok  " : "FAIL", tag, name,
           (long long) k->evals, k->loss, B_LOSS, k->grad, B_GRAD, (long long) k->flips, (long long) k->meta,
           (long long) k->evals_flipped,
           k->loss_f, k->grad_f, B_LOSS_FLIP, B_GRAD_FLIP, k->step_rot, B_STEP_ROT, k->step_a, B_STEP_A);
}

// ---- 2b. the free-running layer: what can be compared after chaos sets in ------------------------

static double kept_mean(const double * held, const int32_t * best, int32_t H) {
    double s = 0.0;
    for (int32_t h = 0; h < H; h++) s += held[(size_t) (best[h] + 1) * H + h];
    return s / H;
}

static bool same_bits(const struct oscar_optr_result * a, const struct oscar_optr_result * b) {
    const size_t H = (size_t) a->n_head_kv, DD = (size_t) a->head_dim * a->head_dim, S = (size_t) a->steps;
    return !memcmp(a->k_rot, b->k_rot, H * DD * 4) && !memcmp(a->v_rot, b->v_rot, H * DD * 4) &&
           !memcmp(a->k_train, b->k_train, S * H * 8) && !memcmp(a->v_train, b->v_train, S * H * 8) &&
           !memcmp(a->k_held, b->k_held, (S + 1) * H * 8) && !memcmp(a->v_held, b->v_held, (S + 1) * H * 8) &&
           !memcmp(a->k_best, b->k_best, H * 4) && !memcmp(a->v_best, b->v_best, H * 4);
}

// The first step whose K training loss differs by more than 1e-3 (steps if none).
static int32_t divergence_step(const struct oscar_optr_result * a, const struct oscar_optr_result * b) {
    for (int32_t s = 0; s < a->steps; s++)
        for (int32_t h = 0; h < a->n_head_kv; h++)
            if (rel(b->k_train[(size_t) s * a->n_head_kv + h], a->k_train[(size_t) s * a->n_head_kv + h]) > 1e-3) return s;
    return a->steps;
}

static int free_run(const struct lcase * c, struct layer * l) {
    struct oscar_optr_result cpu, gpu, gpu2, nudged;
    int fail = 0;
    double t0 = now();
    if (oscar_optr_refine_layer(&l->in, &l->p, &cpu) != OSCAR_OK) return printf("FAIL RUN(%s): cpu: %s\n", c->name, oscar_last_error()), 1;
    const double t_cpu = now() - t0;
    t0 = now();
    if (osc_cuda_optr_refine_layer(&l->in, &l->p, &gpu) != OSCAR_OK) {
        printf("FAIL RUN(%s): cuda: %s\n", c->name, oscar_last_error());
        oscar_optr_result_free(&cpu);
        return 1;
    }
    const double t_gpu = now() - t0;
    const int32_t H = cpu.n_head_kv;
    double step0 = 0.0;
    for (int32_t h = 0; h < H; h++) step0 = fmax(step0, fmax(rel(gpu.k_train[h], cpu.k_train[h]), rel(gpu.k_held[h], cpu.k_held[h])));
    const bool same_sets = cpu.n_train_seq == gpu.n_train_seq && cpu.n_held_seq == gpu.n_held_seq &&
                           !memcmp(cpu.k_mean, gpu.k_mean, (size_t) H * cpu.head_dim * 4);
    const bool ok = same_sets && step0 <= B_STEP0;
    // the CPU against itself with 1-ulp nudges in a seventh of the training keys: how far chaos carries
    const int32_t T = l->train_start[c->n_train];
    float * k0 = calloc(1, (size_t) T * H * c->D * 4);
    memcpy(k0, l->k[0], (size_t) T * H * c->D * 4);
    for (size_t j = 0; j < (size_t) T * H * c->D; j += 7) l->k[0][j] = nextafterf(l->k[0][j], INFINITY);
    const bool have_nudged = oscar_optr_refine_layer(&l->in, &l->p, &nudged) == OSCAR_OK;
    memcpy(l->k[0], k0, (size_t) T * H * c->D * 4);
    free(k0);
    printf("%s RUN(%s): %d + %d sequences, k_mean %s; K step-0 losses rel %.2e (bound %.0e); kept held-out losses K "
           "%.5g / V %.5g on the cpu, %.5g / %.5g on cuda (cpu with 1-ulp key nudges: %.5g / %.5g); K training "
           "losses part (> 1e-3) at step %d (cpu vs nudged cpu: %d); cpu %.2f s, cuda %.2f s\n", ok ? "ok  " : "FAIL",
           c->name, (int) gpu.n_train_seq, (int) gpu.n_held_seq, same_sets ? "equal" : "DIFFERS", step0, B_STEP0,
           kept_mean(cpu.k_held, cpu.k_best, H), kept_mean(cpu.v_held, cpu.v_best, H), kept_mean(gpu.k_held, gpu.k_best, H),
           kept_mean(gpu.v_held, gpu.v_best, H), have_nudged ? kept_mean(nudged.k_held, nudged.k_best, H) : NAN,
           have_nudged ? kept_mean(nudged.v_held, nudged.v_best, H) : NAN, (int) divergence_step(&cpu, &gpu),
           have_nudged ? (int) divergence_step(&cpu, &nudged) : -1, t_cpu, t_gpu);
    fail |= !ok;
    if (osc_cuda_optr_refine_layer(&l->in, &l->p, &gpu2) != OSCAR_OK) {
        printf("FAIL DETERMINISM(%s): second run: %s\n", c->name, oscar_last_error());
        fail = 1;
    } else {
        const bool same = same_bits(&gpu, &gpu2);
        printf("%s DETERMINISM(%s): two cuda runs %s\n", same ? "ok  " : "FAIL", c->name, same ? "bit-identical" : "DIFFER");
        fail |= !same;
        oscar_optr_result_free(&gpu2);
    }
    if (have_nudged) oscar_optr_result_free(&nudged);
    oscar_optr_result_free(&cpu), oscar_optr_result_free(&gpu);
    return fail;
}

static int check_layer(const struct lcase * c, uint64_t seed, bool control) {
    struct layer l;
    layer_init(c, seed, &l);
    struct lock k;
    int fail = 0;
    if (lockstep(&l, NULL, c->steps, &k) != OSCAR_OK) {
        printf("FAIL LOCKSTEP(%s): %s\n", c->name, oscar_last_error());
        fail = 1;
    } else {
        const bool ok = lock_ok(&k);
        print_lock("LOCKSTEP", c->name, &k, ok);
        fail |= !ok;
    }
    if (control) {
        const struct osc_optr_dev_opts o = {.drop_ste_range = true};
        if (lockstep(&l, &o, c->steps, &k) != OSCAR_OK) {
            printf("FAIL CONTROL(%s): %s\n", c->name, oscar_last_error());
            fail = 1;
        } else {
            const bool caught = !lock_ok(&k);
            print_lock("CONTROL (cuda without the STE range terms: must break a bound)", c->name, &k, caught);
            fail |= !caught;
        }
    }
    fail |= free_run(c, &l);
    layer_free(&l);
    return fail;
}

static void print_trajectory(const struct oscar_optr_result * r) {
    const int32_t H = r->n_head_kv, S = r->steps;
    printf("     head 0: K train %.5g -> %.5g, held %.5g -> kept step %d; V train %.5g -> %.5g, held %.5g -> kept %d\n",
           r->k_train[0], r->k_train[(size_t) (S - 1) * H], r->k_held[0], r->k_best[0], r->v_train[0],
           r->v_train[(size_t) (S - 1) * H], r->v_held[0], r->v_best[0]);
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
    float * k_mean = calloc(1, (size_t) c.Hkv * c.D * 4);
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
    printf("bench kept held-out losses (%d steps) K %.5g / V %.5g on the cpu, %.5g / %.5g on cuda\n", (int) cpu_steps,
           kept_mean(cpu.k_held, cpu.k_best, c.Hkv), kept_mean(cpu.v_held, cpu.v_best, c.Hkv),
           kept_mean(gpu_s.k_held, gpu_s.k_best, c.Hkv), kept_mean(gpu_s.v_held, gpu_s.v_best, c.Hkv));
    struct lock k;
    if (lockstep(&l, NULL, 2, &k) == OSCAR_OK) print_lock("BENCH LOCKSTEP (2 steps per phase)", "qwen3-8b", &k, lock_ok(&k));
    else printf("FAIL bench lockstep: %s\n", oscar_last_error());
    oscar_optr_result_free(&cpu), oscar_optr_result_free(&gpu_s);
    layer_free(&l);
    return 0;
}

int main(int argc, char ** argv) {
    uint64_t seed = 7;
    int small = 0, do_bench = 0;
    int32_t cpu_steps = 8;
    setvbuf(stdout, NULL, _IOLBF, 0);   // lines reach a log even when a time limit stops the run
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
