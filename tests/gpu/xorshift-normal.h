// xorshift-normal.h - the seeded N(0, 1) generator of the GPU-vs-CPU comparison
// tests (xorshift64 + Box-Muller). Set xn_state before use; both sides of a
// comparison must see the same draws, so every test draws in a fixed order.
#ifndef OSCAR_TESTS_XORSHIFT_NORMAL_H
#define OSCAR_TESTS_XORSHIFT_NORMAL_H

#include <math.h>
#include <stdint.h>

static uint64_t xn_state = 1;

static inline double xn_normal(void) {
    double u, v;
    xn_state ^= xn_state << 13, xn_state ^= xn_state >> 7, xn_state ^= xn_state << 17;
    u = ((double) (xn_state >> 11) + 1.0) / 9007199254740993.0;
    xn_state ^= xn_state << 13, xn_state ^= xn_state >> 7, xn_state ^= xn_state << 17;
    v = (double) (xn_state >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

#endif
