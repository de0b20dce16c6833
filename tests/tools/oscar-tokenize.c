// oscar-tokenize - tokenizes files (or stdin) and prints the ids, one line per
// document, space-separated. Used by the tokenizer oracle tests.
//
//   oscar-tokenize --tokenizer PATH [--no-special] [--bench] [FILE...]
//
// PATH is a .gguf, a tokenizer.json or a directory holding one. Each FILE is
// one document (read whole, bytes as they are); with no FILE, stdin is one
// document. --bench prints MB/s and tokens/s to stderr (encode time only).
// Exit codes: 0 ok, 1 failure, 2 usage.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oscar.h"
#include "tokenizer/tokenizer.h"
#include "util/fs.h"

static int usage(void) {
    fprintf(stderr, "usage: oscar-tokenize --tokenizer PATH [--no-special] [--bench] [FILE...]\n");
    return 2;
}

static int read_stdin(char ** buf, size_t * len) {
    size_t cap = 1 << 16;
    *len = 0;
    *buf = malloc(cap);
    while (*buf) {
        size_t n = fread(*buf + *len, 1, cap - *len, stdin);
        *len += n;
        if (n == 0) return ferror(stdin) ? -1 : 0;
        if (*len == cap) {
            char * nb = realloc(*buf, cap *= 2);
            if (!nb) break;
            *buf = nb;
        }
    }
    return -1;
}

static void print_ids(const struct oscar_tokens * t) {
    for (size_t i = 0; i < t->n; i++) {
        printf(i ? " %d" : "%d", (int) t->ids[i]);
    }
    putchar('\n');
}

int main(int argc, char ** argv) {
    const char * tok_path = NULL;
    bool         special = true, bench = false;
    int          first = argc;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok_path = argv[++i];
        else if (!strcmp(argv[i], "--no-special")) special = false;
        else if (!strcmp(argv[i], "--bench")) bench = true;
        else if (argv[i][0] == '-' && argv[i][1]) return usage();
        else { first = i; break; }
    }
    if (!tok_path) return usage();
    struct oscar_tokenizer * tok;
    double t0 = osc_now();
    if (oscar_tokenizer_load(tok_path, &tok) != OSCAR_OK) {
        fprintf(stderr, "oscar-tokenize: %s\n", oscar_last_error());
        return 1;
    }
    double t_load = osc_now() - t0, t_enc = 0;
    size_t bytes = 0, tokens = 0;
    int    rc = 0;
    for (int i = first; i <= argc && rc == 0; i++) {
        if (i == argc && first != argc) break;
        char * buf = NULL;
        size_t len = 0;
        if (i == argc) {
            if (read_stdin(&buf, &len) != 0) { fprintf(stderr, "oscar-tokenize: cannot read stdin\n"); rc = 1; }
        } else if (osc_read_file(argv[i], (size_t) 1 << 32, &buf, &len) != OSCAR_OK) {
            fprintf(stderr, "oscar-tokenize: %s\n", oscar_last_error());
            rc = 1;
        }
        struct oscar_tokens t = { 0 };
        double t1 = osc_now();
        if (rc == 0 && oscar_tokenizer_encode_append(tok, buf, len, special, &t) != OSCAR_OK) {
            fprintf(stderr, "oscar-tokenize: %s: %s\n", i == argc ? "stdin" : argv[i], oscar_last_error());
            rc = 1;
        }
        t_enc += osc_now() - t1;
        if (rc == 0) print_ids(&t);
        bytes += len;
        tokens += t.n;
        oscar_tokens_free(&t);
        free(buf);
    }
    if (bench) {
        fprintf(stderr, "%s: hash %016llx; load %.3f s; %zu bytes -> %zu tokens in %.3f s: %.2f MB/s, %.0f tokens/s\n",
                oscar_tokenizer_describe(tok), (unsigned long long) oscar_tokenizer_hash_fnv1a64(tok), t_load, bytes,
                tokens, t_enc, t_enc > 0 ? (double) bytes / 1e6 / t_enc : 0.0,
                t_enc > 0 ? (double) tokens / t_enc : 0.0);
    }
    oscar_tokenizer_free(tok);
    return rc;
}
