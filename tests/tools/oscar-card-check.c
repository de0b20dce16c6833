// oscar-card-check.c - the push-time model card check (oscar_hub_check_card,
// libyaml) on files, for integration tests.
//
//   oscar-card-check README.md...    exit 0 when every card passes; else the
//                                    first error on stderr and exit 1 (2: usage)
#include <stdio.h>
#include <stdlib.h>

#include "hub/hub.h"
#include "util/fs.h"

int main(int argc, char ** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: oscar-card-check README.md...\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        char * text = NULL;
        size_t n = 0;
        enum oscar_status st = osc_read_file(argv[i], (size_t) 1 << 24, &text, &n);
        if (st == OSCAR_OK) st = oscar_hub_check_card(text, n, argv[i]);
        free(text);
        if (st != OSCAR_OK) {
            fprintf(stderr, "oscar-card-check: %s\n", oscar_last_error());
            return 1;
        }
    }
    return 0;
}
