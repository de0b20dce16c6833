// resolve.c - "local path or Hub repo id" arguments (--model, --rotations, export ARTIFACT).
//
// oscar_hub_resolve_local() returns an existing local path untouched; any
// other argument must be a Hub spec owner/name[@revision][:path], which is
// pulled into the shared cache (offline mode serves it from the cache) and
// resolved to the snapshot path of `path` (or the snapshot root). It refuses
// specs that are neither an existing path nor a valid repo id.
#include "hub/hub-internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/fs.h"

enum oscar_status oscar_hub_parse_spec(const char * spec, char ** repo_id, char ** revision, char ** path) {
    *repo_id = *revision = *path = NULL;
    const char * colon = strchr(spec, ':');
    const char * at    = strchr(spec, '@');
    if (at && colon && at > colon) at = NULL; // an '@' inside the path
    size_t repo_len = (size_t) ((at ? at : colon ? colon : spec + strlen(spec)) - spec);
    *repo_id        = strndup(spec, repo_len);
    if (at) *revision = strndup(at + 1, (size_t) ((colon ? colon : at + strlen(at)) - at - 1));
    if (colon) *path = strdup(colon + 1);
    enum oscar_status st = OSCAR_OK;
    if (!*repo_id || (at && !*revision) || (colon && !*path)) {
        st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
    } else if (!strchr(*repo_id, '/') || !osc_repo_id_valid(*repo_id)) {
        st = osc_error(OSCAR_ERR_INVALID, "'%s': not a Hub repo id (owner/name[@revision][:path])", spec);
    } else if ((*revision && !**revision) || (*path && (!**path || !osc_repo_path_valid(*path)))) {
        st = osc_error(OSCAR_ERR_INVALID, "'%s': empty revision or bad path after the repo id", spec);
    }
    if (st != OSCAR_OK) {
        free(*repo_id);
        free(*revision);
        free(*path);
        *repo_id = *revision = *path = NULL;
    }
    return st;
}

enum oscar_status oscar_hub_resolve_local(struct oscar_hub * hub, const char * spec, char ** local_path) {
    struct stat sb;
    char *      repo = NULL, * rev = NULL, * path = NULL, * dir = NULL;
    int         n    = 0;
    *local_path      = NULL;
    if (stat(spec, &sb) == 0) {
        *local_path = strdup(spec);
        return *local_path ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    enum oscar_status st = oscar_hub_parse_spec(spec, &repo, &rev, &path);
    if (st != OSCAR_OK) {
        osc_error(st, "'%s': no such file or directory, and not a Hub repo id (owner/name[@revision][:path])", spec);
        goto out;
    }
    if ((st = oscar_hub_pull(hub, repo, rev, path, NULL, &dir, &n)) != OSCAR_OK) {
        osc_error_prefix(st, "'%s' is not a local path; from the Hub", spec);
        goto out;
    }
    *local_path = path ? osc_path_join(dir, path) : strdup(dir);
    if (!*local_path) st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
out:
    free(repo);
    free(rev);
    free(path);
    free(dir);
    return st;
}
