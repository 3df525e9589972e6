/* Large table allocation with huge-page hints; see bigalloc.h. */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200112L
#endif
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE, MAP_ANONYMOUS */
#endif
#include "bigalloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if !defined(_WIN32)
#include <sys/mman.h>
#include <unistd.h>
#endif

#define HUGE_PAGE ((size_t)2 << 20)

/* Every block starts HEADER bytes after a header saying how it was obtained. Blocks of 2 MiB or
 * more are mapped from the system directly, not taken from malloc: glibc raises its threshold
 * for mapping when a mapped block is freed, after which blocks of up to that size come from its
 * heaps, which keep freed memory (a job of 1e6 rows then peaked some 9 MiB higher, and kept it
 * afterwards). A mapping is returned to the system when freed, and shrinks in place. */
#define HEADER ((size_t)64)
#define BY_MALLOC ((uint64_t)0x6d616c6c6f63u)
#define BY_MMAP ((uint64_t)0x6d6d6170u)

typedef struct header {
    uint64_t how;
    size_t map_len; /* BY_MMAP: bytes mapped from the header's page on */
} header;

static header *header_of(void *p) { return (header *)((uint8_t *)p - HEADER); }

#if !defined(_WIN32)
static size_t page_size(void) {
    long page = sysconf(_SC_PAGESIZE);
    return page > 0 ? (size_t)page : 4096;
}

/* `rounded` bytes (a multiple of HUGE_PAGE) aligned to HUGE_PAGE, behind one page holding the
 * header; NULL when out of memory. */
static void *map_block(size_t rounded) {
    size_t page = page_size();
    if (page > HUGE_PAGE || rounded > SIZE_MAX - 2 * HUGE_PAGE) return NULL;
    size_t total = rounded + 2 * HUGE_PAGE;
    uint8_t *base = (uint8_t *)mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == (uint8_t *)MAP_FAILED) return NULL;
    uintptr_t at = ((uintptr_t)base + page + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    uint8_t *p = (uint8_t *)at, *head = p - page, *end = p + rounded;
    if (head > base) munmap(base, (size_t)(head - base));
    if (base + total > end) munmap(end, (size_t)(base + total - end));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    (void)madvise(p, rounded, MADV_HUGEPAGE); /* a hint; failure changes nothing */
#endif
    header *h = header_of(p);
    h->how = BY_MMAP;
    h->map_len = (size_t)(end - head);
    return p;
}
#endif

void *dps_big_alloc(size_t bytes, int fill) {
    uint8_t *p = NULL;
    if (bytes == 0) bytes = 1;
    if (bytes > SIZE_MAX - HUGE_PAGE) return NULL;
#if !defined(_WIN32)
    if (bytes >= HUGE_PAGE) {
        p = (uint8_t *)map_block((bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE);
        if (p == NULL) return NULL;
        if (fill != DPS_BIG_NO_FILL && fill != 0) memset(p, fill, bytes); /* a new mapping reads as 0 */
        return p;
    }
#endif
    uint8_t *raw = (uint8_t *)malloc(bytes + HEADER);
    if (raw == NULL) return NULL;
    p = raw + HEADER;
    header_of(p)->how = BY_MALLOC;
    if (fill != DPS_BIG_NO_FILL) memset(p, fill, bytes);
    return p;
}

void *dps_big_shrink(void *p, size_t bytes) {
    if (p == NULL) return NULL;
    if (bytes == 0) bytes = 1;
    header *h = header_of(p);
#if !defined(_WIN32)
    if (h->how == BY_MMAP) {
        size_t page = page_size();
        size_t keep = page + (bytes + page - 1) / page * page; /* the header's page, then the block */
        if (keep < h->map_len) {
            uint8_t *head = (uint8_t *)p - page;
            munmap(head + keep, h->map_len - keep);
            h->map_len = keep;
        }
        return p;
    }
#endif
    uint8_t *raw = (uint8_t *)realloc((uint8_t *)p - HEADER, bytes + HEADER);
    return raw == NULL ? p : raw + HEADER; /* where the allocator cannot shrink, the block stays */
}

void dps_big_free(void *p) {
    if (p == NULL) return;
    header *h = header_of(p);
#if !defined(_WIN32)
    if (h->how == BY_MMAP) {
        size_t page = page_size();
        munmap((uint8_t *)p - page, h->map_len);
        return;
    }
#endif
    free((uint8_t *)p - HEADER);
}
