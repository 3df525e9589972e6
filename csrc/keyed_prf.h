/* A keyed pseudo-random function on 128-bit inputs, for random choices that must come out the
 * same whenever they are recomputed (dpselect.spark's contribution bounding: a task that Spark
 * re-runs, or a shuffle stage it recomputes, must draw what the first run drew; docs/spark.md,
 * "Randomness").
 *
 * out[i] is the first 8 bytes, read little-endian, of the ChaCha20 block (RFC 8439 §2.3) under
 * the 256-bit `key`, with block counter = the high 32 bits of b[i] and nonce = (the low and the
 * high 32 bits of a[i], the low 32 bits of b[i]). Distinct inputs (a[i], b[i]) are distinct
 * (counter, nonce) pairs, so under a uniformly random secret key the outputs are indistinguishable
 * from independent uniform 64-bit values, to the extent that ChaCha20's block function is a PRF. */
#ifndef DPS_KEYED_PRF_H
#define DPS_KEYED_PRF_H

#include <stddef.h>
#include <stdint.h>

void dps_keyed_prf_u64(const uint32_t key[8], const uint64_t *a, const uint64_t *b, uint64_t *out, size_t n);

#endif
