/* Small helpers shared by the hash tables and the radix grouping (count_pairset.c, keymap.c,
 * radix_pairs.c). Plain C11. */
#ifndef DPS_HASHING_H
#define DPS_HASHING_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/* An unsigned integer of `width` bytes (1, 2, 4 or 8; anything else reads 8) at `p`, in native
 * byte order, unaligned. */
static inline uint64_t dps_load_word(const uint8_t *p, size_t width) {
    switch (width) {
    case 1: return p[0];
    case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
    default: { uint64_t v; memcpy(&v, p, 8); return v; }
    }
}

#endif
