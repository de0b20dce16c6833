// fuzz-common.h - hands the fuzzer's bytes to readers that take paths.
//
// The bytes go into one memfd per process (no files left in /tmp), reached
// through /proc/self/fd/N; oscar's readers open and mmap that path like any
// other file.
#ifndef OSCAR_FUZZ_COMMON_H
#define OSCAR_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

// Returns a path holding exactly `data` (valid until the next call), or NULL.
static const char * fuzz_write(const uint8_t * data, size_t size, const char * suffix) {
    static int  fd = -1;
    static char path[64];
    (void) suffix; // readers detect formats by content, not by name
    if (fd < 0) {
        fd = memfd_create("oscar-fuzz", 0);
        if (fd < 0) return NULL;
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t) size)) return NULL;
    return path;
}

#endif
