// corpus.h - read a calibration corpus and turn it into one token stream.
//
// A corpus path is
//   - a text file: the whole file is one document;
//   - a JSONL file: every non-empty line is a JSON object and its string
//     field opts.jsonl_field is one document. With jsonl_field NULL, files
//     named *.jsonl are read so with the field "text" and others as text;
//     with it set, every file is JSONL;
//   - a directory: its regular, non-hidden files sorted by name (strcmp),
//     not recursive, each read as above.
// Each document becomes [bos if opts.add_bos] + ids + [separator if >= 0];
// a document boundary is never merged across. Empty documents are skipped.
//
// Provenance: stats.sha256 is the SHA-256 of the raw bytes of every file
// read, concatenated in reading order, so for a single file it equals
// `sha256sum FILE`. Reading stops after the file in which max_tokens is
// reached (the stream is cut to exactly max_tokens; the hash covers the
// files read).
#ifndef OSCAR_TOKENIZER_CORPUS_H
#define OSCAR_TOKENIZER_CORPUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

#define OSCAR_CORPUS_JSONL_FIELD "text" // the field of *.jsonl files when none is named

struct oscar_corpus_opts {
    const char * jsonl_field;   // NULL: *.jsonl files use OSCAR_CORPUS_JSONL_FIELD, others are plain text
    int32_t      separator;     // token appended after each document; -1: none
    bool         add_bos;       // prepend the tokenizer's BOS to each document
    bool         parse_special; // match special tokens in the text
    size_t       max_tokens;    // 0: no limit
};

struct oscar_corpus_stats {
    size_t  n_files;
    size_t  n_docs;
    size_t  n_bytes;  // bytes of document text tokenized
    size_t  n_tokens; // length of the stream
    bool    truncated; // max_tokens cut the stream
    uint8_t sha256[32];
    char    sha256_hex[65];
};

// Defaults: text files, separator = eos of the tokenizer (or -1), no BOS,
// special tokens parsed, no limit.
struct oscar_corpus_opts oscar_corpus_default_opts(const struct oscar_tokenizer * tok);

// Appends the corpus stream to *out (caller frees with oscar_tokens_free).
// Errors name the file (and line for JSONL).
enum oscar_status oscar_corpus_tokenize(struct oscar_tokenizer * tok, const char * path,
                                        const struct oscar_corpus_opts * opts, struct oscar_tokens * out,
                                        struct oscar_corpus_stats * stats);

#endif
