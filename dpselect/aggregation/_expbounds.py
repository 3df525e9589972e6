"""Rational bounds on e^(−y) in integer arithmetic with a fixed number of significant bits.

The aggregation certificates (tails of discrete noise, the zCDP conversion, APPROX_BOUNDS'
threshold) need e^(−y) bounded on the correct side. Taylor series on :class:`fractions.Fraction`
(dpselect.core.exact) are exact but slow for large y (hundreds of terms with ever longer
denominators). Here e^y = (e^(y/2^s))^(2^s) with y/2^s ≤ 1: a short Taylor series in fixed point
with every term floored (lower bound) or ceiled plus its tail (upper bound), then s squarings,
each rounded to p significant bits on the same side (a number is kept as m·2^e, like a float with
a p-bit mantissa). All quantities are positive, so each rounding keeps its side, and the cost
depends on the precision asked for and on log y, not on y: e^(−10^6) costs what e^(−1) costs.

Precision: rounding z = y/2^s and the Taylor sum cost a relative 2^(2−p); a squaring doubles a
relative error and adds one rounding of 2^(1−p); after s squarings the error is below
2^(s+4−p), so p = bits + 2s + 40 leaves hi/lo − 1 far below 2^-bits.

Beyond y = 2^16 the bounds saturate: lo = 0 and hi = the upper bound at 2^16, about 2^-94548 —
far below any probability a certificate compares it with (the smallest positive double is
2^-1074) — because the exact bounds at y would need about 1.44·y bits.
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

__all__ = ["exp_neg_bounds", "exp_neg_interval", "fixed_power"]

# Above this y, e^(−y) is bounded by (0, the upper bound at Y_SATURATE).
Y_SATURATE = Fraction(2**16)


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
    # e^(−y) = 1/e^y: from the upper bound on e^y a lower bound, and vice versa
    return _reciprocal(high, high_e, p, upper=False), _reciprocal(low, low_e, p, upper=True)


@functools.lru_cache(maxsize=16)
def _saturated_upper(bits: int) -> Fraction:
    """The upper bound at Y_SATURATE, computed once per precision (a search over h or k asks for
    it at every step once the argument is past the saturation)."""
    return exp_neg_bounds(Y_SATURATE, bits)[1]


def fixed_power(base: Fraction, exponent: int, bits: int, upper: bool) -> Fraction:
    """base^exponent for 0 ≤ base ≤ 1 by binary powering in fixed point with ``bits`` fractional
    bits, every product rounded down (or up): all factors are non-negative, so the result is a
    lower (or upper) bound, within 2·log2(exponent)·2^-bits + exponent·2^-bits of the truth."""
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
