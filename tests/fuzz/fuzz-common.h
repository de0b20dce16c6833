// fuzz-common.h - hands the fuzzer's bytes to readers that take paths.
//
// Readers choose what to do by the path ("x.safetensors" is one file,
// anything else a model directory, ".json" an index), so each named input is
// a symbolic link of that name, in a scratch directory made once per process
// under $TMPDIR (run-fuzz.sh points that at a folder of its own; removed at
// exit), to a memfd (/proc/self/fd/N) holding the bytes: no file system
// writes per run, and the readers open and mmap it like any other file.
#ifndef OSCAR_FUZZ_COMMON_H
#define OSCAR_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FUZZ_MAX_FILES 8

static char fuzz_dir_path[512];
static char fuzz_names[FUZZ_MAX_FILES][64];
static int  fuzz_fds[FUZZ_MAX_FILES];
static int  fuzz_n_names;

static void fuzz_cleanup(void) {
    char p[600];
    for (int i = 0; i < fuzz_n_names; i++) {
        snprintf(p, sizeof p, "%s/%s", fuzz_dir_path, fuzz_names[i]);
        unlink(p);
    }
    rmdir(fuzz_dir_path);
}

// The scratch directory, or NULL when it cannot be made.
static const char * fuzz_dir(void) {
    if (!fuzz_dir_path[0]) {
        const char * t = getenv("TMPDIR");
        snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/oscar-fuzz-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(fuzz_dir_path)) {
            fuzz_dir_path[0] = 0;
            return NULL;
        }
        atexit(fuzz_cleanup);
    }
    return fuzz_dir_path;
}

// The memfd behind <scratch>/<name>, made (with its link) on first use; -1 on failure.
static int fuzz_fd(const char * name) {
    for (int i = 0; i < fuzz_n_names; i++) {
        if (strcmp(fuzz_names[i], name) == 0) return fuzz_fds[i];
    }
    const char * dir = fuzz_dir();
    if (!dir || fuzz_n_names == FUZZ_MAX_FILES || strlen(name) >= sizeof fuzz_names[0]) return -1;
    int fd = memfd_create(name, 0);
    if (fd < 0) return -1;
    char link[600], target[64];
    snprintf(link, sizeof link, "%s/%s", dir, name);
    snprintf(target, sizeof target, "/proc/self/fd/%d", fd);
    if (symlink(target, link) != 0) {
        close(fd);
        return -1;
    }
    snprintf(fuzz_names[fuzz_n_names], sizeof fuzz_names[0], "%s", name);
    fuzz_fds[fuzz_n_names++] = fd;
    return fd;
}

// Makes <scratch>/<name> (a plain name, no '/') hold exactly `data`; returns
// its path (valid until the next call) or NULL.
static const char * fuzz_write_file(const char * name, const uint8_t * data, size_t size) {
    static char path[600];
    int fd = fuzz_fd(name);
    if (fd < 0 || ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t) size)) return NULL;
    snprintf(path, sizeof path, "%s/%s", fuzz_dir_path, name);
    return path;
}

// A file named "input<suffix>" holding `data`.
static const char * fuzz_write(const uint8_t * data, size_t size, const char * suffix) {
    char name[64];
    snprintf(name, sizeof name, "input%s", suffix);
    return fuzz_write_file(name, data, size);
}

#endif
