// metrics.c - per-layer attention error metrics (method.md §16 recommendation)
// and the simulated quantized-cache attention override.
//
// Both walk every (sequence, query head) pair in parallel; each pair writes its
// own fp64 partial sums, reduced afterwards in a fixed order, so results do
// not depend on the thread count. Refuses sequences that do not start at
// position 0 (the tiering is defined per whole sequence).
#include "verify/metrics.h"

#include "attention/attention.h"
#include "util/blas.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static float dotf(const float * a, const float * b, int32_t D) {
    float s[8] = {0};
    int32_t d = 0;
    for (; d + 8 <= D; d += 8)
        for (int32_t i = 0; i < 8; i++) s[i] += a[d + i] * b[d + i];
    float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; d < D; d++) r += a[d] * b[d];
    return r;
}

// The first key query t of a sequence sees: t - window + 1 in a sliding layer, else 0 (attention.h).
static int64_t first_key(int32_t window, int64_t t) { return window > 0 && t - window + 1 > 0 ? t - window + 1 : 0; }

static enum oscar_status check_input(const struct oscar_layer_input * in) {
    if (in->n_head < 1 || in->n_head_kv < 1 || in->n_head % in->n_head_kv || in->head_dim < 1 ||
        in->head_dim > OSCAR_MAX_HEAD_DIM || in->n_tokens < 0 || in->n_seq < 0 || !(in->attn_scale >= 0.0f) ||
        isinf(in->attn_scale) || in->window < 0)
        return osc_error(OSCAR_ERR_INVALID, "verify metrics: layer %d: bad shape Hq %d Hkv %d D %d T %d, score "
                         "scale %g or window %d", in->layer, in->n_head, in->n_head_kv, in->head_dim, in->n_tokens,
                         (double) in->attn_scale, in->window);
    if (in->seq_start[0] != 0 || in->seq_start[in->n_seq] != in->n_tokens)
        return osc_error(OSCAR_ERR_INVALID, "verify metrics: layer %d: sequences do not cover %d tokens", in->layer,
                         in->n_tokens);
    for (int32_t s = 0; s < in->n_seq; s++)
        if (in->seq_start[s + 1] < in->seq_start[s])
            return osc_error(OSCAR_ERR_INVALID, "verify metrics: layer %d: sequence %d has negative length",
                             in->layer, s);
    return OSCAR_OK;
}

struct pair_sums {
    double logit_num, logit_den, kl;
    int64_t n_pairs, n_pairs_int2;
};

// acc [D] += w·v [D] in fp64, each element on its own (vector lanes change no bits).
typedef double v4d __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline void axpy_f64(double * acc, double w, const float * v, int32_t D) {
    int32_t d = 0;
    for (; d + 4 <= D; d += 4) {
        v4f x;
        v4d a;
        memcpy(&x, v + d, sizeof x);
        memcpy(&a, acc + d, sizeof a);
        a += __builtin_convertvector(x, v4d) * w;
        memcpy(acc + d, &a, sizeof a);
    }
    for (; d < D; d++) acc[d] += w * (double) v[d];
}

// Per-thread scratch of metrics_head, [len] doubles each: exact scores, log-probabilities and
// probabilities of one query, and one cache's scores.
struct head_scratch { double * sc, * lp, * pp, * sh; };

// A cache whose four row sets are the layer's own K and V (an identity transform) attends exactly.
static bool is_exact(const struct oscar_layer_input * in, const struct oscar_metrics_cache * c) {
    return c->k_hp == in->k && c->k_q == in->k && c->v_hp == in->v && c->v_q == in->v;
}

// One (sequence, query head) pair: the exact attention of every query once, then that of each of
// the n caches (exact[i]: the cache is the layer's own K/V, so its side is the exact side, copied).
// Every sum runs in the order of the one-cache definition, so a cache's metrics do not depend on
// which other caches share the call. o/oh[i] [T, Hq, D]: this head's rows are written.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v3", "default"))) // AVX2 where the CPU has it
#endif
static void metrics_head(const struct oscar_layer_input * in, int32_t n, const struct oscar_metrics_cache * c,
                         const bool * exact, int32_t s, int32_t j, const struct head_scratch * w, float * o, float * const * oh,
                         struct pair_sums * ps) {
    int32_t D = in->head_dim, Hq = in->n_head, Hkv = in->n_head_kv, h = j / (Hq / Hkv);
    int64_t b = in->seq_start[s], len = in->seq_start[s + 1] - b;
    size_t krs = (size_t) Hkv * D, qrs = (size_t) Hq * D;
    double scale = oscar_attn_score_scale(in->attn_scale, D);
    double acc[OSCAR_MAX_HEAD_DIM], acch[OSCAR_MAX_HEAD_DIM];
    double * sc = w->sc, * lp = w->lp, * pp = w->pp;
    for (int32_t i = 0; i < n; i++) memset(&ps[i], 0, sizeof ps[i]);
    for (int64_t t = 0; t < len; t++) {
        const float * q = in->q + (size_t) (b + t) * qrs + (size_t) j * D;
        const int64_t f = first_key(in->window, t);   // keys f .. t
        double m = -INFINITY, z = 0.0;
        for (int64_t p = f; p <= t; p++) {
            double x = (double) dotf(q, in->k + (size_t) (b + p) * krs + (size_t) h * D, D) * scale;
            sc[p] = x;
            if (x > m) m = x;
        }
        for (int64_t p = f; p <= t; p++) z += exp(sc[p] - m);
        double lz = m + log(z);
        for (int32_t d = 0; d < D; d++) acc[d] = 0.0;
        for (int64_t p = f; p <= t; p++) {
            const float * vv = in->v + (size_t) (b + p) * krs + (size_t) h * D;
            lp[p] = sc[p] - lz, pp[p] = exp(lp[p]);
            axpy_f64(acc, pp[p], vv, D);
        }
        float * od = o + (size_t) (b + t) * qrs + (size_t) j * D;
        for (int32_t d = 0; d < D; d++) od[d] = (float) acc[d];
        for (int32_t i = 0; i < n; i++) {
            int64_t lo, hi;
            oscar_tier_int2_range(c[i].tiers, t, len, &lo, &hi);
            double mh = exact[i] ? m : (double) -INFINITY, kl = 0.0;
            const double * sh = exact[i] ? sc : w->sh;
            for (int64_t p = f; p <= t; p++) {
                bool i2 = p >= lo && p < hi;
                double y = sc[p];
                if (!exact[i]) {
                    size_t ko = (size_t) (b + p) * krs + (size_t) h * D;
                    y = (double) dotf(q, (i2 ? c[i].k_q : c[i].k_hp) + ko, D) * scale;
                    w->sh[p] = y;
                    if (y > mh) mh = y;
                }
                ps[i].logit_num += (y - sc[p]) * (y - sc[p]), ps[i].logit_den += sc[p] * sc[p];
                ps[i].n_pairs_int2 += i2;
            }
            ps[i].n_pairs += t - f + 1;
            float * ohd = oh[i] + (size_t) (b + t) * qrs + (size_t) j * D;
            if (exact[i]) {   // softmax and values are the exact ones; KL = 0
                for (int32_t d = 0; d < D; d++) ohd[d] = od[d];
                continue;
            }
            double zh = 0.0;
            for (int64_t p = f; p <= t; p++) zh += exp(sh[p] - mh);
            double lzh = mh + log(zh);
            for (int32_t d = 0; d < D; d++) acch[d] = 0.0;
            for (int64_t p = f; p <= t; p++) {
                size_t ko = (size_t) (b + p) * krs + (size_t) h * D;
                const float * vh = (p >= lo && p < hi ? c[i].v_q : c[i].v_hp) + ko;
                double lph = sh[p] - lzh, pph = exp(lph);
                kl += pp[p] * (lp[p] - lph);
                axpy_f64(acch, pph, vh, D);
            }
            ps[i].kl += kl > 0.0 ? kl : 0.0;   // KL >= 0; tiny negative values are rounding
            for (int32_t d = 0; d < D; d++) ohd[d] = (float) acch[d];
        }
    }
}

static double sq_rows(const float * a, const float * b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = b ? (double) a[i] - (double) b[i] : (double) a[i];
        s += d * d;
    }
    return s;
}

enum oscar_status oscar_verify_metrics_caches(const struct oscar_layer_input * in, int32_t n,
                                              const struct oscar_metrics_cache * c, int32_t n_threads,
                                              struct oscar_layer_metrics * out) {
    enum oscar_status st = check_input(in);
    if (st != OSCAR_OK) return st;
    if (n < 1 || n > OSCAR_METRICS_MAX_CACHES)
        return osc_error(OSCAR_ERR_INVALID, "verify metrics: layer %d: %d caches (1 to %d)", in->layer, n,
                         OSCAR_METRICS_MAX_CACHES);
    for (int32_t i = 0; i < n; i++) memset(&out[i], 0, sizeof out[i]);
    int32_t T = in->n_tokens, Hq = in->n_head, Hkv = in->n_head_kv, D = in->head_dim, C = in->n_embd;
    size_t krs = (size_t) Hkv * D, qrs = (size_t) Hq * D, TQ = (size_t) T * qrs;
    int32_t maxlen = 0;
    for (int32_t s = 0; s < in->n_seq; s++)
        if (in->seq_start[s + 1] - in->seq_start[s] > maxlen) maxlen = in->seq_start[s + 1] - in->seq_start[s];
    int32_t nt = n_threads > 0 ? n_threads : omp_get_max_threads();
    int64_t npairs = (int64_t) in->n_seq * Hq;
    bool exact[OSCAR_METRICS_MAX_CACHES];
    for (int32_t i = 0; i < n; i++) exact[i] = is_exact(in, &c[i]);
    float * o = malloc(sizeof(float) * (TQ * (size_t) (n + 1) + 1)), * oh[OSCAR_METRICS_MAX_CACHES];
    double * scr = malloc(sizeof(double) * 4 * ((size_t) maxlen + 1) * (size_t) nt);
    struct pair_sums * ps = calloc((size_t) npairs * (size_t) n + 1, sizeof *ps);
    float * y = NULL, * yh = NULL;
    if (!o || !scr || !ps) {
        st = osc_error(OSCAR_ERR_NOMEM, "verify metrics: layer %d: scratch for %d tokens x %d caches", in->layer, T,
                       n);
        goto out;
    }
    for (int32_t i = 0; i < n; i++) oh[i] = o + TQ * (size_t) (i + 1);
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int64_t i = 0; i < npairs; i++) {
        double * base = scr + (size_t) omp_get_thread_num() * 4 * ((size_t) maxlen + 1);
        const struct head_scratch w = {.sc = base, .lp = base + maxlen + 1, .pp = base + 2 * ((size_t) maxlen + 1),
                                       .sh = base + 3 * ((size_t) maxlen + 1)};
        metrics_head(in, n, c, exact, (int32_t) (i / Hq), (int32_t) (i % Hq), &w, o, oh, ps + (size_t) i * n);
    }
    for (int32_t k = 0; k < n; k++) {
        struct oscar_layer_metrics * m = &out[k];
        for (int64_t i = 0; i < npairs; i++) {
            const struct pair_sums * p = &ps[(size_t) i * n + k];
            m->logit_num += p->logit_num, m->logit_den += p->logit_den, m->kl_sum += p->kl;
            m->n_pairs += p->n_pairs, m->n_pairs_int2 += p->n_pairs_int2;
        }
        m->n_queries = (int64_t) T * Hq;
    }
    // K/V relative MSE: each row as the end of its sequence sees it.
    for (int32_t s = 0; s < in->n_seq; s++) {
        int64_t b = in->seq_start[s], len = in->seq_start[s + 1] - b, lo[OSCAR_METRICS_MAX_CACHES],
                hi[OSCAR_METRICS_MAX_CACHES];
        for (int32_t k = 0; k < n; k++) oscar_tier_int2_range(c[k].tiers, len - 1, len, &lo[k], &hi[k]);
        for (int64_t p = 0; p < len; p++) {
            size_t ko = (size_t) (b + p) * krs;
            double k_ref = sq_rows(in->k + ko, NULL, krs), v_ref = sq_rows(in->v + ko, NULL, krs);
            for (int32_t k = 0; k < n; k++) {
                bool i2 = p >= lo[k] && p < hi[k];
                struct oscar_layer_metrics * m = &out[k];
                m->k_err += sq_rows((i2 ? c[k].k_q : c[k].k_hp) + ko, in->k + ko, krs);
                m->v_err += sq_rows((i2 ? c[k].v_q : c[k].v_hp) + ko, in->v + ko, krs);
                m->k_ref += k_ref, m->v_ref += v_ref;
                m->n_rows += Hkv, m->n_rows_int2 += i2 ? Hkv : 0;
            }
        }
    }
    if (in->wo && T > 0) {
        // y = o·W_Oᵀ [T, C]; diff through W_O: (ô − o)·W_Oᵀ.
        y = malloc(sizeof(float) * (size_t) T * C), yh = malloc(sizeof(float) * (size_t) T * C);
        if (!y || !yh) {
            st = osc_error(OSCAR_ERR_NOMEM, "verify metrics: layer %d: W_O output", in->layer);
            goto out;
        }
        osc_sgemm(nt, CblasNoTrans, CblasTrans, T, C, (int) qrs, 1.0f, o, (int) qrs, in->wo, (int) qrs, 0.0f, y, C);
        double den = sq_rows(y, NULL, (size_t) T * C);
        for (int32_t k = 0; k < n; k++) {
            for (size_t i = 0; i < TQ; i++) oh[k][i] -= o[i];
            osc_sgemm(nt, CblasNoTrans, CblasTrans, T, C, (int) qrs, 1.0f, oh[k], (int) qrs, in->wo, (int) qrs, 0.0f,
                      yh, C);
            out[k].out_num = sq_rows(yh, NULL, (size_t) T * C);
            out[k].out_den = den;
        }
    }
    for (int32_t k = 0; k < n; k++) oscar_layer_metrics_finish(&out[k]);
out:
    free(o);
    free(scr);
    free(ps);
    free(y);
    free(yh);
    return st;
}

enum oscar_status oscar_verify_metrics_explicit(const struct oscar_layer_input * in,
                                                const struct oscar_tiering * tr, const float * k_hp,
                                                const float * v_hp, const float * k_q, const float * v_q,
                                                int32_t n_threads, struct oscar_layer_metrics * out) {
    const struct oscar_metrics_cache c = {.tiers = tr, .k_hp = k_hp, .v_hp = v_hp, .k_q = k_q, .v_q = v_q};
    return oscar_verify_metrics_caches(in, 1, &c, n_threads, out);
}

enum oscar_status oscar_verify_layer_metrics_methods(const struct oscar_kv_transform * tf, int32_t n,
                                                     const struct oscar_layer_input * in, int32_t n_threads,
                                                     struct oscar_layer_metrics * out) {
    enum oscar_status st = check_input(in);
    if (st != OSCAR_OK) return st;
    if (n < 1 || n > OSCAR_METRICS_MAX_CACHES)
        return osc_error(OSCAR_ERR_INVALID, "verify metrics: layer %d: %d methods (1 to %d)", in->layer, n,
                         OSCAR_METRICS_MAX_CACHES);
    for (int32_t i = 0; i < n; i++)
        if (in->n_head_kv != tf[i].n_head_kv || in->head_dim != tf[i].head_dim)
            return osc_error(OSCAR_ERR_INVALID,
                             "verify metrics: layer %d: transform '%s' is for Hkv %d D %d, input has %d/%d",
                             in->layer, tf[i].name, tf[i].n_head_kv, tf[i].head_dim, in->n_head_kv, in->head_dim);
    size_t sz = (size_t) in->n_tokens * in->n_head_kv * in->head_dim + 1;
    float * buf = malloc(sizeof(float) * 4 * sz * (size_t) n);
    if (!buf) return osc_error(OSCAR_ERR_NOMEM, "verify metrics: layer %d: %d tokens", in->layer, in->n_tokens);
    struct oscar_metrics_cache c[OSCAR_METRICS_MAX_CACHES];
    for (int32_t i = 0; i < n && st == OSCAR_OK; i++) {
        c[i] = (struct oscar_metrics_cache){.tiers = &tf[i].tiers, .k_hp = in->k, .v_hp = in->v, .k_q = in->k,
                                            .v_q = in->v};
        if (tf[i].quant == OSCAR_KVQ_IDENTITY) continue;   // the rows themselves: the exact attention, shared
        float * b = buf + 4 * sz * (size_t) i;
        st = oscar_kv_transform_layer(&tf[i], in->layer, in->n_tokens, in->n_seq, in->seq_start, in->k, in->v, b,
                                      b + sz, b + 2 * sz, b + 3 * sz, n_threads, NULL);
        c[i].k_hp = b, c[i].v_hp = b + sz, c[i].k_q = b + 2 * sz, c[i].v_q = b + 3 * sz;
    }
    if (st == OSCAR_OK) st = oscar_verify_metrics_caches(in, n, c, n_threads, out);
    free(buf);
    return st;
}

enum oscar_status oscar_verify_layer_metrics(const struct oscar_kv_transform * tf,
                                             const struct oscar_layer_input * in, int32_t n_threads,
                                             struct oscar_layer_metrics * out) {
    return oscar_verify_layer_metrics_methods(tf, 1, in, n_threads, out);
}

static double ratio(double a, double b) { return b > 0.0 ? a / b : 0.0; }

void oscar_layer_metrics_finish(struct oscar_layer_metrics * m) {
    m->k_rel_mse = ratio(m->k_err, m->k_ref);
    m->v_rel_mse = ratio(m->v_err, m->v_ref);
    m->logit_err = ratio(m->logit_num, m->logit_den);
    m->kl = m->n_queries > 0 ? m->kl_sum / (double) m->n_queries : 0.0;
    m->out_rel = ratio(m->out_num, m->out_den);
}

void oscar_layer_metrics_add(struct oscar_layer_metrics * d, const struct oscar_layer_metrics * s) {
    d->k_err += s->k_err, d->k_ref += s->k_ref, d->v_err += s->v_err, d->v_ref += s->v_ref;
    d->logit_num += s->logit_num, d->logit_den += s->logit_den, d->kl_sum += s->kl_sum;
    d->out_num += s->out_num, d->out_den += s->out_den;
    d->n_rows += s->n_rows, d->n_rows_int2 += s->n_rows_int2, d->n_queries += s->n_queries;
    d->n_pairs += s->n_pairs, d->n_pairs_int2 += s->n_pairs_int2;
    oscar_layer_metrics_finish(d);
}

// ---- the attention override ------------------------------------------------------------
enum { SIM_BQ = 32 };   // query rows (tokens of one head) per task

struct oscar_kv_sim {
    struct oscar_kv_transform tf;
    int32_t n_head, n_threads, max_tokens;
    float   attn_scale;                   // oscar_attn_scale_param of the model
    int32_t * window;                     // [n_layer] oscar_layer_window: the keys each layer's queries see
    float * k_hp, * v_hp, * k_q, * v_q;   // [max_tokens, Hkv, D] each
    float * kt, * kt_q;                   // [Hkv, kt_size]: one sequence's k_hp / k_q rows, transposed
    size_t  kt_size;                      // oscar_attn_keys_transposed_size(max_tokens, D)
    float * scratch;                      // [n_threads, scratch_per_thread]
    size_t  scratch_per_thread;           // oscar_attn_rows_scratch(SIM_BQ, max_tokens, D)
    struct oscar_quant_stats st[2];
};

enum oscar_status oscar_kv_sim_init(const struct oscar_kv_transform * tf, const struct oscar_model_config * cfg,
                                    int32_t max_tokens, int32_t n_threads, struct oscar_kv_sim ** out) {
    enum oscar_status st = oscar_kv_transform_check(tf);
    if (st != OSCAR_OK) return st;
    if (cfg->n_layer != tf->n_layer || cfg->n_head_kv != tf->n_head_kv || cfg->head_dim != tf->head_dim)
        return osc_error(OSCAR_ERR_INVALID, "kv sim: transform '%s' (L %d Hkv %d D %d) does not fit model %s", tf->name,
                         tf->n_layer, tf->n_head_kv, tf->head_dim, cfg->name);
    struct oscar_kv_sim * s = calloc(1, sizeof *s);
    if (!s) return osc_error(OSCAR_ERR_NOMEM, "kv sim");
    s->tf = *tf;
    s->n_head = cfg->n_head;
    s->attn_scale = oscar_attn_scale_param(cfg);
    s->n_threads = n_threads > 0 ? n_threads : omp_get_max_threads();
    s->max_tokens = max_tokens;
    size_t n = (size_t) max_tokens * tf->n_head_kv * tf->head_dim + 1;
    s->k_hp = malloc(sizeof(float) * 4 * n);
    s->scratch_per_thread = oscar_attn_rows_scratch(SIM_BQ, max_tokens, tf->head_dim);
    s->scratch = malloc(sizeof(float) * s->scratch_per_thread * (size_t) s->n_threads);
    s->kt_size = oscar_attn_keys_transposed_size(max_tokens, tf->head_dim);
    s->kt = malloc(sizeof(float) * 2 * s->kt_size * (size_t) tf->n_head_kv);
    s->kt_q = s->kt ? s->kt + s->kt_size * (size_t) tf->n_head_kv : NULL;
    s->window = malloc(sizeof(int32_t) * ((size_t) cfg->n_layer + 1));
    for (int32_t l = 0; s->window && l < cfg->n_layer; l++) s->window[l] = oscar_layer_window(cfg, l);
    if (!s->k_hp || !s->scratch || !s->kt || !s->window) {
        oscar_kv_sim_free(s);
        return osc_error(OSCAR_ERR_NOMEM, "kv sim: buffers for %d tokens", max_tokens);
    }
    s->v_hp = s->k_hp + n, s->k_q = s->k_hp + 2 * n, s->v_q = s->k_hp + 3 * n;
    *out = s;
    return OSCAR_OK;
}

void oscar_kv_sim_free(struct oscar_kv_sim * s) {
    if (!s) return;
    free(s->k_hp);
    free(s->scratch);
    free(s->kt);
    free(s->window);
    free(s);
}

void oscar_kv_sim_stats(const struct oscar_kv_sim * s, struct oscar_quant_stats * k, struct oscar_quant_stats * v) {
    if (k) *k = s->st[0];
    if (v) *v = s->st[1];
}

size_t oscar_kv_attend_scratch(int64_t max_len, int32_t D) { return oscar_attn_rows_scratch(1, max_len, D); }

void oscar_kv_attend_query(const float * q, int32_t D, float attn_scale, int64_t window, size_t rs, const float * k_hp,
                           const float * v_hp, const float * k_q, const float * v_q, int64_t t, int64_t lo, int64_t hi,
                           float * scratch, float * out) {
    const struct oscar_attn_keys kv = {.head_dim = D, .row_stride = rs, .k = k_hp, .v = v_hp, .k_alt = k_q,
                                       .v_alt = v_q, .scale = attn_scale, .window = window};
    oscar_attn_rows(&kv, 1, q, 0, &t, &lo, &hi, out, 0, scratch);
}

// Tokens [i0, i1) of sequence [b, b + len), query head j: each row attends to its keys per the tiering
// in one blocked call (oscar_attn_rows gives each row the bits it gets alone, as the oracle computes it).
static void sim_block(const struct oscar_kv_sim * s, int32_t layer, const struct oscar_capture_layer * in, int64_t b,
                      int64_t len, int32_t i0, int32_t i1, int32_t j, float * scratch, float * out) {
    const int32_t D = s->tf.head_dim, Hq = s->n_head, g = Hq / s->tf.n_head_kv;
    const size_t  rs = (size_t) s->tf.n_head_kv * D, o = (size_t) b * rs + (size_t) (j / g) * D, qs = (size_t) Hq * D;
    int64_t       t[SIM_BQ], lo[SIM_BQ], hi[SIM_BQ];
    for (int32_t i = i0; i < i1; i++) {
        t[i - i0] = i - b;
        oscar_tier_int2_range(&s->tf.tiers, i - b, len, &lo[i - i0], &hi[i - i0]);
    }
    const size_t kto = s->kt_size * (size_t) (j / g);
    const struct oscar_attn_keys kv = {.head_dim = D, .row_stride = rs, .k = s->k_hp + o, .v = s->v_hp + o,
                                       .k_alt = s->k_q + o, .v_alt = s->v_q + o, .kt = s->kt + kto,
                                       .kt_alt = s->kt_q + kto, .scale = s->attn_scale, .window = s->window[layer]};
    const size_t q0 = (size_t) i0 * qs + (size_t) j * D;
    oscar_attn_rows(&kv, i1 - i0, in->q + q0, qs, t, lo, hi, out + q0, qs, scratch);
}

static enum oscar_status sim_attend(void * user, int32_t layer, const struct oscar_capture_layer * in, float * out) {
    struct oscar_kv_sim * s = user;
    int32_t T = in->n_tokens, Hq = s->n_head;
    if (T > s->max_tokens)
        return osc_error(OSCAR_ERR_INVALID, "kv sim: batch of %d tokens > %d", T, s->max_tokens);
    for (int32_t q = 0; q < in->n_seq; q++)
        if (in->pos[in->seq_start[q]] != 0)
            return osc_error(OSCAR_ERR_UNSUPPORTED,
                             "kv sim: layer %d: sequence %d starts at position %d; feed whole sequences", layer, q,
                             in->pos[in->seq_start[q]]);
    enum oscar_status st = oscar_kv_transform_layer(&s->tf, layer, T, in->n_seq, in->seq_start, in->k, in->v, s->k_hp,
                                                    s->v_hp, s->k_q, s->v_q, s->n_threads, s->st);
    if (st != OSCAR_OK) return st;
    for (int32_t q = 0; q < in->n_seq; q++) {
        const int32_t b = in->seq_start[q], len = in->seq_start[q + 1] - b;
        const int32_t nb = (len + SIM_BQ - 1) / SIM_BQ, n_tasks = nb * Hq, Hkv = s->tf.n_head_kv, D = s->tf.head_dim;
        const size_t  rs = (size_t) Hkv * D;
#pragma omp parallel for schedule(static) num_threads(s->n_threads)
        for (int32_t x = 0; x < 2 * Hkv; x++) {   // both key buffers of every KV head, transposed once
            const float * src = (x < Hkv ? s->k_hp : s->k_q) + (size_t) b * rs + (size_t) (x % Hkv) * D;
            oscar_attn_keys_transpose(src, rs, len, D, (x < Hkv ? s->kt : s->kt_q) + s->kt_size * (size_t) (x % Hkv));
        }
#pragma omp parallel for schedule(dynamic, 1) num_threads(s->n_threads)
        for (int32_t task = 0; task < n_tasks; task++) {
            // later blocks see more keys: hand them out first
            const int32_t blk = nb - 1 - task / Hq, j = task % Hq;
            const int32_t i0 = b + blk * SIM_BQ, i1 = i0 + SIM_BQ < b + len ? i0 + SIM_BQ : b + len;
            sim_block(s, layer, in, b, len, i0, i1, j, s->scratch + s->scratch_per_thread * (size_t) omp_get_thread_num(),
                      out);
        }
    }
    return OSCAR_OK;
}

struct oscar_attention_override oscar_kv_sim_override(struct oscar_kv_sim * s) {
    struct oscar_attention_override o = {.attend = sim_attend, .user = s};
    return o;
}

// ---- candidate errors ------------------------------------------------------------------
// e [D] = x − ref; returns eᵀ S e (S [D, D] symmetric, fp64).
static double quad_err(const double * S, const float * x, const float * ref, int32_t D) {
    double e[OSCAR_MAX_HEAD_DIM], r = 0.0;
    for (int32_t a = 0; a < D; a++) e[a] = ref ? (double) x[a] - (double) ref[a] : (double) x[a];
    for (int32_t a = 0; a < D; a++) {
        double sa = 0.0;
        for (int32_t b = 0; b < D; b++) sa += S[(size_t) a * D + b] * e[b];
        r += e[a] * sa;
    }
    return r;
}

// K errors of one (sequence s, KV head h): walking t backwards, S_t = Σ_{i ≥ t}
// Σ_{j ∈ J(h)} q_{i,j} q_{i,j}ᵀ (i < t + W in a sliding layer of window W), so the logit error of key row t summed over
// every query that sees it is e_tᵀ S_t e_t (the INT2 set is query-independent).
// num [n_cand], den: this pair's sums (unscaled by 1/D).
static void cand_k_pair(const struct oscar_layer_input * in, const struct oscar_tiering * tr, int32_t s, int32_t h,
                        int32_t n_cand, const float * k_hp, const float * const * k_q, double * S, double * num,
                        double * den) {
    int32_t D = in->head_dim, Hq = in->n_head, Hkv = in->n_head_kv, g = Hq / Hkv;
    int64_t b = in->seq_start[s], len = in->seq_start[s + 1] - b, lo, hi;
    size_t krs = (size_t) Hkv * D, qrs = (size_t) Hq * D;
    oscar_tier_int2_range(tr, len - 1, len, &lo, &hi);
    memset(S, 0, sizeof(double) * (size_t) D * D);
    for (int32_t c = 0; c < n_cand; c++) num[c] = 0.0;
    *den = 0.0;
    for (int64_t t = len - 1; t >= 0; t--) {
        for (int32_t j = h * g; j < (h + 1) * g; j++) {
            const float * q = in->q + (size_t) (b + t) * qrs + (size_t) j * D;
            for (int32_t a = 0; a < D; a++)
                for (int32_t c = 0; c < D; c++) S[(size_t) a * D + c] += (double) q[a] * (double) q[c];
        }
        // a sliding layer: query t + W no longer sees key t (a running fp64 sum, the window's queries)
        for (int32_t j = h * g; in->window > 0 && t + in->window < len && j < (h + 1) * g; j++) {
            const float * q = in->q + (size_t) (b + t + in->window) * qrs + (size_t) j * D;
            for (int32_t a = 0; a < D; a++)
                for (int32_t c = 0; c < D; c++) S[(size_t) a * D + c] -= (double) q[a] * (double) q[c];
        }
        size_t ko = (size_t) (b + t) * krs + (size_t) h * D;
        const float * k = in->k + ko;
        *den += quad_err(S, k, NULL, D);
        if (t >= lo && t < hi) {
            for (int32_t c = 0; c < n_cand; c++) num[c] += quad_err(S, k_q[c] + ko, k, D);
        } else if (n_cand > 0) {
            double e = quad_err(S, k_hp + ko, k, D);   // HP rows: the same for every candidate
            for (int32_t c = 0; c < n_cand; c++) num[c] += e;
        }
    }
}

// Exact attention weights of (sequence, query head j): P [len, len], row t =
// softmax(q_t·k_pᵀ·scale) over the keys t sees (p <= t, within the window; fp64 exp, as
// metrics_head), zeros elsewhere.
static void cand_probs(const struct oscar_layer_input * in, int64_t b, int64_t len, int32_t j, int32_t nt, float * P) {
    int32_t D = in->head_dim, Hq = in->n_head, h = j / (Hq / in->n_head_kv);
    size_t krs = (size_t) in->n_head_kv * D, qrs = (size_t) Hq * D;
    double scale = oscar_attn_score_scale(in->attn_scale, D);
#pragma omp parallel for schedule(dynamic, 8) num_threads(nt)
    for (int64_t t = 0; t < len; t++) {
        const float * q = in->q + (size_t) (b + t) * qrs + (size_t) j * D;
        float * row = P + (size_t) t * len;
        const int64_t f = first_key(in->window, t);   // keys f .. t; zeros outside
        double m = -INFINITY, z = 0.0;
        for (int64_t p = 0; p < f; p++) row[p] = 0.0f;
        for (int64_t p = f; p <= t; p++) {
            double x = (double) dotf(q, in->k + (size_t) (b + p) * krs + (size_t) h * D, D) * scale;
            row[p] = (float) x;   // held as float only until rescaled below
            if (x > m) m = x;
        }
        for (int64_t p = f; p <= t; p++) z += exp((double) row[p] - m);
        double lz = m + log(z);
        for (int64_t p = f; p <= t; p++) row[p] = (float) exp((double) row[p] - lz);
        for (int64_t p = t + 1; p < len; p++) row[p] = 0.0f;
    }
}

static double energy_wo(const float * o, int32_t lda, int32_t T, int32_t K, const float * wo, int32_t ldw, int32_t C,
                        float * y, int32_t nt) {
    osc_sgemm(nt, CblasNoTrans, CblasTrans, T, C, K, 1.0f, o, lda, wo, ldw, 0.0f, y, C);
    return sq_rows(y, NULL, (size_t) T * C);
}

enum oscar_status oscar_verify_candidate_errors(const struct oscar_layer_input * in,
                                                const struct oscar_tiering * tr, int32_t n_cand,
                                                const float * k_hp, const float * v_hp,
                                                const float * const * k_q, const float * const * v_q,
                                                bool v_per_head, int32_t n_threads, double * k_num,
                                                double * k_den, double * v_num, double * v_den) {
    return oscar_verify_candidate_errors_part(in, tr, n_cand, 0, n_cand, k_hp, v_hp, k_q, v_q, v_per_head, n_threads,
                                              k_num, k_den, v_num, v_den);
}

enum oscar_status oscar_verify_candidate_errors_part(const struct oscar_layer_input * in,
                                                     const struct oscar_tiering * tr, int32_t n_cand, int32_t c0,
                                                     int32_t c1, const float * k_hp, const float * v_hp,
                                                     const float * const * k_q, const float * const * v_q,
                                                     bool v_per_head, int32_t n_threads, double * k_num,
                                                     double * k_den, double * v_num, double * v_den) {
    enum oscar_status st = check_input(in);
    if (st != OSCAR_OK) return st;
    if (tr->mode == OSCAR_TIERS_DECODE)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "candidate errors: layer %d: the DECODE tiering is query-dependent",
                         in->layer);
    if (!in->wo || n_cand < 1 || c0 < 0 || c1 < c0 || c1 > n_cand)
        return osc_error(OSCAR_ERR_INVALID, "candidate errors: layer %d: need W_O, at least one candidate and a "
                         "part within them (%d-%d of %d)", in->layer, (int) c0, (int) c1, (int) n_cand);
    const int32_t n = c1 - c0;   // this call's candidates; n_cand fixes the layout their bits depend on
    int32_t T = in->n_tokens, Hq = in->n_head, Hkv = in->n_head_kv, D = in->head_dim, C = in->n_embd;
    int32_t g = Hq / Hkv, nt = n_threads > 0 ? n_threads : omp_get_max_threads(), W = (n_cand + 1) * D;
    size_t krs = (size_t) Hkv * D, qrs = (size_t) Hq * D, TQ = (size_t) T * qrs;
    int32_t maxlen = 0;
    for (int32_t s = 0; s < in->n_seq; s++)
        if (in->seq_start[s + 1] - in->seq_start[s] > maxlen) maxlen = in->seq_start[s + 1] - in->seq_start[s];
    // V's product P·[v | E_0 | ...]: the column tiles of the whole grid's product that hold this part's
    // blocks (block 0: the exact o, for v_den), so every column gets the whole product's bits (blas.h)
    const int32_t b0 = v_den ? 0 : c0 + 1, b1 = c1 + 1;   // blocks [b0, b1): 0 if v_den, then c0+1 .. c1
    const int32_t lo = b1 > b0 ? b0 * D / OSC_GEMM_TILE_N * OSC_GEMM_TILE_N : 0;
    int32_t hi = b1 > b0 ? (b1 * D + OSC_GEMM_TILE_N - 1) / OSC_GEMM_TILE_N * OSC_GEMM_TILE_N : 0;
    if (hi > W) hi = W;
    int64_t nkp = (int64_t) in->n_seq * Hkv;
    double * kpart = calloc((size_t) nkp * (size_t) (n + 1) + 1, sizeof(double));
    double * Sbuf = malloc(sizeof(double) * (size_t) D * D * (size_t) nt);
    float * P = malloc(sizeof(float) * ((size_t) maxlen * maxlen + 1));
    float * E = calloc((size_t) maxlen * W + 1, sizeof(float)), * O = malloc(sizeof(float) * ((size_t) maxlen * W + 1));
    float * oe = malloc(sizeof(float) * (TQ * (size_t) (n + 1) + 1));   // [1 + n][T, Hq, D]; 0 = exact o
    float * y = malloc(sizeof(float) * ((size_t) T * C + 1));
    if (!kpart || !Sbuf || !P || !E || !O || !oe || !y) {
        st = osc_error(OSCAR_ERR_NOMEM, "candidate errors: layer %d: %d candidates x %d tokens", in->layer, n_cand, T);
        goto out;
    }
    // K: one task per (sequence, KV head), own partial sums, fixed-order reduction.
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int64_t i = 0; i < nkp; i++) {
        double * pp = kpart + (size_t) i * (size_t) (n + 1);
        cand_k_pair(in, tr, (int32_t) (i / Hkv), (int32_t) (i % Hkv), n, k_hp, k_q + c0,
                    Sbuf + (size_t) omp_get_thread_num() * D * D, pp, pp + n);
    }
    for (int32_t c = c0; c < c1; c++)
        for (int32_t hh = 0; hh < Hkv; hh++) k_num[(size_t) c * Hkv + hh] = 0.0;
    for (int32_t hh = 0; hh < Hkv; hh++) k_den[hh] = 0.0;
    // (q·e)²·scale² as (q·e)² / scale⁻²: scale⁻² is exactly D by default (the bits of the plain 1/D).
    const double inv_s2 = in->attn_scale > 0.0f ? 1.0 / ((double) in->attn_scale * (double) in->attn_scale) : (double) D;
    for (int64_t i = 0; i < nkp; i++) {
        const double * pp = kpart + (size_t) i * (size_t) (n + 1);
        int32_t hh = (int32_t) (i % Hkv);
        for (int32_t c = 0; c < n; c++) k_num[(size_t) (c0 + c) * Hkv + hh] += pp[c] / inv_s2;
        k_den[hh] += pp[n] / inv_s2;
    }
    // V: per (sequence, query head) the exact weights P, then [o | A·E_0 | ... ] = P·[v | E_0 | ...]
    // over the tiles [lo, hi); columns of other candidates in them stay zero (a column's bits do not
    // depend on its neighbours').
    for (int32_t s = 0; s < in->n_seq && hi > lo; s++) {
        int64_t b = in->seq_start[s], len = in->seq_start[s + 1] - b, plo, phi;
        if (len == 0) continue;
        oscar_tier_int2_range(tr, len - 1, len, &plo, &phi);
        for (int32_t j = 0; j < Hq; j++) {
            int32_t h = j / g;
            cand_probs(in, b, len, j, nt, P);
            for (int64_t p = 0; p < len; p++) {
                size_t ko = (size_t) (b + p) * krs + (size_t) h * D;
                const float * v = in->v + ko;
                float * er = E + (size_t) p * W;
                if (b0 == 0) memcpy(er, v, sizeof(float) * (size_t) D);
                for (int32_t c = c0; c < c1; c++) {
                    const float * vh = (p >= plo && p < phi ? v_q[c] : v_hp) + ko;
                    for (int32_t d = 0; d < D; d++) er[(size_t) (c + 1) * D + d] = vh[d] - v[d];
                }
            }
            osc_sgemm(nt, CblasNoTrans, CblasNoTrans, (int) len, hi - lo, (int) len, 1.0f, P, (int) len, E + lo, W,
                      0.0f, O + lo, W);
            for (int64_t t = 0; t < len; t++)
                for (int32_t bk = b0; bk < b1; bk++)   // block bk to slot 0 (exact) or 1 + its candidate's place
                    if (bk == 0 || bk > c0) memcpy(oe + (size_t) (bk == 0 ? 0 : bk - c0) * TQ + (size_t) (b + t) * qrs + (size_t) j * D,
                           O + (size_t) t * W + (size_t) bk * D, sizeof(float) * (size_t) D);
        }
    }
    if (v_den) *v_den = T > 0 ? energy_wo(oe, (int32_t) qrs, T, (int32_t) qrs, in->wo, (int32_t) qrs, C, y, nt) : 0.0;
    for (int32_t c = c0; c < c1; c++) {
        const float * ec = oe + (size_t) (1 + c - c0) * TQ;
        double * vn = v_num + (size_t) c * (Hkv + 1);
        vn[Hkv] = !v_per_head && T > 0 ? energy_wo(ec, (int32_t) qrs, T, (int32_t) qrs, in->wo, (int32_t) qrs, C, y, nt)
                                       : 0.0;
        for (int32_t hh = 0; hh < Hkv; hh++)
            vn[hh] = v_per_head && T > 0 ? energy_wo(ec + (size_t) hh * g * D, (int32_t) qrs, T, g * D,
                                                     in->wo + (size_t) hh * g * D, (int32_t) qrs, C, y, nt)
                                         : 0.0;
    }
out:
    free(kpart);
    free(Sbuf);
    free(P);
    free(E);
    free(O);
    free(oe);
    free(y);
    return st;
}
