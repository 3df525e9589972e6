#include "select.h"

#include "bernoulli.h"

int dps_keep_table_init(dps_keep_table *t, const uint64_t *q, uint64_t n, uint16_t *top) {
    if (n == 0 || q[0] != 0) return DPS_ERR_BAD_TABLE;
    for (uint64_t i = 1; i < n; i++)
        if (q[i] < q[i - 1]) return DPS_ERR_BAD_TABLE;
    for (uint64_t i = 0; i < n; i++) top[i] = (uint16_t)(q[i] >> 56);
    top[n] = 256;
    t->q = q;
    t->n_entries = n;
    t->top = top;
    return DPS_OK;
}

/* After a batch met a negative count: zero every output and find the first offender. */
#define DEFINE_FAIL(NAME, T)                                                                      \
    static int NAME(const char *counts, ptrdiff_t cs, size_t n, uint8_t *keep, ptrdiff_t ks,    \
                    int64_t *noisy, ptrdiff_t ns, size_t *bad) {                                 \
        int found = 0;                                                                           \
        for (size_t i = 0; i < n; i++) {                                                         \
            keep[(ptrdiff_t)i * ks] = 0;                                                         \
            if (noisy) *(int64_t *)((char *)noisy + (ptrdiff_t)i * ns) = 0;                      \
            if (!found && *(const T *)(counts + (ptrdiff_t)i * cs) < 0) { *bad = i; found = 1; } \
        }                                                                                        \
        return DPS_ERR_NEGATIVE;                                                                 \
    }

/* The random-byte cursor r walks s->buf; at least 8 unread bytes are kept ahead of it, which
 * covers the longest single decision (a full 8-byte tie) without a check inside it. */
#define RESERVE_8(s, r, end)                                                                      \
    if ((r) > (end)) {                                                                           \
        (s)->pos = (uint32_t)((r) - (s)->buf);                                                   \
        int rc_ = dps_rng_reserve((s), 8);                                                       \
        if (rc_ != DPS_OK) return rc_;                                                           \
        (r) = (s)->buf + (s)->pos;                                                               \
    }

#define DEFINE_SELECT(NAME, FAIL, T, SIGNED)                                                      \
    static int NAME(dps_rng *s, const dps_keep_table *t, const char *counts, ptrdiff_t cs,      \
                    size_t n, uint8_t *keep, ptrdiff_t ks, size_t *bad) {                        \
        const uint64_t N = t->n_entries;                                                         \
        const uint16_t *top = t->top;                                                            \
        const uint64_t *q = t->q;                                                                \
        const uint8_t *end = s->buf + DPS_RNG_BUF - 8;                                           \
        const uint8_t *r = s->buf + s->pos;                                                      \
        int64_t neg = 0;                                                                         \
        for (size_t i = 0; i < n; i++) {                                                         \
            RESERVE_8(s, r, end)                                                                 \
            T c = *(const T *)(counts + (ptrdiff_t)i * cs);                                      \
            if (SIGNED) neg |= (int64_t)c;                                                       \
            uint64_t u = (uint64_t)c;                                                            \
            uint64_t idx = u < N ? u : N;                                                        \
            unsigned b0 = r[0], t0 = top[idx];                                                   \
            int k = b0 < t0;                                                                     \
            uint32_t used = 1;                                                                   \
            if (b0 == t0) k = dps_bernoulli_tail(r, q[idx], &used); /* p = 1/256, any data */    \
            r += used;                                                                           \
            keep[(ptrdiff_t)i * ks] = (uint8_t)k;                                                \
        }                                                                                        \
        s->pos = (uint32_t)(r - s->buf);                                                         \
        if (SIGNED && neg < 0) return FAIL(counts, cs, n, keep, ks, NULL, 0, bad);              \
        return DPS_OK;                                                                           \
    }

#define DEFINE_RELEASE(NAME, FAIL, T, SIGNED)                                                     \
    static int NAME(dps_rng *s, const dps_weight_table *w, uint32_t k, const char *counts,      \
                    ptrdiff_t cs, size_t n, uint8_t *keep, ptrdiff_t ks, int64_t *noisy,         \
                    ptrdiff_t ns, size_t *bad) {                                                 \
        const uint64_t two_k = 2 * (uint64_t)k;                                                  \
        const uint8_t *end = s->buf + DPS_RNG_BUF - 8;                                           \
        const uint8_t *r = s->buf + s->pos;                                                      \
        int64_t neg = 0;                                                                         \
        for (size_t i = 0; i < n; i++) {                                                         \
            RESERVE_8(s, r, end)                                                                 \
            T c = *(const T *)(counts + (ptrdiff_t)i * cs);                                      \
            if (SIGNED) neg |= (int64_t)c;                                                       \
            uint64_t u = (uint64_t)c;                                                            \
            uint32_t idx = dps_weight_table_draw(w, s, &r); /* X = idx - k */                    \
            if (idx == UINT32_MAX) return DPS_ERR_OS_RNG;                                        \
            uint64_t sum = u + idx;                  /* n + X + k */                             \
            sum |= (uint64_t)0 - (uint64_t)(sum < u); /* saturate */                             \
            uint64_t kept = (uint64_t)(sum > two_k);  /* n + X > k */                            \
            uint64_t val = sum - k;                                                              \
            val = val > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : val;                         \
            keep[(ptrdiff_t)i * ks] = (uint8_t)kept;                                             \
            *(int64_t *)((char *)noisy + (ptrdiff_t)i * ns) = (int64_t)(val & ((uint64_t)0 - kept)); \
        }                                                                                        \
        s->pos = (uint32_t)(r - s->buf);                                                         \
        if (SIGNED && neg < 0) return FAIL(counts, cs, n, keep, ks, noisy, ns, bad);            \
        return DPS_OK;                                                                           \
    }

#define DEFINE_ALL(SUFFIX, T, SIGNED)                                                             \
    DEFINE_FAIL(fail_##SUFFIX, T)                                                                \
    DEFINE_SELECT(select_##SUFFIX, fail_##SUFFIX, T, SIGNED)                                     \
    DEFINE_RELEASE(release_##SUFFIX, fail_##SUFFIX, T, SIGNED)

DEFINE_ALL(i8, int8_t, 1)
DEFINE_ALL(i16, int16_t, 1)
DEFINE_ALL(i32, int32_t, 1)
DEFINE_ALL(i64, int64_t, 1)
DEFINE_ALL(u8, uint8_t, 0)
DEFINE_ALL(u16, uint16_t, 0)
DEFINE_ALL(u32, uint32_t, 0)
DEFINE_ALL(u64, uint64_t, 0)

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

int dps_select(dps_rng *s, const dps_keep_table *t, int dtype, const void *counts,
               ptrdiff_t count_stride, size_t n, uint8_t *keep, ptrdiff_t keep_stride,
               size_t *bad_index) {
    if (s->initialised != DPS_RNG_MAGIC) return DPS_ERR_BAD_STATE;
    DISPATCH(select, s, t, (const char *)counts, count_stride, n, keep, keep_stride, bad_index)
}

int dps_release(dps_rng *s, const dps_weight_table *noise, uint32_t k, int dtype,
                const void *counts, ptrdiff_t count_stride, size_t n, uint8_t *keep,
                ptrdiff_t keep_stride, int64_t *noisy, ptrdiff_t noisy_stride,
                size_t *bad_index) {
    if (s->initialised != DPS_RNG_MAGIC) return DPS_ERR_BAD_STATE;
    DISPATCH(release, s, noise, k, (const char *)counts, count_stride, n, keep, keep_stride,
             noisy, noisy_stride, bad_index)
}
