// oscar-omni-tool.c - runs lib/quant's OScaR quantizer (oscar-omni.c) on the cases of
// tests/oracle/oscar_omni_oracle.py and compares every output byte for byte.
//
//   oscar-omni-tool check DIR
//
// DIR/cases.txt: one line "N HKV D META T" per case (META f32|f16|bf16, T a multiple of 32);
// inputs DIR/caseN.k.in, caseN.v.in (float32 [T, HKV, D]); expected outputs caseN.<name> for
// the names in OUTS below. Exit 0 when every case matches, 1 otherwise.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool-io.h"
#include "oscar.h"
#include "quant/quant.h"

enum { N_OUT = 11 };
static const char * const OUTS[N_OUT] = {"k.norm", "k.scaled", "k.hp",  "k.codes", "k.meta", "k.deq",
                                         "k.rest", "v.codes",  "v.meta", "v.deq",  "v.rest"};

struct ocase { int n, hkv, D; char meta[8]; long T; };


// All outputs of one case into out[i] (sizes sz[i]); 0 on success.
static int run_case(const struct ocase * c, const float * k, const float * v, uint8_t * out[N_OUT],
                    const size_t sz[N_OUT]) {
    struct oscar_omni_params p = oscar_omni_default_params(c->hkv, c->D);
    p.kivi.meta_dtype = !strcmp(c->meta, "f16") ? OSCAR_META_F16 : !strcmp(c->meta, "f32") ? OSCAR_META_F32
                                                                                           : OSCAR_META_BF16;
    size_t rs = (size_t) c->hkv * c->D, B = (size_t) p.kivi.k_block_tokens;
    float * norm = (float *) out[0], * y = (float *) out[1], * hp = (float *) out[2];
    float * kd = (float *) out[5], * kr = (float *) out[6];
    size_t cb = sz[3] / ((size_t) c->T / B), mb = sz[4] / ((size_t) c->T / B);
    for (long t = 0; t < c->T; t++) {
        if (oscar_omni_k_scale_token(&p, k + t * rs, y + t * rs, &norm[t]) != OSCAR_OK) return 1;
        oscar_omni_k_unscale_token(&p, y + t * rs, norm[t], hp + t * rs);
    }
    for (size_t b = 0; b < (size_t) c->T / B; b++) {
        if (oscar_omni_quantize_k_block(&p, y + b * B * rs, out[3] + b * cb, out[4] + b * mb, NULL) != OSCAR_OK)
            return 1;
        oscar_omni_dequantize_k_block(&p, out[3] + b * cb, out[4] + b * mb, kd + b * B * rs);
    }
    for (long t = 0; t < c->T; t++) oscar_omni_k_unscale_token(&p, kd + t * rs, norm[t], kr + t * rs);
    int64_t nv = (int64_t) c->T * c->hkv;
    if (oscar_omni_quantize_v_rows(&p, v, nv, out[7], out[8], NULL) != OSCAR_OK) return 1;
    oscar_omni_dequantize_v_rows(&p, out[7], out[8], nv, false, (float *) out[9]);
    oscar_omni_dequantize_v_rows(&p, out[7], out[8], nv, true, (float *) out[10]);
    return 0;
}

static void sizes(const struct ocase * c, size_t sz[N_OUT]) {
    size_t es = !strcmp(c->meta, "f32") ? 4 : 2, T = (size_t) c->T, rs = (size_t) c->hkv * c->D;
    size_t f = T * rs * sizeof(float);
    sz[0] = T * sizeof(float);
    sz[1] = sz[2] = sz[5] = sz[6] = sz[9] = sz[10] = f;
    sz[3] = sz[7] = T * rs / 4;
    sz[4] = (T / 32) * rs * 2 * es;
    sz[8] = T * c->hkv * 2 * ((size_t) c->D / 32) * es;
}

static int check_case(const char * dir, const struct ocase * c) {
    char path[4096];
    size_t sz[N_OUT], in = (size_t) c->T * c->hkv * c->D * sizeof(float);
    sizes(c, sz);
    uint8_t * got[N_OUT] = {0}, * want[N_OUT] = {0};
    snprintf(path, sizeof path, "%s/case%d.k.in", dir, c->n);
    float * k = read_all(path, in);
    snprintf(path, sizeof path, "%s/case%d.v.in", dir, c->n);
    float * v = read_all(path, in);
    int bad = !k || !v;
    for (int i = 0; i < N_OUT; i++) {
        snprintf(path, sizeof path, "%s/case%d.%s", dir, c->n, OUTS[i]);
        want[i] = read_all(path, sz[i]);
        got[i] = calloc(sz[i], 1);
        bad |= !want[i] || !got[i];
    }
    if (bad) {
        fprintf(stderr, "case %d: missing or wrongly sized files\n", c->n);
    } else if (run_case(c, k, v, got, sz)) {
        fprintf(stderr, "case %d: %s\n", c->n, oscar_last_error());
        bad = 1;
    } else {
        for (int i = 0; i < N_OUT; i++) {
            size_t j = 0;
            while (j < sz[i] && got[i][j] == want[i][j]) j++;
            if (j < sz[i]) {
                fprintf(stderr, "case %d (Hkv %d D %d %s T %ld): %s differs at byte %zu of %zu\n", c->n, c->hkv, c->D,
                        c->meta, c->T, OUTS[i], j, sz[i]);
                bad = 1;
            }
        }
    }
    for (int i = 0; i < N_OUT; i++) free(got[i]), free(want[i]);
    free(k), free(v);
    return bad;
}

int main(int argc, char ** argv) {
    if (argc != 3 || strcmp(argv[1], "check")) {
        fprintf(stderr, "usage: %s check DIR\n", argv[0]);
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/cases.txt", argv[2]);
    FILE * f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return 1;
    }
    struct ocase c;
    int total = 0, bad = 0;
    while (fscanf(f, "%d %d %d %7s %ld", &c.n, &c.hkv, &c.D, c.meta, &c.T) == 5) {
        total++;
        if (c.hkv < 1 || c.D < 32 || c.T < 32 || c.T % 32) {
            fprintf(stderr, "case %d: bad shape\n", c.n);
            bad++;
            continue;
        }
        bad += check_case(argv[2], &c);
    }
    fclose(f);
    printf("%d cases, %d mismatches\n", total, bad);
    return bad || total == 0;
}
