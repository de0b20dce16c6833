// strbuf.h - a growable string for building text outputs (JSON-free reports,
// SVG) with printf-style appends. An allocation failure is remembered in
// `oom` and later appends do nothing, so a writer checks once at the end.
#ifndef OSCAR_UTIL_STRBUF_H
#define OSCAR_UTIL_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

struct osc_strbuf {
    char * s;      // NUL-terminated once anything was appended; free() it
    size_t n, cap;
    bool oom;
};

void osc_sb_printf(struct osc_strbuf * b, const char * fmt, ...) __attribute__((format(printf, 2, 3)));
void osc_sb_append(struct osc_strbuf * b, const char * s, size_t n);

#endif
