/* Contribution bounding and distinct-user counting (docs/privacy/contribution-bounding.md).
 *
 * Input: rows as integer codes (user code, partition code), fed in any number of batches.
 * Output, per partition code: the number of distinct users that still contribute to it after
 * each user has been bounded to at most κ of their distinct partitions, saturating at a cap.
 *
 * 1. Duplicate (user, partition) rows count once: the rows go into a set of distinct pairs
 *    (count_pairset.h), so memory is proportional to the distinct pairs, not to the rows.
 * 2. At finish, the pairs are grouped by user (a counting sort). A user with d <= κ distinct
 *    partitions keeps them all; a user with d > κ keeps a subset of κ of them chosen uniformly
 *    among all C(d, κ) subsets, by κ steps of a partial Fisher–Yates shuffle driven by exact
 *    uniform integers from the package CSPRNG (dps_rng_uniform_below: rejection sampling, no
 *    floats, no modulo bias). The choice does not depend on the order the rows arrived in.
 * 3. Each kept pair adds one to its partition, up to `cap` (π_opt(n) = 1 above the second
 *    crossover n2, so counting may stop at n2 + 1 without changing any decision; Desfontaines,
 *    Voss, Gipson, Mandayam, "Differentially private partition selection", PoPETs 2022, Theorem 1).
 *
 * Peak memory of finish: the compacted pairs (8 bytes each), the grouped partitions (4 bytes
 * per pair), one 8-byte offset per distinct user, plus the caller's counts (8 bytes per
 * partition). User codes need not be dense: if the largest code exceeds the number of pairs,
 * codes are first renumbered by rank (4 more bytes per pair, briefly), so no allocation ever
 * depends on a code's value.
 * Plain C11, no Python headers. Errors leave the counter usable only for dps_counter_free. */
#ifndef DPS_COUNT_H
#define DPS_COUNT_H

#include <stddef.h>
#include <stdint.h>

#include "count_pairset.h"
#include "csprng.h"

typedef struct dps_counter {
    dps_pairset pairs;
    int finished; /* finish consumed the pairs; only free remains */
} dps_counter;

/* Empty counter with room for about `expected_pairs` distinct pairs (0: grow as needed). */
int dps_counter_init(dps_counter *c, size_t expected_pairs);

/* Add the n rows of this shard: those with (users[i] & shard_mask) == shard (mask 0: all; else
 * 2^b - 1, and the user is stored as users[i] >> b, so a shard's user codes stay dense).
 * Codes must be < DPS_CODE_LIMIT in every row (else DPS_ERR_BAD_CODE with *bad_index). */
int dps_counter_feed(dps_counter *c, const uint32_t *users, const uint32_t *partitions, size_t n,
                     uint32_t shard_mask, uint32_t shard, size_t *bad_index);

/* Add n pairs already packed and sharded by dps_pair_shards_scatter (pair_shards.h): one
 * shard's run of its keys, for the counter of that shard. A half >= DPS_CODE_LIMIT:
 * DPS_ERR_BAD_CODE with *bad_index (see dps_pairset_insert_keys). */
int dps_counter_feed_keys(dps_counter *c, const uint64_t *keys, size_t n, size_t *bad_index);

/* Distinct pairs fed so far, and bytes held. */
size_t dps_counter_pairs(const dps_counter *c);
size_t dps_counter_bytes(const dps_counter *c);

/* Bound every user to at most kappa (>= 1) partitions chosen uniformly at random with s, and
 * write into counts[0 .. n_partitions) the number of kept users of each partition, saturated at
 * cap (0: no cap). Every partition code fed must be < n_partitions (else DPS_ERR_BAD_CODE).
 * Consumes the counter's pairs (call once). On error counts is zeroed. */
int dps_counter_finish(dps_counter *c, dps_rng *s, uint64_t kappa, uint64_t cap, int64_t *counts,
                       size_t n_partitions);

/* As dps_counter_finish, but the kept users are added to counts (not zeroed first), each count
 * saturating at cap: several counters (the shards of one set of users) can then be finished
 * into one array, one after the other, or at once by several threads when `shared` is non-zero
 * (atomic additions). On error counts holds part of this counter's additions. */
int dps_counter_finish_add(dps_counter *c, dps_rng *s, uint64_t kappa, uint64_t cap, int64_t *counts,
                           size_t n_partitions, int shared);

/* Consume the counter's pairs and group them by user (for mechanisms that need each user's
 * set, e.g. weighted selection): on success *grouped holds every partition code user by user and
 * (*ends)[u] is the end of user u's run, for n_users users (dense codes; sparse ones renumbered).
 * Both arrays are malloc'ed and belong to the caller (free them). */
int dps_counter_group(dps_counter *c, size_t n_partitions, size_t **ends, uint32_t **grouped,
                      uint64_t *n_users, size_t *n_pairs);

void dps_counter_free(dps_counter *c);

#define DPS_ERR_FINISHED (-21) /* feed or finish after finish */
#define DPS_ERR_BAD_ARG (-22)  /* kappa == 0 */

#endif
