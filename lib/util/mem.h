// mem.h - large host buffers that are cheap to fill the first time: 2 MiB
// aligned and marked for transparent huge pages, so writing a few GB costs a
// few thousand page faults instead of a million (capture buffers that a GPU
// pass copies into). Release with free(). Falls back to plain pages where the
// kernel offers no huge pages.
#ifndef OSCAR_UTIL_MEM_H
#define OSCAR_UTIL_MEM_H

#include <stddef.h>

void * osc_alloc_large(size_t bytes);

#endif
