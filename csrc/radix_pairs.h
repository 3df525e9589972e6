/* Distinct (user, partition) pairs of one in-memory input, grouped by user through radix
 * buckets, for integer privacy units (docs/rows.md, "What happens to the rows").
 *
 * The streaming path (count_pairset.h) gives every user a dense code in a hash map and puts every
 * row into a hash set of pairs: two random accesses per row into tables far larger than the
 * caches. When the whole input is in memory, and the privacy units are integers, this is
 * cheaper: every row is copied once, sequentially, into the bucket of its user (the top bits of
 * a hash of the user's value), so that all rows of a user land in one bucket of about 16,000
 * rows; each bucket is then deduplicated and grouped by user in tables that stay in the L2
 * cache. No user ever gets a global code. The price is memory proportional to the rows (12
 * bytes a row while grouping), which is why only an input already held in memory comes here.
 *
 * Steps, each called by the binding in order (dpselect/_count.pyx, RadixPairs):
 * 1. dps_radix_count, on every piece of the users column in row order: rows per bucket.
 * 2. dps_radix_layout: each bucket's place in the scatter arrays (12 bytes a row).
 * 3. dps_radix_scatter_users, on every piece again in row order: each row's user hash is
 *    appended to its bucket (so a bucket's rows stay in row order), and the caller gets the place
 *    it took; dps_radix_scatter_codes puts each row's partition code at that place. The two may
 *    run at once on two threads (the users side needs no partition code, so it can run ahead of
 *    the key encoding; the codes side follows it piece by piece). Or, without the places (8
 *    bytes a row in flight), dps_radix_scatter_user_codes reads the users of each piece again
 *    and puts its codes where the users went: the k-th row of a bucket, in row order, lands at
 *    the bucket's start + k on both sides, so each side keeps its own cursors and neither waits
 *    for the other (only for the layout).
 * 4. dps_radix_group, on disjoint ranges of buckets (two threads may run at once): within each
 *    bucket, users get local numbers in order of first appearance, duplicate pairs are dropped,
 *    and the distinct pairs are grouped by user, each user's partitions in order of first
 *    appearance.
 * 5. dps_radix_compact: one array of partition codes, user after user (bucket by bucket), and
 *    one end offset per user, moved in place to the start of the two scatter arrays, which then
 *    shrink to them.
 * 6. dps_radix_bound (once per shard of the buckets) or the caller reads the groups.
 *
 * Determinism: which bucket a user falls in is an unseeded function of its value (murmur3's
 * finaliser, a bijection), so the order in which users are visited, and with the package's
 * deterministic test generator every draw, depends only on the data, never on a seed. Slots
 * inside a bucket's tables are seeded (a random seed per input), so values crafted to collide
 * cannot build long probe chains; values crafted to share a bucket only make that bucket large
 * (its tables then outgrow the cache: slower, still exact and linear).
 * Plain C11, no Python headers. */
#ifndef DPS_RADIX_PAIRS_H
#define DPS_RADIX_PAIRS_H

#include <stddef.h>
#include <stdint.h>

#include "csprng.h"

#define DPS_RADIX_MAX_BITS 12 /* at most 4096 buckets: the scatter's write streams stay few */

enum dps_radix_stage {
    DPS_RADIX_COUNTING = 0,
    DPS_RADIX_SCATTERING = 1,
    DPS_RADIX_GROUPING = 2,
    DPS_RADIX_COMPACT = 3,
    DPS_RADIX_CONSUMED = 4
};

typedef struct dps_radix_pairs {
    int stage;
    size_t n_rows;        /* rows announced at init: counted and scattered must both reach it */
    unsigned bits;        /* log2 of the number of buckets */
    size_t n_buckets;
    uint64_t seed;        /* slot positions inside a bucket's tables; never visible in results */
    size_t counted, users_scattered, codes_scattered;
    int broken;           /* a layout failed half-way: no later step may run */
    int users_broken;     /* a scatter of users failed half-way: likewise (its own flag: the
                           * codes side may run at the same time on another thread) */
    int codes_broken;     /* a scatter of codes by user failed half-way: likewise */
    int codes_mode;       /* 0 until the first code is scattered, then 1 (places) or 2 (by user):
                           * the two ways cannot be mixed */
    int pieces;           /* laid out by dps_radix_layout_pieces: only dps_radix_scatter_piece
                           * scatters (its counters and flags are updated atomically) */
    size_t *start;        /* n_buckets + 1: rows per bucket, then where each bucket starts */
    size_t *cursor;       /* n_buckets: next free row of each bucket while scattering */
    size_t *code_cursor;  /* n_buckets: the same for dps_radix_scatter_user_codes */
    uint64_t *hashes;     /* n_rows: each row's user hash (a bijection of the value), bucket by
                           * bucket; after compaction, the users' ends */
    uint32_t *codes;      /* n_rows: partition codes, bucket by bucket; after grouping, each
                           * bucket's distinct pairs user by user at its start; after compaction,
                           * every user's */
    size_t *bucket_pairs; /* n_buckets: distinct pairs of each bucket (SIZE_MAX until grouped) */
    size_t *bucket_users; /* n_buckets: distinct users of each bucket */
    /* after compaction */
    size_t n_pairs, n_users;
    uint32_t *partitions; /* n_pairs partition codes, user by user (= codes) */
    uint64_t *ends;       /* n_users: end of each user's run in partitions (= hashes) */
    size_t *bucket_user_start; /* n_buckets + 1: first user of each bucket */
} dps_radix_pairs;

/* An empty grouping for n_rows rows (the number of buckets follows from it). */
int dps_radix_init(dps_radix_pairs *r, size_t n_rows, uint64_t seed);
void dps_radix_free(dps_radix_pairs *r);

/* Step 1: count n user values of `width` bytes (1, 2, 4 or 8; compared as zero-extended words). */
int dps_radix_count(dps_radix_pairs *r, const uint8_t *values, size_t width, size_t n);

/* Step 2: after every row was counted (else DPS_ERR_RADIX_STAGE). */
int dps_radix_layout(dps_radix_pairs *r);

/* Step 3a: the same values again, in the same order; places[i] receives where row i went
 * (places may be NULL when the codes go through dps_radix_scatter_user_codes). */
int dps_radix_scatter_users(dps_radix_pairs *r, const uint8_t *values, size_t width, size_t n, uint64_t *places);

/* Step 3b: each row's partition code at its place (each place < n_rows, else DPS_ERR_BAD_ARG).
 * May run while dps_radix_scatter_users runs on another thread. */
int dps_radix_scatter_codes(dps_radix_pairs *r, const uint64_t *places, const uint32_t *codes, size_t n);

/* Step 3b without places: the n user values of a piece (the same values, in the same order, as
 * dps_radix_count and dps_radix_scatter_users were given) with each row's partition code, put
 * where that row's user went. May run while dps_radix_scatter_users runs on another thread, and
 * ahead of it. Not to be mixed with dps_radix_scatter_codes on one grouping. */
int dps_radix_scatter_user_codes(dps_radix_pairs *r, const uint8_t *values, size_t width, const uint32_t *codes,
                                 size_t n);

/* Step 1-3 split into pieces, for several threads (instead of dps_radix_count, dps_radix_layout,
 * dps_radix_scatter_users and dps_radix_scatter_user_codes; not to be mixed with them):
 * dps_radix_count_piece adds the bucket of each of the n values to hist[0 .. n_buckets) (the
 * piece's own histogram: calls on different pieces may run at once, the grouping is only read);
 * dps_radix_layout_pieces, once every piece was counted, lays out the buckets from the n_pieces
 * histograms (hist[p * n_buckets + b], pieces in row order) and turns each into its piece's
 * first place in every bucket; then dps_radix_scatter_piece puts a piece's user hashes (codes
 * NULL) or its partition codes (the same values again, with codes) at those places, from `from`
 * (its piece's row of hist) up to `to` (the next piece's row; NULL for the last piece), which it
 * must fill exactly. Pieces, and the two sides of a piece, may be scattered at once on any
 * threads and in any order: each row still lands where a scatter in row order would put it. */
int dps_radix_count_piece(const dps_radix_pairs *r, const uint8_t *values, size_t width, size_t n, size_t *hist);
int dps_radix_layout_pieces(dps_radix_pairs *r, size_t *hist, size_t n_pieces);
int dps_radix_scatter_piece(dps_radix_pairs *r, const uint8_t *values, size_t width, size_t n, const size_t *from,
                            const size_t *to, const uint32_t *codes);

/* Step 4: group buckets [first, last). Calls on disjoint ranges may run at once on two threads
 * once every row's user and code were scattered (dps_radix_ready). Any number of threads may
 * group disjoint ranges at once. */
int dps_radix_ready(dps_radix_pairs *r);
int dps_radix_group(dps_radix_pairs *r, size_t first, size_t last);

/* Step 5: after every bucket was grouped (else DPS_ERR_RADIX_STAGE). */
int dps_radix_compact(dps_radix_pairs *r);

/* The users of buckets [shard * n_buckets / n_shards, (shard + 1) * n_buckets / n_shards):
 * [*first_user, *last_user). */
void dps_radix_shard_users(const dps_radix_pairs *r, size_t shard, size_t n_shards, size_t *first_user,
                           size_t *last_user);

/* Step 6: bound users [first_user, last_user) to kappa (>= 1) partitions each, a uniform subset
 * drawn with s (partial Fisher–Yates, subset.h), and add each kept pair to counts, saturating
 * at cap (0: no cap). Reorders the runs it visits (calls on disjoint user ranges may run at
 * once). Every partition code must be < n_partitions (else DPS_ERR_BAD_CODE). `shared`: other
 * threads add to the same counts at the same time, so each addition is atomic (a saturating
 * compare-and-swap: the final counts are min(cap, total) whatever the interleaving). */
int dps_radix_bound(dps_radix_pairs *r, dps_rng *s, size_t first_user, size_t last_user, uint64_t kappa,
                    uint64_t cap, int64_t *counts, size_t n_partitions, int shared);

size_t dps_radix_bytes(const dps_radix_pairs *r);

#define DPS_ERR_RADIX_STAGE (-40) /* a step called out of order, or rows that do not add up */
#define DPS_ERR_RADIX_LARGE (-41) /* a bucket of 2^32 - 1 rows or more (local numbers are 32-bit) */

#endif
