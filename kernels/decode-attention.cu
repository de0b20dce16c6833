// decode-attention.cu - fused split-K decode attention over the tiered cache
// (contract in decode-attention.cuh).
//
// Stage 1: two kernels, one CTA of 4 warps per (split, KV head [, head chunk,
// dim half], sequence). The BF16 tiers (sink, recent) use mma.sync m16n8k16 bf16
// with A = q rows (rows 0..7 bf16 hi part of up to 8 heads, 8..15 lo part) and
// B = K^T / V; the INT2 tier uses the transposed form (A = codes, B = q^T / P^T
// with hi/lo columns), cp.async-staged code tiles and in-place crumb masking (see
// the INT2 section below). q is permuted once into the crumb-plane order of the
// packed bytes, so INT2 K is never re-interleaved.
// Scores are kept in log2 units (q pre-scaled by D^-1/2 * log2 e).
// Stage 2: one CTA per (query head, sequence) merges the splits by the
// running-max log-sum-exp recurrence of attention.h and applies R_V^T.
// The three kernels are chained by programmatic dependent launch (pdl_wait), so
// each starts before the one before it ends; the call is CUDA-graph capturable.
//
// Every kernel is a template on the head dim D (64, 128, 256); geom<D> holds the
// fragment counts. The D = 128 instances are the kernels as tuned (PERF-NOTES.md).
#include "kernels/decode-attention.cuh"
#include "kernels/cuda-common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define TOK      16   // tokens per tile
#define NWARP    4
#define HP_HEADS 8    // query heads per CTA on the BF16 tiers (rows 0..7 of the q fragment)

static constexpr __host__ __device__ int cmax(int x, int y) { return x > y ? x : y; }

// Per-head-dim geometry. A quartered INT2 row has D/4 bytes, byte i holding dims
// i + (D/4) kc in crumb plane kc = 0..3; q and K dims are visited in k_dim order.
template <int D> struct geom {
    static_assert(D == 64 || D == 128 || D == 256, "decode kernels: head_dim 64, 128 or 256");
    static constexpr int KS = D / 16;             // m16n8k16 k-steps over the dims
    static constexpr int NW = D / 64;             // INT2 K: 32-bit code words per lane and token
    static constexpr int VB = D / 32;             // INT2 V: code bytes per lane and token
    static constexpr int MT = D / 16;             // INT2 PV: m-tiles of 16 dims
    static constexpr int NQMAX = 256 / D;         // INT2: 4-head column tiles per CTA (acc <= 64 floats)
    static constexpr int NS = D == 64 ? 8 : D == 128 ? 6 : 4;   // INT2 cp.async stages per warp (7.7-9.2 KB in flight)
    static constexpr int STG = 8 * D + 256;       // bytes per stage: K [16][D/4], V [16][D/4], K meta [16][8], V meta [16][8]
    static constexpr int DV = D < 128 ? D : 128;  // BF16 tiers: output dims per CTA
    static constexpr int NDS = D / DV;            // BF16 tiers: output-dim halves (2 at D 256)
    static constexpr int NT = DV / 8;             // BF16 tiers: PV n-tiles
    static constexpr int KW = D / 32;             // BF16 K: words per lane, token and plane (D/16 dims)
    static constexpr int VW = DV / 64;            // BF16 V: words per lane, token and plane (DV/32 dims)
};

static __device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ uint32_t bf16_bits(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
static __device__ __forceinline__ float bf16_val(uint32_t b) { return __uint_as_float(b << 16); }
// Two floats rounded to bf16 in one instruction: lo in bits 0..15, hi in 16..31.
static __device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
static __device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
static __device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// x = hi + lo with both parts bf16; returns (hi bits, lo bits).
static __device__ __forceinline__ void split_hilo(float x, uint32_t & hi, uint32_t & lo) {
    hi = bf16_bits(x);
    lo = bf16_bits(x - bf16_val(hi));
}

// N consecutive 32-bit words from global (read-only path) or shared memory, as one
// vector load where N allows (p aligned to min(N, 4) words).
template <int N> static __device__ __forceinline__ void ldg_words(uint32_t (&w)[N], const void * p) {
    if constexpr (N == 1) {
        w[0] = __ldg((const uint32_t *) p);
    } else if constexpr (N == 2) {
        uint2 x = __ldg((const uint2 *) p);
        w[0] = x.x, w[1] = x.y;
    } else {
#pragma unroll
        for (int i = 0; i < N / 4; i++) {
            uint4 x = __ldg((const uint4 *) p + i);
            w[4 * i] = x.x, w[4 * i + 1] = x.y, w[4 * i + 2] = x.z, w[4 * i + 3] = x.w;
        }
    }
}
template <int N> static __device__ __forceinline__ void lds_words(uint32_t (&w)[N], const uint8_t * p) {
    if constexpr (N == 1) {
        w[0] = *(const uint32_t *) p;
    } else if constexpr (N == 2) {
        uint2 x = *(const uint2 *) p;
        w[0] = x.x, w[1] = x.y;
    } else {
#pragma unroll
        for (int i = 0; i < N / 4; i++) {
            uint4 x = ((const uint4 *) p)[i];
            w[4 * i] = x.x, w[4 * i + 1] = x.y, w[4 * i + 2] = x.z, w[4 * i + 3] = x.w;
        }
    }
}

// Dim of the low element of crumb pair P (0..D/8-1) of lane group j in the K layout:
// bytes (D/16) j + 4 (P/8) + (P/4)%2 (low half) and + 2 (high half), crumb plane P%4.
template <int D> static __device__ __forceinline__ int k_dim(int j, int P) {
    return (D / 16) * j + 4 * (P >> 3) + ((P >> 2) & 1) + (D / 4) * (P & 3);
}
// BF16 tiers: CTA-local output column n of n-tile nt (byte (DV/32) n + nt/4 of a DV-dim
// row, crumb nt%4), and the head dim of local column l in output half `half`.
template <int D> static __device__ __forceinline__ int hp_local_dim(int nt, int n) {
    constexpr int DV = geom<D>::DV;
    return (DV / 32) * n + (nt >> 2) + (DV / 4) * (nt & 3);
}
template <int D> static __device__ __forceinline__ int hp_head_dim(int l, int half) {
    constexpr int DV = geom<D>::DV;
    if constexpr (geom<D>::NDS == 1) return l;
    const int kc = l / (DV / 4), n = (l % (DV / 4)) / (DV / 32), a = l % (DV / 32);
    return (D / 32) * n + (DV / 32) * half + a + (D / 4) * kc;
}

// The query heads of one CTA row: KV head h, chunk c of the GQA group cut into
// equal chunks of at most cap heads (the host counts them with the same formula).
struct head_chunk {
    int h, head0, g;      // KV head, first query head, query heads in the chunk (may be 0)
};
static __host__ __device__ __forceinline__ int chunk_count(int group, int cap) { return (group + cap - 1) / cap; }
static __host__ __device__ __forceinline__ int chunk_size(int group, int cap) {
    int n = chunk_count(group, cap);
    return (group + n - 1) / n;
}
static __device__ __forceinline__ head_chunk chunk_of(int y, int group, int cap) {
    int n = chunk_count(group, cap), size = chunk_size(group, cap), c = y % n;
    head_chunk r;
    r.h = y / n, r.head0 = r.h * group + c * size, r.g = min(size, group - c * size);
    return r;
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

template <int D> struct frag_q { uint32_t a[geom<D>::KS][4]; float qsum; };

template <int D> struct state {
    float m, l, corr;
    float acc[geom<D>::NT][4];
};

// Softmax update + PV for one tile. S[4]: combined hi+lo scores of tokens 2j, 2j+1,
// 2j+8, 2j+9 (raw dot products); ks/kz: K scale and zero+128 (1, 0 for BF16 rows);
// vs/vz likewise for V. vb(nt, b0, b1) yields the V B-fragments.
template <int D, typename VB>
static __device__ __forceinline__ void tile_update(state<D> & st, const float S[4], const float ks[4], const float kz[4],
                                                   const float vs[4], const float vz[4], const bool valid[4],
                                                   float qsum, VB vb) {
    constexpr int NT = geom<D>::NT;
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
        for (int nt = 0; nt < NT; nt++)
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
    for (int nt = 0; nt < NT; nt++) {
        uint32_t b0, b1;
        vb(nt, b0, b1);
        mma_bf16(st.acc[nt], pa, b0, b1);
    }
}

// ---- BF16 tiles ----------------------------------------------------------------------

template <int D> struct hp_raw {
    uint32_t k[2][4][geom<D>::KW];   // tokens n, n+8: dims (D/4) kc + (D/16) j .. + D/16 - 1 of each plane kc
    uint32_t v[4][4][geom<D>::VW];   // tokens 2j, 2j+1, 2j+8, 2j+9: this half's DV/32 dims of lane n in plane kc
};

template <int D>
static __device__ __forceinline__ void hp_fetch(const struct oscar_cuda_kv_view & kv, const tier_ref & t, int h,
                                                int lps, int32_t tb, int32_t end, int lane, int half, hp_raw<D> & r) {
    constexpr int DV = geom<D>::DV;
    int32_t idx = tb + (lane & 15);
    int32_t row = tier_row(kv, t, idx < end ? idx : tb, h, lps);
    int n = lane >> 2, j = lane & 3;
    const int src_k[2] = { n, n + 8 }, src_v[4] = { 2 * j, 2 * j + 1, 2 * j + 8, 2 * j + 9 };
#pragma unroll
    for (int tt = 0; tt < 2; tt++) {
        int64_t rk = __shfl_sync(0xffffffffu, row, src_k[tt]);
#pragma unroll
        for (int kc = 0; kc < 4; kc++) ldg_words(r.k[tt][kc], kv.hp_k + rk * D + (D / 4) * kc + (D / 16) * j);
    }
#pragma unroll
    for (int tt = 0; tt < 4; tt++) {
        int64_t rv = __shfl_sync(0xffffffffu, row, src_v[tt]);
#pragma unroll
        for (int kc = 0; kc < 4; kc++)
            ldg_words(r.v[tt][kc], kv.hp_v + rv * D + (D / 4) * kc + (D / 32) * n + (DV / 32) * half);
    }
}

template <int D>
static __device__ __forceinline__ void hp_compute(state<D> & st, const frag_q<D> & q, const hp_raw<D> & r, int32_t tb,
                                                  int32_t end, int lane) {
    int j = lane & 3;
    float S[4];
#pragma unroll
    for (int tt = 0; tt < 2; tt++) {
        float c[4] = { 0.f, 0.f, 0.f, 0.f };
#pragma unroll
        for (int kk = 0; kk < geom<D>::KS; kk++) {
            uint32_t b[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                // dims k_dim and k_dim + 2: words 2 (P/8) and 2 (P/8) + 1 of the plane, half (P/4)%2
                const int P = 2 * kk + e, wi = 2 * (P >> 3);
                const uint32_t * W = r.k[tt][P & 3];
                b[e] = __byte_perm(W[wi], W[wi + 1], ((P >> 2) & 1) ? 0x7632 : 0x5410);
            }
            mma_bf16(c, q.a[kk], b[0], b[1]);
        }
        S[2 * tt] = c[0] + c[2];
        S[2 * tt + 1] = c[1] + c[3];
    }
    const float one[4] = { 1.f, 1.f, 1.f, 1.f }, zero[4] = { 0.f, 0.f, 0.f, 0.f };
    bool valid[4] = { tb + 2 * j < end, tb + 2 * j + 1 < end, tb + 2 * j + 8 < end, tb + 2 * j + 9 < end };
    tile_update<D>(st, S, one, zero, one, zero, valid, q.qsum, [&](int nt, uint32_t & b0, uint32_t & b1) {
        const int a = nt >> 2, kc = nt & 3, wi = a >> 1;
        const uint32_t sel = (a & 1) ? 0x7632 : 0x5410;
        b0 = __byte_perm(r.v[0][kc][wi], r.v[1][kc][wi], sel);
        b1 = __byte_perm(r.v[2][kc][wi], r.v[3][kc][wi], sel);
    });
}

// ---- stage 1 ---------------------------------------------------------------------------

template <int D> static __device__ void build_q(frag_q<D> & f, const float * qh, int g, int lane, float qscale) {
    int r = lane >> 2, j = lane & 3;
    float sum = 0.0f;
#pragma unroll
    for (int kk = 0; kk < geom<D>::KS; kk++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int P = 2 * kk + e;
            int d = k_dim<D>(j, P);
            float x0 = r < g ? qh[r * D + d] * qscale : 0.0f, x1 = r < g ? qh[r * D + d + 2] * qscale : 0.0f;
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

// Split geometry shared by both stage-1 kernels: the token range [begin, end)
// of split `split` (global split index) in tier `tier`.
static __device__ __forceinline__ void split_range(const struct oscar_cuda_decode_args & a, int tier, int sp, int b,
                                                   int32_t & begin, int32_t & end) {
    int32_t n_t = a.kv.seq_info[4 * b + tier], S_t = a.splits[tier];
    int32_t per = (n_t + S_t - 1) / S_t, sl = (per + TOK - 1) / TOK * TOK;
    begin = sp * sl, end = min(begin + sl, n_t);
}

// Merges the NWARP warp partials in shared memory (un-normalized o over DV local
// columns, m, l per head, log2 units; head stride cap) into o_part / lse_part of this
// split; local column l is head dim dim(l). Caller synchronizes first.
template <int D, int DV, typename DimOf>
static __device__ __forceinline__ void finish_split(const struct oscar_cuda_decode_args & a, const float * sm_o,
                                                    const float * sm_m, const float * sm_l, int cap, int b,
                                                    const head_chunk & hc, int split, int S_tot, bool write_lse,
                                                    DimOf dim) {
    for (int l = threadIdx.x; l < DV; l += NWARP * 32) {
        for (int hh = 0; hh < hc.g; hh++) {
            float M = -INFINITY;
            for (int ww = 0; ww < NWARP; ww++) M = fmaxf(M, sm_m[ww * cap + hh]);
            float L = 0.0f, o = 0.0f;
            for (int ww = 0; ww < NWARP; ww++) {
                if (sm_m[ww * cap + hh] == -INFINITY) continue;
                float e = exp2f(sm_m[ww * cap + hh] - M);
                L += e * sm_l[ww * cap + hh];
                o += e * sm_o[(ww * cap + hh) * DV + l];
            }
            int64_t row = ((int64_t) b * a.n_head + hc.head0 + hh) * S_tot + split;
            a.o_part[row * D + dim(l)] = L > 0.0f ? o / L : 0.0f;
            if (write_lse && l == 0) a.lse_part[row] = L > 0.0f ? (M + log2f(L)) * 0.6931471805599453f : -INFINITY;
        }
    }
}

// Programmatic dependent launch (sm_90): the three kernels of one call overlap. The INT2
// kernel lets the BF16 tiers' kernel start as soon as its own blocks are all running (the
// BF16 blocks fill the SMs its last wave leaves idle), the BF16 kernel lets the merge
// kernel's blocks get resident early; a kernel that calls pdl_wait() proceeds once the
// kernel launched before it has finished and its writes are visible. The BF16 kernel
// waits for the INT2 kernel at its end, so its completion (what the merge waits for)
// implies both.
static __device__ __forceinline__ void pdl_launch_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
static __device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// BF16 tiers (sink, recent; or a whole BF16 cache in tier 0). Grid x covers the
// splits of tiers 0 and 2 (block x -> split x, or x + splits[1] past tier 0); grid y
// the (KV head, head chunk, output half) triples.
template <int D> static __device__ __forceinline__ void split_hp(const struct oscar_cuda_decode_args & a) {
    using G = geom<D>;
    const struct oscar_cuda_kv_view & kv = a.kv;
    __shared__ float sm_o[NWARP][HP_HEADS][G::DV];
    __shared__ float sm_m[NWARP][HP_HEADS], sm_l[NWARP][HP_HEADS];
    int split = blockIdx.x < (unsigned) a.splits[0] ? blockIdx.x : blockIdx.x + a.splits[1];
    int b = blockIdx.z, half = blockIdx.y % G::NDS;
    head_chunk hc = chunk_of(blockIdx.y / G::NDS, a.n_head / kv.n_head_kv, HP_HEADS);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int S_tot = a.splits[0] + a.splits[1] + a.splits[2];
    int tier = split < a.splits[0] ? 0 : 2;
    int sp = split - (tier > 0 ? a.splits[0] + a.splits[1] : 0);
    const int32_t * si = kv.seq_info + 4 * b;
    int32_t begin, end;
    split_range(a, tier, sp, b, begin, end);
    float * lse_out = a.lse_part + ((int64_t) b * a.n_head + hc.head0) * S_tot + split;
    if (hc.g <= 0) return;
    if (begin >= end) {
        if (half == 0 && threadIdx.x < hc.g) lse_out[(int64_t) threadIdx.x * S_tot] = -INFINITY;
        return;
    }
    int lps = __ffs(kv.page_size) - 1;
    tier_ref t;
    t.pt = tier == 0 ? kv.sink_pt + (int64_t) b * kv.sink_pt_stride : kv.recent_pt + (int64_t) b * kv.recent_pt_stride;
    t.pos0 = si[0] + si[1];
    t.ring = tier == 2 ? kv.ring_slots : 0;

    frag_q<D> q;
    build_q<D>(q, a.q + ((int64_t) b * a.n_head + hc.head0) * D, hc.g, lane, rsqrtf((float) D) * 1.4426950408889634f);
    state<D> st;
    st.m = -INFINITY, st.l = 0.0f, st.corr = 0.0f;
#pragma unroll
    for (int nt = 0; nt < G::NT; nt++)
#pragma unroll
        for (int c = 0; c < 4; c++) st.acc[nt][c] = 0.0f;
    for (int32_t tb = begin + w * TOK; tb < end; tb += NWARP * TOK) {
        hp_raw<D> raw;
        hp_fetch<D>(kv, t, hc.h, lps, tb, end, lane, half, raw);
        hp_compute<D>(st, q, raw, tb, end, lane);
    }

    st.l += __shfl_xor_sync(0xffffffffu, st.l, 1);
    st.l += __shfl_xor_sync(0xffffffffu, st.l, 2);
    st.corr += __shfl_xor_sync(0xffffffffu, st.corr, 1);
    st.corr += __shfl_xor_sync(0xffffffffu, st.corr, 2);
    int r = lane >> 2, j = lane & 3;
    if (r < hc.g) {
#pragma unroll
        for (int nt = 0; nt < G::NT; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++)
                sm_o[w][r][hp_local_dim<D>(nt, 2 * j + e)] = st.acc[nt][e] + st.acc[nt][2 + e] - st.corr;
        if (j == 0) sm_m[w][r] = st.m, sm_l[w][r] = st.l;
    }
    __syncthreads();
    finish_split<D, G::DV>(a, &sm_o[0][0][0], &sm_m[0][0], &sm_l[0][0], HP_HEADS, b, hc, split, S_tot, half == 0,
                           [&](int l) { return hp_head_dim<D>(l, half); });
}
template <int D>
__global__ void __launch_bounds__(NWARP * 32, D == 256 ? 2 : 3) decode_split_hp_kernel(struct oscar_cuda_decode_args a) {
    pdl_launch_dependents();
    split_hp<D>(a);
    pdl_wait();   // the INT2 kernel has finished: this grid's completion now covers both
}

// ---- INT2 tier ---------------------------------------------------------------------------
// Transposed tiles: QK is S^T = K q^T with A = K codes (16 tokens x 16 dims, rows
// tokens) and B = q^T (16 dims x 8 columns: column 2c = bf16 hi part of head c,
// 2c + 1 = lo part; NQ column tiles of 4 heads), so one m16n8k16 covers 16 tokens
// of 4 heads with no padding rows; PV is O^T = V^T P^T with A = V codes (16 dims x
// 16 tokens) and B = P^T (same hi/lo columns): D/16 + D/16 MMAs per 16 tokens for g <= 4.
// Codes become bf16 by masking in place: (w & (3 << 2u)) | 0x4300 = 128 + 4^u c for
// u = 0, 1, 2 (mantissa bits 0..5), so a word needs two shifts (by 6 and 12)
// instead of one per crumb; the factor 4^u is divided out of q (exact, a power of
// two) for K and out of the output column for V, and the 128 offset and the zero
// point are removed per head:
//   S = sum_d (q_d / m_d)(128 + m_d c_d) = q.c + qoff,  qoff = 128 sum_d q_d / m_d
//   q.k^ = scale (S - qoff - zero sum_d q_d)
//   o_d = sum_tiles (sum_t w_t (128 + m_d c_t,d) - 128 sum_t w_t - m_d sum_t w_t zero_t) / m_d,
// w_t = p_t scale_t, with both offsets taken off the accumulator after each 16-token tile's
// MMAs: removed once per warp range instead, the fp32 accumulator carried 128 sum w over
// ~1k tokens and its rounding reached 1e-3 of the output at L = 131072 (PERF-NOTES.md).
// Code tiles (K, V codes and metadata, geom::STG bytes per 16 tokens) are staged per warp
// in a ring of geom::NS shared-memory stages with cp.async, NS - 1 tiles ahead.
#define MAGIC    0x43004300u

template <int D, int NQ> struct i2_q {
    uint32_t b[NQ][geom<D>::KS][2];   // B fragments of q^T / m_d (column lane/4)
    float qoff[NQ], qsum[NQ];         // of head lane%4 + 4 nt
};

// Position of crumb pair P inside a K code word: shift s = 8*((P>>2)&1) + 2*(P&3).
static __device__ __forceinline__ int k_shift(int P) { return 8 * ((P >> 2) & 1) + 2 * (P & 3); }
// In-place multiplier 4^u of that pair after the pre-shift by 0, 6 or 12.
static __device__ __forceinline__ float k_mult(int P) {
    int s = k_shift(P), u = (s < 6 ? s : s < 12 ? s - 6 : s - 12) >> 1;
    return (float) (1 << (2 * u));
}
// (w & mask) | MAGIC as one lop3 with MAGIC in a register: written as C, ptxas emits two
// (an AND, then an OR with an immediate), and the unpacking is a third of the loop.
static __device__ __forceinline__ uint32_t crumbs_bf16(uint32_t w, uint32_t mask) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w), "r"(mask), "r"(MAGIC));
    return r;
}
static __device__ __forceinline__ uint32_t k_crumbs(uint32_t w, uint32_t w6, uint32_t w12, int P) {
    int s = k_shift(P);
    return s < 6 ? crumbs_bf16(w, 0x00030003u << s)
         : s < 12 ? crumbs_bf16(w6, 0x00030003u << (s - 6)) : crumbs_bf16(w12, 0x00030003u << (s - 12));
}
// V: crumb plane kc of an interleaved pair word; multiplier 4^kc for kc < 3, 1 for kc = 3 (shifted).
static __device__ __forceinline__ uint32_t v_crumbs(uint32_t z, int kc) {
    return kc < 3 ? crumbs_bf16(z, 0x00030003u << (2 * kc)) : crumbs_bf16(z >> 6, 0x00030003u);
}
static __device__ __forceinline__ float v_mult(int kc) { return kc < 3 ? (float) (1 << (2 * kc)) : 1.0f; }

template <int D, int NQ> static __device__ void build_q2(i2_q<D, NQ> & f, const float * qh, int g, int lane, float qscale) {
    int n = lane >> 2, j = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NQ; nt++) {
        int head = 4 * nt + (n >> 1);
        float ps = 0.0f, po = 0.0f;
#pragma unroll
        for (int kk = 0; kk < geom<D>::KS; kk++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int P = 2 * kk + e;
                const float m = k_mult(P);
                uint32_t bits[2];
#pragma unroll
                for (int hl = 0; hl < 2; hl++) {
                    int d = k_dim<D>(j, P) + 2 * hl;
                    float x = head < g ? qh[head * D + d] * qscale : 0.0f;
                    uint32_t hi, lo;
                    split_hilo(x, hi, lo);
                    float part = bf16_val((n & 1) ? lo : hi);
                    ps += part, po += part / m;
                    bits[hl] = bf16_bits(part / m);
                }
                f.b[nt][kk][e] = bits[0] | bits[1] << 16;
            }
        }
        ps += __shfl_xor_sync(0xffffffffu, ps, 1), po += __shfl_xor_sync(0xffffffffu, po, 1);
        ps += __shfl_xor_sync(0xffffffffu, ps, 2), po += __shfl_xor_sync(0xffffffffu, po, 2);
        ps += __shfl_xor_sync(0xffffffffu, ps, 4), po += __shfl_xor_sync(0xffffffffu, po, 4);
        // lane 8c holds head c's sums (hi + lo); thread j needs head j.
        f.qsum[nt] = __shfl_sync(0xffffffffu, ps, 8 * j);
        f.qoff[nt] = 128.0f * __shfl_sync(0xffffffffu, po, 8 * j);
    }
}

static __device__ __forceinline__ void cp_async16(uint32_t dst, const void * src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
static __device__ __forceinline__ void cp_async8(uint32_t dst, const void * src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src));
}
static __device__ __forceinline__ void cp_async4(uint32_t dst, const void * src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
}
static __device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> static __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// INT2 index of lane's token in the 16-token tile at tb (lanes 16..31 repeat 0..15; tokens >= end
// repeat token tb), and the block-table entry of its page: loaded a tile ahead of int2_issue, whose
// copies would otherwise wait on this load every tile.
static __device__ __forceinline__ int32_t tile_token(int32_t tb, int32_t end, int lane) {
    int32_t idx = tb + (lane & 15);
    return idx < end ? idx : tb;
}
static __device__ __forceinline__ int32_t tile_page(const int32_t * pt, int lps, int32_t tb, int32_t end, int lane) {
    return __ldg(pt + (tile_token(tb, end, lane) >> lps));
}

// Stages the 16-token tile at INT2 index tb into stage address st (page: tile_page of this tile):
// each token's K and V code rows are D/64 chunks of 16 bytes, one chunk per lane and pass.
template <int D, int MD>
static __device__ __forceinline__ void int2_issue(const struct oscar_cuda_kv_view & kv, int32_t page, int h,
                                                  int lps, int32_t tb, int32_t end, int lane, uint32_t st) {
    constexpr int CPT = D / 64, RB = D / 4;   // chunks per token, code row bytes
    int32_t slot = (page << lps) | (tile_token(tb, end, lane) & ((1 << lps) - 1));
    int32_t row = slot * kv.n_head_kv + h;
#pragma unroll
    for (int c0 = 0; c0 < 16 * CPT; c0 += 32) {
        int c = c0 + lane, tok = c / CPT, part = c % CPT;   // lanes 16..31 hold the rows of 0..15 too
        int64_t rt = __shfl_sync(0xffffffffu, row, tok);
        if (16 * CPT >= 32 || c < 16 * CPT) {
            cp_async16(st + tok * RB + part * 16, kv.q_k + rt * RB + part * 16);
            cp_async16(st + 4 * D + tok * RB + part * 16, kv.q_v + rt * RB + part * 16);
        }
    }
    uint32_t md = st + 8 * D + (lane >> 4) * 128 + (lane & 15) * 8;
    const void * mb = lane < 16 ? kv.q_k_meta : kv.q_v_meta;
    if constexpr (MD != OSCAR_META_F32) cp_async4(md, (const uint32_t *) mb + row);   // two 16-bit values
    else cp_async8(md, (const float2 *) mb + row);
}

// (scale, zero) of one staged row as fp32, from its stored dtype (both 16-bit kinds widen exactly).
template <int MD> static __device__ __forceinline__ float2 meta_at(const uint8_t * p) {
    if constexpr (MD == OSCAR_META_BF16) {
        uint32_t w = *(const uint32_t *) p;
        return make_float2(bf16_val(w & 0xffffu), bf16_val(w >> 16));
    }
    if constexpr (MD == OSCAR_META_F16) {
        uint32_t w = *(const uint32_t *) p;
        return make_float2(__half2float(__ushort_as_half((unsigned short) (w & 0xffffu))),
                           __half2float(__ushort_as_half((unsigned short) (w >> 16))));
    }
    return *(const float2 *) p;
}

// The VB = D/32 V code bytes of lane n in one token row (as 32-bit words, high bytes 0 at D 64).
template <int D> static __device__ __forceinline__ void v_bytes(uint32_t (&w)[(geom<D>::VB + 3) / 4], const uint8_t * p) {
    if constexpr (geom<D>::VB == 2) w[0] = *(const uint16_t *) p;
    else lds_words(w, p);
}

template <int D, int NQ> struct i2_state {
    float m[NQ], l[NQ];
    float acc[NQ][geom<D>::MT][4];
};

template <int D, int NQ, int MD>
static __device__ __forceinline__ void int2_tile(i2_state<D, NQ> & st, const i2_q<D, NQ> & q, const uint8_t * stg,
                                                 int32_t tb, int32_t end, int lane) {
    using G = geom<D>;
    constexpr int NW = G::NW, VB = G::VB, VWI = (VB + 3) / 4;
    int n = lane >> 2, j = lane & 3;
    // ---- S^T = K q^T: lane (n, j) holds bytes (D/16) j .. + D/16 - 1 of tokens n, n + 8
    uint32_t kw[2][NW], kw6[2][NW], kw12[2][NW];
    lds_words(kw[0], stg + n * (D / 4) + (D / 16) * j);
    lds_words(kw[1], stg + (n + 8) * (D / 4) + (D / 16) * j);
#pragma unroll
    for (int t = 0; t < 2; t++)
#pragma unroll
        for (int x = 0; x < NW; x++) kw6[t][x] = kw[t][x] >> 6, kw12[t][x] = kw[t][x] >> 12;
    float c[2][NQ][4];
#pragma unroll
    for (int p = 0; p < 2; p++)
#pragma unroll
        for (int nt = 0; nt < NQ; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) c[p][nt][i] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < G::KS; kk++) {
        const int P0 = 2 * kk, P1 = 2 * kk + 1, x = kk >> 2;
        uint32_t A[4] = { k_crumbs(kw[0][x], kw6[0][x], kw12[0][x], P0), k_crumbs(kw[1][x], kw6[1][x], kw12[1][x], P0),
                          k_crumbs(kw[0][x], kw6[0][x], kw12[0][x], P1), k_crumbs(kw[1][x], kw6[1][x], kw12[1][x], P1) };
#pragma unroll
        for (int nt = 0; nt < NQ; nt++) mma_bf16(c[kk & 1][nt], A, q.b[nt][kk][0], q.b[nt][kk][1]);
    }
    // ---- metadata of tokens n, n + 8
    float2 km0 = meta_at<MD>(stg + 8 * D + n * 8), km1 = meta_at<MD>(stg + 8 * D + (n + 8) * 8);
    float2 vm0 = meta_at<MD>(stg + 8 * D + 128 + n * 8), vm1 = meta_at<MD>(stg + 8 * D + 128 + (n + 8) * 8);
    bool ok0 = tb + n < end, ok1 = tb + n + 8 < end;
    // ---- V codes: tokens 2j, 2j+1, 2j+8, 2j+9, bytes VB n .. VB n + VB - 1; z[a][hf] = byte a of a token pair
    uint32_t v[4][VWI];
    const int vt[4] = { 2 * j, 2 * j + 1, 2 * j + 8, 2 * j + 9 };
#pragma unroll
    for (int i = 0; i < 4; i++) v_bytes<D>(v[i], stg + 4 * D + vt[i] * (D / 4) + VB * n);
    uint32_t z[VB][2];
#pragma unroll
    for (int a = 0; a < VB; a++) {
        const int by = a & 3, wi = a >> 2;
        uint32_t sel = by | by << 4 | (4 + by) << 8 | (4 + by) << 12;
        z[a][0] = __byte_perm(v[0][wi], v[1][wi], sel);
        z[a][1] = __byte_perm(v[2][wi], v[3][wi], sel);
    }
#pragma unroll
    for (int nt = 0; nt < NQ; nt++) {
        float S0 = (c[0][nt][0] + c[0][nt][1]) + (c[1][nt][0] + c[1][nt][1]);
        float S1 = (c[0][nt][2] + c[0][nt][3]) + (c[1][nt][2] + c[1][nt][3]);
        float s0 = ok0 ? km0.x * (S0 - (q.qoff[nt] + km0.y * q.qsum[nt])) : -INFINITY;
        float s1 = ok1 ? km1.x * (S1 - (q.qoff[nt] + km1.y * q.qsum[nt])) : -INFINITY;
        float mx = fmaxf(s0, s1);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        if (mx > st.m[nt]) {
            float alpha = exp2f(st.m[nt] - mx);
            st.l[nt] *= alpha;
#pragma unroll
            for (int mt = 0; mt < G::MT; mt++)
#pragma unroll
                for (int i = 0; i < 4; i++) st.acc[nt][mt][i] *= alpha;
            st.m[nt] = mx;
        }
        float p0 = exp2f(s0 - st.m[nt]), p1 = exp2f(s1 - st.m[nt]);
        st.l[nt] += p0 + p1;
        // w = p scale as bf16 hi + lo pairs: H, Lw hold tokens n (low half) and n + 8 (high half)
        float x0 = p0 * vm0.x, x1 = p1 * vm1.x;
        uint32_t H = pack_bf16x2(x0, x1);
        float hf0 = bf16_lo(H), hf1 = bf16_hi(H);
        uint32_t Lw = pack_bf16x2(x0 - hf0, x1 - hf1);
        float w0 = hf0 + bf16_lo(Lw), w1 = hf1 + bf16_hi(Lw);
        // This tile's offsets for head j: sums over its 16 tokens (the 8 lanes of column j).
        float T = w0 + w1, Z = w0 * vm0.y + w1 * vm1.y;
#pragma unroll
        for (int x = 4; x < 32; x <<= 1) T += __shfl_xor_sync(0xffffffffu, T, x), Z += __shfl_xor_sync(0xffffffffu, Z, x);
        // P^T B fragment: column n = head n/2 part n%2, tokens 2j, 2j+1 (b0) and 2j+8, 2j+9 (b1).
        int src0 = 8 * j + (n >> 1), src1 = src0 + 4;
        uint32_t H0 = __shfl_sync(0xffffffffu, H, src0), L0 = __shfl_sync(0xffffffffu, Lw, src0);
        uint32_t H1 = __shfl_sync(0xffffffffu, H, src1), L1 = __shfl_sync(0xffffffffu, Lw, src1);
        uint32_t y0 = (n & 1) ? L0 : H0, y1 = (n & 1) ? L1 : H1;
        uint32_t b0 = __byte_perm(y0, y1, 0x5410), b1 = __byte_perm(y0, y1, 0x7632);
#pragma unroll
        for (int mt = 0; mt < G::MT; mt++) {
            const int a = mt >> 1, kc0 = 2 * (mt & 1), kc1 = kc0 + 1;
            uint32_t A[4] = { v_crumbs(z[a][0], kc0), v_crumbs(z[a][0], kc1), v_crumbs(z[a][1], kc0),
                              v_crumbs(z[a][1], kc1) };
            mma_bf16(st.acc[nt][mt], A, b0, b1);
            // Offsets off the hi column (elements 0, 2; the epilogue adds hi + lo): rows n
            // and n + 8 are crumb planes kc0 and kc1.
            st.acc[nt][mt][0] -= fmaf(v_mult(kc0), Z, 128.0f * T);
            st.acc[nt][mt][2] -= fmaf(v_mult(kc1), Z, 128.0f * T);
        }
    }
}

// Grid: x = INT2 splits, y = (KV head, head chunk of at most 4 NQMAX heads), z = sequence.
template <int D, int NQ, int MD>
__global__ void __launch_bounds__(NWARP * 32, NQ * D <= 128 ? 5 : 2) decode_split_int2_kernel(struct oscar_cuda_decode_args a) {
    using G = geom<D>;
    pdl_launch_dependents();
    constexpr int HC = 4 * NQ, NS = G::NS, STG = G::STG;
    const struct oscar_cuda_kv_view & kv = a.kv;
    __shared__ __align__(16) uint8_t smem[cmax(NWARP * NS * STG, NWARP * HC * D * 4)];
    __shared__ float sm_m[NWARP * HC], sm_l[NWARP * HC];
    int sp = blockIdx.x, split = a.splits[0] + sp, b = blockIdx.z;
    head_chunk hc = chunk_of(blockIdx.y, a.n_head / kv.n_head_kv, 4 * G::NQMAX);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int S_tot = a.splits[0] + a.splits[1] + a.splits[2];
    int32_t begin, end;
    split_range(a, 1, sp, b, begin, end);
    if (hc.g <= 0) return;
    if (begin >= end) {
        if (threadIdx.x < hc.g) a.lse_part[((int64_t) b * a.n_head + hc.head0 + threadIdx.x) * S_tot + split] = -INFINITY;
        return;
    }
    int lps = __ffs(kv.page_size) - 1;
    const int32_t * pt = kv.int2_pt + (int64_t) b * kv.int2_pt_stride;
    i2_q<D, NQ> q;
    build_q2<D, NQ>(q, a.q + ((int64_t) b * a.n_head + hc.head0) * D, hc.g, lane,
                    rsqrtf((float) D) * 1.4426950408889634f);
    i2_state<D, NQ> st;
#pragma unroll
    for (int nt = 0; nt < NQ; nt++) {
        st.m[nt] = -INFINITY, st.l[nt] = 0.0f;
#pragma unroll
        for (int mt = 0; mt < G::MT; mt++)
#pragma unroll
            for (int i = 0; i < 4; i++) st.acc[nt][mt][i] = 0.0f;
    }
    uint8_t * ring = smem + w * NS * STG;
    uint32_t ring_s = (uint32_t) __cvta_generic_to_shared(ring);
    const int32_t step = NWARP * TOK, tw = begin + w * TOK;
    int32_t ntiles = tw < end ? (end - tw + step - 1) / step : 0;
#pragma unroll
    for (int s = 0; s < NS - 1; s++) {
        if (s < ntiles)
            int2_issue<D, MD>(kv, tile_page(pt, lps, tw + s * step, end, lane), hc.h, lps, tw + s * step, end, lane,
                              ring_s + s * STG);
        cp_commit();
    }
    int32_t page = NS - 1 < ntiles ? tile_page(pt, lps, tw + (NS - 1) * step, end, lane) : 0;
    // Stage ring: tile i is read from stage rd, tile i + NS - 1 written to stage wr = rd - 1 (mod NS).
    int rd = 0, wr = NS - 1;
    for (int32_t i = 0; i < ntiles; i++) {
        int32_t nx = i + NS - 1;
        if (nx < ntiles) int2_issue<D, MD>(kv, page, hc.h, lps, tw + nx * step, end, lane, ring_s + wr * STG);
        if (nx + 1 < ntiles) page = tile_page(pt, lps, tw + (nx + 1) * step, end, lane);   // used next iteration
        cp_commit();
        cp_wait<NS - 1>();
        __syncwarp();
        int2_tile<D, NQ, MD>(st, q, ring + rd * STG, tw + i * step, end, lane);
        __syncwarp();
        wr = rd, rd = rd + 1 < NS ? rd + 1 : 0;
    }
    cp_wait<0>();
    int n = lane >> 2, j = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NQ; nt++) {
#pragma unroll
        for (int x = 4; x < 32; x <<= 1) {
            st.l[nt] += __shfl_xor_sync(0xffffffffu, st.l[nt], x);
        }
    }
    __syncthreads();   // every warp is done with its ring: smem becomes sm_o
    float * sm_o = (float *) smem;   // [NWARP][HC][D]
#pragma unroll
    for (int nt = 0; nt < NQ; nt++) {
        int hh = 4 * nt + j;
        if (hh >= hc.g) continue;
#pragma unroll
        for (int mt = 0; mt < G::MT; mt++) {
#pragma unroll
            for (int rh = 0; rh < 2; rh++) {
                const int kc = 2 * (mt & 1) + rh;
                int d = G::VB * n + (mt >> 1) + (D / 4) * kc;
                float acc = st.acc[nt][mt][2 * rh] + st.acc[nt][mt][2 * rh + 1];
                sm_o[(w * HC + hh) * D + d] = acc / v_mult(kc);
            }
        }
        if (n == 0) sm_m[w * HC + hh] = st.m[nt], sm_l[w * HC + hh] = st.l[nt];
    }
    __syncthreads();
    finish_split<D, D>(a, sm_o, sm_m, sm_l, HC, b, hc, split, S_tot, true, [](int l) { return l; });
}

// ---- stage 2 ---------------------------------------------------------------------------

#define MAX_SPLITS (3 * OSCAR_CUDA_DECODE_MAX_SPLITS)

#define MERGE_THREADS 512

// x reduced with op over the block's MERGE_THREADS threads; red: MERGE_THREADS / 32 floats of shared memory.
template <typename Op> static __device__ __forceinline__ float block_reduce(float x, float * red, Op op) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = op(x, __shfl_xor_sync(0xffffffffu, x, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = x;
    __syncthreads();
    x = red[0];
#pragma unroll
    for (int w = 1; w < MERGE_THREADS / 32; w++) x = op(x, red[w]);
    __syncthreads();
    return x;
}

// One CTA of MERGE_THREADS threads per (query head, sequence): thread (part, d) of the
// MP = MERGE_THREADS / D parts sums dim d over every MP-th split, the parts are added in
// shared memory (fixed order). The split weights exp(lse_s - max) are formed once in
// shared memory; the loads of a thread do not wait on each other. At batch 1 the merge
// is on the critical path after the split kernels: with one thread per dim (D threads)
// its ~70 loads per thread took 7-10 us under ncu.
template <int D> __global__ void __launch_bounds__(MERGE_THREADS) decode_merge_kernel(struct oscar_cuda_decode_args a) {
    constexpr int MP = MERGE_THREADS / D;
    __shared__ float so[MP][D], sw[MAX_SPLITS], red[MERGE_THREADS / 32];
    pdl_wait();
    const int hq = blockIdx.x, b = blockIdx.y, d = threadIdx.x % D, part = threadIdx.x / D;
    const int S = a.splits[0] + a.splits[1] + a.splits[2];
    int64_t row0 = ((int64_t) b * a.n_head + hq) * S;
    float mx = -INFINITY;
    for (int s = threadIdx.x; s < S; s += MERGE_THREADS) {
        float lse = a.lse_part[row0 + s];
        sw[s] = lse, mx = fmaxf(mx, lse);
    }
    mx = block_reduce(mx, red, [](float x, float y) { return fmaxf(x, y); });
    float e = 0.0f;
    for (int s = threadIdx.x; s < S; s += MERGE_THREADS) {
        float x = sw[s] == -INFINITY ? 0.0f : expf(sw[s] - mx);   // empty splits wrote no o_part
        sw[s] = x, e += x;
    }
    e = block_reduce(e, red, [](float x, float y) { return x + y; });   // also orders sw[] before use
    float o = 0.0f;
#pragma unroll 4
    for (int s = part; s < S; s += MP) {
        float v = a.o_part[(row0 + s) * D + d], ws = sw[s];
        o += ws > 0.0f ? ws * v : 0.0f;
    }
    so[part][d] = o;
    __syncthreads();
    if (part == 0) {
#pragma unroll
        for (int p = 1; p < MP; p++) o += so[p][d];
        so[0][d] = e > 0.0f ? o / e : 0.0f;
    }
    __syncthreads();
    float * out = a.out + ((int64_t) b * a.n_head + hq) * D;
    if (!a.rv_t) {
        if (part == 0) out[d] = so[0][d];
        return;
    }
    // y_d = sum_k o_k R_V^T[k][d]: part p takes k = p, p + MP, ...; its partial goes to so[p][d]
    // (row 0 holds o until every part has read it).
    float y = 0.0f;
    for (int k = part; k < D; k += MP) y = fmaf(so[0][k], a.rv_t[k * D + d], y);
    __syncthreads();
    so[part][d] = y;
    __syncthreads();
    if (part == 0) {
#pragma unroll
        for (int p = 1; p < MP; p++) y += so[p][d];
        out[d] = y;
    }
}

// Tokens per split at least 256 for the INT2 tier (its warps pipeline 6 tiles deep) and
// 64 for the BF16 tiers (a 256-token recent tier in one split per head left batch 1
// with 16 CTAs on 132 SMs).
extern "C" void oscar_cuda_decode_splits(int32_t n_seq, int32_t n_head_kv, int32_t n_sm, int32_t max_splits,
                                         const int64_t max_len[3], int32_t splits[3]) {
    if (max_splits < 1 || max_splits > OSCAR_CUDA_DECODE_MAX_SPLITS) max_splits = OSCAR_CUDA_DECODE_DEFAULT_SPLITS;
    int64_t base = (int64_t) n_seq * n_head_kv, want = ((int64_t) n_sm * 16 + base - 1) / base;
    if (want > max_splits) want = max_splits;
    const int64_t min_tokens[3] = { 64, 256, 64 };
    for (int t = 0; t < 3; t++) {
        int64_t cap = (max_len[t] + min_tokens[t] - 1) / min_tokens[t], s = want < cap ? want : cap;
        splits[t] = (int32_t) (s < 1 ? 1 : s);
    }
}

extern "C" enum oscar_status oscar_cuda_decode_supports(int32_t head_dim, int32_t n_head, int32_t n_head_kv) {
    if (head_dim != 64 && head_dim != 128 && head_dim != 256)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda decode: head_dim %d (the kernels are built for 64, 128 and 256)",
                         head_dim);
    if (n_head_kv < 1 || n_head < n_head_kv || n_head % n_head_kv != 0 ||
        n_head / n_head_kv > OSCAR_CUDA_DECODE_MAX_GROUP)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda decode: Hq %d / Hkv %d (GQA group must be 1..%d)", n_head,
                         n_head_kv, OSCAR_CUDA_DECODE_MAX_GROUP);
    return OSCAR_OK;
}

// The INT2 kernel instance for nq column tiles (1 <= nq <= NQMAX) and the metadata dtype.
template <int D, int NQ>
static void launch_int2(int nq, dim3 grid, cudaStream_t s, const struct oscar_cuda_decode_args & a) {
    if constexpr (NQ <= geom<D>::NQMAX) {
        if (nq != NQ) return launch_int2<D, NQ + 1>(nq, grid, s, a);
        if (a.kv.meta_dtype == OSCAR_META_F16) decode_split_int2_kernel<D, NQ, OSCAR_META_F16><<<grid, NWARP * 32, 0, s>>>(a);
        else if (a.kv.meta_dtype == OSCAR_META_BF16) decode_split_int2_kernel<D, NQ, OSCAR_META_BF16><<<grid, NWARP * 32, 0, s>>>(a);
        else decode_split_int2_kernel<D, NQ, OSCAR_META_F32><<<grid, NWARP * 32, 0, s>>>(a);
    }
}

// Launches kernel k on s as a programmatic dependent of the kernel before it (see pdl_wait).
static cudaError_t launch_dependent(void (*k)(struct oscar_cuda_decode_args), dim3 grid, int threads, cudaStream_t s,
                                    const struct oscar_cuda_decode_args & a) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = dim3(threads), cfg.dynamicSmemBytes = 0, cfg.stream = s;
    cfg.attrs = attr, cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, k, a);
}

template <int D> static enum oscar_status launch(const struct oscar_cuda_decode_args * a, cudaStream_t s) {
    const struct oscar_cuda_kv_view * kv = &a->kv;
    int group = a->n_head / kv->n_head_kv, i2_cap = 4 * geom<D>::NQMAX;
    int nq = (chunk_size(group, i2_cap) + 3) / 4;
    dim3 gi(a->splits[1], kv->n_head_kv * chunk_count(group, i2_cap), a->n_seq);
    dim3 gh(a->splits[0] + a->splits[2], kv->n_head_kv * chunk_count(group, HP_HEADS) * geom<D>::NDS, a->n_seq);
    launch_int2<D, 1>(nq, gi, s, *a);
    OSCAR_CUDA_CHECK_LAUNCH();
    OSCAR_CUDA_CHECK(launch_dependent(decode_split_hp_kernel<D>, gh, NWARP * 32, s, *a));
    OSCAR_CUDA_CHECK(launch_dependent(decode_merge_kernel<D>, dim3(a->n_head, a->n_seq), MERGE_THREADS, s, *a));
    return OSCAR_OK;
}

extern "C" enum oscar_status oscar_cuda_decode_attention(const struct oscar_cuda_decode_args * a, void * stream) {
    const struct oscar_cuda_kv_view * kv = &a->kv;
    int ps = kv->page_size;
    enum oscar_status st = oscar_cuda_decode_supports(kv->head_dim, a->n_head, kv->n_head_kv);
    if (st != OSCAR_OK) return st;
    if (ps < 1 || (ps & (ps - 1)) != 0) return osc_error(OSCAR_ERR_UNSUPPORTED, "cuda decode: page size %d", ps);
    if (a->splits[0] < 1 || a->splits[1] < 1 || a->splits[2] < 1 || a->n_seq < 1)
        return osc_error(OSCAR_ERR_INVALID, "cuda decode: splits and batch must be >= 1");
    if ((unsigned) kv->meta_dtype > OSCAR_META_BF16)
        return osc_error(OSCAR_ERR_INVALID, "cuda decode: meta dtype %d (0 f32, 1 f16, 2 bf16)", kv->meta_dtype);
    if (a->splits[0] + a->splits[1] + a->splits[2] > MAX_SPLITS)
        return osc_error(OSCAR_ERR_INVALID, "cuda decode: %d splits in all (at most %d)",
                         a->splits[0] + a->splits[1] + a->splits[2], MAX_SPLITS);
    cudaStream_t s = (cudaStream_t) stream;
    if (kv->head_dim == 64) return launch<64>(a, s);
    if (kv->head_dim == 128) return launch<128>(a, s);
    return launch<256>(a, s);
}
