// pt-zip.c - the ZIP subset torch.save writes (see pt-internal.h).
//
// The central directory is authoritative (as in torch's own reader): the end
// record gives its place, each entry the offset of its local header, whose
// name must match and whose name/extra lengths give where the bytes start.
// Every offset and length is checked against the archive before use.
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "formats/pt-internal.h"

#define ZIP_EOCD_SIG  0x06054b50u
#define ZIP_CDIR_SIG  0x02014b50u
#define ZIP_LOCAL_SIG 0x04034b50u
#define ZIP_Z64_LOC   0x07064b50u
#define ZIP_Z64_EOCD  0x06064b50u
#define ZIP_Z64_EXTRA 0x0001u
#define ZIP_Z64_LOC_LEN  20u
#define ZIP_Z64_EOCD_LEN 56u
#define ZIP_EOCD_LEN  22u
#define ZIP_CDIR_LEN  46u
#define ZIP_LOCAL_LEN 30u

static uint16_t rd16(const uint8_t * p) { return (uint16_t) (p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t * p) { return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24; }
static uint64_t rd64(const uint8_t * p) { return (uint64_t) rd32(p) | (uint64_t) rd32(p + 4) << 32; }

// The end-of-central-directory record: the last signature whose comment
// length reaches exactly the end of the file.
static const uint8_t * find_eocd(const struct osc_zip * z) {
    if (z->size < ZIP_EOCD_LEN) return NULL;
    size_t lo = z->size > ZIP_EOCD_LEN + 0xffffu ? z->size - ZIP_EOCD_LEN - 0xffffu : 0;
    for (size_t i = z->size - ZIP_EOCD_LEN + 1; i-- > lo;) {
        const uint8_t * p = z->data + i;
        if (rd32(p) == ZIP_EOCD_SIG && i + ZIP_EOCD_LEN + rd16(p + 20) == z->size) return p;
    }
    return NULL;
}

// A name we would accept as a path inside the archive.
static bool name_ok(const char * s) {
    if (!*s || *s == '/' || strchr(s, '\\')) return false;
    for (const char * p = s; *p;) {
        size_t n = strcspn(p, "/");
        if ((n == 2 && p[0] == '.' && p[1] == '.') || n == 0) return false;
        p += n;
        if (*p == '/') p++;
    }
    return true;
}

static enum oscar_status bad(const struct osc_zip * z, const char * what) {
    return osc_error(OSCAR_ERR_FORMAT, "%s: not a torch.save archive: %s", z->label, what);
}

static enum oscar_status read_entry(struct osc_zip * z, const uint8_t * c, size_t avail, size_t * used,
                                    struct osc_zip_entry * e) {
    if (avail < ZIP_CDIR_LEN || rd32(c) != ZIP_CDIR_SIG) return bad(z, "central directory entry is cut short or damaged");
    uint16_t flags = rd16(c + 8), nl = rd16(c + 28), xl = rd16(c + 30), cl = rd16(c + 32);
    e->method      = rd16(c + 10);
    e->crc         = rd32(c + 16);
    e->csize       = rd32(c + 20);
    e->usize       = rd32(c + 24);
    uint64_t loff  = rd32(c + 42);
    if ((size_t) ZIP_CDIR_LEN + nl + xl + cl > avail) return bad(z, "central directory entry runs past its end");
    *used = (size_t) ZIP_CDIR_LEN + nl + xl + cl;
    if (!(e->name = strndup((const char *) c + ZIP_CDIR_LEN, nl))) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    if (strlen(e->name) != nl || !name_ok(e->name))
        return osc_error(OSCAR_ERR_FORMAT, "%s: ZIP entry name '%s' is not a plain relative path (refused)", z->label,
                         e->name);
    // ZIP64 (torch.save writes it): a field saturated at 0xffffffff is in the entry's zip64
    // extra record, in the order uncompressed size, compressed size, local header offset.
    if (e->usize == 0xffffffffu || e->csize == 0xffffffffu || loff == 0xffffffffu) {
        const uint8_t * x = c + ZIP_CDIR_LEN + nl, * xe = x + xl;
        while (xe - x >= 4 && rd16(x) != ZIP_Z64_EXTRA) x += 4 + rd16(x + 2);
        if (xe - x < 4 || rd16(x + 2) > xe - x - 4)
            return osc_error(OSCAR_ERR_FORMAT, "%s: entry '%s' has saturated sizes but no zip64 extra field", z->label,
                             e->name);
        const uint8_t * f = x + 4, * fe = f + rd16(x + 2);
        uint64_t *      want[3] = {&e->usize, &e->csize, &loff};
        for (int i = 0; i < 3; i++) {
            if (*want[i] != 0xffffffffu) continue;
            if (fe - f < 8)
                return osc_error(OSCAR_ERR_FORMAT, "%s: entry '%s': zip64 extra field too short", z->label, e->name);
            *want[i] = rd64(f);
            f += 8;
        }
    }
    if (flags & 1) return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: entry '%s' is encrypted", z->label, e->name);
    if (e->method != 0 && e->method != 8)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: entry '%s' uses compression method %u (only stored and deflate)",
                         z->label, e->name, e->method);
    if (e->method == 0 && e->csize != e->usize)
        return osc_error(OSCAR_ERR_FORMAT, "%s: stored entry '%s' has different sizes", z->label, e->name);
    if (loff > z->size || z->size - loff < ZIP_LOCAL_LEN || rd32(z->data + loff) != ZIP_LOCAL_SIG)
        return osc_error(OSCAR_ERR_FORMAT, "%s: entry '%s' points at no local header (truncated?)", z->label, e->name);
    const uint8_t * l   = z->data + loff;
    uint64_t        lnl = rd16(l + 26), lxl = rd16(l + 28);
    uint64_t        off = loff + ZIP_LOCAL_LEN + lnl + lxl;
    if (off > z->size || lnl != nl || memcmp(l + ZIP_LOCAL_LEN, e->name, nl) != 0)
        return osc_error(OSCAR_ERR_FORMAT, "%s: local header of '%s' does not match the central directory", z->label,
                         e->name);
    if (e->csize > z->size - off)
        return osc_error(OSCAR_ERR_FORMAT, "%s: entry '%s' (%llu bytes) runs past the end of the file (truncated?)",
                         z->label, e->name, (unsigned long long) e->csize);
    e->data_off = off;
    return OSCAR_OK;
}

enum oscar_status osc_zip_open(struct osc_zip * z, const uint8_t * data, size_t size, const char * label) {
    memset(z, 0, sizeof *z);
    z->data  = data;
    z->size  = size;
    z->label = label;
    const uint8_t * eo = find_eocd(z);
    if (!eo) return bad(z, "no ZIP end record (truncated or not a ZIP file)");
    size_t   at = (size_t) (eo - data);
    uint64_t n = rd16(eo + 10), cd_size = rd32(eo + 12), cd_off = rd32(eo + 16);
    if (rd16(eo + 4) != 0 || rd16(eo + 6) != 0 || rd16(eo + 8) != n) return bad(z, "multi-disk archive");
    if (at >= ZIP_Z64_LOC_LEN && rd32(eo - ZIP_Z64_LOC_LEN) == ZIP_Z64_LOC) {
        // ZIP64 end record (torch.save writes one always): its counts and offsets replace the
        // 16/32-bit ones; it must lie before the locator.
        const uint8_t * loc = eo - ZIP_Z64_LOC_LEN;
        uint64_t        z64 = rd64(loc + 8);
        size_t          loc_at = at - ZIP_Z64_LOC_LEN;
        if (rd32(loc + 4) != 0 || rd32(loc + 16) > 1) return bad(z, "multi-disk ZIP64 archive");
        if (z64 > loc_at || loc_at - z64 < ZIP_Z64_EOCD_LEN || rd32(data + z64) != ZIP_Z64_EOCD)
            return bad(z, "ZIP64 end record missing or outside the file");
        const uint8_t * r = data + z64;
        if (rd32(r + 16) != 0 || rd32(r + 20) != 0 || rd64(r + 24) != rd64(r + 32))
            return bad(z, "multi-disk ZIP64 archive");
        n = rd64(r + 32), cd_size = rd64(r + 40), cd_off = rd64(r + 48);
        at = (size_t) z64;   // the central directory ends before the ZIP64 end record
    }
    if (cd_off > at || cd_size > at - cd_off) return bad(z, "central directory lies outside the file (truncated?)");
    if (n > cd_size / ZIP_CDIR_LEN || n > UINT32_MAX) return bad(z, "more entries than the central directory can hold");
    if (n == 0) return bad(z, "empty archive");
    if (!(z->e = calloc(n, sizeof *z->e))) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    const uint8_t * c = data + cd_off;
    size_t          left = (size_t) cd_size;
    for (uint32_t i = 0; i < (uint32_t) n; i++) {
        size_t used = 0;
        z->n++;
        enum oscar_status st = read_entry(z, c, left, &used, &z->e[i]);
        if (st != OSCAR_OK) return st;
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(z->e[j].name, z->e[i].name))
                return osc_error(OSCAR_ERR_FORMAT, "%s: ZIP entry '%s' appears twice", label, z->e[i].name);
        c += used;
        left -= used;
    }
    return OSCAR_OK;
}

void osc_zip_close(struct osc_zip * z) {
    for (uint32_t i = 0; z->e && i < z->n; i++) free(z->e[i].name);
    free(z->e);
    memset(z, 0, sizeof *z);
}

const struct osc_zip_entry * osc_zip_find(const struct osc_zip * z, const char * name) {
    for (uint32_t i = 0; i < z->n; i++)
        if (!strcmp(z->e[i].name, name)) return &z->e[i];
    return NULL;
}

static uint32_t crc_of(const uint8_t * p, uint64_t n) {
    uLong c = crc32(0L, Z_NULL, 0);
    while (n > 0) {
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt) n;
        c      = crc32(c, p, k);
        p += k;
        n -= k;
    }
    return (uint32_t) c;
}

// Inflates into a buffer grown with the output (the header's size is not
// trusted for the allocation), which must come to exactly e->usize bytes.
static enum oscar_status inflate_entry(const struct osc_zip * z, const struct osc_zip_entry * e, uint8_t ** out) {
    z_stream  s   = { 0 };
    size_t    cap = e->usize < (1u << 20) ? (size_t) e->usize + 1 : (1u << 20);
    uint8_t * buf = malloc(cap);
    int       rc  = Z_OK;
    if (!buf || inflateInit2(&s, -MAX_WBITS) != Z_OK) {
        free(buf);
        return osc_error(OSCAR_ERR_NOMEM, "zlib: out of memory");
    }
    s.next_in  = (Bytef *) (uintptr_t) (z->data + e->data_off);
    s.avail_in = (uInt) e->csize;
    while (rc == Z_OK && s.total_out <= e->usize) {
        if (s.total_out == cap) {
            size_t    ncap = cap * 2 > (size_t) e->usize + 1 ? (size_t) e->usize + 1 : cap * 2;
            uint8_t * nb   = ncap > cap ? realloc(buf, ncap) : NULL;
            if (!nb) break; // more output than the header says (or out of memory)
            buf = nb;
            cap = ncap;
        }
        s.next_out  = buf + s.total_out;
        s.avail_out = (uInt) (cap - s.total_out);
        rc          = inflate(&s, Z_NO_FLUSH);
    }
    uint64_t got = s.total_out;
    inflateEnd(&s);
    if (rc != Z_STREAM_END || got != e->usize) {
        free(buf);
        return osc_error(OSCAR_ERR_FORMAT, "%s: entry '%s' does not inflate to its %llu bytes (corrupt)", z->label,
                         e->name, (unsigned long long) e->usize);
    }
    *out = buf;
    return OSCAR_OK;
}

enum oscar_status osc_zip_read(const struct osc_zip * z, const struct osc_zip_entry * e, uint64_t max_bytes,
                               const uint8_t ** out, uint8_t ** owned) {
    *out   = NULL;
    *owned = NULL;
    if (e->usize > max_bytes)
        return osc_error(OSCAR_ERR_UNSUPPORTED, "%s: entry '%s' is %llu bytes (limit %llu)", z->label, e->name,
                         (unsigned long long) e->usize, (unsigned long long) max_bytes);
    const uint8_t * p = z->data + e->data_off;
    if (e->method == 8) {
        if (e->usize / 1032 > e->csize + 1) // deflate expands at most ~1032:1
            return osc_error(OSCAR_ERR_FORMAT, "%s: entry '%s' claims %llu bytes from %llu deflated ones (corrupt)",
                             z->label, e->name, (unsigned long long) e->usize, (unsigned long long) e->csize);
        enum oscar_status st = inflate_entry(z, e, owned);
        if (st != OSCAR_OK) return st;
        p = *owned;
    }
    if (crc_of(p, e->usize) != e->crc) {
        free(*owned);
        *owned = NULL;
        return osc_error(OSCAR_ERR_FORMAT, "%s: entry '%s' fails its CRC-32 (corrupt)", z->label, e->name);
    }
    *out = p;
    return OSCAR_OK;
}
