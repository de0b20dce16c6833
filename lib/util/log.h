// log.h - leveled logging and TTY-aware progress on stderr.
//
// Everything human-facing goes to stderr so that stdout stays clean for
// tables and --json output. --quiet sets the level to OSCAR_LOG_ERROR.
#ifndef OSCAR_UTIL_LOG_H
#define OSCAR_UTIL_LOG_H

#include <stddef.h>
#include <stdint.h>

enum oscar_log_level {
    OSCAR_LOG_DEBUG = 0,
    OSCAR_LOG_INFO  = 1,
    OSCAR_LOG_WARN  = 2,
    OSCAR_LOG_ERROR = 3,
    OSCAR_LOG_NONE  = 4,
};

void oscar_log_set_level(enum oscar_log_level level);
// The calling thread's level, over the process's (a rank of an in-process group other than 0).
void oscar_log_set_thread_level(enum oscar_log_level level);
enum oscar_log_level oscar_log_get_level(void);

void osc_log(enum oscar_log_level level, const char * fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define osc_debug(...) osc_log(OSCAR_LOG_DEBUG, __VA_ARGS__)
#define osc_info(...)  osc_log(OSCAR_LOG_INFO, __VA_ARGS__)
#define osc_warn(...)  osc_log(OSCAR_LOG_WARN, __VA_ARGS__)
#define osc_errlog(...) osc_log(OSCAR_LOG_ERROR, __VA_ARGS__)

// Monotonic wall clock in seconds.
double osc_now(void);

// Progress of a long stage: "label  done/total unit  rate unit/s  ETA".
// On a TTY the line is redrawn in place at most every 0.2 s; otherwise a
// line is printed at most every 5 s. Silent below OSCAR_LOG_INFO.
struct osc_progress {
    const char * label;
    const char * unit;
    int64_t      total;
    int64_t      done;
    double       t_start;
    double       t_last_print;
    int          is_tty;
};

// Progress lines use human units: counts of unit "B" as KiB/MiB/GiB, other
// counts with k/M/G past 10,000, rates below 1 per second as seconds per unit,
// and times as 45s, 3m12s, 1h04m.
void osc_progress_init(struct osc_progress * p, const char * label, const char * unit, int64_t total);
// The pieces of a progress line, for tests: a count (or rate) of unit, a duration.
void osc_format_count(double v, const char * unit, char * out, size_t size);
void osc_format_duration(double seconds, char * out, size_t size);
void osc_progress_update(struct osc_progress * p, int64_t done);
// Prints the final line (with total time) and ends it.
void osc_progress_finish(struct osc_progress * p);

#endif
