/* Exact sums of int64 values in 128 bits (two's complement, as two 64-bit words).
 *
 * A partition's sum of grid units can leave int64 (2^32 rows of values up to 2^52 in magnitude,
 * or fewer rows of larger integers), and a sum that wraps, or a release that fails because one
 * did, depends on the data. Summed in 128 bits, n < 2^64 values of magnitude at most 2^63 never
 * overflow; callers merge shards exactly and clamp each total to a fixed range before any noise
 * (docs/privacy/aggregate.md, "Exact sums"). Plain C11: no compiler's 128-bit type is needed. */
#ifndef DPS_WIDE_SUM_H
#define DPS_WIDE_SUM_H

#include <stdint.h>

/* acc[0] is the low word, acc[1] the high word of a signed 128-bit integer; acc += v. */
static inline void dps_wide_add(uint64_t *acc, int64_t v) {
    uint64_t lo = acc[0] + (uint64_t)v;        /* mod 2^64 */
    uint64_t carry = lo < acc[0];              /* the low words' sum reached 2^64 */
    acc[1] += (v < 0 ? UINT64_MAX : 0) + carry; /* v's high word is its sign extension */
    acc[0] = lo;
}

#endif
