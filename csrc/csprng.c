#include "csprng.h"

#include "chacha20.h"
#include "os_entropy.h"

/* Zeroing that the optimiser may not drop. */
static void secure_zero(void *p, size_t n) {
    volatile uint8_t *v = (volatile uint8_t *)p;
    while (n--) *v++ = 0;
}

int dps_rng_init_secure(dps_rng *s) {
    uint8_t seed[DPS_RNG_KEY_BYTES];
    if (dps_os_entropy(seed, sizeof seed) != 0) return DPS_ERR_OS_RNG;
    for (int i = 0; i < 8; i++) s->key[i] = dps_load_le32(seed + 4 * i);
    secure_zero(seed, sizeof seed);
    secure_zero(s->buf, sizeof s->buf);
    s->nonce[0] = s->nonce[1] = s->nonce[2] = 0;
    s->pos = DPS_RNG_BUF;
    s->since_reseed = 0;
    s->mode = DPS_RNG_SECURE;
    s->initialised = DPS_RNG_MAGIC;
    return DPS_OK;
}

int dps_rng_init_insecure(dps_rng *s, const uint8_t seed[32], uint64_t stream, uint64_t ack) {
#ifdef DPS_NO_TEST_RNG
    (void)s; (void)seed; (void)stream; (void)ack;
    return DPS_ERR_DISABLED;
#else
    if (ack != DPS_ACK_INSECURE) return DPS_ERR_ACK;
    for (int i = 0; i < 8; i++) s->key[i] = dps_load_le32(seed + 4 * i);
    secure_zero(s->buf, sizeof s->buf);
    s->nonce[0] = 0x54455354u; /* "TEST": a test stream never equals a secure one */
    s->nonce[1] = (uint32_t)stream;
    s->nonce[2] = (uint32_t)(stream >> 32);
    s->pos = DPS_RNG_BUF;
    s->since_reseed = 0;
    s->mode = DPS_RNG_INSECURE;
    s->initialised = DPS_RNG_MAGIC;
    return DPS_OK;
#endif
}

int dps_rng_mix_os(dps_rng *s) {
    uint8_t fresh[DPS_RNG_KEY_BYTES];
    if (s->mode != DPS_RNG_SECURE) return DPS_OK;
    if (dps_os_entropy(fresh, sizeof fresh) != 0) return DPS_ERR_OS_RNG;
    for (int i = 0; i < 8; i++) s->key[i] ^= dps_load_le32(fresh + 4 * i);
    secure_zero(fresh, sizeof fresh);
    secure_zero(s->buf, sizeof s->buf);
    s->pos = DPS_RNG_BUF;
    s->since_reseed = 0;
    return DPS_OK;
}

int dps_rng_refill(dps_rng *s) {
    if (s->initialised != DPS_RNG_MAGIC) return DPS_ERR_BAD_STATE;
    if (s->mode == DPS_RNG_SECURE && s->since_reseed >= DPS_RNG_RESEED_BYTES) {
        int rc = dps_rng_mix_os(s);
        if (rc != DPS_OK) return rc;
    }
    dps_chacha20_blocks(s->key, 0, s->nonce, s->buf, DPS_RNG_BUF / DPS_CHACHA_BLOCK);
    for (int i = 0; i < 8; i++) s->key[i] = dps_load_le32(s->buf + 4 * i);
    secure_zero(s->buf, DPS_RNG_KEY_BYTES);
    s->pos = DPS_RNG_KEY_BYTES;
    s->since_reseed += DPS_RNG_BUF - DPS_RNG_KEY_BYTES;
    return DPS_OK;
}

void dps_rng_wipe_consumed(dps_rng *s) {
    if (s->pos > DPS_RNG_BUF) s->pos = DPS_RNG_BUF;
    secure_zero(s->buf, s->pos);
}

int dps_rng_fill(dps_rng *s, uint8_t *out, size_t n) {
    while (n > 0) {
        if (s->pos >= DPS_RNG_BUF) {
            int rc = dps_rng_refill(s);
            if (rc != DPS_OK) return rc;
        }
        size_t take = DPS_RNG_BUF - s->pos;
        if (take > n) take = n;
        memcpy(out, s->buf + s->pos, take);
        secure_zero(s->buf + s->pos, take);
        s->pos += (uint32_t)take;
        out += take;
        n -= take;
    }
    return DPS_OK;
}

int dps_rng_uniform_below(dps_rng *s, uint64_t bound, uint64_t *out) {
    if (bound == 1) { *out = 0; return DPS_OK; }
    /* bits needed for bound-1; bound == 0 stands for 2^64 */
    uint64_t top = bound - 1;
    int bits = 0;
    while (bits < 64 && (top >> bits) != 0) bits++;
    int nbytes = (bits + 7) / 8;
    uint64_t mask = bits == 64 ? ~(uint64_t)0 : (((uint64_t)1 << bits) - 1);
    for (;;) {
        int rc = dps_rng_reserve(s, (uint32_t)nbytes);
        if (rc != DPS_OK) return rc;
        uint64_t v = dps_load_be(s->buf + s->pos, nbytes) & mask;
        s->pos += (uint32_t)nbytes;
        if (bound == 0 || v < bound) { *out = v; return DPS_OK; }
    }
}
