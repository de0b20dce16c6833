// hadamard.c - normalized Sylvester Hadamard matrices (built in fp64), the
// in-place fast Walsh-Hadamard transform and its block-diagonal form
// (method.md §4). Natural (Sylvester) order, never sequency order. Refuses
// sizes that are not powers of two.
#include "rotation/rotation.h"

#include <math.h>

bool oscar_is_pow2(int64_t n) {
    return n >= 1 && (n & (n - 1)) == 0;
}

int32_t oscar_log2i(int64_t n) {
    OSCAR_ASSERT(oscar_is_pow2(n));
    int32_t k = 0;
    while ((1LL << k) < n) k++;
    return k;
}

enum oscar_status oscar_hadamard_matrix(int32_t n, double * H) {
    if (!oscar_is_pow2(n)) return osc_error(OSCAR_ERR_INVALID, "hadamard: order %d is not a power of two", n);
    double s = 1.0 / sqrt((double) n);
    for (int32_t i = 0; i < n; i++) {
        for (int32_t j = 0; j < n; j++) H[(int64_t) i * n + j] = (__builtin_popcount((unsigned) (i & j)) & 1) ? -s : s;
    }
    return OSCAR_OK;
}

enum oscar_status oscar_hadamard_matrix_f32(int32_t n, float * H) {
    if (!oscar_is_pow2(n)) return osc_error(OSCAR_ERR_INVALID, "hadamard: order %d is not a power of two", n);
    float s = (float) (1.0 / sqrt((double) n));
    for (int32_t i = 0; i < n; i++) {
        for (int32_t j = 0; j < n; j++) H[(int64_t) i * n + j] = (__builtin_popcount((unsigned) (i & j)) & 1) ? -s : s;
    }
    return OSCAR_OK;
}

void oscar_fwht_f32(float * x, int32_t n) {
    OSCAR_ASSERT(oscar_is_pow2(n));
    for (int32_t h = 1; h < n; h <<= 1) {
        for (int32_t i = 0; i < n; i++) {
            if (i & h) continue;
            float lo = x[i], up = x[i + h];
            x[i]     = lo + up;
            x[i + h] = lo - up;
        }
    }
    float s = (float) (1.0 / sqrt((double) n));
    for (int32_t i = 0; i < n; i++) x[i] *= s;
}

void oscar_fwht_f64(double * x, int32_t n) {
    OSCAR_ASSERT(oscar_is_pow2(n));
    for (int32_t h = 1; h < n; h <<= 1) {
        for (int32_t i = 0; i < n; i++) {
            if (i & h) continue;
            double lo = x[i], up = x[i + h];
            x[i]      = lo + up;
            x[i + h]  = lo - up;
        }
    }
    double s = 1.0 / sqrt((double) n);
    for (int32_t i = 0; i < n; i++) x[i] *= s;
}

enum oscar_status oscar_fwht_block_rows(float * x, int64_t n_rows, int32_t D, int32_t b) {
    if (!oscar_is_pow2(b) || D % b != 0)
        return osc_error(OSCAR_ERR_INVALID, "fwht: block %d must be a power of two dividing %d", b, D);
    for (int64_t r = 0; r < n_rows; r++) {
        for (int32_t base = 0; base < D; base += b) oscar_fwht_f32(x + r * D + base, b);
    }
    return OSCAR_OK;
}

enum oscar_status oscar_block_hadamard_matrix(int32_t D, int32_t b, double * M) {
    if (!oscar_is_pow2(b) || D % b != 0)
        return osc_error(OSCAR_ERR_INVALID, "hadamard: block %d must be a power of two dividing %d", b, D);
    double s = 1.0 / sqrt((double) b);
    for (int32_t i = 0; i < D; i++) {
        for (int32_t j = 0; j < D; j++) {
            double v = 0.0;
            if (i / b == j / b) v = (__builtin_popcount((unsigned) ((i % b) & (j % b))) & 1) ? -s : s;
            M[(int64_t) i * D + j] = v;
        }
    }
    return OSCAR_OK;
}
