"""Quantile metrics on Spark: the exact counts of the kept rows per (key, leaf) of each quantile
column's tree, counted by Spark's aggregations (docs/privacy/quantiles.md; docs/spark.md).

Each kept row's leaf is the single machine's (:meth:`~dpselect.aggregation.quantile_tree.Leaves.codes`
on the row's value, on the executors), so the counts are the single machine's. They travel as
m ≤ :data:`~dpselect.aggregation.quantile_tree.MAX_LEAVES` long columns ``HIST<i>_<k>``: per
(user, key) pair the pair's kept rows in leaf k, then per key their sum over the kept pairs — the
same aggregations as the row counts and sums, no extra shuffle. The release step reads them as a
(keys, m) matrix and hands it to the single machine's
:func:`~dpselect.aggregation.quantile_release.quantile_metric` (the tree, its noise, the descent
and the intervals)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dpselect.spark._common import spark

__all__ = ["HIST", "LEAF", "hist_columns", "leaf_counts_of_lists", "leaves_of", "pair_leaf_counts"]

LEAF = "__dpselect_leaf_"  # a row's leaf in the tree of the i-th value column
HIST = "__dpselect_hist_"  # HIST<i>_<k>: kept rows in leaf k of the i-th value column (of a pair, then a key)


def hist_columns(i: int, m: int) -> list[str]:
    """The count columns of the i-th value column's m leaves."""
    return [f"{HIST}{i}_{k}" for k in range(m)]


def leaves_of(column: str, grids: Mapping[str, Any], integer: Mapping[str, bool]) -> Any:
    """The leaves of ``column``'s tree from its grid, as on one machine
    (:func:`~dpselect.aggregation.quantile_tree.leaves_for`); None without bounds."""
    from dpselect.aggregation.quantile_tree import leaves_for

    grid = grids.get(column)
    return None if grid is None else leaves_for(grid.lower, grid.upper, integer[column])


def pair_leaf_counts(i: int, m: int, kept: Any = None) -> list[Any]:
    """Spark aggregates of a pair's rows (those where ``kept`` holds, if given) in each leaf of
    column ``LEAF<i>``."""
    F = spark().functions
    leaf = F.col(f"{LEAF}{i}")
    return [F.count_if(leaf == k if kept is None else kept & (leaf == k)).alias(c)
            for k, c in enumerate(hist_columns(i, m))]


def leaf_counts_of_lists(values: np.ndarray, codes: np.ndarray, n: int, leaves: Any) -> list[np.ndarray]:
    """Per list (``codes`` numbers each value's list, n lists): its values in each leaf, for a
    column whose bounds were found after its values were listed."""
    counts = np.bincount(codes * leaves.count + leaves.codes(values), minlength=n * leaves.count)
    return list(counts.reshape(n, leaves.count).T.astype(np.int64))
