// artifacts.c - the oscar artifacts inside a Hub repo: every directory with an
// oscar.json (from the recursive tree listing at one commit), described by
// the metadata of that oscar.json (downloaded alone, through the shared cache).
// A malformed oscar.json marks its artifact bad (a->error) and the listing goes
// on; network, HTTP and cache errors end it.
#include "hub/hub-internal.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fs.h"

#define ARTIFACT_JSON     "oscar.json"
#define ARTIFACT_JSON_MAX ((size_t) 64 << 20) // metadata and a verification summary: far below this

static void clear_fields(struct oscar_hub_artifact * a) {
    char ** s[] = { &a->base_model, &a->base_model_id, &a->architecture, &a->grouping, &a->calib_tag,
                    &a->gate,       &a->error };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        free(*s[i]);
        *s[i] = NULL;
    }
    a->calib_tokens = 0;
    a->auto_layers = a->auto_head_layers = 0;
}

// Marks `a` bad with the message (also recorded as the error) and returns OSCAR_ERR_FORMAT.
static enum oscar_status bad(struct oscar_hub_artifact * a, const char * fmt, ...) __attribute__((format(printf, 2, 3)));
static enum oscar_status bad(struct oscar_hub_artifact * a, const char * fmt, ...) {
    char    msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    clear_fields(a);
    a->error = strdup(msg);
    return osc_error(a->error ? OSCAR_ERR_FORMAT : OSCAR_ERR_NOMEM, "%s", msg);
}

// oscar.grouping_layers (--rotation-grouping auto): one word per layer, "layer" or "kv_head". A mixed
// artifact stores per-KV-head tensors, so oscar.source_grouping alone would call it kv_head.
static enum oscar_status parse_auto_grouping(json_t * v, const char * name, struct oscar_hub_artifact * a) {
    if (!v) return OSCAR_OK;
    const char * s = json_string_value(v);
    if (!s) return bad(a, "%s: metadata \"oscar.grouping_layers\" is not a string", name);
    int layers = 0, heads = 0;
    for (const char * w = s;; w++) {
        const size_t n = strcspn(w, ",");
        const bool head = n == 7 && !strncmp(w, "kv_head", 7);
        if (!head && !(n == 5 && !strncmp(w, "layer", 5)))
            return bad(a, "%s: metadata \"oscar.grouping_layers\" word %d is not layer or kv_head", name, layers);
        layers++, heads += head;
        w += n;
        if (!*w) break;
    }
    a->auto_layers = layers, a->auto_head_layers = heads;
    return OSCAR_OK;
}

static enum oscar_status parse_metadata(json_t * md, const char * name, struct oscar_hub_artifact * a) {
    const struct {
        const char * key;
        char **      dst;
        int          required;
    } fields[] = {
        { "oscar.base_model", &a->base_model, 1 },       { "oscar.base_model_id", &a->base_model_id, 0 },
        { "oscar.architecture", &a->architecture, 1 },   { "oscar.source_grouping", &a->grouping, 1 },
        { "oscar.calib_tag", &a->calib_tag, 0 },         { "oscar.gate", &a->gate, 0 },
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        json_t * v = json_object_get(md, fields[i].key);
        if (!v && fields[i].required) {
            return bad(a, "%s: metadata has no \"%s\"", name, fields[i].key);
        }
        if (v && !json_is_string(v)) {
            return bad(a, "%s: metadata \"%s\" is not a string", name, fields[i].key);
        }
        if (v && !(*fields[i].dst = strdup(json_string_value(v)))) {
            return osc_error(OSCAR_ERR_NOMEM, "out of memory");
        }
    }
    const char * tok = json_string_value(json_object_get(md, "oscar.calib_tokens"));
    char *       end = NULL;
    long long    n   = tok ? strtoll(tok, &end, 10) : -1;
    if (!tok || !*tok || *end || n < 0) {
        return bad(a, "%s: metadata \"oscar.calib_tokens\" is missing or not a token count", name);
    }
    a->calib_tokens = n;
    if (a->gate && strcmp(a->gate, "pass") && strcmp(a->gate, "fail")) {
        return bad(a, "%s: metadata \"oscar.gate\" is '%s', not pass or fail", name, a->gate);
    }
    return parse_auto_grouping(json_object_get(md, "oscar.grouping_layers"), name, a);
}

enum oscar_status osc_artifact_summary_parse(const char * text, size_t len, const char * name,
                                             struct oscar_hub_artifact * a) {
    clear_fields(a);
    json_error_t e;
    json_t *     j = json_loadb(text ? text : "", len, 0, &e);
    if (!j) {
        return bad(a, "%s: not valid JSON (line %d): %s", name, e.line, e.text);
    }
    json_t *          md = json_object_get(j, "metadata");
    enum oscar_status st = json_is_object(md) ? parse_metadata(md, name, a)
                                              : bad(a, "%s: no \"metadata\" object", name);
    json_decref(j);
    return st;
}

static int is_artifact_json(const struct oscar_hub_entry * e) {
    size_t n = strlen(e->path), k = strlen(ARTIFACT_JSON);
    return !e->is_dir && n >= k && !strcmp(e->path + n - k, ARTIFACT_JSON) && (n == k || e->path[n - k - 1] == '/');
}

static int cmp_path(const void * x, const void * y) {
    return strcmp(((const struct oscar_hub_artifact *) x)->path, ((const struct oscar_hub_artifact *) y)->path);
}

// The directories holding an oscar.json, sorted, with only `path` set.
static enum oscar_status collect(const struct oscar_hub_listing * l, struct oscar_hub_artifacts * out) {
    for (int i = 0; i < l->n; i++) {
        if (!is_artifact_json(&l->entries[i])) {
            continue;
        }
        struct oscar_hub_artifact * na = realloc(out->items, (size_t) (out->n + 1) * sizeof *na);
        if (!na) {
            return osc_error(OSCAR_ERR_NOMEM, "out of memory");
        }
        out->items                  = na;
        struct oscar_hub_artifact * a = &na[out->n++];
        memset(a, 0, sizeof *a);
        size_t dir_len = strlen(l->entries[i].path) - strlen(ARTIFACT_JSON);
        a->path        = strndup(l->entries[i].path, dir_len ? dir_len - 1 : 0); // without the '/'
        if (!a->path) {
            return osc_error(OSCAR_ERR_NOMEM, "out of memory");
        }
    }
    if (out->n > 1) {
        qsort(out->items, (size_t) out->n, sizeof *out->items, cmp_path);
    }
    return OSCAR_OK;
}

// Downloads and reads one artifact's oscar.json; only a malformed file is left to a->error.
static enum oscar_status describe(struct oscar_hub * hub, const char * repo_id, const char * commit,
                                  struct oscar_hub_artifact * a) {
    char * file  = *a->path ? osc_path_join(a->path, ARTIFACT_JSON) : strdup(ARTIFACT_JSON);
    char * local = NULL, * text = NULL;
    size_t len   = 0;
    if (!file) {
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    enum oscar_status st = oscar_hub_download(hub, repo_id, commit, file, NULL, &local);
    if (st == OSCAR_OK) {
        st = osc_read_file(local, ARTIFACT_JSON_MAX, &text, &len);
    }
    if (st == OSCAR_OK && osc_artifact_summary_parse(text, len, file, a) == OSCAR_ERR_NOMEM) {
        st = OSCAR_ERR_NOMEM;
    }
    free(text);
    free(local);
    free(file);
    return st;
}

enum oscar_status oscar_hub_list_artifacts(struct oscar_hub * hub, const char * repo_id, const char * revision,
                                           struct oscar_hub_artifacts * out) {
    memset(out, 0, sizeof *out);
    struct oscar_hub_info    info;
    struct oscar_hub_listing l  = { 0 };
    enum oscar_status        st = oscar_hub_info(hub, repo_id, revision, &info);
    if (st != OSCAR_OK) {
        return st;
    }
    memcpy(out->commit, info.sha, 41);
    oscar_hub_info_free(&info);
    if ((st = oscar_hub_list(hub, repo_id, out->commit, NULL, &l)) == OSCAR_OK) {
        st = collect(&l, out);
    }
    for (int i = 0; st == OSCAR_OK && i < out->n; i++) {
        st = describe(hub, repo_id, out->commit, &out->items[i]);
        out->n_bad += out->items[i].error != NULL;
    }
    oscar_hub_listing_free(&l);
    if (st != OSCAR_OK) {
        oscar_hub_artifacts_free(out);
    }
    return st;
}

void oscar_hub_artifacts_free(struct oscar_hub_artifacts * l) {
    for (int i = 0; i < l->n; i++) {
        clear_fields(&l->items[i]);
        free(l->items[i].path);
    }
    free(l->items);
    memset(l, 0, sizeof *l);
}
