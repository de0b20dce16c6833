// version.h - the one version string of oscar (tools, artifacts, user agent).
#ifndef OSCAR_UTIL_VERSION_H
#define OSCAR_UTIL_VERSION_H

#define OSCAR_VERSION "0.1.0"

#endif
