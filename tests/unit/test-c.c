// test-c.c - every public header compiles on its own and all together in C11
// with the project's warnings (whisper.cpp's test-c idea), and the umbrella
// header exposes the version.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "oscar.h"
// Headers outside the umbrella, included once more to check they are self-contained.
#include "formats/gguf.h"
#include "formats/gguf-writer.h"
#include "formats/hf-config.h"
#include "formats/pt-writer.h"
#include "formats/safetensors.h"
#include "util/fs.h"
#include "util/sha256.h"

static void test_version_and_status(void ** state) {
    (void) state;
    assert_true(strlen(OSCAR_VERSION) > 0);
    assert_string_equal(oscar_status_str(OSCAR_OK), "ok");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_and_status),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
