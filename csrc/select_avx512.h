/* AVX-512 (F, BW, VBMI) block loop for select on contiguous 64-bit counts and a contiguous bool
 * output, for keep tables of at most 128 entries. It consumes random bytes exactly as the
 * portable loop in select.c does (blocks of 64: one byte per decision, then the ties in index
 * order, counts >= N looked up at N - 1 with n >= N OR-ed in), so both produce the same
 * decisions from the same stream. */
#ifndef DPS_SELECT_AVX512_H
#define DPS_SELECT_AVX512_H

#include <stddef.h>
#include <stdint.h>

#include "csprng.h"
#include "select.h"

/* 1 when this CPU and build can run dps_select_blocks_avx512. */
int dps_select_avx512_available(void);

/* Process the leading whole blocks of 64; returns how many elements were done (a multiple of
 * 64), or a negative status. *negative_seen is set if a negative signed count was read (the
 * caller then fails the batch as the portable loop does). */
long long dps_select_blocks_avx512(dps_rng *s, const dps_keep_table *t, const int64_t *counts,
                                   size_t n, int is_signed, uint8_t *keep, int *negative_seen);

#endif
