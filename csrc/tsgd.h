/* Exact sampling from a certified integer weight table (spec rng-and-exactness.md §4.1–4.2).
 *
 * The table holds strictly increasing cumulative weights C[0] < ... < C[m-1] = S <= 2^64 - 1.
 * A draw takes U uniform in [0, 2^64) from fresh bytes, rejects U >= S, and returns
 * #{j : C[j] <= U}, so index i has probability (C[i] - C[i-1]) / S exactly.
 *
 * U is read lazily: the top 32 bits first, searched branch-free against the top halves of C;
 * only when they tie with a table entry (probability <= m / 2^32) are 4 more bytes read and the
 * full 64-bit comparison made. Rejections depend on U alone. */
#ifndef DPS_TSGD_H
#define DPS_TSGD_H

#include <stddef.h>
#include <stdint.h>

#include "csprng.h"

typedef struct dps_weight_table {
    const uint64_t *cum;  /* m cumulative weights, strictly increasing */
    uint32_t m;
    uint32_t padded;      /* power of two >= m */
    uint32_t *hi;         /* `padded` entries: cum[j] >> 32, then 0xFFFFFFFF */
} dps_weight_table;

/* Check the table (strictly increasing, m >= 1) and fill hi (caller provides
 * dps_weight_table_padded(m) uint32 slots). */
int dps_weight_table_init(dps_weight_table *t, const uint64_t *cum, uint32_t m, uint32_t *hi);
uint32_t dps_weight_table_padded(uint32_t m);

/* Value barrier: stops the compiler from turning mask arithmetic back into branches. */
#if defined(__GNUC__) || defined(__clang__)
#define DPS_BARRIER(x) __asm__("" : "+r"(x))
#else
#define DPS_BARRIER(x) ((void)0)
#endif

/* #{j < padded : hi[j] <= u}, with a fixed number of steps and no data-dependent branch. */
static inline uint32_t dps_count_le32(const uint32_t *hi, uint32_t padded, uint32_t u) {
    uint32_t lo = 0;
    for (uint32_t half = padded >> 1; half > 0; half >>= 1) {
        uint32_t mask = (uint32_t)0 - (uint32_t)(hi[lo + half - 1] <= u);
        DPS_BARRIER(mask);
        lo += half & mask;
    }
    uint32_t last = (uint32_t)0 - (uint32_t)(hi[lo] <= u);
    DPS_BARRIER(last);
    return lo + (1u & last);
}

/* Tables whose total is at least 2^64 - 2^32 reject a 64-bit draw with probability <= 2^-32:
 * only those may use the lazy sampler (the release kernel requires it). */
#define DPS_LAZY_MIN_TOTAL (~(uint64_t)0 - 0xFFFFFFFFull)
static inline int dps_weight_table_is_lazy(const dps_weight_table *t) {
    return t->cum[t->m - 1] >= DPS_LAZY_MIN_TOTAL;
}

/* The slow path: full 64-bit comparison over the real entries. */
uint32_t dps_weight_table_count_le64(const dps_weight_table *t, uint64_t u);

/* One draw; r points at unread bytes of s->buf, at least 8 readable. Returns the index and
 * advances *r. May refill the state (then *r is re-pointed); returns UINT32_MAX on RNG error. */
uint32_t dps_weight_table_draw_slow(const dps_weight_table *t, dps_rng *s, const uint8_t **r,
                                    uint32_t hi_count, uint32_t u_hi);

static inline uint32_t dps_weight_table_draw(const dps_weight_table *t, dps_rng *s,
                                             const uint8_t **r) {
    const uint8_t *p = *r;
    uint32_t u_hi = (uint32_t)dps_load_be(p, 4);
    uint32_t cnt = dps_count_le32(t->hi, t->padded, u_hi);
    if ((cnt > 0 && t->hi[cnt - 1] == u_hi) || cnt >= t->m)
        return dps_weight_table_draw_slow(t, s, r, cnt, u_hi);  /* tie or rejection */
    *r = p + 4;
    return cnt;
}

/* Batch: out[i] = index drawn, for any table (small totals use exact uniform draws below S). */
int dps_weight_table_sample(const dps_weight_table *t, dps_rng *s, int64_t *out, size_t n);

#endif
