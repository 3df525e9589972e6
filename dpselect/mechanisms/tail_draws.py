"""Exact Bernoulli draws on Gaussian and Laplace tail probabilities at arbitrary real points.

The row mechanisms keep a partition iff H + Z > ρ for a real weighted count H: with probability
p = P[Z > ρ − H], a different irrational number for every partition. Each draw here is exactly
Bernoulli(p): a uniform U from the CSPRNG is compared with an interval [p_lo, p_hi] ∋ p computed
in double precision with a wide safety margin (relative 2^-30, a million times the documented
error of the C library's erfc and of numpy's exp); when U falls inside the interval — rarely, with
probability at most the interval's width — the comparison is finished with more random bits
against integer-arithmetic bounds on p (:func:`dpselect.core.exact.normal_tail_bounds`,
:func:`dpselect.core.exact.exp_neg_interval`) refined until they separate. No floating-point value
ever decides an outcome on its own (docs/privacy/weighted.md).
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Callable

import numpy as np
import numpy.typing as npt

from dpselect import _weighted
from dpselect.core.exact import exp_neg_interval, normal_tail_bounds
from dpselect.rng import resolve_rng

__all__ = ["gaussian_tail_draws", "laplace_tail_draws", "uniform_is_below"]

_MARGIN = 2.0**-30  # relative width of the float interval around p
_TINY = 2.0**-990  # absolute slack: covers underflow of tails below the double range
_TWO64 = 2.0**64


def _draw(q_lo: npt.NDArray[np.float64], q_hi: npt.NDArray[np.float64], complement: npt.NDArray[np.bool_],
          exact: Callable[[int, int], tuple[Fraction, Fraction]], rng: object | None) -> npt.NDArray[np.bool_]:
    """keep[i] = U_i < p_i exactly, where p_i lies in [q_lo[i], q_hi[i]] (q_hi <= 1/2), or in
    [1 − q_hi[i], 1 − q_lo[i]] where ``complement``; ``exact(i, bits)`` gives rational bounds
    on p_i of width <= 2^-bits, for the rare U_i between the float bounds.

    The bounds become integer cut points on U's 64-bit scale before anything is compared: a
    complement 1 − q is 2^64 − ⌈q 2^64⌉ in integers (a subtraction in doubles would round by up
    to 2^-54, more than the margin when 1 − p is small)."""
    generator = resolve_rng(rng)
    n = q_lo.size
    u = np.frombuffer(generator.random_bytes(8 * n), dtype=">u8").astype(np.uint64)
    # q <= 1/2, so q 2^64 <= 2^63: exact in doubles after scaling, exact as uint64 after floor/ceil.
    low = np.floor(np.clip(q_lo, 0.0, 0.5) * _TWO64).astype(np.uint64)
    high = np.ceil(np.clip(q_hi, 0.0, 0.5) * _TWO64).astype(np.uint64)
    top = np.uint64(np.iinfo(np.uint64).max)  # 2^64 − 1
    # keep surely when U < cut_keep; drop surely when U >= cut_drop (cut_drop = 2^64: never)
    cut_keep = np.where(complement, top - high + np.uint64(1), low)  # 2^64 − ⌈q_hi 2^64⌉ (high >= 1 here)
    never = complement & (low == 0)  # 1 − q_lo = 1: no U is surely dropped
    cut_drop = np.where(complement, top - low + np.uint64(1), high)
    cut_keep = np.where(complement & (high == 0), top, cut_keep)  # q_hi = 0: p = 1 (U = 2^64 − 1 refined)
    keep = u < cut_keep
    settled_drop = ~never & (u >= cut_drop)
    for i in np.flatnonzero(~keep & ~settled_drop):
        keep[i] = _finish(int(u[i]), functools.partial(exact, int(i)), generator)
    return keep


def _finish(prefix: int, bounds: Callable[[int], tuple[Fraction, Fraction]], generator: object) -> bool:
    """Complete U (whose first 64 bits are ``prefix``) with fresh bits until it is clearly below or
    above p: exactly P[U < p] = p."""
    return uniform_is_below(prefix, 64, bounds, generator)[0]


def uniform_is_below(prefix: int, width: int, bounds: Callable[[int], tuple[Fraction, Fraction]],
                     generator: object) -> tuple[bool, int, int]:
    """Whether U < p, exactly, for U uniform on [0, 1) whose first ``width`` bits are known
    (U ∈ [prefix/2^width, (prefix + 1)/2^width)) and a real p of which ``bounds(bits)`` gives
    rational bounds of width <= 2^-bits. Fresh 64-bit blocks of U are drawn from ``generator``
    until U's interval lies on one side of the bounds: with probability 1 when the bounds close
    in on p (:func:`dpselect.core.exact.normal_cdf_bounds` stops closing in 2^-1150 from 0 or 1).

    Returns (U < p, prefix, width) with the bits drawn so far: a later comparison of the same U
    (another p) must start from them, or the draws would not be of one uniform."""
    u = prefix
    while True:
        p_lo, p_hi = bounds(width + 64)  # 64 bits finer than U's interval: decides most at once
        scale = 1 << width
        if u + 1 <= math.floor(p_lo * scale):  # U < (u + 1)/2^w <= p_lo: below p
            return True, u, width
        if u >= math.ceil(p_hi * scale):  # U >= u/2^w >= p_hi: above p
            return False, u, width
        u = (u << 64) | int.from_bytes(generator.random_bytes(8), "big")  # type: ignore[attr-defined]
        width += 64


def gaussian_tail_draws(distance: npt.NDArray[np.int64], unit_bits: int, sigma: Fraction,
                        rng: object | None = None) -> npt.NDArray[np.bool_]:
    """keep[i] ~ Bernoulli(P[Z > d_i]) exactly, Z ~ N(0, σ²), d_i = distance[i] / 2^unit_bits."""
    scale = float(sigma) * 2.0**unit_bits
    z = distance.astype(np.float64) / scale
    q = _weighted.normal_upper_tail(np.ascontiguousarray(np.abs(z)))  # the tail beyond |z|
    q_lo, q_hi = q * (1 - _MARGIN), np.minimum(q * (1 + _MARGIN) + _TINY, 0.5)

    def exact(i: int, bits: int) -> tuple[Fraction, Fraction]:
        return normal_tail_bounds(Fraction(int(distance[i]), 1 << unit_bits) / sigma, bits)  # P[Z > d]

    return _draw(q_lo, q_hi, z < 0, exact, rng)


def laplace_tail_draws(distance: npt.NDArray[np.int64], unit_bits: int, epsilon: Fraction,
                       rng: object | None = None) -> npt.NDArray[np.bool_]:
    """keep[i] ~ Bernoulli(P[L > d_i]) exactly, L ~ Laplace(1/ε), d_i = distance[i] / 2^unit_bits:
    P[L > d] = e^{−εd}/2 for d >= 0, 1 − e^{εd}/2 below."""
    x = distance.astype(np.float64) * (float(epsilon) / 2.0**unit_bits)
    half = 0.5 * np.exp(-np.abs(x))
    h_lo, h_hi = half * (1 - _MARGIN), np.minimum(half * (1 + _MARGIN) + _TINY, 0.5)

    def exact(i: int, bits: int) -> tuple[Fraction, Fraction]:
        arg = abs(Fraction(int(distance[i]), 1 << unit_bits) * epsilon)
        # absolute precision at any distance: the cost does not grow with it
        low, high = (bound / 2 for bound in exp_neg_interval(arg, bits + 8))
        return (low, high) if distance[i] >= 0 else (1 - high, 1 - low)

    return _draw(h_lo, h_hi, x < 0, exact, rng)
