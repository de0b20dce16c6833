// test-tmpdir.h - one scratch directory per cmocka group: `tmpdir` is created
// by setup() under /tmp and removed with everything in it by teardown().
// Define TEST_TMPDIR_NAME (a short tag for the directory name) first.
#ifndef OSCAR_TEST_TMPDIR_H
#define OSCAR_TEST_TMPDIR_H

#include <stdio.h>
#include <stdlib.h>

static char tmpdir[256];

static int setup(void ** state) {
    (void) state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/oscar-test-%s-XXXXXX", TEST_TMPDIR_NAME);
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void ** state) {
    (void) state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd);
}

#endif
