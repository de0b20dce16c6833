// corpus-mix.c - several calibration sources (--corpus PATH@SHARE, repeated)
// -> one token stream laid out so that oscar_calib_plan_make needs no change:
//   [source 0 calibration][source 1 calibration]...[source 0 held-out][source 1 held-out]...
// Whole sequences are allotted to the sources by their shares (largest
// remainder, ties to the earlier source), so no sequence straddles two
// sources and which sequence comes from which source depends on the shares
// and the budget alone (not on threads). Only the very last calibration
// sequence may be short, as in a single-corpus plan, so --tokens is exact.
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate/calibrate.h"
#include "util/log.h"
#include "util/sha256.h"

enum oscar_status oscar_calib_source_parse(const char * arg, struct oscar_calib_source * out) {
    *out = (struct oscar_calib_source){.path = arg, .share = 0.0};
    const char * at = strrchr(arg, '@');
    // A share is a suffix of number characters only, so "a@b.txt" and
    // "dir@x/file" stay paths; "file@1" names a file that ends in "@1".
    if (!at || !at[1] || strspn(at + 1, "0123456789.eE+-") != strlen(at + 1)) return OSCAR_OK;
    char * end = NULL;
    errno = 0;
    double s = strtod(at + 1, &end);
    if (errno || *end || !isfinite(s) || s <= 0.0)
        return osc_error(OSCAR_ERR_INVALID, "--corpus '%s': share '%s' is not a positive number", arg, at + 1);
    if (at == arg) return osc_error(OSCAR_ERR_INVALID, "--corpus '%s': no path before the share", arg);
    out->share = s;
    out->path_len = (size_t) (at - arg);
    return OSCAR_OK;
}

// n items over weights w (sum 1) by largest remainder; ties to the lower index.
static void allot(int64_t n, const double * w, int32_t k, int64_t * out) {
    int64_t left = n;
    double frac[OSCAR_CALIB_MAX_SOURCES];
    for (int32_t i = 0; i < k; i++) {
        double q = (double) n * w[i];
        out[i] = (int64_t) floor(q);
        frac[i] = q - (double) out[i];
        left -= out[i];
    }
    for (; left > 0; left--) {
        int32_t best = 0;
        for (int32_t i = 1; i < k; i++)
            if (frac[i] > frac[best]) best = i;
        out[best]++;
        frac[best] = -1.0;
    }
}

enum oscar_status oscar_calib_corpus_load_mix(struct oscar_tokenizer * tok, const struct oscar_calib_source * src,
                                              int32_t n_src, const char * jsonl_field,
                                              const struct oscar_calib_params * p, struct oscar_calib_corpus * out) {
    memset(out, 0, sizeof(*out));
    if (n_src < 1 || n_src > OSCAR_CALIB_MAX_SOURCES)
        return osc_error(OSCAR_ERR_INVALID, "--corpus: %d sources (1..%d)", (int) n_src, OSCAR_CALIB_MAX_SOURCES);
    if (p->seq_len < 16 || p->n_heldout < 1 || p->n_tokens < 1)
        return osc_error(OSCAR_ERR_INVALID, "seq-len must be >= 16, held-out sequences >= 1, tokens >= 1");
    if (p->allow_short)
        return osc_error(OSCAR_ERR_INVALID, "--allow-short takes one --corpus without a share (a mix's shares "
                                            "would no longer hold)");
    double w[OSCAR_CALIB_MAX_SOURCES], sum = 0.0;
    int32_t n_given = 0;
    for (int32_t i = 0; i < n_src; i++) n_given += src[i].share > 0.0;
    if (n_given && n_given != n_src)
        return osc_error(OSCAR_ERR_INVALID, "--corpus: give a share to every source or to none (%d of %d have one)",
                         (int) n_given, (int) n_src);
    for (int32_t i = 0; i < n_src; i++) sum += (w[i] = n_given ? src[i].share : 1.0);
    for (int32_t i = 0; i < n_src; i++) w[i] /= sum;

    // Sequences per source; the last source with any gets the short tail.
    const int64_t L = p->seq_len, n_seq = (p->n_tokens + L - 1) / L;
    int64_t seqs[OSCAR_CALIB_MAX_SOURCES], held[OSCAR_CALIB_MAX_SOURCES], calib[OSCAR_CALIB_MAX_SOURCES];
    allot(n_seq, w, n_src, seqs);
    allot(p->n_heldout, w, n_src, held);
    int32_t last = -1;
    for (int32_t i = 0; i < n_src; i++) {
        calib[i] = seqs[i] * L;
        if (seqs[i]) last = i;
    }
    calib[last] -= n_seq * L - p->n_tokens;

    struct oscar_calib_corpus part[OSCAR_CALIB_MAX_SOURCES];
    memset(part, 0, sizeof part);
    json_t * list = json_array();
    enum oscar_status st = list ? OSCAR_OK : osc_error(OSCAR_ERR_NOMEM, "--corpus: out of memory");
    int64_t total = 0;
    for (int32_t i = 0; i < n_src && st == OSCAR_OK; i++) {
        char path[4096];
        size_t len = src[i].path_len ? src[i].path_len : strlen(src[i].path);
        if (len >= sizeof path) {
            st = osc_error(OSCAR_ERR_INVALID, "--corpus '%s': path too long", src[i].path);
            break;
        }
        memcpy(path, src[i].path, len);
        path[len] = '\0';
        for (int32_t j = 0; j < i && st == OSCAR_OK; j++) {
            size_t lj = src[j].path_len ? src[j].path_len : strlen(src[j].path);
            if (lj == len && !memcmp(src[j].path, path, len))
                st = osc_error(OSCAR_ERR_INVALID, "--corpus %s is given twice", path);
        }
        const int64_t need = calib[i] + held[i] * L;
        if (st == OSCAR_OK) st = oscar_calib_corpus_load(tok, path, jsonl_field, need > 0 ? need : 1, &part[i]);
        if (st != OSCAR_OK) {
            st = osc_error_prefix(st, "--corpus %s", path);
            break;
        }
        if (part[i].n < need) {
            st = osc_error(OSCAR_ERR_INVALID, "--corpus %s has %lld tokens, fewer than its share %.4g of --tokens "
                           "(%lld) + %lld held-out sequence(s) of %lld = %lld; lower its share or the budget",
                           path, (long long) part[i].n, w[i], (long long) calib[i], (long long) held[i], (long long) L,
                           (long long) need);
            break;
        }
        if (!seqs[i]) osc_warn("--corpus %s: its share %.4g gets no calibration sequence of the %lld", path, w[i],
                               (long long) n_seq);
        osc_info("corpus %s: share %.4g, %lld calibration tokens (%lld sequences), %lld held-out sequence(s)",
                 path, w[i], (long long) calib[i], (long long) seqs[i], (long long) held[i]);
        total += need;
        json_t * o = json_pack("{s:s, s:f, s:s, s:I, s:I}", "name", part[i].name, "share", w[i], "sha256",
                               part[i].sha256, "tokens", (json_int_t) calib[i], "heldout_tokens",
                               (json_int_t) (held[i] * L));
        if (!o || json_array_append_new(list, o)) st = osc_error(OSCAR_ERR_NOMEM, "--corpus: out of memory");
    }
    if (st == OSCAR_OK) {
        out->sources = json_dumps(list, JSON_COMPACT);
        out->tokens = malloc((size_t) total * sizeof(int32_t));
        if (!out->sources || !out->tokens) st = osc_error(OSCAR_ERR_NOMEM, "--corpus: out of memory");
    }
    if (st == OSCAR_OK) {
        int64_t o = 0;
        for (int32_t i = 0; i < n_src; i++) { // calibration parts, then held-out parts
            memcpy(out->tokens + o, part[i].tokens, (size_t) calib[i] * sizeof(int32_t));
            o += calib[i];
        }
        for (int32_t i = 0; i < n_src; i++) {
            memcpy(out->tokens + o, part[i].tokens + calib[i], (size_t) (held[i] * L) * sizeof(int32_t));
            o += held[i] * L;
            out->n_docs += part[i].n_docs;
        }
        out->n = total;
        out->tokenizer_hash = part[0].tokenizer_hash;
        // The mix's identity: the sources' hashes with their shares and token
        // counts, so a resume or store replay on another mix is refused.
        osc_sha256_hex(out->sources, strlen(out->sources), out->sha256);
        size_t u = 0;
        for (int32_t i = 0; i < n_src && u < sizeof out->name; i++) {
            int k = snprintf(out->name + u, sizeof out->name - u, "%s%s@%.4g", i ? "+" : "", part[i].name,
                             w[i]);
            u += k > 0 ? (size_t) k : 0;
        }
        if (u >= sizeof out->name) memcpy(out->name + sizeof out->name - 4, "...", 4); // a long list: see sources
    }
    for (int32_t i = 0; i < n_src; i++) oscar_calib_corpus_free(&part[i]);
    json_decref(list);
    if (st != OSCAR_OK) oscar_calib_corpus_free(out);
    return st;
}
