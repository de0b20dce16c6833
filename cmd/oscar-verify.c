// oscar-verify - what an artifact does to attention and to perplexity,
// against every baseline (method.md §16). Thin front end over lib/verify
// (verify.h has the evaluation, report.h the outputs).
// Exit codes: 0 ok, 1 failure (unreadable model/artifact/corpus, too few
// tokens, write errors), 2 usage error.
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/oscar-artifact.h"
#include "quant/quant.h"
#include "util/blas.h"
#include "util/version.h"
#include "hub/hub.h"
#include "model/model.h"
#include "tokenizer/corpus.h"
#include "tokenizer/tokenizer.h"
#include "util/cli.h"
#include "util/log.h"
#include "util/target.h"
#include "verify/verify.h"

struct opts {
    const char * model, * rotations, * corpus, * jsonl_field, * report_dir;
    bool json, update_card, force;
    int32_t recall;                     // --recall N: probes at N depths (0: none)
};

// ---- the verbatim-recall probe's texts (lib/verify/recall.h lays them out) ----
#define RECALL_NEEDLE   " The secret passcode is %05u. Remember it. "
#define RECALL_QUESTION "\n\nWhat is the secret passcode? The secret passcode is"
#define RECALL_ANSWER   " %05u"

struct recall_texts {
    struct oscar_recall_probe probes[OSCAR_RECALL_MAX_PROBES];
    int32_t * ids[2 * OSCAR_RECALL_MAX_PROBES + 1];   // needles, answers, question (owned)
    struct oscar_verify_recall rc;
};

static enum oscar_status encode(struct oscar_tokenizer * tok, const char * text, int32_t ** ids, int32_t * n) {
    size_t nn = 0;
    enum oscar_status st = oscar_tokenizer_encode(tok, text, strlen(text), false, ids, &nn);
    *n = (int32_t) nn;
    return st;
}

// n probes at depths 0, 1/(n-1), .., 1 (n = 1: the middle), each with its own 5-digit passcode.
static enum oscar_status recall_make(struct oscar_tokenizer * tok, int32_t n, struct recall_texts * rt) {
    memset(rt, 0, sizeof *rt);
    char text[256];
    enum oscar_status st = encode(tok, RECALL_QUESTION, &rt->ids[2 * n], &rt->rc.n_question);
    for (int32_t k = 0; k < n && st == OSCAR_OK; k++) {
        struct oscar_recall_probe * p = &rt->probes[k];
        unsigned code = 10000u + (unsigned) (((uint64_t) k * 7919u + 3571u) * 2654435761u % 90000u);
        p->depth = n == 1 ? 0.5 : (double) k / (double) (n - 1);
        snprintf(text, sizeof text, RECALL_NEEDLE, code);
        st = encode(tok, text, &rt->ids[2 * k], &p->n_needle);
        snprintf(text, sizeof text, RECALL_ANSWER, code);
        if (st == OSCAR_OK) st = encode(tok, text, &rt->ids[2 * k + 1], &p->n_answer);
        p->needle = rt->ids[2 * k], p->answer = rt->ids[2 * k + 1];
    }
    rt->rc = (struct oscar_verify_recall){.probes = rt->probes, .n_probes = n, .question = rt->ids[2 * n],
                                          .n_question = rt->rc.n_question};
    return st;
}

static void recall_free(struct recall_texts * rt) {
    for (size_t i = 0; i < sizeof rt->ids / sizeof rt->ids[0]; i++) free(rt->ids[i]);
}

static void usage(FILE * f) {
    fprintf(f,
            "Usage: oscar-verify --model M --corpus C [--rotations ARTIFACT] [options]\n"
            "  -m, --model PATH|ID      .gguf file, HF model directory, or Hub owner/name[@rev][:path]\n"
            "  -r, --rotations PATH|ID  artifact directory or Hub owner/name[@rev][:path]; also reference .pt\n"
            "                           rotations (a k_rotation*.pt / v_rotation*.pt folder such as a zoo\n"
            "                           <Model>/seq<T>_prompt<N>_group<G>, or one of the pair), imported in memory\n"
            "  -f, --corpus PATH        held-out text file, .jsonl (--jsonl-field), or directory of them\n"
            "      --jsonl-field NAME   the field of each JSONL record; every file is then JSONL [*.jsonl: text]\n"
            "  -c, --ctx N              perplexity window [2048]\n"
            "      --sink N --recent N  BF16 tiers [32, 128: the SGLang fork's serving defaults;\n"
            "                           oscar-calibrate's gate uses the paper's 64, 256]\n"
            "      --page N             decode demotion page [8]\n"
            "      --prompt N           prefill chunk per window, >= sink [sink]; INT2 rows written by prefill\n"
            "                           use the method's quantizer (oscar-lm: Lloyd-Max), demoted rows the flush rule\n"
            "      --group-size N       INT2 group [head_dim]\n"
            "      --scale-dtype float32|float16|bfloat16 (or f32|f16|bf16) [float32]\n"
            "      --methods LIST       [%s with --rotations,\n"
            "                            %s without]\n"
            "                           q2_0 (extra, needs --rotations): the OSCAR llama.cpp fork's cache\n"
            "                           (zhongzhu/llamacpp @ 4570ea609) as its README runs it: K.M, V.M_v per\n"
            "                           layer, --cache-type-k/v q2_0, LLAMA_KV_NO_HADAMARD=1,\n"
            "                           LLAMA_KV_CLIP_RATIO = the artifact's oscar.k_clip_ratio (what the\n"
            "                           export's recipe sets; 0.96 without one) for K and V; --sink/--recent are\n"
            "                           LLAMA_KV_HP_SINK/RECENT (fork default 0/0 = no HP buffer, its README\n"
            "                           512/2048), an F16 ring decoded token by token (--page, --prompt unused);\n"
            "                           head_dim a multiple of 128, or n_head_kv*head_dim < 128; as the\n"
            "                           export's recipe serves it (LLAMA_ATTN_ROT_DISABLE=1)\n"
            "                           q2_0-attn-rot (extra): q2_0 with the fork's default attention rotation\n"
            "                           (upstream attn_rot: K by H_128, V by H_64 after the artifact's rotation)\n"
            "      --target oscar|sglang|llamacpp  the engine to measure for [oscar]: its sink/recent defaults\n"
            "                           (sglang 32, 128, in multiples of 8; llamacpp 0, 0) and, for llamacpp with\n"
            "                           --rotations, the methods bf16,q2_0\n"
            "      --tokens N           perplexity tokens, whole windows [ctx]\n"
            "      --metric-tokens N    tokens of the per-layer metrics / drift pass [512]\n",
            OSCAR_VERIFY_METHODS_ALL, OSCAR_VERIFY_METHODS_NO_ARTIFACT);
    fprintf(f, // in two parts: one string literal may hold at most 4095 characters (C99 5.2.4.1)
            "      --recall N           verbatim-recall probe: a 5-digit passcode sentence at N depths (1..%d) of a\n"
            "                           ctx-token window of the corpus, then a question; greedy retrieval with each\n"
            "                           method's cache (exact match per depth; one forward per depth and method)\n"
            "      --score-from N       score only targets N..ctx-1 of each window (perplexity, next-token KL),\n"
            "                           e.g. past the BF16 sink + recent; 0 <= N < ctx [0: all, 1..ctx-1];\n"
            "                           llama-perplexity's default scoring is --score-from ctx/2+1\n"
            "  -o, --report DIR         write report.json, layers.svg, summary.md\n"
            "      --update-card        put summary.md into the artifact's README.md (local artifact only)\n"
            "      --force              use an artifact that fails its integrity checks (sha256 in oscar.json,\n"
            "                           orthogonality, calibrated on this --model), with a warning\n"
            "  -t, --threads N          [all cores]\n"
            "      --device cpu|cuda    where the forward passes run [cpu]; cuda: the GPU forward pass (bf16\n"
            "                           weights and activations); every method's quantized cache is simulated\n"
            "                           inside it (head dims 32, 64, 128, 256; any other keeps the CPU\n"
            "                           simulation, with a warning); the per-layer metrics are computed on\n"
            "                           the host from the copied layers\n"
            "      --gpu-precision bf16|fp32  with --device cuda: bf16 weights and activations [bf16], or\n"
            "                           fp32 throughout (the CPU pass's numerics, 2x weight memory)\n"
            "      --json               report JSON on stdout instead of the table\n"
            "  -q, --quiet              no table, errors only\n"
            "      --version            the version and the build's git commit\n",
            OSCAR_RECALL_MAX_PROBES);
}

static int bad(const char * what) {
    fprintf(stderr, "oscar-verify: %s\n", what);
    usage(stderr);
    return 2;
}

// Upper bounds of the numeric options (see oscar-calibrate.c).
#define MAX_TOKENS (INT64_C(1) << 40)
#define MAX_SEQ    (1 << 20)
#define MAX_GROUP  4096
#define NUM(call)                                                                                                   \
    do {                                                                                                            \
        if ((call) != OSCAR_OK) return bad(oscar_last_error());                                                     \
    } while (0)

static int parse(int argc, char ** argv, struct opts * o, struct oscar_verify_params * p, bool * quiet) {
    enum { O_JF = 256, O_SINK, O_REC, O_PAGE, O_PROMPT, O_GS, O_SD, O_METH, O_TOK, O_MT, O_JSON, O_CARD, O_DEV, O_GPREC, O_FORCE, O_VER, O_TARGET, O_SCORE, O_RECALL };
    static const struct option lo[] = {
        {"model", 1, 0, 'm'}, {"rotations", 1, 0, 'r'}, {"corpus", 1, 0, 'f'}, {"jsonl-field", 1, 0, O_JF},
        {"ctx", 1, 0, 'c'}, {"sink", 1, 0, O_SINK}, {"recent", 1, 0, O_REC}, {"page", 1, 0, O_PAGE}, {"prompt", 1, 0, O_PROMPT},
        {"group-size", 1, 0, O_GS}, {"scale-dtype", 1, 0, O_SD}, {"methods", 1, 0, O_METH},
        {"tokens", 1, 0, O_TOK}, {"metric-tokens", 1, 0, O_MT}, {"report", 1, 0, 'o'},
        {"update-card", 0, 0, O_CARD}, {"force", 0, 0, O_FORCE}, {"device", 1, 0, O_DEV}, {"gpu-precision", 1, 0, O_GPREC}, {"threads", 1, 0, 't'}, {"json", 0, 0, O_JSON}, {"quiet", 0, 0, 'q'},
        {"version", 0, 0, O_VER}, {"help", 0, 0, 'h'}, {"target", 1, 0, O_TARGET}, {"score-from", 1, 0, O_SCORE},
        {"recall", 1, 0, O_RECALL}, {0, 0, 0, 0}};
    const struct oscar_target_profile * target = oscar_target_get(OSCAR_TARGET_OSCAR);
    int c, window_set = 0; // bits: --sink, --recent given
    while ((c = getopt_long(argc, argv, "m:r:f:c:o:t:qh", lo, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'r': o->rotations = optarg; break;
        case 'f': o->corpus = optarg; break;
        case O_JF: o->jsonl_field = optarg; break;
        case 'c': NUM(osc_parse_i32("--ctx", optarg, 2, MAX_SEQ, &p->ctx)); break;
        case O_SINK: NUM(osc_parse_i32("--sink", optarg, 0, MAX_SEQ, &p->sink)); window_set |= 1; break;
        case O_REC: NUM(osc_parse_i32("--recent", optarg, 0, MAX_SEQ, &p->recent)); window_set |= 2; break;
        case O_TARGET: NUM(osc_parse_target("--target", optarg, &target)); break;
        case O_PAGE: NUM(osc_parse_i32("--page", optarg, 1, MAX_SEQ, &p->page)); break;
        case O_PROMPT: NUM(osc_parse_i32("--prompt", optarg, 0, MAX_SEQ, &p->prompt)); break;
        case O_GS: NUM(osc_parse_i32("--group-size", optarg, 0, MAX_GROUP, &p->group_size)); break;
        case O_SD:
            if (oscar_meta_dtype_parse(optarg, &p->scale_dtype) != OSCAR_OK) return bad(oscar_last_error());
            break;
        case O_METH: p->methods = optarg; break;
        case O_TOK: NUM(osc_parse_i64("--tokens", optarg, 0, MAX_TOKENS, &p->tokens)); break;
        case O_MT: NUM(osc_parse_i32("--metric-tokens", optarg, 2, MAX_SEQ, &p->metric_tokens)); break;
        case O_SCORE: NUM(osc_parse_i32("--score-from", optarg, 0, MAX_SEQ, &p->score_from)); break;
        case O_RECALL: NUM(osc_parse_i32("--recall", optarg, 1, OSCAR_RECALL_MAX_PROBES, &o->recall)); break;
        case 'o': o->report_dir = optarg; break;
        case O_CARD: o->update_card = true; break;
        case O_FORCE: o->force = true; break;
        case 't': NUM(osc_parse_threads("--threads", optarg, &p->n_threads)); break;
        case O_DEV:
            NUM(osc_parse_device("--device", optarg, &p->device));
            break;
        case O_GPREC:
            if (strcmp(optarg, "bf16") && strcmp(optarg, "fp32"))
                return fprintf(stderr, "oscar-verify: bad --gpu-precision\n"), 2;
            p->gpu_fp32 = !strcmp(optarg, "fp32");
            break;
        case O_JSON: o->json = true; break;
        case 'q': *quiet = true; break;
        case 'h': usage(stdout); exit(0);
        case O_VER: printf("oscar-verify %s (%s)\n", OSCAR_VERSION, oscar_build_commit()); exit(0);
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) return bad("unexpected argument");
    if (target->has_window && !(window_set & 1)) p->sink = target->sink;     // the engine's defaults
    if (target->has_window && !(window_set & 2)) p->recent = target->recent;
    if (p->sink % target->window_align || p->recent % target->window_align) {
        char msg[160];
        snprintf(msg, sizeof msg, "--target %s: --sink and --recent must be multiples of %d (the engine's INT2 page)",
                 target->name, (int) target->window_align);
        return bad(msg);
    }
    if (!p->methods && o->rotations && target->id == OSCAR_TARGET_LLAMACPP) p->methods = "bf16,q2_0";
    if (!o->model || !o->corpus) return bad("--model and --corpus are required");
    if ((p->prompt && p->prompt < p->sink) || p->prompt > p->ctx)
        return bad("--prompt must lie between --sink and --ctx");
    if (p->score_from >= p->ctx) {
        char msg[160];
        snprintf(msg, sizeof msg, "--score-from %d must be < --ctx %d (each window scores its targets N..ctx-1)",
                 p->score_from, p->ctx);
        return bad(msg);
    }
    struct stat sb;
    if (o->update_card && (!o->rotations || stat(o->rotations, &sb) != 0 || !S_ISDIR(sb.st_mode)))
        return bad("--update-card needs --rotations naming a local artifact directory");
    if (!p->methods) p->methods = o->rotations ? OSCAR_VERIFY_METHODS_ALL : OSCAR_VERIFY_METHODS_NO_ARTIFACT;
    char names[OSCAR_VERIFY_MAX_METHODS][32];
    int32_t nm = 0;
    if (oscar_verify_parse_methods(p->methods, o->rotations != NULL, names, &nm) != OSCAR_OK)
        return bad(oscar_last_error());
    return 0;
}

static const char * base_name(const char * path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    const char * b = path + n;
    while (b > path && b[-1] != '/') b--;
    return b;
}

int main(int argc, char ** argv) {
    osc_blas_select_kernels(argv);
    struct opts o = {0};
    struct oscar_verify_params p = oscar_verify_default_params();
    bool quiet = false;
    int rc = parse(argc, argv, &o, &p, &quiet);
    if (rc) return rc;
    if (quiet || o.json) oscar_log_set_level(OSCAR_LOG_ERROR);
    struct oscar_hub hub;
    if (oscar_hub_init(&hub) != OSCAR_OK) return fprintf(stderr, "oscar-verify: %s\n", oscar_last_error()), 1;
    struct oscar_model * m = NULL;
    struct oscar_tokenizer * tok = NULL;
    struct oscar_artifact * art = NULL;
    struct oscar_tokens ids = {0};
    struct oscar_corpus_stats cs = {0};
    struct oscar_verify_report rep = {0};
    struct recall_texts rt = {0};
    char * model_path = NULL, * rot_path = NULL, * text = NULL;
    const char * stage = "--report", * arg = o.report_dir;
    rc = 1;
    if (o.report_dir && oscar_verify_check_report_dir(o.report_dir)) goto out; // before any compute
    stage = "--model", arg = o.model;
    // A device pass converts the weights as it uploads them: the host reads one tensor block at a time.
    const bool lazy = p.device && strcmp(p.device, "cpu") != 0;
    if (oscar_hub_resolve_local(&hub, o.model, &model_path) ||
        (lazy ? oscar_model_open_lazy(model_path, &m) : oscar_model_load(model_path, &m)) ||
        oscar_tokenizer_load(model_path, &tok))
        goto out;
    stage = "--rotations", arg = o.rotations;
    const struct oscar_model_config * mc = &m->config;
    struct oscar_artifact_trust trust = {.model_sha256 = m->source_sha256, .model_label = o.model, .force = o.force};
    if (o.rotations && (oscar_hub_resolve_local(&hub, o.rotations, &rot_path) || oscar_artifact_load(rot_path, &trust, &art) ||
                        oscar_artifact_check_shape(art, mc->n_layer, mc->n_head, mc->n_head_kv, mc->head_dim, mc->name)))
        goto out;
    if (o.update_card && oscar_artifact_get_meta(art, "oscar.imported_from")) { // before any compute
        osc_error(OSCAR_ERR_INVALID, "--update-card needs an oscar artifact, not .pt rotations (oscar-zoo import "
                  "makes one)");
        goto out;
    }
    stage = "--corpus", arg = o.corpus;
    struct oscar_corpus_opts co = oscar_corpus_default_opts(tok);
    co.jsonl_field = o.jsonl_field;
    int64_t need = p.tokens ? p.tokens : p.ctx;
    co.max_tokens = (size_t) (need > p.metric_tokens ? need : p.metric_tokens);
    if (oscar_corpus_tokenize(tok, o.corpus, &co, &ids, &cs) || oscar_verify_check_tokens(&p, ids.n)) goto out;
    stage = "--recall", arg = NULL;
    if (o.recall) {
        if (recall_make(tok, o.recall, &rt)) goto out;
        p.recall = &rt.rc;
    }
    stage = "verify", arg = NULL;
    if (oscar_verify_run(m, art, ids.ids, ids.n, &p, &rep)) goto out;
    snprintf(rep.model, sizeof rep.model, "%s", o.model);
    snprintf(rep.rotations, sizeof rep.rotations, "%s", o.rotations ? o.rotations : "");
    snprintf(rep.corpus, sizeof rep.corpus, "%s", base_name(o.corpus));
    snprintf(rep.corpus_sha256, sizeof rep.corpus_sha256, "%s", cs.sha256_hex);
    stage = "--report", arg = o.report_dir;
    if (o.report_dir && oscar_verify_write_dir(&rep, o.report_dir)) goto out;
    stage = "--update-card", arg = rot_path;
    if (o.update_card) {
        char readme[4096], * md = NULL;
        snprintf(readme, sizeof readme, "%s/README.md", rot_path);
        enum oscar_status st = oscar_verify_markdown(&rep, &md);
        if (st == OSCAR_OK) st = oscar_verify_update_card(readme, md);
        free(md);
        if (st) goto out;
    }
    stage = "--json", arg = NULL;
    if (o.json) {
        if (oscar_verify_json_text(&rep, &text)) goto out;
        puts(text);
    } else if (!quiet) {
        oscar_verify_print_table(&rep, stdout);
    }
    rc = 0;
out:
    if (rc) fprintf(stderr, "oscar-verify: %s%s%s: %s\n", stage, arg ? " " : "", arg ? arg : "", oscar_last_error());
    oscar_verify_report_free(&rep);
    recall_free(&rt);
    oscar_tokens_free(&ids);
    oscar_artifact_free(art);
    oscar_tokenizer_free(tok);
    oscar_model_free(m);
    oscar_hub_free(&hub);
    free(model_path);
    free(rot_path);
    free(text);
    return rc;
}
