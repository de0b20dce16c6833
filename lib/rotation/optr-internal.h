// optr-internal.h - OptR's pieces, shared by optr.c and the unit test:
// the matrix exponential with its adjoint derivative (optr-expm.c) and the
// per-(head, sequence) losses with their gradients (optr-loss.c).
//
// D = head_dim, L = rows of one sequence, nq = query rows (the last qwin),
// g = query heads per KV head, C = model width.
#ifndef OSCAR_OPTR_INTERNAL_H
#define OSCAR_OPTR_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "quant/quant.h"
#include "rotation/optr.h"

// ---- optr-expm.c (fp64, row-major D x D) -------------------------------------
// E = expm(X): scaling and squaring with a Taylor series. work: 4·D² doubles.
void osc_optr_expm(const double * X, int32_t D, double * E, double * work);
// G_X = L(Xᵀ, G): the gradient with respect to X of <G, expm(X)> (Frobenius),
// i.e. the adjoint of expm's Fréchet derivative at X applied to G. Also E = expm(X).
// work: 10·D² doubles.
void osc_optr_expm_grad(const double * X, const double * G, int32_t D, double * E, double * G_X, double * work);

// ---- optr-loss.c ---------------------------------------------------------------
// The straight-through linearisation of one quantized row set: for every
// element the code's residual c = (x̂ − x_clamped)/scale and whether the clip
// changed it; per (row, group) the arg-max / arg-min element (−1: degenerate
// group, scale floored) and the fp32 scale. With `frozen` the loss evaluates the
// smooth function x̂' = x'_clamped + c·(x'_max − x'_min)/3 of these fixed
// choices instead of the quantizer: its finite differences are the STE gradient.
struct osc_optr_lin {
    float   * c;        // [rows, D]
    float   * clampv;   // [rows]: the clip threshold of the row (clipped elements are ±clampv)
    uint8_t * clipped;  // [rows, D]
    int16_t * imax, * imin; // [rows, ng]
    float   * scale;    // [rows, ng]
};

// Rows y [n, D] -> yh [n, D]: live, this quantizer's dequantized values (bit-exact
// with oscar_int2_quantize_rows + dequantize_rows, clip included), recording lin;
// frozen, the smooth function of lin. s: scratch for at least n rows.
struct osc_optr_scratch;
enum oscar_status osc_optr_quant_rows(const struct oscar_int2_params * p, const float * y, int32_t n, bool frozen,
                                      struct osc_optr_lin * lin, float * yh, struct osc_optr_scratch * s);

// Everything one (KV head, sequence) item reads; built once per layer by optr.c.
struct osc_optr_item {
    int32_t L, lo, nq;              // rows; queries are rows [lo, L), nq = L − lo
    int32_t q0, q1;                 // quantized rows [q0, q1)
    float * kc;                     // [L, D] centred keys of this head
    float * v;                      // [L, D] values of this head
    float * q;                      // [g, nq, D] the group's query rows, contiguous
    float * p;                      // [g, nq, L] exact attention P (0 above the diagonal)
    double      * plogp;            // [g] Σ P·log P per query head (constant of the KL)
    float * pv;                     // [g, nq, D] P·V
    float       * phat;             // [g, nq, L] P̂ with the final R_K (V phase input)
    struct osc_optr_lin lin;        // per quantized row [q1 − q0]
};

// Per-head constants: the g Gram matrices W_O,jᵀ·W_O,j [g, D, D] and the shape.
struct osc_optr_head {
    int32_t D, g, C;
    float sc;                       // the score scale (oscar_optr_layer's attn_scale, or 1/sqrtf(D))
    const float * gram;             // [g, D, D]
    double lambda;
    const struct oscar_int2_params * quant;
};

// Per-thread scratch for one item of at most Lmax rows.
struct osc_optr_scratch {
    float * y, * yh, * kh, * dk, * dy;       // [Lmax, D]
    float * s, * ph, * ds;                   // [nqmax, Lmax]
    float * m, * gm, * qtmp;                 // [nqmax, D]
    float * dr;                              // [D, D]
    uint8_t * codes; float * meta;           // quantizer buffers [Lmax, D/4], [Lmax, 2·ng]
    float * clip_scratch;                    // [D]
};
bool osc_optr_scratch_init(struct osc_optr_scratch * s, int32_t Lmax, int32_t nqmax, int32_t D, int32_t ng);
void osc_optr_scratch_free(struct osc_optr_scratch * s);

// K loss of one item at rotation R [D, D] (y = x·R), weighted by w (the item's
// share of the head's mean). dR [D, D] += w·dL/dR when dR != NULL. With
// phat_out the item's P̂ is written to it->phat (V phase input).
enum oscar_status osc_optr_loss_k(const struct osc_optr_head * hd, struct osc_optr_item * it, const float * R,
                                  double w, bool frozen, bool phat_out, double * dR, struct osc_optr_scratch * s,
                                  double * loss);
// V loss of one item (P̂ from it->phat).
enum oscar_status osc_optr_loss_v(const struct osc_optr_head * hd, struct osc_optr_item * it, const float * R,
                                  double w, bool frozen, double * dR, struct osc_optr_scratch * s, double * loss);

// ---- optr.c: what the CPU reference and the CUDA path (kernels/optr-device.cu) share ----
// The checks of oscar_optr_refine_layer (shapes and params; OSCAR_ERR_INVALID naming the layer).
enum oscar_status osc_optr_check(const struct oscar_optr_layer * in, const struct oscar_optr_params * p);
// OSCAR_ERR_NUMERIC when a row of either set holds a NaN or Inf.
enum oscar_status osc_optr_check_finite(const struct oscar_optr_layer * in, int32_t n_threads);
// osc_optr_check, then r's arrays allocated and r->k_mean filled (in->k_mean, else the training
// rows' mean, when p->center; zeros otherwise). r is freed on failure.
enum oscar_status osc_optr_result_init(const struct oscar_optr_layer * in, const struct oscar_optr_params * p,
                                      struct oscar_optr_result * r);
// The sequences of a set that OptR uses: the first ones of at least sink + recent + 8 rows, at most
// max_seq (0 = all) and OSC_OPTR_MAX_SET_SEQ; their indices into idx (may be NULL), the count returned.
#define OSC_OPTR_MAX_SET_SEQ 65536
int32_t osc_optr_pick_sequences(const struct oscar_optr_params * p, const int32_t * seq_start, int32_t n_seq,
                                int32_t max_seq, int32_t * idx);
// One sequence of L rows: queries are rows [lo, L) (nq = L − lo), INT2 rows [q0, q1).
struct osc_optr_geom {
    int32_t L, lo, nq, q0, q1;
};
void osc_optr_item_geom(const struct oscar_optr_params * p, int32_t L, struct osc_optr_geom * g);

// ---- optr.c: one layer's prepared rows -----------------------------------------
// Both sets (train, held) cut into (head, sequence) items with their exact
// attention precomputed; k_mean [Hkv, D] is subtracted from the keys (NULL: none).
struct osc_optr_state;
enum oscar_status osc_optr_prepare(const struct oscar_optr_layer * in, const struct oscar_optr_params * p,
                                   const float * k_mean, struct osc_optr_state ** out);
void osc_optr_state_free(struct osc_optr_state * st);
// Per-head loss [Hkv] of a set (mean over its sequences) at rotations R [Hkv, D, D]
// for phase 0 (K) or 1 (V, after osc_optr_set_phat); dR [Hkv, D, D] = dloss/dR when non-NULL.
enum oscar_status osc_optr_set_loss(struct osc_optr_state * st, int phase, bool held, const float * R, bool frozen,
                                    double * loss, double * dR);
// P̂ of every item of both sets under the final key rotations R_k [Hkv, D, D] (the V phase's input).
enum oscar_status osc_optr_set_phat(struct osc_optr_state * st, const float * R_k);
// R = R_base·expm(A − Aᵀ) (fp64 product, stored fp32). work: 7·D² doubles.
void osc_optr_rotation(const float * R_base, const double * A, int32_t D, float * R, double * work);
// gA = dloss/dA from dR = dloss/dR at R = R_base·expm(A − Aᵀ). work: 13·D² doubles.
void osc_optr_grad_a(const float * R_base, const double * A, const double * dR, int32_t D, double * gA, double * work);
// One Adam step (lr, betas 0.9 / 0.999, eps 1e-8, bias-corrected for step + 1) of A, m, v [n]
// with the gradient g / n_heads (the loss is the mean over the layer's KV heads: n_head_kv_layer
// when set, else n_head_kv).
void osc_optr_adam(double * A, double * m, double * v, const double * g, size_t n, double n_heads, double lr,
                   int32_t step);
// A prepared item (its lin after the last loss on the set: what the comparison with the GPU reads),
// NULL when out of range; the sequences a set uses.
const struct osc_optr_item * osc_optr_set_item(const struct osc_optr_state * st, bool held, int32_t h, int32_t s);
int32_t osc_optr_set_n_seq(const struct osc_optr_state * st, bool held);

#endif
