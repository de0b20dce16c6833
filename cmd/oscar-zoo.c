// oscar-zoo - share rotation artifacts through the Hugging Face Hub.
//
//   oscar-zoo push DIR --repo ID [--path-in-repo P] [--revision BRANCH] [--private] [--message M] [--no-card-check]
//                  [--layout flat|zoo] [--zoo-model NAME]
//   oscar-zoo pull ID [--path P] [--revision R] [--local-dir D] [--cache-dir C]
//   oscar-zoo ls ID [--path P] [--revision R]
//   oscar-zoo list ID [--revision R] [--cache-dir C]
//   oscar-zoo search BASE_MODEL [--author A] [--limit N] [--details] [--cache-dir C]
//   oscar-zoo info ID [--revision R]
//   oscar-zoo export ARTIFACT [--target sglang|llamacpp|oscar] [--format pt|gguf] --out PATH [--base BASE.gguf]
//                    [--qk-order auto|hf|ggml] [--force]
//   oscar-zoo import SRC [V.pt] --out DIR [--model M] [--base-model ID] [--k-mean F] [--k-clip R] [--v-clip R]
//   global options, before or after the command: -q/--quiet, --json, --token T, --offline, -h/--help, --version
//
// Thin front end over lib/hub: one table entry per command (its options, its
// usage text, its check and its run function), a parser for the global
// options, the command and then its options, and the mapping of the result to
// the exit code: 0 success, 1 failure, 2 usage error. Results go to stdout
// (--json: one JSON value), progress and warnings to stderr.
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/oscar-artifact.h"
#include "formats/oscar-export.h"
#include "formats/oscar-import.h"
#include "formats/oscar-serve.h"
#include "formats/oscar-zoo-layout.h"
#include "calibrate/base-model.h"
#include "model/model.h"
#include "hub/hub.h"
#include "oscar.h"
#include "util/log.h"
#include "util/cli.h"
#include "util/fs.h"
#include "util/target.h"
#include "util/version.h"

struct args {
    const struct command * cmd;
    const char *           target; // the command's argument: DIR, ID, ARTIFACT, BASE_MODEL or SRC
    const char *           target2; // import: the V file after the K file, or NULL
    const char *           repo, * path, * revision, * local_dir, * cache_dir, * message, * token;
    const char *           layout, * zoo_model;               // push --layout zoo
    const char *           format, * out, * base, * qk_order, * target_name; // export
    const struct oscar_target_profile * profile;              // export: --target, or the --format's engine
    const char *           author, * limit_text;              // search
    const char *           model, * base_model, * k_mean, * k_clip_text, * v_clip_text; // import
    float                  k_clip, v_clip;
    int                    limit;
    int                    is_private, json, quiet, offline, no_card_check, force, details;
};

struct command {
    const char *          name;
    const char *          synopsis; // after "oscar-zoo NAME"
    const char *          summary;  // one line for the overview
    const char *          options;  // the command's options, for its --help
    const struct option * opts;     // its option table ({0} ends it); the global options are added
    int (*check)(struct args * a);  // usage checks beyond the table (0 ok), or NULL
    enum oscar_status (*run)(struct oscar_hub * hub, const struct args * a);
    int max_args;                   // it takes 1 to max_args arguments
};

enum { O_REPO = 256, O_PIR, O_REV, O_PRIV, O_MSG, O_PATH, O_LDIR, O_CDIR, O_NOCARD, O_FORMAT, O_OUT, O_BASE, O_QK,
       O_FORCE, O_AUTHOR, O_LIMIT, O_DETAILS, O_JSON, O_TOKEN, O_OFF, O_VERSION, O_MODEL, O_BASEMODEL, O_KMEAN,
       O_KCLIP, O_VCLIP, O_TARGET, O_LAYOUT, O_ZOOMODEL };

static const struct option global_opts[] = {
    { "json", no_argument, 0, O_JSON },   { "quiet", no_argument, 0, 'q' },      { "token", required_argument, 0, O_TOKEN },
    { "offline", no_argument, 0, O_OFF }, { "help", no_argument, 0, 'h' },       { "version", no_argument, 0, O_VERSION },
    { 0, 0, 0, 0 },
};

static const char global_help[] =
    "global options (before or after the command):\n"
    "  --json                machine-readable output: one JSON value on stdout\n"
    "  -q, --quiet           errors only on stderr (no progress, no warnings)\n"
    "  --token T             token (default: HF_TOKEN, then $HF_HOME/token)\n"
    "  --offline             no network; same as HF_HUB_OFFLINE=1\n"
    "  -h, --help            help (of the command, after one)\n"
    "  --version             the version and the build's git commit\n";

static const char env_help[] =
    "environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN, HF_TOKEN_PATH, HF_HOME,\n"
    "HF_HUB_CACHE, HF_HUB_OFFLINE, HF_HUB_ETAG_TIMEOUT, HF_HUB_DOWNLOAD_TIMEOUT (seconds, default 10),\n"
    "OSCAR_HUB_MAX_RETRIES (default 5), OSCAR_HUB_BACKOFF (first wait in seconds, default 1),\n"
    "OSCAR_HUB_LOW_SPEED_LIMIT (bytes/s a transfer must keep up over HF_HUB_DOWNLOAD_TIMEOUT, default 1024),\n"
    "OSCAR_HUB_DEADLINE (seconds per request, retries and waits included, default 300).\n"
    "exit codes: 0 success, 1 failure, 2 usage error.\n";

// ---- output helpers ---------------------------------------------------------------------
static void print_json(json_t * j) {
    char * s = j ? json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    if (s) {
        puts(s);
    }
    free(s);
    json_decref(j);
}

static const char * dash(const char * s) { return s && *s ? s : "-"; }

// ---- push ---------------------------------------------------------------------------------
static const struct option push_opts[] = {
    { "repo", required_argument, 0, O_REPO },   { "path-in-repo", required_argument, 0, O_PIR },
    { "revision", required_argument, 0, O_REV }, { "private", no_argument, 0, O_PRIV },
    { "message", required_argument, 0, O_MSG },  { "no-card-check", no_argument, 0, O_NOCARD },
    { "layout", required_argument, 0, O_LAYOUT }, { "zoo-model", required_argument, 0, O_ZOOMODEL },
    { 0, 0, 0, 0 },
};

static int push_check(struct args * a) {
    if (!a->repo) {
        fputs("oscar-zoo push: --repo is required\n", stderr);
        return -1;
    }
    if (a->layout && strcmp(a->layout, "flat") && strcmp(a->layout, "zoo")) {
        fputs("oscar-zoo push: --layout wants flat or zoo\n", stderr);
        return -1;
    }
    if (a->zoo_model && !(a->layout && !strcmp(a->layout, "zoo"))) {
        fputs("oscar-zoo push: --zoo-model is for --layout zoo\n", stderr);
        return -1;
    }
    return 0;
}

// --layout zoo: DIR is an artifact; a staged copy with the .pt pair goes to
// [P/]<Model>/seq<T>_prompt<N>_group<G> (formats/oscar-zoo-layout.h). *stage and *where are malloc'ed.
static enum oscar_status zoo_stage(const struct args * a, char ** stage, char ** where) {
    struct oscar_artifact *     art   = NULL;
    struct oscar_artifact_trust trust = { 0 };
    char                        zoo[512];
    *stage = *where = NULL;
    char *            tensors = osc_path_join(a->target, OSCAR_ARTIFACT_TENSORS);
    enum oscar_status st      = tensors ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "out of memory");
    if (st == OSCAR_OK && osc_require_regular(tensors) != OSCAR_OK) // .pt folders load too, but have nothing to upload
        st = osc_error(OSCAR_ERR_INVALID, "%s: not an oscar artifact (no %s); --layout zoo uploads an artifact (make "
                       "one from .pt files with oscar-zoo import)", a->target, OSCAR_ARTIFACT_TENSORS);
    free(tensors);
    if (st == OSCAR_OK) st = oscar_artifact_load(a->target, &trust, &art);
    if (st == OSCAR_OK) st = oscar_zoo_layout_path(art, a->zoo_model, zoo, sizeof zoo);
    if (st == OSCAR_OK) {
        size_t n = strlen(zoo) + (a->path ? strlen(a->path) + 1 : 0) + 1;
        if (!(*where = malloc(n))) st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
        else snprintf(*where, n, "%s%s%s", a->path && *a->path ? a->path : "", a->path && *a->path ? "/" : "", zoo);
    }
    if (st == OSCAR_OK) st = oscar_zoo_layout_stage(a->target, art, stage);
    if (st == OSCAR_OK && !a->quiet && !a->json) fprintf(stderr, "zoo layout: %s (with the .pt pair)\n", *where);
    oscar_artifact_free(art);
    if (st != OSCAR_OK) {
        free(*where);
        *where = NULL;
    }
    return st;
}

static enum oscar_status push_run(struct oscar_hub * hub, const struct args * a) {
    struct oscar_hub_push_opts   o   = { .repo_id = a->repo, .path_in_repo = a->path, .revision = a->revision,
                                         .message = a->message, .is_private = a->is_private,
                                         .skip_card_check = a->no_card_check };
    struct oscar_hub_push_result res;
    char *                       stage = NULL, * where = NULL;
    enum oscar_status            st = OSCAR_OK;
    if (a->layout && !strcmp(a->layout, "zoo") && (st = zoo_stage(a, &stage, &where)) != OSCAR_OK) return st;
    if (where) o.path_in_repo = where;
    st = oscar_hub_push(hub, stage ? stage : a->target, &o, &res);
    oscar_zoo_layout_unstage(stage);
    if (st != OSCAR_OK) {
        free(where);
        return st;
    }
    if (a->json) {
        print_json(json_pack("{s:s, s:s?, s:s?, s:i, s:i, s:i, s:s, s:s}", "repo", a->repo, "commit", res.commit_oid,
                             "url", res.commit_url, "regular", res.n_regular, "lfs", res.n_lfs, "unchanged",
                             res.n_unchanged, "layout", where ? "zoo" : "flat", "path_in_repo",
                             o.path_in_repo ? o.path_in_repo : ""));
    } else if (res.commit_oid) {
        printf("%s\n", res.commit_url ? res.commit_url : res.commit_oid);
    } else {
        printf("no changes (%d files already up to date)\n", res.n_unchanged);
    }
    oscar_hub_push_result_free(&res);
    free(where);
    return OSCAR_OK;
}

// ---- pull -------------------------------------------------------------------------------
static const struct option pull_opts[] = {
    { "path", required_argument, 0, O_PATH },      { "revision", required_argument, 0, O_REV },
    { "local-dir", required_argument, 0, O_LDIR }, { "cache-dir", required_argument, 0, O_CDIR },
    { 0, 0, 0, 0 },
};

static enum oscar_status pull_run(struct oscar_hub * hub, const struct args * a) {
    char *            dir = NULL;
    int               n   = 0;
    enum oscar_status st  = oscar_hub_pull(hub, a->target, a->revision, a->path, a->local_dir, &dir, &n);
    if (st != OSCAR_OK) {
        return st;
    }
    if (a->json) {
        print_json(json_pack("{s:s, s:s, s:i}", "repo", a->target, "dir", dir, "files", n));
    } else {
        printf("%s\n", dir);
    }
    free(dir);
    return OSCAR_OK;
}

// ---- ls -----------------------------------------------------------------------------------
static const struct option ls_opts[] = {
    { "path", required_argument, 0, O_PATH }, { "revision", required_argument, 0, O_REV }, { 0, 0, 0, 0 },
};

static enum oscar_status ls_run(struct oscar_hub * hub, const struct args * a) {
    struct oscar_hub_listing l;
    enum oscar_status        st = oscar_hub_list(hub, a->target, a->revision, a->path, &l);
    if (st != OSCAR_OK) {
        return st;
    }
    json_t * arr = a->json ? json_array() : NULL;
    for (int i = 0; i < l.n; i++) {
        const struct oscar_hub_entry * e = &l.entries[i];
        if (arr) {
            json_array_append_new(arr, json_pack("{s:s, s:s, s:I, s:s?, s:s?}", "path", e->path, "type",
                                                 e->is_dir ? "directory" : "file", "size", (json_int_t) e->size,
                                                 "oid", e->oid, "lfs_oid", e->lfs_oid));
        } else if (e->is_dir) {
            printf("%12s  %-4s  %s/\n", "-", "dir", e->path);
        } else {
            printf("%12lld  %-4s  %s\n", (long long) e->size, e->lfs_oid ? "lfs" : "", e->path);
        }
    }
    if (arr) {
        print_json(arr);
    }
    oscar_hub_listing_free(&l);
    return OSCAR_OK;
}

// ---- list -----------------------------------------------------------------------------------
static const struct option list_opts[] = {
    { "revision", required_argument, 0, O_REV }, { "cache-dir", required_argument, 0, O_CDIR }, { 0, 0, 0, 0 },
};

static json_t * artifact_json(const struct oscar_hub_artifact * x) {
    json_t * j = json_pack("{s:s, s:s, s:s?, s:s, s:s, s:s?, s:I, s:s?}", "path", x->path, "base_model",
                           x->base_model, "base_model_id", x->base_model_id, "architecture", x->architecture,
                           "grouping", x->grouping, "calib_tag", x->calib_tag, "calib_tokens",
                           (json_int_t) x->calib_tokens, "gate", x->gate);
    if (j && x->auto_layers > 0) // --rotation-grouping auto: how many layers kept a rotation per KV head
        json_object_set_new(j, "grouping_auto", json_pack("{s:i, s:i}", "layers", x->auto_layers, "kv_head_layers",
                                                          x->auto_head_layers));
    return j;
}

// `s` with control characters as '?' (into buf): metadata from someone's repo goes to a terminal.
static const char * printable(const char * s, char * buf, size_t n) {
    size_t i = 0;
    for (; s[i] && i + 1 < n; i++) {
        buf[i] = (unsigned char) s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    }
    buf[i] = '\0';
    return buf;
}

// One line: path, base model (its Hub id when recorded), architecture, grouping (auto: "auto H/L",
// H of L layers with a rotation per KV head), tokens, gate.
static void print_artifact(const struct oscar_hub_artifact * x, const char * indent) {
    char p[512], b[256], ar[64], g[64], gt[16], au[32];
    if (x->auto_layers > 0) snprintf(au, sizeof au, "auto %d/%d", x->auto_head_layers, x->auto_layers);
    printf("%s%-32s  %-40s  %-8s  %-12s  %10lld  %s\n", indent, printable(*x->path ? x->path : ".", p, sizeof p),
           printable(x->base_model_id ? x->base_model_id : x->base_model, b, sizeof b),
           printable(x->architecture, ar, sizeof ar), x->auto_layers > 0 ? au : printable(x->grouping, g, sizeof g),
           x->calib_tokens, printable(dash(x->gate), gt, sizeof gt));
}

static void print_artifact_header(const char * indent) {
    printf("%s%-32s  %-40s  %-8s  %-12s  %10s  %s\n", indent, "PATH", "BASE MODEL", "ARCH", "GROUPING", "TOKENS",
           "GATE");
}

// The readable artifacts of a listing: appended to `arr` (--json) or printed as lines under a header.
static void emit_artifacts(const struct oscar_hub_artifacts * l, json_t * arr, const char * indent) {
    for (int i = 0, shown = 0; i < l->n; i++) {
        if (l->items[i].error) {
            continue;
        }
        if (arr) {
            json_array_append_new(arr, artifact_json(&l->items[i]));
        } else {
            if (shown++ == 0) print_artifact_header(indent);
            print_artifact(&l->items[i], indent);
        }
    }
}

// Warns about each artifact whose oscar.json could not be read (the message names the file); returns
// how many there were.
static int warn_bad(const char * repo, const struct oscar_hub_artifacts * l) {
    for (int i = 0; i < l->n; i++) {
        if (l->items[i].error) {
            osc_warn("%s: %s (skipped)", repo, l->items[i].error);
        }
    }
    return l->n_bad;
}

static enum oscar_status list_run(struct oscar_hub * hub, const struct args * a) {
    struct oscar_hub_artifacts l;
    enum oscar_status          st = oscar_hub_list_artifacts(hub, a->target, a->revision, &l);
    if (st != OSCAR_OK) {
        return st;
    }
    json_t * arr = a->json ? json_array() : NULL;
    emit_artifacts(&l, arr, "");
    if (arr) {
        print_json(arr);
    }
    if (l.n == 0 && !a->quiet) {
        fprintf(stderr, "%s@%s: no oscar artifacts (no directory holds an oscar.json)\n", a->target,
                a->revision ? a->revision : "main");
    }
    int n_bad = warn_bad(a->target, &l);
    if (n_bad) {
        st = osc_error(OSCAR_ERR_FORMAT, "%d of %d oscar.json files could not be read (warned about above); the "
                       "rest are listed", n_bad, l.n);
    }
    oscar_hub_artifacts_free(&l);
    return st;
}

// ---- search ---------------------------------------------------------------------------------
static const struct option search_opts[] = {
    { "author", required_argument, 0, O_AUTHOR }, { "limit", required_argument, 0, O_LIMIT },
    { "details", no_argument, 0, O_DETAILS },     { "cache-dir", required_argument, 0, O_CDIR },
    { 0, 0, 0, 0 },
};

static int search_check(struct args * a) {
    int32_t n = 0;
    if (a->limit_text && osc_parse_i32("--limit", a->limit_text, 1, 100000, &n) != OSCAR_OK) {
        fprintf(stderr, "oscar-zoo search: %s\n", oscar_last_error());
        return -1;
    }
    if (a->limit_text) a->limit = n;
    return 0;
}

// --details: the artifacts of one found repo, into `obj` (--json) or indented lines. Returns the
// number of artifacts that could not be read (a repo that cannot be listed counts as one).
static int search_details(struct oscar_hub * hub, const char * repo, json_t * obj) {
    struct oscar_hub_artifacts l;
    if (oscar_hub_list_artifacts(hub, repo, NULL, &l) != OSCAR_OK) {
        osc_warn("%s: %s (skipped)", repo, oscar_last_error());
        return 1;
    }
    json_t * arr = obj ? json_array() : NULL;
    emit_artifacts(&l, arr, "    ");
    if (obj) {
        json_object_set_new(obj, "artifacts", arr);
    }
    int n_bad = warn_bad(repo, &l);
    oscar_hub_artifacts_free(&l);
    return n_bad;
}

static enum oscar_status search_run(struct oscar_hub * hub, const struct args * a) {
    struct oscar_hub_models m;
    enum oscar_status       st = oscar_hub_search_artifacts(hub, a->target, a->author, a->limit, &m);
    if (st != OSCAR_OK) {
        return st;
    }
    json_t * arr   = a->json ? json_array() : NULL;
    int      n_bad = 0;
    for (int i = 0; i < m.n; i++) {
        const struct oscar_hub_model * x = &m.items[i];
        json_t * obj = arr ? json_pack("{s:s, s:s?, s:b}", "id", x->id, "lastModified", x->last_modified,
                                       "private", x->is_private)
                           : NULL;
        if (!arr) {
            printf("%-48s  %s\n", x->id, dash(x->last_modified));
        }
        if (a->details) {
            n_bad += search_details(hub, x->id, obj);
        }
        if (arr) {
            json_array_append_new(arr, obj);
        }
    }
    if (arr) {
        print_json(arr);
    }
    if (m.n == 0 && !a->quiet) {
        fprintf(stderr, "no repos of oscar artifacts for base model %s%s%s (Hub filters: %s, base_model:%s)\n",
                a->target, a->author ? " by " : "", a->author ? a->author : "", OSCAR_HUB_LIBRARY_TAG, a->target);
    }
    if (n_bad) {
        st = osc_error(OSCAR_ERR_FORMAT, "%d artifact%s could not be read (warned about above); the rest are listed",
                       n_bad, n_bad == 1 ? "" : "s");
    }
    oscar_hub_models_free(&m);
    return st;
}

// ---- info -----------------------------------------------------------------------------------
static const struct option info_opts[] = {
    { "revision", required_argument, 0, O_REV }, { 0, 0, 0, 0 },
};

static enum oscar_status info_run(struct oscar_hub * hub, const struct args * a) {
    struct oscar_hub_info info;
    enum oscar_status     st = oscar_hub_info(hub, a->target, a->revision, &info);
    if (st != OSCAR_OK) {
        return st;
    }
    if (a->json) {
        print_json(json_pack("{s:s?, s:s, s:s?, s:b, s:i}", "id", info.id, "sha", info.sha, "lastModified",
                             info.last_modified, "private", info.is_private, "files", info.n_siblings));
    } else {
        printf("id:       %s\ncommit:   %s\nprivate:  %s\nfiles:    %d\nmodified: %s\n",
               info.id ? info.id : a->target, info.sha, info.is_private ? "yes" : "no", info.n_siblings,
               info.last_modified ? info.last_modified : "-");
    }
    oscar_hub_info_free(&info);
    return OSCAR_OK;
}

// ---- export ---------------------------------------------------------------------------------
static const struct option export_opts[] = {
    { "format", required_argument, 0, O_FORMAT }, { "out", required_argument, 0, O_OUT },
    { "base", required_argument, 0, O_BASE },     { "qk-order", required_argument, 0, O_QK },
    { "force", no_argument, 0, O_FORCE },         { "cache-dir", required_argument, 0, O_CDIR },
    { "target", required_argument, 0, O_TARGET }, { 0, 0, 0, 0 },
};

// --target and --format fix each other: sglang reads the .pt pair, llamacpp the GGUF; the oscar
// target (no engine) needs --format.
static int export_check(struct args * a) {
    if (a->target_name && osc_parse_target("--target", a->target_name, &a->profile) != OSCAR_OK) {
        fprintf(stderr, "oscar-zoo export: %s\n", oscar_last_error());
        return -1;
    }
    if (a->format && strcmp(a->format, "pt") && strcmp(a->format, "gguf")) {
        fputs("oscar-zoo export: --format wants pt or gguf\n", stderr);
        return -1;
    }
    if (!a->format && a->profile) a->format = a->profile->format;
    if (!a->format || !a->out) {
        fputs("oscar-zoo export: --out and --format pt|gguf (or --target sglang|llamacpp) are required\n", stderr);
        return -1;
    }
    if (!a->profile) a->profile = oscar_target_get(!strcmp(a->format, "pt") ? OSCAR_TARGET_SGLANG : OSCAR_TARGET_LLAMACPP);
    if (a->profile->format && strcmp(a->profile->format, a->format)) {
        fprintf(stderr, "oscar-zoo export: --target %s reads --format %s, not %s\n", a->profile->name,
                a->profile->format, a->format);
        return -1;
    }
    if ((a->base || a->qk_order) && strcmp(a->format, "gguf")) {
        fputs("oscar-zoo export: --base and --qk-order are for --format gguf\n", stderr);
        return -1;
    }
    if (a->qk_order && strcmp(a->qk_order, "auto") && strcmp(a->qk_order, "hf") && strcmp(a->qk_order, "ggml")) {
        fputs("oscar-zoo export: --qk-order wants auto, hf or ggml\n", stderr);
        return -1;
    }
    return 0;
}

// The directory serve.env goes into: the .pt directory, or the GGUF's (malloc'ed).
static char * serve_env_path(const struct args * a) {
    if (!strcmp(a->format, "pt")) return osc_path_join(a->out, "serve.env");
    const char * slash = strrchr(a->out, '/');
    if (!slash) return strdup("serve.env");
    char * dir = strndup(a->out, (size_t) (slash - a->out) + 1);
    char * p = dir ? osc_path_join(dir, "serve.env") : NULL;
    free(dir);
    return p;
}

// The recipe of the written files: printed (stdout), written to serve.env, and into *json as
// "env", "model_line", "command", "notes" and "serve_env" (--json). The oscar target has none.
static enum oscar_status serve(const struct oscar_artifact * art, const struct args * a,
                               const struct oscar_serve_files * f, json_t * json) {
    const struct oscar_target_profile * t = a->profile;
    json_object_set_new(json, "target", json_string(t->name));
    if (t->id == OSCAR_TARGET_OSCAR) {
        if (!a->quiet && !a->json)
            fprintf(stderr, "target oscar: no engine's limits checked and no serve recipe (use --target sglang or "
                            "llamacpp for that)\n");
        json_object_set_new(json, "serve_env", json_null());
        return OSCAR_OK;
    }
    struct oscar_serve_recipe r;
    char * text = NULL, * path = serve_env_path(a), header[1024];
    enum oscar_status st = path ? oscar_serve_recipe(art, t, f, &r) : osc_error(OSCAR_ERR_NOMEM, "out of memory");
    snprintf(header, sizeof header, "serve with %s (target %s): source this file, or run its lines\n"
             "written by oscar-zoo export %s (%s)", t->engine, t->name, OSCAR_VERSION, oscar_build_commit());
    if (st == OSCAR_OK) st = oscar_serve_text(&r, header, &text);
    if (st == OSCAR_OK) st = osc_write_file_atomic(path, text, strlen(text));
    if (st == OSCAR_OK && a->json) {
        json_t * e = json_object(), * notes = json_array();
        for (int32_t i = 0; i < r.n_env; i++) json_object_set_new(e, r.env[i].name, json_string(r.env[i].value));
        for (int32_t i = 0; i < r.n_notes; i++) json_array_append_new(notes, json_string(r.notes[i]));
        json_object_set_new(json, "env", e);
        json_object_set_new(json, "notes", notes);
        json_object_set_new(json, "command", json_string(r.command));
        if (r.model_line[0]) json_object_set_new(json, "model_line", json_string(r.model_line));
        json_object_set_new(json, "serve_env", json_string(path));
    } else if (st == OSCAR_OK) {
        fputs(text, stdout);
        for (int32_t i = 0; i < r.n_notes && !a->quiet; i++) osc_warn("%s", r.notes[i]);
        if (!a->quiet) fprintf(stderr, "wrote %s\n", path);
    }
    free(text);
    free(path);
    return st;
}

static enum oscar_status export_pt(const struct oscar_artifact * art, const struct args * a) {
    char *            kp = NULL, * vp = NULL, * mp = NULL;
    enum oscar_status st = oscar_serve_check(art, a->profile, NULL);
    if (st == OSCAR_OK) st = oscar_export_pt_all(art, a->out, &kp, &vp, &mp);
    if (st != OSCAR_OK) {
        return st;
    }
    char * kabs = realpath(kp, NULL), * vabs = realpath(vp, NULL), * mabs = mp ? realpath(mp, NULL) : NULL;
    json_t * j = json_pack("{s:s, s:s, s:s, s:i, s:s?}", "format", "pt", "k_rotation", kabs ? kabs : kp, "v_rotation",
                           vabs ? vabs : vp, "format_version", art->rot.n_rot > 1 ? 2 : 1, "k_mean", mabs ? mabs : mp);
    if (!a->quiet && !a->json) fprintf(stderr, "wrote %s\nwrote %s\n", kp, vp);
    if (!a->quiet && !a->json && mp) fprintf(stderr, "wrote %s\n", mp);
    struct oscar_serve_files f = { .k_pt = kabs ? kabs : kp, .v_pt = vabs ? vabs : vp };
    st = j ? serve(art, a, &f, j) : osc_error(OSCAR_ERR_NOMEM, "out of memory");
    if (st == OSCAR_OK && a->json) print_json(j);
    else json_decref(j);
    free(kabs);
    free(vabs);
    free(mabs);
    free(kp);
    free(vp);
    free(mp);
    return st;
}

static enum oscar_status export_gguf(const struct oscar_artifact * art, const struct args * a) {
    struct oscar_export_gguf_opts o = { .base = a->base, .qk_order = OSCAR_EXPORT_QK_AUTO, .target = a->profile };
    bool                          permuted = false;
    if (a->qk_order && !strcmp(a->qk_order, "hf")) o.qk_order = OSCAR_EXPORT_QK_HF;
    if (a->qk_order && !strcmp(a->qk_order, "ggml")) o.qk_order = OSCAR_EXPORT_QK_GGML;
    enum oscar_status st = oscar_export_gguf(art, a->out, &o, &permuted);
    if (st != OSCAR_OK) {
        return st;
    }
    if (!a->quiet && !a->json)
        fprintf(stderr, "wrote %s (%d layers, K rotation in %s order%s)\n", a->out, (int) art->n_layer,
                permuted ? "ggml" : "HF", a->base ? ", baked into the base model" : "");
    char * abs = realpath(a->out, NULL);
    json_t * j = json_pack("{s:s, s:s, s:s?, s:s}", "format", "gguf", "out", abs ? abs : a->out, "base", a->base,
                           "qk_order", permuted ? "ggml" : "hf");
    struct oscar_serve_files f = { .gguf = abs ? abs : a->out };
    st = j ? serve(art, a, &f, j) : osc_error(OSCAR_ERR_NOMEM, "out of memory");
    if (st == OSCAR_OK && a->json) print_json(j);
    else json_decref(j);
    free(abs);
    return st;
}

static enum oscar_status export_run(struct oscar_hub * hub, const struct args * a) {
    char *                  dir = NULL;
    struct oscar_artifact * art = NULL;
    enum oscar_status       st  = oscar_hub_resolve_local(hub, a->target, &dir);
    if (st == OSCAR_OK) {
        struct oscar_artifact_trust trust = { .force = a->force };
        st = oscar_artifact_load(dir, &trust, &art);
    }
    if (st == OSCAR_OK) {
        st = !strcmp(a->format, "pt") ? export_pt(art, a) : export_gguf(art, a);
    }
    oscar_artifact_free(art);
    free(dir);
    return st;
}

// ---- import ---------------------------------------------------------------------------------
static const struct option import_opts[] = {
    { "out", required_argument, 0, O_OUT },          { "model", required_argument, 0, O_MODEL },
    { "base-model", required_argument, 0, O_BASEMODEL }, { "k-mean", required_argument, 0, O_KMEAN },
    { "k-clip", required_argument, 0, O_KCLIP },      { "v-clip", required_argument, 0, O_VCLIP },
    { "cache-dir", required_argument, 0, O_CDIR },    { 0, 0, 0, 0 },
};

// A clip ratio in [0, 1] from text into *out (-1 when not given); -1 on a bad value.
static int clip_arg(const char * opt, const char * text, float * out) {
    *out = -1.0f;
    if (!text) return 0;
    char * end = NULL;
    float  r   = strtof(text, &end);
    if (!*text || *end || !(r >= 0.0f && r <= 1.0f)) {
        fprintf(stderr, "oscar-zoo import: %s wants a clip ratio in [0, 1], not '%s'\n", opt, text);
        return -1;
    }
    *out = r;
    return 0;
}

static int import_check(struct args * a) {
    if (!a->out) {
        fputs("oscar-zoo import: --out DIR is required\n", stderr);
        return -1;
    }
    if (a->base_model && !oscar_hub_repo_id_valid(a->base_model)) {
        fprintf(stderr, "oscar-zoo import: --base-model '%s': not a Hub repo id (OWNER/NAME)\n", a->base_model);
        return -1;
    }
    return clip_arg("--k-clip", a->k_clip_text, &a->k_clip) || clip_arg("--v-clip", a->v_clip_text, &a->v_clip) ? -1 : 0;
}

// --model: its shape and identity for the import to check and record.
static enum oscar_status import_model(struct oscar_hub * hub, const struct args * a, char ** path,
                                      struct oscar_model ** m, struct oscar_import_model * im) {
    enum oscar_status st = oscar_hub_resolve_local(hub, a->model, path);
    if (st == OSCAR_OK) st = oscar_model_load(*path, m);
    if (st != OSCAR_OK) return osc_error_prefix(st, "--model %s", a->model);
    const struct oscar_model_config * c = &(*m)->config;
    *im = (struct oscar_import_model){ .n_layer = c->n_layer, .n_head = c->n_head, .n_head_kv = c->n_head_kv,
                                       .head_dim = c->head_dim, .name = c->name[0] ? c->name : a->model,
                                       .sha256 = (*m)->source_sha256, .architecture = oscar_arch_name(c->arch) };
    return OSCAR_OK;
}

static void import_print(const struct oscar_artifact * art, const struct args * a) {
    const char * from = oscar_artifact_get_meta(art, "oscar.imported_from");
    if (a->json) {
        print_json(json_pack("{s:s, s:i, s:s, s:i, s:s, s:s, s:s}", "out", a->out, "layers", (int) art->n_layer,
                             "grouping", art->rot.n_rot > 1 ? "kv_head" : "layer", "head_dim", (int) art->head_dim,
                             "imported_from", from, "heads", oscar_artifact_get_meta(art, "oscar.num_heads_source"),
                             "eigenvalues", oscar_artifact_get_meta(art, "oscar.eigenvalues")));
        return;
    }
    if (!a->quiet) fprintf(stderr, "imported %s\n", from);
    printf("%s (%d layers, head_dim %d, rotations per %s, clips %s/%s fixed)\n", a->out, (int) art->n_layer,
           (int) art->head_dim, art->rot.n_rot > 1 ? "KV head" : "layer", oscar_artifact_get_meta(art, "oscar.k_clip_ratio"),
           oscar_artifact_get_meta(art, "oscar.v_clip_ratio"));
}

static enum oscar_status import_run(struct oscar_hub * hub, const struct args * a) {
    char *                    src = NULL, * src2 = NULL, * model_path = NULL;
    struct oscar_model *      m   = NULL;
    struct oscar_artifact *   art = NULL;
    struct oscar_base_model   base = { 0 };
    struct oscar_import_model im   = { 0 };
    struct oscar_import_opts  o    = oscar_import_default_opts();
    char                      tool[160];
    snprintf(tool, sizeof tool, "oscar-zoo import %s (%s)", OSCAR_VERSION, oscar_build_commit());
    o.tool   = tool;
    o.k_mean = a->k_mean;
    o.k_clip = a->k_clip;
    o.v_clip = a->v_clip;
    enum oscar_status st = oscar_artifact_check_dest(a->out); // before any download or load
    if (st == OSCAR_OK) st = oscar_hub_resolve_local(hub, a->target, &src);
    if (st == OSCAR_OK && a->target2) st = oscar_hub_resolve_local(hub, a->target2, &src2);
    if (st == OSCAR_OK && a->model && (st = import_model(hub, a, &model_path, &m, &im)) == OSCAR_OK) o.model = &im;
    if (st == OSCAR_OK && (a->model || a->base_model))
        st = oscar_base_model_detect(a->base_model, a->model, model_path, &base);
    if (st == OSCAR_OK && base.id[0]) {
        o.base_model_id        = base.id;
        o.base_model_id_source = base.id_from;
    }
    if (st == OSCAR_OK) st = oscar_import_source(src, src2, &o, &art);
    if (st == OSCAR_OK && base.license[0] &&
        (st = oscar_artifact_set_meta(art, "oscar.base_model_license", base.license)) == OSCAR_OK)
        st = oscar_artifact_set_meta(art, "oscar.base_model_license_source", base.license_from);
    if (st == OSCAR_OK) st = oscar_artifact_write(art, a->out);
    if (st == OSCAR_OK) import_print(art, a);
    oscar_artifact_free(art);
    oscar_model_free(m);
    free(src);
    free(src2);
    free(model_path);
    return st;
}

// ---- the command table ----------------------------------------------------------------------
static const struct command commands[] = {
    { "push", "DIR --repo ID [options]", "upload DIR in one commit (creates the repo and the branch if needed)",
      "  --repo ID             the repo (owner/name); created if missing\n"
      "  --path-in-repo P      where DIR goes in the repo (default: the root)\n"
      "  --revision BRANCH     branch to commit to (default main); a new branch is made from main's head first\n"
      "  --private             make a new repo private\n"
      "  --message TEXT        commit summary\n"
      "  --no-card-check       push without a README.md model card with valid YAML front matter\n"
      "  --layout flat|zoo     flat (default): DIR as it is; zoo: DIR is an oscar artifact, uploaded to\n"
      "                        [P/]<Model>/seq<T>_prompt<N>_group<G>/ (the published OSCAR rotation zoo's layout)\n"
      "                        with k_rotation_<objective>.pt and v_rotation_<objective>.pt beside oscar.safetensors;\n"
      "                        <Model> is the base model's Hub name, the leaf its oscar.calib_tag\n"
      "  --zoo-model NAME      the <Model> folder instead of the base model's name\n",
      push_opts, push_check, push_run, 1 },
    { "pull", "ID [options]", "download files into the shared HF cache (or --local-dir)",
      "  --path P              a folder or file of the repo (default: everything)\n"
      "  --revision R          branch, tag or commit (default main)\n"
      "  --local-dir D         write the files under D instead of the cache\n"
      "  --cache-dir C         the HF cache (default HF_HUB_CACHE, then $HF_HOME/hub)\n",
      pull_opts, NULL, pull_run, 1 },
    { "ls", "ID [options]", "list the files of a repo",
      "  --path P              only under this folder\n"
      "  --revision R          branch, tag or commit (default main)\n",
      ls_opts, NULL, ls_run, 1 },
    { "list", "ID [options]", "list the oscar artifacts in a repo: base model, architecture, grouping, tokens, gate",
      "  --revision R          branch, tag or commit (default main)\n"
      "  --cache-dir C         the HF cache the oscar.json files are downloaded into\n"
      "Every directory holding an oscar.json is one artifact; only its oscar.json is downloaded. A line per\n"
      "artifact: path, base model (its Hub id when recorded), architecture, rotation grouping (layer, kv_head,\n"
      "or 'auto H/L' when --rotation-grouping auto gave H of L layers a rotation per KV head), calibration\n"
      "tokens, gate (pass|fail; '-' for artifacts older than the gate) and creation time ('-' if not recorded).\n"
      "A repo without artifacts prints nothing on stdout and a note on stderr (exit 0). A malformed oscar.json\n"
      "is warned about, naming it; the others are listed and the exit status is 1.\n",
      list_opts, NULL, list_run, 1 },
    { "search", "BASE_MODEL [options]", "find repos of oscar artifacts for a base model (a Hub id)",
      "  --author A            only repos of this user or organization\n"
      "  --limit N             at most N repos (default 100)\n"
      "  --details             also list the artifacts inside each repo (as 'list' does)\n"
      "  --cache-dir C         the HF cache for --details\n"
      "Asks the Hub for models tagged 'oscar' (library_name: oscar in oscar's model cards) and\n"
      "'base_model:BASE_MODEL' (from the card's base_model); prints repo id and last modification.\n"
      "The Hub reads only the card at a repo's root. No match: nothing on stdout, a note on stderr (exit 0).\n",
      search_opts, search_check, search_run, 1 },
    { "info", "ID [options]", "repo summary: commit, visibility, file count",
      "  --revision R          branch, tag or commit (default main)\n",
      info_opts, NULL, info_run, 1 },
    { "export", "ARTIFACT --target sglang|llamacpp|oscar --out PATH [options]",
      "convert an artifact (directory or Hub owner/name[@rev][:path]) for an engine, with its serve recipe",
      "  --target sglang               the SGLang OSCAR fork: --format pt (the default target of pt)\n"
      "  --target llamacpp             the OSCAR llama.cpp fork: --format gguf --base (the default of gguf)\n"
      "  --target oscar                no engine's limits: per-KV-head .pt (format_version 2), standalone or\n"
      "                                non-qwen3 GGUF; no serve recipe\n"
      "  --format pt --out DIR         k_rotation_<obj>.pt + v_rotation_<obj>.pt (+ serve.env); per KV\n"
      "                                head k/v_rotation_perhead.pt; k_mean_decode.pt if keys are centred\n"
      "  --format gguf --out FILE      rotation tensors as blk.N.attn_{k,v}_rot.weight (+ serve.env beside it)\n"
      "  --base MODEL.gguf             (gguf) bake them into a copy of MODEL.gguf\n"
      "  --qk-order auto|hf|ggml       (gguf) K rotation order (auto: ggml for llama-arch targets)\n"
      "  --force                       export an artifact that fails its integrity checks (sha256\n"
      "                                in oscar.json, orthogonality), with a warning\n"
      "  --cache-dir C                 the HF cache for a Hub ARTIFACT\n"
      "An engine target refuses what the engine cannot load (per-KV-head rotations; for llamacpp a\n"
      "non-qwen3 model or a standalone file; for sglang a sink/recent that is not a multiple of 8), saying\n"
      "what would work. The recipe (export VAR=value lines and the launch command) goes to stdout, to\n"
      "serve.env in the export's directory and to --json (env, command, notes, serve_env); notes say where\n"
      "serving differs from what oscar measured (clips chosen for another target, another quantizer).\n",
      export_opts, export_check, export_run, 1 },
    { "import", "SRC [V.pt] --out DIR [options]",
      "reference OSCAR .pt rotations (a zoo folder, or the K and V files) -> an oscar artifact",
      "  --out DIR             the artifact directory to write\n"
      "  --model M             check layers, head_dim and KV heads against this model (file, directory or\n"
      "                        Hub spec) and record its identity (oscar.base_model_sha256), as calibrate does\n"
      "  --base-model ID       the base model's Hub id OWNER/NAME for the card\n"
      "  --k-mean FILE         a k_mean .pt ({layers: {i: {mu: [Hkv,D]}}}; default: the k_mean*.pt beside the pair)\n"
      "  --k-clip R, --v-clip R  fixed clip ratios (default 0.96 / 0.92, the SGLang fork's defaults)\n"
      "  --cache-dir C         the HF cache for Hub sources\n"
      "SRC: a folder holding one k_rotation*.pt and one v_rotation*.pt (e.g. <Model>/seq<T>_prompt<N>_group<G>/ of\n"
      "the OSCAR rotation zoo; a Hub spec owner/name:path is pulled first), one of the two files (its partner is\n"
      "found beside it), or both, K first. The .pt files are read without executing anything (a restricted\n"
      "unpickler). What they do not record is marked unknown in the metadata: eigenvalues (zeros), clips (the\n"
      "fixed ratios), query heads without --model; seq/prompt/group come from the folder name when it has that form.\n",
      import_opts, import_check, import_run, 2 },
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static const struct command * find_command(const char * name) {
    for (size_t i = 0; i < N_COMMANDS; i++) {
        if (!strcmp(commands[i].name, name)) return &commands[i];
    }
    return NULL;
}

static void usage(FILE * f) {
    fputs("Usage: oscar-zoo [global options] COMMAND [options] ARG\n\ncommands:\n", f);
    for (size_t i = 0; i < N_COMMANDS; i++) {
        const char * syn = commands[i].synopsis; // its first word: the argument
        fprintf(f, "  %-7s %-11.*s %s\n", commands[i].name, (int) strcspn(syn, " "), syn, commands[i].summary);
    }
    fprintf(f, "'oscar-zoo COMMAND --help' gives a command's options.\n\n%s\n%s", global_help, env_help);
}

static void command_usage(const struct command * c, FILE * f) {
    fprintf(f, "Usage: oscar-zoo %s %s\n\n%s\n\noptions:\n%s\n%s", c->name, c->synopsis, c->summary, c->options,
            global_help);
}

static void list_commands(FILE * f) {
    fputs("commands:", f);
    for (size_t i = 0; i < N_COMMANDS; i++) {
        fprintf(f, " %s", commands[i].name);
    }
    fputs(" (oscar-zoo --help says what they do)\n", f);
}

// ---- parsing --------------------------------------------------------------------------------
enum { PARSE_RUN, PARSE_DONE, PARSE_USAGE }; // run the command; exit 0 (help, version); exit 2

// A global option or one of the command's; 'h' and O_VERSION are left to the caller.
static void set_option(struct args * a, int c, char * arg) {
    switch (c) {
        case O_REPO: a->repo = arg; break;
        case O_PIR: // fallthrough: push names the place --path-in-repo, as hf upload does
        case O_PATH: a->path = arg; break;
        case O_REV: a->revision = arg; break;
        case O_PRIV: a->is_private = 1; break;
        case O_MSG: a->message = arg; break;
        case O_LDIR: a->local_dir = arg; break;
        case O_CDIR: a->cache_dir = arg; break;
        case O_NOCARD: a->no_card_check = 1; break;
        case O_FORMAT: a->format = arg; break;
        case O_OUT: a->out = arg; break;
        case O_BASE: a->base = arg; break;
        case O_QK: a->qk_order = arg; break;
        case O_TARGET: a->target_name = arg; break;
        case O_LAYOUT: a->layout = arg; break;
        case O_ZOOMODEL: a->zoo_model = arg; break;
        case O_FORCE: a->force = 1; break;
        case O_AUTHOR: a->author = arg; break;
        case O_LIMIT: a->limit_text = arg; break;
        case O_DETAILS: a->details = 1; break;
        case O_MODEL: a->model = arg; break;
        case O_BASEMODEL: a->base_model = arg; break;
        case O_KMEAN: a->k_mean = arg; break;
        case O_KCLIP: a->k_clip_text = arg; break;
        case O_VCLIP: a->v_clip_text = arg; break;
        case O_JSON: a->json = 1; break;
        case 'q': a->quiet = 1; break;
        case O_TOKEN: a->token = arg; break;
        case O_OFF: a->offline = 1; break;
        default: break;
    }
}

static int print_version(void) {
    printf("oscar-zoo %s (%s)\n", OSCAR_VERSION, oscar_build_commit());
    return PARSE_DONE;
}

// The command's option table followed by the global one, into `out` (room for `cap`).
static void merge_options(const struct command * c, struct option * out, size_t cap) {
    size_t n = 0;
    for (const struct option * o = c->opts; o->name && n + 1 < cap; o++) out[n++] = *o;
    for (const struct option * o = global_opts; o->name && n + 1 < cap; o++) out[n++] = *o;
    memset(&out[n], 0, sizeof out[n]);
}

// The command's options (and the global ones) and its one argument; argv[0] is the command.
static int parse_command(int argc, char ** argv, struct args * a) {
    const struct command * c = a->cmd;
    struct option          opts[32];
    char                   prog[32];
    char **                sub = calloc((size_t) argc + 1, sizeof *sub);
    int                    rc  = PARSE_RUN, ch;
    if (!sub) {
        fputs("oscar-zoo: out of memory\n", stderr);
        return PARSE_USAGE;
    }
    merge_options(c, opts, sizeof opts / sizeof opts[0]);
    snprintf(prog, sizeof prog, "oscar-zoo %s", c->name); // getopt's messages name the command
    sub[0] = prog;
    for (int i = 1; i < argc; i++) sub[i] = argv[i];
    optind = 0; // glibc: start over (the global pass stopped at the command)
    while (rc == PARSE_RUN && (ch = getopt_long(argc, sub, "hq", opts, NULL)) != -1) {
        if (ch == '?') rc = PARSE_USAGE;
        else if (ch == 'h') rc = (command_usage(c, stdout), PARSE_DONE);
        else if (ch == O_VERSION) rc = print_version();
        else set_option(a, ch, optarg);
    }
    int max_args = c->max_args;
    if (rc == PARSE_RUN && (optind >= argc || argc - optind > max_args)) {
        fprintf(stderr, "oscar-zoo %s: expected %s%.*s argument%s, got %d\n", c->name, max_args > 1 ? "one or two: " : "one ",
                (int) strcspn(c->synopsis, " "), c->synopsis, max_args > 1 ? "s" : "", argc - optind);
        rc = PARSE_USAGE;
    }
    if (rc == PARSE_RUN) {
        a->target  = sub[optind];
        a->target2 = optind + 1 < argc ? sub[optind + 1] : NULL;
        if (c->check && c->check(a) != 0) rc = PARSE_USAGE;
    }
    if (rc == PARSE_USAGE) {
        fprintf(stderr, "(oscar-zoo %s --help lists its options)\n", c->name);
    }
    free(sub);
    return rc;
}

static int parse(int argc, char ** argv, struct args * a) {
    int ch, help = 0;
    memset(a, 0, sizeof *a);
    optind = 1;
    // Global options before the command; '+' stops at the command, whose options come next.
    while ((ch = getopt_long(argc, argv, "+hq", global_opts, NULL)) != -1) {
        if (ch == '?') return PARSE_USAGE;
        if (ch == O_VERSION) return print_version();
        if (ch == 'h') help = 1;
        else set_option(a, ch, optarg);
    }
    if (optind >= argc) {
        usage(help ? stdout : stderr);
        return help ? PARSE_DONE : PARSE_USAGE;
    }
    if (!(a->cmd = find_command(argv[optind]))) {
        fprintf(stderr, "oscar-zoo: unknown command '%s'\n", argv[optind]);
        list_commands(stderr);
        return PARSE_USAGE;
    }
    if (help) {
        command_usage(a->cmd, stdout);
        return PARSE_DONE;
    }
    return parse_command(argc - optind, argv + optind, a);
}

int main(int argc, char ** argv) {
    struct args a;
    int         rc = parse(argc, argv, &a);
    if (rc != PARSE_RUN) {
        return rc == PARSE_DONE ? 0 : 2;
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN); // a file size limit shows up as EFBIG on write, reported as an error
    oscar_log_set_level(a.quiet ? OSCAR_LOG_ERROR : OSCAR_LOG_INFO);
    struct oscar_hub hub;
    if (oscar_hub_init(&hub) != OSCAR_OK) {
        fprintf(stderr, "oscar-zoo: %s\n", oscar_last_error());
        return 1;
    }
    hub.progress = !a.quiet && !a.json;
    hub.offline |= a.offline;
    enum oscar_status st = a.token ? oscar_hub_set_token(&hub, a.token) : OSCAR_OK;
    if (st == OSCAR_OK && a.cache_dir) {
        free(hub.cache_dir);
        hub.cache_dir = strdup(a.cache_dir);
        st            = hub.cache_dir ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    if (st == OSCAR_OK) {
        st = a.cmd->run(&hub, &a);
    }
    if (st != OSCAR_OK) {
        fprintf(stderr, "oscar-zoo %s: %s\n", a.cmd->name, oscar_last_error());
    }
    oscar_hub_free(&hub);
    return st == OSCAR_OK ? 0 : (st == OSCAR_ERR_INVALID ? 2 : 1);
}
