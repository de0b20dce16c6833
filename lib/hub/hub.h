// hub.h - Hugging Face Hub client: the public API used by cmd/oscar-zoo.c.
//
// Talks the real Hub HTTP API (docs/ecosystem.md §1) over libcurl and shares
// the huggingface_hub cache layout (§2). No Xet, no git: downloads go through
// /resolve/, uploads through preupload -> LFS batch (basic/multipart) -> NDJSON
// commit. Every call returns an enum oscar_status with a message naming the
// repo / file / request id at fault.
//
//   struct oscar_hub hub;
//   oscar_hub_init(&hub);                          // env: HF_ENDPOINT, HF_TOKEN, ...
//   char * local = NULL;
//   oscar_hub_download(&hub, "me/zoo", "main", "m/t/oscar.json", NULL, &local);
//   free(local); oscar_hub_free(&hub);
#ifndef OSCAR_HUB_H
#define OSCAR_HUB_H

#include <stdint.h>

#include "util/error.h"

struct oscar_hub {
    char * endpoint;        // no trailing '/'; HF_ENDPOINT or https://huggingface.co
    char * token;           // NULL when anonymous
    char * cache_dir;       // HF_HUB_CACHE or $HF_HOME/hub
    char * user_agent;      // "oscar/<ver>; curl/<ver>"
    long   connect_timeout; // seconds (HF_HUB_ETAG_TIMEOUT, default 10)
    long   read_timeout;    // seconds below low_speed (HF_HUB_DOWNLOAD_TIMEOUT, default 10)
    long   low_speed;       // bytes/s a transfer must keep up (OSCAR_HUB_LOW_SPEED_LIMIT, default 1024)
    double deadline;        // seconds one request may take, retries and waits included (plus the
                            // time its body needs at low_speed); for a download, counted from its
                            // last progress (OSCAR_HUB_DEADLINE, default 300)
    int    max_retries;     // retries after the first attempt (OSCAR_HUB_MAX_RETRIES, default 5)
    double backoff_base;    // first backoff in seconds, doubled per retry (OSCAR_HUB_BACKOFF, default 1)
    double backoff_max;     // cap for one wait (8 s)
    int    offline;         // HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE
    int    progress;        // show transfer progress on stderr
};

// Fills `hub` from the environment (see the fields). Returns OSCAR_OK or
// OSCAR_ERR_NOMEM. Free with oscar_hub_free.
enum oscar_status oscar_hub_init(struct oscar_hub * hub);
void oscar_hub_free(struct oscar_hub * hub);
// Replaces the token (NULL or "" = anonymous).
enum oscar_status oscar_hub_set_token(struct oscar_hub * hub, const char * token);

// Downloads one file of a model repo. Without local_dir it goes to the shared
// cache (blobs/, refs/, snapshots/) and *out_path is the snapshot path; with
// local_dir it is written to local_dir/path. A file absent at the revision
// returns OSCAR_ERR_NOT_FOUND (and records a .no_exist marker). Offline mode
// serves from the cache only. *out_path is malloc'ed (caller frees).
enum oscar_status oscar_hub_download(struct oscar_hub * hub, const char * repo_id, const char * revision,
                                     const char * path, const char * local_dir, char ** out_path);

// Downloads every file under `prefix` (NULL or "" = whole repo; or one file) at
// `revision`. *out_dir (malloc'ed) is the snapshot directory or local_dir;
// *n_files counts the files fetched or found. Offline, or when the Hub cannot be
// reached, the cached snapshot serves; if the commit's listing is cached
// (trees/<commit>.json), a snapshot missing any file under `prefix` is an error.
enum oscar_status oscar_hub_pull(struct oscar_hub * hub, const char * repo_id, const char * revision,
                                 const char * prefix, const char * local_dir, char ** out_dir, int * n_files);

struct oscar_hub_entry {
    char *  path;
    char *  oid;     // git blob sha1 (files) or tree oid (directories)
    char *  lfs_oid; // sha256 for LFS files, else NULL
    int64_t size;
    int     is_dir;
};

struct oscar_hub_listing {
    struct oscar_hub_entry * entries;
    int                      n;
};

// Lists the repo tree (recursive) at `revision`, following pagination.
enum oscar_status oscar_hub_list(struct oscar_hub * hub, const char * repo_id, const char * revision,
                                 const char * prefix, struct oscar_hub_listing * out);
void oscar_hub_listing_free(struct oscar_hub_listing * l);

struct oscar_hub_info {
    char *  id;
    char *  sha;           // commit at the revision
    char *  last_modified; // may be NULL
    int     is_private;
    int     n_siblings;
};

enum oscar_status oscar_hub_info(struct oscar_hub * hub, const char * repo_id, const char * revision,
                                 struct oscar_hub_info * out);
void oscar_hub_info_free(struct oscar_hub_info * info);

struct oscar_hub_push_opts {
    const char * repo_id;
    const char * path_in_repo;   // prefix in the repo ("" = root)
    const char * revision;       // branch, default "main"; a new one is created from the default branch's head
    const char * message;        // commit summary (default "Upload with oscar-zoo")
    int          is_private;     // when creating the repo
    int          skip_card_check;
};

struct oscar_hub_push_result {
    char * commit_oid;  // NULL when nothing changed
    char * commit_url;
    int    n_regular;   // files sent inline
    int    n_lfs;       // files sent through LFS (uploaded or already stored)
    int    n_unchanged; // skipped: same oid already on the branch
};

// Uploads every file of `dir` (recursively, skipping dot-folders) in one commit.
enum oscar_status oscar_hub_push(struct oscar_hub * hub, const char * dir, const struct oscar_hub_push_opts * o,
                                 struct oscar_hub_push_result * out);
void oscar_hub_push_result_free(struct oscar_hub_push_result * r);

// ---- search (search.c) ---------------------------------------------------------------
// The library tag of oscar's model cards (library_name: oscar, tags: [oscar, ...]).
#define OSCAR_HUB_LIBRARY_TAG "oscar"

struct oscar_hub_model {
    char * id;
    char * last_modified; // ISO 8601, NULL when the Hub did not send it
    int    is_private;
};

struct oscar_hub_models {
    struct oscar_hub_model * items;
    int                      n;
};

struct oscar_hub_search {
    const char *         search;  // substring of the repo id, or NULL
    const char *         author;  // owner (user or organization), or NULL
    const char * const * filters; // tags every result carries (NULL-terminated), or NULL
    int                  limit;   // at most this many results (<= 0: 100)
};

// GET /api/models with the query, following the Link pagination until `limit` results.
enum oscar_status oscar_hub_search_models(struct oscar_hub * hub, const struct oscar_hub_search * q,
                                          struct oscar_hub_models * out);
// Repos of oscar artifacts for a base model: the filters "oscar" and "base_model:<id>" (the Hub
// derives that tag from a card's base_model), optionally of one author. A bad id or author is
// OSCAR_ERR_INVALID.
enum oscar_status oscar_hub_search_artifacts(struct oscar_hub * hub, const char * base_model, const char * author,
                                             int limit, struct oscar_hub_models * out);
void oscar_hub_models_free(struct oscar_hub_models * m);

// ---- artifacts in a repo (artifacts.c) ------------------------------------------------
// One directory of a repo holding an oscar.json, with the oscar.json metadata that says what it is.
struct oscar_hub_artifact {
    char * path;          // the directory in the repo, "" for the repo root
    char * base_model;    // oscar.base_model (a display name)
    char * base_model_id; // oscar.base_model_id (the base model's Hub id), NULL in older artifacts
    char * architecture;  // oscar.architecture
    char * grouping;      // oscar.source_grouping: layer | kv_head (the tensors' layout)
    int auto_layers;      // --rotation-grouping auto (oscar.grouping_layers): its layers, else 0
    int auto_head_layers; // of those, the layers with a rotation per KV head
    char * calib_tag;     // oscar.calib_tag
    long long calib_tokens; // oscar.calib_tokens
    char * gate;          // oscar.gate: pass | fail, NULL in older artifacts
    char * error;         // why its oscar.json could not be read; then only `path` is set
};

struct oscar_hub_artifacts {
    struct oscar_hub_artifact * items; // sorted by path
    int                         n;
    int                         n_bad; // items with an error
    char                        commit[41];
};

// Every directory holding an oscar.json at `revision` (NULL: main), resolved to one commit first
// so that all of them come from the same snapshot; each oscar.json is downloaded through the
// shared cache. A malformed oscar.json is an item with `error` set (counted in n_bad), not a
// failure; network, HTTP and cache errors are.
enum oscar_status oscar_hub_list_artifacts(struct oscar_hub * hub, const char * repo_id, const char * revision,
                                           struct oscar_hub_artifacts * out);
void oscar_hub_artifacts_free(struct oscar_hub_artifacts * l);

// Splits a Hub spec "owner/name[@revision][:path]" into malloc'ed parts
// (*revision / *path NULL when absent). OSCAR_ERR_INVALID for anything else.
enum oscar_status oscar_hub_parse_spec(const char * spec, char ** repo_id, char ** revision, char ** path);

// For arguments that take a local path or a Hub repo: an existing local path
// is returned as is (copied); otherwise `spec` must be a Hub spec, pulled
// into the shared cache (offline: served from it) and resolved to the local
// snapshot path of its :path (or the snapshot root). *local_path is malloc'ed.
enum oscar_status oscar_hub_resolve_local(struct oscar_hub * hub, const char * spec, char ** local_path);

// 1 when `id` is "owner/name" as the Hub accepts a model or dataset id
// (osc_repo_id_valid's rules, with the owner required).
int oscar_hub_repo_id_valid(const char * id);

// Checks README.md model-card text (libyaml): YAML front matter between
// '---' lines, one document whose root is a mapping without duplicate keys,
// with license / library_name a string and tags / datasets / base_model a
// string or a list of strings. Returns OSCAR_ERR_FORMAT naming `name`, the
// line and libyaml's problem text on failure.
enum oscar_status oscar_hub_check_card(const char * text, size_t len, const char * name);
// The front matter's top-level scalar `key` (malloc'ed) in *value, or NULL
// when absent, empty or not a scalar. Errors as oscar_hub_check_card's.
enum oscar_status oscar_hub_card_get(const char * text, size_t len, const char * name, const char * key,
                                     char ** value);

#endif
