// url.c - URL quoting and building, repo id / revision / path validation,
// the token-host rule. Pure string functions: no I/O, no libcurl.
#include "hub/hub-internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int unreserved(unsigned char c) {
    return isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

char * osc_url_quote(const char * s, const char * safe) {
    size_t n   = strlen(s);
    char * out = malloc(3 * n + 1);
    if (!out) {
        return NULL;
    }
    char * o = out;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) s[i];
        if (unreserved(c) || (c && safe && strchr(safe, c))) {
            *o++ = (char) c;
        } else {
            o += sprintf(o, "%%%02X", c);
        }
    }
    *o = '\0';
    return out;
}

static char * join3(const char * a, const char * b, const char * c, const char * d, const char * e) {
    size_t n   = strlen(a) + strlen(b) + strlen(c) + strlen(d) + strlen(e) + 1;
    char * out = malloc(n);
    if (out) {
        snprintf(out, n, "%s%s%s%s%s", a, b, c, d, e);
    }
    return out;
}

char * osc_url_resolve(const char * endpoint, const char * repo_id, const char * rev, const char * path) {
    char * qr  = osc_url_quote(rev, "");
    char * qp  = osc_url_quote(path, "/");
    char * out = NULL;
    if (qr && qp) {
        size_t n = strlen(endpoint) + strlen(repo_id) + strlen(qr) + strlen(qp) + 16;
        out      = malloc(n);
        if (out) {
            snprintf(out, n, "%s/%s/resolve/%s/%s", endpoint, repo_id, qr, qp);
        }
    }
    free(qr);
    free(qp);
    return out;
}

char * osc_url_api(const char * endpoint, const char * repo_id, const char * suffix) {
    return join3(endpoint, "/api/models/", repo_id, suffix, "");
}

// Splits "scheme://[userinfo@]host[:port]/..." into lowercase scheme, host, port.
static int parse_origin(const char * url, char * scheme, size_t ns, char * host, size_t nh, long * port) {
    const char * p = strstr(url, "://");
    if (!p || (size_t) (p - url) >= ns) {
        return -1;
    }
    for (size_t i = 0; i < (size_t) (p - url); i++) {
        scheme[i] = (char) tolower((unsigned char) url[i]);
    }
    scheme[p - url] = '\0';
    const char * h   = p + 3;
    const char * end = h + strcspn(h, "/?#");
    const char * at  = memchr(h, '@', (size_t) (end - h));
    if (at) {
        h = at + 1;
    }
    const char * colon = NULL;
    if (*h == '[') { // IPv6 literal
        const char * rb = memchr(h, ']', (size_t) (end - h));
        if (!rb) {
            return -1;
        }
        colon = (rb + 1 < end && rb[1] == ':') ? rb + 1 : NULL;
    } else {
        colon = memchr(h, ':', (size_t) (end - h));
    }
    const char * hend = colon ? colon : end;
    if ((size_t) (hend - h) >= nh || hend == h) {
        return -1;
    }
    for (size_t i = 0; i < (size_t) (hend - h); i++) {
        host[i] = (char) tolower((unsigned char) h[i]);
    }
    host[hend - h] = '\0';
    if (colon && colon + 1 < end) {
        char * e = NULL;
        *port    = strtol(colon + 1, &e, 10);
        if (e != end || *port <= 0 || *port > 65535) {
            return -1;
        }
    } else if (!strcmp(scheme, "https")) {
        *port = 443;
    } else if (!strcmp(scheme, "http")) {
        *port = 80;
    } else {
        return -1;
    }
    return 0;
}

int osc_url_same_origin(const char * a, const char * b) {
    char sa[16], sb[16], ha[256], hb[256];
    long pa = 0, pb = 0;
    if (parse_origin(a, sa, sizeof sa, ha, sizeof ha, &pa) || parse_origin(b, sb, sizeof sb, hb, sizeof hb, &pb)) {
        return 0;
    }
    return !strcmp(sa, sb) && !strcmp(ha, hb) && pa == pb;
}

char * osc_etag_normalize(const char * etag) {
    const char * s = etag;
    while (*s == ' ') {
        s++;
    }
    if (!strncmp(s, "W/", 2)) {
        s += 2;
    }
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\r' || s[n - 1] == '\n')) {
        n--;
    }
    if (n >= 2 && s[0] == '"' && s[n - 1] == '"') {
        s++;
        n -= 2;
    }
    return strndup(s, n);
}

static int name_ok(const char * s, size_t n) {
    if (n == 0 || n > 96 || s[0] == '-' || s[0] == '.' || s[n - 1] == '-' || s[n - 1] == '.') {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) s[i];
        if (!(isalnum(c) || c == '-' || c == '_' || c == '.')) {
            return 0;
        }
        if (i && ((c == '-' && s[i - 1] == '-') || (c == '.' && s[i - 1] == '.'))) {
            return 0;
        }
    }
    return 1;
}

int osc_repo_id_valid(const char * repo_id) {
    const char * slash = strchr(repo_id, '/');
    if (!slash) {
        return name_ok(repo_id, strlen(repo_id));
    }
    return !strchr(slash + 1, '/') && name_ok(repo_id, (size_t) (slash - repo_id)) &&
           name_ok(slash + 1, strlen(slash + 1));
}

int oscar_hub_repo_id_valid(const char * id) {
    return strchr(id, '/') != NULL && osc_repo_id_valid(id);
}

int osc_revision_valid(const char * rev) {
    size_t n = strlen(rev);
    if (n == 0 || n > 255 || rev[0] == '/' || rev[n - 1] == '/' || rev[n - 1] == '.' || !strcmp(rev, "@") ||
        strstr(rev, "..") || strstr(rev, "//") || strstr(rev, "@{") || strstr(rev, "/.") || rev[0] == '.') {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) rev[i];
        if (c < 0x20 || c == 0x7f || strchr(" ~^:?*[\\", c)) {
            return 0;
        }
    }
    // No component may end in ".lock" (git refuses it: the lock file of that ref).
    for (const char * p = strstr(rev, ".lock"); p; p = strstr(p + 1, ".lock")) {
        if (p[5] == '\0' || p[5] == '/') {
            return 0;
        }
    }
    return 1;
}

enum oscar_status osc_check_repo_rev(const char * repo_id, const char * rev) {
    if (repo_id && !osc_repo_id_valid(repo_id)) {
        return osc_error(OSCAR_ERR_INVALID, "'%s': not a valid repo id (expected owner/name)", repo_id);
    }
    if (rev && !osc_revision_valid(rev)) {
        return osc_error(OSCAR_ERR_INVALID, "'%s': not a valid revision (a branch, tag or commit name)", rev);
    }
    return OSCAR_OK;
}

enum oscar_status osc_local_dir_check(const char * local_dir, const char * path) {
    const char * b = ".cache/huggingface";
    size_t       n = strlen(b);
    if (!strncmp(path, b, n) && (path[n] == '\0' || path[n] == '/')) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: the repo file would overwrite the download metadata kept in "
                         "%s/%s; refusing it", path, local_dir, b);
    }
    return OSCAR_OK;
}

int osc_url_is_http(const char * url) {
    return !strncasecmp(url, "http://", 7) || !strncasecmp(url, "https://", 8);
}

int osc_repo_path_valid(const char * path) {
    if (!*path || *path == '/') {
        return 0;
    }
    const char * p = path;
    while (*p) {
        size_t n = strcspn(p, "/");
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) {
            return 0;
        }
        p += n;
        if (*p == '/') {
            p++;
            if (!*p) {
                return 0;
            }
        }
    }
    return strchr(path, '\\') == NULL;
}
