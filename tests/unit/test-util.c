// test-util.c - error messages, atomic writes, mappings, directories replaced whole.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "oscar.h"
#include "util/fs.h"
#include "util/log.h"

#define TEST_TMPDIR_NAME "util"
#include "test-tmpdir.h"

// Issue 20: progress in human units (was "99350176/99350176 B 494934995.7 B/s", "0.0 methods/s").
static void test_human_units(void ** state) {
    (void) state;
    char b[64];
    const struct { double v; const char * unit, * want; } counts[] = {
        {99350176.0, "B", "94.7 MiB"}, {512.0, "B", "512 B"}, {494934995.7, "B", "472.0 MiB"},
        {30.0, "layer", "30 layer"}, {65280.0, "token-layers", "65.3k token-layers"}, {9999.0, "tok", "9999 tok"},
        {3.4, "layer", "3.4 layer"}, {4334.6, "tok", "4335 tok"}, {2.5e9, "tok", "2.5G tok"}, {23936.0, "", "23.9k"}};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        osc_format_count(counts[i].v, counts[i].unit, b, sizeof b);
        assert_string_equal(b, counts[i].want);
    }
    const struct { double s; const char * want; } times[] = {
        {0.44, "0.4s"}, {9.96, "10.0s"}, {45.2, "45s"}, {192.0, "3m12s"}, {3840.0, "1h04m"}, {-1.0, "0.0s"}};
    for (size_t i = 0; i < sizeof times / sizeof times[0]; i++) {
        osc_format_duration(times[i].s, b, sizeof b);
        assert_string_equal(b, times[i].want);
    }
}

static void test_error_message(void ** state) {
    (void) state;
    enum oscar_status st = osc_error(OSCAR_ERR_FORMAT, "%s: bad magic %d", "x.gguf", 7);
    assert_int_equal(st, OSCAR_ERR_FORMAT);
    assert_string_equal(oscar_last_error(), "x.gguf: bad magic 7");
    osc_error_prefix(st, "loading %s", "model");
    assert_string_equal(oscar_last_error(), "loading model: x.gguf: bad magic 7");
    assert_string_equal(oscar_status_str(OSCAR_ERR_IO), "I/O error");
}

static void test_atomic_write_and_map(void ** state) {
    (void) state;
    char * path = osc_path_join(tmpdir, "a.bin");
    assert_int_equal(osc_write_file_atomic(path, "hello", 5), OSCAR_OK);
    struct osc_mapped_file m;
    assert_int_equal(osc_map_file(path, &m), OSCAR_OK);
    assert_int_equal(m.size, 5);
    assert_memory_equal(m.data, "hello", 5);
    osc_unmap_file(&m);
    free(path);
}

// Dropping a mapped range's pages keeps its bytes readable (they fault in from
// the file again), at unaligned edges and across page boundaries.
static void test_mapped_drop(void ** state) {
    (void) state;
    enum { N = 3 * 4096 + 123 };
    static unsigned char want[N];
    for (size_t i = 0; i < N; i++) want[i] = (unsigned char) (i * 131u + 7u);
    char * path = osc_path_join(tmpdir, "drop.bin");
    assert_int_equal(osc_write_file_atomic(path, want, N), OSCAR_OK);
    struct osc_mapped_file m;
    assert_int_equal(osc_map_file(path, &m), OSCAR_OK);
    assert_memory_equal(m.data, want, N);
    osc_mapped_drop(m.data + 1000, 5000);   // inside, not page-aligned
    assert_memory_equal(m.data, want, N);
    osc_mapped_drop(m.data, N);            // all of it
    osc_mapped_drop(m.data, 0);            // nothing
    osc_mapped_drop(NULL, 10);
    assert_memory_equal(m.data, want, N);
    osc_unmap_file(&m);
    free(path);
}

static void test_atomic_abort_leaves_nothing(void ** state) {
    (void) state;
    char * path = osc_path_join(tmpdir, "b.bin");
    struct osc_atomic_file f;
    assert_int_equal(osc_atomic_open(&f, path), OSCAR_OK);
    fputs("partial", f.fp);
    char tmp_copy[512];
    snprintf(tmp_copy, sizeof tmp_copy, "%s", f.tmp_path);
    osc_atomic_abort(&f);
    assert_int_not_equal(access(path, F_OK), 0);
    assert_int_not_equal(access(tmp_copy, F_OK), 0);
    free(path);
}

static void test_unwritable_dir(void ** state) {
    (void) state;
    enum oscar_status st = osc_write_file_atomic("/nonexistent-dir/x.bin", "x", 1);
    assert_int_equal(st, OSCAR_ERR_IO);
    assert_non_null(strstr(oscar_last_error(), "/nonexistent-dir/x.bin"));
}

static void test_read_file_limit(void ** state) {
    (void) state;
    char * path = osc_path_join(tmpdir, "c.txt");
    assert_int_equal(osc_write_file_atomic(path, "0123456789", 10), OSCAR_OK);
    char * buf = NULL;
    size_t n = 0;
    assert_int_equal(osc_read_file(path, 100, &buf, &n), OSCAR_OK);
    assert_int_equal(n, 10);
    assert_string_equal(buf, "0123456789");
    free(buf);
    assert_int_equal(osc_read_file(path, 5, &buf, &n), OSCAR_ERR_INVALID);
    assert_null(buf);
    free(path);
}

static void test_mkdirs(void ** state) {
    (void) state;
    char * path = osc_path_join(tmpdir, "x/y/z");
    assert_int_equal(osc_mkdirs(path), OSCAR_OK);
    assert_int_equal(osc_mkdirs(path), OSCAR_OK);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    free(path);
}

// Regression (issue 18, item 17): a FIFO is refused at once, not waited on
// in open() until something writes to it.
static void test_map_fifo(void ** state) {
    (void) state;
    char * path = osc_path_join(tmpdir, "fifo");
    assert_int_equal(mkfifo(path, 0600), 0);
    alarm(20); // a hang fails the test instead of stalling the suite
    struct osc_mapped_file m;
    assert_int_equal(osc_map_file(path, &m), OSCAR_ERR_IO);
    assert_non_null(strstr(oscar_last_error(), "not a regular file"));
    assert_non_null(strstr(oscar_last_error(), path));
    assert_int_equal(osc_require_regular(path), OSCAR_ERR_IO);
    assert_int_equal(osc_require_regular(tmpdir), OSCAR_ERR_IO);
    assert_int_equal(osc_require_regular("/nonexistent/x"), OSCAR_ERR_IO);
    assert_non_null(strstr(oscar_last_error(), "/nonexistent/x"));
    alarm(0);
    free(path);
}

// ---- output directories (osc_dir_stage) -----------------------------------------------------
static const char * const files[] = {"a.txt", "b.txt", NULL};

// A pid no process has now: a child that has exited and been reaped.
static long dead_pid(void) {
    pid_t c = fork();
    assert_true(c >= 0);
    if (c == 0) _exit(0);
    assert_int_equal(waitpid(c, NULL, 0), c);
    return (long) c;
}

static char * pathf(const char * fmt, ...) __attribute__((format(printf, 1, 2)));
static char * pathf(const char * fmt, ...) {
    char rel[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof rel, fmt, ap);
    va_end(ap);
    char * p = osc_path_join(tmpdir, rel);
    assert_non_null(p);
    return p;
}

static void put(const char * path, const char * text) {
    assert_int_equal(osc_write_file_atomic(path, text, strlen(text)), OSCAR_OK);
}

static bool exists(const char * path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

// Writes dir/a.txt = text through a stage and commits it.
static enum oscar_status stage_write(const char * dir, const char * text) {
    struct osc_dir_stage s;
    enum oscar_status st = osc_dir_stage_open(&s, dir, "a test directory", files);
    if (st != OSCAR_OK) return st;
    char * f = osc_path_join(s.tmp, "a.txt");
    put(f, text);
    free(f);
    return osc_dir_stage_commit(&s);
}

static void test_dir_stage_replaces_whole(void ** state) {
    (void) state;
    char * dir = pathf("out/rep"), * a = pathf("out/rep/a.txt"), * b = pathf("out/rep/b.txt");
    assert_int_equal(stage_write(dir, "one"), OSCAR_OK); // parent created
    put(b, "old b");
    assert_int_equal(stage_write(dir, "two"), OSCAR_OK);
    char * text = NULL;
    assert_int_equal(osc_read_file(a, 100, &text, NULL), OSCAR_OK);
    assert_string_equal(text, "two");
    free(text);
    assert_false(exists(b)); // replaced whole, not merged
    char * p = pathf("out");
    struct dirent * e;
    DIR * d = opendir(p);
    assert_non_null(d);
    int n = 0;
    while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.'; // no hidden sibling left either
    closedir(d);
    assert_int_equal(n, 1);
    char * hidden = pathf("out/.rep.tmp.%ld", (long) getpid());
    assert_false(exists(hidden));
    // an aborted stage leaves the old directory and nothing else
    struct osc_dir_stage s;
    assert_int_equal(osc_dir_stage_open(&s, dir, "a test directory", files), OSCAR_OK);
    assert_true(exists(s.tmp));
    osc_dir_stage_abort(&s);
    assert_false(exists(hidden));
    assert_true(exists(a));
    free(dir), free(a), free(b), free(p), free(hidden);
}

static void test_dir_stage_refuses(void ** state) {
    (void) state;
    char * foreign = pathf("foreign"), * notes = pathf("foreign/notes.txt"), * file = pathf("plain");
    char * sub = pathf("sub"), * subdir = pathf("sub/a.txt"), * link = pathf("link");
    assert_int_equal(osc_mkdirs(foreign), OSCAR_OK);
    put(notes, "mine");
    assert_int_equal(osc_dir_check_dest(foreign, "a test directory", files), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "notes.txt"));
    assert_non_null(strstr(oscar_last_error(), "a test directory"));
    put(file, "x");
    assert_int_equal(osc_dir_check_dest(file, "a test directory", files), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "not a directory"));
    assert_int_equal(osc_mkdirs(subdir), OSCAR_OK); // a listed name that is not a file
    assert_int_equal(osc_dir_check_dest(sub, "a test directory", files), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "not a regular file"));
    assert_int_equal(symlink(foreign, link), 0);
    assert_int_equal(osc_dir_check_dest(link, "a test directory", files), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "symbolic link"));
    assert_int_equal(osc_dir_check_dest("", "a test directory", files), OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), "empty"));
    char * dot = pathf("foreign/.");
    assert_int_equal(osc_dir_check_dest(dot, "a test directory", files), OSCAR_ERR_INVALID);
    assert_int_equal(osc_dir_check_dest("/", "a test directory", files), OSCAR_ERR_INVALID);
    assert_int_not_equal(osc_dir_check_dest("/proc/oscar-test-dir", "a test directory", files), OSCAR_OK);
    assert_non_null(strstr(oscar_last_error(), "/proc/oscar-test-dir"));
    // nothing was created next to the refused destinations
    char * tmp = pathf(".foreign.tmp.%ld", (long) getpid());
    assert_false(exists(tmp));
    free(foreign), free(notes), free(file), free(sub), free(subdir), free(link), free(dot), free(tmp);
}

static void test_stale_temporaries_removed(void ** state) {
    (void) state;
    long dead = dead_pid();
    char * dir = pathf("st/art");
    char * t = pathf("st/.art.tmp.%ld", dead), * o = pathf("st/.art.old.%ld", dead), * t_in = pathf("st/.art.tmp.%ld/a.txt", dead);
    char * live = pathf("st/.art.tmp.%ld", (long) getppid()), * odd = pathf("st/.art.tmp.12x"), * zero = pathf("st/.art.tmp.0%ld", dead);
    char * other = pathf("st/.other.tmp.%ld", dead);
    assert_int_equal(osc_mkdirs(t), OSCAR_OK);
    put(t_in, "half");
    assert_int_equal(osc_mkdirs(o), OSCAR_OK);
    assert_int_equal(osc_mkdirs(live), OSCAR_OK);
    assert_int_equal(osc_mkdirs(odd), OSCAR_OK);
    assert_int_equal(osc_mkdirs(zero), OSCAR_OK);
    assert_int_equal(osc_mkdirs(other), OSCAR_OK);
    assert_int_equal(stage_write(dir, "new"), OSCAR_OK);
    assert_false(exists(t));
    assert_false(exists(o));
    assert_true(exists(live)); // a live writer's, not ours to remove
    assert_true(exists(odd));  // not our pattern
    assert_true(exists(zero));
    assert_true(exists(other)); // another destination's
    // files: "<path>.tmp.<pid>" of a dead writer goes when the path is written again
    char * f = pathf("st/f.bin"), * ft = pathf("st/f.bin.tmp.%ld", dead), * fl = pathf("st/f.bin.tmp.%ld", (long) getppid());
    put(ft, "stale");
    put(fl, "live");
    put(f, "data");
    assert_false(exists(ft));
    assert_true(exists(fl));
    put(ft, "stale again");
    osc_remove_stale_temps(f);
    assert_false(exists(ft));
    free(dir), free(t), free(o), free(t_in), free(live), free(odd), free(zero), free(other);
    free(f), free(ft), free(fl);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_message),
        cmocka_unit_test(test_human_units),
        cmocka_unit_test(test_atomic_write_and_map),
        cmocka_unit_test(test_atomic_abort_leaves_nothing),
        cmocka_unit_test(test_unwritable_dir),
        cmocka_unit_test(test_read_file_limit),
        cmocka_unit_test(test_mkdirs),
        cmocka_unit_test(test_map_fifo),
        cmocka_unit_test(test_dir_stage_replaces_whole),
        cmocka_unit_test(test_dir_stage_refuses),
        cmocka_unit_test(test_stale_temporaries_removed),
        cmocka_unit_test(test_mapped_drop),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
