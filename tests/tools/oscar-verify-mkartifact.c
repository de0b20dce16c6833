// oscar-verify-mkartifact.c - test tool: a minimal OSCAR calibration
// (qqt_r_h_pbr for K, sst_r_h_pbr for V, fixed clips 0.96/0.92) straight from
// lib/stats + lib/rotation/fit, so oscar-verify can be tested before (and
// independently of) oscar-calibrate. Not a replacement for oscar-calibrate:
// no held-out split, no gate, no clip search.
//
// Usage: oscar-verify-mkartifact MODEL.gguf CORPUS.txt N_TOKENS SEQ_LEN OUT_DIR
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/oscar-artifact.h"
#include "model/model.h"
#include "rotation/fit.h"
#include "stats/stats.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/fs.h"

static enum oscar_status on_layer(void * user, const struct oscar_capture_layer * cap) {
    struct oscar_stats_chunk c = {.layer = cap->layer, .n_tokens = cap->n_tokens, .n_seq = cap->n_seq,
                                  .seq_start = cap->seq_start, .q = cap->q, .k = cap->k, .v = cap->v};
    return oscar_stats_add(user, &c);
}

static enum oscar_status run_pass(struct oscar_forward * f, const int32_t * ids, int64_t n, int32_t seq) {
    for (int64_t b = 0; b + seq <= n; b += seq) {
        int32_t ss[2] = {0, seq};
        struct oscar_batch batch = {.n_seq = 1, .seq_start = ss, .tokens = ids + b, .pos = NULL};
        enum oscar_status st = oscar_forward_run(f, &batch, NULL);
        if (st != OSCAR_OK) return st;
    }
    return OSCAR_OK;
}

int main(int argc, char ** argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s MODEL.gguf CORPUS.txt N_TOKENS SEQ_LEN OUT_DIR\n", argv[0]);
        return 2;
    }
    int64_t n_tok = atoll(argv[3]);
    int32_t seq = atoi(argv[4]);
    struct oscar_model * m = NULL;
    struct oscar_tokenizer * tok = NULL;
    struct oscar_stats * s = NULL;
    struct oscar_forward * f = NULL;
    struct oscar_artifact * a = NULL;
    char * text = NULL;
    int32_t * ids = NULL;
    size_t n_ids = 0, text_len = 0;
    int rc = 1;
    enum oscar_status st = oscar_model_load(argv[1], &m);
    if (st == OSCAR_OK) st = oscar_tokenizer_load(argv[1], &tok);
    if (st == OSCAR_OK) st = osc_read_file(argv[2], (size_t) 1 << 30, &text, &text_len);
    if (st == OSCAR_OK) st = oscar_tokenizer_encode(tok, text, text_len, false, &ids, &n_ids);
    if (st != OSCAR_OK) goto out;
    if ((int64_t) n_ids < n_tok) n_tok = (int64_t) n_ids;
    n_tok = (n_tok / seq) * seq;
    const struct oscar_model_config * c = &m->config;
    struct oscar_stats_params sp = oscar_stats_default_params();
    sp.n_layer = c->n_layer, sp.n_head = c->n_head, sp.n_head_kv = c->n_head_kv, sp.head_dim = c->head_dim;
    sp.kinds = OSCAR_STATS_QQT | OSCAR_STATS_SST;
    sp.max_tokens = seq;
    st = oscar_stats_init(&sp, &s);
    if (st != OSCAR_OK) goto out;
    struct oscar_capture_hook hook = {.want = NULL, .on_layer = on_layer, .user = s};
    struct oscar_forward_params fp = oscar_forward_default_params();
    fp.max_tokens = seq, fp.hook = &hook;
    st = oscar_forward_init(m, &fp, &f);
    for (int pass = 0; pass < 2 && st == OSCAR_OK; pass++) {
        st = run_pass(f, ids, n_tok, seq);
        if (st == OSCAR_OK) st = oscar_stats_end_pass(s);
    }
    if (st == OSCAR_OK)
        st = oscar_artifact_init(c->n_layer, c->n_head, c->n_head_kv, c->head_dim, false, false, false, &a);
    if (st == OSCAR_OK)
        st = oscar_fit_stats(s, OSCAR_STATS_QQT, OSCAR_GROUP_LAYER, OSCAR_COMP_R_H_PBR, a->k_rotation, a->k_eigenvalues,
                             NULL);
    if (st == OSCAR_OK)
        st = oscar_fit_stats(s, OSCAR_STATS_SST, OSCAR_GROUP_LAYER, OSCAR_COMP_R_H_PBR, a->v_rotation, a->v_eigenvalues,
                             NULL);
    if (st != OSCAR_OK) goto out;
    for (int32_t l = 0; l < c->n_layer; l++) a->k_clip[l] = 0.96f, a->v_clip[l] = 0.92f;
    char buf[64], tag[96];
    snprintf(tag, sizeof tag, "seq%lld_prompt%lld_group%d", (long long) n_tok, (long long) (n_tok / seq), c->head_dim);
    snprintf(buf, sizeof buf, "%lld", (long long) n_tok);
    const char * kv[][2] = {
        {"oscar.k_objective", "qqt_r_h_pbr"}, {"oscar.v_objective", "sst_r_h_pbr"}, {"oscar.composition", "r_h_pbr"},
        {"oscar.base_model", c->name}, {"oscar.base_model_sha256", m->source_sha256[0] ? m->source_sha256 : "unknown"},
        {"oscar.architecture", oscar_arch_name(c->arch)}, {"oscar.bits", "2"}, {"oscar.group_size", "64"},
        {"oscar.scale_dtype", "float32"}, {"oscar.sink", "32"}, {"oscar.recent", "128"}, {"oscar.clip_mode", "fixed"},
        {"oscar.k_clip_ratio", "0.96"}, {"oscar.v_clip_ratio", "0.92"}, {"oscar.calib_tag", tag},
        {"oscar.calib_corpus", argv[2]}, {"oscar.calib_sha256", "unknown"}, {"oscar.calib_tokens", buf},
        {"oscar.tokenizer_hash", "unknown"}, {"oscar.seed", "0"}, {"oscar.tool", "oscar-verify-mkartifact (test tool)"},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0] && st == OSCAR_OK; i++)
        st = oscar_artifact_set_meta(a, kv[i][0], kv[i][1]);
    if (st == OSCAR_OK) st = oscar_artifact_write(a, argv[5]);
    if (st == OSCAR_OK) {
        rc = 0;
        printf("wrote %s (%lld calibration tokens)\n", argv[5], (long long) n_tok);
    }
out:
    if (st != OSCAR_OK) fprintf(stderr, "oscar-verify-mkartifact: %s\n", oscar_last_error());
    oscar_artifact_free(a);
    oscar_forward_free(f);
    oscar_stats_free(s);
    oscar_tokenizer_free(tok);
    oscar_model_free(m);
    free(text);
    free(ids);
    return rc;
}
