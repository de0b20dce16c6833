// hadamard-rotations.h - orthogonal D x D test matrices for the GPU tests and benchmarks:
// a normalized Sylvester Hadamard with permuted, sign-flipped columns (xorshift64 from seed).
#ifndef OSCAR_TESTS_HADAMARD_ROTATIONS_H
#define OSCAR_TESTS_HADAMARD_ROTATIONS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static void hadamard_rotations(float * R, int64_t n, int32_t D, uint64_t seed) {
    int32_t * perm = malloc(sizeof(int32_t) * (size_t) D);
    uint64_t x = seed | 1;
    for (int64_t m = 0; m < n; m++) {
        for (int32_t i = 0; i < D; i++) perm[i] = i;
        for (int32_t i = D - 1; i > 0; i--) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int32_t j = (int32_t) (x % (uint64_t) (i + 1)), t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
        for (int32_t j = 0; j < D; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            const float sg = (x & 1) ? -1.0f : 1.0f;
            for (int32_t i = 0; i < D; i++)
                R[(m * D + i) * D + j] =
                    sg * ((__builtin_popcount((unsigned) (i & perm[j])) & 1) ? -1.0f : 1.0f) / sqrtf((float) D);
        }
    }
    free(perm);
}

#endif
