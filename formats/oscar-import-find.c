// oscar-import-find.c - which files an import source names (see oscar-import.h).
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/oscar-import.h"
#include "util/fs.h"

static bool has_suffix(const char * s, const char * suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

static const char * base_of(const char * path) {
    const char * b = strrchr(path, '/');
    return b ? b + 1 : path;
}

static bool is_dir(const char * path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

// The one file "<prefix>*.pt" in dir into *out (NULL when none; an error when several).
static enum oscar_status find_one(const char * dir, const char * prefix, char ** out) {
    DIR * d = opendir(dir);
    *out    = NULL;
    if (!d) return osc_error(OSCAR_ERR_IO, "%s: cannot open: %s", dir, strerror(errno));
    enum oscar_status st = OSCAR_OK;
    struct dirent *   e;
    char *            other = NULL;
    while ((e = readdir(d)) && st == OSCAR_OK) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) || !has_suffix(e->d_name, ".pt")) continue;
        if (*out) {
            other = strdup(e->d_name);
            st    = osc_error(OSCAR_ERR_INVALID, "%s: more than one %s*.pt (%s, %s): name the files", dir, prefix,
                              base_of(*out), other ? other : "?");
            break;
        }
        if (!(*out = osc_path_join(dir, e->d_name))) st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    closedir(d);
    free(other);
    if (st != OSCAR_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}

static char * dir_of(const char * path) {
    const char * slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    return strndup(path, slash == path ? 1 : (size_t) (slash - path));
}

bool oscar_import_is_source(const char * path) {
    if (!is_dir(path)) return has_suffix(path, ".pt");
    char * st = osc_path_join(path, OSCAR_ARTIFACT_TENSORS);
    struct stat sb;
    bool        artifact = st && stat(st, &sb) == 0;
    free(st);
    if (artifact) return false;
    char * k = NULL, * v = NULL;
    bool   any = (find_one(path, "k_rotation", &k) != OSCAR_OK || k) || (find_one(path, "v_rotation", &v) != OSCAR_OK || v);
    osc_error_clear();
    free(k);
    free(v);
    return any;
}

// src is one of the pair: find its partner beside it.
static enum oscar_status partner(const char * src, char ** k, char ** v) {
    const char * b    = base_of(src);
    bool         is_k = !strncmp(b, "k_rotation", 10), is_v = !strncmp(b, "v_rotation", 10);
    if (!is_k && !is_v)
        return osc_error(OSCAR_ERR_INVALID, "%s: cannot tell whether it is the K or the V rotation (names start with "
                         "k_rotation or v_rotation); give both files, K first", src);
    char * dir = dir_of(src), * other = NULL;
    if (!dir) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    enum oscar_status st = find_one(dir, is_k ? "v_rotation" : "k_rotation", &other);
    if (st == OSCAR_OK && !other)
        st = osc_error(OSCAR_ERR_NOT_FOUND, "%s: no %s*.pt beside it to pair with", src, is_k ? "v_rotation" : "k_rotation");
    free(dir);
    if (st != OSCAR_OK) return st;
    *k = is_k ? strdup(src) : other;
    *v = is_k ? other : strdup(src);
    return *k && *v ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "out of memory");
}

enum oscar_status oscar_import_find(const char * src, const char * src2, char ** k, char ** v, char ** k_mean) {
    enum oscar_status st = OSCAR_OK;
    *k = *v = *k_mean = NULL;
    struct stat sb;
    if (stat(src, &sb) != 0) return osc_error(OSCAR_ERR_NOT_FOUND, "%s: %s", src, strerror(errno));
    if (src2) {
        if (S_ISDIR(sb.st_mode)) return osc_error(OSCAR_ERR_INVALID, "%s: a directory; give two .pt files or one directory", src);
        if (!strncmp(base_of(src), "v_rotation", 10) && !strncmp(base_of(src2), "k_rotation", 10))
            return osc_error(OSCAR_ERR_INVALID, "%s, %s: the K file comes first", src, src2);
        *k = strdup(src);
        *v = strdup(src2);
        if (!*k || !*v) st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
    } else if (S_ISDIR(sb.st_mode)) {
        if ((st = find_one(src, "k_rotation", k)) == OSCAR_OK && (st = find_one(src, "v_rotation", v)) == OSCAR_OK &&
            (!*k || !*v))
            st = osc_error(OSCAR_ERR_NOT_FOUND, "%s: holds no %s*.pt (an import source has k_rotation*.pt and "
                           "v_rotation*.pt)", src, *k ? "v_rotation" : "k_rotation");
        if (st == OSCAR_OK) st = find_one(src, "k_mean", k_mean);
    } else {
        st = partner(src, k, v);
        char * dir = st == OSCAR_OK ? dir_of(*k) : NULL;
        if (dir) st = find_one(dir, "k_mean", k_mean);
        free(dir);
    }
    if (st != OSCAR_OK) {
        free(*k);
        free(*v);
        free(*k_mean);
        *k = *v = *k_mean = NULL;
    }
    return st;
}
