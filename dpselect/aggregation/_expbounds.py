"""Rational bounds on e^(−y) in fixed-point integer arithmetic.

The aggregation certificates (tails of discrete noise, the zCDP conversion, APPROX_BOUNDS'
threshold) need e^(−y) for y up to a few hundred, bounded on the correct side. Taylor series on
:class:`fractions.Fraction` (dpselect.exact) are exact but slow there (hundreds of terms with
ever longer denominators). Here e^y is bounded in fixed point instead: e^y = (e^(y/2^s))^(2^s)
with y/2^s ≤ 1, a short Taylor series with every term floored (lower bound) or ceiled plus its
tail (upper bound), then s squarings rounded the same way. All quantities are non-negative, so
each rounding keeps its side.
"""
from __future__ import annotations

import math
from fractions import Fraction

__all__ = ["exp_neg_bounds"]


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


def exp_neg_bounds(y: Fraction, bits: int = 128) -> tuple[Fraction, Fraction]:
    """Rationals lo ≤ e^(−y) ≤ hi for y ≥ 0, with hi/lo − 1 below about 2^-bits."""
    y = Fraction(y)
    if y < 0:
        raise ValueError("exp_neg_bounds needs y >= 0")
    if y == 0:
        return Fraction(1), Fraction(1)
    s = max(0, math.ceil(y).bit_length())  # y / 2^s ≤ 1
    frac_bits = bits + 2 * s + 40 + math.ceil(y * Fraction(14427, 10000))  # room for e^(−y) itself
    one = 1 << frac_bits
    scaled = y.numerator << frac_bits
    z_lo = scaled // (y.denominator << s)
    z_hi = -((-scaled) // (y.denominator << s))
    low = _exp_fixed(z_lo, one, upper=False)   # ≤ e^(y/2^s) · one
    high = _exp_fixed(z_hi, one, upper=True)   # ≥ e^(y/2^s) · one
    for _ in range(s):
        low = low * low >> frac_bits
        high = -((-high * high) >> frac_bits)
    # e^(−y) = 1/e^y: from the upper bound on e^y a lower bound, and vice versa
    return Fraction(one * one // high, one), Fraction(-((-one * one) // low), one)
