// kv-omni.c - the OScaR cache rows of oscar-verify (method "oscar-omni"): K per token and per
// block through lib/quant's oscar-omni.c, since its omni-token norm couples the KV heads of a
// token and its per-channel quantizer couples the tokens of a block. V rows go through
// row_transform (kv-transform.c). The logit multiply-back is folded into the K row: the kernel
// computes n·(Hq)·ŷ, we give attention k̂ = H(n·ŷ) and q unrotated; q·H(n·ŷ) = n·(Hq)·ŷ
// because H is symmetric orthogonal and the product linear (equal up to fp32 rounding order).
#include "verify/metrics.h"

#include <stdlib.h>

static struct oscar_omni_params omni_params(const struct oscar_kv_transform * tf) {
    struct oscar_omni_params p = {.n_head_kv = tf->n_head_kv, .kivi = tf->kivi};
    return p;
}

enum oscar_status oscar_kv_transform_omni_k_token(const struct oscar_kv_transform * tf, const float * x, float * hp) {
    struct oscar_omni_params p = omni_params(tf);
    float norm;
    enum oscar_status st = oscar_omni_k_scale_token(&p, x, hp, &norm);
    if (st == OSCAR_OK) oscar_omni_k_unscale_token(&p, hp, norm, hp);   // the bf16 HP row, with its norm
    return st;
}

enum oscar_status oscar_kv_transform_omni_block(const struct oscar_kv_transform * tf, int64_t b0, const float * k,
                                                float * k_q, struct oscar_quant_stats * st) {
    struct oscar_omni_params p = omni_params(tf);
    int32_t B = tf->kivi.k_block_tokens;
    size_t rs = (size_t) tf->n_head_kv * tf->head_dim;
    float * y = malloc(sizeof(float) * ((size_t) B * rs + (size_t) B));
    uint8_t * codes = malloc(rs * (size_t) B / 4 + rs * 2 * sizeof(float));
    enum oscar_status s = OSCAR_OK;
    if (!y || !codes) s = osc_error(OSCAR_ERR_NOMEM, "oscar-omni: K block scratch");
    float * norm = y ? y + (size_t) B * rs : NULL;
    uint8_t * meta = codes ? codes + rs * (size_t) B / 4 : NULL;
    for (int32_t t = 0; t < B && s == OSCAR_OK; t++)
        s = oscar_omni_k_scale_token(&p, k + (size_t) (b0 + t) * rs, y + (size_t) t * rs, &norm[t]);
    if (s == OSCAR_OK) s = oscar_omni_quantize_k_block(&p, y, codes, meta, st);
    if (s == OSCAR_OK) {
        oscar_omni_dequantize_k_block(&p, codes, meta, y);
        for (int32_t t = 0; t < B; t++)
            oscar_omni_k_unscale_token(&p, y + (size_t) t * rs, norm[t], k_q + (size_t) (b0 + t) * rs);
    }
    free(y);
    free(codes);
    return s;
}
