// oscar-st-tool.c - safetensors and model-loading probe for integration tests.
//
//   oscar-st-tool dump FILE|DIR      "name dtype shape sum(fp64 of fp32 values)" per tensor, metadata lines
//   oscar-st-tool write FILE         writes a fixed test file (F32, I32, U8, scalar, metadata)
//   oscar-st-tool model PATH         loads a model and prints its config, sha256 and weight checksums
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "model/model.h"
#include "oscar.h"

static int dump(const char * path) {
    struct osc_safetensors * st = NULL;
    if (osc_safetensors_open(path, &st) != OSCAR_OK) {
        fprintf(stderr, "oscar-st-tool: %s\n", oscar_last_error());
        return 1;
    }
    for (int64_t i = 0; i < osc_safetensors_n_metadata(st); i++) {
        const char *k, *v;
        osc_safetensors_metadata_at(st, i, &k, &v);
        printf("meta %s=%s\n", k, v);
    }
    for (int64_t i = 0; i < osc_safetensors_n_tensors(st); i++) {
        const struct osc_st_tensor * t = osc_safetensors_tensor(st, i);
        double sum = 0;
        if (t->dtype == OSC_ST_F32 || t->dtype == OSC_ST_F16 || t->dtype == OSC_ST_BF16) {
            float * y = malloc((size_t) t->n_elements * sizeof *y + 1);
            osc_st_to_f32(t, y);
            for (int64_t k = 0; k < t->n_elements; k++) sum += (double) y[k];
            free(y);
        } else if (t->dtype == OSC_ST_I32) {
            for (int64_t k = 0; k < t->n_elements; k++) {
                int32_t v;
                memcpy(&v, (const uint8_t *) t->data + 4 * k, 4);
                sum += v;
            }
        } else {
            for (int64_t k = 0; k < t->n_elements; k++) sum += ((const uint8_t *) t->data)[k];
        }
        printf("tensor %s %s [", t->name, osc_st_dtype_name(t->dtype));
        for (int d = 0; d < t->n_dims; d++) printf("%s%" PRId64, d ? "," : "", t->shape[d]);
        printf("] %.17g\n", sum);
    }
    osc_safetensors_close(st);
    return 0;
}

static int write_test(const char * path) {
    float a[6] = {1.5f, -2, 3, 4, 5, 6.25f};
    int32_t b[4] = {-1, 2, -3, 4};
    uint8_t c[3] = {250, 1, 2};
    float s = 0.96f;
    int64_t sa[2] = {2, 3}, sb[2] = {2, 2}, sc[1] = {3};
    struct osc_st_write_tensor t[] = {
        {"layers.0.k_rotation", OSC_ST_F32, 2, sa, a}, {"layers.0.k_clip", OSC_ST_F32, 0, NULL, &s},
        {"codes", OSC_ST_U8, 1, sc, c}, {"perm", OSC_ST_I32, 2, sb, b},
    };
    const char * meta[] = {"format", "pt", "oscar.note", "h\xc3\xa9llo"};
    if (osc_safetensors_write(path, t, 4, meta, 2) != OSCAR_OK) {
        fprintf(stderr, "oscar-st-tool: %s\n", oscar_last_error());
        return 1;
    }
    return 0;
}

static double sum(const float * x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double) x[i];
    return s;
}

static int model(const char * path) {
    struct oscar_model * m = NULL;
    if (oscar_model_load(path, &m) != OSCAR_OK) {
        fprintf(stderr, "oscar-st-tool: %s\n", oscar_last_error());
        return 1;
    }
    const struct oscar_model_config * c = &m->config;
    printf("arch %s layers %d embd %d heads %d kv %d head_dim %d ff %d vocab %d ctx %d theta %.9g eps %.9g tied %d\n",
           oscar_arch_name(c->arch), c->n_layer, c->n_embd, c->n_head, c->n_head_kv, c->head_dim, c->n_ff,
           c->n_vocab, c->n_ctx_train, (double) c->rope_theta, (double) c->rms_eps, c->tied_embeddings);
    printf("sha256 %s\n", m->source_sha256);
    int64_t C = c->n_embd, q = (int64_t) c->n_head * c->head_dim, kv = (int64_t) c->n_head_kv * c->head_dim;
    printf("sum tok_embd %.17g\n", sum(m->tok_embd, (int64_t) c->n_vocab * C));
    printf("sum layer0.wq %.17g\n", sum(m->layers[0].wq, q * C));
    printf("wq0 row1 first %.9g\n", (double) m->layers[0].wq[C]);
    printf("wk0 row1 first %.9g\n", (double) m->layers[0].wk[C]);
    (void) kv;
    oscar_model_free(m);
    return 0;
}

int main(int argc, char ** argv) {
    if (argc == 3 && strcmp(argv[1], "dump") == 0) return dump(argv[2]);
    if (argc == 3 && strcmp(argv[1], "write") == 0) return write_test(argv[2]);
    if (argc == 3 && strcmp(argv[1], "model") == 0) return model(argv[2]);
    fprintf(stderr, "usage: oscar-st-tool dump|write|model PATH\n");
    return 2;
}
