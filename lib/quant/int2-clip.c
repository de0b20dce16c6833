// int2-clip.c - per-row clip thresholds (method.md §9): the index rule, the
// exact order statistic used by the prefill kernels and the log2(D)-step
// bisection used by the decode-demotion (flush) kernel. One tau per row,
// over the whole head (across groups). Refuses nothing: callers validate D.
#include "quant/quant-internal.h"

#include <math.h>
#include <stdlib.h>

int32_t oscar_clip_index(double ratio, int32_t D) {
    if (!(ratio > 0.0)) return -1;
    double f = floor(ratio * (double) D);
    if (f < 0.0) f = 0.0;
    if (f > (double) (D - 1)) f = (double) (D - 1);
    return (int32_t) f;
}

static int cmp_float(const void * a, const void * b) {
    float x = *(const float *) a, y = *(const float *) b;
    return (x > y) - (x < y);
}

float oscar_clip_tau_sort(const float * x, int32_t D, int32_t idx, float * scratch) {
    for (int32_t i = 0; i < D; i++) scratch[i] = fabsf(x[i]);
    qsort(scratch, (size_t) D, sizeof(float), cmp_float);
    return scratch[idx];
}

float oscar_clip_tau_bisect(const float * x, int32_t D, int32_t idx) {
    float hi = 0.0f, lo = 0.0f;
    for (int32_t i = 0; i < D; i++) hi = fmaxf(hi, fabsf(x[i]));
    int32_t target = D - idx;
    int32_t iters  = 0;
    for (int32_t n = D; n > 1; n >>= 1) iters++;   // log2(D)
    for (int32_t it = 0; it < iters; it++) {
        float   mid   = (lo + hi) * 0.5f;
        int32_t count = 0;
        for (int32_t i = 0; i < D; i++) count += fabsf(x[i]) > mid;
        if (count > target) lo = mid;
        else hi = mid;
    }
    return hi;
}

float oscar_clip_tau(const struct oscar_int2_params * p, const float * x, float * scratch) {
    int32_t D   = p->head_dim;
    int32_t idx = oscar_clip_index(p->clip_ratio, D);
    if (idx < 0) return INFINITY;
    bool bisect = p->clip_algo == OSCAR_CLIP_BISECT || (p->clip_algo == OSCAR_CLIP_FLUSH && D >= 64);
    return bisect ? oscar_clip_tau_bisect(x, D, idx) : oscar_clip_tau_sort(x, D, idx, scratch);
}
