// test-xorshift.h - the xorshift64 generator of the quantizer and attention
// tests: urand() uniform in [0, 1), nrand() standard normal (Box-Muller).
// Set rng_state (non-zero) before drawing; the tests print their seeds.
#ifndef OSCAR_TEST_XORSHIFT_H
#define OSCAR_TEST_XORSHIFT_H

#include <math.h>
#include <stdint.h>

static uint64_t rng_state;

static inline double urand(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double) (rng_state >> 11) / 9007199254740992.0;
}

static inline float nrand(void) {
    return (float) (sqrt(-2.0 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()));
}

#endif
