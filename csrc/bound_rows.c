/* Row-level contribution bounding; see bound_rows.h. */
#include "bound_rows.h"

#include <stdlib.h>
#include <string.h>

#include "count.h" /* DPS_ERR_BAD_CODE, DPS_ERR_BAD_ARG */
#include "group_rows.h"
#include "subset.h"
#include "wide_sum.h"

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Sort (partition << 32 | row) keys: insertion sort for the few rows most users have. */
static void sort_keys(uint64_t *k, size_t m) {
    if (m > 32) {
        qsort(k, m, sizeof *k, cmp_u64);
        return;
    }
    for (size_t i = 1; i < m; i++) {
        uint64_t x = k[i];
        size_t j = i;
        while (j > 0 && k[j - 1] > x) {
            k[j] = k[j - 1];
            j--;
        }
        k[j] = x;
    }
}

typedef struct user_buffers {
    uint64_t *keys;     /* the user's rows as (partition, row) */
    uint32_t *starts;   /* start of each distinct partition's run in keys, then the end */
    uint32_t *chosen;   /* run indices, reordered by the partition subset */
    uint32_t *rows;     /* one run's row indices, reordered by the row subset */
} user_buffers;

/* The outputs of a bounding call: per-partition sums (users != NULL), or per-row marks (marks != NULL,
 * dps_bound_rows_mark: the sums are then left to partition_sums.h). */
typedef struct bound_outputs {
    uint32_t n_partitions;
    size_t n_values;
    const int64_t *const *values;
    size_t n_squares;
    const dps_square_spec *squares;
    int64_t *users, *rows, *users_before; /* users_before may be NULL */
    uint64_t *sums;
    uint8_t *kept;  /* may be NULL */
    uint8_t *marks; /* mark mode: every other output is unused */
    const uint32_t *row_of; /* mark mode: the input row of each local row index (the shard's copies) */
} bound_outputs;

/* Add one kept partition's rows rows[0 .. take) of partition p to the sums. */
static int add_kept(const bound_outputs *o, uint32_t p, const uint32_t *rows, size_t take) {
    o->users[p] += 1;
    o->rows[p] += (int64_t)take;
    if (o->kept != NULL)
        for (size_t i = 0; i < take; i++) o->kept[rows[i]] = 1;
    for (size_t c = 0; c < o->n_values; c++) {
        uint64_t *acc = &o->sums[2 * (c * (size_t)o->n_partitions + p)];
        for (size_t i = 0; i < take; i++) dps_wide_add(acc, o->values[c][rows[i]]);
    }
    for (size_t j = 0; j < o->n_squares; j++) {
        uint64_t *acc = &o->sums[2 * ((o->n_values + j) * (size_t)o->n_partitions + p)];
        for (size_t i = 0; i < take; i++) {
            uint64_t q;
            if (!dps_square_term(&o->squares[j], o->values[o->squares[j].source][rows[i]], &q))
                return DPS_ERR_SQUARE_RANGE;
            dps_wide_add(acc, (int64_t)q);
        }
    }
    return DPS_OK;
}

/* One user's rows order[0 .. m): bound, and add to the sums or mark the rows. */
static int bound_user(dps_rng *s, const uint32_t *order, size_t m, const uint32_t *partitions, uint64_t kappa,
                      uint64_t linf, const bound_outputs *o, dps_bound_stats *stats, user_buffers *buf) {
    for (size_t i = 0; i < m; i++) buf->keys[i] = ((uint64_t)partitions[order[i]] << 32) | order[i];
    sort_keys(buf->keys, m);
    size_t d = 0;
    for (size_t i = 0; i < m; i++)
        if (i == 0 || (buf->keys[i] >> 32) != (buf->keys[i - 1] >> 32)) buf->starts[d++] = (uint32_t)i;
    buf->starts[d] = (uint32_t)m;
    for (size_t g = 0; g < d; g++) buf->chosen[g] = (uint32_t)g;
    int rc = dps_uniform_subset(s, buf->chosen, d, kappa);
    if (rc != DPS_OK) return rc;
    size_t kept = (uint64_t)d < kappa ? d : (size_t)kappa;
    stats->rows += m;
    stats->pairs += d;
    stats->pairs_kept += kept;
    stats->users += 1;
    if (o->marks != NULL) {
        for (size_t g = 0; g < d; g++) o->marks[o->row_of[(uint32_t)buf->keys[buf->starts[g]]]] |= DPS_MARK_BEFORE;
    } else if (o->users_before != NULL) {
        for (size_t g = 0; g < d; g++) o->users_before[buf->keys[buf->starts[g]] >> 32]++;
    }
    for (size_t t = 0; t < kept; t++) {
        size_t g = buf->chosen[t];
        size_t lo = buf->starts[g], r = buf->starts[g + 1] - lo;
        uint32_t p = (uint32_t)(buf->keys[lo] >> 32);
        for (size_t i = 0; i < r; i++) buf->rows[i] = (uint32_t)buf->keys[lo + i];
        rc = dps_uniform_subset(s, buf->rows, r, linf);
        if (rc != DPS_OK) return rc;
        size_t take = (uint64_t)r < linf ? r : (size_t)linf;
        stats->rows_kept += take;
        if (o->marks != NULL) {
            for (size_t i = 0; i < take; i++) o->marks[o->row_of[buf->rows[i]]] |= DPS_MARK_KEPT;
            o->marks[o->row_of[buf->rows[0]]] |= DPS_MARK_USER; /* take >= 1: linf >= 1 and r >= 1 */
        } else {
            rc = add_kept(o, p, buf->rows, take);
            if (rc != DPS_OK) return rc;
        }
    }
    return DPS_OK;
}

/* Bound every grouped user (order/end from dps_group_rows*) in local order. */
static int bound_grouped(dps_rng *s, const uint32_t *order, const size_t *end, size_t n_local,
                         const uint32_t *partitions, uint64_t kappa, uint64_t linf, const bound_outputs *o,
                         dps_bound_stats *stats) {
    size_t largest = 0;
    for (size_t v = 0, lo = 0; v < n_local; lo = end[v++])
        if (end[v] - lo > largest) largest = end[v] - lo;
    user_buffers buf;
    size_t cap = largest ? largest : 1;
    int rc = DPS_OK;
    buf.keys = (uint64_t *)malloc(cap * sizeof(uint64_t));
    buf.starts = (uint32_t *)malloc((cap + 1) * sizeof(uint32_t));
    buf.chosen = (uint32_t *)malloc(cap * sizeof(uint32_t));
    buf.rows = (uint32_t *)malloc(cap * sizeof(uint32_t));
    if (buf.keys == NULL || buf.starts == NULL || buf.chosen == NULL || buf.rows == NULL) {
        rc = DPS_ERR_NOMEM;
    } else {
        for (size_t v = 0, lo = 0; v < n_local && rc == DPS_OK; lo = end[v++]) {
            if (end[v] == lo) continue;
            rc = bound_user(s, order + lo, end[v] - lo, partitions, kappa, linf, o, stats, &buf);
        }
    }
    free(buf.keys);
    free(buf.starts);
    free(buf.chosen);
    free(buf.rows);
    return rc;
}

int dps_bound_rows(dps_rng *s, size_t n, const uint32_t *users, const uint32_t *partitions, uint32_t n_users,
                   uint32_t n_partitions, uint32_t shard_mask, uint32_t shard, uint64_t kappa, uint64_t linf,
                   size_t n_values, const int64_t *const *values, int64_t *out_users, int64_t *out_rows,
                   uint64_t *out_sums, int64_t *out_users_before, uint8_t *out_kept, dps_bound_stats *stats,
                   size_t *bad_row) {
    memset(stats, 0, sizeof *stats);
    if (kappa == 0 || linf == 0 || (shard & ~shard_mask) || (shard_mask & (shard_mask + 1u))) return DPS_ERR_BAD_ARG;
    if (n > (size_t)UINT32_MAX) return DPS_ERR_BAD_ARG; /* row indices are 32-bit */
    for (size_t i = 0; i < n; i++) {
        if (users[i] >= n_users || partitions[i] >= n_partitions) {
            *bad_row = i;
            return DPS_ERR_BAD_CODE;
        }
    }
    uint32_t *order;
    size_t *end, n_local, n_rows;
    int rc = dps_group_rows(users, n, n_users, shard_mask, shard, &order, &end, &n_local, &n_rows);
    if (rc != DPS_OK) return rc;
    bound_outputs o = {n_partitions, n_values, values, 0, NULL, out_users, out_rows, out_users_before,
                       out_sums, out_kept, NULL, NULL};
    rc = bound_grouped(s, order, end, n_local, partitions, kappa, linf, &o, stats);
    free(order);
    free(end);
    return rc;
}

int dps_bound_rows_range(dps_rng *s, size_t n, const uint32_t *users, const uint32_t *partitions,
                         const uint32_t *rows, size_t m, uint32_t first_user, uint32_t last_user,
                         uint32_t n_partitions, uint64_t kappa, uint64_t linf, size_t n_values,
                         const int64_t *const *values, size_t n_squares, const dps_square_spec *squares,
                         int64_t *out_users, int64_t *out_rows, uint64_t *out_sums,
                         int64_t *out_users_before, uint8_t *out_kept, dps_bound_stats *stats, size_t *bad_row) {
    memset(stats, 0, sizeof *stats);
    if (kappa == 0 || linf == 0 || first_user > last_user) return DPS_ERR_BAD_ARG;
    for (size_t j = 0; j < n_squares; j++)
        if (!dps_square_spec_ok(&squares[j], n_values)) return DPS_ERR_BAD_ARG;
    if (n > (size_t)UINT32_MAX) return DPS_ERR_BAD_ARG; /* row indices are 32-bit */
    for (size_t j = 0; j < m; j++) {
        size_t i = rows[j];
        if (i >= n || users[i] < first_user || users[i] >= last_user || partitions[i] >= n_partitions) {
            *bad_row = i;
            return DPS_ERR_BAD_CODE;
        }
    }
    uint32_t *order;
    size_t *end, n_local;
    int rc = dps_group_rows_range(users, rows, m, first_user, last_user, &order, &end, &n_local);
    if (rc != DPS_OK) return rc;
    bound_outputs o = {n_partitions, n_values, values, n_squares, squares, out_users, out_rows, out_users_before,
                       out_sums, out_kept, NULL, NULL};
    rc = bound_grouped(s, order, end, n_local, partitions, kappa, linf, &o, stats);
    free(order);
    free(end);
    return rc;
}

int dps_bound_rows_mark(dps_rng *s, size_t n, const uint32_t *users, const uint32_t *partitions,
                        const uint32_t *rows, size_t m, uint32_t first_user, uint32_t last_user,
                        uint32_t n_partitions, uint64_t kappa, uint64_t linf, uint8_t *marks,
                        dps_bound_stats *stats, size_t *bad_row) {
    memset(stats, 0, sizeof *stats);
    if (kappa == 0 || linf == 0 || first_user > last_user || (marks == NULL && m > 0)) return DPS_ERR_BAD_ARG;
    if (n > (size_t)UINT32_MAX) return DPS_ERR_BAD_ARG; /* row indices are 32-bit */
    for (size_t j = 0; j < m; j++) {
        /* increasing rows: local order is row order, so the draws pick what they pick on the input */
        if (rows[j] >= n || (j > 0 && rows[j] <= rows[j - 1]) || users[j] < first_user || users[j] >= last_user ||
            partitions[j] >= n_partitions) {
            *bad_row = j;
            return DPS_ERR_BAD_CODE;
        }
    }
    uint32_t *order;
    size_t *end, n_local;
    int rc = dps_group_rows_local(users, m, first_user, last_user, &order, &end, &n_local);
    if (rc != DPS_OK) return rc;
    bound_outputs o = {n_partitions, 0, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL, marks, rows};
    rc = bound_grouped(s, order, end, n_local, partitions, kappa, linf, &o, stats);
    free(order);
    free(end);
    return rc;
}

static inline size_t shard_of(uint32_t c, uint32_t n_codes, size_t n_shards) {
    return (size_t)(((uint64_t)c * n_shards) / n_codes);
}

int dps_shard_rows_count(const uint32_t *codes, const uint8_t *marks, size_t lo, size_t hi, uint32_t n_codes,
                         size_t n_shards, size_t *counts, size_t *bad_row) {
    if (n_shards == 0 || lo > hi) return DPS_ERR_BAD_ARG;
    for (size_t i = lo; i < hi; i++) {
        if (marks != NULL && marks[i] == 0) continue;
        if (codes[i] >= n_codes) {
            *bad_row = i;
            return DPS_ERR_BAD_CODE;
        }
        counts[shard_of(codes[i], n_codes, n_shards)]++;
    }
    return DPS_OK;
}

int dps_shard_rows_place(const uint32_t *codes, const uint8_t *marks, size_t lo, size_t hi, uint32_t n_codes,
                         size_t n_shards, size_t *cursors, const size_t *limits, uint32_t *rows,
                         const uint32_t *other, uint32_t *codes_out, uint32_t *other_out) {
    if (n_shards == 0 || lo > hi || hi > (size_t)UINT32_MAX + 1) return DPS_ERR_BAD_ARG;
    for (size_t i = lo; i < hi; i++) {
        if (marks != NULL && marks[i] == 0) continue;
        if (codes[i] >= n_codes) return DPS_ERR_BAD_CODE;
        size_t k = shard_of(codes[i], n_codes, n_shards);
        if (cursors[k] >= limits[k]) return DPS_ERR_BAD_ARG; /* not the rows that were counted */
        size_t at = cursors[k]++;
        rows[at] = (uint32_t)i;
        if (codes_out != NULL) { /* the shards' own copies */
            codes_out[at] = codes[i];
            other_out[at] = other[i];
        }
    }
    return DPS_OK;
}
