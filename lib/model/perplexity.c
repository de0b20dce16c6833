// perplexity.c - sliding-window perplexity over a token stream (Hugging Face convention, see model.h).
//
// Each window is one forward pass without the LM head; the logits of only the
// scored rows are then computed in chunks of PPL_ROWS rows, so memory stays at
// PPL_ROWS x V floats however long the window. log-softmax is taken in double.
// It refuses n_ctx < 2, stride outside [1, n_ctx] and streams of < 2 tokens.
#include "util/blas.h"
#include <math.h>
#include <stdlib.h>

#include "model/model.h"
#include "util/log.h"

enum { PPL_ROWS = 64 };

// NLL (natural log) of target given one row of logits, in double.
static double row_nll(const float * lg, int32_t V, int32_t target) {
    float mx = lg[0];
    for (int32_t i = 1; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
    double sum = 0.0;
    for (int32_t i = 0; i < V; i++) sum += exp((double)lg[i] - (double)mx);
    return log(sum) + (double)mx - (double)lg[target];
}

// Scores targets [j0, j1) (stream indices) of the window starting at b, whose hidden states are h [n, C].
static enum oscar_status score_rows(const struct oscar_model * m, const float * h, const int32_t * tokens, int64_t b,
                                    int64_t j0, int64_t j1, float * buf, double * nll) {
    const int32_t C = m->config.n_embd, V = m->config.n_vocab;
    for (int64_t j = j0; j < j1; j += PPL_ROWS) {
        int32_t n = (int32_t)(j1 - j < PPL_ROWS ? j1 - j : PPL_ROWS);
        // rows j-1-b .. : the logits predicting tokens j ..
        osc_sgemm(0, CblasNoTrans, CblasTrans, n, V, C, 1.0f, h + (size_t)(j - 1 - b) * C, C, m->output,
                    C, 0.0f, buf, V);
        for (int32_t r = 0; r < n; r++) {
            double x = row_nll(buf + (size_t)r * V, V, tokens[j + r]);
            if (!isfinite(x)) return osc_error(OSCAR_ERR_NUMERIC, "perplexity: non-finite NLL at token %lld",
                                               (long long)(j + r));
            *nll += x;
        }
    }
    return OSCAR_OK;
}

enum oscar_status oscar_perplexity(const struct oscar_model * m, const int32_t * tokens, int64_t n_tokens,
                                   const struct oscar_ppl_params * params, struct oscar_ppl_result * out) {
    enum oscar_status st = OSCAR_ERR_INVALID;
    struct oscar_forward * f   = NULL;
    float *                buf = NULL;
    OSCAR_ASSERT(m && params && out);
    const int32_t n_ctx = params->n_ctx, stride = params->stride;
    if (n_ctx < 2 || stride < 1 || stride > n_ctx || n_tokens < 2 || !tokens) {
        st = osc_error(OSCAR_ERR_INVALID, "perplexity: need n_ctx >= 2, 1 <= stride <= n_ctx, >= 2 tokens "
                                          "(got n_ctx %d, stride %d, %lld tokens)",
                       n_ctx, stride, (long long)n_tokens);
        goto out;
    }
    struct oscar_forward_params fp = oscar_forward_default_params();
    fp.n_threads  = params->n_threads;
    fp.max_tokens = (int32_t)(n_tokens < n_ctx ? n_tokens : n_ctx);
    fp.attention  = params->attention;
    st            = oscar_forward_init(m, &fp, &f);
    if (st != OSCAR_OK) goto out;
    buf = malloc((size_t)PPL_ROWS * (size_t)m->config.n_vocab * sizeof(float));
    if (!buf) {
        st = osc_error(OSCAR_ERR_NOMEM, "perplexity: out of memory");
        goto out;
    }

    // count the windows to size the progress bar
    int64_t n_win = 0, total = 0;
    for (int64_t b = 0, prev = 0;; b += stride) {
        int64_t e = b + n_ctx < n_tokens ? b + n_ctx : n_tokens;
        total += e - (prev > b + 1 ? prev : b + 1);
        prev = e;
        n_win++;
        if (e == n_tokens || (params->max_windows > 0 && n_win == params->max_windows)) break;
    }

    struct osc_progress pr;
    osc_progress_init(&pr, "perplexity", "tok", total);
    double  t0 = osc_now(), nll = 0.0;
    int64_t scored = 0, prev_e = 0;
    for (int64_t w = 0; w < n_win; w++) {
        const int64_t b = w * stride, e = b + n_ctx < n_tokens ? b + n_ctx : n_tokens;
        const int32_t seq[2] = {0, (int32_t)(e - b)};
        struct oscar_batch batch = {.n_seq = 1, .seq_start = seq, .tokens = tokens + b, .pos = NULL};
        st = oscar_forward_run(f, &batch, NULL);
        if (st != OSCAR_OK) {
            st = osc_error_prefix(st, "perplexity window %lld", (long long)w);
            goto out;
        }
        const int64_t j0 = prev_e > b + 1 ? prev_e : b + 1;
        st = score_rows(m, oscar_forward_hidden(f, NULL), tokens, b, j0, e, buf, &nll);
        if (st != OSCAR_OK) goto out;
        scored += e - j0;
        prev_e = e;
        osc_progress_update(&pr, scored);
    }
    osc_progress_finish(&pr);
    out->nll_sum  = nll;
    out->n_scored = scored;
    out->ppl      = exp(nll / (double)scored);
    out->seconds  = osc_now() - t0;
    st            = OSCAR_OK;
out:
    free(buf);
    oscar_forward_free(f);
    return st;
}
