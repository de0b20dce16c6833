// test-util.c - error messages, atomic writes, mappings.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "oscar.h"
#include "util/fs.h"

#define TEST_TMPDIR_NAME "util"
#include "test-tmpdir.h"

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_message),
        cmocka_unit_test(test_atomic_write_and_map),
        cmocka_unit_test(test_atomic_abort_leaves_nothing),
        cmocka_unit_test(test_unwritable_dir),
        cmocka_unit_test(test_read_file_limit),
        cmocka_unit_test(test_mkdirs),
        cmocka_unit_test(test_map_fifo),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
