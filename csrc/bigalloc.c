/* Large table allocation with huge-page hints; see bigalloc.h. */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200112L
#endif
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#endif
#include "bigalloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#define HUGE_PAGE ((size_t)2 << 20)

void *dps_big_alloc(size_t bytes, int fill) {
    void *p = NULL;
    if (bytes == 0) bytes = 1;
#if defined(_WIN32)
    p = malloc(bytes);
    if (p == NULL) return NULL;
#else
    if (bytes >= HUGE_PAGE) {
        if (bytes > SIZE_MAX - HUGE_PAGE) return NULL;
        size_t rounded = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
        if (posix_memalign(&p, HUGE_PAGE, rounded) != 0) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        (void)madvise(p, rounded, MADV_HUGEPAGE); /* a hint; failure changes nothing */
#endif
    } else {
        p = malloc(bytes);
        if (p == NULL) return NULL;
    }
#endif
    if (fill != DPS_BIG_NO_FILL) memset(p, fill, bytes);
    return p;
}

void dps_big_free(void *p) { free(p); }
