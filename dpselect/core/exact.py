"""Exact arithmetic for certificates: the one home of the package's certified bounds.

Floats enter the privacy path only through :func:`as_fraction`, which reads a float the way
the user wrote it (``1e-5`` means 10^-5: docs/privacy/pi-opt.md); every certificate is then
computed with integers and :class:`fractions.Fraction`, from the bounds below. Each is
*directed*: a lower bound is never above the true value, an upper bound never below it.

* e^x, one algorithm (:func:`_exp_mantissas`: e^y = (e^(y/2^s))^(2^s), a short fixed-point
  Taylor series, then s squarings each rounded on its own side to a fixed number of significant
  bits), seen three ways:

  - :func:`exp_neg_bounds`: e^(−y) to a *relative* precision (tails of noise, the zCDP
    conversion, APPROX_BOUNDS' thresholds: probabilities far below 2^-128);
  - :func:`exp_neg_interval`: e^(−y) to an *absolute* precision at any y (exact comparisons
    with a uniform drawn bit by bit, which ask for more bits until they decide);
  - :func:`exp_lower`, :func:`exp_upper` (and :func:`exp_bounds`, both at once): e^x for any
    rational x rounded down, or up, to a multiple of 2^-bits: the tightest such bounds (keep
    tables, thresholds of the row mechanisms, the factor e^ε of a certificate);

* powers: :func:`fixed_power`, :func:`power_lower`;
* square roots: :func:`sqrt_bounds`;
* the normal distribution: :func:`inv_sqrt_2pi_bounds`, :func:`normal_cdf_bounds`,
  :func:`normal_cdf`, :func:`normal_tail_bounds`, :func:`normal_tail_upper`;
* logarithms: :func:`atanh_lower` (ln(1 − 1/α) = −2 atanh(1/(2α − 1))).

One exception, on purpose: the table verifiers of :mod:`dpselect.core.verify` compute their own
lower bound on e^ε, by another method (repeated squaring of 1 + ε/2^j). They re-check every
table the builders make with the bounds here, and a bug shared by the builder and its checker
would hide in the check.
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import SupportsFloat

__all__ = [
    "as_fraction",
    "ceil_div",
    "exp_neg_bounds",
    "exp_neg_interval",
    "exp_bounds",
    "exp_lower",
    "exp_upper",
    "fixed_power",
    "power_lower",
    "sqrt_bounds",
    "inv_sqrt_2pi_bounds",
    "normal_cdf_bounds",
    "normal_cdf",
    "normal_tail_bounds",
    "normal_tail_upper",
    "atanh_lower",
]


def as_fraction(value: SupportsFloat) -> Fraction:  # float, int, Fraction, any other real number
    """The exact rational a parameter denotes: floats through their shortest repr."""
    if isinstance(value, Fraction):
        return value
    if isinstance(value, int):
        return Fraction(value)
    return Fraction(repr(float(value)))


def ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _floor_to(value: Fraction, bits: int) -> Fraction:
    return Fraction(math.floor(value * 2**bits), 2**bits)


def _ceil_to(value: Fraction, bits: int) -> Fraction:
    return Fraction(math.ceil(value * 2**bits), 2**bits)


# ------------------------------------------------------------------ e^x
#
# Rounding z = y/2^s and the Taylor sum cost a relative 2^(2−p); a squaring doubles a relative
# error and adds one rounding of 2^(1−p); after s squarings the error is below 2^(s+4−p), so
# p = bits + 2s + 40 leaves hi/lo − 1 far below 2^-bits. All quantities are positive, so each
# rounding keeps its side, and the cost depends on the precision asked for and on log y, not on
# y: e^(−10^6) costs what e^(−1) costs.

# Above this y, exp_neg_bounds bounds e^(−y) by (0, the upper bound at Y_SATURATE): the exact
# bounds at y would need about 1.44·y bits, and the upper bound at 2^16, about 2^-94548, is far
# below any probability a certificate compares it with (the smallest positive double is 2^-1074).
Y_SATURATE = Fraction(2**16)
# log2(e) < 1.4427 and ln 2 < 0.6932: the number of bits of e^x, and where e^(−y) < 2^-bits.
_LOG2_E_UP = Fraction(14427, 10000)


def _exp_fixed(z: int, one: int, upper: bool) -> int:
    """A fixed-point bound on e^(z/one) for 0 ≤ z ≤ one: floored Taylor terms summed (a lower
    bound), or ceiled terms plus 2 units for the tail (the omitted terms fall at least
    geometrically by 1/2 once n ≥ 2, so they add at most twice the last one, which is ≤ 1)."""
    total, term, n = 0, one, 0
    while True:
        total += term
        n += 1
        term = -((-term * z) // (one * n)) if upper else term * z // (one * n)
        if n >= 2 and term <= 1:
            return total + term + 2 if upper else total + term


def _square(m: int, e: int, p: int, upper: bool) -> tuple[int, int]:
    """(m·2^e)², rounded down (or up) to at most p + 1 significant bits."""
    m, e = m * m, 2 * e
    extra = m.bit_length() - (p + 1)
    if extra > 0:
        m = -((-m) >> extra) if upper else m >> extra
        e += extra
    return m, e


def _reciprocal(m: int, e: int, p: int, upper: bool) -> Fraction:
    """A dyadic rational below (or above) 1/(m·2^e), m > 0, within a relative 2^-p."""
    shift = m.bit_length() + p  # 2^shift / m has about p + 1 bits
    q = (1 << shift) // m if not upper else -((-(1 << shift)) // m)
    # 1/(m·2^e) = (2^shift / m) · 2^-(shift + e)
    denominator_log2 = shift + e
    if denominator_log2 >= 0:
        return Fraction(q, 1 << denominator_log2)
    return Fraction(q << -denominator_log2)


def _exp_mantissas(y: Fraction, bits: int) -> tuple[int, int, int, int, int]:
    """(p, low, low_e, high, high_e) with low·2^low_e ≤ e^y ≤ high·2^high_e for y ≥ 0, both of
    about p = bits + 2s + 40 significant bits and high/low − 1 far below 2^-bits (above)."""
    s = max(0, math.ceil(y).bit_length())  # y / 2^s ≤ 1
    p = bits + 2 * s + 40
    one = 1 << p
    scaled = y.numerator << p
    z_lo = scaled // (y.denominator << s)
    z_hi = -((-scaled) // (y.denominator << s))
    low, low_e = _exp_fixed(z_lo, one, upper=False), -p    # low·2^low_e ≤ e^(y/2^s)
    high, high_e = _exp_fixed(z_hi, one, upper=True), -p   # high·2^high_e ≥ e^(y/2^s)
    for _ in range(s):
        low, low_e = _square(low, low_e, p, upper=False)
        high, high_e = _square(high, high_e, p, upper=True)
    return p, low, low_e, high, high_e


def exp_neg_bounds(y: Fraction, bits: int = 128) -> tuple[Fraction, Fraction]:
    """Rationals lo ≤ e^(−y) ≤ hi for y ≥ 0, both with a power-of-two denominator. Up to
    y = 2^16, hi/lo − 1 is below about 2^-bits; above it, (0, the upper bound at 2^16)."""
    y = Fraction(y)
    if y < 0:
        raise ValueError("exp_neg_bounds needs y >= 0")
    if y == 0:
        return Fraction(1), Fraction(1)
    if y > Y_SATURATE:
        return Fraction(0), _saturated_upper(bits)
    p, low, low_e, high, high_e = _exp_mantissas(y, bits)
    # e^(−y) = 1/e^y: from the upper bound on e^y a lower bound, and vice versa
    return _reciprocal(high, high_e, p, upper=False), _reciprocal(low, low_e, p, upper=True)


@functools.lru_cache(maxsize=16)
def _saturated_upper(bits: int) -> Fraction:
    """The upper bound at Y_SATURATE, computed once per precision (a search over h or k asks for
    it at every step once the argument is past the saturation)."""
    return exp_neg_bounds(Y_SATURATE, bits)[1]


def exp_neg_interval(y: Fraction, bits: int) -> tuple[Fraction, Fraction]:
    """Rationals lo ≤ e^(−y) ≤ hi with hi − lo ≤ 2^-bits (an *absolute* precision) for every
    y ≥ 0, however large: unlike :func:`exp_neg_bounds`, the gap keeps shrinking as ``bits``
    grows beyond the saturation, which an exact comparison with a lazily drawn uniform needs
    (it asks for more bits until it can decide).

    For y ≥ 0.6932·bits > bits·ln 2 the interval is (0, 2^-bits). Up to Y_SATURATE it comes
    from :func:`exp_neg_bounds`. In between (only at more than 94,000 bits, which a comparison
    reaches with probability about 2^-94000) e^(−y) = (e^(−y/m))^m with y/m ≤ Y_SATURATE/2,
    each side powered in fixed point."""
    y = Fraction(y)
    if y < 0:
        raise ValueError("exp_neg_interval needs y >= 0")
    if 10_000 * y >= 6_932 * bits:
        return Fraction(0), Fraction(1, 1 << bits)
    if y <= Y_SATURATE:
        return exp_neg_bounds(y, bits + 2)  # hi − lo ≤ hi·2^-(bits+1) ≤ 2^-bits
    m = math.ceil(y / (Y_SATURATE / 2))
    work = bits + 2 * m.bit_length() + 8
    lo, hi = exp_neg_bounds(y / m, work)
    return fixed_power(lo, m, work, upper=False), fixed_power(hi, m, work, upper=True)


def _shifted(m: int, k: int, upper: bool) -> int:
    """floor (or ceil) of m·2^k, m ≥ 0."""
    if k >= 0:
        return m << k
    return -((-m) >> -k) if upper else m >> -k


def _quotient(k: int, m: int, upper: bool) -> int:
    """floor (or ceil) of 2^k / m, m > 0."""
    if k < 0:
        return 1 if upper else 0  # 0 < 2^k/m < 1
    return -((-(1 << k)) // m) if upper else (1 << k) // m


@functools.lru_cache(maxsize=512)
def _exp_units(x: Fraction, bits: int) -> tuple[int, int]:
    """(⌊e^x·2^bits⌋, ⌈e^x·2^bits⌉), from the mantissas of e^|x| with ``guard`` bits to spare.

    Each is returned only once both ends of the bracket round to it, so it is exact whatever
    the bracket; the guard doubles until they do (after one pass but with probability about
    2^-32: e^x is irrational for rational x ≠ 0, Hermite–Lindemann, so it always ends)."""
    if x == 0:
        return 1 << bits, 1 << bits
    y = abs(x)
    if x < 0 and 10_000 * y >= 6_932 * bits:  # e^x < 2^-bits
        return 0, 1
    guard = 32
    while guard <= 1 << 20:
        # e^|x| has at most ceil(1.4427 |x|) + 1 integer bits: relative precision covers them
        magnitude = math.ceil(y * _LOG2_E_UP) + 1 if x > 0 else 0
        _, low, low_e, high, high_e = _exp_mantissas(y, bits + guard + magnitude + 2)
        if x > 0:  # e^x·2^bits in [low·2^(low_e + bits), high·2^(high_e + bits)]
            floors = _shifted(low, low_e + bits, False), _shifted(high, high_e + bits, False)
            ceils = _shifted(low, low_e + bits, True), _shifted(high, high_e + bits, True)
        else:  # e^x·2^bits = 2^bits / e^y in [2^(bits − high_e)/high, 2^(bits − low_e)/low]
            floors = _quotient(bits - high_e, high, False), _quotient(bits - low_e, low, False)
            ceils = _quotient(bits - high_e, high, True), _quotient(bits - low_e, low, True)
        if floors[0] == floors[1] and ceils[0] == ceils[1]:
            return floors[0], ceils[0]
        guard *= 2
    raise ArithmeticError("could not round e^x (please report this as a bug)")


def exp_bounds(x: Fraction, denominator_bits: int = 128) -> tuple[Fraction, Fraction]:
    """(L, U): e^x rounded down and up to multiples of 2^-denominator_bits, L ≤ e^x ≤ U, for any
    rational x: the tightest bounds with that denominator (U − L = 2^-denominator_bits unless
    x = 0). Cached: searches ask for the same bounds at every step."""
    if denominator_bits < 0:
        raise ValueError("exp_bounds needs denominator_bits >= 0")
    low, high = _exp_units(Fraction(x), denominator_bits)
    return Fraction(low, 1 << denominator_bits), Fraction(high, 1 << denominator_bits)


def exp_lower(x: Fraction, denominator_bits: int = 128) -> Fraction:
    """The largest multiple L of 2^-denominator_bits with L ≤ e^x (:func:`exp_bounds`)."""
    return exp_bounds(x, denominator_bits)[0]


def exp_upper(x: Fraction, denominator_bits: int = 128) -> Fraction:
    """The smallest multiple U of 2^-denominator_bits with U ≥ e^x (:func:`exp_bounds`)."""
    return exp_bounds(x, denominator_bits)[1]


# ------------------------------------------------------------------ powers

def fixed_power(base: Fraction, exponent: int, bits: int, upper: bool) -> Fraction:
    """base^exponent for base ≥ 0 by binary powering in fixed point with ``bits`` fractional
    bits, every product rounded down (or up): all factors are non-negative, so the result is a
    lower (or upper) bound. For base ≤ 1 it is within 2·log2(exponent)·2^-bits +
    exponent·2^-bits of the truth."""
    one = 1 << bits
    b = -((-base.numerator * one) // base.denominator) if upper else base.numerator * one // base.denominator
    result = one
    while exponent:
        if exponent & 1:
            result = -((-result * b) >> bits) if upper else (result * b) >> bits
        exponent >>= 1
        if exponent:
            b = -((-b * b) >> bits) if upper else (b * b) >> bits
    return Fraction(result, one)


def power_lower(base: Fraction, exponent: int, bits: int = 256) -> Fraction:
    """A rational L <= base^exponent for 0 <= base <= 1 and exponent >= 0: binary powering with
    every product rounded down to ``bits`` fractional bits (:func:`fixed_power`)."""
    if not 0 <= base <= 1 or exponent < 0:
        raise ValueError("power_lower needs 0 <= base <= 1 and exponent >= 0")
    return fixed_power(base, exponent, bits, upper=False)


# ------------------------------------------------------------------ square roots

def sqrt_bounds(x: Fraction, bits: int) -> tuple[Fraction, Fraction]:
    """(⌊√x·2^bits⌋/2^bits, ⌈√x·2^bits⌉/2^bits) for a rational x ≥ 0: the tightest bounds on √x
    with denominator 2^bits (equal when √x is such a multiple). ⌊√v⌋ = isqrt(⌊v⌋) for v ≥ 0."""
    if x < 0:
        raise ValueError("sqrt_bounds needs x >= 0")
    scaled = Fraction(x) * 4**bits
    low = math.isqrt(math.floor(scaled))
    high = low if low * low == scaled else low + 1
    return Fraction(low, 1 << bits), Fraction(high, 1 << bits)


# ------------------------------------------------------------------ the normal distribution

def _arctan_inverse_scaled(x: int, one: int) -> tuple[int, int]:
    """floor-based arctan(1/x) * one by its alternating series, and a bound on the error."""
    total, power, n, sign, terms = 0, one // x, 1, 1, 0
    x2 = x * x
    while power:
        total += sign * (power // n)
        power //= x2
        n += 2
        sign = -sign
        terms += 1
    return total, terms + 2  # each term floored once; the omitted tail is below the last one


@functools.lru_cache(maxsize=16)
def inv_sqrt_2pi_bounds(bits: int) -> tuple[Fraction, Fraction]:
    """Rational bounds on 1/sqrt(2π) of width about 2^-bits: π by Machin's formula
    π = 16 arctan(1/5) − 4 arctan(1/239) in integers with an error bound, then square roots
    rounded on each side."""
    guard = bits + 32
    one = 1 << guard
    a, ea = _arctan_inverse_scaled(5, one)
    b, eb = _arctan_inverse_scaled(239, one)
    pi_mid = 16 * a - 4 * b
    error = 16 * ea + 4 * eb
    pi_lo, pi_hi = Fraction(pi_mid - error, one), Fraction(pi_mid + error, one)
    # 1/sqrt(2π): lower from the upper π; upper from the lower π, as ⌊√⌈v⌉⌋ + 1 units of
    # 2^-guard with v = 2^(2 guard)/(2π_lo) (above √v; the bound every certificate was built with)
    low = sqrt_bounds(1 / (2 * pi_hi), guard)[0]
    high = sqrt_bounds(Fraction(math.ceil((1 << (2 * guard)) / (2 * pi_lo)), 1 << (2 * guard)), guard)[0]
    return low, high + Fraction(1, 1 << guard)


# Beyond this |z| the upper tail is below 2^-1150: bound it by the Mills ratio instead of a series.
_TAIL_Z = 40


def normal_cdf_bounds(z: Fraction, bits: int = 256) -> tuple[Fraction, Fraction]:
    """Rational bounds L <= Φ(z) <= U on the standard normal CDF, in integer arithmetic only,
    with U − L <= 2^-bits for |z| <= 40 (beyond, the bounds are [1 − t, 1] with t < 2^-1150:
    their width stops at the tail itself).

    Φ(z) = 1/2 + z/sqrt(2π) · Σ_{n>=0} (−y)^n / (n! (2n + 1)),  y = z²/2,
    summed in fixed point with enough guard bits for the alternating series' cancellation
    (its largest term is below e^y); the omitted tail of an alternating series with decreasing
    terms is below the first omitted term; 1/sqrt(2π) is computed to the precision asked (π by
    Machin's formula). For |z| > 40 the far tail uses the Mills-ratio bound
    0 <= 1 − Φ(z) <= φ(z)/z, which is below 2^-1150."""
    z = Fraction(z)
    if z < 0:
        lo, hi = normal_cdf_bounds(-z, bits)
        return 1 - hi, 1 - lo
    c_lo, c_hi = inv_sqrt_2pi_bounds(max(bits, 256) + 16)
    if z > _TAIL_Z:
        # φ(z)/z <= (1/sqrt(2π)) e^{-z²/2} / z, and e^{z²/2} >= 2^m with m = floor(z²/2 / c),
        # c = 0.69314718056 > ln 2
        m = math.floor(z * z / 2 / Fraction("0.69314718056"))
        tail = c_hi / (z * 2**m)
        return 1 - _ceil_to(tail, bits + 8), Fraction(1)
    y = z * z / 2
    guard = math.ceil(y * Fraction("1.4427")) + 72
    frac_bits = bits + guard
    one = 1 << frac_bits
    p, q = y.numerator, y.denominator
    term = one  # floor(2^F · y^n / n!), accumulated error below e^y units
    total = 0
    n = 0
    while True:
        contribution = term // (2 * n + 1)
        total += -contribution if n & 1 else contribution
        n += 1
        term = term * p // (q * n)
        if n > 2 * y + 2 and term // (2 * n + 1) == 0:
            break
    # Each term carries < e^y + 1 <= 2^(ceil(1.4427 y) + 1) units of flooring error (log2 e <
    # 1.4427), and the omitted tail is < 1 unit.
    slack = (n + 2) * ((1 << (math.ceil(y * Fraction("1.4427")) + 1)) + 2)
    s_lo, s_hi = Fraction(total - slack, one), Fraction(total + slack, one)
    products = [z * c * s for c in (c_lo, c_hi) for s in (s_lo, s_hi)]
    lo = Fraction(1, 2) + min(products)
    hi = Fraction(1, 2) + max(products)
    return max(Fraction(0), _floor_to(lo, bits + 8)), min(Fraction(1), _ceil_to(hi, bits + 8))


def normal_cdf(z: Fraction, bits: int = 256) -> Fraction:
    """Φ(z) to within 2^-bits (the midpoint of :func:`normal_cdf_bounds`)."""
    lo, hi = normal_cdf_bounds(z, bits)
    return (lo + hi) / 2


def normal_tail_bounds(z: Fraction, bits: int = 256) -> tuple[Fraction, Fraction]:
    """Rational bounds L <= P[Z > z] <= U for Z standard normal: 1 − Φ(z), from
    :func:`normal_cdf_bounds` (the same widths)."""
    lo, hi = normal_cdf_bounds(z, bits)
    return 1 - hi, 1 - lo


def normal_tail_upper(z: Fraction, bits: int = 256) -> Fraction:
    """An upper bound on P[Z > z] for Z standard normal (:func:`normal_tail_bounds`)."""
    return normal_tail_bounds(z, bits)[1]


# ------------------------------------------------------------------ logarithms

_ATANH_BITS = 256
_ATANH_TERMS = 4000


def atanh_lower(u: Fraction) -> Fraction:
    """A rational ≤ atanh(u) for 0 < u < 1: a partial sum of Σ u^(2j+1)/(2j+1), every term
    floored to 2^-256 (all terms are positive, so each truncation rounds down)."""
    one = 1 << _ATANH_BITS
    u_fixed = u.numerator * one // u.denominator  # ≤ u·2^F
    u2 = u_fixed * u_fixed // one
    power, total = u_fixed, 0
    for j in range(_ATANH_TERMS):
        if power == 0:
            break
        total += power // (2 * j + 1)
        power = power * u2 // one
    return Fraction(total, one)
