// hash.c - sha256 and git blob sha1 of files and buffers (OpenSSL libcrypto
// EVP), and base64 for inline commit files. Streams files in 1 MiB reads.
#include "hub/hub-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/sha256.h"

static void git_header(char * hdr, size_t cap, uint64_t n, size_t * len) {
    *len = (size_t) snprintf(hdr, cap, "blob %llu", (unsigned long long) n) + 1; // includes the NUL
}

enum oscar_status osc_hash_file(const char * path, char * sha256_hex, char * gitsha1_hex, int64_t * size) {
    enum oscar_status st  = OSCAR_ERR_IO;
    EVP_MD_CTX *      c256 = EVP_MD_CTX_new();
    EVP_MD_CTX *      c1   = EVP_MD_CTX_new();
    unsigned char *   buf  = malloc(1 << 20);
    int               fd   = open(path, O_RDONLY | O_CLOEXEC);
    struct stat       sb;
    if (!c256 || !c1 || !buf) {
        st = osc_error(OSCAR_ERR_NOMEM, "%s: out of memory while hashing", path);
        goto out;
    }
    if (fd < 0 || fstat(fd, &sb) != 0) {
        st = osc_error(OSCAR_ERR_IO, "%s: %s", path, strerror(errno));
        goto out;
    }
    char   hdr[32];
    size_t hlen = 0;
    git_header(hdr, sizeof hdr, (uint64_t) sb.st_size, &hlen);
    EVP_DigestInit_ex(c256, EVP_sha256(), NULL);
    EVP_DigestInit_ex(c1, EVP_sha1(), NULL);
    EVP_DigestUpdate(c1, hdr, hlen);
    int64_t total = 0;
    for (;;) {
        ssize_t n = read(fd, buf, 1 << 20);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            st = osc_error(OSCAR_ERR_IO, "%s: read: %s", path, strerror(errno));
            goto out;
        }
        if (n == 0) {
            break;
        }
        EVP_DigestUpdate(c256, buf, (size_t) n);
        EVP_DigestUpdate(c1, buf, (size_t) n);
        total += n;
    }
    if (total != (int64_t) sb.st_size) {
        st = osc_error(OSCAR_ERR_IO, "%s: changed size while hashing", path);
        goto out;
    }
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned      dn = 0;
    EVP_DigestFinal_ex(c256, d, &dn);
    if (sha256_hex) {
        osc_hex_encode(d, dn, sha256_hex);
    }
    EVP_DigestFinal_ex(c1, d, &dn);
    if (gitsha1_hex) {
        osc_hex_encode(d, dn, gitsha1_hex);
    }
    if (size) {
        *size = total;
    }
    st = OSCAR_OK;
out:
    if (fd >= 0) {
        close(fd);
    }
    free(buf);
    EVP_MD_CTX_free(c256);
    EVP_MD_CTX_free(c1);
    return st;
}

void osc_hash_gitsha1_mem(const void * p, size_t n, char * hex41) {
    char         hdr[32];
    size_t       hlen = 0;
    EVP_MD_CTX * c    = EVP_MD_CTX_new();
    OSCAR_ASSERT(c != NULL);
    git_header(hdr, sizeof hdr, (uint64_t) n, &hlen);
    EVP_DigestInit_ex(c, EVP_sha1(), NULL);
    EVP_DigestUpdate(c, hdr, hlen);
    EVP_DigestUpdate(c, p, n);
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned      dn = 0;
    EVP_DigestFinal_ex(c, d, &dn);
    EVP_MD_CTX_free(c);
    osc_hex_encode(d, dn, hex41);
}

char * osc_base64_encode(const void * p, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char * s = p;
    char * out = malloc(4 * ((n + 2) / 3) + 1);
    if (!out) {
        return NULL;
    }
    char * o = out;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t) s[i] << 16 | (uint32_t) s[i + 1] << 8 | s[i + 2];
        *o++ = tab[v >> 18];
        *o++ = tab[(v >> 12) & 63];
        *o++ = tab[(v >> 6) & 63];
        *o++ = tab[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t) s[i] << 16;
        *o++ = tab[v >> 18];
        *o++ = tab[(v >> 12) & 63];
        *o++ = '=';
        *o++ = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t) s[i] << 16 | (uint32_t) s[i + 1] << 8;
        *o++ = tab[v >> 18];
        *o++ = tab[(v >> 12) & 63];
        *o++ = tab[(v >> 6) & 63];
        *o++ = '=';
    }
    *o = '\0';
    return out;
}
