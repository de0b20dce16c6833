// version.h - the one version string of oscar (tools, artifacts, user agent).
#ifndef OSCAR_UTIL_VERSION_H
#define OSCAR_UTIL_VERSION_H

#define OSCAR_VERSION "0.1.0"

// The git commit the build was made from ("abc1234", "abc1234-dirty"), or
// "unknown". Printed by --version and recorded in artifacts (oscar.tool).
const char * oscar_build_commit(void);

#endif
