/* Exact Bernoulli(Q / 2^w) by lazy byte comparison (docs/privacy/randomness.md).
 *
 * keep <=> U < Q where U is the big-endian number formed by fresh random bytes. Bytes are
 * compared most significant first and the comparison stops at the first difference, so
 * P(keep) = Q / 2^w exactly while using 256/255 bytes on average, whatever Q is. Q has w = 64
 * bits (one word) or w = 64 * limbs bits (words most significant first): wider tables cost no
 * extra expected randomness, only a longer (probability 256^-8) tail. */
#ifndef DPS_BERNOULLI_H
#define DPS_BERNOULLI_H

#include <stdint.h>

/* Resolve a tie on the most significant byte: compare bytes 1..7 of r with those of q.
 * r must hold 8 readable bytes. Returns keep (0/1); *used is set to the bytes consumed (2..8). */
static inline int dps_bernoulli_tail(const uint8_t *r, uint64_t q, uint32_t *used) {
    for (int j = 1; j < 8; j++) {
        unsigned qb = (unsigned)(q >> (56 - 8 * j)) & 0xFFu;
        if (r[j] != qb) {
            *used = (uint32_t)j + 1;
            return r[j] < qb;
        }
    }
    *used = 8;
    return 0; /* U == Q: strict comparison drops */
}

/* Finish a decision whose first byte tied with q's top byte, from fresh bytes r[0..6]
 * compared with bytes 1..7 of q (any fresh bytes will do: each is used once). */
static inline int dps_bernoulli_rest(const uint8_t *r, uint64_t q, uint32_t *used) {
    for (int j = 1; j < 8; j++) {
        unsigned qb = (unsigned)(q >> (56 - 8 * j)) & 0xFFu;
        if (r[j - 1] != qb) {
            *used = (uint32_t)j;
            return r[j - 1] < qb;
        }
    }
    *used = 7;
    return 0; /* U == Q: strict comparison drops */
}

/* Byte j (0 = most significant) of the big-endian number held in `limbs` 64-bit words. */
static inline unsigned dps_limb_byte(const uint64_t *q, uint32_t j) {
    return (unsigned)(q[j >> 3] >> (56 - 8 * (j & 7))) & 0xFFu;
}

/* dps_bernoulli_rest for a wide Q: fresh bytes r[0 .. 8 limbs - 2] against bytes 1 .. 8 limbs - 1
 * of Q, stopping at the first difference. r must hold 8 * limbs - 1 readable bytes. */
static inline int dps_bernoulli_rest_wide(const uint8_t *r, const uint64_t *q, uint32_t limbs,
                                          uint32_t *used) {
    const uint32_t width = 8 * limbs;
    for (uint32_t j = 1; j < width; j++) {
        unsigned qb = dps_limb_byte(q, j);
        if (r[j - 1] != qb) {
            *used = j;
            return r[j - 1] < qb;
        }
    }
    *used = width - 1;
    return 0; /* U == Q: strict comparison drops */
}

/* Index of the lowest set bit (x != 0). */
static inline int dps_ctz64(uint64_t x) {
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_ctzll(x);
#else
    int n = 0;
    while (!(x & 1)) { x >>= 1; n++; }
    return n;
#endif
}

/* Full decision from 8 readable bytes at r (used for single draws and as the test oracle). */
static inline int dps_bernoulli_lazy(const uint8_t *r, uint64_t q, uint32_t *used) {
    unsigned q0 = (unsigned)(q >> 56);
    if (r[0] != q0) {
        *used = 1;
        return r[0] < q0;
    }
    return dps_bernoulli_tail(r, q, used);
}

#endif
