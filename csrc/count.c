/* Contribution bounding and distinct-user counting; see count.h. */
#include "count.h"

#include <stdlib.h>
#include <string.h>

int dps_counter_init(dps_counter *c, size_t expected_pairs) {
    c->finished = 0;
    return dps_pairset_init(&c->pairs, expected_pairs);
}

int dps_counter_feed(dps_counter *c, const uint32_t *users, const uint32_t *partitions, size_t n,
                     size_t *bad_index) {
    if (c->finished) return DPS_ERR_FINISHED;
    return dps_pairset_insert(&c->pairs, users, partitions, n, bad_index);
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

/* Keep min(d, kappa) of the d partitions in parts[0 .. d), uniformly among all subsets of that
 * size: step i swaps a uniform pick of parts[i .. d) into place i (partial Fisher–Yates). */
static int bound_user(dps_rng *s, uint32_t *parts, size_t d, uint64_t kappa, uint64_t cap,
                      int64_t *counts) {
    if ((uint64_t)d <= kappa) {
        for (size_t i = 0; i < d; i++) add_one(counts, parts[i], cap);
        return DPS_OK;
    }
    for (size_t i = 0; i < (size_t)kappa; i++) {
        uint64_t j;
        int rc = dps_rng_uniform_below(s, (uint64_t)(d - i), &j);
        if (rc != DPS_OK) return rc;
        uint32_t chosen = parts[i + (size_t)j];
        parts[i + (size_t)j] = parts[i];
        parts[i] = chosen;
        add_one(counts, chosen, cap);
    }
    return DPS_OK;
}

int dps_counter_finish(dps_counter *c, dps_rng *s, uint64_t kappa, uint64_t cap, int64_t *counts,
                       size_t n_partitions) {
    if (n_partitions) memset(counts, 0, n_partitions * sizeof(int64_t));
    if (c->finished) return DPS_ERR_FINISHED;
    if (kappa == 0) return DPS_ERR_BAD_ARG;
    c->finished = 1;
    int rc = dps_pairset_compact(&c->pairs);
    if (rc != DPS_OK) return rc;
    const uint64_t *keys = c->pairs.slots;
    size_t n_pairs = c->pairs.size;

    /* Check codes and find how many user codes are in use. */
    uint64_t n_users = 0;
    for (size_t i = 0; i < n_pairs; i++) {
        uint64_t u = keys[i] >> 32;
        if ((keys[i] & 0xFFFFFFFFu) >= n_partitions) {
            dps_pairset_free(&c->pairs);
            return DPS_ERR_BAD_CODE;
        }
        if (u + 1 > n_users) n_users = u + 1;
    }

    /* Group the partitions by user: after the scatter, user u's partitions are
     * grouped[end[u - 1] .. end[u]) (end[-1] read as 0). */
    size_t *end = (size_t *)calloc((size_t)n_users + 1, sizeof(size_t));
    uint32_t *grouped = (uint32_t *)malloc((n_pairs ? n_pairs : 1) * sizeof(uint32_t));
    if (end == NULL || grouped == NULL) {
        free(end);
        free(grouped);
        dps_pairset_free(&c->pairs);
        return DPS_ERR_NOMEM;
    }
    for (size_t i = 0; i < n_pairs; i++) end[(keys[i] >> 32) + 1]++;
    for (uint64_t u = 0; u < n_users; u++) end[u + 1] += end[u];
    for (size_t i = 0; i < n_pairs; i++) grouped[end[keys[i] >> 32]++] = (uint32_t)keys[i];
    dps_pairset_free(&c->pairs); /* keys are no longer needed: lower the peak */

    size_t start = 0;
    rc = DPS_OK;
    for (uint64_t u = 0; u < n_users && rc == DPS_OK; u++) {
        rc = bound_user(s, grouped + start, end[u] - start, kappa, cap, counts);
        start = end[u];
    }
    free(end);
    free(grouped);
    if (rc != DPS_OK && n_partitions) memset(counts, 0, n_partitions * sizeof(int64_t));
    return rc;
}
