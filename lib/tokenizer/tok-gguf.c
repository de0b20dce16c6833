// tok-gguf.c - tokenizer from GGUF metadata (tokenizer.ggml.*).
//
// Reads tokenizer.ggml.model (must be "gpt2": byte-level BPE), .tokens,
// .token_type, .merges ("a b" strings), .pre, .bos_token_id, .eos_token_id,
// .add_bos_token. Token types: CONTROL (3) tokens become special added
// tokens, USER_DEFINED (4) non-special added tokens; all tokens are also
// vocabulary entries, as in the tokenizer.json files these GGUFs come from.
//
// tokenizer.ggml.pre names the pre-tokenizer; the mapping reproduces the
// Hugging Face tokenizer.json of the model family (not llama.cpp's own
// re-implementation, which differs in corner cases):
//   smollm, starcoder : Digits(individual_digits) then ByteLevel(use_regex)
//                       -- SmolLM2's tokenizer.json pre_tokenizer is
//                       Sequence[Digits{individual_digits: true},
//                       ByteLevel{add_prefix_space: false, use_regex: true}]
//                       with no normalizer; llama.cpp's SMOLLM regexes are
//                       the same pair ("\p{N}", then the GPT-2 pattern).
//   gpt2, default     : ByteLevel(use_regex)
//   qwen2             : NFC + the Qwen2 Split regex
//   llama-bpe         : the Llama 3 Split regex
// Anything else is refused with OSCAR_ERR_UNSUPPORTED naming the value.
// tokenizer.ggml.unknown_token_id is not used by BPE: HF byte-level models
// have no unk_token and drop bytes that lack a token.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "tokenizer/tok-internal.h"
#include "util/error.h"

static const char qwen2_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char llama3_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static enum oscar_status set_pre(struct oscar_tokenizer * tok, const char * pre, size_t len) {
    snprintf(tok->pre_name, sizeof tok->pre_name, "%.*s", (int) len, pre);
    const char * p = tok->pre_name;
    if (!strcmp(p, "smollm") || !strcmp(p, "starcoder")) {
        enum oscar_status st = osc_tok_add_split(tok, "\\p{N}", false);
        return st == OSCAR_OK ? osc_tok_add_split(tok, osc_tok_gpt2_regex, false) : st;
    }
    if (!strcmp(p, "gpt2") || !strcmp(p, "default")) {
        return osc_tok_add_split(tok, osc_tok_gpt2_regex, false);
    }
    if (!strcmp(p, "qwen2")) {
        tok->nfc = true;
        return osc_tok_add_split(tok, qwen2_regex, false);
    }
    if (!strcmp(p, "llama-bpe")) {
        return osc_tok_add_split(tok, llama3_regex, false);
    }
    return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre '%s' is not supported", tok->name, p);
}

static enum oscar_status load_tokens(struct oscar_tokenizer * tok, const struct osc_gguf * g) {
    enum osc_gguf_type et;
    uint64_t           n = 0, nt = 0;
    enum oscar_status  st = osc_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n);
    if (st != OSCAR_OK) return st;
    if (et != OSC_GGUF_STRING || n == 0 || n >= (1u << 30)) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: tokenizer.ggml.tokens is not a non-empty string array", tok->name);
    }
    const void * types = NULL;
    if (osc_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0) {
        st = osc_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &nt);
        if (st != OSCAR_OK) return st;
        if (et != OSC_GGUF_INT32 || nt != n) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: tokenizer.ggml.token_type is not an int32 array of %llu entries",
                             tok->name, (unsigned long long) n);
        }
        if ((st = osc_gguf_get_arr_data(g, "tokenizer.ggml.token_type", &types)) != OSCAR_OK) return st;
    }
    for (uint64_t i = 0; i < n; i++) {
        const char * s;
        size_t       len;
        if ((st = osc_gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &s, &len)) != OSCAR_OK) return st;
        if ((st = osc_tok_add_vocab(tok, (int32_t) i, s, len)) != OSCAR_OK) return st;
        int32_t type = 1;
        if (types) memcpy(&type, (const char *) types + 4 * i, 4);
        if (type == 3 || type == 4) {
            if ((st = osc_tok_add_added(tok, (int32_t) i, s, len, type == 3, false)) != OSCAR_OK) return st;
        }
    }
    return OSCAR_OK;
}

static enum oscar_status load_merges(struct oscar_tokenizer * tok, const struct osc_gguf * g) {
    enum osc_gguf_type et;
    uint64_t           n = 0;
    enum oscar_status  st = osc_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n);
    if (st != OSCAR_OK) return st;
    if (et != OSC_GGUF_STRING) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: tokenizer.ggml.merges is not a string array", tok->name);
    }
    for (uint64_t i = 0; i < n; i++) {
        const char * s;
        size_t       len;
        if ((st = osc_gguf_get_arr_str(g, "tokenizer.ggml.merges", i, &s, &len)) != OSCAR_OK) return st;
        const char * sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp || sp + 1 == s + len || memchr(sp + 1, ' ', (size_t) (s + len - sp - 1))) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: tokenizer.ggml.merges[%llu] is not 'a b'", tok->name,
                             (unsigned long long) i);
        }
        st = osc_tok_add_merge(tok, s, (size_t) (sp - s), sp + 1, (size_t) (s + len - sp - 1));
        if (st != OSCAR_OK) return st;
    }
    return OSCAR_OK;
}

static enum oscar_status opt_id(const struct osc_gguf * g, const char * key, int32_t * id) {
    if (osc_gguf_find_key(g, key) < 0) return OSCAR_OK;
    uint32_t v;
    enum oscar_status st = osc_gguf_get_u32(g, key, &v);
    if (st == OSCAR_OK) *id = v < (1u << 30) ? (int32_t) v : INT32_MAX;
    return st;
}

enum oscar_status oscar_tokenizer_from_gguf(const struct osc_gguf * g, struct oscar_tokenizer ** out) {
    *out = NULL;
    const char * name = osc_gguf_path(g);
    const char * model, * pre = "default";
    size_t       mlen, plen = 7;
    struct oscar_tokenizer * tok = NULL;
    enum oscar_status st = osc_gguf_get_str(g, "tokenizer.ggml.model", &model, &mlen);
    if (st == OSCAR_OK && !(mlen == 4 && memcmp(model, "gpt2", 4) == 0)) {
        st = osc_error(OSCAR_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model '%.*s' (only 'gpt2' byte-level BPE)", name,
                       (int) (mlen > 64 ? 64 : mlen), model);
    }
    if (st == OSCAR_OK && osc_gguf_find_key(g, "tokenizer.ggml.pre") >= 0) {
        st = osc_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &plen);
    }
    if (st == OSCAR_OK) st = osc_tok_new(name, &tok);
    if (st == OSCAR_OK) st = set_pre(tok, pre, plen > 60 ? 60 : plen);
    if (st == OSCAR_OK) st = load_tokens(tok, g);
    if (st == OSCAR_OK) st = load_merges(tok, g);
    if (st == OSCAR_OK) st = opt_id(g, "tokenizer.ggml.bos_token_id", &tok->bos);
    if (st == OSCAR_OK) st = opt_id(g, "tokenizer.ggml.eos_token_id", &tok->eos);
    if (st == OSCAR_OK && osc_gguf_find_key(g, "tokenizer.ggml.add_bos_token") >= 0) {
        st = osc_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &tok->add_bos);
    }
    if (st == OSCAR_OK) st = osc_tok_finish(tok);
    if (st != OSCAR_OK) {
        oscar_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return OSCAR_OK;
}

enum oscar_status osc_tok_load_gguf_path(const char * path, struct oscar_tokenizer ** out) {
    struct osc_gguf * g = NULL;
    enum oscar_status st = osc_gguf_open(path, &g);
    if (st == OSCAR_OK) {
        st = oscar_tokenizer_from_gguf(g, out);
        osc_gguf_close(g);
    }
    return st;
}
