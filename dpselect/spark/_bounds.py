"""APPROX_BOUNDS on Spark: clamping bounds for the sums and means given none, found over every
kept value (``bounds_scope="dataset"``; docs/privacy/approx-bounds.md).

The histogram is a per-cell count of the kept values (after both bounding steps: a user adds at
most κ·L∞ of them), so it is a Spark aggregation: each Arrow batch of kept pairs is binned on the
executors with the single machine's :func:`dpselect.aggregation.bounds.bin_cells`, Spark sums
the counts per cell, and only those cells (at most 2B per column: 128 for integers, 4094 for
floats) reach the driver, where :func:`~dpselect.aggregation.bounds.approx_bounds_from_histogram`
adds the noise and reads the bounds off. The sums are then computed from the same kept values
(read back from a checkpoint, so the bounding is not drawn again) on the found grid.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from dpselect.spark._common import ERROR_MARK, SUM, arrow_of, spark, sum_type

__all__ = ["VALUES", "histograms", "sum_values"]

VALUES = "__dpselect_values_"  # a pair's kept values of a column given no bounds (a list of <= L∞)


def histograms(pairs: Any, columns: Mapping[str, bool]) -> dict[str, np.ndarray]:
    """For each list column of ``pairs`` in ``columns`` (name → integer values), the 2B counts of
    the log histogram of all its values, as :func:`dpselect.aggregation.bounds.approx_bounds`
    counts them."""
    from dpselect.aggregation.bounds import BinScheme, bin_cells

    sql = spark()
    F, types = sql.functions, sql.types
    names = list(columns)
    schemes = {name: BinScheme.default(columns[name]) for name in names}
    schema = types.StructType([types.StructField("column", types.IntegerType(), False),
                               types.StructField("cell", types.LongType(), False),
                               types.StructField("n", types.LongType(), False)])

    def count(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for batch in batches:
            which, cells, counts = [], [], []
            for j, name in enumerate(names):
                values = batch.column(j).flatten().to_numpy(zero_copy_only=False)
                n = np.bincount(bin_cells(values, schemes[name]), minlength=2 * schemes[name].num_bins)
                present = np.flatnonzero(n)
                which.append(np.full(present.size, j, np.int32))
                cells.append(present.astype(np.int64))
                counts.append(n[present].astype(np.int64))
            yield pa.RecordBatch.from_arrays([pa.array(np.concatenate(which)), pa.array(np.concatenate(cells)),
                                              pa.array(np.concatenate(counts))], schema=pa.schema([
                                                  pa.field("column", pa.int32(), False),
                                                  pa.field("cell", pa.int64(), False),
                                                  pa.field("n", pa.int64(), False)]))

    cells = (pairs.select(*names).mapInArrow(count, schema)
             .groupBy("column", "cell").agg(F.sum("n").alias("n")).collect())  # <= 2B rows per column
    out = {name: np.zeros(2 * schemes[name].num_bins, dtype=np.int64) for name in names}
    for row in cells:
        out[names[row["column"]]][row["cell"]] = row["n"]
    return out


def sum_values(pairs: Any, grids: Mapping[str, tuple[str, Any, int]], report: bool = False,
               trees: Mapping[str, Any] | None = None, squares: Sequence[str] = ()) -> Any:
    """``pairs`` with each list column named in ``grids`` (name → (label, grid, i), the i-th
    value column) replaced by ``SUM<i>``: the pair's values clamped and snapped to the grid and
    summed exactly in grid units (128 bits, handed to Spark as a 38-digit decimal: a pair's sum
    of at most L∞ int64 terms never overflows it). With ``report``, the clamping counts of those
    values are appended; then, for each list column in ``trees`` (name → the leaves of its
    quantile tree), the pair's values per leaf (``HIST<i>_<k>``, ``_quantiles``); then, for each
    list column in ``squares`` (a variance's), the Σq of its units (``SQUARE<i>``, ``_more_stats``)."""
    from dpselect.spark._more_stats import SQUARE, squares_of_lists
    from dpselect.spark._quantiles import hist_columns, leaf_counts_of_lists
    from dpselect.spark._report import ABOVE, BELOW, CHANGE, clamping_of_lists

    types = spark().types
    fields = [types.StructField(f"{SUM}{grids[f.name][2]}", sum_type(), False) if f.name in grids else f
              for f in pairs.schema.fields]
    if report:
        fields += [types.StructField(f"{prefix}{i}", typ, False) for _, _, i in grids.values()
                   for prefix, typ in ((BELOW, types.LongType()), (ABOVE, types.LongType()),
                                       (CHANGE, types.DoubleType()))]
    trees = dict(trees or {})
    fields += [types.StructField(c, types.LongType(), False) for f in pairs.schema.fields if f.name in trees
               for c in hist_columns(grids[f.name][2], trees[f.name].count)]  # in the batches' order
    fields += [types.StructField(f"{SQUARE}{grids[f.name][2]}", sum_type(), False) for f in pairs.schema.fields
               if f.name in squares]
    schema = types.StructType(fields)

    def convert(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for batch in batches:
            columns, clamped, counted, squared = list(batch.columns), [], [], []
            for i, name in enumerate(batch.schema.names):
                if name not in grids:
                    continue
                label, grid, _ = grids[name]
                lists = columns[i]
                lengths = lists.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
                values = lists.flatten().to_numpy(zero_copy_only=False)
                try:
                    units = grid.to_units(values, name=f"value column {label!r}")
                except ValueError as exc:
                    raise ValueError(f"{ERROR_MARK}{exc}") from None
                codes = np.repeat(np.arange(len(lists), dtype=np.int64), lengths)
                columns[i] = arrow_of(grid.sum_units(units, codes, len(lists)))  # exact, 128 bits
                if report:
                    clamped += [pa.array(a) for a in clamping_of_lists(values, codes, len(lists), grid)]
                if name in trees:
                    counted += [pa.array(a) for a in leaf_counts_of_lists(values, codes, len(lists), trees[name])]
                if name in squares:
                    squared.append(arrow_of(squares_of_lists(units, codes, len(lists), grid)))
            yield pa.RecordBatch.from_arrays(columns + clamped + counted + squared, names=schema.names)

    return pairs.mapInArrow(convert, schema)
