// stats-oracle-check.c - compares lib/stats + lib/rotation/fit with the
// numpy oracle's containers (tests/oracle/stats_oracle.py).
//
//   stats-oracle-check [--threads N] FILE.bin...
// Exit 0 when every check passes, 1 otherwise.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../oracle/stats-oracle.h"

int main(int argc, char ** argv) {
    int threads = 0, bad = 0, files = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            threads = atoi(argv[++i]);
            continue;
        }
        struct so_result r;
        const int f = so_check_file(argv[i], threads, &r);
        files++;
        printf("%s: %d checks, %d failed; worst rel matrix %.2e, rel eigenvalue %.2e, eigenvector %.2e, "
               "composition %.2e\n", argv[i], r.n_checks, f < 0 ? 1 : f, r.worst_mat, r.worst_eig, r.worst_u,
               r.worst_comp);
        bad += f != 0;
    }
    if (files == 0) {
        fprintf(stderr, "usage: stats-oracle-check [--threads N] FILE.bin...\n");
        return 2;
    }
    return bad ? 1 : 0;
}
