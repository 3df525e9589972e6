/* Rows grouped by user; see group_rows.h. */
#include "group_rows.h"

#include <stdlib.h>
#include <string.h>

#include "csprng.h" /* status codes */

static unsigned shard_bits(uint32_t shard_mask) {
    unsigned b = 0;
    while (b < 32 && ((shard_mask >> b) & 1u)) b++;
    return b;
}

/* The rows to group: rows[0 .. n) when `rows` is given (each of local user users[i] - first),
 * else every row of 0 .. n whose user is in the shard (local user (users[i] >> b) - first). */
typedef struct selection {
    const uint32_t *users;
    const uint32_t *rows;
    size_t n;
    uint32_t shard_mask, shard, first;
    unsigned b;
} selection;

static inline int take(const selection *q, size_t j, size_t *i, uint32_t *v) {
    if (q->rows != NULL) {
        *i = q->rows[j];
        *v = q->users[*i] - q->first;
        return 1;
    }
    *i = j;
    if ((q->users[j] & q->shard_mask) != q->shard) return 0;
    *v = (q->users[j] >> q->b) - q->first;
    return 1;
}

static int group_core(const selection *q, size_t local, uint32_t **order, size_t **end, size_t *n_local,
                      size_t *n_rows) {
    *order = NULL;
    *end = NULL;
    *n_local = 0;
    *n_rows = 0;
    size_t i;
    uint32_t v;
    unsigned bits = 0;
    while (bits < 32 && ((uint64_t)1 << bits) < local) bits++;
    unsigned shift = bits > 8 ? bits - 8 : 0; /* at most 256 buckets: the scatter stays in cache */
    if (shift > 16) shift = 16;                /* a user's rank in its bucket fits 16 bits */
    size_t n_buckets = local ? ((local - 1) >> shift) + 1 : 0;
    size_t *bucket_end = (size_t *)calloc(n_buckets + 1, sizeof(size_t));
    size_t *ends = (size_t *)calloc(local + 1, sizeof(size_t));
    if (bucket_end == NULL || ends == NULL) goto nomem;
    size_t rows = 0;
    for (size_t j = 0; j < q->n; j++) {
        if (!take(q, j, &i, &v)) continue;
        bucket_end[(v >> shift) + 1]++;
        rows++;
    }
    for (size_t k = 0; k < n_buckets; k++) bucket_end[k + 1] += bucket_end[k];
    uint32_t *out = (uint32_t *)malloc((rows ? rows : 1) * sizeof(uint32_t));
    uint32_t *tmp = (uint32_t *)malloc((rows ? rows : 1) * sizeof(uint32_t));
    uint16_t *low = (uint16_t *)malloc((rows ? rows : 1) * sizeof(uint16_t));
    if (out == NULL || tmp == NULL || low == NULL) {
        free(out);
        free(tmp);
        free(low);
        goto nomem;
    }
    /* Pass 1: rows into buckets (stable), each with its user's rank in the bucket. */
    uint32_t low_mask = ((uint32_t)1 << shift) - 1;
    for (size_t j = 0; j < q->n; j++) {
        if (!take(q, j, &i, &v)) continue;
        size_t d = bucket_end[v >> shift]++;
        tmp[d] = (uint32_t)i;
        low[d] = (uint16_t)(v & low_mask);
    }
    /* Pass 2: each bucket by user (stable): ends[v] first counts, then starts, then ends. */
    for (size_t k = 0, lo = 0; k < n_buckets; lo = bucket_end[k++]) {
        size_t hi = bucket_end[k];
        size_t first = k << shift;
        size_t last = first + ((size_t)1 << shift) < local ? first + ((size_t)1 << shift) : local;
        for (size_t d = lo; d < hi; d++) ends[first + low[d]]++;
        size_t running = lo;
        for (size_t u = first; u < last; u++) {
            size_t count = ends[u];
            ends[u] = running;
            running += count;
        }
        for (size_t d = lo; d < hi; d++) out[ends[first + low[d]]++] = tmp[d];
    }
    ends[local] = rows;
    free(tmp);
    free(low);
    free(bucket_end);
    *order = out;
    *end = ends;
    *n_local = local;
    *n_rows = rows;
    return DPS_OK;
nomem:
    free(bucket_end);
    free(ends);
    return DPS_ERR_NOMEM;
}

int dps_group_rows_local(const uint32_t *users, size_t m, uint32_t first_user, uint32_t last_user,
                         uint32_t **order, size_t **end, size_t *n_local) {
    size_t n_rows;
    selection q = {users, NULL, m, 0, 0, first_user, 0};
    return group_core(&q, last_user > first_user ? (size_t)(last_user - first_user) : 0, order, end, n_local,
                      &n_rows);
}

int dps_group_rows(const uint32_t *users, size_t n, uint32_t n_users, uint32_t shard_mask, uint32_t shard,
                   uint32_t **order, size_t **end, size_t *n_local, size_t *n_rows) {
    unsigned b = shard_bits(shard_mask);
    size_t local = (size_t)(((uint64_t)n_users + shard_mask - shard) >> b); /* codes u < n_users of the shard */
    if (n_users == 0 || shard >= n_users) local = 0;
    selection q = {users, NULL, n, shard_mask, shard, 0, b};
    return group_core(&q, local, order, end, n_local, n_rows);
}

int dps_group_rows_range(const uint32_t *users, const uint32_t *rows, size_t m, uint32_t first_user,
                         uint32_t last_user, uint32_t **order, size_t **end, size_t *n_local) {
    size_t n_rows;
    selection q = {users, rows, m, 0, 0, first_user, 0};
    return group_core(&q, last_user > first_user ? (size_t)(last_user - first_user) : 0, order, end, n_local,
                      &n_rows);
}
