"""One metric of a grouped release: its exact integer noise, its released values and their
intervals, for every released partition (docs/privacy/aggregate.md, step 7).

Value columns are in grid units, and each partition may have its own grid (bounds found per
partition): :class:`PartitionGrids` holds one grid per released partition, so the same code
serves bounds given once, bounds found over the whole dataset and bounds found per partition."""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dpselect.aggregation.grid import Grid
from dpselect.aggregation.guarantee import Component
from dpselect.aggregation.intervals import interval, mean_interval, split_level, tsgd_half_width
from dpselect.aggregation.metrics import Metric
from dpselect.aggregation.noise import IntegerNoise
from dpselect.aggregation.noise_choice import MeanSource, MetricNoise
from dpselect.aggregation.spread import noise_component
from dpselect.aggregation.wide import SUM_LIMIT, Wide
from dpselect.core.tables import TSGDTable

__all__ = ["PartitionGrids", "Released", "noisy_metric", "release_metrics", "selection_counts_metric"]


@dataclass(frozen=True)
class PartitionGrids:
    """Per released partition: clamping bounds, the grid exponent, the bounds in grid units, and
    whether bounds exist (``found`` False: no bin of the partition's noisy histogram passed; its
    sums and means are released as NaN)."""

    lower: npt.NDArray[np.float64]
    upper: npt.NDArray[np.float64]
    exponent: npt.NDArray[np.int64]
    lower_units: npt.NDArray[np.int64]
    upper_units: npt.NDArray[np.int64]
    found: npt.NDArray[np.bool_]

    @classmethod
    def of(cls, grid: Grid, n: int) -> PartitionGrids:
        """The same grid for all n partitions."""
        return cls(np.full(n, float(grid.lower)), np.full(n, float(grid.upper)), np.full(n, grid.exponent, np.int64),
                   np.full(n, grid.lower_units, np.int64), np.full(n, grid.upper_units, np.int64),
                   np.ones(n, dtype=bool))

    @classmethod
    def none(cls, n: int) -> PartitionGrids:
        """n partitions without bounds (their sums and means are released as NaN)."""
        return cls(np.full(n, math.nan), np.full(n, math.nan), np.zeros(n, np.int64), np.zeros(n, np.int64),
                   np.zeros(n, np.int64), np.zeros(n, dtype=bool))

    @classmethod
    def from_bounds(cls, lower: npt.NDArray[Any], upper: npt.NDArray[Any], found: npt.NDArray[np.bool_],
                    precision_bits: int, integer: bool) -> PartitionGrids:
        """Each found partition's grid as :meth:`Grid.for_found_bounds` makes it."""
        grids = [Grid.for_found_bounds(float(lo), float(hi), precision_bits=precision_bits, integer=integer) if ok else None
                 for lo, hi, ok in zip(lower, upper, found)]

        def column(attr: str, missing: float | int, dtype: Any) -> Any:
            return np.array([getattr(g, attr) if g is not None else missing for g in grids], dtype=dtype)

        return cls(column("lower", math.nan, np.float64), column("upper", math.nan, np.float64),
                   column("exponent", 0, np.int64), column("lower_units", 0, np.int64),
                   column("upper_units", 0, np.int64), np.asarray(found, dtype=bool).copy())

    def units(self, values: npt.NDArray[Any], where: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
        """Values of rows in partitions ``where`` (found ones) clamped and snapped to their grid."""
        x = np.clip(values.astype(np.float64), self.lower[where], self.upper[where])
        units = np.rint(np.ldexp(x, -self.exponent[where]))
        return np.clip(units, self.lower_units[where], self.upper_units[where]).astype(np.int64)

    def max_abs_units(self) -> int:
        """The largest |value| in units over every found partition (≥ 1)."""
        if not self.found.any():
            return 1
        return int(max(np.abs(self.lower_units[self.found]).max(), np.abs(self.upper_units[self.found]).max(), 1))

    def release(self, noisy_units: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """(noisy units)·2^exponent, NaN where no bounds were found."""
        return np.where(self.found, np.ldexp(noisy_units.astype(np.float64), self.exponent), np.nan)

    def describe(self) -> str:
        exps = np.unique(self.exponent[self.found])
        if exps.size == 1:
            return f"values snapped to multiples of 2^{int(exps[0])}"
        return "values snapped to a power-of-two grid per partition"


def _sum_interval(noisy: npt.NDArray[np.int64], half_width: int, exponent: npt.NDArray[np.int64]
                  ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """[noisy − h, noisy + h]·2^e as floats: exact while below 2^53 in magnitude (integer sums
    get integer ends), else widened outward by one ulp so that float rounding never narrows it."""
    value = noisy.astype(np.float64)
    low = np.ldexp(value - float(half_width), exponent)
    high = np.ldexp(value + float(half_width), exponent)
    inexact_low = np.abs(value - float(half_width)) >= 2.0**53
    inexact_high = np.abs(value + float(half_width)) >= 2.0**53
    return (np.where(inexact_low, np.nextafter(low, -np.inf), low),
            np.where(inexact_high, np.nextafter(high, np.inf), high))


@dataclass(frozen=True)
class Released:
    """What a released count or sum leaves for a mean to reuse: its noisy integers (grid units
    for a sum) and the noise that was added (for the mean's interval)."""

    noisy: npt.NDArray[np.int64]
    noise: IntegerNoise
    # A mean's: its divisor (own or a released count); ``noisy`` is then its sum of offsets,
    # which a variance of the same column reuses (dpselect.aggregation.spread).
    rows: Released | None = None


def noisy_metric(label: str, metric: Metric, plan: MetricNoise | None, users: npt.NDArray[np.int64],
                 rows: npt.NDArray[np.int64], sums: Wide | None, grids: PartitionGrids | None,
                 level: float | None, rng: Any, *, count: Released | None = None, total: Released | None = None
                 ) -> tuple[npt.NDArray[Any], Any, Any, Component, Released | None]:
    """One metric's noisy values (and interval bounds at ``level``) for the released partitions,
    its privacy component, named ``label``, and what a mean may reuse of it. ``plan``: the
    metric's noise from :meth:`dpselect.aggregation.plan.AggregatePlan.metric_noise` (None for a
    mean computed from a released sum and count). Sensitivities are per partition (a user
    touches κ partitions): 1 for a user count, L∞ for a row count, L∞·max|units| for a sum; the
    noise is exact discrete Laplace of scale κ·Δ/ε or exact discrete Gaussian of σ² = κ·Δ²/(2ρ).
    Sums are exact (128-bit) and clamped to ±2^62 units before noise (1-Lipschitz, so the
    sensitivity holds). A mean takes ``count`` (a released row count) as its divisor, and with
    ``total`` (a released sum of its column) too, it is their quotient: post-processing."""
    if plan is None:
        assert metric.kind == "mean" and count is not None and total is not None and grids is not None
        return _derived_mean(label, count, total, grids, level)
    linf = plan.linf
    if metric.kind in ("count_distinct_units", "count"):
        noise = plan.make(1 if metric.kind == "count_distinct_units" else linf)
        noisy = noise.add(users if metric.kind == "count_distinct_units" else rows, rng=rng)
        low = high = None
        if level is not None:
            low, high = noise.interval(noisy, level)
        return noisy, low, high, noise_component(label, plan, [noise], str(noise.guarantee)), Released(noisy, noise)
    assert grids is not None and sums is not None
    if metric.kind == "sum":
        noise = plan.make(linf * grids.max_abs_units())
        noisy = noise.add(np.where(grids.found, sums.clamped(SUM_LIMIT), 0), rng=rng)
        value = grids.release(noisy)
        low = high = None
        if level is not None:
            lo, hi = _sum_interval(noisy, noise.confidence_interval(level), grids.exponent)
            low, high = np.where(grids.found, lo, np.nan), np.where(grids.found, hi, np.nan)
        return value, low, high, noise_component(label, plan, [noise], f"{noise.guarantee} "
                                            f"{grids.describe().capitalize()}."), Released(noisy, noise)
    # mean: midpoint + noisy sum of offsets / noisy count, half the share each (all of it on the
    # offsets when a released count is the divisor).
    mid = (grids.lower_units + grids.upper_units) // 2
    reach = np.maximum(np.maximum(grids.upper_units - mid, mid - grids.lower_units), 1)
    widest = int(reach[grids.found].max()) if grids.found.any() else 1
    # Σ(u − mid) = Σu − mid·rows, exactly in 128 bits, then clamped like a sum.
    offsets = np.where(grids.found, (sums - Wide.product(mid, rows)).clamped(SUM_LIMIT), 0)
    part = Fraction(1) if count is not None else Fraction(1, 2)
    sum_noise = plan.make(linf * widest, part)
    noisy_offsets = sum_noise.add(offsets, rng=rng)
    count_noise: IntegerNoise
    if count is None:
        count_noise = plan.make(linf, part)
        noisy_rows = count_noise.add(rows, rng=rng)
        parts = [sum_noise, count_noise]
        text = (f"a noisy sum of offsets from the midpoint ({sum_noise.guarantee}) over a noisy row count "
                f"({count_noise.guarantee}); {grids.describe()}.")
    else:
        count_noise, noisy_rows, parts = count.noise, count.noisy, [sum_noise]
        text = (f"a noisy sum of offsets from the midpoint ({sum_noise.guarantee}) over the released row count "
                f"(post-processing, no budget); {grids.describe()}.")
    centre = np.ldexp(mid.astype(np.float64), grids.exponent)
    divisor = np.maximum(noisy_rows, 1).astype(np.float64)
    # (offset / count)·2^e, not (offset·2^e) / count: the quotient is at most 2^63 units, so the
    # scaled value stays finite whatever the grid (MAX_EXPONENT), and no bound pins it.
    spread = np.ldexp(noisy_offsets.astype(np.float64) / divisor, grids.exponent)
    mean = np.where(grids.found, np.clip(centre + spread, grids.lower, grids.upper), np.nan)
    low = high = None
    if level is not None:
        each = split_level(level, 2)
        lo, hi = mean_interval(noisy_offsets.astype(np.float64), noisy_rows,
                               float(sum_noise.confidence_interval(each)), float(count_noise.confidence_interval(each)))
        low = np.where(grids.found, np.clip(np.ldexp(lo, grids.exponent) + centre, grids.lower, grids.upper), np.nan)
        high = np.where(grids.found, np.clip(np.ldexp(hi, grids.exponent) + centre, grids.lower, grids.upper), np.nan)
    return mean, low, high, noise_component(label, plan, parts, text), Released(noisy_offsets, sum_noise,
                                                                          Released(noisy_rows, count_noise))


def _derived_mean(label: str, count: Released, total: Released, grids: PartitionGrids, level: float | None
                  ) -> tuple[npt.NDArray[Any], Any, Any, Component, None]:
    """The released sum over the released row count, clamped to the bounds (the bounds'
    midpoint where the noisy count is below 1): a function of released values only, so it spends no budget (post-processing, Dwork and Roth,
    Proposition 2.1). Its interval: both released values' intervals at level 1 − α/2 (union
    bound, :func:`mean_interval`)."""
    divisor = np.maximum(count.noisy, 1).astype(np.float64)
    quotient = np.clip(np.ldexp(total.noisy.astype(np.float64) / divisor, grids.exponent), grids.lower, grids.upper)
    # A noisy count below 1 says nothing of the mean: the bounds' midpoint, as a mean of its own gives.
    midpoint = np.ldexp(((grids.lower_units + grids.upper_units) // 2).astype(np.float64), grids.exponent)
    mean = np.where(grids.found, np.where(count.noisy >= 1, quotient, midpoint), np.nan)
    low = high = None
    if level is not None:
        each = split_level(level, 2)
        lo, hi = mean_interval(total.noisy.astype(np.float64), count.noisy,
                               float(total.noise.confidence_interval(each)),
                               float(count.noise.confidence_interval(each)))
        low = np.where(grids.found, np.clip(np.ldexp(lo, grids.exponent), grids.lower, grids.upper), np.nan)
        high = np.where(grids.found, np.clip(np.ldexp(hi, grids.exponent), grids.lower, grids.upper), np.nan)
    text = ("the released sum over the released row count, clamped to the bounds: post-processing of two "
            f"released values, no budget of its own; {grids.describe()}.")
    return mean, low, high, Component(label, Fraction(0), Fraction(0), text), None


def selection_counts_metric(label: str, noisy: npt.NDArray[np.int64], table: TSGDTable, level: float | None
                            ) -> tuple[npt.NDArray[np.int64], Any, Any, Component]:
    """The user-count metric served by the TSGD release's own noisy user counts: the released
    keys' n + X, with the half-width of the certified k-TSGD table at ``level``. It spends
    nothing beyond the selection's (ε, δ), which covers the keys and their noisy counts
    together (docs/privacy/tsgd-release.md)."""
    low = high = None
    if level is not None:
        low, high = interval(noisy, tsgd_half_width(table, level))
    text = ("the noisy user counts the TSGD release published with the keys (k-truncated symmetric geometric "
            "noise, counted in the selection's step): no budget of its own.")
    return noisy, low, high, Component(label, Fraction(0), Fraction(0), text)


def release_metrics(labels: dict[str, str], metrics: dict[str, Metric], noises: dict[str, MetricNoise],
                    means: dict[str, MeanSource], users: npt.NDArray[np.int64], rows: npt.NDArray[np.int64],
                    sums: dict[str, Wide], grids: dict[str, PartitionGrids], level: float | None, rng: Any,
                    given: dict[str, tuple[npt.NDArray[Any], Any, Any, Component]] | None = None,
                    extra: Any = None) -> dict[str, tuple[npt.NDArray[Any], Any, Any, Component]]:
    """Every metric of a release, in the order asked, each mean after the count and sum it
    reuses (so they are drawn first); ``given``: metrics already released by the selection
    (:func:`selection_counts_metric`). The same for one machine and Spark's executors. ``extra``:
    what variances and distinct counts read (:class:`dpselect.aggregation.more_stats.MoreStatistics`),
    released after the metrics they reuse."""
    from dpselect.aggregation.more_stats import LATER_KINDS, release_more

    order = [n for n in metrics if metrics[n].kind != "mean" and metrics[n].kind not in LATER_KINDS] + \
        [n for n in metrics if metrics[n].kind == "mean"]
    released: dict[str, Released] = {}
    out = dict(given or {})
    for name in order:
        if name in out:
            continue
        m = metrics[name]
        source = means.get(name)
        count = released[source.count] if source is not None and source.count is not None else None
        total = released[source.total] if source is not None and source.total is not None else None
        value, low, high, component, kept = noisy_metric(
            labels[name], m, noises.get(name), users, rows, sums[m.column] if m.column else None,
            grids[m.column] if m.column else None, level, rng, count=count, total=total)
        if kept is not None:
            released[name] = kept
        out[name] = (value, low, high, component)
    out.update(release_more(labels, metrics, noises, extra, rows, sums, grids, level, rng, released))
    return {name: out[name] for name in metrics}
