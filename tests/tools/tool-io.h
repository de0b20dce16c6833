// tool-io.h - file input shared by the oracle tools in tests/tools.
#ifndef OSCAR_TESTS_TOOL_IO_H
#define OSCAR_TESTS_TOOL_IO_H

#include <stdlib.h>

#include "util/fs.h"

// The whole of `path` when it holds exactly `want` bytes (malloc'ed), else NULL.
static inline void * read_all(const char * path, size_t want) {
    char * buf = NULL;
    size_t n = 0;
    if (osc_read_file(path, want, &buf, &n) != OSCAR_OK) return NULL;
    if (n != want) {
        free(buf);
        return NULL;
    }
    return buf;
}

#endif
