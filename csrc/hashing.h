/* Small helpers shared by the hash tables and the radix grouping (count_pairset.c, keymap.c, key_shards.c,
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

/* A seeded hash of a byte string, 8 bytes at a time (the code maps' hash of strings, keymap.c and
 * key_shards.c); only slot and shard positions depend on it, never codes. */
static inline uint64_t dps_hash_bytes(const uint8_t *p, size_t len, uint64_t seed) {
    uint64_t h = seed ^ ((uint64_t)len * 0x9E3779B97F4A7C15ull);
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ dps_fmix64(w)) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
        p += 8;
        len -= 8;
    }
    if (len) {
        uint64_t w = 0;
        memcpy(&w, p, len);
        h = (h ^ dps_fmix64(w ^ ((uint64_t)len << 56))) * 0x9E3779B97F4A7C15ull;
    }
    return dps_fmix64(h);
}

/* Entry i of Arrow offsets (int32, or int64 when offsets64), loaded with memcpy: the caller's
 * buffer may sit at any address (a slice of a byte buffer), and reading it through an int32_t or
 * int64_t pointer that is not aligned for the type is undefined behaviour (UBSan: "load of
 * misaligned address"). A negative offset becomes UINT64_MAX or huge, so it fails every range
 * check against a buffer's length. */
static inline uint64_t dps_offset_at(const void *offsets, int offsets64, size_t i) {
    const uint8_t *p = (const uint8_t *)offsets;
    if (offsets64) {
        int64_t v;
        memcpy(&v, p + i * sizeof v, sizeof v);
        return (uint64_t)v;
    }
    int32_t v;
    memcpy(&v, p + i * sizeof v, sizeof v);
    return v < 0 ? UINT64_MAX : (uint64_t)v;
}

#endif
