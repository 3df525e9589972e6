"""The contribution bounding on Spark: which keys each user keeps (at most κ) and which rows in
each kept key (at most L∞), chosen by ranks that are a keyed pseudo-random function of each
row's content (docs/spark.md, "Randomness").

Why not fresh random draws: Spark takes a task's output to be a function of its input. It
re-runs a failed task, runs speculative copies, and, when a shuffle file is lost, recomputes
only the lost map outputs while reducers that already read the others keep what they read. A
rank drawn afresh on each run could then keep a user's key in one reducer's view and another
key in another's, and the user would count in more than κ keys. So every rank here is
``PRF(K_step, identity)``: K_step is derived from a 256-bit release key drawn once on the driver
from the package CSPRNG (:class:`ReleaseKey`), and the identity is what the row holds — the user,
the key and, for a row, its values and its index among identical rows — so any run, on any
partitioning, ranks every row alike.

Uniform without replacement still: under a fresh uniformly random key, the PRF's values on
distinct inputs are indistinguishable from independent uniform 64-bit values (ChaCha20 as a PRF,
csrc/keyed_prf.h), and the L smallest of n i.i.d. uniforms are a uniform L-subset. Inputs are
distinct: a pair's identity is its (user, key), unique after grouping; identical rows of a pair
are told apart by their index among themselves (``row_number`` over the identical rows, which
numbers them 1..m in some order — any order gives the same multiset of (content, index), hence
the same kept rows). The PRF's input is a 128-bit fingerprint of the identity (two 64-bit
xxhash64 of it, each column preceded by its null flag); distinct identities share a fingerprint
with probability about n²/2^129 among a user's n rows, and then, as when two ranks tie
(probability at most n²/2^65), the tie is broken by the rows' content, so the set of kept rows is
still the same on every run.
"""
from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpselect.spark._common import ERROR_MARK, column, columns, spark

__all__ = ["ReleaseKey", "ValueSpec", "index_identical_rows", "keep_first", "with_ranks", "J", "N", "R"]

R = "__dpselect_r"  # a row's or a pair's rank: PRF(K_step, fingerprint of its identity), as int64
N = "__dpselect_n"  # its place in its bounding window
J = "__dpselect_j"  # a row's index among the identical rows of its (user, key)
_FP = ("__dpselect_fp1", "__dpselect_fp2")  # the identity's 128-bit fingerprint, two int64


class ReleaseKey:
    """A release's 256-bit secret, drawn once on the driver from ``generator`` (the package
    CSPRNG; the test generator in tests). Each step ranks with its own key derived from it
    (HMAC-SHA256), so the steps' ranks are independent. Nothing prints it: a Spark plan shows the
    Arrow UDF's name, not the bytes of its closure, and its repr hides it."""

    __slots__ = ("_secret",)

    def __init__(self, generator: Any) -> None:
        self._secret = bytes(generator.random_bytes(32))

    def for_step(self, step: bytes) -> bytes:
        return hmac.new(self._secret, b"dpselect.spark bounding\x00" + step, hashlib.sha256).digest()

    def __repr__(self) -> str:
        return "ReleaseKey(<secret>)"


@dataclass(frozen=True)
class ValueSpec:
    """How :func:`with_ranks` prepares one value column: checked (no null, NaN or infinity:
    the single machine's refusals), then clamped to ``grid`` as int64 grid units, or, with no
    grid (bounds still to be found), kept as its values (int64 for ``integer``, else float64,
    −0.0 read as 0.0 so that equal values are equal bits). With ``leaves`` (a quantile's tree,
    :class:`~dpselect.aggregation.quantile_tree.Leaves`), each row's leaf, from its value before
    any conversion, also goes to column ``leaf``. With ``square`` (a variance's column, with a
    grid), each row's squared offset from the grid's midpoint, the single machine's
    :func:`~dpselect.aggregation.more_stats.grid_squared_offsets` of its units, goes to column
    ``square``."""

    label: str  # the column's name in the caller's DataFrame, for the messages
    grid: Any = None
    integer: bool = False
    leaves: Any = None
    leaf: str | None = None
    square: str | None = None


def index_identical_rows(df: Any, identity: Sequence[str], order: str) -> Any:
    """df plus ``J``: each row's index (1, 2, ...) among the rows equal to it on ``identity``.
    Identical rows are numbered in no particular order, which cannot matter: they are
    interchangeable, so the multiset of (row, index) is the same on every run. ``order`` is any
    column of ``identity`` (a window needs an order). Clustered by user already, this adds a
    sort, no shuffle."""
    sql = spark()
    window = sql.Window.partitionBy(*columns(identity)).orderBy(column(order))
    return df.withColumn(J, sql.functions.row_number().over(window))


def _fingerprint_columns(identity: Sequence[str], prefix: str | None = None) -> list[Any]:
    """Two 64-bit hashes of the identity columns, each column preceded by its null flag (Spark's
    hashes skip nulls, so (null, 1) and (1, null) would otherwise collide). Spark's hashes read
    −0.0 as 0.0 and every NaN alike, as its grouping does. ``prefix``: the two columns' names'
    stem (default ``_FP``)."""
    F = spark().functions
    parts = [p for name in identity for p in (column(name).isNull(), column(name))]
    out = _FP if prefix is None else (f"{prefix}1", f"{prefix}2")
    return [F.xxhash64(F.lit(seed), *parts).alias(name) for seed, name in zip((1, 2), out)]


def with_ranks(df: Any, step_key: bytes, identity: Sequence[str], null_unit_check: bool, privacy_unit: str,
               values: Mapping[str, ValueSpec] | None = None, unit_label: str | None = None,
               more_ranks: Sequence[tuple[str, bytes, Sequence[str]]] = ()) -> Any:
    """df plus ``R``, each row's rank ``PRF(step_key, fingerprint(identity))`` computed on the
    executors in the C kernel (one vectorised call per Arrow batch); each column named in
    ``values`` is checked and converted as its :class:`ValueSpec` says. With
    ``null_unit_check``, a null in column ``privacy_unit`` (the caller's ``unit_label``) fails
    the job with dpselect's message. ``more_ranks``: (column, step key, identity) of further
    ranks computed alike, before ``R`` (count_distinct's ranks of (user, key, value) triples)."""
    from dpselect import _rng
    from dpselect.aggregation.more_stats import grid_squared_offsets

    sql = spark()
    types = sql.types
    values = dict(values or {})

    def typ(v: ValueSpec) -> Any:
        return types.LongType() if v.grid is not None or v.integer else types.DoubleType()

    fields = [types.StructField(f.name, typ(values[f.name]), False) if f.name in values else f
              for f in df.schema.fields]
    trees = {name: v for name, v in values.items() if v.leaves is not None}
    leaf_fields = [types.StructField(v.leaf, types.LongType(), False) for v in trees.values()]
    squares = {name: v for name, v in values.items() if v.square is not None}
    square_fields = [types.StructField(v.square, types.LongType(), False) for v in squares.values()]
    rank_fields = [types.StructField(name, types.LongType(), False) for name, _, _ in more_ranks]
    schema = types.StructType([*fields, *leaf_fields, *square_fields, *rank_fields,
                               types.StructField(R, types.LongType(), False)])
    names = [f.name for f in df.schema.fields]
    unit_index = names.index(privacy_unit)
    # Each rank's fingerprint: two int64 columns after the data's, the further ranks' first.
    prints = [*[_fingerprint_columns(ident, f"{name}_fp") for name, _, ident in more_ranks],
              _fingerprint_columns(identity)]
    hashed = df.select(*columns(names), *[c for pair in prints for c in pair])
    keys = [*[key for _, key, _ in more_ranks], step_key]

    def convert(col: Any, v: ValueSpec) -> np.ndarray:
        label = f"value column {v.label!r}"
        if col.null_count:
            raise ValueError(f"{ERROR_MARK}{label} has {col.null_count} null value(s) in a batch: drop or fill them "
                             "before aggregating (a null is not a number to sum)")
        arr = col.to_numpy(zero_copy_only=False)
        try:
            if v.grid is not None:
                return v.grid.to_units(arr, name=label)
        except ValueError as exc:
            raise ValueError(f"{ERROR_MARK}{exc}") from None
        if v.integer:
            return arr.astype(np.int64)  # Spark's integral types are signed, at most 64 bits
        arr = arr.astype(np.float64)
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        if bad:
            raise ValueError(f"{ERROR_MARK}{label} has {bad} NaN or infinite value(s) in a batch: drop or impute "
                             "them before aggregating")
        return arr + 0.0  # -0.0 + 0.0 is 0.0: a kept value's bits never depend on which copy was kept

    def rank(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for batch in batches:
            if null_unit_check and batch.column(unit_index).null_count:
                raise ValueError(f"{ERROR_MARK}column {unit_label or privacy_unit!r} has rows with a null privacy unit "
                                 "(a null is not one person); pass null_privacy_units='drop' to leave them out")
            out = [pa.array(convert(batch.column(i), values[name])) if name in values else batch.column(i)
                   for i, name in enumerate(names)]
            for name, v in trees.items():  # converted (so checked) above; the leaf reads the value itself
                out.append(pa.array(v.leaves.codes(batch.column(names.index(name)).to_numpy(zero_copy_only=False))))
            for name, v in squares.items():  # from the units just converted, as one machine squares them
                units = out[names.index(name)].to_numpy(zero_copy_only=False)
                out.append(pa.array(grid_squared_offsets(units, v.grid), pa.int64()))
            for k, key in enumerate(keys):
                a, b = (batch.column(len(names) + 2 * k + i).to_numpy(zero_copy_only=False).view(np.uint64)
                        for i in (0, 1))
                out.append(pa.array(_rng.keyed_prf_u64(key, a, b).view(np.int64), pa.int64()))
            yield pa.RecordBatch.from_arrays(out, names=schema.names)

    return hashed.mapInArrow(rank, schema)


def keep_first(df: Any, partition_by: Sequence[str], order_by: Sequence[str], limit: int,
               rank: str | None = None) -> Any:
    """Per group of ``partition_by``, the ``limit`` rows of smallest (``R``, ``order_by``): a
    uniform subset of min(size, limit) rows, the ranks being pseudo-random and independent.
    ``order_by`` (the rows' content) breaks ties, so the rows kept are the same on every run. With
    ``rank`` (for the data holder's report) no row is dropped: column ``rank`` holds each row's
    rank instead (kept iff ``rank <= limit``)."""
    sql = spark()
    F = sql.functions
    window = sql.Window.partitionBy(*columns(partition_by)).orderBy(F.col(R), *columns(order_by))
    if rank is not None:
        return df.withColumn(rank, F.row_number().over(window)).drop(R)
    return df.withColumn(N, F.row_number().over(window)).filter(F.col(N) <= limit).drop(N, R)
