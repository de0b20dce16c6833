// blas.c - fixed-partition GEMMs over single-threaded OpenBLAS (see blas.h).
#include "util/blas.h"

#include <omp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Tile sizes: large enough that packing B costs ~1 % of a tile's work,
// small enough that a 512-token batch still gives every core a tile.
enum { TILE_M = 128, TILE_N = OSC_GEMM_TILE_N };

// Checked on every call, not once: a caller (a benchmark) may have changed it.
void osc_blas_init(void) {
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

char * openblas_get_corename(void);   // OpenBLAS's own API (not in its cblas.h)

// OpenBLAS's x86 kernel sets older than Haswell's (AVX2 + FMA): its core names.
static bool pre_avx2_kernels(const char * core) {
    static const char * const old[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Sandybridge",
                                       "Atom", "Katmai", "Coppermine", "Northwood", "Banias", "Opteron",
                                       "Opteron_SSE3", "Barcelona", "Bobcat", "Bulldozer", "Piledriver", NULL};
    for (int i = 0; core && old[i]; i++)
        if (!strcmp(core, old[i])) return true;
    return false;
}

void osc_blas_select_kernels(char ** argv) {
    if (getenv("OPENBLAS_CORETYPE") || !pre_avx2_kernels(openblas_get_corename())) return;
    __builtin_cpu_init();
    const char * want = NULL;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        want = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        want = "Haswell";
    if (!want || setenv("OPENBLAS_CORETYPE", want, 1) != 0) return;
    execv("/proc/self/exe", argv);   // returns only on failure: go on with the kernels loaded
    unsetenv("OPENBLAS_CORETYPE");
}

static int threads(int nt) { return nt > 0 ? nt : omp_get_max_threads(); }

// The tile grid of a product: tiles of TILE_M rows and TILE_N columns.
static int tiles(int n, int t) { return (n + t - 1) / t; }

// Offset of op(X)'s tile at (row r, column c): op(X) = X, or X transposed.
static size_t tile_offset(CBLAS_TRANSPOSE t, int r, int c, int ld) {
    return t == CblasNoTrans ? (size_t) r * (size_t) ld + (size_t) c : (size_t) c * (size_t) ld + (size_t) r;
}

#define DEFINE_GEMM(name, type, cblas_fn)                                                                          \
    void name(int nt, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, type alpha, const type * A,    \
              int lda, const type * B, int ldb, type beta, type * C, int ldc) {                                   \
        if (M <= 0 || N <= 0) return;                                                                              \
        osc_blas_init();                                                                                           \
        const int tm = tiles(M, TILE_M), tn = tiles(N, TILE_N), n_tiles = tm * tn;                                 \
        _Pragma("omp parallel for schedule(static) num_threads(threads(nt)) if (n_tiles > 1)")                     \
        for (int i = 0; i < n_tiles; i++) {                                                                        \
            const int r = (i / tn) * TILE_M, c = (i % tn) * TILE_N;                                                \
            const int m = M - r < TILE_M ? M - r : TILE_M, n = N - c < TILE_N ? N - c : TILE_N;                  \
            cblas_fn(CblasRowMajor, ta, tb, m, n, K, alpha, A + tile_offset(ta, r, 0, lda), lda,                 \
                     B + tile_offset(tb, 0, c, ldb), ldb, beta, C + (size_t) r * (size_t) ldc + (size_t) c, ldc);  \
        }                                                                                                          \
    }

DEFINE_GEMM(osc_sgemm, float, cblas_sgemm)
DEFINE_GEMM(osc_dgemm, double, cblas_dgemm)
