// strbuf.c - see strbuf.h.
#include "util/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Makes room for `extra` more bytes plus the NUL; false (and oom) when it cannot.
static bool reserve(struct osc_strbuf * b, size_t extra) {
    if (b->oom) return false;
    if (b->cap - b->n > extra) return true;
    size_t nc = b->cap ? b->cap : 4096;
    while (nc - b->n <= extra) {
        if (nc > ((size_t) -1) / 2) return b->oom = true, false;
        nc *= 2;
    }
    char * ns = realloc(b->s, nc);
    if (!ns) return b->oom = true, false;
    b->s = ns, b->cap = nc;
    return true;
}

void osc_sb_printf(struct osc_strbuf * b, const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0) {
        b->oom = true;   // an encoding error: the text would be incomplete
        return;
    }
    if (!reserve(b, (size_t) k)) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    b->n += (size_t) k;
}

void osc_sb_append(struct osc_strbuf * b, const char * s, size_t n) {
    if (!reserve(b, n)) return;
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}
