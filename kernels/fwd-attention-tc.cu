// fwd-attention-tc.cu - tensor-core causal prefill attention for the CUDA forward pass
// (kernels/forward-cuda.cu): bf16 q/k/v, mma.sync m16n8k16 with fp32 accumulation,
// online softmax in fp32 (accurate expf), GQA, keys only up to the block's last
// query and, with a sliding window, from the first key its first query reads (fully
// masked tiles are never loaded); the score scale is the layer's (struct osc_att_rule).
// The probabilities P enter the P.V product rounded to bf16, as flash attention and
// torch sdpa in bf16 do; the normaliser sums the unrounded fp32 P. Fixed order throughout: deterministic.
// Handles head_dim <= 128 with head_dim % 8 == 0 (16-byte rows); the caller falls
// back to the fp32 kernel otherwise.
//
// Block = (work item of <= 64 query rows, query head), 4 warps; warp w owns query
// rows 16 w .. 16 w + 15 and keeps its Q fragments in registers. Per 64-key tile the
// K and V rows are staged in shared memory (row stride DP + 8 bf16: conflict-free
// 32-bit fragment loads and ldmatrix), S = Q Kᵀ (8 n-tiles of 8 keys), the online
// softmax, then O += P V with V fragments from ldmatrix.trans.
#include "kernels/fwd-kernels.cuh"

#include <math.h>

enum { TC_BK = 64, TC_THREADS = 128 };

static __device__ __forceinline__ void mma_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const osc_bf16 * p) {
    const unsigned addr = (unsigned) __cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// Two floats as one bf16x2 register (lo in the low half), round to nearest even.
static __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

static __device__ __forceinline__ uint32_t load_q2(const osc_bf16 * q, int32_t r, int32_t q1, int32_t d, int32_t D,
                                                   int32_t Hq, int32_t h) {
    if (r >= q1 || d >= D) return 0u;
    return *reinterpret_cast<const uint32_t *>(q + ((size_t) r * Hq + h) * D + d);
}

// The first key row that query row qi reads: s0, or qi - window + 1 when later (rows.c's first_of).
static __device__ __forceinline__ int32_t tc_first(const struct osc_att_block & blk, int32_t window, int32_t qi) {
    return window > 0 ? max(blk.s0, qi - window + 1) : blk.s0;
}

// Does any query row of the block read a key of tile [j0, j0 + BK) from this source (int2: the
// rows in [lo, hi) of the row, else the others)? A barrier, like the tile loop's __syncthreads.
static __device__ bool tc_tile_needed(const struct osc_att_block & blk, const struct osc_att_tiers_bf16 & t,
                                      int32_t window, int32_t j0, bool int2) {
    bool need = false;
    const int32_t qi = blk.q0 + (int32_t) threadIdx.x;
    if ((int32_t) threadIdx.x < OSC_ATT_BQ && qi < blk.q1) {
        const int32_t b = max(j0, tc_first(blk, window, qi)), e = min(j0 + TC_BK, qi + 1);
        const int32_t n_int2 = max(0, min(e, t.hi[qi]) - max(b, t.lo[qi]));
        need = e > b && (int2 ? n_int2 > 0 : e - b > n_int2);
    }
    return __syncthreads_or(need) != 0;
}

// TIERED: each key tile is read from the HP rows (k, v) and again from the INT2 rows (t.k, t.v)
// where some row needs it, each pass masked to the keys the row reads from that source (the
// online softmax takes the two passes as one key set).
template <int DP, bool TIERED>
__global__ void __launch_bounds__(TC_THREADS, 3) k_attention_tc(osc_bf16 * out, const osc_bf16 * q, const osc_bf16 * k,
                                                             const osc_bf16 * v, const struct osc_att_block * blocks,
                                                             struct osc_att_tiers_bf16 t, int32_t Hq, int32_t Hkv,
                                                             int32_t D, struct osc_att_rule rule) {
    constexpr int LDS = DP + 8, KS = DP / 16, NT = TC_BK / 8, ND = DP / 8, C8 = DP / 8;
    __shared__ __align__(16) osc_bf16 sK[TC_BK * LDS]; // [key][d]
    __shared__ __align__(16) osc_bf16 sV[TC_BK * LDS]; // [key][d]
    const struct osc_att_block blk = blocks[blockIdx.x];
    const int32_t h = blockIdx.y, kh = h / (Hq / Hkv);
    const int32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
    const int32_t wq0 = blk.q0 + 16 * warp, r0 = wq0 + g, r1 = r0 + 8;
    const int32_t W = rule.window;
    const float scale = rule.scale;
    const int32_t j_begin = tc_first(blk, W, blk.q0); // older keys: outside every row's window

    uint32_t qa[KS][4]; // A fragments of the warp's 16 x DP query rows
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
        const int32_t d = 16 * kk + 2 * tq;
        qa[kk][0] = load_q2(q, r0, blk.q1, d, D, Hq, h);
        qa[kk][1] = load_q2(q, r1, blk.q1, d, D, Hq, h);
        qa[kk][2] = load_q2(q, r0, blk.q1, d + 8, D, Hq, h);
        qa[kk][3] = load_q2(q, r1, blk.q1, d + 8, D, Hq, h);
    }
    float o[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; // l: this thread's partial row sums

    const int32_t lo0 = TIERED && r0 < blk.q1 ? t.lo[r0] : 0, hi0 = TIERED && r0 < blk.q1 ? t.hi[r0] : 0;
    const int32_t lo1 = TIERED && r1 < blk.q1 ? t.lo[r1] : 0, hi1 = TIERED && r1 < blk.q1 ? t.hi[r1] : 0;
    for (int32_t it = 0; it < (TIERED ? 2 : 1) * ((blk.q1 - j_begin + TC_BK - 1) / TC_BK); it++) {
        const int32_t j0 = j_begin + (TIERED ? it >> 1 : it) * TC_BK;
        const bool int2 = TIERED && (it & 1);
        if (TIERED) {
            if (!tc_tile_needed(blk, t, W, j0, int2)) continue;
        } else {
            __syncthreads(); // the previous tile is no longer read
        }
        const osc_bf16 * ks = int2 ? t.k : k, * vs = int2 ? t.v : v;
        for (int32_t e = threadIdx.x; e < TC_BK * C8; e += TC_THREADS) {
            const int32_t r = e / C8, c = (e % C8) * 8, j = j0 + r;
            uint4 kv = make_uint4(0u, 0u, 0u, 0u), vv = kv;
            if (j < blk.q1 && c < D) {
                const size_t off = ((size_t) j * Hkv + kh) * D + c;
                kv = *reinterpret_cast<const uint4 *>(ks + off);
                vv = *reinterpret_cast<const uint4 *>(vs + off);
            }
            *reinterpret_cast<uint4 *>(sK + r * LDS + c) = kv;
            *reinterpret_cast<uint4 *>(sV + r * LDS + c) = vv;
        }
        __syncthreads();
        if (wq0 >= blk.q1) continue; // this warp has no rows in a partial block

        float s[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
            const osc_bf16 * kp = sK + (8 * nt + g) * LDS + 2 * tq;
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
                const uint32_t b0 = *reinterpret_cast<const uint32_t *>(kp + 16 * kk);
                const uint32_t b1 = *reinterpret_cast<const uint32_t *>(kp + 16 * kk + 8);
                mma_16816(s[nt], qa[kk], b0, b1);
            }
        }
        // scale, causal mask (without a window only the diagonal tile has masked keys), row maxima
        const bool diag = TIERED || W > 0 || j0 + TC_BK - 1 > wq0;
        float mt0 = -INFINITY, mt1 = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int32_t kj = j0 + 8 * nt + 2 * tq + (e & 1), qi = e < 2 ? r0 : r1;
                const int32_t lo = e < 2 ? lo0 : lo1, hi = e < 2 ? hi0 : hi1;
                const bool src_ok = !TIERED || ((kj >= lo && kj < hi) == int2);
                const bool in_window = W <= 0 || qi - kj < W;
                s[nt][e] = (!diag || (kj <= qi && src_ok && in_window)) ? s[nt][e] * scale : -INFINITY;
            }
            mt0 = fmaxf(mt0, fmaxf(s[nt][0], s[nt][1]));
            mt1 = fmaxf(mt1, fmaxf(s[nt][2], s[nt][3]));
        }
        mt0 = fmaxf(mt0, __shfl_xor_sync(0xffffffffu, mt0, 1));
        mt0 = fmaxf(mt0, __shfl_xor_sync(0xffffffffu, mt0, 2));
        mt1 = fmaxf(mt1, __shfl_xor_sync(0xffffffffu, mt1, 1));
        mt1 = fmaxf(mt1, __shfl_xor_sync(0xffffffffu, mt1, 2));
        const float mn0 = fmaxf(m0, mt0), mn1 = fmaxf(m1, mt1);
        const float a0 = mn0 == -INFINITY ? 1.0f : expf(m0 - mn0);
        const float a1 = mn1 == -INFINITY ? 1.0f : expf(m1 - mn1);
        float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            s[nt][0] = mn0 == -INFINITY ? 0.0f : expf(s[nt][0] - mn0);
            s[nt][1] = mn0 == -INFINITY ? 0.0f : expf(s[nt][1] - mn0);
            s[nt][2] = mn1 == -INFINITY ? 0.0f : expf(s[nt][2] - mn1);
            s[nt][3] = mn1 == -INFINITY ? 0.0f : expf(s[nt][3] - mn1);
            ps0 += s[nt][0] + s[nt][1];
            ps1 += s[nt][2] + s[nt][3];
        }
        l0 = l0 * a0 + ps0, l1 = l1 * a1 + ps1;
        m0 = mn0, m1 = mn1;
#pragma unroll
        for (int n = 0; n < ND; n++) o[n][0] *= a0, o[n][1] *= a0, o[n][2] *= a1, o[n][3] *= a1;
        // O += P V: the S accumulators of n-tiles 2kk, 2kk+1 are the A fragment of k-step kk
#pragma unroll
        for (int kk = 0; kk < TC_BK / 16; kk++) {
            const uint32_t pa[4] = {pack2(s[2 * kk][0], s[2 * kk][1]), pack2(s[2 * kk][2], s[2 * kk][3]),
                                    pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    pack2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            const osc_bf16 * vp = sV + (16 * kk + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS + (lane >> 4) * 8;
#pragma unroll
            for (int nd = 0; nd < DP / 16; nd++) {
                uint32_t b[4];
                ldmatrix_x4_trans(b, vp + 16 * nd);
                mma_16816(o[2 * nd], pa, b[0], b[1]);
                mma_16816(o[2 * nd + 1], pa, b[2], b[3]);
            }
        }
    }
    if (wq0 >= blk.q1) return;
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float i0 = 1.0f / l0, i1 = 1.0f / l1;
#pragma unroll
    for (int n = 0; n < ND; n++) {
        const int32_t d = 8 * n + 2 * tq;
        if (d >= D) continue;
        if (r0 < blk.q1)
            *reinterpret_cast<uint32_t *>(out + ((size_t) r0 * Hq + h) * D + d) = pack2(o[n][0] * i0, o[n][1] * i0);
        if (r1 < blk.q1)
            *reinterpret_cast<uint32_t *>(out + ((size_t) r1 * Hq + h) * D + d) = pack2(o[n][2] * i1, o[n][3] * i1);
    }
}

bool osc_fwd_attention_tc_ok(int32_t D) { return D > 0 && D % 8 == 0 && D <= 128; }

cudaError_t osc_fwd_attention_tc(osc_bf16 * out, const osc_bf16 * q, const osc_bf16 * k, const osc_bf16 * v,
                                 const struct osc_att_block * blocks, int32_t n_blocks, int32_t Hq, int32_t Hkv,
                                 int32_t D, struct osc_att_rule r, cudaStream_t s) {
    if (n_blocks <= 0) return cudaSuccess;
    if (!osc_fwd_attention_tc_ok(D) || !(r.scale > 0.0f) || r.window < 0) return cudaErrorInvalidValue;
    const dim3 grid((unsigned) n_blocks, (unsigned) Hq);
    const struct osc_att_tiers_bf16 none = {};
    if (D <= 64) k_attention_tc<64, false><<<grid, TC_THREADS, 0, s>>>(out, q, k, v, blocks, none, Hq, Hkv, D, r);
    else k_attention_tc<128, false><<<grid, TC_THREADS, 0, s>>>(out, q, k, v, blocks, none, Hq, Hkv, D, r);
    return cudaGetLastError();
}

cudaError_t osc_fwd_attention_tc_tiered(osc_bf16 * out, const osc_bf16 * q, const osc_bf16 * k_hp,
                                        const osc_bf16 * v_hp, const struct osc_att_tiers_bf16 * t,
                                        const struct osc_att_block * blocks, int32_t n_blocks, int32_t Hq, int32_t Hkv,
                                        int32_t D, struct osc_att_rule r, cudaStream_t s) {
    if (n_blocks <= 0) return cudaSuccess;
    if (!osc_fwd_attention_tc_ok(D) || !(r.scale > 0.0f) || r.window < 0) return cudaErrorInvalidValue;
    const dim3 grid((unsigned) n_blocks, (unsigned) Hq);
    if (D <= 64) k_attention_tc<64, true><<<grid, TC_THREADS, 0, s>>>(out, q, k_hp, v_hp, blocks, *t, Hq, Hkv, D, r);
    else k_attention_tc<128, true><<<grid, TC_THREADS, 0, s>>>(out, q, k_hp, v_hp, blocks, *t, Hq, Hkv, D, r);
    return cudaGetLastError();
}
