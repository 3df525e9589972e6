#include "select_avx512.h"

#include <string.h>

#include "bernoulli.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(DPS_NO_AVX512)
#include <immintrin.h>

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vbmi")))

int dps_select_avx512_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vbmi");
}

TARGET long long dps_select_blocks_avx512(dps_rng *s, const dps_keep_table *t,
                                          const int64_t *counts, size_t n, int is_signed,
                                          uint8_t *keep, int *negative_seen) {
    const uint64_t N = t->n_entries, last = N - 1, sure = t->certain_from; /* N <= 128 */
    uint8_t table[128] = {0};
    for (uint64_t i = 0; i < N; i++) table[i] = t->top[i];
    const __m512i lo = _mm512_loadu_si512(table), hi = _mm512_loadu_si512(table + 64);
    const __m512i sure64 = _mm512_set1_epi64((long long)sure), last64 = _mm512_set1_epi64((long long)last);
    const __m512i one = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
    __mmask8 negative = 0;
    size_t done = 0;
    for (; done + 64 <= n; done += 64) {
        int rc = dps_rng_reserve(s, 64);
        if (rc != DPS_OK) return rc;
        __m128i part[8];
        uint64_t certain = 0; /* n >= certain_from: kept whatever the bytes, OR-ed in afterwards */
        for (int k = 0; k < 8; k++) {
            __m512i c = _mm512_loadu_si512(counts + done + 8 * k);
            if (is_signed) negative |= _mm512_cmplt_epi64_mask(c, zero);
            certain |= (uint64_t)_mm512_cmpge_epu64_mask(c, sure64) << (8 * k);
            part[k] = _mm512_cvtepi64_epi8(_mm512_min_epu64(c, last64)); /* idx = min(n, N-1) */
        }
        __m256i idx_lo = _mm256_set_m128i(_mm_unpacklo_epi64(part[2], part[3]),
                                          _mm_unpacklo_epi64(part[0], part[1]));
        __m256i idx_hi = _mm256_set_m128i(_mm_unpacklo_epi64(part[6], part[7]),
                                          _mm_unpacklo_epi64(part[4], part[5]));
        __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(idx_lo), idx_hi, 1);
        __m512i top = _mm512_permutex2var_epi8(lo, idx, hi);       /* top byte of q[idx] */
        __m512i bytes = _mm512_loadu_si512(s->buf + s->pos);
        __mmask64 kept = _mm512_cmplt_epu8_mask(bytes, top) | (__mmask64)certain;
        uint64_t ties = (uint64_t)_mm512_cmpeq_epi8_mask(bytes, top); /* whatever the counts */
        _mm512_storeu_si512(keep + done, _mm512_maskz_mov_epi8(kept, one));
        s->pos += 64;
        rc = dps_finish_ties(s, t, counts + done, ties, keep + done); /* bytes 1.. decide */
        if (rc != DPS_OK) return rc;
    }
    *negative_seen = negative != 0;
    return (long long)done;
}

#else

int dps_select_avx512_available(void) { return 0; }

long long dps_select_blocks_avx512(dps_rng *s, const dps_keep_table *t, const int64_t *counts,
                                   size_t n, int is_signed, uint8_t *keep, int *negative_seen) {
    (void)s; (void)t; (void)counts; (void)n; (void)is_signed; (void)keep;
    *negative_seen = 0;
    return 0;
}

#endif
