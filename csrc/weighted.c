#include "weighted.h"

#include <math.h>

#include "subset.h"

int dps_weighted_round(dps_rng *s, const size_t *ends, uint32_t *grouped, uint64_t n_users,
                       const uint8_t *excluded, uint64_t kappa, const int64_t *weights,
                       int64_t *histogram, size_t n_partitions) {
    size_t start = 0;
    for (uint64_t u = 0; u < n_users; u++) {
        /* ends must not decrease: ends[u] < start would make d wrap around to nearly 2^64 and
         * send the subset draw far outside grouped (the binding checks this first too). */
        if (ends[u] < start) return DPS_ERR_BAD_TABLE;
        uint32_t *parts = grouped + start;
        size_t d = ends[u] - start;
        start = ends[u];
        if (excluded != NULL) { /* move the user's remaining partitions to the front */
            size_t kept = 0;
            for (size_t i = 0; i < d; i++) {
                if (parts[i] >= n_partitions) return DPS_ERR_BAD_TABLE;
                if (!excluded[parts[i]]) {
                    uint32_t p = parts[i];
                    parts[i] = parts[kept];
                    parts[kept++] = p;
                }
            }
            d = kept;
        }
        size_t m = (uint64_t)d < kappa ? d : (size_t)kappa;
        int rc = dps_uniform_subset(s, parts, d, kappa);
        if (rc != DPS_OK) return rc;
        for (size_t i = 0; i < m; i++) {
            uint32_t p = parts[i];
            if (p >= n_partitions) return DPS_ERR_BAD_TABLE;
            /* Overflow checked without overflowing: INT64_MAX - w itself overflows for a
             * negative w (the old test did, and the sum then wrapped around silently). */
            const int64_t w = weights[m];
            if ((w > 0 && histogram[p] > INT64_MAX - w) || (w < 0 && histogram[p] < INT64_MIN - w))
                return DPS_ERR_BAD_TABLE;
            histogram[p] += w;
        }
    }
    return DPS_OK;
}

int dps_weighted_prefix(const size_t *ends, const uint32_t *grouped, uint64_t n_users, const uint8_t *excluded,
                        uint64_t kappa, const int64_t *weights, int64_t *histogram, size_t n_partitions) {
    size_t start = 0;
    for (uint64_t u = 0; u < n_users; u++) {
        if (ends[u] < start) return DPS_ERR_BAD_TABLE;
        const uint32_t *parts = grouped + start;
        size_t d = ends[u] - start;
        start = ends[u];
        /* First pass: how many are taken (m); the second adds weights[m] to each. */
        size_t m = 0, last = 0;
        for (size_t i = 0; i < d && (uint64_t)m < kappa; i++) {
            if (parts[i] >= n_partitions) return DPS_ERR_BAD_TABLE;
            if (excluded == NULL || !excluded[parts[i]]) {
                m++;
                last = i + 1;
            }
        }
        if (m == 0) continue;
        const int64_t w = weights[m];
        for (size_t i = 0; i < last; i++) {
            uint32_t p = parts[i];
            if (excluded != NULL && excluded[p]) continue;
            if ((w > 0 && histogram[p] > INT64_MAX - w) || (w < 0 && histogram[p] < INT64_MIN - w))
                return DPS_ERR_BAD_TABLE;
            histogram[p] += w;
        }
    }
    return DPS_OK;
}

int dps_weighted_shuffle(dps_rng *s, const size_t *ends, uint32_t *grouped, uint64_t n_users) {
    size_t start = 0;
    for (uint64_t u = 0; u < n_users; u++) {
        if (ends[u] < start) return DPS_ERR_BAD_TABLE;
        int rc = dps_uniform_order(s, grouped + start, ends[u] - start);
        if (rc != DPS_OK) return rc;
        start = ends[u];
    }
    return DPS_OK;
}

void dps_normal_upper_tail(const double *z, double *out, size_t n) {
    const double inv_sqrt2 = 0.70710678118654752440;
    for (size_t i = 0; i < n; i++) out[i] = 0.5 * erfc(z[i] * inv_sqrt2);
}
