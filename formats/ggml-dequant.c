// ggml-dequant.c - block layouts of the ggml tensor types oscar reads, and
// their dequantization to fp32.
//
// Written from the format descriptions (block structs and the documented
// reconstruction formulas); arithmetic order follows the reference
// (scale products first, then * q, then - min) so results are bit-identical
// to ggml and to the gguf Python package. Only the types in enum
// osc_ggml_type are handled; anything else is refused by osc_ggml_type_info().
#include <string.h>

#include "formats/gguf.h"

#define QK_K 256

// Block sizes in bytes (pinned; they are on-disk layouts).
enum {
    BLK_Q4_0 = 2 + 16,                 // f16 d | u8 qs[16]
    BLK_Q4_1 = 2 + 2 + 16,             // f16 d, m | u8 qs[16]
    BLK_Q5_0 = 2 + 4 + 16,             // f16 d | u8 qh[4] | u8 qs[16]
    BLK_Q5_1 = 2 + 2 + 4 + 16,         // f16 d, m | u8 qh[4] | u8 qs[16]
    BLK_Q8_0 = 2 + 32,                 // f16 d | i8 qs[32]
    BLK_Q2_K = 16 + 64 + 2 + 2,        // u8 scales[16] | u8 qs[64] | f16 d, dmin
    BLK_Q3_K = 32 + 64 + 12 + 2,       // u8 hmask[32] | u8 qs[64] | u8 scales[12] | f16 d
    BLK_Q4_K = 2 + 2 + 12 + 128,       // f16 d, dmin | u8 scales[12] | u8 qs[128]
    BLK_Q5_K = 2 + 2 + 12 + 32 + 128,  // f16 d, dmin | u8 scales[12] | u8 qh[32] | u8 qs[128]
    BLK_Q6_K = 128 + 64 + 16 + 2,      // u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d
};
_Static_assert(BLK_Q4_1 == 20, "Q4_1 block is 20 bytes");
_Static_assert(BLK_Q2_K == 84 && BLK_Q3_K == 110 && BLK_Q4_K == 144 && BLK_Q5_K == 176 && BLK_Q6_K == 210,
               "k-quant block sizes");

bool osc_ggml_type_info(enum osc_ggml_type type, size_t * block_bytes, int64_t * block_elems) {
    size_t b = 0;
    int64_t e = 32;
    switch (type) {
    case OSC_GGML_F32:  b = 4; e = 1; break;
    case OSC_GGML_F16:  b = 2; e = 1; break;
    case OSC_GGML_BF16: b = 2; e = 1; break;
    case OSC_GGML_Q4_0: b = BLK_Q4_0; break;
    case OSC_GGML_Q4_1: b = BLK_Q4_1; break;
    case OSC_GGML_Q5_0: b = BLK_Q5_0; break;
    case OSC_GGML_Q5_1: b = BLK_Q5_1; break;
    case OSC_GGML_Q8_0: b = BLK_Q8_0; break;
    case OSC_GGML_Q2_K: b = BLK_Q2_K; e = QK_K; break;
    case OSC_GGML_Q3_K: b = BLK_Q3_K; e = QK_K; break;
    case OSC_GGML_Q4_K: b = BLK_Q4_K; e = QK_K; break;
    case OSC_GGML_Q5_K: b = BLK_Q5_K; e = QK_K; break;
    case OSC_GGML_Q6_K: b = BLK_Q6_K; e = QK_K; break;
    default: return false;
    }
    if (block_bytes) *block_bytes = b;
    if (block_elems) *block_elems = e;
    return true;
}

// Every type id of ggml's enum ggml_type (ggml.h), supported here or not, so a refusal can
// name what the file holds; ids ggml removed keep their old names.
static const char * const ggml_type_names[] = {
    [0] = "F32",      [1] = "F16",      [2] = "Q4_0",     [3] = "Q4_1",     [4] = "Q4_2 (removed from ggml)",
    [5] = "Q4_3 (removed from ggml)",   [6] = "Q5_0",     [7] = "Q5_1",     [8] = "Q8_0",     [9] = "Q8_1",
    [10] = "Q2_K",    [11] = "Q3_K",    [12] = "Q4_K",    [13] = "Q5_K",    [14] = "Q6_K",    [15] = "Q8_K",
    [16] = "IQ2_XXS", [17] = "IQ2_XS",  [18] = "IQ3_XXS", [19] = "IQ1_S",   [20] = "IQ4_NL",  [21] = "IQ3_S",
    [22] = "IQ2_S",   [23] = "IQ4_XS",  [24] = "I8",      [25] = "I16",     [26] = "I32",     [27] = "I64",
    [28] = "F64",     [29] = "IQ1_M",   [30] = "BF16",    [31] = "Q4_0_4_4 (removed from ggml)",
    [32] = "Q4_0_4_8 (removed from ggml)", [33] = "Q4_0_8_8 (removed from ggml)", [34] = "TQ1_0",
    [35] = "TQ2_0",   [36] = "IQ4_NL_4_4 (removed from ggml)", [37] = "IQ4_NL_4_8 (removed from ggml)",
    [38] = "IQ4_NL_8_8 (removed from ggml)", [39] = "MXFP4", [40] = "NVFP4", [41] = "Q1_0",
    [42] = "Q2_0 (the OSCAR llama.cpp fork's KV-cache type)",
};

const char * osc_ggml_type_id_name(uint32_t id) {
    return id < sizeof ggml_type_names / sizeof ggml_type_names[0] ? ggml_type_names[id] : NULL;
}

// What osc_ggml_type_info accepts, in id order (test-gguf checks the two agree).
const char * osc_ggml_supported_types(void) {
    return "F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, BF16";
}

const char * osc_ggml_type_name(enum osc_ggml_type type) {
    const char * n = osc_ggml_type_id_name((uint32_t) type);
    return n ? n : "unknown";
}

// IEEE half -> float, exact for every input (subnormals, inf, NaN payload).
static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t) (h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { // subnormal: normalise
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while ((man & 0x400) == 0);
        bits = sign | ((uint32_t) (112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static float rd_f16(const uint8_t * p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return half_to_float(h);
}

static void deq_q4_0(const uint8_t * b, float * y) {
    float d = rd_f16(b);
    const uint8_t * qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float) ((qs[j] & 0xf) - 8);
        y[j + 16] = d * (float) ((qs[j] >> 4) - 8);
    }
}

static void deq_q4_1(const uint8_t * b, float * y) {
    float d = rd_f16(b), m = rd_f16(b + 2);
    const uint8_t * qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float) (qs[j] & 0xf) + m;
        y[j + 16] = d * (float) (qs[j] >> 4) + m;
    }
}

// Q5: 4 low bits in qs nibbles, the 5th bit of element j is bit j of qh.
static void deq_q5(const uint8_t * qh4, const uint8_t * qs, float d, float m, int offset, float * y) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 0xf) | (int) (((qh >> j) & 1) << 4);
        int hi = (qs[j] >> 4) | (int) (((qh >> (j + 16)) & 1) << 4);
        if (offset) {
            y[j] = d * (float) (lo - 16);
            y[j + 16] = d * (float) (hi - 16);
        } else {
            y[j] = d * (float) lo + m;
            y[j + 16] = d * (float) hi + m;
        }
    }
}

static void deq_q8_0(const uint8_t * b, float * y) {
    float d = rd_f16(b);
    for (int j = 0; j < 32; j++) {
        y[j] = (float) (int8_t) b[2 + j] * d;
    }
}

static void deq_q2_k(const uint8_t * b, float * y) {
    const uint8_t * scales = b;
    const uint8_t * qs = b + 16;
    float d = rd_f16(b + 80), dmin = rd_f16(b + 82);
    // 16 sub-blocks of 16; sub-block s uses byte group (s / 8) * 32 + (s % 2) * 16
    // and bit pair (s % 8) / 2.
    for (int s = 0; s < 16; s++) {
        float dl = d * (float) (scales[s] & 0xf);
        float ml = dmin * (float) (scales[s] >> 4);
        const uint8_t * q = qs + (s / 8) * 32 + (s % 2) * 16;
        int shift = 2 * ((s % 8) / 2);
        for (int l = 0; l < 16; l++) {
            y[s * 16 + l] = dl * (float) ((q[l] >> shift) & 3) - ml;
        }
    }
}

static void deq_q3_k(const uint8_t * b, float * y) {
    const uint8_t * hmask = b;
    const uint8_t * qs = b + 32;
    const uint8_t * sc = b + 96;
    float d = rd_f16(b + 108);
    for (int s = 0; s < 16; s++) {
        int low = s < 8 ? (sc[s] & 0xf) : (sc[s - 8] >> 4);
        int high = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
        float dl = d * (float) ((low | (high << 4)) - 32);
        int half = s / 8;                // which 128-element half
        int pair = (s % 8) / 2;          // bit pair in qs, and hmask bit = half*4 + pair
        const uint8_t * q = qs + half * 32 + (s % 2) * 16;
        const uint8_t * hm = hmask + (s % 2) * 16;
        int hbit = half * 4 + pair;
        for (int l = 0; l < 16; l++) {
            int v = (q[l] >> (2 * pair)) & 3;
            v -= ((hm[l] >> hbit) & 1) ? 0 : 4;
            y[s * 16 + l] = dl * (float) v;
        }
    }
}

// 6-bit scale and min j (0..7) of the Q4_K/Q5_K 12-byte scale block.
static void scale_min_k4(const uint8_t * q, int j, int * sc, int * mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static void deq_q4_k(const uint8_t * b, float * y) {
    float d = rd_f16(b), dmin = rd_f16(b + 2);
    const uint8_t * scales = b + 4;
    const uint8_t * qs = b + 16;
    for (int s = 0; s < 8; s++) { // 8 sub-blocks of 32; pairs share 32 bytes (low, high nibble)
        int sc, mn;
        scale_min_k4(scales, s, &sc, &mn);
        float dl = d * (float) sc, ml = dmin * (float) mn;
        const uint8_t * q = qs + (s / 2) * 32;
        int shift = (s % 2) * 4;
        for (int l = 0; l < 32; l++) {
            y[s * 32 + l] = dl * (float) ((q[l] >> shift) & 0xf) - ml;
        }
    }
}

static void deq_q5_k(const uint8_t * b, float * y) {
    float d = rd_f16(b), dmin = rd_f16(b + 2);
    const uint8_t * scales = b + 4;
    const uint8_t * qh = b + 16;
    const uint8_t * qs = b + 48;
    for (int s = 0; s < 8; s++) {
        int sc, mn;
        scale_min_k4(scales, s, &sc, &mn);
        float dl = d * (float) sc, ml = dmin * (float) mn;
        const uint8_t * q = qs + (s / 2) * 32;
        int shift = (s % 2) * 4;
        for (int l = 0; l < 32; l++) {
            int v = ((q[l] >> shift) & 0xf) | (((qh[l] >> s) & 1) << 4);
            y[s * 32 + l] = dl * (float) v - ml;
        }
    }
}

static void deq_q6_k(const uint8_t * b, float * y) {
    const uint8_t * ql = b;
    const uint8_t * qh = b + 128;
    const int8_t * sc = (const int8_t *) (b + 192);
    float d = rd_f16(b + 208);
    for (int half = 0; half < 2; half++) { // 128 elements each: 4 groups of 32
        const uint8_t * l4 = ql + half * 64;
        const uint8_t * h2 = qh + half * 32;
        const int8_t * s8 = sc + half * 8;
        float * yy = y + half * 128;
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((l4[l] & 0xf) | (((h2[l] >> 0) & 3) << 4)) - 32;
            int q2 = ((l4[l + 32] & 0xf) | (((h2[l] >> 2) & 3) << 4)) - 32;
            int q3 = ((l4[l] >> 4) | (((h2[l] >> 4) & 3) << 4)) - 32;
            int q4 = ((l4[l + 32] >> 4) | (((h2[l] >> 6) & 3) << 4)) - 32;
            yy[l] = d * (float) s8[is] * (float) q1;
            yy[l + 32] = d * (float) s8[is + 2] * (float) q2;
            yy[l + 64] = d * (float) s8[is + 4] * (float) q3;
            yy[l + 96] = d * (float) s8[is + 6] * (float) q4;
        }
    }
}

// Blocks [b0, b1) of a tensor of `type` (bb bytes and be elements per block) into dst.
static void dequantize_blocks(enum osc_ggml_type type, const uint8_t * s, float * dst, size_t bb, int64_t be,
                              int64_t b0, int64_t b1) {
    switch (type) {
    case OSC_GGML_F32:
        memcpy(dst + b0, s + 4 * b0, (size_t) (b1 - b0) * 4);
        break;
    case OSC_GGML_F16:
        for (int64_t i = b0; i < b1; i++) dst[i] = rd_f16(s + 2 * i);
        break;
    case OSC_GGML_BF16:
        for (int64_t i = b0; i < b1; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            uint32_t bits = (uint32_t) h << 16;
            memcpy(&dst[i], &bits, 4);
        }
        break;
    default:
        for (int64_t i = b0; i < b1; i++) {
            const uint8_t * blk = s + (size_t) i * bb;
            float * y = dst + i * be;
            switch (type) {
            case OSC_GGML_Q4_0: deq_q4_0(blk, y); break;
            case OSC_GGML_Q4_1: deq_q4_1(blk, y); break;
            case OSC_GGML_Q5_0: deq_q5(blk + 2, blk + 6, rd_f16(blk), 0.0f, 1, y); break;
            case OSC_GGML_Q5_1: deq_q5(blk + 4, blk + 8, rd_f16(blk), rd_f16(blk + 2), 0, y); break;
            case OSC_GGML_Q8_0: deq_q8_0(blk, y); break;
            case OSC_GGML_Q2_K: deq_q2_k(blk, y); break;
            case OSC_GGML_Q3_K: deq_q3_k(blk, y); break;
            case OSC_GGML_Q4_K: deq_q4_k(blk, y); break;
            case OSC_GGML_Q5_K: deq_q5_k(blk, y); break;
            case OSC_GGML_Q6_K: deq_q6_k(blk, y); break;
            default: OSCAR_ABORT("unreachable ggml type %d", (int) type);
            }
        }
        break;
    }
}

enum oscar_status osc_ggml_dequantize(enum osc_ggml_type type, const void * src, float * dst, int64_t n) {
    size_t bb;
    int64_t be;
    if (!osc_ggml_type_info(type, &bb, &be)) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "dequantize: unsupported ggml type %s (%d)", osc_ggml_type_name(type),
                         (int) type);
    }
    if (n < 0 || n % be != 0) {
        return osc_error(OSCAR_ERR_INVALID, "dequantize: %lld elements is not a multiple of the %s block size %lld",
                         (long long) n, osc_ggml_type_name(type), (long long) be);
    }
    // Every block is converted on its own, so the bytes do not depend on the threads. Large
    // tensors (a layer read from the mapped file) go over the cores: reading the pages and
    // converting them is most of the time a streamed layer takes.
    const int64_t nb = n / be, CHUNK = 1 << 16, n_chunk = (nb + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (n >= (int64_t) 1 << 22)
    for (int64_t c = 0; c < n_chunk; c++)
        dequantize_blocks(type, src, dst, bb, be, c * CHUNK, c + 1 < n_chunk ? (c + 1) * CHUNK : nb);
    return OSCAR_OK;
}
