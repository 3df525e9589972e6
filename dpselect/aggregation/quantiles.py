"""Quantile metrics of a grouped release: :func:`quantile`, :func:`median`, :func:`min` and
:func:`max` (names of PipelineDP's ``PERCENTILE``, OpenDP's ``dp.quantile`` and Tumult's
``quantile/median/min/max``).

A metric only says *what* to compute; the mechanism — a hierarchical histogram of the clamped
values per key, noised with the release's exact integer noise and read by descending it — is in
:mod:`dpselect.aggregation.quantile_tree` (docs/privacy/quantiles.md)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from numbers import Real

import numpy as np

from dpselect.aggregation.metrics import Metric

__all__ = ["QuantileMetric", "max", "median", "min", "output_columns", "quantile", "suffix"]

_builtin_min, _builtin_max = min, max


@dataclass(frozen=True)
class QuantileMetric(Metric):
    """Quantiles ``quantiles`` (each in [0, 1]) of ``column`` per key, over the kept rows with
    each value clamped to ``bounds``, all released from ONE noisy tree (one share of the
    budget). ``several``: the quantiles were given as a sequence, so each gets its own output
    column NAME_pXX (:func:`output_columns`); a single float q gives the column NAME. ``label``:
    how the metric was asked for ("quantile", "median", "min" or "max")."""

    quantiles: tuple[float, ...] = ()
    several: bool = False
    label: str = "quantile"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.quantiles:
            raise ValueError(f"{self.label}(..., q=) needs at least one quantile in [0, 1]")

    def __str__(self) -> str:
        parts = [repr(self.column)]
        if self.label == "quantile":
            parts.append(f"q={list(self.quantiles) if self.several else self.quantiles[0]!r}")
        parts.append("bounds found privately" if self.bounds is None else f"bounds={self.bounds}")
        if self.noise is not None:
            parts.append(f"noise={self.noise!r}")
        return f"{self.label}({', '.join(parts)})"


def _checked_q(value: object) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (Real, Decimal)):
        raise TypeError(f"quantile(..., q=): each q must be a real number in [0, 1], got {type(value).__name__} "
                        f"{value!r}")
    q = float(value)
    if math.isnan(q) or not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile(..., q=): each q must be in [0, 1] (0.5 for the median, 0.9 for the 90th "
                         f"percentile), got {value!r}")
    return q


def _checked_quantiles(q: object) -> tuple[tuple[float, ...], bool]:
    if isinstance(q, (str, bytes)):
        raise TypeError(f"quantile(..., q=) must be a number in [0, 1] or a sequence of them, got {q!r}")
    if isinstance(q, (Real, Decimal)) and not isinstance(q, (bool, np.bool_)):
        return (_checked_q(q),), False
    if isinstance(q, np.ndarray):
        q = q.tolist()
    if not isinstance(q, Sequence):
        raise TypeError(f"quantile(..., q=) must be a number in [0, 1] or a sequence of them, got "
                        f"{type(q).__name__}")
    values = tuple(_checked_q(v) for v in q)
    if not values:
        raise ValueError("quantile(..., q=) is an empty sequence: give at least one quantile in [0, 1]")
    if len(set(values)) != len(values):
        twice = sorted({v for v in values if values.count(v) > 1})
        raise ValueError(f"quantile(..., q=) lists {', '.join(f'{v:g}' for v in twice)} twice: each quantile once")
    if len({suffix(v) for v in values}) != len(values):
        raise ValueError("quantile(..., q=): two quantiles would have the same column name (they agree to 15 "
                         "significant digits); give distinct quantiles")
    return values, True


def suffix(q: float) -> str:
    """The column suffix of quantile q: ``p`` and the percentage, '_' for a decimal point
    (0.5 → ``p50``, 0.9 → ``p90``, 0.995 → ``p99_5``, 0 → ``p0``, 1 → ``p100``)."""
    percent = (Decimal(repr(q)) * 100).normalize()
    text = format(percent, "f")
    return "p" + text.replace(".", "_")


def output_columns(name: str, metric: Metric) -> list[str]:
    """The result columns of metric ``name`` (before its intervals): NAME, or NAME_pXX for each
    quantile of a metric given several."""
    if isinstance(metric, QuantileMetric) and metric.several:
        return [f"{name}_{suffix(q)}" for q in metric.quantiles]
    return [name]


def quantile(column: str, q: float | Sequence[float], bounds: tuple[float, float] | None = None, *,
             noise: str | None = None) -> QuantileMetric:
    """The q-quantile(s) of ``column`` over the partition's kept rows, each value clamped to
    ``bounds`` (None: found privately with APPROX_BOUNDS, docs/privacy/approx-bounds.md).

    ``q``: a number in [0, 1] (output column NAME), or a sequence of distinct ones (output
    columns NAME_p50, NAME_p90, ...: :func:`suffix`), all released from one noisy tree for one
    share of the budget. The q-quantile of n values is the value of rank max(1, ⌈q·n⌉) in
    increasing order. The released value is read from a hierarchical histogram of the clamped
    values with exact discrete Laplace or Gaussian noise on every node (docs/privacy/quantiles.md):
    its rank among the key's values is off by the noise (the rank error), not by the values'
    spread. With ``confidence_level`` the columns NAME_ci_low / NAME_ci_high hold the key's true
    q-quantile with at least that probability. ``noise`` as for :func:`dpselect.count`."""
    values, several = _checked_quantiles(q)
    return QuantileMetric("quantile", column, bounds, noise, quantiles=values, several=several)


def median(column: str, bounds: tuple[float, float] | None = None, *, noise: str | None = None) -> QuantileMetric:
    """The median: :func:`quantile` at q = 0.5 (the value of rank ⌈n/2⌉)."""
    return QuantileMetric("quantile", column, bounds, noise, quantiles=(0.5,), label="median")


def min(column: str, bounds: tuple[float, float] | None = None, *,  # noqa: A001 (the ecosystem's name)
        noise: str | None = None) -> QuantileMetric:
    """The 0-quantile: :func:`quantile` at q = 0. It is NOT the exact minimum (which no DP
    mechanism can release with bounded error): it is a value whose rank among the key's clamped
    values is within the noise's rank error of 0 — few values lie below it, and on a key with
    small outliers it may sit above some of them. With ``confidence_level`` its interval holds the
    key's exact smallest clamped value with at least that probability (docs/privacy/quantiles.md)."""
    return QuantileMetric("quantile", column, bounds, noise, quantiles=(0.0,), label="min")


def max(column: str, bounds: tuple[float, float] | None = None, *,  # noqa: A001 (the ecosystem's name)
        noise: str | None = None) -> QuantileMetric:
    """The 1-quantile: :func:`quantile` at q = 1, a value whose rank is within the noise's rank
    error of n (few values lie above it); its interval holds the key's exact largest clamped value
    with at least the confidence level. The mirror of :func:`min`."""
    return QuantileMetric("quantile", column, bounds, noise, quantiles=(1.0,), label="max")
