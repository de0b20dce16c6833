// fuzz-common.h - writes the fuzzer's bytes to a temp file (the readers take paths).
#ifndef OSCAR_FUZZ_COMMON_H
#define OSCAR_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

// Returns a path holding exactly `data` (reused across runs), or NULL.
static const char * fuzz_write(const uint8_t * data, size_t size, const char * suffix) {
    static char path[128];
    snprintf(path, sizeof path, "/tmp/oscar-fuzz-%d%s", (int) getpid(), suffix);
    FILE * f = fopen(path, "wb");
    if (!f) return NULL;
    if (size && fwrite(data, 1, size, f) != size) {
        fclose(f);
        return NULL;
    }
    fclose(f);
    return path;
}

#endif
