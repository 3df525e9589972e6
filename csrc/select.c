#include "select.h"

#include "bernoulli.h"
#include "release_avx512.h"
#include "select_avx2.h"
#include "select_avx512.h"

/* Counts may sit at any address (a numpy view of a byte buffer, say): load them with memcpy,
 * which compiles to a plain load where the target allows unaligned access. */
#define DEFINE_LOAD(SUFFIX, T)                                                                    \
    static inline T load_##SUFFIX(const char *p) {                                               \
        T v;                                                                                     \
        memcpy(&v, p, sizeof v);                                                                 \
        return v;                                                                                \
    }
DEFINE_LOAD(i8, int8_t)
DEFINE_LOAD(i16, int16_t)
DEFINE_LOAD(i32, int32_t)
DEFINE_LOAD(i64, int64_t)
DEFINE_LOAD(u8, uint8_t)
DEFINE_LOAD(u16, uint16_t)
DEFINE_LOAD(u32, uint32_t)
DEFINE_LOAD(u64, uint64_t)

#define COUNT_AT(SUFFIX, i) load_##SUFFIX(counts + (ptrdiff_t)(i) * cs)

int dps_keep_table_init(dps_keep_table *t, const uint64_t *q, uint64_t n, uint32_t limbs,
                        int tail_certain, uint8_t *top) {
    if (n == 0 || limbs == 0 || limbs > DPS_KEEP_MAX_LIMBS) return DPS_ERR_BAD_TABLE;
    for (uint32_t w = 0; w < limbs; w++)
        if (q[w] != 0) return DPS_ERR_BAD_TABLE; /* q[0] == 0: an absent partition is never kept */
    for (uint64_t i = 1; i < n; i++) { /* non-decreasing, compared limb by limb */
        const uint64_t *a = q + (i - 1) * limbs, *b = q + i * limbs;
        for (uint32_t w = 0; w < limbs; w++) {
            if (a[w] < b[w]) break;
            if (a[w] > b[w]) return DPS_ERR_BAD_TABLE;
        }
    }
    for (uint64_t i = 0; i < n; i++) top[i] = (uint8_t)(q[i * limbs] >> 56);
    t->q = q;
    t->n_entries = n;
    t->certain_from = tail_certain ? n : UINT64_MAX;
    t->limbs = limbs;
    t->top = top;
    t->top32 = NULL;
    return DPS_OK;
}

void dps_keep_table_attach_top32(dps_keep_table *t, uint32_t *top32) {
    for (uint64_t i = 0; i < t->n_entries; i++) top32[i] = t->top[i];
    t->top32 = top32;
}

/* After a batch met a negative count: zero every output and find the first offender. */
#define DEFINE_FAIL(NAME, SUFFIX)                                                                 \
    static int NAME(const char *counts, ptrdiff_t cs, size_t n, uint8_t *keep, ptrdiff_t ks,    \
                    int64_t *noisy, ptrdiff_t ns, size_t *bad) {                                 \
        int found = 0;                                                                           \
        const int64_t zero = 0;                                                                  \
        for (size_t i = 0; i < n; i++) {                                                         \
            keep[(ptrdiff_t)i * ks] = 0;                                                         \
            if (noisy) memcpy((char *)noisy + (ptrdiff_t)i * ns, &zero, sizeof zero);            \
            if (!found && COUNT_AT(SUFFIX, i) < 0) { *bad = i; found = 1; }                      \
        }                                                                                        \
        return DPS_ERR_NEGATIVE;                                                                 \
    }

/* Both loops work in blocks of BLOCK elements. A block first takes a fixed window of fresh bytes
 * (one per decision for select, four per draw for release) and runs a branch-free pass over it;
 * the rare elements whose first bytes do not settle the outcome (probability 1/256 per select
 * decision, <= m/2^32 per draw, whatever the counts) are flagged in a bit mask and finished
 * afterwards from further fresh bytes. Every byte is used once, so each outcome keeps its exact
 * law. How many bytes a batch consumes has the same distribution whatever the counts: a select
 * tie has probability 1/256 and a geometric tail for every q. */
#define BLOCK 64


#define DEFINE_SELECT(NAME, FAIL, SUFFIX, T, SIGNED)                                              \
    static int NAME(dps_rng *s, const dps_keep_table *t, const char *counts, ptrdiff_t cs,      \
                    size_t n, uint8_t *keep, ptrdiff_t ks, size_t *bad) {                        \
        const uint64_t last = t->n_entries - 1, sure = t->certain_from;                          \
        const uint32_t limbs = t->limbs;                                                         \
        const uint8_t *top = t->top;                                                             \
        int64_t neg = 0;                                                                         \
        for (size_t i = 0; i < n; i += BLOCK) {                                                  \
            size_t len = n - i < BLOCK ? n - i : BLOCK;                                          \
            int rc = dps_rng_reserve(s, (uint32_t)len);                                          \
            if (rc != DPS_OK) return rc;                                                         \
            const uint8_t *r = s->buf + s->pos;                                                  \
            uint64_t ties = 0;                                                                   \
            for (size_t j = 0; j < len; j++) {                                                   \
                T c = COUNT_AT(SUFFIX, i + j);                                                   \
                if (SIGNED) neg |= (int64_t)c;                                                   \
                uint64_t u = (uint64_t)c;                                                        \
                uint64_t idx = u < last ? u : last; /* counts >= N take N - 1's path */          \
                unsigned b0 = r[j], t0 = top[idx];                                               \
                keep[(ptrdiff_t)(i + j) * ks] = (uint8_t)((b0 < t0) | (u >= sure));              \
                ties |= (uint64_t)(b0 == t0) << j;                                               \
            }                                                                                    \
            s->pos += (uint32_t)len;                                                             \
            while (ties) { /* first byte equal to q's top byte: the later bytes decide */        \
                size_t j = (size_t)dps_ctz64(ties);                                              \
                ties &= ties - 1;                                                                \
                uint64_t u = (uint64_t)COUNT_AT(SUFFIX, i + j);                                  \
                rc = dps_rng_reserve(s, 8 * limbs - 1);                                          \
                if (rc != DPS_OK) return rc;                                                     \
                uint32_t used;                                                                   \
                int k = dps_bernoulli_rest_wide(s->buf + s->pos, t->q + (u < last ? u : last) * limbs, \
                                                limbs, &used);                                   \
                s->pos += used;                                                                  \
                keep[(ptrdiff_t)(i + j) * ks] = (uint8_t)(k | (u >= sure));                      \
            }                                                                                    \
        }                                                                                        \
        if (SIGNED && neg < 0) return FAIL(counts, cs, n, keep, ks, NULL, 0, bad);              \
        return DPS_OK;                                                                           \
    }

#define NOISY_AT(i) ((int64_t *)((char *)noisy + (ptrdiff_t)(i) * ns))

#define DEFINE_RELEASE(NAME, FAIL, SUFFIX, T, SIGNED)                                                     \
    static int NAME(dps_rng *s, const dps_weight_table *w, const dps_release_rule *rule_in,      \
                    const char *counts,                                                          \
                    ptrdiff_t cs, size_t n, uint8_t *keep, ptrdiff_t ks, int64_t *noisy,         \
                    ptrdiff_t ns, size_t *bad) {                                                 \
        const dps_release_rule local_rule = *rule_in; /* a copy no output store can alias */   \
        const dps_release_rule *rule = &local_rule;                                              \
        int64_t neg = 0;                                                                         \
        uint32_t u_hi[BLOCK];                                                                    \
        for (size_t i = 0; i < n; i += BLOCK) {                                                  \
            size_t len = n - i < BLOCK ? n - i : BLOCK;                                          \
            int rc = dps_rng_reserve(s, (uint32_t)(4 * len));                                    \
            if (rc != DPS_OK) return rc;                                                         \
            const uint8_t *r = s->buf + s->pos;                                                  \
            uint64_t flagged = 0;                                                                \
            for (size_t j = 0; j < len; j++) {                                                   \
                T c = COUNT_AT(SUFFIX, i + j);                                                   \
                if (SIGNED) neg |= (int64_t)c;                                                   \
                u_hi[j] = dps_load_be32(r + 4 * j);                                   \
                uint32_t flag;                                                                   \
                uint32_t idx = dps_weight_table_fast(w, u_hi[j], &flag);                         \
                flagged |= (uint64_t)flag << j;                                                  \
                dps_emit_release((uint64_t)c, idx, rule, keep + (ptrdiff_t)(i + j) * ks, NOISY_AT(i + j)); \
            }                                                                                    \
            s->pos += (uint32_t)(4 * len);                                                       \
            while (flagged) { /* tie with a table entry, or U >= S: finish from fresh bytes */    \
                size_t j = (size_t)dps_ctz64(flagged);                                           \
                flagged &= flagged - 1;                                                          \
                uint32_t idx;                                                                    \
                rc = dps_weight_table_finish(w, s, u_hi[j], &idx);                               \
                if (rc != DPS_OK) return rc;                                                     \
                dps_emit_release((uint64_t)COUNT_AT(SUFFIX, i + j), idx, rule,                            \
                             keep + (ptrdiff_t)(i + j) * ks, NOISY_AT(i + j));                   \
            }                                                                                    \
        }                                                                                        \
        if (SIGNED && neg < 0) return FAIL(counts, cs, n, keep, ks, noisy, ns, bad);            \
        return DPS_OK;                                                                           \
    }

#define DEFINE_ALL(SUFFIX, T, SIGNED)                                                             \
    DEFINE_FAIL(fail_##SUFFIX, SUFFIX)                                                           \
    DEFINE_SELECT(select_##SUFFIX, fail_##SUFFIX, SUFFIX, T, SIGNED)                             \
    DEFINE_RELEASE(release_##SUFFIX, fail_##SUFFIX, SUFFIX, T, SIGNED)

DEFINE_ALL(i8, int8_t, 1)
DEFINE_ALL(i16, int16_t, 1)
DEFINE_ALL(i32, int32_t, 1)
DEFINE_ALL(i64, int64_t, 1)
DEFINE_ALL(u8, uint8_t, 0)
DEFINE_ALL(u16, uint16_t, 0)
DEFINE_ALL(u32, uint32_t, 0)
DEFINE_ALL(u64, uint64_t, 0)

/* Vectorisable: OR the values of a block together, look closer only if the sign bit shows. */
#define DEFINE_FIND_NEGATIVE(NAME, SUFFIX, T)                                                     \
    static int NAME(const char *counts, ptrdiff_t cs, size_t n, size_t *index) {                \
        for (size_t i = 0; i < n; i += 256) {                                                    \
            size_t len = n - i < 256 ? n - i : 256;                                              \
            T acc = 0;                                                                           \
            if (cs == (ptrdiff_t)sizeof(T)) { /* contiguous: a loop the compiler vectorises */   \
                const char *block = counts + i * sizeof(T);                                      \
                for (size_t j = 0; j < len; j++) acc |= load_##SUFFIX(block + j * sizeof(T));    \
            } else {                                                                             \
                for (size_t j = 0; j < len; j++) acc |= COUNT_AT(SUFFIX, i + j);                 \
            }                                                                                    \
            if (acc < 0)                                                                         \
                for (size_t j = 0; j < len; j++)                                                 \
                    if (COUNT_AT(SUFFIX, i + j) < 0) { *index = i + j; return 1; }               \
        }                                                                                        \
        return 0;                                                                                \
    }
DEFINE_FIND_NEGATIVE(find_negative_i8, i8, int8_t)
DEFINE_FIND_NEGATIVE(find_negative_i16, i16, int16_t)
DEFINE_FIND_NEGATIVE(find_negative_i32, i32, int32_t)
DEFINE_FIND_NEGATIVE(find_negative_i64, i64, int64_t)

int dps_find_negative(int dtype, const void *counts, ptrdiff_t count_stride, size_t n,
                      size_t *index) {
    const char *c = (const char *)counts;
    switch (dtype) {
    case DPS_I8: return find_negative_i8(c, count_stride, n, index);
    case DPS_I16: return find_negative_i16(c, count_stride, n, index);
    case DPS_I32: return find_negative_i32(c, count_stride, n, index);
    case DPS_I64: return find_negative_i64(c, count_stride, n, index);
    default: return 0;
    }
}

#define DISPATCH(FN, ...)                                                                         \
    switch (dtype) {                                                                             \
    case DPS_I8: return FN##_i8(__VA_ARGS__);                                                    \
    case DPS_I16: return FN##_i16(__VA_ARGS__);                                                  \
    case DPS_I32: return FN##_i32(__VA_ARGS__);                                                  \
    case DPS_I64: return FN##_i64(__VA_ARGS__);                                                  \
    case DPS_U8: return FN##_u8(__VA_ARGS__);                                                    \
    case DPS_U16: return FN##_u16(__VA_ARGS__);                                                  \
    case DPS_U32: return FN##_u32(__VA_ARGS__);                                                  \
    case DPS_U64: return FN##_u64(__VA_ARGS__);                                                  \
    default: return DPS_ERR_BAD_TABLE;                                                           \
    }

/* CPU support is a property of the machine: a benign race on first use is harmless. */
static int avx512_state = -1;
static int avx2_state = -1;

typedef long long (*select_blocks_fn)(dps_rng *, const dps_keep_table *, const int64_t *, size_t, int,
                                      uint8_t *, int *);

/* A vector loop does the whole blocks of 64 (same byte consumption as the portable loop), the
 * portable loop the rest; a negative count seen by either fails the batch as usual. */
static int select_vector(select_blocks_fn blocks, dps_rng *s, const dps_keep_table *t, int dtype,
                         const void *counts, size_t n, uint8_t *keep, size_t *bad_index) {
    int negative = 0;
    long long done = blocks(s, t, (const int64_t *)counts, n, dtype == DPS_I64, keep, &negative);
    if (done < 0) return (int)done;
    const char *rest = (const char *)counts + 8 * done;
    int rc = dtype == DPS_I64
                 ? select_i64(s, t, rest, 8, n - (size_t)done, keep + done, 1, bad_index)
                 : select_u64(s, t, rest, 8, n - (size_t)done, keep + done, 1, bad_index);
    if (rc == DPS_ERR_NEGATIVE || (rc == DPS_OK && negative))
        return fail_i64((const char *)counts, 8, n, keep, 1, NULL, 0, bad_index);
    return rc;
}

int dps_select(dps_rng *s, const dps_keep_table *t, int dtype, const void *counts,
               ptrdiff_t count_stride, size_t n, uint8_t *keep, ptrdiff_t keep_stride,
               size_t *bad_index) {
    if (s->initialised != DPS_RNG_MAGIC) return DPS_ERR_BAD_STATE;
    const int contiguous64 = (dtype == DPS_I64 || dtype == DPS_U64) && count_stride == 8 && keep_stride == 1;
    if (avx512_state < 0) avx512_state = dps_select_avx512_available();
    if (avx2_state < 0) avx2_state = dps_select_avx2_available();
    if (contiguous64 && avx512_state && t->n_entries <= 128)
        return select_vector(dps_select_blocks_avx512, s, t, dtype, counts, n, keep, bad_index);
    if (contiguous64 && avx2_state && t->top32 != NULL && t->n_entries <= (uint64_t)INT32_MAX)
        return select_vector(dps_select_blocks_avx2, s, t, dtype, counts, n, keep, bad_index);
    DISPATCH(select, s, t, (const char *)counts, count_stride, n, keep, keep_stride, bad_index)
}

static int release_avx512_state = -1;

int dps_release(dps_rng *s, const dps_weight_table *noise, const dps_release_rule *rule, int dtype,
                const void *counts, ptrdiff_t count_stride, size_t n, uint8_t *keep,
                ptrdiff_t keep_stride, int64_t *noisy, ptrdiff_t noisy_stride,
                size_t *bad_index) {
    if (s->initialised != DPS_RNG_MAGIC) return DPS_ERR_BAD_STATE;
    if ((uint64_t)noise->m != 2 * rule->k + 1 || rule->keep_all > 1) return DPS_ERR_BAD_TABLE;
    if (release_avx512_state < 0) release_avx512_state = dps_release_avx512_available();
    /* The vector loop implements the TSGD rule only (publish iff n + X > k). */
    if (release_avx512_state && noise->direct != NULL && (dtype == DPS_I64 || dtype == DPS_U64) &&
        count_stride == 8 && keep_stride == 1 && noisy_stride == 8 && rule->cut == 2 * rule->k &&
        !rule->keep_all) {
        /* same byte consumption as the portable loop: whole blocks here, the rest below */
        int negative = 0;
        long long done = dps_release_blocks_avx512(s, noise, (uint32_t)rule->k, (const int64_t *)counts, n,
                                                   dtype == DPS_I64, keep, noisy, &negative);
        if (done < 0) return (int)done;
        const char *rest = (const char *)counts + 8 * done;
        int rc = dtype == DPS_I64
                     ? release_i64(s, noise, rule, rest, 8, n - (size_t)done, keep + done, 1,
                                   noisy + done, 8, bad_index)
                     : release_u64(s, noise, rule, rest, 8, n - (size_t)done, keep + done, 1,
                                   noisy + done, 8, bad_index);
        if (rc == DPS_ERR_NEGATIVE || (rc == DPS_OK && negative))
            return fail_i64((const char *)counts, 8, n, keep, 1, noisy, 8, bad_index);
        return rc;
    }
    DISPATCH(release, s, noise, rule, (const char *)counts, count_stride, n, keep, keep_stride,
             noisy, noisy_stride, bad_index)
}
