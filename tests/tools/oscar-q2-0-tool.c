// oscar-q2-0-tool.c - lib/quant's Q2_0 (the llama.cpp fork's KV type) against
// the numpy oracle tests/oracle/q2_0_oracle.py.
//
//   oscar-q2-0-tool check DIR   DIR/cases.txt lines "N HAD K RATIO NROWS"; per case
//                               quantizes caseN.in and requires the bytes of caseN.q2,
//                               dequantizes them and requires the floats of caseN.deq
//                               (bit for bit); exit 0 when every case matches.
//   oscar-q2-0-tool quant HAD K RATIO NROWS in.f32 out.q2 out.deq
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oscar.h"
#include "quant/quant.h"
#include "util/fs.h"
#include "tool-io.h"


// Quantizes and dequantizes n rows of k; q [n * row_bytes], y [n * k].
static enum oscar_status run(const struct oscar_q2_0_params * p, const float * x, long k, long n, uint8_t * q,
                             float * y) {
    size_t rb = oscar_q2_0_row_bytes(k);
    for (long r = 0; r < n; r++) {
        enum oscar_status st = oscar_q2_0_quantize_row(p, x + r * k, k, q + r * rb, NULL);
        if (st == OSCAR_OK) st = oscar_q2_0_dequantize_row(p, q + r * rb, k, y + r * k);
        if (st != OSCAR_OK) return st;
    }
    return OSCAR_OK;
}

static int check_case(const char * dir, int id, int had, long k, const char * ratio, long n) {
    char path[4096];
    struct oscar_q2_0_params p = {.hadamard = had != 0, .clip_ratio = (float) atof(ratio)};
    size_t nq = (size_t) n * oscar_q2_0_row_bytes(k), nx = (size_t) n * (size_t) k * sizeof(float);
    snprintf(path, sizeof path, "%s/case%d.in", dir, id);
    float * x = read_all(path, nx);
    snprintf(path, sizeof path, "%s/case%d.q2", dir, id);
    uint8_t * eq = read_all(path, nq);
    snprintf(path, sizeof path, "%s/case%d.deq", dir, id);
    float * ey = read_all(path, nx);
    uint8_t * q = malloc(nq ? nq : 1);
    float * y = malloc(nx ? nx : 1);
    int bad = 1;
    if (!x || !eq || !ey || !q || !y) {
        fprintf(stderr, "case %d: missing or wrongly sized files\n", id);
    } else if (run(&p, x, k, n, q, y) != OSCAR_OK) {
        fprintf(stderr, "case %d: %s\n", id, oscar_last_error());
    } else if (memcmp(q, eq, nq)) {
        size_t i = 0;
        while (q[i] == eq[i]) i++;
        fprintf(stderr, "case %d (had %d k %ld ratio %s): first byte diff at %zu (row %zu): %02x != %02x\n", id, had,
                k, ratio, i, i / oscar_q2_0_row_bytes(k), q[i], eq[i]);
    } else if (memcmp(y, ey, nx)) {
        size_t i = 0;
        while (!memcmp(&y[i], &ey[i], sizeof(float))) i++;
        fprintf(stderr, "case %d (had %d k %ld ratio %s): dequant diff at %zu: %.9g != %.9g\n", id, had, k, ratio, i,
                (double) y[i], (double) ey[i]);
    } else {
        bad = 0;
    }
    free(x), free(eq), free(ey), free(q), free(y);
    return bad;
}

static int check_dir(const char * dir) {
    char path[4096], ratio[32];
    snprintf(path, sizeof path, "%s/cases.txt", dir);
    FILE * f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return 1;
    }
    int id, had, total = 0, bad = 0;
    long k, n;
    while (fscanf(f, "%d %d %ld %31s %ld", &id, &had, &k, ratio, &n) == 5) {
        total++;
        bad += check_case(dir, id, had, k, ratio, n);
    }
    fclose(f);
    printf("%d q2_0 cases, %d mismatches\n", total, bad);
    return bad || total == 0;
}

int main(int argc, char ** argv) {
    if (argc == 3 && !strcmp(argv[1], "check")) return check_dir(argv[2]);
    if (argc != 9 || strcmp(argv[1], "quant")) {
        fprintf(stderr, "usage: %s check DIR\n       %s quant HAD K RATIO NROWS in.f32 out.q2 out.deq\n", argv[0],
                argv[0]);
        return 2;
    }
    struct oscar_q2_0_params p = {.hadamard = atoi(argv[2]) != 0, .clip_ratio = (float) atof(argv[4])};
    long k = atol(argv[3]), n = atol(argv[5]);
    if (k < 1 || n < 1) return 2;
    size_t nq = (size_t) n * oscar_q2_0_row_bytes(k), nx = (size_t) n * (size_t) k * sizeof(float);
    float * x = read_all(argv[6], nx);
    uint8_t * q = malloc(nq ? nq : 1);
    float * y = malloc(nx);
    int rc = 1;
    if (!x || !q || !y) fprintf(stderr, "cannot read %s (%ld rows of %ld floats)\n", argv[6], n, k);
    else if (run(&p, x, k, n, q, y) != OSCAR_OK) fprintf(stderr, "%s\n", oscar_last_error());
    else if (osc_write_file_atomic(argv[7], q, nq) != OSCAR_OK || osc_write_file_atomic(argv[8], y, nx) != OSCAR_OK)
        fprintf(stderr, "%s\n", oscar_last_error());
    else rc = 0;
    free(x), free(q), free(y);
    return rc;
}
