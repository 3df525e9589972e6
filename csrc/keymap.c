/* Dense codes for the values of one column, from Arrow buffers; see keymap.h. */
#include "keymap.h"

#include <stdlib.h>
#include <string.h>

#include "bigalloc.h"
#include "hashing.h"
#include "csprng.h" /* status codes */

#define MIN_CAPACITY ((size_t)1 << 10)
#define BLOCK 32 /* rows whose slots (and copies) are prefetched together */

/* A seeded hash of a byte string, 8 bytes at a time; only slot positions depend on it. */
static inline uint64_t hash_bytes(const uint8_t *p, size_t len, uint64_t seed) {
    uint64_t h = seed ^ ((uint64_t)len * 0x9E3779B97F4A7C15ull);
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ dps_fmix64(w)) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
        p += 8;
        len -= 8;
    }
    if (len) {
        uint64_t w = 0;
        memcpy(&w, p, len);
        h = (h ^ dps_fmix64(w ^ ((uint64_t)len << 56))) * 0x9E3779B97F4A7C15ull;
    }
    return dps_fmix64(h);
}

static inline uint64_t load_word(const uint8_t *p, size_t width) {
    switch (width) {
    case 1: return p[0];
    case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
    default: { uint64_t v; memcpy(&v, p, 8); return v; }
    }
}

static inline int is_valid(const uint8_t *validity, size_t bit) {
    return validity == NULL || ((validity[bit >> 3] >> (bit & 7)) & 1);
}

static inline size_t slot_of_word(const dps_keymap *m, uint64_t value) {
    return (size_t)dps_fmix64(value ^ m->seed) & (m->capacity - 1);
}

/* A BYTES value's home slot: the top `bits` bits of its hash. While the table has at most 2^32
 * slots these are the top bits of the tag kept in the slot, so growing the table never has to
 * read the values again. */
static inline unsigned log2_of(size_t capacity) {
    unsigned bits = 0;
    while (((size_t)1 << bits) < capacity) bits++;
    return bits;
}

static inline size_t slot_of_hash(uint64_t h, unsigned bits) { return (size_t)(h >> (64 - bits)); }

static inline uint32_t arena_length(const uint8_t *entry) {
    uint32_t len;
    memcpy(&len, entry, 4);
    return len;
}

static int rehash(dps_keymap *m, size_t capacity) {
    if (capacity > SIZE_MAX / sizeof(dps_keymap_slot)) return DPS_ERR_NOMEM;
    dps_keymap_slot *slots = (dps_keymap_slot *)dps_big_alloc(capacity * sizeof(dps_keymap_slot), 0);
    if (slots == NULL) return DPS_ERR_NOMEM;
    dps_keymap_slot *old = m->slots;
    size_t old_capacity = m->capacity;
    m->slots = slots;
    m->capacity = capacity;
    size_t mask = capacity - 1;
    unsigned bits = log2_of(capacity);
    m->bits = bits;
    /* Moves in blocks whose new slots are prefetched first (see count_pairset.c). */
    size_t from[BLOCK], to[BLOCK];
    size_t b = 0;
    for (size_t i = 0; i <= old_capacity; i++) {
        if (i < old_capacity && old[i].code != 0) {
            size_t j;
            if (m->kind == DPS_KEYMAP_WORD) {
                j = slot_of_word(m, old[i].key);
            } else if (bits <= 32) {
                j = slot_of_hash((uint64_t)old[i].tag << 32, bits);
            } else {
                const uint8_t *entry = m->arena + old[i].key;
                j = slot_of_hash(hash_bytes(entry + 4, arena_length(entry), m->seed), bits);
            }
            DPS_PREFETCH_W(slots + j);
            from[b] = i;
            to[b++] = j;
        }
        if (b == BLOCK || (i == old_capacity && b)) {
            for (size_t t = 0; t < b; t++) {
                size_t j = to[t];
                while (slots[j].code != 0) j = (j + 1) & mask;
                slots[j] = old[from[t]];
            }
            b = 0;
        }
    }
    dps_big_free(old);
    return DPS_OK;
}

/* Room for `extra` more values at <= 50 % load. */
static int reserve(dps_keymap *m, size_t extra) {
    if (m->capacity != 0 && m->size + extra <= m->capacity / 2) return DPS_OK;
    size_t capacity = m->capacity ? m->capacity : MIN_CAPACITY;
    while (m->size + extra > capacity / 2) {
        if (capacity > SIZE_MAX / 4) return DPS_ERR_NOMEM;
        capacity *= 2;
    }
    return rehash(m, capacity);
}

int dps_keymap_init(dps_keymap *m, int kind, uint64_t seed) {
    memset(m, 0, sizeof *m);
    if (kind != DPS_KEYMAP_WORD && kind != DPS_KEYMAP_BYTES) return DPS_ERR_KEYMAP_KIND;
    m->kind = kind;
    m->seed = seed;
    m->null_code = DPS_KEYMAP_NO_CODE;
    return DPS_OK;
}

void dps_keymap_free(dps_keymap *m) {
    dps_big_free(m->slots);
    free(m->arena);
    int kind = m->kind;
    uint64_t seed = m->seed;
    memset(m, 0, sizeof *m);
    m->kind = kind;
    m->seed = seed;
    m->null_code = DPS_KEYMAP_NO_CODE;
}

size_t dps_keymap_bytes(const dps_keymap *m) {
    return m->capacity * sizeof(dps_keymap_slot) + m->arena_cap;
}

/* The next code, or DPS_KEYMAP_NO_CODE when 32 bits are exhausted. */
static inline uint32_t next_code(dps_keymap *m) {
    if (m->n_codes >= DPS_KEYMAP_MAX_CODES - 1) return DPS_KEYMAP_NO_CODE;
    return m->n_codes++;
}

static inline int code_null(dps_keymap *m, size_t row, uint32_t *code, uint32_t *new_rows, size_t *n_new) {
    if (m->null_code == DPS_KEYMAP_NO_CODE) {
        uint32_t c = next_code(m);
        if (c == DPS_KEYMAP_NO_CODE) return DPS_ERR_KEYMAP_FULL;
        m->null_code = c;
        new_rows[(*n_new)++] = (uint32_t)row;
    }
    *code = m->null_code;
    return DPS_OK;
}

/* Append a copy of a new BYTES value to the arena; *start receives where it begins. */
static int remember(dps_keymap *m, const uint8_t *p, size_t len, uint64_t *start) {
    if (len >= 0xFFFFFFFFu) return DPS_ERR_KEYMAP_LONG;
    size_t need = len + 4;
    if (need > SIZE_MAX - m->arena_len) return DPS_ERR_NOMEM;
    if (m->arena_len + need > m->arena_cap) {
        size_t cap = m->arena_cap ? m->arena_cap : 4096;
        while (cap < m->arena_len + need) {
            if (cap > SIZE_MAX / 2) return DPS_ERR_NOMEM;
            cap *= 2;
        }
        uint8_t *arena = (uint8_t *)realloc(m->arena, cap);
        if (arena == NULL) return DPS_ERR_NOMEM;
        m->arena = arena;
        m->arena_cap = cap;
    }
    uint32_t len32 = (uint32_t)len;
    memcpy(m->arena + m->arena_len, &len32, 4);
    if (len) memcpy(m->arena + m->arena_len + 4, p, len);
    *start = m->arena_len;
    m->arena_len += need;
    return DPS_OK;
}

/* Find or insert a BYTES value with hash h starting at slot i. */
static inline int probe_bytes(dps_keymap *m, size_t i, uint64_t h, const uint8_t *p, size_t len,
                              size_t row, uint32_t *code, uint32_t *new_rows, size_t *n_new) {
    size_t mask = m->capacity - 1;
    uint32_t tag = (uint32_t)(h >> 32);
    for (;;) {
        dps_keymap_slot *s = &m->slots[i];
        if (s->code == 0) {
            uint32_t c = next_code(m);
            if (c == DPS_KEYMAP_NO_CODE) return DPS_ERR_KEYMAP_FULL;
            uint64_t start;
            int rc = remember(m, p, len, &start);
            if (rc != DPS_OK) return rc;
            s->key = start;
            s->code = c + 1;
            s->tag = tag;
            m->size++;
            new_rows[(*n_new)++] = (uint32_t)row;
            *code = c;
            return DPS_OK;
        }
        if (s->tag == tag) {
            const uint8_t *entry = m->arena + s->key;
            if (arena_length(entry) == len && (len == 0 || memcmp(entry + 4, p, len) == 0)) {
                *code = s->code - 1;
                return DPS_OK;
            }
        }
        i = (i + 1) & mask;
    }
}

/* Between the slot prefetch and the probe: if the home slot may hold the value, fetch its copy. */
static inline void prefetch_copy(const dps_keymap *m, size_t i, uint64_t h) {
    const dps_keymap_slot *s = &m->slots[i];
    if (s->code != 0 && s->tag == (uint32_t)(h >> 32)) DPS_PREFETCH_R(m->arena + s->key);
}

static inline int probe_word(dps_keymap *m, size_t i, uint64_t value, size_t row, uint32_t *code,
                             uint32_t *new_rows, size_t *n_new) {
    size_t mask = m->capacity - 1;
    for (;;) {
        dps_keymap_slot *s = &m->slots[i];
        if (s->code == 0) {
            uint32_t c = next_code(m);
            if (c == DPS_KEYMAP_NO_CODE) return DPS_ERR_KEYMAP_FULL;
            s->key = value;
            s->code = c + 1;
            m->size++;
            new_rows[(*n_new)++] = (uint32_t)row;
            *code = c;
            return DPS_OK;
        }
        if (s->key == value) {
            *code = s->code - 1;
            return DPS_OK;
        }
        i = (i + 1) & mask;
    }
}

/* One block of rows (b <= BLOCK, table already reserved): value j is null when ptr[j] is NULL,
 * else ptr[j][0 .. len[j]). Hashes and prefetches every row's slot, then (BYTES) the copies
 * those slots point to, then probes, so the cache misses of the block overlap. */
static int encode_block(dps_keymap *m, size_t first_row, size_t b, const uint8_t *const *ptr,
                        const size_t *len, size_t width, uint32_t *codes, uint32_t *new_rows, size_t *n_new) {
    size_t slot[BLOCK];
    uint64_t key[BLOCK];
    for (size_t j = 0; j < b; j++) {
        if (ptr[j] == NULL) continue;
        if (m->kind == DPS_KEYMAP_WORD) {
            key[j] = load_word(ptr[j], width);
            slot[j] = slot_of_word(m, key[j]);
        } else {
            key[j] = hash_bytes(ptr[j], len[j], m->seed);
            slot[j] = slot_of_hash(key[j], m->bits);
        }
        DPS_PREFETCH_W(m->slots + slot[j]);
    }
    if (m->kind == DPS_KEYMAP_BYTES)
        for (size_t j = 0; j < b; j++)
            if (ptr[j] != NULL) prefetch_copy(m, slot[j], key[j]);
    for (size_t j = 0; j < b; j++) {
        size_t row = first_row + j;
        int rc;
        if (ptr[j] == NULL)
            rc = code_null(m, row, &codes[row], new_rows, n_new);
        else if (m->kind == DPS_KEYMAP_WORD)
            rc = probe_word(m, slot[j], key[j], row, &codes[row], new_rows, n_new);
        else
            rc = probe_bytes(m, slot[j], key[j], ptr[j], len[j], row, &codes[row], new_rows, n_new);
        if (rc != DPS_OK) return rc;
    }
    return DPS_OK;
}

int dps_keymap_encode_fixed(dps_keymap *m, size_t n, const uint8_t *validity, size_t validity_offset,
                            int all_null, const uint8_t *values, size_t width, uint32_t *codes,
                            uint32_t *new_rows, size_t *n_new) {
    *n_new = 0;
    if (n > DPS_KEYMAP_MAX_CODES) return DPS_ERR_KEYMAP_KIND; /* rows are reported as 32-bit */
    if (width == 0 || (m->kind == DPS_KEYMAP_WORD && width != 1 && width != 2 && width != 4 && width != 8))
        return DPS_ERR_KEYMAP_KIND;
    const uint8_t *ptr[BLOCK];
    size_t len[BLOCK];
    for (size_t start = 0; start < n; start += BLOCK) {
        size_t b = n - start < BLOCK ? n - start : BLOCK;
        int rc = reserve(m, b);
        if (rc != DPS_OK) return rc;
        for (size_t j = 0; j < b; j++) {
            size_t row = start + j;
            int null = all_null || !is_valid(validity, validity_offset + row);
            ptr[j] = null ? NULL : values + row * width;
            len[j] = width;
        }
        rc = encode_block(m, start, b, ptr, len, width, codes, new_rows, n_new);
        if (rc != DPS_OK) return rc;
    }
    return DPS_OK;
}

static inline uint64_t offset_at(const void *offsets, int offsets64, size_t i) {
    if (offsets64) return (uint64_t)((const int64_t *)offsets)[i];
    int32_t v = ((const int32_t *)offsets)[i];
    return v < 0 ? UINT64_MAX : (uint64_t)v;
}

int dps_keymap_encode_var(dps_keymap *m, size_t n, const uint8_t *validity, size_t validity_offset,
                          const void *offsets, int offsets64, const uint8_t *data, size_t data_len,
                          uint32_t *codes, uint32_t *new_rows, size_t *n_new, size_t *bad_row) {
    *n_new = 0;
    if (m->kind != DPS_KEYMAP_BYTES || n > DPS_KEYMAP_MAX_CODES) return DPS_ERR_KEYMAP_KIND;
    const uint8_t *ptr[BLOCK];
    size_t len[BLOCK];
    uint64_t previous = n ? offset_at(offsets, offsets64, 0) : 0;
    if (n && previous > data_len) {
        *bad_row = 0;
        return DPS_ERR_KEYMAP_OFFSETS;
    }
    for (size_t start = 0; start < n; start += BLOCK) {
        size_t b = n - start < BLOCK ? n - start : BLOCK;
        int rc = reserve(m, b);
        if (rc != DPS_OK) return rc;
        for (size_t j = 0; j < b; j++) {
            size_t row = start + j;
            /* A null's offsets are checked too: Arrow requires them ordered like any other. */
            uint64_t end = offset_at(offsets, offsets64, row + 1);
            if (end < previous || end > data_len) {
                *bad_row = row;
                return DPS_ERR_KEYMAP_OFFSETS;
            }
            /* data may be NULL only when it is empty: every value is then empty too */
            ptr[j] = is_valid(validity, validity_offset + row) ? (data ? data + previous : (const uint8_t *)"") : NULL;
            len[j] = (size_t)(end - previous);
            previous = end;
        }
        rc = encode_block(m, start, b, ptr, len, 0, codes, new_rows, n_new);
        if (rc != DPS_OK) return rc;
    }
    return DPS_OK;
}

static inline int64_t load_index(const uint8_t *p, size_t width) {
    switch (width) {
    case 1: { int8_t v; memcpy(&v, p, 1); return v; }
    case 2: { int16_t v; memcpy(&v, p, 2); return v; }
    case 4: { int32_t v; memcpy(&v, p, 4); return v; }
    default: { int64_t v; memcpy(&v, p, 8); return v; }
    }
}

int dps_dictionary_codes(size_t n, const uint8_t *validity, size_t validity_offset, const uint8_t *indices,
                         size_t index_width, size_t dict_len, uint32_t *slot_of, uint32_t *next_code,
                         uint32_t *null_code, uint32_t *codes, uint32_t *new_rows, size_t *n_new,
                         size_t *bad_row) {
    *n_new = 0;
    if (n > DPS_KEYMAP_MAX_CODES || (index_width != 1 && index_width != 2 && index_width != 4 && index_width != 8))
        return DPS_ERR_KEYMAP_KIND;
    for (size_t row = 0; row < n; row++) {
        uint32_t *code;
        if (!is_valid(validity, validity_offset + row)) {
            code = null_code;
        } else {
            int64_t index = load_index(indices + row * index_width, index_width);
            if (index < 0 || (uint64_t)index >= dict_len) {
                *bad_row = row;
                return DPS_ERR_KEYMAP_OFFSETS;
            }
            code = &slot_of[index];
        }
        if (*code == DPS_KEYMAP_NO_CODE) {
            if (*next_code >= DPS_KEYMAP_MAX_CODES - 1) return DPS_ERR_KEYMAP_FULL;
            *code = (*next_code)++;
            new_rows[(*n_new)++] = (uint32_t)row;
        }
        codes[row] = *code;
    }
    return DPS_OK;
}
