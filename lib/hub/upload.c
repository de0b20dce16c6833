// upload.c - push a folder in one commit: create repo (exist_ok) -> create
// the branch if it is new -> preupload (regular vs LFS per file) -> LFS batch
// (basic or multipart PUTs without the token, then verify) -> NDJSON commit
// with parentCommit.
// Refuses: a README.md without valid YAML front matter, symlinks leaving
// the folder or pointing at folders, regular files over 10 MiB sent inline
// (the Hub's limit).
#include "hub/hub-internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fs.h"
#include "util/log.h"

#define CHUNK_FILES    256
#define MAX_INLINE     ((int64_t) 10 << 20)
#define LFS_MIME       "application/vnd.git-lfs+json"

struct ufile {
    char *  local;       // path on disk
    char *  repo_path;   // path in the repo
    int64_t size;
    char    sha256[65];
    char    sha1[41];
    char *  sample;      // base64 of the first 512 bytes
    int     lfs;
    int     unchanged;
};

struct ulist {
    struct ufile * f;
    int            n;
};

static void ulist_free(struct ulist * l) {
    for (int i = 0; i < l->n; i++) {
        free(l->f[i].local);
        free(l->f[i].repo_path);
        free(l->f[i].sample);
    }
    free(l->f);
    memset(l, 0, sizeof *l);
}

static enum oscar_status add_file(struct ulist * l, const char * local, const char * repo_path) {
    struct ufile * nf = realloc(l->f, (size_t) (l->n + 1) * sizeof *nf);
    if (!nf) {
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    l->f            = nf;
    struct ufile * f = &nf[l->n++];
    memset(f, 0, sizeof *f);
    f->local        = strdup(local);
    f->repo_path    = strdup(repo_path);
    if (!f->local || !f->repo_path) {
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    enum oscar_status st = osc_hash_file(local, f->sha256, f->sha1, &f->size);
    if (st != OSCAR_OK) {
        return st;
    }
    unsigned char head[512];
    int           fd = open(local, O_RDONLY | O_CLOEXEC);
    ssize_t       k  = fd >= 0 ? pread(fd, head, sizeof head, 0) : -1;
    if (fd >= 0) {
        close(fd);
    }
    if (k < 0) {
        return osc_error(OSCAR_ERR_IO, "%s: %s", local, strerror(errno));
    }
    f->sample = osc_base64_encode(head, (size_t) k);
    return f->sample ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "out of memory");
}

// A symlink in the pushed folder is followed only to a regular file inside
// `root` (the folder's real path); links to folders (loops, duplicated
// trees) and links leaving the folder are refused, naming the link.
static enum oscar_status add_link(struct ulist * l, const char * root, const char * local, const char * rp) {
    char *            real = realpath(local, NULL);
    size_t            n    = strlen(root);
    struct stat       sb;
    enum oscar_status st;
    if (!real) {
        st = osc_error(OSCAR_ERR_IO, "%s: broken symlink: %s", local, strerror(errno));
    } else if (stat(real, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = osc_error(OSCAR_ERR_UNSUPPORTED, "%s: symlink to a folder or special file (%s): refusing to follow it",
                       local, real);
    } else if (strncmp(real, root, n) || real[n] != '/') {
        st = osc_error(OSCAR_ERR_UNSUPPORTED, "%s: symlink to %s, outside %s: refusing to push it", local, real,
                       root);
    } else {
        st = add_file(l, real, rp);
    }
    free(real);
    return st;
}

static enum oscar_status walk(struct ulist * l, const char * root, const char * dir, const char * prefix) {
    DIR * d = opendir(dir);
    if (!d) {
        return osc_error(OSCAR_ERR_IO, "%s: %s", dir, strerror(errno));
    }
    enum oscar_status st = OSCAR_OK;
    struct dirent *   e;
    while (st == OSCAR_OK && (e = readdir(d))) {
        if (e->d_name[0] == '.') { // ".", "..", .git, .cache (local-dir metadata), editor files
            continue;
        }
        char *      local = osc_path_join(dir, e->d_name);
        char *      rp    = *prefix ? osc_path_join(prefix, e->d_name) : strdup(e->d_name);
        struct stat sb;
        if (!local || !rp) {
            st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
        } else if (lstat(local, &sb) != 0) {
            st = osc_error(OSCAR_ERR_IO, "%s: %s", local, strerror(errno));
        } else if (S_ISLNK(sb.st_mode)) {
            st = add_link(l, root, local, rp);
        } else if (S_ISDIR(sb.st_mode)) {
            st = walk(l, root, local, rp);
        } else if (S_ISREG(sb.st_mode)) {
            st = add_file(l, local, rp);
        }
        free(local);
        free(rp);
    }
    closedir(d);
    return st;
}

static int cmp_files(const void * a, const void * b) {
    return strcmp(((const struct ufile *) a)->repo_path, ((const struct ufile *) b)->repo_path);
}

static enum oscar_status check_card(const char * dir, int skip) {
    char * p = osc_path_join(dir, "README.md");
    if (!p) {
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    enum oscar_status st = OSCAR_OK;
    if (access(p, F_OK) != 0) {
        if (!skip) {
            st = osc_error(OSCAR_ERR_INVALID, "%s: missing model card (README.md with YAML front matter)", p);
        }
    } else if (!skip) {
        char * text = NULL;
        size_t n    = 0;
        if ((st = osc_read_file(p, 16 << 20, &text, &n)) == OSCAR_OK) {
            st = oscar_hub_check_card(text, n, p);
        }
        free(text);
    }
    free(p);
    return st;
}

// POST JSON `body` to `url`; on 200 parses the answer into *out.
static enum oscar_status post_json(struct oscar_hub * hub, const char * url, const char * ctype, json_t * body,
                                   const char * const * headers, const char * what, json_t ** out) {
    char *               text = json_dumps(body, JSON_COMPACT);
    struct osc_http_resp r;
    osc_http_resp_reset(&r);
    enum oscar_status st = OSCAR_OK;
    if (out) {
        *out = NULL;
    }
    if (!text) {
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    struct osc_http_req q = { .method = "POST", .url = url, .upload_fd = -1, .sink_fd = -1, .auth = 1,
                              .content_type = ctype, .accept = ctype, .body = text, .body_len = strlen(text),
                              .headers = headers };
    if ((st = osc_http_request(hub, &q, &r)) != OSCAR_OK) {
        st = osc_error_prefix(st, "%s", what);
    } else if (r.status != 200 && r.status != 201) {
        st = osc_http_error(&r, what);
    } else if (out) {
        json_error_t e;
        *out = json_loadb(r.body.data ? r.body.data : "", r.body.len, 0, &e);
        if (!*out) {
            st = osc_error(OSCAR_ERR_FORMAT, "%s: invalid JSON answer: %s", what, e.text);
        }
    }
    osc_http_resp_free(&r);
    free(text);
    return st;
}

static char * api_url(struct oscar_hub * hub, const char * repo, const char * what, const char * rev) {
    char * q   = osc_url_quote(rev, "");
    char * sfx = q ? malloc(strlen(what) + strlen(q) + 4) : NULL;
    char * url = NULL;
    if (sfx) {
        sprintf(sfx, "/%s/%s", what, q);
        url = osc_url_api(hub->endpoint, repo, sfx);
    }
    free(q);
    free(sfx);
    return url;
}

static enum oscar_status preupload(struct oscar_hub * hub, const struct oscar_hub_push_opts * o, struct ulist * l) {
    char *            url = api_url(hub, o->repo_id, "preupload", o->revision);
    enum oscar_status st  = url ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "out of memory");
    for (int s = 0; st == OSCAR_OK && s < l->n; s += CHUNK_FILES) {
        int      e     = s + CHUNK_FILES < l->n ? s + CHUNK_FILES : l->n;
        json_t * body  = json_object();
        json_t * files = json_array();
        for (int i = s; i < e; i++) {
            json_t * f = json_object();
            json_object_set_new(f, "path", json_string(l->f[i].repo_path));
            json_object_set_new(f, "size", json_integer(l->f[i].size));
            json_object_set_new(f, "sample", json_string(l->f[i].sample));
            json_array_append_new(files, f);
        }
        json_object_set_new(body, "files", files);
        json_t * ans = NULL;
        st           = post_json(hub, url, "application/json", body, NULL, "preupload", &ans);
        json_decref(body);
        json_t * arr = json_object_get(ans, "files");
        for (int i = s; st == OSCAR_OK && i < e; i++) {
            json_t * hit = NULL;
            size_t   k;
            json_t * x;
            json_array_foreach(arr, k, x) {
                const char * p = json_string_value(json_object_get(x, "path"));
                if (p && !strcmp(p, l->f[i].repo_path)) {
                    hit = x;
                }
            }
            const char * mode = json_string_value(json_object_get(hit, "uploadMode"));
            if (!mode || (strcmp(mode, "lfs") && strcmp(mode, "regular"))) {
                st = osc_error(OSCAR_ERR_FORMAT, "preupload: no uploadMode for %s", l->f[i].repo_path);
                break;
            }
            if (json_is_true(json_object_get(hit, "shouldIgnore"))) {
                osc_warn("%s: ignored by the repo's .gitignore", l->f[i].repo_path);
            }
            struct ufile * f = &l->f[i];
            f->lfs           = !strcmp(mode, "lfs") && f->size > 0;
            const char * rem = json_string_value(json_object_get(hit, "oid"));
            f->unchanged     = rem && !strcmp(rem, f->lfs ? f->sha256 : f->sha1);
            if (!f->lfs && f->size > MAX_INLINE) {
                st = osc_error(OSCAR_ERR_UNSUPPORTED, "%s: %lld bytes is too large to send as a regular file",
                               f->local, (long long) f->size);
            }
        }
        json_decref(ans);
    }
    free(url);
    return st;
}

// Extra request headers from an LFS action's "header" object (NULL-terminated).
static char ** action_headers(json_t * action) {
    json_t *     h = json_object_get(action, "header");
    size_t       n = json_is_object(h) ? json_object_size(h) : 0;
    char **      out = calloc(n + 1, sizeof *out);
    const char * k;
    json_t *     v;
    size_t       i = 0;
    if (!out) {
        return NULL;
    }
    json_object_foreach(h, k, v) {
        const char * s = json_string_value(v);
        if (s && strcmp(k, "chunk_size") && strspn(k, "0123456789") != strlen(k)) {
            out[i] = malloc(strlen(k) + strlen(s) + 3);
            if (out[i]) {
                sprintf(out[i++], "%s: %s", k, s);
            }
        }
    }
    return out;
}

static void free_headers(char ** h) {
    for (size_t i = 0; h && h[i]; i++) {
        free(h[i]);
    }
    free(h);
}

static enum oscar_status put_part(struct oscar_hub * hub, const char * href, int fd, int64_t off, int64_t len,
                                  char * const * headers, const char * label, char ** etag) {
    struct osc_http_resp r;
    osc_http_resp_reset(&r);
    struct osc_http_req q = { .method = "PUT", .url = href, .upload_fd = fd, .upload_off = off, .upload_len = len,
                              .sink_fd = -1, .auth = 0, .progress = hub->progress ? label : NULL,
                              .progress_total = len, .headers = (const char * const *) headers };
    enum oscar_status st = osc_http_request(hub, &q, &r);
    if (st == OSCAR_OK && r.status != 200 && r.status != 201) {
        char what[600];
        snprintf(what, sizeof what, "%s: LFS upload", label);
        st = osc_http_error(&r, what);
    } else if (st == OSCAR_OK && etag) {
        *etag = r.etag ? osc_etag_normalize(r.etag) : NULL;
        if (!*etag) {
            st = osc_error(OSCAR_ERR_FORMAT, "%s: multipart part answer has no ETag", label);
        }
    }
    osc_http_resp_free(&r);
    return st;
}

static enum oscar_status multipart(struct oscar_hub * hub, const struct ufile * f, int fd, json_t * up) {
    json_t *  hdr   = json_object_get(up, "header");
    json_int_t chunk = 0;
    json_t *  cs    = json_object_get(hdr, "chunk_size");
    chunk           = json_is_integer(cs) ? json_integer_value(cs) : (json_is_string(cs) ? atoll(json_string_value(cs)) : 0);
    if (chunk <= 0) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: multipart upload without a valid chunk_size", f->repo_path);
    }
    int64_t n_parts = (f->size + chunk - 1) / chunk;
    int64_t n_urls  = 0;
    const char * k;
    json_t *     v;
    json_object_foreach(hdr, k, v) {
        n_urls += strlen(k) > 0 && strspn(k, "0123456789") == strlen(k);
    }
    if (n_urls != n_parts) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: server gave %lld part URLs for %lld parts", f->repo_path,
                         (long long) n_urls, (long long) n_parts);
    }
    json_t *          parts = json_array();
    enum oscar_status st    = OSCAR_OK;
    for (int64_t i = 0; st == OSCAR_OK && i < n_parts; i++) {
        char key[24], label[600];
        snprintf(key, sizeof key, "%05lld", (long long) (i + 1));
        snprintf(label, sizeof label, "%s [part %lld/%lld]", f->repo_path, (long long) (i + 1), (long long) n_parts);
        const char * href = json_string_value(json_object_get(hdr, key));
        char *       etag = NULL;
        int64_t      off  = i * chunk;
        int64_t      len  = f->size - off < chunk ? f->size - off : chunk;
        st = href ? put_part(hub, href, fd, off, len, NULL, label, &etag)
                  : osc_error(OSCAR_ERR_FORMAT, "%s: missing part URL %s", f->repo_path, key);
        if (st == OSCAR_OK) {
            json_t * p = json_object();
            json_object_set_new(p, "partNumber", json_integer(i + 1));
            json_object_set_new(p, "etag", json_string(etag));
            json_array_append_new(parts, p);
        }
        free(etag);
    }
    if (st == OSCAR_OK) {
        json_t * body = json_object();
        json_object_set_new(body, "oid", json_string(f->sha256));
        json_object_set_new(body, "parts", parts);
        parts = NULL;
        st    = post_json(hub, json_string_value(json_object_get(up, "href")), LFS_MIME, body, NULL,
                          "LFS multipart completion", NULL);
        json_decref(body);
    }
    json_decref(parts);
    return st;
}

static enum oscar_status upload_object(struct oscar_hub * hub, const struct ufile * f, json_t * obj) {
    json_t *     actions = json_object_get(obj, "actions");
    json_t *     up      = json_object_get(actions, "upload");
    json_t *     verify  = json_object_get(actions, "verify");
    json_t *     err     = json_object_get(obj, "error");
    if (err) {
        return osc_error(OSCAR_ERR_HTTP, "%s: LFS batch error %lld: %s", f->repo_path,
                         (long long) json_integer_value(json_object_get(err, "code")),
                         json_string_value(json_object_get(err, "message")));
    }
    if (!up) {
        osc_info("%s: already stored on the Hub", f->repo_path);
        return OSCAR_OK;
    }
    const char * href = json_string_value(json_object_get(up, "href"));
    if (!href) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: LFS upload action without href", f->repo_path);
    }
    int fd = open(f->local, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return osc_error(OSCAR_ERR_IO, "%s: %s", f->local, strerror(errno));
    }
    enum oscar_status st;
    if (json_object_get(json_object_get(up, "header"), "chunk_size")) {
        st = multipart(hub, f, fd, up);
    } else {
        char ** h = action_headers(up);
        st        = put_part(hub, href, fd, 0, f->size, h, f->repo_path, NULL);
        free_headers(h);
    }
    close(fd);
    if (st == OSCAR_OK && verify) {
        const char * vhref = json_string_value(json_object_get(verify, "href"));
        json_t *     body  = json_object();
        char **      h     = action_headers(verify);
        json_object_set_new(body, "oid", json_string(f->sha256));
        json_object_set_new(body, "size", json_integer(f->size));
        st = vhref ? post_json(hub, vhref, LFS_MIME, body, (const char * const *) h, "LFS verify", NULL)
                   : osc_error(OSCAR_ERR_FORMAT, "%s: verify action without href", f->repo_path);
        free_headers(h);
        json_decref(body);
    }
    return st;
}

static enum oscar_status lfs_upload(struct oscar_hub * hub, const struct oscar_hub_push_opts * o, struct ulist * l,
                                    int * n_lfs) {
    size_t n   = strlen(hub->endpoint) + strlen(o->repo_id) + 64;
    char * url = malloc(n);
    if (!url) {
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    snprintf(url, n, "%s/%s.git/info/lfs/objects/batch", hub->endpoint, o->repo_id);
    enum oscar_status st = OSCAR_OK;
    for (int s = 0; st == OSCAR_OK && s < l->n; s += CHUNK_FILES) {
        int      e    = s + CHUNK_FILES < l->n ? s + CHUNK_FILES : l->n;
        json_t * objs = json_array();
        for (int i = s; i < e; i++) {
            if (l->f[i].lfs && !l->f[i].unchanged) {
                json_t * x = json_object();
                json_object_set_new(x, "oid", json_string(l->f[i].sha256));
                json_object_set_new(x, "size", json_integer(l->f[i].size));
                json_array_append_new(objs, x);
            }
        }
        if (json_array_size(objs) == 0) {
            json_decref(objs);
            continue;
        }
        json_t * body = json_object();
        json_t * tr   = json_array();
        json_array_append_new(tr, json_string("basic"));
        json_array_append_new(tr, json_string("multipart"));
        json_object_set_new(body, "operation", json_string("upload"));
        json_object_set_new(body, "transfers", tr);
        json_object_set_new(body, "objects", objs);
        json_object_set_new(body, "hash_algo", json_string("sha256"));
        json_t * ref = json_object();
        json_object_set_new(ref, "name", json_string(o->revision));
        json_object_set_new(body, "ref", ref);
        json_t * ans = NULL;
        st           = post_json(hub, url, LFS_MIME, body, NULL, "LFS batch", &ans);
        json_decref(body);
        const char * transfer = json_string_value(json_object_get(ans, "transfer"));
        if (st == OSCAR_OK && transfer && strcmp(transfer, "basic") && strcmp(transfer, "multipart")) {
            st = osc_error(OSCAR_ERR_UNSUPPORTED, "LFS batch: server chose transfer '%s'", transfer);
        }
        json_t * arr = json_object_get(ans, "objects");
        for (int i = s; st == OSCAR_OK && i < e; i++) {
            struct ufile * f = &l->f[i];
            if (!f->lfs || f->unchanged) {
                continue;
            }
            json_t * hit = NULL;
            size_t   k;
            json_t * x;
            json_array_foreach(arr, k, x) {
                const char * oid = json_string_value(json_object_get(x, "oid"));
                if (oid && !strcmp(oid, f->sha256)) {
                    hit = x;
                }
            }
            st = hit ? upload_object(hub, f, hit)
                     : osc_error(OSCAR_ERR_FORMAT, "LFS batch: no answer for %s (%s)", f->repo_path, f->sha256);
            *n_lfs += st == OSCAR_OK;
        }
        json_decref(ans);
    }
    free(url);
    return st;
}

static enum oscar_status commit(struct oscar_hub * hub, const struct oscar_hub_push_opts * o, struct ulist * l,
                                const char * parent, struct oscar_hub_push_result * res) {
    struct osc_commit_op * ops  = calloc((size_t) l->n + 1, sizeof *ops);
    char **                data = calloc((size_t) l->n + 1, sizeof *data);
    struct osc_buf         body = { 0 };
    char *                 url  = api_url(hub, o->repo_id, "commit", o->revision);
    enum oscar_status      st   = (ops && data && url) ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "out of memory");
    int                    n    = 0;
    for (int i = 0; st == OSCAR_OK && i < l->n; i++) {
        struct ufile * f = &l->f[i];
        if (f->unchanged) {
            continue;
        }
        size_t len = 0;
        if (!f->lfs && (st = osc_read_file(f->local, (size_t) MAX_INLINE, &data[n], &len)) != OSCAR_OK) {
            break;
        }
        ops[n] = (struct osc_commit_op) { .path = f->repo_path, .lfs = f->lfs, .oid = f->sha256, .size = f->size,
                                          .content = data[n], .content_len = len };
        res->n_regular += !f->lfs;
        n++;
    }
    const char * summary = o->message && *o->message ? o->message : "Upload with oscar-zoo";
    if (st == OSCAR_OK) {
        st = osc_commit_ndjson(&body, summary, "", parent, ops, n);
    }
    struct osc_http_resp r;
    osc_http_resp_reset(&r);
    if (st == OSCAR_OK) {
        struct osc_http_req q = { .method = "POST", .url = url, .upload_fd = -1, .sink_fd = -1, .auth = 1,
                                  .content_type = "application/x-ndjson", .accept = "application/json",
                                  .body = body.data, .body_len = body.len };
        st = osc_http_request(hub, &q, &r);
        if (st == OSCAR_OK && r.status != 200 && r.status != 201) {
            char what[300];
            snprintf(what, sizeof what, "%s@%s: commit", o->repo_id, o->revision);
            st = osc_http_error(&r, what);
        }
    }
    if (st == OSCAR_OK) {
        json_error_t e;
        json_t *     j = json_loadb(r.body.data ? r.body.data : "", r.body.len, 0, &e);
        const char * oid = json_string_value(json_object_get(j, "commitOid"));
        const char * cu  = json_string_value(json_object_get(j, "commitUrl"));
        res->commit_oid  = oid ? strdup(oid) : NULL;
        res->commit_url  = cu ? strdup(cu) : NULL;
        if (!res->commit_oid) {
            st = osc_error(OSCAR_ERR_FORMAT, "commit: answer has no commitOid");
        }
        json_decref(j);
    }
    osc_http_resp_free(&r);
    for (int i = 0; data && i < n; i++) {
        free(data[i]);
    }
    free(data);
    free(ops);
    osc_buf_free(&body);
    free(url);
    return st;
}

// The head of `branch`; a branch the repo does not have yet is created first from the default
// branch's head, as `hf upload --revision NEW` does (the repo exists by now, so a 404 is the revision).
static enum oscar_status resolve_branch(struct oscar_hub * hub, const char * repo_id, const char * branch,
                                        char parent[41]) {
    enum oscar_status st = osc_api_resolve_revision(hub, repo_id, branch, parent);
    if (st != OSCAR_ERR_NOT_FOUND || osc_is_commit_hash(branch) || !strncmp(branch, "refs/", 5)) {
        return st;
    }
    osc_info("%s: branch '%s' does not exist yet, creating it from the default branch", repo_id, branch);
    if ((st = osc_api_create_branch(hub, repo_id, branch)) != OSCAR_OK) {
        return st;
    }
    return osc_api_resolve_revision(hub, repo_id, branch, parent);
}

enum oscar_status oscar_hub_push(struct oscar_hub * hub, const char * dir, const struct oscar_hub_push_opts * opts,
                                 struct oscar_hub_push_result * out) {
    memset(out, 0, sizeof *out);
    struct oscar_hub_push_opts o = *opts;
    o.revision                   = o.revision && *o.revision ? o.revision : "main";
    o.path_in_repo               = o.path_in_repo ? o.path_in_repo : "";
    struct ulist      l          = { 0 };
    enum oscar_status st         = OSCAR_OK;
    char              parent[41];
    if (hub->offline) {
        return osc_error(OSCAR_ERR_NETWORK, "push needs the network (HF_HUB_OFFLINE is set)");
    }
    if ((st = osc_check_repo_rev(o.repo_id ? o.repo_id : "", o.revision)) != OSCAR_OK) {
        return st;
    }
    if (*o.path_in_repo && !osc_repo_path_valid(o.path_in_repo)) {
        return osc_error(OSCAR_ERR_INVALID, "'%s': not a valid path inside a repo", o.path_in_repo);
    }
    char * root = realpath(dir, NULL);
    if (!root) {
        return osc_error(OSCAR_ERR_IO, "%s: %s", dir, strerror(errno));
    }
    // The walk refuses links out of the folder before the card check reads README.md.
    st = walk(&l, root, dir, o.path_in_repo);
    free(root);
    if (st != OSCAR_OK || (st = check_card(dir, o.skip_card_check)) != OSCAR_OK) {
        goto out;
    }
    if (l.n == 0) {
        st = osc_error(OSCAR_ERR_INVALID, "%s: no files to push", dir);
        goto out;
    }
    qsort(l.f, (size_t) l.n, sizeof *l.f, cmp_files);
    if ((st = osc_api_create_repo(hub, o.repo_id, o.is_private)) != OSCAR_OK ||
        (st = resolve_branch(hub, o.repo_id, o.revision, parent)) != OSCAR_OK ||
        (st = preupload(hub, &o, &l)) != OSCAR_OK) {
        goto out;
    }
    for (int i = 0; i < l.n; i++) {
        out->n_unchanged += l.f[i].unchanged;
    }
    if (out->n_unchanged == l.n) {
        osc_info("%s: nothing changed since %s, no commit made", o.repo_id, parent);
        goto out;
    }
    if ((st = lfs_upload(hub, &o, &l, &out->n_lfs)) != OSCAR_OK) {
        goto out;
    }
    st = commit(hub, &o, &l, parent, out);
out:
    if (st != OSCAR_OK) {
        oscar_hub_push_result_free(out);
    }
    ulist_free(&l);
    return st;
}

void oscar_hub_push_result_free(struct oscar_hub_push_result * r) {
    free(r->commit_oid);
    free(r->commit_url);
    r->commit_oid = NULL;
    r->commit_url = NULL;
}
