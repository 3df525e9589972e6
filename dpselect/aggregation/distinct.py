"""Per-key count of distinct values of a column (docs/privacy/count-distinct.md).

ZetaSQL's ``COUNT(DISTINCT col)`` with bounded user contribution (Wilson et al., "Differentially
Private SQL with Bounded User Contribution", PoPETs 2020) and Tumult's ``count_distinct``: the
number of distinct non-null values of ``column`` among a key's kept rows. After contribution
bounding a privacy unit has at most L∞ rows in each of at most κ keys; removing it removes at
most the values it alone brought to each of those keys, at most L∞ per key. With
``max_values_per_unit`` = m < L∞ each unit keeps at most m of its distinct values per key
(uniformly at random, with the package CSPRNG, independently of every other unit), so a key's
count changes by at most min(m, L∞): that is the sensitivity, and the noise is the release's
certified discrete Laplace or discrete Gaussian at it.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from dpselect.aggregation.metrics import Metric
from dpselect.aggregation.noise_choice import MetricNoise
from dpselect.aggregation.guarantee import Component
from dpselect.aggregation.spread import noise_component
from dpselect.ingest.rows import import_pyarrow

__all__ = ["DistinctCounts", "distinct_sensitivity", "noisy_distinct", "value_codes"]


def distinct_sensitivity(metric: Metric, linf: int) -> int:
    """min(max_values_per_unit, L∞): the most distinct values one unit adds to one key."""
    cap = metric.max_values_per_unit
    return linf if cap is None else min(cap, linf)


def value_codes(table: Any, column: str) -> npt.NDArray[np.int64]:
    """Each row's value of ``column`` as an integer code (equal values, equal codes; any Arrow
    type that dictionary-encodes), −1 for a null (COUNT(DISTINCT) ignores nulls)."""
    pa = import_pyarrow()
    col = table.column(column)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    if pa.types.is_floating(col.type):  # -0.0 and 0.0 are one value; every NaN one value
        import pyarrow.compute as pc

        col = pc.if_else(pc.equal(col, 0.0), pa.scalar(0.0, col.type), col)
    try:
        encoded = col.dictionary_encode()
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise TypeError(f"count_distinct column {column!r} has type {col.type}, whose values cannot be compared: "
                        "cast it to a string or number column first") from exc
    indices = encoded.indices
    if encoded.null_count:
        import pyarrow.compute as pc

        indices = pc.fill_null(indices, -1)
    return indices.to_numpy(zero_copy_only=False).astype(np.int64)


class DistinctCounts:
    """Distinct values per data partition from the kept rows' partition codes and value codes
    (and, with a cap, their privacy units' codes)."""

    @staticmethod
    def of(partitions: npt.NDArray[Any], codes: npt.NDArray[np.int64], n_parts: int, *,
           users: npt.NDArray[Any] | None = None, cap: int | None = None, rng: Any = None
           ) -> tuple[npt.NDArray[np.int64], int]:
        """(distinct values per partition, rows whose value a unit's cap left out). Without a cap
        every kept row counts; with one, each (unit, key) keeps ``cap`` of its distinct values,
        chosen by sorting them on fresh uniform 64-bit keys from ``rng``."""
        valid = codes >= 0
        part = partitions[valid].astype(np.int64)
        vals = codes[valid]
        width = int(vals.max()) + 1 if vals.size else 1
        dropped = 0
        if cap is not None and vals.size:
            assert users is not None and rng is not None
            u = users[valid].astype(np.int64)
            # distinct (unit, key, value) triples: one per value a unit brings to a key
            pair = np.unique(np.stack([u, part, vals]), axis=1)
            n = pair.shape[1]
            random = rng.uniform_below_array(2**64, n)
            order = np.lexsort((random, pair[1], pair[0]))
            pair = pair[:, order]
            group_start = np.ones(n, dtype=bool)
            group_start[1:] = (pair[0, 1:] != pair[0, :-1]) | (pair[1, 1:] != pair[1, :-1])
            starts = np.flatnonzero(group_start)
            rank = np.arange(n) - np.repeat(starts, np.diff(np.append(starts, n)))
            keep = rank < cap
            dropped = int(n - keep.sum())
            part, vals = pair[1, keep], pair[2, keep]
        if n_parts * width < 2**62:
            distinct_parts = np.unique(part * width + vals) // width
        else:  # the pair does not fit one int64
            distinct_parts = np.unique(np.stack([part, vals]), axis=1)[0]
        return np.bincount(distinct_parts, minlength=n_parts).astype(np.int64), dropped


def noisy_distinct(label: str, metric: Metric, plan: MetricNoise, counts: npt.NDArray[np.int64], level: float | None,
                   rng: Any) -> tuple[npt.NDArray[np.int64], Any, Any, Component]:
    """The released keys' noisy distinct-value counts (and interval), and the component."""
    sensitivity = distinct_sensitivity(metric, plan.linf)
    noise = plan.make(sensitivity)
    noisy = noise.add(counts, rng=rng)
    low = high = None
    if level is not None:
        low, high = noise.interval(noisy, level)
    cap = "" if metric.max_values_per_unit is None else f", at most {metric.max_values_per_unit} per unit and key"
    text = f"{noise.guarantee} Distinct values of {metric.column!r} (sensitivity {sensitivity} per key{cap})."
    return noisy, low, high, noise_component(label, plan, [noise], text)
