// oscar-calibrate - model + corpus -> OSCAR rotation artifact.
// Pipeline (lib/calibrate): corpus -> plan -> one layer-major pass (covariances
// and held-out rows) -> fit -> [sign search] -> [OptR refinement] -> clip search -> gate -> artifact. Exit 0 ok, 1 failure
// (including a failed gate with --strict), 2 usage error.
#include <getopt.h>
#include <jansson.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calibrate/input.h"
#include "calibrate/base-model.h"
#include "calibrate/calibrate.h"
#include "calibrate/dp.h"
#include "calibrate/random-source.h"
#include "formats/oscar-artifact.h"
#include "hub/hub.h"
#include "util/blas.h"
#include "util/cli.h"
#include "util/fs.h"
#include "util/log.h"

#define MAX_DATASETS 32

struct opts {
    const char * model, * jsonl_field, * out, * save_act, * from_act;
    const char * device, * random_init; // device NULL: cpu
    const char * base_model;            // --base-model OWNER/NAME (validated)
    const char * tokenizer;             // --tokenizer PATH, or NULL: the model's own
    const char * datasets[MAX_DATASETS]; // --dataset ids (validated, no repeats)
    int32_t n_datasets;
    struct oscar_calib_source corpus[OSCAR_CALIB_MAX_SOURCES]; // --corpus, in order
    int32_t n_corpus;
    bool strict, json, gpu_fp32;        // gpu_fp32: --gpu-precision fp32
    const char * capture_dtype;         // --capture-dtype as given, or NULL
    int32_t ranks;                      // --ranks N: data-parallel ranks as threads of this process (0: one)
};

static void usage(FILE * f) {
    fprintf(f,
            "Usage: oscar-calibrate --model M --corpus C --out DIR [options]\n"
            "  -m, --model PATH|ID       .gguf file, HF model directory, or Hub owner/name[@rev][:path]\n"
            "                            (pulled into the shared HF cache; HF_HUB_OFFLINE=1 uses the cache)\n"
            "  -f, --corpus PATH[@SHARE] text file, .jsonl, or directory of them (not with --from-activations);\n"
            "                            repeatable: a mix, each source giving its SHARE of the calibration tokens\n"
            "                            (--tokens) and of the held-out sequences, in whole sequences\n"
            "                            (shares normalised; all or none given, none = equal), e.g.\n"
            "                            -f pp.txt@0.5 -f news.txt@0.25 -f learned.txt@0.25. SHARE is what\n"
            "                            follows the last '@' when it is a number (a path ending in\n"
            "                            '@NUMBER' needs an explicit share after it)\n"
            "      --jsonl-field NAME    the field of each JSONL record; every file is then JSONL [*.jsonl: text]\n"
            "      --tokenizer PATH      a tokenizer.json, or a .gguf or directory holding one, for a model that\n"
            "                            has none of its own (a GGUF without tokenizer metadata) [the model's]\n"
            "  -o, --out DIR             artifact directory: new, or an artifact to replace (checked before any compute)\n"
            "      --base-model ID       the model's Hub id OWNER/NAME for the card's base_model [from --model when\n"
            "                            it is a Hub id or in the HF cache, else from the GGUF's source metadata]\n"
            "      --dataset ID          a Hub dataset id OWNER/NAME of the corpus, for the card's datasets\n"
            "                            (repeatable)\n"
            "      --tokens N            calibration tokens [20000]\n"
            "  -c, --seq-len N           tokens per sequence [512]\n"
            "  -b, --batch N             sequences per forward call [4]\n"
            "      --heldout N           held-out sequences after the budget [2]\n"
            "      --allow-short         calibrate on a shorter corpus instead of failing\n"
            "      --rotation-grouping layer|head|auto  one rotation per layer, per KV head, or per layer\n"
            "                            whichever gives the lower held-out post-W_O error (ties: layer) [auto;\n"
            "                            layer for --target sglang/llamacpp and with --sign-search]\n"
            "      --k-objective qqt|ktk [qqt]     --v-objective sst|vtv|attn-mass [sst]\n"
            "      --composition NAME    [r_h_pbr]\n"
            "      --group-size N        INT2 group [head_dim]\n"
            "      --scale-dtype float32|float16|bfloat16 (or f32|f16|bf16) [float32]\n"
            "      --sink N --recent N   BF16 tiers for the gate [64, 256: the paper's; oscar-verify's\n"
            "                            32, 128 are the SGLang fork's serving defaults]\n"
            "      --target oscar|sglang|llamacpp  the engine the clips are chosen for [oscar: per layer];\n"
            "                            sglang: one K and one V ratio for the model, sink/recent [32, 128];\n"
            "                            llamacpp: one ratio for K and V searched with its Q2_0 cache, sink/recent\n"
            "                            [0, 0], qwen3 models only. Refuses what the engine cannot load\n"
            "      --clip K,V            fixed clip ratios (reference 0.96,0.92)\n"
            "      --clip-search GRID    start:stop:step or list [1.00:0.80:0.02] (default mode)\n"
            "      --sign-search         choose each eigenvector's sign on the held-out rows (coordinate descent on\n"
            "                            the clip search's INT2 objective at the --clip ratios) instead of the\n"
            "                            canonical signs (largest-magnitude component positive)\n"
            "      --sign-passes N       most passes over the eigenvectors of each rotation [2]\n");
    fprintf(f, // two strings: C11 compilers need not take one longer than 4095 bytes
            "      --refine optr         after the fit, refine the rotations per KV head with OptR (output-aware,\n"
            "                            through INT2; trained on the first calibration sequences, kept a layer\n"
            "                            at a time in the pass or read from a store; early-stopped on the\n"
            "                            held-out rows) and store k_mean\n"
            "      --optr-steps N        Adam steps per phase [80]   --optr-train-seq N  training sequences [0 = all]\n"
            "      --no-optr-center      no key centering (no k_mean)\n"
            "  -t, --threads N           [all cores; with --ranks N, per rank: the cores / N]\n"
            "      --ranks N             N data-parallel ranks in this process, one thread each (as mpirun -np N:\n"
            "                            each runs its share of the batches; on GPUs rank r drives GPU r\n"
            "                            modulo the GPUs; OSCAR_DP=nccl: NCCL, one GPU per rank) [1]\n"
            "      --checkpoint-every N  checkpoint (OUT.ckpt) at the first layer boundary after N\n"
            "                            token-layers (sequences x tokens x layers done) [0 = off]\n"
            "      --resume              continue from OUT.ckpt (refused if made for another model,\n"
            "                            corpus, tokenizer or plan)\n"
            "      --strict              refuse to write when OSCAR does not beat Hadamard and naive INT2\n"
            "      --seed N              [0]\n"
            "      --capture-dtype bf16|fp32  round captured q/k/v to bf16 like the reference [fp32]\n"
            "      --save-activations FILE  also write pass-1 and held-out q/k/v to an HDF5 store\n"
            "                            (stored in the capture dtype, so a replay is exact)\n"
            "      --from-activations FILE  fit, clip search and gate from a store: no forward pass\n"
            "                            (--model still gives W_O and the provenance; it must match)\n"
            "      --device cpu|cuda     where the layer-major pass, the clip search and the gate run [cpu];\n"
            "                            cuda keeps the hidden states, K/V and sums on the device\n"
            "      --gpu-precision bf16|fp32  with --device cuda: bf16 weights and GEMM inputs, capture bf16\n"
            "                            (fast), or fp32 throughout (the CPU pass's numerics, slower) [bf16]\n"
            "      --random-init NAME    random-weight model of a named shape (qwen3-8b, llama3-70b, smollm2-135m,\n"
            "                            qwen3-30b-a3b, glm-4.7, tiny-qwen3-moe, tiny-gemma3, tiny-glm4-moe)\n"
            "                            on synthetic tokens, instead of --model/--corpus: for benchmarks only\n"
            "  -q, --quiet               errors only on stderr (no progress, gate table or timings)\n"
            "  -v, --verbose             stage timings\n"
            "      --json                the summary on stdout; stderr as with --quiet\n"
            "      --version             the version and the build's git commit\n");
}

static bool on_cuda(const struct opts * o) { return o->device && strcmp(o->device, "cuda") == 0; }
// Upper bounds of the numeric options: far beyond any real run, low enough that
// no product of them (tokens + held-out rows, batch x seq-len) overflows.
#define MAX_TOKENS (INT64_C(1) << 40)
#define MAX_SEQ    (1 << 20)
#define MAX_BATCH  4096
#define MAX_GROUP  4096
#define MAX_RANKS  256
#define NUM(call)                                                                                                   \
    do {                                                                                                            \
        if ((call) != OSCAR_OK) return fprintf(stderr, "oscar-calibrate: %s\n", oscar_last_error()), 2;             \
    } while (0)

// --clip K,V: two ratios in [0, 1]
static enum oscar_status parse_clip_pair(const char * text, struct oscar_calib_params * p) {
    char k[64], * comma = strchr(text, ',');
    if (!comma || (size_t) (comma - text) >= sizeof k)
        return osc_error(OSCAR_ERR_INVALID, "--clip: '%s' is not K,V (e.g. 0.96,0.92)", text);
    memcpy(k, text, (size_t) (comma - text));
    k[comma - text] = '\0';
    enum oscar_status st = osc_parse_f64("--clip (K)", k, 0.0, 1.0, &p->k_clip);
    return st != OSCAR_OK ? st : osc_parse_f64("--clip (V)", comma + 1, 0.0, 1.0, &p->v_clip);
}

// --base-model / --dataset: a Hub id owner/name, else a usage error naming it.
static bool hub_id_arg(const char * opt, const char * id) {
    if (oscar_hub_repo_id_valid(id)) return true;
    fprintf(stderr, "oscar-calibrate: %s '%s': not a Hub repo id (expected OWNER/NAME of letters, digits, '-', "
                    "'_' and '.', without '--' or '..')\n", opt, id);
    return false;
}

static int parse(int argc, char ** argv, struct opts * o, struct oscar_calib_params * p) {
    enum { O_TOK = 256, O_HELD, O_SHORT, O_GRP, O_KOBJ, O_VOBJ, O_COMP, O_GS, O_SD, O_SINK, O_REC, O_CLIP, O_CS,
           O_CKPT, O_RES, O_STRICT, O_SEED, O_JSON, O_VER, O_JF, O_CDT, O_SAVE, O_FROM, O_DEV, O_RAND,
           O_GPREC, O_BASE, O_DATA, O_TARGET, O_REFINE, O_OSTEPS, O_OSEQ, O_ONOCENTER, O_SIGNS, O_SPASSES, O_TOKZ, O_RANKS };
    static const struct option lo[] = {
        {"model", 1, 0, 'm'}, {"corpus", 1, 0, 'f'}, {"out", 1, 0, 'o'}, {"tokens", 1, 0, O_TOK},
        {"seq-len", 1, 0, 'c'}, {"batch", 1, 0, 'b'}, {"heldout", 1, 0, O_HELD}, {"allow-short", 0, 0, O_SHORT},
        {"rotation-grouping", 1, 0, O_GRP}, {"k-objective", 1, 0, O_KOBJ}, {"v-objective", 1, 0, O_VOBJ},
        {"composition", 1, 0, O_COMP}, {"group-size", 1, 0, O_GS}, {"scale-dtype", 1, 0, O_SD},
        {"sink", 1, 0, O_SINK}, {"recent", 1, 0, O_REC}, {"clip", 1, 0, O_CLIP}, {"clip-search", 1, 0, O_CS},
        {"threads", 1, 0, 't'}, {"checkpoint-every", 1, 0, O_CKPT}, {"resume", 0, 0, O_RES},
        {"strict", 0, 0, O_STRICT}, {"seed", 1, 0, O_SEED}, {"quiet", 0, 0, 'q'}, {"verbose", 0, 0, 'v'}, {"json", 0, 0, O_JSON},
        {"jsonl-field", 1, 0, O_JF}, {"capture-dtype", 1, 0, O_CDT}, {"save-activations", 1, 0, O_SAVE},
        {"from-activations", 1, 0, O_FROM}, {"device", 1, 0, O_DEV}, {"random-init", 1, 0, O_RAND},
        {"gpu-precision", 1, 0, O_GPREC}, {"base-model", 1, 0, O_BASE}, {"dataset", 1, 0, O_DATA},
        {"target", 1, 0, O_TARGET},
        {"refine", 1, 0, O_REFINE}, {"optr-steps", 1, 0, O_OSTEPS}, {"optr-train-seq", 1, 0, O_OSEQ},
        {"no-optr-center", 0, 0, O_ONOCENTER}, {"sign-search", 0, 0, O_SIGNS}, {"sign-passes", 1, 0, O_SPASSES},
        {"tokenizer", 1, 0, O_TOKZ}, {"ranks", 1, 0, O_RANKS}, {"version", 0, 0, O_VER}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int c, window_set = 0; // bits: --sink, --recent given
    while ((c = getopt_long(argc, argv, "m:f:o:c:b:t:qvh", lo, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case O_TOKZ: o->tokenizer = optarg; break;
        case 'f':
            if (o->n_corpus == OSCAR_CALIB_MAX_SOURCES)
                return fprintf(stderr, "oscar-calibrate: more than %d --corpus sources\n", OSCAR_CALIB_MAX_SOURCES), 2;
            NUM(oscar_calib_source_parse(optarg, &o->corpus[o->n_corpus++]));
            break;
        case 'o': o->out = optarg; break;
        case O_JF: o->jsonl_field = optarg; break;
        case O_TOK: NUM(osc_parse_i64("--tokens", optarg, 1, MAX_TOKENS, &p->n_tokens)); break;
        case 'c': NUM(osc_parse_i32("--seq-len", optarg, 16, MAX_SEQ, &p->seq_len)); break;
        case 'b': NUM(osc_parse_i32("--batch", optarg, 1, MAX_BATCH, &p->batch)); break;
        case O_HELD: NUM(osc_parse_i32("--heldout", optarg, 0, MAX_BATCH, &p->n_heldout)); break;
        case O_SHORT: p->allow_short = true; break;
        case O_GRP:
            if (strcmp(optarg, "layer") && strcmp(optarg, "head") && strcmp(optarg, "auto"))
                return fprintf(stderr, "bad --rotation-grouping (layer, head or auto)\n"), 2;
            p->grouping = !strcmp(optarg, "head") ? OSCAR_GROUP_HEAD : !strcmp(optarg, "auto") ? OSCAR_GROUP_AUTO
                                                                                           : OSCAR_GROUP_LAYER;
            break;
        case O_KOBJ:
            if (strcmp(optarg, "qqt") && strcmp(optarg, "ktk")) return fprintf(stderr, "bad --k-objective\n"), 2;
            p->k_objective = strcmp(optarg, "ktk") == 0 ? OSCAR_STATS_KTK : OSCAR_STATS_QQT;
            break;
        case O_VOBJ:
            if (!strcmp(optarg, "sst")) p->v_objective = OSCAR_STATS_SST;
            else if (!strcmp(optarg, "vtv")) p->v_objective = OSCAR_STATS_VTV;
            else if (!strcmp(optarg, "attn-mass")) p->v_objective = OSCAR_STATS_VATT;
            else return fprintf(stderr, "bad --v-objective\n"), 2;
            break;
        case O_COMP:
            if (oscar_composition_parse(optarg, &p->composition) != OSCAR_OK) return fprintf(stderr, "%s\n", oscar_last_error()), 2;
            break;
        case O_GS: NUM(osc_parse_i32("--group-size", optarg, 0, MAX_GROUP, &p->group_size)); break;
        case O_SD:
            if (oscar_meta_dtype_parse(optarg, &p->scale_dtype) != OSCAR_OK)
                return fprintf(stderr, "oscar-calibrate: --scale-dtype: %s\n", oscar_last_error()), 2;
            break;
        case O_SINK: NUM(osc_parse_i32("--sink", optarg, 0, MAX_SEQ, &p->sink)); window_set |= 1; break;
        case O_REC: NUM(osc_parse_i32("--recent", optarg, 0, MAX_SEQ, &p->recent)); window_set |= 2; break;
        case O_TARGET: {
            const struct oscar_target_profile * t;
            NUM(osc_parse_target("--target", optarg, &t));
            p->target = t->id;
            break;
        }
        case O_CLIP:
            NUM(parse_clip_pair(optarg, p));
            p->clip_search = false;
            break;
        case O_CS:
            if (oscar_calib_parse_grid(optarg, p) != OSCAR_OK) return fprintf(stderr, "%s\n", oscar_last_error()), 2;
            p->clip_search = true;
            break;
        case 't': NUM(osc_parse_threads("--threads", optarg, &p->n_threads)); break;
        case O_CKPT: NUM(osc_parse_i64("--checkpoint-every", optarg, 0, MAX_TOKENS, &p->checkpoint_every)); break;
        case O_RES: p->resume = true; break;
        case O_STRICT: o->strict = true; break;
        case O_SEED: NUM(osc_parse_u64("--seed", optarg, &p->seed)); break;
        case 'q': oscar_log_set_level(OSCAR_LOG_ERROR); break;
        case 'v': oscar_log_set_level(OSCAR_LOG_DEBUG); break;
        case O_JSON: o->json = true, oscar_log_set_level(OSCAR_LOG_ERROR); break; // stdout is the report
        case O_CDT:
            if (strcmp(optarg, "bf16") && strcmp(optarg, "fp32")) return fprintf(stderr, "bad --capture-dtype\n"), 2;
            p->capture_bf16 = !strcmp(optarg, "bf16");
            o->capture_dtype = optarg;
            break;
        case O_SAVE: o->save_act = optarg; break;
        case O_FROM: o->from_act = optarg; break;
        case O_DEV:
            NUM(osc_parse_device("--device", optarg, &o->device));
            p->eval_device = o->device;
            break;
        case O_RAND: o->random_init = optarg; break;
        case O_GPREC:
            if (strcmp(optarg, "bf16") && strcmp(optarg, "fp32")) return fprintf(stderr, "bad --gpu-precision\n"), 2;
            o->gpu_fp32 = !strcmp(optarg, "fp32");
            break;
        case O_BASE:
            if (!hub_id_arg("--base-model", optarg)) return 2;
            o->base_model = optarg;
            break;
        case O_DATA:
            if (!hub_id_arg("--dataset", optarg)) return 2;
            if (o->n_datasets == MAX_DATASETS)
                return fprintf(stderr, "oscar-calibrate: more than %d --dataset ids\n", MAX_DATASETS), 2;
            bool seen = false;
            for (int32_t i = 0; i < o->n_datasets; i++) seen = seen || !strcmp(o->datasets[i], optarg);
            if (!seen) o->datasets[o->n_datasets++] = optarg;
            break;
        case O_REFINE:
            if (strcmp(optarg, "optr")) return fprintf(stderr, "oscar-calibrate: --refine: '%s' (known: optr)\n", optarg), 2;
            p->refine_optr = true;
            break;
        case O_OSTEPS: NUM(osc_parse_i32("--optr-steps", optarg, 1, 100000, &p->optr_steps)); break;
        case O_OSEQ: NUM(osc_parse_i32("--optr-train-seq", optarg, 0, MAX_BATCH * 16, &p->optr_train_seq)); break;
        case O_ONOCENTER: p->optr_center = false; break;
        case O_SIGNS: p->sign_search = true; break;
        case O_SPASSES: NUM(osc_parse_i32("--sign-passes", optarg, 1, 64, &p->sign_passes)); break;
        case O_RANKS: NUM(osc_parse_i32("--ranks", optarg, 1, MAX_RANKS, &o->ranks)); break;
        case 'h': usage(stdout); exit(0);
        case O_VER: printf("oscar-calibrate %s (%s)\n", OSCAR_VERSION, oscar_build_commit()); exit(0);
        default: usage(stderr); return 2;
        }
    }
    const struct oscar_target_profile * tp = oscar_target_get(p->target);
    if (tp->has_window && !(window_set & 1)) p->sink = tp->sink;     // the engine's own defaults
    if (tp->has_window && !(window_set & 2)) p->recent = tp->recent;
    if (o->random_init) {
        if (o->model || o->n_corpus || o->from_act || o->tokenizer) {
            fprintf(stderr, "--random-init replaces --model, --corpus, --from-activations and --tokenizer\n");
            return 2;
        }
        if (o->save_act) {
            fprintf(stderr, "--random-init takes no --save-activations (synthetic tokens)\n");
            return 2;
        }
    }
    if (on_cuda(o) && !o->gpu_fp32) { // its Gram GEMMs read bf16 q/k/v: every consumer sees them
        if (o->capture_dtype && !p->capture_bf16) {
            fprintf(stderr, "--device cuda in bf16 precision captures bf16 q/k/v; --capture-dtype fp32 needs "
                            "--gpu-precision fp32\n");
            return 2;
        }
        p->capture_bf16 = true;
    }
    if ((int64_t) p->batch * p->seq_len > MAX_SEQ) {
        fprintf(stderr, "oscar-calibrate: --batch x --seq-len = %lld tokens per forward call, more than %d\n",
                (long long) p->batch * p->seq_len, MAX_SEQ);
        return 2;
    }
    if ((!o->random_init && (!o->model || (!o->n_corpus == !o->from_act))) || !o->out || optind != argc) {
        if (o->n_corpus && o->from_act) fprintf(stderr, "--corpus and --from-activations exclude each other\n");
        usage(stderr);
        return 2;
    }
    if (!*o->out) {
        fprintf(stderr, "oscar-calibrate: --out is empty\n");
        return 2;
    }
    oscar_calib_resolve_grouping(p);   // auto -> layer for a per-layer engine or --sign-search (recorded)
    if (p->grouping_why[0]) osc_info("--rotation-grouping auto: one rotation per layer (%s)", p->grouping_why);
    if (oscar_calib_check_target(p, NULL) != OSCAR_OK) { // the architecture once the model is open
        fprintf(stderr, "oscar-calibrate: %s\n", oscar_last_error());
        return 2;
    }
    if (!o->from_act && oscar_calib_check_tiers(p) != OSCAR_OK) { // the store's seq-len: from_store
        fprintf(stderr, "oscar-calibrate: %s\n", oscar_last_error());
        return 2;
    }
    if (o->from_act && (o->save_act || p->checkpoint_every > 0 || p->resume)) {
        fprintf(stderr, "--from-activations does not take --save-activations, --checkpoint-every or --resume\n");
        return 2;
    }
    if (p->sign_search && !oscar_composition_uses_u(p->composition)) {
        fprintf(stderr, "oscar-calibrate: --sign-search: --composition %s has no eigenvectors to sign\n",
                oscar_composition_name(p->composition));
        return 2;
    }
    if (o->save_act && p->resume) {
        fprintf(stderr, "--save-activations writes every layer from the first: not with --resume\n");
        return 2;
    }
    return 0;
}

// With --rotation-grouping auto three more columns: each candidate's error and the one kept.
static void print_gate(const struct oscar_calib_gate * g, const struct oscar_calib_fit * f) {
    const struct oscar_rotations * r = &f->rot;
    const bool ch = r->head_layer != NULL;
    fprintf(stderr, "gate: post-W_O relative attention error (held-out)\n layer    naive  hadamard     oscar  Kclip Vclip%s\n",
            ch ? "  auto: per-layer  per-head  kept" : "");
    for (int32_t l = 0; l < g->n_layer; l++) {
        fprintf(stderr, " %5d %9.4g %9.4g %9.4g  %.2f  %.2f", (int) l, g->naive[l], g->hadamard[l], g->oscar[l],
                (double) *oscar_rotations_k_clip(r, l, 0), (double) *oscar_rotations_v_clip(r, l, 0));
        if (ch)
            fprintf(stderr, "  %15.4g %9.4g  %s", f->err_layer[l], f->err_head[l],
                    oscar_rotations_layer_per_head(r, l) ? "head" : "layer");
        fputc('\n', stderr);
    }

    fprintf(stderr, "  mean %9.4g %9.4g %9.4g  %s\n", g->mean_naive, g->mean_hadamard, g->mean_oscar,
            g->pass ? "PASS" : "FAIL: OSCAR is not below Hadamard and naive INT2");
    if (ch) fprintf(stderr, "grouping auto: %d of %d layers per KV head (held-out post-W_O error; ties keep layer)\n",
                    (int) oscar_rotations_n_head_layers(r), (int) g->n_layer);
}

// OptR's held-out losses per layer (mean over KV heads) and the heads that kept their refined R.
static void print_refine(const struct oscar_calib_refine * r) {
    fprintf(stderr, "optr: held-out loss (mean over KV heads), %d steps per phase, %d training sequences%s\n"
                    " layer    K base    K kept  heads    V base    V kept  heads\n", (int) r->steps, (int) r->n_train_seq,
            r->center ? ", keys centred (k_mean)" : "");
    for (int32_t l = 0; l < r->n_layer; l++)
        fprintf(stderr, " %5d %9.4g %9.4g  %d/%d  %9.4g %9.4g  %d/%d\n", (int) l, r->k_base[l], r->k_best[l],
                (int) r->k_kept[l], (int) r->n_head_kv, r->v_base[l], r->v_best[l], (int) r->v_kept[l],
                (int) r->n_head_kv);
}

// The sign search's held-out objective per layer, canonical -> searched, and the flips kept.
static void print_signs(const struct oscar_calib_signs * s, const struct oscar_calib_params * p) {
    fprintf(stderr, "sign search: held-out INT2 objective (clip search's, at clips %.2f/%.2f), at most %d passes\n"
                    " layer  K canonical  K searched  flips   V canonical  V searched  flips  evals\n",
            p->k_clip, p->v_clip, (int) s->max_passes);
    for (int32_t l = 0; l < s->n_layer; l++)
        fprintf(stderr, " %5d  %11.5g %11.5g  %5d   %11.5g %11.5g  %5d  %5d\n", (int) l, s->k_before[l], s->k_after[l],
                (int) s->k_flips[l], s->v_before[l], s->v_after[l], (int) s->v_flips[l], (int) s->evals[l]);
    fprintf(stderr, "  mean  %11.5g %11.5g (%+.2f%%)  %11.5g %11.5g (%+.2f%%)\n", s->mean_k_before, s->mean_k_after,
            s->mean_k_before > 0 ? 100.0 * (s->mean_k_after / s->mean_k_before - 1.0) : 0.0, s->mean_v_before,
            s->mean_v_after, s->mean_v_before > 0 ? 100.0 * (s->mean_v_after / s->mean_v_before - 1.0) : 0.0);
}

// Calibration tokens per second of capture (forward + sums; held-out rows not counted).
static double capture_rate(const struct oscar_calib_plan * plan, const struct oscar_calib_timing * t) {
    const double s = t->forward + t->accumulate;
    return s > 0 ? (double) plan->n_tokens / s : 0.0;
}

// --json: the run's summary on stdout (jansson, so any path is valid JSON).
// The calibration data's provenance for --json: name, sha256 and, for a mix, its sources.
static json_t * corpus_json(const struct oscar_calib_corpus * c) {
    json_t * src = c->sources ? json_loads(c->sources, 0, NULL) : json_array();
    return src ? json_pack("{s:s, s:s, s:o}", "name", c->name, "sha256", c->sha256, "sources", src) : NULL;
}

static enum oscar_status print_json(const struct opts * o, const struct oscar_calib_corpus * corpus,
                                    const struct oscar_calib_plan * plan,
                                    const struct oscar_calib_fit * fit, const struct oscar_calib_timing * t,
                                    double rss_mb, const char * summary_json) {
    json_error_t err;
    json_t * summary = json_loads(summary_json, 0, &err);
    json_t * timing = json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "forward", t->forward,
                                "accumulate", t->accumulate, "eigh", t->eigh, "signs", t->signs, "refine", t->refine,
                                "clip", t->clip,
                                "gate", t->gate,
                                "heldout", t->heldout, "load", t->load, "store", t->store, "total", t->total, "tokens_per_s", capture_rate(plan, t));
    json_t * cj = corpus_json(corpus);
    json_t * j = summary && timing && cj
                     ? json_pack("{s:s, s:s, s:o, s:I, s:i, s:f, s:f, s:f, s:o, s:o}", "out", o->out, "source",
                                 o->from_act ? "activations" : on_cuda(o) ? "cuda" : "forward", "corpus", cj, "tokens",
                                 (json_int_t) plan->n_tokens, "sequences", (int) plan->n_seq, "orth_err_max",
                                 fit->orth_err_max, "peak_rss_mb", rss_mb, "device_peak_gib",
                                 (double) t->device_peak_bytes / 1073741824.0, "timing_s", timing, "summary", summary)
                     : NULL;
    if (!j) {
        json_decref(summary), json_decref(timing), json_decref(cj);
        if (!summary) // the artifact's own summary text: a bug, not the user's input
            return osc_error(OSCAR_ERR_FORMAT, "--json: the artifact summary is not JSON: %s", err.text);
        return osc_error(OSCAR_ERR_NOMEM, "--json: out of memory building the summary");
    }
    int bad = json_dumpf(j, stdout, 0) != 0 || fputc('\n', stdout) == EOF || fflush(stdout) != 0;
    json_decref(j); // owns timing and summary ("o")
    return bad ? osc_error(OSCAR_ERR_IO, "--json: writing stdout failed") : OSCAR_OK;
}

// Options a data-parallel run (several ranks) does not take: the message, or NULL.
static const char * dp_refusal(const struct opts * o) {
    if (o->from_act || o->save_act) return "--save-activations / --from-activations";
    return NULL;
}

// Everything one run holds, from the model to the artifact (freed by run_free).
struct run {
    struct opts o;
    struct oscar_calib_params p;
    struct osc_dp * dp;
    bool ranks_bound;                // past the options every rank refuses alike: a failure aborts the job
    char rank_tag[64];
    char ckpt[4096];
    struct oscar_hub hub;
    bool hub_open;
    char * model_path;
    const char * model_arg;          // --model as given: a Hub spec names the base model
    struct oscar_base_model base;
    struct oscar_calib_input in;     // what the library opens (lib/calibrate/input.h)
    struct oscar_model shape;        // the random-init model's description (no host weights)
    struct oscar_calib_engine eng;
    struct oscar_tokenizer * tok;
    struct oscar_calib_rows rows;    // the pass and its finished layers
    struct oscar_artifact * art;
    double t0;
};

static int fail_msg(const struct run * r, const char * what, int rc) {
    fprintf(stderr, "oscar-calibrate: %s%s%s\n", r->rank_tag, what, oscar_last_error());
    return rc;
}

// 1. Under mpirun the process group (rank 0 prints, reports and writes; every rank drives its node-local
//    GPU with --device cuda), the checkpoint path, the Hub cache; --out checked before any compute.
static int step_start(struct run * r, int * argc, char *** argv) {
    if (!r->dp && osc_dp_open(argc, argv, &r->dp) != OSCAR_OK) {   // --ranks: the rank's thread has its own
        r->dp = NULL;   // nothing to close
        return fail_msg(r, "", 1);
    }
    struct osc_dp * dp = r->dp;
    if (dp->size > 1) {
        snprintf(r->rank_tag, sizeof r->rank_tag, "rank %d of %d: ", (int) dp->rank, (int) dp->size);
        const char * no = dp_refusal(&r->o);
        if (no) {
            if (dp->rank == 0)
                fprintf(stderr, "oscar-calibrate: %s is not available with several ranks (mpirun or --ranks)\n", no);
            return 2;
        }
    }
    r->ranks_bound = true;
    int gpu = -1; // several ranks: each drives one GPU, its node-local rank's (mpirun) or its rank's (--ranks)
    if (strcmp(dp->engine, "single") != 0 && on_cuda(&r->o) && osc_dp_use_local_gpu(dp, &gpu) != OSCAR_OK)
        return fail_msg(r, "", 1);
    if (dp->size > 1 && dp->rank != 0) oscar_log_set_thread_level(OSCAR_LOG_ERROR), r->o.json = false;
    snprintf(r->ckpt, sizeof(r->ckpt), "%s.ckpt", r->o.out);
    if (r->p.checkpoint_every > 0 || r->p.resume) r->p.checkpoint_path = r->ckpt;
    r->t0 = osc_now();
    r->model_arg = r->o.model;
    if (oscar_hub_init(&r->hub) != OSCAR_OK) return fail_msg(r, "", 1);
    r->hub_open = true;
    if (dp->rank == 0 && oscar_artifact_check_dest(r->o.out) != OSCAR_OK) // fail before hours of compute
        return fail_msg(r, "--out: ", 1);
    return 0;
}

// 2. The model (a Hub id resolved in the local cache, a file, or --random-init's shape), its base
//    model's identity for the card, the tokenizer; the target checked against the architecture.
static int step_open_model(struct run * r) {
    struct opts * o = &r->o;
    if (o->random_init) {
        if (oscar_calib_random_config(o->random_init, &r->shape.config) != OSCAR_OK) return fail_msg(r, "--random-init: ", 2);
        snprintf(r->shape.config.name, sizeof r->shape.config.name, "random-init:%s", o->random_init);
    } else {
        if (oscar_hub_resolve_local(&r->hub, o->model, &r->model_path) != OSCAR_OK) return fail_msg(r, "--model: ", 1);
        if (strcmp(r->model_path, o->model)) osc_info("--model %s -> %s", o->model, r->model_path);
        o->model = r->model_path;
    }
    if (oscar_base_model_detect(o->base_model, r->model_arg, r->model_path, &r->base) != OSCAR_OK)
        return fail_msg(r, "--model: ", 1);
    if (r->base.id[0]) osc_info("base model %s (from %s)", r->base.id, r->base.id_from);
    else osc_info("no Hub id known for the base model (the card will say so; --base-model OWNER/NAME sets one)");
    r->in = (struct oscar_calib_input){.model = o->model, .tokenizer = o->tokenizer, .random_init = o->random_init,
                                       .device = o->device, .gpu_fp32 = o->gpu_fp32, .corpus = o->corpus,
                                       .n_corpus = o->n_corpus, .jsonl_field = o->jsonl_field,
                                       .save_act = o->save_act, .from_act = o->from_act};
    if (oscar_calib_input_open(&r->in, r->p.seed, &r->shape, &r->eng, &r->tok) ||
        oscar_calib_check_target(&r->p, oscar_arch_name(r->eng.m->config.arch)))
        return fail_msg(r, "", 1);
    r->eng.dp = r->dp;
    return 0;
}

// 3. The rows through every stage: the corpus, the plan and the layer-major pass with the finisher
//    (each layer fitted, sign-searched, refined, clip-searched and gated as its sums end), or a
//    store's plan, rows and sums and the same finisher over its layers.
static int step_pass(struct run * r) {
    return oscar_calib_input_pass(&r->in, &r->eng, r->tok, &r->p, &r->rows) ? fail_msg(r, "", 1) : 0;
}

// 4. The tables, the gate's verdict (--strict), the artifact written; the checkpoint removed.
static int step_artifact(struct run * r) {
    const struct oscar_calib_params * p = &r->p;
    const struct oscar_calib_finisher * fin = &r->rows.fin;
    const struct oscar_calib_gate * gate = &fin->gate;
    const bool report = oscar_log_get_level() <= OSCAR_LOG_INFO; // not --quiet / --json
    if (report && p->sign_search) print_signs(&fin->signs, p);
    if (report) print_gate(gate, &fin->fit);
    if (!gate->pass && r->o.strict) {
        fprintf(stderr, "oscar-calibrate: %s--strict: gate failed, nothing written\n", r->rank_tag);
        return 1;
    }
    if (!gate->pass) osc_warn("the gate FAILED (OSCAR mean %.4g vs Hadamard %.4g, naive %.4g); writing the artifact marked FAILED (--strict writes nothing)",
                              gate->mean_oscar, gate->mean_hadamard, gate->mean_naive);
    r->rows.t.total = osc_now() - r->t0;
    const struct oscar_calib_provenance prov = {r->eng.m, r->tok, &r->rows.corpus, &r->rows.plan, &r->base,
                                                r->o.datasets, r->o.n_datasets};
    if (oscar_calib_build_artifact(&prov, p, &fin->fit, p->sign_search ? &fin->signs : NULL, &fin->clip, gate,
                                   &r->rows.t, &r->art) ||
        oscar_artifact_write(r->art, r->o.out))
        return fail_msg(r, "", 1);
    if (p->checkpoint_path) {
        remove(r->ckpt);
        osc_remove_stale_temps(r->ckpt);
    }
    return 0;
}

// 5. Timings, peak memory and (--json) the summary on stdout.
static int step_report(struct run * r) {
    const struct oscar_calib_timing * t = &r->rows.t;
    double rss = oscar_calib_peak_rss_mb();
    if (oscar_log_get_level() <= OSCAR_LOG_INFO) {
        if (r->p.refine_optr) print_refine(&r->rows.fin.refine);
        fprintf(stderr, "timing: forward %.2fs  accumulate %.2fs  eigh %.2fs  signs %.2fs  refine %.2fs  clip %.2fs  "
                "gate %.2fs  held-out %.2fs  load %.2fs  store %.2fs  total %.2fs  (capture %.1f calibration tok/s)\n"
                "wrote %s (%s)\n",
                t->forward, t->accumulate, t->eigh, t->signs, t->refine, t->clip, t->gate, t->heldout, t->load, t->store,
                t->total, capture_rate(&r->rows.plan, t), r->o.out, oscar_artifact_get_meta(r->art, "oscar.calib_tag"));
        fprintf(stderr, "peak RSS %.1f MiB\n", rss);
        if (t->device_peak_bytes)
            fprintf(stderr, "peak device memory in use %.2f GiB\n", (double) t->device_peak_bytes / 1073741824.0);
    }
    if (r->o.json && print_json(&r->o, &r->rows.corpus, &r->rows.plan, &r->rows.fin.fit, t, rss,
                                r->art->summary_json) != OSCAR_OK)
        return fail_msg(r, "", 1);
    return 0;
}

// 6. Everything freed; a failed rank ends every rank, before anything is written.
static int step_end(struct run * r, int rc) {
    oscar_artifact_free(r->art);
    oscar_calib_rows_free(&r->rows);
    oscar_tokenizer_free(r->tok);
    if (!r->eng.random_on_device) oscar_model_free(r->eng.m); // else the shape in r
    if (r->hub_open) oscar_hub_free(&r->hub);
    free(r->model_path);
    if (!r->dp) return rc;
    if (rc && r->dp->size > 1 && r->ranks_bound) r->dp->ops->abort(r->dp, rc);
    osc_dp_close(r->dp);
    return rc;
}

// rc of a step that just ran; at -v how long it took (since *t, then reset).
static int timed(const char * step, int rc, double * t) {
    const double now = osc_now();
    osc_debug("step %s: %.2f s", step, now - *t);
    *t = now;
    return rc;
}

// Steps 1-6 of one rank (the process, or a thread of --ranks).
static int run_steps(struct run * r, int * argc, char *** argv) {
    double t = osc_now();
    int rc = timed("1 (start)", step_start(r, argc, argv), &t);    // 1. ranks, checkpoint path, Hub cache, --out checked
    if (!rc) rc = timed("2 (model)", step_open_model(r), &t);      // 2. model, base model, tokenizer
    if (!rc) rc = timed("3 (pass)", step_pass(r), &t);             // 3. corpus or store -> the pass -> every layer finished
    if (!rc && r->dp->rank == 0) rc = timed("4 (artifact)", step_artifact(r), &t); // 4. gate verdict, artifact (rank 0)
    if (!rc && r->dp->rank == 0) rc = step_report(r);   // 5. timings, --json
    return step_end(r, rc);                     // 6. freed; a failed rank aborts the others
}

struct rank_thread {
    struct run * r;
    int32_t n_threads; // OpenMP threads of this rank when -t was not given
    int rc;
};

static void * rank_main(void * arg) {
    struct rank_thread * rt = arg;
    if (rt->n_threads > 0) omp_set_num_threads(rt->n_threads); // this thread's default team
    int argc = 0;
    char ** argv = NULL;
    rt->rc = run_steps(rt->r, &argc, &argv);
    return NULL;
}

// --ranks N: the group's ranks as threads of this process, each a copy of the parsed run
// (dp-threads.c, or NCCL over one GPU per rank); the exit code is the first failed rank's.
static int run_ranks(const struct run * parsed) {
    const int32_t n = parsed->o.ranks;
    if (getenv("OMPI_COMM_WORLD_SIZE")) {
        fprintf(stderr, "oscar-calibrate: --ranks and mpirun: one or the other (mpirun starts the ranks itself)\n");
        return 2;
    }
    struct osc_dp ** dps = NULL;
    if (osc_dp_open_ranks(n, on_cuda(&parsed->o), &dps) != OSCAR_OK)
        return fprintf(stderr, "oscar-calibrate: --ranks %d: %s\n", (int) n, oscar_last_error()), 1;
    struct run * runs = calloc((size_t) n, sizeof *runs);
    struct rank_thread * rt = calloc((size_t) n, sizeof *rt);
    pthread_t * th = calloc((size_t) n, sizeof *th);
    if (!runs || !rt || !th) return fprintf(stderr, "oscar-calibrate: --ranks %d: out of memory\n", (int) n), 1;
    const int32_t per_rank = parsed->p.n_threads > 0 ? 0 : (omp_get_num_procs() + n - 1) / n;
    int32_t started = 0;
    for (; started < n; started++) {
        runs[started] = *parsed, runs[started].dp = dps[started];
        rt[started] = (struct rank_thread){.r = &runs[started], .n_threads = per_rank};
        if (pthread_create(&th[started], NULL, rank_main, &rt[started]) != 0) break;
    }
    if (started < n) { // the started ranks would wait for it at their first collective
        fprintf(stderr, "oscar-calibrate: --ranks %d: could not start rank %d's thread\n", (int) n, (int) started);
        fflush(NULL);
        _exit(1);
    }
    int rc = 0;
    for (int32_t k = 0; k < n; k++) {
        pthread_join(th[k], NULL);
        if (!rc) rc = rt[k].rc;
    }
    free(runs), free(rt), free(th);
    return rc;
}

int main(int argc, char ** argv) {
    osc_blas_select_kernels(argv);
    static struct run r; // large (paths, the hub); zeroed
    r.p = oscar_calib_default_params();
    r.p.grouping = OSCAR_GROUP_AUTO; // the tool's default (the library's stays layer)
    int rc = parse(argc, argv, &r.o, &r.p);    // 0. the options (usage errors: 2, before any rank starts)
    if (rc) return rc;
    return r.o.ranks > 0 ? run_ranks(&r) : run_steps(&r, &argc, &argv);   // --ranks 1 too: its engine
}
