// tok-json.c - Hugging Face tokenizer.json (+ tokenizer_config.json) loader,
// and oscar_tokenizer_load() which picks GGUF or JSON by looking at the path.
//
// Accepted (anything else is refused with OSCAR_ERR_UNSUPPORTED naming it):
//   model: BPE with a vocab object and merges ("a b" strings or [a, b]
//          arrays); dropout null/0, continuing_subword_prefix and
//          end_of_word_suffix null/"", byte_fallback false; unk_token,
//          fuse_unk and ignore_merges are honoured.
//   normalizer: null, NFC, or a Sequence of those.
//   pre_tokenizer: ByteLevel (add_prefix_space false), Split (Regex or
//          String pattern, behavior Isolated, invert false), Digits, or a
//          Sequence of those; a ByteLevel step must be present.
//   added_tokens: id, content, special, normalized; lstrip/rstrip/
//          single_word must be false.
// decoder and post_processor are not read: decoding is always byte-level and
// encode never adds BOS/EOS (the caller decides, see oscar_tokenizer_add_bos).
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizer/tok-internal.h"
#include "util/error.h"
#include "util/fs.h"

#define MAX_JSON_BYTES ((size_t) 1 << 30)

static enum oscar_status bad(const char * name, const char * what) {
    return osc_error(OSCAR_ERR_FORMAT, "%s: %s", name, what);
}

// ---- model ----------------------------------------------------------------------
static enum oscar_status load_vocab(struct oscar_tokenizer * tok, json_t * vocab) {
    if (!json_is_object(vocab)) {
        return bad(tok->name, "model.vocab is missing or not an object");
    }
    const char * key;
    json_t *     val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= (1 << 30)) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: model.vocab['%.64s'] is not a token id in [0, 2^30)",
                             tok->name, key);
        }
        enum oscar_status st = osc_tok_add_vocab(tok, (int32_t) json_integer_value(val), key, strlen(key));
        if (st != OSCAR_OK) {
            return st;
        }
    }
    return OSCAR_OK;
}

static enum oscar_status load_merges(struct oscar_tokenizer * tok, json_t * merges) {
    if (!json_is_array(merges)) {
        return bad(tok->name, "model.merges is missing or not an array");
    }
    size_t   i;
    json_t * m;
    json_array_foreach(merges, i, m) {
        const char * a = NULL, * b = NULL;
        size_t       alen = 0, blen = 0;
        if (json_is_string(m)) { // "a b": split at the first space as HF does
            const char * s = json_string_value(m);
            const char * sp = strchr(s, ' ');
            if (sp && !strchr(sp + 1, ' ')) {
                a = s; alen = (size_t) (sp - s); b = sp + 1; blen = strlen(b);
            }
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            alen = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            blen = json_string_length(json_array_get(m, 1));
        }
        if (!a || alen == 0 || blen == 0) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: model.merges[%zu] is not a pair of tokens", tok->name, i);
        }
        enum oscar_status st = osc_tok_add_merge(tok, a, alen, b, blen);
        if (st != OSCAR_OK) {
            return st;
        }
    }
    return OSCAR_OK;
}

static bool null_or_empty(json_t * v) {
    return !v || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0);
}

static enum oscar_status load_model(struct oscar_tokenizer * tok, json_t * model) {
    if (!json_is_object(model)) {
        return bad(tok->name, "\"model\" is missing or not an object");
    }
    json_t * type = json_object_get(model, "type");
    if (type && !(json_is_string(type) && strcmp(json_string_value(type), "BPE") == 0)) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: model type '%s' (only BPE is supported)", tok->name,
                         json_is_string(type) ? json_string_value(type) : "?");
    }
    json_t * dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) && !(json_is_number(dropout) && json_number_value(dropout) == 0.0)) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: BPE dropout", tok->name);
    }
    if (!null_or_empty(json_object_get(model, "continuing_subword_prefix")) ||
        !null_or_empty(json_object_get(model, "end_of_word_suffix"))) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: BPE subword prefix/suffix", tok->name);
    }
    if (json_is_true(json_object_get(model, "byte_fallback"))) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: BPE byte_fallback", tok->name);
    }
    tok->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    tok->fuse_unk = json_is_true(json_object_get(model, "fuse_unk"));
    enum oscar_status st = load_vocab(tok, json_object_get(model, "vocab"));
    if (st == OSCAR_OK) {
        st = load_merges(tok, json_object_get(model, "merges"));
    }
    json_t * unk = json_object_get(model, "unk_token");
    if (st == OSCAR_OK && unk && !json_is_null(unk)) {
        if (!json_is_string(unk)) {
            return bad(tok->name, "model.unk_token is not a string");
        }
        tok->unk_id = oscar_tokenizer_token_id(tok, json_string_value(unk), json_string_length(unk));
        if (tok->unk_id < 0) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: unk_token '%.64s' is not in the vocabulary", tok->name,
                             json_string_value(unk));
        }
    }
    return st;
}

// ---- normalizer / pre-tokenizer -------------------------------------------------------
static const char * type_of(json_t * o) {
    json_t * t = json_object_get(o, "type");
    return json_is_string(t) ? json_string_value(t) : NULL;
}

static enum oscar_status load_normalizer(struct oscar_tokenizer * tok, json_t * n) {
    if (!n || json_is_null(n)) {
        return OSCAR_OK;
    }
    const char * t = json_is_object(n) ? type_of(n) : NULL;
    if (!t) {
        return bad(tok->name, "normalizer has no type");
    }
    if (strcmp(t, "NFC") == 0) {
        tok->nfc = true;
        return OSCAR_OK;
    }
    if (strcmp(t, "Sequence") == 0) {
        json_t * list = json_object_get(n, "normalizers");
        if (!json_is_array(list)) {
            return bad(tok->name, "normalizer Sequence without a 'normalizers' array");
        }
        size_t   i;
        json_t * e;
        json_array_foreach(list, i, e) {
            enum oscar_status st = load_normalizer(tok, e);
            if (st != OSCAR_OK) return st;
        }
        return OSCAR_OK;
    }
    return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: normalizer '%s'", tok->name, t);
}

static enum oscar_status load_pre(struct oscar_tokenizer * tok, json_t * p, bool * saw_bytelevel) {
    const char * t = json_is_object(p) ? type_of(p) : NULL;
    if (!t) {
        return bad(tok->name, "pre_tokenizer entry has no type");
    }
    if (strcmp(t, "Sequence") == 0) {
        json_t * list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list)) {
            return bad(tok->name, "pre_tokenizer Sequence without a 'pretokenizers' array");
        }
        size_t   i;
        json_t * e;
        json_array_foreach(list, i, e) {
            enum oscar_status st = load_pre(tok, e, saw_bytelevel);
            if (st != OSCAR_OK) return st;
        }
        return OSCAR_OK;
    }
    if (strcmp(t, "ByteLevel") == 0) {
        if (json_is_true(json_object_get(p, "add_prefix_space"))) {
            return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: ByteLevel add_prefix_space", tok->name);
        }
        *saw_bytelevel = true;
        json_t * ur = json_object_get(p, "use_regex"); // HF default: true
        return (ur && json_is_false(ur)) ? OSCAR_OK : osc_tok_add_split(tok, osc_tok_gpt2_regex, false);
    }
    if (strcmp(t, "Digits") == 0) {
        bool ind = json_is_true(json_object_get(p, "individual_digits"));
        return osc_tok_add_split(tok, ind ? "\\p{N}" : "\\p{N}+", false);
    }
    if (strcmp(t, "Split") == 0) {
        json_t * beh = json_object_get(p, "behavior");
        if (!json_is_string(beh) || strcmp(json_string_value(beh), "Isolated") != 0 ||
            json_is_true(json_object_get(p, "invert"))) {
            return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: Split pre-tokenizer other than Isolated/non-inverted",
                             tok->name);
        }
        json_t * pat = json_object_get(p, "pattern");
        json_t * re = json_object_get(pat, "Regex");
        json_t * lit = json_object_get(pat, "String");
        if (json_is_string(re)) return osc_tok_add_split(tok, json_string_value(re), false);
        if (json_is_string(lit)) return osc_tok_add_split(tok, json_string_value(lit), true);
        return bad(tok->name, "Split pattern is neither {\"Regex\": ...} nor {\"String\": ...}");
    }
    return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: pre_tokenizer '%s'", tok->name, t);
}

// ---- added tokens / config ------------------------------------------------------------
static enum oscar_status load_added(struct oscar_tokenizer * tok, json_t * list) {
    if (!list || json_is_null(list)) {
        return OSCAR_OK;
    }
    if (!json_is_array(list)) {
        return bad(tok->name, "added_tokens is not an array");
    }
    size_t   i;
    json_t * a;
    json_array_foreach(list, i, a) {
        json_t * id = json_object_get(a, "id");
        json_t * c = json_object_get(a, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= (1 << 30) ||
            !json_is_string(c)) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: added_tokens[%zu] needs an integer id and a string content",
                             tok->name, i);
        }
        if (json_is_true(json_object_get(a, "lstrip")) || json_is_true(json_object_get(a, "rstrip")) ||
            json_is_true(json_object_get(a, "single_word"))) {
            return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: added token '%.64s' uses lstrip/rstrip/single_word",
                             tok->name, json_string_value(c));
        }
        json_t * norm = json_object_get(a, "normalized");
        bool     special = json_is_true(json_object_get(a, "special"));
        // HF's default for a missing "normalized" is !special
        bool normalized = norm ? json_is_true(norm) : !special;
        enum oscar_status st = osc_tok_add_added(tok, (int32_t) json_integer_value(id), json_string_value(c),
                                                 json_string_length(c), special, normalized && tok->nfc);
        if (st != OSCAR_OK) return st;
    }
    return OSCAR_OK;
}

// bos_token / eos_token: a string, {"content": ...}, or null.
static enum oscar_status config_token(struct oscar_tokenizer * tok, json_t * cfg, const char * key, int32_t * id) {
    json_t * v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!v || json_is_null(v)) return OSCAR_OK;
    if (!json_is_string(v)) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: tokenizer_config %s is not a string", tok->name, key);
    }
    *id = oscar_tokenizer_token_id(tok, json_string_value(v), json_string_length(v));
    if (*id < 0) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: tokenizer_config %s '%.64s' is not a token", tok->name, key,
                         json_string_value(v));
    }
    return OSCAR_OK;
}

static enum oscar_status parse(const char * name, const char * data, size_t len, json_t ** out) {
    json_error_t err;
    *out = json_loadb(data, len, 0, &err);
    if (!*out) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", name, err.line, err.column,
                         err.text);
    }
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return osc_error(OSCAR_ERR_FORMAT, "%s: top level is not a JSON object", name);
    }
    return OSCAR_OK;
}

// Ids index dense per-id tables, so a tiny file naming id 2^30 - 1 would
// make them gigabytes: ids are bounded by the tokens the file lists plus
// room for unused ids (HF files leave a handful, e.g. between the vocabulary
// and the added tokens).
static int32_t id_limit(json_t * root) {
    json_t * model = json_object_get(root, "model");
    size_t n = json_object_size(json_object_get(model, "vocab")) +
               json_array_size(json_object_get(root, "added_tokens"));
    return n < (1u << 30) - 65536 ? (int32_t) n + 65536 : 1 << 30;
}

enum oscar_status oscar_tokenizer_from_json(const char * name, const char * json, size_t json_len,
                                            const char * config, size_t config_len,
                                            struct oscar_tokenizer ** out) {
    *out = NULL;
    json_t * root = NULL, * cfg = NULL;
    struct oscar_tokenizer * tok = NULL;
    bool saw_bl = false;
    enum oscar_status st = parse(name, json, json_len, &root);
    if (st == OSCAR_OK && config) st = parse(name, config, config_len, &cfg);
    if (st == OSCAR_OK) st = osc_tok_new(name, &tok);
    if (st == OSCAR_OK) tok->max_ids = id_limit(root);
    if (st == OSCAR_OK) st = load_normalizer(tok, json_object_get(root, "normalizer"));
    if (st == OSCAR_OK) st = load_model(tok, json_object_get(root, "model"));
    if (st == OSCAR_OK) st = load_added(tok, json_object_get(root, "added_tokens"));
    if (st == OSCAR_OK) {
        json_t * pre = json_object_get(root, "pre_tokenizer");
        st = (pre && !json_is_null(pre)) ? load_pre(tok, pre, &saw_bl) : OSCAR_OK;
        if (st == OSCAR_OK && !saw_bl) {
            st = osc_error(OSCAR_ERR_UNSUPPORTED, "%s: no ByteLevel pre-tokenizer (only byte-level BPE is supported)",
                           name);
        }
    }
    if (st == OSCAR_OK && cfg) {
        st = config_token(tok, cfg, "bos_token", &tok->bos);
        if (st == OSCAR_OK) st = config_token(tok, cfg, "eos_token", &tok->eos);
        tok->add_bos = json_is_true(json_object_get(cfg, "add_bos_token"));
    }
    if (st == OSCAR_OK) {
        snprintf(tok->pre_name, sizeof tok->pre_name, "tokenizer.json");
        st = osc_tok_finish(tok);
    }
    json_decref(root);
    json_decref(cfg);
    if (st != OSCAR_OK) {
        oscar_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return OSCAR_OK;
}

// ---- path dispatch -----------------------------------------------------------------------
static bool is_dir(const char * p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool file_exists(const char * p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static enum oscar_status load_json_file(const char * path, struct oscar_tokenizer ** out) {
    char * json = NULL, * cfg = NULL, * cfg_path = NULL;
    size_t json_len = 0, cfg_len = 0;
    enum oscar_status st = osc_require_regular(path);
    if (st == OSCAR_OK) st = osc_read_file(path, MAX_JSON_BYTES, &json, &json_len);
    if (st == OSCAR_OK) { // tokenizer_config.json next to it, when there
        const char * slash = strrchr(path, '/');
        size_t       dlen = slash ? (size_t) (slash - path) : 0;
        cfg_path = malloc(dlen + 32);
        if (!cfg_path) {
            st = osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
        } else {
            snprintf(cfg_path, dlen + 32, "%.*s%stokenizer_config.json", (int) dlen, path, slash ? "/" : "");
            if (file_exists(cfg_path)) st = osc_read_file(cfg_path, MAX_JSON_BYTES, &cfg, &cfg_len);
        }
    }
    if (st == OSCAR_OK) st = oscar_tokenizer_from_json(path, json, json_len, cfg, cfg_len, out);
    free(json);
    free(cfg);
    free(cfg_path);
    return st;
}

enum oscar_status oscar_tokenizer_load(const char * path, struct oscar_tokenizer ** out) {
    *out = NULL;
    if (is_dir(path)) {
        char * p = osc_path_join(path, "tokenizer.json");
        if (!p) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
        enum oscar_status st = file_exists(p) ? load_json_file(p, out)
                                              : osc_error(OSCAR_ERR_NOT_FOUND, "%s: no tokenizer.json in directory",
                                                          path);
        free(p);
        return st;
    }
    enum oscar_status st = osc_require_regular(path); // before fopen, which blocks on a FIFO
    if (st != OSCAR_OK) return st;
    FILE * fp = fopen(path, "rb");
    if (!fp) {
        return osc_error(OSCAR_ERR_IO, "%s: cannot open", path);
    }
    char   magic[4] = { 0 };
    size_t n = fread(magic, 1, 4, fp);
    fclose(fp);
    if (n == 4 && memcmp(magic, "GGUF", 4) == 0) {
        return osc_tok_load_gguf_path(path, out);
    }
    return load_json_file(path, out);
}
