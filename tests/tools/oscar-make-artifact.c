// oscar-make-artifact - writes a synthetic oscar artifact for export tests.
//
//   oscar-make-artifact OUT_DIR L HQ HKV D PER_HEAD(0|1)[m] SEED [ARCH [BASE_SHA256]]
//
// A trailing 'm' on PER_HEAD (0m, 1m) adds a key mean layers.{i}.k_mean [HKV,D] (Gaussian),
// as oscar-calibrate --refine optr stores when it centres keys.
// Rotations are random orthogonal matrices (products of D Householder
// reflections of Gaussian vectors, fp64, stored fp32), eigenvalues a random
// ascending sequence, clip ratios in [0.8, 1]. Every required metadata key is
// set (provenance "synthetic"; oscar.base_model_sha256 "0" unless BASE_SHA256
// names the model the artifact should pass for). Prints the seed. Test-only:
// not installed.
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/oscar-artifact.h"

static uint64_t rng_state;

static double urand(void) { // splitmix64 -> [0, 1)
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double) ((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

static double grand(void) {
    double u = urand(), v = urand();
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

static void random_orthogonal(float * out, int D, double * q, double * v) {
    for (int i = 0; i < D * D; i++) q[i] = (i / D == i % D);
    for (int k = 0; k < D; k++) {
        double nrm = 0;
        for (int i = 0; i < D; i++) {
            v[i] = grand();
            nrm += v[i] * v[i];
        }
        nrm = sqrt(nrm);
        for (int i = 0; i < D; i++) v[i] /= nrm;
        for (int r = 0; r < D; r++) { // q <- q (I - 2 v vᵀ)
            double d = 0;
            for (int i = 0; i < D; i++) d += q[r * D + i] * v[i];
            for (int i = 0; i < D; i++) q[r * D + i] -= 2 * d * v[i];
        }
    }
    for (int i = 0; i < D * D; i++) out[i] = (float) q[i];
}

int main(int argc, char ** argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: oscar-make-artifact OUT_DIR L HQ HKV D PER_HEAD SEED [ARCH [BASE_SHA256]]\n");
        return 2;
    }
    int  L = atoi(argv[2]), Hq = atoi(argv[3]), Hkv = atoi(argv[4]), D = atoi(argv[5]), ph = atoi(argv[6]);
    bool mean = strchr(argv[6], 'm') != NULL;
    rng_state = strtoull(argv[7], NULL, 10);
    fprintf(stderr, "oscar-make-artifact: seed %llu\n", (unsigned long long) rng_state);
    struct oscar_artifact * a = NULL;
    if (oscar_artifact_init(L, Hq, Hkv, D, ph != 0, ph != 0, mean, &a) != OSCAR_OK) goto fail;
    int      R = ph ? Hkv : 1;
    double * q = malloc(sizeof(double) * (size_t) (D * D + D));
    for (int l = 0; l < L; l++)
        for (int h = 0; h < R; h++) {
            random_orthogonal(oscar_rotations_k(&a->rot, l, h), D, q, q + D * D);
            random_orthogonal(oscar_rotations_v(&a->rot, l, h), D, q, q + D * D);
            double ek = 0, ev = 0;
            for (int i = 0; i < D; i++) {
                a->rot.k_eig[((size_t) l * R + h) * D + i] = (float) (ek += urand());
                a->rot.v_eig[((size_t) l * R + h) * D + i] = (float) (ev += urand());
            }
            a->rot.k_clip[l * R + h] = (float) (0.8 + 0.2 * urand());
            a->rot.v_clip[l * R + h] = (float) (0.8 + 0.2 * urand());
        }
    free(q);
    for (size_t i = 0; mean && i < (size_t) L * (size_t) Hkv * (size_t) D; i++) a->rot.k_mean[i] = (float) grand();
    static const char * const kv[][2] = {
        { "oscar.k_objective", "qqt_r_h_pbr" }, { "oscar.v_objective", "sst_r_h_pbr" }, { "oscar.composition", "r_h_pbr" },
        { "oscar.base_model", "synthetic" }, { "oscar.base_model_sha256", "0" }, { "oscar.bits", "2" },
        { "oscar.group_size", "64" }, { "oscar.scale_dtype", "float32" }, { "oscar.sink", "64" },
        { "oscar.recent", "256" }, { "oscar.clip_mode", "fixed" }, { "oscar.k_clip_ratio", "0.96" },
        { "oscar.v_clip_ratio", "0.92" }, { "oscar.calib_tag", "seq0_prompt0_group64" },
        { "oscar.calib_corpus", "none" }, { "oscar.calib_sha256", "0" }, { "oscar.calib_tokens", "0" },
        { "oscar.tokenizer_hash", "0" }, { "oscar.seed", "0" }, { "oscar.tool", "oscar-make-artifact" },
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        if (oscar_artifact_set_meta(a, kv[i][0], kv[i][1]) != OSCAR_OK) goto fail;
    char group[16]; // an INT2 group must divide head_dim (engines refuse others): 64, or D when smaller
    snprintf(group, sizeof group, "%d", D < 64 ? D : 64);
    if (oscar_artifact_set_meta(a, "oscar.group_size", group) != OSCAR_OK) goto fail;
    if (oscar_artifact_set_meta(a, "oscar.architecture", argc > 8 ? argv[8] : "llama") != OSCAR_OK) goto fail;
    if (argc > 9 && oscar_artifact_set_meta(a, "oscar.base_model_sha256", argv[9]) != OSCAR_OK) goto fail;
    if (oscar_artifact_write(a, argv[1]) != OSCAR_OK) goto fail;
    oscar_artifact_free(a);
    return 0;
fail:
    fprintf(stderr, "oscar-make-artifact: %s\n", oscar_last_error());
    oscar_artifact_free(a);
    return 1;
}
