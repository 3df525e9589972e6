/* The code maps of one shard of a column's values, and the store that keeps them; see shard_maps.h. */
#include "shard_maps.h"

#include <stdlib.h>
#include <string.h>

#include "csprng.h" /* status codes */
#include "hashing.h"

#define BLOCK 16                      /* values whose slots are prefetched together */
#define MIN_CAPACITY ((size_t)1 << 8) /* grows with the shard's distinct values */
#define LENGTH_BYTES 4                /* a copy's length, before its bytes */

uint64_t dps_shard_map_seed(uint64_t seed, size_t s) {
    return dps_fmix64(seed + 0x9E3779B97F4A7C15ull * (s + 1));
}

/* A map's capacity for `entries` at <= 2/3 load: `capacity` (at least MIN_CAPACITY) doubled as
 * often as needed (both maps grow a block of values ahead by this rule). */
static inline size_t capacity_for(size_t capacity, size_t entries) {
    if (capacity < MIN_CAPACITY) capacity = MIN_CAPACITY;
    while (entries > capacity / 3 * 2) capacity *= 2;
    return capacity;
}

void dps_word_map_free(dps_word_map *m) {
    free(m->slots);
    m->slots = NULL;
    m->capacity = m->size = 0;
}

void dps_var_map_free(dps_var_map *m) {
    free(m->slots);
    free(m->own);
    m->slots = NULL;
    m->own = NULL;
    m->capacity = m->size = m->own_len = m->own_cap = 0;
}

size_t dps_word_map_bytes(const dps_word_map *m) { return m->capacity * sizeof(dps_word_slot); }

size_t dps_var_map_bytes(const dps_var_map *m) { return m->capacity * sizeof(dps_var_slot) + m->own_cap; }

static inline size_t home(const dps_word_map *m, uint64_t value) {
    return (size_t)dps_fmix64(value ^ m->seed) & (m->capacity - 1);
}

static int grow_word(dps_word_map *m, size_t capacity) {
    if (capacity > SIZE_MAX / sizeof(dps_word_slot)) return DPS_ERR_NOMEM;
    dps_word_slot *slots = (dps_word_slot *)calloc(capacity, sizeof(dps_word_slot));
    if (slots == NULL) return DPS_ERR_NOMEM;
    dps_word_slot *old = m->slots;
    size_t old_capacity = m->capacity;
    m->slots = slots;
    m->capacity = capacity;
    for (size_t i = 0; i < old_capacity; i++) {
        if (old[i].code == 0) continue;
        size_t j = home(m, old[i].key);
        while (slots[j].code != 0) j = (j + 1) & (capacity - 1);
        slots[j] = old[i];
    }
    free(old);
    return DPS_OK;
}

static inline int encode_words(dps_word_map *m, const uint8_t *vals, size_t width, size_t n, uint32_t *places,
                               uint32_t *codes) {
    uint64_t block[BLOCK];
    const uint8_t *restrict v = vals;
    uint32_t *restrict rows = places;
    uint64_t seed = m->seed;
    for (size_t first = 0; first < n; first += BLOCK) {
        size_t b = n - first < BLOCK ? n - first : BLOCK;
        if (m->size + b > m->capacity / 3 * 2) {
            int rc = grow_word(m, capacity_for(m->capacity, m->size + b));
            if (rc != DPS_OK) return rc;
        }
        /* locals for the block: Python's CFLAGS carry -fno-strict-aliasing, under which a store
         * through any pointer would make the compiler reload every field each value */
        dps_word_slot *restrict slots = m->slots;
        size_t mask = m->capacity - 1, size = m->size;
        for (size_t j = 0; j < b; j++) {
            block[j] = dps_load_word(v + (first + j) * width, width);
            DPS_PREFETCH_W(slots + ((size_t)dps_fmix64(block[j] ^ seed) & mask));
        }
        for (size_t j = 0; j < b; j++) {
            uint64_t value = block[j];
            uint32_t local;
            for (size_t i = (size_t)dps_fmix64(value ^ seed) & mask;; i = (i + 1) & mask) {
                if (slots[i].code == 0) { /* new: the next local code, its first row marked */
                    slots[i].key = value;
                    slots[i].code = (uint32_t)++size; /* < 2^32 - 1: the column's codes are fewer */
                    codes[rows[first + j]] = (uint32_t)size; /* local code + 1 */
                    local = (uint32_t)size - 1;
                    break;
                }
                if (slots[i].key == value) {
                    local = slots[i].code - 1;
                    break;
                }
            }
            rows[first + j] = local; /* the row, replaced by its local code */
        }
        m->size = size;
    }
    return DPS_OK;
}

int dps_word_map_encode(dps_word_map *m, const uint8_t *vals, size_t width, size_t n, uint32_t *places,
                        uint32_t *codes) {
    switch (width) { /* one loop per width, so that each load is one instruction */
    case 8: return encode_words(m, vals, 8, n, places, codes);
    case 4: return encode_words(m, vals, 4, n, places, codes);
    case 2: return encode_words(m, vals, 2, n, places, codes);
    default: return encode_words(m, vals, 1, n, places, codes);
    }
}

static int grow_var(dps_var_map *m, size_t capacity) {
    if (capacity > SIZE_MAX / sizeof(dps_var_slot)) return DPS_ERR_NOMEM;
    dps_var_slot *slots = (dps_var_slot *)calloc(capacity, sizeof(dps_var_slot));
    if (slots == NULL) return DPS_ERR_NOMEM;
    for (size_t i = 0; i < m->capacity; i++) {
        if (m->slots[i].code == 0) continue;
        size_t j = (size_t)m->slots[i].hash & (capacity - 1);
        while (slots[j].code != 0) j = (j + 1) & (capacity - 1);
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->capacity = capacity;
    return DPS_OK;
}

static inline uint32_t copy_length(const uint8_t *copy) {
    uint32_t len;
    memcpy(&len, copy, LENGTH_BYTES);
    return len;
}

/* Room for `more` bytes in a map's own copies (doubling). */
static int own_room(dps_var_map *m, size_t more) {
    if (more <= m->own_cap - m->own_len) return DPS_OK;
    if (more > SIZE_MAX / 2 - m->own_len) return DPS_ERR_NOMEM;
    size_t cap = m->own_cap ? m->own_cap : 4096;
    while (cap - m->own_len < more) cap *= 2;
    uint8_t *own = (uint8_t *)realloc(m->own, cap);
    if (own == NULL) return DPS_ERR_NOMEM;
    m->own = own;
    m->own_cap = cap;
    return DPS_OK;
}

/* Equal hashes are only a first test: two values are one only when their lengths and bytes are
 * equal. The slots probe from the hash's low bits (its top bits are the shard, the same for every
 * value of the map). */
int dps_var_map_encode(dps_var_map *m, const uint8_t *arena, size_t at, size_t n, uint32_t *places,
                       uint32_t *codes, uint64_t seed, int own) {
    uint64_t hash[BLOCK];
    size_t where[BLOCK];
    uint32_t *restrict rows = places;
    for (size_t first = 0; first < n; first += BLOCK) {
        size_t b = n - first < BLOCK ? n - first : BLOCK;
        if (m->size + b > m->capacity / 3 * 2) {
            int rc = grow_var(m, capacity_for(m->capacity, m->size + b));
            if (rc != DPS_OK) return rc;
        }
        dps_var_slot *restrict slots = m->slots;
        size_t mask = m->capacity - 1, size = m->size;
        for (size_t j = 0; j < b; j++) {
            uint32_t len = copy_length(arena + at);
            where[j] = at;
            hash[j] = dps_hash_bytes(arena + at + LENGTH_BYTES, len, seed);
            DPS_PREFETCH_W(slots + ((size_t)hash[j] & mask));
            at += LENGTH_BYTES + (size_t)len;
        }
        for (size_t j = 0; j < b; j++) {
            uint64_t h = hash[j];
            const uint8_t *copy = arena + where[j];
            uint32_t local, row = rows[first + j], len = copy_length(copy);
            /* where the seen values' copies lie; a map's own bytes move as they grow */
            const uint8_t *seen_base = own ? m->own : arena;
            for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
                if (slots[i].code == 0) { /* new: the next local code, its first row marked */
                    if (own) {
                        int rc = own_room(m, LENGTH_BYTES + (size_t)len);
                        if (rc != DPS_OK) {
                            m->size = size;
                            return rc;
                        }
                        memcpy(m->own + m->own_len, copy, LENGTH_BYTES + (size_t)len);
                        slots[i].copy = m->own_len;
                        m->own_len += LENGTH_BYTES + (size_t)len;
                    } else {
                        slots[i].copy = where[j];
                    }
                    slots[i].hash = h;
                    slots[i].code = (uint32_t)++size;
                    codes[row] = (uint32_t)size; /* local code + 1 */
                    local = (uint32_t)size - 1;
                    break;
                }
                if (slots[i].hash == h) {
                    const uint8_t *seen = seen_base + slots[i].copy;
                    if (copy_length(seen) == len &&
                        (len == 0 || memcmp(seen + LENGTH_BYTES, copy + LENGTH_BYTES, len) == 0)) {
                        local = slots[i].code - 1;
                        break;
                    }
                }
            }
            rows[first + j] = local; /* the row, replaced by its local code */
        }
        m->size = size;
    }
    return DPS_OK;
}

int dps_keystore_init(dps_keystore *st, int var, uint64_t seed) {
    memset(st, 0, sizeof *st);
    st->var = var != 0;
    st->seed = seed;
    st->null_code = 0xFFFFFFFFu;
    if (st->var) {
        st->vars = (dps_var_map *)calloc(DPS_KEYSHARDS, sizeof(dps_var_map));
        if (st->vars == NULL) return DPS_ERR_NOMEM;
    } else {
        st->words = (dps_word_map *)calloc(DPS_KEYSHARDS, sizeof(dps_word_map));
        if (st->words == NULL) return DPS_ERR_NOMEM;
        for (size_t s = 0; s < DPS_KEYSHARDS; s++) st->words[s].seed = dps_shard_map_seed(seed, s);
    }
    return DPS_OK;
}

void dps_keystore_free(dps_keystore *st) {
    for (size_t s = 0; s < DPS_KEYSHARDS; s++) {
        if (st->words) dps_word_map_free(&st->words[s]);
        if (st->vars) dps_var_map_free(&st->vars[s]);
        free(st->to_code[s]);
    }
    free(st->words);
    free(st->vars);
    memset(st, 0, sizeof *st);
    st->null_code = 0xFFFFFFFFu;
}

size_t dps_keystore_bytes(const dps_keystore *st) {
    size_t bytes = 0;
    for (size_t s = 0; s < DPS_KEYSHARDS; s++) {
        if (st->words) bytes += dps_word_map_bytes(&st->words[s]);
        if (st->vars) bytes += dps_var_map_bytes(&st->vars[s]);
        bytes += st->to_code_cap[s] * sizeof(uint32_t);
    }
    return bytes;
}

int dps_keystore_reserve(dps_keystore *st, size_t s, size_t n_local) {
    if (s >= DPS_KEYSHARDS) return DPS_ERR_NOMEM;
    size_t cap = st->to_code_cap[s];
    if (n_local <= cap) return DPS_OK;
    size_t want = cap ? cap : 64;
    while (want < n_local) want *= 2;
    if (want > SIZE_MAX / sizeof(uint32_t)) return DPS_ERR_NOMEM;
    uint32_t *table = (uint32_t *)realloc(st->to_code[s], want * sizeof(uint32_t));
    if (table == NULL) return DPS_ERR_NOMEM;
    memset(table + cap, 0xFF, (want - cap) * sizeof(uint32_t));
    st->to_code[s] = table;
    st->to_code_cap[s] = want;
    return DPS_OK;
}
