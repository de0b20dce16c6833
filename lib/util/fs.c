// fs.c - file mappings, whole-file reads and crash-safe writes.
#include "util/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/log.h"

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

// The whole pages holding [p, p + n), as madvise wants them.
static void page_span(const void * p, size_t n, uintptr_t * lo, uintptr_t * hi) {
    const uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
    *lo = (uintptr_t) p & ~(page - 1), *hi = ((uintptr_t) p + n + page - 1) & ~(page - 1);
}

void osc_mapped_drop(const void * p, size_t n) {
    if (!p || n == 0) return;
    uintptr_t lo, hi;
    page_span(p, n, &lo, &hi);
    (void) madvise((void *) lo, hi - lo, MADV_DONTNEED);
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 // Linux 5.14; older kernels say EINVAL and the reads fault the pages in
#endif

void osc_mapped_will_read(const void * p, size_t n) {
    if (!p || n == 0) return;
    uintptr_t lo, hi;
    page_span(p, n, &lo, &hi);
    // one call maps every page (a read faults them in 64 KiB at a time: 7.2 M faults for the Qwen3-8B
    // shape's layers); readahead first when they are not in the page cache yet
    (void) madvise((void *) lo, hi - lo, MADV_WILLNEED);
    (void) madvise((void *) lo, hi - lo, MADV_POPULATE_READ);
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
    osc_remove_stale_temps(path);
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

static void fsync_this_dir(const char * dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd); // best effort: some filesystems refuse directory fsync
        close(fd);
    }
}

static void fsync_dir(const char * path) {
    char * dir = dir_of(path);
    if (dir) {
        fsync_this_dir(dir);
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

// ---- stale temporaries ---------------------------------------------------------------
// True when `name` is `prefix` followed by the decimal pid (no leading zero)
// of a process that no longer exists; never for our own pid.
static bool is_stale(const char * name, const char * prefix) {
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0 || name[n] < '1' || name[n] > '9') {
        return false;
    }
    long pid = 0;
    for (const char * d = name + n; *d; d++) {
        if (*d < '0' || *d > '9') {
            return false;
        }
        pid = pid * 10 + (*d - '0');
        if (pid > INT_MAX) {
            return false;
        }
    }
    return pid != (long) getpid() && kill((pid_t) pid, 0) != 0 && errno == ESRCH;
}

// Removes a file, or a directory and the files in it (staging directories hold no subdirectories).
static void remove_path(const char * path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        return;
    }
    if (!S_ISDIR(sb.st_mode)) {
        unlink(path);
        return;
    }
    DIR * d = opendir(path);
    if (d) {
        for (struct dirent * e; (e = readdir(d)) != NULL;) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
                continue;
            }
            char * p = osc_path_join(path, e->d_name);
            if (p) {
                unlink(p);
            }
            free(p);
        }
        closedir(d);
    }
    rmdir(path);
}

// Removes the entries "<prefix><pid>" of dir whose writer is dead. The names
// are collected first so that the directory is not changed while it is read.
static void remove_stale(const char * dir, const char * prefix) {
    DIR * d = opendir(dir);
    if (!d) {
        return;
    }
    char ** names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent * e; (e = readdir(d)) != NULL;) {
        if (!is_stale(e->d_name, prefix)) {
            continue;
        }
        if (n == cap) {
            char ** nn = realloc(names, (cap = cap ? cap * 2 : 8) * sizeof *nn);
            if (!nn) {
                break;
            }
            names = nn;
        }
        if ((names[n] = strdup(e->d_name)) != NULL) {
            n++;
        }
    }
    closedir(d);
    for (size_t i = 0; i < n; i++) {
        char * p = osc_path_join(dir, names[i]);
        if (p) {
            remove_path(p);
            osc_info("removed %s, left by an interrupted run", p);
        }
        free(p);
        free(names[i]);
    }
    free(names);
}

// "<dir of path>", "<prefix><base name of path><suffix>" for the stale patterns.
static char * sibling_pattern(const char * path, const char * prefix, const char * suffix) {
    const char * slash = strrchr(path, '/');
    const char * base  = slash ? slash + 1 : path;
    char * s = malloc(strlen(prefix) + strlen(base) + strlen(suffix) + 1);
    if (s) {
        sprintf(s, "%s%s%s", prefix, base, suffix);
    }
    return s;
}

void osc_remove_stale_temps(const char * path) {
    char * dir = dir_of(path), * pat = sibling_pattern(path, "", ".tmp.");
    if (dir && pat) {
        remove_stale(dir, pat);
    }
    free(dir);
    free(pat);
}

// ---- output directories -----------------------------------------------------------------
static bool listed(const char * const * files, const char * name) {
    for (; files && *files; files++) {
        if (strcmp(*files, name) == 0) {
            return true;
        }
    }
    return false;
}

// An existing destination may be replaced only if it is a real directory of our own files.
static enum oscar_status check_dest(const char * dir, const char * what, const char * const * files) {
    struct stat sb;
    if (lstat(dir, &sb) != 0) {
        return errno == ENOENT ? OSCAR_OK : osc_error(OSCAR_ERR_IO, "%s: %s", dir, strerror(errno));
    }
    if (S_ISLNK(sb.st_mode)) {
        return osc_error(OSCAR_ERR_INVALID, "%s: is a symbolic link; name the directory itself", dir);
    }
    if (!S_ISDIR(sb.st_mode)) {
        return osc_error(OSCAR_ERR_INVALID, "%s: exists and is not a directory", dir);
    }
    DIR * d = opendir(dir);
    if (!d) {
        return osc_error(OSCAR_ERR_IO, "%s: %s", dir, strerror(errno));
    }
    enum oscar_status st = OSCAR_OK;
    for (struct dirent * e; st == OSCAR_OK && (e = readdir(d)) != NULL;) {
        const char * n = e->d_name;
        if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0) {
            continue;
        }
        char * p = osc_path_join(dir, n);
        if (!listed(files, n)) {
            st = osc_error(OSCAR_ERR_INVALID, "%s: exists and holds '%s', which is not part of %s; refusing to "
                                              "replace it", dir, n, what);
        } else if (!p || lstat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            st = osc_error(OSCAR_ERR_INVALID, "%s: '%s' is not a regular file; refusing to replace it", dir, n);
        }
        free(p);
    }
    closedir(d);
    return st;
}

static void stage_free(struct osc_dir_stage * s) {
    free(s->dir);
    free(s->parent);
    free(s->tmp);
    free(s->old);
    memset(s, 0, sizeof *s);
}

enum oscar_status osc_dir_stage_open(struct osc_dir_stage * s, const char * dir, const char * what,
                                     const char * const * files) {
    memset(s, 0, sizeof *s);
    if (!dir || !*dir) {
        return osc_error(OSCAR_ERR_INVALID, "output directory: the path is empty");
    }
    enum oscar_status st = OSCAR_ERR_NOMEM;
    char * stale_tmp = NULL, * stale_old = NULL, * own = NULL;
    if (!(s->dir = strdup(dir))) {
        goto fail;
    }
    size_t n = strlen(s->dir);
    while (n > 1 && s->dir[n - 1] == '/') {
        s->dir[--n] = '\0';
    }
    const char * slash = strrchr(s->dir, '/');
    const char * name  = slash ? slash + 1 : s->dir;
    if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
        st = osc_error(OSCAR_ERR_INVALID, "%s: not a directory name that can be replaced", dir);
        goto fail;
    }
    s->parent = dir_of(s->dir);
    stale_tmp = sibling_pattern(s->dir, ".", ".tmp.");
    stale_old = sibling_pattern(s->dir, ".", ".old.");
    own = malloc(strlen(name) + 32);
    if (!s->parent || !stale_tmp || !stale_old || !own) {
        goto fail;
    }
    sprintf(own, "%s%ld", stale_tmp, (long) getpid());
    s->tmp = osc_path_join(s->parent, own);
    sprintf(own, "%s%ld", stale_old, (long) getpid());
    s->old = osc_path_join(s->parent, own);
    if (!s->tmp || !s->old) {
        goto fail;
    }
    if ((st = osc_mkdirs(s->parent)) != OSCAR_OK) {
        goto fail;
    }
    remove_stale(s->parent, stale_tmp);
    remove_stale(s->parent, stale_old);
    if ((st = check_dest(s->dir, what, files)) != OSCAR_OK) {
        goto fail;
    }
    remove_path(s->tmp); // this process's own leftover, if any
    if (mkdir(s->tmp, 0755) != 0) {
        st = osc_error(OSCAR_ERR_IO, "%s: cannot create a directory in %s: %s", s->dir, s->parent, strerror(errno));
        goto fail;
    }
    free(stale_tmp);
    free(stale_old);
    free(own);
    return OSCAR_OK;
fail:
    if (st == OSCAR_ERR_NOMEM) {
        osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", dir);
    }
    free(stale_tmp);
    free(stale_old);
    free(own);
    stage_free(s);
    return st;
}

void osc_dir_stage_abort(struct osc_dir_stage * s) {
    if (s->tmp) {
        remove_path(s->tmp);
    }
    stage_free(s);
}

// Fallback where the filesystem cannot exchange: move the old directory aside, then
// the new one in (a kill in between leaves both, as hidden siblings, and no <dir>).
static enum oscar_status replace_by_renames(const struct osc_dir_stage * s) {
    if (rename(s->dir, s->old) != 0) {
        return osc_error(OSCAR_ERR_IO, "%s: cannot move the old directory aside: %s", s->dir, strerror(errno));
    }
    if (rename(s->tmp, s->dir) != 0) {
        enum oscar_status st = osc_error(OSCAR_ERR_IO, "%s: cannot put the new directory in place: %s", s->dir,
                                         strerror(errno));
        if (rename(s->old, s->dir) != 0) {
            osc_warn("%s: its previous contents are in %s", s->dir, s->old);
        }
        return st;
    }
    remove_path(s->old);
    return OSCAR_OK;
}

enum oscar_status osc_dir_stage_commit(struct osc_dir_stage * s) {
    enum oscar_status st = OSCAR_OK;
    fsync_this_dir(s->tmp);
    // after an exchange the staging name holds the old contents, removed below
    if (renameat2(AT_FDCWD, s->tmp, AT_FDCWD, s->dir, RENAME_EXCHANGE) != 0) {
        if (errno == ENOENT) {
            if (rename(s->tmp, s->dir) != 0) {
                st = osc_error(OSCAR_ERR_IO, "%s: rename failed: %s", s->dir, strerror(errno));
            }
        } else if (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
            st = replace_by_renames(s);
        } else {
            st = osc_error(OSCAR_ERR_IO, "%s: cannot put the new directory in place: %s", s->dir, strerror(errno));
        }
    }
    if (st == OSCAR_OK) {
        fsync_this_dir(s->parent);
    }
    osc_dir_stage_abort(s);
    return st;
}

enum oscar_status osc_dir_check_dest(const char * dir, const char * what, const char * const * files) {
    struct osc_dir_stage s;
    enum oscar_status st = osc_dir_stage_open(&s, dir, what, files);
    if (st == OSCAR_OK) {
        osc_dir_stage_abort(&s);
    }
    return st;
}
