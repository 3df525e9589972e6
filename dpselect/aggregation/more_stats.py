"""The per-key inputs of the variance, standard deviation and distinct-value metrics, computed
from the kept rows after contribution bounding, and their release after the metrics they reuse
(docs/privacy/variance.md, docs/privacy/count-distinct.md).

One machine computes :class:`MoreStatistics` with :func:`more_statistics`;
:func:`release_more` is called by :func:`dpselect.aggregation.metric_noise.release_metrics`."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dpselect.aggregation.distinct import DistinctCounts, noisy_distinct, value_codes
from dpselect.aggregation.grid import Grid
from dpselect.aggregation.metrics import DISTINCT_KIND, SPREAD_KINDS, Metric
from dpselect.aggregation.spread import SpreadSource, noisy_spread, square_shift, square_sums, squared_offsets
from dpselect.aggregation.wide import Wide

__all__ = ["LATER_KINDS", "MoreStatistics", "distinct_rows", "early_square_columns", "grid_square_spec",
           "grid_squared_offsets",
           "more_statistics", "needs_kept_partitions", "positions",
           "release_more", "widest_reach"]

# Released after counts, sums and means (they may reuse those).
LATER_KINDS = (*SPREAD_KINDS, DISTINCT_KIND)


@dataclass(frozen=True)
class MoreStatistics:
    """Per released key: each variance column's exact Σq (``squares``) at its ``shifts``, each
    count_distinct metric's exact distinct-value count (``distinct``), and where each variance
    takes released values (``spreads``); ``capped``: per count_distinct metric, the (unit, key,
    value) triples its max_values_per_unit left out (for the data holder's report only)."""

    spreads: dict[str, SpreadSource] = field(default_factory=dict)
    squares: dict[str, Wide] = field(default_factory=dict)
    shifts: dict[str, int] = field(default_factory=dict)
    distinct: dict[str, npt.NDArray[np.int64]] = field(default_factory=dict)
    capped: dict[str, int] = field(default_factory=dict)


def _released_spread_columns(metrics: Mapping[str, Metric], spreads: Mapping[str, SpreadSource]) -> list[str]:
    return sorted({m.column for n, m in metrics.items() if m.kind in SPREAD_KINDS and not spreads[n].derived
                   and m.column is not None})


def early_square_columns(metrics: Mapping[str, Metric], spreads: Mapping[str, SpreadSource], known: list[str]
                         ) -> list[str]:
    """The variance columns whose grid is known before bounding (``known``: bounds given): their
    squared offsets go to the bounding kernel as one more column, summed per key exactly in C."""
    return [c for c in _released_spread_columns(metrics, spreads) if c in known]


def grid_square_spec(grid: Grid) -> tuple[int, int]:
    """(mid, shift) of a row's q on one grid: q = round((units − mid)² / 2^shift)."""
    mid = (grid.lower_units + grid.upper_units) // 2
    reach = max(grid.upper_units - mid, mid - grid.lower_units, 1)
    return mid, square_shift(reach)


def grid_squared_offsets(units: npt.NDArray[np.int64], grid: Grid) -> npt.NDArray[np.int64]:
    """Every row's q on one grid (the rows' units as the kernel gets them)."""
    return squared_offsets(units, *grid_square_spec(grid))


def needs_kept_partitions(metrics: Mapping[str, Metric], spreads: Mapping[str, SpreadSource], early: list[str]
                          ) -> bool:
    """Whether a metric here reads the kept rows' partition codes: a count_distinct, or a variance
    whose squares the kernel did not sum (bounds found privately)."""
    return any(m.kind == DISTINCT_KIND for m in metrics.values()) or \
        any(c not in early for c in _released_spread_columns(metrics, spreads))


def positions(out_index: npt.NDArray[np.intp], present: npt.NDArray[np.bool_], n_parts: int) -> npt.NDArray[np.intp]:
    """Data partition code -> released row (−1: not released)."""
    position = np.full(n_parts, -1, dtype=np.intp)
    position[out_index[present]] = np.flatnonzero(present)
    return position


def distinct_rows(metrics: Mapping[str, Metric], table: Any, users: npt.NDArray[Any], kept: npt.NDArray[np.uint8]
                  ) -> dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[Any] | None]]:
    """Per count_distinct metric: its column's value codes on the kept rows, and (with a cap) the
    kept rows' unit codes."""
    out: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[Any] | None]] = {}
    mask = kept.view(bool)
    codes: dict[str, npt.NDArray[np.int64]] = {}
    for name, m in metrics.items():
        if m.kind == DISTINCT_KIND:
            assert m.column is not None
            if m.column not in codes:
                codes[m.column] = value_codes(table, m.column)[mask]
            out[name] = (codes[m.column], users[mask] if m.max_values_per_unit is not None else None)
    return out


def widest_reach(grids: Any) -> int:
    """The largest bounds' half-width R in units over the keys with bounds (1 without any)."""
    mid = (grids.lower_units + grids.upper_units) // 2
    reach = np.maximum(np.maximum(grids.upper_units - mid, mid - grids.lower_units), 1)
    return int(reach[grids.found].max()) if grids.found.any() else 1


def more_statistics(metrics: Mapping[str, Metric], spreads: dict[str, SpreadSource],
                    kept_values: Mapping[str, npt.NDArray[Any]], kept_partitions: npt.NDArray[Any] | None,
                    single: Mapping[str, Grid], out_grids: Mapping[str, Any], position: npt.NDArray[np.intp],
                    n_out: int, distinct: Mapping[str, tuple[npt.NDArray[np.int64], npt.NDArray[Any] | None]],
                    n_parts: int, rng: Any, early: Mapping[str, Wide] | None = None) -> MoreStatistics:
    """From the kept rows (their values, partition codes) and ``position`` (data partition code ->
    released row, −1 if not released): Σq per released key for each column of a variance, on
    ``single`` (one grid for every key) or the per-key ``out_grids``; and per count_distinct
    metric, from ``distinct[name]`` = (kept rows' value codes, their units' codes), the distinct
    values of each data partition, then of each released key. ``early``: Σq per data partition
    already summed by the kernel (:func:`early_square_columns`). Vectorised: no loop over keys."""
    out = MoreStatistics(spreads=dict(spreads))
    early = dict(early or {})
    present = position >= 0
    for c, sums in early.items():
        picked = Wide.zeros(n_out)
        picked.lo[position[present]] = sums.lo[present]
        picked.hi[position[present]] = sums.hi[present]
        out.squares[c] = picked
        out.shifts[c] = square_shift(widest_reach(out_grids[c]))
    columns = [c for c in _released_spread_columns(metrics, spreads) if c not in early]
    if columns:
        assert kept_partitions is not None
        where = position[kept_partitions]
        inside = where >= 0
        rows_at = where[inside]
        for c in columns:
            g = out_grids[c]
            shift = square_shift(widest_reach(g))
            values = kept_values[c][inside]
            if c in single:  # one grid: scalar bounds, no per-row gathers
                grid = single[c]
                mid = (grid.lower_units + grid.upper_units) // 2
                q = squared_offsets(grid.to_units(values, name=c), mid, shift)
                at = rows_at
            else:
                usable = g.found[rows_at]
                at = rows_at[usable]
                mid_keys = (g.lower_units + g.upper_units) // 2
                q = squared_offsets(g.units(values[usable], at), mid_keys[at], shift)
            out.squares[c] = square_sums(q, at.astype(np.intp), n_out)
            out.shifts[c] = shift
    for name, m in metrics.items():
        if m.kind != DISTINCT_KIND:
            continue
        assert kept_partitions is not None
        codes, units = distinct[name]
        per_part, capped = DistinctCounts.of(kept_partitions, codes, n_parts, users=units,
                                             cap=m.max_values_per_unit, rng=rng)
        counts = np.zeros(n_out, np.int64)
        counts[position[present]] = per_part[present]
        out.distinct[name] = counts
        out.capped[name] = capped
    return out


def release_more(labels: Mapping[str, str], metrics: Mapping[str, Metric], noises: Mapping[str, Any],
                 extra: MoreStatistics | None, rows: npt.NDArray[np.int64], sums: Mapping[str, Wide],
                 grids: Mapping[str, Any], level: float | None, rng: Any, released: Mapping[str, Any]
                 ) -> dict[str, tuple[npt.NDArray[Any], Any, Any, Any]]:
    """The variances, standard deviations and distinct counts, each variance after the metrics
    it reuses (``released``: the noisy counts, sums and means' offsets), a twin after its first."""
    names = [n for n, m in metrics.items() if m.kind in LATER_KINDS]
    if not names:
        return {}
    assert extra is not None
    out: dict[str, tuple[npt.NDArray[Any], Any, Any, Any]] = {}
    states: dict[str, Any] = {}
    ordered = sorted(names, key=lambda n: extra.spreads[n].derived if n in extra.spreads else False)
    for name in ordered:
        m = metrics[name]
        if m.kind == DISTINCT_KIND:
            out[name] = noisy_distinct(labels[name], m, noises[name], extra.distinct[name], level, rng)
            continue
        src = extra.spreads[name]
        assert m.column is not None
        pick = (lambda key: released[key] if key is not None else None)
        value, low, high, component, state = noisy_spread(
            labels[name], m, noises.get(name), src, rows, sums[m.column], extra.squares.get(m.column, Wide.zeros(0)),
            extra.shifts.get(m.column, 0), grids[m.column], level, rng, count=pick(src.count),
            offsets=pick(src.offsets), total=pick(src.total), twin=states.get(src.twin or ""))
        states[name] = state
        out[name] = (value, low, high, component)
    return out

