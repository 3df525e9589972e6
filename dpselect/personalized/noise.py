"""Exact integer noise and exact per-user coin flips on the package CSPRNG.

Integer data get integer noise; no floating-point Laplace is used (docs/privacy/personalized.md, "Tools"). The
discrete Laplace with scale b has
P[Z = z] ∝ exp(−|z|/b) on the integers; for an integer query of sensitivity Δ it gives exactly
(Δ/b)-DP, the same loss as the continuous Laplace, so the personalized Laplace accounting carries over with
no slack.

Sampler: Canonne–Kamath–Steinke 2020 ("The Discrete Gaussian for Differential Privacy"),
Algorithm 1 (Bernoulli(exp(−γ)) for rational γ) and Algorithm 2 (discrete Laplace with rational
scale), driven only by ``rng.bernoulli(num, den)`` and ``rng.uniform_below(bound)``. The scale is
an exact ``Fraction``; nothing is rounded.

Timing caveat (stated, not fixed): the number of loop iterations of Algorithms 1 and 2 depends
on the sampled value (Jin et al. 2022), so a co-located observer timing a single call learns
something about |Z|. The mechanisms here draw a handful of noise values per query (not per
user), and the time is dominated by the vectorized per-user work, which does not depend on the
noise. Do not expose per-sample timings to an adversary.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Protocol

import numpy as np

__all__ = [
    "TWO_POW_64",
    "RandomSource",
    "bernoulli_exp",
    "bernoulli_fraction",
    "discrete_laplace",
    "keep_mask",
    "keep_thresholds",
    "sampling_keep_probability",
]

TWO_POW_64 = 1 << 64


class RandomSource(Protocol):
    """The part of the ``dpselect.rng`` contract these samplers use."""

    def uniform_below(self, bound: int) -> int: ...

    def uniform_below_array(self, bound: int, size: int) -> np.ndarray: ...

    def bernoulli(self, numerator: int, denominator: int) -> bool: ...


def bernoulli_fraction(p: Fraction, rng: RandomSource) -> bool:
    """Exact Bernoulli(p) for a rational p in [0, 1]."""
    if p <= 0:
        return False
    if p >= 1:
        return True
    return bool(rng.bernoulli(p.numerator, p.denominator))


def _bernoulli_exp_unit(gamma: Fraction, rng: RandomSource) -> bool:
    """CKS20 Algorithm 1 for 0 ≤ γ ≤ 1: True with probability exp(−γ), exactly."""
    k = 1
    while bernoulli_fraction(gamma / k, rng):
        k += 1
    return k % 2 == 1


def bernoulli_exp(gamma: Fraction, rng: RandomSource) -> bool:
    """Exact Bernoulli(exp(−γ)) for a rational γ ≥ 0 (CKS20 Algorithm 1 with the γ > 1 split)."""
    if gamma < 0:
        raise ValueError("gamma must be >= 0")
    whole = math.floor(gamma)
    for _ in range(whole):
        if not _bernoulli_exp_unit(Fraction(1), rng):
            return False
    return _bernoulli_exp_unit(gamma - whole, rng)


def discrete_laplace(scale: Fraction, rng: RandomSource) -> int:
    """One exact sample Z with P[Z = z] ∝ exp(−|z| / scale) (CKS20 Algorithm 2).

    ``scale`` must be a positive rational; write scale = t/s with integers s, t ≥ 1.
    Expected O(1) iterations for every scale (see the module's timing caveat).
    """
    scale = Fraction(scale)
    if scale <= 0:
        raise ValueError("scale must be > 0")
    t, s = scale.numerator, scale.denominator  # scale = t/s; CKS20 outputs Lap_Z(t/s)
    while True:
        u = rng.uniform_below(t)
        if not bernoulli_exp(Fraction(u, t), rng):
            continue
        v = 0
        while bernoulli_exp(Fraction(1), rng):
            v += 1
        y = (u + t * v) // s
        negative = rng.bernoulli(1, 2)
        if negative and y == 0:
            continue
        return -y if negative else y


def keep_thresholds(probabilities: np.ndarray, condition: np.ndarray | float = 1.0) -> np.ndarray:
    """Quantize keep probabilities *down* to 64-bit fixed point: Q = ⌊p·(1 − 2⁻⁴⁰·κ)·2⁶⁴⌋.

    ``condition`` (κ ≥ 1, elementwise) bounds how much the float evaluation of p can amplify
    input rounding (for exp(a − b)·… it is 1 + |a| + |b|). The returned uint64 Q satisfies
    Q/2⁶⁴ ≤ p_exact whenever the float p is within a relative 2⁻⁴⁰·κ of the exact probability:
    float ``exp``/``expm1`` and divisions are within a few ulp (~1e-15·κ), so the margin
    (~1e-12·κ) covers them with room. Lower keep probabilities only reduce a sampled user's
    privacy loss, so rounding down is the safe side; an exact (mpmath) check lives in the
    tests. Probabilities ≥ 1 must be handled by the caller (keep for sure).
    """
    p = np.clip(np.asarray(probabilities, dtype=np.float64), 0.0, 1.0)
    margin = np.clip(1.0 - 2.0**-40 * np.asarray(condition, dtype=np.float64), 0.0, 1.0)
    scaled = np.floor(p * margin * 2.0**64)
    # p·margin ≤ 1 − 2**-40, so the product is < 2**64 and the cast never overflows.
    return scaled.astype(np.uint64)


def sampling_keep_probability(phi: np.ndarray, target: float) -> tuple[np.ndarray, np.ndarray]:
    """[JYC15] keep probability (e^{φ} − 1)/(e^{target} − 1), evaluated without overflow.

    Returns the float probability and the condition number κ for :func:`keep_thresholds`.
    Uses (e^a − 1)/(e^b − 1) = e^{a−b}·(1 − e^{−a})/(1 − e^{−b}).
    """
    a = np.asarray(phi, dtype=np.float64)
    b = float(target)
    with np.errstate(over="ignore"):  # levels near the float maximum: κ = inf, keep probability 0
        p = np.exp(a - b) * (-np.expm1(-a)) / (-math.expm1(-b))
        return p, 1.0 + np.abs(a) + abs(b)


def keep_mask(thresholds: np.ndarray, rng: RandomSource) -> np.ndarray:
    """Independent exact coins: element i is True with probability thresholds[i] / 2**64."""
    n = int(thresholds.size)
    if n == 0:
        return np.zeros(0, dtype=bool)
    draws = rng.uniform_below_array(TWO_POW_64, n)
    return draws < thresholds
