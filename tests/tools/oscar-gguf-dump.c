// oscar-gguf-dump.c - prints a GGUF file's metadata and tensor table.
//
//   oscar-gguf-dump FILE                 metadata (arrays: count + first items) and tensors
//   oscar-gguf-dump --dequant-all FILE   raw fp32 of every tensor, in file order, to stdout
//                                        (used by tests/oracle/gguf_model_check.py)
// A debugging aid; it refuses nothing the reader accepts.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "oscar.h"

static void print_scalar(const struct osc_gguf * g, const char * key, enum osc_gguf_type t) {
    uint64_t u;
    int64_t i;
    double d;
    bool b;
    const char * s;
    size_t len;
    switch (t) {
    case OSC_GGUF_UINT8: case OSC_GGUF_UINT16: case OSC_GGUF_UINT32: case OSC_GGUF_UINT64:
        if (osc_gguf_get_u64(g, key, &u) == OSCAR_OK) printf("%" PRIu64, u);
        break;
    case OSC_GGUF_INT8: case OSC_GGUF_INT16: case OSC_GGUF_INT32: case OSC_GGUF_INT64:
        if (osc_gguf_get_i64(g, key, &i) == OSCAR_OK) printf("%" PRId64, i);
        break;
    case OSC_GGUF_FLOAT32: case OSC_GGUF_FLOAT64:
        if (osc_gguf_get_f64(g, key, &d) == OSCAR_OK) printf("%.9g", d);
        break;
    case OSC_GGUF_BOOL:
        if (osc_gguf_get_bool(g, key, &b) == OSCAR_OK) printf("%s", b ? "true" : "false");
        break;
    case OSC_GGUF_STRING:
        if (osc_gguf_get_str(g, key, &s, &len) == OSCAR_OK) printf("\"%.*s\"", (int) (len > 200 ? 200 : len), s);
        break;
    default:
        break;
    }
}

static void print_array(const struct osc_gguf * g, const char * key) {
    enum osc_gguf_type et;
    uint64_t n;
    if (osc_gguf_get_arr(g, key, &et, &n) != OSCAR_OK) return;
    printf("array[%" PRIu64 "] of type %d", n, (int) et);
    if (et == OSC_GGUF_STRING) {
        printf(": ");
        for (uint64_t i = 0; i < n && i < 5; i++) {
            const char * s;
            size_t len;
            if (osc_gguf_get_arr_str(g, key, i, &s, &len) == OSCAR_OK) printf("\"%.*s\" ", (int) len, s);
        }
        if (n > 5) printf("...");
    }
}

static int dequant_all(const struct osc_gguf * g) {
    for (int64_t i = 0; i < osc_gguf_n_tensors(g); i++) {
        const struct osc_gguf_tensor * t = osc_gguf_tensor(g, i);
        float * y = malloc((size_t) t->n_elements * sizeof *y);
        if (!y || osc_ggml_dequantize(t->type, t->data, y, t->n_elements) != OSCAR_OK) {
            fprintf(stderr, "oscar-gguf-dump: %s: %s\n", t->name, y ? oscar_last_error() : "out of memory");
            free(y);
            return 1;
        }
        if (fwrite(y, sizeof *y, (size_t) t->n_elements, stdout) != (size_t) t->n_elements) {
            free(y);
            return 1;
        }
        free(y);
    }
    return fflush(stdout) != 0;
}

int main(int argc, char ** argv) {
    bool deq = argc == 3 && strcmp(argv[1], "--dequant-all") == 0;
    if (argc != 2 && !deq) {
        fprintf(stderr, "usage: oscar-gguf-dump [--dequant-all] FILE.gguf\n");
        return 2;
    }
    struct osc_gguf * g = NULL;
    if (osc_gguf_open(argv[argc - 1], &g) != OSCAR_OK) {
        fprintf(stderr, "oscar-gguf-dump: %s\n", oscar_last_error());
        return 1;
    }
    if (deq) {
        int rc = dequant_all(g);
        osc_gguf_close(g);
        return rc;
    }
    printf("GGUF v%u, %" PRId64 " keys, %" PRId64 " tensors, alignment %" PRIu64 ", data at %" PRIu64 "\n",
           osc_gguf_version(g), osc_gguf_n_kv(g), osc_gguf_n_tensors(g), osc_gguf_alignment(g),
           osc_gguf_data_offset(g));
    for (int64_t i = 0; i < osc_gguf_n_kv(g); i++) {
        const char * key = osc_gguf_key(g, i);
        enum osc_gguf_type t = osc_gguf_kv_type(g, i);
        printf("  %-45s = ", key);
        if (t == OSC_GGUF_ARRAY) print_array(g, key);
        else print_scalar(g, key, t);
        printf("\n");
    }
    for (int64_t i = 0; i < osc_gguf_n_tensors(g); i++) {
        const struct osc_gguf_tensor * t = osc_gguf_tensor(g, i);
        printf("  %4" PRId64 " %-40s %-5s [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] off %" PRIu64
               " bytes %zu\n", i, t->name, osc_ggml_type_name(t->type), t->ne[0], t->ne[1], t->ne[2], t->ne[3],
               t->offset, t->nbytes);
    }
    osc_gguf_close(g);
    return 0;
}
