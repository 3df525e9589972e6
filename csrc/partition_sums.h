/* Per-partition statistics of a grouped release from the rows bounding marked
 * (dps_bound_rows_mark, bound_rows.h), on any number of threads with one copy of the outputs.
 *
 * The marked rows are split into ranges of consecutive partition codes by bound_rows.h's counting
 * sort (dps_shard_rows_count and dps_shard_rows_place over the partition codes, with the marks).
 * Then dps_partition_sums sums one range's rows into the outputs' entries of that range alone,
 * so calls on different ranges may run at once on shared outputs. Sums of integers do not
 * depend on the order they are added in: the outputs are those of dps_bound_rows_range, for any
 * number of ranges and threads. */
#ifndef DPS_PARTITION_SUMS_H
#define DPS_PARTITION_SUMS_H

#include <stddef.h>
#include <stdint.h>

#include "bound_rows.h"

/* For the rows rows[0 .. m) (each < n, of a partition in [first, last): else DPS_ERR_BAD_CODE and
 * *bad_row) and every partition p of [first, last):
 *   out_users[p] += rows marked DPS_MARK_USER, out_rows[p] += rows marked DPS_MARK_KEPT,
 *   out_users_before[p] += rows marked DPS_MARK_BEFORE (out_users_before may be NULL),
 *   out_sums[2 (c * n_partitions + p) + {0, 1}] += the exact 128-bit sum of values[c][row] over
 *   the kept rows (c < n_values), then of each square column's terms (bound_rows.h's
 *   dps_square_spec, as dps_bound_rows_range computes them: DPS_ERR_SQUARE_RANGE where a kept
 *   value is out of its reach; a spec that is not usable: DPS_ERR_BAD_ARG);
 * and clears every mark but DPS_MARK_KEPT of these rows, so that once every range is summed
 * marks[row] is 1 for the kept rows and 0 for the others. On error the outputs and marks are
 * partly updated: callers discard them. */
int dps_partition_sums(const uint32_t *partitions, uint8_t *marks, size_t n, const uint32_t *rows, size_t m,
                       uint32_t first, uint32_t last, uint32_t n_partitions, size_t n_values,
                       const int64_t *const *values, size_t n_squares, const dps_square_spec *squares,
                       int64_t *out_users, int64_t *out_rows, uint64_t *out_sums, int64_t *out_users_before,
                       size_t *bad_row);

#endif
