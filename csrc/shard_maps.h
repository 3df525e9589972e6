/* The code maps of one shard of a column's values (key_shards.h), and the store that keeps every
 * shard's map from one batch of rows to the next.
 *
 * key_shards.h codes a column on several threads by splitting its values into DPS_KEYSHARDS
 * shards by a seeded hash; each shard's values are coded by one small map, in the order of their
 * first rows. A map gives its shard's distinct values local codes 0, 1, 2, ... in order of first
 * appearance; key_shards.h then ranks the new values' first rows across the shards to turn local
 * codes into the column's codes.
 *
 * - dps_word_map: values of 1, 2, 4 or 8 bytes, compared as zero-extended 64-bit words;
 * - dps_var_map: variable-length values (a 4-byte length, then the bytes, as key_shards.c copies
 *   them), compared byte for byte. A map used for one batch only points at the batch's copies;
 *   a map kept in a store (`own`) copies each new value into bytes of its own, as the batch's
 *   copies are freed when the batch is done.
 *
 * The store (dps_keystore) is what makes the codes continue across batches, as keymap.h's single
 * map does: the shards' maps, each shard's table from local code to the column's code, the
 * number of codes given so far and the null's code. A batch coded with a store gives a value seen
 * in an earlier batch its earlier code and a new value the next code in order of first
 * appearance, exactly keymap.h's codes for the same batches. A batch that fails after its values
 * entered the maps (the encode phase) leaves codes half given: the store is then marked broken
 * and refuses every later batch. One batch at a time: a store is busy from the batch's attach
 * (dps_keyshards_attach) to its free.
 *
 * Linear probing at <= 2/3 load; the slot of a value is chosen by a seeded hash (a seed per shard
 * from the store's), never its code. Plain C11. */
#ifndef DPS_SHARD_MAPS_H
#define DPS_SHARD_MAPS_H

#include <stddef.h>
#include <stdint.h>

#define DPS_KEYSHARDS 256 /* shards of the values, whatever the threads */

/* A word map's slot: the value, its local code + 1 (0: empty). */
typedef struct dps_word_slot {
    uint64_t key;
    uint32_t code;
} dps_word_slot;

typedef struct dps_word_map {
    dps_word_slot *slots;
    size_t capacity, size; /* capacity 0 until the first value */
    uint64_t seed;
} dps_word_map;

/* A variable-length map's slot: the value's hash, where its copy lies (in the batch's copies, or
 * in the map's own bytes when it owns them), its local code + 1 (0: empty). */
typedef struct dps_var_slot {
    uint64_t hash;
    uint64_t copy;
    uint32_t code;
} dps_var_slot;

typedef struct dps_var_map {
    dps_var_slot *slots;
    size_t capacity, size;
    uint8_t *own; /* a map that owns its copies: each distinct value's length and bytes */
    size_t own_len, own_cap;
} dps_var_map;

/* Seed of shard s's word map, from the column's seed. */
uint64_t dps_shard_map_seed(uint64_t seed, size_t s);

void dps_word_map_free(dps_word_map *m);
void dps_var_map_free(dps_var_map *m);
size_t dps_word_map_bytes(const dps_word_map *m);
size_t dps_var_map_bytes(const dps_var_map *m);

/* Code n values of `width` bytes at vals[0 .. n * width): places[k] holds the row of value k on
 * entry and its local code on return; a value new to the map gets the next local code, and its
 * row is marked: codes[row] = local code + 1. */
int dps_word_map_encode(dps_word_map *m, const uint8_t *vals, size_t width, size_t n, uint32_t *places,
                        uint32_t *codes);

/* The same for n variable-length copies (a 4-byte length, then the bytes) read in order from
 * arena + at, hashed with `seed`. own == 0: the map points at the copies in `arena`, which must
 * outlive it; own != 0: it keeps a copy of each new value in its own bytes (a store's map). */
int dps_var_map_encode(dps_var_map *m, const uint8_t *arena, size_t at, size_t n, uint32_t *places,
                       uint32_t *codes, uint64_t seed, int own);

typedef struct dps_keystore {
    int var;       /* 0: word maps; 1: variable-length maps */
    uint64_t seed; /* places values in shards and slots, never codes */
    dps_word_map *words; /* DPS_KEYSHARDS of them, or NULL (var) */
    dps_var_map *vars;   /* DPS_KEYSHARDS of them, or NULL (not var) */
    uint32_t *to_code[DPS_KEYSHARDS]; /* shard s: local code -> the column's code */
    size_t to_code_cap[DPS_KEYSHARDS];
    size_t n_codes;     /* codes given so far (values and the null) */
    uint32_t null_code; /* 0xFFFFFFFF until a null is seen */
    int busy;           /* a batch is attached */
    int broken;         /* a batch failed after its values entered the maps */
} dps_keystore;

int dps_keystore_init(dps_keystore *st, int var, uint64_t seed);
void dps_keystore_free(dps_keystore *st);
size_t dps_keystore_bytes(const dps_keystore *st);
/* Room in shard s's table for the local codes its map holds (entries beyond the old ones are set
 * to 0xFFFFFFFF until a batch's rank gives them their code). */
int dps_keystore_reserve(dps_keystore *st, size_t s, size_t n_local);

#endif
