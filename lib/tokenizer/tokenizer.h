// tokenizer.h - byte-level BPE tokenizer (GPT-2 family) from GGUF metadata or
// a Hugging Face tokenizer.json.
//
//   struct oscar_tokenizer * tok;
//   if (oscar_tokenizer_load("SmolLM2-135M-Instruct.Q4_1.gguf", &tok) != OSCAR_OK) {
//       fprintf(stderr, "%s\n", oscar_last_error());
//   }
//   int32_t * ids; size_t n;
//   oscar_tokenizer_encode(tok, "Hello world", 11, true, &ids, &n);
//   ...
//   free(ids);
//   oscar_tokenizer_free(tok);
//
// Pipeline (the same as Hugging Face `tokenizers` for the supported configs):
//   1. added tokens are cut out of the raw text (leftmost, then longest match);
//      special ones only when parse_special is true, non-special ones always;
//   2. the remaining segments are normalised (NFC when the tokenizer asks);
//   3. pre-tokenizer: a chain of regex splits (PCRE2, UTF + UCP), each
//      keeping both the matches and the text between them ("Isolated");
//   4. each piece is BPE-merged over its bytes (rank order, leftmost first).
//      Bytes that have no single-byte token are dropped, as HF does when the
//      model has no unk_token (SmolLM2 lacks e.g. 0xC0 and 0xF5..0xFF).
//
// Input text must be valid UTF-8: invalid input is rejected with
// OSCAR_ERR_INVALID and the byte offset (HF only ever sees Python str, which
// is valid by construction; replacing bytes silently would change what was
// calibrated on without a trace).
//
// Thread safety: a tokenizer holds a word cache and regex scratch, so one
// tokenizer must be used by one thread at a time (load one per thread).
#ifndef OSCAR_TOKENIZER_H
#define OSCAR_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

struct oscar_tokenizer;
struct osc_gguf;

// Loads a tokenizer from
//   - a .gguf file (tokenizer.ggml.* metadata; tokenizer.ggml.model "gpt2"),
//   - a tokenizer.json file (tokenizer_config.json next to it is read when
//     present, for bos/eos/add_bos),
//   - a directory holding tokenizer.json (or exactly one .gguf file).
// On success *out must be released with oscar_tokenizer_free().
enum oscar_status oscar_tokenizer_load(const char * path, struct oscar_tokenizer ** out);

// From an open GGUF file; nothing of `g` is referenced after return.
enum oscar_status oscar_tokenizer_from_gguf(const struct osc_gguf * g, struct oscar_tokenizer ** out);

// From tokenizer.json contents (`name` is used in error messages); config
// (tokenizer_config.json contents) may be NULL.
enum oscar_status oscar_tokenizer_from_json(const char * name, const char * json, size_t json_len,
                                            const char * config, size_t config_len,
                                            struct oscar_tokenizer ** out);

void oscar_tokenizer_free(struct oscar_tokenizer * tok);

// Growable id buffer: encode appends to it. ids is malloc'ed, owned by the
// caller, freed with oscar_tokens_free(). max_n (0 = no cap) bounds the
// number of ids: appending past it fails with OSCAR_ERR_INVALID.
struct oscar_tokens {
    int32_t * ids;
    size_t    n;
    size_t    cap;
    size_t    max_n;
};
void oscar_tokens_free(struct oscar_tokens * t);

// Tokenizes text[0..len) (need not be NUL-terminated) and appends the ids to
// *out. No BOS/EOS is added. parse_special=false treats special tokens
// (<|im_start|> ...) as plain text; non-special added tokens still match.
enum oscar_status oscar_tokenizer_encode_append(struct oscar_tokenizer * tok, const char * text, size_t len,
                                                bool parse_special, struct oscar_tokens * out);

// Convenience: *ids is malloc'ed (caller frees; NULL when *n == 0).
enum oscar_status oscar_tokenizer_encode(struct oscar_tokenizer * tok, const char * text, size_t len,
                                         bool parse_special, int32_t ** ids, size_t * n);

// ids -> bytes. *text is malloc'ed and NUL-terminated (caller frees); the
// bytes may be invalid UTF-8 when a multi-byte character is split across the
// given ids. skip_special drops special added tokens. An id outside
// [0, n_vocab) or an id without a token gives OSCAR_ERR_INVALID.
enum oscar_status oscar_tokenizer_decode(const struct oscar_tokenizer * tok, const int32_t * ids, size_t n,
                                         bool skip_special, char ** text, size_t * len);

// The bytes of one token (not NUL-terminated; owned by tok). false when the
// id has no token.
bool oscar_tokenizer_token_bytes(const struct oscar_tokenizer * tok, int32_t id, const char ** s, size_t * len);

// Id of a token given by its text (an added token's content or a vocabulary
// entry's decoded bytes), -1 when absent.
int32_t oscar_tokenizer_token_id(const struct oscar_tokenizer * tok, const char * s, size_t len);

int32_t oscar_tokenizer_n_vocab(const struct oscar_tokenizer * tok); // max id + 1
int32_t oscar_tokenizer_bos(const struct oscar_tokenizer * tok);     // -1 when none
int32_t oscar_tokenizer_eos(const struct oscar_tokenizer * tok);     // -1 when none
bool    oscar_tokenizer_add_bos(const struct oscar_tokenizer * tok); // model wants BOS prepended
bool    oscar_tokenizer_is_special(const struct oscar_tokenizer * tok, int32_t id);

// Provenance: FNV-1a 64-bit hash over a canonical serialisation of
// everything that determines encoding (every token's bytes and kind, the
// merges in rank order, added tokens, normaliser and pre-tokenizer regexes),
// so two tokenizers with equal hashes tokenize identically whatever file
// they came from. Not a cryptographic hash.
uint64_t oscar_tokenizer_hash_fnv1a64(const struct oscar_tokenizer * tok);

// A short human description ("byte-level BPE, 49152 tokens, 48900 merges,
// pre=smollm"); owned by tok.
const char * oscar_tokenizer_describe(const struct oscar_tokenizer * tok);

#endif
