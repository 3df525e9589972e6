#include "select_avx2.h"

#include <string.h>

#include "bernoulli.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(DPS_NO_AVX2)
#include <immintrin.h>

#define TARGET __attribute__((target("avx2")))

int dps_select_avx2_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

/* Four keep flags as four bytes 0/1, by the 4-bit mask. */
static const uint32_t spread4[16] = {
    0x00000000u, 0x00000001u, 0x00000100u, 0x00000101u, 0x00010000u, 0x00010001u, 0x00010100u,
    0x00010101u, 0x01000000u, 0x01000001u, 0x01000100u, 0x01000101u, 0x01010000u, 0x01010001u,
    0x01010100u, 0x01010101u,
};

TARGET long long dps_select_blocks_avx2(dps_rng *s, const dps_keep_table *t, const int64_t *counts,
                                        size_t n, int is_signed, uint8_t *keep, int *negative_seen) {
    const uint64_t last = t->n_entries - 1, sure = t->certain_from;
    const int *top32 = (const int *)t->top32;
    /* Unsigned 64-bit order through the signed compare: flip the sign bits first. */
    const __m256i sign = _mm256_set1_epi64x((long long)0x8000000000000000ull);
    const __m256i last_v = _mm256_set1_epi64x((long long)last);
    const __m256i last_x = _mm256_xor_si256(last_v, sign);
    const __m256i sure_x = _mm256_xor_si256(_mm256_set1_epi64x((long long)sure), sign);
    int negative = 0;
    size_t done = 0;
    for (; done + 64 <= n; done += 64) {
        int rc = dps_rng_reserve(s, 64);
        if (rc != DPS_OK) return rc;
        const uint8_t *r = s->buf + s->pos;
        uint64_t ties = 0;
        for (int g = 0; g < 16; g++) {
            __m256i c = _mm256_loadu_si256((const __m256i *)(counts + done + 4 * g));
            if (is_signed) negative |= _mm256_movemask_pd(_mm256_castsi256_pd(c));
            __m256i cx = _mm256_xor_si256(c, sign);
            __m256i idx = _mm256_blendv_epi8(c, last_v, _mm256_cmpgt_epi64(cx, last_x)); /* min(n, N-1) */
            int certain = ~_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpgt_epi64(sure_x, cx))) & 0xF;
            __m128i top = _mm256_i64gather_epi32(top32, idx, 4);
            int32_t four;
            memcpy(&four, r + 4 * g, sizeof four);
            __m128i bytes = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(four));
            int below = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmplt_epi32(bytes, top)));
            int equal = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(bytes, top)));
            memcpy(keep + done + 4 * g, &spread4[below | certain], 4);
            ties |= (uint64_t)equal << (4 * g);
        }
        s->pos += 64;
        rc = dps_finish_ties(s, t, counts + done, ties, keep + done); /* bytes 1.. decide */
        if (rc != DPS_OK) return rc;
    }
    *negative_seen = negative != 0;
    return (long long)done;
}

#else

int dps_select_avx2_available(void) { return 0; }

long long dps_select_blocks_avx2(dps_rng *s, const dps_keep_table *t, const int64_t *counts,
                                 size_t n, int is_signed, uint8_t *keep, int *negative_seen) {
    (void)s; (void)t; (void)counts; (void)n; (void)is_signed; (void)keep;
    *negative_seen = 0;
    return 0;
}

#endif
