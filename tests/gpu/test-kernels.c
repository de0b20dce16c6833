// test-kernels.c - compares the CUDA backend with the CPU reference backend
// (style.md rule 9): INT2 rotate-quantize codes/meta (exact), paged INT2 writes
// (prefill sort clip + demotion bisection clip, exact against the CPU cache),
// fused tiered decode attention (relative error) over a sampled shape grid: head
// dims 64 / 128 / 256, GQA groups 1..16.
//
//   test-kernels [--seed N] [-o quant|write|attn] [--small]
// Exit: 0 pass, 1 fail, 77 no CUDA backend/device (the reason is printed).
//
// Tolerance for attention (rule 10): the CPU reference is fp32 throughout.
// The kernel feeds q and the softmax weights to bf16 tensor cores as hi + lo
// bf16 pairs (relative representation error <= 2^-16 each), K/V codes and BF16
// rows exactly, and accumulates in fp32. A logit s therefore moves by at most
// ~2^-16 |s| + fp32 summation noise (~D 2^-24 |q||k|), and the output, a convex
// combination, by about max|s| * 2^-16 relative: ~1e-4 for |s| <= 6. The
// required bound is the 1e-3 (10x headroom); a pure-bf16 kernel
// (q, p rounded once, 2^-9) would sit near 2e-3-1e-2 on the same inputs, and
// that estimate is printed next to every measured error.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attention/kv-cache.h"
#include "backend/backend.h"
#include "quant/quant.h"
#include "rotation/rotation.h"

static uint64_t rng_state;
static uint64_t rnd_u64(void) {
    uint64_t x = rng_state;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return rng_state = x;
}
static double rnd_unif(void) { return (double) (rnd_u64() >> 11) * (1.0 / 9007199254740992.0); }
static float rnd_normal(void) {
    double u = rnd_unif() + 1e-300, v = rnd_unif();
    return (float) (sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}
static int rnd_int(int lo, int hi) { return lo + (int) (rnd_u64() % (uint64_t) (hi - lo + 1)); }

static const char * meta_name(enum oscar_quant_meta_dtype t) {
    return t == OSCAR_META_F16 ? "f16" : t == OSCAR_META_BF16 ? "bf16" : "f32";
}

// Rows with realistic structure: a few outlier channels, some constant rows, some ties.
// with_constant 0 replaces the constant rows by ordinary ones: fp16 cannot hold such a
// row's zero point (-m / (1e-8 / 3) overflows to -inf and the scale rounds to 0, so
// oscar_int2_dequantize_rows gives NaN, which the CPU decode's merge keeps in that head's
// output): a limit of the format, not of the kernels. The
// quant check keeps them (the stored bits must still match).
static void fill_rows_kind(float * x, int64_t n, int32_t D, int with_constant) {
    for (int64_t r = 0; r < n; r++) {
        int kind = (int) (rnd_u64() % 50);
        if (kind == 0 && !with_constant) kind = 2;
        for (int32_t d = 0; d < D; d++) {
            float v = rnd_normal() * (d % 17 == 3 ? 6.0f : 1.0f);
            if (kind == 0) v = 0.75f;                          // degenerate (constant) row
            if (kind == 1) v = (float) ((int) (v * 2.0f)) * 0.5f;   // many ties on a grid
            x[r * D + d] = v;
        }
    }
}
static void fill_rows(float * x, int64_t n, int32_t D) { fill_rows_kind(x, n, D, 1); }

static int g_fail = 0;

// ---- quant ---------------------------------------------------------------------------

static void orth_matrix(float * R, int32_t D) {
    // Hadamard with random column signs: orthogonal, dense, deterministic per seed.
    double * H = malloc((size_t) D * D * sizeof(double));
    oscar_hadamard_matrix(D, H);
    for (int32_t j = 0; j < D; j++) {
        float s = (rnd_u64() & 1) ? 1.0f : -1.0f;
        for (int32_t i = 0; i < D; i++) R[i * D + j] = (float) H[i * D + j] * s;
    }
    free(H);
}

static void test_quant(const struct oscar_backend_i * cpu, const struct oscar_backend_i * gpu, int64_t n, int32_t D) {
    size_t mb_max = (size_t) 2 * (D / 32) * 4;   // G = 32, fp32 (scale, zero)
    float * xf = malloc((size_t) n * D * sizeof(float)), * R = malloc((size_t) D * D * sizeof(float));
    uint16_t * x = malloc((size_t) n * D * 2);
    uint8_t * c0 = malloc((size_t) n * D / 4), * c1 = malloc((size_t) n * D / 4);
    uint8_t * m0 = malloc((size_t) n * mb_max), * m1 = malloc((size_t) n * mb_max);
    fill_rows(xf, n, D);
    for (int64_t i = 0; i < n * D; i++) x[i] = oscar_f32_to_bf16(xf[i]);
    orth_matrix(R, D);
    const int Gs[3] = { D, D / 2, D / 2 > 32 ? 32 : 0 };   // 0: none (D 64 has two group sizes)
    const enum oscar_quant_meta_dtype mt[3] = { OSCAR_META_F32, OSCAR_META_F16, OSCAR_META_BF16 };
    const struct { enum oscar_clip_algo a; double r; } clips[4] = {
        { OSCAR_CLIP_SORT, 0.96 }, { OSCAR_CLIP_BISECT, 0.92 }, { OSCAR_CLIP_SORT, 0.0 }, { OSCAR_CLIP_FLUSH, 1.0 } };
    for (int gi = 0; gi < 3; gi++)
        for (int mi = 0; mi < 3 && Gs[gi] > 0; mi++)
            for (int ci = 0; ci < 4; ci++)
                for (int rot = 0; rot < 2; rot++) {
                    struct oscar_int2_params p = oscar_int2_default_params(D);
                    p.group_size = Gs[gi], p.meta_dtype = mt[mi], p.clip_algo = clips[ci].a;
                    p.clip_ratio = clips[ci].r;
                    size_t mb = oscar_int2_meta_bytes(&p);
                    memset(c1, 0xAB, (size_t) n * D / 4), memset(m1, 0xAB, (size_t) n * mb);
                    enum oscar_status s0 = cpu->int2_rotate_quantize(&p, rot ? R : NULL, x, n, c0, m0);
                    enum oscar_status s1 = gpu->int2_rotate_quantize(&p, rot ? R : NULL, x, n, c1, m1);
                    int64_t dc = 0, dm = 0;
                    for (int64_t i = 0; i < n * D / 4; i++) dc += c0[i] != c1[i];
                    for (int64_t i = 0; i < n * (int64_t) mb; i++) dm += m0[i] != m1[i];
                    int ok = s0 == OSCAR_OK && s1 == OSCAR_OK && dc == 0 && dm == 0;
                    g_fail |= !ok;
                    printf("%s INT2_QUANT(rows=%lld,D=%d,G=%d,meta=%s,clip=%s:%.2f,rot=%s): code bytes differing %lld, "
                           "meta bytes differing %lld%s%s\n", ok ? "ok  " : "FAIL", (long long) n, D, Gs[gi],
                           meta_name(mt[mi]), ci == 1 ? "bisect" : ci == 3 ? "flush" : "sort", clips[ci].r,
                           rot ? "hadamard*signs" : "none", (long long) dc, (long long) dm,
                           s1 != OSCAR_OK ? " error: " : "", s1 != OSCAR_OK ? oscar_last_error() : "");
                }
    free(xf), free(R), free(x), free(c0), free(c1), free(m0), free(m1);
}

// ---- cache construction --------------------------------------------------------------

struct built {
    struct oscar_kv_cache * c;
    float * k, * v;          // [n_seq, cap, Hkv, D] rotated rows as appended
    int64_t cap;
    int64_t * quant_end;     // [n_seq] end of the prefill-written INT2 range
};

static enum oscar_status build_cache(struct built * b, int32_t n_seq, int32_t Hkv, int32_t D, int32_t ps,
                                     enum oscar_quant_meta_dtype meta, const int64_t * lens, const int32_t * steps) {
    int64_t cap = 1;
    for (int32_t s = 0; s < n_seq; s++) cap = lens[s] + steps[s] > cap ? lens[s] + steps[s] : cap;
    struct oscar_kv_cache_params p = oscar_kv_cache_default_params(Hkv, D);
    p.page_size = ps, p.n_seq_max = n_seq, p.max_seq_len = cap;
    p.k_quant.meta_dtype = p.v_quant.meta_dtype = meta;
    b->cap = cap;
    enum oscar_status st = oscar_kv_cache_init(&p, &b->c);
    if (st != OSCAR_OK) return st;
    size_t row = (size_t) Hkv * D;
    b->k = malloc((size_t) n_seq * cap * row * sizeof(float));
    b->v = malloc((size_t) n_seq * cap * row * sizeof(float));
    b->quant_end = calloc((size_t) n_seq, sizeof(int64_t));
    if (!b->k || !b->v || !b->quant_end) return osc_error(OSCAR_ERR_NOMEM, "test cache");
    for (int32_t s = 0; s < n_seq; s++) {
        float * ks = b->k + (size_t) s * cap * row, * vs = b->v + (size_t) s * cap * row;
        fill_rows_kind(ks, (lens[s] + steps[s]) * Hkv, D, meta != OSCAR_META_F16);
        fill_rows_kind(vs, (lens[s] + steps[s]) * Hkv, D, meta != OSCAR_META_F16);
        struct oscar_tier_layout l;
        oscar_kv_extend_layout(0, lens[s], p.n_sink, p.n_recent, true, &l);
        b->quant_end[s] = l.quant_end;
        st = oscar_kv_cache_prefill(b->c, s, ks, vs, lens[s], true);
        for (int32_t t = 0; t < steps[s] && st == OSCAR_OK; t++)
            st = oscar_kv_cache_decode_append(b->c, s, ks + (size_t) (lens[s] + t) * row,
                                              vs + (size_t) (lens[s] + t) * row, NULL);
        if (st != OSCAR_OK) return st;
    }
    return OSCAR_OK;
}

static void free_built(struct built * b) {
    oscar_kv_cache_free(b->c);
    free(b->k), free(b->v), free(b->quant_end);
}

// ---- paged write -----------------------------------------------------------------------

static void test_write(const struct oscar_backend_i * gpu, int32_t n_seq, int32_t Hkv, int32_t D, int64_t len,
                       int32_t steps_n, enum oscar_quant_meta_dtype meta) {
    int32_t ps = 8;
    size_t cb = (size_t) D / 4, mb = 2 * oscar_meta_dtype_size(meta);   // codes, (scale, zero) of one group per row
    int64_t lens[64];
    int32_t steps[64];
    for (int32_t s = 0; s < n_seq; s++) lens[s] = len - s, steps[s] = steps_n + s;
    struct built b = { 0 };
    enum oscar_status st = build_cache(&b, n_seq, Hkv, D, ps, meta, lens, steps);
    struct oscar_kv_cache * c = b.c;
    int64_t qrows = c->p.n_int2_pages * ps * Hkv;
    uint8_t * save[4] = { malloc((size_t) qrows * cb), malloc((size_t) qrows * cb), malloc((size_t) qrows * mb),
                          malloc((size_t) qrows * mb) };
    uint8_t * back_c = malloc((size_t) qrows * cb), * back_m = malloc((size_t) qrows * mb);
    uint16_t * x = malloc((size_t) b.cap * n_seq * Hkv * D * 2);
    int64_t * rows = malloc((size_t) b.cap * n_seq * Hkv * sizeof(int64_t));
    struct oscar_backend_kv * kv = NULL;
    if (st == OSCAR_OK) {
        // Poison the pools the device starts from, so only kernel writes can match.
        uint8_t * pools[4] = { c->q_k, c->q_v, c->q_k_meta, c->q_v_meta };
        size_t sz[4] = { (size_t) qrows * cb, (size_t) qrows * cb, (size_t) qrows * mb, (size_t) qrows * mb };
        for (int i = 0; i < 4; i++) memcpy(save[i], pools[i], sz[i]), memset(pools[i], 0xAB, sz[i]);
        st = gpu->kv_upload(c, &kv);
        for (int i = 0; i < 4; i++) memcpy(pools[i], save[i], sz[i]);
    }
    for (int which = 0; which < 2 && st == OSCAR_OK; which++) {
        for (int phase = 0; phase < 2 && st == OSCAR_OK; phase++) {
            // phase 0: prefill-written rows (sort clip); phase 1: demoted rows (flush clip).
            struct oscar_int2_params p = which ? c->p.v_quant : c->p.k_quant;
            if (phase) p.clip_algo = c->p.demote_clip_algo;
            int64_t n = 0;
            for (int32_t s = 0; s < n_seq; s++) {
                const struct oscar_kv_seq * q = &c->seqs[s];
                const float * src = (which ? b.v : b.k) + (size_t) s * b.cap * Hkv * D;
                for (int64_t pos = q->n_sink; pos < q->n_sink + q->n_int2; pos++) {
                    if ((pos < b.quant_end[s]) != (phase == 0)) continue;
                    int64_t slot = oscar_kv_cache_slot(c, s, pos, NULL);
                    for (int32_t h = 0; h < Hkv; h++, n++) {
                        rows[n] = slot * Hkv + h;
                        for (int32_t d = 0; d < D; d++) x[n * D + d] = oscar_f32_to_bf16(src[(pos * Hkv + h) * D + d]);
                    }
                }
            }
            if (n) st = gpu->kv_write_int2(kv, which, &p, x, rows, n);
        }
        if (st == OSCAR_OK) st = gpu->kv_read_int2(kv, which, back_c, back_m);
        if (st != OSCAR_OK) break;
        int64_t dc = 0, dm = 0, used = 0;
        for (int32_t s = 0; s < n_seq; s++) {
            const struct oscar_kv_seq * q = &c->seqs[s];
            for (int64_t pos = q->n_sink; pos < q->n_sink + q->n_int2; pos++) {
                int64_t r0 = oscar_kv_cache_slot(c, s, pos, NULL) * Hkv;
                used += Hkv;
                dc += memcmp(back_c + r0 * cb, (which ? c->q_v : c->q_k) + r0 * cb, (size_t) Hkv * cb) != 0;
                dm += memcmp(back_m + r0 * mb, (uint8_t *) (which ? c->q_v_meta : c->q_k_meta) + r0 * mb,
                             (size_t) Hkv * mb) != 0;
            }
        }
        int ok = dc == 0 && dm == 0 && used > 0;
        g_fail |= !ok;
        printf("%s INT2_PAGED_WRITE(%s,seqs=%d,Hkv=%d,D=%d,len=%lld,steps=%d,meta=%s,rows=%lld,prefill=sort,"
               "demote=flush): tokens with differing codes %lld, meta %lld\n", ok ? "ok  " : "FAIL", which ? "V" : "K",
               n_seq, Hkv, D, (long long) len, steps_n, meta_name(meta), (long long) used, (long long) dc,
               (long long) dm);
    }
    if (st != OSCAR_OK) {
        g_fail = 1;
        printf("FAIL INT2_PAGED_WRITE: %s\n", oscar_last_error());
    }
    if (kv) gpu->kv_free(kv);
    for (int i = 0; i < 4; i++) free(save[i]);
    free(back_c), free(back_m), free(x), free(rows);
    free_built(&b);
}

// ---- decode attention ----------------------------------------------------------------------

static void test_attn_case(const struct oscar_backend_i * cpu, const struct oscar_backend_i * gpu, int32_t B,
                           int64_t L, int32_t Hkv, int32_t g, int32_t D, int32_t ps, enum oscar_quant_meta_dtype meta,
                           int use_rv) {
    int32_t Hq = Hkv * g;
    int64_t lens[64];
    int32_t steps[64];
    for (int32_t s = 0; s < B; s++) {
        lens[s] = s == 0 ? L : 1 + (int64_t) (rnd_unif() * (double) L);
        steps[s] = L > 1 ? rnd_int(0, 20) : 0;
    }
    clock_t t0 = clock();
    struct built b = { 0 };
    enum oscar_status st = build_cache(&b, B, Hkv, D, ps, meta, lens, steps);
    float * q = malloc((size_t) B * Hq * D * sizeof(float)), * R = malloc((size_t) D * D * sizeof(float));
    float * o0 = malloc((size_t) B * Hq * D * sizeof(float)), * o1 = malloc((size_t) B * Hq * D * sizeof(float));
    for (int64_t i = 0; i < (int64_t) B * Hq * D; i++) q[i] = rnd_normal() * 1.5f, o1[i] = NAN;
    orth_matrix(R, D);
    struct oscar_backend_kv * k0 = NULL, * k1 = NULL;
    if (st == OSCAR_OK) st = cpu->kv_upload(b.c, &k0);
    if (st == OSCAR_OK) st = gpu->kv_upload(b.c, &k1);
    if (st == OSCAR_OK) st = cpu->decode_attention(k0, B, q, Hq, use_rv ? R : NULL, o0);
    if (st == OSCAR_OK) st = gpu->decode_attention(k1, B, q, Hq, use_rv ? R : NULL, o1);
    double num = 0, den = 0;
    int64_t n_int2 = 0;
    for (int32_t s = 0; s < B; s++) n_int2 += b.c->seqs[s].n_int2;
    for (int64_t i = 0; i < (int64_t) B * Hq * D; i++) {
        double d = (double) o1[i] - (double) o0[i];
        num += d * d, den += (double) o0[i] * (double) o0[i];
        if (isnan(o1[i])) num = INFINITY;
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    int ok = st == OSCAR_OK && rel <= 1e-3;
    g_fail |= !ok;
    printf("%s DECODE_ATTN(B=%d,L=%lld,Hq=%d,Hkv=%d,D=%d,page=%d,meta=%s,rv=%s,int2_tokens=%lld): rel err %.3e "
           "(bound 1e-3; pure-bf16 estimate ~%.0e) [%.1fs cpu]%s%s\n", ok ? "ok  " : "FAIL", B, (long long) L, Hq, Hkv,
           D, ps, meta_name(meta), use_rv ? "R_V^T" : "folded", (long long) n_int2, rel, 4e-3,
           (double) (clock() - t0) / CLOCKS_PER_SEC, st != OSCAR_OK ? " error: " : "",
           st != OSCAR_OK ? oscar_last_error() : "");
    if (k0) cpu->kv_free(k0);
    if (k1) gpu->kv_free(k1);
    free(q), free(R), free(o0), free(o1);
    free_built(&b);
}

// The decode kernel does not emulate bf16_dequant (issue 16): a cache asking for it is refused, not approximated.
static void test_bf16_dequant_refused(const struct oscar_backend_i * gpu) {
    int64_t lens[1] = { 300 };
    int32_t steps[1] = { 0 };
    struct built b = { 0 };
    enum oscar_status st = build_cache(&b, 1, 2, 128, 8, OSCAR_META_F32, lens, steps);
    struct oscar_backend_kv * kv = NULL;
    if (st == OSCAR_OK) {
        b.c->p.v_quant.bf16_dequant = true;
        st = gpu->kv_upload(b.c, &kv);
    }
    int ok = st == OSCAR_ERR_UNSUPPORTED && kv == NULL && strstr(oscar_last_error(), "bf16_dequant") != NULL;
    g_fail |= !ok;
    printf("%s DECODE_ATTN bf16_dequant refused: %s\n", ok ? "ok  " : "FAIL", oscar_last_error());
    if (kv) gpu->kv_free(kv);
    free_built(&b);
}

static void test_attn(const struct oscar_backend_i * cpu, const struct oscar_backend_i * gpu, int small) {
    if (small) {   // the memcheck run: each head dim, chunked GQA groups at D 128 and 256
        test_attn_case(cpu, gpu, 2, 700, 2, 4, 128, 8, OSCAR_META_F32, 1);
        test_attn_case(cpu, gpu, 1, 600, 1, 3, 64, 8, OSCAR_META_BF16, 1);
        test_attn_case(cpu, gpu, 1, 600, 2, 16, 256, 8, OSCAR_META_F16, 0);
        return;
    }
    // Fixed corners of the grid: lengths 1..131072, batch 1..64, GQA 1..8.
    test_attn_case(cpu, gpu, 1, 1, 1, 1, 128, 8, OSCAR_META_F32, 1);
    test_attn_case(cpu, gpu, 1, 65, 2, 8, 128, 8, OSCAR_META_F32, 0);
    test_attn_case(cpu, gpu, 3, 330, 4, 2, 128, 16, OSCAR_META_BF16, 1);
    test_attn_case(cpu, gpu, 64, 400, 2, 4, 128, 8, OSCAR_META_F32, 1);
    test_attn_case(cpu, gpu, 8, 4096, 8, 4, 128, 8, OSCAR_META_BF16, 1);
    test_attn_case(cpu, gpu, 2, 32768, 2, 4, 128, 8, OSCAR_META_F16, 1);
    test_attn_case(cpu, gpu, 1, 131072, 1, 8, 128, 8, OSCAR_META_F32, 1);
    // Head dims x GQA groups: every D with groups 1, 3, 4, 8, 16 (one head chunk per CTA up
    // to 16 / 8 / 4 INT2 heads and 8 BF16 heads, more chunks above), lengths past one split.
    const int32_t Ds[3] = { 64, 128, 256 }, gs[5] = { 1, 3, 4, 8, 16 };
    for (int di = 0; di < 3; di++)
        for (int gi = 0; gi < 5; gi++)
            test_attn_case(cpu, gpu, 1 + (gi & 1), 1500 + 300 * gi, 2, gs[gi], Ds[di], (gi & 1) ? 16 : 8,
                           (enum oscar_quant_meta_dtype) ((di + gi) % 3), gi != 2);
    // Chunks of unequal size and the 3-tile INT2 instance: D 64 g 12, D 256 g 6, D 128 g 12.
    test_attn_case(cpu, gpu, 2, 900, 1, 12, 64, 8, OSCAR_META_F16, 1);
    test_attn_case(cpu, gpu, 2, 900, 2, 6, 256, 8, OSCAR_META_BF16, 1);
    test_attn_case(cpu, gpu, 2, 900, 2, 12, 128, 8, OSCAR_META_F32, 1);
    // Random draws, work-bounded (B * L * Hkv * D <= 2^26).
    for (int i = 0; i < 8; i++) {
        int32_t g = rnd_int(1, 16), Hkv = 1 << rnd_int(0, 3), B = rnd_int(1, 64), D = 64 << rnd_int(0, 2);
        int64_t L = (int64_t) exp(rnd_unif() * log(131072.0)), cap = ((int64_t) 1 << 26) / D;
        if (L < 1) L = 1;
        while ((int64_t) B * L * Hkv > cap && B > 1) B /= 2;
        while ((int64_t) B * L * Hkv > cap && Hkv > 1) Hkv /= 2;
        while ((int64_t) B * L * Hkv > cap) L /= 2;
        test_attn_case(cpu, gpu, B, L, Hkv, g, D, rnd_int(0, 1) ? 8 : 16, (enum oscar_quant_meta_dtype) rnd_int(0, 2),
                       rnd_int(0, 1));
    }
}

int main(int argc, char ** argv) {
    uint64_t seed = (uint64_t) time(NULL) ^ ((uint64_t) clock() << 20);
    const char * only = NULL;
    int small = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "-o") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--small")) small = 1;
        else {
            fprintf(stderr, "usage: %s [--seed N] [-o quant|write|attn] [--small]\n", argv[0]);
            return 2;
        }
    }
    rng_state = seed ? seed : 1;
    printf("test-kernels: seed %llu (rerun with --seed %llu)\n", (unsigned long long) seed, (unsigned long long) seed);
    const struct oscar_backend_i * cpu, * gpu;
    oscar_backend_get("cpu", &cpu);
    // OSCAR_TEST_SELF=1 compares the CPU backend with itself (checks the harness on machines without a GPU).
    if (getenv("OSCAR_TEST_SELF")) gpu = cpu;
    else if (oscar_backend_get("cuda", &gpu) != OSCAR_OK) {
        printf("skip: %s\n", oscar_last_error());
        return 77;
    }
    if (!only || !strcmp(only, "quant")) {
        test_quant(cpu, gpu, small ? 256 : 8192, 128);
        test_quant(cpu, gpu, small ? 128 : 2048, 64);
        test_quant(cpu, gpu, small ? 128 : 2048, 256);
    }
    if ((!only || !strcmp(only, "write")) && gpu->kv_write_int2) {
        for (int m = OSCAR_META_F32; m <= OSCAR_META_BF16; m++) {
            test_write(gpu, small ? 1 : 3, small ? 2 : 4, 128, small ? 500 : 3000, 17, (enum oscar_quant_meta_dtype) m);
            test_write(gpu, small ? 1 : 2, small ? 2 : 3, 64, small ? 400 : 1500, 17, (enum oscar_quant_meta_dtype) m);
            test_write(gpu, small ? 1 : 2, small ? 2 : 3, 256, small ? 400 : 1500, 17, (enum oscar_quant_meta_dtype) m);
        }
    }
    if (!only || !strcmp(only, "attn")) test_bf16_dequant_refused(gpu), test_attn(cpu, gpu, small);
    printf("test-kernels: %s (seed %llu)\n", g_fail ? "FAILED" : "all passed", (unsigned long long) seed);
    return g_fail ? 1 : 0;
}
