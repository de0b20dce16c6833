// calibrate.h - the oscar-calibrate pipeline as library stages.
//
//   corpus.c     corpus (text file | JSONL field | directory) -> tokens, sha256
//   plan.c       tokens -> calibration sequences (--tokens, --seq-len) + held-out sequences
//   layer-pass.c the forward pass, layer-major: per layer the pass-1 sums (qqt/ktk/vtv/vatt),
//                the sst sums with that layer's final A_h, the held-out rows; checkpoints
//                between layers (layer-ckpt.c); replay.c the same from an activation store
//   calib-verify.c  the held-out rows / methods as lib/verify inputs (every error
//                metric is lib/verify's: logit error, post-W_O relative error)
//   signs.c      --sign-search: eigenvector signs by coordinate descent on the held-out INT2 error
//   grouping.c   --rotation-grouping auto: per layer one rotation or one per KV head, by held-out error
//   clip.c       clip-ratio search per layer x {K, V} (x KV head), or model-wide for an
//                engine target (one K + one V ratio for sglang, one shared for llamacpp)
//   gate.c       OSCAR vs Hadamard vs naive INT2 gate table
//   artifact.c   assembling struct oscar_artifact (metadata, summary, model card)
//   base-model.c the base model's Hub id and licence, for the card (base-model.h)
//   input.c      what a run reads, opened and checked: the model (or a random-init shape), its
//                tokenizer, the corpus through the pass or an activation store (input.h)
//
// Sequences: the token stream is cut into consecutive sequences of seq_len
// tokens (the last calibration sequence may be shorter); the calibration set is
// the first n_tokens tokens; the held-out set is the n_heldout whole sequences
// that follow (never used in the covariances). No BOS is inserted: sequences
// are plain windows of the corpus token stream.
#ifndef OSCAR_CALIBRATE_H
#define OSCAR_CALIBRATE_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "quant/quant.h"
#include "rotation/fit.h"
#include "rotation/rotations.h"
#include "stats/stats.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/target.h"

struct oscar_backend_i;   // backend/backend.h
#include "util/version.h"

struct oscar_actstore;
struct osc_dp;
struct osc_calib_split;

#define OSCAR_CALIBRATE_VERSION OSCAR_VERSION
#define OSCAR_CLIP_GRID_MAX 128

struct oscar_calib_params {
    int64_t  n_tokens;         // calibration budget T
    int32_t  seq_len;          // tokens per sequence
    int32_t  batch;            // sequences per forward call
    int32_t  n_heldout;        // held-out sequences (after the budget)
    bool     allow_short;      // use a shorter corpus instead of failing
    enum oscar_rotation_grouping grouping; // AUTO: chosen per layer (grouping.c)
    char     grouping_why[160]; // auto asked but resolved to LAYER: why (oscar_calib_resolve_grouping); "" else
    enum oscar_stats_kind k_objective; // QQT | KTK
    enum oscar_stats_kind v_objective; // SST | VTV | VATT
    enum oscar_composition composition;
    int32_t  group_size;       // INT2 group (0 = D)
    enum oscar_quant_meta_dtype scale_dtype;
    int32_t  sink, recent;     // BF16 tiers for the gate
    bool     clip_search;      // false: fixed ratios below
    double   k_clip, v_clip;   // fixed ratios (reference 0.96 / 0.92)
    int32_t  n_grid;
    double   grid[OSCAR_CLIP_GRID_MAX]; // candidate ratios for the search
    int32_t  n_threads;
    const char * eval_device;  // clip search + gate backend: NULL / "cpu" (lib/verify) or "cuda"
    uint64_t seed;
    int64_t  checkpoint_every; // tokens; 0 = no checkpoints
    const char * checkpoint_path; // NULL = no checkpoints
    bool     resume;
    bool     capture_bf16;     // round captured q/k/v to bf16 (as the reference captures) before use
    struct oscar_actstore * act_out; // pass-1 and held-out rows go here too (not owned; NULL = off)
    enum oscar_target target;  // the engine profile the clip search honours (util/target.h) [oscar]
    // --refine optr (refine.c): per-KV-head OptR refinement after the fit
    bool     refine_optr;
    bool     optr_center;      // also store k_mean (key centering) [true]
    int32_t  optr_steps;       // Adam steps per phase (0 = OptR's 80)
    int32_t  optr_train_seq;   // training sequences (the first ones; 0 = all)
    // --sign-search (signs.c): eigenvector signs chosen on the held-out rows after the fit
    bool     sign_search;      // false: the canonical signs (rotation/fit.h)
    int32_t  sign_passes;      // most passes over the D eigenvectors [2]
};

struct oscar_calib_params oscar_calib_default_params(void);
// The clip search and the gate measure the INT2 middle of the held-out
// sequences: with seq_len <= sink + recent there is none (every row BF16).
// OSCAR_ERR_INVALID saying so, naming the three settings.
enum oscar_status oscar_calib_check_tiers(const struct oscar_calib_params * p);
// The lib/stats kinds the K and V objectives need (OSCAR_STATS_* bits).
uint32_t oscar_calib_stats_kinds(const struct oscar_calib_params * p);
// What p->target cannot represent (per-head rotations, this architecture, sink/recent not on the
// engine's alignment, a --device the target's clip quantizer has no kernel for): OSCAR_ERR_INVALID
// saying why and what would work. arch: oscar_arch_name() of the model (NULL: not checked).
enum oscar_status oscar_calib_check_target(const struct oscar_calib_params * p, const char * arch);
// "1.00:0.80:0.02" (start:stop:step) or "1,0.96,0.9" -> grid. OSCAR_ERR_INVALID on bad text.
enum oscar_status oscar_calib_parse_grid(const char * text, struct oscar_calib_params * p);

// ---- corpus ------------------------------------------------------------------------
struct oscar_calib_corpus {
    int32_t * tokens;       // [n] owned
    int64_t   n;
    char      sha256[65];   // of all corpus bytes read (files in sorted order)
    char      name[256];    // file name(s), for metadata
    int64_t   n_docs;       // paragraphs / JSONL records tokenized
    uint64_t  tokenizer_hash; // of the tokenizer that made the tokens (0: synthetic tokens)
    char *    sources;      // a mix's sources, compact JSON [{name, share, sha256, tokens,
                            // heldout_tokens}] (owned; NULL for one corpus)
};
// Tokenizes the corpus until max_tokens tokens are produced (0 = all). path:
// a text file (paragraphs split at blank lines), a .jsonl file (jsonl_field of
// each record, default "text"), or a directory of such files (sorted names).
// Empty corpus: OSCAR_ERR_INVALID.
enum oscar_status oscar_calib_corpus_load(struct oscar_tokenizer * tok, const char * path, const char * jsonl_field,
                                          int64_t max_tokens, struct oscar_calib_corpus * out);
void oscar_calib_corpus_free(struct oscar_calib_corpus * c);

// ---- several sources (corpus-mix.c) ---------------------------------------------------
#define OSCAR_CALIB_MAX_SOURCES 32
struct oscar_calib_source {
    const char * path;     // as given (not owned); with a share, the path is its first path_len bytes
    size_t       path_len; // 0: all of path
    double       share;    // > 0 as given (not normalised); 0: none given
};
// "PATH" or "PATH@SHARE": the share is the text after the last '@' when it is
// made of number characters only (so 'a@b.txt' is a path). A share that is not
// a finite number > 0: OSCAR_ERR_INVALID naming the argument.
enum oscar_status oscar_calib_source_parse(const char * arg, struct oscar_calib_source * out);
// Tokenizes each source for its share of p->n_tokens (whole p->seq_len sequences
// by largest remainder; only the last calibration sequence may be short) and of
// the p->n_heldout held-out sequences, and lays the stream out as all calibration
// parts in source order, then all held-out parts, so oscar_calib_plan_make cuts
// it as usual. Shares: all given or none (equal); normalised. out->sources lists
// them, out->sha256 is the SHA-256 of that list (each source's own sha256 in it)
// and out->name "a.txt@0.5+b.txt@0.5". A missing, repeated or short source, mixed
// given/absent shares or p->allow_short: OSCAR_ERR_INVALID naming it.
enum oscar_status oscar_calib_corpus_load_mix(struct oscar_tokenizer * tok, const struct oscar_calib_source * src,
                                              int32_t n_src, const char * jsonl_field,
                                              const struct oscar_calib_params * p, struct oscar_calib_corpus * out);

// ---- plan ------------------------------------------------------------------------------
struct oscar_calib_plan {
    int32_t   n_seq;          // calibration sequences
    int32_t * seq_start;      // [n_seq + 1] offsets into the token stream
    int32_t   n_heldout;      // held-out sequences
    int32_t * heldout_start;  // [n_heldout + 1]
    const int32_t * tokens;   // the corpus stream (not owned)
    int64_t   n_tokens;       // calibration tokens used (seq_start[n_seq])
    const struct oscar_calib_corpus * corpus; // the tokens' source (not owned; NULL from a store)
};
enum oscar_status oscar_calib_plan_make(const struct oscar_calib_corpus * c, const struct oscar_calib_params * p,
                                        struct oscar_calib_plan * out);
void oscar_calib_plan_free(struct oscar_calib_plan * plan);

// ---- held-out rows --------------------------------------------------------------------
struct oscar_calib_heldout {
    int32_t n_layer, n_head, n_head_kv, head_dim, n_embd;
    float attn_scale;        // the model's score scale as oscar_attn_scale_param gives it (0 = D^-1/2)
    int32_t * window;        // [L] each layer's sliding window (oscar_layer_window; 0 = full causal)
    int32_t n_seq;
    int32_t * seq_start;     // [n_seq + 1] offsets into the rows below
    int64_t n_rows;          // T_h
    float ** q;              // [L][T_h, Hq, D]
    float ** k;              // [L][T_h, Hkv, D]
    float ** v;              // [L][T_h, Hkv, D]
    const float ** wo;       // [L] -> W_O [C, Hq*D]: the model's, or a copy in wo_block
    float * wo_block;        // [n_slot or L, C, Hq*D] owned copies when the rows outlive the model's layers, or NULL
    int32_t n_slot;          // 1: every layer's q/k/v/wo point at one slot, the layer being finished
                             // (the layer-major pass with a finisher); 0: each layer its own rows
    const struct oscar_backend_i * pinned; // the backend that page-locked the one slot, or NULL
};
void oscar_calib_heldout_free(struct oscar_calib_heldout * h);
// [n_layer] oscar_layer_window of every layer (malloc'd; NULL when out of memory).
int32_t * oscar_calib_layer_windows(const struct oscar_model_config * c);

// ---- timings ----------------------------------------------------------------------------
struct oscar_calib_timing {
    double forward, accumulate, eigh, clip, gate, heldout, total;
    double refine;            // --refine optr (store reads counted in store)
    double signs;             // --sign-search
    double load;              // reading layer weights on demand (oscar_model_open), waits for prefetch included
    double store;             // activation store writes (--save-activations) or reads (--from-activations)
    int64_t device_peak_bytes; // --device cuda: largest device memory in use seen by the forward pass
};

// ---- capture ----------------------------------------------------------------------------
// Where the calibration forward pass runs and on which weights.
struct oscar_calib_engine {
    const char *         device;           // "cpu" (or NULL) or "cuda"
    bool                 fp32;             // cuda: fp32 weights, activations and GEMMs (else bf16)
    struct oscar_model * m;                // opened (layers read on demand), loaded, or with
                                           // random_on_device the shape alone (config, name)
    bool                 random_on_device; // cuda: oscar_fwd_init_random's weights from p->seed,
                                           // made on the device layer by layer
    struct osc_dp *      dp;               // the process group of a data-parallel pass (dp.h), NULL: one
};
// The calibration forward pass (layer-pass.c), layer-major on e's backend: all
// calibration and held-out sequences through layer 0, then layer 1, ...; per
// layer the pass-1 sums, then the SST sums with that layer's final A_h from the
// K/V the backend kept (no second forward pass), and the held-out rows with a
// copy of the layer's W_O as the backend ran it. Returns a finished accumulator
// and fills *held. On the CPU equal to two whole passes bit for bit (same
// batches). Checkpoints (layer-ckpt.c) record the plan, the capture dtype, the
// backend, the model's attention shape and the identities of the model,
// tokenizer and corpus (plan->corpus); a resume refuses one that differs
// (OSCAR_ERR_INVALID naming it).
//
// Data-parallel (e->dp of several ranks, every rank calling with the same plan
// and params): rank r runs calibration batches floor(r·nb/N) .. floor((r+1)·nb/N)-1
// of the nb batches through each layer, rank 0 also the held-out ones (so only
// rank 0's *held is filled); the layer's sums meet on rank 0 (dp-stats.c) and
// only rank 0's *stats is the run's. Equal to one process bit for bit when
// every rank's share starts at a multiple of OSCAR_STATS_BLOCK tokens (always
// when batch x seq_len is one), else within fp64 rounding of the block sums. Rank 0
// writes the checkpoints (all hidden states gathered, the single-process file)
// and a resume hands every rank its rows back. Fewer batches than ranks:
// OSCAR_ERR_INVALID.
//
// fin (rank 0; NULL: no finishing, every layer's held-out rows returned): begun
// here, each layer is finished (finish.c) as soon as its sums end and its rows
// are captured, then its rows are dropped: *held has ONE layer slot, unless the
// finisher's gate waits for a model-wide clip (fin->gate_at_end), which needs
// every layer's rows at the end; the pass ends the finisher too.
// Checkpoints hold the finished layers' results, so a resume needs no earlier rows.
struct oscar_calib_finisher;
enum oscar_status oscar_calib_capture(const struct oscar_calib_engine * e, const struct oscar_calib_plan * plan,
                                      const struct oscar_calib_params * p, struct oscar_calib_finisher * fin,
                                      struct oscar_stats ** stats, struct oscar_calib_heldout * held,
                                      struct oscar_calib_timing * t);
// ---- from an activation store (replay.c; actstore.h) ------------------------------------
// The plan (sequence boundaries of the stored calibration and held-out rows),
// the held-out rows (W_O from m, whose shapes must match the store) and both
// passes' statistics, replaying the stored pass-1 rows in the batches a
// forward run would use: with the same capture dtype the statistics equal the
// two-pass ones bit for bit. No forward pass.
enum oscar_status oscar_calib_plan_from_store(struct oscar_actstore * s, struct oscar_calib_plan * out);
enum oscar_status oscar_calib_heldout_from_store(struct oscar_actstore * s, const struct oscar_model * m,
                                                 struct oscar_calib_heldout * out, struct oscar_calib_timing * t);
// attn_scale: the model's (oscar_attn_scale_param; the held-out rows' attn_scale), for VATT's softmax;
// window [L]: each layer's sliding window (the held-out rows' window), for VATT's keys.
enum oscar_status oscar_calib_accumulate_from_store(struct oscar_actstore * s, const struct oscar_calib_plan * plan,
                                                    const struct oscar_calib_params * p, float attn_scale,
                                                    const int32_t * window,
                                                    struct oscar_stats ** out, struct oscar_calib_timing * t);
// Peak resident set size of this process so far (getrusage), MiB.
double oscar_calib_peak_rss_mb(void);

// ---- fit ----------------------------------------------------------------------------------
struct oscar_calib_fit {
    // What the stages make and the artifact carries: the rotations and eigenvalues (rot.n_rot = 1 or
    // Hkv), the clip ratios (rot.n_clip = rot.n_rot; the fixed ratios from oscar_calib_clip_alloc, else
    // the clip search's choice), OptR's key mean (rot.k_mean) and, with p->grouping AUTO, each
    // layer's choice (rot.head_layer: 1 = per-KV-head rotations kept, 0 = the layer's one replicated)
    struct oscar_rotations rot;
    double  orth_err_max;
    // with p->sign_search: the fp64 basis the rotations were composed from (oscar_fit_stats_basis),
    // canonical signs; the sign search reads and frees it (NULL otherwise)
    double * k_u, * v_u;                // [L, n_rot, D, D]
    double * k_lam, * v_lam;            // [L, n_rot, D]
    // with p->grouping AUTO (arrays per KV head, n_rot = Hkv; the choice in rot.head_layer, grouping.c)
    double  * err_layer, * err_head;    // [L] held-out post-W_O error of each candidate at its clips
};
// Rotations fitted per layer: p->grouping's (1 or Hkv; AUTO: Hkv, the arrays' width); f->rot.n_rot is Hkv
// with --refine optr or AUTO.
int32_t oscar_calib_fit_n_fitted(const struct oscar_calib_params * p, int32_t n_head_kv);
// The result arrays of every layer (zero; with --refine optr per KV head and k_mean when centring;
// with --sign-search the basis).
enum oscar_status oscar_calib_fit_alloc(const struct oscar_calib_params * p, int32_t n_layer, int32_t n_head_kv,
                                        int32_t head_dim, struct oscar_calib_fit * f);
// The fits of one layer, in the order they travel over the ranks: with p->grouping AUTO K and V of
// the layer's rotation, then K and V of each KV head (grouping.c's two candidates, 2 + 2·Hkv);
// else the fitted K rotations (1 or Hkv), then the V ones. Job i is V or K, of KV head *head or
// (-1) of the layer's covariance.
int32_t oscar_calib_fit_jobs(const struct oscar_calib_params * p, int32_t n_head_kv);
void oscar_calib_fit_job(const struct oscar_calib_params * p, int32_t n_head_kv, int32_t i, bool * is_v,
                         int32_t * head);
// Layer l's fits split over the ranks of dp: rank 0 makes every job's covariance from s (others
// pass s = NULL) and scatters them in contiguous shares (osc_dp_share); each rank fits its share
// with oscar_fit_rotation_basis (the one-process call on the same matrix: the same bits); the
// results come back to rank 0 in job order (osc_dp_gather_shares: placement only). Rank 0's
// items (out->buf; NULL elsewhere) hold per job its report, rotation and eigenvalues, and with
// p->sign_search the fp64 basis. One process: the same calls with one rank.
struct osc_dp;
struct oscar_calib_fit_items {
    int32_t n, head_dim;
    bool    basis;
    size_t  item;             // bytes per job
    unsigned char * buf;      // [n, item] on rank 0
};
enum oscar_status oscar_calib_fit_items(struct osc_dp * dp, const struct oscar_stats * s,
                                        const struct oscar_calib_params * p, int32_t l, int32_t n_head_kv,
                                        int32_t head_dim, struct oscar_calib_fit_items * out);
// Job i's results into rot [D, D], eig [D] (fp32), u [D, D] / lam [D] (fp64; NULL: not wanted) and rep.
void oscar_calib_fit_item_get(const struct oscar_calib_fit_items * it, int32_t i, float * rot, float * eig, double * u,
                              double * lam, struct oscar_fit_report * rep);
void oscar_calib_fit_items_free(struct oscar_calib_fit_items * it);
// Layer l's rotations (rank 0; the other ranks of dp call oscar_calib_fit_items with s = NULL) from s,
// whose layer l has ended both passes (later layers need not).
enum oscar_status oscar_calib_fit_layer(struct osc_dp * dp, const struct oscar_stats * s,
                                        const struct oscar_calib_params * p, int32_t l, struct oscar_calib_fit * f,
                                        struct oscar_calib_timing * t);
// --refine optr: layer l's fitted rotation (head 0) copied into its other KV heads.
void oscar_calib_fit_spread_heads(const struct oscar_calib_params * p, int32_t n_head_kv, int32_t l,
                                  struct oscar_calib_fit * f);
void oscar_calib_fit_free(struct oscar_calib_fit * f);

// ---- OptR refinement (refine.c) ----------------------------------------------------------
// Per layer: OptR (rotation/optr.h) on calibration rows, early-stopped on the
// held-out rows h; f becomes per KV head (n_rot = Hkv) and gets k_mean when
// p->optr_center. The training rows come from an activation store (all of them,
// --from-activations) or from the layer-major pass (struct oscar_calib_optr_rows:
// only the sequences OptR trains on, and the key sums of every calibration row
// for k_mean); both give the same bits.
struct oscar_calib_refine {
    int32_t n_layer, n_head_kv, steps, n_train_seq;
    bool    center;
    int32_t * k_kept, * v_kept;        // [L] heads that kept their refined R
    double  * k_base, * k_best;        // [L] held-out K loss (mean over heads) at R_base / as kept
    double  * v_base, * v_best;        // [L] the same for V
};
// One layer's training rows, kept by the layer-major pass as its calibration batches run:
// sequences 0 .. n_seq-1, the shortest prefix holding every sequence OptR picks (the first
// p->optr_train_seq long enough ones, as from a store), and with centring the fp64 key sums of
// every calibration row in row order. Reused layer after layer (one layer's rows in memory).
struct oscar_calib_optr_rows {
    int32_t n_seq;              // calibration sequences trained on or before (0 .. n_seq-1)
    int64_t n_rows;             // their rows: plan->seq_start[n_seq]
    int64_t n_local;            // this process's rows of them: [row_base, row_base + n_local)
    int64_t n_cal_rows;         // every calibration row (the key mean's)
    size_t  q_row, kv_row;      // floats per row
    float * q, * k, * v;        // [n_local, Hq·D / Hkv·D] of the current layer
    double * k_blocks;          // [ceil(n_cal_rows / OSCAR_OPTR_KEY_BLOCK), Hkv·D] the current layer's key
                                // block sums (centring), or NULL
    int64_t row_base;           // this process's first calibration row (data-parallel ranks; else 0)
    int64_t k_summed;           // this process's rows summed (and, up to n_local, kept) so far in the layer
    bool k_gathered;            // k_blocks hold every rank's rows of the layer (rank 0 of a data-parallel run)
    const int64_t * rank_rows;  // [n_ranks] calibration rows of every rank (data-parallel), or NULL: one process
    int32_t n_ranks;
    int32_t layer;              // the layer the rows are of (-1: none)
};
// How many leading calibration sequences hold every training sequence of p (0: none is long
// enough; -1: out of memory).
int32_t oscar_calib_optr_train_prefix(const struct oscar_calib_params * p, const struct oscar_calib_plan * plan,
                                      int32_t head_dim);
// The buffers for p and plan's calibration sequences, of a process running calibration rows
// [row_base, row_base + n_local) (one process: 0 and all); OSCAR_ERR_INVALID when no sequence is
// long enough for OptR (sink + recent + 8 rows).
enum oscar_status oscar_calib_optr_rows_alloc(const struct oscar_calib_params * p, const struct oscar_calib_plan * plan,
                                              int32_t n_head, int32_t n_head_kv, int32_t head_dim, int64_t row_base,
                                              int64_t n_local, struct oscar_calib_optr_rows * r);
// Whether a calibration batch starting at (this process's) row row0 has rows to keep or sum.
bool oscar_calib_optr_rows_want(const struct oscar_calib_optr_rows * r, int64_t row0);
// Layer l's calibration rows [row0, row0 + n) (batches in row order; a new layer starts over).
enum oscar_status oscar_calib_optr_rows_add(struct oscar_calib_optr_rows * r, int32_t l, int64_t row0, int64_t n,
                                            const float * q, const float * k, const float * v);
void oscar_calib_optr_rows_free(struct oscar_calib_optr_rows * r);

// The result arrays; refuses a store (or a fit) of another shape than h's.
enum oscar_status oscar_calib_refine_alloc(struct oscar_actstore * store, const struct oscar_calib_heldout * h,
                                           const struct oscar_calib_params * p, const struct oscar_calib_fit * f,
                                           struct oscar_calib_refine * out);
// Layer l (f per KV head, its base rotations in place): refined rotations and k_mean into f,
// trained on rows (the pass's, of layer l) or else on the store's. Split over the ranks of dp by
// KV head (optr-route.h): every rank calls it in the same order, rank 0 with f, out (and the store),
// the others with NULL and their own rows; each refines its heads (the bits one process gives
// them) and rank 0 gathers every head's result in head order.
enum oscar_status oscar_calib_refine_layer(struct osc_dp * dp, struct oscar_actstore * store,
                                           const struct oscar_calib_optr_rows * rows,
                                           const struct oscar_calib_plan * plan,
                                           const struct oscar_calib_heldout * h, const struct oscar_calib_params * p,
                                           int32_t l, struct oscar_calib_fit * f, struct oscar_calib_refine * out,
                                           struct oscar_calib_timing * t);
void oscar_calib_refine_free(struct oscar_calib_refine * r);

// ---- sign search (signs.c) --------------------------------------------------------------
// Per layer, after the fit and before OptR / the clip search: the signs of the
// canonical eigenvectors of every K and V rotation (per layer or per KV head)
// by deterministic coordinate descent on the held-out INT2 objective of the
// clip search (K: causal logit error, V: post-W_O error with exact attention;
// per KV head with per-head rotations), at the fixed clips p->k_clip /
// p->v_clip, with the target's quantizer, on p->eval_device. Eigenvector j of
// each rotation is flipped in turn (j = 0, 1, ..., D−1, again from 0) and the
// flip kept when the objective drops strictly; a rotation stops after D
// rejections in a row (no single flip helps) or p->sign_passes passes. K and V
// (and the KV heads) are searched side by side: one evaluation scores one
// flip of each, as their objectives do not depend on each other. f's rotations
// are recomposed from the kept signs (f->k_u .. v_lam, then freed). Refuses a
// composition without U (pbr, h_pbr) and a fit without the basis.
struct oscar_calib_signs {
    int32_t  n_layer, n_rot, head_dim, max_passes;
    int8_t * k_sign, * v_sign;          // [L, n_rot, D] kept signs relative to the canonical eigenvectors
    double * k_before, * k_after;       // [L] K objective (Σ num / Σ den over KV heads; per-head rotations: the
                                        // mean of the heads' objectives) canonical / searched
    double * v_before, * v_after;       // [L] V objective (per-head rotations: the heads' errors summed)
    int32_t * k_flips, * v_flips;       // [L] eigenvectors flipped
    int32_t * evals;                    // [L] evaluations of the layer
    double   mean_k_before, mean_k_after, mean_v_before, mean_v_after;
};
struct oscar_eval_dev;
// Validates (a composition with U, a fit with the basis) and allocates; n_rot = the fitted rotations.
enum oscar_status oscar_calib_signs_alloc(const struct oscar_calib_params * p, const struct oscar_calib_fit * f,
                                          int32_t n_head_kv, struct oscar_calib_signs * out);
// Layer l on ev (its held-out rows set by oscar_eval_dev_layer): f's fitted rotations of layer l
// become the searched ones.
enum oscar_status oscar_calib_signs_layer(struct oscar_eval_dev * ev, const struct oscar_calib_params * p,
                                          int32_t n_head_kv, int32_t l, struct oscar_calib_fit * f,
                                          struct oscar_calib_signs * out, struct oscar_calib_timing * t);
// After every layer: the means; f's basis is freed (consumed).
void oscar_calib_signs_end(struct oscar_calib_fit * f, struct oscar_calib_signs * out);
void oscar_calib_signs_free(struct oscar_calib_signs * s);

// ---- clip search (clip.c) ----------------------------------------------------------------
// The search's record; the chosen ratios go into the fit's rotations (f->rot.k_clip / v_clip).
struct oscar_calib_clip {
    int32_t n_layer, n_clip;        // n_clip = 1 (one choice pooled over the KV heads) or Hkv
    double * k_err, * v_err;        // [L, n_clip] objective at the chosen ratio
    double * k_err1, * v_err1;      // [L, n_clip] objective at ratio 1.0 (no clip)
    double k_global, v_global;      // engine-wide values: the model-wide choice for a target that shares
                                    // clips, else the median over layers
    int32_t n_grid;                 // a target sharing clips: the grid size of the arrays below, else 0
    double * grid_k, * grid_v;      // [L, n_grid] each layer's relative K / V objective per candidate (the
                                    // model-wide choice at the end picks from these), or NULL
};
// The record of a search pooled over the KV heads (n_clip 1) or per head; fixed clips: f's ratios
// set. Refuses shared clips with per-head rotations.
enum oscar_status oscar_calib_clip_alloc(const struct oscar_calib_params * p, int32_t n_clip,
                                         struct oscar_calib_fit * f, struct oscar_calib_clip * c);
// Layer l's candidates on ev (its rows set) with f's rotations, and its per-layer choice into f's
// clips (c's record); a no-op for fixed clips.
enum oscar_status oscar_calib_clip_layer(struct oscar_eval_dev * ev, const struct oscar_calib_params * p, int32_t l,
                                         struct oscar_calib_fit * f, struct oscar_calib_clip * c,
                                         struct oscar_calib_timing * t);
// The two halves of oscar_calib_clip_layer, for a search split over ranks (finish-split.c):
// the errors of grid candidates [c0, c1) on ev's layer (ek [G, Hkv] and evv [G, Hkv + 1] rows
// c0 .. c1-1, kref [Hkv], vref unless NULL; the whole grid's bits, eval-device.h; per_head: the
// record chooses per KV head, c->n_clip > 1), then, from the whole grid's errors, layer l's choice
// into c (ek is overwritten).
enum oscar_status oscar_calib_clip_errors(struct oscar_eval_dev * ev, const struct oscar_rotations * r,
                                          const struct oscar_calib_params * p, bool per_head, int32_t c0, int32_t c1,
                                          double * ek, double * kref, double * evv, double * vref);
void oscar_calib_clip_choose(const struct oscar_calib_params * p, int32_t l, double * ek, const double * kref,
                             const double * evv, double vref, struct oscar_rotations * r, struct oscar_calib_clip * c);
// After every layer: the model-wide choice of a target sharing clips (each layer's ratios and record
// replaced by it), else the medians.
void oscar_calib_clip_end(const struct oscar_calib_params * p, struct oscar_rotations * r, struct oscar_calib_clip * c);
void oscar_calib_clip_free(struct oscar_calib_clip * c);

// ---- gate (gate.c) ---------------------------------------------------------------------------
struct oscar_calib_gate {
    int32_t n_layer;
    double * naive, * hadamard, * oscar;   // [L] post-W_O relative error
    double mean_naive, mean_hadamard, mean_oscar;
    bool   pass;                           // mean_oscar < mean_hadamard && < mean_naive
};
enum oscar_status oscar_calib_gate_alloc(int32_t n_layer, struct oscar_calib_gate * g);
// Layer l on ev (its rows set), with r's rotations at r's clips of layer l (final for that layer).
// oscar_err: OSCAR's error when the caller already has it with these rotations and clips (grouping
// auto scores its choice with the gate's method: the same bits), else NULL.
enum oscar_status oscar_calib_gate_layer(struct oscar_eval_dev * ev, const struct oscar_rotations * r,
                                         const struct oscar_calib_params * p, int32_t l, const double * oscar_err,
                                         struct oscar_calib_gate * g, struct oscar_calib_timing * t);
// The gate's methods of `mask` (OSCAR_GATE_*) on ev's layer: err[0] naive, [1] Hadamard, [2]
// OSCAR (r needed only for it); each the bits of the three together (eval-device.h), so the
// ranks of a split gate may take a method each. r's shape says L, Hkv and D.
enum { OSCAR_GATE_NAIVE = 1, OSCAR_GATE_HADAMARD = 2, OSCAR_GATE_OSCAR = 4, OSCAR_GATE_ALL = 7 };
enum oscar_status oscar_calib_gate_methods(struct oscar_eval_dev * ev, const struct oscar_rotations * r,
                                           const struct oscar_calib_params * p, unsigned mask, double err[3]);
// After every layer: the means (layers in order) and the pass flag.
void oscar_calib_gate_end(struct oscar_calib_gate * g);
void oscar_calib_gate_free(struct oscar_calib_gate * g);

// ---- rotation grouping by evidence (grouping.c) ------------------------------------------------
// --rotation-grouping auto: per layer both candidates are fitted from the layer's sums (the
// layer's rotation from the per-head covariances summed, the per-KV-head ones from each),
// each clip-searched as its grouping would be (pooled over heads / per head; fixed clips
// as given), and scored with the gate's evaluator: held-out post-W_O relative error of
// "oscar-searched" at those clips. The per-head candidate is kept only when its error is
// strictly lower (ties -> layer, the smaller artifact). f holds the choice per KV head (the
// layer's rotation replicated) with its clips, c their record, f->rot.head_layer / err_layer /
// err_head the choice.
// Engine targets that load one rotation per layer, and --sign-search (it searches one
// basis per fit), resolve auto to LAYER first, with the reason in p->grouping_why.
struct oscar_calib_grouping {
    struct oscar_calib_clip clip_layer, clip_head;   // the candidates' clip records ([L] arrays, layer l used)
    struct oscar_rotations save;                     // one layer's layer candidate (rotations, eigenvalues, clips)
    struct oscar_rotations head;                     // one layer's per-head candidate as fitted
};
// AUTO -> LAYER where the target or the run cannot take per-head rotations (reason in p->grouping_why).
void oscar_calib_resolve_grouping(struct oscar_calib_params * p);
// "layer", "kv_head" or "auto" (the run's request).
const char * oscar_calib_grouping_name(enum oscar_rotation_grouping g);
enum oscar_status oscar_calib_grouping_alloc(const struct oscar_calib_params * p, struct oscar_calib_fit * f,
                                             struct oscar_calib_grouping * g);
// Layer l (ev's rows set): both candidates fitted from s, searched and scored; the better one left in
// f and c (the layer's clip record; with --refine optr the clip search runs again after OptR).
// Under mpirun (split, else NULL) the fits are split over dp's ranks (oscar_calib_fit_items), then
// the held-out rows h go to every rank and each candidate's clip grid is split over them
// (finish-split.h); the other ranks take part in osc_calib_split_work.
struct osc_calib_split;
enum oscar_status oscar_calib_grouping_layer(struct osc_dp * dp, struct osc_calib_split * split,
                                             struct oscar_eval_dev * ev, const struct oscar_stats * s,
                                             const struct oscar_calib_heldout * h, const struct oscar_calib_params * p,
                                             int32_t l, struct oscar_calib_fit * f, struct oscar_calib_clip * c,
                                             struct oscar_calib_grouping * g, struct oscar_calib_timing * t);
void oscar_calib_grouping_free(struct oscar_calib_grouping * g);

// ---- the finisher (finish.c) ----------------------------------------------------------------
// The stages after the sums, one layer at a time as the layer-major pass ends
// each layer: fit, --sign-search, --refine optr, clip search,
// gate; then end() makes what needs every layer (a shared clip choice, the
// means, the medians). One evaluator (p->eval_device) serves every stage.
// A target sharing clips model-wide runs the gate in end(), on every layer's
// held-out rows at the final ratio: its caller keeps them all.
struct oscar_calib_finisher {
    const struct oscar_calib_params * p;
    struct oscar_actstore * store;          // --refine optr's training rows (not owned), or NULL
    const struct oscar_calib_optr_rows * optr_rows; // or the layer-major pass's (not owned), or NULL
    const struct oscar_calib_plan * plan;   // their sequences
    int32_t n_layer, n_head_kv;
    struct oscar_calib_fit    fit;
    struct oscar_calib_signs  signs;        // with p->sign_search
    struct oscar_calib_refine refine;       // with p->refine_optr
    struct oscar_calib_clip   clip;
    struct oscar_calib_gate   gate;
    struct oscar_calib_grouping grouping;   // with p->grouping AUTO
    bool    gate_at_end;                    // clips shared over the model: the gate waits for end()
    int32_t n_done;                         // layers 0 .. n_done-1 are finished
    struct oscar_eval_dev * ev;
    struct oscar_calib_timing * t;
    struct osc_calib_split * split;         // rank 0 of several: clip search and gate shared with the
                                            // other ranks (finish-split.h; set by the pass), or NULL
    struct osc_dp * dp;                     // the group the fit, sign search and OptR are split over
                                            // (osc_dp_single() unless the pass sets its own)
};
// Whether p's gate waits for end() (clips shared model-wide: every layer's rows needed then).
bool oscar_calib_finish_gate_at_end(const struct oscar_calib_params * p);
// h: the held-out rows' shape and sequences (its rows may come later, a layer at a time).
enum oscar_status oscar_calib_finish_begin(struct oscar_calib_finisher * fin, const struct oscar_calib_params * p,
                                           const struct oscar_calib_heldout * h, struct oscar_actstore * store,
                                           const struct oscar_calib_plan * plan, struct oscar_calib_timing * t);
// Layer l (the next one, n_done) from its ended sums in s and its held-out rows h->q[l] ...
enum oscar_status oscar_calib_finish_layer(struct oscar_calib_finisher * fin, const struct oscar_stats * s,
                                           const struct oscar_calib_heldout * h, int32_t l);
// After every layer (h: every layer's rows when fin->gate_at_end, else unused).
enum oscar_status oscar_calib_finish_end(struct oscar_calib_finisher * fin, const struct oscar_calib_heldout * h);
// Every layer of s and h, then end (the store path: all rows at hand).
enum oscar_status oscar_calib_finish_all(struct oscar_calib_finisher * fin, const struct oscar_stats * s,
                                         const struct oscar_calib_heldout * h);
void oscar_calib_finish_free(struct oscar_calib_finisher * fin);

// ---- artifact (artifact.c) -------------------------------------------------------------------
struct oscar_artifact;
struct oscar_base_model;
struct oscar_calib_provenance {
    const struct oscar_model * model;
    const struct oscar_tokenizer * tok;
    const struct oscar_calib_corpus * corpus;
    const struct oscar_calib_plan * plan;
    const struct oscar_base_model * base; // Hub id and licence (base-model.h); NULL: none known
    const char * const * datasets;        // --dataset Hub ids (valid owner/name), n_datasets of them
    int32_t n_datasets;
};
// sg: the sign search's result (NULL: canonical signs).
enum oscar_status oscar_calib_build_artifact(const struct oscar_calib_provenance * prov,
                                             const struct oscar_calib_params * p, const struct oscar_calib_fit * f,
                                             const struct oscar_calib_signs * sg,
                                             const struct oscar_calib_clip * c, const struct oscar_calib_gate * g,
                                             const struct oscar_calib_timing * t, struct oscar_artifact ** out);
// "seq<T>_prompt<N>_group<G>" with the real counts.
void oscar_calib_tag(const struct oscar_calib_plan * plan, int32_t group_size, char * buf, size_t n);

#endif
