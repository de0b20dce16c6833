// fs.c - file mappings, whole-file reads and crash-safe writes.
#include "util/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum oscar_status osc_require_regular(const char * path) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        return osc_error(OSCAR_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    if (!S_ISREG(sb.st_mode)) {
        return osc_error(OSCAR_ERR_IO, "%s: not a regular file", path);
    }
    return OSCAR_OK;
}

enum oscar_status osc_map_file(const char * path, struct osc_mapped_file * out) {
    memset(out, 0, sizeof *out);
    // O_NONBLOCK: open() of a FIFO without a writer would block forever;
    // regular files ignore the flag, everything else is refused by fstat.
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        return osc_error(OSCAR_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return osc_error(OSCAR_ERR_IO, "%s: not a regular file", path);
    }
    out->path = strdup(path);
    if (!out->path) {
        close(fd);
        return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
    }
    out->size = (size_t) st.st_size;
    if (out->size > 0) {
        void * p = mmap(NULL, out->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            free(out->path);
            out->path = NULL;
            return osc_error(OSCAR_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
        }
        out->data = p;
    }
    close(fd);
    return OSCAR_OK;
}

void osc_unmap_file(struct osc_mapped_file * f) {
    if (f->data) {
        munmap((void *) (uintptr_t) f->data, f->size);
    }
    free(f->path);
    memset(f, 0, sizeof *f);
}

enum oscar_status osc_read_file(const char * path, size_t max_bytes, char ** out, size_t * out_size) {
    *out = NULL;
    FILE * fp = fopen(path, "rb");
    if (!fp) {
        return osc_error(OSCAR_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    enum oscar_status st = OSCAR_ERR_IO;
    char * buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            size_t ncap = cap ? cap * 2 : 65536;
            char * nb = realloc(buf, ncap);
            if (!nb) {
                st = osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
                goto out;
            }
            buf = nb;
            cap = ncap;
        }
        size_t n = fread(buf + len, 1, cap - len - 1, fp);
        len += n;
        if (len > max_bytes) {
            st = osc_error(OSCAR_ERR_INVALID, "%s: larger than the %zu-byte limit", path, max_bytes);
            goto out;
        }
        if (n == 0) {
            break;
        }
    }
    if (ferror(fp)) {
        st = osc_error(OSCAR_ERR_IO, "%s: read error", path);
        goto out;
    }
    buf[len] = '\0';
    *out = buf;
    buf = NULL;
    if (out_size) {
        *out_size = len;
    }
    st = OSCAR_OK;
out:
    free(buf);
    fclose(fp);
    return st;
}

char * osc_path_join(const char * a, const char * b) {
    size_t la = strlen(a), lb = strlen(b);
    char * s = malloc(la + lb + 2);
    if (!s) {
        return NULL;
    }
    memcpy(s, a, la);
    size_t n = la;
    if (la > 0 && a[la - 1] != '/') {
        s[n++] = '/';
    }
    memcpy(s + n, b, lb + 1);
    return s;
}

static char * dir_of(const char * path) {
    const char * slash = strrchr(path, '/');
    if (!slash) {
        return strdup(".");
    }
    if (slash == path) {
        return strdup("/");
    }
    return strndup(path, (size_t) (slash - path));
}

enum oscar_status osc_atomic_open(struct osc_atomic_file * f, const char * path) {
    memset(f, 0, sizeof *f);
    f->path     = strdup(path);
    f->tmp_path = malloc(strlen(path) + 32);
    if (!f->path || !f->tmp_path) {
        osc_atomic_abort(f);
        return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
    }
    sprintf(f->tmp_path, "%s.tmp.%ld", path, (long) getpid());
    int fd = open(f->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        free(f->tmp_path);
        f->tmp_path = NULL;
        osc_atomic_abort(f);
        return osc_error(OSCAR_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    }
    f->fp = fdopen(fd, "wb");
    if (!f->fp) {
        close(fd);
        osc_atomic_abort(f);
        return osc_error(OSCAR_ERR_IO, "%s: fdopen failed", path);
    }
    return OSCAR_OK;
}

void osc_atomic_abort(struct osc_atomic_file * f) {
    if (f->fp) {
        fclose(f->fp);
    }
    if (f->tmp_path) {
        unlink(f->tmp_path);
    }
    free(f->tmp_path);
    free(f->path);
    memset(f, 0, sizeof *f);
}

static void fsync_dir(const char * path) {
    char * dir = dir_of(path);
    if (!dir) {
        return;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd); // best effort: some filesystems refuse directory fsync
        close(fd);
    }
    free(dir);
}

enum oscar_status osc_atomic_commit(struct osc_atomic_file * f) {
    enum oscar_status st = OSCAR_OK;
    if (fflush(f->fp) != 0 || ferror(f->fp)) {
        st = osc_error(OSCAR_ERR_IO, "%s: write failed: %s", f->path, strerror(errno));
    } else if (fsync(fileno(f->fp)) != 0) {
        st = osc_error(OSCAR_ERR_IO, "%s: fsync failed: %s", f->path, strerror(errno));
    }
    int close_rc = fclose(f->fp);
    f->fp = NULL;
    if (st == OSCAR_OK && close_rc != 0) {
        st = osc_error(OSCAR_ERR_IO, "%s: close failed: %s", f->path, strerror(errno));
    }
    if (st == OSCAR_OK && rename(f->tmp_path, f->path) != 0) {
        st = osc_error(OSCAR_ERR_IO, "%s: rename failed: %s", f->path, strerror(errno));
    }
    if (st == OSCAR_OK) {
        fsync_dir(f->path);
        free(f->tmp_path);
        f->tmp_path = NULL; // nothing left to unlink
    }
    osc_atomic_abort(f);
    return st;
}

enum oscar_status osc_write_file_atomic(const char * path, const void * data, size_t size) {
    struct osc_atomic_file f;
    enum oscar_status st = osc_atomic_open(&f, path);
    if (st != OSCAR_OK) {
        return st;
    }
    if (size > 0 && fwrite(data, 1, size, f.fp) != size) {
        osc_atomic_abort(&f);
        return osc_error(OSCAR_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    }
    return osc_atomic_commit(&f);
}

enum oscar_status osc_mkdirs(const char * path) {
    char * p = strdup(path);
    if (!p) {
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    enum oscar_status st = OSCAR_OK;
    for (char * s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                st = osc_error(OSCAR_ERR_IO, "%s: cannot create directory: %s", p, strerror(errno));
                break;
            }
            *s = c;
            if (c == '\0') {
                break;
            }
        }
    }
    if (st == OSCAR_OK) {
        struct stat sb;
        if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            st = osc_error(OSCAR_ERR_IO, "%s: not a directory", path);
        }
    }
    free(p);
    return st;
}
