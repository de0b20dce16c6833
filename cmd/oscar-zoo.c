// oscar-zoo - share rotation artifacts through the Hugging Face Hub.
//
//   oscar-zoo push DIR --repo ID [--path-in-repo P] [--revision R] [--private] [--message M]
//   oscar-zoo pull ID [--path P] [--revision R] [--local-dir D] [--cache-dir C]
//   oscar-zoo ls ID [--path P] [--revision R]
//   oscar-zoo info ID [--revision R]
//   oscar-zoo export ARTIFACT --format pt|gguf --out PATH [--base BASE.gguf] [--qk-order auto|hf|ggml] [--force]
//
// Thin front end over lib/hub: parses arguments, calls the library, prints
// results (stdout; --json for machines) and progress (stderr). Exit codes:
// 0 success, 1 failure, 2 usage error.
#include <getopt.h>
#include <stdbool.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/oscar-artifact.h"
#include "formats/oscar-export.h"
#include "hub/hub.h"
#include "oscar.h"
#include "util/version.h"

struct args {
    const char * cmd;
    const char * target;    // DIR for push, repo id otherwise
    const char * repo;
    const char * path;
    const char * revision;
    const char * local_dir;
    const char * cache_dir;
    const char * message;
    const char * token;
    const char * format;    // export: pt | gguf
    const char * out;       // export: directory (pt) or file (gguf)
    const char * base;      // export gguf: base model to bake into
    const char * qk_order;  // export gguf: auto | hf | ggml
    int          is_private, json, quiet, offline, no_card_check, force;
};

static void usage(FILE * f) {
    fputs("Usage: oscar-zoo COMMAND [options]\n"
          "\n"
          "commands:\n"
          "  push DIR --repo ID    upload DIR in one commit (creates the repo if needed)\n"
          "       [--path-in-repo P] [--revision BRANCH] [--private] [--message TEXT] [--no-card-check]\n"
          "  pull ID               download files into the shared HF cache (or --local-dir)\n"
          "       [--path P] [--revision R] [--local-dir D] [--cache-dir C]\n"
          "  ls ID                 list the files of a repo [--path P] [--revision R]\n"
          "  info ID               repo summary: commit, visibility, file count [--revision R]\n"
          "  export ARTIFACT       convert an artifact (directory or Hub owner/name[@rev][:path]) for an engine\n"
          "       --format pt --out DIR         k_rotation_<obj>.pt + v_rotation_<obj>.pt (SGLang OSCAR fork)\n"
          "       --format gguf --out FILE      rotation tensors for the OSCAR llama.cpp fork\n"
          "       [--base MODEL.gguf]           bake them into a copy of MODEL.gguf\n"
          "       [--qk-order auto|hf|ggml]     K rotation order (auto: ggml for llama-arch targets)\n"
          "       [--force]                     export an artifact that fails its integrity checks (sha256\n"
          "                                     in oscar.json, orthogonality), with a warning\n"
          "\n"
          "options for every command:\n"
          "  --json                machine-readable output on stdout\n"
          "  -q, --quiet           errors only on stderr (no progress)\n"
          "  --token T             token (default: HF_TOKEN, then $HF_HOME/token)\n"
          "  --offline             no network; same as HF_HUB_OFFLINE=1\n"
          "  -h, --help            this text\n"
          "  --version             the version and the build's git commit\n"
          "\n"
          "environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN, HF_TOKEN_PATH, HF_HOME,\n"
          "HF_HUB_CACHE, HF_HUB_OFFLINE, HF_HUB_ETAG_TIMEOUT, HF_HUB_DOWNLOAD_TIMEOUT (seconds, default 10),\n"
          "OSCAR_HUB_MAX_RETRIES (default 5), OSCAR_HUB_BACKOFF (first wait in seconds, default 1),\n"
          "OSCAR_HUB_LOW_SPEED_LIMIT (bytes/s a transfer must keep up over HF_HUB_DOWNLOAD_TIMEOUT, default 1024),\n"
          "OSCAR_HUB_DEADLINE (seconds per request, retries and waits included, default 300).\n"
          "exit codes: 0 success, 1 failure, 2 usage error.\n",
          f);
}

static int parse(int argc, char ** argv, struct args * a) {
    enum { O_REPO = 256, O_PIR, O_REV, O_PRIV, O_MSG, O_PATH, O_LDIR, O_CDIR, O_JSON, O_QUIET, O_TOKEN, O_OFF, O_NOCARD,
           O_FORMAT, O_OUT, O_BASE, O_QK, O_FORCE };
    static const struct option opts[] = {
        { "repo", required_argument, 0, O_REPO },      { "path-in-repo", required_argument, 0, O_PIR },
        { "revision", required_argument, 0, O_REV },   { "private", no_argument, 0, O_PRIV },
        { "message", required_argument, 0, O_MSG },    { "path", required_argument, 0, O_PATH },
        { "local-dir", required_argument, 0, O_LDIR }, { "cache-dir", required_argument, 0, O_CDIR },
        { "json", no_argument, 0, O_JSON },            { "quiet", no_argument, 0, O_QUIET },
        { "token", required_argument, 0, O_TOKEN },    { "offline", no_argument, 0, O_OFF },
        { "no-card-check", no_argument, 0, O_NOCARD }, { "help", no_argument, 0, 'h' },
        { "format", required_argument, 0, O_FORMAT },  { "out", required_argument, 0, O_OUT },
        { "base", required_argument, 0, O_BASE },      { "qk-order", required_argument, 0, O_QK },
        { "force", no_argument, 0, O_FORCE },
        { 0, 0, 0, 0 },
    };
    memset(a, 0, sizeof *a);
    if (argc < 2) {
        return -1;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(stdout);
        exit(0);
    }
    if (!strcmp(argv[1], "--version")) {
        printf("oscar-zoo %s (%s)\n", OSCAR_VERSION, oscar_build_commit());
        exit(0);
    }
    a->cmd = argv[1];
    static const char * const commands[] = {"push", "pull", "ls", "info", "export"};
    bool known = false;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) known = known || !strcmp(a->cmd, commands[i]);
    if (!known) { // before the options: "list" is not a repo id problem
        fprintf(stderr, "oscar-zoo: unknown command '%s' (push, pull, ls, info, export)\n", a->cmd);
        return -1;
    }
    int c;
    optind = 2;
    while ((c = getopt_long(argc, argv, "hq", opts, NULL)) != -1) {
        switch (c) {
            case O_REPO: a->repo = optarg; break;
            case O_PIR: // fallthrough: --path-in-repo and --path name the same thing
            case O_PATH: a->path = optarg; break;
            case O_REV: a->revision = optarg; break;
            case O_PRIV: a->is_private = 1; break;
            case O_MSG: a->message = optarg; break;
            case O_LDIR: a->local_dir = optarg; break;
            case O_CDIR: a->cache_dir = optarg; break;
            case O_JSON: a->json = 1; break;
            case 'q': // fallthrough: -q is --quiet, as in the other tools
            case O_QUIET: a->quiet = 1; break;
            case O_TOKEN: a->token = optarg; break;
            case O_OFF: a->offline = 1; break;
            case O_NOCARD: a->no_card_check = 1; break;
            case O_FORMAT: a->format = optarg; break;
            case O_OUT: a->out = optarg; break;
            case O_BASE: a->base = optarg; break;
            case O_QK: a->qk_order = optarg; break;
            case O_FORCE: a->force = 1; break;
            case 'h': usage(stdout); exit(0);
            default: return -1;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "oscar-zoo %s: expected exactly one %s argument\n", a->cmd,
                !strcmp(a->cmd, "push") ? "directory" : !strcmp(a->cmd, "export") ? "artifact" : "repo id");
        return -1;
    }
    a->target = argv[optind];
    if ((a->format || a->out || a->base || a->qk_order || a->force) && strcmp(a->cmd, "export")) {
        fputs("oscar-zoo: --format, --out, --base, --qk-order and --force are only for export\n", stderr);
        return -1;
    }
    if (!strcmp(a->cmd, "export")) {
        if (!a->format || !a->out || (strcmp(a->format, "pt") && strcmp(a->format, "gguf"))) {
            fputs("oscar-zoo export: --format pt|gguf and --out are required\n", stderr);
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
    } else if (!strcmp(a->cmd, "push")) {
        if (!a->repo) {
            fputs("oscar-zoo push: --repo is required\n", stderr);
            return -1;
        }
    } else if (a->repo) { // pull, ls, info
        fputs("oscar-zoo: --repo is only for push (give the repo id as the argument)\n", stderr);
        return -1;
    }
    return 0;
}

static void print_json(json_t * j) {
    char * s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (s) {
        puts(s);
    }
    free(s);
    json_decref(j);
}

static enum oscar_status cmd_push(struct oscar_hub * hub, const struct args * a) {
    struct oscar_hub_push_opts   o   = { .repo_id = a->repo, .path_in_repo = a->path, .revision = a->revision,
                                         .message = a->message, .is_private = a->is_private,
                                         .skip_card_check = a->no_card_check };
    struct oscar_hub_push_result res;
    enum oscar_status            st = oscar_hub_push(hub, a->target, &o, &res);
    if (st != OSCAR_OK) {
        return st;
    }
    if (a->json) {
        print_json(json_pack("{s:s, s:s?, s:s?, s:i, s:i, s:i}", "repo", a->repo, "commit", res.commit_oid,
                             "url", res.commit_url, "regular", res.n_regular, "lfs", res.n_lfs, "unchanged",
                             res.n_unchanged));
    } else if (res.commit_oid) {
        printf("%s\n", res.commit_url ? res.commit_url : res.commit_oid);
    } else {
        printf("no changes (%d files already up to date)\n", res.n_unchanged);
    }
    oscar_hub_push_result_free(&res);
    return OSCAR_OK;
}

static enum oscar_status cmd_pull(struct oscar_hub * hub, const struct args * a) {
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

static enum oscar_status cmd_ls(struct oscar_hub * hub, const struct args * a) {
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

static enum oscar_status export_pt(const struct oscar_artifact * art, const struct args * a) {
    char *            kp = NULL, * vp = NULL;
    enum oscar_status st = oscar_export_pt(art, a->out, &kp, &vp);
    if (st != OSCAR_OK) {
        return st;
    }
    char *       kabs = realpath(kp, NULL), * vabs = realpath(vp, NULL);
    const char * kc   = oscar_artifact_get_meta(art, "oscar.k_clip_ratio");
    const char * vc   = oscar_artifact_get_meta(art, "oscar.v_clip_ratio");
    if (a->json) {
        print_json(json_pack("{s:s, s:s, s:s, s:i, s:{s:s, s:s, s:s?, s:s?}}", "format", "pt", "k_rotation",
                             kabs ? kabs : kp, "v_rotation", vabs ? vabs : vp, "format_version",
                             art->per_head ? 2 : 1, "env", "SGLANG_OSCAR_K_ROTATION_PATH", kabs ? kabs : kp,
                             "SGLANG_OSCAR_V_ROTATION_PATH", vabs ? vabs : vp, "SGLANG_OSCAR_K_CLIP_RATIO", kc,
                             "SGLANG_OSCAR_V_CLIP_RATIO", vc));
    } else {
        if (!a->quiet) fprintf(stderr, "wrote %s\nwrote %s\n", kp, vp);
        printf("SGLANG_OSCAR_K_ROTATION_PATH=%s SGLANG_OSCAR_V_ROTATION_PATH=%s SGLANG_OSCAR_K_CLIP_RATIO=%s "
               "SGLANG_OSCAR_V_CLIP_RATIO=%s\n",
               kabs ? kabs : kp, vabs ? vabs : vp, kc ? kc : "0.96", vc ? vc : "0.92");
    }
    free(kabs);
    free(vabs);
    free(kp);
    free(vp);
    return OSCAR_OK;
}

static enum oscar_status export_gguf(const struct oscar_artifact * art, const struct args * a) {
    struct oscar_export_gguf_opts o = { .base = a->base, .qk_order = OSCAR_EXPORT_QK_AUTO };
    bool                          permuted = false;
    if (a->qk_order && !strcmp(a->qk_order, "hf")) o.qk_order = OSCAR_EXPORT_QK_HF;
    if (a->qk_order && !strcmp(a->qk_order, "ggml")) o.qk_order = OSCAR_EXPORT_QK_GGML;
    enum oscar_status st = oscar_export_gguf(art, a->out, &o, &permuted);
    if (st != OSCAR_OK) {
        return st;
    }
    const char * kc = oscar_artifact_get_meta(art, "oscar.k_clip_ratio");
    if (a->json) {
        print_json(json_pack("{s:s, s:s, s:s?, s:s}", "format", "gguf", "out", a->out, "base", a->base, "qk_order",
                             permuted ? "ggml" : "hf"));
    } else {
        if (!a->quiet) fprintf(stderr, "wrote %s (%d layers, K rotation in %s order%s)\n", a->out, (int) art->n_layer,
                permuted ? "ggml" : "HF", a->base ? ", baked into the base model" : "");
        printf("LLAMA_KV_NO_HADAMARD=1 LLAMA_KV_CLIP_RATIO=%s  (llama.cpp fork: --cache-type-k q2_0 --cache-type-v q2_0)\n",
               kc ? kc : "0.96");
    }
    return OSCAR_OK;
}

static enum oscar_status cmd_export(struct oscar_hub * hub, const struct args * a) {
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

static enum oscar_status cmd_info(struct oscar_hub * hub, const struct args * a) {
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

int main(int argc, char ** argv) {
    struct args a;
    if (parse(argc, argv, &a) != 0) {
        usage(stderr);
        return 2;
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
    if (a.token) {
        oscar_hub_set_token(&hub, a.token);
    }
    if (a.cache_dir) {
        free(hub.cache_dir);
        hub.cache_dir = strdup(a.cache_dir);
    }
    enum oscar_status st;
    if (!strcmp(a.cmd, "push")) {
        st = cmd_push(&hub, &a);
    } else if (!strcmp(a.cmd, "pull")) {
        st = cmd_pull(&hub, &a);
    } else if (!strcmp(a.cmd, "ls")) {
        st = cmd_ls(&hub, &a);
    } else if (!strcmp(a.cmd, "export")) {
        st = cmd_export(&hub, &a);
    } else {
        st = cmd_info(&hub, &a);
    }
    if (st != OSCAR_OK) {
        fprintf(stderr, "oscar-zoo %s: %s\n", a.cmd, oscar_last_error());
    }
    oscar_hub_free(&hub);
    return st == OSCAR_OK ? 0 : (st == OSCAR_ERR_INVALID ? 2 : 1);
}
