/* ChaCha20 (RFC 8439): a scalar reference engine and a multi-lane engine written with GNU vector
 * extensions, compiled twice (baseline ISA and AVX2) and chosen at run time. ARX only: no table
 * lookups, so every engine runs in constant time. */
#include "chacha20.h"

#include <string.h>

#define ROTL32(v, n) (((v) << (n)) | ((v) >> (32 - (n))))

void dps_chacha20_quarter_round(uint32_t *a, uint32_t *b, uint32_t *c, uint32_t *d) {
    *a += *b; *d ^= *a; *d = ROTL32(*d, 16);
    *c += *d; *b ^= *c; *b = ROTL32(*b, 12);
    *a += *b; *d ^= *a; *d = ROTL32(*d, 8);
    *c += *d; *b ^= *c; *b = ROTL32(*b, 7);
}

static void init_state(uint32_t s[16], const uint32_t key[8], uint32_t counter, const uint32_t nonce[3]) {
    s[0] = 0x61707865u; s[1] = 0x3320646eu; s[2] = 0x79622d32u; s[3] = 0x6b206574u;
    for (int i = 0; i < 8; i++) s[4 + i] = key[i];
    s[12] = counter;
    s[13] = nonce[0]; s[14] = nonce[1]; s[15] = nonce[2];
}

void dps_chacha20_block(const uint32_t key[8], uint32_t counter, const uint32_t nonce[3],
                        uint8_t out[DPS_CHACHA_BLOCK]) {
    uint32_t in[16], x[16];
    init_state(in, key, counter, nonce);
    memcpy(x, in, sizeof x);
    for (int r = 0; r < 10; r++) {
        dps_chacha20_quarter_round(&x[0], &x[4], &x[8], &x[12]);
        dps_chacha20_quarter_round(&x[1], &x[5], &x[9], &x[13]);
        dps_chacha20_quarter_round(&x[2], &x[6], &x[10], &x[14]);
        dps_chacha20_quarter_round(&x[3], &x[7], &x[11], &x[15]);
        dps_chacha20_quarter_round(&x[0], &x[5], &x[10], &x[15]);
        dps_chacha20_quarter_round(&x[1], &x[6], &x[11], &x[12]);
        dps_chacha20_quarter_round(&x[2], &x[7], &x[8], &x[13]);
        dps_chacha20_quarter_round(&x[3], &x[4], &x[9], &x[14]);
    }
    for (int i = 0; i < 16; i++) dps_store_le32(out + 4 * i, x[i] + in[i]);
    memset(x, 0, sizeof x);
    memset(in, 0, sizeof in);
}

static void blocks_scalar(const uint32_t key[8], uint32_t counter, const uint32_t nonce[3],
                          uint8_t *out, size_t nblocks) {
    for (size_t b = 0; b < nblocks; b++)
        dps_chacha20_block(key, counter + (uint32_t)b, nonce, out + DPS_CHACHA_BLOCK * b);
}

#if defined(__GNUC__) || defined(__clang__)
#define DPS_HAVE_VECTOR 1
typedef uint32_t v8u32 __attribute__((vector_size(32)));
typedef uint32_t v16u32 __attribute__((vector_size(64)));

#define VROT(v, n) (((v) << (n)) | ((v) >> (32 - (n))))
#define VQR(a, b, c, d)                                    \
    a += b; d ^= a; d = VROT(d, 16);                       \
    c += d; b ^= c; b = VROT(b, 12);                       \
    a += b; d ^= a; d = VROT(d, 8);                        \
    c += d; b ^= c; b = VROT(b, 7);

/* LANES blocks per pass: lane l of every vector belongs to block counter + l. The same body is
 * compiled for the baseline ISA, AVX2 and AVX-512; only the target attribute and width differ.
 * Words are gathered per lane through a small buffer (vector stores, then word copies), which
 * keeps the output the exact RFC keystream on little-endian hosts. */
#define DEFINE_VECTOR_ENGINE(NAME, VT, LANES, ATTR)                                               \
    ATTR static void NAME(const uint32_t key[8], uint32_t counter, const uint32_t nonce[3],     \
                          uint8_t *out, size_t nblocks) {                                        \
        uint32_t in[16];                                                                         \
        init_state(in, key, counter, nonce);                                                     \
        VT lane;                                                                                 \
        for (int l = 0; l < LANES; l++) lane[l] = (uint32_t)l;                                   \
        size_t b = 0;                                                                            \
        for (; b + LANES <= nblocks; b += LANES) {                                               \
            VT x[16], s[16];                                                                     \
            for (int i = 0; i < 16; i++) s[i] = (VT){0} + in[i];                                 \
            s[12] = lane + (counter + (uint32_t)b);                                              \
            for (int i = 0; i < 16; i++) x[i] = s[i];                                            \
            for (int r = 0; r < 10; r++) {                                                       \
                VQR(x[0], x[4], x[8], x[12]) VQR(x[1], x[5], x[9], x[13])                        \
                VQR(x[2], x[6], x[10], x[14]) VQR(x[3], x[7], x[11], x[15])                      \
                VQR(x[0], x[5], x[10], x[15]) VQR(x[1], x[6], x[11], x[12])                      \
                VQR(x[2], x[7], x[8], x[13]) VQR(x[3], x[4], x[9], x[14])                        \
            }                                                                                    \
            uint32_t words[16][LANES];                                                           \
            for (int i = 0; i < 16; i++) {                                                       \
                VT v = x[i] + s[i];                                                              \
                memcpy(words[i], &v, sizeof v);                                                  \
            }                                                                                    \
            for (int l = 0; l < LANES; l++) {                                                    \
                uint8_t *o = out + DPS_CHACHA_BLOCK * (b + l);                                   \
                for (int i = 0; i < 16; i++) STORE_WORD(o + 4 * i, words[i][l]);                 \
            }                                                                                    \
            memset(words, 0, sizeof words);                                                      \
        }                                                                                        \
        if (b < nblocks) blocks_scalar(key, counter + (uint32_t)b, nonce,                       \
                                       out + DPS_CHACHA_BLOCK * b, nblocks - b);                 \
        memset(in, 0, sizeof in);                                                                \
    }

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define STORE_WORD(p, w) do { uint32_t w_ = (w); memcpy((p), &w_, 4); } while (0)
#else
#define STORE_WORD(p, w) dps_store_le32((p), (w))
#endif

DEFINE_VECTOR_ENGINE(blocks_vector, v8u32, 8, )

#if (defined(__x86_64__) || defined(__i386__)) && !defined(DPS_NO_AVX2)
#define DPS_HAVE_AVX2 1
DEFINE_VECTOR_ENGINE(blocks_avx2, v8u32, 8, __attribute__((target("avx2"))))
DEFINE_VECTOR_ENGINE(blocks_avx512, v16u32, 16, __attribute__((target("avx512f"))))
static int cpu_has(int which) {
    __builtin_cpu_init();
    return which == 2 ? __builtin_cpu_supports("avx2") : __builtin_cpu_supports("avx512f");
}
#endif
#endif /* GNU vector extensions */

int dps_chacha20_blocks_engine(int engine, const uint32_t key[8], uint32_t counter,
                               const uint32_t nonce[3], uint8_t *out, size_t nblocks) {
    switch (engine) {
    case 0: blocks_scalar(key, counter, nonce, out, nblocks); return 0;
#ifdef DPS_HAVE_VECTOR
    case 1: blocks_vector(key, counter, nonce, out, nblocks); return 0;
#endif
#ifdef DPS_HAVE_AVX2
    case 2:
        if (!cpu_has(2)) return -1;
        blocks_avx2(key, counter, nonce, out, nblocks);
        return 0;
    case 3:
        if (!cpu_has(3)) return -1;
        blocks_avx512(key, counter, nonce, out, nblocks);
        return 0;
#endif
    default: return -1;
    }
}

/* Engine choice is a pure function of the CPU, so a benign race on first use is harmless. */
static int chosen_engine = -1;

static int best_engine(void) {
    if (chosen_engine < 0) {
        int e = 0;
#ifdef DPS_HAVE_VECTOR
        e = 1;
#endif
#ifdef DPS_HAVE_AVX2
        if (cpu_has(2)) e = 2;
        if (cpu_has(3)) e = 3;
#endif
        chosen_engine = e;
    }
    return chosen_engine;
}

void dps_chacha20_blocks(const uint32_t key[8], uint32_t counter, const uint32_t nonce[3],
                         uint8_t *out, size_t nblocks) {
    (void)dps_chacha20_blocks_engine(best_engine(), key, counter, nonce, out, nblocks);
}

const char *dps_chacha20_engine_name(void) {
    static const char *names[] = {"scalar", "vector", "avx2", "avx512"};
    return names[best_engine()];
}
