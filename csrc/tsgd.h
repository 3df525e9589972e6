/* Exact sampling from a certified integer weight table (docs/privacy/tsgd-release.md).
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
#include <string.h>

#include "csprng.h"

typedef struct dps_weight_table {
    const uint64_t *cum;  /* m cumulative weights, strictly increasing */
    uint32_t m;
    uint32_t padded;      /* power of two >= max(m, 8) */
    uint32_t window;      /* 8 or 16 when the guide applies, else 0 */
    uint32_t guide[256];  /* guide[b] = #{j : hi[j] < b * 2^24} (unbiased top halves) */
    const uint8_t *direct; /* optional, 65536 entries: the index for every 16-bit prefix of U
                              whose cell holds no boundary, DPS_DIRECT_FLAG otherwise */
    int32_t *hi;          /* `padded` entries: (cum[j] >> 32) - 2^31, then INT32_MAX; the bias
                             makes unsigned order a signed order, which SIMD compares natively */
} dps_weight_table;

/* Check the table (strictly increasing, m >= 1) and fill hi and the guide (caller provides
 * dps_weight_table_storage(m) int32 slots for hi). */
int dps_weight_table_init(dps_weight_table *t, const uint64_t *cum, uint32_t m, int32_t *hi);

/* The order-preserving map from uint32 to int32 used for hi. */
static inline int32_t dps_bias32(uint32_t v) { return (int32_t)(v ^ 0x80000000u); }
uint32_t dps_weight_table_padded(uint32_t m);
uint32_t dps_weight_table_storage(uint32_t m);

/* Fill a 65536-entry direct table (tables of at most 254 entries) and attach it to t. The
 * lookup is one load from a 64 KiB table whose address depends on the random bits; the cells
 * that hold a table boundary or lie at or above S (probability <= m / 65536 per draw, set by
 * the random bytes alone) are flagged and finished exactly. */
#define DPS_DIRECT_FLAG 0xFFu
#define DPS_DIRECT_CELLS 65536u
int dps_weight_table_attach_direct(dps_weight_table *t, uint8_t *direct);

/* Value barrier: stops the compiler from turning mask arithmetic back into branches. */
#if defined(__GNUC__) || defined(__clang__)
#define DPS_BARRIER(x) __asm__("" : "+r"(x))
#else
#define DPS_BARRIER(x) ((void)0)
#endif

/* #{j < padded : hi[j] <= u}, with a fixed number of steps and no data-dependent branch. */
static inline uint32_t dps_count_le32_bsearch(const int32_t *hi, uint32_t padded, int32_t u) {
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

/* The same count by a full scan (padded is a multiple of 8): touches every entry, so its memory
 * accesses do not depend on u at all; vectorised, it is also the faster choice for small tables. */
#define DPS_SCAN_MAX 64
#if defined(__GNUC__) || defined(__clang__)
/* 16-byte vectors: the baseline width on x86-64 (SSE2) and aarch64 (NEON), so the signed compare
 * is one native instruction without any target flag. */
typedef int32_t dps_v4i32 __attribute__((vector_size(16)));
static inline uint32_t dps_count_le32_scan(const int32_t *hi, uint32_t padded, int32_t u) {
    dps_v4i32 g0 = {0}, g1 = {0}, uv = (dps_v4i32){0} + u;
    for (uint32_t j = 0; j < padded; j += 8) {
        dps_v4i32 h0, h1;
        memcpy(&h0, hi + j, sizeof h0);
        memcpy(&h1, hi + j + 4, sizeof h1);
        g0 -= (h0 > uv); /* true lanes are -1 */
        g1 -= (h1 > uv);
    }
    g0 += g1;
    return padded - (uint32_t)(g0[0] + g0[1] + g0[2] + g0[3]);
}
#else
static inline uint32_t dps_count_le32_scan(const int32_t *hi, uint32_t padded, int32_t u) {
    uint32_t total = 0;
    for (uint32_t j = 0; j < padded; j++) total += (uint32_t)(hi[j] <= u);
    return total;
}
#endif

/* Guided count: entries before guide[b] (b = top byte of u) are surely <= u, entries past the
 * cell's last boundary surely > u, and the cell holds at most `window` boundaries, so a fixed
 * window of 8 or 16 entries starting at guide[b] settles the count. The window's position
 * depends on u's top byte (which of a few cache lines of a small table is read); its work does
 * not. Used when every byte-cell holds at most 16 boundaries (small tables, larger epsilon). */
#if defined(__GNUC__) || defined(__clang__)
static inline uint32_t dps_count_le32_guided(const int32_t *hi, const uint32_t *guide,
                                             uint32_t window, uint32_t u_hi, int32_t u) {
    uint32_t lo = guide[u_hi >> 24];
    dps_v4i32 g, uv = (dps_v4i32){0} + u, h0, h1;
    memcpy(&h0, hi + lo, sizeof h0);
    memcpy(&h1, hi + lo + 4, sizeof h1);
    g = (h0 > uv) + (h1 > uv);
    if (window > 8) {
        memcpy(&h0, hi + lo + 8, sizeof h0);
        memcpy(&h1, hi + lo + 12, sizeof h1);
        g += (h0 > uv) + (h1 > uv);
    }
    return lo + window + (uint32_t)(g[0] + g[1] + g[2] + g[3]);
}
#else
static inline uint32_t dps_count_le32_guided(const int32_t *hi, const uint32_t *guide,
                                             uint32_t window, uint32_t u_hi, int32_t u) {
    uint32_t lo = guide[u_hi >> 24], total = 0;
    for (uint32_t j = 0; j < window; j++) total += (uint32_t)(hi[lo + j] <= u);
    return lo + total;
}
#endif

static inline uint32_t dps_table_count(const dps_weight_table *t, uint32_t u_hi) {
    int32_t u = dps_bias32(u_hi);
    if (t->window) return dps_count_le32_guided(t->hi, t->guide, t->window, u_hi, u);
    return t->padded <= DPS_SCAN_MAX ? dps_count_le32_scan(t->hi, t->padded, u)
                                     : dps_count_le32_bsearch(t->hi, t->padded, u);
}

/* Tables whose total is at least 2^64 - 2^32 reject a 64-bit draw with probability <= 2^-32:
 * only those may use the lazy sampler (the release kernel requires it). */
#define DPS_LAZY_MIN_TOTAL (~(uint64_t)0 - 0xFFFFFFFFull)
static inline int dps_weight_table_is_lazy(const dps_weight_table *t) {
    return t->cum[t->m - 1] >= DPS_LAZY_MIN_TOTAL;
}

/* The slow path: full 64-bit comparison over the real entries. */
uint32_t dps_weight_table_count_le64(const dps_weight_table *t, uint64_t u);

/* Fast half of a draw without the direct table: from the top 32 bits u_hi of U, the index, or
 * a flag saying the draw must be finished (a tie with a table entry, or U >= S). */
static inline uint32_t dps_weight_table_fast_exact(const dps_weight_table *t, uint32_t u_hi,
                                                   uint32_t *needs_finish) {
    uint32_t cnt = dps_table_count(t, u_hi);
    int32_t prev = t->hi[cnt - (cnt != 0)];
    *needs_finish = ((cnt != 0) & (prev == dps_bias32(u_hi))) | (cnt >= t->m);
    return cnt;
}

/* Fast half of a draw: the direct table when attached, else the exact search. */
static inline uint32_t dps_weight_table_fast(const dps_weight_table *t, uint32_t u_hi,
                                             uint32_t *needs_finish) {
    if (t->direct != NULL) {
        uint32_t idx = t->direct[u_hi >> 16];
        *needs_finish = idx == DPS_DIRECT_FLAG;
        return idx;
    }
    return dps_weight_table_fast_exact(t, u_hi, needs_finish);
}

/* Finish a flagged draw with fresh bytes from s: read the low half on a tie, redraw on U >= S.
 * Exact: U's low half (or a whole new U) is fresh and uniform. Returns DPS_OK or an RNG error. */
int dps_weight_table_finish(const dps_weight_table *t, dps_rng *s, uint32_t u_hi, uint32_t *index);

/* Batch: out[i] = index drawn, for any table (small totals use exact uniform draws below S). */
int dps_weight_table_sample(const dps_weight_table *t, dps_rng *s, int64_t *out, size_t n);

#endif
