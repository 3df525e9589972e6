#include "keyed_prf.h"

#include <string.h>

#include "chacha20.h"

/* Zeroing that the optimiser may not drop: the buffers hold keystream under a secret key. */
static void wipe(void *p, size_t n) {
    volatile uint8_t *v = (volatile uint8_t *)p;
    while (n--) *v++ = 0;
}

static uint64_t one_block(const uint32_t key[8], uint64_t a, uint64_t b) {
    uint8_t block[DPS_CHACHA_BLOCK];
    const uint32_t nonce[3] = {(uint32_t)a, (uint32_t)(a >> 32), (uint32_t)b};
    dps_chacha20_block(key, (uint32_t)(b >> 32), nonce, block);
    uint64_t out = (uint64_t)dps_load_le32(block) | ((uint64_t)dps_load_le32(block + 4) << 32);
    wipe(block, sizeof block);
    return out;
}

#if defined(__GNUC__) || defined(__clang__)
/* LANES inputs per pass, each lane with its own counter and nonce (the engines of chacha20.c
 * share one nonce across lanes, so they cannot serve here). Only words 0 and 1 of each block are
 * needed; the rounds are the RFC's, and tests compare every lane with dps_chacha20_block. */
#define LANES 8
typedef uint32_t vlanes __attribute__((vector_size(4 * LANES)));
#define VROT(v, n) (((v) << (n)) | ((v) >> (32 - (n))))
#define VQR(a, b, c, d)              \
    a += b; d ^= a; d = VROT(d, 16); \
    c += d; b ^= c; b = VROT(b, 12); \
    a += b; d ^= a; d = VROT(d, 8);  \
    c += d; b ^= c; b = VROT(b, 7);

static void lanes_block(const uint32_t key[8], const uint64_t *a, const uint64_t *b, uint64_t *out) {
    static const uint32_t sigma[4] = {0x61707865u, 0x3320646eu, 0x79622d32u, 0x6b206574u};
    vlanes s[16], x[16];
    for (int i = 0; i < 4; i++) s[i] = (vlanes){0} + sigma[i];
    for (int i = 0; i < 8; i++) s[4 + i] = (vlanes){0} + key[i];
    for (int l = 0; l < LANES; l++) {
        s[12][l] = (uint32_t)(b[l] >> 32);
        s[13][l] = (uint32_t)a[l];
        s[14][l] = (uint32_t)(a[l] >> 32);
        s[15][l] = (uint32_t)b[l];
    }
    for (int i = 0; i < 16; i++) x[i] = s[i];
    for (int r = 0; r < 10; r++) {
        VQR(x[0], x[4], x[8], x[12]) VQR(x[1], x[5], x[9], x[13])
        VQR(x[2], x[6], x[10], x[14]) VQR(x[3], x[7], x[11], x[15])
        VQR(x[0], x[5], x[10], x[15]) VQR(x[1], x[6], x[11], x[12])
        VQR(x[2], x[7], x[8], x[13]) VQR(x[3], x[4], x[9], x[14])
    }
    vlanes w0 = x[0] + s[0], w1 = x[1] + s[1];
    for (int l = 0; l < LANES; l++) out[l] = (uint64_t)w0[l] | ((uint64_t)w1[l] << 32);
    wipe(x, sizeof x);
    wipe(s, sizeof s);
    wipe(&w0, sizeof w0);
    wipe(&w1, sizeof w1);
}
#endif

void dps_keyed_prf_u64(const uint32_t key[8], const uint64_t *a, const uint64_t *b, uint64_t *out, size_t n) {
    size_t i = 0;
#if defined(__GNUC__) || defined(__clang__)
    for (; i + LANES <= n; i += LANES) lanes_block(key, a + i, b + i, out + i);
#endif
    for (; i < n; i++) out[i] = one_block(key, a[i], b[i]);
}
