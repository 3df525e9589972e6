"""Exact rational arithmetic for certificates: parameters as fractions, bounds on e^x.

Floats enter the privacy path only through :func:`as_fraction`, which reads a float the way
the user wrote it (``1e-5`` means 10^-5: docs/privacy/pi-opt.md); every certificate is then
computed with integers and :class:`fractions.Fraction`. The table verifiers of
:mod:`dpselect.verify` deliberately do not use the bounds here (they compute their own).
"""
from __future__ import annotations

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
