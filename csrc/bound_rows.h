/* Row-level contribution bounding for a grouped release (docs/privacy/aggregate.md).
 *
 * Each user keeps min(d, kappa) of the d distinct partitions of its rows, a uniform subset, and
 * in each kept partition min(r, linf) of its r rows there, a uniform subset; every randomness
 * is an exact uniform integer from the package CSPRNG. Every statistic of the release is then
 * computed from the same kept rows: per partition, the kept users, the kept rows and the sum of
 * each value column over the kept rows (values are integers: callers clamp and snap floats to a
 * power-of-two grid first; sums are exact, in 128 bits, see wide_sum.h, so they never wrap).
 *
 * The draws are made user by user in code order; within a user, the partitions are those of its
 * rows sorted by code, then the partition subset is drawn, then each kept partition's row subset
 * (rows in row order) in the order the partition subset lists them. So a deterministic test
 * stream gives the same result whatever the memory layout. */
#ifndef DPS_BOUND_ROWS_H
#define DPS_BOUND_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "csprng.h"

typedef struct dps_bound_stats {
    uint64_t rows;         /* rows of the shard's users */
    uint64_t rows_kept;    /* of which kept */
    uint64_t pairs;        /* distinct (user, partition) pairs */
    uint64_t pairs_kept;   /* of which kept */
    uint64_t users;        /* users with at least one row */
} dps_bound_stats;

/* Bound the rows of one shard of the users ((users[i] & shard_mask) == shard, shard_mask = 2^b - 1,
 * 0 for all) and add, for every partition p < n_partitions:
 *   out_users[p]  += kept users, out_rows[p] += kept rows,
 *   out_sums[2 (c * n_partitions + p) + {0, 1}] += sum of values[c][row] over kept rows (c < n_values),
 *     a signed 128-bit integer as its low and high words (wide_sum.h),
 *   out_users_before[p] += users before bounding (may be NULL: for the data holder's report);
 * and sets out_kept[row] = 1 for every kept row (may be NULL; callers zero it first).
 * Codes must be below n_users and n_partitions (else DPS_ERR_BAD_CODE and *bad_row); kappa,
 * linf >= 1; n < 2^32 rows, so no 128-bit sum can overflow.
 * On error the outputs are partly updated: callers discard them. */
int dps_bound_rows(dps_rng *s, size_t n, const uint32_t *users, const uint32_t *partitions, uint32_t n_users,
                   uint32_t n_partitions, uint32_t shard_mask, uint32_t shard, uint64_t kappa, uint64_t linf,
                   size_t n_values, const int64_t *const *values, int64_t *out_users, int64_t *out_rows,
                   uint64_t *out_sums, int64_t *out_users_before, uint8_t *out_kept, dps_bound_stats *stats,
                   size_t *bad_row);

/* A column summed as squared offsets of another (a variance's S2, docs/privacy/variance.md):
 * each kept row adds q = ((values[source][row] - mid)^2 + 2^(shift-1)) >> shift (no rounding term
 * for shift 0), computed here from the value column instead of from a column of its own, so the
 * rows need no second array. Requires |mid| <= 2^62, shift <= 62 and |value - mid| <= 2^31 for
 * every kept row (else DPS_ERR_SQUARE_RANGE): then q < 2^63. */
typedef struct dps_square_spec {
    size_t source; /* a value column, < n_values */
    int64_t mid;
    unsigned shift;
} dps_square_spec;
#define DPS_ERR_SQUARE_RANGE (-23) /* a kept value more than 2^31 from its square column's mid */
#define DPS_SQUARE_REACH ((int64_t)1 << 31)
#define DPS_SQUARE_MAX_MID ((int64_t)1 << 62)

/* Whether spec is usable with n_values value columns. */
static inline int dps_square_spec_ok(const dps_square_spec *spec, size_t n_values) {
    return spec->source < n_values && spec->shift <= 62 && spec->mid <= DPS_SQUARE_MAX_MID &&
           spec->mid >= -DPS_SQUARE_MAX_MID;
}

/* One kept value's square term into *q (< 2^63); 0 where x is more than DPS_SQUARE_REACH from the
 * mid (the caller returns DPS_ERR_SQUARE_RANGE). */
static inline int dps_square_term(const dps_square_spec *spec, int64_t x, uint64_t *q) {
    /* |mid| <= 2^62: neither bound overflows, and then neither does x - mid */
    if (x < spec->mid - DPS_SQUARE_REACH || x > spec->mid + DPS_SQUARE_REACH) return 0;
    int64_t d = x - spec->mid;
    int64_t half = spec->shift ? (int64_t)1 << (spec->shift - 1) : 0;
    *q = (uint64_t)((d * d + half) >> spec->shift); /* d^2 <= 2^62, half <= 2^61 */
    return 1;
}

/* The same for the rows rows[0 .. m) of the users [first_user, last_user) only (a shard of
 * consecutive user codes; every one of the rows must be < n and its user in the range, else
 * DPS_ERR_BAD_CODE and *bad_row): the users are visited in code order, so the draws made for a
 * shard depend only on its rows and s. Calls on disjoint shards may run at once, each with its own
 * outputs (out_kept may be shared: their rows are disjoint). out_sums holds n_values + n_squares
 * columns: the value columns', then the square columns' (dps_square_spec, squares[0 .. n_squares)). */
int dps_bound_rows_range(dps_rng *s, size_t n, const uint32_t *users, const uint32_t *partitions,
                         const uint32_t *rows, size_t m, uint32_t first_user, uint32_t last_user,
                         uint32_t n_partitions, uint64_t kappa, uint64_t linf, size_t n_values,
                         const int64_t *const *values, size_t n_squares, const dps_square_spec *squares,
                         int64_t *out_users, int64_t *out_rows, uint64_t *out_sums,
                         int64_t *out_users_before, uint8_t *out_kept, dps_bound_stats *stats, size_t *bad_row);

/* Row marks of dps_bound_rows_mark (bits of one byte per row). */
#define DPS_MARK_KEPT 1u   /* the row is kept */
#define DPS_MARK_USER 2u   /* the row is the one that counts its user among its partition's kept users */
#define DPS_MARK_BEFORE 4u /* the row is the one that counts its user among its partition's users before bounding */

/* dps_bound_rows_range's bounding of the rows rows[0 .. m) (strictly increasing, each < n), with
 * exactly the same draws, but read from the shard's own copies of their codes: users[j] and
 * partitions[j] are those of input row rows[j] (dps_shard_rows_place writes them beside rows), so
 * the grouping and the bounding read arrays of the shard's size, which stay in cache, instead of
 * the whole input's in user order. A user outside [first_user, last_user), a partition code >=
 * n_partitions or a row out of order: DPS_ERR_BAD_CODE and *bad_row (the local index j). No
 * per-partition outputs: each row gets its marks or'ed into marks[rows[j]] (callers zero it
 * first; calls on disjoint shards may share it). Every kept row gets DPS_MARK_KEPT; the first
 * kept row (in the row subset's order) of each kept (user, partition) pair DPS_MARK_USER; the
 * lowest row of each (user, partition) pair DPS_MARK_BEFORE. So the outputs of
 * dps_bound_rows_range are sums over marked rows by partition, which partition_sums.h computes
 * on any number of threads with no per-thread copy of the outputs. */
int dps_bound_rows_mark(dps_rng *s, size_t n, const uint32_t *users, const uint32_t *partitions,
                        const uint32_t *rows, size_t m, uint32_t first_user, uint32_t last_user,
                        uint32_t n_partitions, uint64_t kappa, uint64_t linf, uint8_t *marks,
                        dps_bound_stats *stats, size_t *bad_row);

/* Split rows into n_shards shards of consecutive codes (code c in shard c * n_shards / n_codes:
 * user codes, for bounding by shard of the users; partition codes, for adding up marked rows by
 * range of partitions, partition_sums.h), a counting sort in two steps that run on any number of
 * threads, each on its own range of rows [lo, hi): dps_shard_rows_count adds the rows of each
 * shard to counts[0 .. n_shards) (a code >= n_codes: DPS_ERR_BAD_CODE and *bad_row);
 * dps_shard_rows_place writes each row's index at cursors[its shard]++ (the caller's prefix sums:
 * the shard's start plus the rows of the earlier ranges there, below limits[shard]), so each
 * shard's rows stay in row order. With marks (else NULL), only the rows whose mark is nonzero
 * are counted and placed (and only their codes read). */
int dps_shard_rows_count(const uint32_t *codes, const uint8_t *marks, size_t lo, size_t hi, uint32_t n_codes,
                         size_t n_shards, size_t *counts, size_t *bad_row);
/* With codes_out (else NULL), dps_shard_rows_place also writes, at each row's place, its code
 * into codes_out and other[row] into other_out: the shards' own copies for dps_bound_rows_mark. */
int dps_shard_rows_place(const uint32_t *codes, const uint8_t *marks, size_t lo, size_t hi, uint32_t n_codes,
                         size_t n_shards, size_t *cursors, const size_t *limits, uint32_t *rows,
                         const uint32_t *other, uint32_t *codes_out, uint32_t *other_out);

#endif
