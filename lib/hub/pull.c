// pull.c - snapshot download: resolve the revision to one commit, list the
// tree under a prefix, download every file at that commit. Offline, walks
// the cached snapshot instead.
#include "hub/hub-internal.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/fs.h"
#include "util/log.h"

static int under(const char * path, const char * prefix) {
    size_t n = strlen(prefix);
    return n == 0 || (!strncmp(path, prefix, n) && (path[n] == '/' || path[n] == '\0'));
}

// Counts regular files (through symlinks) below `dir`; -1 if it is missing.
static int count_files(const char * dir) {
    DIR * d = opendir(dir);
    if (!d) {
        return -1;
    }
    int             n = 0;
    struct dirent * e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) {
            continue;
        }
        char *      p = osc_path_join(dir, e->d_name);
        struct stat sb;
        if (p && stat(p, &sb) == 0) {
            n += S_ISDIR(sb.st_mode) ? (count_files(p) > 0 ? count_files(p) : 0) : 1;
        }
        free(p);
    }
    closedir(d);
    return n;
}

static enum oscar_status pull_offline(struct oscar_hub * hub, const char * repo_id, const char * rev,
                                      const char * prefix, const char * local_dir, char ** out_dir, int * n) {
    if (local_dir) {
        *out_dir = strdup(local_dir);
        *n       = count_files(local_dir);
        return *n > 0 ? OSCAR_OK : osc_error(OSCAR_ERR_NOT_FOUND, "%s: nothing there and offline", local_dir);
    }
    char * rd = NULL, commit[41];
    enum oscar_status st = osc_cache_offline_repo(hub->cache_dir, repo_id, rev, &rd, commit);
    if (st != OSCAR_OK) return st;
    char * snap = osc_cache_snapshot_path(rd, commit, prefix && *prefix ? prefix : ".");
    *n          = snap ? count_files(snap) : -1;
    if (*n <= 0) {
        st = osc_error(OSCAR_ERR_NOT_FOUND, "%s@%s: %s not in the cache and offline", repo_id, rev,
                       snap ? snap : "?");
        free(snap);
        goto out;
    }
    char * root = osc_cache_snapshot_path(rd, commit, "");
    if (root) {
        root[strlen(root) - 1] = '\0'; // drop the trailing '/'
    }
    *out_dir = root;
    free(snap);
out:
    free(rd);
    return st;
}

// Sets *out_dir to local_dir or the snapshot root of `commit`.
static enum oscar_status pull_finish(struct oscar_hub * hub, const char * repo_id, const char * commit,
                                     const char * local_dir, char ** out_dir, enum oscar_status st) {
    if (st != OSCAR_OK) {
        return st;
    }
    if (local_dir) {
        *out_dir = strdup(local_dir);
    } else {
        char * rd = osc_cache_repo_dir(hub->cache_dir, repo_id);
        *out_dir  = rd ? osc_cache_snapshot_path(rd, commit, "") : NULL;
        if (*out_dir) {
            (*out_dir)[strlen(*out_dir) - 1] = '\0';
        }
        free(rd);
    }
    return *out_dir ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "out of memory");
}

enum oscar_status oscar_hub_pull(struct oscar_hub * hub, const char * repo_id, const char * revision,
                                 const char * prefix, const char * local_dir, char ** out_dir, int * n_files) {
    const char * rev = revision && *revision ? revision : "main";
    const char * pre = prefix ? prefix : "";
    *out_dir         = NULL;
    *n_files         = 0;
    enum oscar_status st = osc_check_repo_rev(repo_id, rev);
    if (st != OSCAR_OK) {
        return st;
    }
    if (*pre && !osc_repo_path_valid(pre)) {
        return osc_error(OSCAR_ERR_INVALID, "'%s': not a valid path inside a repo", pre);
    }
    if (hub->offline) {
        return pull_offline(hub, repo_id, rev, pre, local_dir, out_dir, n_files);
    }
    char commit[41];
    st = osc_api_resolve_revision(hub, repo_id, rev, commit);
    if (st == OSCAR_ERR_NETWORK && !local_dir) {
        osc_warn("%s; trying the cache", oscar_last_error());
        return pull_offline(hub, repo_id, rev, pre, local_dir, out_dir, n_files);
    }
    if (st != OSCAR_OK) {
        return st;
    }
    struct oscar_hub_listing l;
    if ((st = oscar_hub_list(hub, repo_id, commit, pre, &l)) != OSCAR_OK && st != OSCAR_ERR_NOT_FOUND) {
        return st;
    }
    int n_listed = 0;
    for (int i = 0; st == OSCAR_OK && i < l.n; i++) {
        n_listed += !l.entries[i].is_dir && under(l.entries[i].path, pre);
    }
    if (*pre && n_listed == 0) { // the prefix may name one file
        char * p = NULL;
        oscar_hub_listing_free(&l);
        if ((st = oscar_hub_download(hub, repo_id, commit, pre, local_dir, &p)) != OSCAR_OK) {
            return st;
        }
        free(p);
        if (!local_dir && strcmp(rev, commit)) {
            char * rd0 = osc_cache_repo_dir(hub->cache_dir, repo_id);
            st         = rd0 ? osc_cache_write_ref(rd0, rev, commit) : OSCAR_ERR_NOMEM;
            free(rd0);
        }
        *n_files = 1;
        return pull_finish(hub, repo_id, commit, local_dir, out_dir, st);
    }
    char * rd = osc_cache_repo_dir(hub->cache_dir, repo_id);
    if (!rd) {
        st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
    } else if (!local_dir && strcmp(rev, commit)) {
        st = osc_cache_write_ref(rd, rev, commit);
    }
    for (int i = 0; i < l.n && st == OSCAR_OK; i++) {
        if (l.entries[i].is_dir || !under(l.entries[i].path, pre)) {
            continue;
        }
        char * p = NULL;
        st       = oscar_hub_download(hub, repo_id, commit, l.entries[i].path, local_dir, &p);
        free(p);
        *n_files += st == OSCAR_OK;
    }
    if (st == OSCAR_OK && *n_files == 0) {
        st = osc_error(OSCAR_ERR_NOT_FOUND, "%s@%s: no files under '%s'", repo_id, rev, pre);
    }
    free(rd);
    oscar_hub_listing_free(&l);
    return pull_finish(hub, repo_id, commit, local_dir, out_dir, st);
}
