// checkpoint.c - serialises the accumulator state to a byte buffer and back
// (for --resume). It writes no files: the caller stores the buffer atomically.
//
// The parser trusts nothing: the header is checked field by field, the
// payload size is recomputed from the shape (overflow-checked) and must match
// both the header and the buffer exactly, and both CRC-32s must match before
// anything is allocated. A checkpoint carries the staged rows, so resuming
// continues the fixed block schedule and stays bit-identical.
//
// Payload order (L layers, H = Hkv, D, B = OSCAR_STATS_BLOCK):
//   int64 n_tok1[L], int64 n_tok2[L], int32 n_pend[L], int32 phase[L] (the header's phase is their minimum)
//   fp64 ktk, vtv, qqt, sst, vatt [L, H, D, D] (enabled kinds, in that order)
//   fp64 sst_wsum[L, H], fp64 vatt_wsum[L, H], int64 sst_nneg[L, H]
//   per layer l: its n_pend[l] staged rows of q [Hq, D] f32 (QQT), k [H, D] f32
//   (KTK|SST), v [H, D] f32 (VTV|SST|VATT), w [H] f64 (VATT)
#include "stats/stats-internal.h"

#include <stddef.h>
#include <string.h>
#include <zlib.h>

#define CKPT_MAGIC "OSCSTATS"
#define CKPT_ENDIAN 0x01020304u

struct ckpt_header {
    char     magic[8];
    uint32_t version;
    uint32_t endian;
    uint32_t header_size;
    uint32_t kinds;
    int32_t  n_layer;
    int32_t  n_head;
    int32_t  n_head_kv;
    int32_t  head_dim;
    int32_t  block;
    int32_t  phase;
    uint64_t payload_size;
    uint32_t payload_crc;
    uint32_t header_crc;
    float    attn_scale;   // oscar_stats_params.attn_scale (0, the old reserved bytes, = 1/sqrt(D))
    uint8_t  reserved[28];
};
_Static_assert(sizeof(struct ckpt_header) == 96, "checkpoint header is 96 bytes");
_Static_assert(offsetof(struct ckpt_header, payload_size) == 48, "checkpoint header layout");
_Static_assert(offsetof(struct ckpt_header, header_crc) == 60, "checkpoint header layout");

static size_t row_bytes(const struct oscar_stats * s) {
    const size_t D = (size_t) s->p.head_dim, H = (size_t) s->p.n_head_kv;
    size_t r = 0;
    if (osc_stats_has_q(s)) r += (size_t) s->p.n_head * D * sizeof(float);
    if (osc_stats_has_k(s)) r += H * D * sizeof(float);
    if (osc_stats_has_v(s)) r += H * D * sizeof(float);
    if (osc_stats_has_w(s)) r += H * sizeof(double);
    return r;
}

static int n_mats(uint32_t kinds) {
    int n = 0;
    for (uint32_t k = 1; k <= OSCAR_STATS_VATT; k <<= 1) n += (kinds & k) ? 1 : 0;
    return n;
}

// Payload bytes before the staged rows (shape limits keep this far from overflow:
// 4096 layers x 1024 heads x 1024² x 8 B x 5 < 2^58).
static size_t fixed_bytes(const struct oscar_stats * s) {
    const size_t L = (size_t) s->p.n_layer, H = (size_t) s->p.n_head_kv;
    return L * 24 + (size_t) n_mats(s->p.kinds) * L * H * s->dd * sizeof(double) + L * H * 24;
}

static size_t pending_rows(const struct oscar_stats * s) {
    size_t n = 0;
    for (int32_t l = 0; l < s->p.n_layer; l++) n += (size_t) s->n_pend[l];
    return n;
}

size_t oscar_stats_checkpoint_size(const struct oscar_stats * s) {
    return sizeof(struct ckpt_header) + fixed_bytes(s) + pending_rows(s) * row_bytes(s);
}

// ---- field copy in both directions -----------------------------------------------
struct cursor {
    uint8_t * w;       // writing, or NULL
    const uint8_t * r; // reading, or NULL
    size_t off;
};

static void io(struct cursor * c, void * field, size_t n) {
    if (n == 0) return;
    if (c->w) memcpy(c->w + c->off, field, n);
    else memcpy(field, c->r + c->off, n);
    c->off += n;
}

static void io_payload(struct oscar_stats * s, struct cursor * c) {
    const size_t L = (size_t) s->p.n_layer, H = (size_t) s->p.n_head_kv, D = (size_t) s->p.head_dim;
    const size_t B = OSCAR_STATS_BLOCK, mats = L * H * s->dd * sizeof(double);
    io(c, s->n_tok1, L * sizeof(int64_t));
    io(c, s->n_tok2, L * sizeof(int64_t));
    io(c, s->n_pend, L * sizeof(int32_t));
    io(c, s->phase, L * sizeof(int32_t));
    double * m[5] = {s->ktk, s->vtv, s->qqt, s->sst, s->vatt};
    for (int i = 0; i < 5; i++) {
        if (m[i]) io(c, m[i], mats);
    }
    io(c, s->sst_wsum, L * H * sizeof(double));
    io(c, s->vatt_wsum, L * H * sizeof(double));
    io(c, s->sst_nneg, L * H * sizeof(int64_t));
    for (size_t l = 0; l < L; l++) {
        const size_t n = (size_t) s->n_pend[l]; // validated before this point when reading
        if (s->st_q) io(c, s->st_q + l * B * (size_t) s->p.n_head * D, n * (size_t) s->p.n_head * D * sizeof(float));
        if (s->st_k) io(c, s->st_k + l * B * H * D, n * H * D * sizeof(float));
        if (s->st_v) io(c, s->st_v + l * B * H * D, n * H * D * sizeof(float));
        if (s->st_w) io(c, s->st_w + l * B * H, n * H * sizeof(double));
    }
}

enum oscar_status oscar_stats_save(const struct oscar_stats * s, void * buf, size_t size) {
    const size_t need = oscar_stats_checkpoint_size(s);
    if (size < need) {
        return osc_error(OSCAR_ERR_INVALID, "stats checkpoint: buffer of %zu bytes, need %zu", size, need);
    }
    struct ckpt_header hd;
    memset(&hd, 0, sizeof hd);
    memcpy(hd.magic, CKPT_MAGIC, 8);
    hd.version = OSCAR_STATS_CKPT_VERSION;
    hd.endian = CKPT_ENDIAN;
    hd.header_size = sizeof hd;
    hd.kinds = s->p.kinds;
    hd.n_layer = s->p.n_layer;
    hd.n_head = s->p.n_head;
    hd.n_head_kv = s->p.n_head_kv;
    hd.head_dim = s->p.head_dim;
    hd.attn_scale = s->p.attn_scale;
    hd.block = OSCAR_STATS_BLOCK;
    hd.phase = oscar_stats_phase(s);
    hd.payload_size = need - sizeof hd;
    uint8_t * out = buf;
    struct cursor c = {out + sizeof hd, NULL, 0};
    io_payload((struct oscar_stats *) (uintptr_t) s, &c); // writing only reads s
    OSCAR_ASSERT(c.off == hd.payload_size);
    hd.payload_crc = (uint32_t) crc32_z(0, out + sizeof hd, c.off);
    hd.header_crc = (uint32_t) crc32_z(0, (const Bytef *) &hd, sizeof hd);
    memcpy(out, &hd, sizeof hd);
    return OSCAR_OK;
}

static enum oscar_status check_header(const struct ckpt_header * hd, size_t size) {
    if (memcmp(hd->magic, CKPT_MAGIC, 8) != 0) {
        return osc_error(OSCAR_ERR_FORMAT, "stats checkpoint: bad magic (not an oscar stats checkpoint)");
    }
    if (hd->endian != CKPT_ENDIAN) {
        return osc_error(OSCAR_ERR_FORMAT, "stats checkpoint: written on a host of other endianness");
    }
    struct ckpt_header tmp = *hd;
    tmp.header_crc = 0;
    if ((uint32_t) crc32_z(0, (const Bytef *) &tmp, sizeof tmp) != hd->header_crc) {
        return osc_error(OSCAR_ERR_FORMAT, "stats checkpoint: header checksum mismatch (corrupt file)");
    }
    if (hd->version != OSCAR_STATS_CKPT_VERSION) {
        return osc_error(OSCAR_ERR_UNSUPPORTED, "stats checkpoint: version %u, this build reads %d",
                         (unsigned) hd->version, OSCAR_STATS_CKPT_VERSION);
    }
    if (hd->header_size != sizeof *hd || hd->block != OSCAR_STATS_BLOCK || hd->phase < 1 || hd->phase > 3) {
        return osc_error(OSCAR_ERR_FORMAT, "stats checkpoint: bad header (size %u, block %d, phase %d)",
                         (unsigned) hd->header_size, (int) hd->block, (int) hd->phase);
    }
    for (size_t i = 0; i < sizeof hd->reserved; i++) {
        if (hd->reserved[i] != 0) { // a reader that ignored them would accept bytes it cannot write back
            return osc_error(OSCAR_ERR_FORMAT, "stats checkpoint: reserved header byte %zu is %u, not 0", i,
                             (unsigned) hd->reserved[i]);
        }
    }
    if (hd->payload_size != size - sizeof *hd) {
        return osc_error(OSCAR_ERR_FORMAT, "stats checkpoint: %zu payload bytes, header says %llu (truncated?)",
                         size - sizeof *hd, (unsigned long long) hd->payload_size);
    }
    return OSCAR_OK;
}

enum oscar_status oscar_stats_load(const void * buf, size_t size, int32_t n_threads, int32_t max_tokens,
                                   struct oscar_stats ** out) {
    *out = NULL;
    struct oscar_stats * s = NULL;
    enum oscar_status st = OSCAR_ERR_FORMAT;
    struct ckpt_header hd;
    if (!buf || size < sizeof hd) {
        return osc_error(OSCAR_ERR_FORMAT, "stats checkpoint: %zu bytes, shorter than the header", size);
    }
    memcpy(&hd, buf, sizeof hd);
    const uint8_t * payload = (const uint8_t *) buf + sizeof hd;
    st = check_header(&hd, size);
    if (st != OSCAR_OK) goto out;
    if ((uint32_t) crc32_z(0, payload, size - sizeof hd) != hd.payload_crc) {
        st = osc_error(OSCAR_ERR_FORMAT, "stats checkpoint: payload checksum mismatch (corrupt file)");
        goto out;
    }
    struct oscar_stats_params p = oscar_stats_default_params();
    p.n_layer = hd.n_layer; p.n_head = hd.n_head; p.n_head_kv = hd.n_head_kv; p.head_dim = hd.head_dim;
    p.attn_scale = hd.attn_scale;
    p.kinds = hd.kinds; p.n_threads = n_threads; p.max_tokens = max_tokens;
    // the shape must also be consistent with the payload size before we allocate
    const size_t L = (size_t) p.n_layer;
    if (p.n_layer < 1 || p.n_layer > 4096 || hd.payload_size < L * 24) {
        st = osc_error(OSCAR_ERR_FORMAT, "stats checkpoint: bad layer count %d", (int) p.n_layer);
        goto out;
    }
    st = osc_stats_alloc(&p, &s);
    if (st != OSCAR_OK) {
        st = osc_error_prefix(st == OSCAR_ERR_NOMEM ? st : OSCAR_ERR_FORMAT, "stats checkpoint");
        goto out;
    }
    if (hd.payload_size < fixed_bytes(s)) {
        st = osc_error(OSCAR_ERR_FORMAT, "stats checkpoint: payload too short for its shape");
        goto out;
    }
    memcpy(s->n_pend, payload + L * 16, L * sizeof(int32_t));
    memcpy(s->phase, payload + L * 20, L * sizeof(int32_t));
    for (size_t l = 0; l < L; l++) {
        if (s->n_pend[l] < 0 || s->n_pend[l] >= OSCAR_STATS_BLOCK || s->phase[l] < 1 || s->phase[l] > 3) {
            st = osc_error(OSCAR_ERR_FORMAT, "stats checkpoint: layer %zu: bad staged row count %d or phase %d", l,
                           (int) s->n_pend[l], (int) s->phase[l]);
            goto out;
        }
    }
    if (oscar_stats_phase(s) != hd.phase) {
        st = osc_error(OSCAR_ERR_FORMAT, "stats checkpoint: header phase %d, layers say %d", (int) hd.phase,
                       (int) oscar_stats_phase(s));
        goto out;
    }
    if (hd.payload_size != fixed_bytes(s) + pending_rows(s) * row_bytes(s)) {
        st = osc_error(OSCAR_ERR_FORMAT, "stats checkpoint: payload size does not match its shape");
        goto out;
    }
    struct cursor c = {NULL, payload, 0};
    io_payload(s, &c);
    st = OSCAR_OK;
    *out = s;
    s = NULL;
out:
    oscar_stats_free(s);
    return st;
}
