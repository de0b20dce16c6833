// test-cli.c - util/cli: command-line numbers are parsed whole and in range;
// everything atoi/atoll used to misread ("1e3" -> 1, "2k" -> 2, "abc" -> 0,
// overflow) is refused with a message naming the option.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "util/cli.h"

static void refused(enum oscar_status st, const char * opt) {
    assert_int_equal(st, OSCAR_ERR_INVALID);
    assert_non_null(strstr(oscar_last_error(), opt));
}

static void test_integers(void ** state) {
    (void) state;
    int64_t v = -1;
    assert_int_equal(osc_parse_i64("--tokens", "20000", 1, 1000000, &v), OSCAR_OK);
    assert_int_equal(v, 20000);
    assert_int_equal(osc_parse_i64("--x", "-3", -5, 5, &v), OSCAR_OK);
    assert_int_equal(v, -3);
    const char * bad[] = {"1e3", "2k", "abc", "", " 5", "+5", "5 ", "0x10", "1.0", "--1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = 42;
        refused(osc_parse_i64("--tokens", bad[i], 1, 1000000, &v), "--tokens");
        assert_int_equal(v, 42); // untouched on failure
    }
    refused(osc_parse_i64("--tokens", "0", 1, 10, &v), "out of range");
    refused(osc_parse_i64("--tokens", "-5", 1, 10, &v), "out of range");
    refused(osc_parse_i64("--tokens", "99999999999999999999", 1, INT64_MAX, &v), "out of range");
    int32_t w = 0;
    refused(osc_parse_i32("--batch", "2147483648", 1, INT32_MAX, &w), "--batch");
    assert_int_equal(osc_parse_i32("--batch", "2147483647", 1, INT32_MAX, &w), OSCAR_OK);
    assert_int_equal(w, INT32_MAX);
}

static void test_device(void ** state) {
    (void) state;
    const char * d = NULL;
    assert_int_equal(osc_parse_device("--device", "cuda", &d), OSCAR_OK);
    assert_string_equal(d, "cuda");
    assert_int_equal(osc_parse_device("--device", "cpu", &d), OSCAR_OK);
    assert_string_equal(d, "cpu");
    refused(osc_parse_device("--device", "gpu", &d), "--device");
    assert_non_null(strstr(oscar_last_error(), "'gpu' is not a device (cpu, cuda)"));
    refused(osc_parse_device("--device", "", &d), "--device");
    refused(osc_parse_device("--device", "CUDA", &d), "--device");
}

static void test_threads(void ** state) {
    (void) state;
    int32_t t = 0;
    assert_int_equal(osc_parse_threads("--threads", "2", &t), OSCAR_OK);
    assert_int_equal(t, 2);
    refused(osc_parse_threads("--threads", "0", &t), "--threads");
    refused(osc_parse_threads("--threads", "100000", &t), "--threads");
    refused(osc_parse_threads("--threads", "abc", &t), "--threads");
}

static void test_unsigned_and_reals(void ** state) {
    (void) state;
    uint64_t s = 0;
    assert_int_equal(osc_parse_u64("--seed", "18446744073709551615", &s), OSCAR_OK);
    assert_true(s == UINT64_MAX);
    refused(osc_parse_u64("--seed", "-1", &s), "--seed");   // strtoull would wrap it
    refused(osc_parse_u64("--seed", "18446744073709551616", &s), "--seed");
    double d = 0;
    assert_int_equal(osc_parse_f64("--clip", "0.96", 0, 1, &d), OSCAR_OK);
    assert_true(d == 0.96);
    refused(osc_parse_f64("--clip", "0.9x", 0, 1, &d), "--clip");
    refused(osc_parse_f64("--clip", "1.5", 0, 1, &d), "out of range");
    refused(osc_parse_f64("--clip", "nan", 0, 1, &d), "--clip");
    refused(osc_parse_f64("--clip", "", 0, 1, &d), "--clip");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_integers),
        cmocka_unit_test(test_threads), cmocka_unit_test(test_device),
        cmocka_unit_test(test_unsigned_and_reals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
