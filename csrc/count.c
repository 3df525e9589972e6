/* Contribution bounding and distinct-user counting; see count.h. */
#include "count.h"

#include "atomics.h"
#include "subset.h"

#include <stdlib.h>
#include <string.h>

int dps_counter_init(dps_counter *c, size_t expected_pairs) {
    c->finished = 0;
    return dps_pairset_init(&c->pairs, expected_pairs);
}

int dps_counter_feed(dps_counter *c, const uint32_t *users, const uint32_t *partitions, size_t n,
                     uint32_t shard_mask, uint32_t shard, size_t *bad_index) {
    if (c->finished) return DPS_ERR_FINISHED;
    if ((shard & ~shard_mask) || (shard_mask & (shard_mask + 1u))) return DPS_ERR_BAD_ARG;
    return dps_pairset_insert(&c->pairs, users, partitions, n, shard_mask, shard, bad_index);
}

int dps_counter_feed_keys(dps_counter *c, const uint64_t *keys, size_t n, size_t *bad_index) {
    if (c->finished) return DPS_ERR_FINISHED;
    return dps_pairset_insert_keys(&c->pairs, keys, n, bad_index);
}

size_t dps_counter_pairs(const dps_counter *c) { return c->pairs.size; }

size_t dps_counter_bytes(const dps_counter *c) { return dps_pairset_bytes(&c->pairs); }

void dps_counter_free(dps_counter *c) {
    dps_pairset_free(&c->pairs);
    c->finished = 1;
}

static inline void add_one(int64_t *counts, uint32_t p, uint64_t cap) {
    if (cap == 0 || (uint64_t)counts[p] < cap) counts[p]++;
}

/* Keep min(d, kappa) of the user's d partitions, a uniform subset, and count them (atomically
 * when other threads add to the same counts). */
static int bound_user(dps_rng *s, uint32_t *parts, size_t d, uint64_t kappa, uint64_t cap,
                      int64_t *counts, int shared) {
    int rc = dps_uniform_subset(s, parts, d, kappa);
    if (rc != DPS_OK) return rc;
    size_t kept = (uint64_t)d < kappa ? d : (size_t)kappa;
    if (shared) {
        for (size_t i = 0; i < kept; i++) dps_atomic_add_one_capped(counts + parts[i], cap);
    } else {
        for (size_t i = 0; i < kept; i++) add_one(counts, parts[i], cap);
    }
    return DPS_OK;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Replace the user code (high half) of every key by its rank among the distinct user codes.
 * The ranks keep the codes' order, so users are then visited, and their randomness drawn, in the
 * same order as with dense codes. Sets *n_users to the number of distinct users. */
static int renumber_users(uint64_t *keys, size_t n_pairs, uint64_t *n_users) {
    uint32_t *distinct = (uint32_t *)malloc((n_pairs ? n_pairs : 1) * sizeof(uint32_t));
    if (distinct == NULL) return DPS_ERR_NOMEM;
    for (size_t i = 0; i < n_pairs; i++) distinct[i] = (uint32_t)(keys[i] >> 32);
    qsort(distinct, n_pairs, sizeof(uint32_t), cmp_u32);
    size_t n = 0;
    for (size_t i = 0; i < n_pairs; i++)
        if (n == 0 || distinct[n - 1] != distinct[i]) distinct[n++] = distinct[i];
    for (size_t i = 0; i < n_pairs; i++) {
        uint32_t u = (uint32_t)(keys[i] >> 32);
        size_t lo = 0, hi = n; /* distinct[lo .. hi) holds u */
        while (hi - lo > 1) {
            size_t mid = lo + (hi - lo) / 2;
            if (distinct[mid] <= u) lo = mid; else hi = mid;
        }
        keys[i] = ((uint64_t)lo << 32) | (keys[i] & 0xFFFFFFFFu);
    }
    free(distinct);
    *n_users = (uint64_t)n;
    return DPS_OK;
}

/* Counting sort of the pairs by user, in two passes that stay in the caches: first into
 * buckets of up to 2^shift consecutive users (at most a few thousand buckets, so the scatter
 * writes to a few thousand places, not one per user), then each bucket by user on its own. Both
 * passes are stable, so the result is exactly the one-pass counting sort's: user u's partitions,
 * in the order of the pairs, at group[end[u - 1] .. end[u]) (end[-1] read as 0), and
 * end[n_users] = n_pairs. end must hold n_users + 1 zeros. */
static int group_by_user(const uint64_t *keys, size_t n_pairs, uint64_t n_users, size_t *end, uint32_t *group) {
    unsigned bits = 0;
    while (bits < 32 && ((uint64_t)1 << bits) < n_users) bits++;
    unsigned shift = bits > 8 ? bits - 8 : 0;
    if (shift > 16) shift = 16; /* a user's rank in its bucket fits 16 bits */
    size_t n_buckets = (size_t)((n_users + ((uint64_t)1 << shift) - 1) >> shift);
    size_t *bucket_end = (size_t *)calloc(n_buckets + 1, sizeof(size_t));
    uint16_t *low = shift ? (uint16_t *)malloc((n_pairs ? n_pairs : 1) * sizeof(uint16_t)) : NULL;
    if (bucket_end == NULL || (shift && low == NULL)) {
        free(bucket_end);
        free(low);
        return DPS_ERR_NOMEM;
    }
    for (size_t i = 0; i < n_pairs; i++) bucket_end[(keys[i] >> 32 >> shift) + 1]++;
    for (size_t b = 0; b < n_buckets; b++) bucket_end[b + 1] += bucket_end[b];
    /* bucket_end[b] now starts bucket b; the scatter moves it to the bucket's end. */
    uint32_t low_mask = ((uint32_t)1 << shift) - 1;
    for (size_t i = 0; i < n_pairs; i++) {
        uint32_t u = (uint32_t)(keys[i] >> 32);
        size_t d = bucket_end[u >> shift]++;
        group[d] = (uint32_t)keys[i];
        if (shift) low[d] = (uint16_t)(u & low_mask);
    }
    int rc = DPS_OK;
    if (shift == 0) { /* one user per bucket: already grouped */
        for (uint64_t u = 0; u < n_users; u++) end[u] = bucket_end[u];
    } else {
        size_t largest = 0;
        for (size_t b = 0, lo = 0; b < n_buckets; lo = bucket_end[b++])
            if (bucket_end[b] - lo > largest) largest = bucket_end[b] - lo;
        uint32_t *tmp = (uint32_t *)malloc((largest ? largest : 1) * sizeof(uint32_t));
        if (tmp == NULL) {
            rc = DPS_ERR_NOMEM;
        } else {
            for (size_t b = 0, lo = 0; b < n_buckets; lo = bucket_end[b++]) {
                size_t hi = bucket_end[b];
                uint64_t first = (uint64_t)b << shift;
                uint64_t last = first + ((uint64_t)1 << shift) < n_users ? first + ((uint64_t)1 << shift) : n_users;
                for (size_t d = lo; d < hi; d++) end[first + low[d]]++;
                size_t running = lo; /* end[u] := where user u starts */
                for (uint64_t u = first; u < last; u++) {
                    size_t count = end[u];
                    end[u] = running;
                    running += count;
                }
                memcpy(tmp, group + lo, (hi - lo) * sizeof(uint32_t));
                for (size_t d = lo; d < hi; d++) group[end[first + low[d]]++] = tmp[d - lo];
            }
            free(tmp);
        }
    }
    end[n_users] = n_pairs;
    free(bucket_end);
    free(low);
    return rc;
}

int dps_counter_group(dps_counter *c, size_t n_partitions, size_t **ends, uint32_t **grouped,
                      uint64_t *n_users_out, size_t *n_pairs_out) {
    *ends = NULL;
    *grouped = NULL;
    *n_users_out = 0;
    *n_pairs_out = 0;
    if (c->finished) return DPS_ERR_FINISHED;
    c->finished = 1;
    uint32_t max_user, max_partition;
    int rc = dps_pairset_compact(&c->pairs, &max_user, &max_partition);
    if (rc != DPS_OK) return rc;
    const uint64_t *keys = c->pairs.slots;
    size_t n_pairs = c->pairs.size;
    if (n_pairs && max_partition >= n_partitions) {
        dps_pairset_free(&c->pairs);
        return DPS_ERR_BAD_CODE;
    }
    uint64_t n_users = n_pairs ? (uint64_t)max_user + 1 : 0;
    /* The grouping below keeps one offset per user code up to the largest. Codes from
     * dpselect's factorizer are dense, but a caller may pass any code below DPS_CODE_LIMIT, and
     * one pair with a code near 2^32 would then ask for 32 GiB: sparse codes are first renumbered
     * densely, so memory is bounded by the distinct pairs, never by the codes' values. */
    if (n_users > (uint64_t)n_pairs) {
        rc = renumber_users(c->pairs.slots, n_pairs, &n_users);
        if (rc != DPS_OK) {
            dps_pairset_free(&c->pairs);
            return rc;
        }
    }

    /* Group the partitions by user: after the scatter, user u's partitions are
     * group[end[u - 1] .. end[u]) (end[-1] read as 0). */
    size_t *end = (size_t *)calloc((size_t)n_users + 1, sizeof(size_t));
    uint32_t *group = (uint32_t *)malloc((n_pairs ? n_pairs : 1) * sizeof(uint32_t));
    if (end == NULL || group == NULL) {
        free(end);
        free(group);
        dps_pairset_free(&c->pairs);
        return DPS_ERR_NOMEM;
    }
    rc = group_by_user(keys, n_pairs, n_users, end, group);
    dps_pairset_free(&c->pairs); /* keys are no longer needed: lower the peak */
    if (rc != DPS_OK) {
        free(end);
        free(group);
        return rc;
    }
    *ends = end;
    *grouped = group;
    *n_users_out = n_users;
    *n_pairs_out = n_pairs;
    return DPS_OK;
}

int dps_counter_finish_add(dps_counter *c, dps_rng *s, uint64_t kappa, uint64_t cap, int64_t *counts,
                           size_t n_partitions, int shared) {
    if (c->finished) return DPS_ERR_FINISHED;
    if (kappa == 0) return DPS_ERR_BAD_ARG;
    size_t *end;
    uint32_t *grouped;
    uint64_t n_users;
    size_t n_pairs;
    int rc = dps_counter_group(c, n_partitions, &end, &grouped, &n_users, &n_pairs);
    if (rc != DPS_OK) return rc;
    size_t start = 0;
    for (uint64_t u = 0; u < n_users && rc == DPS_OK; u++) {
        rc = bound_user(s, grouped + start, end[u] - start, kappa, cap, counts, shared);
        start = end[u];
    }
    free(end);
    free(grouped);
    return rc;
}

int dps_counter_finish(dps_counter *c, dps_rng *s, uint64_t kappa, uint64_t cap, int64_t *counts,
                       size_t n_partitions) {
    if (n_partitions) memset(counts, 0, n_partitions * sizeof(int64_t));
    int rc = dps_counter_finish_add(c, s, kappa, cap, counts, n_partitions, 0);
    if (rc != DPS_OK && n_partitions) memset(counts, 0, n_partitions * sizeof(int64_t));
    return rc;
}
