"""The quantile metrics of one grouped release: from the kept rows of the released keys to the
output columns and the privacy component of each metric (docs/privacy/quantiles.md).

One tree per metric and key, whatever the number of quantiles asked of it: every quantile and
interval end of a metric is read from the same noisy tree, so the metric spends its one share."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dpselect.aggregation.grid import Grid
from dpselect.aggregation.guarantee import Component
from dpselect.aggregation.noise_choice import MetricNoise
from dpselect.aggregation.quantile_tree import (
    KeyLeafCounts,
    Leaves,
    descend,
    leaves_for,
    rank_widths,
    sensitivities,
    shape_for,
    tree_noise,
)
from dpselect.aggregation.quantiles import QuantileMetric, output_columns

__all__ = ["Columns", "in_metric_order", "quantile_metric", "release_quantile_metrics"]

# column -> (values, interval low or None, interval high or None)
Columns = dict[str, tuple[npt.NDArray[np.float64], Any, Any]]


def quantile_metric(name: str, label: str, metric: QuantileMetric, plan: MetricNoise, counts: KeyLeafCounts | None,
                    n_keys: int, leaves: Leaves | None, level: float | None, rng: Any) -> tuple[Columns, Component]:
    """The metric's columns for ``n_keys`` released keys from the exact counts of their kept
    rows per (key, leaf of ``leaves``), and its component. ``leaves`` None: no bounds were found
    for the column (every value NaN; the share is spent as planned; ``counts`` is not read).
    One machine counts the kept rows itself (:func:`release_quantile_metrics`); Spark counts
    them in its aggregations and calls this with the counts (docs/spark.md)."""
    names = output_columns(name, metric)
    if leaves is None:
        nan = np.full(n_keys, np.nan)
        cols: Columns = {c: (nan, nan if level is not None else None, nan if level is not None else None)
                         for c in names}
        return cols, _component(label, plan, None, "no bounds were found for the column: released as NaN.")
    shape = shape_for(leaves.count, plan.kind)
    noise = tree_noise(plan.kind, plan.epsilon, plan.rho, plan.kappa, plan.linf, shape.height)
    assert counts is not None and counts.m == leaves.count
    qs = np.asarray(metric.quantiles, dtype=np.float64)
    widths = rank_widths(noise, shape, level) if level is not None else None

    def targets(nhat: npt.NDArray[np.float64], clipped: npt.NDArray[np.float64]) -> tuple[Any, Any, Any]:
        # Points: rank max(1, q·n̂⁺) of the clipped counts. Interval ends: the raw counts, widened by the
        # rank errors E_n and E (docs/privacy/quantiles.md, "Intervals").
        point = np.maximum(clipped[:, None] * qs[None, :], 1.0)  # rank max(1, q·n), as the q-quantile's
        if widths is None:
            return point, np.ones(qs.size, dtype=bool), np.ones(qs.size, dtype=bool)
        e_n, e = widths
        low = (nhat[:, None] - e_n) * qs[None, :] - e
        high = (nhat[:, None] + e_n) * qs[None, :] + e
        rules = np.concatenate([np.ones(2 * qs.size, dtype=bool), np.zeros(qs.size, dtype=bool)])
        points = np.concatenate([np.ones(qs.size, dtype=bool), np.zeros(2 * qs.size, dtype=bool)])
        return np.concatenate([point, low, high], axis=1), rules, points

    ends = descend(counts, shape, noise, n_keys, targets, rng)
    k = qs.size
    cols = {}
    for i, column in enumerate(names):
        value = leaves.point(ends.low[:, i], ends.high[:, i], ends.frac[:, i])
        low = high = None
        if level is not None:  # never narrower than the point (widening keeps the coverage)
            low = np.minimum(leaves.left(ends.low[:, k + i]), value)
            high = np.maximum(leaves.right(ends.low[:, 2 * k + i]), value)
        cols[column] = (value, low, high)
    l1, l2sq = sensitivities(plan.kappa, plan.linf, shape.height)
    where = (f"one leaf per integer from {leaves.start} to {leaves.start + leaves.count - 1}" if leaves.start is not None
             else f"{leaves.count} equal buckets of [{leaves.lower:g}, {leaves.upper:g}]")
    text = (f"quantile(s) {', '.join(f'{q:g}' for q in metric.quantiles)} read by descending a hierarchical histogram "
            f"of the clamped values per key (branching {shape.branching}, height {shape.height}, {where}) whose "
            f"every node count has {noise.guarantee.mechanism}: one user changes the counts by at most {l1} in L1 "
            f"and {l2sq} in squared L2 (max_partitions_contributed x max_contributions_per_partition x height), so "
            f"the tree is {_statement(plan, noise)}; the descent is post-processing (docs/privacy/quantiles.md).")
    return cols, _component(label, plan, noise, text)


def _statement(plan: MetricNoise, noise: Any) -> str:
    if plan.kind == "gaussian":
        return f"{float(noise.rho):.6g}-zCDP"
    return f"{float(noise.epsilon):.6g}-DP"


def _component(label: str, plan: MetricNoise, noise: Any, text: str) -> Component:
    """The metric's step: (ε, 0) with Laplace noise (the noise's exact ε, at most the share);
    its ρ with Gaussian noise (its ε share counted once in the Gaussian group)."""
    if plan.kind == "gaussian":
        rho = noise.rho if noise is not None else plan.rho
        return Component(label, plan.epsilon, Fraction(0), text, rho=rho)
    return Component(label, noise.epsilon if noise is not None else plan.epsilon, Fraction(0), text)


def release_quantile_metrics(labels: Mapping[str, str], metrics: Mapping[str, QuantileMetric],
                             noises: Mapping[str, MetricNoise], kept_values: Mapping[str, npt.NDArray[Any]],
                             kept_partitions: npt.NDArray[np.uint32] | None, position: npt.NDArray[np.intp],
                             n_out: int, grids: Mapping[str, Grid | None],
                             integer: Mapping[str, bool], level: float | None, rng: Any
                             ) -> dict[str, tuple[Columns, Component]]:
    """Every quantile metric of a release, for the ``n_out`` released keys (``position``: each data
    partition's output row, −1 if not released; an output row no partition maps to is a public key
    absent from the data, whose tree is noise alone)."""
    if not metrics:
        return {}
    assert kept_partitions is not None
    where = position[kept_partitions]
    inside = where >= 0
    keys = where[inside]
    out = {}
    for name, metric in metrics.items():
        assert metric.column is not None
        grid = grids.get(metric.column)
        leaves = None if grid is None else leaves_for(grid.lower, grid.upper, integer[metric.column])
        counts = None if leaves is None else KeyLeafCounts.of_rows(
            keys, leaves.codes(kept_values[metric.column][inside]), n_out, leaves.count)
        out[name] = quantile_metric(name, labels[name], metric, noises[name], counts, n_out, leaves, level, rng)
    return out


def in_metric_order(names: Iterable[str], trees: Mapping[str, tuple[Columns, Component]],
                    others: Mapping[str, tuple[Any, Any, Any, Component]]) -> dict[str, tuple[Columns, Component]]:
    """Every metric's output columns (column -> values, interval low, high) and component, in the
    metrics' order: the quantile metrics' ``trees`` and the ``others``' (values, low, high,
    component) of :func:`dpselect.aggregation.metric_noise.release_metrics`, each one column.
    One machine and Spark assemble a release's metrics with it."""
    out = {}
    for name in names:
        if name in trees:
            out[name] = trees[name]
        else:
            values, low, high, component = others[name]
            out[name] = ({name: (values, low, high)}, component)
    return out
