// demotion.c - the BF16/INT2 placement and demotion policy of the OSCAR
// serving engine (method.md §11.3-11.4) as pure functions, and a tier
// simulator built on them. No data moves here; paged-cache.c applies the
// same functions to real rows. Refuses nothing it cannot size (init only).
#include "attention/kv-cache.h"

#include <stdlib.h>
#include <string.h>

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

void oscar_kv_extend_layout(int64_t pre_len, int64_t S, int64_t n_sink, int64_t n_recent,
                            bool is_final_chunk, struct oscar_tier_layout * out) {
    int64_t prefix_keep = min64(S, n_sink);
    out->hp_prefix_begin = pre_len;
    out->hp_prefix_end   = max64(pre_len, prefix_keep);
    if (!is_final_chunk) {
        // Chunked prefill: everything past the sink is INT2, even inside the last R.
        out->quant_begin     = max64(pre_len, prefix_keep);
        out->quant_end       = max64(out->quant_begin, S);
        out->hp_recent_begin = out->hp_recent_end = S;
        return;
    }
    int64_t recent_keep  = min64(max64(S - prefix_keep, 0), n_recent);
    int64_t recent_start = S - recent_keep;
    out->quant_begin     = max64(pre_len, prefix_keep);
    out->quant_end       = max64(out->quant_begin, recent_start);
    out->hp_recent_begin = max64(pre_len, recent_start);
    out->hp_recent_end   = max64(out->hp_recent_begin, S);
}

int32_t oscar_kv_flush_counter_init(int64_t n_recent, int32_t n_flush, int64_t hp_recent_count) {
    return (int32_t) max64(0, (n_recent + n_flush - 1) - hp_recent_count);
}

int32_t oscar_kv_decode_plan(int32_t * counter, int64_t L, int64_t n_recent, int32_t n_flush,
                             int64_t protected_len, const uint8_t * is_hp, int64_t * fp_out) {
    bool flush = (*counter == 0);
    *counter   = flush ? n_flush - 1 : *counter - 1;
    if (!flush || n_recent <= 0) return 0;
    int32_t n = 0;
    for (int32_t j = 0; j < n_flush; j++) {
        int64_t fp = L - n_recent - (n_flush - 1) + j;
        if (fp >= protected_len && fp >= 0 && fp < L && is_hp[fp]) fp_out[n++] = fp;
    }
    return n;
}

int64_t oscar_kv_radix_trim(int64_t committed, int64_t n_sink, int64_t n_recent,
                            int64_t page_size, int64_t flush_tokens) {
    if (n_recent <= 0 || committed <= n_sink) return 0;
    int64_t want = min64(n_recent + max64(1, flush_tokens) - 1, committed - n_sink);
    int64_t trim = (want + page_size - 1) / page_size * page_size;
    return min64(trim, committed - n_sink);
}

// ---- tier simulator -------------------------------------------------------------

enum oscar_status oscar_tier_sim_init(struct oscar_tier_sim * s, int64_t n_sink, int64_t n_recent,
                                      int32_t n_flush, int64_t cap) {
    memset(s, 0, sizeof *s);
    if (n_sink < 0 || n_recent < 0 || n_flush < 1 || cap < 1)
        return osc_error(OSCAR_ERR_INVALID, "tier sim: bad P %lld / R %lld / N_Q %d / cap %lld",
                         (long long) n_sink, (long long) n_recent, n_flush, (long long) cap);
    s->tier  = calloc((size_t) cap, 1);
    s->is_hp = calloc((size_t) cap, 1);
    if (!s->tier || !s->is_hp) {
        oscar_tier_sim_free(s);
        return osc_error(OSCAR_ERR_NOMEM, "tier sim: %lld positions", (long long) cap);
    }
    s->n_sink = n_sink, s->n_recent = n_recent, s->n_flush = n_flush, s->cap = cap;
    return OSCAR_OK;
}

void oscar_tier_sim_free(struct oscar_tier_sim * s) {
    free(s->tier);
    free(s->is_hp);
    s->tier = s->is_hp = NULL;
}

static void sim_mark(struct oscar_tier_sim * s, int64_t b, int64_t e, enum oscar_kv_tier t) {
    for (int64_t p = b; p < e; p++) {
        s->tier[p]  = (uint8_t) t;
        s->is_hp[p] = t != OSCAR_TIER_INT2;
    }
}

enum oscar_status oscar_tier_sim_prefill(struct oscar_tier_sim * s, int64_t n, bool is_final_chunk) {
    if (n < 0 || s->len + n > s->cap)
        return osc_error(OSCAR_ERR_INVALID, "tier sim: chunk of %lld past capacity %lld", (long long) n,
                         (long long) s->cap);
    struct oscar_tier_layout l;
    oscar_kv_extend_layout(s->len, s->len + n, s->n_sink, s->n_recent, is_final_chunk, &l);
    sim_mark(s, l.hp_prefix_begin, l.hp_prefix_end, OSCAR_TIER_SINK);
    sim_mark(s, l.quant_begin, l.quant_end, OSCAR_TIER_INT2);
    sim_mark(s, l.hp_recent_begin, l.hp_recent_end, OSCAR_TIER_RECENT);
    s->len += n;
    if (is_final_chunk)
        s->counter = oscar_kv_flush_counter_init(s->n_recent, s->n_flush, l.hp_recent_end - l.hp_recent_begin);
    return OSCAR_OK;
}

int32_t oscar_tier_sim_decode(struct oscar_tier_sim * s) {
    if (s->len >= s->cap) return -1;
    int64_t fp[4096];
    if (s->n_flush > 4096) return -1;
    int32_t n = oscar_kv_decode_plan(&s->counter, s->len, s->n_recent, s->n_flush, s->protected_len,
                                     s->is_hp, fp);
    for (int32_t j = 0; j < n; j++) sim_mark(s, fp[j], fp[j] + 1, OSCAR_TIER_INT2);
    s->n_demoted += n;
    sim_mark(s, s->len, s->len + 1, OSCAR_TIER_RECENT);
    s->len++;
    return n;
}

void oscar_tier_sim_counts(const struct oscar_tier_sim * s, int64_t counts[3]) {
    counts[0] = counts[1] = counts[2] = 0;
    for (int64_t p = 0; p < s->len; p++) counts[s->tier[p]]++;
}
