// rows.c - causal attention of a block of query rows of one head, blocked for
// speed, with arithmetic that does not depend on the blocking: row r's output
// is the same bits whether it is computed alone or with 63 other rows (the
// one-pass verify simulation and its token-by-token oracle rely on that).
//
//   scores   S[r][p] = (sum_d q_r[d]·k_p[d], d in order) · D^-1/2: keys are
//            transposed BK at a time so the sum vectorizes across keys, never
//            across d;
//   softmax  m_r = max_p S[r][p]; w = expf(S - m_r); z_r = sum_p w in double;
//   values   acc_r[d] = sum_p w·v_p[d], p in order; out = acc_r · (1 / z_r).
//
// Built with -std=c11 (no floating-point contraction), so the vector and the
// scalar code paths round every product and sum alike.
//
// A sliding window (kv->window > 0) only narrows each row's key range to
// [first_r, t_r], first_r = max(0, t_r - window + 1): every sum above runs over
// that range in the same order, and with window 0 (first_r = 0) the code does
// exactly the operations it did before windows existed.
#include "attention/attention.h"

#include <math.h>
#include <string.h>

enum { BK = 32 };   // keys per transposed tile

// The helpers must be inlined into each target clone of oscar_attn_rows (a
// call would run the baseline-ISA copy).
#if defined(__GNUC__)
#define ROWS_INLINE static inline __attribute__((always_inline))
#else
#define ROWS_INLINE static inline
#endif

// Layout: z [n_rows] doubles first (so an 8-byte aligned scratch keeps them
// aligned; the size is even, so per-thread slices stay aligned too), then the
// scores [n_rows][tiles·BK], two transposed key tiles and acc [n_rows][D].
size_t oscar_attn_rows_scratch(int32_t n_rows, int64_t n_keys, int32_t head_dim) {
    size_t tiles = (size_t) ((n_keys + BK - 1) / BK) * BK;
    return 2 * (size_t) n_rows + (size_t) n_rows * tiles + 2 * (size_t) BK * (size_t) head_dim +
           (size_t) n_rows * (size_t) head_dim + ((size_t) head_dim & 1);
}

size_t oscar_attn_keys_transposed_size(int64_t n_keys, int32_t head_dim) {
    return (size_t) ((n_keys + BK - 1) / BK) * BK * (size_t) head_dim;
}

// kt [D][BK] = rows [p0, p0 + n) of k, transposed; columns past n are zero.
ROWS_INLINE void transpose_tile(const float * k, size_t rs, int64_t p0, int32_t n, int32_t D, float * kt) {
    memset(kt, 0, sizeof(float) * (size_t) BK * (size_t) D);
    for (int32_t j = 0; j < n; j++) {
        const float * kp = k + (size_t) (p0 + j) * rs;
        for (int32_t d = 0; d < D; d++) kt[(size_t) d * BK + j] = kp[d];
    }
}

// Eight lanes in registers (GCC/clang vector extension; SSE or AVX code per
// clone, the same elementwise IEEE products and sums either way).
typedef float v8f __attribute__((vector_size(32)));
enum { LANES = 8, BKV = BK / LANES };

// Unaligned loads and stores (scratch and K/V rows have no 32-byte alignment);
// vectors go through pointers, never by value across a call boundary.
#define LOAD8(v, p) memcpy(&(v), (p), sizeof(v8f))
#define STORE8(p, v) memcpy((p), &(v), sizeof(v8f))

// s0/s1 [BK] = (q0/q1 · kt) · scale for two query rows sharing the key loads;
// each element is the same d-ordered sum as for one row (q1 may equal q0).
ROWS_INLINE void score_pair(const float * q0, const float * q1, const float * kt, int32_t D, float scale,
                            float * s0, float * s1) {
    v8f a0[BKV] = {{0}}, a1[BKV] = {{0}};
    for (int32_t d = 0; d < D; d++) {
        const v8f     x0 = (v8f){0} + q0[d], x1 = (v8f){0} + q1[d];
        const float * row = kt + (size_t) d * BK;
#pragma GCC unroll 4
        for (int32_t c = 0; c < BKV; c++) {
            v8f k;
            LOAD8(k, row + c * LANES);
            a0[c] += x0 * k;
            a1[c] += x1 * k;
        }
    }
    for (int32_t c = 0; c < BKV; c++) {
        const v8f r0 = a0[c] * scale, r1 = a1[c] * scale;
        STORE8(s0 + c * LANES, r0);
        STORE8(s1 + c * LANES, r1);
    }
}

// acc [D] += sum over keys p in [0, n) of w[p] · v[p·rs + d], p in order: 64 dims
// at a time in registers, the dims past the last full vector one by one.
ROWS_INLINE void weighted_sum(const float * w, const float * v, size_t rs, int64_t n, int32_t D, float * acc) {
    enum { CH = 8 };   // vectors per chunk: 64 dims
    int32_t d0 = 0;
    for (; d0 + CH * LANES <= D; d0 += CH * LANES) {
        v8f a[CH];
        for (int32_t c = 0; c < CH; c++) LOAD8(a[c], acc + d0 + c * LANES);
        for (int64_t p = 0; p < n; p++) {
            const v8f     wp = (v8f){0} + w[p];
            const float * vp = v + (size_t) p * rs + d0;
#pragma GCC unroll 8
            for (int32_t c = 0; c < CH; c++) {
                v8f x;
                LOAD8(x, vp + c * LANES);
                a[c] += wp * x;
            }
        }
        for (int32_t c = 0; c < CH; c++) STORE8(acc + d0 + c * LANES, a[c]);
    }
    for (; d0 < D; d0++) {
        float a = acc[d0];
        for (int64_t p = 0; p < n; p++) a += w[p] * v[(size_t) p * rs + d0];
        acc[d0] = a;
    }
}

ROWS_INLINE int64_t clamp64(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }

// The first key a row at t sees: t - window + 1 with a sliding window, else 0.
ROWS_INLINE int64_t first_of(const struct oscar_attn_keys * kv, int64_t t) {
    return kv->window > 0 && t - kv->window + 1 > 0 ? t - kv->window + 1 : 0;
}

// Which keys row r reads among [p0, p0 + nk): *ex some exact ones, *al some alternative ones
// ([lo, hi) when lo is given), within its window. Scores a row does not read are not computed.
ROWS_INLINE void tile_reads(const struct oscar_attn_keys * kv, const int64_t * t, const int64_t * lo,
                            const int64_t * hi, int32_t r, int64_t p0, int32_t nk, bool * ex, bool * al) {
    const int64_t f = first_of(kv, t[r]), b = p0 > f ? p0 : f;   // the row's keys in the tile: [b, e)
    const int64_t e = p0 + nk < t[r] + 1 ? p0 + nk : t[r] + 1;
    *al = e > b && lo && lo[r] < hi[r] && lo[r] < e && hi[r] > b;
    *ex = e > b && (!*al || lo[r] > b || hi[r] < e);
}

void oscar_attn_keys_transpose(const float * k, size_t row_stride, int64_t n_keys, int32_t head_dim, float * out) {
    for (int64_t p0 = 0; p0 < n_keys; p0 += BK) {
        const int32_t nk = (int32_t) (n_keys - p0 < BK ? n_keys - p0 : BK);
        transpose_tile(k, row_stride, p0, nk, head_dim, out + (size_t) (p0 / BK) * BK * (size_t) head_dim);
    }
}

// The helpers above are inlined into each clone of this function.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v3", "default"))) // AVX2 where the CPU has it
#endif
void oscar_attn_rows(const struct oscar_attn_keys * kv, int32_t n, const float * q, size_t q_stride,
                     const int64_t * t, const int64_t * lo, const int64_t * hi, float * out, size_t out_stride,
                     float * scratch) {
    const int32_t D = kv->head_dim;
    const size_t  rs = kv->row_stride;
    const float   scale = kv->scale > 0.0f ? kv->scale : (float) (1.0 / sqrt((double) D));
    int64_t       t_max = -1, first_min = INT64_MAX;
    for (int32_t r = 0; r < n; r++) {
        t_max = t[r] > t_max ? t[r] : t_max;
        first_min = first_of(kv, t[r]) < first_min ? first_of(kv, t[r]) : first_min;
    }
    const int64_t p_begin = n > 0 ? first_min / BK * BK : 0;   // first key tile any row sees
    const size_t ld = (size_t) ((t_max + 1 + BK - 1) / BK) * BK;   // score row length
    double *     z = (double *) (void *) scratch;
    float *      S = scratch + 2 * (size_t) n, * kt = S + (size_t) n * ld, * kt_alt = kt + (size_t) BK * D;
    float *      acc = kt_alt + (size_t) BK * D;

    // scores, one tile of keys at a time, two query rows at a time
    float s[2][BK], s_alt[2][BK];
    for (int64_t p0 = p_begin; p0 <= t_max; p0 += BK) {
        const int32_t nk = (int32_t) (t_max + 1 - p0 < BK ? t_max + 1 - p0 : BK);
        bool need_ex = false, need_alt = false;
        for (int32_t r = 0; r < n; r++) {
            bool ex, al;
            tile_reads(kv, t, lo, hi, r, p0, nk, &ex, &al);
            need_ex |= ex, need_alt |= al;
        }
        // the caller's transposed keys when it has them (one copy for every block and query head)
        const size_t  tile = (size_t) (p0 / BK) * BK * (size_t) D;
        const float * kt_k = kv->kt ? kv->kt + tile : kt, * kt_a = kv->kt_alt ? kv->kt_alt + tile : kt_alt;
        if (need_ex && !kv->kt) transpose_tile(kv->k, rs, p0, nk, D, kt);
        if (need_alt && !kv->kt_alt) transpose_tile(kv->k_alt, rs, p0, nk, D, kt_alt);
        for (int32_t r = 0; r < n; r += 2) {
            const int32_t r1 = r + 1 < n ? r + 1 : r;
            bool ex0, al0, ex1, al1;   // each score is its own d-ordered sum: skipping unread ones changes no bits
            tile_reads(kv, t, lo, hi, r, p0, nk, &ex0, &al0);
            tile_reads(kv, t, lo, hi, r1, p0, nk, &ex1, &al1);
            if (!ex0 && !al0 && !ex1 && !al1) continue;
            const float * q0 = q + (size_t) r * q_stride, * q1 = q + (size_t) r1 * q_stride;
            if (ex0 || ex1) score_pair(q0, q1, kt_k, D, scale, s[0], s[1]);
            if (al0 || al1) score_pair(q0, q1, kt_a, D, scale, s_alt[0], s_alt[1]);
            for (int32_t e = 0; e < 2 && r + e < n; e++) {
                const int32_t ri = r + e;
                float *       Sr = S + (size_t) ri * ld + p0;
                const int64_t f = first_of(kv, t[ri]);
                for (int32_t j = f > p0 ? (int32_t) (f - p0) : 0; j < nk && p0 + j <= t[ri]; j++) {
                    bool alt = lo && p0 + j >= lo[ri] && p0 + j < hi[ri];
                    Sr[j] = alt ? s_alt[e][j] : s[e][j];
                }
            }
        }
    }
    // softmax weights in place
    for (int32_t r = 0; r < n; r++) {
        float * Sr = S + (size_t) r * ld;
        float   m = -INFINITY;
        const int64_t f = first_of(kv, t[r]);
        for (int64_t p = f; p <= t[r]; p++) m = Sr[p] > m ? Sr[p] : m;
        double sum = 0.0;   // a local, not z[r]: z lives in the scratch the stores to Sr may alias
        for (int64_t p = f; p <= t[r]; p++) {
            Sr[p] = expf(Sr[p] - m);
            sum += (double) Sr[p];
        }
        z[r] = sum;
    }
    // the weighted values in key order per row, a tile of V rows for every query row; a row's keys
    // are three runs: [first, lo) exact, [lo, hi) alternative, [hi, t] exact
    memset(acc, 0, sizeof(float) * (size_t) n * (size_t) D);
    for (int64_t p0 = p_begin; p0 <= t_max; p0 += BK) {
        for (int32_t r = 0; r < n; r++) {
            const int64_t p1 = p0 + BK - 1 < t[r] ? p0 + BK - 1 : t[r];   // last key of the tile, inclusive
            const int64_t f = first_of(kv, t[r]), s0 = f > p0 ? f : p0;   // first key of the tile the row sees
            if (p1 < s0) continue;
            const int64_t e = p1 + 1;
            const bool    has_alt = lo && lo[r] < hi[r];
            const int64_t a = clamp64(has_alt ? lo[r] : e, s0, e), b = clamp64(has_alt ? hi[r] : e, a, e);
            const float * Sr = S + (size_t) r * ld;
            float *       ar = acc + (size_t) r * D;
            if (a > s0) weighted_sum(Sr + s0, kv->v + (size_t) s0 * rs, rs, a - s0, D, ar);
            if (b > a) weighted_sum(Sr + a, kv->v_alt + (size_t) a * rs, rs, b - a, D, ar);
            if (e > b) weighted_sum(Sr + b, kv->v + (size_t) b * rs, rs, e - b, D, ar);
        }
    }
    for (int32_t r = 0; r < n; r++) {
        float *       o = out + (size_t) r * out_stride;
        const float * ar = acc + (size_t) r * D;
        float         inv = (float) (1.0 / z[r]);
        for (int32_t d = 0; d < D; d++) o[d] = ar[d] * inv;
    }
}
