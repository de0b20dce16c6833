// test-stats-oracle.c - lib/stats + lib/rotation/fit against the committed
// numpy-oracle fixtures (tests/fixtures/stats/, see its README for the
// command). Tolerances are derived in tests/oracle/stats-oracle.h.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../oracle/stats-oracle.h"

static void check(const char * name, int threads) {
    struct so_result r;
    const int f = so_check_file(name, threads, &r);
    print_message("%s threads %d: %d checks; worst rel matrix %.2e, eigenvalue %.2e, eigenvector %.2e, "
                  "composition %.2e\n", name, threads, r.n_checks, r.worst_mat, r.worst_eig, r.worst_u, r.worst_comp);
    assert_int_equal(f, 0);
    assert_true(r.n_checks > 100);
}

static void test_smol_1(void ** state) { (void) state; check("tests/fixtures/stats/stats-smol.bin", 1); }
static void test_smol_2(void ** state) { (void) state; check("tests/fixtures/stats/stats-smol.bin", 2); }
static void test_qwen_1(void ** state) { (void) state; check("tests/fixtures/stats/stats-qwen.bin", 1); }
static void test_qwen_2(void ** state) { (void) state; check("tests/fixtures/stats/stats-qwen.bin", 2); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smol_1),
        cmocka_unit_test(test_smol_2),
        cmocka_unit_test(test_qwen_1),
        cmocka_unit_test(test_qwen_2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
