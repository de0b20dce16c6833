// api.c - the JSON endpoints: model info / revision resolution, the tree
// listing (with Link pagination), repo and branch creation (exist_ok).
// Refuses non-JSON answers and responses missing the fields it needs.
#include "hub/hub-internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

// GET `url` (with retries) and parse the JSON body (hub-internal.h).
enum oscar_status osc_api_get_json(struct oscar_hub * hub, const char * url, const char * what, json_t ** out,
                                   struct osc_http_resp * r) {
    struct osc_http_req q = { .method = "GET", .url = url, .upload_fd = -1, .sink_fd = -1, .auth = 1,
                              .follow = 1, .accept = "application/json" };
    *out                  = NULL;
    enum oscar_status st  = osc_http_request(hub, &q, r);
    if (st != OSCAR_OK) {
        return osc_error_prefix(st, "%s", what);
    }
    if (r->status != 200) {
        return osc_http_error(r, what);
    }
    json_error_t e;
    *out = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, &e);
    if (!*out) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: invalid JSON from %s: %s", what, url, e.text);
    }
    return OSCAR_OK;
}

static char * info_url(const char * endpoint, const char * repo_id, const char * rev) {
    if (!rev || !*rev) {
        return osc_url_api(endpoint, repo_id, "");
    }
    char * q   = osc_url_quote(rev, "");
    char * sfx = q ? malloc(strlen(q) + 16) : NULL;
    char * out = NULL;
    if (sfx) {
        sprintf(sfx, "/revision/%s", q);
        out = osc_url_api(endpoint, repo_id, sfx);
    }
    free(q);
    free(sfx);
    return out;
}

static char * dup_str(json_t * o, const char * key) {
    const char * s = json_string_value(json_object_get(o, key));
    return s ? strdup(s) : NULL;
}

enum oscar_status oscar_hub_info(struct oscar_hub * hub, const char * repo_id, const char * revision,
                                 struct oscar_hub_info * out) {
    memset(out, 0, sizeof *out);
    enum oscar_status st = osc_check_repo_rev(repo_id, revision && *revision ? revision : NULL);
    if (st != OSCAR_OK) {
        return st;
    }
    if (hub->offline) {
        return osc_error(OSCAR_ERR_NETWORK, "%s: info needs the network (HF_HUB_OFFLINE is set)", repo_id);
    }
    char *               url = info_url(hub->endpoint, repo_id, revision);
    struct osc_http_resp r;
    osc_http_resp_reset(&r);
    json_t * j = NULL;
    char     what[512];
    snprintf(what, sizeof what, "%s@%s: model info", repo_id, revision ? revision : "(default)");
    if (!url) {
        st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((st = osc_api_get_json(hub, url, what, &j, &r)) != OSCAR_OK) {
        goto out;
    }
    out->id            = dup_str(j, "id");
    out->sha           = dup_str(j, "sha");
    out->last_modified = dup_str(j, "lastModified");
    out->is_private    = json_is_true(json_object_get(j, "private"));
    out->n_siblings    = (int) json_array_size(json_object_get(j, "siblings"));
    if (!out->sha || !osc_is_commit_hash(out->sha)) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: answer has no commit 'sha'", what);
        oscar_hub_info_free(out);
    }
out:
    json_decref(j);
    osc_http_resp_free(&r);
    free(url);
    return st;
}

void oscar_hub_info_free(struct oscar_hub_info * info) {
    free(info->id);
    free(info->sha);
    free(info->last_modified);
    memset(info, 0, sizeof *info);
}

enum oscar_status osc_api_resolve_revision(struct oscar_hub * hub, const char * repo_id, const char * rev,
                                           char commit[41]) {
    struct oscar_hub_info info;
    enum oscar_status     st = oscar_hub_info(hub, repo_id, rev, &info);
    if (st == OSCAR_OK) {
        memcpy(commit, info.sha, 41);
        oscar_hub_info_free(&info);
    }
    return st;
}

static enum oscar_status add_entry(struct oscar_hub_listing * l, json_t * e) {
    const char * type = json_string_value(json_object_get(e, "type"));
    const char * path = json_string_value(json_object_get(e, "path"));
    if (!type || !path || !osc_repo_path_valid(path)) {
        return osc_error(OSCAR_ERR_FORMAT, "tree listing: entry without a valid type/path");
    }
    struct oscar_hub_entry * ne = realloc(l->entries, (size_t) (l->n + 1) * sizeof *ne);
    if (!ne) {
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    l->entries               = ne;
    struct oscar_hub_entry * x = &ne[l->n++];
    memset(x, 0, sizeof *x);
    x->path   = strdup(path);
    x->oid    = dup_str(e, "oid");
    x->is_dir = !strcmp(type, "directory");
    x->size   = json_integer_value(json_object_get(e, "size"));
    json_t * lfs = json_object_get(e, "lfs");
    if (json_is_object(lfs)) {
        x->lfs_oid = dup_str(lfs, "oid");
        if (!x->lfs_oid || strlen(x->lfs_oid) != 64) {
            return osc_error(OSCAR_ERR_FORMAT, "tree listing: %s: bad lfs.oid", path);
        }
    }
    return x->path ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "out of memory");
}

enum oscar_status oscar_hub_list(struct oscar_hub * hub, const char * repo_id, const char * revision,
                                 const char * prefix, struct oscar_hub_listing * out) {
    memset(out, 0, sizeof *out);
    enum oscar_status st = osc_check_repo_rev(repo_id, revision && *revision ? revision : NULL);
    if (st != OSCAR_OK) {
        return st;
    }
    if (hub->offline) {
        return osc_error(OSCAR_ERR_NETWORK, "%s: listing needs the network (HF_HUB_OFFLINE is set)", repo_id);
    }
    const char * rev = revision && *revision ? revision : "main";
    char *       qr  = osc_url_quote(rev, "");
    char *       qp  = osc_url_quote(prefix ? prefix : "", "/");
    char *       sfx = (qr && qp) ? malloc(strlen(qr) + strlen(qp) + 64) : NULL;
    char *       url = NULL;
    char         what[512];
    snprintf(what, sizeof what, "%s@%s: list files", repo_id, rev);
    if (!sfx) {
        st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
        goto out;
    }
    sprintf(sfx, "/tree/%s%s%s?recursive=true&expand=false", qr, *qp ? "/" : "", qp);
    url = osc_url_api(hub->endpoint, repo_id, sfx);
    for (int page = 0; url && st == OSCAR_OK; page++) {
        struct osc_http_resp r;
        osc_http_resp_reset(&r);
        json_t * j = NULL;
        st         = osc_api_get_json(hub, url, what, &j, &r);
        if (st == OSCAR_OK && !json_is_array(j)) {
            st = osc_error(OSCAR_ERR_FORMAT, "%s: tree listing is not a JSON array", what);
        }
        size_t   i;
        json_t * e;
        json_array_foreach(j, i, e) {
            if (st == OSCAR_OK) {
                st = add_entry(out, e);
            }
        }
        json_decref(j);
        free(url);
        url = NULL;
        if (st == OSCAR_OK && r.link_next) {
            if (!osc_url_same_origin(r.link_next, hub->endpoint) || page > 100000) {
                st = osc_error(OSCAR_ERR_FORMAT, "%s: pagination link to another host: %s", what, r.link_next);
            } else {
                url = strdup(r.link_next);
            }
        }
        osc_http_resp_free(&r);
    }
out:
    if (st != OSCAR_OK) {
        oscar_hub_listing_free(out);
    }
    free(url);
    free(sfx);
    free(qr);
    free(qp);
    return st;
}

void oscar_hub_listing_free(struct oscar_hub_listing * l) {
    for (int i = 0; i < l->n; i++) {
        free(l->entries[i].path);
        free(l->entries[i].oid);
        free(l->entries[i].lfs_oid);
    }
    free(l->entries);
    memset(l, 0, sizeof *l);
}

enum oscar_status osc_api_create_repo(struct oscar_hub * hub, const char * repo_id, int is_private) {
    enum oscar_status st = osc_check_repo_rev(repo_id, NULL);
    if (st != OSCAR_OK) {
        return st;
    }
    const char * slash = strchr(repo_id, '/');
    json_t *     body  = json_object();
    char *       org   = slash ? strndup(repo_id, (size_t) (slash - repo_id)) : NULL;
    json_object_set_new(body, "name", json_string(slash ? slash + 1 : repo_id));
    json_object_set_new(body, "organization", org ? json_string(org) : json_null());
    json_object_set_new(body, "type", json_string("model"));
    json_object_set_new(body, "private", json_boolean(is_private));
    json_object_set_new(body, "visibility", json_string(is_private ? "private" : "public"));
    char *               text = json_dumps(body, JSON_COMPACT);
    size_t               n    = strlen(hub->endpoint) + 32;
    char *               url  = malloc(n);
    struct osc_http_resp r;
    osc_http_resp_reset(&r);
    if (!text || !url) {
        st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
        goto out;
    }
    snprintf(url, n, "%s/api/repos/create", hub->endpoint);
    struct osc_http_req q = { .method = "POST", .url = url, .upload_fd = -1, .sink_fd = -1, .auth = 1,
                              .content_type = "application/json", .body = text, .body_len = strlen(text) };
    double deadline = osc_now() + hub->deadline;
    for (int attempt = 0;; attempt++) {
        if ((st = osc_http_request(hub, &q, &r)) != OSCAR_OK) {
            goto out;
        }
        int    busy = r.status == 409 && r.body.data && strstr(r.body.data, "conflicting operation");
        double wait = busy ? osc_http_backoff(hub, attempt, &r) : 0;
        if (!busy || attempt >= hub->max_retries || osc_now() + wait > deadline) {
            break;
        }
        osc_sleep(wait);
    }
    if (r.status == 200 || r.status == 201 || r.status == 409) {
        st = OSCAR_OK; // 409: exists (exist_ok)
    } else {
        char what[300];
        snprintf(what, sizeof what, "%s: create repo", repo_id);
        st = osc_http_error(&r, what);
        if (r.status == 401 || r.status == 402 || r.status == 403) { // exist_ok: maybe it exists
            struct oscar_hub_info info;
            if (oscar_hub_info(hub, repo_id, NULL, &info) == OSCAR_OK) {
                oscar_hub_info_free(&info);
                st = OSCAR_OK;
            } else {
                osc_http_error(&r, what);
            }
        }
    }
out:
    osc_http_resp_free(&r);
    json_decref(body);
    free(text);
    free(url);
    free(org);
    return st;
}

enum oscar_status osc_api_create_branch(struct oscar_hub * hub, const char * repo_id, const char * branch) {
    enum oscar_status st = osc_check_repo_rev(repo_id, branch);
    if (st != OSCAR_OK) {
        return st;
    }
    if (osc_is_commit_hash(branch) || !strncmp(branch, "refs/", 5)) { // the Hub refuses these as branch names
        return osc_error(OSCAR_ERR_INVALID, "%s: '%s' is not a branch name that can be created", repo_id, branch);
    }
    char *               q   = osc_url_quote(branch, "");
    char *               sfx = q ? malloc(strlen(q) + 16) : NULL;
    char *               url = NULL;
    struct osc_http_resp r;
    osc_http_resp_reset(&r);
    if (sfx) {
        sprintf(sfx, "/branch/%s", q);
        url = osc_url_api(hub->endpoint, repo_id, sfx);
    }
    if (!url) {
        st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
        goto out;
    }
    // No startingPoint: the Hub branches off the head of the default branch, as `hf upload --revision` does.
    struct osc_http_req rq = { .method = "POST", .url = url, .upload_fd = -1, .sink_fd = -1, .auth = 1,
                               .content_type = "application/json", .accept = "application/json", .body = "{}",
                               .body_len = 2 };
    if ((st = osc_http_request(hub, &rq, &r)) != OSCAR_OK) {
        st = osc_error_prefix(st, "%s: create branch %s", repo_id, branch);
    } else if (r.status != 200 && r.status != 201 && r.status != 409) { // 409: it exists (exist_ok)
        char what[600];
        snprintf(what, sizeof what, "%s: create branch %s", repo_id, branch);
        st = osc_http_error(&r, what);
    }
out:
    osc_http_resp_free(&r);
    free(url);
    free(sfx);
    free(q);
    return st;
}
