// bench-decode.cu - times the fused INT2 decode attention against the BF16
// kernel of the same structure and every PyTorch SDPA backend (numbers read from
// a CSV made by bench-sdpa.py in the same run), against the roofline of a
// measured read bandwidth, and the INT2 write path (style.md rule 14).
//
//   bench-decode [--reps N] [--sdpa sdpa.csv] [--csv out.csv] [--max-splits N (per tier, <= 128)]
//                [--head-dim 64|128|256] [--hq N] [--hkv N] [--only L:B] [--no-write]
// Shapes: Hq 32, Hkv 8, D 128 (or as given), contexts 8k/32k/128k, batch 1/8/32 (--only L:B: that shape alone); INT2 cache
// = 64 BF16 sink + 256 BF16 recent + INT2 middle, fp32 scale/zero (and a column
// with fp16 scale/zero), page 8 with randomly permuted pages. Timing: cudaEvents around both kernels (split +
// merge), 3 warm-ups, N reps, L2 flushed (256 MB memset) before each rep.
// Bytes counted (the formula): KV bytes read (INT2: 32+32 code + 8+8 meta per
// token-head, 4+4 with 16-bit meta; BF16: 2*256 per token-head) + q + partials written and read +
// block tables + output. Achieved GB/s = bytes / mean time, against the
// measured read bandwidth (read_bw_kernel: 4 GiB read with 16-byte loads and
// reduced to one word, best of 10); the roofline of a shape is its KV bytes
// (INT2 or BF16) at that bandwidth. The D2D cudaMemcpy rate (bytes read +
// written) is printed too. The BF16 baseline is the fastest of the SDPA backends
// (cuDNN, Flash, memory-efficient; math only where none runs) and our BF16 kernel.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

extern "C" {
#include "kernels/decode-attention.cuh"
#include "quant/quant.h"
#include "kernels/int2-quantize.cuh"
#include "util/error.h"
}

#define CK(x)                                                                                          \
    do {                                                                                               \
        cudaError_t e_ = (x);                                                                          \
        if (e_ != cudaSuccess) {                                                                       \
            fprintf(stderr, "CUDA error %s in %s at %s:%d\n", cudaGetErrorString(e_), #x, __FILE__, __LINE__); \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)
#define OK(x)                                                                                          \
    do {                                                                                               \
        if ((x) != OSCAR_OK) {                                                                         \
            fprintf(stderr, "error: %s (%s:%d)\n", oscar_last_error(), __FILE__, __LINE__);            \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

static __device__ uint32_t hash32(uint64_t i, uint32_t seed) {
    uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33;
    return (uint32_t) x;
}
__global__ void fill_bytes(uint8_t * p, int64_t n, uint32_t seed) {
    for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n; i += (int64_t) gridDim.x * blockDim.x)
        p[i] = (uint8_t) hash32(i, seed);
}
__global__ void fill_bf16(uint16_t * p, int64_t n, uint32_t seed) {   // uniform [-1, 1)
    for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n; i += (int64_t) gridDim.x * blockDim.x) {
        float f = (float) (hash32(i, seed) >> 8) * (2.0f / 16777216.0f) - 1.0f;
        p[i] = (uint16_t) (__float_as_uint(f) >> 16);
    }
}
__global__ void fill_meta(float * p, int64_t n_rows, uint32_t seed) {   // (scale, zero) plausible for N(0,1) rows
    for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n_rows; i += (int64_t) gridDim.x * blockDim.x) {
        float u = (float) (hash32(i, seed) >> 8) / 16777216.0f;
        p[2 * i] = 1.5f + u, p[2 * i + 1] = 1.4f + 0.2f * u;
    }
}

// fp32 (scale, zero) pairs -> fp16 bits, round to nearest even (as oscar_meta_store).
__global__ void meta_to_f16(uint32_t * out, const float * in, int64_t n_rows) {
    for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n_rows; i += (int64_t) gridDim.x * blockDim.x)
        out[i] = (uint32_t) __half_as_ushort(__float2half_rn(in[2 * i])) |
                 (uint32_t) __half_as_ushort(__float2half_rn(in[2 * i + 1])) << 16;
}

struct dev_cache {
    oscar_cuda_kv_view v;
    std::vector<void *> bufs;
    int64_t max_len[3];
    double kv_bytes;
};

static void * dmalloc(dev_cache & c, size_t n) {
    void * p;
    CK(cudaMalloc(&p, n ? n : 1));
    c.bufs.push_back(p);
    return p;
}

static std::vector<int32_t> perm_pages(int64_t n, uint64_t seed) {
    std::vector<int32_t> p(n);
    for (int64_t i = 0; i < n; i++) p[i] = (int32_t) i;
    for (int64_t i = n - 1; i > 0; i--) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int64_t j = (int64_t) ((seed >> 33) % (uint64_t) (i + 1));
        std::swap(p[i], p[j]);
    }
    return p;
}

// int2 = 1: sink 64 / INT2 L-320 / recent 256; int2 = 0: all L tokens BF16 (tier 0).
// meta: the INT2 tier's (scale, zero) dtype, OSCAR_META_F32 or OSCAR_META_F16.
static void make_cache(dev_cache & c, int B, int64_t L, int Hkv, int D, int int2, int meta) {
    const int ps = 8, ring = 264, RB = D / 4;   // RB: code bytes per row
    int64_t n_sink = int2 ? 64 : L, n_rec = int2 ? 256 : 0, n_q = int2 ? L - 320 : 0;
    int64_t sink_pg = (n_sink + ps - 1) / ps, q_pg = (n_q + ps - 1) / ps, ring_pg = ring / ps;
    int64_t hp_pages = B * (sink_pg + ring_pg), q_pages = B * q_pg;
    c.v = oscar_cuda_kv_view();
    c.v.n_head_kv = Hkv, c.v.head_dim = D, c.v.page_size = ps, c.v.ring_slots = ring, c.v.meta_dtype = meta;
    int64_t hp_el = hp_pages * ps * Hkv * D, q_rows = q_pages * ps * Hkv;
    uint16_t * hk = (uint16_t *) dmalloc(c, hp_el * 2), * hv = (uint16_t *) dmalloc(c, hp_el * 2);
    uint8_t * qk = (uint8_t *) dmalloc(c, q_rows * RB), * qv = (uint8_t *) dmalloc(c, q_rows * RB);
    float * mk = (float *) dmalloc(c, q_rows * 8), * mv = (float *) dmalloc(c, q_rows * 8);
    fill_bf16<<<1024, 256>>>(hk, hp_el, 1), fill_bf16<<<1024, 256>>>(hv, hp_el, 2);
    fill_bytes<<<1024, 256>>>(qk, q_rows * RB, 3), fill_bytes<<<1024, 256>>>(qv, q_rows * RB, 4);
    fill_meta<<<1024, 256>>>(mk, q_rows, 5), fill_meta<<<1024, 256>>>(mv, q_rows, 6);
    if (meta == OSCAR_META_F16) {   // the first half of each buffer gets the packed 16-bit pairs
        float * tmp = (float *) dmalloc(c, q_rows * 8);
        CK(cudaMemcpy(tmp, mk, q_rows * 8, cudaMemcpyDeviceToDevice));
        meta_to_f16<<<1024, 256>>>((uint32_t *) mk, tmp, q_rows);
        CK(cudaMemcpy(tmp, mv, q_rows * 8, cudaMemcpyDeviceToDevice));
        meta_to_f16<<<1024, 256>>>((uint32_t *) mv, tmp, q_rows);
    }
    CK(cudaGetLastError());
    std::vector<int32_t> hp_perm = perm_pages(hp_pages, 7), q_perm = perm_pages(q_pages, 8);
    std::vector<int32_t> info(4 * B), spt(B * sink_pg), qpt(B * (q_pg ? q_pg : 1)), rpt(B * ring_pg);
    int64_t hp_i = 0, q_i = 0;
    for (int b = 0; b < B; b++) {
        info[4 * b] = (int32_t) n_sink, info[4 * b + 1] = (int32_t) n_q, info[4 * b + 2] = (int32_t) n_rec;
        info[4 * b + 3] = (int32_t) L;
        for (int64_t i = 0; i < sink_pg; i++) spt[b * sink_pg + i] = hp_perm[hp_i++];
        for (int64_t i = 0; i < ring_pg; i++) rpt[b * ring_pg + i] = hp_perm[hp_i++];
        for (int64_t i = 0; i < q_pg; i++) qpt[b * q_pg + i] = q_perm[q_i++];
    }
    int32_t * d_info = (int32_t *) dmalloc(c, info.size() * 4), * d_s = (int32_t *) dmalloc(c, spt.size() * 4);
    int32_t * d_q = (int32_t *) dmalloc(c, qpt.size() * 4), * d_r = (int32_t *) dmalloc(c, rpt.size() * 4);
    CK(cudaMemcpy(d_info, info.data(), info.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_s, spt.data(), spt.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_q, qpt.data(), qpt.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_r, rpt.data(), rpt.size() * 4, cudaMemcpyHostToDevice));
    c.v.hp_k = hk, c.v.hp_v = hv, c.v.q_k = qk, c.v.q_v = qv, c.v.q_k_meta = mk, c.v.q_v_meta = mv;
    c.v.seq_info = d_info, c.v.sink_pt = d_s, c.v.int2_pt = d_q, c.v.recent_pt = d_r;
    c.v.sink_pt_stride = (int32_t) sink_pg, c.v.int2_pt_stride = (int32_t) (q_pg ? q_pg : 1);
    c.v.recent_pt_stride = (int32_t) ring_pg;
    c.max_len[0] = n_sink, c.max_len[1] = n_q, c.max_len[2] = n_rec;
    c.kv_bytes = (double) B * Hkv * ((double) (n_sink + n_rec) * 4.0 * D + (double) n_q * (2.0 * RB + (meta == OSCAR_META_F16 ? 8.0 : 16.0))) +
                 (double) (info.size() + spt.size() + qpt.size() + rpt.size()) * 4.0 * (int2 ? 1.0 : 1.0);
}

static void free_cache(dev_cache & c) {
    for (void * p : c.bufs) cudaFree(p);
    c.bufs.clear();
}

struct timing { double mean_ms, sd_ms, min_ms; };

template <typename F> static timing time_it(F f, int reps, void * flush, size_t flush_bytes) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) f();
    CK(cudaDeviceSynchronize());
    std::vector<double> t;
    for (int i = 0; i < reps; i++) {
        CK(cudaMemsetAsync(flush, i & 0xff, flush_bytes));
        CK(cudaEventRecord(e0));
        f();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms);
    }
    double m = 0, s = 0, lo = INFINITY;
    for (double x : t) m += x, lo = fmin(lo, x);
    m /= reps;
    for (double x : t) s += (x - m) * (x - m);
    CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1));
    return { m, sqrt(s / (reps > 1 ? reps - 1 : 1)), lo };
}

// Reads every 16-byte word of p (n4 words) once and folds them into one word per
// thread, written only when it equals a value no fill makes, so no load is dead.
__global__ void read_bw_kernel(const uint4 * __restrict__ p, int64_t n4, uint32_t * sink) {
    uint4 acc = make_uint4(0, 0, 0, 0);
    int64_t stride = (int64_t) gridDim.x * blockDim.x;
    int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x;
#pragma unroll 4
    for (; i < n4; i += stride) {
        uint4 x = __ldcs(p + i);   // streaming: no reuse
        acc.x ^= x.x, acc.y ^= x.y, acc.z ^= x.z, acc.w ^= x.w;
    }
    uint32_t r = acc.x ^ acc.y ^ acc.z ^ acc.w;
    if (r == 0x9E3779B9u) *sink = r;
}

// The decode call captured into a CUDA graph and replayed: the output must equal the
// direct call's bit for bit (same kernels, same order); exits 1 otherwise. Returns the
// replay's mean ms (the three launches as one graph launch).
static double graph_replay(const oscar_cuda_decode_args & args, size_t n_out, int reps, void * flush, size_t flush_bytes) {
    std::vector<float> direct(n_out), replayed(n_out);
    OK(oscar_cuda_decode_attention(&args, NULL));
    CK(cudaMemcpy(direct.data(), args.out, n_out * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemset(args.out, 0xff, n_out * 4));
    cudaStream_t cs;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamCreate(&cs));
    CK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    OK(oscar_cuda_decode_attention(&args, cs));
    CK(cudaStreamEndCapture(cs, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, cs));
    CK(cudaStreamSynchronize(cs));
    CK(cudaMemcpy(replayed.data(), args.out, n_out * 4, cudaMemcpyDeviceToHost));
    if (memcmp(direct.data(), replayed.data(), n_out * 4) != 0) {
        fprintf(stderr, "bench-decode: the CUDA graph replay differs from the direct call\n");
        exit(1);
    }
    timing t = time_it([&] { CK(cudaGraphLaunch(ge, 0)); }, reps, flush, flush_bytes);
    CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g)); CK(cudaStreamDestroy(cs));
    return t.mean_ms;
}

// SDPA backends as bench-sdpa.py names them; math is its fallback when no fused one runs.
#define N_SDPA 4
static const char * const sdpa_names[N_SDPA] = { "cudnn", "flash", "efficient", "math" };

// ms per backend for (L, B) from bench-sdpa.py's CSV (L,B,backend,mean_ms,sd_ms,status);
// NAN where the backend refused, was not timed, or there is no file.
static void sdpa_lookup(const char * path, int64_t L, int B, double ms[N_SDPA]) {
    for (int i = 0; i < N_SDPA; i++) ms[i] = NAN;
    FILE * f = path ? fopen(path, "r") : NULL;
    if (!f) return;
    char line[512], name[32];
    while (fgets(line, sizeof line, f)) {
        long long l; int b; double m;
        if (sscanf(line, "%lld,%d,%31[^,],%lf", &l, &b, name, &m) != 4 || l != L || b != B) continue;
        for (int i = 0; i < N_SDPA; i++)
            if (!strcmp(name, sdpa_names[i])) ms[i] = m;
    }
    fclose(f);
}

static void cell(char * buf, size_t n, double ms) {
    if (isnan(ms)) snprintf(buf, n, "n/a");
    else snprintf(buf, n, "%.4f", ms);
}

int main(int argc, char ** argv) {
    int reps = 20, max_splits = 0, Hq = 32, Hkv = 8, D = 128, write = 1, only_b = 0;
    long long only_l = 0;
    const char * sdpa = NULL, * csv = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sdpa") && i + 1 < argc) sdpa = argv[++i];
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv = argv[++i];
        else if (!strcmp(argv[i], "--max-splits") && i + 1 < argc) max_splits = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--head-dim") && i + 1 < argc) D = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hq") && i + 1 < argc) Hq = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hkv") && i + 1 < argc) Hkv = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-write")) write = 0;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc && sscanf(argv[i + 1], "%lld:%d", &only_l, &only_b) == 2) i++;
        else {
            fprintf(stderr, "bench-decode: unknown or incomplete option %s (see the header comment)\n", argv[i]);
            return 2;
        }
    }
    if (reps < 1 || (only_b && (only_l < 321 || only_b < 1))) {   // the INT2 tier needs L > sink + recent
        fprintf(stderr, "bench-decode: --reps must be >= 1 and --only L:B needs L > 320, B >= 1\n");
        return 2;
    }
    if (oscar_cuda_decode_supports(D, Hq, Hkv) != OSCAR_OK) {
        fprintf(stderr, "bench-decode: %s\n", oscar_last_error());
        return 2;
    }
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("skip: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, L2 %d MB, commit %s, splits per tier at most %d\n", prop.name,
           prop.multiProcessorCount, prop.l2CacheSize >> 20, getenv("OSCAR_COMMIT") ? getenv("OSCAR_COMMIT") : "?",
           max_splits > 0 ? max_splits : OSCAR_CUDA_DECODE_DEFAULT_SPLITS);
    size_t flush_bytes = 256u << 20;
    void * flush;
    CK(cudaMalloc(&flush, flush_bytes));

    // Device-to-device copy ceiling: 2 GiB, bytes read + written.
    size_t cp = 2ull << 30;
    void * a, * b;
    CK(cudaMalloc(&a, cp)); CK(cudaMalloc(&b, cp));
    CK(cudaMemset(a, 1, cp));
    timing tc = time_it([&] { CK(cudaMemcpyAsync(b, a, cp, cudaMemcpyDeviceToDevice)); }, 10, flush, flush_bytes);
    double copy_gbs = 2.0 * (double) cp / (tc.mean_ms * 1e-3) / 1e9;
    printf("D2D cudaMemcpy: %.3f ms for 2 x %.1f GB -> %.0f GB/s\n", tc.mean_ms, (double) cp / 1e9, copy_gbs);
    CK(cudaFree(a)); CK(cudaFree(b));

    // Read ceiling: 4 GiB (16x L2) read once per rep, best of 10.
    size_t rd = 4ull << 30;
    uint32_t * sink;
    CK(cudaMalloc(&a, rd)); CK(cudaMalloc(&sink, 4));
    fill_bytes<<<4096, 256>>>((uint8_t *) a, (int64_t) rd, 12);
    CK(cudaGetLastError());
    timing tr = time_it([&] {
        read_bw_kernel<<<prop.multiProcessorCount * 8, 512>>>((const uint4 *) a, (int64_t) (rd / 16), sink);
    }, 10, flush, flush_bytes);
    CK(cudaGetLastError());
    double rd_best = tr.min_ms, read_gbs = (double) rd / (rd_best * 1e-3) / 1e9;
    printf("read kernel (16-byte loads, xor-reduced): %.3f ms for %.1f GB -> %.0f GB/s (best of 10); roofline = KV bytes "
           "at this rate\n", rd_best, (double) rd / 1e9, read_gbs);
    CK(cudaFree(a)); CK(cudaFree(sink));

    printf("shape: Hq %d, Hkv %d, head_dim %d\n", Hq, Hkv, D);
    // the grid, or the one shape of --only
    int64_t Ls[3] = { 8192, 32768, 131072 };
    int Bs[3] = { 1, 8, 32 }, nL = 3, nB = 3;
    if (only_b) Ls[0] = only_l, Bs[0] = only_b, nL = nB = 1;
    FILE * out = csv ? fopen(csv, "w") : NULL;
    if (out)
        fprintf(out, "L,B,int2_ms,int2_sd,bf16_ours_ms,bf16_ours_sd,sdpa_cudnn_ms,sdpa_flash_ms,sdpa_efficient_ms,"
                     "sdpa_math_ms,bf16_best_ms,bf16_best,read_GBs,copy_GBs,roof_int2_ms,roof_bf16_ms,int2_GBs,"
                     "int2_pct_read,bf16_ours_GBs,bf16_ours_pct_read,speedup_vs_bf16_ours,speedup_vs_bf16_best,"
                     "int2_B_per_tok,bf16_B_per_tok,int2_f16meta_ms,int2_f16meta_sd,int2_graph_ms\n");
    printf("\nTimes in ms (mean ± sd over %d reps, L2 flushed). SDPA n/a: the backend refused the shape (see sdpa.log). "
           "Roofline: the shape's KV bytes at the measured read bandwidth (%.0f GB/s). BF16 best: the fastest BF16 "
           "implementation here (SDPA backends, ours).\n", reps, read_gbs);
    printf("\n| context | batch | INT2 fused | BF16 ours | SDPA cudnn | SDPA flash | SDPA efficient | SDPA math | BF16 best | "
           "roofline INT2 / BF16 | INT2 GB/s (%% of read) | BF16 ours GB/s (%% of read) | INT2 vs BF16 ours | "
           "INT2 vs BF16 best | KV B/token INT2 / BF16 | INT2 fp16 meta | INT2 graph replay |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int li = 0; li < nL; li++) {
        for (int bi = 0; bi < nB; bi++) {
            int64_t L = Ls[li];
            int B = Bs[bi];
            float * q, * out_d, * op, * lp;
            CK(cudaMalloc(&q, (size_t) B * Hq * D * 4)); CK(cudaMalloc(&out_d, (size_t) B * Hq * D * 4));
            fill_bf16<<<64, 256>>>((uint16_t *) q, (int64_t) B * Hq * D * 2, 9);   // finite floats
            double res[3][3], kvb[3], graph_ms = NAN;
            for (int kind = 0; kind < 3; kind++) {   // 0: INT2, 1: BF16, 2: INT2 with fp16 (scale, zero)
                dev_cache c;
                make_cache(c, B, L, Hkv, D, kind != 1, kind == 2 ? OSCAR_META_F16 : OSCAR_META_F32);
                oscar_cuda_decode_args args = oscar_cuda_decode_args();
                args.kv = c.v, args.n_seq = B, args.n_head = Hq, args.q = q, args.rv_t = NULL, args.out = out_d;
                oscar_cuda_decode_splits(B, Hkv, prop.multiProcessorCount, max_splits, c.max_len, args.splits);
                int S = args.splits[0] + args.splits[1] + args.splits[2];
                CK(cudaMalloc(&op, (size_t) B * Hq * S * D * 4)); CK(cudaMalloc(&lp, (size_t) B * Hq * S * 4));
                args.o_part = op, args.lse_part = lp;
                timing t = time_it([&] { OK(oscar_cuda_decode_attention(&args, NULL)); }, reps, flush, flush_bytes);
                CK(cudaDeviceSynchronize());
                if (kind == 0) graph_ms = graph_replay(args, (size_t) B * Hq * D, reps, flush, flush_bytes);
                double bytes = c.kv_bytes + (double) B * Hq * D * 4 * 2 + (double) B * Hq * S * (D + 1) * 4 * 2;
                res[kind][0] = t.mean_ms, res[kind][1] = t.sd_ms, res[kind][2] = bytes / (t.mean_ms * 1e-3) / 1e9;
                kvb[kind] = c.kv_bytes;
                CK(cudaFree(op)); CK(cudaFree(lp));
                free_cache(c);
            }
            double sd[N_SDPA];
            sdpa_lookup(sdpa, L, B, sd);
            double best = res[1][0];
            const char * best_name = "ours";
            for (int i = 0; i < N_SDPA; i++)
                if (!isnan(sd[i]) && sd[i] < best) best = sd[i], best_name = sdpa_names[i];
            char best_s[48];
            snprintf(best_s, sizeof best_s, "%.4f (%s%s)", best, strcmp(best_name, "ours") ? "sdpa " : "", best_name);
            char sc[N_SDPA][16];
            for (int i = 0; i < N_SDPA; i++) cell(sc[i], sizeof sc[i], sd[i]);
            double roof_i2 = kvb[0] / (read_gbs * 1e9) * 1e3, roof_bf = kvb[1] / (read_gbs * 1e9) * 1e3;
            double bpt_i2 = (64.0 + 256.0) / L * 4.0 * D * Hkv + (L - 320.0) / L * (D / 2.0 + 16.0) * Hkv,
                   bpt_bf = 4.0 * D * Hkv;
            char ctx[32];   // 8k, 32k, ... or the exact count of an --only shape
            if (L % 1024) snprintf(ctx, sizeof ctx, "%lld", (long long) L);
            else snprintf(ctx, sizeof ctx, "%lldk", (long long) (L / 1024));
            printf("| %s | %d | %.4f ± %.4f | %.4f ± %.4f | %s | %s | %s | %s | %s | %.4f / %.4f | %.0f (%.0f%%) | "
                   "%.0f (%.0f%%) | %.2fx | %.2fx | %.0f / %.0f | %.4f ± %.4f | %.4f |\n",
                   ctx, B, res[0][0], res[0][1], res[1][0], res[1][1], sc[0], sc[1], sc[2], sc[3],
                   best_s, roof_i2, roof_bf, res[0][2], 100.0 * res[0][2] / read_gbs, res[1][2],
                   100.0 * res[1][2] / read_gbs, res[1][0] / res[0][0], best / res[0][0], bpt_i2, bpt_bf,
                   res[2][0], res[2][1], graph_ms);
            if (out)
                fprintf(out, "%lld,%d,%.5f,%.5f,%.5f,%.5f,%.5f,%.5f,%.5f,%.5f,%.5f,%s,%.1f,%.1f,%.5f,%.5f,%.1f,%.1f,%.1f,%.1f,"
                             "%.3f,%.3f,%.1f,%.1f,%.5f,%.5f,%.5f\n",
                        (long long) L, B, res[0][0], res[0][1], res[1][0], res[1][1], sd[0], sd[1], sd[2], sd[3], best,
                        best_name, read_gbs, copy_gbs, roof_i2, roof_bf, res[0][2], 100.0 * res[0][2] / read_gbs,
                        res[1][2], 100.0 * res[1][2] / read_gbs, res[1][0] / res[0][0], best / res[0][0], bpt_i2,
                        bpt_bf, res[2][0], res[2][1], graph_ms);
            CK(cudaFree(q)); CK(cudaFree(out_d));
        }
    }

    if (!write) {
        if (out) fclose(out);
        return 0;
    }
    // Write path: 32768 tokens x 8 heads of bf16 rows.
    printf("\n| write path | meta | rows | time (ms) | Mrows/s | GB/s (bf16 in + codes/meta out) |\n"
           "|---|---|---|---|---|---|\n");
    int64_t rows = 32768 * 8;
    uint16_t * x;
    uint8_t * codes;
    float * meta, * R;
    CK(cudaMalloc(&x, rows * D * 2)); CK(cudaMalloc(&codes, rows * D / 4)); CK(cudaMalloc(&meta, rows * 8));
    CK(cudaMalloc(&R, D * D * 4));
    fill_bf16<<<1024, 256>>>(x, rows * D, 10);
    fill_bf16<<<64, 256>>>((uint16_t *) R, D * D * 2, 11);
    for (int mm = 0; mm < 6; mm++) {
        int mode = mm % 3, mdt = mm < 3 ? OSCAR_META_F32 : OSCAR_META_F16;
        struct oscar_cuda_int2_write w;
        memset(&w, 0, sizeof w);
        w.head_dim = D, w.group_size = D, w.meta_dtype = mdt, w.clip_idx = mode == 2 ? 117 : 122;
        w.clip_bisect = mode == 2, w.x = x, w.rot = mode == 0 ? R : NULL, w.codes = codes, w.meta = meta;
        w.n_rows = rows;
        timing t = time_it([&] { OK(oscar_cuda_int2_write(&w, NULL)); }, reps, flush, flush_bytes);
        double by = (double) rows * (D * 2 + D / 4 + (mdt == OSCAR_META_F16 ? 4 : 8));
        const char * name[3] = { "prefill: rotate (fp32 x.R) + sort clip + quantize + pack",
                                 "prefill, pre-rotated rows: sort clip + quantize + pack",
                                 "demotion: bisection clip + quantize + pack" };
        printf("| %s | %s | %lld | %.4f ± %.4f | %.1f | %.0f |\n", name[mode], mdt == OSCAR_META_F16 ? "fp16" : "fp32",
               (long long) rows, t.mean_ms, t.sd_ms,
               (double) rows / (t.mean_ms * 1e-3) / 1e6, by / (t.mean_ms * 1e-3) / 1e9);
    }
    // Bits per element of the layout (oscar_int2_bpe, method.md §14): sink 64 + recent 256 BF16, G = D.
    printf("\n| scale/zero dtype | bits/element @2k | @32k | @128k |\n|---|---|---|---|\n");
    const enum oscar_quant_meta_dtype mts[3] = { OSCAR_META_F32, OSCAR_META_F16, OSCAR_META_BF16 };
    const char * mt_names[3] = { "float32", "float16", "bfloat16" };
    for (int i = 0; i < 3; i++) {
        struct oscar_int2_params ip = oscar_int2_default_params(D);
        ip.meta_dtype = mts[i];
        printf("| %s | %.3f | %.3f | %.3f |\n", mt_names[i], oscar_int2_bpe(&ip, 64, 256, 2048),
               oscar_int2_bpe(&ip, 64, 256, 32768), oscar_int2_bpe(&ip, 64, 256, 131072));
    }
    if (out) fclose(out);
    return 0;
}
