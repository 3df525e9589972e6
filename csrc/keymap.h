/* Dense codes for the values of one column, straight from Arrow buffers (docs/rows.md, "Speed").
 *
 * Counting distinct users per partition starts by turning every privacy unit and every key into
 * a small integer code. This map does it in one pass over the column's own memory: no copy, no
 * intermediate dictionary. Codes are 0, 1, 2, ... in order of first appearance, so they do not
 * depend on the hash function or its seed, and the map persists across batches (a streamed
 * file): a value seen in an earlier batch keeps its code.
 *
 * Two kinds of map:
 * - WORD: fixed-width values of 1, 2, 4 or 8 bytes (integers, dates, times, timestamps,
 *   durations, floats already normalised by the caller), compared as zero-extended 64-bit words;
 * - BYTES: variable-length values (Arrow string/binary with 32- or 64-bit offsets) or fixed-width
 *   values of any other width (decimals, fixed-size binary), compared byte for byte against a
 *   copy of each distinct value kept in an arena (a 4-byte length, then the bytes; a single value
 *   is limited to 4 GiB - 1).
 * A null (validity bit 0) is one value of its own: all nulls of a column share one code.
 *
 * Each call reports the rows where a new code appeared (`new_rows`, increasing), so the caller
 * can take the distinct values from its own array in code order.
 *
 * Open addressing with linear probing at <= 50 % load; the slot of a value is chosen by a seeded
 * hash (the seed is random per map, so crafted keys cannot aim at one probe chain). Rows are
 * taken in blocks: first every row's slot is prefetched, then (BYTES) the arena copy its slot
 * points to, then the rows are probed, so the cache misses of a block overlap instead of
 * following one another. Large tables ask for huge pages (bigalloc.h). Plain C11. */
#ifndef DPS_KEYMAP_H
#define DPS_KEYMAP_H

#include <stddef.h>
#include <stdint.h>

enum dps_keymap_kind { DPS_KEYMAP_WORD = 1, DPS_KEYMAP_BYTES = 2 };

typedef struct dps_keymap_slot {
    uint64_t key;  /* WORD: the value; BYTES: where its copy starts in the arena */
    uint32_t code; /* code + 1; 0 marks an empty slot */
    uint32_t tag;  /* BYTES: the high 32 bits of the value's hash, a cheap first comparison */
} dps_keymap_slot;

typedef struct dps_keymap {
    dps_keymap_slot *slots;
    size_t capacity; /* a power of two, or 0 before the first insert */
    unsigned bits;   /* log2(capacity) */
    size_t size;     /* distinct non-null values */
    uint64_t seed;
    int kind;
    uint32_t null_code; /* code of the null value, DPS_KEYMAP_NO_CODE until one is seen */
    uint32_t n_codes;   /* codes given so far (values + the null) */
    /* BYTES: a copy of every distinct value: 4-byte length (little endian), then the bytes */
    uint8_t *arena;
    size_t arena_len, arena_cap;
} dps_keymap;

#define DPS_KEYMAP_NO_CODE 0xFFFFFFFFu
#define DPS_KEYMAP_MAX_CODES 0xFFFFFFFFu /* codes are < this (the pair set's DPS_CODE_LIMIT) */

/* An empty map of the given kind; seed randomises slot positions only, never codes. */
int dps_keymap_init(dps_keymap *m, int kind, uint64_t seed);
void dps_keymap_free(dps_keymap *m);
size_t dps_keymap_bytes(const dps_keymap *m);

/* Encode n fixed-width values values[0 .. n) of `width` bytes (WORD: 1, 2, 4 or 8; BYTES: any
 * width >= 1). validity: Arrow validity bitmap read from bit `validity_offset` (NULL: no nulls);
 * all_null: every row is null (Arrow's null type, which has no buffers).
 * codes[i] receives row i's code; new_rows[0 .. *n_new) the rows where a code first appeared.
 * On DPS_ERR_KEYMAP_FULL (more than DPS_KEYMAP_MAX_CODES codes) nothing usable is returned. */
int dps_keymap_encode_fixed(dps_keymap *m, size_t n, const uint8_t *validity, size_t validity_offset,
                            int all_null, const uint8_t *values, size_t width, uint32_t *codes,
                            uint32_t *new_rows, size_t *n_new);

/* Encode n variable-length values (BYTES maps): value i is data[offsets[i] .. offsets[i + 1]),
 * offsets being n + 1 int32 (offsets64 == 0) or int64 entries. Offsets are checked: each within
 * [0, data_len] and not below the one before (else DPS_ERR_KEYMAP_OFFSETS with *bad_row). */
int dps_keymap_encode_var(dps_keymap *m, size_t n, const uint8_t *validity, size_t validity_offset,
                          const void *offsets, int offsets64, const uint8_t *data, size_t data_len,
                          uint32_t *codes, uint32_t *new_rows, size_t *n_new, size_t *bad_row);

/* First-appearance codes of the indices of an Arrow dictionary column (dictionary of dict_len
 * values; indices of index_width = 1, 2, 4 or 8 bytes, signed, from element validity_offset):
 * codes[i] is the code of row i's index, a null index having one code of its own, and
 * new_rows[0 .. *n_new) the rows where a code first appeared. A direct table replaces the hash:
 * slot_of holds dict_len entries, DPS_KEYMAP_NO_CODE for an index not seen yet; it, *next_code
 * and *null_code carry over between calls on batches that share one dictionary. An index
 * outside [0, dict_len) is DPS_ERR_KEYMAP_OFFSETS with *bad_row. The caller then encodes only
 * the values at new_rows, so unused dictionary values (a pandas categorical keeps the categories
 * of rows it no longer has) never become keys. */
int dps_dictionary_codes(size_t n, const uint8_t *validity, size_t validity_offset, const uint8_t *indices,
                         size_t index_width, size_t dict_len, uint32_t *slot_of, uint32_t *next_code,
                         uint32_t *null_code, uint32_t *codes, uint32_t *new_rows, size_t *n_new,
                         size_t *bad_row);

#define DPS_ERR_KEYMAP_FULL (-30)    /* more distinct values than 32-bit codes allow */
#define DPS_ERR_KEYMAP_OFFSETS (-31) /* Arrow offsets out of range or decreasing */
#define DPS_ERR_KEYMAP_KIND (-32)    /* wrong call or width for the map's kind */
#define DPS_ERR_KEYMAP_LONG (-33)    /* a single value of 4 GiB or more */

#endif
