"""Per-key population variance and standard deviation of a value column (docs/privacy/variance.md).

The construction is Google's BoundedVariance (differential-privacy library) on dpselect's exact
grid (:mod:`dpselect.aggregation.grid`): every kept value is clamped to its bounds and snapped
to grid units u; with m the bounds' midpoint in units and d = u − m, three per-key integers get
independent exact integer noise:

* S2 = Σ q, q = round(d² / 2^t): the squared offsets, kept to :data:`SQUARE_BITS` bits
  (t is the public shift that brings the widest possible d² below 2^SQUARE_BITS); one row
  changes S2 by at most Q = round(R²/2^t), R the bounds' half-width in units — Google's
  per-row bound ((upper − lower)/2)², on the grid;
* S1 = Σ d, one row changes it by at most R (the mean's sum of offsets);
* N, the row count, one row changes it by 1.

A privacy unit has at most L∞ rows in each of at most κ keys after bounding, so the
sensitivities per key are L∞·Q, L∞·R and L∞ (Wilson et al., PoPETs 2020, Section 3). The
variance is post-processing of the three noisy values: E[d²] − E[d]², scaled by the grid step
squared and clamped to [0, ((upper − lower)/2)²]; the standard deviation is its square root.
A released ``count()`` is reused as N, a released mean of the column (its own noisy sum of
offsets and its divisor) as S1 and N, a released sum and count as S1 = sum − m·N: those cost
no budget twice (post-processing, Dwork and Roth, Proposition 2.1); a variance and a stddev
of one column share one release.
"""
from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dpselect.aggregation.guarantee import Component
from dpselect.aggregation.intervals import split_level
from dpselect.aggregation.metrics import SPREAD_KINDS, Metric
from dpselect.aggregation.noise import DiscreteGaussianNoise, DiscreteLaplaceNoise, IntegerNoise
from dpselect.aggregation.noise_choice import MetricNoise, mean_sources
from dpselect.aggregation.wide import SUM_LIMIT, Wide

__all__ = ["MAX_PRECISION_BITS", "SQUARE_BITS", "SpreadParts", "SpreadSource", "check_precision", "max_reach_units",
           "noise_component",
           "noisy_spread", "spread_sources", "spread_parts", "square_shift", "square_sums", "squared_offsets"]

# Squared offsets are rounded to a multiple of 2^t so that each is below 2^SQUARE_BITS: S2 then
# has the sensitivity of a sum of values of 2^31 units, and its sums fit like a sum's.
SQUARE_BITS = 31
# |d| ≤ 2^precision_bits units, so d² is exact in int64 up to precision_bits = 31.
MAX_PRECISION_BITS = 31
_FLOAT_MAX = sys.float_info.max


@dataclass(frozen=True)
class SpreadSource:
    """Where a variance or stddev takes what other metrics release: ``count`` (a ``count()``: N),
    ``offsets`` (a mean of the same column with its own noisy sum of offsets: S1 and its divisor
    as N), ``total`` (a sum of the same column, with ``count``: S1 = sum − midpoint·N), ``twin``
    (a variance or stddev of the same column released before: this one is its post-processing)."""

    count: str | None
    offsets: str | None
    total: str | None
    twin: str | None

    @property
    def derived(self) -> bool:
        return self.twin is not None

    @property
    def own_parts(self) -> int:
        """How many noisy sums the metric draws itself (its share is split equally among them)."""
        if self.derived:
            return 0
        if self.offsets is not None or (self.total is not None and self.count is not None):
            return 1
        return 2 if self.count is not None else 3


def spread_sources(metrics: Mapping[str, Metric]) -> dict[str, SpreadSource]:
    """For each variance / stddev, from the metric kinds alone (so the budget split is public):
    the first of its column is released, the others of its column are its post-processing; it
    reuses the first ``count()``, the first mean of its column that draws its own sum of offsets
    (not one computed from a sum and a count), else the first sum of its column when a count is
    released too. One bounding serves every metric, so these are the same rows' statistics."""
    count = next((n for n, m in metrics.items() if m.kind == "count"), None)
    means = mean_sources(metrics)
    out: dict[str, SpreadSource] = {}
    first: dict[str, str] = {}
    for name, m in metrics.items():
        if m.kind not in SPREAD_KINDS:
            continue
        assert m.column is not None
        if m.column in first:
            out[name] = SpreadSource(None, None, None, first[m.column])
            continue
        first[m.column] = name
        mean = next((n for n, s in metrics.items() if s.kind == "mean" and s.column == m.column
                     and not means[n].derived), None)
        total = None
        if mean is None and count is not None:
            total = next((n for n, s in metrics.items() if s.kind == "sum" and s.column == m.column), None)
        out[name] = SpreadSource(count, mean, total, None)
    return out


def square_shift(widest: int) -> int:
    """t: the smallest shift with widest² / 2^t below 2^SQUARE_BITS (0 when it already is)."""
    return max(0, (widest * widest).bit_length() - SQUARE_BITS)


def _largest_square(widest: int) -> int:
    """Q = round(widest² / 2^t): the most one row adds to S2."""
    t = square_shift(widest)
    return (widest * widest + ((1 << t) >> 1)) >> t


@dataclass(frozen=True)
class SpreadParts:
    """The noisy sums one variance draws, each as (part of its share, sensitivity in units)."""

    parts: tuple[tuple[Fraction, int], ...]


def spread_parts(source: SpreadSource, linf: int, widest: int) -> SpreadParts:
    """(share part, sensitivity) of S2, then S1, then N, for those the metric draws itself; widest:
    the largest bounds' half-width R in units (2^precision_bits before bounds are known)."""
    own = source.own_parts
    if own == 0:
        return SpreadParts(())
    part = Fraction(1, own)
    parts = [(part, linf * _largest_square(widest))]
    if own >= 2 and source.offsets is None and source.total is None:
        parts.append((part, linf * max(widest, 1)))
    if own == 3:
        parts.append((part, linf))
    return SpreadParts(tuple(parts))


def check_precision(name: str, precision_bits: int) -> None:
    """Refuse, from the parameters, a grid whose squared offsets would not fit int64."""
    if precision_bits > MAX_PRECISION_BITS:
        raise ValueError(f"metric {name!r}: a variance squares grid units, and at precision_bits={precision_bits} "
                         f"a square would not fit in 64-bit integers; use precision_bits <= {MAX_PRECISION_BITS} "
                         "(a coarser grid: each value then moves by at most 2^-32 of the largest bound)")


def squared_offsets(units: npt.NDArray[np.int64], mid: npt.ArrayLike, shift: int) -> npt.NDArray[np.int64]:
    """q = round((u − mid)² / 2^shift), ties up, exactly in int64 (|u − mid| ≤ 2^31)."""
    q = np.subtract(units, np.asarray(mid, dtype=np.int64), dtype=np.int64)
    np.multiply(q, q, out=q)  # in place: one array of the rows' size, no temporaries
    if shift:
        np.add(q, np.int64(1 << (shift - 1)), out=q)
        np.right_shift(q, np.int64(shift), out=q)
    return q


def square_sums(q: npt.NDArray[np.int64], codes: npt.NDArray[np.intp], n: int) -> Wide:
    """Exact Σq per code in [0, n): two bincounts of 16-bit halves (q < 2^32), each a float64
    sum of integers below 2^53 for fewer than 2^37 rows, hence exact, joined in 128 bits."""
    low = np.bincount(codes, weights=(q & 0xFFFF).astype(np.float64), minlength=n).astype(np.int64)
    high = np.bincount(codes, weights=(q >> 16).astype(np.float64), minlength=n).astype(np.int64)
    return Wide.from_int64(high).shifted_left(16) + Wide.from_int64(low)


def noise_component(label: str, plan: MetricNoise, parts: Sequence[IntegerNoise], text: str) -> Component:
    """The metric's step of the statement: (ε, 0) with Laplace noise (the parts' ε add up), ρ-zCDP
    with Gaussian noise (the parts' ρ add up; its ε share counted once in the Gaussian group)."""
    if plan.kind == "gaussian":
        rho = Fraction(0)
        for part in parts:
            assert isinstance(part, DiscreteGaussianNoise)
            rho += part.rho
        return Component(label, plan.epsilon, Fraction(0), text, rho=rho)
    eps = Fraction(0)
    for part in parts:
        assert isinstance(part, DiscreteLaplaceNoise)
        eps += part.epsilon
    return Component(label, eps, Fraction(0), text)


@dataclass(frozen=True)
class Drawn:
    """A noisy per-key value and its noise (for the interval's half-width)."""

    noisy: npt.NDArray[np.int64]
    noise: IntegerNoise


def noisy_spread(label: str, metric: Metric, plan: MetricNoise | None, source: SpreadSource, rows: npt.NDArray[np.int64],
                 sums: Wide, squares: Wide, shift: int, grids: Any, level: float | None, rng: Any, *,
                 count: Any = None, offsets: Any = None, total: Any = None, twin: Any = None
                 ) -> tuple[npt.NDArray[Any], Any, Any, Component, Any]:
    """One variance or stddev for the released keys: (values, interval low, interval high,
    component, what a twin reuses). ``squares``: each key's Σq at ``shift``; ``count`` /
    ``total``: released :class:`~dpselect.aggregation.metric_noise.Released` values, ``offsets``:
    a released mean's (its noisy sum of offsets, with ``rows`` its divisor), ``twin``: the
    variance state of a metric of the same column released before."""
    if twin is not None:
        var, low, high = twin
        text = (f"post-processing of the released {'variance' if metric.kind == 'stddev' else 'standard deviation'} "
                "of the same column: no budget of its own.")
        return (*_shown(metric.kind, var, low, high), Component(label, Fraction(0), Fraction(0), text), twin)
    assert plan is not None
    mid = (grids.lower_units + grids.upper_units) // 2
    reach = np.maximum(np.maximum(grids.upper_units - mid, mid - grids.lower_units), 1)
    widest = int(reach[grids.found].max()) if grids.found.any() else 1
    drawn: list[IntegerNoise] = []
    what = ["a noisy sum of squared offsets from the midpoint"]
    spec = spread_parts(source, plan.linf, widest).parts
    sq_noise = plan.make(spec[0][1], spec[0][0])
    s2 = sq_noise.add(np.where(grids.found, squares.clamped(SUM_LIMIT), 0), rng=rng)
    drawn.append(sq_noise)
    uses = []
    if offsets is not None:  # a mean's own sum of offsets (same midpoint) and its divisor
        s1, h1_of = offsets.noisy.astype(np.float64), offsets.noise.confidence_interval
        n_noisy, n_noise = offsets.rows.noisy, offsets.rows.noise
        uses.append("the released mean's noisy sum of offsets and row count")
    else:
        if count is not None:
            n_noisy, n_noise = count.noisy, count.noise
            uses.append("the released row count")
        if total is not None:
            # S1 = Σu − m·N from the released sum and count (floats: post-processing).
            s1 = total.noisy.astype(np.float64) - mid.astype(np.float64) * n_noisy.astype(np.float64)

            def h1_of(each: Fraction) -> float:
                return float(total.noise.confidence_interval(each)) + float(np.max(np.abs(mid), initial=0)) * \
                    float(n_noise.confidence_interval(each))
            uses.append("the released sum")
        else:
            off_noise = plan.make(spec[1][1], spec[1][0])
            offsets_exact = np.where(grids.found, (sums - Wide.product(mid, rows)).clamped(SUM_LIMIT), 0)
            s1_int = off_noise.add(offsets_exact, rng=rng)
            s1, h1_of = s1_int.astype(np.float64), off_noise.confidence_interval
            drawn.append(off_noise)
            what.append("a noisy sum of offsets")
        if count is None:
            n_noise = plan.make(spec[-1][1], spec[-1][0])
            n_noisy = n_noise.add(rows, rng=rng)
            drawn.append(n_noise)
            what.append("a noisy row count")
    n = np.maximum(n_noisy, 1).astype(np.float64)
    scale = float(1 << shift)
    m2 = s2.astype(np.float64) * scale / n
    m1 = s1 / n
    cap = _cap(grids)
    var = _to_values(m2 - m1 * m1, grids, cap)
    low = high = None
    if level is not None:
        each = split_level(level, 3)
        h2 = float(sq_noise.confidence_interval(each)) * scale
        h1 = float(h1_of(each))
        hn = float(n_noise.confidence_interval(each))
        n_lo = np.maximum(n_noisy - hn, 1.0)
        n_hi = np.maximum(n_noisy + hn, 1.0)
        slack = scale / 2  # each q·2^t is within 2^(t−1) of d²
        a, b = s1 - h1, s1 + h1
        most_m1 = np.maximum(a * a, b * b) / (n_lo * n_lo)
        least_m1 = np.where((a <= 0) & (b >= 0), 0.0, np.minimum(a * a, b * b)) / (n_hi * n_hi)
        m2_lo = np.maximum(s2.astype(np.float64) * scale - h2, 0.0) / n_hi - slack
        m2_hi = (s2.astype(np.float64) * scale + h2) / n_lo + slack
        low = _to_values(np.nextafter(m2_lo - most_m1, -np.inf), grids, cap)
        high = _to_values(np.nextafter(m2_hi - least_m1, np.inf), grids, cap)
    sources = f" It reuses {', '.join(uses)} (post-processing, no budget twice)." if uses else ""
    text = (f"E[x²] − E[x]² from {' and '.join(what)} ({'; '.join(str(d.guarantee) for d in drawn)}), squared "
            f"offsets rounded to multiples of 2^{shift} units²; {grids.describe()}.{sources}")
    state = (var, low, high)
    return (*_shown(metric.kind, var, low, high), noise_component(label, plan, drawn, text), state)


def _cap(grids: Any) -> npt.NDArray[np.float64]:
    """((upper − lower)/2)² per key, the largest variance of values in the bounds (saturated at
    the largest float: bounds beyond 2^511 in magnitude)."""
    with np.errstate(over="ignore", invalid="ignore"):
        half = (grids.upper - grids.lower) / 2
        return np.minimum(half * half, _FLOAT_MAX)


def _to_values(var_units: npt.NDArray[np.float64], grids: Any, cap: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """A variance in units² as values (·2^2e), clamped to [0, cap], NaN where no bounds were found."""
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = np.ldexp(np.maximum(var_units, 0.0), 2 * grids.exponent)
    return np.where(grids.found, np.clip(np.nan_to_num(scaled, posinf=_FLOAT_MAX), 0.0, cap), np.nan)


def _shown(kind: str, var: Any, low: Any, high: Any) -> tuple[Any, Any, Any]:
    if kind == "variance":
        return var, low, high
    root = (lambda x: None if x is None else np.sqrt(x))
    return root(var), root(low), root(high)


def max_reach_units(precision_bits: int, bounds: tuple[float, float] | None) -> int:
    """The widest half-width R in units a column's grid may have: exact for given bounds, else
    2^precision_bits (every |unit| is at most that)."""
    if bounds is None:
        return 1 << precision_bits
    from dpselect.aggregation.grid import Grid

    g = Grid.for_bounds(*bounds, precision_bits=precision_bits)
    mid = (g.lower_units + g.upper_units) // 2
    return max(g.upper_units - mid, mid - g.lower_units, 1)


