// tok-encode.c - text -> ids and ids -> bytes.
//
// encode: validate UTF-8 -> cut added tokens out of the raw text -> NFC (if
// configured) -> cut "normalized" added tokens -> regex splits, one after
// the other, each on the pieces of the previous one -> BPE on each piece.
// The BPE merge loop reproduces HF tokenizers' `Word::merge_all` exactly
// (a min-heap of (rank, position), stale entries re-checked against the
// merge table), so ties and repeated merges resolve the same way.
//
// Most of the time is spent in the regex matcher and the word cache lookup;
// BPE itself only runs once per distinct piece (cached up to a bounded size).
#include "tokenizer/tok-internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "util/error.h"

// The word cache is cleared when it would exceed these (bounded memory).
#define CACHE_MAX_WORD_BYTES 256
#define CACHE_MAX_ENTRIES    (1u << 20)
#define CACHE_MAX_IDS        (16u << 20)

struct osc_sym {
    int32_t id;
    int32_t prev, next; // -1 at the ends
    int32_t alive;
};

struct osc_heap_ent {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
};

// ---- growable buffers ------------------------------------------------------------
static bool grow(void ** p, size_t * cap, size_t need, size_t elem) {
    if (need <= *cap) {
        return true;
    }
    size_t nc = *cap ? *cap : 64;
    while (nc < need) {
        nc *= 2;
    }
    void * q = realloc(*p, nc * elem);
    if (!q) {
        return false;
    }
    *p = q;
    *cap = nc;
    return true;
}

static enum oscar_status push_ids(struct oscar_tokenizer * tok, struct oscar_tokens * out, const int32_t * ids,
                                  size_t n) {
    if (n == 0) { // ids may be NULL (an empty cached word)
        return OSCAR_OK;
    }
    if (out->max_n && out->n + n > out->max_n) {
        return osc_error(OSCAR_ERR_INVALID, "%s: more than %zu tokens", tok->name, out->max_n);
    }
    if (!grow((void **) &out->ids, &out->cap, out->n + n, sizeof *out->ids)) {
        return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory for %zu token ids", tok->name, out->n + n);
    }
    memcpy(out->ids + out->n, ids, n * sizeof *ids);
    out->n += n;
    return OSCAR_OK;
}

void oscar_tokens_free(struct oscar_tokens * t) {
    free(t->ids);
    t->ids = NULL;
    t->n = t->cap = 0;
}

// ---- UTF-8 validation -------------------------------------------------------------
// Returns len when valid, else the offset of the first bad byte. Strict:
// no overlongs, no surrogates, nothing above U+10FFFF.
static size_t utf8_check(const uint8_t * s, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t   n;
        uint32_t min;
        if ((c & 0xE0) == 0xC0) { n = 2; min = 0x80; }
        else if ((c & 0xF0) == 0xE0) { n = 3; min = 0x800; }
        else if ((c & 0xF8) == 0xF0) { n = 4; min = 0x10000; }
        else return i;
        if (i + n > len) {
            return i;
        }
        uint32_t v = c & (0x7Fu >> n);
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) {
                return i;
            }
            v = (v << 6) | (s[i + k] & 0x3Fu);
        }
        if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
            return i;
        }
        i += n;
    }
    return len;
}

// ---- BPE ------------------------------------------------------------------------
static bool merge_get(const struct osc_merge_map * m, int32_t a, int32_t b, int32_t * rank, int32_t * res) {
    if (m->n_slots == 0) {
        return false;
    }
    uint64_t key = ((uint64_t) a << 32) | (uint32_t) b;
    size_t   j = (size_t) ((key * 0x9E3779B97F4A7C15ULL) >> 20) & (m->n_slots - 1);
    for (;; j = (j + 1) & (m->n_slots - 1)) {
        if (m->keys[j] == key) {
            *rank = m->rank[j];
            *res = m->result[j];
            return true;
        }
        if (m->keys[j] == UINT64_MAX) {
            return false;
        }
    }
}

static bool heap_less(const struct osc_heap_ent * a, const struct osc_heap_ent * b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(struct osc_heap_ent * h, size_t * n, struct osc_heap_ent e) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static struct osc_heap_ent heap_pop(struct osc_heap_ent * h, size_t * n) {
    struct osc_heap_ent top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

// Pushes the merge of sym[pos] with its successor when the pair has one.
static void push_pair(struct oscar_tokenizer * tok, size_t * nh, int32_t pos) {
    const struct osc_sym * s = tok->syms;
    int32_t rank, res;
    if (s[pos].next >= 0 && merge_get(&tok->merges, s[pos].id, s[s[pos].next].id, &rank, &res)) {
        heap_push(tok->heap, nh, (struct osc_heap_ent){ rank, pos, res });
    }
}

// BPE of one piece into tok->word_ids; returns the count or -1 (no memory).
static int64_t bpe_word(struct oscar_tokenizer * tok, const uint8_t * w, size_t len) {
    if (!grow((void **) &tok->syms, &tok->syms_cap, len, sizeof *tok->syms) ||
        !grow((void **) &tok->heap, &tok->heap_cap, 2 * len + 1, sizeof *tok->heap) ||
        !grow((void **) &tok->word_ids, &tok->word_ids_cap, len + 1, sizeof *tok->word_ids)) {
        return -1;
    }
    if (tok->ignore_merges) { // HF: a piece that is a whole token skips BPE
        uint64_t * v = osc_bmap_get(&tok->vocab, w, len, osc_fnv1a64(OSC_FNV1A64_INIT, w, len));
        if (v) {
            tok->word_ids[0] = (int32_t) *v;
            return 1;
        }
    }
    // 1. one symbol per byte; bytes without a token become unk or vanish
    struct osc_sym * s = tok->syms;
    int32_t n = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t id = tok->byte_id[w[i]];
        if (id < 0) {
            if (tok->unk_id < 0) continue;
            if (tok->fuse_unk && n > 0 && s[n - 1].id == tok->unk_id) continue;
            id = tok->unk_id;
        }
        s[n] = (struct osc_sym){ id, n - 1, -1, 1 };
        if (n > 0) s[n - 1].next = n;
        n++;
    }
    // 2. all adjacent pairs, then pop (lowest rank, leftmost) until empty
    size_t nh = 0;
    for (int32_t i = 0; i + 1 < n; i++) {
        push_pair(tok, &nh, i);
    }
    while (nh > 0) {
        struct osc_heap_ent top = heap_pop(tok->heap, &nh);
        struct osc_sym *    a = &s[top.pos];
        if (!a->alive || a->next < 0) continue;
        int32_t rank, res;
        if (!merge_get(&tok->merges, a->id, s[a->next].id, &rank, &res) || res != top.new_id) continue;
        struct osc_sym * b = &s[a->next];
        a->id = top.new_id;
        b->alive = 0;
        a->next = b->next;
        if (b->next >= 0) s[b->next].prev = top.pos;
        if (a->prev >= 0) push_pair(tok, &nh, a->prev);
        push_pair(tok, &nh, top.pos);
    }
    int64_t k = 0;
    for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = s[i].next) {
        tok->word_ids[k++] = s[i].id;
    }
    return k;
}

// Encodes one pre-token, through the cache.
static enum oscar_status encode_word(struct oscar_tokenizer * tok, const uint8_t * w, size_t len,
                                     struct oscar_tokens * out) {
    uint64_t h = 0;
    if (len <= CACHE_MAX_WORD_BYTES) {
        h = osc_fnv1a64(OSC_FNV1A64_INIT, w, len);
        uint64_t * v = osc_bmap_get(&tok->cache, w, len, h);
        if (v && (*v & 0xFFFFFF) == 0) { // a word whose bytes all lack a token
            return OSCAR_OK;
        }
        if (v) {
            return push_ids(tok, out, tok->cache_ids + (*v >> 24), (size_t) (*v & 0xFFFFFF));
        }
    }
    int64_t k = bpe_word(tok, w, len);
    if (k < 0) {
        return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", tok->name);
    }
    if (len <= CACHE_MAX_WORD_BYTES) {
        if (tok->cache.n >= CACHE_MAX_ENTRIES || tok->cache_ids_n + (size_t) k > CACHE_MAX_IDS) {
            osc_bmap_clear(&tok->cache);
            tok->cache_ids_n = 0;
        }
        if (grow((void **) &tok->cache_ids, &tok->cache_ids_cap, tok->cache_ids_n + (size_t) k,
                 sizeof *tok->cache_ids)) {
            if (k > 0) memcpy(tok->cache_ids + tok->cache_ids_n, tok->word_ids, (size_t) k * sizeof(int32_t));
            if (osc_bmap_put(&tok->cache, w, len, h, ((uint64_t) tok->cache_ids_n << 24) | (uint64_t) k)) {
                tok->cache_ids_n += (size_t) k;
            }
        }
    }
    return push_ids(tok, out, tok->word_ids, (size_t) k);
}

// ---- pre-tokenizer ------------------------------------------------------------------
// Splits piece [p, p+len) with regex `step` (matches and gaps both become
// pieces, empty ones are dropped) and hands each to the next step.
static enum oscar_status pretok(struct oscar_tokenizer * tok, int step, const uint8_t * p, size_t len,
                                struct oscar_tokens * out) {
    if (len == 0) {
        return OSCAR_OK;
    }
    if (step == tok->n_splits) {
        return encode_word(tok, p, len, out);
    }
    struct osc_tok_split * sp = &tok->splits[step];
    enum oscar_status      st = OSCAR_OK;
    size_t start = 0, last = 0; // search offset; end of the last emitted piece
    while (start <= len && st == OSCAR_OK) {
        int rc = pcre2_match(sp->code, p, len, start, PCRE2_NO_UTF_CHECK, sp->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return osc_error(OSCAR_ERR_INVALID, "%s: pre-tokenizer regex failed: %s", tok->name,
                             (const char *) msg);
        }
        PCRE2_SIZE * ov = pcre2_get_ovector_pointer(sp->md);
        size_t       ms = ov[0], me = ov[1];
        if (me == ms) { // empty match: emit nothing, step one character
            size_t adv = 1;
            while (ms + adv < len && (p[ms + adv] & 0xC0) == 0x80) adv++;
            start = ms + adv;
            continue;
        }
        if (ms > last) st = pretok(tok, step + 1, p + last, ms - last, out);
        if (st == OSCAR_OK) st = pretok(tok, step + 1, p + ms, me - ms, out);
        last = start = me;
    }
    if (st == OSCAR_OK && last < len) {
        st = pretok(tok, step + 1, p + last, len - last, out);
    }
    return st;
}

// ---- added tokens ---------------------------------------------------------------------
// Longest added token of the wanted kind starting at p (its index), or -1.
static int32_t added_at(const struct oscar_tokenizer * tok, const uint8_t * p, size_t avail, bool normalized,
                        bool parse_special) {
    int32_t best = -1;
    size_t  best_len = 0;
    for (int32_t i = 0; i < tok->n_added; i++) {
        const struct osc_tok_added * a = &tok->added[i];
        uint8_t f = tok->flags[a->id];
        if (a->len > avail || a->len <= best_len || ((f & OSC_TOK_NORMALIZED) != 0) != normalized) continue;
        if ((f & OSC_TOK_SPECIAL) && !parse_special) continue;
        if (memcmp(tok->pool + a->off, p, a->len) == 0) {
            best = i;
            best_len = a->len;
        }
    }
    return best;
}

// Text after NFC: cut normalized added tokens, pre-tokenize the rest.
static enum oscar_status encode_normalized(struct oscar_tokenizer * tok, const uint8_t * s, size_t len,
                                           bool parse_special, struct oscar_tokens * out) {
    if (!tok->has_normalized_added) {
        return pretok(tok, 0, s, len, out);
    }
    size_t seg = 0;
    for (size_t i = 0; i < len; i++) {
        if (!(tok->added_first[s[i]] & 2)) continue;
        int32_t k = added_at(tok, s + i, len - i, true, parse_special);
        if (k < 0) continue;
        enum oscar_status st = pretok(tok, 0, s + seg, i - seg, out);
        if (st == OSCAR_OK) st = push_ids(tok, out, &tok->added[k].id, 1);
        if (st != OSCAR_OK) return st;
        i += tok->added[k].len - 1;
        seg = i + 1;
    }
    return pretok(tok, 0, s + seg, len - seg, out);
}

static enum oscar_status encode_segment(struct oscar_tokenizer * tok, const uint8_t * s, size_t len,
                                        bool parse_special, struct oscar_tokens * out) {
    if (len == 0) {
        return OSCAR_OK;
    }
    bool ascii = true;
    for (size_t i = 0; i < len && ascii; i++) ascii = s[i] < 0x80;
    if (!tok->nfc || ascii) { // ASCII is NFC-invariant
        return encode_normalized(tok, s, len, parse_special, out);
    }
    utf8proc_uint8_t * nfc = NULL;
    utf8proc_ssize_t   n = utf8proc_map(s, (utf8proc_ssize_t) len, &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (n < 0) {
        free(nfc);
        return osc_error(OSCAR_ERR_INVALID, "%s: NFC normalisation failed: %s", tok->name, utf8proc_errmsg(n));
    }
    enum oscar_status st = encode_normalized(tok, nfc, (size_t) n, parse_special, out);
    free(nfc);
    return st;
}

enum oscar_status oscar_tokenizer_encode_append(struct oscar_tokenizer * tok, const char * text, size_t len,
                                                bool parse_special, struct oscar_tokens * out) {
    const uint8_t * s = (const uint8_t *) text;
    if (len == 0) {
        return OSCAR_OK;
    }
    size_t bad = utf8_check(s, len);
    if (bad != len) {
        return osc_error(OSCAR_ERR_INVALID, "%s: input is not valid UTF-8 (byte 0x%02x at offset %zu)", tok->name,
                         s[bad], bad);
    }
    size_t seg = 0;
    for (size_t i = 0; i < len; i++) {
        if (!(tok->added_first[s[i]] & 1)) continue;
        int32_t k = added_at(tok, s + i, len - i, false, parse_special);
        if (k < 0) continue;
        enum oscar_status st = encode_segment(tok, s + seg, i - seg, parse_special, out);
        if (st == OSCAR_OK) st = push_ids(tok, out, &tok->added[k].id, 1);
        if (st != OSCAR_OK) return st;
        i += tok->added[k].len - 1;
        seg = i + 1;
    }
    return encode_segment(tok, s + seg, len - seg, parse_special, out);
}

enum oscar_status oscar_tokenizer_encode(struct oscar_tokenizer * tok, const char * text, size_t len,
                                         bool parse_special, int32_t ** ids, size_t * n) {
    struct oscar_tokens t = { 0 };
    enum oscar_status   st = oscar_tokenizer_encode_append(tok, text, len, parse_special, &t);
    if (st != OSCAR_OK) {
        oscar_tokens_free(&t);
        t.n = 0;
    }
    *ids = t.ids;
    *n = t.n;
    return st;
}

// ---- decode --------------------------------------------------------------------------
enum oscar_status oscar_tokenizer_decode(const struct oscar_tokenizer * tok, const int32_t * ids, size_t n,
                                         bool skip_special, char ** text, size_t * len) {
    *text = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok->n_ids || !(tok->flags[ids[i]] & OSC_TOK_PRESENT)) {
            return osc_error(OSCAR_ERR_INVALID, "%s: cannot decode id %d at position %zu (vocabulary has %d ids)",
                             tok->name, (int) ids[i], i, (int) tok->n_ids);
        }
        if (!(skip_special && (tok->flags[ids[i]] & OSC_TOK_SPECIAL))) total += tok->tok_len[ids[i]];
    }
    char * buf = malloc(total + 1);
    if (!buf) {
        return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory decoding %zu ids", tok->name, n);
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (skip_special && (tok->flags[ids[i]] & OSC_TOK_SPECIAL)) continue;
        memcpy(buf + k, tok->pool + tok->tok_off[ids[i]], tok->tok_len[ids[i]]);
        k += tok->tok_len[ids[i]];
    }
    buf[k] = '\0';
    *text = buf;
    *len = k;
    return OSCAR_OK;
}
