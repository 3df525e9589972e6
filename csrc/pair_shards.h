/* Rows of (user, partition) codes scattered into a fixed number of user shards (docs/rows.md,
 * "Threads").
 *
 * The streaming rows path keeps its distinct pairs in 2^b pair sets, one per shard of the users
 * (shard = user code mod 2^b), so that any number of threads can fill and bound them at once,
 * each taking whole shards, and every user's pairs are in one set. The shards are fixed by the
 * codes alone, never by the thread count, so neither are the sets nor each shard's CSPRNG stream.
 * One pass over a piece's rows writes every row's pair, packed as count_pairset.h packs it (user
 * code >> b in the high half, partition code in the low half), into its shard's run of one array:
 * the threads then each read only their shards' runs, instead of every thread reading every row.
 * Plain C11, no Python headers. */
#ifndef DPS_PAIR_SHARDS_H
#define DPS_PAIR_SHARDS_H

#include <stddef.h>
#include <stdint.h>

/* Largest number of shard bits (2^12 shards). */
#define DPS_PAIR_SHARD_BITS_MAX 12u

/* Scatter rows (users[i], partitions[i]), i < n, into 2^shard_bits shards: on success keys[0 .. n)
 * holds shard 0's packed pairs, then shard 1's, ..., each shard's in row order, and
 * starts[s] .. starts[s + 1] is shard s's run (starts holds 2^shard_bits + 1 entries).
 * Every code must be < DPS_CODE_LIMIT: else nothing is written to keys, *bad_index is the first
 * offending row and DPS_ERR_BAD_CODE is returned. shard_bits > DPS_PAIR_SHARD_BITS_MAX:
 * DPS_ERR_BAD_ARG. */
int dps_pair_shards_scatter(const uint32_t *users, const uint32_t *partitions, size_t n, unsigned shard_bits,
                            uint64_t *keys, size_t *starts, size_t *bad_index);

/* The same split over threads, on ranges of rows: dps_pair_shards_count adds the rows [lo, hi) of
 * each shard to counts[0 .. 2^shard_bits) after checking their codes (as above: DPS_ERR_BAD_CODE,
 * *bad_index the first bad row of the range); dps_pair_shards_place writes each row's packed pair
 * at keys[cursors[its shard]++], refusing (DPS_ERR_BAD_ARG) to write at or past limits[shard]. With
 * cursors and limits from the prefix sums of every range's counts (shard after shard, ranges in
 * row order within a shard), the ranges may be placed at once and keys is what one scatter gives.
 * dps_pair_shards_scatter is these two on the whole piece. */
int dps_pair_shards_count(const uint32_t *users, const uint32_t *partitions, size_t lo, size_t hi,
                          unsigned shard_bits, size_t *counts, size_t *bad_index);
int dps_pair_shards_place(const uint32_t *users, const uint32_t *partitions, size_t lo, size_t hi,
                          unsigned shard_bits, size_t *cursors, const size_t *limits, uint64_t *keys);

#endif
