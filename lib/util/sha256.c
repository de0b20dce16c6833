// sha256.c - SHA-256 of buffers and files through libcrypto's EVP interface.
#include "util/sha256.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void osc_hex_encode(const unsigned char * d, size_t n, char * out) {
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i]     = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[2 * n] = '\0';
}

void osc_sha256_init(struct osc_sha256 * s) {
    EVP_MD_CTX * ctx = EVP_MD_CTX_new();
    OSCAR_ASSERT(ctx != NULL); // a few hundred bytes: failure means the process is out of memory
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    s->ctx = ctx;
}

void osc_sha256_update(struct osc_sha256 * s, const void * data, size_t len) {
    EVP_DigestUpdate(s->ctx, data, len);
}

void osc_sha256_final(struct osc_sha256 * s, uint8_t digest[32]) {
    unsigned int len = 0;
    EVP_DigestFinal_ex(s->ctx, digest, &len);
    EVP_MD_CTX_free(s->ctx);
    s->ctx = NULL;
}

void osc_sha256_digest_hex(const uint8_t digest[32], char hex[65]) {
    osc_hex_encode(digest, 32, hex);
}

void osc_sha256_hex(const void * data, size_t n, char out[65]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int  len = 0;
    EVP_Digest(data, n, md, &len, EVP_sha256(), NULL);
    osc_hex_encode(md, len, out);
}

enum oscar_status osc_sha256_file(const char * path, char out[65]) {
    enum oscar_status st  = OSCAR_ERR_IO;
    unsigned char *   buf = malloc(1 << 20);
    EVP_MD_CTX *      ctx = EVP_MD_CTX_new();
    FILE *            fp  = fopen(path, "rb");
    if (!buf || !ctx) {
        st = osc_error(OSCAR_ERR_NOMEM, "%s: out of memory while hashing", path);
        goto out;
    }
    if (!fp) {
        st = osc_error(OSCAR_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto out;
    }
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    size_t n;
    while ((n = fread(buf, 1, 1 << 20, fp)) > 0) {
        EVP_DigestUpdate(ctx, buf, n);
    }
    if (ferror(fp)) {
        st = osc_error(OSCAR_ERR_IO, "%s: read error while hashing", path);
        goto out;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int  len = 0;
    EVP_DigestFinal_ex(ctx, md, &len);
    osc_hex_encode(md, len, out);
    st = OSCAR_OK;
out:
    if (fp) {
        fclose(fp);
    }
    EVP_MD_CTX_free(ctx);
    free(buf);
    return st;
}
