/* Allocation of large hash tables (keymap.c, count_pairset.c) and large
 * scatter buffers (radix_pairs.c).
 *
 * The tables are probed at random, one cache miss per row, so with 4 KiB pages nearly every
 * probe also misses the TLB. Tables of 2 MiB or more are therefore aligned to 2 MiB and, on
 * Linux, marked for transparent huge pages (madvise(MADV_HUGEPAGE); a hint: where the kernel
 * declines, the memory is ordinary). Free with dps_big_free. Plain C11 + POSIX, no Python. */
#ifndef DPS_BIGALLOC_H
#define DPS_BIGALLOC_H

#include <stddef.h>

/* `bytes` bytes, each set to `fill` (DPS_BIG_NO_FILL: left as the system gives them, for
 * buffers that are written before they are read); NULL when out of memory. */
#define DPS_BIG_NO_FILL (-1)
void *dps_big_alloc(size_t bytes, int fill);
void dps_big_free(void *p);

#endif
