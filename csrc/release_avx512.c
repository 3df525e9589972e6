#include "release_avx512.h"

#include <string.h>

#include "bernoulli.h"
#include "select.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(DPS_NO_AVX512)
#include <immintrin.h>

#define TARGET __attribute__((target("avx512f,avx512bw")))

int dps_release_avx512_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}

/* dps_emit_release (select.h) for 8 draws at once, with the same unsigned saturation. */
TARGET static inline __mmask8 emit8(__m512i c, __m512i idx, __m512i two_k, __m512i kv,
                                    __m512i cap, int64_t *noisy) {
    __m512i sum = _mm512_add_epi64(c, idx);
    sum = _mm512_mask_mov_epi64(sum, _mm512_cmplt_epu64_mask(sum, c), _mm512_set1_epi64(-1));
    __mmask8 kept = _mm512_cmpgt_epu64_mask(sum, two_k);
    __m512i val = _mm512_min_epu64(_mm512_sub_epi64(sum, kv), cap);
    _mm512_storeu_si512(noisy, _mm512_maskz_mov_epi64(kept, val));
    return kept;
}

TARGET long long dps_release_blocks_avx512(dps_rng *s, const dps_weight_table *w, uint32_t k,
                                           const int64_t *counts, size_t n, int is_signed,
                                           uint8_t *keep, int64_t *noisy, int *negative_seen) {
    /* reverse the bytes of each 32-bit word: U is read big-endian */
    const __m512i bswap = _mm512_set_epi8(
        60, 61, 62, 63, 56, 57, 58, 59, 52, 53, 54, 55, 48, 49, 50, 51,
        44, 45, 46, 47, 40, 41, 42, 43, 36, 37, 38, 39, 32, 33, 34, 35,
        28, 29, 30, 31, 24, 25, 26, 27, 20, 21, 22, 23, 16, 17, 18, 19,
        12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3);
    const __m512i low_byte = _mm512_set1_epi32(0xFF), flag = _mm512_set1_epi32(DPS_DIRECT_FLAG);
    const __m512i two_k = _mm512_set1_epi64((long long)(2 * (uint64_t)k));
    const __m512i kv = _mm512_set1_epi64((long long)k), cap = _mm512_set1_epi64(INT64_MAX);
    const __m512i zero = _mm512_setzero_si512();
    __mmask8 negative = 0;
    size_t done = 0;
    for (; done + 64 <= n; done += 64) {
        int rc = dps_rng_reserve(s, 256);
        if (rc != DPS_OK) return rc;
        uint32_t u_hi[64];
        uint64_t flagged = 0, kept = 0;
        for (int g = 0; g < 4; g++) { /* 16 draws per group */
            __m512i u = _mm512_shuffle_epi8(_mm512_loadu_si512(s->buf + s->pos + 64 * g), bswap);
            _mm512_storeu_si512(u_hi + 16 * g, u);
            __m512i cell = _mm512_srli_epi32(u, 16);
            __m512i idx = _mm512_and_si512(
                _mm512_i32gather_epi32(cell, (const void *)w->direct, 1), low_byte);
            flagged |= (uint64_t)_mm512_cmpeq_epi32_mask(idx, flag) << (16 * g);
            const int64_t *c = counts + done + 16 * g;
            __m512i c0 = _mm512_loadu_si512(c), c1 = _mm512_loadu_si512(c + 8);
            if (is_signed)
                negative |= _mm512_cmplt_epi64_mask(c0, zero) | _mm512_cmplt_epi64_mask(c1, zero);
            __m512i i0 = _mm512_cvtepu32_epi64(_mm512_castsi512_si256(idx));
            __m512i i1 = _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(idx, 1));
            uint64_t m0 = emit8(c0, i0, two_k, kv, cap, noisy + done + 16 * g);
            uint64_t m1 = emit8(c1, i1, two_k, kv, cap, noisy + done + 16 * g + 8);
            kept |= (m0 | (m1 << 8)) << (16 * g);
        }
        _mm512_storeu_si512(keep + done, _mm512_maskz_mov_epi8(kept, _mm512_set1_epi8(1)));
        s->pos += 256;
        while (flagged) { /* a cell holding a boundary, or U >= S: finish from fresh bytes */
            size_t j = (size_t)dps_ctz64(flagged);
            flagged &= flagged - 1;
            uint32_t idx;
            rc = dps_weight_table_finish(w, s, u_hi[j], &idx);
            if (rc != DPS_OK) return rc;
            uint64_t c;
            memcpy(&c, counts + done + j, sizeof c); /* counts may be unaligned */
            const dps_release_rule rule = {k, 2 * (uint64_t)k, 0}; /* the TSGD rule */
            dps_emit_release(c, idx, &rule, keep + done + j, noisy + done + j);
        }
    }
    *negative_seen = negative != 0;
    return (long long)done;
}

#else

int dps_release_avx512_available(void) { return 0; }

long long dps_release_blocks_avx512(dps_rng *s, const dps_weight_table *w, uint32_t k,
                                    const int64_t *counts, size_t n, int is_signed,
                                    uint8_t *keep, int64_t *noisy, int *negative_seen) {
    (void)s; (void)w; (void)k; (void)counts; (void)n; (void)is_signed; (void)keep; (void)noisy;
    *negative_seen = 0;
    return 0;
}

#endif
