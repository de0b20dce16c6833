// oscar-card.c - the artifact's README.md (Hub model card) from its metadata:
// YAML front matter the Hub reads (license, library_name, tags, base_model,
// datasets, oscar_gate), then base model, calibration data, usage, files and
// engine settings, the gate table (the caller's card_markdown), what --strict
// does, and the citation. Only validated Hub ids and licence identifiers go
// into the YAML, so any metadata gives a card that parses.
#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/oscar-artifact.h"
#include "formats/oscar-serve.h"
#include "hub/hub.h"

static const char * meta(const struct oscar_artifact * a, const char * key) {
    const char * v = oscar_artifact_get_meta(a, key);
    return v ? v : "unknown";
}

// A Hub licence identifier as the YAML may carry it bare ("apache-2.0", "llama3.1", "cc-by-4.0").
static int license_id_ok(const char * s) {
    if (!s || !islower((unsigned char) s[0]) || strlen(s) > 64) return 0;
    for (const char * p = s; *p; p++) {
        if (!(islower((unsigned char) *p) || isdigit((unsigned char) *p) || strchr(".-+", *p))) return 0;
    }
    return 1;
}

// The Hub dataset ids of oscar.calib_datasets ("a/b,c/d"), each valid, into `ids`
// (pointers into buf); returns how many.
static int dataset_ids(const struct oscar_artifact * a, char * buf, size_t n, const char ** ids, int max) {
    const char * v = oscar_artifact_get_meta(a, "oscar.calib_datasets");
    int          k = 0;
    if (!v || strlen(v) >= n) return 0;
    strcpy(buf, v);
    for (char * save = NULL, * t = strtok_r(buf, ",", &save); t && k < max; t = strtok_r(NULL, ",", &save)) {
        if (oscar_hub_repo_id_valid(t)) ids[k++] = t;
    }
    return k;
}

static void front_matter(FILE * m, const char * id, const char * license, const char * const * ds, int n_ds,
                         const char * gate) {
    fprintf(m, "---\nlicense: %s\nlibrary_name: oscar\ntags:\n- oscar\n- int2\n- kv-cache\n- quantization\n"
               "- rotation\n", license_id_ok(license) ? license : "other");
    if (id) fprintf(m, "base_model:\n- %s\n", id);
    if (n_ds) fprintf(m, "datasets:\n");
    for (int i = 0; i < n_ds; i++) fprintf(m, "- %s\n", ds[i]);
    if (gate) fprintf(m, "oscar_gate: %s\n", gate);
    fprintf(m, "---\n\n");
}

static void base_model_section(FILE * m, const struct oscar_artifact * a, const char * id, const char * license) {
    const char * name = meta(a, "oscar.base_model");
    fprintf(m, "## Base model\n\n");
    if (id) {
        const char * from = oscar_artifact_get_meta(a, "oscar.base_model_id_source");
        fprintf(m, "- base model: [`%s`](https://huggingface.co/%s) (%s%s%s)\n", id, id, name,
                from ? "; Hub id from " : "", from ? from : "");
    } else {
        fprintf(m, "- base model: %s (no Hub id known; pass --base-model)\n", name);
    }
    fprintf(m, "- identity: sha256 `%s` of the model file (GGUF) or its config.json; `oscar-verify --model` "
               "refuses another model unless `--force`\n", meta(a, "oscar.base_model_sha256"));
    if (license) {
        const char * from = oscar_artifact_get_meta(a, "oscar.base_model_license_source");
        fprintf(m, "- licence of the base model: `%s`%s%s%s%s\n", license, from ? " (from " : "", from ? from : "",
                from ? ")" : "", license_id_ok(license) ? "" : "; not a Hub licence identifier, so the front "
                "matter says `license: other`");
    } else {
        fprintf(m, "- licence of the base model not recorded; check the base model's card (the front matter "
                   "says `license: other`)\n");
    }
    fprintf(m, "\n");
}

// A --corpus mix (oscar.calib_corpus_sources, JSON): one line per source with its share and tokens.
static void sources_lines(FILE * m, const struct oscar_artifact * a) {
    const char * text = oscar_artifact_get_meta(a, "oscar.calib_corpus_sources");
    json_t * list = text ? json_loads(text, 0, NULL) : NULL, * s;
    size_t i;
    if (text && !json_is_array(list)) fprintf(m, "  - sources: `%s`\n", text); // not ours: shown as is
    json_array_foreach(list, i, s) {
        fprintf(m, "  - `%s`: share %.4g, %lld calibration + %lld held-out tokens, sha256 `%s`\n",
                json_string_value(json_object_get(s, "name")), json_number_value(json_object_get(s, "share")),
                (long long) json_integer_value(json_object_get(s, "tokens")),
                (long long) json_integer_value(json_object_get(s, "heldout_tokens")),
                json_string_value(json_object_get(s, "sha256")));
    }
    json_decref(list);
}

static void data_section(FILE * m, const struct oscar_artifact * a, const char * const * ds, int n_ds) {
    fprintf(m, "## Calibration data\n\n- corpus: `%s`, sha256 `%s`\n", meta(a, "oscar.calib_corpus"),
            meta(a, "oscar.calib_sha256"));
    sources_lines(m, a);
    fprintf(m, "- %s calibration tokens (%s sequences of up "
               "to %s tokens) for the covariances; %s held-out tokens, never in the covariances, for the clip "
               "search and the gate\n- tokenizer FNV-1a 64 `%s`, seed %s\n", meta(a, "oscar.calib_tokens"),
            meta(a, "oscar.calib_sequences"), meta(a, "oscar.seq_len"), meta(a, "oscar.calib_heldout_tokens"),
            meta(a, "oscar.tokenizer_hash"), meta(a, "oscar.seed"));
    if (n_ds) {
        fprintf(m, "- Hub datasets:");
        for (int i = 0; i < n_ds; i++)
            fprintf(m, "%s [`%s`](https://huggingface.co/datasets/%s)", i ? "," : "", ds[i], ds[i]);
        fprintf(m, "\n");
    } else {
        fprintf(m, "- no Hub dataset recorded (`oscar-calibrate --dataset ID` lists one here and in `datasets:`)\n");
    }
    fprintf(m, "\n");
}

static void usage_section(FILE * m, const struct oscar_artifact * a, const char * id) {
    const char * model = id ? id : meta(a, "oscar.base_model");
    fprintf(m, "## Usage\n\n`<repo>` is the Hub repo holding this card and `<path>` its folder there (`<repo>` "
               "alone when it is at the root); `$M` is the model calibrated on, %s (a `.gguf` file or a Hugging "
               "Face model directory).\n\n```sh\n", model);
    fprintf(m, "oscar-zoo pull <repo> --path <path>                 # into the shared HF cache\n"
               "# SGLang OSCAR fork: k_rotation_<obj>.pt + v_rotation_<obj>.pt\n"
               "oscar-zoo export <repo>:<path> --target sglang --out rot/\n"
               "# llama.cpp OSCAR fork: the rotation tensors baked into a copy of the model's GGUF\n"
               "oscar-zoo export <repo>:<path> --target llamacpp --base \"$M\" --out model-oscar.gguf\n"
               "# measure them on your own text (checks that $M has sha256 %.12s...)\n"
               "oscar-verify --model \"$M\" --rotations <repo>:<path> --corpus <text-file> "
               "--methods bf16,hadamard,oscar\n```\n\n",
            meta(a, "oscar.base_model_sha256"));
}

// The serve recipe of each engine that can load the artifact (oscar-serve.h), with the file names
// the usage block's export commands write; or why none can.
static void serve_section(FILE * m, const struct oscar_artifact * a) {
    static const enum oscar_target engines[] = {OSCAR_TARGET_SGLANG, OSCAR_TARGET_LLAMACPP};
    const char * target = oscar_artifact_get_meta(a, "oscar.target");
    char k_pt[300], v_pt[300];
    snprintf(k_pt, sizeof k_pt, "rot/k_rotation_%s.pt", meta(a, "oscar.k_objective"));
    snprintf(v_pt, sizeof v_pt, "rot/v_rotation_%s.pt", meta(a, "oscar.v_objective"));
    struct oscar_serve_files f = {.k_pt = k_pt, .v_pt = v_pt, .gguf = "model-oscar.gguf"};
    fprintf(m, "## Serving\n\nClips chosen for target `%s` (`oscar-calibrate --target`). After the exports above, "
               "these lines serve the artifact (`oscar-zoo export` writes them, with absolute paths, to "
               "`serve.env` beside its output):\n\n", target ? target : "oscar");
    for (size_t i = 0; i < sizeof engines / sizeof engines[0]; i++) {
        const struct oscar_target_profile * t = oscar_target_get(engines[i]);
        struct oscar_serve_gguf g = {.base_arch = meta(a, "oscar.architecture")}; // the base is the model's GGUF
        struct oscar_serve_recipe r;
        char * text = NULL;
        if (oscar_serve_check(a, t, t->id == OSCAR_TARGET_LLAMACPP ? &g : NULL) != OSCAR_OK) {
            fprintf(m, "- %s: not servable: %s\n\n", t->engine, oscar_last_error());
            continue;
        }
        if (oscar_serve_recipe(a, t, &f, &r) != OSCAR_OK || oscar_serve_text(&r, NULL, &text) != OSCAR_OK) continue;
        fprintf(m, "%s (`--target %s`):\n\n```sh\n%s```\n\n", t->engine, t->name, text);
        free(text);
    }
    // No target profile covers the OptR engine (formats/README.md): say which files and variables it reads.
    if (a->rot.n_rot > 1 || a->rot.k_mean) {
        fprintf(m, "- the OptR SGLang engine (daniel-eai/Output-Aware-INT2-KV-Cache-Quantization) loads %s: "
                   "`oscar-zoo export <repo>:<path> --target oscar --format pt --out rot/` writes %s%s; set "
                   "`SGLANG_OSCAR_K_ROTATION_PATH` / `SGLANG_OSCAR_V_ROTATION_PATH` to the two rotation files%s "
                   "(oscar checks no limit of that engine)\n\n",
                a->rot.n_rot > 1 && a->rot.k_mean ? "per-KV-head rotations and the key mean"
                                         : a->rot.n_rot > 1 ? "per-KV-head rotations" : "the key mean",
                a->rot.n_rot > 1 ? "`rot/k_rotation_perhead.pt`, `rot/v_rotation_perhead.pt`"
                            : "the rotation pair",
                a->rot.k_mean ? " and `rot/k_mean_decode.pt`" : "",
                a->rot.k_mean ? ", and `SGLANG_OSCAR_K_MEAN_PATH` to `k_mean_decode.pt` with "
                            "`SGLANG_OSCAR_K_MEAN_IN_POOL=1`" : "");
    }
}

static void files_section(FILE * m, const struct oscar_artifact * a) {
    const char * auto_layers = oscar_artifact_get_meta(a, "oscar.grouping_layers");   // --rotation-grouping auto
    fprintf(m, "## Files and engine settings\n\nINT2 KV-cache rotations (K objective `%s`, V objective `%s`, "
               "grouping `%s`%s%s%s) calibrated with `%s`.\n\n",
            meta(a, "oscar.k_objective"), meta(a, "oscar.v_objective"), a->rot.n_rot > 1 ? "kv_head" : "layer",
            auto_layers ? ", chosen per layer by `--rotation-grouping auto`: `" : "", auto_layers ? auto_layers : "",
            auto_layers ? "`" : "", meta(a, "oscar.tool"));
    fprintf(m, "Files: `oscar.safetensors` (tensors `layers.{i}.{k,v}_rotation`, `{k,v}_eigenvalues`, "
               "`{k,v}_clip`; rows act as `x_rot = x·R`, Hugging Face head-dim order), `oscar.json` "
               "(metadata + verification summary).\n\n");
    fprintf(m, "Engine settings: K clip %s, V clip %s (%s clips), group size %s, scale dtype %s, sink %s, "
               "recent %s; the recipes under *Serving* set them.\n\n",
            meta(a, "oscar.k_clip_ratio"), meta(a, "oscar.v_clip_ratio"), meta(a, "oscar.clip_granularity"),
            meta(a, "oscar.group_size"), meta(a, "oscar.scale_dtype"), meta(a, "oscar.sink"), meta(a, "oscar.recent"));
}

static void strict_section(FILE * m, const char * gate) {
    fprintf(m, "### What the gate decides\n\n`oscar-calibrate` compares the mean held-out post-W_O error of these "
               "rotations with Hadamard's and naive INT2's. With `--strict`, a failed gate exits 1 and writes "
               "nothing (an artifact already at `--out` stays as it was). Without it, a failed gate prints a "
               "warning, still writes the artifact and exits 0; the card then says FAILED, `oscar.json` records "
               "`\"oscar.gate\": \"fail\"` and the front matter `oscar_gate: fail`.");
    if (gate) fprintf(m, " This artifact's gate: **%s**.", strcmp(gate, "pass") ? "FAILED" : "PASS");
    fprintf(m, "\n\n");
}

static void citation(FILE * m) {
    fprintf(m, "## Citation\n\n```bibtex\n@misc{zhou2026oscar,\n"
               "  title         = {{OSCAR}: Offline Spectral Covariance-Aware Rotation for 2-bit {KV} Cache "
               "Quantization},\n"
               "  author        = {Zhou, Zhongzhu and Zhuang, Donglin and Li, Jisen and Chen, Ziyan and Song, "
               "Shuaiwen Leon and Athiwaratkun, Ben and Wu, Xiaoxia},\n"
               "  year          = {2026},\n  eprint        = {2605.17757},\n  archivePrefix = {arXiv},\n"
               "  primaryClass  = {cs.LG},\n}\n```\n");
}

enum oscar_status oscar_artifact_card(const struct oscar_artifact * a, char ** text, size_t * len) {
    const char * id = oscar_artifact_get_meta(a, "oscar.base_model_id");
    const char * license = oscar_artifact_get_meta(a, "oscar.base_model_license");
    const char * gate = oscar_artifact_get_meta(a, "oscar.gate");
    const char * ds[32];
    char         ds_buf[2048];
    if (id && !oscar_hub_repo_id_valid(id)) id = NULL;
    if (license && !license[0]) license = NULL;
    if (gate && strcmp(gate, "pass") && strcmp(gate, "fail")) gate = NULL;
    int    n_ds = dataset_ids(a, ds_buf, sizeof ds_buf, ds, 32);
    FILE * m    = open_memstream(text, len);
    if (!m) return osc_error(OSCAR_ERR_NOMEM, "model card: out of memory");
    front_matter(m, id, license, ds, n_ds, gate);
    fprintf(m, "# OSCAR rotations for %s (%s)\n\n", id ? id : meta(a, "oscar.base_model"), meta(a, "oscar.calib_tag"));
    fprintf(m, "2-bit (INT2) KV-cache rotations for %s, calibrated on `%s`.%s\n\n", meta(a, "oscar.base_model"),
            meta(a, "oscar.calib_corpus"),
            !gate ? "" : strcmp(gate, "pass") ? " **The calibration gate FAILED**: on held-out text they do not "
                                                "beat Hadamard and naive INT2 (see *Gate*)."
                                              : " The calibration gate passed: on held-out text they beat Hadamard "
                                                "and naive INT2 (see *Gate*).");
    base_model_section(m, a, id, license);
    data_section(m, a, ds, n_ds);
    usage_section(m, a, id);
    serve_section(m, a);
    files_section(m, a);
    if (a->card_markdown) fprintf(m, "%s\n", a->card_markdown);
    strict_section(m, gate);
    citation(m);
    if (fclose(m) != 0) {
        free(*text);
        *text = NULL;
        return osc_error(OSCAR_ERR_NOMEM, "model card: out of memory");
    }
    return OSCAR_OK;
}
