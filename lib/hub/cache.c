// cache.c - the shared Hugging Face cache layout (docs/ecosystem.md §2):
// models--owner--name/{blobs,refs,snapshots,.no_exist}, relative symlinks,
// atomic ref writes, .locks/<repo folder>/<etag>.lock taken with flock, and
// the per-commit tree listing trees/<commit>.json that huggingface_hub (2.4)
// keeps to tell a complete snapshot from a partial one.
// Refuses repo paths with "..", absolute paths or empty components.
#include "hub/hub-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fs.h"
#include "util/log.h"

int osc_is_commit_hash(const char * s) {
    size_t n = 0;
    for (; s[n]; n++) {
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'))) {
            return 0;
        }
    }
    return n == 40;
}

static char * fmt(const char * f, const char * a, const char * b, const char * c) {
    size_t n   = strlen(f) + strlen(a) + strlen(b) + strlen(c) + 1;
    char * out = malloc(n);
    if (out) {
        snprintf(out, n, f, a, b, c);
    }
    return out;
}

char * osc_cache_repo_folder(const char * repo_id) {
    char * out = fmt("models--%s%s%s", repo_id, "", "");
    if (!out) {
        return NULL;
    }
    char * slash = strchr(out, '/');
    if (slash) { // "a/b" -> "a--b"
        size_t n = strlen(out);
        char * r = realloc(out, n + 2);
        if (!r) {
            free(out);
            return NULL;
        }
        out   = r;
        slash = strchr(out, '/');
        memmove(slash + 2, slash + 1, strlen(slash + 1) + 1);
        slash[0] = '-';
        slash[1] = '-';
    }
    return out;
}

char * osc_cache_repo_dir(const char * cache_dir, const char * repo_id) {
    char * folder = osc_cache_repo_folder(repo_id);
    char * out    = folder ? osc_path_join(cache_dir, folder) : NULL;
    free(folder);
    return out;
}

char * osc_cache_blob_path(const char * repo_dir, const char * etag) {
    return fmt("%s/blobs/%s%s", repo_dir, etag, "");
}

char * osc_cache_snapshot_path(const char * repo_dir, const char * commit, const char * path) {
    return fmt("%s/snapshots/%s/%s", repo_dir, commit, path);
}

char * osc_cache_no_exist_path(const char * repo_dir, const char * commit, const char * path) {
    return fmt("%s/.no_exist/%s/%s", repo_dir, commit, path);
}

char * osc_cache_symlink_target(const char * path, const char * etag) {
    size_t depth = 0;
    for (const char * p = path; *p; p++) {
        depth += *p == '/';
    }
    char * out = malloc(3 * (depth + 2) + strlen("blobs/") + strlen(etag) + 1);
    if (!out) {
        return NULL;
    }
    char * o = out;
    for (size_t i = 0; i < depth + 2; i++) {
        memcpy(o, "../", 3);
        o += 3;
    }
    sprintf(o, "blobs/%s", etag);
    return out;
}

// mkdir -p of the parent directory of `path`.
static enum oscar_status mkparent(const char * path) {
    char * dir = strdup(path);
    if (!dir) {
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    char * slash = strrchr(dir, '/');
    enum oscar_status st = OSCAR_OK;
    if (slash && slash != dir) {
        *slash = '\0';
        st     = osc_mkdirs(dir);
    }
    free(dir);
    return st;
}

enum oscar_status osc_cache_read_ref(const char * repo_dir, const char * rev, char commit[41]) {
    enum oscar_status st = osc_check_repo_rev(NULL, rev); // refs/<rev> must stay inside refs/
    if (st != OSCAR_OK) {
        return st;
    }
    char * path = fmt("%s/refs/%s%s", repo_dir, rev, "");
    if (!path) {
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    char * text = NULL;
    size_t n    = 0;
    st          = OSCAR_ERR_NOT_FOUND;
    if (access(path, F_OK) == 0 && osc_read_file(path, 4096, &text, &n) == OSCAR_OK) {
        size_t k = strspn(text, "0123456789abcdef");
        if (k == 40) {
            memcpy(commit, text, 40);
            commit[40] = '\0';
            st         = OSCAR_OK;
        } else {
            st = osc_error(OSCAR_ERR_FORMAT, "%s: not a commit hash", path);
        }
    } else {
        osc_error(OSCAR_ERR_NOT_FOUND, "%s: no such ref in the cache", path);
    }
    free(text);
    free(path);
    return st;
}

enum oscar_status osc_cache_write_ref(const char * repo_dir, const char * rev, const char * commit) {
    enum oscar_status st = osc_check_repo_rev(NULL, rev);
    if (st != OSCAR_OK) {
        return st;
    }
    char cur[41];
    if (osc_cache_read_ref(repo_dir, rev, cur) == OSCAR_OK && !strcmp(cur, commit)) {
        return OSCAR_OK;
    }
    osc_error_clear();
    char * path = fmt("%s/refs/%s%s", repo_dir, rev, "");
    if (!path) {
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    st = mkparent(path);
    if (st == OSCAR_OK) {
        st = osc_write_file_atomic(path, commit, strlen(commit)); // no newline, as huggingface_hub
    }
    free(path);
    return st;
}

enum oscar_status osc_cache_link_snapshot(const char * repo_dir, const char * commit, const char * path,
                                          const char * etag) {
    char *            snap   = osc_cache_snapshot_path(repo_dir, commit, path);
    char *            target = osc_cache_symlink_target(path, etag);
    char *            tmp    = snap ? fmt("%s.tmp-link.%s%s", snap, etag, "") : NULL;
    enum oscar_status st     = OSCAR_OK;
    if (!snap || !target || !tmp) {
        st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((st = mkparent(snap)) != OSCAR_OK) {
        goto out;
    }
    unlink(tmp);
    if (symlink(target, tmp) != 0 || rename(tmp, snap) != 0) {
        st = osc_error(OSCAR_ERR_IO, "%s: cannot link to %s: %s", snap, target, strerror(errno));
        unlink(tmp);
    }
out:
    free(snap);
    free(target);
    free(tmp);
    return st;
}

enum oscar_status osc_cache_mark_no_exist(const char * repo_dir, const char * commit, const char * path) {
    char * p = osc_cache_no_exist_path(repo_dir, commit, path);
    if (!p) {
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    enum oscar_status st = mkparent(p);
    if (st == OSCAR_OK) {
        int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            st = osc_error(OSCAR_ERR_IO, "%s: %s", p, strerror(errno));
        } else {
            close(fd);
        }
    }
    free(p);
    return st;
}

enum oscar_status osc_cache_offline_repo(const char * cache_dir, const char * repo_id, const char * rev,
                                         char ** repo_dir, char commit[41]) {
    *repo_dir                = NULL;
    enum oscar_status status = osc_check_repo_rev(repo_id, rev);
    if (status != OSCAR_OK) return status;
    char * rd = osc_cache_repo_dir(cache_dir, repo_id);
    if (!rd) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    if (osc_is_commit_hash(rev)) {
        memcpy(commit, rev, 41);
    } else if (osc_cache_read_ref(rd, rev, commit) != OSCAR_OK) {
        enum oscar_status st = osc_error(OSCAR_ERR_NOT_FOUND, "%s@%s: revision not in the cache (%s/refs/%s)",
                                         repo_id, rev, rd, rev);
        free(rd);
        return st;
    }
    *repo_dir = rd;
    return OSCAR_OK;
}

enum oscar_status osc_cache_lookup(const char * cache_dir, const char * repo_id, const char * rev,
                                   const char * path, char ** out) {
    *out = NULL;
    char * rd = NULL, commit[41];
    enum oscar_status st = osc_cache_offline_repo(cache_dir, repo_id, rev, &rd, commit);
    if (st != OSCAR_OK) return st;
    char * snap = osc_cache_snapshot_path(rd, commit, path);
    char * nx   = osc_cache_no_exist_path(rd, commit, path);
    struct stat sb;
    if (snap && stat(snap, &sb) == 0) {
        *out = snap;
        snap = NULL;
    } else if (nx && access(nx, F_OK) == 0) {
        st = osc_error(OSCAR_ERR_NOT_FOUND, "%s@%s: %s does not exist at commit %s", repo_id, rev, path, commit);
    } else {
        st = osc_error(OSCAR_ERR_NOT_FOUND, "%s@%s: %s is not in the cache (%s)", repo_id, rev, path,
                       snap ? snap : "?");
    }
    free(snap);
    free(nx);
    free(rd);
    return st;
}

// trees/<commit>.json, as huggingface_hub writes it: {"format_version": 1, "files": {path: {"size",
// "blob_id", "lfs_sha256"?, "lfs_size"?}}}, files only, sorted.
#define TREE_FORMAT_VERSION 1

static char * tree_path(const char * repo_dir, const char * commit) {
    return fmt("%s/trees/%s.json%s", repo_dir, commit, "");
}

enum oscar_status osc_cache_write_tree(const char * repo_dir, const char * commit,
                                       const struct oscar_hub_listing * l) {
    json_t * files = json_object();
    json_t * root  = json_pack("{s:i, s:o}", "format_version", TREE_FORMAT_VERSION, "files", files);
    for (int i = 0; root && i < l->n; i++) { // json_pack took `files`: freed with root
        const struct oscar_hub_entry * e = &l->entries[i];
        if (e->is_dir) {
            continue;
        }
        if (!e->oid) { // not a listing huggingface_hub could use: write none
            json_decref(root);
            return OSCAR_OK;
        }
        json_t * f = json_pack("{s:I, s:s}", "size", (json_int_t) e->size, "blob_id", e->oid);
        if (f && e->lfs_oid) {
            json_object_set_new(f, "lfs_sha256", json_string(e->lfs_oid));
            json_object_set_new(f, "lfs_size", json_integer((json_int_t) e->size));
        }
        json_object_set_new(files, e->path, f);
    }
    char *            text = root ? json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
    char *            path = tree_path(repo_dir, commit);
    enum oscar_status st   = text && path ? mkparent(path) : osc_error(OSCAR_ERR_NOMEM, "out of memory");
    if (st == OSCAR_OK) {
        st = osc_write_file_atomic(path, text, strlen(text));
    }
    free(text);
    free(path);
    json_decref(root);
    return st;
}

enum oscar_status osc_cache_read_tree(const char * repo_dir, const char * commit, struct oscar_hub_listing * out) {
    memset(out, 0, sizeof *out);
    char * path = tree_path(repo_dir, commit);
    if (!path) {
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    json_error_t e;
    json_t *     root  = access(path, F_OK) == 0 ? json_load_file(path, 0, &e) : NULL;
    json_t *     files = json_object_get(root, "files");
    int          ok    = json_integer_value(json_object_get(root, "format_version")) == TREE_FORMAT_VERSION &&
                         json_is_object(files);
    enum oscar_status st = ok ? OSCAR_OK : OSCAR_ERR_NOT_FOUND;
    const char *      key;
    json_t *          v;
    json_object_foreach(files, key, v) {
        if (!osc_repo_path_valid(key) || !json_is_integer(json_object_get(v, "size"))) {
            st = OSCAR_ERR_NOT_FOUND;
            break;
        }
        struct oscar_hub_entry * ne = realloc(out->entries, (size_t) (out->n + 1) * sizeof *ne);
        if (!ne) {
            st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
            break;
        }
        out->entries               = ne;
        struct oscar_hub_entry * x = &ne[out->n++];
        memset(x, 0, sizeof *x);
        x->path = strdup(key);
        x->size = json_integer_value(json_object_get(v, "size"));
        if (!x->path) {
            st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
            break;
        }
    }
    if (root && st == OSCAR_ERR_NOT_FOUND) {
        osc_warn("%s: ignoring a malformed tree listing", path);
    }
    if (st != OSCAR_OK) {
        oscar_hub_listing_free(out);
    }
    json_decref(root);
    free(path);
    return st;
}

enum oscar_status osc_cache_lock(const char * cache_dir, const char * repo_id, const char * etag, int * fd) {
    char * folder = osc_cache_repo_folder(repo_id);
    char * path   = folder ? fmt("%s/.locks/%s/%s.lock", cache_dir, folder, etag) : NULL;
    enum oscar_status st = OSCAR_OK;
    *fd                  = -1;
    if (!path) {
        st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
    } else if ((st = mkparent(path)) == OSCAR_OK) {
        *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (*fd < 0) {
            st = osc_error(OSCAR_ERR_IO, "%s: %s", path, strerror(errno));
        } else {
            while (flock(*fd, LOCK_EX) != 0) {
                if (errno != EINTR) {
                    st = osc_error(OSCAR_ERR_IO, "%s: flock: %s", path, strerror(errno));
                    close(*fd);
                    *fd = -1;
                    break;
                }
            }
        }
    }
    free(folder);
    free(path);
    return st;
}

void osc_cache_unlock(int fd) {
    if (fd >= 0) {
        flock(fd, LOCK_UN);
        close(fd);
    }
}
