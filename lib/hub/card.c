// card.c - model card front matter, read with libyaml: the push-time check
// (oscar_hub_check_card) and reading one top-level scalar (oscar_hub_card_get).
//
// The front matter is the text between a first line "---" and the next line
// "---". It must be one YAML document whose root is a mapping with unique
// keys; the keys the Hub reads must have the shapes it expects. Errors name
// the file and line (of the whole file, not of the front matter) and quote
// libyaml's problem text.
#include "hub/hub-internal.h"

#include <stdlib.h>
#include <string.h>
#include <yaml.h>

// The front matter's first byte and length, and the file line it starts on.
struct front_matter {
    const char * text;
    size_t       len;
    int          first_line;
};

// A line that is exactly "---" (a CR before the newline allowed).
static int is_fence(const char * p, const char * end) {
    if (end - p < 3 || strncmp(p, "---", 3) != 0) return 0;
    p += 3;
    if (p < end && *p == '\r') p++;
    return p == end || *p == '\n';
}

static enum oscar_status find_front_matter(const char * text, size_t len, const char * name,
                                           struct front_matter * fm) {
    const char * end = text + len;
    if (!is_fence(text, end))
        return osc_error(OSCAR_ERR_FORMAT, "%s: no YAML front matter (the file must start with a '---' line)", name);
    const char * nl = memchr(text, '\n', len);
    fm->text        = nl ? nl + 1 : end;
    fm->first_line  = 2;
    for (const char * p = fm->text; p < end;) {
        if (is_fence(p, end)) {
            fm->len = (size_t) (p - fm->text);
            return OSCAR_OK;
        }
        nl = memchr(p, '\n', (size_t) (end - p));
        p  = nl ? nl + 1 : end;
    }
    return osc_error(OSCAR_ERR_FORMAT, "%s: YAML front matter is not closed by a '---' line", name);
}

// 1 when front-matter line `line` (0-based) has a tab before its first other character.
static int indented_with_tab(const struct front_matter * fm, size_t line) {
    const char * p = fm->text, * end = fm->text + fm->len;
    for (size_t l = 0; l < line && p < end; l++) {
        const char * nl = memchr(p, '\n', (size_t) (end - p));
        p               = nl ? nl + 1 : end;
    }
    while (p < end && *p == ' ') p++;
    return p < end && *p == '\t';
}

static enum oscar_status parser_error(const yaml_parser_t * yp, const struct front_matter * fm, const char * name) {
    int line = fm->first_line + (int) yp->problem_mark.line;
    if (yp->error == YAML_MEMORY_ERROR) return osc_error(OSCAR_ERR_NOMEM, "%s: YAML front matter: out of memory", name);
    char context[256] = "";
    if (yp->context)
        snprintf(context, sizeof context, " (%s at %s:%d)", yp->context, name,
                 fm->first_line + (int) yp->context_mark.line);
    return osc_error(OSCAR_ERR_FORMAT, "%s:%d: YAML front matter: %s%s%s", name, line,
                     yp->problem ? yp->problem : "not valid YAML", context,
                     indented_with_tab(fm, yp->problem_mark.line) ? "; the line is indented with a tab (YAML "
                                                                    "indents with spaces)"
                                                                  : "");
}

// Parses the front matter into *doc (a single document with a mapping root).
static enum oscar_status load(const struct front_matter * fm, const char * name, yaml_document_t * doc) {
    yaml_parser_t yp;
    if (!yaml_parser_initialize(&yp)) return osc_error(OSCAR_ERR_NOMEM, "%s: YAML parser: out of memory", name);
    yaml_parser_set_input_string(&yp, (const unsigned char *) fm->text, fm->len);
    enum oscar_status st = OSCAR_OK;
    if (!yaml_parser_load(&yp, doc)) {
        st = parser_error(&yp, fm, name);
        yaml_parser_delete(&yp);
        return st;
    }
    const yaml_node_t * root = yaml_document_get_root_node(doc);
    yaml_document_t     next;
    if (!root) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s: YAML front matter is empty (expected 'key: value' lines)", name);
    } else if (root->type != YAML_MAPPING_NODE) {
        st = osc_error(OSCAR_ERR_FORMAT, "%s:%d: YAML front matter is a %s, not a mapping of 'key: value' lines",
                       name, fm->first_line + (int) root->start_mark.line,
                       root->type == YAML_SEQUENCE_NODE ? "sequence" : "single scalar");
    } else if (!yaml_parser_load(&yp, &next)) {
        st = parser_error(&yp, fm, name);
    } else {
        const yaml_node_t * extra = yaml_document_get_root_node(&next);
        if (extra)
            st = osc_error(OSCAR_ERR_FORMAT, "%s:%d: YAML front matter holds more than one document", name,
                           fm->first_line + (int) extra->start_mark.line);
        yaml_document_delete(&next);
    }
    yaml_parser_delete(&yp);
    if (st != OSCAR_OK) yaml_document_delete(doc);
    return st;
}

static const char * scalar(const yaml_node_t * n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *) n->data.scalar.value : NULL;
}

static int is_scalar_or_scalar_list(yaml_document_t * doc, const yaml_node_t * v) {
    if (v->type == YAML_SCALAR_NODE) return 1;
    if (v->type != YAML_SEQUENCE_NODE) return 0;
    for (const yaml_node_item_t * i = v->data.sequence.items.start; i < v->data.sequence.items.top; i++) {
        if (!scalar(yaml_document_get_node(doc, *i))) return 0;
    }
    return 1;
}

// The Hub's keys and the shape each must have.
static const struct {
    const char * key;
    int          list_ok; // a sequence of scalars is allowed too
} hub_keys[] = {
    {"license", 0}, {"library_name", 0}, {"tags", 1}, {"datasets", 1}, {"base_model", 1},
};

static enum oscar_status check_keys(yaml_document_t * doc, const char * name, int first_line) {
    const yaml_node_t * root = yaml_document_get_root_node(doc);
    const yaml_node_pair_t * pairs = root->data.mapping.pairs.start, * top = root->data.mapping.pairs.top;
    for (const yaml_node_pair_t * p = pairs; p < top; p++) {
        const yaml_node_t * k = yaml_document_get_node(doc, p->key), * v = yaml_document_get_node(doc, p->value);
        int                 line = first_line + (int) k->start_mark.line;
        const char *        key  = scalar(k);
        if (!key) return osc_error(OSCAR_ERR_FORMAT, "%s:%d: a top-level key is not a plain string", name, line);
        for (const yaml_node_pair_t * q = pairs; q < p; q++) {
            const char * seen = scalar(yaml_document_get_node(doc, q->key));
            if (seen && !strcmp(seen, key))
                return osc_error(OSCAR_ERR_FORMAT, "%s:%d: duplicate key '%s' (first at line %d)", name, line, key,
                                 first_line + (int) yaml_document_get_node(doc, q->key)->start_mark.line);
        }
        for (size_t i = 0; i < sizeof hub_keys / sizeof hub_keys[0]; i++) {
            if (strcmp(key, hub_keys[i].key) != 0) continue;
            int ok = hub_keys[i].list_ok ? is_scalar_or_scalar_list(doc, v) : v->type == YAML_SCALAR_NODE;
            if (!ok)
                return osc_error(OSCAR_ERR_FORMAT, "%s:%d: '%s' must be %s", name,
                                 first_line + (int) v->start_mark.line, key,
                                 hub_keys[i].list_ok ? "a string or a list of strings" : "a string");
        }
    }
    return OSCAR_OK;
}

enum oscar_status oscar_hub_check_card(const char * text, size_t len, const char * name) {
    struct front_matter fm;
    yaml_document_t     doc;
    enum oscar_status   st = find_front_matter(text, len, name, &fm);
    if (st == OSCAR_OK) st = load(&fm, name, &doc);
    if (st != OSCAR_OK) return st;
    st = check_keys(&doc, name, fm.first_line);
    yaml_document_delete(&doc);
    return st;
}

enum oscar_status oscar_hub_card_get(const char * text, size_t len, const char * name, const char * key,
                                     char ** value) {
    struct front_matter fm;
    yaml_document_t     doc;
    *value               = NULL;
    enum oscar_status st = find_front_matter(text, len, name, &fm);
    if (st == OSCAR_OK) st = load(&fm, name, &doc);
    if (st != OSCAR_OK) return st;
    const yaml_node_t * root = yaml_document_get_root_node(&doc);
    for (const yaml_node_pair_t * p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        const char * k = scalar(yaml_document_get_node(&doc, p->key));
        const char * v = scalar(yaml_document_get_node(&doc, p->value));
        if (k && v && *v && !strcmp(k, key)) {
            free(*value); // a duplicate key: the last one wins, as in PyYAML
            if (!(*value = strdup(v))) st = osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", name);
        }
    }
    yaml_document_delete(&doc);
    return st;
}
