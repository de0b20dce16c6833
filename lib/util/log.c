// log.c - leveled logging and progress lines on stderr.
#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static enum oscar_log_level log_level = OSCAR_LOG_INFO;

void oscar_log_set_level(enum oscar_log_level level) { log_level = level; }
enum oscar_log_level oscar_log_get_level(void) { return log_level; }

void osc_log(enum oscar_log_level level, const char * fmt, ...) {
    static const char * const tags[] = { "debug: ", "", "warning: ", "error: " };
    if (level < log_level || level >= OSCAR_LOG_NONE) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    fputs(tags[level], stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

double osc_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

void osc_progress_init(struct osc_progress * p, const char * label, const char * unit, int64_t total) {
    p->label        = label;
    p->unit         = unit;
    p->total        = total;
    p->done         = 0;
    p->t_start      = osc_now();
    p->t_last_print = 0.0;
    p->is_tty       = isatty(STDERR_FILENO);
}

static void progress_print(const struct osc_progress * p, double now, int final) {
    double elapsed = now - p->t_start;
    double rate    = elapsed > 0.0 ? (double) p->done / elapsed : 0.0;
    char eta[32]   = "";
    if (!final && p->total > 0 && rate > 0.0) {
        snprintf(eta, sizeof eta, "  ETA %.0fs", (double) (p->total - p->done) / rate);
    } else if (final) {
        snprintf(eta, sizeof eta, "  in %.1fs", elapsed);
    }
    fprintf(stderr, "%s%s  %lld/%lld %s  %.1f %s/s%s%s%s",
            p->is_tty ? "\r" : "", p->label, (long long) p->done, (long long) p->total,
            p->unit, rate, p->unit, eta, p->is_tty ? "\033[K" : "",
            (final || !p->is_tty) ? "\n" : "");
    fflush(stderr);
}

void osc_progress_update(struct osc_progress * p, int64_t done) {
    p->done = done;
    if (log_level > OSCAR_LOG_INFO) {
        return;
    }
    double now      = osc_now();
    double interval = p->is_tty ? 0.2 : 5.0;
    if (now - p->t_last_print >= interval) {
        p->t_last_print = now;
        progress_print(p, now, 0);
    }
}

void osc_progress_finish(struct osc_progress * p) {
    if (log_level > OSCAR_LOG_INFO) {
        return;
    }
    progress_print(p, osc_now(), 1);
}
