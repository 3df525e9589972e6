"""Confidence intervals for noisy values and means (docs/privacy/confidence-intervals.md).

A released value is M = m + X, where m is the value **after contribution bounding and before
noise** and X is the noise. Each function here returns the half-width h of the symmetric
interval [M − h, M + h], which contains m with probability at least ``level`` = 1 − α over the
noise, whatever m is. They use public parameters only (the noise law and the level), so they
cost no privacy budget.

What the intervals do not cover, by design (as in Google's library and Desfontaines' thesis):
* clamping: m is the sum of the *clamped* values, not of the raw ones;
* thresholding: for a value released only when it passes a threshold, coverage holds over all
  draws, not conditionally on the value having been released.

The discrete intervals are computed for the exact noise that runs: the discrete Laplace and
k-TSGD ones are the smallest integers whose tail is certified ≤ α in rational arithmetic (the
TSGD one from the integer table weights themselves), and the discrete Gaussian one is the
smallest integer passing a certified upper bound on its tail. The continuous Laplace and
Gaussian half-widths are provided for completeness, in floating point.
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction
from statistics import NormalDist
from typing import Protocol

import numpy as np
import numpy.typing as npt

from dpselect.core.exact import exp_neg_bounds, inv_sqrt_2pi_bounds, normal_tail_upper, sqrt_bounds
from dpselect.core.checks import check_level, check_positive_real
from dpselect.core.tables import TSGDTable

__all__ = [
    "HasHalfWidth",
    "alpha_for",
    "split_level",
    "laplace_half_width",
    "gaussian_half_width",
    "discrete_laplace_half_width",
    "discrete_gaussian_half_width",
    "discrete_gaussian_tail_upper",
    "tsgd_half_width",
    "interval",
    "mean_interval",
    "mean_confidence_interval",
]


class HasHalfWidth(Protocol):
    """A noise with a confidence half-width at a level (the noise objects of this package)."""

    def confidence_interval(self, level: float | Fraction) -> int | float: ...


def alpha_for(level: object) -> Fraction:
    """α = 1 − level, exactly, for a level strictly between 0 and 1 (read as the decimal written)."""
    return 1 - check_level(level)


def split_level(level: object, parts: int = 2) -> Fraction:
    """The level each of ``parts`` intervals needs for all of them to hold together with
    probability ≥ ``level`` (union bound: each gets α/parts)."""
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise ValueError(f"parts must be a positive int, got {parts!r}")
    return 1 - alpha_for(level) / parts


def _positive_array(name: str, value: object) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be positive and finite")
    return arr


def _result(arr: np.ndarray) -> float | np.ndarray:
    return float(arr) if arr.ndim == 0 else arr


# ------------------------------------------------------------------ continuous noise

def laplace_half_width(scale: npt.ArrayLike, level: float) -> float | np.ndarray:
    """Continuous Laplace of scale b: P[|X| > h] = exp(−h/b), so h = b·ln(1/α)."""
    alpha = float(alpha_for(level))
    return _result(_positive_array("scale", scale) * math.log(1 / alpha))


def gaussian_half_width(sigma: npt.ArrayLike, level: float) -> float | np.ndarray:
    """Continuous Gaussian of standard deviation σ: h = σ·Φ⁻¹(1 − α/2) (computed as −Φ⁻¹(α/2),
    which keeps its precision for small α)."""
    alpha = float(alpha_for(level))
    return _result(_positive_array("sigma", sigma) * -NormalDist().inv_cdf(alpha / 2))


# ------------------------------------------------------------------ discrete Laplace

def _bits_for(alpha: Fraction) -> int:
    """Precision of the exp bounds: far below α, so the certificate decides, not the rounding."""
    return 96 + max(0, alpha.denominator.bit_length() - alpha.numerator.bit_length())


@functools.lru_cache(maxsize=512)
def _discrete_laplace_half_width(scale: Fraction, alpha: Fraction) -> int:
    bits = _bits_for(alpha)
    # P[|X| > h] = 2 q^(h+1) / (1 + q) with q = exp(−1/t): bounded above in rationals.
    denominator = 1 + exp_neg_bounds(1 / scale, bits)[0]

    def tail_upper(h: int) -> Fraction:
        return 2 * exp_neg_bounds((h + 1) / scale, bits)[1] / denominator

    q = math.exp(-1 / float(scale))
    h = max(0, math.ceil(float(scale) * math.log(2 / (float(alpha) * (1 + q)))) - 2)
    while tail_upper(h) > alpha:
        h += 1
    while h > 0 and tail_upper(h - 1) <= alpha:
        h -= 1
    return h


def discrete_laplace_half_width(scale: object, level: float | Fraction) -> int | np.ndarray:
    """Discrete Laplace of scale t (P[X = x] ∝ exp(−|x|/t)): the smallest integer h ≥ 0 whose
    tail P[|X| > h] = 2q^(h+1)/(1 + q), q = e^(−1/t), is certified ≤ α. ``scale`` is a number
    or an array of numbers (one half-width each)."""
    alpha = alpha_for(level)
    if isinstance(scale, np.ndarray) or isinstance(scale, (list, tuple)):
        arr = np.asarray(scale, dtype=object)
        unique = {v: _discrete_laplace_half_width(check_positive_real("scale", v), alpha)
                  for v in set(arr.ravel().tolist())}
        return np.vectorize(unique.__getitem__, otypes=[np.int64])(arr)
    return _discrete_laplace_half_width(check_positive_real("scale", scale), alpha)


# ------------------------------------------------------------------ discrete Gaussian

# Below this σ², tails are summed term by term (they fall fast enough for a few dozen terms to
# carry all the mass); above it, a midpoint-rule integral bound is tight.
_DIRECT_SIGMA2 = Fraction(64)
_DIRECT_TERMS = 24


def discrete_gaussian_tail_upper(sigma2: Fraction, h: int, bits: int = 128) -> Fraction:
    """A certified rational upper bound on P[|X| > h] for X discrete Gaussian of variance σ².

    P[|X| > h] = 2 N / Z with N = Σ_{x > h} f(x), Z = Σ_x f(x), f(x) = exp(−x²/(2σ²)).
    * Z ≥ σ√(2π) by Poisson summation (Z = σ√(2π) Σ_k exp(−2π²σ²k²), every term positive), and
      Z ≥ 1 + 2 Σ_{1 ≤ y ≤ 24} f(y) (a partial sum); the larger is used.
    * N ≤ Σ_{a ≤ x < c} f(x) + ∫_{c−1/2}^∞ f when c − 1/2 ≥ σ (f is convex there, so each term
      is below the integral over [x − 1/2, x + 1/2]); else the cruder f(c) + ∫_c^∞ f (f is
      decreasing). Here a = h + 1 and c − a ≤ 24 terms are summed for σ² < 64 (none otherwise),
      stopping early once they are negligible; ∫_c^∞ f = σ√(2π)(1 − Φ(c/σ)) is bounded with
      rational bounds on Φ and on π."""
    sigma2 = Fraction(sigma2)
    a = h + 1
    inv_low, inv_high = inv_sqrt_2pi_bounds(bits + 16)  # bounds on 1/√(2π)
    sigma_lo, sigma_hi = sqrt_bounds(sigma2, bits + 16)

    def f_up(x: int) -> Fraction:
        return exp_neg_bounds(Fraction(x * x) / (2 * sigma2), bits + 16)[1]

    def f_lo(x: int) -> Fraction:
        return exp_neg_bounds(Fraction(x * x) / (2 * sigma2), bits + 16)[0]

    def integral_upper(c: Fraction) -> Fraction:  # ≥ ∫_c^∞ f, for c ≥ 0
        z_lo = c / sigma_hi  # ≤ c/σ, so 1 − Φ(z_lo) ≥ 1 − Φ(c/σ)
        return sigma_hi / inv_low * normal_tail_upper(z_lo, bits + 16)

    # Terms with x²/(2σ²) above ``negligible`` are below 2^-(bits + 32): summing them one by one
    # would cost long exp series for nothing; the integral bound covers them.
    negligible = Fraction(7, 10) * (bits + 32)

    def small(x: int) -> bool:
        return Fraction(x * x) / (2 * sigma2) <= negligible

    c = a
    numerator = Fraction(0)
    if sigma2 < _DIRECT_SIGMA2:
        while c < a + _DIRECT_TERMS and small(c):
            numerator += f_up(c)
            c += 1
    midpoint = Fraction(2 * c - 1, 2)
    if midpoint * midpoint >= sigma2:
        numerator += integral_upper(midpoint)
    else:
        numerator += f_up(c) + integral_upper(Fraction(c))
    z_lower = sigma_lo / inv_high  # ≤ σ√(2π)
    if sigma2 < _DIRECT_SIGMA2:
        terms = [f_lo(y) for y in range(1, _DIRECT_TERMS + 1) if small(y)]
        z_lower = max(z_lower, 1 + 2 * sum(terms, Fraction(0)))
    return min(Fraction(1), 2 * numerator / z_lower)


@functools.lru_cache(maxsize=512)
def _discrete_gaussian_half_width(sigma2: Fraction, alpha: Fraction) -> int:
    bits = _bits_for(alpha)
    sigma = math.sqrt(float(sigma2))
    h = max(0, math.floor(sigma * -NormalDist().inv_cdf(float(alpha) / 2)) - 1)
    while discrete_gaussian_tail_upper(sigma2, h, bits) > alpha:
        h += 1
    while h > 0 and discrete_gaussian_tail_upper(sigma2, h - 1, bits) <= alpha:
        h -= 1
    return h


def discrete_gaussian_half_width(sigma2: object, level: float | Fraction) -> int | np.ndarray:
    """Discrete Gaussian of variance σ² (P[X = x] ∝ exp(−x²/(2σ²))): the smallest integer h ≥ 0
    whose tail passes the certified bound :func:`discrete_gaussian_tail_upper` ≤ α. The bound
    is tight to a fraction of a percent, so h is the exact smallest integer except in rare ties,
    where it is one more (still a valid interval). ``sigma2`` may be an array."""
    alpha = alpha_for(level)
    if isinstance(sigma2, np.ndarray) or isinstance(sigma2, (list, tuple)):
        arr = np.asarray(sigma2, dtype=object)
        unique = {v: _discrete_gaussian_half_width(check_positive_real("sigma2", v), alpha)
                  for v in set(arr.ravel().tolist())}
        return np.vectorize(unique.__getitem__, otypes=[np.int64])(arr)
    return _discrete_gaussian_half_width(check_positive_real("sigma2", sigma2), alpha)


# ------------------------------------------------------------------ k-TSGD

def tsgd_half_width(table: TSGDTable, level: float) -> int:
    """k-TSGD from the certified table that runs (P[X = x] = W(|x|)/S): the smallest h in
    [0, k] with P[|X| > h] = 2 Σ_{m > h} W(m) / S ≤ α, computed exactly on the integer weights
    (h = k always qualifies: the noise never exceeds k)."""
    if not isinstance(table, TSGDTable):
        raise TypeError(f"table must be a dpselect.core.tables.TSGDTable, got {type(table).__name__}")
    alpha = alpha_for(level)
    h, outside = table.k, 0  # outside = Σ_{m > h} W(m)
    while h > 0 and 2 * (outside + table.weights[h]) <= alpha * table.total:
        outside += table.weights[h]
        h -= 1
    return h


# ------------------------------------------------------------------ intervals

def _widen(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One ulp outward: float rounding can then only make an interval larger, never smaller."""
    return np.nextafter(lo, -np.inf), np.nextafter(hi, np.inf)


def interval(noisy: npt.ArrayLike, half_width: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """[noisy − h, noisy + h], element-wise (h broadcasts). Integer inputs give exact int64
    bounds (OverflowError if they leave int64); float inputs give float64 bounds widened by one
    ulp outward."""
    values = np.asarray(noisy)
    widths = np.asarray(half_width)
    if values.dtype.kind in "iu" and widths.dtype.kind in "iu":
        info = np.iinfo(np.int64)
        if np.any(widths < 0):
            raise ValueError("half_width must be >= 0")
        if (values.size and values.max() > info.max) or (widths.size and widths.max() > info.max):
            raise OverflowError("noisy values and half-widths must fit in int64")
        v, w = np.broadcast_arrays(values.astype(np.int64), widths.astype(np.int64))
        if np.any(v < info.min + w) or np.any(v > info.max - w):
            raise OverflowError("interval bounds do not fit in int64")
        return v - w, v + w
    if values.dtype.kind not in "iuf" or widths.dtype.kind not in "iuf":
        raise TypeError(f"noisy and half_width must be numeric, got {values.dtype} and {widths.dtype}")
    v = values.astype(np.float64)
    w = widths.astype(np.float64)
    if np.any(w < 0) or not np.all(np.isfinite(w)):
        raise ValueError("half_width must be finite and >= 0")
    return _widen(v - w, v + w)


def mean_interval(noisy_sum: npt.ArrayLike, noisy_count: npt.ArrayLike, sum_half_width: npt.ArrayLike,
                  count_half_width: npt.ArrayLike, *, lower: float | None = None,
                  upper: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """An interval for the mean S/C from a noisy sum S' and a noisy count C'.

    If S ∈ [S' − h_s, S' + h_s] and C ∈ [C' − h_c, C' + h_c] (each at level 1 − α/2:
    :func:`split_level`), both hold with probability ≥ 1 − α (union bound). The true count of a
    partition with data is ≥ 1, so C ∈ [max(C' − h_c, 1), max(C' + h_c, 1)]; on that box S/C
    is monotone in each coordinate, so its extremes are at the corners. With clamping bounds
    [lower, upper] the mean lies in them too, and the interval is intersected with them.
    Conservative: the union bound and the box ignore that the two noises are independent."""
    s = np.asarray(noisy_sum, dtype=np.float64)
    c = np.asarray(noisy_count, dtype=np.float64)
    hs = np.asarray(sum_half_width, dtype=np.float64)
    hc = np.asarray(count_half_width, dtype=np.float64)
    if np.any(hs < 0) or np.any(hc < 0):
        raise ValueError("half-widths must be >= 0")
    s_lo, s_hi = _widen(s - hs, s + hs)
    c_lo = np.maximum(c - hc, 1.0)
    c_hi = np.maximum(c + hc, 1.0)
    corners = np.stack(np.broadcast_arrays(s_lo / c_lo, s_lo / c_hi, s_hi / c_lo, s_hi / c_hi))
    lo, hi = _widen(corners.min(axis=0), corners.max(axis=0))
    if lower is not None or upper is not None:
        floor = -np.inf if lower is None else float(lower)
        ceiling = np.inf if upper is None else float(upper)
        if floor > ceiling:
            raise ValueError(f"lower = {lower} is above upper = {upper}")
        lo, hi = np.clip(lo, floor, ceiling), np.clip(hi, floor, ceiling)
    return lo, hi


def mean_confidence_interval(noisy_sum: npt.ArrayLike, noisy_count: npt.ArrayLike, sum_noise: HasHalfWidth,
                             count_noise: HasHalfWidth, level: float, *, sum_step: float = 1.0,
                             lower: float | None = None, upper: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`mean_interval` at ``level`` from two noises: each gets level 1 − α/2. The sum's
    noise is in grid units of ``sum_step`` (its half-width is multiplied by it)."""
    each = split_level(level, 2)
    sum_width = float(sum_noise.confidence_interval(each)) * float(sum_step)
    count_width = float(count_noise.confidence_interval(each))
    return mean_interval(noisy_sum, noisy_count, sum_width, count_width, lower=lower, upper=upper)
