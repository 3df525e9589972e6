/* Batch loops over arrays of partition counts (pi_opt and the TSGD thresholded release of
 * Desfontaines et al., PoPETs 2022, Theorems 1 and 6; docs/privacy/pi-opt.md,
 * docs/privacy/tsgd-release.md, docs/privacy/randomness.md).
 *
 * select:  keep[i] = Bernoulli(pi(counts[i])) with pi from a certified fixed-point keep table
 *          (one to four 64-bit limbs per entry).
 * release: X_i ~ certified TSGD table; keep[i] = counts[i] + X_i > k (or another threshold, or
 *          always: dps_release_rule), noisy[i] = counts[i] + X_i where kept (0 elsewhere).
 *
 * Counts may be any of eight integer types, at any byte stride and any alignment (values are
 * loaded with memcpy); outputs are strided too. Every element consumes randomness whatever its
 * count, and a count >= N takes exactly the path of a count N - 1 (the table lookup, the 1/256
 * tie path, the bytes compared) with "n >= N" OR-ed into the decision afterwards, so the bytes
 * drawn and the work done by a batch do not depend on the data. Callers scan for negative counts first (dps_find_negative) so that none is drawn
 * for; as a second line, a negative count met here aborts the batch, zeroes the outputs and
 * reports its index, so no decision made before it can escape. */
#ifndef DPS_SELECT_H
#define DPS_SELECT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bernoulli.h"
#include "csprng.h"
#include "tsgd.h"

enum dps_dtype { DPS_I8, DPS_I16, DPS_I32, DPS_I64, DPS_U8, DPS_U16, DPS_U32, DPS_U64 };

#define DPS_KEEP_MAX_LIMBS 4

typedef struct dps_keep_table {
    const uint64_t *q;   /* n_entries x limbs words, most significant limb first:
                            pi(n) = q[n] / 2^(64 limbs); q[0] == 0, non-decreasing */
    uint64_t n_entries;  /* N: counts >= N are looked up at N - 1 ... */
    uint64_t certain_from; /* ... and kept with certainty from here on: N for tables that reach
                              probability 1 (pi_opt), UINT64_MAX for those that never do */
    uint32_t limbs;      /* 1 .. DPS_KEEP_MAX_LIMBS */
    uint8_t *top;        /* n_entries slots: the most significant byte of q[n] */
    uint32_t *top32;     /* the same as 32-bit values, for gathers (optional: NULL) */
} dps_keep_table;

/* What the release publishes. The noise table holds X = idx - k for idx in [0, 2k]; a value is
 * published iff n + X > cut - k, or always with keep_all. cut = 2k is the TSGD rule (publish iff
 * n + X > k); another cut is an analyst's threshold t = cut - k (public partitions). */
typedef struct dps_release_rule {
    uint64_t k;
    uint64_t cut;
    uint64_t keep_all; /* 0 or 1 */
} dps_release_rule;

/* One released value from the drawn index idx: keep iff the rule says so; the noisy count
 * n + X is exact, negative only for a count below k with keep_all, and saturates at INT64_MAX
 * (post-processing of the released value). Branch-free. */
static inline void dps_emit_release(uint64_t n, uint32_t idx, const dps_release_rule *rule,
                                    uint8_t *keep, void *noisy) {
    uint64_t sum = n + idx;                   /* n + X + k */
    sum |= (uint64_t)0 - (uint64_t)(sum < n); /* saturate */
    uint64_t kept = (uint64_t)(sum > rule->cut) | rule->keep_all;
    /* Clamped to INT64_MAX + k, sum - k is n + X in [-k, INT64_MAX]: exact as int64 both ways. */
    const uint64_t top = (uint64_t)INT64_MAX + rule->k;
    sum = sum < top ? sum : top;
    int64_t out = (int64_t)((sum - rule->k) & ((uint64_t)0 - kept));
    *keep = (uint8_t)kept;
    memcpy(noisy, &out, sizeof out); /* the output may be unaligned */
}

/* Finish the decisions of one block of contiguous 64-bit counts whose first random byte tied
 * with q's top byte (bit j of ties: element j), in index order from fresh bytes, exactly as the
 * portable loop does; "kept surely" is OR-ed in. Shared by the vector loops. */
static inline int dps_finish_ties(dps_rng *s, const dps_keep_table *t, const int64_t *counts,
                                  uint64_t ties, uint8_t *keep) {
    const uint64_t last = t->n_entries - 1;
    while (ties) {
        size_t j = (size_t)dps_ctz64(ties);
        ties &= ties - 1;
        uint64_t u;
        memcpy(&u, counts + j, sizeof u); /* counts may be unaligned */
        int rc = dps_rng_reserve(s, 8 * t->limbs - 1);
        if (rc != DPS_OK) return rc;
        uint32_t used;
        int k = dps_bernoulli_rest_wide(s->buf + s->pos, t->q + (u < last ? u : last) * t->limbs, t->limbs,
                                        &used);
        s->pos += used;
        keep[j] = (uint8_t)(k | (u >= t->certain_from));
    }
    return DPS_OK;
}

/* Check q (n >= 1 entries of `limbs` words: q[0] == 0, non-decreasing) and fill top (n slots).
 * tail_certain: counts >= n are kept surely (else they keep q[n - 1]'s probability). The table
 * keeps pointing at q: the caller owns both and keeps them alive and unchanged. */
int dps_keep_table_init(dps_keep_table *t, const uint64_t *q, uint64_t n, uint32_t limbs,
                        int tail_certain, uint8_t *top);

/* Give the table a 32-bit copy of its top bytes (n_entries slots, caller-owned), for the AVX2
 * loop's gathers. */
void dps_keep_table_attach_top32(dps_keep_table *t, uint32_t *top32);

/* First negative count, scanning before any randomness is drawn: returns 1 and sets *index if there is one, 0 otherwise (always 0 for unsigned types). */
int dps_find_negative(int dtype, const void *counts, ptrdiff_t count_stride, size_t n,
                      size_t *index);

/* Strides are in bytes. On DPS_ERR_NEGATIVE, *bad_index is the first negative count. */
int dps_select(dps_rng *s, const dps_keep_table *t, int dtype, const void *counts,
               ptrdiff_t count_stride, size_t n, uint8_t *keep, ptrdiff_t keep_stride,
               size_t *bad_index);

/* noisy saturates at INT64_MAX (post-processing of the released value). */
int dps_release(dps_rng *s, const dps_weight_table *noise, const dps_release_rule *rule, int dtype,
                const void *counts, ptrdiff_t count_stride, size_t n, uint8_t *keep,
                ptrdiff_t keep_stride, int64_t *noisy, ptrdiff_t noisy_stride,
                size_t *bad_index);

#endif
