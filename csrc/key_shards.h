/* First-appearance codes of one column on several threads (docs/rows.md, "Threads"): values of
 * 1, 2, 4 or 8 bytes, or variable-length values (Arrow string/binary, 32- or 64-bit offsets).
 *
 * keymap.h gives codes 0, 1, 2, ... in order of first appearance with one hash map, one row
 * after another: on a whole input that single pass was the one serial step of the rows path.
 * This unit gives exactly the same codes (same values, same order, so the output is the same for
 * any number of threads) in phases that each split into independent pieces, run by the caller's
 * threads (dpselect/_workers.py) one phase after another:
 *
 *   1. count (per chunk of rows): each row's shard, a seeded hash of its value taken into
 *      DPS_KEYSHARDS shards (a fixed number, whatever the threads), is counted per (chunk, shard);
 *      the chunk's codes are zeroed and its first null row noted.                   -> layout
 *   2. scatter (per chunk): every non-null row's index and value go to its shard's region, chunks
 *      in row order, so the rows of a shard are ascending.
 *   3. encode (per shard): a small map of the shard's own values (shard_maps.h; it fits a core's
 *      cache where the whole column's would not) gives local codes in order of first appearance
 *      within the shard, which is the order of the values' first rows; each value's first row is
 *      marked in `codes` (its local code + 1). The null's first row was marked by the layout.
 *   4. rank (per chunk, twice): the marks of each chunk are counted, then (after rank_layout has
 *      summed them in row order) numbered: the k-th marked row of the column gets code k, which
 *      is first-appearance order. Each shard's local code is so translated to its code, and
 *      new_rows[code] receives the row.
 *   5. translate (per shard): each place's local code becomes its code, through the shard's own
 *      small table (in cache, where one table of every shard would not be).
 *   6. finish (per chunk): codes[i] = the code at row i's place, read back from the shard regions
 *      in the order the scatter wrote them.
 *
 * Variable-length values (dps_keyshards_init_var) take the same phases. Their hash is keymap.c's
 * seeded hash of the bytes (hashing.h); the count also checks each row's offsets (monotone, within
 * the data) and keeps its shard (one byte a row), which the scatter, rank and finish read instead
 * of hashing the value again. The scatter copies each value (a 4-byte length, then the bytes)
 * into its shard's region, in row order like the rows, so that a shard's encode reads one small
 * region in order instead of the whole column at random; its map keeps the hash of each of its
 * values and where the first copy lies, and two values are one only when their bytes are equal.
 * A value of 4 GiB or more is refused (DPS_ERR_KEYMAP_LONG), as keymap.h refuses it.
 *
 * With a store (dps_keyshards_attach, shard_maps.h) the maps and the local-code tables persist
 * from one batch to the next and the codes continue: a streamed column is coded on every thread,
 * batch after batch, with keymap.h's codes.
 *
 * Memory: 4 bytes (row, then local code) plus the value's width per non-null row (strings: 1
 * byte per row, the shard, and 4 bytes plus the value's bytes per non-null row), freed by
 * dps_keyshards_free, beside the caller's codes; the maps grow with the distinct values of the
 * shard being encoded, one per thread at a time. The seed moves values between shards and slots,
 * never the codes. Plain C11. */
#ifndef DPS_KEY_SHARDS_H
#define DPS_KEY_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#include "shard_maps.h" /* DPS_KEYSHARDS, the store */


typedef struct dps_keyshards {
    size_t n, width, n_chunks;
    const uint8_t *values, *validity;
    size_t validity_offset;
    uint64_t seed;
    size_t *start;      /* n_chunks x DPS_KEYSHARDS: rows per (chunk, shard), then where they start */
    size_t *first_null; /* per chunk: its first null row, or SIZE_MAX */
    size_t *marks;      /* per chunk: marked rows, then the codes before the chunk */
    size_t shard_start[DPS_KEYSHARDS + 1];
    uint32_t *rows;     /* by place: the row, then its local code (encode), then its code (translate) */
    uint8_t *vals;      /* by place: the value (width bytes) */
    uint32_t *local_to_code[DPS_KEYSHARDS];
    size_t n_local[DPS_KEYSHARDS];
    size_t null_row;    /* first null row, or SIZE_MAX */
    uint32_t null_code; /* DPS_KEYSHARDS_NO_CODE when the column has no null */
    size_t n_codes;
    int stage;
    /* variable-length values: value i is data[offsets[i] .. offsets[i + 1]) */
    int var, offsets64;
    const void *offsets;
    const uint8_t *data;
    size_t data_len;
    uint8_t *row_shard; /* per row: its value's shard (count), for the later phases */
    size_t *byte_start; /* n_chunks x DPS_KEYSHARDS: copy bytes per (chunk, shard), then where they start */
    size_t *bad;        /* per chunk: its first row with bad offsets or too long a value, or SIZE_MAX */
    int *bad_rc;        /* per chunk: DPS_ERR_KEYMAP_OFFSETS or DPS_ERR_KEYMAP_LONG for that row */
    size_t bad_row;     /* after an error from layout: the row it names */
    /* codes that continue across batches (dps_keyshards_attach), or NULL */
    dps_keystore *store;
    size_t base;        /* the codes given before this batch (the store's) */
    uint8_t encoded[DPS_KEYSHARDS]; /* shard s went through the encode */
    int committed;
} dps_keyshards;

#define DPS_KEYSHARDS_NO_CODE 0xFFFFFFFFu

/* n rows of width bytes (1, 2, 4 or 8) at `values`, nulls from the Arrow validity bitmap (NULL:
 * none) read from bit validity_offset; n_chunks pieces of rows (chunk c is rows
 * [n c / n_chunks, n (c + 1) / n_chunks)). n < DPS_KEYMAP_MAX_CODES. The buffers must outlive ks. */
int dps_keyshards_init(dps_keyshards *ks, size_t n, size_t width, const uint8_t *values, const uint8_t *validity,
                       size_t validity_offset, size_t n_chunks, uint64_t seed);
/* n variable-length values: value i is data[offsets[i] .. offsets[i + 1]) (data_len bytes of data;
 * data may be NULL when data_len is 0), offsets being n + 1 int32 (offsets64 == 0) or int64
 * entries from the caller's first one; validity as above. The offsets are checked by the count:
 * each within [0, data_len] and not below the one before, else layout returns
 * DPS_ERR_KEYMAP_OFFSETS with ks->bad_row the first bad row (as keymap.h's *bad_row); a value of
 * 4 GiB or more makes it return DPS_ERR_KEYMAP_LONG. */
int dps_keyshards_init_var(dps_keyshards *ks, size_t n, const void *offsets, int offsets64, const uint8_t *data,
                           size_t data_len, const uint8_t *validity, size_t validity_offset, size_t n_chunks,
                           uint64_t seed);
void dps_keyshards_free(dps_keyshards *ks);
void dps_keyshards_chunk(const dps_keyshards *ks, size_t c, size_t *lo, size_t *hi);

/* The phases, in this order; calls of one phase on different chunks (or shards) may run at once.
 * `codes` is the caller's array of n codes, the same in every call. */
int dps_keyshards_count(dps_keyshards *ks, size_t c, uint32_t *codes);
int dps_keyshards_layout(dps_keyshards *ks, uint32_t *codes);
int dps_keyshards_scatter(dps_keyshards *ks, size_t c);
int dps_keyshards_encode(dps_keyshards *ks, size_t s, uint32_t *codes);
int dps_keyshards_rank_count(dps_keyshards *ks, size_t c, const uint32_t *codes);
int dps_keyshards_rank_layout(dps_keyshards *ks); /* then ks->n_codes is the number of codes */
/* new_rows: n_codes entries, new_rows[k] the first row of code k. */
int dps_keyshards_rank(dps_keyshards *ks, size_t c, const uint32_t *codes, uint32_t *new_rows);
int dps_keyshards_translate(dps_keyshards *ks, size_t s);
int dps_keyshards_finish(dps_keyshards *ks, size_t c, uint32_t *codes);

/* Codes that continue those of earlier batches: attach the store (shard_maps.h) after init and
 * before the count. Every phase then uses the store's maps and tables: a value an earlier batch
 * coded keeps its code, a new one gets the next (store->n_codes before this batch, ks->base, plus
 * its rank among this batch's new values), so new_rows[k] is the first row of code base + k and
 * ks->n_codes the number of new codes. Commit after the finish: freeing a batch past its layout
 * without a commit marks the store broken (dps_keyshards_attach then returns
 * DPS_ERR_KEYSTORE_BROKEN). The store must outlive ks; one batch at a time. */
int dps_keyshards_attach(dps_keyshards *ks, dps_keystore *store);
int dps_keyshards_commit(dps_keyshards *ks);
/* After a phase failed: the store is released when nothing of this batch entered it (the count or
 * the layout failed), else marked broken (other calls of the failed phase may still be running,
 * so ks stays attached until freed). */
void dps_keyshards_fail(dps_keyshards *ks);

/* Every phase in order on this thread, then the commit: for small batches, where the phases'
 * handing-out costs more than it saves. new_rows: room for n entries. */
int dps_keyshards_run(dps_keyshards *ks, uint32_t *codes, uint32_t *new_rows);

#define DPS_ERR_KEYSHARDS_STAGE (-34) /* a phase called out of order, or a bad chunk or shard */
#define DPS_ERR_KEYSTORE_BROKEN (-35) /* an earlier batch failed midway: the store's codes are incomplete */

#endif
