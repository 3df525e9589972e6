"""Exact Bernoulli draws on Gaussian and Laplace tail probabilities at arbitrary real points.

The row mechanisms keep a partition iff H + Z > ρ for a real weighted count H: with probability
p = P[Z > ρ − H], a different irrational number for every partition. Each draw here is exactly
Bernoulli(p): a uniform U from the CSPRNG is compared with an interval [p_lo, p_hi] ∋ p computed
in double precision with a wide safety margin (relative 2^-30, a million times the documented
error of the C library's erfc and exp); when U falls inside the interval — rarely, with
probability at most the interval's width — the comparison is finished with more random bits
against integer-arithmetic bounds on p (:func:`dpselect.exact.normal_cdf_bounds`,
:func:`dpselect.exact.exp_lower`) refined until they separate. No floating-point value ever
decides an outcome on its own (docs/privacy/weighted.md).
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Callable

import numpy as np
import numpy.typing as npt

from dpselect import _weighted
from dpselect.exact import exp_lower, exp_upper, normal_cdf_bounds
from dpselect.rng import resolve_rng

__all__ = ["gaussian_tail_draws", "laplace_tail_draws"]

_MARGIN = 2.0**-30  # relative width of the float interval around p
_TINY = 2.0**-990  # absolute slack: covers underflow of tails below the double range
_TWO64 = 2.0**64


def _draw(p_lo: npt.NDArray[np.float64], p_hi: npt.NDArray[np.float64],
          exact: Callable[[int, int], tuple[Fraction, Fraction]], rng: object | None) -> npt.NDArray[np.bool_]:
    """keep[i] = U_i < p_i, for p_i in [p_lo[i], p_hi[i]]; ``exact(i, bits)`` gives rational
    bounds on p_i of width <= 2^-bits, for the rare U_i inside the float interval."""
    generator = resolve_rng(rng)
    n = p_lo.size
    u = np.frombuffer(generator.random_bytes(8 * n), dtype=">u8").astype(np.uint64)
    lo = np.floor(np.clip(p_lo, 0.0, 1.0) * _TWO64)
    hi = np.ceil(np.clip(p_hi, 0.0, 1.0) * _TWO64)
    lo_int = np.minimum(lo, _TWO64 - 2048).astype(np.uint64)  # floats at 2^64 round: stay below
    keep = u < lo_int
    settled_drop = (hi < _TWO64 - 2048) & (u >= np.minimum(hi, _TWO64 - 2048).astype(np.uint64))
    for i in np.flatnonzero(~keep & ~settled_drop):
        keep[i] = _finish(int(u[i]), lambda bits, i=i: exact(int(i), bits), generator)
    return keep


def _finish(prefix: int, bounds: Callable[[int], tuple[Fraction, Fraction]], generator: object) -> bool:
    """Complete U (whose first 64 bits are ``prefix``) with fresh bits until it is clearly below or
    above p: exactly P[U < p] = p."""
    u, width = prefix, 64
    bits = 128
    while True:
        p_lo, p_hi = bounds(bits)
        scale = 1 << width
        if u + 1 <= math.floor(p_lo * scale):  # U < (u + 1)/2^w <= p_lo: below p
            return True
        if u >= math.ceil(p_hi * scale):  # U >= u/2^w >= p_hi: above p
            return False
        u = (u << 64) | int.from_bytes(generator.random_bytes(8), "big")  # type: ignore[attr-defined]
        width += 64
        bits = max(bits, width + 64)


def gaussian_tail_draws(distance: npt.NDArray[np.int64], unit_bits: int, sigma: Fraction,
                        rng: object | None = None) -> npt.NDArray[np.bool_]:
    """keep[i] ~ Bernoulli(P[Z > d_i]) exactly, Z ~ N(0, σ²), d_i = distance[i] / 2^unit_bits."""
    scale = float(sigma) * 2.0**unit_bits
    z = distance.astype(np.float64) / scale
    q = _weighted.normal_upper_tail(np.ascontiguousarray(np.abs(z)))  # the tail beyond |z|
    q_lo, q_hi = q * (1 - _MARGIN), np.minimum(q * (1 + _MARGIN) + _TINY, 0.5)
    positive = z >= 0
    p_lo = np.where(positive, q_lo, 1 - q_hi)
    p_hi = np.where(positive, q_hi, 1 - q_lo)

    def exact(i: int, bits: int) -> tuple[Fraction, Fraction]:
        low, high = normal_cdf_bounds(Fraction(int(distance[i]), 1 << unit_bits) / sigma, bits)
        return 1 - high, 1 - low  # P[Z > d] = 1 − Φ(d/σ)

    return _draw(p_lo, p_hi, exact, rng)


def laplace_tail_draws(distance: npt.NDArray[np.int64], unit_bits: int, epsilon: Fraction,
                       rng: object | None = None) -> npt.NDArray[np.bool_]:
    """keep[i] ~ Bernoulli(P[L > d_i]) exactly, L ~ Laplace(1/ε), d_i = distance[i] / 2^unit_bits:
    P[L > d] = e^{−εd}/2 for d >= 0, 1 − e^{εd}/2 below."""
    x = distance.astype(np.float64) * (float(epsilon) / 2.0**unit_bits)
    half = 0.5 * np.exp(-np.abs(x))
    h_lo, h_hi = half * (1 - _MARGIN), np.minimum(half * (1 + _MARGIN) + _TINY, 0.5)
    positive = x >= 0
    p_lo = np.where(positive, h_lo, 1 - h_hi)
    p_hi = np.where(positive, h_hi, 1 - h_lo)

    def exact(i: int, bits: int) -> tuple[Fraction, Fraction]:
        arg = abs(Fraction(int(distance[i]), 1 << unit_bits) * epsilon)
        low = Fraction(1, 2) / exp_upper(arg, bits + 8)
        high = Fraction(1, 2) / exp_lower(arg, bits + 8)
        return (low, high) if distance[i] >= 0 else (1 - high, 1 - low)

    return _draw(p_lo, p_hi, exact, rng)
