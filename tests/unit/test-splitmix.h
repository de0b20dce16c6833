// test-splitmix.h - the counter-based generator of the stats and fit tests
// (splitmix64: the state advances by the golden-ratio constant, the output is
// mixed). splitmix_unif draws uniformly in [-1, 1). Seeds are printed by the
// tests so a failure can be replayed.
#ifndef OSCAR_TEST_SPLITMIX_H
#define OSCAR_TEST_SPLITMIX_H

#include <stdint.h>

static inline uint64_t splitmix_next(uint64_t * s) {
    uint64_t x = (*s += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static inline double splitmix_unif(uint64_t * s) {
    return (double) (splitmix_next(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

#endif
