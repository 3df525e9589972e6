/* Small helpers shared by the hash tables (count_pairset.c, keymap.c). Plain C11. */
#ifndef DPS_HASHING_H
#define DPS_HASHING_H

#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define DPS_PREFETCH_W(p) __builtin_prefetch((p), 1, 1)
#define DPS_PREFETCH_R(p) __builtin_prefetch((p), 0, 1)
#else
#define DPS_PREFETCH_W(p) ((void)(p))
#define DPS_PREFETCH_R(p) ((void)(p))
#endif

/* murmur3's 64-bit finaliser: a bijection on 64-bit words with full avalanche. */
static inline uint64_t dps_fmix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

#endif
