// version.c - the build's git commit, from the header the Makefile writes
// ($(B)/gen/build-commit.h, rewritten only when the commit changes).
#include "util/version.h"

#if defined(__has_include)
#if __has_include("build-commit.h")
#include "build-commit.h"
#endif
#endif
#ifndef OSCAR_BUILD_COMMIT
#define OSCAR_BUILD_COMMIT "unknown" // a build outside a git checkout
#endif

const char * oscar_build_commit(void) { return OSCAR_BUILD_COMMIT; }
