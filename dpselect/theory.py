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
    """ln((e^ε + 2δ − 1) / ((e^ε + 1) δ)), written with expm1 for small ε."""
    em1 = math.expm1(epsilon)
    return math.log((em1 + 2 * delta) / ((em1 + 2) * delta))


def pi_opt_crossovers(epsilon: float, delta: float) -> Crossovers:
    """n1, n2, k for ε > 0, 0 < δ < 1 (spec core.md §1, §3)."""
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError("crossovers need epsilon > 0 and 0 < delta < 1")
    log_term = _log_term(epsilon, delta)
    n1 = 1 + math.floor(log_term / epsilon)
    pi_n1 = delta * math.expm1(n1 * epsilon) / math.expm1(epsilon)
    n2 = n1 + math.floor(math.log1p(math.expm1(epsilon) / delta * (1 - pi_n1)) / epsilon)
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
    em1 = math.expm1(epsilon)
    pi_n1 = delta * math.expm1(n1 * epsilon) / em1
    low = delta * np.expm1(np.minimum(counts, n1) * epsilon) / em1
    m = np.maximum(counts - n1, 0.0)
    mid = -np.expm1(-m * epsilon) * (1 + delta / em1) + np.exp(-m * epsilon) * pi_n1
    out = np.where(counts <= n1, low, mid)
    out = np.where(counts > n2, 1.0, out)
    return np.clip(out, 0.0, 1.0)


def tsgd_threshold(epsilon: float, delta: float) -> int:
    """k of Definition 7: ceil((1/ε) ln((e^ε + 2δ − 1) / ((e^ε + 1) δ)))."""
    return pi_opt_crossovers(epsilon, delta).k
