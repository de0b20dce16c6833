// recall.c - layout and scoring of the verbatim-recall probe (recall.h). The
// forward passes that score it are the driver's (run.c), through each method's
// simulated cache.
#include "verify/recall.h"

#include <math.h>
#include <string.h>

static int32_t filler_len(const struct oscar_verify_recall * rc, int32_t k, int32_t T) {
    const struct oscar_recall_probe * p = &rc->probes[k];
    return T - rc->n_question - p->n_answer - p->n_needle;
}

enum oscar_status osc_recall_check(const struct oscar_verify_recall * rc, int32_t T, size_t n_filler) {
    if (rc->n_probes < 1 || rc->n_probes > OSCAR_RECALL_MAX_PROBES)
        return osc_error(OSCAR_ERR_INVALID, "recall: %d probes (1..%d)", rc->n_probes, OSCAR_RECALL_MAX_PROBES);
    for (int32_t k = 0; k < rc->n_probes; k++) {
        const struct oscar_recall_probe * p = &rc->probes[k];
        int32_t F = filler_len(rc, k, T);
        if (p->n_needle < 1 || p->n_answer < 1 || !(p->depth >= 0 && p->depth <= 1))
            return osc_error(OSCAR_ERR_INVALID, "recall: probe %d: empty needle or answer, or depth %g outside [0, 1]",
                             k, p->depth);
        if (F < 1 || (size_t) F > n_filler)
            return osc_error(OSCAR_ERR_INVALID, "recall: probe %d needs %d needle + %d question + %d answer tokens "
                             "and filler in a window of %d (filler %d of %zu corpus tokens)", k, p->n_needle,
                             rc->n_question, p->n_answer, T, F, n_filler);
    }
    return OSCAR_OK;
}

int32_t osc_recall_build(const struct oscar_verify_recall * rc, int32_t k, const int32_t * filler, int32_t T,
                         int32_t * seq, int32_t * answer_at) {
    const struct oscar_recall_probe * p = &rc->probes[k];
    int32_t F = filler_len(rc, k, T), pos = (int32_t) lround(p->depth * F), o = 0;
    memcpy(seq + o, filler, sizeof(int32_t) * (size_t) pos), o += pos;
    memcpy(seq + o, p->needle, sizeof(int32_t) * (size_t) p->n_needle), o += p->n_needle;
    memcpy(seq + o, filler + pos, sizeof(int32_t) * (size_t) (F - pos)), o += F - pos;
    memcpy(seq + o, rc->question, sizeof(int32_t) * (size_t) rc->n_question), o += rc->n_question;
    memcpy(seq + o, p->answer, sizeof(int32_t) * (size_t) p->n_answer);
    *answer_at = T - p->n_answer;
    return pos;
}

int32_t osc_recall_prefix(const float * logits, int32_t V, const int32_t * answer, int32_t n_answer) {
    for (int32_t a = 0; a < n_answer; a++) {
        const float * row = logits + (size_t) a * V;
        int32_t top = 0;
        for (int32_t j = 1; j < V; j++)
            if (row[j] > row[top]) top = j;
        if (top != answer[a]) return a;
    }
    return n_answer;
}
