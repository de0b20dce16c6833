// mem.c - see mem.h.
#include "util/mem.h"

#include <stdlib.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t) 2 << 20)

void * osc_alloc_large(size_t bytes) {
    if (bytes < HUGE_PAGE) return malloc(bytes ? bytes : 1);
    size_t n = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    void * p = NULL;
    if (posix_memalign(&p, HUGE_PAGE, n) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    (void) madvise(p, n, MADV_HUGEPAGE);   // advice only: failure leaves ordinary pages
#endif
    return p;
}
