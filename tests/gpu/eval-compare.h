// eval-compare.h - shared by tests/unit/test-eval-device.c (backend "cpu") and
// tests/gpu/test-eval-device.c (backend "cuda"): random held-out layers and the
// gate / clip-search methods of calibrate (with and without a key mean), evaluated through verify/eval-device.h
// on a backend and directly through lib/verify (the reference), with the largest
// relative difference over every returned number.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verify/eval-device.h"
#include "xorshift-normal.h"


// n random orthogonal D x D matrices (Gram-Schmidt of Gaussian rows, fp64, stored fp32).
static void ec_orthogonal(float * R, int32_t n, int32_t D) {
    double * M = malloc(sizeof(double) * (size_t) D * D);
    for (int32_t r = 0; r < n; r++) {
        for (int32_t i = 0; i < D * D; i++) M[i] = xn_normal();
        for (int32_t i = 0; i < D; i++) {
            for (int32_t j = 0; j < i; j++) {
                double d = 0.0;
                for (int32_t c = 0; c < D; c++) d += M[i * D + c] * M[j * D + c];
                for (int32_t c = 0; c < D; c++) M[i * D + c] -= d * M[j * D + c];
            }
            double nn = 0.0;
            for (int32_t c = 0; c < D; c++) nn += M[i * D + c] * M[i * D + c];
            for (int32_t c = 0; c < D; c++) M[i * D + c] /= sqrt(nn);
        }
        for (int32_t i = 0; i < D * D; i++) R[(size_t) r * D * D + i] = (float) M[i];
    }
    free(M);
}

struct ec_case {
    const char * name;
    int32_t D, Hq, Hkv, C, n_seq, lens[3];
    enum oscar_tier_mode mode;
    int32_t sink, recent, group;
    enum oscar_quant_meta_dtype meta;
    enum oscar_clip_algo clip_algo;
    float attn_scale;   // the score scale (0 = 1/sqrt(D); Gemma 3's query_pre_attn_scalar^-1/2)
    int32_t window;     // a sliding layer's window (0 = full causal)
    int32_t centred;    // 1: keys carry a per-channel offset and the OSCAR methods subtract the key mean
};

static double ec_rel(double a, double b) {
    double d = fabs(a - b), s = fabs(b);
    return s > 1e-30 ? d / s : d;
}

// Runs every method of one case on `backend` and on lib/verify; *max_rel: largest
// relative difference. *det: 1 if a second backend run gave bit-identical numbers.
static enum oscar_status ec_run(const char * backend, const struct ec_case * cs, uint64_t seed, double * max_rel,
                                int * det) {
    enum { NC = 4 };
    const double grid[NC] = { 1.0, 0.96, 0.9, 0.84 };
    int32_t D = cs->D, Hq = cs->Hq, Hkv = cs->Hkv, C = cs->C, T = 0, seq_start[4] = { 0 }, max_len = 1;
    for (int32_t s = 0; s < cs->n_seq; s++) {
        T += cs->lens[s], seq_start[s + 1] = T;
        if (cs->lens[s] > max_len) max_len = cs->lens[s];
    }
    size_t nq = (size_t) T * Hq * D, nk = (size_t) T * Hkv * D;
    float * q = malloc(sizeof(float) * nq), * k = malloc(sizeof(float) * nk), * v = malloc(sizeof(float) * nk);
    float * wo = malloc(sizeof(float) * (size_t) C * Hq * D), * rk = malloc(sizeof(float) * (size_t) Hkv * D * D);
    float * rv = malloc(sizeof(float) * (size_t) Hkv * D * D), kc[8], vc[8];
    xn_state = seed * 2654435761u + 17;
    for (size_t i = 0; i < nq; i++) q[i] = (float) (1.5 * xn_normal());
    for (size_t i = 0; i < nk; i++) k[i] = (float) (xn_normal() * ((i % (size_t) D) % 13 == 5 ? 5.0 : 1.0));
    for (size_t i = 0; i < nk; i++) v[i] = (float) xn_normal();
    // centred: an offset per (KV head, channel) on every key, and its mean (as OptR's centring measures it)
    float * km = cs->centred ? calloc((size_t) Hkv * D, sizeof(float)) : NULL;
    for (int32_t c = 0; km && c < Hkv * D; c++) {
        const float off = (float) (3.0 * xn_normal());
        double s = 0.0;
        for (int32_t t = 0; t < T; t++) k[(size_t) t * Hkv * D + c] += off, s += (double) k[(size_t) t * Hkv * D + c];
        km[c] = (float) (s / T);
    }
    for (size_t i = 0; i < (size_t) C * Hq * D; i++) wo[i] = (float) (xn_normal() / sqrt((double) (Hq * D)));
    ec_orthogonal(rk, Hkv, D);
    ec_orthogonal(rv, Hkv, D);
    for (int32_t h = 0; h < Hkv; h++) kc[h] = (float) (0.86 + 0.01 * h), vc[h] = (float) (0.98 - 0.03 * h);
    struct oscar_tiering tr = {.mode = cs->mode, .n_sink = cs->sink, .n_recent = cs->recent, .n_flush = 8,
                               .prompt_len = 0, .block = 1};
    struct oscar_layer_input in = {.layer = 0, .n_tokens = T, .n_seq = cs->n_seq, .seq_start = seq_start, .q = q,
                                   .k = k, .v = v, .wo = wo, .n_head = Hq, .n_head_kv = Hkv, .head_dim = D, .n_embd = C,
                                   .attn_scale = cs->attn_scale, .window = cs->window};
    struct oscar_eval_shape shape = {.n_head = Hq, .n_head_kv = Hkv, .head_dim = D, .n_embd = C, .max_tokens = T,
                                     .max_len = max_len, .max_cand = NC, .attn_scale = cs->attn_scale};
    struct oscar_eval_dev * ev = NULL;
    struct oscar_kv_transform tf[5];
    const char * preset[5] = { "naive", "hadamard", "oscar", "oscar", "oscar-searched" };
    enum oscar_status st = OSCAR_OK;
    *max_rel = 0.0, *det = 1;
    for (int m = 0; m < 5 && st == OSCAR_OK; m++) {
        bool per_head = m >= 3;
        st = oscar_kv_transform_preset(preset[m], 1, Hkv, D, cs->group, cs->meta, &tr, per_head, rk, rv, true, kc,
                                       vc, &tf[m]);
        tf[m].int2.clip_algo = cs->clip_algo;
        if (m == 1) tf[m].k_clip = 0.96, tf[m].v_clip = 0.92;
        if (m >= 2) tf[m].k_mean = km;   // the OSCAR methods (NULL unless centred)
    }
    if (st == OSCAR_OK) st = oscar_eval_dev_open(backend, &shape, 0, &ev);
    if (st == OSCAR_OK) st = oscar_eval_dev_layer(ev, &in);
    double one[5] = { 0.0 }, all[5] = { 0.0 };
    for (int m = 0; m < 5 && st == OSCAR_OK; m++) {   // gate: out_rel
        struct oscar_layer_metrics ref;
        double a = 0.0, b = 0.0;
        if ((st = oscar_verify_layer_metrics(&tf[m], &in, 0, &ref)) != OSCAR_OK ||
            (st = oscar_eval_dev_out_rel(ev, &tf[m], &a)) != OSCAR_OK || (st = oscar_eval_dev_out_rel(ev, &tf[m], &b)) != OSCAR_OK)
            break;
        double r = ec_rel(a, ref.out_rel);
        printf("    %-16s out_rel %s %.9e  cpu %.9e  rel %.2e\n", tf[m].name, backend, a, ref.out_rel, r);
        if (r > *max_rel) *max_rel = r;
        if (memcmp(&a, &b, sizeof a)) *det = 0;
        one[m] = a;
    }
    // the gate's form: the five at once give each one's bits
    if (st == OSCAR_OK && (st = oscar_eval_dev_out_rel_methods(ev, tf, 5, all)) == OSCAR_OK && memcmp(one, all, sizeof one)) {
        printf("    out_rel of five methods at once differs from one at a time\n");
        *det = 0;
    }
    for (int m = 2; m < 4 && st == OSCAR_OK && cs->mode != OSCAR_TIERS_DECODE; m++) {   // clip search
        bool ph = m == 3;
        double kn[2][NC * 8], kd[2][8], vn[2][NC * 9], vd[2];
        struct oscar_eval_dev * cpu = NULL;
        if ((st = oscar_eval_dev_candidates(ev, &tf[m], NC, grid, ph, kn[0], kd[0], vn[0], &vd[0])) != OSCAR_OK ||
            (st = oscar_eval_dev_open("cpu", &shape, 0, &cpu)) != OSCAR_OK)
            break;
        if ((st = oscar_eval_dev_layer(cpu, &in)) == OSCAR_OK)
            st = oscar_eval_dev_candidates(cpu, &tf[m], NC, grid, ph, kn[1], kd[1], vn[1], &vd[1]);
        oscar_eval_dev_free(cpu);
        if (st != OSCAR_OK) break;
        double r = ec_rel(vd[0], vd[1]);
        for (int32_t i = 0; i < Hkv; i++) r = fmax(r, ec_rel(kd[0][i], kd[1][i]));
        for (int32_t i = 0; i < NC * Hkv; i++) r = fmax(r, ec_rel(kn[0][i], kn[1][i]));
        for (int32_t i = 0; i < NC * (Hkv + 1); i++)
            r = fmax(r, ec_rel(vn[0][i], vn[1][i]));   // per head: the layer sums are 0 on both
        printf("    %-16s candidates (per-head %d): k_num[0] %.6e v_num[last] %.6e  max rel %.2e\n", tf[m].name, ph,
               kn[0][0], vn[0][NC * (Hkv + 1) - (ph ? 2 : 1)], r);
        if (r > *max_rel) *max_rel = r;
        // a clip grid split over ranks: parts [0, 1), [1, 1) (references only), [1, NC) give the whole grid's bits
        double pk[NC * 8], pkd[8], pv[NC * 9], pvd = 0.0;
        const int32_t cut[4] = {0, 1, 1, NC};
        for (int p = 0; p < 3 && st == OSCAR_OK; p++)
            st = oscar_eval_dev_candidates_part(ev, &tf[m], NC, cut[p], cut[p + 1], grid, ph, pk, pkd, pv,
                                                p == 0 ? &pvd : NULL);
        if (st == OSCAR_OK && (memcmp(pk, kn[0], sizeof(double) * NC * Hkv) || memcmp(pkd, kd[0], sizeof(double) * Hkv) ||
                               memcmp(pv, vn[0], sizeof(double) * NC * (Hkv + 1)) || memcmp(&pvd, &vd[0], sizeof pvd))) {
            printf("    %-16s candidates in parts differ from the whole grid\n", tf[m].name);
            *det = 0;
        }
    }
    oscar_eval_dev_free(ev);
    free(q); free(k); free(v); free(wo); free(rk); free(rv); free(km);
    return st;
}
