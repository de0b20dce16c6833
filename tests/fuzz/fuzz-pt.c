// fuzz-pt.c - libFuzzer target: the restricted .pt reader (ZIP directory,
// unpickler, tensor bounds) on the bytes in memory, every tensor it reaches
// converted to fp32, then the rotation importer on the same bytes as a K/V pair.
#include <stdint.h>
#include <stdlib.h>

#include "formats/oscar-import.h"
#include "formats/pt-reader.h"
#include "fuzz-common.h"

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size);

// Converts the tensors under v (values may be shared or cyclic: *budget bounds the walk).
static void walk(const struct osc_pt_value * v, int depth, int * budget) {
    if (!v || depth > 70 || --*budget < 0) return;
    if (v->kind == OSC_PT_TENSOR) {
        float * y = malloc(osc_pt_numel(v) * sizeof *y + 1);
        if (y) osc_pt_tensor_f32(v, y);
        free(y);
        return;
    }
    for (size_t i = 0; i < v->n; i++) walk(v->items[i], depth + 1, budget);
}

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    struct osc_pt * f = NULL;
    if (osc_pt_open_mem(data, size, "input.pt", &f) == OSCAR_OK) {
        int budget = 4096;
        walk(osc_pt_root(f), 0, &budget);
        osc_pt_close(f);
    }
    const char * path = fuzz_write_file("k_rotation_x.pt", data, size);
    char         vpath[700];
    if (!path) return 0;
    snprintf(vpath, sizeof vpath, "%s", path);
    struct oscar_artifact * a = NULL;
    if (oscar_import_pt(path, vpath, NULL, &a) == OSCAR_OK) {
        oscar_artifact_validate(a, true);
        oscar_artifact_free(a);
    }
    return 0;
}
