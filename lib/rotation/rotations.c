// rotations.c - the one (layer, KV head) lookup of a model's rotations, and their
// allocation and copies (contract in rotations.h).
#include <stdlib.h>
#include <string.h>

#include "rotation/rotations.h"
#include "util/log.h"

enum oscar_status oscar_rotations_alloc(struct oscar_rotations * r, int32_t n_layer, int32_t n_head_kv,
                                        int32_t head_dim, int32_t n_rot, int32_t n_clip, bool with_mean,
                                        bool per_layer_choice) {
    memset(r, 0, sizeof(*r));
    if (n_layer < 1 || n_head_kv < 1 || head_dim < 1 || (n_rot != 1 && n_rot != n_head_kv) ||
        (n_clip != 1 && n_clip != n_head_kv))
        return osc_error(OSCAR_ERR_INVALID, "rotations: bad shape L %d Hkv %d D %d (%d matrices, %d clips per layer)",
                         (int) n_layer, (int) n_head_kv, (int) head_dim, (int) n_rot, (int) n_clip);
    r->n_layer = n_layer, r->n_head_kv = n_head_kv, r->head_dim = head_dim, r->n_rot = n_rot, r->n_clip = n_clip;
    const size_t L = (size_t) n_layer, LR = L * (size_t) n_rot, D = (size_t) head_dim, LC = L * (size_t) n_clip;
    r->k = calloc(LR * D * D, sizeof(float)), r->v = calloc(LR * D * D, sizeof(float));
    r->k_eig = calloc(LR * D, sizeof(float)), r->v_eig = calloc(LR * D, sizeof(float));
    r->k_clip = calloc(LC, sizeof(float)), r->v_clip = calloc(LC, sizeof(float));
    bool ok = r->k && r->v && r->k_eig && r->v_eig && r->k_clip && r->v_clip;
    if (with_mean) ok = ok && (r->k_mean = calloc(L * (size_t) n_head_kv * D, sizeof(float)));
    if (per_layer_choice) ok = ok && (r->head_layer = calloc(L, sizeof(int32_t)));
    if (!ok) {
        oscar_rotations_free(r);
        return osc_error(OSCAR_ERR_NOMEM, "rotations: out of memory (%d layers, %d KV heads, head_dim %d)",
                         (int) n_layer, (int) n_head_kv, (int) head_dim);
    }
    return OSCAR_OK;
}

void oscar_rotations_free(struct oscar_rotations * r) {
    free(r->k), free(r->v), free(r->k_eig), free(r->v_eig), free(r->k_clip), free(r->v_clip);
    free(r->k_mean), free(r->head_layer);
    memset(r, 0, sizeof(*r));
}

bool oscar_rotations_layer_per_head(const struct oscar_rotations * r, int32_t l) {
    return r->head_layer ? r->head_layer[l] != 0 : r->n_rot > 1;
}

int32_t oscar_rotations_n_head_layers(const struct oscar_rotations * r) {
    int32_t n = 0;
    for (int32_t l = 0; l < r->n_layer; l++) n += oscar_rotations_layer_per_head(r, l);
    return n;
}

// The slot of (l, h) among [L, n] per-layer entries: head h's own, or the layer's one.
static size_t slot(int32_t n, int32_t l, int32_t h) {
    return (size_t) l * (size_t) n + (size_t) (n > 1 ? h : 0);
}

float * oscar_rotations_k(const struct oscar_rotations * r, int32_t l, int32_t h) {
    const size_t D = (size_t) r->head_dim;
    return r->k + slot(r->n_rot, l, h) * D * D;
}

float * oscar_rotations_v(const struct oscar_rotations * r, int32_t l, int32_t h) {
    const size_t D = (size_t) r->head_dim;
    return r->v + slot(r->n_rot, l, h) * D * D;
}

float * oscar_rotations_k_eig(const struct oscar_rotations * r, int32_t l, int32_t h) {
    return r->k_eig + slot(r->n_rot, l, h) * (size_t) r->head_dim;
}

float * oscar_rotations_v_eig(const struct oscar_rotations * r, int32_t l, int32_t h) {
    return r->v_eig + slot(r->n_rot, l, h) * (size_t) r->head_dim;
}

float * oscar_rotations_k_clip(const struct oscar_rotations * r, int32_t l, int32_t h) {
    return r->k_clip + slot(r->n_clip, l, h);
}

float * oscar_rotations_v_clip(const struct oscar_rotations * r, int32_t l, int32_t h) {
    return r->v_clip + slot(r->n_clip, l, h);
}

float * oscar_rotations_k_mean(const struct oscar_rotations * r, int32_t l, int32_t h) {
    return r->k_mean ? r->k_mean + slot(r->n_head_kv, l, h) * (size_t) r->head_dim : NULL;
}

void oscar_rotations_set_layer_clips(struct oscar_rotations * r, int32_t l, float k, float v) {
    for (int32_t h = 0; h < r->n_clip; h++) *oscar_rotations_k_clip(r, l, h) = k, *oscar_rotations_v_clip(r, l, h) = v;
}

// A view's arrays are read only; the struct's members are not const because owners write them.
static float * unconst(const float * p) {
    union { const float * c; float * m; } u = {.c = p};
    return u.m;
}

struct oscar_rotations oscar_rotations_view(int32_t n_layer, int32_t n_head_kv, int32_t head_dim, int32_t n_rot,
                                            const float * k, const float * v, int32_t n_clip, const float * k_clip,
                                            const float * v_clip, const float * k_mean) {
    return (struct oscar_rotations){.n_layer = n_layer, .n_head_kv = n_head_kv, .head_dim = head_dim, .n_rot = n_rot,
                                    .n_clip = n_clip, .k = unconst(k), .v = unconst(v), .k_clip = unconst(k_clip),
                                    .v_clip = unconst(v_clip), .k_mean = unconst(k_mean)};
}

struct oscar_rotations oscar_rotations_layer_view(const struct oscar_rotations * r, int32_t l) {
    struct oscar_rotations v = *r;
    v.n_layer = 1;
    v.k = r->k ? oscar_rotations_k(r, l, 0) : NULL, v.v = r->v ? oscar_rotations_v(r, l, 0) : NULL;
    v.k_eig = r->k_eig ? oscar_rotations_k_eig(r, l, 0) : NULL;
    v.v_eig = r->v_eig ? oscar_rotations_v_eig(r, l, 0) : NULL;
    v.k_clip = r->k_clip ? oscar_rotations_k_clip(r, l, 0) : NULL;
    v.v_clip = r->v_clip ? oscar_rotations_v_clip(r, l, 0) : NULL;
    v.k_mean = oscar_rotations_k_mean(r, l, 0);
    v.head_layer = r->head_layer ? r->head_layer + l : NULL;
    return v;
}

void oscar_rotations_copy(struct oscar_rotations * dst, const struct oscar_rotations * src) {
    const size_t D = (size_t) dst->head_dim;
    for (int32_t l = 0; l < dst->n_layer; l++) {
        for (int32_t h = 0; h < dst->n_rot; h++) {
            memcpy(oscar_rotations_k(dst, l, h), oscar_rotations_k(src, l, h), D * D * sizeof(float));
            memcpy(oscar_rotations_v(dst, l, h), oscar_rotations_v(src, l, h), D * D * sizeof(float));
            if (dst->k_eig && src->k_eig)
                memcpy(oscar_rotations_k_eig(dst, l, h), oscar_rotations_k_eig(src, l, h), D * sizeof(float));
            if (dst->v_eig && src->v_eig)
                memcpy(oscar_rotations_v_eig(dst, l, h), oscar_rotations_v_eig(src, l, h), D * sizeof(float));
        }
        for (int32_t h = 0; dst->k_clip && src->k_clip && h < dst->n_clip; h++)
            *oscar_rotations_k_clip(dst, l, h) = *oscar_rotations_k_clip(src, l, h),
            *oscar_rotations_v_clip(dst, l, h) = *oscar_rotations_v_clip(src, l, h);
        for (int32_t h = 0; dst->k_mean && src->k_mean && h < dst->n_head_kv; h++)
            memcpy(oscar_rotations_k_mean(dst, l, h), oscar_rotations_k_mean(src, l, h), D * sizeof(float));
        if (dst->head_layer) dst->head_layer[l] = oscar_rotations_layer_per_head(src, l);
    }
}
