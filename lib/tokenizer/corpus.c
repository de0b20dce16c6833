// corpus.c - calibration corpus reader: text / JSONL / directory -> one token
// stream plus a provenance record (file count, bytes, SHA-256). It does not
// clean, unwrap or deduplicate text: recipes in datasets/ do that.
#include "tokenizer/corpus.h"

#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/sha256.h"
#include "util/error.h"
#include "util/fs.h"

#define MAX_FILE_BYTES ((size_t) 4 << 30)

struct oscar_corpus_opts oscar_corpus_default_opts(const struct oscar_tokenizer * tok) {
    return (struct oscar_corpus_opts){ .jsonl_field = NULL, .separator = oscar_tokenizer_eos(tok),
                                       .add_bos = false, .parse_special = true, .max_tokens = 0 };
}

struct reader {
    struct oscar_tokenizer *         tok;
    const struct oscar_corpus_opts * opts;
    struct oscar_tokens *            out;
    struct oscar_corpus_stats *      stats;
    struct osc_sha256                sha;
    size_t                           start_n; // out->n before this corpus
};

static bool full(const struct reader * r) {
    return r->opts->max_tokens && r->out->n - r->start_n >= r->opts->max_tokens;
}

static enum oscar_status push1(struct oscar_tokens * o, int32_t id, const char * path) {
    if (o->n == o->cap) {
        size_t    nc = o->cap ? o->cap * 2 : 4096;
        int32_t * p = realloc(o->ids, nc * sizeof *p);
        if (!p) return osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path);
        o->ids = p;
        o->cap = nc;
    }
    o->ids[o->n++] = id;
    return OSCAR_OK;
}

static enum oscar_status add_doc(struct reader * r, const char * path, const char * text, size_t len) {
    if (len == 0) {
        return OSCAR_OK; // an empty document contributes nothing, not even a separator
    }
    enum oscar_status st = OSCAR_OK;
    int32_t           bos = oscar_tokenizer_bos(r->tok);
    if (r->opts->add_bos && bos >= 0) st = push1(r->out, bos, path);
    if (st == OSCAR_OK) {
        st = oscar_tokenizer_encode_append(r->tok, text, len, r->opts->parse_special, r->out);
        if (st != OSCAR_OK) return osc_error_prefix(st, "%s", path);
    }
    if (st == OSCAR_OK && r->opts->separator >= 0) st = push1(r->out, r->opts->separator, path);
    if (st != OSCAR_OK) return st;
    r->stats->n_docs++;
    r->stats->n_bytes += len;
    return OSCAR_OK;
}

static enum oscar_status read_jsonl(struct reader * r, const char * path, const char * field, const char * data,
                                    size_t size) {
    size_t line_no = 0;
    for (size_t pos = 0; pos < size && !full(r);) {
        const char * nl = memchr(data + pos, '\n', size - pos);
        size_t       end = nl ? (size_t) (nl - data) : size;
        line_no++;
        size_t b = pos, e = end;
        while (b < e && (data[b] == ' ' || data[b] == '\t' || data[b] == '\r')) b++;
        pos = end + 1;
        if (b == e) continue;
        json_error_t err;
        json_t *     obj = json_loadb(data + b, e - b, 0, &err);
        json_t *     v = json_is_object(obj) ? json_object_get(obj, field) : NULL;
        enum oscar_status st = OSCAR_OK;
        if (!obj) {
            st = osc_error(OSCAR_ERR_FORMAT, "%s:%zu: invalid JSON: %s", path, line_no, err.text);
        } else if (!json_is_string(v)) {
            st = osc_error(OSCAR_ERR_FORMAT, "%s:%zu: no string field '%s'", path, line_no, field);
        } else {
            st = add_doc(r, path, json_string_value(v), json_string_length(v));
        }
        json_decref(obj);
        if (st != OSCAR_OK) return st;
    }
    return OSCAR_OK;
}

static enum oscar_status read_file(struct reader * r, const char * path) {
    char * data = NULL;
    size_t size = 0;
    enum oscar_status st = osc_read_file(path, MAX_FILE_BYTES, &data, &size);
    if (st != OSCAR_OK) return st;
    osc_sha256_update(&r->sha, data, size);
    r->stats->n_files++;
    // JSONL: every file when a field is named, else files named *.jsonl with their "text" field
    const size_t n = strlen(path);
    const char * field = r->opts->jsonl_field ? r->opts->jsonl_field
                         : n > 6 && strcmp(path + n - 6, ".jsonl") == 0 ? OSCAR_CORPUS_JSONL_FIELD
                                                                        : NULL;
    st = field ? read_jsonl(r, path, field, data, size) : add_doc(r, path, data, size);
    free(data);
    return st;
}

static int cmp_str(const void * a, const void * b) {
    return strcmp(*(const char * const *) a, *(const char * const *) b);
}

static enum oscar_status read_dir(struct reader * r, const char * path) {
    DIR * d = opendir(path);
    if (!d) return osc_error(OSCAR_ERR_IO, "%s: cannot open directory", path);
    char ** names = NULL;
    size_t  n = 0, cap = 0;
    enum oscar_status st = OSCAR_OK;
    for (struct dirent * e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char *      p = osc_path_join(path, e->d_name);
        struct stat sb;
        if (!p) { st = osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path); break; }
        if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) { free(p); continue; }
        if (n == cap) {
            char ** nn = realloc(names, (cap = cap ? cap * 2 : 64) * sizeof *nn);
            if (!nn) { free(p); st = osc_error(OSCAR_ERR_NOMEM, "%s: out of memory", path); break; }
            names = nn;
        }
        names[n++] = p;
    }
    closedir(d);
    if (st == OSCAR_OK && n == 0) st = osc_error(OSCAR_ERR_NOT_FOUND, "%s: no files in corpus directory", path);
    if (st == OSCAR_OK) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n && st == OSCAR_OK && !full(r); i++) st = read_file(r, names[i]);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return st;
}

enum oscar_status oscar_corpus_tokenize(struct oscar_tokenizer * tok, const char * path,
                                        const struct oscar_corpus_opts * opts, struct oscar_tokens * out,
                                        struct oscar_corpus_stats * stats) {
    memset(stats, 0, sizeof *stats);
    if (opts->separator >= oscar_tokenizer_n_vocab(tok)) {
        return osc_error(OSCAR_ERR_INVALID, "%s: separator token %d outside the vocabulary", path,
                         (int) opts->separator);
    }
    struct reader r = { .tok = tok, .opts = opts, .out = out, .stats = stats, .start_n = out->n };
    osc_sha256_init(&r.sha);
    struct stat sb;
    enum oscar_status st;
    if (stat(path, &sb) != 0) st = osc_error(OSCAR_ERR_NOT_FOUND, "%s: no such corpus file or directory", path);
    else st = S_ISDIR(sb.st_mode) ? read_dir(&r, path) : read_file(&r, path);
    if (st != OSCAR_OK) {
        osc_sha256_final(&r.sha, stats->sha256); // releases the digest context
        memset(stats->sha256, 0, sizeof stats->sha256);
        return st;
    }
    if (full(&r)) {
        stats->truncated = out->n - r.start_n > opts->max_tokens;
        out->n = r.start_n + opts->max_tokens;
    }
    stats->n_tokens = out->n - r.start_n;
    osc_sha256_final(&r.sha, stats->sha256);
    osc_sha256_digest_hex(stats->sha256, stats->sha256_hex);
    return OSCAR_OK;
}
