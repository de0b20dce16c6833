// fuzz-stats-checkpoint.c - libFuzzer target for the stats checkpoint parser
// (oscar_stats_load). Any input must be rejected cleanly or, if accepted,
// re-serialise to exactly the same bytes.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stats/stats.h"

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    struct oscar_stats * s = NULL;
    if (oscar_stats_load(data, size, 1, 64, &s) != OSCAR_OK) return 0;
    const size_t n = oscar_stats_checkpoint_size(s);
    uint8_t * b = malloc(n);
    if (b && oscar_stats_save(s, b, n) == OSCAR_OK && (n != size || memcmp(b, data, n) != 0)) abort();
    free(b);
    oscar_stats_free(s);
    return 0;
}
