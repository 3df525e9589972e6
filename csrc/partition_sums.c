/* Per-partition statistics from marked rows; see partition_sums.h. */
#include "partition_sums.h"

#include "count.h" /* DPS_ERR_BAD_CODE, DPS_ERR_BAD_ARG */
#include "wide_sum.h"

int dps_partition_sums(const uint32_t *partitions, uint8_t *marks, size_t n, const uint32_t *rows, size_t m,
                       uint32_t first, uint32_t last, uint32_t n_partitions, size_t n_values,
                       const int64_t *const *values, size_t n_squares, const dps_square_spec *squares,
                       int64_t *out_users, int64_t *out_rows, uint64_t *out_sums, int64_t *out_users_before,
                       size_t *bad_row) {
    if (first > last || last > n_partitions) return DPS_ERR_BAD_ARG;
    for (size_t j = 0; j < n_squares; j++)
        if (!dps_square_spec_ok(&squares[j], n_values)) return DPS_ERR_BAD_ARG;
    const size_t stride = 2 * (size_t)n_partitions; /* one column's sums */
    for (size_t j = 0; j < m; j++) {
        uint32_t row = rows[j];
        /* checked as it is read, in the one pass (on error the outputs are discarded: see the header) */
        if (row >= n || partitions[row] < first || partitions[row] >= last) {
            *bad_row = row;
            return DPS_ERR_BAD_CODE;
        }
        uint32_t p = partitions[row];
        uint8_t mark = marks[row];
        if ((mark & DPS_MARK_BEFORE) && out_users_before != NULL) out_users_before[p]++;
        if (mark & DPS_MARK_USER) out_users[p]++;
        if (mark & DPS_MARK_KEPT) {
            out_rows[p]++;
            for (size_t c = 0; c < n_values; c++) dps_wide_add(&out_sums[c * stride + 2 * (size_t)p], values[c][row]);
            for (size_t k = 0; k < n_squares; k++) {
                uint64_t q;
                if (!dps_square_term(&squares[k], values[squares[k].source][row], &q)) {
                    *bad_row = row;
                    return DPS_ERR_SQUARE_RANGE;
                }
                dps_wide_add(&out_sums[(n_values + k) * stride + 2 * (size_t)p], (int64_t)q);
            }
        }
        marks[row] = mark & DPS_MARK_KEPT;
    }
    return DPS_OK;
}
