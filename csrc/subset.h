/* A uniformly random subset of a user's partitions: contribution bounding (count.c) and the
 * weighted mechanisms (weighted.c) both keep min(d, k) of d partitions, chosen uniformly among
 * all subsets of that size, with exact uniform integers from the package CSPRNG. */
#ifndef DPS_SUBSET_H
#define DPS_SUBSET_H

#include <stddef.h>
#include <stdint.h>

#include "csprng.h"

/* Reorder parts[0 .. d) so that parts[0 .. min(d, k)) is the chosen subset: step i swaps a
 * uniform pick of parts[i .. d) into place i (partial Fisher–Yates). No randomness is drawn
 * when d <= k (everything is kept). */
static inline int dps_uniform_subset(dps_rng *s, uint32_t *parts, size_t d, uint64_t k) {
    if ((uint64_t)d <= k) return DPS_OK;
    for (size_t i = 0; i < (size_t)k; i++) {
        uint64_t j;
        int rc = dps_rng_uniform_below(s, (uint64_t)(d - i), &j);
        if (rc != DPS_OK) return rc;
        uint32_t chosen = parts[i + (size_t)j];
        parts[i + (size_t)j] = parts[i];
        parts[i] = chosen;
    }
    return DPS_OK;
}

/* A uniformly random order of parts[0 .. d): Fisher–Yates, step i swapping a uniform pick of
 * parts[i .. d) into place i. */
static inline int dps_uniform_order(dps_rng *s, uint32_t *parts, size_t d) {
    return d < 2 ? DPS_OK : dps_uniform_subset(s, parts, d, (uint64_t)(d - 1));
}

#endif
