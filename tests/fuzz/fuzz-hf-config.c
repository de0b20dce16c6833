// fuzz-hf-config.c - libFuzzer target: HF config.json parsing (from a file, like the loader).
#include <stdint.h>

#include "formats/hf-config.h"
#include "fuzz-common.h"

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    const char * path = fuzz_write(data, size, ".json");
    struct oscar_model_config c;
    if (path) osc_hf_config_load(path, &c);
    return 0;
}
