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
from dpselect.aggregation.intervals import mean_interval, split_level
from dpselect.aggregation.metrics import Metric
from dpselect.aggregation.noise import DiscreteLaplaceNoise
from dpselect.aggregation.wide import SUM_LIMIT, Wide

__all__ = ["PartitionGrids", "noisy_metric"]


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


def noisy_metric(label: str, metric: Metric, epsilon: Fraction, kappa: int, linf: int, users: npt.NDArray[np.int64],
                 rows: npt.NDArray[np.int64], sums: Wide | None, grids: PartitionGrids | None,
                 level: float | None, rng: Any) -> tuple[npt.NDArray[Any], Any, Any, Component]:
    """One metric's noisy values (and interval bounds at ``level``) for the released partitions,
    and its privacy component, named ``label``. Sensitivities are per partition (a user touches
    κ partitions): 1 for a user count, L∞ for a row count, L∞·max|units| for a sum; the noise is
    exact discrete Laplace of scale κ·Δ/ε. Sums are exact (128-bit) and clamped to ±2^62 units
    before noise (1-Lipschitz, so the sensitivity holds)."""
    if metric.kind in ("count_distinct_units", "count"):
        noise = DiscreteLaplaceNoise.for_epsilon(epsilon, sensitivity=1 if metric.kind == "count_distinct_units"
                                                 else linf, max_partitions_contributed=kappa)
        noisy = noise.add(users if metric.kind == "count_distinct_units" else rows, rng=rng)
        low = high = None
        if level is not None:
            low, high = noise.interval(noisy, level)
        return noisy, low, high, Component(label, noise.epsilon, Fraction(0), str(noise.guarantee))
    assert grids is not None and sums is not None
    if metric.kind == "sum":
        noise = DiscreteLaplaceNoise.for_epsilon(epsilon, sensitivity=linf * grids.max_abs_units(),
                                                 max_partitions_contributed=kappa)
        noisy = noise.add(np.where(grids.found, sums.clamped(SUM_LIMIT), 0), rng=rng)
        value = grids.release(noisy)
        low = high = None
        if level is not None:
            lo, hi = _sum_interval(noisy, noise.confidence_interval(level), grids.exponent)
            low, high = np.where(grids.found, lo, np.nan), np.where(grids.found, hi, np.nan)
        return value, low, high, Component(label, noise.epsilon, Fraction(0),
                                           f"{noise.guarantee} {grids.describe().capitalize()}.")
    # mean: midpoint + noisy sum of offsets / noisy count, half the share each.
    half = epsilon / 2
    mid = (grids.lower_units + grids.upper_units) // 2
    reach = np.maximum(np.maximum(grids.upper_units - mid, mid - grids.lower_units), 1)
    widest = int(reach[grids.found].max()) if grids.found.any() else 1
    # Σ(u − mid) = Σu − mid·rows, exactly in 128 bits, then clamped like a sum.
    offsets = np.where(grids.found, (sums - Wide.product(mid, rows)).clamped(SUM_LIMIT), 0)
    sum_noise = DiscreteLaplaceNoise.for_epsilon(half, sensitivity=linf * widest, max_partitions_contributed=kappa)
    count_noise = DiscreteLaplaceNoise.for_epsilon(half, sensitivity=linf, max_partitions_contributed=kappa)
    noisy_offsets = sum_noise.add(offsets, rng=rng)
    noisy_rows = count_noise.add(rows, rng=rng)
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
    eps = sum_noise.epsilon + count_noise.epsilon
    text = (f"a noisy sum of offsets from the midpoint ({sum_noise.guarantee}) over a noisy row count "
            f"({count_noise.guarantee}); {grids.describe()}.")
    return mean, low, high, Component(label, eps, Fraction(0), text)
