/* First-appearance codes of one column on several threads; see key_shards.h. */
#include "key_shards.h"

#include <stdlib.h>
#include <string.h>

#include "bigalloc.h"
#include "csprng.h" /* status codes */
#include "hashing.h"
#include "keymap.h" /* DPS_KEYMAP_MAX_CODES, DPS_ERR_KEYMAP_FULL */

#define SHARD_BITS 8 /* DPS_KEYSHARDS = 2^SHARD_BITS */

enum { STAGE_COUNT = 0, STAGE_SCATTER = 1, STAGE_RANK = 2 };

static inline int is_valid(const uint8_t *validity, size_t bit) {
    return validity == NULL || ((validity[bit >> 3] >> (bit & 7)) & 1);
}

static inline size_t shard_of(uint64_t value, uint64_t seed) {
    return (size_t)(dps_fmix64(value ^ seed) >> (64 - SHARD_BITS));
}

int dps_keyshards_init(dps_keyshards *ks, size_t n, size_t width, const uint8_t *values, const uint8_t *validity,
                       size_t validity_offset, size_t n_chunks, uint64_t seed) {
    memset(ks, 0, sizeof *ks);
    ks->null_row = SIZE_MAX;
    ks->null_code = DPS_KEYSHARDS_NO_CODE;
    if (n >= DPS_KEYMAP_MAX_CODES || (width != 1 && width != 2 && width != 4 && width != 8) || n_chunks == 0 ||
        n_chunks > n + 1 || (n && values == NULL))
        return DPS_ERR_KEYMAP_KIND;
    ks->n = n;
    ks->width = width;
    ks->n_chunks = n_chunks;
    ks->values = values;
    ks->validity = validity;
    ks->validity_offset = validity_offset;
    ks->seed = seed;
    ks->start = (size_t *)calloc(n_chunks * DPS_KEYSHARDS, sizeof(size_t));
    ks->first_null = (size_t *)malloc(n_chunks * sizeof(size_t));
    ks->marks = (size_t *)calloc(n_chunks, sizeof(size_t));
    if (ks->start == NULL || ks->first_null == NULL || ks->marks == NULL) {
        dps_keyshards_free(ks);
        return DPS_ERR_NOMEM;
    }
    return DPS_OK;
}

int dps_keyshards_init_var(dps_keyshards *ks, size_t n, const void *offsets, int offsets64, const uint8_t *data,
                           size_t data_len, const uint8_t *validity, size_t validity_offset, size_t n_chunks,
                           uint64_t seed) {
    /* the offsets stand for the values in the checks of init (NULL only when there are no rows) */
    int rc = dps_keyshards_init(ks, n, 1, (const uint8_t *)offsets, validity, validity_offset, n_chunks, seed);
    if (rc != DPS_OK) return rc;
    if (data == NULL && data_len != 0) {
        dps_keyshards_free(ks);
        return DPS_ERR_KEYMAP_KIND;
    }
    ks->values = NULL;
    ks->width = 0;
    ks->var = 1;
    ks->offsets = offsets;
    ks->offsets64 = offsets64 != 0;
    ks->data = data ? data : (const uint8_t *)""; /* no data: every value is empty */
    ks->data_len = data_len;
    ks->row_shard = (uint8_t *)malloc(n ? n : 1);
    ks->byte_start = (size_t *)calloc(n_chunks * DPS_KEYSHARDS, sizeof(size_t));
    ks->bad = (size_t *)malloc(n_chunks * sizeof(size_t));
    ks->bad_rc = (int *)calloc(n_chunks, sizeof(int));
    if (ks->row_shard == NULL || ks->byte_start == NULL || ks->bad == NULL || ks->bad_rc == NULL) {
        dps_keyshards_free(ks);
        return DPS_ERR_NOMEM;
    }
    for (size_t c = 0; c < n_chunks; c++) ks->bad[c] = SIZE_MAX;
    return DPS_OK;
}

void dps_keyshards_free(dps_keyshards *ks) {
    free(ks->row_shard);
    free(ks->byte_start);
    free(ks->bad);
    free(ks->bad_rc);
    free(ks->start);
    free(ks->first_null);
    free(ks->marks);
    dps_big_free(ks->rows);
    dps_big_free(ks->vals);
    for (size_t s = 0; s < DPS_KEYSHARDS; s++) free(ks->local_to_code[s]);
    if (ks->store != NULL) {
        /* past the layout, the encode may have put this batch's values in the maps: unless the
         * batch was committed, their codes are lost and the store must refuse later batches */
        if (ks->stage != STAGE_COUNT && !ks->committed) ks->store->broken = 1;
        ks->store->busy = 0;
    }
    memset(ks, 0, sizeof *ks);
    ks->null_row = SIZE_MAX;
    ks->null_code = DPS_KEYSHARDS_NO_CODE;
}

void dps_keyshards_chunk(const dps_keyshards *ks, size_t c, size_t *lo, size_t *hi) {
    /* n < 2^32 and n_chunks <= n + 1, so the products fit 64 bits */
    *lo = (size_t)((uint64_t)ks->n * c / ks->n_chunks);
    *hi = (size_t)((uint64_t)ks->n * (c + 1) / ks->n_chunks);
}

/* Phase 1 for one width: the shard of each non-null row, counted. Every field is read into a
 * local first, and the counts kept on the stack: Python's CFLAGS carry -fno-strict-aliasing, under
 * which a store through any pointer would make the compiler reload every field each row. */
static inline void count_rows(const dps_keyshards *ks, size_t lo, size_t hi, size_t width, size_t *out) {
    const uint8_t *restrict v = ks->values;
    const uint8_t *validity = ks->validity;
    size_t voff = ks->validity_offset;
    uint64_t seed = ks->seed;
    size_t hist[DPS_KEYSHARDS] = {0};
    if (validity == NULL) {
        for (size_t i = lo; i < hi; i++) hist[shard_of(dps_load_word(v + i * width, width), seed)]++;
    } else {
        for (size_t i = lo; i < hi; i++)
            if (is_valid(validity, voff + i)) hist[shard_of(dps_load_word(v + i * width, width), seed)]++;
    }
    memcpy(out, hist, sizeof hist);
}

static inline size_t shard_of_hash(uint64_t h) { return (size_t)(h >> (64 - SHARD_BITS)); }

#define LENGTH_BYTES 4 /* a copy's length, before its bytes */

/* Phase 1 for variable-length values: each row's offsets checked (within the data, not below the
 * one before; a null's too, as Arrow requires and keymap.c checks), each non-null row's shard
 * kept, its row and the bytes of its copy counted. The first bad row goes to *bad (*bad_rc the
 * reason) and stops the chunk before any read outside the data: the layout then refuses the
 * column. */
static void count_var(dps_keyshards *ks, size_t lo, size_t hi, size_t *out, size_t *bytes_out, size_t *bad,
                      int *bad_rc) {
    const void *offsets = ks->offsets;
    int offsets64 = ks->offsets64;
    const uint8_t *restrict data = ks->data;
    uint64_t data_len = ks->data_len;
    const uint8_t *validity = ks->validity;
    size_t voff = ks->validity_offset;
    uint64_t seed = ks->seed;
    uint8_t *restrict row_shard = ks->row_shard;
    size_t hist[DPS_KEYSHARDS] = {0}, bytes[DPS_KEYSHARDS] = {0};
    if (lo < hi) {
        uint64_t previous = dps_offset_at(offsets, offsets64, lo);
        if (previous > data_len) {
            *bad = lo; /* below row 0 only for chunk 0; else row lo - 1's end, reported by its chunk */
            *bad_rc = DPS_ERR_KEYMAP_OFFSETS;
            hi = lo;
        }
        for (size_t i = lo; i < hi; i++) {
            uint64_t end = dps_offset_at(offsets, offsets64, i + 1);
            if (end < previous || end > data_len) {
                *bad = i;
                *bad_rc = DPS_ERR_KEYMAP_OFFSETS;
                break;
            }
            if (is_valid(validity, voff + i)) {
                uint64_t len = end - previous;
                if (len >= 0xFFFFFFFFu) { /* its copy's length would not fit 4 bytes */
                    *bad = i;
                    *bad_rc = DPS_ERR_KEYMAP_LONG;
                    break;
                }
                size_t s = shard_of_hash(dps_hash_bytes(data + previous, (size_t)len, seed));
                row_shard[i] = (uint8_t)s;
                hist[s]++;
                bytes[s] += LENGTH_BYTES + (size_t)len; /* < data_len + 4 n in all: see layout */
            }
            previous = end;
        }
    }
    memcpy(out, hist, sizeof hist);
    memcpy(bytes_out, bytes, sizeof bytes);
}

int dps_keyshards_count(dps_keyshards *ks, size_t c, uint32_t *codes) {
    if (ks->stage != STAGE_COUNT || c >= ks->n_chunks) return DPS_ERR_KEYSHARDS_STAGE;
    size_t lo, hi;
    dps_keyshards_chunk(ks, c, &lo, &hi);
    size_t *hist = ks->start + c * DPS_KEYSHARDS;
    if (hi > lo) memset(codes + lo, 0, (hi - lo) * sizeof(uint32_t));
    ks->first_null[c] = SIZE_MAX;
    if (ks->validity != NULL)
        for (size_t i = lo; i < hi; i++)
            if (!is_valid(ks->validity, ks->validity_offset + i)) {
                ks->first_null[c] = i;
                break;
            }
    if (ks->var) {
        count_var(ks, lo, hi, hist, ks->byte_start + c * DPS_KEYSHARDS, &ks->bad[c], &ks->bad_rc[c]);
        return DPS_OK;
    }
    switch (ks->width) { /* one loop per width, so that each load is one instruction */
    case 8: count_rows(ks, lo, hi, 8, hist); break;
    case 4: count_rows(ks, lo, hi, 4, hist); break;
    case 2: count_rows(ks, lo, hi, 2, hist); break;
    default: count_rows(ks, lo, hi, 1, hist); break;
    }
    return DPS_OK;
}

int dps_keyshards_layout(dps_keyshards *ks, uint32_t *codes) {
    if (ks->stage != STAGE_COUNT) return DPS_ERR_KEYSHARDS_STAGE;
    /* Shard-major places: shard s's rows from chunk 0, then chunk 1, ... */
    size_t at = 0;
    for (size_t s = 0; s < DPS_KEYSHARDS; s++) {
        ks->shard_start[s] = at;
        for (size_t c = 0; c < ks->n_chunks; c++) {
            size_t count = ks->start[c * DPS_KEYSHARDS + s];
            ks->start[c * DPS_KEYSHARDS + s] = at;
            at += count;
        }
    }
    ks->shard_start[DPS_KEYSHARDS] = at;
    size_t arena_bytes = 0;
    if (ks->var) {
        /* the first bad row, whichever chunk found one first */
        size_t bad = SIZE_MAX;
        int bad_rc = DPS_OK;
        for (size_t c = 0; c < ks->n_chunks; c++)
            if (ks->bad[c] < bad) {
                bad = ks->bad[c];
                bad_rc = ks->bad_rc[c];
            }
        if (bad != SIZE_MAX) {
            ks->bad_row = bad;
            return bad_rc;
        }
        /* the copies' places, shard-major like the rows' */
        for (size_t s = 0; s < DPS_KEYSHARDS; s++)
            for (size_t c = 0; c < ks->n_chunks; c++) {
                size_t count = ks->byte_start[c * DPS_KEYSHARDS + s];
                ks->byte_start[c * DPS_KEYSHARDS + s] = arena_bytes;
                if (count > SIZE_MAX - arena_bytes) return DPS_ERR_NOMEM; /* only where size_t is 32 bits */
                arena_bytes += count;
            }
    }
    for (size_t c = 0; c < ks->n_chunks && ks->null_row == SIZE_MAX; c++) ks->null_row = ks->first_null[c];
    if (ks->null_row != SIZE_MAX) {
        if (ks->store != NULL && ks->store->null_code != DPS_KEYSHARDS_NO_CODE)
            ks->null_code = ks->store->null_code; /* an earlier batch's null: its code, no mark */
        else
            codes[ks->null_row] = 1; /* the null's first row, marked */
    }
    size_t places = at ? at : 1;
    /* Huge pages where the system gives them (bigalloc.h): the scatter writes two streams per shard
     * at once, which with 4 KiB pages would miss the TLB on most rows. */
    ks->rows = (uint32_t *)dps_big_alloc(places * sizeof(uint32_t), DPS_BIG_NO_FILL);
    ks->vals = (uint8_t *)dps_big_alloc(ks->var ? (arena_bytes ? arena_bytes : 1) : places * ks->width,
                                        DPS_BIG_NO_FILL);
    if (ks->rows == NULL || ks->vals == NULL) return DPS_ERR_NOMEM;
    ks->stage = STAGE_SCATTER;
    return DPS_OK;
}

static inline void scatter_rows(dps_keyshards *ks, size_t lo, size_t hi, size_t width, size_t *next) {
    const uint8_t *restrict v = ks->values;
    const uint8_t *validity = ks->validity;
    size_t voff = ks->validity_offset;
    uint64_t seed = ks->seed;
    uint32_t *restrict rows = ks->rows;
    uint8_t *restrict vals = ks->vals;
    for (size_t i = lo; i < hi; i++) {
        if (validity != NULL && !is_valid(validity, voff + i)) continue;
        uint64_t value = dps_load_word(v + i * width, width);
        size_t place = next[shard_of(value, seed)]++;
        rows[place] = (uint32_t)i;
        memcpy(vals + place * width, v + i * width, width);
    }
}

static void scatter_var(dps_keyshards *ks, size_t lo, size_t hi, size_t *next, size_t *next_byte) {
    const void *offsets = ks->offsets;
    int offsets64 = ks->offsets64;
    const uint8_t *restrict data = ks->data;
    const uint8_t *validity = ks->validity;
    size_t voff = ks->validity_offset;
    const uint8_t *restrict row_shard = ks->row_shard;
    uint32_t *restrict rows = ks->rows;
    uint8_t *restrict arena = ks->vals;
    uint64_t previous = lo < hi ? dps_offset_at(offsets, offsets64, lo) : 0;
    for (size_t i = lo; i < hi; i++) {
        uint64_t end = dps_offset_at(offsets, offsets64, i + 1); /* checked by the count */
        if (is_valid(validity, voff + i)) {
            size_t s = row_shard[i];
            uint32_t len = (uint32_t)(end - previous); /* < 2^32 - 1: checked by the count */
            uint8_t *copy = arena + next_byte[s];
            rows[next[s]++] = (uint32_t)i;
            memcpy(copy, &len, LENGTH_BYTES);
            memcpy(copy + LENGTH_BYTES, data + previous, len);
            next_byte[s] += LENGTH_BYTES + (size_t)len;
        }
        previous = end;
    }
}

int dps_keyshards_scatter(dps_keyshards *ks, size_t c) {
    if (ks->stage != STAGE_SCATTER || c >= ks->n_chunks) return DPS_ERR_KEYSHARDS_STAGE;
    size_t lo, hi, next[DPS_KEYSHARDS];
    dps_keyshards_chunk(ks, c, &lo, &hi);
    memcpy(next, ks->start + c * DPS_KEYSHARDS, sizeof next);
    if (ks->var) {
        size_t next_byte[DPS_KEYSHARDS];
        memcpy(next_byte, ks->byte_start + c * DPS_KEYSHARDS, sizeof next_byte);
        scatter_var(ks, lo, hi, next, next_byte);
        return DPS_OK;
    }
    switch (ks->width) {
    case 8: scatter_rows(ks, lo, hi, 8, next); break;
    case 4: scatter_rows(ks, lo, hi, 4, next); break;
    case 2: scatter_rows(ks, lo, hi, 2, next); break;
    default: scatter_rows(ks, lo, hi, 1, next); break;
    }
    return DPS_OK;
}

/* Shard s's local code -> code table and its length: the store's (codes continue across
 * batches), or the batch's own. */
static inline uint32_t *to_code_of(const dps_keyshards *ks, size_t s) {
    return ks->store != NULL ? ks->store->to_code[s] : ks->local_to_code[s];
}

int dps_keyshards_encode(dps_keyshards *ks, size_t s, uint32_t *codes) {
    if (ks->stage != STAGE_SCATTER || s >= DPS_KEYSHARDS) return DPS_ERR_KEYSHARDS_STAGE;
    size_t lo = ks->shard_start[s], hi = ks->shard_start[s + 1];
    dps_keystore *store = ks->store;
    int rc;
    size_t n_local;
    if (ks->var) {
        /* a store's map keeps its values; a batch's map reads the shard's copies, which start where
         * chunk 0's do */
        dps_var_map batch = {0};
        dps_var_map *m = store != NULL ? &store->vars[s] : &batch;
        rc = dps_var_map_encode(m, ks->vals, ks->byte_start[s], hi - lo, ks->rows + lo, codes, ks->seed,
                                store != NULL);
        n_local = m->size;
        dps_var_map_free(&batch);
    } else {
        dps_word_map batch = {NULL, 0, 0, dps_shard_map_seed(ks->seed, s)};
        dps_word_map *m = store != NULL ? &store->words[s] : &batch;
        rc = dps_word_map_encode(m, ks->vals + lo * ks->width, ks->width, hi - lo, ks->rows + lo, codes);
        n_local = m->size;
        dps_word_map_free(&batch);
    }
    if (rc != DPS_OK) return rc;
    ks->n_local[s] = n_local;
    if (store != NULL) {
        rc = dps_keystore_reserve(store, s, n_local);
    } else {
        ks->local_to_code[s] = (uint32_t *)malloc((n_local ? n_local : 1) * sizeof(uint32_t));
        rc = ks->local_to_code[s] == NULL ? DPS_ERR_NOMEM : DPS_OK;
    }
    ks->encoded[s] = rc == DPS_OK;
    return rc;
}

int dps_keyshards_rank_count(dps_keyshards *ks, size_t c, const uint32_t *codes) {
    if (ks->stage != STAGE_SCATTER || c >= ks->n_chunks) return DPS_ERR_KEYSHARDS_STAGE;
    size_t lo, hi, marked = 0;
    dps_keyshards_chunk(ks, c, &lo, &hi);
    for (size_t i = lo; i < hi; i++) marked += codes[i] != 0;
    ks->marks[c] = marked;
    return DPS_OK;
}

int dps_keyshards_rank_layout(dps_keyshards *ks) {
    if (ks->stage != STAGE_SCATTER) return DPS_ERR_KEYSHARDS_STAGE;
    for (size_t s = 0; s < DPS_KEYSHARDS; s++)
        if (!ks->encoded[s] && ks->shard_start[s + 1] > ks->shard_start[s])
            return DPS_ERR_KEYSHARDS_STAGE; /* a shard with rows was not encoded */
    size_t before = 0;
    for (size_t c = 0; c < ks->n_chunks; c++) {
        size_t marked = ks->marks[c];
        ks->marks[c] = before;
        before += marked;
    }
    /* a store's codes continue from the earlier batches' */
    size_t base = ks->store != NULL ? ks->store->n_codes : 0;
    if (before >= DPS_KEYMAP_MAX_CODES - base) return DPS_ERR_KEYMAP_FULL;
    for (size_t c = 0; c < ks->n_chunks; c++) ks->marks[c] += base;
    ks->base = base;
    ks->n_codes = before; /* <= n < DPS_KEYMAP_MAX_CODES */
    if (ks->store != NULL) ks->store->n_codes = base + before;
    dps_big_free(ks->vals); /* the values are read from the column again from here on */
    ks->vals = NULL;
    ks->stage = STAGE_RANK;
    return DPS_OK;
}

int dps_keyshards_rank(dps_keyshards *ks, size_t c, const uint32_t *codes, uint32_t *new_rows) {
    if (ks->stage != STAGE_RANK || c >= ks->n_chunks) return DPS_ERR_KEYSHARDS_STAGE;
    size_t lo, hi;
    dps_keyshards_chunk(ks, c, &lo, &hi);
    uint32_t code = (uint32_t)ks->marks[c];
    const uint8_t *v = ks->values;
    size_t width = ks->width;
    for (size_t i = lo; i < hi; i++) {
        if (codes[i] == 0) continue;
        if (i == ks->null_row) {
            ks->null_code = code;
            if (ks->store != NULL) ks->store->null_code = code;
        } else {
            size_t s = ks->var ? ks->row_shard[i] : shard_of(dps_load_word(v + i * width, width), ks->seed);
            size_t local = codes[i] - 1;
            if (local >= ks->n_local[s]) return DPS_ERR_KEYSHARDS_STAGE; /* cannot happen: encode marked it */
            to_code_of(ks, s)[local] = code;
        }
        new_rows[code++ - ks->base] = (uint32_t)i;
    }
    return DPS_OK;
}

int dps_keyshards_translate(dps_keyshards *ks, size_t s) {
    if (ks->stage != STAGE_RANK || s >= DPS_KEYSHARDS) return DPS_ERR_KEYSHARDS_STAGE;
    uint32_t *restrict places = ks->rows;
    const uint32_t *restrict to_code = to_code_of(ks, s);
    size_t n_local = ks->n_local[s];
    for (size_t k = ks->shard_start[s]; k < ks->shard_start[s + 1]; k++) {
        if (places[k] >= n_local) return DPS_ERR_KEYSHARDS_STAGE; /* translated twice */
        uint32_t code = to_code[places[k]];
        if (code == DPS_KEYSHARDS_NO_CODE) return DPS_ERR_KEYSHARDS_STAGE; /* a local code never ranked */
        places[k] = code;
    }
    return DPS_OK;
}

static inline void finish_rows(const dps_keyshards *ks, size_t lo, size_t hi, size_t width, size_t *next,
                               uint32_t *restrict codes) {
    const uint8_t *restrict v = ks->values;
    const uint8_t *validity = ks->validity;
    size_t voff = ks->validity_offset;
    uint64_t seed = ks->seed;
    uint32_t null_code = ks->null_code;
    const uint32_t *restrict by_place = ks->rows; /* codes, since translate */
    for (size_t i = lo; i < hi; i++) {
        if (validity != NULL && !is_valid(validity, voff + i)) {
            codes[i] = null_code;
            continue;
        }
        codes[i] = by_place[next[shard_of(dps_load_word(v + i * width, width), seed)]++];
    }
}

static void finish_var(const dps_keyshards *ks, size_t lo, size_t hi, size_t *next, uint32_t *restrict codes) {
    const uint8_t *validity = ks->validity;
    size_t voff = ks->validity_offset;
    const uint8_t *restrict row_shard = ks->row_shard;
    uint32_t null_code = ks->null_code;
    const uint32_t *restrict by_place = ks->rows;
    for (size_t i = lo; i < hi; i++)
        codes[i] = is_valid(validity, voff + i) ? by_place[next[row_shard[i]]++] : null_code;
}

int dps_keyshards_finish(dps_keyshards *ks, size_t c, uint32_t *codes) {
    if (ks->stage != STAGE_RANK || c >= ks->n_chunks) return DPS_ERR_KEYSHARDS_STAGE;
    size_t lo, hi, next[DPS_KEYSHARDS];
    dps_keyshards_chunk(ks, c, &lo, &hi);
    memcpy(next, ks->start + c * DPS_KEYSHARDS, sizeof next);
    if (ks->var) {
        finish_var(ks, lo, hi, next, codes);
        return DPS_OK;
    }
    switch (ks->width) {
    case 8: finish_rows(ks, lo, hi, 8, next, codes); break;
    case 4: finish_rows(ks, lo, hi, 4, next, codes); break;
    case 2: finish_rows(ks, lo, hi, 2, next, codes); break;
    default: finish_rows(ks, lo, hi, 1, next, codes); break;
    }
    return DPS_OK;
}

int dps_keyshards_attach(dps_keyshards *ks, dps_keystore *store) {
    if (ks->store != NULL || ks->stage != STAGE_COUNT) return DPS_ERR_KEYSHARDS_STAGE;
    if (store->broken) return DPS_ERR_KEYSTORE_BROKEN;
    if (store->busy || store->var != ks->var) return DPS_ERR_KEYSHARDS_STAGE;
    ks->store = store;
    ks->seed = store->seed; /* a value's shard and slot must be the same in every batch */
    store->busy = 1;
    return DPS_OK;
}

int dps_keyshards_commit(dps_keyshards *ks) {
    if (ks->stage != STAGE_RANK) return DPS_ERR_KEYSHARDS_STAGE;
    ks->committed = 1;
    return DPS_OK;
}

void dps_keyshards_fail(dps_keyshards *ks) {
    dps_keystore *store = ks->store;
    if (store == NULL) return;
    if (ks->stage != STAGE_COUNT) {
        store->broken = 1; /* other calls of the failed phase may still be running: stay attached */
        return;
    }
    store->busy = 0; /* nothing of this batch entered the store */
    ks->store = NULL;
}

int dps_keyshards_run(dps_keyshards *ks, uint32_t *codes, uint32_t *new_rows) {
    size_t chunks = ks->n_chunks;
    int rc = DPS_OK;
    for (size_t c = 0; c < chunks && rc == DPS_OK; c++) rc = dps_keyshards_count(ks, c, codes);
    if (rc == DPS_OK) rc = dps_keyshards_layout(ks, codes);
    for (size_t c = 0; c < chunks && rc == DPS_OK; c++) rc = dps_keyshards_scatter(ks, c);
    for (size_t s = 0; s < DPS_KEYSHARDS && rc == DPS_OK; s++) rc = dps_keyshards_encode(ks, s, codes);
    for (size_t c = 0; c < chunks && rc == DPS_OK; c++) rc = dps_keyshards_rank_count(ks, c, codes);
    if (rc == DPS_OK) rc = dps_keyshards_rank_layout(ks);
    for (size_t c = 0; c < chunks && rc == DPS_OK; c++) rc = dps_keyshards_rank(ks, c, codes, new_rows);
    for (size_t s = 0; s < DPS_KEYSHARDS && rc == DPS_OK; s++) rc = dps_keyshards_translate(ks, s);
    for (size_t c = 0; c < chunks && rc == DPS_OK; c++) rc = dps_keyshards_finish(ks, c, codes);
    if (rc == DPS_OK) rc = dps_keyshards_commit(ks);
    else dps_keyshards_fail(ks);
    return rc;
}
