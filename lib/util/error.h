// error.h - status codes and the per-thread error message.
//
// Tier (a) errors (bad input, IO, network, memory) are returned as an
// enum oscar_status; the function that detects the problem also records a
// message naming the file / tensor / layer at fault with osc_error().
// Callers read it with oscar_last_error(). Tier (b) contract violations use
// OSCAR_ASSERT, which is always on and reports file:line.
#ifndef OSCAR_UTIL_ERROR_H
#define OSCAR_UTIL_ERROR_H

#include <stdarg.h>

// Append-only: values are part of the public ABI.
enum oscar_status {
    OSCAR_OK = 0,
    OSCAR_ERR_IO,          // open/read/write/rename failed
    OSCAR_ERR_FORMAT,      // malformed or truncated file contents
    OSCAR_ERR_UNSUPPORTED, // valid but not handled (dtype, architecture, version)
    OSCAR_ERR_INVALID,     // bad argument or shape mismatch from the caller/user
    OSCAR_ERR_NOMEM,       // allocation failed
    OSCAR_ERR_NETWORK,     // transport failure (connect, timeout, truncated body)
    OSCAR_ERR_HTTP,        // server answered with an error status
    OSCAR_ERR_NOT_FOUND,   // a named thing (file, tensor, key, repo) does not exist
    OSCAR_ERR_NUMERIC,     // NaN/Inf or a failed numerical routine
    OSCAR_ERR_INTERRUPTED, // stopped by a signal or the user
};

// Short name of a status ("format error", ...). Never NULL; static storage.
const char * oscar_status_str(enum oscar_status s);

// The message recorded by the last failing oscar call on this thread.
// Owned by the library, valid until the next failing call on this thread.
const char * oscar_last_error(void);

// Records a printf-style message for this thread and returns `s`, so that
// `return osc_error(OSCAR_ERR_FORMAT, "%s: bad magic", path);` reads well.
enum oscar_status osc_error(enum oscar_status s, const char * fmt, ...)
    __attribute__((format(printf, 2, 3)));

// Prefixes the current message with "context: " (e.g. a file name) and
// returns `s` unchanged.
enum oscar_status osc_error_prefix(enum oscar_status s, const char * fmt, ...)
    __attribute__((format(printf, 2, 3)));

void osc_error_clear(void);

// Programmer errors only (never input-driven). Always on.
void osc_abort_at(const char * file, int line, const char * fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));

#define OSCAR_ASSERT(x)                                                  \
    do {                                                                 \
        if (!(x)) osc_abort_at(__FILE__, __LINE__, "assert: %s", #x);    \
    } while (0)

#define OSCAR_ABORT(...) osc_abort_at(__FILE__, __LINE__, __VA_ARGS__)

#endif
