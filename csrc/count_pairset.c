/* Hash set of distinct (user, partition) pairs; see count_pairset.h. */
#include "count_pairset.h"

#include <stdlib.h>
#include <string.h>

#include "bigalloc.h"
#include "hashing.h"
#include "csprng.h" /* status codes */

#define MIN_CAPACITY ((size_t)1 << 10)
#define BLOCK 16 /* inserts whose slots are prefetched together */

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
    free(set->slots);
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
    free(set->slots);
    set->slots = NULL;
    set->capacity = 0;
    set->size = 0;
}

int dps_pairset_insert(dps_pairset *set, const uint32_t *users, const uint32_t *partitions,
                       size_t n, size_t *bad_index) {
    uint64_t keys[BLOCK];
    size_t where[BLOCK];
    for (size_t start = 0; start < n; start += BLOCK) {
        size_t m = n - start < BLOCK ? n - start : BLOCK;
        /* Growing before a block keeps every probe below inside one table. */
        int rc = reserve(set, m);
        if (rc != DPS_OK) return rc;
        size_t mask = set->capacity - 1;
        for (size_t j = 0; j < m; j++) {
            uint32_t u = users[start + j], p = partitions[start + j];
            if (u >= DPS_CODE_LIMIT || p >= DPS_CODE_LIMIT) {
                *bad_index = start + j;
                for (size_t t = 0; t < j; t++) set->size += (size_t)put(set->slots, mask, keys[t], where[t]);
                return DPS_ERR_BAD_CODE;
            }
            keys[j] = ((uint64_t)u << 32) | p;
            where[j] = (size_t)dps_fmix64(keys[j]) & mask;
            DPS_PREFETCH_W(set->slots + where[j]);
        }
        for (size_t j = 0; j < m; j++) set->size += (size_t)put(set->slots, mask, keys[j], where[j]);
    }
    return DPS_OK;
}

int dps_pairset_compact(dps_pairset *set) {
    size_t out = 0;
    for (size_t i = 0; i < set->capacity; i++) {
        uint64_t key = set->slots[i];
        if (key != DPS_PAIR_EMPTY) set->slots[out++] = key;
    }
    set->capacity = out;
    if (out == 0) {
        free(set->slots);
        set->slots = NULL;
        return DPS_OK;
    }
    /* Shrinking in place; if the allocator cannot, the larger block is simply kept. */
    uint64_t *smaller = (uint64_t *)realloc(set->slots, out * sizeof(uint64_t));
    if (smaller != NULL) set->slots = smaller;
    return DPS_OK;
}

size_t dps_pairset_bytes(const dps_pairset *set) { return set->capacity * sizeof(uint64_t); }
