/* Rows scattered into user shards; see pair_shards.h. */
#include "pair_shards.h"

#include <string.h>

#include "count.h" /* DPS_CODE_LIMIT, DPS_ERR_BAD_CODE, DPS_ERR_BAD_ARG */

int dps_pair_shards_count(const uint32_t *users, const uint32_t *partitions, size_t lo, size_t hi,
                          unsigned shard_bits, size_t *counts, size_t *bad_index) {
    if (shard_bits > DPS_PAIR_SHARD_BITS_MAX) return DPS_ERR_BAD_ARG;
    uint32_t mask = (uint32_t)(((size_t)1 << shard_bits) - 1);
    for (size_t i = lo; i < hi; i++) {
        uint32_t u = users[i];
        if (u >= DPS_CODE_LIMIT || partitions[i] >= DPS_CODE_LIMIT) {
            *bad_index = i;
            return DPS_ERR_BAD_CODE;
        }
        counts[u & mask]++;
    }
    return DPS_OK;
}

int dps_pair_shards_place(const uint32_t *users, const uint32_t *partitions, size_t lo, size_t hi,
                          unsigned shard_bits, size_t *cursors, const size_t *limits, uint64_t *keys) {
    if (shard_bits > DPS_PAIR_SHARD_BITS_MAX) return DPS_ERR_BAD_ARG;
    uint32_t mask = (uint32_t)(((size_t)1 << shard_bits) - 1);
    for (size_t i = lo; i < hi; i++) {
        uint32_t u = users[i];
        size_t s = u & mask;
        if (cursors[s] >= limits[s]) return DPS_ERR_BAD_ARG; /* counts that do not match the rows */
        keys[cursors[s]++] = ((uint64_t)(u >> shard_bits) << 32) | partitions[i];
    }
    return DPS_OK;
}

int dps_pair_shards_scatter(const uint32_t *users, const uint32_t *partitions, size_t n, unsigned shard_bits,
                            uint64_t *keys, size_t *starts, size_t *bad_index) {
    if (shard_bits > DPS_PAIR_SHARD_BITS_MAX) return DPS_ERR_BAD_ARG;
    size_t shards = (size_t)1 << shard_bits;
    /* The codes are checked in the counting pass, so that a bad row leaves keys untouched. */
    memset(starts, 0, (shards + 1) * sizeof(size_t));
    int rc = dps_pair_shards_count(users, partitions, 0, n, shard_bits, starts + 1, bad_index);
    if (rc != DPS_OK) return rc;
    for (size_t s = 0; s < shards; s++) starts[s + 1] += starts[s];
    /* starts[s] is where shard s begins; each row moves its shard's start on by one, so that
     * starts[s] ends where shard s + 1 begins (its limit), and the starts are then shifted back
     * by one shard. Stable: a shard's pairs keep their rows' order. */
    rc = dps_pair_shards_place(users, partitions, 0, n, shard_bits, starts, starts + 1, keys);
    if (rc != DPS_OK) return rc;
    memmove(starts + 1, starts, shards * sizeof(size_t));
    starts[0] = 0;
    return DPS_OK;
}
