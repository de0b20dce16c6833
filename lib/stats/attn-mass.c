// attn-mass.c - attention-mass token weights for the experimental VATT
// V covariance (method.md §2 note, §22 item 11).
//
// For KV head h and token t of a sequence [a, b):
//   p_{j,i,t} = exp(l_{j,i,t} - m) / Σ_{t'≤i} exp(l_{j,i,t'} - m),  l = q_{i,j}·k_{t,h}·scale,  a ≤ t ≤ i
// (scale = 1/√D, or the model's attn_scale: Gemma 3's query_pre_attn_scalar^-1/2)
//   w_{h,t}   = Σ_{j∈J(h)} Σ_{i=t}^{b-1} p_{j,i,t}²
// A sliding layer (chunk window W > 0) narrows both sums to its window, keys i - W < t ≤ i, as the
// forward attends; W = 0 runs exactly the operations of full causal attention.
// i.e. the diagonal of SᵀS (column energy of the causal softmax matrix),
// summed over the g query heads of the group. Computed in fp64, blocked over
// query rows (O(n²) per sequence, memory O(QB·n)). Each (sequence, KV head)
// is one work item of one thread, accumulated in a fixed order (heads j,
// then query blocks, then rows), so the weights are deterministic.
// Keys before the chunk are not seen: sequences are taken as complete.
//
// n = sequence length, QB = query rows per block.
#include "stats/stats-internal.h"

#include "attention/attention.h"
#include "util/blas.h"
#include <math.h>
#include <omp.h>

#define ATT_QBLOCK 64 // must match the scratch sizing in stats.c

static void seq_head_weights(struct oscar_stats * s, const struct oscar_stats_chunk * c, int32_t a, int32_t b,
                             int32_t h, double * scr) {
    const int32_t D = s->p.head_dim, Hq = s->p.n_head, H = s->p.n_head_kv, n = b - a, W = c->window;
    const size_t T = (size_t) s->max_tokens;
    double * K = scr;                               // [n, D]
    double * Qb = K + T * (size_t) D;               // [QB, D]
    double * Lg = Qb + (size_t) ATT_QBLOCK * D;     // [QB, n]
    double * wc = Lg + (size_t) ATT_QBLOCK * T;     // [n]
    const double scale = oscar_attn_score_scale(s->p.attn_scale, D);
    for (int32_t t = 0; t < n; t++) {
        const float * src = c->k + ((size_t) (a + t) * (size_t) H + (size_t) h) * (size_t) D;
        for (int32_t d = 0; d < D; d++) K[(size_t) t * D + d] = (double) src[d];
        wc[t] = 0.0;
    }
    for (int32_t r = 0; r < s->g; r++) {
        const int32_t j = h * s->g + r;
        for (int32_t i0 = 0; i0 < n; i0 += ATT_QBLOCK) {
            const int32_t nb = n - i0 < ATT_QBLOCK ? n - i0 : ATT_QBLOCK;
            const int32_t nk = i0 + nb; // keys 0 .. nk-1 are visible to some row of the block
            // (with a window the block's first rows see none of its earliest keys: the dgemm covers them anyway)
            for (int32_t i = 0; i < nb; i++) {
                const float * src = c->q + ((size_t) (a + i0 + i) * (size_t) Hq + (size_t) j) * (size_t) D;
                for (int32_t d = 0; d < D; d++) Qb[(size_t) i * D + d] = (double) src[d];
            }
            // Lg [nb, nk] = scale · Qb Kᵀ
            osc_dgemm(1, CblasNoTrans, CblasTrans, nb, nk, D, scale, Qb, D, K, D, 0.0, Lg, nk);
            for (int32_t i = 0; i < nb; i++) {
                const double * row = Lg + (size_t) i * nk;
                const int32_t last = i0 + i; // causal: keys first .. last
                const int32_t first = W > 0 && last - W + 1 > 0 ? last - W + 1 : 0;
                double m = row[first];
                for (int32_t t = first + 1; t <= last; t++) m = row[t] > m ? row[t] : m;
                double z = 0.0;
                for (int32_t t = first; t <= last; t++) z += exp(row[t] - m);
                for (int32_t t = first; t <= last; t++) {
                    const double p = exp(row[t] - m) / z;
                    wc[t] += p * p;
                }
            }
        }
    }
    for (int32_t t = 0; t < n; t++) s->wchunk[(size_t) (a + t) * (size_t) H + (size_t) h] = wc[t];
}

void osc_stats_attn_mass(struct oscar_stats * s, const struct oscar_stats_chunk * c) {
    const int32_t H = s->p.n_head_kv, n_items = c->n_seq * H;
#pragma omp parallel for num_threads(s->n_threads) schedule(static)
    for (int32_t it = 0; it < n_items; it++) {
        const int32_t seq = it / H, h = it % H;
        double * scr = s->att_scr + (size_t) omp_get_thread_num() * s->att_per_thread;
        seq_head_weights(s, c, c->seq_start[seq], c->seq_start[seq + 1], h, scr);
    }
}
