// corpus.c - calibration corpus -> token stream, and the sequence plan.
// Text files are tokenized paragraph by paragraph (blank-line separated, the
// separator kept as "\n\n" between paragraphs); JSONL files one record field
// at a time; directories in sorted file-name order. Stops once max_tokens ids
// exist. Refuses an empty corpus and (unless allow_short) a short one.
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "calibrate/calibrate.h"
#include "util/sha256.h"
#include "util/fs.h"
#include "util/log.h"

struct corpus_state {
    struct oscar_tokenizer * tok;
    struct oscar_tokens toks;
    int64_t max_tokens;
    int64_t n_docs;
    const char * field;
};

static bool full(const struct corpus_state * s) { return s->max_tokens > 0 && (int64_t) s->toks.n >= s->max_tokens; }

static enum oscar_status add_text(struct corpus_state * s, const char * text, size_t len) {
    if (len == 0 || full(s)) return OSCAR_OK;
    s->n_docs++;
    return oscar_tokenizer_encode_append(s->tok, text, len, false, &s->toks);
}

static enum oscar_status add_plain(struct corpus_state * s, const char * d, size_t n) {
    size_t i = 0;
    while (i < n && !full(s)) {
        const char * e = strstr(d + i, "\n\n"); // file buffers are NUL-terminated
        size_t end = e ? (size_t) (e - d) + 2 : n;
        while (end < n && d[end] == '\n') end++;
        enum oscar_status st = add_text(s, d + i, end - i);
        if (st != OSCAR_OK) return st;
        i = end;
    }
    return OSCAR_OK;
}

static enum oscar_status add_jsonl(struct corpus_state * s, const char * path, const char * d, size_t n) {
    size_t i = 0;
    int64_t line = 0;
    while (i < n && !full(s)) {
        const char * e = memchr(d + i, '\n', n - i);
        size_t end = e ? (size_t) (e - d) : n;
        line++;
        if (end > i) {
            json_error_t err;
            json_t * o = json_loadb(d + i, end - i, 0, &err);
            json_t * f = o ? json_object_get(o, s->field) : NULL;
            if (!f || !json_is_string(f)) {
                json_decref(o);
                return osc_error(OSCAR_ERR_FORMAT, "%s:%lld: %s", path, (long long) line,
                                 o ? "record has no string field" : err.text);
            }
            enum oscar_status st = add_text(s, json_string_value(f), json_string_length(f));
            json_decref(o);
            if (st != OSCAR_OK) return st;
        }
        i = end + 1;
    }
    return OSCAR_OK;
}

static bool ends_with(const char * s, const char * suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static int cmp_str(const void * a, const void * b) { return strcmp(*(char * const *) a, *(char * const *) b); }

// Corpus hash: sha256 of the file for one file; for a directory sha256 of the
// concatenated hex digests of its files in sorted order.
struct osc_hash_ctx_list {
    char * hexes;
    size_t n;
};

static enum oscar_status add_file(struct corpus_state * s, const char * path, struct osc_hash_ctx_list * hl) {
    char * data = NULL;
    size_t n = 0;
    enum oscar_status st = osc_read_file(path, (size_t) 1 << 32, &data, &n);
    if (st != OSCAR_OK) return st;
    char hex[65];
    osc_sha256_hex(data, n, hex);
    char * nh = realloc(hl->hexes, (hl->n + 1) * 64 + 1);
    if (!nh) {
        free(data);
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    hl->hexes = nh;
    memcpy(hl->hexes + hl->n * 64, hex, 64);
    hl->n++;
    hl->hexes[hl->n * 64] = '\0';
    st = ends_with(path, ".jsonl") ? add_jsonl(s, path, data, n) : add_plain(s, data, n);
    free(data);
    return st;
}

static enum oscar_status add_dir(struct corpus_state * s, const char * dir, struct osc_hash_ctx_list * hl) {
    DIR * d = opendir(dir);
    if (!d) return osc_error(OSCAR_ERR_IO, "%s: cannot open directory", dir);
    char ** names = NULL;
    size_t n = 0;
    struct dirent * e;
    enum oscar_status st = OSCAR_OK;
    while ((e = readdir(d)) != NULL) {
        if (!ends_with(e->d_name, ".txt") && !ends_with(e->d_name, ".jsonl")) continue;
        char ** nn = realloc(names, (n + 1) * sizeof(char *));
        if (!nn) {
            st = osc_error(OSCAR_ERR_NOMEM, "out of memory");
            break;
        }
        names = nn;
        names[n++] = osc_path_join(dir, e->d_name);
    }
    closedir(d);
    if (st == OSCAR_OK) qsort(names, n, sizeof(char *), cmp_str);
    for (size_t i = 0; i < n && st == OSCAR_OK && !full(s); i++) st = add_file(s, names[i], hl);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return st;
}

enum oscar_status oscar_calib_corpus_load(struct oscar_tokenizer * tok, const char * path, const char * jsonl_field,
                                          int64_t max_tokens, struct oscar_calib_corpus * out) {
    memset(out, 0, sizeof(*out));
    struct corpus_state s = {.tok = tok, .max_tokens = max_tokens, .field = jsonl_field ? jsonl_field : "text"};
    struct osc_hash_ctx_list hl = {0};
    struct stat sb;
    enum oscar_status st;
    if (stat(path, &sb) != 0) return osc_error(OSCAR_ERR_NOT_FOUND, "%s: corpus not found", path);
    st = S_ISDIR(sb.st_mode) ? add_dir(&s, path, &hl) : add_file(&s, path, &hl);
    if (st == OSCAR_OK && s.toks.n == 0) st = osc_error(OSCAR_ERR_INVALID, "%s: corpus is empty (no tokens)", path);
    if (st != OSCAR_OK) {
        oscar_tokens_free(&s.toks);
        free(hl.hexes);
        return st;
    }
    if (hl.n == 1) memcpy(out->sha256, hl.hexes, 64);
    else osc_sha256_hex(hl.hexes, hl.n * 64, out->sha256);
    out->sha256[64] = '\0';
    free(hl.hexes);
    if (max_tokens > 0 && (int64_t) s.toks.n > max_tokens) s.toks.n = (size_t) max_tokens;
    out->tokens = s.toks.ids;
    out->n = (int64_t) s.toks.n;
    out->n_docs = s.n_docs;
    const char * base = strrchr(path, '/');
    base = base && base[1] ? base + 1 : path;
    snprintf(out->name, sizeof(out->name), "%s", base);
    return OSCAR_OK;
}

void oscar_calib_corpus_free(struct oscar_calib_corpus * c) {
    free(c->tokens);
    memset(c, 0, sizeof(*c));
}

// ---- plan ----------------------------------------------------------------------------
enum oscar_status oscar_calib_plan_make(const struct oscar_calib_corpus * c, const struct oscar_calib_params * p,
                                        struct oscar_calib_plan * out) {
    memset(out, 0, sizeof(*out));
    if (p->seq_len < 16 || p->n_heldout < 1 || p->n_tokens < 1) {
        return osc_error(OSCAR_ERR_INVALID, "seq-len must be >= 16, held-out sequences >= 1, tokens >= 1");
    }
    int64_t held = (int64_t) p->n_heldout * p->seq_len;
    int64_t budget = p->n_tokens;
    if (c->n < budget + held) {
        if (!p->allow_short) {
            return osc_error(OSCAR_ERR_INVALID,
                             "corpus has %lld tokens, fewer than --tokens %lld + held-out %lld (%d x %d); use a "
                             "larger corpus or --allow-short",
                             (long long) c->n, (long long) budget, (long long) held, (int) p->n_heldout,
                             (int) p->seq_len);
        }
        budget = c->n - held;
        if (budget < p->seq_len) {
            return osc_error(OSCAR_ERR_INVALID, "corpus has only %lld tokens: not enough for one calibration and %d "
                                                "held-out sequences of %d",
                             (long long) c->n, (int) p->n_heldout, (int) p->seq_len);
        }
        osc_warn("corpus is short: calibrating on %lld tokens instead of %lld (--allow-short)", (long long) budget,
                 (long long) p->n_tokens);
    }
    int32_t n_seq = (int32_t) ((budget + p->seq_len - 1) / p->seq_len);
    out->seq_start = malloc(((size_t) n_seq + 1) * sizeof(int32_t));
    out->heldout_start = malloc(((size_t) p->n_heldout + 1) * sizeof(int32_t));
    if (!out->seq_start || !out->heldout_start) {
        oscar_calib_plan_free(out);
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    }
    for (int32_t s = 0; s <= n_seq; s++) out->seq_start[s] = (int32_t) (s == n_seq ? budget : (int64_t) s * p->seq_len);
    for (int32_t s = 0; s <= p->n_heldout; s++) out->heldout_start[s] = (int32_t) (budget + (int64_t) s * p->seq_len);
    out->n_seq = n_seq;
    out->n_heldout = p->n_heldout;
    out->tokens = c->tokens;
    out->n_tokens = budget;
    return OSCAR_OK;
}

void oscar_calib_plan_free(struct oscar_calib_plan * plan) {
    free(plan->seq_start);
    free(plan->heldout_start);
    memset(plan, 0, sizeof(*plan));
}

void oscar_calib_tag(const struct oscar_calib_plan * plan, int32_t group_size, char * buf, size_t n) {
    snprintf(buf, n, "seq%lld_prompt%d_group%d", (long long) plan->n_tokens, (int) plan->n_seq, (int) group_size);
}
