// fuzz-gguf.c - libFuzzer target: GGUF open, every getter, dequantize every tensor.
#include <stdint.h>
#include <stdlib.h>

#include "formats/gguf.h"
#include "fuzz-common.h"

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    const char * path = fuzz_write(data, size, ".gguf");
    struct osc_gguf * g = NULL;
    if (!path || osc_gguf_open(path, &g) != OSCAR_OK) return 0;
    for (int64_t i = 0; i < osc_gguf_n_kv(g); i++) {
        const char * key = osc_gguf_key(g, i);
        uint64_t u;
        double d;
        bool b;
        const char * s;
        size_t len;
        enum osc_gguf_type et;
        uint64_t n;
        const void * p;
        osc_gguf_get_u64(g, key, &u);
        osc_gguf_get_f64(g, key, &d);
        osc_gguf_get_bool(g, key, &b);
        osc_gguf_get_str(g, key, &s, &len);
        if (osc_gguf_get_arr(g, key, &et, &n) == OSCAR_OK) {
            osc_gguf_get_arr_data(g, key, &p);
            for (uint64_t k = 0; k < n && k < 64; k++) osc_gguf_get_arr_str(g, key, k, &s, &len);
        }
    }
    for (int64_t i = 0; i < osc_gguf_n_tensors(g); i++) {
        const struct osc_gguf_tensor * t = osc_gguf_tensor(g, i);
        if (t->n_elements > (1 << 22)) continue;
        float * y = malloc((size_t) t->n_elements * sizeof *y);
        if (y) osc_ggml_dequantize(t->type, t->data, y, t->n_elements);
        free(y);
    }
    osc_gguf_close(g);
    return 0;
}
