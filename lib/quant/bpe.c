// bpe.c - effective bits per KV element (method.md §14):
//   b = b_code + meta_bits/G,  BPE(L) = b + min(1, (S0 + W)/L) * (hp_bits - b).
// Pure arithmetic; the cap keeps contexts shorter than the BF16 tiers at hp_bits.
#include "quant/quant.h"

double oscar_bpe(int32_t b_code, int32_t meta_bits_per_group, int32_t group_size,
                 int64_t n_sink, int64_t n_recent, int64_t context_len, int32_t hp_bits) {
    double b     = (double) b_code + (double) meta_bits_per_group / (double) group_size;
    double share = context_len > 0 ? (double) (n_sink + n_recent) / (double) context_len : 1.0;
    if (share > 1.0) share = 1.0;
    return b + share * ((double) hp_bits - b);
}

double oscar_int2_bpe(const struct oscar_int2_params * p, int64_t n_sink, int64_t n_recent, int64_t context_len) {
    int32_t G = p->group_size > 0 ? p->group_size : p->head_dim;
    int32_t meta_bits = 2 * 8 * (int32_t) oscar_meta_dtype_size(p->meta_dtype);   // scale + zero
    return oscar_bpe(2, meta_bits, G, n_sink, n_recent, context_len, 16);
}
