// tok-internal.h - the tokenizer's internal representation, shared by the
// builder (tok-build.c), the encoder (tok-encode.c) and the loaders
// (tok-json.c, tok-gguf.c). Not part of the public API.
//
// Vocabulary tokens are stored as raw bytes: a byte-level BPE string ("Ġthe")
// is mapped back through the GPT-2 byte<->unicode table to the bytes it
// stands for (" the"), so BPE runs directly on the input bytes with no
// re-encoding. The mapping is a bijection, so keying by bytes is exactly
// equivalent to HF's keying by byte-level strings. Vocabulary strings that
// are not valid byte-level strings can never be produced by BPE; they keep
// their UTF-8 text for decoding and stay out of the byte map.
#ifndef OSCAR_TOK_INTERNAL_H
#define OSCAR_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

// ---- bytes -> u64 hash map (open addressing, keys copied into a pool) ------
struct osc_bmap_ent {
    uint64_t hash;
    uint64_t val;
    size_t   off; // key offset in pool
    uint32_t len;
};
struct osc_bmap {
    uint32_t *            slots; // entry index + 1; 0 = empty
    size_t                n_slots; // power of two
    struct osc_bmap_ent * ents;
    size_t                n, ents_cap;
    uint8_t *             pool;
    size_t                pool_n, pool_cap;
};
uint64_t osc_fnv1a64(uint64_t h, const void * data, size_t len);
#define OSC_FNV1A64_INIT 0xcbf29ce484222325ULL
// NULL when absent.
uint64_t * osc_bmap_get(const struct osc_bmap * m, const void * key, size_t len, uint64_t hash);
// Inserts (or overwrites) key -> val. false on allocation failure.
bool osc_bmap_put(struct osc_bmap * m, const void * key, size_t len, uint64_t hash, uint64_t val);
void osc_bmap_clear(struct osc_bmap * m);
void osc_bmap_free(struct osc_bmap * m);

// ---- token table -----------------------------------------------------------
enum {
    OSC_TOK_PRESENT    = 1, // the id has a token
    OSC_TOK_ADDED      = 2, // an added token (matched in raw text)
    OSC_TOK_SPECIAL    = 4, // added and special (skipped when !parse_special)
    OSC_TOK_NORMALIZED = 8, // added token matched after normalisation
    OSC_TOK_BYTEMAP    = 16, // reachable by BPE (a valid byte-level string)
};

struct osc_tok_added {
    int32_t id;
    uint32_t off, len; // content in tok->pool
};

// One pre-tokenizer step: split every piece by a regex, keeping matches and
// gaps (HF Split behaviour "Isolated").
struct osc_tok_split {
    pcre2_code *       code;
    pcre2_match_data * md;
    char *             pattern; // for the hash and messages
    bool               literal;
};

#define OSC_TOK_MAX_SPLITS 8

struct osc_merge_map {
    uint64_t * keys; // (left << 32) | right; UINT64_MAX = empty
    int32_t *  rank;
    int32_t *  result;
    size_t     n_slots, n;
};

struct oscar_tokenizer {
    char * name; // source file, for messages

    // per id [0, n_ids)
    int32_t    n_ids, ids_cap;
    int32_t    max_ids; // ids must be below this (a loader bounds it by the tokens its file lists)
    uint8_t *  flags;
    uint32_t * tok_off; // into pool
    uint32_t * tok_len;
    uint8_t *  pool;
    size_t     pool_n, pool_cap;

    struct osc_bmap      vocab;   // token bytes -> id (OSC_TOK_BYTEMAP tokens)
    int32_t              byte_id[256]; // single-byte token, -1 when absent
    struct osc_merge_map merges;
    int32_t              n_merges;

    struct osc_tok_added * added;
    int32_t                n_added, added_cap;
    bool                   has_normalized_added;
    uint8_t                added_first[256]; // bit0: raw-matched, bit1: normalized-matched

    bool    nfc;
    bool    byte_level;
    bool    ignore_merges;
    int32_t unk_id;   // -1: bytes without a token are dropped
    bool    fuse_unk;
    struct osc_tok_split splits[OSC_TOK_MAX_SPLITS];
    int     n_splits;
    char    pre_name[64];

    int32_t bos, eos;
    bool    add_bos;

    uint64_t hash;
    char     desc[192];

    // encoder scratch (grown, never shrunk) and the per-word cache
    struct osc_bmap cache;
    int32_t *       cache_ids;
    size_t          cache_ids_n, cache_ids_cap;
    struct osc_sym * syms;
    size_t           syms_cap;
    struct osc_heap_ent * heap;
    size_t                heap_cap;
    int32_t *       word_ids;
    size_t          word_ids_cap;
};

// ---- builder (tok-build.c) ---------------------------------------------------
enum oscar_status osc_tok_new(const char * name, struct oscar_tokenizer ** out);
// Adds vocabulary entry `id` given as a byte-level string (UTF-8).
enum oscar_status osc_tok_add_vocab(struct oscar_tokenizer * tok, int32_t id, const char * s, size_t len);
// Adds merge number `rank` of two byte-level strings.
enum oscar_status osc_tok_add_merge(struct oscar_tokenizer * tok, const char * a, size_t alen,
                                    const char * b, size_t blen);
// Adds an added token (raw UTF-8 content).
enum oscar_status osc_tok_add_added(struct oscar_tokenizer * tok, int32_t id, const char * s, size_t len,
                                    bool special, bool normalized);
enum oscar_status osc_tok_add_split(struct oscar_tokenizer * tok, const char * pattern, bool literal);
// The GPT-2 regex used by ByteLevel(use_regex = true).
extern const char osc_tok_gpt2_regex[];
// Checks consistency, builds lookup tables and the hash.
enum oscar_status osc_tok_finish(struct oscar_tokenizer * tok);
// GGUF file -> tokenizer (tok-gguf.c); used by oscar_tokenizer_load().
enum oscar_status osc_tok_load_gguf_path(const char * path, struct oscar_tokenizer ** out);

#endif
