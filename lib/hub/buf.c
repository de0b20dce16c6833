// buf.c - a growable byte buffer for HTTP bodies and NDJSON, with a hard cap.
// Refuses to grow past OSC_BUF_MAX (API bodies are small; files stream).
#include "hub/hub-internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int osc_buf_append(struct osc_buf * b, const void * p, size_t n) {
    if (n > OSC_BUF_MAX - b->len) {
        return -1;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) {
            cap *= 2;
        }
        char * d = realloc(b->data, cap);
        if (!d) {
            return -1;
        }
        b->data = d;
        b->cap  = cap;
    }
    if (n) {
        memcpy(b->data + b->len, p, n);
    }
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int osc_buf_printf(struct osc_buf * b, const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        return -1;
    }
    char * tmp = malloc((size_t) n + 1);
    if (!tmp) {
        return -1;
    }
    va_start(ap, fmt);
    vsnprintf(tmp, (size_t) n + 1, fmt, ap);
    va_end(ap);
    int rc = osc_buf_append(b, tmp, (size_t) n);
    free(tmp);
    return rc;
}

void osc_buf_free(struct osc_buf * b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
