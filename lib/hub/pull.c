// pull.c - snapshot download: resolve the revision to one commit, list the
// whole tree (cached as trees/<commit>.json), download every file under the
// prefix at that commit. Offline, checks the cached snapshot against that
// listing (a partial snapshot is an error naming the missing files), or,
// without one, serves what the snapshot holds.
#include "hub/hub-internal.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fs.h"
#include "util/log.h"

static int under(const char * path, const char * prefix) {
    size_t n = strlen(prefix);
    return n == 0 || (!strncmp(path, prefix, n) && (path[n] == '/' || path[n] == '\0'));
}

// Counts regular files (through symlinks) at or below `path`; -1 if it is missing.
static int count_files(const char * path) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        return -1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        return S_ISREG(sb.st_mode) ? 1 : 0;
    }
    DIR * d = opendir(path);
    if (!d) {
        return -1;
    }
    int             n = 0;
    struct dirent * e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) {
            continue;
        }
        char * p = osc_path_join(path, e->d_name);
        int    k = p ? count_files(p) : -1;
        n += k > 0 ? k : 0;
        free(p);
    }
    closedir(d);
    return n;
}

// With the commit's cached tree listing: every listed file under `prefix`
// must be in the snapshot, else the snapshot is partial (an interrupted
// pull) and the missing files are named. *n = the files checked.
static enum oscar_status check_tree(const char * repo_id, const char * rev, const char * rd, const char * commit,
                                    const struct oscar_hub_listing * tree, const char * prefix, int * n) {
    int  missing = 0;
    char names[512] = "";
    *n              = 0;
    for (int i = 0; i < tree->n; i++) {
        if (!under(tree->entries[i].path, prefix)) {
            continue;
        }
        char *      snap = osc_cache_snapshot_path(rd, commit, tree->entries[i].path);
        struct stat sb;
        if (!snap) {
            return osc_error(OSCAR_ERR_NOMEM, "out of memory");
        }
        if (stat(snap, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            if (missing++ < 3) {
                size_t k = strlen(names);
                snprintf(names + k, sizeof names - k, "%s%s", k ? ", " : "", tree->entries[i].path);
            }
        }
        free(snap);
        (*n)++;
    }
    if (missing) {
        return osc_error(OSCAR_ERR_NOT_FOUND, "%s@%s: the cached snapshot of commit %s is incomplete: %d of %d "
                         "file(s) missing (%s%s); pull again with network access", repo_id, rev, commit, missing, *n,
                         names, missing > 3 ? ", ..." : "");
    }
    return OSCAR_OK;
}

static enum oscar_status pull_offline(struct oscar_hub * hub, const char * repo_id, const char * rev,
                                      const char * prefix, const char * local_dir, char ** out_dir, int * n) {
    if (local_dir) {
        char * p = *prefix ? osc_path_join(local_dir, prefix) : strdup(local_dir);
        *n       = p ? count_files(p) : -1;
        free(p);
        if (*n <= 0) {
            return osc_error(OSCAR_ERR_NOT_FOUND, "%s%s%s: nothing there and offline", local_dir, *prefix ? "/" : "",
                             prefix);
        }
        *out_dir = strdup(local_dir);
        return *out_dir ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    char * rd = NULL, commit[41];
    enum oscar_status st = osc_cache_offline_repo(hub->cache_dir, repo_id, rev, &rd, commit);
    if (st != OSCAR_OK) return st;
    char *                   snap = osc_cache_snapshot_path(rd, commit, prefix);
    char *                   nx   = *prefix ? osc_cache_no_exist_path(rd, commit, prefix) : NULL;
    struct oscar_hub_listing tree;
    if (!snap) {
        st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
    } else if (nx && access(nx, F_OK) == 0) {
        st = osc_error(OSCAR_ERR_NOT_FOUND, "%s@%s: %s does not exist at commit %s", repo_id, rev, prefix, commit);
    } else if ((st = osc_cache_read_tree(rd, commit, &tree)) == OSCAR_OK) {
        st = check_tree(repo_id, rev, rd, commit, &tree, prefix, n);
        oscar_hub_listing_free(&tree);
    } else if (st == OSCAR_ERR_NOT_FOUND) { // no listing (an older cache): what is there is all we know
        *n = count_files(snap);
        st = OSCAR_OK;
    }
    if (st == OSCAR_OK && *n <= 0) {
        st = osc_error(OSCAR_ERR_NOT_FOUND, "%s@%s: %s not in the cache", repo_id, rev, snap);
    }
    if (st == OSCAR_OK) {
        char * root = osc_cache_snapshot_path(rd, commit, "");
        if (root) {
            root[strlen(root) - 1] = '\0'; // drop the trailing '/'
        }
        *out_dir = root;
        st       = root ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    free(snap);
    free(nx);
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
        st = pull_offline(hub, repo_id, rev, pre, local_dir, out_dir, n_files);
        return st == OSCAR_OK ? st : osc_error_prefix(st, "offline (HF_HUB_OFFLINE)");
    }
    char commit[41];
    st = osc_api_resolve_revision(hub, repo_id, rev, commit);
    if (st == OSCAR_ERR_NETWORK && !local_dir) {
        char msg[1024], why[1024];
        snprintf(msg, sizeof msg, "%s", oscar_last_error());
        osc_warn("%s; trying the cache", msg);
        if (pull_offline(hub, repo_id, rev, pre, local_dir, out_dir, n_files) == OSCAR_OK) {
            return OSCAR_OK;
        }
        // Not "offline": the Hub could not be reached, and the cache cannot stand in.
        snprintf(why, sizeof why, "%s", oscar_last_error());
        return osc_error(OSCAR_ERR_NETWORK, "%s (no usable copy in the cache either: %s)", msg, why);
    }
    if (st != OSCAR_OK) {
        return st;
    }
    // The whole tree, so that its listing can be cached for offline checks.
    struct oscar_hub_listing l;
    if ((st = oscar_hub_list(hub, repo_id, commit, NULL, &l)) != OSCAR_OK && st != OSCAR_ERR_NOT_FOUND) {
        return st;
    }
    char * rd = osc_cache_repo_dir(hub->cache_dir, repo_id);
    st        = rd ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "out of memory");
    if (st == OSCAR_OK && !local_dir && l.n > 0 && osc_cache_write_tree(rd, commit, &l) != OSCAR_OK) {
        osc_warn("%s; offline pulls of %s will not notice missing files", oscar_last_error(), repo_id);
    }
    if (st == OSCAR_OK && !local_dir && strcmp(rev, commit)) {
        st = osc_cache_write_ref(rd, rev, commit);
    }
    int n_listed = 0;
    for (int i = 0; i < l.n; i++) {
        const struct oscar_hub_entry * e = &l.entries[i];
        if (!e->is_dir && under(e->path, pre)) {
            n_listed++;
            if (st == OSCAR_OK && local_dir) { // refused before any download
                st = osc_local_dir_check(local_dir, e->path);
            }
        }
    }
    if (st == OSCAR_OK && *pre && n_listed == 0) { // not listed: a 404 records the .no_exist marker
        char * p = NULL;
        st       = oscar_hub_download(hub, repo_id, commit, pre, local_dir, &p);
        free(p);
        *n_files = st == OSCAR_OK;
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
