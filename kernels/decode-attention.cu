// decode-attention.cu - fused split-K decode attention over the tiered cache
// (contract in decode-attention.cuh).
//
// Stage 1: one CTA of 4 warps per (split, KV head, sequence). Each warp walks
// 16-token tiles (warp w takes tiles w, w+4, ...) with mma.sync m16n8k16 bf16:
//   QK:  A = q rows (rows 0..7: bf16 hi part of the g heads, rows 8..15: lo part),
//        B = K^T (16 dims x 8 tokens), two n-tiles per 16 tokens;
//   PV:  A = softmax weights (same hi/lo rows, 16 tokens), B = V (16 tokens x 8 dims).
// q is permuted once into the crumb-plane order of the packed bytes, so INT2 K
// is never re-interleaved: a thread's 8 code bytes unpack to bf16 pairs with one
// shift and one LOP3 ((w >> s) & 0x00030003 | 0x43004300 = 128 + c, exactly).
// The +128 offset and the zero point are removed with per-head scalars:
//   q.k^ = scale * (sum q(128+c) - (zero+128) * sum q)
//   sum_t p v^_t = sum_t (p scale)(128+c_t) - sum_t (p scale)(zero_t+128).
// Scores are kept in log2 units (q pre-scaled by D^-1/2 * log2 e).
// Stage 2: one CTA per (query head, sequence) merges the splits by the
// running-max log-sum-exp recurrence of attention.h and applies R_V^T.
#include "kernels/decode-attention.cuh"
#include "kernels/cuda-common.cuh"

#include <cuda_bf16.h>

#define AD      128   // head dim
#define TOK     16    // tokens per tile
#define NWARP   4
#define MAXG    8
#define NT_INT2 4     // INT2 tiles fetched together per warp iteration (bytes in flight)

struct frag_q { uint32_t a[8][4]; float qsum; };

static __device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ uint32_t bf16_bits(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
static __device__ __forceinline__ float bf16_val(uint32_t b) { return __uint_as_float(b << 16); }

// x = hi + lo with both parts bf16; returns (hi bits, lo bits).
static __device__ __forceinline__ void split_hilo(float x, uint32_t & hi, uint32_t & lo) {
    hi = bf16_bits(x);
    lo = bf16_bits(x - bf16_val(hi));
}

// Dim of the low element of crumb pair P (0..15) of lane group j in the K layout:
// bytes 8j + 4i + hb (low half) and + 2 (high half), crumb plane kc.
static __device__ __forceinline__ int k_dim(int j, int P) {
    return 8 * j + 4 * (P >> 3) + ((P >> 2) & 1) + 32 * (P & 3);
}
// Dim of output column n' of n-tile nt in the V layout: byte 4n' + nt/4, crumb nt%4.
static __device__ __forceinline__ int v_dim(int nt, int n) { return 4 * n + (nt >> 2) + 32 * (nt & 3); }

static __device__ __forceinline__ uint32_t crumbs(uint32_t w, int shift) {
    return ((w >> shift) & 0x00030003u) | 0x43004300u;
}

struct tier_ref {
    const int32_t * pt;   // this sequence's block table
    int32_t pos0;         // recent tier: position of tier index 0 (for the ring)
    int32_t ring;         // 0 = no ring
};

// Pool row (slot * Hkv + h) of tier index idx.
static __device__ __forceinline__ int32_t tier_row(const struct oscar_cuda_kv_view & kv, const tier_ref & t, int32_t idx,
                                                   int h, int lps) {
    int32_t j = t.ring ? (t.pos0 + idx) % t.ring : idx;
    int32_t slot = (t.pt[j >> lps] << lps) | (j & ((1 << lps) - 1));
    return slot * kv.n_head_kv + h;
}

struct state {
    float m, l, corr;
    float acc[16][4];
};

// Softmax update + PV for one tile. S[4]: combined hi+lo scores of tokens 2j, 2j+1,
// 2j+8, 2j+9 (raw dot products); ks/kz: K scale and zero+128 (1, 0 for BF16 rows);
// vs/vz likewise for V. vb(nt, b0, b1) yields the V B-fragments.
template <typename VB>
static __device__ __forceinline__ void tile_update(state & st, const float S[4], const float ks[4], const float kz[4],
                                                   const float vs[4], const float vz[4], const bool valid[4],
                                                   float qsum, VB vb) {
    float s2[4], mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s2[i] = valid[i] ? ks[i] * (S[i] - kz[i] * qsum) : -INFINITY;
        mx = fmaxf(mx, s2[i]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    if (mx > st.m) {
        float alpha = exp2f(st.m - mx);
        st.l *= alpha, st.corr *= alpha;
#pragma unroll
        for (int nt = 0; nt < 16; nt++)
#pragma unroll
            for (int c = 0; c < 4; c++) st.acc[nt][c] *= alpha;
        st.m = mx;
    }
    uint32_t hi[4], lo[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float p = exp2f(s2[i] - st.m);   // 0 for masked tokens
        st.l += p;
        split_hilo(p * vs[i], hi[i], lo[i]);
        st.corr += (bf16_val(hi[i]) + bf16_val(lo[i])) * vz[i];
    }
    uint32_t pa[4] = { hi[0] | hi[1] << 16, lo[0] | lo[1] << 16, hi[2] | hi[3] << 16, lo[2] | lo[3] << 16 };
#pragma unroll
    for (int nt = 0; nt < 16; nt++) {
        uint32_t b0, b1;
        vb(nt, b0, b1);
        mma_bf16(st.acc[nt], pa, b0, b1);
    }
}

// ---- INT2 tiles --------------------------------------------------------------------

struct int2_raw {
    uint2 k[2];          // code bytes 8j..8j+7 of tokens n and n+8 (n = lane/4)
    uint32_t v[4];       // code bytes 4n..4n+3 of tokens 2j, 2j+1, 2j+8, 2j+9
    float2 meta;         // lanes 0-15: K (scale, zero) of token lane; 16-31: V of token lane-16
};

static __device__ __forceinline__ float2 load_meta(const void * meta, int bf16, int32_t row) {
    if (bf16) {
        uint32_t w = __ldg((const uint32_t *) meta + row);
        return make_float2(bf16_val(w & 0xffffu), bf16_val(w >> 16));
    }
    return __ldg((const float2 *) meta + row);
}

static __device__ __forceinline__ void int2_fetch(const struct oscar_cuda_kv_view & kv, const tier_ref & t, int h,
                                                  int lps, int32_t tb, int32_t end, int lane, int2_raw & r) {
    int32_t idx = tb + (lane & 15);
    int32_t row = tier_row(kv, t, idx < end ? idx : tb, h, lps);
    int n = lane >> 2, j = lane & 3;
    int32_t rk0 = __shfl_sync(0xffffffffu, row, n), rk1 = __shfl_sync(0xffffffffu, row, n + 8);
    int32_t rv[4] = { __shfl_sync(0xffffffffu, row, 2 * j), __shfl_sync(0xffffffffu, row, 2 * j + 1),
                      __shfl_sync(0xffffffffu, row, 2 * j + 8), __shfl_sync(0xffffffffu, row, 2 * j + 9) };
    r.k[0] = __ldg((const uint2 *) (kv.q_k + (int64_t) rk0 * (AD / 4) + 8 * j));
    r.k[1] = __ldg((const uint2 *) (kv.q_k + (int64_t) rk1 * (AD / 4) + 8 * j));
#pragma unroll
    for (int i = 0; i < 4; i++) r.v[i] = __ldg((const uint32_t *) (kv.q_v + (int64_t) rv[i] * (AD / 4) + 4 * n));
    r.meta = load_meta(lane < 16 ? kv.q_k_meta : kv.q_v_meta, kv.meta_bf16, row);
}

static __device__ __forceinline__ void int2_compute(state & st, const frag_q & q, const int2_raw & r, int32_t tb,
                                                    int32_t end, int lane) {
    int j = lane & 3;
    float S[4];
#pragma unroll
    for (int half = 0; half < 2; half++) {
        float c[4] = { 0.f, 0.f, 0.f, 0.f };
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
            const int P0 = 2 * kk, P1 = 2 * kk + 1;
            uint32_t w0 = (P0 >> 3) ? r.k[half].y : r.k[half].x, w1 = (P1 >> 3) ? r.k[half].y : r.k[half].x;
            mma_bf16(c, q.a[kk], crumbs(w0, 8 * ((P0 >> 2) & 1) + 2 * (P0 & 3)),
                     crumbs(w1, 8 * ((P1 >> 2) & 1) + 2 * (P1 & 3)));
        }
        S[2 * half] = c[0] + c[2];
        S[2 * half + 1] = c[1] + c[3];
    }
    const int tok[4] = { 2 * j, 2 * j + 1, 2 * j + 8, 2 * j + 9 };
    float ks[4], kz[4], vs[4], vz[4];
    bool valid[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        ks[i] = __shfl_sync(0xffffffffu, r.meta.x, tok[i]);
        kz[i] = __shfl_sync(0xffffffffu, r.meta.y, tok[i]) + 128.0f;
        vs[i] = __shfl_sync(0xffffffffu, r.meta.x, tok[i] + 16);
        vz[i] = __shfl_sync(0xffffffffu, r.meta.y, tok[i] + 16) + 128.0f;
        valid[i] = tb + tok[i] < end;
    }
    uint32_t z[4][2];
#pragma unroll
    for (int a = 0; a < 4; a++) {
        uint32_t sel = a | a << 4 | (4 + a) << 8 | (4 + a) << 12;
        z[a][0] = __byte_perm(r.v[0], r.v[1], sel);
        z[a][1] = __byte_perm(r.v[2], r.v[3], sel);
    }
    tile_update(st, S, ks, kz, vs, vz, valid, q.qsum, [&](int nt, uint32_t & b0, uint32_t & b1) {
        b0 = crumbs(z[nt >> 2][0], 2 * (nt & 3));
        b1 = crumbs(z[nt >> 2][1], 2 * (nt & 3));
    });
}

// ---- BF16 tiles ----------------------------------------------------------------------

struct hp_raw {
    uint4 k[2][4];   // tokens n, n+8: dims 32kc + 8j .. +7 of each plane kc
    uint2 v[4][4];   // tokens 2j, 2j+1, 2j+8, 2j+9: dims 32kc + 4n .. +3
};

static __device__ __forceinline__ void hp_fetch(const struct oscar_cuda_kv_view & kv, const tier_ref & t, int h,
                                                int lps, int32_t tb, int32_t end, int lane, hp_raw & r) {
    int32_t idx = tb + (lane & 15);
    int32_t row = tier_row(kv, t, idx < end ? idx : tb, h, lps);
    int n = lane >> 2, j = lane & 3;
    const int src_k[2] = { n, n + 8 }, src_v[4] = { 2 * j, 2 * j + 1, 2 * j + 8, 2 * j + 9 };
#pragma unroll
    for (int tt = 0; tt < 2; tt++) {
        int64_t rk = __shfl_sync(0xffffffffu, row, src_k[tt]);
#pragma unroll
        for (int kc = 0; kc < 4; kc++) r.k[tt][kc] = __ldg((const uint4 *) (kv.hp_k + rk * AD + 32 * kc + 8 * j));
    }
#pragma unroll
    for (int tt = 0; tt < 4; tt++) {
        int64_t rv = __shfl_sync(0xffffffffu, row, src_v[tt]);
#pragma unroll
        for (int kc = 0; kc < 4; kc++) r.v[tt][kc] = __ldg((const uint2 *) (kv.hp_v + rv * AD + 32 * kc + 4 * n));
    }
}

static __device__ __forceinline__ void hp_compute(state & st, const frag_q & q, const hp_raw & r, int32_t tb,
                                                  int32_t end, int lane) {
    int j = lane & 3;
    float S[4];
#pragma unroll
    for (int half = 0; half < 2; half++) {
        float c[4] = { 0.f, 0.f, 0.f, 0.f };
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
            uint32_t b[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int P = 2 * kk + e, o = 4 * (P >> 3) + ((P >> 2) & 1);
                const uint4 W = r.k[half][P & 3];
                uint32_t x = (o & 4) ? W.z : W.x, y = (o & 4) ? W.w : W.y;
                b[e] = __byte_perm(x, y, (o & 1) ? 0x7632 : 0x5410);
            }
            mma_bf16(c, q.a[kk], b[0], b[1]);
        }
        S[2 * half] = c[0] + c[2];
        S[2 * half + 1] = c[1] + c[3];
    }
    const float one[4] = { 1.f, 1.f, 1.f, 1.f }, zero[4] = { 0.f, 0.f, 0.f, 0.f };
    bool valid[4] = { tb + 2 * j < end, tb + 2 * j + 1 < end, tb + 2 * j + 8 < end, tb + 2 * j + 9 < end };
    tile_update(st, S, one, zero, one, zero, valid, q.qsum, [&](int nt, uint32_t & b0, uint32_t & b1) {
        const int a = nt >> 2, kc = nt & 3;
        const uint32_t sel = (a & 1) ? 0x7632 : 0x5410;
        uint32_t x0 = (a >> 1) ? r.v[0][kc].y : r.v[0][kc].x, x1 = (a >> 1) ? r.v[1][kc].y : r.v[1][kc].x;
        uint32_t x2 = (a >> 1) ? r.v[2][kc].y : r.v[2][kc].x, x3 = (a >> 1) ? r.v[3][kc].y : r.v[3][kc].x;
        b0 = __byte_perm(x0, x1, sel);
        b1 = __byte_perm(x2, x3, sel);
    });
}

// ---- stage 1 ---------------------------------------------------------------------------

static __device__ void build_q(frag_q & f, const float * qh, int g, int lane, float qscale) {
    int r = lane >> 2, j = lane & 3;
    float sum = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int P = 2 * kk + e;
            int d = k_dim(j, P);
            float x0 = r < g ? qh[r * AD + d] * qscale : 0.0f, x1 = r < g ? qh[r * AD + d + 2] * qscale : 0.0f;
            uint32_t h0, l0, h1, l1;
            split_hilo(x0, h0, l0);
            split_hilo(x1, h1, l1);
            f.a[kk][2 * e] = h0 | h1 << 16;       // row r: hi part
            f.a[kk][2 * e + 1] = l0 | l1 << 16;   // row r + 8: lo part
            sum += (bf16_val(h0) + bf16_val(l0)) + (bf16_val(h1) + bf16_val(l1));
        }
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    f.qsum = sum;
}

__global__ void __launch_bounds__(NWARP * 32) decode_split_kernel(struct oscar_cuda_decode_args a) {
    const struct oscar_cuda_kv_view & kv = a.kv;
    __shared__ float sm_o[NWARP][MAXG][AD];
    __shared__ float sm_m[NWARP][MAXG], sm_l[NWARP][MAXG];
    int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int Hkv = kv.n_head_kv, g = a.n_head / Hkv, S_tot = a.splits[0] + a.splits[1] + a.splits[2];
    int tier = split < a.splits[0] ? 0 : split < a.splits[0] + a.splits[1] ? 1 : 2;
    int sp = split - (tier > 0 ? a.splits[0] : 0) - (tier > 1 ? a.splits[1] : 0);
    const int32_t * si = kv.seq_info + 4 * b;
    int32_t n_t = si[tier], S_t = a.splits[tier];
    int32_t per = (n_t + S_t - 1) / S_t, sl = (per + TOK - 1) / TOK * TOK;
    int32_t begin = sp * sl, end = min(begin + sl, n_t);
    float * lse_out = a.lse_part + ((int64_t) b * a.n_head + h * g) * S_tot + split;
    if (begin >= end) {
        if (threadIdx.x < g) lse_out[(int64_t) threadIdx.x * S_tot] = -INFINITY;
        return;
    }
    int lps = __ffs(kv.page_size) - 1;
    tier_ref t;
    t.pt = tier == 0 ? kv.sink_pt + (int64_t) b * kv.sink_pt_stride
         : tier == 1 ? kv.int2_pt + (int64_t) b * kv.int2_pt_stride
                     : kv.recent_pt + (int64_t) b * kv.recent_pt_stride;
    t.pos0 = si[0] + si[1];
    t.ring = tier == 2 ? kv.ring_slots : 0;

    frag_q q;
    build_q(q, a.q + ((int64_t) b * a.n_head + h * g) * AD, g, lane, rsqrtf((float) AD) * 1.4426950408889634f);
    state st;
    st.m = -INFINITY, st.l = 0.0f, st.corr = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 16; nt++)
#pragma unroll
        for (int c = 0; c < 4; c++) st.acc[nt][c] = 0.0f;

    if (tier == 1) {
        for (int32_t tb = begin + w * TOK; tb < end; tb += NWARP * TOK * NT_INT2) {
            int2_raw raw[NT_INT2];
#pragma unroll
            for (int i = 0; i < NT_INT2; i++) {
                int32_t ti = tb + i * NWARP * TOK;
                if (ti < end) int2_fetch(kv, t, h, lps, ti, end, lane, raw[i]);
            }
#pragma unroll
            for (int i = 0; i < NT_INT2; i++) {
                int32_t ti = tb + i * NWARP * TOK;
                if (ti < end) int2_compute(st, q, raw[i], ti, end, lane);
            }
        }
    } else {
        for (int32_t tb = begin + w * TOK; tb < end; tb += NWARP * TOK) {
            hp_raw raw;
            hp_fetch(kv, t, h, lps, tb, end, lane, raw);
            hp_compute(st, q, raw, tb, end, lane);
        }
    }

    // Warp results -> shared memory (un-normalized o, m, l per head).
    st.l += __shfl_xor_sync(0xffffffffu, st.l, 1);
    st.l += __shfl_xor_sync(0xffffffffu, st.l, 2);
    st.corr += __shfl_xor_sync(0xffffffffu, st.corr, 1);
    st.corr += __shfl_xor_sync(0xffffffffu, st.corr, 2);
    int r = lane >> 2, j = lane & 3;
    if (r < g) {
#pragma unroll
        for (int nt = 0; nt < 16; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) sm_o[w][r][v_dim(nt, 2 * j + e)] = st.acc[nt][e] + st.acc[nt][2 + e] - st.corr;
        if (j == 0) sm_m[w][r] = st.m, sm_l[w][r] = st.l;
    }
    __syncthreads();
    int d = threadIdx.x;
    for (int hh = 0; hh < g; hh++) {
        float M = -INFINITY;
        for (int ww = 0; ww < NWARP; ww++) M = fmaxf(M, sm_m[ww][hh]);
        float L = 0.0f, o = 0.0f;
        for (int ww = 0; ww < NWARP; ww++) {
            if (sm_m[ww][hh] == -INFINITY) continue;
            float e = exp2f(sm_m[ww][hh] - M);
            L += e * sm_l[ww][hh];
            o += e * sm_o[ww][hh][d];
        }
        int64_t row = ((int64_t) b * a.n_head + h * g + hh) * S_tot + split;
        a.o_part[row * AD + d] = L > 0.0f ? o / L : 0.0f;
        if (d == 0) a.lse_part[row] = L > 0.0f ? (M + log2f(L)) * 0.6931471805599453f : -INFINITY;
    }
}

// ---- stage 2 ---------------------------------------------------------------------------

__global__ void __launch_bounds__(AD) decode_merge_kernel(struct oscar_cuda_decode_args a) {
    __shared__ float so[AD];
    int hq = blockIdx.x, b = blockIdx.y, d = threadIdx.x;
    int S = a.splits[0] + a.splits[1] + a.splits[2];
    int64_t row0 = ((int64_t) b * a.n_head + hq) * S;
    float e_max = -INFINITY, e_sum = 0.0f, o = 0.0f;
    for (int s = 0; s < S; s++) {
        float lse = a.lse_part[row0 + s];
        if (lse == -INFINITY) continue;
        float n = fmaxf(e_max, lse), al = expf(e_max - n), be = expf(lse - n);
        o = o * al + be * a.o_part[(row0 + s) * AD + d];
        e_sum = e_sum * al + be;
        e_max = n;
    }
    o = e_sum > 0.0f ? o / e_sum : 0.0f;
    float * out = a.out + ((int64_t) b * a.n_head + hq) * AD;
    if (!a.rv_t) {
        out[d] = o;
        return;
    }
    so[d] = o;
    __syncthreads();
    float y = 0.0f;
    for (int e = 0; e < AD; e++) y = fmaf(so[e], a.rv_t[e * AD + d], y);
    out[d] = y;
}

extern "C" void oscar_cuda_decode_splits(int32_t n_seq, int32_t n_head_kv, int32_t n_sm, const int64_t max_len[3],
                                         int32_t splits[3]) {
    int64_t base = (int64_t) n_seq * n_head_kv, want = ((int64_t) n_sm * 4 + base - 1) / base;
    for (int t = 0; t < 3; t++) {
        int64_t cap = (max_len[t] + 255) / 256, s = want < cap ? want : cap;
        splits[t] = (int32_t) (s < 1 ? 1 : s);
    }
}

extern "C" enum oscar_status oscar_cuda_decode_attention(const struct oscar_cuda_decode_args * a, void * stream) {
    const struct oscar_cuda_kv_view * kv = &a->kv;
    int ps = kv->page_size;
    if (kv->head_dim != AD) return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda decode: head_dim %d (built for 128)", kv->head_dim);
    if (kv->n_head_kv < 1 || a->n_head % kv->n_head_kv != 0 || a->n_head / kv->n_head_kv > MAXG)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda decode: Hq %d / Hkv %d (GQA group must be 1..%d)", a->n_head,
                         kv->n_head_kv, MAXG);
    if (ps < 1 || (ps & (ps - 1)) != 0) return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda decode: page size %d", ps);
    if (a->splits[0] < 1 || a->splits[1] < 1 || a->splits[2] < 1 || a->n_seq < 1)
        return osc_error(OSCAR_ERR_INVALID, "cuda decode: splits and batch must be >= 1");
    dim3 g1(a->splits[0] + a->splits[1] + a->splits[2], kv->n_head_kv, a->n_seq);
    decode_split_kernel<<<g1, NWARP * 32, 0, (cudaStream_t) stream>>>(*a);
    OSCAR_CUDA_CHECK_LAUNCH();
    decode_merge_kernel<<<dim3(a->n_head, a->n_seq), AD, 0, (cudaStream_t) stream>>>(*a);
    OSCAR_CUDA_CHECK_LAUNCH();
    return OSCAR_OK;
}
