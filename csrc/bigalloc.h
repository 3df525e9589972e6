/* Allocation of large hash tables (keymap.c, count_pairset.c) and large
 * scatter buffers (radix_pairs.c).
 *
 * The tables are probed at random, one cache miss per row, so with 4 KiB pages nearly every
 * probe also misses the TLB. Tables of 2 MiB or more are therefore aligned to 2 MiB and, on
 * Linux, marked for transparent huge pages (madvise(MADV_HUGEPAGE); a hint: where the kernel
 * declines, the memory is ordinary). Such blocks are mapped from the system directly, so that
 * freeing one returns its memory at once. Shrink with dps_big_shrink and free with dps_big_free
 * only (never realloc or free). Plain C11 + POSIX, no Python. */
#ifndef DPS_BIGALLOC_H
#define DPS_BIGALLOC_H

#include <stddef.h>

/* `bytes` bytes, each set to `fill` (DPS_BIG_NO_FILL: left as the system gives them, for
 * buffers that are written before they are read); NULL when out of memory. */
#define DPS_BIG_NO_FILL (-1)
void *dps_big_alloc(size_t bytes, int fill);
/* The same block cut to its first `bytes` bytes (the same pointer, or a moved copy); where it
 * cannot be cut, the block as it was. Never NULL for a block that was not NULL. */
void *dps_big_shrink(void *p, size_t bytes);
void dps_big_free(void *p);

#endif
