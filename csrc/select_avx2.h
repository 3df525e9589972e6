/* AVX2 block loop for select on contiguous 64-bit counts and a contiguous bool output, for keep
 * tables that carry a 32-bit copy of their top bytes (top32). It consumes random bytes exactly
 * as the portable loop in select.c does (blocks of 64: one byte per decision, compared with the
 * top byte of q[min(n, N - 1)]; then the ties in index order; "kept surely" OR-ed in after),
 * so both produce the same decisions from the same stream. Used where AVX-512 is missing. */
#ifndef DPS_SELECT_AVX2_H
#define DPS_SELECT_AVX2_H

#include <stddef.h>
#include <stdint.h>

#include "csprng.h"
#include "select.h"

/* 1 when this CPU and build can run dps_select_blocks_avx2. */
int dps_select_avx2_available(void);

/* Process the leading whole blocks of 64; returns how many elements were done (a multiple of
 * 64), or a negative status. *negative_seen is set if a negative signed count was read. */
long long dps_select_blocks_avx2(dps_rng *s, const dps_keep_table *t, const int64_t *counts,
                                 size_t n, int is_signed, uint8_t *keep, int *negative_seen);

#endif
