// clip.c - clip-ratio search per layer x {K, V} (x KV head with per-head
// rotations) on held-out rows, quantized exactly as the engine stores them
// (tiered: BF16 sink/recent, INT2 middle with the run's group size and scale
// dtype, sort-rule clip). Objectives (relative, smaller is better):
//   K: causal logit error under the held-out queries,
//      Σ_t Σ_h e_{t,h} S_{t,h} e_{t,h}ᵀ / Σ_t Σ_h k_{t,h} S_{t,h} k_{t,h}ᵀ with
//      S_{t,h} = Σ_{i ≥ t} Σ_{j ∈ J(h)} q_{i,j}ᵀ q_{i,j} (rotated rows; = Σ_{i≥t,j} (q_{i,j}·e_t)²),
//   V: post-W_O output error with exact attention weights: attention is linear
//      in V, so the output error is attention(q, k, E_v)·R_Vᵀ·W_Oᵀ, divided by
//      Σ‖o W_Oᵀ‖².
// Ties go to the larger ratio (the grid is visited in the given order, 1.0 first
// by default, and a candidate must be strictly better).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate/calibrate-internal.h"
#include "util/log.h"

struct fit_rot {
    const struct oscar_calib_fit * f;
};

static const float * fit_rot_fn(const void * user, int32_t layer, int32_t head, bool is_v) {
    const struct oscar_calib_fit * f = ((const struct fit_rot *) user)->f;
    size_t D = (size_t) f->head_dim, r = f->n_rot > 1 ? (size_t) head : 0;
    size_t off = ((size_t) layer * (size_t) f->n_rot + r) * D * D;
    return (is_v ? f->v_rot : f->k_rot) + off;
}

void oscar_calib_clip_free(struct oscar_calib_clip * c) {
    free(c->k); free(c->v); free(c->k_err); free(c->v_err); free(c->k_err1); free(c->v_err1);
    memset(c, 0, sizeof(*c));
}

static int cmp_f(const void * a, const void * b) {
    float x = *(const float *) a, y = *(const float *) b;
    return x < y ? -1 : x > y;
}

static double median(const float * x, size_t n) {
    float * s = malloc(n * sizeof(float));
    if (!s) return x[0];
    memcpy(s, x, n * sizeof(float));
    qsort(s, n, sizeof(float), cmp_f);
    double m = s[(n - 1) / 2];
    free(s);
    return m;
}

// K errors for every candidate and head of one layer: ek [n_grid, Hkv] (added to), ref [Hkv] (added to).
static enum oscar_status k_errors(const struct oscar_calib_heldout * h, int32_t layer, const struct oscar_calib_method * m,
                                  const struct oscar_calib_params * p, double * ek, double * ref) {
    int32_t Hq = h->n_head, Hkv = h->n_head_kv, D = h->head_dim, g = Hq / Hkv, G = p->n_grid;
    int64_t nmax = 0;
    for (int32_t s = 0; s < h->n_seq; s++)
        if (h->seq_start[s + 1] - h->seq_start[s] > nmax) nmax = h->seq_start[s + 1] - h->seq_start[s];
    size_t ksz = (size_t) nmax * (size_t) Hkv * (size_t) D;
    float * qr = malloc((size_t) nmax * (size_t) Hq * (size_t) D * sizeof(float)), * kr = malloc(ksz * sizeof(float));
    float * e = malloc((size_t) G * ksz * sizeof(float));
    double * S = malloc((size_t) D * (size_t) D * sizeof(double)), * clip = malloc((size_t) Hkv * sizeof(double));
    enum oscar_status st = OSCAR_OK;
    if (!qr || !kr || !e || !S || !clip) {
        st = osc_error(OSCAR_ERR_NOMEM, "clip search: out of memory");
        goto out;
    }
    struct oscar_int2_params base = osc_calib_int2_params(p, D);
    for (int32_t s = 0; s < h->n_seq && st == OSCAR_OK; s++) {
        int64_t r0 = h->seq_start[s], n = h->seq_start[s + 1] - r0;
        osc_calib_rotate(h->q[layer] + (size_t) r0 * (size_t) Hq * (size_t) D, n, Hq, g, D, m, layer, false, false, qr);
        osc_calib_rotate(h->k[layer] + (size_t) r0 * (size_t) Hkv * (size_t) D, n, Hkv, 1, D, m, layer, false, false, kr);
        for (int32_t c = 0; c < G && st == OSCAR_OK; c++) {
            for (int32_t hh = 0; hh < Hkv; hh++) clip[hh] = p->grid[c];
            st = osc_calib_store_tiered(kr, n, Hkv, D, p->sink, p->recent, &base, clip, true, e + (size_t) c * ksz);
        }
        for (int32_t hh = 0; hh < Hkv && st == OSCAR_OK; hh++) {
            memset(S, 0, (size_t) D * (size_t) D * sizeof(double));
            for (int64_t t = n - 1; t >= 0; t--) {
                for (int32_t j = hh * g; j < (hh + 1) * g; j++) {
                    const float * qv = qr + ((size_t) t * (size_t) Hq + (size_t) j) * (size_t) D;
                    for (int32_t a = 0; a < D; a++)
                        for (int32_t b = 0; b < D; b++) S[a * D + b] += (double) qv[a] * (double) qv[b];
                }
                size_t off = ((size_t) t * (size_t) Hkv + (size_t) hh) * (size_t) D;
                const float * kv = kr + off;
                double rk = 0.0;
                for (int32_t a = 0; a < D; a++) {
                    double sa = 0.0;
                    for (int32_t b = 0; b < D; b++) sa += S[a * D + b] * (double) kv[b];
                    rk += (double) kv[a] * sa;
                }
                ref[hh] += rk;
                for (int32_t c = 0; c < G; c++) {
                    const float * ev = e + (size_t) c * ksz + off;
                    bool any = false;
                    for (int32_t a = 0; a < D && !any; a++) any = ev[a] != 0.0f;
                    if (!any) continue;
                    double q2 = 0.0;
                    for (int32_t a = 0; a < D; a++) {
                        double sa = 0.0;
                        for (int32_t b = 0; b < D; b++) sa += S[a * D + b] * (double) ev[b];
                        q2 += (double) ev[a] * sa;
                    }
                    ek[(size_t) c * (size_t) Hkv + (size_t) hh] += q2;
                }
            }
        }
    }
out:
    free(qr); free(kr); free(e); free(S); free(clip);
    return st;
}

// V errors: ev [n_grid, n_heads_searched] (added to), ref (added to). per_head: head hh alone carries error.
static enum oscar_status v_errors(const struct oscar_calib_heldout * h, int32_t layer, const struct oscar_calib_method * m,
                                  const struct oscar_calib_params * p, bool per_head, double * ev, double * ref) {
    int32_t Hq = h->n_head, Hkv = h->n_head_kv, D = h->head_dim, g = Hq / Hkv, G = p->n_grid, C = h->n_embd;
    int64_t nmax = 0;
    for (int32_t s = 0; s < h->n_seq; s++)
        if (h->seq_start[s + 1] - h->seq_start[s] > nmax) nmax = h->seq_start[s + 1] - h->seq_start[s];
    size_t qsz = (size_t) nmax * (size_t) Hq * (size_t) D, ksz = (size_t) nmax * (size_t) Hkv * (size_t) D;
    float * qr = malloc(qsz * sizeof(float)), * kr = malloc(ksz * sizeof(float)), * vr = malloc(ksz * sizeof(float));
    float * e = malloc(ksz * sizeof(float)), * o = malloc(qsz * sizeof(float)), * ob = malloc(qsz * sizeof(float));
    float * y = malloc((size_t) nmax * (size_t) C * sizeof(float));
    double * clip = malloc((size_t) Hkv * sizeof(double));
    enum oscar_status st = OSCAR_OK;
    int32_t NH = per_head ? Hkv : 1;
    if (!qr || !kr || !vr || !e || !o || !ob || !y || !clip) {
        st = osc_error(OSCAR_ERR_NOMEM, "clip search: out of memory");
        goto out;
    }
    struct oscar_int2_params base = osc_calib_int2_params(p, D);
    for (int32_t s = 0; s < h->n_seq && st == OSCAR_OK; s++) {
        int64_t r0 = h->seq_start[s], n = h->seq_start[s + 1] - r0;
        const float * q = h->q[layer] + (size_t) r0 * (size_t) Hq * (size_t) D;
        const float * k = h->k[layer] + (size_t) r0 * (size_t) Hkv * (size_t) D;
        const float * v = h->v[layer] + (size_t) r0 * (size_t) Hkv * (size_t) D;
        if ((st = osc_calib_attend(h, n, q, k, v, p->n_threads, o)) != OSCAR_OK) break;
        *ref += osc_calib_wo_energy(o, n, h->wo[layer], C, Hq * D, y);
        osc_calib_rotate(q, n, Hq, g, D, m, layer, false, false, qr);
        osc_calib_rotate(k, n, Hkv, 1, D, m, layer, false, false, kr);
        osc_calib_rotate(v, n, Hkv, 1, D, m, layer, true, false, vr);
        for (int32_t c = 0; c < G && st == OSCAR_OK; c++) {
            for (int32_t hh = 0; hh < Hkv; hh++) clip[hh] = p->grid[c];
            if ((st = osc_calib_store_tiered(vr, n, Hkv, D, p->sink, p->recent, &base, clip, true, e)) != OSCAR_OK) break;
            for (int32_t sh = 0; sh < NH && st == OSCAR_OK; sh++) {
                if (per_head) { // keep head sh's error only: attention output of other heads' groups becomes 0
                    for (int64_t t = 0; t < n; t++)
                        for (int32_t hh = 0; hh < Hkv; hh++)
                            if (hh != sh) memset(e + ((size_t) t * (size_t) Hkv + (size_t) hh) * (size_t) D, 0,
                                                 (size_t) D * sizeof(float));
                }
                if ((st = osc_calib_attend(h, n, qr, kr, e, p->n_threads, ob)) != OSCAR_OK) break;
                osc_calib_rotate(ob, n, Hq, g, D, m, layer, true, true, o); // o: scratch from here on
                ev[(size_t) c * (size_t) NH + (size_t) sh] += osc_calib_wo_energy(o, n, h->wo[layer], C, Hq * D, y);
                if (per_head && sh + 1 < NH) // restore the full error for the next head
                    st = osc_calib_store_tiered(vr, n, Hkv, D, p->sink, p->recent, &base, clip, true, e);
            }
        }
    }
out:
    free(qr); free(kr); free(vr); free(e); free(o); free(ob); free(y); free(clip);
    return st;
}

static void pick(const struct oscar_calib_params * p, const double * err, int32_t stride, int32_t idx, double ref,
                 float * choice, double * best_err, double * err1) {
    int32_t best = 0;
    for (int32_t c = 1; c < p->n_grid; c++)
        if (err[(size_t) c * (size_t) stride + (size_t) idx] < err[(size_t) best * (size_t) stride + (size_t) idx]) best = c;
    *choice = (float) p->grid[best];
    double r = ref > 0.0 ? ref : 1e-300;
    *best_err = err[(size_t) best * (size_t) stride + (size_t) idx] / r;
    *err1 = err[idx] / r;
}

enum oscar_status oscar_calib_clip_search(const struct oscar_calib_heldout * h, const struct oscar_calib_fit * f,
                                          const struct oscar_calib_params * p, struct oscar_calib_clip * c,
                                          struct oscar_calib_timing * t) {
    double t0 = osc_now();
    int32_t L = h->n_layer, Hkv = h->n_head_kv, NC = f->n_rot > 1 ? Hkv : 1, G = p->n_grid;
    memset(c, 0, sizeof(*c));
    c->n_layer = L;
    c->n_clip = NC;
    size_t n = (size_t) L * (size_t) NC;
    c->k = calloc(n, sizeof(float)); c->v = calloc(n, sizeof(float));
    c->k_err = calloc(n, sizeof(double)); c->v_err = calloc(n, sizeof(double));
    c->k_err1 = calloc(n, sizeof(double)); c->v_err1 = calloc(n, sizeof(double));
    double * ek = calloc((size_t) G * (size_t) Hkv, sizeof(double)), * ev = calloc((size_t) G * (size_t) Hkv, sizeof(double));
    double * kref = calloc((size_t) Hkv, sizeof(double));
    enum oscar_status st = OSCAR_OK;
    if (!c->k || !c->v || !c->k_err || !c->v_err || !c->k_err1 || !c->v_err1 || !ek || !ev || !kref) {
        st = osc_error(OSCAR_ERR_NOMEM, "clip search: out of memory");
        goto out;
    }
    struct fit_rot fr = {f};
    struct oscar_calib_method m = {.name = "oscar", .rot = fit_rot_fn, .user = &fr, .scheme = OSCAR_INT2_ASYM};
    if (!p->clip_search) {
        for (size_t i = 0; i < n; i++) {
            c->k[i] = (float) p->k_clip;
            c->v[i] = (float) p->v_clip;
        }
        c->k_global = p->k_clip;
        c->v_global = p->v_clip;
        goto out;
    }
    for (int32_t l = 0; l < L && st == OSCAR_OK; l++) {
        memset(ek, 0, (size_t) G * (size_t) Hkv * sizeof(double));
        memset(ev, 0, (size_t) G * (size_t) Hkv * sizeof(double));
        memset(kref, 0, (size_t) Hkv * sizeof(double));
        double vref = 0.0;
        if ((st = k_errors(h, l, &m, p, ek, kref)) != OSCAR_OK) break;
        if ((st = v_errors(h, l, &m, p, NC > 1, ev, &vref)) != OSCAR_OK) break;
        if (NC == 1) { // pool K heads
            double kr = 0.0;
            for (int32_t hh = 0; hh < Hkv; hh++) kr += kref[hh];
            for (int32_t g = 0; g < G; g++) {
                double s = 0.0;
                for (int32_t hh = 0; hh < Hkv; hh++) s += ek[(size_t) g * (size_t) Hkv + (size_t) hh];
                ek[(size_t) g * (size_t) Hkv] = s;
            }
            pick(p, ek, Hkv, 0, kr, &c->k[l], &c->k_err[l], &c->k_err1[l]);
            pick(p, ev, 1, 0, vref, &c->v[l], &c->v_err[l], &c->v_err1[l]);
        } else {
            for (int32_t hh = 0; hh < Hkv; hh++) {
                size_t i = (size_t) l * (size_t) Hkv + (size_t) hh;
                pick(p, ek, Hkv, hh, kref[hh], &c->k[i], &c->k_err[i], &c->k_err1[i]);
                pick(p, ev, Hkv, hh, vref, &c->v[i], &c->v_err[i], &c->v_err1[i]);
            }
        }
        osc_debug("clip layer %d: K %.2f V %.2f", (int) l, (double) c->k[(size_t) l * (size_t) NC],
                  (double) c->v[(size_t) l * (size_t) NC]);
    }
    if (st == OSCAR_OK) {
        c->k_global = median(c->k, n);
        c->v_global = median(c->v, n);
    }
out:
    free(ek); free(ev); free(kref);
    if (st != OSCAR_OK) oscar_calib_clip_free(c);
    if (t) t->clip += osc_now() - t0;
    return st;
}
