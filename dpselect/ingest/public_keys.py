"""Public partitions in the raw-rows pipeline: join a caller's list of known keys to the
partitions counted from the data (docs/privacy/public-partitions.md).

A public key absent from the data gets the count 0; with ``only_public`` the data's own
partitions that are not public are left out entirely (the public release publishes exactly
the list). Keys match the way the counting does: nulls match nulls, every NaN matches every
NaN, and 0.0 matches -0.0. The list is public information, so how it is joined is not a
privacy matter; its size only adds to the work.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpselect.ingest.rows import PartitionCounts, import_pyarrow

__all__ = ["with_public_partitions", "public_table"]

_NAN = object()  # one key for every NaN


def _canonical(value: Any) -> Any:
    if isinstance(value, float):
        if math.isnan(value):
            return _NAN
        if value == 0.0:
            return 0.0  # -0.0 is the same key
    return value


def _as_key_rows(public: Any, n_keys: int) -> list[Any] | None:
    """A collection of keys as a list (one tuple per key with several ``by`` columns), or None
    for a table-like object. A str is refused: it is one key, not a list of its characters."""
    if isinstance(public, (str, bytes)):
        raise TypeError(f"public_partitions must be a collection of keys, got a {type(public).__name__}: wrap a "
                        f"single key in a list, e.g. public_partitions=[{public!r}]")
    if isinstance(public, (set, frozenset)):
        return list(public)  # the order does not matter: the release is sorted by key
    if isinstance(public, (list, tuple)):
        return list(public)
    if isinstance(public, np.ndarray):
        if public.ndim == 1:
            return public.tolist()
        if public.ndim == 2 and public.shape[1] == n_keys:
            return [tuple(row) for row in public.tolist()]
        raise ValueError(f"public_partitions: a numpy array of keys must be 1-D (one by column) or have one column "
                         f"per by column ({n_keys}), got shape {public.shape}")
    module = type(public).__module__.split(".")[0]
    pa = import_pyarrow()
    if isinstance(public, (pa.Array, pa.ChunkedArray)) or (module in ("pandas", "polars") and
                                                           type(public).__name__ in ("Series", "Index")):
        return list(public.to_pylist() if module == "pyarrow" else public.to_list()
                    if hasattr(public, "to_list") else public.tolist())
    return None


def public_table(public: Any, key_schema: Any) -> Any:
    """The public keys as an Arrow table with the key columns' names and types, converted safely:
    a key that the data's key type cannot hold exactly (1.5 for an int64 key, a value outside
    its range) is refused, never truncated. A list, tuple, set, numpy array, pandas/Polars
    Series or Arrow array of keys (tuples with several ``by`` columns), or a pandas, Polars or
    Arrow table with the ``by`` columns."""
    pa = import_pyarrow()
    names = key_schema.names
    if isinstance(public, pa.Table) and public.schema.equals(key_schema):
        return public
    rows = _as_key_rows(public, len(names))
    if rows is not None:
        columns: list[Sequence[Any]]
        if len(names) == 1 and not any(isinstance(k, tuple) for k in rows):
            columns = [rows]  # one by column, plain keys: no tuple per key (a long list in one pass)
        else:
            rows = [k if isinstance(k, tuple) else (k,) for k in rows]
            if any(len(r) != len(names) for r in rows):
                raise ValueError(f"public_partitions: every key must have {len(names)} value(s), one per by column "
                                 f"{names}")
            columns = list(zip(*rows)) if rows else [() for _ in names]
        arrays = {}
        for name, col in zip(names, columns):
            try:  # each column in its own type first, then a safe cast (never pyarrow's truncating conversion)
                arrays[name] = pa.array(list(col), from_pandas=False)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                raise TypeError(f"public_partitions: the values given for by column {name!r} are not of one type "
                                f"that matches the data's {key_schema.field(name).type} ({_first_line(exc)})") from None
        table = pa.table(arrays)
    else:
        from dpselect.ingest.frames import to_arrow

        missing = [n for n in names if n not in _column_names(public)]
        if missing:
            raise ValueError(f"public_partitions lacks the by column(s) {missing}: give a table with the by columns, "
                             "or a list of keys")
        table = _export(public, names, to_arrow)
    target = pa.schema([key_schema.field(n) for n in names])
    try:
        return table.select(names).cast(target, safe=True)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"public_partitions: its keys cannot be held exactly in the data's key types "
                        f"{[str(key_schema.field(n).type) for n in names]} ({_first_line(exc)}); give keys of "
                        "those types") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def _column_names(frame: Any) -> list[str]:
    names = getattr(frame, "column_names", None) or getattr(frame, "columns", None)
    if names is None:
        schema = getattr(frame, "schema", None)
        names = getattr(schema, "names", None) or list(schema or [])
    return list(names)


def _export(frame: Any, names: list[str], to_arrow: Any) -> Any:
    pa = import_pyarrow()
    if isinstance(frame, (pa.Table, pa.RecordBatch)):
        return pa.Table.from_batches([frame]) if isinstance(frame, pa.RecordBatch) else frame
    try:
        import pandas as pd

        if isinstance(frame, pd.DataFrame):
            return pa.Table.from_pandas(frame[names], preserve_index=False)
    except ImportError:
        pass
    try:
        import polars as pl

        if isinstance(frame, pl.LazyFrame):
            frame = frame.collect()
        if isinstance(frame, pl.DataFrame):
            return frame.select(names).to_arrow()
    except ImportError:
        pass
    raise TypeError(f"public_partitions must be a list of keys, or a pandas/Polars/Arrow table, got "
                    f"{type(frame).__name__}")


def with_public_partitions(partitions: PartitionCounts, public: Any, *, only_public: bool
                           ) -> tuple[PartitionCounts, np.ndarray]:
    """The partitions to release from: the data's (all of them, or only the public ones) and
    every public key, deduplicated; and the mask of the public ones."""
    pa = import_pyarrow()
    keys = partitions.keys
    listed = public_table(public, keys.schema)
    matched = _match_in_arrow(keys, listed)
    is_public, absent = matched if matched is not None else _match_in_python(keys, listed)
    keep_rows = is_public if only_public else np.ones(keys.num_rows, dtype=bool)
    present = keys.filter(pa.array(keep_rows))
    extra = listed.take(pa.array(absent, type=pa.int64())) if absent else listed.slice(0, 0)
    combined = pa.concat_tables([present, extra.cast(present.schema)])
    counts = np.concatenate([partitions.counts[keep_rows], np.zeros(len(absent), np.int64)])
    mask = np.concatenate([is_public[keep_rows], np.ones(len(absent), dtype=bool)])
    return PartitionCounts(keys=combined, counts=counts), mask


def _match_in_python(keys: Any, listed: Any) -> tuple[np.ndarray, list[int]]:
    """(which data keys are listed, the first row of each distinct listed key absent from the
    data), key by key: any number of ``by`` columns of any type."""
    position = {tuple(_canonical(v) for v in row.values()): i for i, row in enumerate(keys.to_pylist())}
    public_rows: dict[tuple[Any, ...], int] = {}
    for j, row in enumerate(listed.to_pylist()):
        public_rows.setdefault(tuple(_canonical(v) for v in row.values()), j)
    is_public = np.zeros(keys.num_rows, dtype=bool)
    absent = []
    for key, j in public_rows.items():
        i = position.get(key)
        if i is None:
            absent.append(j)
        else:
            is_public[i] = True
    return is_public, absent


def _canonical_column(column: Any) -> Any:
    """A key column whose equal keys are equal to Arrow's hashing: -0.0 as 0.0 (x + 0.0), and
    every NaN (any sign or payload) as one NaN, as :func:`_canonical` does key by key."""
    pa = import_pyarrow()
    import pyarrow.compute as pc

    if pa.types.is_floating(column.type):
        column = pc.add(column, pa.scalar(0.0, column.type))
        column = pc.if_else(pc.is_nan(column), pa.scalar(float("nan"), column.type), column)
    return column


def _match_in_arrow(keys: Any, listed: Any) -> tuple[np.ndarray, list[int]] | None:
    """What :func:`_match_in_python` returns, computed by Arrow's hash kernels for one ``by``
    column of a primitive or string type (a list of a million keys in milliseconds, not seconds);
    None where Arrow cannot (several columns, nested or dictionary types): the caller then
    matches key by key."""
    pa = import_pyarrow()
    import pyarrow.compute as pc

    if keys.num_columns != 1:
        return None
    kind = keys.schema.field(0).type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_string(kind)
            or pa.types.is_large_string(kind) or pa.types.is_boolean(kind) or pa.types.is_binary(kind)
            or pa.types.is_large_binary(kind) or pa.types.is_temporal(kind) or pa.types.is_decimal(kind)):
        return None
    try:
        data = _canonical_column(keys.column(0))
        wanted = _canonical_column(listed.column(0))
        at = pc.index_in(wanted, value_set=data, skip_nulls=False)  # nulls match nulls
        found = at.is_valid().to_numpy(zero_copy_only=False)
        is_public = np.zeros(keys.num_rows, dtype=bool)
        is_public[at.drop_null().to_numpy(zero_copy_only=False).astype(np.intp)] = True
        missing = np.flatnonzero(~found)
        if missing.size == 0:
            return is_public, []
        rest = wanted.take(pa.array(missing))
        group = pc.index_in(rest, value_set=pc.unique(rest), skip_nulls=False).to_numpy(zero_copy_only=False)
        _, first = np.unique(group, return_index=True)  # each distinct absent key's first row
        return is_public, missing[np.sort(first)].tolist()
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid):
        return None
