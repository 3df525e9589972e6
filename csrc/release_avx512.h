/* AVX-512 (F, BW) block loop for the TSGD release on contiguous 64-bit counts, a contiguous
 * bool mask and contiguous int64 noisy counts, for weight tables with a direct 16-bit table.
 * It consumes random bytes exactly as the portable loop in select.c does (blocks of 64: four
 * bytes per draw, then the flagged draws finished in index order), so both produce the same
 * release from the same stream. */
#ifndef DPS_RELEASE_AVX512_H
#define DPS_RELEASE_AVX512_H

#include <stddef.h>
#include <stdint.h>

#include "csprng.h"
#include "tsgd.h"

int dps_release_avx512_available(void);

/* Process the leading whole blocks of 64; returns how many elements were done (a multiple of
 * 64), or a negative status. The direct table must have 4 readable bytes past its end. */
long long dps_release_blocks_avx512(dps_rng *s, const dps_weight_table *w, uint32_t k,
                                    const int64_t *counts, size_t n, int is_signed,
                                    uint8_t *keep, int64_t *noisy, int *negative_seen);

#endif
