// card.c - model card check before a push: README.md must start with YAML
// front matter ("---" ... "---") that parses as block mappings / sequences
// of scalars (the subset model cards use). Refuses tabs in indentation,
// unterminated quotes and brackets, lines that are neither "key: value" nor
// "- item" inside a mapping, and duplicate top-level keys.
#include "hub/hub-internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static int is_blank_or_comment(const char * s, size_t n) {
    size_t i = 0;
    while (i < n && s[i] == ' ') {
        i++;
    }
    return i == n || s[i] == '#';
}

// Flow values: quotes and brackets must balance on the line.
static int scalar_ok(const char * v, size_t n) {
    int  depth = 0;
    char quote = 0;
    for (size_t i = 0; i < n; i++) {
        char c = v[i];
        if (quote) {
            if (c == quote) {
                if (quote == '\'' && i + 1 < n && v[i + 1] == '\'') {
                    i++;
                } else {
                    quote = 0;
                }
            } else if (c == '\\' && quote == '"') {
                i++;
            }
        } else if (c == '#' && (i == 0 || v[i - 1] == ' ')) {
            break;
        } else if ((c == '"' || c == '\'') && (i == 0 || strchr(" [{,:", v[i - 1]))) {
            quote = c;
        } else if (c == '[' || c == '{') {
            depth++;
        } else if (c == ']' || c == '}') {
            if (--depth < 0) {
                return 0;
            }
        }
    }
    return !quote && depth == 0;
}

static int key_ok(const char * k, size_t n) {
    if (n == 0) {
        return 0;
    }
    if ((k[0] == '"' || k[0] == '\'') && n >= 2 && k[n - 1] == k[0]) {
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        if (!(isalnum((unsigned char) k[i]) || strchr("_-. /", k[i]))) {
            return 0;
        }
    }
    return 1;
}

// One "key: value" or "- item" line after the indentation.
static int line_ok(const char * s, size_t n, const char ** key, size_t * klen) {
    *key = NULL;
    if (n >= 1 && s[0] == '-' && (n == 1 || s[1] == ' ')) {
        size_t i = 1;
        while (i < n && s[i] == ' ') {
            i++;
        }
        const char * colon = memchr(s + i, ':', n - i);
        if (colon && (colon + 1 == s + n || colon[1] == ' ') && s[i] != '"' && s[i] != '\'' && s[i] != '[' &&
            s[i] != '{') {
            return key_ok(s + i, (size_t) (colon - s - i)) && scalar_ok(colon + 1, (size_t) (s + n - colon - 1));
        }
        return scalar_ok(s + i, n - i);
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ':' && (i + 1 == n || s[i + 1] == ' ')) {
            *key  = s;
            *klen = i;
            return key_ok(s, i) && scalar_ok(s + i + 1, n - i - 1);
        }
    }
    return 0;
}

enum oscar_status oscar_hub_check_card(const char * text, size_t len, const char * name) {
    if (len < 4 || strncmp(text, "---", 3) || (text[3] != '\n' && text[3] != '\r')) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: no YAML front matter (the file must start with a '---' line)",
                         name);
    }
    const char * p      = text + 3 + (text[3] == '\r') + 1;
    const char * end    = text + len;
    int          lineno = 2, closed = 0, n_keys = 0, block_scalar = 0;
    const char * keys[256];
    size_t       klens[256];
    while (p < end) {
        const char * nl = memchr(p, '\n', (size_t) (end - p));
        size_t       n  = nl ? (size_t) (nl - p) : (size_t) (end - p);
        if (n && p[n - 1] == '\r') {
            n--;
        }
        if (n == 3 && !strncmp(p, "---", 3)) {
            closed = 1;
            break;
        }
        size_t ind = 0;
        while (ind < n && (p[ind] == ' ' || p[ind] == '\t')) {
            if (p[ind] == '\t') {
                return osc_error(OSCAR_ERR_FORMAT, "%s:%d: tab in YAML indentation", name, lineno);
            }
            ind++;
        }
        if (block_scalar && (ind > 0 || is_blank_or_comment(p, n))) {
            // continuation of a "|" or ">" block
        } else if (!is_blank_or_comment(p, n)) {
            block_scalar   = 0;
            const char * k = NULL;
            size_t       kl = 0;
            if (!line_ok(p + ind, n - ind, &k, &kl)) {
                return osc_error(OSCAR_ERR_FORMAT, "%s:%d: not valid YAML front matter: '%.*s'", name, lineno,
                                 (int) (n < 80 ? n : 80), p);
            }
            const char * t = p + n;
            while (t > p && t[-1] == ' ') {
                t--;
            }
            block_scalar = t > p && (t[-1] == '|' || t[-1] == '>' || (t - p >= 2 && strchr("|>", t[-2])));
            if (k && ind == 0) {
                for (int i = 0; i < n_keys; i++) {
                    if (klens[i] == kl && !strncmp(keys[i], k, kl)) {
                        return osc_error(OSCAR_ERR_FORMAT, "%s:%d: duplicate key '%.*s'", name, lineno, (int) kl, k);
                    }
                }
                if (n_keys < 256) {
                    keys[n_keys]    = k;
                    klens[n_keys++] = kl;
                }
            }
        }
        lineno++;
        p = nl ? nl + 1 : end;
    }
    if (!closed) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: YAML front matter is not closed by a '---' line", name);
    }
    return OSCAR_OK;
}
