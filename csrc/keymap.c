/* Dense codes for the values of one column, from Arrow buffers; see keymap.h. */
#include "keymap.h"

#include <stdlib.h>
#include <string.h>

#include "bigalloc.h"
#include "hashing.h"
#include "csprng.h" /* status codes */

#define MIN_CAPACITY ((size_t)1 << 10)
#define BLOCK 32 /* rows whose slots (and copies) are prefetched together */

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
                j = slot_of_hash(dps_hash_bytes(entry + 4, arena_length(entry), m->seed), bits);
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

/* The most values a table of `capacity` slots holds: two thirds. Linear probing stays short
 * there (about 2 slots per hit, 5 per miss, mostly in the home slot's cache line: 4 slots a
 * line), and the table is 24-48 bytes per distinct value instead of the 32-64 of a half-full
 * one: at 1e6 rows over ~3e5 keys, 8 MiB instead of 16, which with the old table alive during
 * the last doubling was the largest share of the job's peak memory. */
static inline size_t max_load(size_t capacity) { return capacity / 3 * 2; }

/* Room for `extra` more values at <= 2/3 load. */
static int reserve(dps_keymap *m, size_t extra) {
    if (m->capacity != 0 && m->size + extra <= max_load(m->capacity)) return DPS_OK;
    size_t capacity = m->capacity ? m->capacity : MIN_CAPACITY;
    while (m->size + extra > max_load(capacity)) {
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

/* Rows go through the table in blocks of BLOCK, three blocks in flight: block k + 2 is hashed
 * and its home slots prefetched, block k + 1 has the copies its slots point to prefetched
 * (BYTES), and block k is probed. Each miss so gets two blocks of other work to hide behind,
 * where one block's three loops back to back would wait for most of them. The earlier stages
 * only hint the cache: the probe recomputes the slot from the hash (the table may have grown
 * in between) and reads the slot again (an earlier row may have just filled it). */
typedef struct row_block {
    size_t first_row, b;
    const uint8_t *ptr[BLOCK]; /* NULL for a null value */
    size_t len[BLOCK];
    uint64_t key[BLOCK];       /* WORD: the value; BYTES: its seeded hash */
} row_block;

static inline size_t home_slot(const dps_keymap *m, uint64_t key) {
    return m->kind == DPS_KEYMAP_WORD ? slot_of_word(m, key) : slot_of_hash(key, m->bits);
}

static void hash_block(const dps_keymap *m, row_block *k, size_t width) {
    for (size_t j = 0; j < k->b; j++) {
        if (k->ptr[j] == NULL) continue;
        k->key[j] = m->kind == DPS_KEYMAP_WORD ? dps_load_word(k->ptr[j], width)
                                              : dps_hash_bytes(k->ptr[j], k->len[j], m->seed);
        if (m->capacity != 0) DPS_PREFETCH_W(m->slots + home_slot(m, k->key[j]));
    }
}

static void prefetch_copies(const dps_keymap *m, const row_block *k) {
    if (m->kind != DPS_KEYMAP_BYTES || m->capacity == 0) return;
    for (size_t j = 0; j < k->b; j++)
        if (k->ptr[j] != NULL) prefetch_copy(m, home_slot(m, k->key[j]), k->key[j]);
}

static int probe_block(dps_keymap *m, const row_block *k, uint32_t *codes, uint32_t *new_rows, size_t *n_new) {
    int rc = reserve(m, k->b);
    if (rc != DPS_OK) return rc;
    for (size_t j = 0; j < k->b; j++) {
        size_t row = k->first_row + j;
        if (k->ptr[j] == NULL)
            rc = code_null(m, row, &codes[row], new_rows, n_new);
        else if (m->kind == DPS_KEYMAP_WORD)
            rc = probe_word(m, home_slot(m, k->key[j]), k->key[j], row, &codes[row], new_rows, n_new);
        else
            rc = probe_bytes(m, home_slot(m, k->key[j]), k->key[j], k->ptr[j], k->len[j], row, &codes[row],
                             new_rows, n_new);
        if (rc != DPS_OK) return rc;
    }
    return DPS_OK;
}

/* Advance the pipeline by one block: `filled` is block k + 2, just filled (NULL when the rows
 * are exhausted); block k + 1 gets its copies prefetched and block k is probed. */
static int pipeline_step(dps_keymap *m, row_block ring[3], size_t k, size_t n_blocks, int filled, size_t width,
                         uint32_t *codes, uint32_t *new_rows, size_t *n_new) {
    if (filled) hash_block(m, &ring[(k + 2) % 3], width);
    if (k + 1 < n_blocks) prefetch_copies(m, &ring[(k + 1) % 3]);
    return k < n_blocks ? probe_block(m, &ring[k % 3], codes, new_rows, n_new) : DPS_OK;
}

/* Probe every block already filled (blocks k .. k + 1), e.g. before reporting a bad row, so the
 * rows before it are coded exactly as without the pipeline. */
static int pipeline_drain(dps_keymap *m, row_block ring[3], size_t k, size_t n_filled, uint32_t *codes,
                          uint32_t *new_rows, size_t *n_new) {
    for (; k < n_filled; k++) {
        int rc = probe_block(m, &ring[k % 3], codes, new_rows, n_new);
        if (rc != DPS_OK) return rc;
    }
    return DPS_OK;
}

/* Fills block k's rows (k->first_row and k->b are set): their value pointers and lengths. On a
 * bad row it sets k->b to the rows before it, *bad_row, and returns an error. */
typedef int (*fill_fn)(void *source, row_block *k, size_t *bad_row);

/* The pipeline over n rows: step s fills block s and probes block s - 2 (see pipeline_step). A
 * fill error first codes the rows before the bad one, as an unpipelined pass would have. */
static int encode_rows(dps_keymap *m, size_t n, size_t width, fill_fn fill, void *source, uint32_t *codes,
                       uint32_t *new_rows, size_t *n_new, size_t *bad_row) {
    row_block ring[3];
    size_t n_blocks = (n + BLOCK - 1) / BLOCK;
    for (size_t s = 0; s < n_blocks + 2; s++) {
        int filled = s < n_blocks;
        if (filled) {
            row_block *k = &ring[s % 3];
            k->first_row = s * BLOCK;
            k->b = n - k->first_row < BLOCK ? n - k->first_row : BLOCK;
            int bad = fill(source, k, bad_row);
            if (bad != DPS_OK) {
                hash_block(m, k, width);
                int rc = pipeline_drain(m, ring, s < 2 ? 0 : s - 2, s + 1, codes, new_rows, n_new);
                return rc != DPS_OK ? rc : bad;
            }
        }
        if (s < 2) {
            if (filled) hash_block(m, &ring[s % 3], width);
            continue;
        }
        int rc = pipeline_step(m, ring, s - 2, n_blocks, filled, width, codes, new_rows, n_new);
        if (rc != DPS_OK) return rc;
    }
    return DPS_OK;
}

typedef struct fixed_source {
    const uint8_t *validity;
    size_t validity_offset;
    int all_null;
    const uint8_t *values;
    size_t width;
} fixed_source;

static int fill_fixed(void *source, row_block *k, size_t *bad_row) {
    const fixed_source *f = (const fixed_source *)source;
    (void)bad_row;
    for (size_t j = 0; j < k->b; j++) {
        size_t row = k->first_row + j;
        int null = f->all_null || !is_valid(f->validity, f->validity_offset + row);
        k->ptr[j] = null ? NULL : f->values + row * f->width;
        k->len[j] = f->width;
    }
    return DPS_OK;
}

/* WORD values without nulls (integer keys, dates, …), the common case, in a loop of its own:
 * the same codes as encode_rows, without its per-row pointers, lengths and kind tests. A WORD
 * value lives in its slot (no copy to fetch), so the pipeline has two stages: block k + 2's
 * home slots are prefetched while block k is probed. */
static inline int encode_words(dps_keymap *m, size_t n, const uint8_t *values, size_t width, uint32_t *codes,
                               uint32_t *new_rows, size_t *n_new) {
    uint64_t ring[3][BLOCK];
    size_t n_blocks = (n + BLOCK - 1) / BLOCK;
    for (size_t s = 0; s < n_blocks + 2; s++) {
        if (s < n_blocks) {
            uint64_t *k = ring[s % 3];
            size_t first = s * BLOCK, b = n - first < BLOCK ? n - first : BLOCK;
            const uint8_t *p = values + first * width;
            for (size_t j = 0; j < b; j++) k[j] = dps_load_word(p + j * width, width);
            if (m->capacity != 0)
                for (size_t j = 0; j < b; j++) DPS_PREFETCH_W(m->slots + slot_of_word(m, k[j]));
        }
        if (s >= 2) {
            const uint64_t *k = ring[(s - 2) % 3];
            size_t first = (s - 2) * BLOCK, b = n - first < BLOCK ? n - first : BLOCK;
            int rc = reserve(m, b); /* the probe recomputes each slot: the table may have grown */
            if (rc != DPS_OK) return rc;
            for (size_t j = 0; j < b; j++) {
                rc = probe_word(m, slot_of_word(m, k[j]), k[j], first + j, &codes[first + j], new_rows, n_new);
                if (rc != DPS_OK) return rc;
            }
        }
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
    if (m->kind == DPS_KEYMAP_WORD && validity == NULL && !all_null) {
        /* one copy of the loop per width, so that each load is a single instruction */
        switch (width) {
        case 8: return encode_words(m, n, values, 8, codes, new_rows, n_new);
        case 4: return encode_words(m, n, values, 4, codes, new_rows, n_new);
        case 2: return encode_words(m, n, values, 2, codes, new_rows, n_new);
        default: return encode_words(m, n, values, 1, codes, new_rows, n_new);
        }
    }
    fixed_source source = {validity, validity_offset, all_null, values, width};
    size_t unused;
    return encode_rows(m, n, width, fill_fixed, &source, codes, new_rows, n_new, &unused);
}

typedef struct var_source {
    const uint8_t *validity;
    size_t validity_offset;
    const void *offsets;
    int offsets64;
    const uint8_t *data;
    size_t data_len;
    uint64_t previous; /* end of the last value filled */
} var_source;

static int fill_var(void *source, row_block *k, size_t *bad_row) {
    var_source *v = (var_source *)source;
    for (size_t j = 0; j < k->b; j++) {
        size_t row = k->first_row + j;
        /* A null's offsets are checked too: Arrow requires them ordered like any other. */
        uint64_t end = dps_offset_at(v->offsets, v->offsets64, row + 1);
        if (end < v->previous || end > v->data_len) {
            k->b = j;
            *bad_row = row;
            return DPS_ERR_KEYMAP_OFFSETS;
        }
        /* data may be NULL only when it is empty: every value is then empty too */
        k->ptr[j] = is_valid(v->validity, v->validity_offset + row)
                        ? (v->data ? v->data + v->previous : (const uint8_t *)"") : NULL;
        k->len[j] = (size_t)(end - v->previous);
        v->previous = end;
    }
    return DPS_OK;
}

int dps_keymap_encode_var(dps_keymap *m, size_t n, const uint8_t *validity, size_t validity_offset,
                          const void *offsets, int offsets64, const uint8_t *data, size_t data_len,
                          uint32_t *codes, uint32_t *new_rows, size_t *n_new, size_t *bad_row) {
    *n_new = 0;
    if (m->kind != DPS_KEYMAP_BYTES || n > DPS_KEYMAP_MAX_CODES) return DPS_ERR_KEYMAP_KIND;
    uint64_t first = n ? dps_offset_at(offsets, offsets64, 0) : 0;
    if (n && first > data_len) {
        *bad_row = 0;
        return DPS_ERR_KEYMAP_OFFSETS;
    }
    var_source source = {validity, validity_offset, offsets, offsets64, data, data_len, first};
    return encode_rows(m, n, 0, fill_var, &source, codes, new_rows, n_new, bad_row);
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
