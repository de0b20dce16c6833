// test-blas.c - util/blas: the tiled GEMMs equal an fp64 reference for every
// transpose combination and for shapes that cross tile edges, and their bytes
// do not change with the thread count (the tile partition is oscar's).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util/blas.h"

#define SEED 20261201u
#include "test-rng.h"

// op(X)[i][j] of a row-major X with leading dimension ld
static double at(const float * X, CBLAS_TRANSPOSE t, int i, int j, int ld) {
    return t == CblasNoTrans ? X[(size_t) i * ld + j] : X[(size_t) j * ld + i];
}

static void check_shape(int M, int N, int K, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb) {
    const int lda = (ta == CblasNoTrans ? K : M) + 3, ldb = (tb == CblasNoTrans ? N : K) + 5, ldc = N + 7;
    const size_t na = (size_t) (ta == CblasNoTrans ? M : K) * lda, nb = (size_t) (tb == CblasNoTrans ? K : N) * ldb;
    float * A = rnd(na, 1.0), * B = rnd(nb, 1.0), * C0 = rnd((size_t) M * ldc, 1.0);
    float * C[3];
    for (int r = 0; r < 3; r++) {
        C[r] = malloc(sizeof(float) * (size_t) M * ldc);
        memcpy(C[r], C0, sizeof(float) * (size_t) M * ldc);
        osc_sgemm(r + 1, ta, tb, M, N, K, 0.75f, A, lda, B, ldb, 0.5f, C[r], ldc);
    }
    // one, two and three threads: the same bytes, padding untouched
    assert_memory_equal(C[0], C[1], sizeof(float) * (size_t) M * ldc);
    assert_memory_equal(C[0], C[2], sizeof(float) * (size_t) M * ldc);
    double worst = 0.0;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double ref = 0.5 * (double) C0[(size_t) i * ldc + j], mag = fabs(ref);
            for (int k = 0; k < K; k++) {
                double p = 0.75 * at(A, ta, i, k, lda) * at(B, tb, k, j, ldb);
                ref += p, mag += fabs(p);
            }
            double e = fabs((double) C[0][(size_t) i * ldc + j] - ref) / mag;
            if (e > worst) worst = e;
        }
        for (int j = N; j < ldc; j++) assert_memory_equal(&C[0][(size_t) i * ldc + j], &C0[(size_t) i * ldc + j], 4);
    }
    // fp32 dot products of K terms: |error| <= K · eps32 · Σ|terms|
    assert_true(worst <= (double) K * 1.2e-7);
    free(A), free(B), free(C0);
    for (int r = 0; r < 3; r++) free(C[r]);
}

static void test_sgemm_tiles(void ** state) {
    (void) state;
    const CBLAS_TRANSPOSE t[2] = {CblasNoTrans, CblasTrans};
    const int shapes[][3] = {{1, 1, 1}, {1, 700, 33}, {300, 1100, 65}, {129, 513, 7}, {257, 9, 200}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) check_shape(shapes[s][0], shapes[s][1], shapes[s][2], t[a], t[b]);
}

static void test_dgemm_matches_sgemm_layout(void ** state) {
    (void) state;
    // C = A·Bᵀ in fp64 across tile edges, against a plain loop, for 1 and 2 threads
    const int M = 200, N = 600, K = 17;
    double * A = malloc(sizeof(double) * M * K), * B = malloc(sizeof(double) * N * K);
    double * C1 = malloc(sizeof(double) * M * N), * C2 = malloc(sizeof(double) * M * N);
    for (int i = 0; i < M * K; i++) A[i] = nrand();
    for (int i = 0; i < N * K; i++) B[i] = nrand();
    osc_dgemm(1, CblasNoTrans, CblasTrans, M, N, K, 1.0, A, K, B, K, 0.0, C1, N);
    osc_dgemm(2, CblasNoTrans, CblasTrans, M, N, K, 1.0, A, K, B, K, 0.0, C2, N);
    assert_memory_equal(C1, C2, sizeof(double) * M * N);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = 0.0;
            for (int k = 0; k < K; k++) ref += A[i * K + k] * B[j * K + k];
            assert_true(fabs(C1[i * N + j] - ref) <= 1e-13 * (1.0 + fabs(ref)) * K);
        }
    free(A), free(B), free(C1), free(C2);
}

static void test_init_pins_one_thread(void ** state) {
    (void) state;
    openblas_set_num_threads(2);
    osc_blas_init();
    assert_int_equal(openblas_get_num_threads(), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgemm_tiles),
        cmocka_unit_test(test_dgemm_matches_sgemm_layout),
        cmocka_unit_test(test_init_pins_one_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
