"""Exact rational arithmetic for certificates: parameters as fractions, bounds on e^x.

Floats enter the privacy path only through :func:`as_fraction`, which reads a float the way
the user wrote it (``1e-5`` means 10^-5: docs/privacy/pi-opt.md); every certificate is then
computed with integers and :class:`fractions.Fraction`. The table verifiers of
:mod:`dpselect.core.verify` deliberately do not use the bounds here (they compute their own).
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction
from numbers import Real

__all__ = ["as_fraction", "exp_lower", "exp_upper", "ceil_div"]


def as_fraction(value: Real) -> Fraction:
    """The exact rational a parameter denotes: floats through their shortest repr."""
    if isinstance(value, Fraction):
        return value
    if isinstance(value, int):
        return Fraction(value)
    return Fraction(repr(float(value)))


def ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _taylor_terms(x: Fraction, tail_bits: int) -> tuple[Fraction, Fraction]:
    """Partial sum of e^x (x >= 0) and its last term, stopped once terms are tiny and falling."""
    total = Fraction(0)
    term = Fraction(1)
    n = 0
    limit = Fraction(1, 2**tail_bits)
    while True:
        total += term
        n += 1
        term = term * x / n
        # n >= 2x bounds the ratio of successive omitted terms by 1/2 (see exp_upper)
        if n >= 2 * x and term < limit:
            return total, term


def exp_lower(x: Fraction, denominator_bits: int = 128) -> Fraction:
    """A rational L <= e^x with denominator 2^denominator_bits.

    For x >= 0 every Taylor term is positive, so a partial sum is below e^x; flooring keeps it
    below. For x < 0, 1 / exp_upper(-x) is below e^x."""
    if x < 0:
        return _floor_to(1 / exp_upper(-x, denominator_bits), denominator_bits)
    total, _ = _taylor_terms(x, denominator_bits + 16)
    return _floor_to(total, denominator_bits)


def exp_upper(x: Fraction, denominator_bits: int = 128) -> Fraction:
    """A rational U >= e^x with denominator 2^denominator_bits.

    For x >= 0, the omitted tail is at most next_term / (1 - x/(n+1)) <= 2 * next_term, because
    the stopping rule guarantees n >= 2x."""
    if x < 0:
        return _ceil_to(1 / exp_lower(-x, denominator_bits), denominator_bits)
    total, next_term = _taylor_terms(x, denominator_bits + 16)
    upper = total + 2 * next_term
    return _ceil_to(upper, denominator_bits)


def _floor_to(value: Fraction, bits: int) -> Fraction:
    return Fraction(math.floor(value * 2**bits), 2**bits)


def _ceil_to(value: Fraction, bits: int) -> Fraction:
    return Fraction(math.ceil(value * 2**bits), 2**bits)


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
    π = 16 arctan(1/5) − 4 arctan(1/239) in integers with an error bound, then an integer square
    root with rounding on each side."""
    guard = bits + 32
    one = 1 << guard
    a, ea = _arctan_inverse_scaled(5, one)
    b, eb = _arctan_inverse_scaled(239, one)
    pi_mid = 16 * a - 4 * b
    error = 16 * ea + 4 * eb
    pi_lo, pi_hi = Fraction(pi_mid - error, one), Fraction(pi_mid + error, one)
    # 1/sqrt(2π): lower from the upper π, upper from the lower π
    scale = 1 << (2 * guard)
    low = Fraction(math.isqrt(math.floor(scale / (2 * pi_hi))), 1 << guard)
    high = Fraction(math.isqrt(math.ceil(scale / (2 * pi_lo))) + 1, 1 << guard)
    return low, high


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
