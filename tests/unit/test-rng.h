// test-rng.h - a small seeded generator for unit tests (64-bit LCG, Knuth's
// constants): urand() uniform in [0, 1), nrand() standard normal (Box-Muller),
// rnd(n, s) a malloc'ed float array of N(0, s²) values. Define SEED first; the
// tests print it so a failure can be replayed.
#ifndef OSCAR_TEST_RNG_H
#define OSCAR_TEST_RNG_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static uint64_t rng = SEED;

static double urand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double) (rng >> 11) / 9007199254740992.0;
}

static inline double nrand(void) { return sqrt(-2 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()); }

static inline float * rnd(size_t n, double s) {
    float * x = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = (float) (s * nrand());
    return x;
}

#endif
