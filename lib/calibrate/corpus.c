// corpus.c - calibration corpus -> token stream (through lib/tokenizer's
// corpus reader: text files, JSONL with a field, directories), and the
// sequence plan. Refuses an empty corpus and (unless allow_short) a short one.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "calibrate/calibrate.h"
#include "tokenizer/corpus.h"
#include "util/fs.h"
#include "util/log.h"

enum oscar_status oscar_calib_corpus_load(struct oscar_tokenizer * tok, const char * path, const char * jsonl_field,
                                          int64_t max_tokens, struct oscar_calib_corpus * out) {
    memset(out, 0, sizeof(*out));
    struct oscar_corpus_opts opts = oscar_corpus_default_opts(tok);
    opts.jsonl_field   = jsonl_field;
    opts.parse_special = false; // calibration text is data, not a chat template
    opts.max_tokens    = max_tokens > 0 ? (size_t) max_tokens : 0;
    struct oscar_tokens       toks = { 0 };
    struct oscar_corpus_stats cs;
    enum oscar_status st = oscar_corpus_tokenize(tok, path, &opts, &toks, &cs);
    if (st == OSCAR_OK && toks.n == 0) st = osc_error(OSCAR_ERR_INVALID, "%s: corpus is empty (no tokens)", path);
    if (st != OSCAR_OK) {
        oscar_tokens_free(&toks);
        return st;
    }
    memcpy(out->sha256, cs.sha256_hex, sizeof cs.sha256_hex);
    out->tokens = toks.ids;
    out->n      = (int64_t) toks.n;
    out->n_docs = (int64_t) cs.n_docs;
    out->tokenizer_hash = oscar_tokenizer_hash_fnv1a64(tok);
    const char * base = strrchr(path, '/');
    base = base && base[1] ? base + 1 : path;
    snprintf(out->name, sizeof(out->name), "%s", base);
    return OSCAR_OK;
}

void oscar_calib_corpus_free(struct oscar_calib_corpus * c) {
    free(c->tokens);
    free(c->sources);
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
    out->corpus = c;
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
