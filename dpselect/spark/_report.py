"""The data holder's reports on Spark (``report=True``): exact, NOT differentially private;
never publish them (docs/aggregate.md, "Reading the report").

They are the single machine's :class:`~dpselect.aggregation.report.SelectionReport` and
:class:`~dpselect.aggregation.report.AggregateReport`, built on the driver from per-key
aggregates of the same draw as the release: with a report, the bounding windows rank rows and
pairs instead of dropping them, so the checkpointed per-key rows carry each key's statistics
before and after bounding, whether or not it was released. From them Spark computes a few
totals and the number of keys per (users before bounding, users after, released); the
single machine's per-key arrays are rebuilt from those multiplicities (8 to 17 bytes per key of
the data on the driver; no row of the data reaches it).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dpselect.spark._common import FIRSTS, KEEP, PAIRS, ROWS, ROWS_ALL, USER_PAIRS, USERS, columns, spark

__all__ = ["ABOVE", "BELOW", "CHANGE", "RAW", "aggregate_report", "clamping_columns", "clamping_sums",
           "hindsight_figures", "selection_report"]

RAW = "__dpselect_raw_"  # a value column with bounds, as float64, beside its grid units
BELOW = "__dpselect_below_"  # kept values below the lower bound
ABOVE = "__dpselect_above_"  # kept values above the upper bound
CHANGE = "__dpselect_change_"  # Σ |x − clamp(x)| over the kept values


def clamping_columns(n_values: int) -> list[str]:
    """The clamping counts' columns, value column by value column."""
    return [f"{prefix}{i}" for i in range(n_values) for prefix in (BELOW, ABOVE, CHANGE)]


def clamping_sums(raw: Any, grid: Any, kept: Any, i: int) -> list[Any]:
    """Spark aggregates of what clamping to ``grid`` does to the kept values of column ``raw``
    (float64), as :meth:`~dpselect.aggregation.report.ColumnClamping.of` measures it."""
    F = spark().functions
    below, above = kept & (raw < grid.lower), kept & (raw > grid.upper)
    change = F.when(below, F.lit(grid.lower) - raw).when(above, raw - F.lit(grid.upper)).otherwise(F.lit(0.0))
    return [F.count_if(below).alias(f"{BELOW}{i}"), F.count_if(above).alias(f"{ABOVE}{i}"),
            F.sum(change).alias(f"{CHANGE}{i}")]


def clamping_of_lists(values: np.ndarray, codes: np.ndarray, n: int, grid: Any) -> list[np.ndarray]:
    """Per list (``codes`` numbers each value's list, n lists): the counts of
    :func:`clamping_sums`, for a column whose bounds were found after its values were listed."""
    x = values.astype(np.float64)
    below, above = x < grid.lower, x > grid.upper
    change = np.where(below, grid.lower - x, 0.0) + np.where(above, x - grid.upper, 0.0)
    return [np.bincount(codes, weights=below, minlength=n).astype(np.int64),
            np.bincount(codes, weights=above, minlength=n).astype(np.int64),
            np.bincount(codes, weights=change, minlength=n)]


def _multiplicities(frame: Any, columns: list[str]) -> tuple[dict[str, np.ndarray], int]:
    """The keys of ``frame`` grouped by ``columns``: each column's value repeated once per key
    (the per-key arrays, up to order), and the number of keys."""
    groups = frame.groupBy(*columns).count().collect()
    times = np.array([g["count"] for g in groups], dtype=np.int64)
    return {c: np.repeat(np.array([g[c] for g in groups]), times) for c in columns}, int(times.sum())


def selection_report(decided: Any, dropped: int, strat: Any, kappa: int) -> Any:
    """:class:`~dpselect.aggregation.report.SelectionReport` from the decided per-key rows of
    ``select_partitions`` (every key, with ``KEEP``, ``PUBLIC`` and the statistics): the counts
    are those of the keys selected from the data, as on one machine: the data's keys that are
    not public, and none with ``strategy="public"`` (it selects nothing)."""
    from dpselect.aggregation.report import SelectionReport
    from dpselect.spark._public import PUBLIC

    F = spark().functions
    totals = decided.agg(*[F.sum(c).alias(c) for c in (ROWS, PAIRS, FIRSTS)]).collect()[0]
    selected = decided.filter(~decided[PUBLIC] & (decided[USERS] > 0) & F.lit(strat.name != "public"))
    arrays, _ = _multiplicities(selected, [USERS, KEEP])
    return SelectionReport.build(rows=int(totals[ROWS] or 0), null_unit_rows=dropped, pairs=int(totals[PAIRS] or 0),
                                 users=int(totals[FIRSTS] or 0), counts=arrays[USERS].astype(np.int64),
                                 released=arrays[KEEP].astype(bool), strategy=strat, kappa=kappa)


def aggregate_report(decided: Any, dropped: int, grids: Mapping[str, Any], value_columns: list[str], strat: Any,
                     epsilon: Any, kappa: int, linf: int, public: bool, capped: Mapping[str, str] | None = None,
                     hindsight: Any = None) -> Any:
    """:class:`~dpselect.aggregation.report.AggregateReport` from the decided per-key rows of
    ``aggregate`` (every key, with ``KEEP`` and the statistics). A key of the data is one with
    a pair before bounding; released, as on one machine, if ``KEEP`` and a user is left.
    ``capped``: per count_distinct metric with max_values_per_unit, its column of the kept
    (user, key, value) triples the cap left out, summed over every key as on one machine.
    ``hindsight``: with bounds chosen privately, :func:`hindsight_figures`."""
    from dpselect.aggregation.report import AggregateReport, ColumnClamping

    F = spark().functions
    clamps = [*clamping_columns(len(value_columns)), *dict.fromkeys((capped or {}).values())]
    sums = decided.agg(*[F.sum(c).alias(c) for c in (ROWS_ALL, ROWS, PAIRS, USERS, FIRSTS, *clamps)]).collect()[0]
    total = {c: sums[c] or 0 for c in (ROWS_ALL, ROWS, PAIRS, USERS, FIRSTS, *clamps)}
    in_data = decided.filter(decided[PAIRS] > 0).withColumn(KEEP, decided[KEEP] & (decided[USERS] > 0))
    arrays, _ = _multiplicities(in_data, [PAIRS, USERS, KEEP])
    users_kept = arrays[USERS].astype(np.int64)
    kept_rows = int(total[ROWS])
    clamping = {c: ColumnClamping((grids[c].lower, grids[c].upper), kept_rows, int(total[f"{BELOW}{i}"]),
                                  int(total[f"{ABOVE}{i}"]), float(total[f"{CHANGE}{i}"]))
                for i, c in enumerate(value_columns)}
    totals = {"rows": int(total[ROWS_ALL]), "rows_kept": kept_rows, "pairs": int(total[PAIRS]),
              "pairs_kept": int(total[USERS]), "users": int(total[FIRSTS])}
    return AggregateReport.build(
        totals=totals, null_unit_rows=dropped, users_before=arrays[PAIRS].astype(np.int64), users_kept=users_kept,
        candidates=np.flatnonzero(users_kept > 0), released_codes=np.flatnonzero(arrays[KEEP].astype(bool)),
        strategy=strat, clamping=clamping, epsilon=epsilon, kappa=kappa, linf=linf, public=public,
        distinct_capped={name: int(total[c]) for name, c in (capped or {}).items()}, hindsight=hindsight)


def hindsight_figures(pairs: Any, keys: list[str], kappa: int) -> Any:
    """The single machine's :class:`~dpselect.ingest.auto_bounds.Hindsight` (exact, NOT DP)
    from the (user, key) pairs of ``pairs`` (``dpselect.spark._auto_bounds.ranked_pairs``: each
    with its rows and its user's c_u), at the release's κ: Spark sums min(1, k/c_u) per key and
    over all pairs, and min(r, L∞)·min(1, κ/c_u) over all pairs. The report reads each key's
    expected bounded user count E_p only rounded, so only the multiplicities of the rounded E_p
    reach the driver: ``expected_users`` holds round(E_p) per key of the data (the single
    machine keeps E_p itself)."""
    from dpselect.ingest.auto_bounds import HINDSIGHT_GRID, Hindsight

    F = spark().functions

    def keep(k: int) -> Any:  # the chance that κ = k keeps a pair of its user: min(1, k/c_u)
        return F.least(F.lit(1.0), F.lit(float(k)) / F.col(USER_PAIRS))

    expected = [f"__dpselect_expected_{k}" for k in HINDSIGHT_GRID]
    totals = pairs.agg(F.count(F.lit(1)).alias("n"), F.sum(ROWS_ALL).alias("rows"),
                       *[F.sum(keep(k)).alias(f"k{k}") for k in HINDSIGHT_GRID],
                       *[F.sum(F.least(F.col(ROWS_ALL), F.lit(lf)) * keep(kappa)).alias(f"l{lf}")
                         for lf in HINDSIGHT_GRID]).collect()[0]
    per_key = pairs.groupBy(*columns(keys)).agg(*[F.rint(F.sum(keep(k))).alias(e)
                                                  for k, e in zip(HINDSIGHT_GRID, expected)])
    arrays, _ = _multiplicities(per_key, expected)
    n, rows = int(totals["n"]), float(totals["rows"] or 0)
    return Hindsight(HINDSIGHT_GRID, tuple(arrays[e].astype(np.float64) for e in expected),
                     tuple(float(totals[f"k{k}"]) / n if n else 1.0 for k in HINDSIGHT_GRID), HINDSIGHT_GRID,
                     tuple(float(totals[f"l{lf}"]) / rows if rows else 1.0 for lf in HINDSIGHT_GRID))
