"""Exact and floating-point checks of the DP inequalities of a mechanism on a finite output set.

The worst violation of (epsilon, delta)-DP over an edge d ~ d' and all subsets S of outputs is

    max_S  P_d(S) - e^eps P_d'(S) - delta  =  sum_v (P_d(v) - e^eps P_d'(v))_+  -  delta,

attained by S = {v : P_d(v) > e^eps P_d'(v)} (docs/privacy/rainbow.md, "Setting"). Both functions below return
the maximum of this quantity over every edge taken in both directions. A value <= 0 means the
mechanism is (epsilon, delta)-DP on that graph; for delta = 0 it is 0 exactly when every singleton
inequality holds (singletons suffice for pure DP).

* :func:`dp_violation` works on float tables (closed forms, LP output): it is a diagnostic, with
  rounding error around 1e-16.
* :func:`exact_dp_violation` works on integer weight tables (what a mechanism samples from) in
  exact rational arithmetic, with e^epsilon replaced by a certified rational *lower* bound, so a
  result <= 0 proves the DP inequalities for the real e^epsilon.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpselect.core.exact import exp_lower

from ._validate import check_delta, check_epsilon

__all__ = ["dp_violation", "exact_dp_violation", "exp_lower_bound", "as_fraction_lower", "as_fraction_upper"]

#: Above this epsilon the lower bound of e^epsilon used for certification is e^64 (> 2^92): a
#: ratio of two positive 64-bit weights never exceeds it, so nothing is lost, and it stays valid.
_EPSILON_CAP = 64

#: Denominator of the rational lower bound of e^epsilon.
_EXP_BITS = 128


def as_fraction_lower(value: float) -> Fraction:
    """The smaller of the exact binary value of ``value`` and its decimal reading
    (``Fraction(repr(value))``, so that 0.1 means 1/10): a user meant one of them."""
    return min(Fraction(value), Fraction(repr(float(value))))


def as_fraction_upper(value: float) -> Fraction:
    """The larger of the exact binary value of ``value`` and its decimal reading."""
    return max(Fraction(value), Fraction(repr(float(value))))


@functools.lru_cache(maxsize=256)
def exp_lower_bound(epsilon: float) -> Fraction:
    """A certified rational lower bound E <= e^epsilon with denominator 2**128.

    E is e^x at x = min(as_fraction_lower(epsilon), 64) rounded down to a multiple of 2**-128
    (``dpselect.core.exact.exp_lower``, from certified integer bounds on e^x), so within 2**-128
    of e^x, and 2**-128 relative as e^x >= 1.
    """
    epsilon = check_epsilon(epsilon)
    x = min(as_fraction_lower(epsilon), Fraction(_EPSILON_CAP))
    return exp_lower(x, _EXP_BITS)


def _as_edges(edges: ArrayLike, n_rows: int, name: str) -> NDArray[np.int64]:
    array = np.asarray(edges)
    if array.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    if array.ndim != 2 or array.shape[1] != 2:
        raise ValueError(f"{name} must have shape (E, 2), got {array.shape}")
    if not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"{name} must hold integer indices, got dtype {array.dtype}")
    if array.min() < 0 or array.max() >= n_rows:
        raise ValueError(f"{name} must index rows 0..{n_rows - 1}")
    return array.astype(np.int64)


def dp_violation(table: ArrayLike, edges: ArrayLike, epsilon: float, delta: float = 0.0) -> float:
    """Worst violation of (epsilon, delta)-DP of a float probability table, over every edge in both
    directions and every subset of outputs (see the module docstring). <= 0 means DP up to
    floating-point rounding (about 1e-16 per entry).

    ``table`` is (N, m) (row = a dataset's distribution over the m outputs); ``edges`` is (E, 2)
    of row indices (neighbouring datasets). With no edges the result is ``-delta``.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    probabilities = np.asarray(table, dtype=np.float64)
    if probabilities.ndim != 2:
        raise ValueError(f"table must be 2-D (datasets, outputs), got shape {probabilities.shape}")
    pairs = _as_edges(edges, probabilities.shape[0], "edges")
    if pairs.shape[0] == 0:
        return -delta
    factor = math.exp(min(epsilon, 700.0))
    worst = 0.0
    for first, second in ((0, 1), (1, 0)):
        excess = probabilities[pairs[:, first]] - factor * probabilities[pairs[:, second]]
        worst = max(worst, float(np.max(np.sum(np.maximum(excess, 0.0), axis=1))))
    return worst - delta


def exact_dp_violation(
    weights: ArrayLike,
    total: int,
    edges: ArrayLike,
    epsilon: float,
    delta: float = 0.0,
) -> Fraction:
    """Exact worst violation of (epsilon, delta)-DP of an integer weight table.

    Row r of ``weights`` is the distribution W[r] / total (every row must sum to ``total``).
    Computed in exact integer/rational arithmetic with e^epsilon replaced by the certified lower
    bound :func:`exp_lower_bound` and delta by the smaller of its binary and decimal readings, so
    a result <= 0 *proves* that every edge of ``edges`` satisfies P_d(S) <= e^eps P_d'(S) + delta for
    all subsets S, in both directions (docs/privacy/rainbow.md, "What is certified at run time").
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    if isinstance(total, bool) or not isinstance(total, (int, np.integer)) or int(total) <= 0:
        raise ValueError(f"total must be a positive integer, got {total!r}")
    total = int(total)
    integer_weights = np.asarray(weights)
    if integer_weights.ndim != 2 or not (
        np.issubdtype(integer_weights.dtype, np.integer) or integer_weights.dtype == object
    ):
        raise TypeError("weights must be a 2-D array of integers")
    rows = integer_weights.astype(object)
    if rows.size and bool(np.any(rows < 0)):
        raise ValueError("weights must be non-negative")
    if rows.size and not bool(np.all(rows.sum(axis=1) == total)):
        raise ValueError("every row of weights must sum to total")
    pairs = _as_edges(edges, rows.shape[0], "edges")
    delta_exact = as_fraction_lower(delta)
    if pairs.shape[0] == 0:
        return -delta_exact
    bound = exp_lower_bound(epsilon)
    scale = bound.denominator  # 2**128
    multiplier = bound.numerator
    worst = 0
    for first, second in ((0, 1), (1, 0)):
        # W_u * 2^128 - a * W_v, all Python integers: no rounding anywhere.
        excess = rows[pairs[:, first]] * scale - rows[pairs[:, second]] * multiplier
        positive = np.where(excess > 0, excess, 0).sum(axis=1)
        worst = max(worst, int(positive.max()))
    return Fraction(worst, scale * total) - delta_exact
