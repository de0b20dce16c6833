// cli.h - command-line numbers, parsed whole: "1e3", "2k", "abc", "" and
// values outside [lo, hi] are refused with a message naming the option
// (oscar_last_error), so no tool ever runs on a number it misread. Integers
// are decimal; reals are what strtod reads, finite.
#ifndef OSCAR_UTIL_CLI_H
#define OSCAR_UTIL_CLI_H

#include <stdint.h>

#include "util/error.h"

// --threads takes 1 .. OSC_MAX_THREADS (OpenMP cannot start arbitrarily many).
#define OSC_MAX_THREADS 1024

enum oscar_status osc_parse_i64(const char * opt, const char * text, int64_t lo, int64_t hi, int64_t * out);
enum oscar_status osc_parse_i32(const char * opt, const char * text, int32_t lo, int32_t hi, int32_t * out);
enum oscar_status osc_parse_u64(const char * opt, const char * text, uint64_t * out);
enum oscar_status osc_parse_f64(const char * opt, const char * text, double lo, double hi, double * out);
// --threads N: 1 .. OSC_MAX_THREADS
enum oscar_status osc_parse_threads(const char * opt, const char * text, int32_t * out);
// --device NAME: cpu | cuda (*out points at a static copy of the name). Whether
// this build and machine have the device is the backend registry's answer.
enum oscar_status osc_parse_device(const char * opt, const char * text, const char ** out);

#endif
