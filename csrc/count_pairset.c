/* Hash set of distinct (user, partition) pairs; see count_pairset.h. */
#include "count_pairset.h"

#include <stdlib.h>
#include <string.h>

#include "bigalloc.h"
#include "hashing.h"
#include "csprng.h" /* status codes */

#define MIN_CAPACITY ((size_t)1 << 10)
#define BLOCK 32 /* inserts whose slots are prefetched together */

/* Largest number of pairs a table of this capacity may hold (80 % load: fresh memory is what
 * costs most on a large table, more than the longer probe runs, which stay within cache lines). */
static inline size_t max_size(size_t capacity) { return capacity / 10 * 8; }

static uint64_t *alloc_slots(size_t capacity) {
    if (capacity > SIZE_MAX / sizeof(uint64_t)) return NULL;
    return (uint64_t *)dps_big_alloc(capacity * sizeof(uint64_t), 0xFF); /* all DPS_PAIR_EMPTY */
}

/* Insert a key known not to be the empty marker; returns 1 if it was new. */
static inline int put(uint64_t *slots, size_t mask, uint64_t key, size_t i) {
    for (;;) {
        uint64_t v = slots[i];
        if (v == key) return 0;
        if (v == DPS_PAIR_EMPTY) {
            slots[i] = key;
            return 1;
        }
        i = (i + 1) & mask;
    }
}

static int grow_to(dps_pairset *set, size_t capacity) {
    uint64_t *slots = alloc_slots(capacity);
    if (slots == NULL) return DPS_ERR_NOMEM;
    size_t mask = capacity - 1;
    /* Re-insert in blocks whose new slots are prefetched first: without it every move waits
     * for its own cache miss, and growing costs several times the inserts it makes room for. */
    uint64_t keys[BLOCK];
    size_t where[BLOCK];
    size_t m = 0;
    for (size_t i = 0; i < set->capacity; i++) {
        uint64_t key = set->slots[i];
        if (key == DPS_PAIR_EMPTY) continue;
        keys[m] = key;
        where[m] = (size_t)dps_fmix64(key) & mask;
        DPS_PREFETCH_W(slots + where[m]);
        if (++m == BLOCK) {
            for (size_t j = 0; j < m; j++) put(slots, mask, keys[j], where[j]);
            m = 0;
        }
    }
    for (size_t j = 0; j < m; j++) put(slots, mask, keys[j], where[j]);
    dps_big_free(set->slots);
    set->slots = slots;
    set->capacity = capacity;
    return DPS_OK;
}

/* Make room for `extra` more pairs at most. */
static int reserve(dps_pairset *set, size_t extra) {
    if (set->capacity != 0 && set->size + extra <= max_size(set->capacity)) return DPS_OK;
    size_t capacity = set->capacity ? set->capacity : MIN_CAPACITY;
    while (set->size + extra > max_size(capacity)) {
        if (capacity > SIZE_MAX / 4) return DPS_ERR_NOMEM;
        capacity *= 2;
    }
    return grow_to(set, capacity);
}

int dps_pairset_init(dps_pairset *set, size_t expected) {
    set->slots = NULL;
    set->capacity = 0;
    set->size = 0;
    return expected ? reserve(set, expected) : DPS_OK;
}

void dps_pairset_free(dps_pairset *set) {
    dps_big_free(set->slots);
    set->slots = NULL;
    set->capacity = 0;
    set->size = 0;
}

/* Rows go in blocks, two in flight: the next block's slots are prefetched while this block's
 * pairs are put, so each miss has a block of other work to hide behind. */
typedef struct pair_block {
    uint64_t key[BLOCK];
    size_t n;
} pair_block;

/* Pack the pairs of this shard among rows [start, start + m) into k and prefetch their home
 * slots. On a code >= DPS_CODE_LIMIT, k keeps the pairs before it, *bad_index is its row and
 * DPS_ERR_BAD_CODE is returned. */
static int gather(const dps_pairset *set, pair_block *k, const uint32_t *users, const uint32_t *partitions,
                  size_t start, size_t m, uint32_t shard_mask, uint32_t shard, unsigned shift, size_t *bad_index) {
    k->n = 0;
    size_t mask = set->capacity - 1;
    for (size_t j = 0; j < m; j++) {
        uint32_t u = users[start + j], p = partitions[start + j];
        if (u >= DPS_CODE_LIMIT || p >= DPS_CODE_LIMIT) {
            *bad_index = start + j;
            return DPS_ERR_BAD_CODE;
        }
        if ((u & shard_mask) != shard) continue;
        uint64_t key = ((uint64_t)(u >> shift) << 32) | p;
        k->key[k->n++] = key;
        if (set->capacity != 0) DPS_PREFETCH_W(set->slots + ((size_t)dps_fmix64(key) & mask));
    }
    return DPS_OK;
}

static int put_block(dps_pairset *set, const pair_block *k) {
    /* Growing before a block keeps every probe below inside one table; the slot is computed
     * again, as the table may have grown since the prefetch. */
    int rc = reserve(set, k->n);
    if (rc != DPS_OK) return rc;
    size_t mask = set->capacity - 1;
    for (size_t j = 0; j < k->n; j++)
        set->size += (size_t)put(set->slots, mask, k->key[j], (size_t)dps_fmix64(k->key[j]) & mask);
    return DPS_OK;
}

int dps_pairset_insert(dps_pairset *set, const uint32_t *users, const uint32_t *partitions,
                       size_t n, uint32_t shard_mask, uint32_t shard, size_t *bad_index) {
    pair_block ring[2];
    unsigned shift = 0; /* the user bits the shard fixes are dropped: user codes stay dense */
    while (shift < 32 && ((shard_mask >> shift) & 1u)) shift++;
    if (n == 0) return DPS_OK;
    int bad = gather(set, &ring[0], users, partitions, 0, n < BLOCK ? n : BLOCK, shard_mask, shard, shift, bad_index);
    for (size_t k = 0, start = 0;; k++, start += BLOCK) {
        size_t next = start + BLOCK;
        int more = bad == DPS_OK && next < n;
        if (more)
            bad = gather(set, &ring[(k + 1) & 1], users, partitions, next, n - next < BLOCK ? n - next : BLOCK,
                         shard_mask, shard, shift, bad_index);
        int rc = put_block(set, &ring[k & 1]);
        if (rc != DPS_OK) return rc;
        if (!more) return bad; /* the end, or this block held the bad row (and its pairs before it) */
        if (bad != DPS_OK) {   /* the next block held it: its pairs before the bad row go in too */
            rc = put_block(set, &ring[(k + 1) & 1]);
            return rc != DPS_OK ? rc : bad;
        }
    }
}

int dps_pairset_insert_keys(dps_pairset *set, const uint64_t *keys, size_t n, size_t *bad_index) {
    /* As dps_pairset_insert: blocks of BLOCK pairs, the next block's home slots prefetched
     * while this block's pairs are put. */
    if (set->capacity != 0)
        for (size_t j = 0; j < n && j < BLOCK; j++) DPS_PREFETCH_W(set->slots + ((size_t)dps_fmix64(keys[j]) & (set->capacity - 1)));
    for (size_t start = 0; start < n; start += BLOCK) {
        size_t m = n - start < BLOCK ? n - start : BLOCK;
        int rc = reserve(set, m);
        if (rc != DPS_OK) return rc;
        size_t mask = set->capacity - 1;
        size_t next = start + BLOCK;
        size_t ahead = next < n ? (n - next < BLOCK ? n - next : BLOCK) : 0;
        for (size_t j = 0; j < ahead; j++) DPS_PREFETCH_W(set->slots + ((size_t)dps_fmix64(keys[next + j]) & mask));
        for (size_t j = 0; j < m; j++) {
            uint64_t key = keys[start + j];
            if ((uint32_t)key >= DPS_CODE_LIMIT || (uint32_t)(key >> 32) >= DPS_CODE_LIMIT) {
                *bad_index = start + j;
                return DPS_ERR_BAD_CODE;
            }
            set->size += (size_t)put(set->slots, mask, key, (size_t)dps_fmix64(key) & mask);
        }
    }
    return DPS_OK;
}

int dps_pairset_compact(dps_pairset *set, uint32_t *max_user, uint32_t *max_partition) {
    /* One pass, without a branch on the slot's state (about half the slots are empty, at
     * random): every slot is copied down and the write position advances only past a pair. */
    size_t out = 0;
    uint32_t top_user = 0, top_partition = 0;
    for (size_t i = 0; i < set->capacity; i++) {
        uint64_t key = set->slots[i];
        uint64_t full = (uint64_t)(key != DPS_PAIR_EMPTY);
        set->slots[out] = key;
        out += (size_t)full;
        uint64_t kept = key & (0 - full); /* the empty marker counts as (0, 0) */
        uint32_t u = (uint32_t)(kept >> 32), p = (uint32_t)kept;
        top_user = u > top_user ? u : top_user;
        top_partition = p > top_partition ? p : top_partition;
    }
    *max_user = top_user;
    *max_partition = top_partition;
    set->capacity = out;
    if (out == 0) {
        dps_big_free(set->slots);
        set->slots = NULL;
        return DPS_OK;
    }
    /* Shrinking in place; if the allocator cannot, the larger block is simply kept. */
    set->slots = (uint64_t *)dps_big_shrink(set->slots, out * sizeof(uint64_t));
    return DPS_OK;
}

size_t dps_pairset_bytes(const dps_pairset *set) { return set->capacity * sizeof(uint64_t); }
