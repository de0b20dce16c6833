// error.c - per-thread error messages and the always-on abort.
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERR_MSG_MAX 1024

static _Thread_local char err_msg[ERR_MSG_MAX];

const char * oscar_status_str(enum oscar_status s) {
    switch (s) {
    case OSCAR_OK:              return "ok";
    case OSCAR_ERR_IO:          return "I/O error";
    case OSCAR_ERR_FORMAT:      return "format error";
    case OSCAR_ERR_UNSUPPORTED: return "unsupported";
    case OSCAR_ERR_INVALID:     return "invalid argument";
    case OSCAR_ERR_NOMEM:       return "out of memory";
    case OSCAR_ERR_NETWORK:     return "network error";
    case OSCAR_ERR_HTTP:        return "HTTP error";
    case OSCAR_ERR_NOT_FOUND:   return "not found";
    case OSCAR_ERR_NUMERIC:     return "numerical error";
    case OSCAR_ERR_INTERRUPTED: return "interrupted";
    }
    return "unknown status";
}

const char * oscar_last_error(void) {
    return err_msg[0] ? err_msg : "no error message recorded";
}

enum oscar_status osc_error(enum oscar_status s, const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    return s;
}

enum oscar_status osc_error_prefix(enum oscar_status s, const char * fmt, ...) {
    char old[ERR_MSG_MAX];
    memcpy(old, err_msg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t) n + 2 < sizeof err_msg) {
        size_t len = (size_t) n;
        err_msg[len] = ':';
        err_msg[len + 1] = ' ';
        size_t room = sizeof err_msg - len - 2;
        size_t ol = strnlen(old, room - 1);
        memcpy(err_msg + len + 2, old, ol);
        err_msg[len + 2 + ol] = '\0';
    }
    return s;
}

void osc_error_clear(void) {
    err_msg[0] = '\0';
}

void osc_abort_at(const char * file, int line, const char * fmt, ...) {
    va_list ap;
    fprintf(stderr, "oscar: internal error at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}
