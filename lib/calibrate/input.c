// input.c - opening what a calibration reads and running its rows through the
// stages (contract in input.h): the model, tokenizer and corpus, or an activation
// store with its provenance checked against them.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate/input.h"
#include "calibrate/random-source.h"
#include "util/log.h"

static bool on_cuda(const struct oscar_calib_input * in) { return in->device && strcmp(in->device, "cuda") == 0; }

// A mix: several sources, or one with a share.
static bool mixed(const struct oscar_calib_input * in) {
    return in->n_corpus > 1 || (in->n_corpus == 1 && in->corpus[0].share > 0);
}

enum oscar_status oscar_calib_input_open(const struct oscar_calib_input * in, uint64_t seed, struct oscar_model * shape,
                                         struct oscar_calib_engine * e, struct oscar_tokenizer ** tok) {
    *e = (struct oscar_calib_engine){.device = in->device, .fp32 = in->gpu_fp32};
    *tok = NULL;
    if (in->random_init && on_cuda(in)) {   // CUDA makes the weights on the device, layer by layer
        e->m = shape, e->random_on_device = true;
        return OSCAR_OK;
    }
    if (in->random_init) return oscar_model_open_random(&shape->config, seed, &e->m);
    // no LM head (no stage reads it); CUDA uploads the embedding from a copy it reads and frees
    // (open_lazy), so the host does not hold it through the pass (Qwen3-8B: 2.3 GiB of fp32)
    enum oscar_status st = in->from_act ? oscar_model_load(in->model, &e->m)
                           : on_cuda(in) ? oscar_model_open_lazy(in->model, &e->m)
                                         : oscar_model_open_no_head(in->model, &e->m);
    return st != OSCAR_OK ? st : oscar_tokenizer_load(in->tokenizer ? in->tokenizer : in->model, tok);
}

// The tokenizer's ids of the corpus must be rows of the model's embedding (a --tokenizer from
// another model would otherwise fail in the forward pass, after the corpus was read).
static enum oscar_status check_token_ids(const struct oscar_calib_input * in, const struct oscar_model * m,
                                         const struct oscar_calib_corpus * corpus) {
    for (int64_t i = 0; i < corpus->n; i++)
        if (corpus->tokens[i] < 0 || corpus->tokens[i] >= m->config.n_vocab)
            return osc_error(OSCAR_ERR_INVALID, "%s: token id %d (corpus token %lld) is outside %s's vocabulary "
                             "of %d: the tokenizer is not the model's", in->tokenizer ? in->tokenizer : in->model,
                             (int) corpus->tokens[i], (long long) i, m->source, (int) m->config.n_vocab);
    return OSCAR_OK;
}

// A new activation store at in->save_act described by the model, tokenizer and corpus.
static enum oscar_status store_create(const struct oscar_calib_input * in, const struct oscar_model * m,
                                      struct oscar_tokenizer * tok, const struct oscar_calib_corpus * corpus,
                                      const struct oscar_calib_params * p, struct oscar_actstore ** w) {
    const struct oscar_model_config * c = &m->config;
    struct oscar_actstore_info si = {.n_layer = c->n_layer, .n_head = c->n_head, .n_head_kv = c->n_head_kv,
                                     .head_dim = c->head_dim, .n_embd = c->n_embd, .seq_len = p->seq_len,
                                     .rope_theta = (double) c->rope_theta, .bf16 = p->capture_bf16};
    snprintf(si.model, sizeof(si.model), "%s", c->name[0] ? c->name : "unknown");
    snprintf(si.model_sha256, sizeof(si.model_sha256), "%s", m->source_sha256);
    snprintf(si.tokenizer_hash, sizeof(si.tokenizer_hash), "%016llx",
             (unsigned long long) oscar_tokenizer_hash_fnv1a64(tok));
    snprintf(si.corpus, sizeof(si.corpus), "%s", corpus->name);
    snprintf(si.corpus_sha256, sizeof(si.corpus_sha256), "%s", corpus->sha256);
    if (corpus->sources && strlen(corpus->sources) >= sizeof si.corpus_sources)
        return osc_error(OSCAR_ERR_INVALID, "--save-activations: the --corpus list is too long to store (%zu bytes "
                         "of JSON, at most %zu)", strlen(corpus->sources), sizeof si.corpus_sources - 1);
    snprintf(si.corpus_sources, sizeof si.corpus_sources, "%s", corpus->sources ? corpus->sources : "");
    snprintf(si.oscar_version, sizeof(si.oscar_version), "%s", OSCAR_CALIBRATE_VERSION);
    return oscar_actstore_create(in->save_act, &si, w);
}

// Corpus (or synthetic tokens for random_init) -> plan -> the layer-major pass with the finisher,
// writing the store if asked.
static enum oscar_status from_forward(const struct oscar_calib_input * in, const struct oscar_calib_engine * e,
                                      struct oscar_tokenizer * tok, struct oscar_calib_params * p,
                                      struct oscar_calib_rows * r) {
    struct oscar_actstore * w = NULL;
    const int64_t need = p->n_tokens + (int64_t) p->n_heldout * p->seq_len;
    const struct oscar_model * m = e->m;
    const double t_read = osc_now();
    enum oscar_status rc = in->random_init ? oscar_calib_synthetic_corpus(need, m->config.n_vocab, p->seed, &r->corpus)
                         : mixed(in) ? oscar_calib_corpus_load_mix(tok, in->corpus, in->n_corpus, in->jsonl_field, p,
                                                                   &r->corpus)
                                     : oscar_calib_corpus_load(tok, in->corpus[0].path, in->jsonl_field, need, &r->corpus);
    if (rc == OSCAR_OK && !in->random_init) rc = check_token_ids(in, m, &r->corpus);
    if (rc == OSCAR_OK) rc = oscar_calib_plan_make(&r->corpus, p, &r->plan);
    if (rc == OSCAR_OK) osc_debug("corpus: %lld tokens read and planned in %.2f s", (long long) r->corpus.n, osc_now() - t_read);
    if (rc == OSCAR_OK && in->save_act && (rc = store_create(in, m, tok, &r->corpus, p, &w)) == OSCAR_OK) p->act_out = w;
    if (rc != OSCAR_OK) return rc;
    if ((rc = oscar_calib_capture(e, &r->plan, p, &r->fin, &r->stats, &r->held, &r->t)) == OSCAR_OK && w) {
        double t0 = osc_now();
        rc = oscar_actstore_commit(w);   // frees w
        r->t.store += osc_now() - t0;
        w = NULL;
        if (rc == OSCAR_OK) osc_info("wrote activation store %s", in->save_act);
    }
    oscar_actstore_free(w);   // failure: removes the temporary file
    p->act_out = NULL;
    return rc;
}

// The store's provenance against the model and tokenizer in use: OSCAR_ERR_INVALID naming both.
static enum oscar_status check_store(const struct oscar_calib_input * in, const struct oscar_actstore_info * si,
                                     const struct oscar_model * m, struct oscar_tokenizer * tok) {
    char th[17];
    snprintf(th, sizeof(th), "%016llx", (unsigned long long) oscar_tokenizer_hash_fnv1a64(tok));
    if (si->model_sha256[0] && m->source_sha256[0] && strcmp(si->model_sha256, m->source_sha256))
        return osc_error(OSCAR_ERR_INVALID, "%s: made with model sha256 %.12s..., --model %s has %.12s...",
                         in->from_act, si->model_sha256, in->model, m->source_sha256);
    if (strcmp(si->tokenizer_hash, th))
        return osc_error(OSCAR_ERR_INVALID, "%s: made with tokenizer %s, --model's is %s", in->from_act,
                         si->tokenizer_hash, th);
    return OSCAR_OK;
}

// Store -> plan, held-out rows, both passes' statistics (no forward pass), then every layer finished.
static enum oscar_status from_store(const struct oscar_calib_input * in, const struct oscar_model * m,
                                    struct oscar_tokenizer * tok, struct oscar_calib_params * p,
                                    struct oscar_calib_rows * r) {
    enum oscar_status rc = oscar_actstore_open(in->from_act, &r->store);
    if (rc != OSCAR_OK) return rc;
    const struct oscar_actstore_info * si = oscar_actstore_get_info(r->store);
    if ((rc = check_store(in, si, m, tok)) != OSCAR_OK) return rc;
    snprintf(r->corpus.name, sizeof(r->corpus.name), "%s", si->corpus);
    snprintf(r->corpus.sha256, sizeof(r->corpus.sha256), "%s", si->corpus_sha256);
    if (si->corpus_sources[0] && !(r->corpus.sources = strdup(si->corpus_sources)))
        return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    p->seq_len = si->seq_len;
    p->capture_bf16 = si->bf16;
    if ((rc = oscar_calib_check_tiers(p)) != OSCAR_OK) return osc_error_prefix(rc, "%s", in->from_act);
    if ((rc = oscar_calib_plan_from_store(r->store, &r->plan)) != OSCAR_OK) return rc;
    p->n_heldout = r->plan.n_heldout;
    osc_info("%s: %lld calibration rows in %d sequences, %d held-out sequences, %s", in->from_act,
             (long long) r->plan.n_tokens, (int) r->plan.n_seq, (int) r->plan.n_heldout,
             si->bf16 ? "bfloat16" : "float32");
    if ((rc = oscar_calib_heldout_from_store(r->store, m, &r->held, &r->t)) != OSCAR_OK ||
        (rc = oscar_calib_accumulate_from_store(r->store, &r->plan, p, r->held.attn_scale, r->held.window, &r->stats,
                                                &r->t)) != OSCAR_OK ||
        (rc = oscar_calib_finish_begin(&r->fin, p, &r->held, r->store, &r->plan, &r->t)) != OSCAR_OK)
        return rc;
    return oscar_calib_finish_all(&r->fin, r->stats, &r->held);
}

enum oscar_status oscar_calib_input_pass(const struct oscar_calib_input * in, const struct oscar_calib_engine * e,
                                         struct oscar_tokenizer * tok, struct oscar_calib_params * p,
                                         struct oscar_calib_rows * rows) {
    memset(rows, 0, sizeof(*rows));
    return in->from_act ? from_store(in, e->m, tok, p, rows) : from_forward(in, e, tok, p, rows);
}

void oscar_calib_rows_free(struct oscar_calib_rows * rows) {
    oscar_calib_finish_free(&rows->fin);
    oscar_stats_free(rows->stats);
    oscar_calib_heldout_free(&rows->held);
    oscar_calib_plan_free(&rows->plan);
    oscar_calib_corpus_free(&rows->corpus);
    oscar_actstore_free(rows->store);
    memset(rows, 0, sizeof(*rows));
}
