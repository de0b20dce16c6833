// optr.h - OptR: output-aware refinement of per-KV-head rotations (CPU reference).
//
// For one layer and each KV head h, R_h = R_base,h · expm(A_h − A_hᵀ), A_h = 0 at
// the start, is trained with Adam against the post-W_O attention-output error of
// INT2 keys / values, split into its two terms (method.md §17):
//   K phase: L_K = KL(P ‖ P̂) + λ·mean(((P̂ − P)·V·W_O,jᵀ)²)
//   V phase: L_V = mean((P̂·(V̂ − V)·W_O,jᵀ)²), P̂ from the K phase's final R_K,
// averaged over the g query heads j of h and the sequences. P uses the exact
// (centred) keys, P̂ the keys through centre → rotate → INT2 (this quantizer,
// bit-exact; straight-through gradient) → rotate back, with the first `sink`
// and last `recent` rows of every sequence exact. Queries: the last `qwin` rows
// of each sequence (causal). Held-out loss every eval_every steps and at the
// last step; each head keeps its best held-out R, or R_base when no step beat it
// by the margin. Key centering: k_mean = mean of the training keys (post-RoPE,
// per KV head); it changes no softmax (q·μ is constant over the keys of a query).
//
// The paper's code (daniel-eai/Output-Aware-INT2-KV-Cache-Quantization,
// optr/calibrate_optr.py) fixed the losses, schedule and defaults; this is a
// re-derivation with analytic gradients (no autodiff): see optr-loss.c and
// optr-expm.c. Deterministic: every sum has a fixed order, work is split into
// (head, sequence) items whose results are reduced in sequence order, and
// BLAS calls are single-threaded tiles (util/blas.h), so 1 and N threads give
// the same bits.
//
// Usage:
//   struct oscar_optr_params p = oscar_optr_default_params(D, G);
//   struct oscar_optr_layer in = {.n_head = Hq, ..., .train = {...}, .held = {...}};
//   struct oscar_optr_result r;
//   if (oscar_optr_refine_layer(&in, &p, &r) == OSCAR_OK) { use r.k_rot ...; oscar_optr_result_free(&r); }
//
// Shapes: T rows, Hq query heads, Hkv KV heads, D head_dim, C model width.
#ifndef OSCAR_OPTR_H
#define OSCAR_OPTR_H

#include <stdbool.h>
#include <stdint.h>

#include "quant/quant.h"
#include "util/error.h"

struct oscar_optr_params {
    int32_t steps;          // Adam steps per phase [80]
    double  lr;             // Adam learning rate [0.02] (betas 0.9, 0.999, eps 1e-8)
    double  lambda;         // weight of the post-W_O term in the K loss [1]
    int32_t eval_every;     // held-out evaluation period in steps (and the last step) [20]
    double  margin_k, margin_v; // keep a head's R only if best < base·(1 − margin) [0, 0]
    int32_t qwin;           // query rows: the last qwin of each sequence [64]
    int32_t sink, recent;   // exact rows at the start / end of every sequence [64, 256]
    int32_t max_train_seq;  // use at most this many training sequences (the first ones); 0 = all
    struct oscar_int2_params k_quant, v_quant; // the INT2 quantizers (clip ratio 0.96 / 0.92)
    bool    center;         // subtract the key mean (k_mean) [true]
    int32_t n_threads;      // <= 0: all
};

// Default params for head_dim D and INT2 group G (0 = D).
struct oscar_optr_params oscar_optr_default_params(int32_t head_dim, int32_t group_size);

// One set of rows of one layer: n_seq sequences, sequence s is rows
// [seq_start[s], seq_start[s+1]). Sequences shorter than sink + recent + 8 rows
// are skipped (as the paper does). Not owned.
struct oscar_optr_rows {
    int32_t n_seq;
    const int32_t * seq_start;  // [n_seq + 1], seq_start[0] = 0
    const float * q;            // [T, Hq, D] post-RoPE
    const float * k;            // [T, Hkv, D] post-RoPE
    const float * v;            // [T, Hkv, D]
};

struct oscar_optr_layer {
    int32_t layer;              // for messages
    int32_t n_head, n_head_kv, head_dim, n_embd;
    float attn_scale;           // scores q·k·attn_scale; 0 = 1/sqrtf(D) (oscar_attn_scale_param)
    const float * wo;           // [C, Hq·D] (o_proj: row c, column j·D + d)
    const float * k_rot_base;   // [Hkv, D, D] y = x·R
    const float * v_rot_base;   // [Hkv, D, D]
    struct oscar_optr_rows train, held;
    const float * k_mean;       // [Hkv, D] the key mean to centre with (p->center), or NULL: that of the
                                // train rows (oscar_optr_key_mean); a caller keeping only the training
                                // sequences gives the mean of a larger set (oscar_optr_key_block_add)
    int32_t n_head_kv_layer;    // 0, or the layer's KV heads when these n_head_kv are a part of them (their
                                // query heads, rows, W_O columns and bases alone): the loss is the mean over
                                // the layer's heads, so each head gets the bits it gets refined with all
};

// Owned arrays (oscar_optr_result_free). Losses are per head (not averaged).
struct oscar_optr_result {
    int32_t n_head_kv, head_dim, steps;
    float  * k_rot, * v_rot;      // [Hkv, D, D] refined (or base where not kept)
    float  * k_mean;              // [Hkv, D] the subtracted key mean (zeros without centering)
    double * k_train, * v_train;  // [steps, Hkv] training loss at the R of step s (before its update)
    double * k_held, * v_held;    // [steps + 1, Hkv]: [0] at R_base, [s + 1] after step s; NaN if not evaluated
    int32_t * k_best, * v_best;   // [Hkv] the step whose R was kept; -1 = R_base
    int32_t n_train_seq, n_held_seq; // sequences used
};

// Refines one layer. OSCAR_ERR_INVALID naming the layer and the problem for bad
// shapes or params (head counts, D/G, row offsets, no usable sequence),
// OSCAR_ERR_NUMERIC for non-finite rows, OSCAR_ERR_NOMEM.
enum oscar_status oscar_optr_refine_layer(const struct oscar_optr_layer * in, const struct oscar_optr_params * p,
                                          struct oscar_optr_result * out);
void oscar_optr_result_free(struct oscar_optr_result * r);

// k_mean [Hkv, D]: the fp64 mean over all rows of the set, as fp32. The rows are summed in
// blocks of OSCAR_OPTR_KEY_BLOCK (each from zero, in row order), the blocks added in order:
// processes that each own whole blocks give the one-process bits.
#define OSCAR_OPTR_KEY_BLOCK 128
void oscar_optr_key_mean(const struct oscar_optr_rows * rows, int32_t n_head_kv, int32_t head_dim, float * out);
// The same from block sums kept as rows arrive: blocks [ceil(total / B), HD] (zeroed by the caller)
// += rows row0 .. row0 + n_rows - 1 of k [n_rows, HD]; then the mean of the first n_rows rows.
void oscar_optr_key_block_add(double * blocks, int64_t row0, const float * k, int64_t n_rows, size_t hd);
void oscar_optr_key_mean_of_blocks(const double * blocks, int64_t n_rows, size_t hd, float * out);

// The training sequences the refinement uses out of n_seq (seq_start [n_seq + 1]): the
// first ones long enough (sink + recent + 8 rows), at most p->max_train_seq (0 = all) and
// 65536. Writes their indices to idx (may be NULL) and returns how many. A caller that keeps
// only sequences 0 .. idx[n-1] gets the same refinement as one that keeps all n_seq.
int32_t oscar_optr_train_sequences(const struct oscar_optr_params * p, const int32_t * seq_start, int32_t n_seq,
                                   int32_t * idx);

#endif
