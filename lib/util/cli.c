// cli.c - checked command-line numbers (see cli.h).
#include "util/cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

// strtoll/strtoull skip leading blanks and accept '+'; a command-line number
// is digits only, with a leading '-' where the type has negatives (strtoull
// would wrap "-1" to 2^64 - 1).
static int starts_like_integer(const char * s, int allow_minus) {
    if (allow_minus && *s == '-') s++;
    return isdigit((unsigned char) *s);
}

enum oscar_status osc_parse_i64(const char * opt, const char * text, int64_t lo, int64_t hi, int64_t * out) {
    char * end = NULL;
    errno = 0;
    long long v = starts_like_integer(text, 1) ? strtoll(text, &end, 10) : 0;
    if (!end || *end)
        return osc_error(OSCAR_ERR_INVALID, "%s: '%s' is not a whole number (write it out in digits, e.g. 20000)",
                         opt, text);
    if (errno == ERANGE || v < lo || v > hi)
        return osc_error(OSCAR_ERR_INVALID, "%s: %s is out of range [%lld, %lld]", opt, text, (long long) lo,
                         (long long) hi);
    *out = (int64_t) v;
    return OSCAR_OK;
}

enum oscar_status osc_parse_i32(const char * opt, const char * text, int32_t lo, int32_t hi, int32_t * out) {
    int64_t v;
    enum oscar_status st = osc_parse_i64(opt, text, lo, hi, &v);
    if (st == OSCAR_OK) *out = (int32_t) v;
    return st;
}

enum oscar_status osc_parse_u64(const char * opt, const char * text, uint64_t * out) {
    char * end = NULL;
    errno = 0;
    unsigned long long v = starts_like_integer(text, 0) ? strtoull(text, &end, 10) : 0;
    if (!end || *end || errno == ERANGE)
        return osc_error(OSCAR_ERR_INVALID, "%s: '%s' is not a whole number in [0, 2^64)", opt, text);
    *out = (uint64_t) v;
    return OSCAR_OK;
}

enum oscar_status osc_parse_f64(const char * opt, const char * text, double lo, double hi, double * out) {
    char * end = NULL;
    double v = *text && !isspace((unsigned char) *text) ? strtod(text, &end) : (double) NAN;
    if (!end || *end || !isfinite(v)) return osc_error(OSCAR_ERR_INVALID, "%s: '%s' is not a number", opt, text);
    if (v < lo || v > hi) return osc_error(OSCAR_ERR_INVALID, "%s: %g is out of range [%g, %g]", opt, v, lo, hi);
    *out = v;
    return OSCAR_OK;
}

enum oscar_status osc_parse_threads(const char * opt, const char * text, int32_t * out) {
    return osc_parse_i32(opt, text, 1, OSC_MAX_THREADS, out);
}

enum oscar_status osc_parse_device(const char * opt, const char * text, const char ** out) {
    static const char * const names[] = {"cpu", "cuda"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(text, names[i]) == 0) {
            *out = names[i];
            return OSCAR_OK;
        }
    return osc_error(OSCAR_ERR_INVALID, "%s: '%s' is not a device (cpu, cuda)", opt, text);
}
