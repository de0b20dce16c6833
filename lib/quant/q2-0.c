// q2-0.c - GGML_TYPE_Q2_0, the KV-cache type of the OSCAR llama.cpp fork
// (FutureMLS-Lab/OSCAR, branch zhongzhu/llamacpp @ 4570ea609:
// ggml/src/ggml-quants.c quantize_row_q2_0_ref / dequantize_row_q2_0,
// ggml/src/ggml-common.h block_q2_0). Layout and contract in quant/quant.h.
//
// Every step is one fp32 IEEE operation in the fork's order (sequential sums,
// float division of the sum by the element count, no FMA: the fork's
// ggml-base is built for baseline x86-64), so the bytes match its x86 build.
#include "quant/quant-internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// The fork's "Lloyd-Max" levels for N(0, 1) and the decision thresholds.
static const float Q2_LEVELS[4] = {-0.9816f, -0.4528f, 0.4528f, 0.9816f};
#define Q2_T 0.6745f

void oscar_q2_0_constants(float levels[4], float * threshold) {
    memcpy(levels, Q2_LEVELS, sizeof Q2_LEVELS);
    *threshold = Q2_T;
}

size_t oscar_q2_0_row_bytes(int64_t k) {
    return (size_t) (k / OSCAR_Q2_0_BLOCK) * OSCAR_Q2_0_BLOCK_BYTES;
}

// Orthonormal Walsh-Hadamard as the fork computes it: butterflies (a+b, a-b)
// for h = 1, 2, 4, ..., then one multiply by 1/sqrtf(n). n a power of two.
static void q2_hadamard(float * x, int32_t n) {
    for (int32_t h = 1; h < n; h <<= 1)
        for (int32_t i = 0; i < n; i += h << 1)
            for (int32_t j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b, x[j + h] = a - b;
            }
    const float s = 1.0f / sqrtf((float) n);
    for (int32_t i = 0; i < n; i++) x[i] *= s;
}

static int cmp_abs_asc(const void * a, const void * b) {
    float x = *(const float *) a, y = *(const float *) b;
    return (x > y) - (x < y);
}

// Code of v against a block's 1/sigma: strict '<' ladder, so v/sigma exactly on
// a threshold takes the upper code (and 0 or -0 gives code 2).
static uint8_t q2_code(float v, float inv_sigma) {
    float vs = v * inv_sigma;
    if (vs < -Q2_T) return 0;
    if (vs < 0.0f) return 1;
    if (vs < Q2_T) return 2;
    return 3;
}

static void put_f16(uint8_t * p, float v) {
    uint16_t h = oscar_f32_to_f16(v);
    p[0] = (uint8_t) (h & 0xff), p[1] = (uint8_t) (h >> 8);
}

static float get_f16(const uint8_t * p) {
    return oscar_f16_to_f32((uint16_t) (p[0] | p[1] << 8));
}

// The fork's group: OSCAR_Q2_0_GROUP elements when the row has that many, else one block.
static int32_t q2_group(int64_t k) {
    return k >= OSCAR_Q2_0_GROUP ? OSCAR_Q2_0_GROUP : OSCAR_Q2_0_BLOCK;
}

static enum oscar_status q2_check(const struct oscar_q2_0_params * p, int64_t k) {
    if (k < OSCAR_Q2_0_BLOCK || k % OSCAR_Q2_0_BLOCK)
        return osc_error(OSCAR_ERR_INVALID, "q2_0: row length %lld is not a positive multiple of %d", (long long) k,
                         OSCAR_Q2_0_BLOCK);
    if (isnan(p->clip_ratio) || p->clip_ratio < 0.0f || p->clip_ratio > 1.0f)
        return osc_error(OSCAR_ERR_INVALID, "q2_0: clip ratio %g outside [0, 1]", (double) p->clip_ratio);
    // The fork's in-quant Hadamard on a short last group of 96 reads past the group.
    if (p->hadamard && k >= OSCAR_Q2_0_GROUP && k % OSCAR_Q2_0_GROUP == 96)
        return osc_error(OSCAR_ERR_INVALID, "q2_0: the in-quant Hadamard needs a power-of-two last group (row %lld)",
                         (long long) k);
    return OSCAR_OK;
}

// One group of n = nb*32 centred values (in place) -> nb blocks; returns the clipped count.
static int64_t q2_group_quant(const struct oscar_q2_0_params * p, float * t, int32_t n, float mean, uint8_t * out,
                              int64_t * n_degenerate) {
    int64_t n_clipped = 0;
    if (p->hadamard) q2_hadamard(t, n);
    const float cr = p->clip_ratio;
    if (cr > 0.0f && cr < 1.0f) {   // the fork clips only strictly inside (0, 1)
        float a[OSCAR_Q2_0_GROUP];
        for (int32_t j = 0; j < n; j++) a[j] = fabsf(t[j]);
        qsort(a, (size_t) n, sizeof(float), cmp_abs_asc);
        int32_t idx = (int32_t) (cr * (float) n);   // fp32 product, truncated
        if (idx >= n) idx = n - 1;
        const float thr = a[idx];
        for (int32_t j = 0; j < n; j++) {
            float c = t[j] > thr ? thr : t[j];
            c = c < -thr ? -thr : c;
            n_clipped += c != t[j];
            t[j] = c;
        }
    }
    for (int32_t b = 0; b < n / OSCAR_Q2_0_BLOCK; b++) {
        const float * x = t + b * OSCAR_Q2_0_BLOCK;
        uint8_t * blk = out + (size_t) b * OSCAR_Q2_0_BLOCK_BYTES;
        float ss = 0.0f;
        for (int32_t j = 0; j < OSCAR_Q2_0_BLOCK; j++) ss += x[j] * x[j];
        const float sigma = sqrtf(ss / (float) OSCAR_Q2_0_BLOCK);
        const float inv = sigma > 1e-8f ? 1.0f / sigma : 0.0f;
        *n_degenerate += !(sigma > 1e-8f);
        put_f16(blk, sigma);
        put_f16(blk + 2, b == 0 ? mean : 0.0f);   // the group mean lives in its first block only
        for (int32_t j = 0; j < OSCAR_Q2_0_BLOCK / 4; j++) {
            uint8_t q = 0;
            for (int32_t e = 0; e < 4; e++) q |= (uint8_t) (q2_code(x[4 * j + e], inv) << (2 * e));
            blk[4 + j] = q;
        }
    }
    return n_clipped;
}

enum oscar_status oscar_q2_0_quantize_row(const struct oscar_q2_0_params * p, const float * x, int64_t k,
                                          uint8_t * out, struct oscar_quant_stats * stats) {
    enum oscar_status st = q2_check(p, k);
    if (st == OSCAR_OK) st = oscar_quant_check_finite("q2_0 quantize", x, 1, (int32_t) k);
    if (st != OSCAR_OK) return st;
    const int32_t g = q2_group(k);
    int64_t n_clipped = 0, n_degenerate = 0;
    float t[OSCAR_Q2_0_GROUP];
    for (int64_t i0 = 0; i0 < k; i0 += g) {
        const int32_t n = (int32_t) (k - i0 < g ? k - i0 : g);   // a short last group when g does not divide k
        memcpy(t, x + i0, sizeof(float) * (size_t) n);
        float mean = 0.0f;
        for (int32_t j = 0; j < n; j++) mean += t[j];
        mean /= (float) n;
        for (int32_t j = 0; j < n; j++) t[j] -= mean;
        n_clipped += q2_group_quant(p, t, n, mean, out + (size_t) (i0 / OSCAR_Q2_0_BLOCK) * OSCAR_Q2_0_BLOCK_BYTES,
                                    &n_degenerate);
    }
    if (stats) stats->n_rows++, stats->n_clipped += n_clipped, stats->n_degenerate += n_degenerate > 0;
    return OSCAR_OK;
}

enum oscar_status oscar_q2_0_dequantize_row(const struct oscar_q2_0_params * p, const uint8_t * in, int64_t k,
                                            float * out) {
    enum oscar_status st = q2_check(p, k);
    if (st != OSCAR_OK) return st;
    const int32_t g = q2_group(k);
    float t[OSCAR_Q2_0_GROUP];
    for (int64_t i0 = 0; i0 < k; i0 += g) {
        const int32_t n = (int32_t) (k - i0 < g ? k - i0 : g);
        const uint8_t * blk0 = in + (size_t) (i0 / OSCAR_Q2_0_BLOCK) * OSCAR_Q2_0_BLOCK_BYTES;
        const float mean = get_f16(blk0 + 2);
        for (int32_t b = 0; b < n / OSCAR_Q2_0_BLOCK; b++) {
            const uint8_t * blk = blk0 + (size_t) b * OSCAR_Q2_0_BLOCK_BYTES;
            const float sigma = get_f16(blk);
            for (int32_t j = 0; j < OSCAR_Q2_0_BLOCK; j++)
                t[b * OSCAR_Q2_0_BLOCK + j] = Q2_LEVELS[(blk[4 + j / 4] >> (2 * (j % 4))) & 3] * sigma;
        }
        if (p->hadamard) q2_hadamard(t, n);   // self-inverse
        for (int32_t j = 0; j < n; j++) out[i0 + j] = t[j] + mean;
    }
    return OSCAR_OK;
}
