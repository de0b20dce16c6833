// search.c - model search: GET /api/models?search=&author=&filter=...&limit=
// with the Hub's Link pagination, and the oscar query on top of it (repos
// tagged with the library "oscar" and "base_model:<id>", the tags the Hub
// derives from a model card's front matter).
// Refuses answers that are not an array of objects with a string "id", and
// wrong types in the fields it reads, naming the endpoint.
#include "hub/hub-internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define SEARCH_DEFAULT_LIMIT 100
#define SEARCH_PAGE_MAX      1000 // the largest page the Hub serves
#define SEARCH_MAX_PAGES     10000

static enum oscar_status add_model(struct oscar_hub_models * out, const char * id, const char * modified,
                                   int is_private) {
    struct oscar_hub_model * nm = realloc(out->items, (size_t) (out->n + 1) * sizeof *nm);
    if (!nm) {
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    out->items             = nm;
    struct oscar_hub_model * m = &nm[out->n++];
    m->id                  = strdup(id);
    m->last_modified       = modified ? strdup(modified) : NULL;
    m->is_private          = is_private;
    return m->id && (!modified || m->last_modified) ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "out of memory");
}

enum oscar_status osc_search_parse_page(json_t * j, const char * what, int limit, struct oscar_hub_models * out) {
    enum oscar_status st = json_is_array(j) ? OSCAR_OK : osc_error(OSCAR_ERR_FORMAT, "%s: answer is not a JSON array",
                                                                  what);
    size_t   i;
    json_t * m;
    json_array_foreach(j, i, m) {
        if (st != OSCAR_OK || out->n >= limit) {
            break;
        }
        json_t * id  = json_object_get(m, "id");
        json_t * mod = json_object_get(m, "lastModified");
        json_t * prv = json_object_get(m, "private");
        if (!json_is_object(m) || !json_is_string(id) || !*json_string_value(id)) {
            st = osc_error(OSCAR_ERR_FORMAT, "%s: entry %zu has no string 'id'", what, i);
        } else if ((mod && !json_is_string(mod) && !json_is_null(mod)) || (prv && !json_is_boolean(prv))) {
            st = osc_error(OSCAR_ERR_FORMAT, "%s: entry '%s': 'lastModified' is not a string or 'private' not a "
                           "boolean", what, json_string_value(id));
        } else {
            st = add_model(out, json_string_value(id), json_string_value(mod), json_is_true(prv));
        }
    }
    return st;
}

// Appends "&name=quoted(value)"; nothing for a NULL or empty value. 0 ok, -1 no memory.
static int add_param(struct osc_buf * b, const char * name, const char * value) {
    if (!value || !*value) {
        return 0;
    }
    char * v  = osc_url_quote(value, "");
    int    rc = v ? osc_buf_printf(b, "&%s=%s", name, v) : -1;
    free(v);
    return rc;
}

// "{endpoint}/api/models?limit=N&search=..&author=..&filter=..&expand=lastModified&expand=private"
static char * search_url(const struct oscar_hub * hub, const struct oscar_hub_search * q, int page) {
    struct osc_buf b  = { 0 };
    int            rc = osc_buf_printf(&b, "%s/api/models?limit=%d", hub->endpoint, page);
    rc |= add_param(&b, "search", q->search);
    rc |= add_param(&b, "author", q->author);
    for (size_t k = 0; q->filters && q->filters[k]; k++) {
        rc |= add_param(&b, "filter", q->filters[k]);
    }
    // The Hub's default fields leave lastModified out; ask for what is printed.
    rc |= add_param(&b, "expand", "lastModified");
    rc |= add_param(&b, "expand", "private");
    if (rc != 0) {
        osc_buf_free(&b);
        return NULL;
    }
    return b.data;
}

enum oscar_status oscar_hub_search_models(struct oscar_hub * hub, const struct oscar_hub_search * q,
                                          struct oscar_hub_models * out) {
    memset(out, 0, sizeof *out);
    if (hub->offline) {
        return osc_error(OSCAR_ERR_NETWORK, "model search needs the network (HF_HUB_OFFLINE is set)");
    }
    int               limit = q->limit > 0 ? q->limit : SEARCH_DEFAULT_LIMIT;
    char *            url   = search_url(hub, q, limit < SEARCH_PAGE_MAX ? limit : SEARCH_PAGE_MAX);
    enum oscar_status st    = url ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "out of memory");
    const char *      what  = "GET /api/models (model search)";
    for (int page = 0; url && st == OSCAR_OK && out->n < limit; page++) {
        struct osc_http_resp r;
        osc_http_resp_reset(&r);
        json_t * j = NULL;
        st         = osc_api_get_json(hub, url, what, &j, &r);
        if (st == OSCAR_OK) {
            st = osc_search_parse_page(j, what, limit, out);
        }
        json_decref(j);
        free(url);
        url = NULL;
        if (st == OSCAR_OK && r.link_next && out->n < limit) {
            if (!osc_url_same_origin(r.link_next, hub->endpoint) || page >= SEARCH_MAX_PAGES) {
                st = osc_error(OSCAR_ERR_FORMAT, "%s: pagination link to another host: %s", what, r.link_next);
            } else if (!(url = strdup(r.link_next))) {
                st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
            }
        }
        osc_http_resp_free(&r);
    }
    free(url);
    if (st != OSCAR_OK) {
        oscar_hub_models_free(out);
    }
    return st;
}

enum oscar_status oscar_hub_search_artifacts(struct oscar_hub * hub, const char * base_model, const char * author,
                                             int limit, struct oscar_hub_models * out) {
    memset(out, 0, sizeof *out);
    if (!base_model || !osc_repo_id_valid(base_model)) {
        return osc_error(OSCAR_ERR_INVALID, "'%s': not a Hub model id (owner/name)", base_model ? base_model : "");
    }
    if (author && (!*author || strchr(author, '/') || !osc_repo_id_valid(author))) {
        return osc_error(OSCAR_ERR_INVALID, "'%s': not a Hub user or organization name", author);
    }
    char * tag = malloc(strlen(base_model) + sizeof "base_model:");
    if (!tag) {
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    sprintf(tag, "base_model:%s", base_model);
    const char *             filters[] = { OSCAR_HUB_LIBRARY_TAG, tag, NULL };
    struct oscar_hub_search  q         = { .author = author, .filters = filters, .limit = limit };
    enum oscar_status        st        = oscar_hub_search_models(hub, &q, out);
    free(tag);
    return st;
}

void oscar_hub_models_free(struct oscar_hub_models * m) {
    for (int i = 0; i < m->n; i++) {
        free(m->items[i].id);
        free(m->items[i].last_modified);
    }
    free(m->items);
    memset(m, 0, sizeof *m);
}
