// finish-split.c - the clip search and gate of each layer split over the ranks
// (contract and the reasons for this split in finish-split.h), the other ranks'
// side of every split stage (osc_calib_split_work), and the counted collectives
// of all of them. Per layer and in this order on every rank: the fit's shares;
// broadcasts of the held-out q, k, v rows; with --rotation-grouping auto and a
// clip search, each candidate's grid (layer, then per KV head: rotations out,
// grid shares back); OptR's shares; with a clip search not chosen by auto's
// candidates, the final rotations out and grid shares back; one gather of gate
// errors (when the gate runs per layer). A grid round broadcasts rank 0's
// rotation layout (1 or Hkv per layer) and whether the record chooses per KV
// head, then the rotations. W_O is not sent: every rank keeps the copy its own
// backend ran (layer-pass.c).
#include <stdlib.h>
#include <string.h>

#include "calibrate/calib-verify.h"
#include "calibrate/finish-split.h"
#include "util/log.h"

struct osc_calib_split {
    struct osc_dp * dp;
    const struct oscar_calib_params * p;
    const struct oscar_calib_plan * plan;
    const struct oscar_calib_optr_rows * optr;   // this rank's part of OptR's training rows, or NULL
    int32_t Hkv, G;
    bool candidates;     // auto's two candidates each get a clip search (grouping.c) ...
    bool final_grid;     // ... and the final rotations one (not when auto without OptR keeps a candidate's)
    bool oscar_scored;   // auto without OptR: the kept candidate's score is the gate's OSCAR error
    bool gate_per_layer;
    struct oscar_rotations view;   // ranks > 0: the layer's rotations, laid out as rank 0's fit (n_rot
                                   // from rank 0 each layer; room for Hkv per layer)
    struct oscar_eval_dev * ev;    // ranks > 0: their evaluator
    double * ek, * kref, * evv, * pack;   // [G, Hkv], [Hkv], [G, Hkv + 1], [G, 2 Hkv + 1]
};

// this rank's (a thread under --ranks)
static _Thread_local int64_t bytes_sent[OSC_SPLIT_STAGES], bytes_received[OSC_SPLIT_STAGES];

const char * osc_calib_split_stage_name(enum osc_split_stage s) {
    static const char * const names[OSC_SPLIT_STAGES] = {"fit", "held-out rows", "sign search", "OptR",
                                                         "clip search and gate"};
    return s >= 0 && s < OSC_SPLIT_STAGES ? names[s] : "?";
}

void osc_calib_split_stage_bytes(enum osc_split_stage s, int64_t * sent, int64_t * received) {
    *sent = bytes_sent[s], *received = bytes_received[s];
}

void osc_calib_split_bytes(int64_t * sent, int64_t * received) {
    *sent = *received = 0;
    for (int s = 0; s < OSC_SPLIT_STAGES; s++) *sent += bytes_sent[s], *received += bytes_received[s];
}

enum oscar_status osc_calib_bcast(struct osc_dp * dp, enum osc_split_stage s, void * buf, size_t n) {
    if (dp->rank == 0) bytes_sent[s] += (int64_t) n * (dp->size - 1);
    else bytes_received[s] += (int64_t) n;
    return dp->ops->bcast(dp, buf, n);
}

// Bytes of rank r's share of n items.
static int64_t share_bytes(const struct osc_dp * dp, int32_t r, int64_t n, size_t item) {
    int64_t b0, b1;
    osc_dp_share(dp, r, n, &b0, &b1);
    return (b1 - b0) * (int64_t) item;
}

enum oscar_status osc_calib_gather_shares(struct osc_dp * dp, enum osc_split_stage s, int64_t n, size_t item,
                                          const void * mine, void * all) {
    const int64_t own = share_bytes(dp, dp->rank, n, item);
    if (dp->rank) bytes_sent[s] += own;
    else bytes_received[s] += n * (int64_t) item - own;
    return osc_dp_gather_shares(dp, n, item, mine, all);
}

enum oscar_status osc_calib_scatter_shares(struct osc_dp * dp, enum osc_split_stage s, int64_t n, size_t item,
                                           const void * all, void * mine) {
    const int64_t own = share_bytes(dp, dp->rank, n, item);
    if (dp->rank) bytes_received[s] += own;
    else bytes_sent[s] += n * (int64_t) item - own;
    return osc_dp_scatter_shares(dp, n, item, all, mine);
}

enum oscar_status osc_calib_gather(struct osc_dp * dp, enum osc_split_stage s, const void * send, size_t n,
                                   void ** recv, size_t * counts) {
    enum oscar_status st = dp->ops->gather(dp, send, n, recv, counts);
    if (dp->rank) bytes_sent[s] += (int64_t) n;
    for (int32_t r = 1; st == OSCAR_OK && dp->rank == 0 && r < dp->size; r++) bytes_received[s] += (int64_t) counts[r];
    return st;
}

enum oscar_status osc_calib_scatter(struct osc_dp * dp, enum osc_split_stage s, const void * send,
                                    const size_t * counts, void * recv, size_t n) {
    if (dp->rank) bytes_received[s] += (int64_t) n;
    for (int32_t r = 1; dp->rank == 0 && r < dp->size; r++) bytes_sent[s] += (int64_t) counts[r];
    return dp->ops->scatter(dp, send, counts, recv, n);
}

bool osc_calib_split_applies(const struct osc_dp * dp) {
    return dp && dp->size > 1;
}

void osc_calib_split_free(struct osc_calib_split * s) {
    if (!s) return;
    oscar_rotations_free(&s->view);
    oscar_eval_dev_free(s->ev);
    free(s->ek), free(s->kref), free(s->evv), free(s->pack);
    free(s);
}

enum oscar_status osc_calib_split_open(struct osc_dp * dp, const struct oscar_calib_params * p,
                                       const struct oscar_calib_heldout * h, const struct oscar_calib_plan * plan,
                                       const struct oscar_calib_optr_rows * optr, struct osc_calib_split ** out) {
    *out = NULL;
    struct osc_calib_split * s = calloc(1, sizeof *s);
    if (!s) return osc_error(OSCAR_ERR_NOMEM, "finishing split: out of memory");
    // --rotation-grouping auto searches the clips of both candidates (grouping.c); without OptR the kept
    // candidate's clips are final, with OptR the refined rotations get a search of their own
    const bool autog = p->grouping == OSCAR_GROUP_AUTO;
    s->dp = dp, s->p = p, s->plan = plan, s->optr = optr;
    s->Hkv = h->n_head_kv, s->G = p->clip_search ? p->n_grid : 0;
    s->candidates = autog && s->G > 0, s->final_grid = s->G > 0 && (!autog || p->refine_optr);
    s->oscar_scored = autog && !p->refine_optr;
    s->gate_per_layer = !oscar_calib_finish_gate_at_end(p);
    const size_t G = (size_t) (s->G > 0 ? s->G : 1), H = (size_t) s->Hkv;
    s->ek = calloc(G * H, sizeof(double)), s->kref = calloc(H, sizeof(double));
    s->evv = calloc(G * (H + 1), sizeof(double)), s->pack = calloc(G * (2 * H + 1), sizeof(double));
    bool ok = s->ek && s->kref && s->evv && s->pack;
    enum oscar_status st = OSCAR_OK;
    if (ok && dp->rank != 0) { // the fit's rotation layout (fit.c), and an evaluator like rank 0's
        st = oscar_rotations_alloc(&s->view, h->n_layer, h->n_head_kv, h->head_dim, h->n_head_kv, h->n_head_kv,
                                   p->refine_optr && p->optr_center, false);   // OptR's key mean, as rank 0's
        if (st == OSCAR_OK) st = osc_calib_eval_open(h, p, p->clip_search && p->n_grid > 1 ? p->n_grid : 1, &s->ev);
    }
    if (!ok) st = osc_error(OSCAR_ERR_NOMEM, "finishing split: out of memory");
    if (st != OSCAR_OK) {
        osc_calib_split_free(s);
        return st;
    }
    *out = s;
    return OSCAR_OK;
}

static enum oscar_status bcast(struct osc_calib_split * s, void * buf, size_t n) {
    return osc_calib_bcast(s->dp, OSC_SPLIT_CLIP_GATE, buf, n);
}

enum oscar_status osc_calib_split_rows(struct osc_calib_split * s, const struct oscar_calib_heldout * h, int32_t l) {
    const size_t T = (size_t) h->n_rows, D = (size_t) h->head_dim, H = (size_t) h->n_head_kv;
    enum oscar_status st = osc_calib_bcast(s->dp, OSC_SPLIT_ROWS, h->q[l], T * (size_t) h->n_head * D * sizeof(float));
    if (st == OSCAR_OK) st = osc_calib_bcast(s->dp, OSC_SPLIT_ROWS, h->k[l], T * H * D * sizeof(float));
    if (st == OSCAR_OK) st = osc_calib_bcast(s->dp, OSC_SPLIT_ROWS, h->v[l], T * H * D * sizeof(float));
    return st;
}

// Layer l's rotations r for a grid round, from rank 0 to every rank (the others' view): rank 0's
// layout (1 or Hkv rotations per layer) and whether the record chooses per KV head (*per_head, set
// on rank 0, received elsewhere), then the rotations and the key mean.
static enum oscar_status share_rotations(struct osc_calib_split * s, const struct oscar_rotations * r, int32_t l,
                                         bool * per_head) {
    const size_t D = (size_t) r->head_dim, H = (size_t) s->Hkv;
    int32_t layout[2] = {r->n_rot, *per_head};
    enum oscar_status st = bcast(s, layout, sizeof layout);
    if (st == OSCAR_OK && s->dp->rank != 0) {
        if (layout[0] != 1 && layout[0] != s->Hkv)
            return osc_error(OSCAR_ERR_IO, "finishing split: layer %d: rank 0 sent %d rotations per layer (1 or %d)",
                             (int) l, (int) layout[0], (int) s->Hkv);
        s->view.n_rot = layout[0], *per_head = layout[1] != 0;
    }
    const size_t nr = (size_t) layout[0] * D * D;   // layer l's block, from head 0
    if (st == OSCAR_OK) st = bcast(s, oscar_rotations_k(r, l, 0), nr * sizeof(float));
    if (st == OSCAR_OK) st = bcast(s, oscar_rotations_v(r, l, 0), nr * sizeof(float));
    if (st == OSCAR_OK && r->k_mean) st = bcast(s, oscar_rotations_k_mean(r, l, 0), H * D * sizeof(float));
    return st;
}

// This rank's share of the grid on ev's layer, gathered on rank 0 into s->ek / s->evv (rank 0 also
// gets kref and vref).
static enum oscar_status grid_share(struct osc_calib_split * s, struct oscar_eval_dev * ev,
                                    const struct oscar_rotations * r, bool per_head, double * vref) {
    const int32_t H = s->Hkv, item = 2 * H + 1;
    int64_t c0, c1;
    osc_dp_share(s->dp, s->dp->rank, s->G, &c0, &c1);
    enum oscar_status st = OSCAR_OK;
    if (c1 > c0 || vref)   // rank 0 always: it needs the references
        st = oscar_calib_clip_errors(ev, r, s->p, per_head, (int32_t) c0, (int32_t) c1, s->ek, s->kref, s->evv, vref);
    for (int64_t c = c0; st == OSCAR_OK && c < c1; c++) { // one item per candidate: its K row, its V row
        double * it = s->pack + (size_t) (c - c0) * (size_t) item;
        memcpy(it, s->ek + (size_t) c * (size_t) H, (size_t) H * sizeof(double));
        memcpy(it + H, s->evv + (size_t) c * (size_t) (H + 1), (size_t) (H + 1) * sizeof(double));
    }
    double * all = s->dp->rank == 0 ? malloc((size_t) s->G * (size_t) item * sizeof(double) + 1) : NULL;
    if (st == OSCAR_OK && s->dp->rank == 0 && !all) st = osc_error(OSCAR_ERR_NOMEM, "clip search: out of memory");
    if (st == OSCAR_OK)
        st = osc_calib_gather_shares(s->dp, OSC_SPLIT_CLIP_GATE, s->G, (size_t) item * sizeof(double), s->pack, all);
    for (int32_t c = 0; st == OSCAR_OK && s->dp->rank == 0 && c < s->G; c++) {
        const double * it = all + (size_t) c * (size_t) item;
        memcpy(s->ek + (size_t) c * (size_t) H, it, (size_t) H * sizeof(double));
        memcpy(s->evv + (size_t) c * (size_t) (H + 1), it + H, (size_t) (H + 1) * sizeof(double));
    }
    free(all);
    return st;
}

// The rank that evaluates gate method m (0 naive, 1 Hadamard, 2 OSCAR): OSCAR on rank 0 (it has
// the chosen clips), naive on rank 1, Hadamard on rank 2 or, with two ranks, rank 1. When the OSCAR
// error is known already (oscar_scored: nobody evaluates it), naive and Hadamard go to ranks 0 and 1
// with two ranks, to ranks 1 and 2 with more.
static int32_t gate_rank(int32_t m, int32_t size, bool oscar_scored) {
    if (m == 2 || size == 1) return 0;
    if (oscar_scored && size == 2) return m;
    return m == 0 || size == 2 ? 1 : 2;
}

static unsigned gate_mask(int32_t rank, int32_t size, bool oscar_scored) {
    unsigned mask = 0;
    for (int32_t m = 0; m < 3; m++)
        if (gate_rank(m, size, oscar_scored) == rank && !(m == 2 && oscar_scored)) mask |= 1u << m;
    return mask;
}

// This rank's gate methods on ev's layer; rank 0 gets every method's error in err.
static enum oscar_status gate_share(struct osc_calib_split * s, struct oscar_eval_dev * ev,
                                    const struct oscar_rotations * r, double err[3]) {
    double mine[3] = {0};
    const unsigned mask = gate_mask(s->dp->rank, s->dp->size, s->oscar_scored);
    enum oscar_status st = mask ? oscar_calib_gate_methods(ev, r, s->p, mask, mine) : OSCAR_OK;
    size_t * counts = calloc((size_t) s->dp->size, sizeof(size_t));
    double * all = NULL;
    if (st == OSCAR_OK && !counts) st = osc_error(OSCAR_ERR_NOMEM, "gate: out of memory");
    if (st == OSCAR_OK) st = osc_calib_gather(s->dp, OSC_SPLIT_CLIP_GATE, mine, sizeof mine, (void **) &all, counts);
    for (int32_t m = 0; st == OSCAR_OK && s->dp->rank == 0 && m < 3; m++) {
        const int32_t rk = gate_rank(m, s->dp->size, s->oscar_scored);
        if (m == 2 && s->oscar_scored) continue;   // the caller's
        if (counts[rk] != sizeof mine) st = osc_error(OSCAR_ERR_IO, "gate: rank %d sent %zu bytes", (int) rk, counts[rk]);
        else err[m] = all[(size_t) rk * 3 + (size_t) m];
    }
    free(all), free(counts);
    return st;
}

// Rank 0: one grid round on ev's layer l with f's rotations, the choice into c (oscar_calib_clip_layer's).
static enum oscar_status grid_round(struct osc_calib_split * s, struct oscar_eval_dev * ev, int32_t l,
                                    struct oscar_calib_fit * f, struct oscar_calib_clip * c) {
    bool per_head = c->n_clip > 1;
    double vref = 0.0;
    enum oscar_status st = share_rotations(s, &f->rot, l, &per_head);
    if (st == OSCAR_OK && (st = grid_share(s, ev, &f->rot, per_head, &vref)) == OSCAR_OK)
        oscar_calib_clip_choose(s->p, l, s->ek, s->kref, s->evv, vref, &f->rot, c);
    return st;
}

// The other ranks' side of grid_round.
static enum oscar_status grid_round_work(struct osc_calib_split * s, int32_t l) {
    bool per_head = false;
    enum oscar_status st = share_rotations(s, &s->view, l, &per_head);
    return st == OSCAR_OK ? grid_share(s, s->ev, &s->view, per_head, NULL) : st;
}

enum oscar_status osc_calib_split_candidate(struct osc_calib_split * s, struct oscar_eval_dev * ev, int32_t l,
                                            struct oscar_calib_fit * f, struct oscar_calib_clip * c,
                                            struct oscar_calib_timing * t) {
    if (!s->candidates) return OSCAR_OK;   // fixed clips, as oscar_calib_clip_layer
    const double t0 = osc_now();
    enum oscar_status st = grid_round(s, ev, l, f, c);
    if (t) t->clip += osc_now() - t0;
    return st;
}

enum oscar_status osc_calib_split_finish(struct osc_calib_split * s, struct oscar_calib_finisher * fin, int32_t l) {
    struct oscar_calib_timing * t = fin->t;
    double t0 = osc_now();
    enum oscar_status st = s->final_grid ? grid_round(s, fin->ev, l, &fin->fit, &fin->clip) : OSCAR_OK;
    if (t) t->clip += osc_now() - t0;
    t0 = osc_now();
    double err[3] = {0};
    if (s->oscar_scored)   // grouping.c scored the kept candidate: the same evaluation
        err[2] = fin->fit.rot.head_layer[l] ? fin->fit.err_head[l] : fin->fit.err_layer[l];
    if (st == OSCAR_OK && s->gate_per_layer && (st = gate_share(s, fin->ev, &fin->fit.rot, err)) == OSCAR_OK)
        fin->gate.naive[l] = err[0], fin->gate.hadamard[l] = err[1], fin->gate.oscar[l] = err[2];
    if (t) t->gate += osc_now() - t0;
    return st;
}

enum oscar_status osc_calib_split_work(struct osc_calib_split * s, struct oscar_calib_heldout * h, int32_t l) {
    struct oscar_calib_fit_items fit;   // rank 0 keeps the fits
    enum oscar_status st = oscar_calib_fit_items(s->dp, NULL, s->p, l, h->n_head_kv, h->head_dim, &fit);
    oscar_calib_fit_items_free(&fit);
    if (st == OSCAR_OK) st = osc_calib_split_rows(s, h, l);
    const struct oscar_layer_input in = osc_calib_layer_input(h, l);
    if (st == OSCAR_OK) st = oscar_eval_dev_layer(s->ev, &in);
    for (int32_t c = 0; st == OSCAR_OK && s->candidates && c < 2; c++) st = grid_round_work(s, l);   // auto's two
    if (st == OSCAR_OK && s->p->refine_optr)   // this rank's KV heads
        st = oscar_calib_refine_layer(s->dp, NULL, s->optr, s->plan, h, s->p, l, NULL, NULL, NULL);
    if (st == OSCAR_OK && s->final_grid) st = grid_round_work(s, l);
    double err[3];
    if (st == OSCAR_OK && s->gate_per_layer) st = gate_share(s, s->ev, &s->view, err);
    return st;
}
