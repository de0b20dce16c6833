// hub-internal.h - cross-file internals of lib/hub (not part of the API).
//
// Layers: url.c (quoting, URL building, the token-host rule), http.c (one
// libcurl request, header parsing, retries/backoff), hash.c (sha256, git
// blob sha1, base64), cache.c (the shared HF cache layout and locks), then
// api.c / download.c / upload.c / card.c on top.
#ifndef OSCAR_HUB_INTERNAL_H
#define OSCAR_HUB_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "hub/hub.h"

// ---- growable byte buffer (hard cap: 256 MiB, for API bodies) ---------------
#define OSC_BUF_MAX ((size_t) 256 << 20)
struct osc_buf {
    char * data; // NUL-terminated when non-NULL
    size_t len;
    size_t cap;
};
int  osc_buf_append(struct osc_buf * b, const void * p, size_t n); // 0 ok, -1 no memory / cap
int  osc_buf_printf(struct osc_buf * b, const char * fmt, ...) __attribute__((format(printf, 2, 3)));
void osc_buf_free(struct osc_buf * b);

// ---- url.c --------------------------------------------------------------
// Percent-encodes every byte except unreserved ones and those in `safe`.
// Malloc'ed (caller frees), NULL on no memory.
char * osc_url_quote(const char * s, const char * safe);
// "{endpoint}/{repo}/resolve/{quote(rev, "")}/{quote(path, "/")}".
char * osc_url_resolve(const char * endpoint, const char * repo_id, const char * rev, const char * path);
// "{endpoint}/api/models/{repo}{suffix}"; suffix may be "" (caller frees).
char * osc_url_api(const char * endpoint, const char * repo_id, const char * suffix);
// 1 when scheme, host and port of `a` and `b` are equal (default ports
// filled in, host compared case-insensitively). The token is sent only to
// URLs with the endpoint's origin.
int osc_url_same_origin(const char * a, const char * b);
// Strips W/ and quotes from an ETag ("W/\"abc\"" -> "abc"). Malloc'ed.
char * osc_etag_normalize(const char * etag);
// 1 for a valid repo id "name" or "owner/name" ([A-Za-z0-9._-], no "--" or "..").
int osc_repo_id_valid(const char * repo_id);
// 1 for a branch, tag or commit name that git accepts (git check-ref-format): no "..",
// "//", "@{", control characters, space, ~ ^ : ? * [ or backslash, no leading or trailing '/', no
// component starting with '.' or ending in ".lock", at most 255 bytes. Such names
// are safe to use as a path below refs/.
int osc_revision_valid(const char * rev);
// OSCAR_OK, or OSCAR_ERR_INVALID with a message naming the bad repo id or
// revision (either NULL: not checked). Called before either reaches a URL or a path.
enum oscar_status osc_check_repo_rev(const char * repo_id, const char * rev);
// OSCAR_ERR_UNSUPPORTED for a repo path inside .cache/huggingface/, where a
// --local-dir keeps its download metadata (the file would overwrite it).
enum oscar_status osc_local_dir_check(const char * local_dir, const char * path);
// 1 when `url` is http:// or https:// (case-insensitive): the only schemes the
// client speaks, on the first hop and on every redirect.
int osc_url_is_http(const char * url);
// 1 for a relative path with no "..", "." or empty components and no leading '/'.
int osc_repo_path_valid(const char * path);

// ---- http.c -------------------------------------------------------------
struct osc_http_req {
    const char *        method;       // GET HEAD POST PUT
    const char *        url;
    const char *        content_type; // NULL: none
    const char *        accept;       // NULL: none
    const void *        body;         // POST body in memory
    size_t              body_len;
    int                 upload_fd;    // >= 0: PUT body read from this fd
    int64_t             upload_off;
    int64_t             upload_len;
    int                 sink_fd;      // >= 0: 200/206 bodies go here (else resp->body)
    int64_t             range_start;  // > 0: "Range: bytes=N-"
    int                 auth;         // send the token (only to the endpoint origin)
    int                 follow;       // follow redirects (token dropped on other origins)
    const char *        progress;     // label for a progress bar, or NULL
    int64_t             progress_total;
    const char * const * headers;     // extra "Name: value" lines, NULL-terminated, or NULL
    double              deadline;     // > 0: osc_now() (util/log.h) by which every hop must be done
};

struct osc_http_resp {
    long           status;
    struct osc_buf body;           // error bodies and in-memory bodies
    char *         etag;
    char *         linked_etag;    // X-Linked-Etag
    char *         repo_commit;    // X-Repo-Commit
    char *         location;       // absolute Location of a redirect
    char *         error_code;     // X-Error-Code
    char *         error_message;  // X-Error-Message
    char *         request_id;     // X-Request-Id | X-Amzn-Trace-Id | X-Amz-Cf-Id
    char *         content_range;
    char *         link_next;      // Link: <url>; rel="next"
    char *         retry_after;    // raw Retry-After
    char *         ratelimit;      // raw RateLimit
    char *         final_url;      // URL of the last hop
    int64_t        content_length; // -1 unknown
    int64_t        linked_size;    // X-Linked-Size, -1 unknown
    int64_t        written;        // bytes written to sink_fd by this request
    int            restarted;      // asked for a range, got 200: sink truncated
    int            write_errno;    // errno of a failed sink write
};

void osc_http_resp_reset(struct osc_http_resp * r);
void osc_http_resp_free(struct osc_http_resp * r);
// Parses one raw header line into `r` (exposed for tests). A status line
// "HTTP/x 200" resets the headers (a new hop or 100-continue).
void osc_http_parse_header(struct osc_http_resp * r, const char * line, size_t len);
// One request, following redirects if asked. OSCAR_OK whenever an HTTP
// status came back (check r->status); OSCAR_ERR_NETWORK on transport errors
// and a passed q->deadline; OSCAR_ERR_IO when the sink could not be written;
// OSCAR_ERR_FORMAT for a URL or redirect that is not http(s) (never fetched).
enum oscar_status osc_http_once(const struct oscar_hub * hub, const struct osc_http_req * q,
                                struct osc_http_resp * r);
// osc_http_once with retries on transport errors and 408/429/5xx (not for
// sink_fd requests: download.c resumes those itself), all within hub->deadline.
enum oscar_status osc_http_request(const struct oscar_hub * hub, const struct osc_http_req * q,
                                   struct osc_http_resp * r);
int osc_http_retryable(long status);
// Seconds to wait from Retry-After (delta seconds or HTTP-date, relative to
// `now` epoch seconds) or RateLimit ("...;r=0;t=55"); -1 when absent/invalid.
double osc_http_retry_after(const char * retry_after, const char * ratelimit, double now);
// Wait before retry number `attempt` (0-based).
double osc_http_backoff(const struct oscar_hub * hub, int attempt, const struct osc_http_resp * r);
void osc_sleep(double seconds);
// Records "what: HTTP 404 RepoNotFound: msg (request id X)" and returns the
// status class: NOT_FOUND for 404, else OSCAR_ERR_HTTP.
enum oscar_status osc_http_error(const struct osc_http_resp * r, const char * what);

// ---- hash.c -------------------------------------------------------------
// Hex digests of a file: sha256 and the git blob sha1 ("blob <n>\0" ++ bytes).
// Either output may be NULL. Buffers: 65 and 41 bytes.
enum oscar_status osc_hash_file(const char * path, char * sha256_hex, char * gitsha1_hex, int64_t * size);
void osc_hash_gitsha1_mem(const void * p, size_t n, char * hex41);
// Base64 (RFC 4648, padded). Malloc'ed, NUL-terminated; NULL on no memory.
char * osc_base64_encode(const void * p, size_t n);

// ---- cache.c ------------------------------------------------------------
int    osc_is_commit_hash(const char * s);                 // 40 lowercase hex
char * osc_cache_repo_folder(const char * repo_id);        // "models--a--b"
char * osc_cache_repo_dir(const char * cache_dir, const char * repo_id);
char * osc_cache_blob_path(const char * repo_dir, const char * etag);
char * osc_cache_snapshot_path(const char * repo_dir, const char * commit, const char * path);
char * osc_cache_no_exist_path(const char * repo_dir, const char * commit, const char * path);
// "../../blobs/<etag>" with one more "../" per directory level in `path`.
char * osc_cache_symlink_target(const char * path, const char * etag);
// Reads refs/<rev>; OSCAR_ERR_NOT_FOUND when absent.
enum oscar_status osc_cache_read_ref(const char * repo_dir, const char * rev, char commit[41]);
// Offline resolution: *repo_dir = the repo's cache folder (caller frees) and commit = rev if it
// is a commit hash, else the cached ref; NOT_FOUND (naming the repo and ref) when absent, and
// then *repo_dir is NULL.
enum oscar_status osc_cache_offline_repo(const char * cache_dir, const char * repo_id, const char * rev,
                                         char ** repo_dir, char commit[41]);
// Writes refs/<rev> atomically, only when it changed.
enum oscar_status osc_cache_write_ref(const char * repo_dir, const char * rev, const char * commit);
// Points snapshots/<commit>/<path> at the blob (relative symlink, replaced atomically).
enum oscar_status osc_cache_link_snapshot(const char * repo_dir, const char * commit, const char * path,
                                          const char * etag);
enum oscar_status osc_cache_mark_no_exist(const char * repo_dir, const char * commit, const char * path);
// Offline lookup: rev -> commit -> snapshot. OK with *out (malloc'ed),
// NOT_FOUND when a .no_exist marker says so, IO error naming the missing path.
enum oscar_status osc_cache_lookup(const char * cache_dir, const char * repo_id, const char * rev,
                                   const char * path, char ** out);
// trees/<commit>.json, huggingface_hub's cached tree listing of a commit (files only):
// written by an online pull before it downloads, read offline to find missing files.
// Reading gives NOT_FOUND when the file is absent or malformed (then only warned about).
enum oscar_status osc_cache_write_tree(const char * repo_dir, const char * commit,
                                       const struct oscar_hub_listing * l);
// Read entries carry path and size only.
enum oscar_status osc_cache_read_tree(const char * repo_dir, const char * commit, struct oscar_hub_listing * out);
// flock(LOCK_EX) on <cache>/.locks/<repo folder>/<etag>.lock; *fd to unlock.
enum oscar_status osc_cache_lock(const char * cache_dir, const char * repo_id, const char * etag, int * fd);
void osc_cache_unlock(int fd);

// ---- api.c --------------------------------------------------------------
// GET `url` (with retries) and parse the JSON body into *out (a json_t *, jansson; caller decrefs).
// Non-200 answers are osc_http_error(r, what); a body that is not JSON is OSCAR_ERR_FORMAT.
// `r` (reset by the caller) keeps the headers, e.g. r->link_next; the caller frees it.
struct json_t;
enum oscar_status osc_api_get_json(struct oscar_hub * hub, const char * url, const char * what, struct json_t ** out,
                                   struct osc_http_resp * r);
// GET /api/models/{repo}[/revision/{rev}] -> commit sha.
enum oscar_status osc_api_resolve_revision(struct oscar_hub * hub, const char * repo_id, const char * rev,
                                           char commit[41]);
// POST /api/repos/create, exist_ok.
enum oscar_status osc_api_create_repo(struct oscar_hub * hub, const char * repo_id, int is_private);
// POST /api/models/{repo}/branch/{branch}: a new branch at the head of the default branch, exist_ok
// (409 is success). Commit hashes and refs/... are refused (OSCAR_ERR_INVALID).
enum oscar_status osc_api_create_branch(struct oscar_hub * hub, const char * repo_id, const char * branch);

// ---- search.c -----------------------------------------------------------
// Appends the models of one /api/models page `j` to `out`, up to `limit` in all. Anything but an
// array of objects with a string "id" (and, when present, a string or null "lastModified" and a
// boolean "private") is OSCAR_ERR_FORMAT naming `what`.
enum oscar_status osc_search_parse_page(struct json_t * j, const char * what, int limit,
                                        struct oscar_hub_models * out);

// ---- artifacts.c --------------------------------------------------------
// Fills `a` (path already set) from the text of an oscar.json; `name` names it in messages.
// OSCAR_ERR_FORMAT (message in a->error too) for invalid JSON, no "metadata" object, a missing
// oscar.base_model / oscar.architecture / oscar.source_grouping / oscar.calib_tokens, a
// non-string value, a calib_tokens that is not a count, or a gate other than pass | fail.
enum oscar_status osc_artifact_summary_parse(const char * text, size_t len, const char * name,
                                             struct oscar_hub_artifact * a);

// ---- ndjson.c -----------------------------------------------------------
struct osc_commit_op {
    const char * path;        // path in the repo
    int          lfs;         // 1: "lfsFile" entry (oid = sha256), 0: inline "file"
    const char * oid;         // sha256 hex for LFS
    int64_t      size;
    const void * content;     // regular files: the bytes (base64-encoded here)
    size_t       content_len;
};
// Appends the commit NDJSON (header line, then one line per op) to `out`.
// parent may be NULL. Returns OSCAR_OK or OSCAR_ERR_NOMEM.
enum oscar_status osc_commit_ndjson(struct osc_buf * out, const char * summary, const char * description,
                                    const char * parent, const struct osc_commit_op * ops, int n_ops);

#endif
