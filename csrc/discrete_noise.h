/* Exact discrete Laplace and discrete Gaussian noise on the package CSPRNG
 * (docs/privacy/discrete-noise.md).
 *
 * The samplers are Algorithms 1-3 of Canonne, Kamath, Steinke, "The Discrete Gaussian for
 * Differential Privacy" (NeurIPS 2020), in integer arithmetic only:
 *   - Bernoulli(a/b) is "U < a" for U uniform below b, drawn by exact rejection on whole bytes
 *     (no modulo, no floating point);
 *   - Bernoulli(exp(-g)) for a rational g is Algorithm 1: floor(g) draws of Bernoulli(exp(-1)),
 *     then the series loop on the fractional part;
 *   - the discrete Laplace of rational scale t = num/den, P[X = x] proportional to exp(-|x|/t),
 *     is Algorithm 2;
 *   - the discrete Gaussian, P[X = x] proportional to exp(-x^2 / (2 sigma^2)), is Algorithm 3:
 *     a discrete Laplace proposal of scale t accepted with probability
 *     exp(-(|y| - sigma^2/t)^2 / (2 sigma^2)). The law is exact for any t > 0; t ~ sigma keeps
 *     the acceptance rate high.
 * So, given uniform bytes, each output has exactly the discrete law; nothing is rounded.
 *
 * Arithmetic: 128-bit, through dps_u128 (native unsigned __int128 where the compiler has it, a
 * portable implementation otherwise; both are compiled and tested against each other).
 * Parameters are checked by the caller (dpselect/_noise.pyx): numerators and denominators are
 * in [1, 2^63) and the Gaussian's gamma_den is below 2^100.
 *
 * TIMING CAVEAT. The number of loop iterations, and of random bytes read, depends on the noise
 * value drawn: the loops are rejection and geometric loops (Jin et al., IEEE S&P 2022, time
 * them). It does not depend on the value the noise is added to, but the noise is the distance
 * between the released and the true value, so an observer who can time single draws (or tiny
 * batches) learns more than the privacy statement allows. Do not expose per-draw timings. */
#ifndef DPS_DISCRETE_NOISE_H
#define DPS_DISCRETE_NOISE_H

#include <stddef.h>
#include <stdint.h>

#include "csprng.h"

#define DPS_ERR_NOISE_OVERFLOW (-20) /* value + noise (or the noise itself) is outside int64 */
#define DPS_ERR_NOISE_LIMIT (-21)    /* an event of probability below exp(-2^26) happened */

typedef struct {
    uint64_t hi, lo;
} dps_u128;

/* The discrete Gaussian of variance sigma^2, as Algorithm 3 runs it: a discrete Laplace proposal
 * of scale lap_num/lap_den, accepted with probability exp(-(|y| shift_den - shift_num)^2 /
 * gamma_den). Valid when (lap_num/lap_den)(shift_num/shift_den) = sigma^2 and
 * gamma_den = 2 sigma^2 shift_den^2 (an integer below 2^100). */
typedef struct {
    uint64_t lap_num, lap_den;
    uint64_t shift_num, shift_den;
    dps_u128 gamma_den;
} dps_dgauss;

/* out[i] = in[i] + X_i, X_i independent exact discrete Laplace of scale num/den (both in
 * [1, 2^63)). in and out may be the same array. On DPS_ERR_NOISE_OVERFLOW, *bad is the index;
 * out is then partly written (the binding zeroes it). */
int dps_add_discrete_laplace(dps_rng *s, uint64_t num, uint64_t den, const int64_t *in,
                             int64_t *out, size_t n, size_t *bad);

/* The same with exact discrete Gaussian noise. */
int dps_add_discrete_gaussian(dps_rng *s, const dps_dgauss *g, const int64_t *in, int64_t *out,
                              size_t n, size_t *bad);

/* Exact Bernoulli(exp(-num/den)) for den >= 1 (tests, and the building block above). */
int dps_bernoulli_exp(dps_rng *s, dps_u128 num, dps_u128 den, int *out);

/* 128-bit helpers (exposed for tests). divmod returns 0, or -1 when d == 0. */
void dps_u128_mul64(uint64_t a, uint64_t b, dps_u128 *out);
int dps_u128_divmod(dps_u128 n, dps_u128 d, dps_u128 *q, dps_u128 *r);
int dps_u128_divmod_portable(dps_u128 n, dps_u128 d, dps_u128 *q, dps_u128 *r);
void dps_u128_mul64_portable(uint64_t a, uint64_t b, dps_u128 *out);

#endif
