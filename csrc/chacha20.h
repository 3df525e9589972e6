/* ChaCha20 block function (RFC 8439 §2.3), one block and many blocks at once.
 *
 * Keystream bytes are the little-endian serialisation of the output words, exactly as the RFC
 * defines them, whichever engine (scalar, portable multi-lane, AVX2) produces them. */
#ifndef DPS_CHACHA20_H
#define DPS_CHACHA20_H

#include <stddef.h>
#include <stdint.h>

#define DPS_CHACHA_BLOCK 64

/* RFC 8439 §2.1: the quarter round on four words (exposed for the §2.1.1 test vector). */
void dps_chacha20_quarter_round(uint32_t *a, uint32_t *b, uint32_t *c, uint32_t *d);

/* One 64-byte block: key (8 words), block counter, nonce (3 words). */
void dps_chacha20_block(const uint32_t key[8], uint32_t counter, const uint32_t nonce[3],
                        uint8_t out[DPS_CHACHA_BLOCK]);

/* nblocks consecutive blocks starting at `counter`, written to out (64 * nblocks bytes).
 * Uses the fastest engine the CPU supports; every engine yields the scalar keystream. */
void dps_chacha20_blocks(const uint32_t key[8], uint32_t counter, const uint32_t nonce[3],
                         uint8_t *out, size_t nblocks);

/* The same through a named engine, for tests: 0 scalar, 1 portable multi-lane, 2 AVX2,
 * 3 AVX-512.
 * Returns -1 (and writes nothing) when the engine is not available on this CPU/compiler. */
int dps_chacha20_blocks_engine(int engine, const uint32_t key[8], uint32_t counter,
                               const uint32_t nonce[3], uint8_t *out, size_t nblocks);

/* Name of the engine dps_chacha20_blocks uses on this machine. */
const char *dps_chacha20_engine_name(void);

/* Little-endian word load/store, independent of the host byte order. */
static inline uint32_t dps_load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline void dps_store_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

#endif
