"""Closed forms of the paper in floating point, for reference and for sizing tables.

These are *not* what the kernel samples from (that is the certified table of
:mod:`dpselect.tables`); they are the formulas of Desfontaines et al. 2022 (seed 003,
spec core.md §1 and §3) evaluated with expm1/log1p.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = ["Crossovers", "pi_opt_crossovers", "pi_opt_closed_form", "tsgd_threshold"]


class Crossovers(NamedTuple):
    """n1: end of the geometric growth; n2: last n with pi < 1 (Theorem 1, Lemma 1);
    k: the TSGD truncation and release threshold (Definition 7)."""

    n1: int
    n2: int
    k: int


def _log_term(epsilon: float, delta: float) -> float:
    """ln((e^ε + 2δ − 1) / ((e^ε + 1) δ)), with expm1 for small ε and e^−ε for large ε."""
    if epsilon < 1:
        em1 = math.expm1(epsilon)
        return math.log((em1 + 2 * delta) / ((em1 + 2) * delta))
    e = math.exp(-epsilon)
    return math.log1p((2 * delta - 1) * e) - math.log1p(e) - math.log(delta)


def _geometric_sum(n: npt.ArrayLike, epsilon: float) -> npt.NDArray[np.float64]:
    """(e^{nε} − 1) / (e^ε − 1) = Σ_{i<n} e^{iε} without overflowing the intermediate terms."""
    counts = np.asarray(n, dtype=np.float64)
    if epsilon < 1:
        return np.expm1(counts * epsilon) / math.expm1(epsilon)
    return np.exp((counts - 1) * epsilon) * -np.expm1(-counts * epsilon) / -math.expm1(-epsilon)


def _log1p_scaled(epsilon: float, factor: float) -> float:
    """ln(1 + (e^ε − 1) · factor) for factor > 0, stable for large ε."""
    if epsilon < 30:
        return math.log1p(math.expm1(epsilon) * factor)
    # (e^ε − 1)·factor = e^ε (1 − e^−ε) factor; the 1 inside the log is below 1e-13 relative
    return epsilon + math.log(factor) + math.log1p(-math.exp(-epsilon))


def pi_opt_crossovers(epsilon: float, delta: float) -> Crossovers:
    """n1, n2, k for ε > 0, 0 < δ < 1 (spec core.md §1, §3)."""
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError("crossovers need epsilon > 0 and 0 < delta < 1")
    log_term = _log_term(epsilon, delta)
    n1 = 1 + math.floor(log_term / epsilon)
    pi_n1 = min(1.0, delta * float(_geometric_sum(n1, epsilon)))
    n2 = n1 + math.floor(_log1p_scaled(epsilon, (1 - pi_n1) / delta) / epsilon) if pi_n1 < 1 else n1
    k = math.ceil(log_term / epsilon)
    return Crossovers(n1, n2, k)


def pi_opt_closed_form(n: npt.ArrayLike, epsilon: float, delta: float) -> npt.NDArray[np.float64]:
    """pi_opt(n) of Theorem 1 (Theorem 2 for ε = 0 or δ = 0), vectorized."""
    counts = np.asarray(n, dtype=np.float64)
    if delta == 0:
        return np.zeros_like(counts)
    if epsilon == 0:
        return np.minimum(1.0, counts * delta)
    n1, n2, _ = pi_opt_crossovers(epsilon, delta)
    pi_n1 = min(1.0, delta * float(_geometric_sum(n1, epsilon)))
    low = delta * _geometric_sum(np.minimum(counts, n1), epsilon)
    m = np.maximum(counts - n1, 0.0)
    # (1 + δ/(e^ε − 1)) written so that it stays finite for large ε
    scale = 1 + delta / math.expm1(epsilon) if epsilon < 700 else 1.0
    mid = -np.expm1(-m * epsilon) * scale + np.exp(-m * epsilon) * pi_n1
    out = np.where(counts <= n1, low, mid)
    out = np.where(counts > n2, 1.0, out)
    return np.clip(out, 0.0, 1.0)


def tsgd_threshold(epsilon: float, delta: float) -> int:
    """k of Definition 7: ceil((1/ε) ln((e^ε + 2δ − 1) / ((e^ε + 1) δ)))."""
    return pi_opt_crossovers(epsilon, delta).k
