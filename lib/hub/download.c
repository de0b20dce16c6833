// download.c - hf_hub_download in C: HEAD /resolve/ for the metadata
// (X-Repo-Commit, X-Linked-Etag/ETag, X-Linked-Size, Location), then GET into
// blobs/<etag>.incomplete with Range resume, sha256 (LFS) or git-sha1 check,
// rename into blobs/, relative symlink from snapshots/. Or into --local-dir.
// Refuses: answers without X-Repo-Commit (not the Hub), size or hash
// mismatches (the partial file is deleted, nothing enters the cache).
#include "hub/hub-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/fs.h"
#include "util/log.h"

struct meta {
    char    commit[41];
    char *  etag;
    char *  url;  // where the body is fetched from
    int64_t size;
};

static void meta_free(struct meta * m) {
    free(m->etag);
    free(m->url);
    memset(m, 0, sizeof *m);
}

// HEAD the /resolve/ URL. Same-origin redirects (renamed repos) are
// followed; a cross-origin one is the CDN location of the body.
static enum oscar_status probe(struct oscar_hub * hub, const char * repo_id, const char * rev, const char * path,
                               struct meta * m) {
    char *               url = osc_url_resolve(hub->endpoint, repo_id, rev, path);
    struct osc_http_resp r;
    osc_http_resp_reset(&r);
    enum oscar_status st = url ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "out of memory");
    char              what[1024];
    snprintf(what, sizeof what, "%s@%s: %s", repo_id, rev, path);
    for (int hop = 0; st == OSCAR_OK; hop++) {
        struct osc_http_req q = { .method = "HEAD", .url = url, .upload_fd = -1, .sink_fd = -1, .auth = 1 };
        if ((st = osc_http_request(hub, &q, &r)) != OSCAR_OK) {
            st = osc_error_prefix(st, "%s", what);
            break;
        }
        int redirect = r.status >= 300 && r.status < 400 && r.location;
        if (redirect && !osc_url_is_http(r.location)) {
            st = osc_error(OSCAR_ERR_FORMAT, "%s: refusing a redirect to '%.200s' (only http and https)", what,
                           r.location);
            break;
        }
        if (!redirect || !osc_url_same_origin(r.location, hub->endpoint) || r.repo_commit || hop > 5) {
            break;
        }
        free(url);
        url = strdup(r.location);
    }
    if (st != OSCAR_OK) {
        goto out;
    }
    if (r.status == 404 && r.repo_commit && osc_is_commit_hash(r.repo_commit) &&
        (!r.error_code || !strcmp(r.error_code, "EntryNotFound"))) {
        memcpy(m->commit, r.repo_commit, 41);
        st = osc_error(OSCAR_ERR_NOT_FOUND, "%s: no such file at commit %s%s%s%s", what, r.repo_commit,
                       r.request_id ? " (request id " : "", r.request_id ? r.request_id : "", r.request_id ? ")" : "");
        goto out;
    }
    if (r.status >= 400 || (r.status >= 300 && !r.location)) {
        st = osc_http_error(&r, what);
        goto out;
    }
    if (!r.repo_commit || !osc_is_commit_hash(r.repo_commit)) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: answer has no X-Repo-Commit header: not from the Hub "
                       "(a proxy or firewall?)", what);
        goto out;
    }
    const char * et = r.linked_etag ? r.linked_etag : r.etag;
    memcpy(m->commit, r.repo_commit, 41);
    m->etag = et ? osc_etag_normalize(et) : NULL;
    m->size = r.linked_size >= 0 ? r.linked_size : (r.status == 200 ? r.content_length : -1);
    m->url  = strdup(r.status >= 300 ? r.location : url);
    if (!m->etag || (strlen(m->etag) != 40 && strlen(m->etag) != 64) ||
        strspn(m->etag, "0123456789abcdef") != strlen(m->etag)) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: missing or malformed ETag '%s'", what, et ? et : "");
    } else if (m->size < 0) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: answer gives no file size", what);
    }
out:
    if (st != OSCAR_OK && st != OSCAR_ERR_NOT_FOUND) {
        meta_free(m);
    }
    osc_http_resp_free(&r);
    free(url);
    return st;
}

static int64_t fd_size(int fd) {
    struct stat sb;
    return fstat(fd, &sb) == 0 ? (int64_t) sb.st_size : -1;
}

// Checks that the 206 answer starts where we asked.
static int range_ok(const struct osc_http_resp * r, int64_t have) {
    if (r->status != 206) {
        return 1;
    }
    long long a = -1;
    return r->content_range && sscanf(r->content_range, "bytes %lld-", &a) == 1 && a == have;
}

// GETs `m->url` into `part` (resuming), verifies it, renames it to `dest`.
static enum oscar_status fetch(struct oscar_hub * hub, const struct meta * m, const char * part, const char * dest,
                               const char * label) {
    enum oscar_status st = OSCAR_OK;
    int               fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        return osc_error(OSCAR_ERR_IO, "%s: %s", part, strerror(errno));
    }
    int64_t have = fd_size(fd);
    if (have > m->size && ftruncate(fd, 0) == 0) {
        have = 0;
    }
    double deadline = osc_now() + hub->deadline; // moves on whenever an attempt brought bytes
    for (int attempt = 0; have < m->size; attempt++) {
        if (lseek(fd, have, SEEK_SET) != have) {
            st = osc_error(OSCAR_ERR_IO, "%s: seek: %s", part, strerror(errno));
            goto fail;
        }
        if (have > 0) {
            osc_info("%s: resuming at byte %lld", label, (long long) have);
        }
        struct osc_http_resp r;
        osc_http_resp_reset(&r);
        struct osc_http_req q = { .method = "GET", .url = m->url, .upload_fd = -1, .sink_fd = fd, .auth = 1,
                                  .follow = 1, .range_start = have, .progress = hub->progress ? label : NULL,
                                  .progress_total = m->size };
        st              = osc_http_once(hub, &q, &r);
        int transient   = st == OSCAR_ERR_NETWORK || (st == OSCAR_OK && osc_http_retryable(r.status));
        int64_t now     = fd_size(fd);
        if (st == OSCAR_ERR_IO) {
            osc_http_resp_free(&r);
            st = osc_error_prefix(st, "%s -> %s", label, part);
            goto fail;
        }
        if (st == OSCAR_OK && (r.status == 200 || r.status == 206) && !range_ok(&r, have)) {
            st = osc_error(OSCAR_ERR_FORMAT, "%s: server sent Content-Range '%s' for a request from byte %lld",
                           label, r.content_range ? r.content_range : "", (long long) have);
            transient = 1;
            now       = ftruncate(fd, 0) == 0 ? 0 : now;
        } else if (st == OSCAR_OK && r.status != 200 && r.status != 206 && !transient) {
            char what[600];
            snprintf(what, sizeof what, "%s: download", label);
            st = r.status == 416 ? OSCAR_ERR_HTTP : osc_http_error(&r, what);
            if (r.status == 416 && ftruncate(fd, 0) == 0) { // our partial file is bad: start over
                st        = osc_error(OSCAR_ERR_HTTP, "%s: HTTP 416 for a resume", label);
                transient = 1;
                now       = 0;
            } else {
                osc_http_resp_free(&r);
                goto fail;
            }
        }
        double wait = osc_http_backoff(hub, attempt, st == OSCAR_OK ? &r : NULL);
        osc_http_resp_free(&r);
        if (now > have) {
            deadline = osc_now() + hub->deadline;
        }
        have = now;
        if (have > m->size) {
            st = osc_error(OSCAR_ERR_FORMAT, "%s: server sent %lld bytes, expected %lld", label, (long long) have,
                           (long long) m->size);
            goto fail_delete;
        }
        if (have == m->size) {
            st = OSCAR_OK;
            break;
        }
        if (st == OSCAR_OK) { // complete-looking answer that fell short
            st = osc_error(OSCAR_ERR_NETWORK, "%s: body ended at byte %lld of %lld", label, (long long) have,
                           (long long) m->size);
            transient = 1;
        }
        if (!transient) {
            goto fail;
        }
        if (attempt >= hub->max_retries) {
            st = osc_error_prefix(st, "%s: giving up after %d attempts", label, attempt + 1);
            goto fail;
        }
        if (osc_now() + wait > deadline) {
            st = osc_error_prefix(st, "%s: giving up: no progress, and a retry in %.1fs would pass the %.0fs "
                                  "deadline (OSCAR_HUB_DEADLINE)", label, wait, hub->deadline);
            goto fail;
        }
        osc_warn("%s, retrying in %.1fs (%d/%d)", oscar_last_error(), wait, attempt + 1, hub->max_retries);
        osc_sleep(wait);
    }
    char sha256[65], sha1[41];
    if ((st = osc_hash_file(part, sha256, sha1, NULL)) != OSCAR_OK) {
        goto fail;
    }
    const char * got = strlen(m->etag) == 64 ? sha256 : sha1;
    if (strcmp(got, m->etag)) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: %s of the download is %s, the Hub says %s; discarded", label,
                       strlen(m->etag) == 64 ? "sha256" : "git blob sha1", got, m->etag);
        goto fail_delete;
    }
    if (fsync(fd) != 0) {
        st = osc_error(OSCAR_ERR_IO, "%s: fsync: %s", part, strerror(errno));
        goto fail_delete;
    }
    close(fd);
    if (rename(part, dest) != 0) {
        st = osc_error(OSCAR_ERR_IO, "%s -> %s: %s", part, dest, strerror(errno));
        unlink(part);
    }
    return st;
fail_delete:
    unlink(part);
fail:
    if (st == OSCAR_ERR_IO) {
        unlink(part); // out of space or unwritable: do not keep a partial file around
    }
    close(fd);
    return st;
}

static char * strcat3(const char * a, const char * b, const char * c) {
    size_t n   = strlen(a) + strlen(b) + strlen(c) + 1;
    char * out = malloc(n);
    if (out) {
        snprintf(out, n, "%s%s%s", a, b, c);
    }
    return out;
}

static enum oscar_status mkparent(const char * path) {
    char * d = strdup(path);
    if (!d) {
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    char * s = strrchr(d, '/');
    enum oscar_status st = OSCAR_OK;
    if (s && s != d) {
        *s = '\0';
        st = osc_mkdirs(d);
    }
    free(d);
    return st;
}

static enum oscar_status to_cache(struct oscar_hub * hub, const char * repo_id, const char * rev, const char * path,
                                  const struct meta * m, char ** out_path) {
    char * rd    = osc_cache_repo_dir(hub->cache_dir, repo_id);
    char * blob  = rd ? osc_cache_blob_path(rd, m->etag) : NULL;
    char * part  = blob ? strcat3(blob, ".incomplete", "") : NULL;
    int    lock  = -1;
    enum oscar_status st = OSCAR_OK;
    if (!part) {
        st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (strcmp(rev, m->commit) && (st = osc_cache_write_ref(rd, rev, m->commit)) != OSCAR_OK) {
        goto out;
    }
    if ((st = mkparent(blob)) != OSCAR_OK || (st = osc_cache_lock(hub->cache_dir, repo_id, m->etag, &lock))) {
        goto out;
    }
    if (access(blob, F_OK) != 0) {
        char label[512];
        snprintf(label, sizeof label, "%s", path);
        if ((st = fetch(hub, m, part, blob, label)) != OSCAR_OK) {
            goto out;
        }
    }
    if ((st = osc_cache_link_snapshot(rd, m->commit, path, m->etag)) == OSCAR_OK) {
        *out_path = osc_cache_snapshot_path(rd, m->commit, path);
    }
out:
    osc_cache_unlock(lock);
    free(rd);
    free(blob);
    free(part);
    return st;
}

// --local-dir: the file at local_dir/path, metadata (commit, etag, time) in
// local_dir/.cache/huggingface/download/path.metadata as huggingface_hub does.
static enum oscar_status read_local_meta(const char * meta_path, char * etag, size_t cap) {
    char * text = NULL;
    size_t n    = 0;
    if (access(meta_path, R_OK) != 0 || osc_read_file(meta_path, 4096, &text, &n) != OSCAR_OK) {
        osc_error_clear();
        return OSCAR_ERR_NOT_FOUND;
    }
    char c[64] = "", e[80] = "";
    int  ok    = sscanf(text, "%63s %79s", c, e) == 2;
    free(text);
    if (!ok) {
        return OSCAR_ERR_NOT_FOUND;
    }
    snprintf(etag, cap, "%s", e);
    return OSCAR_OK;
}

static enum oscar_status to_local_dir(struct oscar_hub * hub, const char * local_dir, const char * path,
                                      const struct meta * m, char ** out_path) {
    char * dest = osc_path_join(local_dir, path);
    char * base = osc_path_join(local_dir, ".cache/huggingface/download");
    char * mp   = base ? strcat3(base, "/", path) : NULL;
    char * meta = mp ? strcat3(mp, ".metadata", "") : NULL;
    char * part = mp ? strcat3(mp, ".", m->etag) : NULL;
    char * part2 = part ? strcat3(part, ".incomplete", "") : NULL;
    char * lockp = mp ? strcat3(mp, ".lock", "") : NULL;
    enum oscar_status st = OSCAR_OK;
    int  lock = -1;
    if (!dest || !meta || !part2 || !lockp) {
        st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((st = mkparent(dest)) != OSCAR_OK || (st = mkparent(meta)) != OSCAR_OK) {
        goto out;
    }
    lock = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock < 0 || flock(lock, LOCK_EX) != 0) {
        st = osc_error(OSCAR_ERR_IO, "%s: %s", lockp, strerror(errno));
        goto out;
    }
    char        have[80] = "";
    struct stat sb;
    int fresh = read_local_meta(meta, have, sizeof have) == OSCAR_OK && !strcmp(have, m->etag) &&
                stat(dest, &sb) == 0 && (int64_t) sb.st_size == m->size;
    if (!fresh) {
        if ((st = fetch(hub, m, part2, dest, path)) != OSCAR_OK) {
            goto out;
        }
        char line[256];
        int  n = snprintf(line, sizeof line, "%s\n%s\n%.6f\n", m->commit, m->etag, (double) time(NULL));
        if ((st = osc_write_file_atomic(meta, line, (size_t) n)) != OSCAR_OK) {
            goto out;
        }
    }
    *out_path = dest;
    dest      = NULL;
out:
    if (lock >= 0) {
        close(lock);
    }
    free(dest);
    free(base);
    free(mp);
    free(meta);
    free(part);
    free(part2);
    free(lockp);
    return st;
}

enum oscar_status oscar_hub_download(struct oscar_hub * hub, const char * repo_id, const char * revision,
                                     const char * path, const char * local_dir, char ** out_path) {
    const char * rev = revision && *revision ? revision : "main";
    *out_path        = NULL;
    enum oscar_status st = osc_check_repo_rev(repo_id, rev);
    if (st != OSCAR_OK) {
        return st;
    }
    if (!osc_repo_path_valid(path)) {
        return osc_error(OSCAR_ERR_INVALID, "'%s': not a valid path inside a repo", path);
    }
    if (local_dir && (st = osc_local_dir_check(local_dir, path)) != OSCAR_OK) {
        return st;
    }
    if (hub->offline) {
        if (local_dir) {
            char * dest = osc_path_join(local_dir, path);
            if (dest && access(dest, F_OK) == 0) {
                *out_path = dest;
                return OSCAR_OK;
            }
            free(dest);
            return osc_error(OSCAR_ERR_NOT_FOUND, "%s: not in %s and offline (HF_HUB_OFFLINE)", path, local_dir);
        }
        st = osc_cache_lookup(hub->cache_dir, repo_id, rev, path, out_path);
        return st == OSCAR_OK ? st : osc_error_prefix(st, "offline (HF_HUB_OFFLINE)");
    }
    struct meta m = { .size = -1 };
    st            = probe(hub, repo_id, rev, path, &m);
    if (st == OSCAR_ERR_NOT_FOUND && m.commit[0] && !local_dir) {
        char * rd = osc_cache_repo_dir(hub->cache_dir, repo_id);
        char   msg[1024];
        snprintf(msg, sizeof msg, "%s", oscar_last_error());
        if (rd && strcmp(rev, m.commit)) {
            osc_cache_write_ref(rd, rev, m.commit);
        }
        if (rd) {
            osc_cache_mark_no_exist(rd, m.commit, path);
        }
        free(rd);
        st = osc_error(OSCAR_ERR_NOT_FOUND, "%s", msg);
    } else if (st == OSCAR_ERR_NETWORK && !local_dir) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", oscar_last_error());
        if (osc_cache_lookup(hub->cache_dir, repo_id, rev, path, out_path) == OSCAR_OK) {
            osc_warn("%s; using the cached copy", msg);
            st = OSCAR_OK;
        } else {
            st = osc_error(OSCAR_ERR_NETWORK, "%s", msg);
        }
    } else if (st == OSCAR_OK) {
        st = local_dir ? to_local_dir(hub, local_dir, path, &m, out_path)
                       : to_cache(hub, repo_id, rev, path, &m, out_path);
    }
    meta_free(&m);
    return st;
}
