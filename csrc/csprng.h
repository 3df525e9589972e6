/* A fast-key-erasure ChaCha20 generator (docs/privacy/randomness.md).
 *
 * Each refill produces 64 ChaCha20 blocks under the current key; the first 32 bytes become the
 * next key and are zeroed, the other 4064 bytes are served. A key is used for one refill only, so
 * a state captured later reveals nothing that was served earlier. Secure states take their key
 * from the OS and mix in 32 fresh OS bytes at every batch entry and every 2^26 bytes served.
 *
 * Nothing here has global state: per-thread states, batch entry and fork detection live in
 * rng_thread.h. */
#ifndef DPS_CSPRNG_H
#define DPS_CSPRNG_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define DPS_RNG_BUF 4096
#define DPS_RNG_KEY_BYTES 32
#define DPS_RNG_MAGIC 0x44505352u          /* "DPSR": the state is initialised */
#define DPS_RNG_RESEED_BYTES (1ull << 26)  /* OS bytes are mixed in at least this often */
#define DPS_ACK_INSECURE 0x4E4F545F44505F21ull /* "NOT_DP_!": required by the insecure init */

enum dps_rng_mode { DPS_RNG_SECURE = 1, DPS_RNG_INSECURE = 2 };

enum dps_status {
    DPS_OK = 0,
    DPS_ERR_OS_RNG = -1,         /* the operating system's RNG failed */
    DPS_ERR_FORK_INSECURE = -2,  /* a deterministic test RNG was used across fork() */
    DPS_ERR_NOMEM = -3,
    DPS_ERR_BAD_STATE = -4,      /* state not initialised, or wiped */
    DPS_ERR_ACK = -5,            /* insecure init without the acknowledgement constant */
    DPS_ERR_DISABLED = -6,       /* built with DPS_NO_TEST_RNG */
    DPS_ERR_BAD_TABLE = -7,      /* a probability or weight table failed its load-time checks */
    DPS_ERR_NEGATIVE = -8,       /* a negative count (the index is reported separately) */
};

typedef struct dps_rng {
    uint8_t buf[DPS_RNG_BUF];   /* keystream; bytes before pos are consumed (and zeroed later) */
    uint32_t key[8];
    uint32_t pos;
    uint32_t initialised;       /* DPS_RNG_MAGIC; zero on a page wiped by MADV_WIPEONFORK */
    uint32_t mode;              /* enum dps_rng_mode */
    uint32_t nonce[3];          /* zero for secure states; the stream id for test states */
    uint64_t since_reseed;      /* bytes served since OS bytes were last mixed in */
    uint64_t fork_generation;   /* value of the process fork counter when last (re)seeded */
    long pid;                   /* pid when last (re)seeded */
} dps_rng;

/* Key the state from the OS. */
int dps_rng_init_secure(dps_rng *s);

/* Deterministic test state: key = seed, nonce encodes stream. Refuses unless
 * ack == DPS_ACK_INSECURE; compiled out with -DDPS_NO_TEST_RNG. Results are NOT private. */
int dps_rng_init_insecure(dps_rng *s, const uint8_t seed[32], uint64_t stream, uint64_t ack);

/* XOR 32 fresh OS bytes into the key and drop the buffered bytes (secure states only). */
int dps_rng_mix_os(dps_rng *s);

/* Produce the next 4064 bytes (fast key erasure). */
int dps_rng_refill(dps_rng *s);

/* Zero the consumed part of the buffer (end of batch: backtracking resistance). */
void dps_rng_wipe_consumed(dps_rng *s);

/* Copy n random bytes to out. */
int dps_rng_fill(dps_rng *s, uint8_t *out, size_t n);

/* Exact uniform integer in [0, bound); bound == 0 means [0, 2^64). Rejection sampling on the
 * smallest number of bytes covering bound, so no modulo bias. */
int dps_rng_uniform_below(dps_rng *s, uint64_t bound, uint64_t *out);

/* Make at least n (<= 64) unread bytes available, refilling if needed. */
static inline int dps_rng_reserve(dps_rng *s, uint32_t n) {
    if (s->pos > DPS_RNG_BUF || DPS_RNG_BUF - s->pos < n) { /* never index past the buffer */
        if (s->pos > DPS_RNG_BUF) s->pos = DPS_RNG_BUF;
        memset(s->buf + s->pos, 0, DPS_RNG_BUF - s->pos);
        return dps_rng_refill(s);
    }
    return DPS_OK;
}

/* Big-endian read of 4 bytes (one unaligned load and a byte swap on common hosts). */
static inline uint32_t dps_load_be32(const uint8_t *p) {
#if (defined(__GNUC__) || defined(__clang__)) && defined(__BYTE_ORDER__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t v;
    memcpy(&v, p, 4);
    return __builtin_bswap32(v);
#else
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
#endif
}

/* Big-endian read of n <= 8 bytes. */
static inline uint64_t dps_load_be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

#endif
