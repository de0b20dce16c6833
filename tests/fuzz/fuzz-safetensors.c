// fuzz-safetensors.c - libFuzzer target: safetensors open and fp32 conversion of every tensor.
#include <stdint.h>
#include <stdlib.h>

#include "formats/safetensors.h"
#include "fuzz-common.h"

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    const char * path = fuzz_write(data, size, ".safetensors");
    struct osc_safetensors * st = NULL;
    if (!path || osc_safetensors_open(path, &st) != OSCAR_OK) return 0;
    for (int64_t i = 0; i < osc_safetensors_n_tensors(st); i++) {
        const struct osc_st_tensor * t = osc_safetensors_tensor(st, i);
        float * y = malloc((size_t) t->n_elements * sizeof *y + 1);
        if (y) osc_st_to_f32(t, y);
        free(y);
        osc_safetensors_find(st, t->name);
    }
    osc_safetensors_close(st);
    return 0;
}
