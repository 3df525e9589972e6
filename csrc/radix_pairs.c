/* Distinct (user, partition) pairs of one in-memory input, grouped by user; see radix_pairs.h. */
#include "radix_pairs.h"

#include <stdlib.h>
#include <string.h>

#include "atomics.h"
#include "bigalloc.h"
#include "count.h" /* DPS_ERR_BAD_CODE, DPS_ERR_BAD_ARG */
#include "hashing.h"
#include "subset.h"

/* Rows per bucket the number of buckets aims at (up to DPS_RADIX_MAX_BITS). A bucket's working
 * set is then about 12 bytes per row (its rows, their user numbers, the rows sorted by user)
 * plus 16 bytes per user slot: some 200 KiB, inside the L2 cache. Fewer, larger buckets would
 * leave it; more buckets make the scatter write to more places at once (measured on the 2-core
 * EPYC: 4096 rows a bucket cost more in the scatter than they saved in the grouping). */
#define TARGET_ROWS ((size_t)16384)
#define NOT_GROUPED SIZE_MAX
#define NO_USER UINT32_MAX

/* A bucket's user ends are kept in its part of the hashes array once its hashes are read; they
 * go through memcpy, as the memory held 64-bit words before. */
static inline void put_end(uint64_t *region, size_t u, uint32_t end) { memcpy((uint8_t *)region + u * 4, &end, 4); }

static inline uint32_t get_end(const uint64_t *region, size_t u) {
    uint32_t end;
    memcpy(&end, (const uint8_t *)region + u * 4, 4);
    return end;
}

static inline size_t bucket_of(uint64_t h, unsigned bits) { return bits ? (size_t)(h >> (64 - bits)) : 0; }

int dps_radix_init(dps_radix_pairs *r, size_t n_rows, uint64_t seed) {
    memset(r, 0, sizeof *r);
    r->stage = DPS_RADIX_COUNTING;
    r->n_rows = n_rows;
    r->seed = seed;
    unsigned bits = 0;
    while (bits < DPS_RADIX_MAX_BITS && (n_rows >> bits) > TARGET_ROWS) bits++;
    r->bits = bits;
    r->n_buckets = (size_t)1 << bits;
    r->start = (size_t *)calloc(r->n_buckets + 1, sizeof(size_t));
    if (r->start == NULL) return DPS_ERR_NOMEM;
    return DPS_OK;
}

void dps_radix_free(dps_radix_pairs *r) {
    free(r->start);
    free(r->cursor);
    free(r->code_cursor);
    free(r->bucket_pairs);
    free(r->bucket_users);
    free(r->bucket_user_start);
    dps_big_free(r->hashes); /* after compaction, the ends and the partitions */
    dps_big_free(r->codes);
    memset(r, 0, sizeof *r);
    r->stage = DPS_RADIX_CONSUMED;
}

size_t dps_radix_bytes(const dps_radix_pairs *r) {
    size_t bytes = 0;
    if (r->stage == DPS_RADIX_COMPACT)
        bytes += r->n_users * sizeof(uint64_t) + r->n_pairs * sizeof(uint32_t);
    else if (r->hashes != NULL)
        bytes += r->n_rows * (sizeof(uint64_t) + sizeof(uint32_t));
    if (r->start != NULL) bytes += (r->n_buckets + 1) * sizeof(size_t);
    if (r->cursor != NULL) bytes += r->n_buckets * sizeof(size_t);
    if (r->code_cursor != NULL) bytes += r->n_buckets * sizeof(size_t);
    if (r->bucket_pairs != NULL) bytes += r->n_buckets * sizeof(size_t) * 2;
    if (r->bucket_user_start != NULL) bytes += (r->n_buckets + 1) * sizeof(size_t);
    return bytes;
}

static inline void count_rows(size_t *count, unsigned bits, const uint8_t *values, size_t width, size_t n) {
    for (size_t i = 0; i < n; i++) count[bucket_of(dps_fmix64(dps_load_word(values + i * width, width)), bits)]++;
}

int dps_radix_count(dps_radix_pairs *r, const uint8_t *values, size_t width, size_t n) {
    if (r->broken || r->stage != DPS_RADIX_COUNTING || n > r->n_rows - r->counted) return DPS_ERR_RADIX_STAGE;
    size_t *count = r->start + 1; /* count[b] rows of bucket b; the prefix sum makes them starts */
    switch (width) { /* one loop per width, so that each load is one instruction */
    case 8: count_rows(count, r->bits, values, 8, n); break;
    case 4: count_rows(count, r->bits, values, 4, n); break;
    case 2: count_rows(count, r->bits, values, 2, n); break;
    case 1: count_rows(count, r->bits, values, 1, n); break;
    default: return DPS_ERR_BAD_ARG;
    }
    r->counted += n;
    return DPS_OK;
}

int dps_radix_layout(dps_radix_pairs *r) {
    if (r->broken || r->stage != DPS_RADIX_COUNTING || r->counted != r->n_rows) return DPS_ERR_RADIX_STAGE;
    r->broken = 1; /* until the layout is complete: a failed one cannot be tried again */
    for (size_t b = 0; b < r->n_buckets; b++) {
        if (r->start[b + 1] >= (size_t)NO_USER) return DPS_ERR_RADIX_LARGE;
        r->start[b + 1] += r->start[b];
    }
    size_t rows = r->n_rows ? r->n_rows : 1;
    if (rows > SIZE_MAX / sizeof(uint64_t)) return DPS_ERR_NOMEM;
    r->cursor = (size_t *)malloc(r->n_buckets * sizeof(size_t));
    r->code_cursor = (size_t *)malloc(r->n_buckets * sizeof(size_t));
    r->bucket_pairs = (size_t *)malloc(r->n_buckets * sizeof(size_t));
    r->bucket_users = (size_t *)calloc(r->n_buckets, sizeof(size_t));
    /* Written before being read, so not filled: each page is mapped by its first write. Huge
     * pages (a hint) keep the scatter's thousands of write positions within the TLB. */
    r->hashes = (uint64_t *)dps_big_alloc(rows * sizeof(uint64_t), DPS_BIG_NO_FILL);
    r->codes = (uint32_t *)dps_big_alloc(rows * sizeof(uint32_t), DPS_BIG_NO_FILL);
    if (r->cursor == NULL || r->code_cursor == NULL || r->bucket_pairs == NULL || r->bucket_users == NULL ||
        r->hashes == NULL || r->codes == NULL)
        return DPS_ERR_NOMEM;
    memcpy(r->cursor, r->start, r->n_buckets * sizeof(size_t));
    memcpy(r->code_cursor, r->start, r->n_buckets * sizeof(size_t));
    for (size_t b = 0; b < r->n_buckets; b++) r->bucket_pairs[b] = NOT_GROUPED;
    r->broken = 0;
    r->stage = DPS_RADIX_SCATTERING;
    return DPS_OK;
}

static inline int scatter_users(dps_radix_pairs *r, const uint8_t *values, size_t width, size_t n,
                                uint64_t *places) {
    unsigned bits = r->bits;
    size_t *cursor = r->cursor;
    const size_t *end = r->start + 1;
    uint64_t *hashes = r->hashes;
    for (size_t i = 0; i < n; i++) {
        uint64_t h = dps_fmix64(dps_load_word(values + i * width, width));
        size_t b = bucket_of(h, bits);
        size_t at = cursor[b];
        if (at == end[b]) return DPS_ERR_RADIX_STAGE; /* not the values that were counted */
        cursor[b] = at + 1;
        hashes[at] = h;
        if (places != NULL) places[i] = at;
    }
    return DPS_OK;
}

int dps_radix_scatter_users(dps_radix_pairs *r, const uint8_t *values, size_t width, size_t n, uint64_t *places) {
    if (r->pieces || r->broken || r->users_broken || r->stage != DPS_RADIX_SCATTERING || n > r->n_rows - r->users_scattered)
        return DPS_ERR_RADIX_STAGE;
    int rc;
    switch (width) { /* one loop per width, so that each load is one instruction */
    case 8: rc = scatter_users(r, values, 8, n, places); break;
    case 4: rc = scatter_users(r, values, 4, n, places); break;
    case 2: rc = scatter_users(r, values, 2, n, places); break;
    case 1: rc = scatter_users(r, values, 1, n, places); break;
    default: return DPS_ERR_BAD_ARG;
    }
    if (rc != DPS_OK) {
        /* Part of the rows went in: nothing after this is valid. A flag of this side's own, as
         * dps_radix_scatter_codes may be reading the other one on another thread. */
        r->users_broken = 1;
        return rc;
    }
    r->users_scattered += n;
    return DPS_OK;
}

int dps_radix_scatter_codes(dps_radix_pairs *r, const uint64_t *places, const uint32_t *codes, size_t n) {
    if (r->pieces || r->broken || r->stage != DPS_RADIX_SCATTERING || n > r->n_rows - r->codes_scattered ||
        r->codes_mode == 2)
        return DPS_ERR_RADIX_STAGE;
    r->codes_mode = 1;
    size_t rows = r->n_rows;
    for (size_t i = 0; i < n; i++) /* checked first: a bad place must not leave half a piece written */
        if (places[i] >= rows) return DPS_ERR_BAD_ARG;
    uint32_t *out = r->codes;
    for (size_t i = 0; i < n; i++) out[places[i]] = codes[i];
    r->codes_scattered += n;
    return DPS_OK;
}

static inline int scatter_user_codes(dps_radix_pairs *r, const uint8_t *values, size_t width,
                                     const uint32_t *codes, size_t n) {
    unsigned bits = r->bits;
    size_t *cursor = r->code_cursor;
    const size_t *end = r->start + 1;
    uint32_t *out = r->codes;
    for (size_t i = 0; i < n; i++) {
        size_t b = bucket_of(dps_fmix64(dps_load_word(values + i * width, width)), bits);
        size_t at = cursor[b];
        if (at == end[b]) return DPS_ERR_RADIX_STAGE; /* not the values that were counted */
        cursor[b] = at + 1;
        out[at] = codes[i];
    }
    return DPS_OK;
}

int dps_radix_scatter_user_codes(dps_radix_pairs *r, const uint8_t *values, size_t width, const uint32_t *codes,
                                 size_t n) {
    if (r->pieces || r->broken || r->codes_broken || r->stage != DPS_RADIX_SCATTERING ||
        n > r->n_rows - r->codes_scattered || r->codes_mode == 1)
        return DPS_ERR_RADIX_STAGE;
    r->codes_mode = 2;
    int rc;
    switch (width) { /* one loop per width, so that each load is one instruction */
    case 8: rc = scatter_user_codes(r, values, 8, codes, n); break;
    case 4: rc = scatter_user_codes(r, values, 4, codes, n); break;
    case 2: rc = scatter_user_codes(r, values, 2, codes, n); break;
    case 1: rc = scatter_user_codes(r, values, 1, codes, n); break;
    default: return DPS_ERR_BAD_ARG;
    }
    if (rc != DPS_OK) {
        r->codes_broken = 1; /* part of the piece went in: nothing after this is valid */
        return rc;
    }
    r->codes_scattered += n;
    return DPS_OK;
}

int dps_radix_count_piece(const dps_radix_pairs *r, const uint8_t *values, size_t width, size_t n, size_t *hist) {
    if (r->stage != DPS_RADIX_COUNTING || r->counted != 0) return DPS_ERR_RADIX_STAGE;
    switch (width) {
    case 8: count_rows(hist, r->bits, values, 8, n); break;
    case 4: count_rows(hist, r->bits, values, 4, n); break;
    case 2: count_rows(hist, r->bits, values, 2, n); break;
    case 1: count_rows(hist, r->bits, values, 1, n); break;
    default: return DPS_ERR_BAD_ARG;
    }
    return DPS_OK;
}

int dps_radix_layout_pieces(dps_radix_pairs *r, size_t *hist, size_t n_pieces) {
    if (r->broken || r->stage != DPS_RADIX_COUNTING || r->counted != 0) return DPS_ERR_RADIX_STAGE;
    size_t nb = r->n_buckets, total = 0;
    for (size_t p = 0; p < n_pieces; p++)
        for (size_t b = 0; b < nb; b++) {
            size_t c = hist[p * nb + b];
            if (c > r->n_rows - total) return DPS_ERR_RADIX_STAGE; /* more rows than announced */
            total += c;
            r->start[b + 1] += c;
        }
    if (total != r->n_rows) return DPS_ERR_RADIX_STAGE;
    r->counted = total;
    int rc = dps_radix_layout(r);
    if (rc != DPS_OK) return rc;
    /* Each piece's histogram becomes its first place in every bucket: the bucket's start plus
     * the rows of the earlier pieces there, which is where a scatter in row order would put it. */
    for (size_t b = 0; b < nb; b++) {
        size_t at = r->start[b];
        for (size_t p = 0; p < n_pieces; p++) {
            size_t c = hist[p * nb + b];
            hist[p * nb + b] = at;
            at += c;
        }
    }
    r->pieces = 1;
    return DPS_OK;
}

static inline int scatter_piece(dps_radix_pairs *r, const uint8_t *values, size_t width, size_t n, size_t *cursor,
                                const size_t *to, const uint32_t *codes) {
    unsigned bits = r->bits;
    for (size_t i = 0; i < n; i++) {
        uint64_t h = dps_fmix64(dps_load_word(values + i * width, width));
        size_t b = bucket_of(h, bits);
        size_t at = cursor[b];
        if (at == to[b]) return DPS_ERR_RADIX_STAGE; /* not the values that were counted */
        cursor[b] = at + 1;
        if (codes != NULL) r->codes[at] = codes[i];
        else r->hashes[at] = h;
    }
    return DPS_OK;
}

int dps_radix_scatter_piece(dps_radix_pairs *r, const uint8_t *values, size_t width, size_t n, const size_t *from,
                            const size_t *to, const uint32_t *codes) {
    if (!r->pieces || r->broken || r->stage != DPS_RADIX_SCATTERING) return DPS_ERR_RADIX_STAGE;
    if (width != 1 && width != 2 && width != 4 && width != 8) return DPS_ERR_BAD_ARG;
    size_t nb = r->n_buckets;
    const size_t *limit = to != NULL ? to : r->start + 1;
    for (size_t b = 0; b < nb; b++) /* places handed in must lie inside their bucket */
        if (from[b] < r->start[b] || from[b] > limit[b] || limit[b] > r->start[b + 1]) return DPS_ERR_BAD_ARG;
    size_t *cursor = (size_t *)malloc((nb ? nb : 1) * sizeof(size_t));
    if (cursor == NULL) return DPS_ERR_NOMEM;
    memcpy(cursor, from, nb * sizeof(size_t));
    int rc;
    switch (width) { /* one loop per width, so that each load is one instruction */
    case 8: rc = scatter_piece(r, values, 8, n, cursor, limit, codes); break;
    case 4: rc = scatter_piece(r, values, 4, n, cursor, limit, codes); break;
    case 2: rc = scatter_piece(r, values, 2, n, cursor, limit, codes); break;
    default: rc = scatter_piece(r, values, 1, n, cursor, limit, codes); break;
    }
    for (size_t b = 0; b < nb && rc == DPS_OK; b++) /* the piece's share of every bucket, exactly */
        if (cursor[b] != limit[b]) rc = DPS_ERR_RADIX_STAGE;
    free(cursor);
    if (rc != DPS_OK) {
        /* Part of the piece went in: nothing after this is valid (other threads may be
         * scattering other pieces: the flag and the counters are written atomically). */
        dps_atomic_set_int(codes != NULL ? &r->codes_broken : &r->users_broken, 1);
        return rc;
    }
    dps_atomic_add_size(codes != NULL ? &r->codes_scattered : &r->users_scattered, n);
    return DPS_OK;
}

int dps_radix_ready(dps_radix_pairs *r) {
    if (r->broken || r->users_broken || r->codes_broken || r->stage != DPS_RADIX_SCATTERING ||
        r->users_scattered != r->n_rows || r->codes_scattered != r->n_rows)
        return DPS_ERR_RADIX_STAGE;
    free(r->cursor);
    r->cursor = NULL;
    free(r->code_cursor);
    r->code_cursor = NULL;
    r->stage = DPS_RADIX_GROUPING;
    return DPS_OK;
}

/* Scratch space of one dps_radix_group call, reused from bucket to bucket. */
typedef struct scratch {
    struct user_slot { uint64_t hash; uint32_t local; uint32_t unused; } *users;
    size_t user_cap;      /* a power of two; grows with the bucket's users (most have few) */
    uint32_t *local;      /* per row of the bucket: its user's local number */
    uint32_t *run_start;  /* per local user: where its rows start in `sorted` (then its next row) */
    uint32_t *sorted;     /* the bucket's partition codes, user by user, in row order */
    uint32_t *seen;       /* a set of partition codes for one long run (UINT32_MAX: free) */
    size_t seen_cap;
} scratch;

/* Runs of at most this many rows are deduplicated by comparing each row with the partitions
 * kept so far (a few compares a row for the ten rows a user typically has); longer runs use
 * a hash set, so that a user with many rows costs linear time. */
#define SHORT_RUN 24

static unsigned log2_ceil(size_t x) {
    unsigned b = 0;
    while (((size_t)1 << b) < x) b++;
    return b;
}

static inline size_t slot_of(uint64_t key, uint64_t seed, size_t mask) {
    return (size_t)dps_fmix64(key ^ seed) & mask;
}

/* Rehash the first `old_cap` slots into a table of `cap` slots. */
static int grow_users(scratch *t, size_t old_cap, size_t cap, uint64_t seed) {
    struct user_slot *slots = (struct user_slot *)malloc(cap * sizeof *slots);
    if (slots == NULL) return DPS_ERR_NOMEM;
    for (size_t i = 0; i < cap; i++) slots[i].local = NO_USER;
    size_t mask = cap - 1;
    for (size_t i = 0; i < old_cap; i++) {
        if (t->users[i].local == NO_USER) continue;
        size_t j = slot_of(t->users[i].hash, seed, mask);
        while (slots[j].local != NO_USER) j = (j + 1) & mask;
        slots[j] = t->users[i];
    }
    free(t->users);
    t->users = slots;
    t->user_cap = cap;
    return DPS_OK;
}

/* Users of the rows, numbered in order of first appearance: local[i], and the rows per user in
 * run_start[u + 1]. Returns the number of users, or a negative status. */
static int64_t number_users(scratch *t, const uint64_t *hashes, size_t m, uint64_t seed) {
    /* The table starts with room for an eighth of the rows at half load (users have about ten
     * rows here, and what the cache must hold is the users) and doubles at half full. */
    size_t cap = (size_t)1 << log2_ceil(m / 4 + 16);
    if (t->user_cap < cap) {
        int rc = grow_users(t, 0, cap, seed);
        if (rc != DPS_OK) return rc;
    }
    for (size_t i = 0; i < cap; i++) t->users[i].local = NO_USER;
    size_t mask = cap - 1;
    uint32_t n_users = 0;
    uint32_t *rows_of = t->run_start + 1;
    for (size_t i = 0; i < m; i++) {
        uint64_t h = hashes[i];
        size_t j = slot_of(h, seed, mask);
        for (;;) {
            struct user_slot *s = &t->users[j];
            if (s->local == NO_USER) {
                s->hash = h;
                s->local = n_users;
                rows_of[n_users] = 1;
                t->local[i] = n_users++;
                if ((size_t)n_users * 2 > cap) {
                    int rc = grow_users(t, cap, cap * 2, seed);
                    if (rc != DPS_OK) return rc;
                    cap *= 2;
                    mask = cap - 1;
                }
                break;
            }
            if (s->hash == h) {
                uint32_t u = s->local;
                t->local[i] = u;
                rows_of[u]++;
                break;
            }
            j = (j + 1) & mask;
        }
    }
    return n_users;
}

/* Copy the distinct values of run[0 .. r) to out in order of first appearance; their number,
 * or SIZE_MAX when out of memory. */
static size_t dedupe_run(scratch *t, const uint32_t *run, size_t r, uint32_t *out, uint64_t seed) {
    if (r <= SHORT_RUN) {
        size_t k = 0;
        for (size_t i = 0; i < r; i++) {
            uint32_t v = run[i];
            size_t j = 0;
            while (j < k && out[j] != v) j++;
            if (j == k) out[k++] = v;
        }
        return k;
    }
    size_t cap = (size_t)1 << log2_ceil(2 * r);
    if (t->seen_cap < cap) {
        free(t->seen);
        t->seen = (uint32_t *)malloc(cap * sizeof(uint32_t));
        if (t->seen == NULL) {
            t->seen_cap = 0;
            return SIZE_MAX;
        }
        t->seen_cap = cap;
    }
    memset(t->seen, 0xFF, cap * sizeof(uint32_t));
    size_t mask = cap - 1, k = 0;
    for (size_t i = 0; i < r; i++) {
        uint32_t v = run[i];
        size_t j = slot_of(v, seed, mask);
        /* UINT32_MAX is never a code (codes are < DPS_CODE_LIMIT), so it marks a free slot */
        while (t->seen[j] != UINT32_MAX && t->seen[j] != v) j = (j + 1) & mask;
        if (t->seen[j] == UINT32_MAX) {
            t->seen[j] = v;
            out[k++] = v;
        }
    }
    return k;
}

/* Dedupe and group one bucket: see radix_pairs.h, step 4. */
static int group_bucket(dps_radix_pairs *r, scratch *t, size_t b) {
    size_t lo = r->start[b], m = r->start[b + 1] - lo;
    uint32_t *codes = r->codes + lo;
    int64_t users = number_users(t, r->hashes + lo, m, r->seed);
    if (users < 0) return (int)users;
    uint32_t n_users = (uint32_t)users;
    /* The rows user by user (a stable counting sort), then each user's run without repeats
     * into the bucket's own codes (every row has been read); each user's end goes where the
     * hashes were. */
    t->run_start[0] = 0;
    for (uint32_t u = 0; u < n_users; u++) t->run_start[u + 1] += t->run_start[u];
    for (size_t i = 0; i < m; i++) t->sorted[t->run_start[t->local[i]]++] = codes[i];
    uint64_t *ends = r->hashes + lo; /* room for 2m ends; n_users <= m of them are used */
    size_t out = 0, from = 0;
    for (uint32_t u = 0; u < n_users; u++) {
        size_t to = t->run_start[u]; /* now the end of user u's rows */
        size_t kept = dedupe_run(t, t->sorted + from, to - from, codes + out, r->seed);
        if (kept == SIZE_MAX) return DPS_ERR_NOMEM;
        out += kept;
        put_end(ends, u, (uint32_t)out);
        from = to;
    }
    r->bucket_users[b] = n_users;
    r->bucket_pairs[b] = out;
    return DPS_OK;
}

int dps_radix_group(dps_radix_pairs *r, size_t first, size_t last) {
    if (r->stage != DPS_RADIX_GROUPING) return DPS_ERR_RADIX_STAGE;
    if (first > last || last > r->n_buckets) return DPS_ERR_BAD_ARG;
    size_t largest = 0;
    for (size_t b = first; b < last; b++) {
        if (r->bucket_pairs[b] != NOT_GROUPED) return DPS_ERR_RADIX_STAGE;
        size_t m = r->start[b + 1] - r->start[b];
        if (m > largest) largest = m;
    }
    scratch t;
    memset(&t, 0, sizeof t);
    size_t rows = largest + 1;
    t.local = (uint32_t *)malloc(rows * sizeof(uint32_t));
    t.sorted = (uint32_t *)malloc(rows * sizeof(uint32_t));
    t.run_start = (uint32_t *)malloc((rows + 1) * sizeof(uint32_t));
    int rc = (t.local && t.sorted && t.run_start) ? DPS_OK : DPS_ERR_NOMEM;
    for (size_t b = first; b < last && rc == DPS_OK; b++)
        if (r->start[b + 1] > r->start[b]) rc = group_bucket(r, &t, b);
        else {
            r->bucket_users[b] = 0;
            r->bucket_pairs[b] = 0;
        }
    free(t.users);
    free(t.local);
    free(t.sorted);
    free(t.run_start);
    free(t.seen);
    return rc;
}

int dps_radix_compact(dps_radix_pairs *r) {
    if (r->stage != DPS_RADIX_GROUPING) return DPS_ERR_RADIX_STAGE;
    size_t n_pairs = 0, n_users = 0, most_users = 0;
    for (size_t b = 0; b < r->n_buckets; b++) {
        if (r->bucket_pairs[b] == NOT_GROUPED) return DPS_ERR_RADIX_STAGE;
        n_pairs += r->bucket_pairs[b];
        n_users += r->bucket_users[b];
        if (r->bucket_users[b] > most_users) most_users = r->bucket_users[b];
    }
    r->bucket_user_start = (size_t *)malloc((r->n_buckets + 1) * sizeof(size_t));
    uint32_t *local = (uint32_t *)malloc((most_users ? most_users : 1) * sizeof(uint32_t));
    if (r->bucket_user_start == NULL || local == NULL) {
        free(local);
        return DPS_ERR_NOMEM;
    }
    /* Buckets move down in place: a bucket's pairs never outnumber its rows, nor its users, so
     * each lands at or before where it was. A bucket's local ends are copied out before its
     * global ends (8 bytes each, where they were 4) are written over them. */
    size_t pair_at = 0, user_at = 0;
    for (size_t b = 0; b < r->n_buckets; b++) {
        size_t lo = r->start[b], d = r->bucket_pairs[b], u = r->bucket_users[b];
        if (d) memmove(r->codes + pair_at, r->codes + lo, d * sizeof(uint32_t));
        for (size_t v = 0; v < u; v++) local[v] = get_end(r->hashes + lo, v);
        for (size_t v = 0; v < u; v++) r->hashes[user_at + v] = pair_at + local[v];
        r->bucket_user_start[b] = user_at;
        pair_at += d;
        user_at += u;
    }
    free(local);
    r->bucket_user_start[r->n_buckets] = user_at;
    /* Shrink to what is kept; where the allocator cannot, the larger blocks are simply kept. */
    r->codes = (uint32_t *)dps_big_shrink(r->codes, n_pairs * sizeof(uint32_t));
    r->hashes = (uint64_t *)dps_big_shrink(r->hashes, n_users * sizeof(uint64_t));
    r->partitions = r->codes;
    r->ends = r->hashes;
    free(r->start);
    r->start = NULL;
    free(r->bucket_pairs);
    r->bucket_pairs = NULL;
    free(r->bucket_users);
    r->bucket_users = NULL;
    r->n_pairs = n_pairs;
    r->n_users = n_users;
    r->stage = DPS_RADIX_COMPACT;
    return DPS_OK;
}

void dps_radix_shard_users(const dps_radix_pairs *r, size_t shard, size_t n_shards, size_t *first_user,
                           size_t *last_user) {
    *first_user = *last_user = 0;
    if (r->stage != DPS_RADIX_COMPACT || n_shards == 0 || shard >= n_shards) return;
    *first_user = r->bucket_user_start[shard * r->n_buckets / n_shards];
    *last_user = r->bucket_user_start[(shard + 1) * r->n_buckets / n_shards];
}

/* Kept pairs are added to their partition's count this many pairs after they are chosen, their
 * counters prefetched in between: the counts (8 bytes per partition) outgrow the caches, and
 * adding each pair at once would wait for one miss after another. */
#define ADD_BEHIND 64

static inline void add_one(int64_t *counts, uint32_t p, uint64_t cap) {
    if (cap == 0 || (uint64_t)counts[p] < cap) counts[p]++;
}

static inline void add_shared(int64_t *counts, uint32_t p, uint64_t cap) {
    dps_atomic_add_one_capped(counts + p, cap);
}

int dps_radix_bound(dps_radix_pairs *r, dps_rng *s, size_t first_user, size_t last_user, uint64_t kappa,
                    uint64_t cap, int64_t *counts, size_t n_partitions, int shared) {
    if (r->stage != DPS_RADIX_COMPACT) return DPS_ERR_RADIX_STAGE;
    if (kappa == 0 || first_user > last_user || last_user > r->n_users) return DPS_ERR_BAD_ARG;
    size_t lo = first_user ? r->ends[first_user - 1] : 0, hi = last_user ? r->ends[last_user - 1] : 0;
    for (size_t i = lo; i < hi; i++)
        if (r->partitions[i] >= n_partitions) return DPS_ERR_BAD_CODE;
    uint32_t pending[ADD_BEHIND];
    size_t n_pending = 0; /* kept pairs chosen so far; the last ADD_BEHIND are still to add */
    size_t start = lo;
    for (size_t u = first_user; u < last_user; u++) {
        size_t end = r->ends[u];
        uint32_t *parts = r->partitions + start;
        size_t d = end - start;
        /* Keep min(d, kappa) of the user's d partitions, a uniform subset (as count.c does). */
        int rc = dps_uniform_subset(s, parts, d, kappa);
        if (rc != DPS_OK) return rc;
        size_t kept = (uint64_t)d < kappa ? d : (size_t)kappa;
        for (size_t i = 0; i < kept; i++) {
            uint32_t p = parts[i];
            DPS_PREFETCH_W(counts + p);
            uint32_t *slot = &pending[n_pending++ % ADD_BEHIND];
            if (n_pending > ADD_BEHIND) {
                if (shared) add_shared(counts, *slot, cap);
                else add_one(counts, *slot, cap);
            }
            *slot = p;
        }
        start = end;
    }
    size_t first = n_pending > ADD_BEHIND ? n_pending - ADD_BEHIND : 0;
    for (size_t k = first; k < n_pending; k++) {
        if (shared) add_shared(counts, pending[k % ADD_BEHIND], cap);
        else add_one(counts, pending[k % ADD_BEHIND], cap);
    }
    return DPS_OK;
}
