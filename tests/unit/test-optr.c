// test-optr.c - OptR (lib/rotation/optr.h): the exponential map and its
// gradient against finite differences, the K and V losses' analytic gradients
// against finite differences of the straight-through loss, orthogonality after
// training, key-mean attention equivalence, the loss going down with early
// stopping keeping the best held-out step, bit-identical results on 1 and 2
// threads and for a part of the KV heads refined alone, and bad shapes refused. Random data from a printed seed
// (OSCAR_TEST_SEED repeats it).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rotation/optr-internal.h"
#include "rotation/optr.h"

static uint64_t seed;
#include "test-splitmix.h"

static int setup(void ** state) {
    (void) state;
    const char * e = getenv("OSCAR_TEST_SEED");
    seed = e ? strtoull(e, NULL, 10) : (uint64_t) time(NULL);
    print_message("test-optr seed %llu (set OSCAR_TEST_SEED to repeat)\n", (unsigned long long) seed);
    return 0;
}

// ---- a small random layer ------------------------------------------------------------------
enum { HQ = 4, HKV = 2, D = 16, G = 8, C = 24 };

struct fixture {
    int32_t train_start[4], held_start[3];
    float * q[2], * k[2], * v[2];       // train, held
    float wo[C * HQ * D];
    float kb[HKV * D * D], vb[HKV * D * D];
    struct oscar_optr_layer in;
    struct oscar_optr_params p;
};

// Keys with per-channel offsets and two outlier channels (what INT2 struggles with).
static void fill_rows(uint64_t * s, int32_t T, float * q, float * k, float * v) {
    for (int32_t t = 0; t < T; t++) {
        for (int32_t i = 0; i < HQ * D; i++) q[(size_t) t * HQ * D + i] = (float) (1.5 * splitmix_unif(s));
        for (int32_t h = 0; h < HKV; h++)
            for (int32_t d = 0; d < D; d++) {
                double off = d % 5 == 0 ? 3.0 : 0.5 * (d % 3);
                double amp = d == 3 || d == 11 ? 4.0 : 1.0;
                k[((size_t) t * HKV + h) * D + d] = (float) (off + amp * splitmix_unif(s));
                v[((size_t) t * HKV + h) * D + d] = (float) ((d == 7 ? 3.0 : 1.0) * splitmix_unif(s));
            }
    }
}

// A random orthogonal D x D matrix: expm of a random skew-symmetric one.
static void random_rotation(uint64_t * s, float * R) {
    double X[D * D], E[D * D], work[4 * D * D];
    for (int i = 0; i < D; i++)
        for (int j = 0; j <= i; j++) {
            double a = i == j ? 0.0 : splitmix_unif(s);
            X[i * D + j] = a, X[j * D + i] = -a;
        }
    osc_optr_expm(X, D, E, work);
    for (int i = 0; i < D * D; i++) R[i] = (float) E[i];
}

static void fixture_init(struct fixture * f, uint64_t s0) {
    uint64_t s = s0;
    memset(f, 0, sizeof(*f));
    const int32_t tl[3] = {48, 44, 52}, hl[2] = {40, 46};
    f->train_start[0] = 0;
    for (int i = 0; i < 3; i++) f->train_start[i + 1] = f->train_start[i] + tl[i];
    f->held_start[0] = 0;
    for (int i = 0; i < 2; i++) f->held_start[i + 1] = f->held_start[i] + hl[i];
    int32_t T[2] = {f->train_start[3], f->held_start[2]};
    for (int k = 0; k < 2; k++) {
        f->q[k] = malloc((size_t) T[k] * HQ * D * sizeof(float));
        f->k[k] = malloc((size_t) T[k] * HKV * D * sizeof(float));
        f->v[k] = malloc((size_t) T[k] * HKV * D * sizeof(float));
        fill_rows(&s, T[k], f->q[k], f->k[k], f->v[k]);
    }
    for (int i = 0; i < C * HQ * D; i++) f->wo[i] = (float) (0.3 * splitmix_unif(&s));
    for (int h = 0; h < HKV; h++) {
        random_rotation(&s, f->kb + h * D * D);
        random_rotation(&s, f->vb + h * D * D);
    }
    f->in = (struct oscar_optr_layer){.layer = 7, .n_head = HQ, .n_head_kv = HKV, .head_dim = D, .n_embd = C,
                                      .wo = f->wo, .k_rot_base = f->kb, .v_rot_base = f->vb};
    f->in.train = (struct oscar_optr_rows){3, f->train_start, f->q[0], f->k[0], f->v[0]};
    f->in.held = (struct oscar_optr_rows){2, f->held_start, f->q[1], f->k[1], f->v[1]};
    f->p = oscar_optr_default_params(D, G);
    f->p.sink = 4, f->p.recent = 8, f->p.qwin = 12, f->p.steps = 40, f->p.eval_every = 5;
    f->p.k_quant.clip_ratio = 0.9, f->p.v_quant.clip_ratio = 0.9;
    f->p.n_threads = 1;
}

static void fixture_free(struct fixture * f) {
    for (int k = 0; k < 2; k++) free(f->q[k]), free(f->k[k]), free(f->v[k]);
}

// ---- the exponential map -------------------------------------------------------------------
static void test_expm_grad_fd(void ** state) {
    (void) state;
    uint64_t s = seed;
    enum { N = 6 };
    double X[N * N], G0[N * N], E[N * N], GX[N * N], work[10 * N * N], Xp[N * N], Ep[N * N], Em[N * N];
    for (int i = 0; i < N * N; i++) X[i] = 0.8 * splitmix_unif(&s), G0[i] = splitmix_unif(&s);
    osc_optr_expm_grad(X, G0, N, E, GX, work);
    // expm of a skew matrix is orthogonal (fp64)
    double S[N * N], ES[N * N];
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) S[i * N + j] = X[i * N + j] - X[j * N + i];
    osc_optr_expm(S, N, ES, work);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double dot = 0.0;
            for (int k = 0; k < N; k++) dot += ES[k * N + i] * ES[k * N + j];
            assert_true(fabs(dot - (i == j)) < 1e-13);
        }
    // d<G, expm(X)>/dX_ab by central differences (fp64: h = 1e-5 gives ~1e-10 truncation + rounding)
    const double h = 1e-5;
    for (int e = 0; e < N * N; e++) {
        memcpy(Xp, X, sizeof Xp);
        Xp[e] += h;
        osc_optr_expm(Xp, N, Ep, work);
        Xp[e] -= 2 * h;
        osc_optr_expm(Xp, N, Em, work);
        double fd = 0.0;
        for (int i = 0; i < N * N; i++) fd += G0[i] * (Ep[i] - Em[i]) / (2 * h);
        assert_true(fabs(fd - GX[e]) < 1e-7 * (1.0 + fabs(GX[e])));
    }
}

// ---- the quantizer inside the loss ---------------------------------------------------------------
// Live rows are bit-identical to the serving quantizer (clip, codes, metadata, dequantization)
// for every clip rule and metadata dtype; frozen at the same point they agree to rounding.
static void test_quant_bit_exact(void ** state) {
    (void) state;
    uint64_t s = seed ^ 0x77;
    enum { N = 40, DQ = 64 };
    static float y[N * DQ], yh[N * DQ], ref[N * DQ], yf[N * DQ], c[N * DQ], clampv[N], scale[N * 8];
    static uint8_t clipped[N * DQ], codes[N * DQ / 4];
    static int16_t imax[N * 8], imin[N * 8];
    static float meta[N * 16];
    struct osc_optr_lin lin = {c, clampv, clipped, imax, imin, scale};
    struct osc_optr_scratch sc;
    assert_true(osc_optr_scratch_init(&sc, N, 4, DQ, 8));
    for (int i = 0; i < N * DQ; i++) y[i] = (float) ((i % 7 == 0 ? 5.0 : 1.0) * splitmix_unif(&s));
    const double ratios[3] = {0.0, 0.9, 0.96};
    const enum oscar_clip_algo algos[3] = {OSCAR_CLIP_SORT, OSCAR_CLIP_BISECT, OSCAR_CLIP_FLUSH};
    const enum oscar_quant_meta_dtype dts[2] = {OSCAR_META_F32, OSCAR_META_BF16};
    for (int a = 0; a < 3; a++)
        for (int r = 0; r < 3; r++)
            for (int t = 0; t < 2; t++)
                for (int32_t g = 16; g <= DQ; g *= 4) {
                    struct oscar_int2_params p = oscar_int2_default_params(DQ);
                    p.group_size = g, p.clip_ratio = ratios[r], p.clip_algo = algos[a], p.meta_dtype = dts[t];
                    assert_int_equal(oscar_int2_quantize_rows(&p, y, N, codes, meta, NULL), OSCAR_OK);
                    assert_int_equal(oscar_int2_dequantize_rows(&p, codes, meta, N, ref), OSCAR_OK);
                    assert_int_equal(osc_optr_quant_rows(&p, y, N, false, &lin, yh, &sc), OSCAR_OK);
                    assert_memory_equal(yh, ref, sizeof ref);
                    assert_int_equal(osc_optr_quant_rows(&p, y, N, true, &lin, yf, &sc), OSCAR_OK);
                    for (int i = 0; i < N * DQ; i++) assert_true(fabsf(yf[i] - ref[i]) <= 1e-5f * (1.0f + fabsf(ref[i])));
                }
    osc_optr_scratch_free(&sc);
}

// ---- loss gradients ------------------------------------------------------------------------------
// L(A) = Σ_h loss_h(R_base·expm(A_h − A_hᵀ)) with the quantizer's choices frozen at A0.
static double loss_at(struct osc_optr_state * st, int phase, const float * base, const double * A, bool frozen) {
    float R[HKV * D * D];
    double work[13 * D * D], loss[HKV];
    for (int h = 0; h < HKV; h++) osc_optr_rotation(base + h * D * D, A + h * D * D, D, R + h * D * D, work);
    assert_int_equal(osc_optr_set_loss(st, phase, false, R, frozen, loss, NULL), OSCAR_OK);
    return loss[0] + loss[1];
}

static void check_phase_gradient(struct fixture * f, struct osc_optr_state * st, int phase, uint64_t * s) {
    const float * base = phase ? f->vb : f->kb;
    double A[HKV * D * D], gA[HKV * D * D], dR[HKV * D * D], loss[HKV], work[13 * D * D];
    float R[HKV * D * D];
    for (int i = 0; i < HKV * D * D; i++) A[i] = 0.05 * splitmix_unif(s);
    for (int h = 0; h < HKV; h++) osc_optr_rotation(base + h * D * D, A + h * D * D, D, R + h * D * D, work);
    // the live loss records the straight-through linearisation; frozen at the same point it agrees
    assert_int_equal(osc_optr_set_loss(st, phase, false, R, false, loss, NULL), OSCAR_OK);
    const double live = loss[0] + loss[1];
    assert_int_equal(osc_optr_set_loss(st, phase, false, R, true, loss, dR), OSCAR_OK);
    const double frozen = loss[0] + loss[1];
    assert_true(fabs(live - frozen) <= 1e-5 * fabs(live));
    assert_true(live > 0.0);
    for (int h = 0; h < HKV; h++) osc_optr_grad_a(base + h * D * D, A + h * D * D, dR + h * D * D, D, gA + h * D * D, work);
    // Directional derivatives along random unit directions. The loss runs in fp32 (relative
    // rounding ~1e-6 of the loss per evaluation), so with h = 1e-2 the difference quotient carries
    // ~1e-4·|L| of noise plus O(h²) truncation; a wrong term (sign, factor, index) is O(1) off.
    const double h = 1e-2;
    double worst = 0.0;
    for (int dir = 0; dir < 6; dir++) {
        double U[HKV * D * D], Ap[HKV * D * D], nrm = 0.0, an = 0.0;
        for (int i = 0; i < HKV * D * D; i++) U[i] = splitmix_unif(s), nrm += U[i] * U[i];
        nrm = sqrt(nrm);
        for (int i = 0; i < HKV * D * D; i++) U[i] /= nrm, an += gA[i] * U[i];
        for (int i = 0; i < HKV * D * D; i++) Ap[i] = A[i] + h * U[i];
        double lp = loss_at(st, phase, base, Ap, true);
        for (int i = 0; i < HKV * D * D; i++) Ap[i] = A[i] - h * U[i];
        double lm = loss_at(st, phase, base, Ap, true);
        // within 2 % of the analytic value plus 3x the quotient's rounding noise (1e-4·|L|): a
        // direction along which the loss barely moves (|an| below that noise) is judged by the noise
        double fd = (lp - lm) / (2 * h), err = fabs(fd - an) / (2e-2 * fabs(an) + 3e-4 * fabs(live));
        if (err > worst) worst = err;
        print_message("phase %c dir %d: analytic %.6e finite-difference %.6e\n", phase ? 'V' : 'K', dir, an, fd);
    }
    assert_true(worst < 1.0);
}

static void test_loss_gradient_fd(void ** state) {
    (void) state;
    struct fixture f;
    fixture_init(&f, seed);
    uint64_t s = seed ^ 0x5151;
    float mu[HKV * D];
    oscar_optr_key_mean(&f.in.train, HKV, D, mu);
    struct osc_optr_state * st = NULL;
    assert_int_equal(osc_optr_prepare(&f.in, &f.p, mu, &st), OSCAR_OK);
    check_phase_gradient(&f, st, 0, &s);
    assert_int_equal(osc_optr_set_phat(st, f.kb), OSCAR_OK);
    check_phase_gradient(&f, st, 1, &s);
    osc_optr_state_free(st);
    fixture_free(&f);
}

// ---- training ------------------------------------------------------------------------------------
static double orth_err(const float * R) {
    double worst = 0.0;
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) {
            double dot = 0.0;
            for (int k = 0; k < D; k++) dot += (double) R[k * D + i] * (double) R[k * D + j];
            worst = fmax(worst, fabs(dot - (i == j)));
        }
    return worst;
}

static void check_trajectory(const struct oscar_optr_result * r, const double * train, const double * held,
                             const int32_t * best, int32_t every) {
    for (int h = 0; h < HKV; h++) {
        // the training loss went below its start (Adam on the straight-through loss is not monotone,
        // and on some random rows the last step sits above the first: the lowest one is checked)
        double low = train[h];
        for (int32_t s = 1; s < r->steps; s++) low = fmin(low, train[(size_t) s * HKV + h]);
        assert_true(low < train[h]);
        double b = held[h];
        int32_t arg = -1;
        for (int32_t s = 0; s < r->steps; s++) {
            double x = held[(size_t) (s + 1) * HKV + h];
            bool evaluated = s % every == 0 || s == r->steps - 1;
            assert_int_equal(!isnan(x), evaluated);
            if (evaluated && x < b) b = x, arg = s;
        }
        assert_int_equal(best[h], arg);   // the best held-out step (margin 0), or the base
    }
}

static void test_train_orth_early_stop(void ** state) {
    (void) state;
    struct fixture f;
    fixture_init(&f, seed);
    struct oscar_optr_result r;
    assert_int_equal(oscar_optr_refine_layer(&f.in, &f.p, &r), OSCAR_OK);
    assert_int_equal(r.n_train_seq, 3);
    assert_int_equal(r.n_held_seq, 2);
    for (int h = 0; h < HKV; h++) {
        double ek = orth_err(r.k_rot + h * D * D), ev = orth_err(r.v_rot + h * D * D);
        print_message("head %d: orthogonality error K %.2e V %.2e (base %.2e %.2e); best steps K %d V %d\n", h, ek,
                      ev, orth_err(f.kb + h * D * D), orth_err(f.vb + h * D * D), (int) r.k_best[h],
                      (int) r.v_best[h]);
        assert_true(ek <= 1e-6 && ev <= 1e-6);
        // a kept head differs from its base, a reverted one equals it
        assert_int_equal(memcmp(r.k_rot + h * D * D, f.kb + h * D * D, D * D * sizeof(float)) != 0, r.k_best[h] >= 0);
        assert_int_equal(memcmp(r.v_rot + h * D * D, f.vb + h * D * D, D * D * sizeof(float)) != 0, r.v_best[h] >= 0);
    }
    print_message("K train %.5g -> %.5g, held %.5g -> best; V train %.5g -> %.5g\n", r.k_train[0],
                  r.k_train[(r.steps - 1) * HKV], r.k_held[0], r.v_train[0], r.v_train[(r.steps - 1) * HKV]);
    check_trajectory(&r, r.k_train, r.k_held, r.k_best, f.p.eval_every);
    check_trajectory(&r, r.v_train, r.v_held, r.v_best, f.p.eval_every);
    // on this data the refinement helps at least one head of each phase on held-out rows
    assert_true(r.k_best[0] >= 0 || r.k_best[1] >= 0);
    assert_true(r.v_best[0] >= 0 || r.v_best[1] >= 0);
    // a margin no step can beat reverts every head to its base
    f.p.margin_k = f.p.margin_v = 0.99;
    f.p.steps = 5;
    struct oscar_optr_result r2;
    assert_int_equal(oscar_optr_refine_layer(&f.in, &f.p, &r2), OSCAR_OK);
    assert_memory_equal(r2.k_rot, f.kb, sizeof f.kb);
    assert_memory_equal(r2.v_rot, f.vb, sizeof f.vb);
    oscar_optr_result_free(&r2);
    oscar_optr_result_free(&r);
    fixture_free(&f);
}

static void test_threads_deterministic(void ** state) {
    (void) state;
    struct fixture f;
    fixture_init(&f, seed + 1);
    f.p.steps = 12;
    struct oscar_optr_result r1, r2;
    assert_int_equal(oscar_optr_refine_layer(&f.in, &f.p, &r1), OSCAR_OK);
    f.p.n_threads = 2;
    assert_int_equal(oscar_optr_refine_layer(&f.in, &f.p, &r2), OSCAR_OK);
    assert_memory_equal(r1.k_rot, r2.k_rot, sizeof f.kb);
    assert_memory_equal(r1.v_rot, r2.v_rot, sizeof f.vb);
    assert_memory_equal(r1.k_mean, r2.k_mean, HKV * D * sizeof(float));
    assert_memory_equal(r1.k_train, r2.k_train, (size_t) 12 * HKV * sizeof(double));
    assert_memory_equal(r1.v_train, r2.v_train, (size_t) 12 * HKV * sizeof(double));
    oscar_optr_result_free(&r1);
    oscar_optr_result_free(&r2);
    fixture_free(&f);
}

// Columns [h0, h0 + nh) of rows [n, heads, D].
static float * heads_of(const float * x, int32_t n, int32_t heads, int32_t h0, int32_t nh) {
    float * out = malloc((size_t) n * nh * D * sizeof(float));
    for (int32_t t = 0; t < n; t++)
        memcpy(out + (size_t) t * nh * D, x + ((size_t) t * heads + h0) * D, (size_t) nh * D * sizeof(float));
    return out;
}

// A part of the heads (KV head 1 alone: its query heads, rows, W_O columns, base and key mean) with
// n_head_kv_layer = the layer's heads refines that head exactly as the whole layer does (the
// data-parallel split by KV head, lib/calibrate/refine.c); without it the Adam step differs.
static void test_head_part_bit_exact(void ** state) {
    (void) state;
    struct fixture f;
    fixture_init(&f, seed + 5);
    f.p.steps = 12;
    struct oscar_optr_result all, part;
    assert_int_equal(oscar_optr_refine_layer(&f.in, &f.p, &all), OSCAR_OK);
    const int32_t g = HQ / HKV, h0 = 1, T[2] = {f.train_start[3], f.held_start[2]};
    float * q[2], * k[2], * v[2];
    for (int s = 0; s < 2; s++)
        q[s] = heads_of(f.q[s], T[s], HQ, h0 * g, g), k[s] = heads_of(f.k[s], T[s], HKV, h0, 1),
        v[s] = heads_of(f.v[s], T[s], HKV, h0, 1);
    float * wo = heads_of(f.wo, C, HQ, h0 * g, g);
    struct oscar_optr_layer in = f.in;
    in.n_head = g, in.n_head_kv = 1, in.wo = wo, in.n_head_kv_layer = HKV;
    in.k_rot_base = f.kb + h0 * D * D, in.v_rot_base = f.vb + h0 * D * D, in.k_mean = all.k_mean + h0 * D;
    in.train.q = q[0], in.train.k = k[0], in.train.v = v[0], in.held.q = q[1], in.held.k = k[1], in.held.v = v[1];
    assert_int_equal(oscar_optr_refine_layer(&in, &f.p, &part), OSCAR_OK);
    assert_memory_equal(part.k_rot, all.k_rot + h0 * D * D, D * D * sizeof(float));
    assert_memory_equal(part.v_rot, all.v_rot + h0 * D * D, D * D * sizeof(float));
    assert_int_equal(part.k_best[0], all.k_best[h0]);
    assert_int_equal(part.v_best[0], all.v_best[h0]);
    for (int32_t st = 0; st < 12; st++) {
        assert_memory_equal(&part.k_train[st], &all.k_train[st * HKV + h0], sizeof(double));
        assert_memory_equal(&part.v_train[st], &all.v_train[st * HKV + h0], sizeof(double));
    }
    oscar_optr_result_free(&part);
    in.n_head_kv_layer = 0;   // a layer of its own: the mean over one head, another step
    assert_int_equal(oscar_optr_refine_layer(&in, &f.p, &part), OSCAR_OK);
    assert_true(memcmp(part.k_rot, all.k_rot + h0 * D * D, D * D * sizeof(float)) != 0);
    oscar_optr_result_free(&part);
    in.n_head_kv_layer = -1;
    assert_int_equal(oscar_optr_refine_layer(&in, &f.p, &part), OSCAR_ERR_INVALID);
    oscar_optr_result_free(&all);
    for (int s = 0; s < 2; s++) free(q[s]), free(k[s]), free(v[s]);
    free(wo);
    fixture_free(&f);
}

// The score scale (Gemma 3's query_pre_attn_scalar^-1/2): attn_scale 1/2 on q refines exactly as the
// default 1/sqrt(16) = 1/4 on 2q (every product scaled by a power of two), and differently from
// the default on q (the scale reaches the softmax).
static void test_score_scale(void ** state) {
    (void) state;
    struct fixture f;
    fixture_init(&f, seed + 3);
    f.p.steps = 8;
    struct oscar_optr_result r0, r1, r2;
    assert_int_equal(oscar_optr_refine_layer(&f.in, &f.p, &r0), OSCAR_OK);
    f.in.attn_scale = 0.5f;
    assert_int_equal(oscar_optr_refine_layer(&f.in, &f.p, &r1), OSCAR_OK);
    for (int k = 0; k < 2; k++) {
        const int32_t T = k ? f.held_start[2] : f.train_start[3];
        for (size_t i = 0; i < (size_t) T * HQ * D; i++) f.q[k][i] *= 2.0f;
    }
    f.in.attn_scale = 0.0f;
    assert_int_equal(oscar_optr_refine_layer(&f.in, &f.p, &r2), OSCAR_OK);
    assert_memory_equal(r1.k_rot, r2.k_rot, sizeof f.kb);
    assert_memory_equal(r1.v_rot, r2.v_rot, sizeof f.vb);
    assert_memory_equal(r1.k_train, r2.k_train, (size_t) 8 * HKV * sizeof(double));
    assert_memory_equal(r1.v_train, r2.v_train, (size_t) 8 * HKV * sizeof(double));
    assert_memory_not_equal(r0.k_train, r1.k_train, (size_t) 8 * HKV * sizeof(double));
    oscar_optr_result_free(&r0), oscar_optr_result_free(&r1), oscar_optr_result_free(&r2);
    f.in.attn_scale = -1.0f;
    assert_int_equal(oscar_optr_refine_layer(&f.in, &f.p, &r2), OSCAR_ERR_INVALID);
    fixture_free(&f);
}

// ---- key centering -------------------------------------------------------------------------------
// softmax(q·kᵀ) and softmax(q·(k − μ)ᵀ) agree within fp32 rounding: each logit is a
// length-D fp32 dot product, off by at most γ = D·eps·Σ_d |q_d|·(|k_d| + |μ_d|) in either
// form (the constant q·μ cancels in exact arithmetic), so p changes by at most p·(e^{2γ} − 1).
static void test_k_mean_equivalence(void ** state) {
    (void) state;
    struct fixture f;
    fixture_init(&f, seed + 2);
    float mu[HKV * D];
    oscar_optr_key_mean(&f.in.train, HKV, D, mu);
    const int32_t T = f.train_start[3];
    for (int h = 0; h < HKV; h++)   // the fp64 mean, rounded once
        for (int d = 0; d < D; d++) {
            double m = 0.0;
            for (int32_t t = 0; t < T; t++) m += (double) f.k[0][((size_t) t * HKV + h) * D + d];
            assert_true(mu[h * D + d] == (float) (m / T));
        }
    const float sc = 1.0f / sqrtf((float) D);
    const double eps = FLT_EPSILON / 2;
    int32_t L = f.train_start[1];
    for (int j = 0; j < HQ; j++) {
        const int h = j / (HQ / HKV);
        for (int32_t i = 0; i < L; i++) {
            const float * q = f.q[0] + ((size_t) i * HQ + j) * D;
            float a[64], b[64];
            double gam = 0.0, mx_a = -INFINITY, mx_b = -INFINITY;
            for (int32_t t = 0; t <= i; t++) {
                const float * k = f.k[0] + ((size_t) t * HKV + h) * D;
                float sa = 0.0f, sb = 0.0f;
                double bound = 0.0;
                for (int d = 0; d < D; d++) {
                    sa += q[d] * k[d];
                    sb += q[d] * (k[d] - mu[h * D + d]);
                    bound += fabs((double) q[d]) * (fabs((double) k[d]) + fabs((double) mu[h * D + d]));
                }
                a[t] = sa * sc, b[t] = sb * sc;
                gam = fmax(gam, D * eps * bound * (double) sc);
                mx_a = fmax(mx_a, (double) a[t]), mx_b = fmax(mx_b, (double) b[t]);
            }
            double za = 0.0, zb = 0.0;
            for (int32_t t = 0; t <= i; t++) za += exp((double) a[t] - mx_a), zb += exp((double) b[t] - mx_b);
            for (int32_t t = 0; t <= i; t++) {
                double pa = exp((double) a[t] - mx_a) / za, pb = exp((double) b[t] - mx_b) / zb;
                assert_true(fabs(pa - pb) <= pa * expm1(4 * gam) + 1e-12);
            }
        }
    }
    fixture_free(&f);
}

// ---- refusals --------------------------------------------------------------------------------------
static void test_bad_shapes(void ** state) {
    (void) state;
    struct fixture f;
    fixture_init(&f, seed + 3);
    struct oscar_optr_result r;
    struct oscar_optr_layer in = f.in;
    struct oscar_optr_params p = f.p;
    in.n_head = 3;   // not a multiple of 2 KV heads
    assert_int_equal(oscar_optr_refine_layer(&in, &p, &r), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "layer 7"));
    in = f.in, in.head_dim = 18;
    assert_int_equal(oscar_optr_refine_layer(&in, &p, &r), OSCAR_ERR_INVALID);
    in = f.in, in.wo = NULL;
    assert_int_equal(oscar_optr_refine_layer(&in, &p, &r), OSCAR_ERR_INVALID);
    int32_t bad[4] = {0, 48, 40, 144};   // a reversed sequence
    in = f.in, in.train.seq_start = bad;
    assert_int_equal(oscar_optr_refine_layer(&in, &p, &r), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "training sequence 1"));
    int32_t off[4] = {2, 48, 92, 144};
    in = f.in, in.train.seq_start = off;
    assert_int_equal(oscar_optr_refine_layer(&in, &p, &r), OSCAR_ERR_INVALID);
    in = f.in, p.recent = 60;   // every sequence shorter than sink + recent + 8
    assert_int_equal(oscar_optr_refine_layer(&in, &p, &r), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "no training sequence"));
    p = f.p, p.k_quant.scheme = OSCAR_INT2_SYM;
    assert_int_equal(oscar_optr_refine_layer(&in, &p, &r), OSCAR_ERR_INVALID);
    p = f.p, p.v_quant.group_size = 5;
    assert_int_equal(oscar_optr_refine_layer(&in, &p, &r), OSCAR_ERR_INVALID);
    p = f.p, p.steps = 0;
    assert_int_equal(oscar_optr_refine_layer(&in, &p, &r), OSCAR_ERR_INVALID);
    p = f.p, p.k_quant.head_dim = 8;
    assert_int_equal(oscar_optr_refine_layer(&in, &p, &r), OSCAR_ERR_INVALID);
    p = f.p;
    f.k[1][5] = NAN;
    assert_int_equal(oscar_optr_refine_layer(&in, &p, &r), OSCAR_ERR_NUMERIC);
    assert_non_null(strstr(oscar_last_error(), "held-out"));
    fixture_free(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expm_grad_fd),
        cmocka_unit_test(test_quant_bit_exact),
        cmocka_unit_test(test_loss_gradient_fd),
        cmocka_unit_test(test_train_orth_early_stop),
        cmocka_unit_test(test_threads_deterministic),
        cmocka_unit_test(test_head_part_bit_exact),
        cmocka_unit_test(test_score_scale),
        cmocka_unit_test(test_k_mean_equivalence),
        cmocka_unit_test(test_bad_shapes),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
