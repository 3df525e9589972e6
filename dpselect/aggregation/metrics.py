"""What a grouped release computes per partition: the metric specifications of
:func:`dpselect.aggregate` (names follow PipelineDP's ``Metrics`` and Google's library:
COUNT, SUM, MEAN, VARIANCE, and the privacy-unit count; Tumult's ``stdev`` and
``count_distinct`` as :func:`stddev` and :func:`count_distinct`).

A metric only says *what* to compute; :func:`dpselect.aggregate` decides the noise from the
contribution bounds and the metric's share of the budget (docs/privacy/aggregate.md)."""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from decimal import Decimal
from numbers import Real
from typing import Literal

import numpy as np

__all__ = ["Metric", "NOISES", "count", "count_distinct", "count_distinct_units", "mean", "stddev", "sum",
           "variance"]

Kind = Literal["count_distinct_units", "count", "sum", "mean", "quantile", "variance", "stddev", "count_distinct"]
# The kinds of dpselect.aggregation.spread (per-key spread of a value column) and of
# dpselect.aggregation.distinct (distinct values of a column: any type, no bounds).
SPREAD_KINDS = ("variance", "stddev")
DISTINCT_KIND = "count_distinct"
# The noise a metric may ask for (None: the release's choice, aggregate(noise=...)).
NOISES = ("laplace", "gaussian")

_builtin_sum = sum
_FLOAT_MAX = int(sys.float_info.max)


@dataclass(frozen=True)
class Metric:
    """One statistic per partition.

    ``kind``: "count_distinct_units" (users kept in the partition after bounding), "count"
    (rows kept), "sum" or "mean" of ``column`` over the kept rows ("quantile": made by
    :func:`dpselect.quantile`, :class:`dpselect.aggregation.quantiles.QuantileMetric`), each value clamped to
    ``bounds`` (None: found privately with APPROX_BOUNDS over the whole dataset,
    docs/privacy/approx-bounds.md). ``noise``: "laplace" or "gaussian" for this metric, None
    (default) for the release's choice (:func:`dpselect.aggregate`'s ``noise``)."""

    kind: Kind
    column: str | None = None
    bounds: tuple[float, float] | None = None
    noise: str | None = None
    # count_distinct only: the most distinct values one privacy unit adds to one key (None: L∞).
    max_values_per_unit: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("count_distinct_units", "count", "sum", "mean", "quantile", *SPREAD_KINDS, DISTINCT_KIND):
            raise ValueError(f"unknown metric kind {self.kind!r}")
        if self.noise is not None and (not isinstance(self.noise, str) or self.noise not in NOISES):
            raise ValueError(f"{self.kind}(noise=...) must be 'laplace', 'gaussian' or None (the release's "
                             f"choice), got {self.noise!r}")
        if self.kind == "quantile" and not getattr(self, "quantiles", ()):
            raise TypeError("a quantile metric is made by dpselect.quantile(column, q), median, min or max")
        if self.kind != DISTINCT_KIND and self.max_values_per_unit is not None:
            raise TypeError(f"{self.kind}() takes no max_values_per_unit (count_distinct's own bound)")
        if self.kind == DISTINCT_KIND:
            _check_distinct(self)
        elif self.kind in ("sum", "mean", "quantile", *SPREAD_KINDS):
            if not isinstance(self.column, str) or not self.column:
                raise TypeError(f"{self.kind}() needs the value column's name (a non-empty str), got {self.column!r}")
            if self.bounds is not None:
                object.__setattr__(self, "bounds", _checked_bounds(self.kind, self.bounds))
        elif self.column is not None or self.bounds is not None:
            raise TypeError(f"{self.kind}() takes no column and no bounds")

    @property
    def needs_values(self) -> bool:
        return self.kind in ("sum", "mean", "quantile", *SPREAD_KINDS)

    def __str__(self) -> str:
        noise = "" if self.noise is None else f"noise={self.noise!r}"
        if self.kind == DISTINCT_KIND:
            cap = "" if self.max_values_per_unit is None else f", max_values_per_unit={self.max_values_per_unit}"
            return f"{self.kind}({self.column!r}{cap}{', ' + noise if noise else ''})"
        if not self.needs_values:
            return f"{self.kind}({noise})"
        bounds = "bounds found privately" if self.bounds is None else f"bounds={self.bounds}"
        return f"{self.kind}({self.column!r}, {bounds}{', ' + noise if noise else ''})"


def _check_distinct(metric: Metric) -> None:
    if not isinstance(metric.column, str) or not metric.column:
        raise TypeError(f"count_distinct() needs the column's name (a non-empty str), got {metric.column!r}")
    if metric.bounds is not None:
        raise TypeError("count_distinct() takes no bounds: it counts values, whatever their type, and clamps none")
    cap = metric.max_values_per_unit
    if cap is not None:
        if isinstance(cap, (bool, np.bool_)) or not isinstance(cap, (int, np.integer)):
            raise TypeError(f"count_distinct(max_values_per_unit=...) must be a positive int or None, got "
                            f"{type(cap).__name__} {cap!r}")
        if not 1 <= int(cap) < 2**32:
            raise ValueError(f"count_distinct(max_values_per_unit=...) must be between 1 and 2**32 - 1, got {cap!r}")
        object.__setattr__(metric, "max_values_per_unit", int(cap))


def _bound_number(kind: str, name: str, value: object) -> int | float:
    """A bound as an int (kept exact: the grid checks that a float holds it) or a float. Any real
    number is accepted — int, float, numpy scalars, Fraction, Decimal — and must be finite and
    within the float range."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (Real, Decimal)):
        raise TypeError(f"{kind}(..., bounds=): {name} must be a real number, got {type(value).__name__} {value!r}")
    if isinstance(value, (int, np.integer)):
        as_int = int(value)
        if abs(as_int) > _FLOAT_MAX:
            raise ValueError(f"{kind}(..., bounds=): {name} = {_short(as_int)} is beyond the float range (about "
                             "1.8e308); give a bound a float can hold")
        return as_int
    try:
        as_float = float(value)
    except OverflowError:
        as_float = math.inf
    if not math.isfinite(as_float):
        raise ValueError(f"{kind}(..., bounds=): {name} must be finite and within the float range, got "
                         f"{_short(value)}")
    return as_float


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


def _checked_bounds(kind: str, bounds: object) -> tuple[float, float]:
    if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
        raise TypeError(f"{kind}(..., bounds=) must be a (lower, upper) pair, got {bounds!r}")
    lower = _bound_number(kind, "lower", bounds[0])
    upper = _bound_number(kind, "upper", bounds[1])
    if lower > upper:
        raise ValueError(f"{kind}(..., bounds=({lower!r}, {upper!r})): the bounds are inverted (lower > upper)")
    return (lower, upper)


def count_distinct_units(*, noise: str | None = None) -> Metric:
    """The number of privacy units (users) in the partition after contribution bounding.
    ``noise``: "laplace" or "gaussian" for this metric (None: the release's choice)."""
    return Metric("count_distinct_units", noise=noise)


def count(*, noise: str | None = None) -> Metric:
    """The number of rows in the partition after contribution bounding (at most
    ``max_contributions_per_partition`` per user). ``noise`` as for :func:`count_distinct_units`."""
    return Metric("count", noise=noise)


def sum(column: str, bounds: tuple[float, float] | None = None, *,  # noqa: A001 (the ecosystem's name)
        noise: str | None = None) -> Metric:
    """The sum of ``column`` over the partition's kept rows, each value clamped to ``bounds``.
    ``noise`` as for :func:`count_distinct_units`."""
    return Metric("sum", column, bounds, noise)


def mean(column: str, bounds: tuple[float, float] | None = None, *, noise: str | None = None) -> Metric:
    """The mean of ``column`` over the partition's kept rows, each value clamped to ``bounds``:
    a noisy sum of the values' offsets from the bounds' midpoint over a noisy row count, plus
    the midpoint, clamped to the bounds (Google's BoundedMean). When the release also has a
    ``count()`` its noisy row count is reused, and when it also has a ``sum`` of the same column
    the mean is the noisy sum over the noisy count, spending nothing (docs/aggregate.md).
    ``noise`` as for :func:`count_distinct_units`."""
    return Metric("mean", column, bounds, noise)


def variance(column: str, bounds: tuple[float, float] | None = None, *, noise: str | None = None) -> Metric:
    """The population variance (Σ(x − x̄)²/n, like PipelineDP's VARIANCE, Google's BoundedVariance
    and ZetaSQL's VAR_POP; not the sample variance) of ``column`` over the partition's kept rows,
    each value clamped to ``bounds``: a noisy sum of the squared offsets from the bounds'
    midpoint with a noisy sum of offsets and a noisy row count, combined as E[x²] − E[x]² and
    clamped to [0, ((upper − lower)/2)²] (post-processing). A released ``count()`` is reused as
    the row count, and a ``mean`` (or a ``sum``) of the same column as the sum of offsets: no
    budget is spent twice (docs/privacy/variance.md). ``noise`` as for :func:`count_distinct_units`."""
    return Metric("variance", column, bounds, noise)


def stddev(column: str, bounds: tuple[float, float] | None = None, *, noise: str | None = None) -> Metric:
    """The population standard deviation of ``column`` over the partition's kept rows: the square
    root of :func:`variance` (Tumult's ``stdev``). With a ``variance`` of the same column in the
    release it is that variance's square root, spending nothing (docs/privacy/variance.md)."""
    return Metric("stddev", column, bounds, noise)


def count_distinct(column: str, *, max_values_per_unit: int | None = None, noise: str | None = None) -> Metric:
    """The number of distinct non-null values of ``column`` (any type) among the partition's kept
    rows (ZetaSQL's ``COUNT(DISTINCT col)``, Tumult's ``count_distinct``). A privacy unit adds at
    most min(L∞, ``max_values_per_unit``) distinct values to a key, so that is the sensitivity;
    with ``max_values_per_unit`` below L∞ each unit keeps that many of its distinct values per key,
    chosen uniformly at random (docs/privacy/count-distinct.md). ``noise`` as for
    :func:`count_distinct_units`."""
    return Metric("count_distinct", column, None, noise, max_values_per_unit)
