"""Variance, standard deviation and count_distinct metrics on Spark: the per-key integers the
single machine's :mod:`dpselect.aggregation.more_stats` computes, counted by Spark's
aggregations (docs/privacy/variance.md, docs/privacy/count-distinct.md; docs/spark.md).

Variance: each kept row's squared offset q from its column's grid midpoint is the single
machine's :func:`~dpselect.aggregation.more_stats.grid_squared_offsets` of its grid units (on the
executors, while the values are converted; from the listed values once bounds are found), summed
exactly per (user, key) pair then per key as 38-digit decimals (``SQUARE<i>``), beside the sums.

count_distinct: each (user, key) pair's distinct non-null kept values (``DSET<k>``, an array),
then per key the number of distinct values among the kept pairs' arrays (``DCOUNT<k>``). With
``max_values_per_unit`` = m below L∞, a pair keeps the m of its distinct values of smallest rank,
the rank of a (user, key, value) triple being ``PRF(K, fingerprint(triple))`` under a key drawn
from the package CSPRNG, as the contribution bounding ranks rows (``_bounding``): under a fresh
key the ranks of distinct triples are indistinguishable from independent uniform 64-bit values,
so the m kept are a uniform m-subset, independently for each unit and key, as on one machine;
and a re-run task keeps the same values. A unit adds at most min(m, L∞) values to a key either
way: the single machine's sensitivity. Both travel in the same aggregations as the row counts
and sums: no extra shuffle. The release step hands them to the single machine's
:func:`~dpselect.aggregation.more_stats.release_more`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpselect.spark._common import spark, sum_type

__all__ = ["DCOUNT", "DCUT", "DRANK", "DSET", "DVALUE", "SQUARE", "DistinctSpec", "check_distinct_types",
           "distinct_specs", "distinct_value", "key_aggregates", "more_columns", "more_statistics", "pair_aggregates",
           "square_columns", "squares_of_lists"]

SQUARE = "__dpselect_square_"  # SQUARE<i>: Σq of the i-th value column's kept rows (of a row, a pair, then a key)
DVALUE = "__dpselect_dvalue_"  # DVALUE<j>: the j-th count_distinct column's value (normalised)
DRANK = "__dpselect_drank_"  # DRANK<k>: the rank of a row's (user, key, value) triple for the k-th count_distinct
DSET = "__dpselect_dset_"  # DSET<k>: a pair's kept distinct values for the k-th count_distinct
DCUT = "__dpselect_dcut_"  # DCUT<k>: the pair's (then key's) distinct values left out by the cap
DCOUNT = "__dpselect_dcount_"  # DCOUNT<k>: a key's distinct values among its kept pairs' sets


@dataclass(frozen=True)
class DistinctSpec:
    """The k-th count_distinct metric (``name``), on the j-th distinct column (``value``: its
    ``DVALUE<j>`` column); ``cap``: its max_values_per_unit where it can leave a value out (below
    L∞), else None (a pair has at most L∞ kept rows, so a larger cap keeps every value)."""

    name: str
    k: int
    value: str
    cap: int | None

    @property
    def set(self) -> str:
        return f"{DSET}{self.k}"

    @property
    def rank(self) -> str:
        return f"{DRANK}{self.k}"

    @property
    def count(self) -> str:
        return f"{DCOUNT}{self.k}"

    @property
    def cut(self) -> str:
        return f"{DCUT}{self.k}"


def square_columns(metrics: Mapping[str, Any], value_columns: Sequence[str]) -> dict[str, int]:
    """The columns of a variance or stddev, each with its index among the value columns."""
    from dpselect.aggregation.metrics import SPREAD_KINDS

    used = {m.column for m in metrics.values() if m.kind in SPREAD_KINDS}
    return {c: i for i, c in enumerate(value_columns) if c in used}


def distinct_specs(metrics: Mapping[str, Any], distinct_columns: Sequence[str], linf: int) -> list[DistinctSpec]:
    """The count_distinct metrics in the metrics' order."""
    from dpselect.aggregation.metrics import DISTINCT_KIND

    out: list[DistinctSpec] = []
    for name, m in metrics.items():
        if m.kind == DISTINCT_KIND:
            cap = m.max_values_per_unit
            out.append(DistinctSpec(name, len(out), f"{DVALUE}{list(distinct_columns).index(m.column)}",
                                    cap if cap is not None and cap < linf else None))
    return out


def check_distinct_types(df: Any, distinct_columns: Sequence[str]) -> None:
    """Refuse, before any job, a count_distinct column whose values Spark cannot compare as one
    machine does (nested types), with the single machine's message."""
    types = spark().types
    fields = {f.name: f.dataType for f in df.schema.fields}
    for c in distinct_columns:
        if c not in fields:
            raise ValueError(f"column {c!r} is not in the DataFrame (columns: {list(fields)})")
        if c.lower().startswith("__dpselect_"):
            raise ValueError(f"column names starting with '__dpselect_' are reserved, got {c!r}")
        t = fields[c]
        if not isinstance(t, (types.AtomicType, types.NullType)):
            raise TypeError(f"count_distinct column {c!r} has type {t.simpleString()}, whose values cannot be "
                            "compared: cast it to a string or number column first")


def distinct_value(col: Any, dtype: Any) -> Any:
    """A count_distinct column's value as one machine compares it: −0.0 read as 0.0 and every
    NaN as one NaN (:func:`~dpselect.aggregation.distinct.value_codes`), so that equal values are
    equal bytes in Spark's sets and sorts."""
    sql = spark()
    F, types = sql.functions, sql.types
    if not isinstance(dtype, (types.FloatType, types.DoubleType)):
        return col
    return F.when(F.isnan(col), F.lit(float("nan")).cast(dtype)).when(col == 0, F.lit(0.0).cast(dtype)) \
        .otherwise(col)


def pair_aggregates(squares: Sequence[int], specs: Sequence[DistinctSpec], kept: Any = None,
                    report: bool = False) -> list[Any]:
    """Spark aggregates of a pair's rows (those where ``kept`` holds, if given): ``SQUARE<i>``
    for the value columns with a grid in ``squares``, and each count_distinct's ``DSET<k>`` (and,
    with ``report``, ``DCUT<k>``)."""
    F = spark().functions
    out = []
    for i in squares:
        q = F.col(f"{SQUARE}{i}").cast(sum_type())  # exact: int64 terms summed as 38-digit decimals
        out.append(F.sum(q if kept is None else F.when(kept, q)).alias(f"{SQUARE}{i}"))
    for spec in specs:
        valid = F.col(spec.value).isNotNull()  # COUNT(DISTINCT) ignores nulls
        if kept is not None:
            valid = valid & kept
        if spec.cap is None:
            out.append(F.collect_set(F.when(valid, F.col(spec.value))).alias(spec.set))
            if report:
                out.append(F.lit(0).cast("long").alias(spec.cut))
            continue
        # The pair's distinct (rank, value): equal values have equal ranks; the cap smallest ranks are kept.
        ranked = F.collect_set(F.when(valid, F.struct(F.col(spec.rank).alias("r"), F.col(spec.value).alias("v"))))
        out.append(F.transform(F.slice(F.array_sort(ranked), 1, spec.cap), lambda x: x["v"]).alias(spec.set))
        if report:
            out.append(F.greatest(F.size(ranked) - F.lit(spec.cap), F.lit(0)).cast("long").alias(spec.cut))
    return out


def key_aggregates(squares: Sequence[int], specs: Sequence[DistinctSpec], kept: Any = None,
                   report: bool = False) -> list[Any]:
    """Spark aggregates of a key's pairs (those where ``kept`` holds, if given): ``SQUARE<i>``
    and each count_distinct's ``DCOUNT<k>`` (and, with ``report``, ``DCUT<k>``)."""
    F = spark().functions
    out = []
    for i in squares:
        q = F.col(f"{SQUARE}{i}").cast(sum_type())
        out.append(F.sum(q if kept is None else F.when(kept, q).otherwise(F.lit(0).cast(sum_type())))
                   .alias(f"{SQUARE}{i}"))
    for spec in specs:
        sets = F.col(spec.set) if kept is None else F.when(kept, F.col(spec.set))
        out.append(F.size(F.array_distinct(F.flatten(F.collect_list(sets)))).cast("long").alias(spec.count))
        if report:
            cut = F.col(spec.cut) if kept is None else F.when(kept, F.col(spec.cut)).otherwise(F.lit(0))
            out.append(F.sum(cut).cast("long").alias(spec.cut))
    return out


def more_columns(squares: Sequence[int], specs: Sequence[DistinctSpec], report: bool = False) -> list[str]:
    """The per-key columns of :func:`key_aggregates`, in its order."""
    return [*[f"{SQUARE}{i}" for i in squares],
            *[c for spec in specs for c in ((spec.count, spec.cut) if report else (spec.count,))]]


def squares_of_lists(units: np.ndarray, codes: np.ndarray, n: int, grid: Any) -> Any:
    """Per list (``codes`` numbers each value's list, n lists): Σq of its values' grid ``units``,
    exact (:class:`~dpselect.aggregation.wide.Wide`), for a column whose bounds were found after
    its values were listed."""
    from dpselect.aggregation.more_stats import grid_squared_offsets
    from dpselect.aggregation.spread import square_sums

    return square_sums(grid_squared_offsets(units, grid), codes.astype(np.intp), n)


def more_statistics(spreads: Mapping[str, Any], grids: Mapping[str, Any], squares: Mapping[str, Any],
                    distinct: Mapping[str, np.ndarray]) -> Any:
    """The single machine's :class:`~dpselect.aggregation.more_stats.MoreStatistics` of a batch
    of keys: each variance column's Σq per key (``squares``) at the shift of its grid
    (``grids``: each column's :class:`~dpselect.aggregation.metric_noise.PartitionGrids` for one
    key), each count_distinct's counts (``distinct``)."""
    from dpselect.aggregation.more_stats import MoreStatistics, widest_reach
    from dpselect.aggregation.spread import square_shift

    return MoreStatistics(spreads=dict(spreads), squares=dict(squares),
                          shifts={c: square_shift(widest_reach(grids[c])) for c in squares},
                          distinct=dict(distinct))
