// base-model.c - the base model's Hub id and licence (rules in base-model.h).
#include "calibrate/base-model.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "formats/gguf.h"
#include "hub/hub.h"
#include "util/fs.h"
#include "util/log.h"

// Copies "owner/name" from two pieces into id[n] when they form a valid Hub id.
static int make_id(const char * owner, size_t on, const char * name, size_t nn, char * id, size_t n) {
    char buf[OSCAR_BASE_MODEL_ID_MAX];
    if (on + nn + 2 > sizeof buf) return 0;
    snprintf(buf, sizeof buf, "%.*s/%.*s", (int) on, owner, (int) nn, name);
    if (!oscar_hub_repo_id_valid(buf) || strlen(buf) >= n) return 0;
    memcpy(id, buf, strlen(buf) + 1);
    return 1;
}

int oscar_base_model_id_from_spec(const char * spec, char * id, size_t n) {
    char * repo = NULL, * rev = NULL, * path = NULL;
    int    ok   = 0;
    if (oscar_hub_parse_spec(spec, &repo, &rev, &path) == OSCAR_OK) {
        ok = make_id(repo, strcspn(repo, "/"), strchr(repo, '/') + 1, strlen(strchr(repo, '/') + 1), id, n);
    } else {
        osc_error_clear(); // not a spec: no id, no error
    }
    free(repo);
    free(rev);
    free(path);
    return ok;
}

int oscar_base_model_id_from_cache_path(const char * path, char * id, size_t n) {
    int found = 0;
    for (const char * p = path; (p = strstr(p, "models--")) != NULL; p++) {
        if (p != path && p[-1] != '/') continue;
        const char * comp_end = p + strcspn(p, "/");
        if (strncmp(comp_end, "/snapshots/", 11) != 0) continue;
        const char * commit = comp_end + 11;
        if (*commit == '\0' || *commit == '/') continue;
        const char * owner = p + 8, * sep = strstr(owner, "--"); // ids hold no "--", so the first one splits
        if (!sep || sep >= comp_end) continue;
        found = make_id(owner, (size_t) (sep - owner), sep + 2, (size_t) (comp_end - sep - 2), id, n) || found;
    }
    return found;
}

// First path components of huggingface.co pages that are not model repos.
static const char * const not_models[] = {"datasets", "spaces", "models", "papers", "docs", "blog", "collections",
                                          "organizations", "settings", "api", "posts", "learn", "tasks", "join",
                                          "login", "new", "pricing", "enterprise", "chat", NULL};

int oscar_base_model_id_from_url(const char * url, char * id, size_t n) {
    const char * p = url;
    if (!strncasecmp(p, "https://", 8)) p += 8;
    else if (!strncasecmp(p, "http://", 7)) p += 7;
    else return 0;
    if (!strncasecmp(p, "www.", 4)) p += 4;
    if (strncasecmp(p, "huggingface.co/", 15) != 0) return 0;
    const char * owner = p + 15;
    size_t       on    = strcspn(owner, "/?#");
    if (owner[on] != '/') return 0;
    for (const char * const * w = not_models; *w; w++) {
        if (strlen(*w) == on && !strncmp(owner, *w, on)) return 0;
    }
    const char * name = owner + on + 1;
    size_t       nn   = strcspn(name, "/?#");
    if (nn > 4 && !strncmp(name + nn - 4, ".git", 4)) nn -= 4;
    return make_id(owner, on, name, nn, id, n);
}

// The string value of `key` into buf[n] (truncated); 0 when absent or not a string.
static int gguf_str(const struct osc_gguf * g, const char * key, char * buf, size_t n) {
    int64_t i = osc_gguf_find_key(g, key);
    if (i < 0 || osc_gguf_kv_type(g, i) != OSC_GGUF_STRING) return 0;
    const char * s;
    size_t       len;
    if (osc_gguf_get_str(g, key, &s, &len) != OSCAR_OK) {
        osc_error_clear();
        return 0;
    }
    snprintf(buf, n, "%.*s", (int) (len < n ? len : n - 1), s);
    return buf[0] != '\0';
}

static void gguf_id(const struct osc_gguf * g, struct oscar_base_model * out) {
    static const char * const url_keys[] = {"general.source.huggingface.repository", "general.source.repo_url",
                                            "general.source.url", "general.base_model.0.repo_url", NULL};
    char v[512], name[256];
    for (const char * const * k = url_keys; *k; k++) {
        if (!gguf_str(g, *k, v, sizeof v)) continue;
        int bare_ok = k == url_keys; // that key holds an id, not a URL
        if (oscar_base_model_id_from_url(v, out->id, sizeof out->id) ||
            (bare_ok && oscar_hub_repo_id_valid(v) && strlen(v) < sizeof out->id &&
             memcpy(out->id, v, strlen(v) + 1))) {
            snprintf(out->id_from, sizeof out->id_from, "GGUF %s", *k);
            return;
        }
    }
    if (gguf_str(g, "general.base_model.0.organization", v, sizeof v) &&
        gguf_str(g, "general.base_model.0.name", name, sizeof name) &&
        make_id(v, strlen(v), name, strlen(name), out->id, sizeof out->id)) {
        snprintf(out->id_from, sizeof out->id_from, "GGUF general.base_model.0.organization and .name");
    }
}

enum oscar_status oscar_base_model_from_gguf(const char * path, struct oscar_base_model * out) {
    struct osc_gguf * g  = NULL;
    enum oscar_status st = osc_gguf_open(path, &g);
    if (st != OSCAR_OK) return st;
    if (!out->id[0]) gguf_id(g, out);
    if (!out->license[0] && gguf_str(g, "general.license", out->license, sizeof out->license))
        snprintf(out->license_from, sizeof out->license_from, "GGUF general.license");
    osc_gguf_close(g);
    return OSCAR_OK;
}

// The `license:` of dir/README.md, when its front matter records one.
static enum oscar_status readme_license(const char * dir, struct oscar_base_model * out) {
    char * path = osc_path_join(dir, "README.md"), * text = NULL, * lic = NULL;
    size_t n    = 0;
    struct stat sb;
    if (!path) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    enum oscar_status st = OSCAR_OK;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) goto out;
    if ((st = osc_read_file(path, (size_t) 1 << 22, &text, &n)) != OSCAR_OK) goto out;
    if (strncmp(text, "---", 3) != 0) goto out; // a README without front matter records nothing
    if ((st = oscar_hub_card_get(text, n, path, "license", &lic)) != OSCAR_OK) {
        osc_warn("%s (the base model's licence stays unknown)", oscar_last_error());
        osc_error_clear();
        st = OSCAR_OK;
    } else if (lic) {
        snprintf(out->license, sizeof out->license, "%s", lic);
        snprintf(out->license_from, sizeof out->license_from, "the model's README.md");
    }
out:
    free(lic);
    free(text);
    free(path);
    return st;
}

// The id from the HF cache layout, in the path as given or (for a relative or
// symlinked path) in the real path of its directory: a snapshot's files are
// symlinks into blobs/, its directories are not.
static int id_from_path(const char * path, int is_dir, char * id, size_t n) {
    if (!*path) return 0;
    if (oscar_base_model_id_from_cache_path(path, id, n)) return 1;
    char * dir = strdup(path), real[PATH_MAX];
    if (!dir) return 0;
    char * slash = is_dir ? NULL : strrchr(dir, '/');
    if (!is_dir && !slash) strcpy(dir, ".");
    else if (slash) slash[slash == dir] = '\0'; // "/x.gguf" -> "/"
    int ok = realpath(dir, real) && oscar_base_model_id_from_cache_path(real, id, n);
    free(dir);
    return ok;
}

enum oscar_status oscar_base_model_detect(const char * explicit_id, const char * model_arg, const char * model_path,
                                          struct oscar_base_model * out) {
    memset(out, 0, sizeof *out);
    struct stat sb;
    bool        have_path = model_path && stat(model_path, &sb) == 0;
    if (explicit_id) {
        snprintf(out->id, sizeof out->id, "%s", explicit_id);
        snprintf(out->id_from, sizeof out->id_from, "--base-model");
    } else if (model_arg && stat(model_arg, &(struct stat){0}) != 0 &&
               oscar_base_model_id_from_spec(model_arg, out->id, sizeof out->id)) {
        snprintf(out->id_from, sizeof out->id_from, "--model");
    } else if (have_path && id_from_path(model_path, S_ISDIR(sb.st_mode), out->id, sizeof out->id)) {
        snprintf(out->id_from, sizeof out->id_from, "the HF cache path of --model");
    }
    if (!have_path) return OSCAR_OK;
    return S_ISDIR(sb.st_mode) ? readme_license(model_path, out) : oscar_base_model_from_gguf(model_path, out);
}
