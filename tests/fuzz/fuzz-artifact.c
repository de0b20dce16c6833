// fuzz-artifact.c - libFuzzer target: reading an oscar artifact (oscar.safetensors
// with its metadata contract), with and without the orthogonality check.
#include <stdint.h>

#include "formats/oscar-artifact.h"
#include "fuzz-common.h"

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    const char * path = fuzz_write(data, size, ".safetensors");
    struct oscar_artifact * a = NULL;
    if (path && oscar_artifact_read(path, size % 2 == 0, &a) == OSCAR_OK) {
        oscar_artifact_validate(a, true);
        oscar_artifact_free(a);
    }
    return 0;
}
