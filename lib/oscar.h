// oscar.h - the public API of liboscar, in one header.
//
// oscar calibrates, verifies and shares OSCAR rotations for 2-bit KV caches.
// Every fallible call returns enum oscar_status (0 = OSCAR_OK) and records a
// message for oscar_last_error(); nothing in the library exits or aborts on
// bad input.
//
// Dimension vocabulary used across the library and its comments:
//   T = n_tokens, L = n_layer, Hq = n_head, Hkv = n_head_kv,
//   D = head_dim, g = Hq / Hkv (query heads per KV head), C = n_embd.
// Arrays are row-major; "[T, Hkv, D]" means D varies fastest.
#ifndef OSCAR_H
#define OSCAR_H

#include "util/error.h"
#include "util/log.h"

#define OSCAR_VERSION "0.1.0"

#endif
