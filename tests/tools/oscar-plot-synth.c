// oscar-plot-synth - writes layers.svg for the synthetic report of
// synthetic-report.h (no model needed): for tests/integration/test-plot-svg.sh
// and for looking at the plot while changing lib/verify/plot.c.
//
//   oscar-plot-synth [--methods N] [--layers N] OUT.svg     [3 methods, 5 layers]
//
// Exit codes: 0 ok, 1 failure, 2 usage.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oscar.h"
#include "tests/tools/synthetic-report.h"
#include "verify/plot.h"

static int usage(void) {
    fprintf(stderr, "usage: oscar-plot-synth [--methods 1..%d] [--layers 1..4096] OUT.svg\n", OSCAR_VERIFY_MAX_METHODS);
    return 2;
}

// A whole decimal number in [lo, hi], else -1.
static long number(const char * s, long lo, long hi) {
    char * end;
    long v = strtol(s, &end, 10);
    return (*s && !*end && v >= lo && v <= hi) ? v : -1;
}

int main(int argc, char ** argv) {
    long n_methods = 3, n_layer = 5;
    const char * out = NULL;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--methods") && a + 1 < argc) {
            if ((n_methods = number(argv[++a], 1, OSCAR_VERIFY_MAX_METHODS)) < 0) return usage();
        } else if (!strcmp(argv[a], "--layers") && a + 1 < argc) {
            if ((n_layer = number(argv[++a], 1, 4096)) < 0) return usage();
        } else if (argv[a][0] != '-' && !out) {
            out = argv[a];
        } else {
            return usage();
        }
    }
    if (!out) return usage();
    struct synth_report s;
    if (synth_report_init(&s, (int32_t) n_methods, (int32_t) n_layer) != 0) {
        fprintf(stderr, "oscar-plot-synth: out of memory\n");
        synth_report_free(&s);
        return 1;
    }
    enum oscar_status st = oscar_verify_write_svg(&s.r, out);
    synth_report_free(&s);
    if (st != OSCAR_OK) {
        fprintf(stderr, "oscar-plot-synth: %s\n", oscar_last_error());
        return 1;
    }
    return 0;
}
