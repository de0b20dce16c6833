// oscar-quant-tool.c - runs lib/quant on raw binary rows, for the numpy oracle.
//
//   oscar-quant-tool quant MODE D G META CLIP RATIO NROWS in.f32 out.codes out.meta
//   oscar-quant-tool check DIR      (DIR/cases.txt from tests/oracle/quant_oracle.py)
//
// MODE asym|sym|lm|int4bdh|kivik|kiviv, META f32|f16|bf16, CLIP none|sort|bisect.
// `check` quantizes every case's .in rows and compares codes and metadata byte
// for byte with the oracle's files; exit 0 when all match, 1 otherwise.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oscar.h"
#include "quant/quant.h"
#include "util/fs.h"
#include "tool-io.h"

struct qcase {
    char mode[16], meta[8], clip[8];
    int D, G;
    double ratio;
    long rows;
};

static enum oscar_quant_meta_dtype meta_of(const char * s) {
    return !strcmp(s, "f16") ? OSCAR_META_F16 : !strcmp(s, "bf16") ? OSCAR_META_BF16 : OSCAR_META_F32;
}

// Sizes of the outputs of case c.
static void out_sizes(const struct qcase * c, size_t * ncodes, size_t * nmeta) {
    size_t es = oscar_meta_dtype_size(meta_of(c->meta)), R = (size_t) c->rows, D = (size_t) c->D;
    if (!strcmp(c->mode, "int4bdh")) *ncodes = R * D / 2, *nmeta = R * 2 * es;
    else if (!strcmp(c->mode, "kivik")) *ncodes = R * D / 4, *nmeta = R / (size_t) c->G * D * 2 * es;
    else if (!strcmp(c->mode, "kiviv")) *ncodes = R * D / 4, *nmeta = R * 2 * (D / (size_t) c->G) * es;
    else *ncodes = R * D / 4, *nmeta = R * 2 * (D / (size_t) c->G) * es;
}

static enum oscar_status run_case(const struct qcase * c, const float * x, uint8_t * codes, uint8_t * meta) {
    enum oscar_quant_meta_dtype md = meta_of(c->meta);
    if (!strcmp(c->mode, "int4bdh")) {
        struct oscar_int4_bdh_params p = { .head_dim = c->D, .hadamard_order = c->G, .meta_dtype = md };
        return oscar_int4_bdh_quantize_rows(&p, x, c->rows, codes, meta, NULL);
    }
    if (!strcmp(c->mode, "kivik") || !strcmp(c->mode, "kiviv")) {
        struct oscar_kivi_params p = oscar_kivi_default_params(c->D);
        p.meta_dtype = md;
        if (!strcmp(c->mode, "kiviv")) {
            p.v_group_size = c->G;
            return oscar_kivi_quantize_v_rows(&p, x, c->rows, codes, meta, NULL);
        }
        p.k_block_tokens = c->G;
        size_t es = oscar_meta_dtype_size(md);
        for (long b = 0; b < c->rows / c->G; b++) {
            enum oscar_status st = oscar_kivi_quantize_k_block(&p, x + (size_t) b * c->G * c->D, c->D,
                                                               codes + (size_t) b * c->D * (c->G / 4),
                                                               meta + (size_t) b * c->D * 2 * es, NULL);
            if (st != OSCAR_OK) return st;
        }
        return OSCAR_OK;
    }
    struct oscar_int2_params p = oscar_int2_default_params(c->D);
    p.group_size = c->G;
    p.meta_dtype = md;
    p.scheme     = !strcmp(c->mode, "sym") ? OSCAR_INT2_SYM : !strcmp(c->mode, "lm") ? OSCAR_INT2_LLOYD_MAX : OSCAR_INT2_ASYM;
    p.clip_algo  = !strcmp(c->clip, "bisect") ? OSCAR_CLIP_BISECT : OSCAR_CLIP_SORT;
    p.clip_ratio = !strcmp(c->clip, "none") ? 0.0 : c->ratio;
    return oscar_int2_quantize_rows(&p, x, c->rows, codes, meta, NULL);
}


static int check_dir(const char * dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/cases.txt", dir);
    FILE * f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return 1;
    }
    int n, bad = 0, total = 0;
    struct qcase c;
    while (fscanf(f, "%d %15s %d %d %7s %7s %lf %ld", &n, c.mode, &c.D, &c.G, c.meta, c.clip, &c.ratio, &c.rows) == 8) {
        size_t nc, nm;
        out_sizes(&c, &nc, &nm);
        snprintf(path, sizeof path, "%s/case%d.in", dir, n);
        float * x = read_all(path, (size_t) c.rows * (size_t) c.D * sizeof(float));
        snprintf(path, sizeof path, "%s/case%d.codes", dir, n);
        uint8_t * ec = read_all(path, nc);
        snprintf(path, sizeof path, "%s/case%d.meta", dir, n);
        uint8_t * em = read_all(path, nm);
        uint8_t * gc = malloc(nc), * gm = malloc(nm);
        total++;
        if (!x || !ec || !em || !gc || !gm) {
            fprintf(stderr, "case %d: missing or wrongly sized files\n", n);
            bad++;
        } else if (run_case(&c, x, gc, gm) != OSCAR_OK) {
            fprintf(stderr, "case %d: %s\n", n, oscar_last_error());
            bad++;
        } else if (memcmp(gc, ec, nc) || memcmp(gm, em, nm)) {
            size_t i = 0;
            while (i < nc && gc[i] == ec[i]) i++;
            size_t j = 0;
            while (j < nm && gm[j] == em[j]) j++;
            fprintf(stderr, "case %d (%s D %d G %d %s %s %g): first code diff at %zu/%zu, meta diff at %zu/%zu\n", n,
                    c.mode, c.D, c.G, c.meta, c.clip, c.ratio, i, nc, j, nm);
            bad++;
        }
        free(x), free(ec), free(em), free(gc), free(gm);
    }
    fclose(f);
    printf("%d cases, %d mismatches\n", total, bad);
    return bad || total == 0;
}

int main(int argc, char ** argv) {
    if (argc == 3 && !strcmp(argv[1], "check")) return check_dir(argv[2]);
    if (argc != 12 || strcmp(argv[1], "quant")) {
        fprintf(stderr, "usage: %s quant MODE D G META CLIP RATIO NROWS in out.codes out.meta\n"
                        "       %s check DIR\n", argv[0], argv[0]);
        return 2;
    }
    struct qcase c;
    snprintf(c.mode, sizeof c.mode, "%s", argv[2]);
    c.D = atoi(argv[3]), c.G = atoi(argv[4]);
    snprintf(c.meta, sizeof c.meta, "%s", argv[5]);
    snprintf(c.clip, sizeof c.clip, "%s", argv[6]);
    c.ratio = atof(argv[7]), c.rows = atol(argv[8]);
    if (c.D < 4 || c.G < 1 || c.rows < 1) return 2;
    size_t nc, nm;
    out_sizes(&c, &nc, &nm);
    float * x = read_all(argv[9], (size_t) c.rows * (size_t) c.D * sizeof(float));
    uint8_t * gc = malloc(nc), * gm = malloc(nm);
    int rc = 1;
    if (!x || !gc || !gm) fprintf(stderr, "cannot read %s (%ld rows of %d floats)\n", argv[9], c.rows, c.D);
    else if (run_case(&c, x, gc, gm) != OSCAR_OK) fprintf(stderr, "%s\n", oscar_last_error());
    else if (osc_write_file_atomic(argv[10], gc, nc) != OSCAR_OK || osc_write_file_atomic(argv[11], gm, nm) != OSCAR_OK)
        fprintf(stderr, "%s\n", oscar_last_error());
    else rc = 0;
    free(x), free(gc), free(gm);
    return rc;
}
