// tok-build.c - building a tokenizer: hash maps, the vocabulary, merges,
// added tokens, pre-tokenizer regexes, the provenance hash, and the small
// public getters. Loaders (tok-json.c, tok-gguf.c) call the osc_tok_add_*
// functions and then osc_tok_finish(); nothing here reads files.
#include "tokenizer/tok-internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

// The pattern of HF's ByteLevel pre-tokenizer with use_regex = true (the
// GPT-2 one; HF appends the final `|\s+`).
const char osc_tok_gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// ---- hashing -----------------------------------------------------------------
uint64_t osc_fnv1a64(uint64_t h, const void * data, size_t len) {
    const uint8_t * p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

// ---- bytes map ---------------------------------------------------------------
uint64_t * osc_bmap_get(const struct osc_bmap * m, const void * key, size_t len, uint64_t hash) {
    if (m->n_slots == 0) {
        return NULL;
    }
    size_t mask = m->n_slots - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        uint32_t s = m->slots[i];
        if (s == 0) {
            return NULL;
        }
        struct osc_bmap_ent * e = &m->ents[s - 1];
        if (e->hash == hash && e->len == len && memcmp(m->pool + e->off, key, len) == 0) {
            return &e->val;
        }
    }
}

static bool bmap_rehash(struct osc_bmap * m, size_t n_slots) {
    uint32_t * slots = calloc(n_slots, sizeof *slots);
    if (!slots) {
        return false;
    }
    for (size_t k = 0; k < m->n; k++) {
        size_t i = m->ents[k].hash & (n_slots - 1);
        while (slots[i]) {
            i = (i + 1) & (n_slots - 1);
        }
        slots[i] = (uint32_t) (k + 1);
    }
    free(m->slots);
    m->slots = slots;
    m->n_slots = n_slots;
    return true;
}

bool osc_bmap_put(struct osc_bmap * m, const void * key, size_t len, uint64_t hash, uint64_t val) {
    uint64_t * v = osc_bmap_get(m, key, len, hash);
    if (v) {
        *v = val;
        return true;
    }
    if (len > UINT32_MAX || m->n + 1 >= UINT32_MAX) {
        return false;
    }
    if ((m->n + 1) * 2 > m->n_slots && !bmap_rehash(m, m->n_slots ? m->n_slots * 2 : 1024)) {
        return false;
    }
    if (m->n == m->ents_cap) {
        size_t nc = m->ents_cap ? m->ents_cap * 2 : 512;
        void * p = realloc(m->ents, nc * sizeof *m->ents);
        if (!p) {
            return false;
        }
        m->ents = p;
        m->ents_cap = nc;
    }
    if (m->pool_n + len > m->pool_cap) {
        size_t nc = m->pool_cap ? m->pool_cap : 4096;
        while (nc < m->pool_n + len) {
            nc *= 2;
        }
        void * p = realloc(m->pool, nc);
        if (!p) {
            return false;
        }
        m->pool = p;
        m->pool_cap = nc;
    }
    if (len) {
        memcpy(m->pool + m->pool_n, key, len);
    }
    m->ents[m->n] = (struct osc_bmap_ent){ .hash = hash, .val = val, .off = m->pool_n, .len = (uint32_t) len };
    m->pool_n += len;
    size_t i = hash & (m->n_slots - 1);
    while (m->slots[i]) {
        i = (i + 1) & (m->n_slots - 1);
    }
    m->slots[i] = (uint32_t) (++m->n);
    return true;
}

void osc_bmap_clear(struct osc_bmap * m) {
    if (m->slots) {
        memset(m->slots, 0, m->n_slots * sizeof *m->slots);
    }
    m->n = 0;
    m->pool_n = 0;
}

void osc_bmap_free(struct osc_bmap * m) {
    free(m->slots);
    free(m->ents);
    free(m->pool);
    memset(m, 0, sizeof *m);
}

// ---- GPT-2 byte <-> unicode table ------------------------------------------
// Printable Latin-1 bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for
// themselves; the other 68 bytes get code points 256, 257, ... in byte order.
static void byte_unicode_tables(uint32_t b2u[256], int16_t u2b[324]) {
    int extra = 0;
    for (int b = 0; b < 324; b++) {
        u2b[b] = -1;
    }
    for (int b = 0; b < 256; b++) {
        bool vis = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        b2u[b] = vis ? (uint32_t) b : (uint32_t) (256 + extra++);
        u2b[b2u[b]] = (int16_t) b;
    }
}

// Decodes one UTF-8 code point (input already known to be a JSON/GGUF
// string, but checked anyway); returns its length or 0 when malformed.
static size_t utf8_next(const uint8_t * s, size_t len, uint32_t * cp) {
    if (len == 0) {
        return 0;
    }
    uint8_t c = s[0];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || n > len) {
        return 0;
    }
    uint32_t v = n == 1 ? c : n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            return 0;
        }
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    *cp = v;
    return n;
}

// Byte-level string -> bytes. Returns false when s is not a byte-level
// string (a character outside the 256-entry alphabet).
static uint32_t bytelevel_b2u[256];
static int16_t  bytelevel_u2b[324];
static void bytelevel_tables(void) { byte_unicode_tables(bytelevel_b2u, bytelevel_u2b); }

static bool bytelevel_decode(const char * s, size_t len, uint8_t * out, size_t * out_len) {
    static pthread_once_t once = PTHREAD_ONCE_INIT; // tokenizers may load on several threads (--ranks)
    pthread_once(&once, bytelevel_tables);
    const int16_t * u2b = bytelevel_u2b;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t   k = utf8_next((const uint8_t *) s + i, len - i, &cp);
        if (k == 0 || cp >= 324 || u2b[cp] < 0) {
            return false;
        }
        out[n++] = (uint8_t) u2b[cp];
        i += k;
    }
    *out_len = n;
    return true;
}

// ---- construction ------------------------------------------------------------
enum oscar_status osc_tok_new(const char * name, struct oscar_tokenizer ** out) {
    *out = NULL;
    struct oscar_tokenizer * tok = calloc(1, sizeof *tok);
    if (!tok || !(tok->name = strdup(name ? name : "tokenizer"))) {
        free(tok);
        return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", name ? name : "tokenizer");
    }
    tok->max_ids = 1 << 30;
    tok->unk_id = -1;
    tok->bos = -1;
    tok->eos = -1;
    tok->byte_level = true;
    *out = tok;
    return OSCAR_OK;
}

static enum oscar_status ensure_id(struct oscar_tokenizer * tok, int32_t id) {
    if (id < 0 || id >= tok->max_ids) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: token id %d out of range (ids must be below %d)", tok->name,
                         (int) id, (int) tok->max_ids);
    }
    if (id < tok->ids_cap) {
        if (id >= tok->n_ids) {
            tok->n_ids = id + 1;
        }
        return OSCAR_OK;
    }
    int32_t nc = tok->ids_cap ? tok->ids_cap : 1024;
    while (nc <= id) {
        nc *= 2;
    }
    uint8_t *  f = realloc(tok->flags, (size_t) nc);
    if (f) tok->flags = f;
    uint32_t * o = realloc(tok->tok_off, (size_t) nc * sizeof *o);
    if (o) tok->tok_off = o;
    uint32_t * l = realloc(tok->tok_len, (size_t) nc * sizeof *l);
    if (l) tok->tok_len = l;
    if (!f || !o || !l) {
        return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", tok->name);
    }
    memset(tok->flags + tok->ids_cap, 0, (size_t) (nc - tok->ids_cap));
    memset(tok->tok_off + tok->ids_cap, 0, (size_t) (nc - tok->ids_cap) * sizeof *o); // holes: empty tokens
    memset(tok->tok_len + tok->ids_cap, 0, (size_t) (nc - tok->ids_cap) * sizeof *l);
    tok->ids_cap = nc;
    tok->n_ids = id + 1;
    return OSCAR_OK;
}

static enum oscar_status pool_add(struct oscar_tokenizer * tok, const void * s, size_t len, uint32_t * off) {
    if (tok->pool_n + len > UINT32_MAX) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: token strings exceed 4 GiB", tok->name);
    }
    if (tok->pool_n + len > tok->pool_cap) {
        size_t nc = tok->pool_cap ? tok->pool_cap : 65536;
        while (nc < tok->pool_n + len) {
            nc *= 2;
        }
        void * p = realloc(tok->pool, nc);
        if (!p) {
            return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", tok->name);
        }
        tok->pool = p;
        tok->pool_cap = nc;
    }
    if (len) {
        memcpy(tok->pool + tok->pool_n, s, len);
    }
    *off = (uint32_t) tok->pool_n;
    tok->pool_n += len;
    return OSCAR_OK;
}

enum oscar_status osc_tok_add_vocab(struct oscar_tokenizer * tok, int32_t id, const char * s, size_t len) {
    enum oscar_status st = ensure_id(tok, id);
    if (st != OSCAR_OK) {
        return st;
    }
    if (tok->flags[id] & OSC_TOK_PRESENT) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: token id %d appears twice in the vocabulary", tok->name, (int) id);
    }
    if (len == 0) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: token id %d is empty", tok->name, (int) id);
    }
    uint8_t stack[256];
    uint8_t * buf = len <= sizeof stack ? stack : malloc(len);
    if (!buf) {
        return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", tok->name);
    }
    size_t blen = 0;
    bool   bl = bytelevel_decode(s, len, buf, &blen);
    if (bl) {
        uint64_t h = osc_fnv1a64(OSC_FNV1A64_INIT, buf, blen);
        if (osc_bmap_get(&tok->vocab, buf, blen, h)) {
            st = osc_error(OSCAR_ERR_FORMAT, "%s: token id %d duplicates another token's text", tok->name, (int) id);
        } else if (!osc_bmap_put(&tok->vocab, buf, blen, h, (uint64_t) id)) {
            st = osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", tok->name);
        } else {
            st = pool_add(tok, buf, blen, &tok->tok_off[id]);
            tok->tok_len[id] = (uint32_t) blen;
            tok->flags[id] = OSC_TOK_PRESENT | OSC_TOK_BYTEMAP;
        }
    } else { // not a byte-level string: unreachable by BPE; decodes as its text
        st = pool_add(tok, s, len, &tok->tok_off[id]);
        tok->tok_len[id] = (uint32_t) len;
        tok->flags[id] = OSC_TOK_PRESENT;
    }
    if (buf != stack) {
        free(buf);
    }
    return st;
}

static int32_t vocab_lookup_bl(const struct oscar_tokenizer * tok, const char * s, size_t len) {
    uint8_t stack[256];
    uint8_t * buf = len <= sizeof stack ? stack : malloc(len);
    int32_t   id = -1;
    size_t    blen;
    if (buf && bytelevel_decode(s, len, buf, &blen)) {
        uint64_t * v = osc_bmap_get(&tok->vocab, buf, blen, osc_fnv1a64(OSC_FNV1A64_INIT, buf, blen));
        id = v ? (int32_t) *v : -1;
    }
    if (buf != stack) {
        free(buf);
    }
    return id;
}

static bool merge_map_grow(struct osc_merge_map * m) {
    size_t     ns = m->n_slots ? m->n_slots * 2 : 4096;
    uint64_t * k = malloc(ns * sizeof *k);
    int32_t *  r = malloc(ns * sizeof *r);
    int32_t *  x = malloc(ns * sizeof *x);
    if (!k || !r || !x) {
        free(k); free(r); free(x);
        return false;
    }
    memset(k, 0xFF, ns * sizeof *k);
    for (size_t i = 0; i < m->n_slots; i++) {
        if (m->keys[i] == UINT64_MAX) continue;
        size_t j = (size_t) ((m->keys[i] * 0x9E3779B97F4A7C15ULL) >> 20) & (ns - 1);
        while (k[j] != UINT64_MAX) j = (j + 1) & (ns - 1);
        k[j] = m->keys[i];
        r[j] = m->rank[i];
        x[j] = m->result[i];
    }
    free(m->keys); free(m->rank); free(m->result);
    m->keys = k; m->rank = r; m->result = x; m->n_slots = ns;
    return true;
}

// HF builds its merge table with a map collect, so a repeated pair keeps the
// last rank; the same happens here.
static bool merge_map_put(struct osc_merge_map * m, uint64_t key, int32_t rank, int32_t result) {
    if ((m->n + 1) * 2 > m->n_slots && !merge_map_grow(m)) {
        return false;
    }
    size_t j = (size_t) ((key * 0x9E3779B97F4A7C15ULL) >> 20) & (m->n_slots - 1);
    while (m->keys[j] != UINT64_MAX && m->keys[j] != key) j = (j + 1) & (m->n_slots - 1);
    if (m->keys[j] == UINT64_MAX) m->n++;
    m->keys[j] = key;
    m->rank[j] = rank;
    m->result[j] = result;
    return true;
}

enum oscar_status osc_tok_add_merge(struct oscar_tokenizer * tok, const char * a, size_t alen,
                                    const char * b, size_t blen) {
    int32_t rank = tok->n_merges;
    int32_t ia = vocab_lookup_bl(tok, a, alen), ib = vocab_lookup_bl(tok, b, blen);
    if (ia < 0 || ib < 0) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: merge %d references unknown token '%.*s'", tok->name, (int) rank,
                         (int) (ia < 0 ? (alen > 64 ? 64 : alen) : (blen > 64 ? 64 : blen)), ia < 0 ? a : b);
    }
    char   stack[256];
    char * ab = alen + blen <= sizeof stack ? stack : malloc(alen + blen);
    if (!ab) {
        return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", tok->name);
    }
    memcpy(ab, a, alen);
    memcpy(ab + alen, b, blen);
    int32_t ir = vocab_lookup_bl(tok, ab, alen + blen);
    if (ab != stack) {
        free(ab);
    }
    if (ir < 0) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: merge %d ('%.*s' + '%.*s') gives a token missing from the vocabulary",
                         tok->name, (int) rank, (int) (alen > 64 ? 64 : alen), a, (int) (blen > 64 ? 64 : blen), b);
    }
    if (!merge_map_put(&tok->merges, ((uint64_t) ia << 32) | (uint32_t) ib, rank, ir)) {
        return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", tok->name);
    }
    tok->n_merges++;
    return OSCAR_OK;
}

enum oscar_status osc_tok_add_added(struct oscar_tokenizer * tok, int32_t id, const char * s, size_t len,
                                    bool special, bool normalized) {
    if (len == 0) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: added token %d has empty content", tok->name, (int) id);
    }
    enum oscar_status st = ensure_id(tok, id);
    if (st != OSCAR_OK) {
        return st;
    }
    if (tok->flags[id] & OSC_TOK_ADDED) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: added token id %d appears twice", tok->name, (int) id);
    }
    for (int32_t i = 0; i < tok->n_added; i++) {
        const struct osc_tok_added * a = &tok->added[i];
        if (a->len == len && memcmp(tok->pool + a->off, s, len) == 0) {
            return osc_error(OSCAR_ERR_FORMAT, "%s: added tokens %d and %d have the same content", tok->name,
                             (int) a->id, (int) id);
        }
    }
    if (tok->n_added == tok->added_cap) {
        int32_t nc = tok->added_cap ? tok->added_cap * 2 : 32;
        void *  p = realloc(tok->added, (size_t) nc * sizeof *tok->added);
        if (!p) {
            return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", tok->name);
        }
        tok->added = p;
        tok->added_cap = nc;
    }
    uint32_t off;
    if ((st = pool_add(tok, s, len, &off)) != OSCAR_OK) {
        return st;
    }
    tok->added[tok->n_added++] = (struct osc_tok_added){ .id = id, .off = off, .len = (uint32_t) len };
    // An added token's text decodes as its content, even when the id is also
    // in the model vocabulary (SmolLM2's <|endoftext|> ...).
    tok->tok_off[id] = off;
    tok->tok_len[id] = (uint32_t) len;
    tok->flags[id] = (uint8_t) ((tok->flags[id] & OSC_TOK_BYTEMAP) | OSC_TOK_PRESENT | OSC_TOK_ADDED |
                                (special ? OSC_TOK_SPECIAL : 0) | (normalized ? OSC_TOK_NORMALIZED : 0));
    return OSCAR_OK;
}

enum oscar_status osc_tok_add_split(struct oscar_tokenizer * tok, const char * pattern, bool literal) {
    if (tok->n_splits == OSC_TOK_MAX_SPLITS) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: more than %d pre-tokenizer splits", tok->name,
                         OSC_TOK_MAX_SPLITS);
    }
    int        err = 0;
    PCRE2_SIZE eoff = 0;
    // PCRE2_LITERAL refuses PCRE2_UCP (which only affects \\w, \\d, ... anyway)
    uint32_t   opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code * code = pcre2_compile((PCRE2_SPTR) pattern, PCRE2_ZERO_TERMINATED, opts, &err, &eoff, NULL);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return osc_error(OSCAR_ERR_FORMAT, "%s: pre-tokenizer regex does not compile at offset %zu: %s",
                         tok->name, (size_t) eoff, (const char *) msg);
    }
    (void) pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); // falls back to the interpreter
    struct osc_tok_split * sp = &tok->splits[tok->n_splits];
    sp->code = code;
    sp->md = pcre2_match_data_create_from_pattern(code, NULL);
    sp->pattern = strdup(pattern);
    sp->literal = literal;
    tok->n_splits++;
    if (!sp->md || !sp->pattern) {
        return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", tok->name);
    }
    return OSCAR_OK;
}

// ---- finish --------------------------------------------------------------------
static uint64_t hash_u64(uint64_t h, uint64_t v) {
    return osc_fnv1a64(h, &v, sizeof v);
}

static void compute_hash(struct oscar_tokenizer * tok) {
    uint64_t h = osc_fnv1a64(OSC_FNV1A64_INIT, "oscar-tokenizer-v1", 18);
    h = hash_u64(h, (uint64_t) tok->n_ids);
    for (int32_t i = 0; i < tok->n_ids; i++) {
        h = hash_u64(h, ((uint64_t) tok->flags[i] << 32) | tok->tok_len[i]);
        h = osc_fnv1a64(h, tok->pool + tok->tok_off[i], tok->tok_len[i]);
    }
    // merges in rank order: walk the table once into a rank-indexed array
    uint64_t * by_rank = calloc((size_t) tok->n_merges + 1, sizeof *by_rank);
    if (by_rank) {
        for (size_t i = 0; i < tok->merges.n_slots; i++) {
            if (tok->merges.keys[i] != UINT64_MAX) {
                by_rank[tok->merges.rank[i]] = tok->merges.keys[i] ^ ((uint64_t) tok->merges.result[i] << 1);
            }
        }
        h = osc_fnv1a64(h, by_rank, (size_t) tok->n_merges * sizeof *by_rank);
        free(by_rank);
    }
    h = hash_u64(h, ((uint64_t) tok->nfc << 0) | ((uint64_t) tok->ignore_merges << 1) |
                        ((uint64_t) tok->fuse_unk << 2) | ((uint64_t) (uint32_t) tok->unk_id << 32));
    for (int i = 0; i < tok->n_splits; i++) {
        h = hash_u64(h, tok->splits[i].literal);
        h = osc_fnv1a64(h, tok->splits[i].pattern, strlen(tok->splits[i].pattern) + 1);
    }
    tok->hash = h;
}

enum oscar_status osc_tok_finish(struct oscar_tokenizer * tok) {
    if (tok->n_ids == 0) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: empty vocabulary", tok->name);
    }
    for (int b = 0; b < 256; b++) {
        uint8_t    c = (uint8_t) b;
        uint64_t * v = osc_bmap_get(&tok->vocab, &c, 1, osc_fnv1a64(OSC_FNV1A64_INIT, &c, 1));
        tok->byte_id[b] = v ? (int32_t) *v : -1;
    }
    memset(tok->added_first, 0, sizeof tok->added_first);
    tok->has_normalized_added = false;
    for (int32_t i = 0; i < tok->n_added; i++) {
        const struct osc_tok_added * a = &tok->added[i];
        bool norm = (tok->flags[a->id] & OSC_TOK_NORMALIZED) != 0;
        tok->added_first[tok->pool[a->off]] |= norm ? 2 : 1;
        tok->has_normalized_added |= norm;
    }
    if (tok->bos >= tok->n_ids || (tok->bos >= 0 && !(tok->flags[tok->bos] & OSC_TOK_PRESENT))) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: bos token id %d has no token", tok->name, (int) tok->bos);
    }
    if (tok->eos >= tok->n_ids || (tok->eos >= 0 && !(tok->flags[tok->eos] & OSC_TOK_PRESENT))) {
        return osc_error(OSCAR_ERR_FORMAT, "%s: eos token id %d has no token", tok->name, (int) tok->eos);
    }
    compute_hash(tok);
    snprintf(tok->desc, sizeof tok->desc, "byte-level BPE, %d ids, %d merges, %d added, pre=%s%s", (int) tok->n_ids,
             (int) tok->n_merges, (int) tok->n_added, tok->pre_name[0] ? tok->pre_name : "custom",
             tok->nfc ? ", NFC" : "");
    return OSCAR_OK;
}

void oscar_tokenizer_free(struct oscar_tokenizer * tok) {
    if (!tok) {
        return;
    }
    for (int i = 0; i < tok->n_splits; i++) {
        pcre2_match_data_free(tok->splits[i].md);
        pcre2_code_free(tok->splits[i].code);
        free(tok->splits[i].pattern);
    }
    osc_bmap_free(&tok->vocab);
    osc_bmap_free(&tok->cache);
    free(tok->merges.keys);
    free(tok->merges.rank);
    free(tok->merges.result);
    free(tok->flags);
    free(tok->tok_off);
    free(tok->tok_len);
    free(tok->pool);
    free(tok->added);
    free(tok->cache_ids);
    free(tok->syms);
    free(tok->heap);
    free(tok->word_ids);
    free(tok->name);
    free(tok);
}

// ---- getters -------------------------------------------------------------------
int32_t oscar_tokenizer_n_vocab(const struct oscar_tokenizer * tok) { return tok->n_ids; }
int32_t oscar_tokenizer_bos(const struct oscar_tokenizer * tok) { return tok->bos; }
int32_t oscar_tokenizer_eos(const struct oscar_tokenizer * tok) { return tok->eos; }
bool    oscar_tokenizer_add_bos(const struct oscar_tokenizer * tok) { return tok->add_bos; }
uint64_t oscar_tokenizer_hash_fnv1a64(const struct oscar_tokenizer * tok) { return tok->hash; }
const char * oscar_tokenizer_describe(const struct oscar_tokenizer * tok) { return tok->desc; }

bool oscar_tokenizer_is_special(const struct oscar_tokenizer * tok, int32_t id) {
    return id >= 0 && id < tok->n_ids && (tok->flags[id] & OSC_TOK_SPECIAL);
}

bool oscar_tokenizer_token_bytes(const struct oscar_tokenizer * tok, int32_t id, const char ** s, size_t * len) {
    if (id < 0 || id >= tok->n_ids || !(tok->flags[id] & OSC_TOK_PRESENT)) {
        return false;
    }
    *s = (const char *) tok->pool + tok->tok_off[id];
    *len = tok->tok_len[id];
    return true;
}

int32_t oscar_tokenizer_token_id(const struct oscar_tokenizer * tok, const char * s, size_t len) {
    for (int32_t i = 0; i < tok->n_added; i++) {
        const struct osc_tok_added * a = &tok->added[i];
        if (a->len == len && memcmp(tok->pool + a->off, s, len) == 0) {
            return a->id;
        }
    }
    uint64_t * v = osc_bmap_get(&tok->vocab, s, len, osc_fnv1a64(OSC_FNV1A64_INIT, s, len));
    return v ? (int32_t) *v : -1;
}
