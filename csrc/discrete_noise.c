/* Exact discrete Laplace and discrete Gaussian noise (see discrete_noise.h). */
#include "discrete_noise.h"

#include <limits.h>

/* ------------------------------------------------------------------ 128-bit arithmetic */

static inline dps_u128 u128_of(uint64_t x) {
    dps_u128 r = {0, x};
    return r;
}

static inline int u128_lt(dps_u128 a, dps_u128 b) {
    return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo);
}

static inline dps_u128 u128_sub(dps_u128 a, dps_u128 b) { /* a >= b */
    dps_u128 r;
    r.lo = a.lo - b.lo;
    r.hi = a.hi - b.hi - (a.lo < b.lo);
    return r;
}

static inline int clz64(uint64_t x) { /* x != 0 */
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_clzll(x);
#else
    int n = 0;
    while (!(x >> 63)) { x <<= 1; n++; }
    return n;
#endif
}

static inline int bitlen64(uint64_t x) { return x ? 64 - clz64(x) : 0; }

static inline int bitlen128(dps_u128 x) { return x.hi ? 64 + bitlen64(x.hi) : bitlen64(x.lo); }

void dps_u128_mul64_portable(uint64_t a, uint64_t b, dps_u128 *out) {
    uint64_t a0 = a & 0xFFFFFFFFu, a1 = a >> 32, b0 = b & 0xFFFFFFFFu, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (p01 & 0xFFFFFFFFu) + (p10 & 0xFFFFFFFFu); /* < 2^34 */
    out->lo = (mid << 32) | (p00 & 0xFFFFFFFFu);
    out->hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}

/* Shift-and-subtract long division: slow (one step per quotient bit) but plain C. */
int dps_u128_divmod_portable(dps_u128 n, dps_u128 d, dps_u128 *q, dps_u128 *r) {
    if (d.hi == 0 && d.lo == 0) return -1;
    if (n.hi == 0 && d.hi == 0) {
        *q = u128_of(n.lo / d.lo);
        *r = u128_of(n.lo % d.lo);
        return 0;
    }
    dps_u128 quot = {0, 0};
    if (!u128_lt(n, d)) {
        int shift = bitlen128(n) - bitlen128(d);
        /* d << shift has the same bit length as n */
        dps_u128 dd = d;
        if (shift >= 64) {
            dd.hi = dd.lo << (shift - 64);
            dd.lo = 0;
        } else if (shift > 0) {
            dd.hi = (dd.hi << shift) | (dd.lo >> (64 - shift));
            dd.lo <<= shift;
        }
        for (int i = 0; i <= shift; i++) {
            quot.hi = (quot.hi << 1) | (quot.lo >> 63);
            quot.lo <<= 1;
            if (!u128_lt(n, dd)) {
                n = u128_sub(n, dd);
                quot.lo |= 1;
            }
            dd.lo = (dd.lo >> 1) | (dd.hi << 63);
            dd.hi >>= 1;
        }
    }
    *q = quot;
    *r = n;
    return 0;
}

#if defined(__SIZEOF_INT128__)
__extension__ typedef unsigned __int128 native_u128;

static inline native_u128 to_native(dps_u128 a) { return ((native_u128)a.hi << 64) | a.lo; }

static inline dps_u128 from_native(native_u128 x) {
    dps_u128 r = {(uint64_t)(x >> 64), (uint64_t)x};
    return r;
}

void dps_u128_mul64(uint64_t a, uint64_t b, dps_u128 *out) {
    *out = from_native((native_u128)a * b);
}

int dps_u128_divmod(dps_u128 n, dps_u128 d, dps_u128 *q, dps_u128 *r) {
    if (d.hi == 0 && d.lo == 0) return -1;
    if (n.hi == 0 && d.hi == 0) { /* the common case: plain 64-bit division */
        *q = u128_of(n.lo / d.lo);
        *r = u128_of(n.lo % d.lo);
        return 0;
    }
    native_u128 nn = to_native(n), dn = to_native(d);
    *q = from_native(nn / dn);
    *r = from_native(nn % dn);
    return 0;
}
#else
void dps_u128_mul64(uint64_t a, uint64_t b, dps_u128 *out) { dps_u128_mul64_portable(a, b, out); }

int dps_u128_divmod(dps_u128 n, dps_u128 d, dps_u128 *q, dps_u128 *r) {
    return dps_u128_divmod_portable(n, d, q, r);
}
#endif

/* a * k, or 1 when it does not fit in 128 bits. */
static int u128_mul_small_overflows(dps_u128 a, uint64_t k, dps_u128 *out) {
    dps_u128 low, high;
    dps_u128_mul64(a.lo, k, &low);
    dps_u128_mul64(a.hi, k, &high);
    if (high.hi != 0) return 1;
    out->lo = low.lo;
    out->hi = low.hi + high.lo;
    return out->hi < low.hi;
}

/* ------------------------------------------------------------------ exact uniform draws */

/* Uniform in [0, bound), 1 <= bound <= 2^64 (bound 0 stands for 2^64): rejection on the
 * fewest whole bytes that cover bound - 1, as dps_rng_uniform_below, with the bit length from
 * one instruction instead of a loop (this is the inner loop of every sampler here). */
static inline int uniform_below64(dps_rng *s, uint64_t bound, uint64_t *out) {
    if (bound == 1) {
        *out = 0;
        return DPS_OK;
    }
    uint64_t top = bound - 1; /* 2^64 - 1 when bound == 0 */
    int bits = bitlen64(top);
    int nbytes = (bits + 7) >> 3;
    uint64_t mask = bits == 64 ? ~(uint64_t)0 : (((uint64_t)1 << bits) - 1);
    for (;;) {
        int rc = dps_rng_reserve(s, (uint32_t)nbytes);
        if (rc != DPS_OK) return rc;
        uint64_t v = dps_load_be(s->buf + s->pos, nbytes) & mask;
        s->pos += (uint32_t)nbytes;
        if (v <= top) {
            *out = v;
            return DPS_OK;
        }
    }
}

/* Uniform in [0, bound) for 1 <= bound <= 2^128 - 1, by the same rule on up to 16 bytes. */
static int uniform_below128(dps_rng *s, dps_u128 bound, dps_u128 *out) {
    dps_u128 top = u128_sub(bound, u128_of(1));
    if (top.hi == 0) {
        out->hi = 0;
        return uniform_below64(s, top.lo + 1, &out->lo); /* top.lo + 1 wraps to 0 = 2^64 */
    }
    int hibits = bitlen64(top.hi);
    int hibytes = (hibits + 7) >> 3;
    uint64_t mask = hibits == 64 ? ~(uint64_t)0 : (((uint64_t)1 << hibits) - 1);
    for (;;) {
        int rc = dps_rng_reserve(s, (uint32_t)(8 + hibytes));
        if (rc != DPS_OK) return rc;
        const uint8_t *p = s->buf + s->pos;
        dps_u128 v = {dps_load_be(p, hibytes) & mask, dps_load_be(p + hibytes, 8)};
        s->pos += (uint32_t)(8 + hibytes);
        if (!u128_lt(top, v)) {
            *out = v;
            return DPS_OK;
        }
    }
}

/* ------------------------------------------------------------------ exact Bernoulli draws */

/* Bernoulli(a / b) for b >= 1: U < a with U uniform below b. Certain events use no bytes. */
static int bernoulli_ratio(dps_rng *s, dps_u128 a, dps_u128 b, int *out) {
    if (a.hi == 0 && a.lo == 0) {
        *out = 0;
        return DPS_OK;
    }
    if (!u128_lt(a, b)) {
        *out = 1;
        return DPS_OK;
    }
    dps_u128 u;
    int rc = uniform_below128(s, b, &u);
    if (rc != DPS_OK) return rc;
    *out = u128_lt(u, a);
    return DPS_OK;
}

/* Bernoulli(exp(-1)) by Algorithm 1 with gamma = 1: the first draw, Bernoulli(1/1), is certain;
 * then Bernoulli(1/k) for k = 2, 3, ... until one fails; true iff that k is odd. */
static inline int bernoulli_exp_one(dps_rng *s, int *out) {
    for (uint64_t k = 2;; k++) {
        uint64_t u;
        int rc = uniform_below64(s, k, &u);
        if (rc != DPS_OK) return rc;
        if (u != 0) {
            *out = (int)(k & 1);
            return DPS_OK;
        }
    }
}

/* Bernoulli(exp(-r/d)) for 0 <= r < d (Algorithm 1): Bernoulli(r/(d k)) for k = 1, 2, ...
 * until one fails; true iff that k is odd. When d k does not fit in 128 bits the draw is made
 * as Bernoulli(r/d) AND Bernoulli(1/k), the same probability. */
static int bernoulli_exp_fraction(dps_rng *s, dps_u128 r, dps_u128 d, int *out) {
    for (uint64_t k = 1;; k++) {
        dps_u128 dk;
        int hit, rc;
        if (!u128_mul_small_overflows(d, k, &dk)) {
            rc = bernoulli_ratio(s, r, dk, &hit);
        } else {
            rc = bernoulli_ratio(s, r, d, &hit);
            if (rc == DPS_OK && hit) rc = bernoulli_ratio(s, u128_of(1), u128_of(k), &hit);
        }
        if (rc != DPS_OK) return rc;
        if (!hit) {
            *out = (int)(k & 1);
            return DPS_OK;
        }
    }
}

/* Bernoulli(exp(-num/den)), den >= 1: floor(num/den) draws of Bernoulli(exp(-1)), stopping at
 * the first failure, then the fractional part. */
int dps_bernoulli_exp(dps_rng *s, dps_u128 num, dps_u128 den, int *out) {
    dps_u128 whole, rest;
    if (dps_u128_divmod(num, den, &whole, &rest) != 0) return DPS_ERR_BAD_TABLE;
    while (whole.hi != 0 || whole.lo != 0) {
        int hit, rc = bernoulli_exp_one(s, &hit);
        if (rc != DPS_OK) return rc;
        if (!hit) {
            *out = 0;
            return DPS_OK;
        }
        whole = u128_sub(whole, u128_of(1));
    }
    return bernoulli_exp_fraction(s, rest, den, out);
}

/* ------------------------------------------------------------------ the samplers */

/* Algorithm 2: discrete Laplace of scale t = num/den, as a sign and a magnitude. The magnitude
 * may exceed 2^63 (callers decide what that means). */
static int discrete_laplace(dps_rng *s, uint64_t num, uint64_t den, int *negative, dps_u128 *mag) {
    for (;;) {
        uint64_t u, v = 0, sign;
        int hit, rc = uniform_below64(s, num, &u);
        if (rc != DPS_OK) return rc;
        rc = bernoulli_exp_fraction(s, u128_of(u), u128_of(num), &hit);
        if (rc != DPS_OK) return rc;
        if (!hit) continue;
        for (;;) { /* V: geometric, P[V >= v] = exp(-v) */
            rc = bernoulli_exp_one(s, &hit);
            if (rc != DPS_OK) return rc;
            if (!hit) break;
            if (++v == UINT64_MAX) return DPS_ERR_NOISE_LIMIT; /* probability exp(-2^64) */
        }
        dps_u128 x, y, rem;
        dps_u128_mul64(num, v, &x); /* < 2^127: num < 2^63 */
        x.lo += u;
        x.hi += x.lo < u;
        dps_u128_divmod(x, u128_of(den), &y, &rem);
        rc = uniform_below64(s, 2, &sign);
        if (rc != DPS_OK) return rc;
        if (sign && y.hi == 0 && y.lo == 0) continue; /* -0: reject, so 0 is not counted twice */
        *negative = (int)sign;
        *mag = y;
        return DPS_OK;
    }
}

/* At least this many Bernoulli(exp(-1)) draws must all succeed for a proposal with
 * z = | |y| shift_den - shift_num | >= 2^63 to be accepted: gamma = z^2 / gamma_den exceeds
 * 2^126 / 2^100. */
#define HUGE_GAMMA_DRAWS (UINT64_C(1) << 26)

/* Algorithm 3: discrete Gaussian, by discrete Laplace proposals. */
static int discrete_gaussian(dps_rng *s, const dps_dgauss *g, int64_t *out) {
    for (;;) {
        int negative, hit, rc;
        dps_u128 mag;
        rc = discrete_laplace(s, g->lap_num, g->lap_den, &negative, &mag);
        if (rc != DPS_OK) return rc;
        if (mag.hi == 0) {
            dps_u128 scaled, z;
            dps_u128_mul64(mag.lo, g->shift_den, &scaled);
            z = u128_lt(scaled, u128_of(g->shift_num)) ? u128_sub(u128_of(g->shift_num), scaled)
                                                        : u128_sub(scaled, u128_of(g->shift_num));
            if (z.hi == 0) {
                dps_u128 z2;
                dps_u128_mul64(z.lo, z.lo, &z2);
                rc = dps_bernoulli_exp(s, z2, g->gamma_den, &hit);
                if (rc != DPS_OK) return rc;
                if (!hit) continue;
                if (mag.lo > (uint64_t)INT64_MAX) return DPS_ERR_NOISE_OVERFLOW;
                *out = negative ? -(int64_t)mag.lo : (int64_t)mag.lo;
                return DPS_OK;
            }
        }
        /* z >= 2^63 (z^2 would not fit in 128 bits): gamma > 2^26. The first 2^26 of the
         * floor(gamma) Bernoulli(exp(-1)) draws decide unless they all succeed, which has
         * probability exp(-2^26); then the call fails rather than guess. */
        uint64_t i;
        for (i = 0; i < HUGE_GAMMA_DRAWS; i++) {
            rc = bernoulli_exp_one(s, &hit);
            if (rc != DPS_OK) return rc;
            if (!hit) break;
        }
        if (i == HUGE_GAMMA_DRAWS) return DPS_ERR_NOISE_LIMIT;
    }
}

static inline int add_checked(int64_t a, int64_t b, int64_t *out) {
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) return 1;
    *out = a + b;
    return 0;
}

int dps_add_discrete_laplace(dps_rng *s, uint64_t num, uint64_t den, const int64_t *in,
                             int64_t *out, size_t n, size_t *bad) {
    for (size_t i = 0; i < n; i++) {
        int negative;
        dps_u128 mag;
        int rc = discrete_laplace(s, num, den, &negative, &mag);
        if (rc != DPS_OK) return rc;
        if (mag.hi != 0 || mag.lo > (uint64_t)INT64_MAX) {
            *bad = i;
            return DPS_ERR_NOISE_OVERFLOW;
        }
        int64_t noise = negative ? -(int64_t)mag.lo : (int64_t)mag.lo;
        if (add_checked(in[i], noise, &out[i])) {
            *bad = i;
            return DPS_ERR_NOISE_OVERFLOW;
        }
    }
    return DPS_OK;
}

int dps_add_discrete_gaussian(dps_rng *s, const dps_dgauss *g, const int64_t *in, int64_t *out,
                              size_t n, size_t *bad) {
    for (size_t i = 0; i < n; i++) {
        int64_t noise;
        int rc = discrete_gaussian(s, g, &noise);
        if (rc == DPS_ERR_NOISE_OVERFLOW) *bad = i;
        if (rc != DPS_OK) return rc;
        if (add_checked(in[i], noise, &out[i])) {
            *bad = i;
            return DPS_ERR_NOISE_OVERFLOW;
        }
    }
    return DPS_OK;
}
