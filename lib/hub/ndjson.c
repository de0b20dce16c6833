// ndjson.c - the body of POST /api/models/{repo}/commit/{rev}: one JSON
// object per line, {"key":"header"} first, then "file" (base64 content) and
// "lfsFile" (sha256 oid + size) entries (docs/ecosystem.md §1.5).
#include "hub/hub-internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static int put_line(struct osc_buf * out, const char * key, json_t * value) {
    json_t * o = json_object();
    json_object_set_new(o, "key", json_string(key));
    json_object_set_new(o, "value", value);
    char * s  = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    int    rc = (!s || osc_buf_append(out, s, strlen(s)) || osc_buf_append(out, "\n", 1)) ? -1 : 0;
    free(s);
    json_decref(o);
    return rc;
}

enum oscar_status osc_commit_ndjson(struct osc_buf * out, const char * summary, const char * description,
                                    const char * parent, const struct osc_commit_op * ops, int n_ops) {
    json_t * h = json_object();
    json_object_set_new(h, "summary", json_string(summary));
    json_object_set_new(h, "description", json_string(description ? description : ""));
    if (parent) {
        json_object_set_new(h, "parentCommit", json_string(parent));
    }
    if (put_line(out, "header", h)) {
        return osc_error(OSCAR_ERR_NOMEM, "commit: out of memory");
    }
    for (int i = 0; i < n_ops; i++) {
        const struct osc_commit_op * op = &ops[i];
        json_t *                     v  = json_object();
        json_object_set_new(v, "path", json_string(op->path));
        if (op->lfs) {
            json_object_set_new(v, "algo", json_string("sha256"));
            json_object_set_new(v, "oid", json_string(op->oid));
            json_object_set_new(v, "size", json_integer(op->size));
        } else {
            char * b64 = osc_base64_encode(op->content, op->content_len);
            if (!b64) {
                json_decref(v);
                return osc_error(OSCAR_ERR_NOMEM, "commit: out of memory");
            }
            json_object_set_new(v, "content", json_string(b64));
            json_object_set_new(v, "encoding", json_string("base64"));
            free(b64);
        }
        if (put_line(out, op->lfs ? "lfsFile" : "file", v)) {
            return osc_error(OSCAR_ERR_NOMEM, "commit: out of memory (%s)", op->path);
        }
    }
    return OSCAR_OK;
}
