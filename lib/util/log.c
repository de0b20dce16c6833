// log.c - leveled logging and progress lines on stderr.
#include "util/log.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static enum oscar_log_level log_level = OSCAR_LOG_INFO;
// A thread's own level (in-process ranks: only rank 0 speaks), -1: the process's
static _Thread_local int thread_level = -1;

void oscar_log_set_level(enum oscar_log_level level) { log_level = level; }
void oscar_log_set_thread_level(enum oscar_log_level level) { thread_level = (int) level; }
enum oscar_log_level oscar_log_get_level(void) {
    return thread_level >= 0 ? (enum oscar_log_level) thread_level : log_level;
}

void osc_log(enum oscar_log_level level, const char * fmt, ...) {
    static const char * const tags[] = { "debug: ", "", "warning: ", "error: " };
    if (level < oscar_log_get_level() || level >= OSCAR_LOG_NONE) {
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

void osc_format_count(double v, const char * unit, char * out, size_t size) {
    static const char * const bytes[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    static const char * const si[] = {"", "k", "M", "G", "T"};
    const bool is_bytes = strcmp(unit, "B") == 0;
    const double step = is_bytes ? 1024.0 : 1000.0;
    int k = 0;
    while (k < 4 && fabs(v) >= (k == 0 && !is_bytes ? 10000.0 : step)) v /= step, k++;
    // whole numbers (counts) without decimals, small rates with one
    const bool one = k > 0 || (v != floor(v) && fabs(v) < 100.0);
    if (is_bytes) snprintf(out, size, one ? "%.1f %s" : "%.0f %s", v, bytes[k]);
    else snprintf(out, size, one ? "%.1f%s%s%s" : "%.0f%s%s%s", v, si[k], *unit ? " " : "", unit);
}

void osc_format_duration(double s, char * out, size_t size) {
    if (!(s >= 0.0)) s = 0.0;
    if (s < 10.0) snprintf(out, size, "%.1fs", s);
    else if (s < 60.0) snprintf(out, size, "%.0fs", s);
    else if (s < 3600.0) snprintf(out, size, "%dm%02ds", (int) (s / 60.0), (int) fmod(s, 60.0));
    else snprintf(out, size, "%dh%02dm", (int) (s / 3600.0), (int) fmod(s / 60.0, 60.0));
}

static void progress_print(const struct osc_progress * p, double now, int final) {
    const double elapsed = now - p->t_start;
    const double rate    = elapsed > 0.0 ? (double) p->done / elapsed : 0.0;
    char done[48], total[48], speed[64], t[32], eta[48] = "";
    osc_format_count((double) p->done, strcmp(p->unit, "B") ? "" : "B", done, sizeof done); // unit once, on the total
    osc_format_count((double) p->total, p->unit, total, sizeof total);
    if (rate >= 1.0 || rate == 0.0) {
        osc_format_count(rate, p->unit, speed, sizeof speed);
        strncat(speed, "/s", sizeof speed - strlen(speed) - 1);
    } else { // slow units (methods, layers): seconds per unit reads better than 0.0/s
        osc_format_duration(1.0 / rate, t, sizeof t);
        snprintf(speed, sizeof speed, "%s per %s", t, p->unit);
    }
    if (!final && p->total > 0 && rate > 0.0) {
        osc_format_duration((double) (p->total - p->done) / rate, t, sizeof t);
        snprintf(eta, sizeof eta, "  ETA %s", t);
    } else if (final) {
        osc_format_duration(elapsed, t, sizeof t);
        snprintf(eta, sizeof eta, "  in %s", t);
    }
    fprintf(stderr, "%s%s  %s / %s  %s%s%s%s", p->is_tty ? "\r" : "", p->label, done, total, speed, eta,
            p->is_tty ? "\033[K" : "", (final || !p->is_tty) ? "\n" : "");
    fflush(stderr);
}

void osc_progress_update(struct osc_progress * p, int64_t done) {
    p->done = done;
    if (oscar_log_get_level() > OSCAR_LOG_INFO) {
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
    if (oscar_log_get_level() > OSCAR_LOG_INFO) {
        return;
    }
    progress_print(p, osc_now(), 1);
}
