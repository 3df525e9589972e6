/* A growable hash set of distinct (user, partition) pairs (docs/rows.md, "Memory").
 *
 * Contribution bounding needs every distinct partition of every user before it can choose κ of
 * them uniformly, and rows may arrive in many batches (files larger than memory). This set keeps
 * exactly the distinct pairs seen so far, so its memory is proportional to distinct pairs, not to
 * rows: 8 bytes per slot, slots a power of two kept at most 80 % full (so between 10 and 20
 * bytes per distinct pair; never more than twice that while growing).
 *
 * A pair is packed into one 64-bit word, user code in the high half, partition code in the low
 * half; codes must be < DPS_CODE_LIMIT so that the all-ones word can mark an empty slot.
 * Open addressing with linear probing; the slot is chosen by the murmur3 64-bit finaliser, a
 * bijection that spreads the dense codes a factorizer produces. Inserts are done in blocks whose
 * slots are prefetched first: the table is far larger than the caches and the probes are random. */
#ifndef DPS_COUNT_PAIRSET_H
#define DPS_COUNT_PAIRSET_H

#include <stddef.h>
#include <stdint.h>

#define DPS_CODE_LIMIT 0xFFFFFFFFu          /* codes are in [0, DPS_CODE_LIMIT) */
#define DPS_PAIR_EMPTY (~(uint64_t)0)

typedef struct dps_pairset {
    uint64_t *slots;     /* capacity words, DPS_PAIR_EMPTY where free */
    size_t capacity;     /* a power of two, or 0 before the first insert */
    size_t size;         /* distinct pairs stored */
} dps_pairset;

/* Empty set; reserves room for about `expected` pairs (0: start small). DPS_ERR_NOMEM on failure. */
int dps_pairset_init(dps_pairset *set, size_t expected);

/* Release the slots (the set is then empty and may be reused after init). */
void dps_pairset_free(dps_pairset *set);

/* Insert the pairs (users[i], partitions[i]) of this shard, those with
 * (users[i] & shard_mask) == shard (mask 0, shard 0: every pair); duplicates are ignored. Sharding
 * by user code lets two threads fill two sets from the same rows, each user's pairs in one set.
 * shard_mask must be 2^b - 1; the set stores users[i] >> b (dense again within the shard).
 * Every code of every row must be < DPS_CODE_LIMIT: otherwise nothing past the offending row is
 * inserted, *bad_index is set to its row and DPS_ERR_BAD_CODE is returned (rows before it stay
 * inserted). */
int dps_pairset_insert(dps_pairset *set, const uint32_t *users, const uint32_t *partitions,
                       size_t n, uint32_t shard_mask, uint32_t shard, size_t *bad_index);

/* Insert n pairs already packed (user code in the high half, partition code in the low half, as
 * dps_pair_shards_scatter writes them); duplicates are ignored. Both halves of every key must be
 * < DPS_CODE_LIMIT: else nothing from the offending key on is inserted, *bad_index is set to it
 * and DPS_ERR_BAD_CODE is returned (keys before it stay inserted). */
int dps_pairset_insert_keys(dps_pairset *set, const uint64_t *keys, size_t n, size_t *bad_index);

/* Move the stored pairs to the front of the slot array (any order) and shrink it to exactly
 * `size` words; the set can then only be read through set->slots[0 .. size) and freed. Sets the
 * largest user and partition codes stored (0 when empty). */
int dps_pairset_compact(dps_pairset *set, uint32_t *max_user, uint32_t *max_partition);

/* Bytes currently held. */
size_t dps_pairset_bytes(const dps_pairset *set);

#define DPS_ERR_BAD_CODE (-20)

#endif
