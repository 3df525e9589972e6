"""DataFrames in and out: pandas, Polars and pyarrow, read as Arrow memory (issue 3).

Only the columns a job needs are exported, through each library's own Arrow export (zero-copy
where the library allows); all computing happens in :mod:`dpselect.rows` and the C kernel. The
result is handed back in the caller's type with the caller's column types (a pandas
categorical stays categorical, a Polars ``Date`` stays ``Date``).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dpselect.rows import import_pyarrow

__all__ = ["FrameKind", "from_arrow", "to_arrow"]


@dataclass(frozen=True)
class FrameKind:
    """What the caller passed, and how to give a table back in the same shape."""

    name: str  # "pandas", "polars", "polars-lazy", "arrow-table", "arrow-batch", "arrow-stream"
    input_schema: Any  # pyarrow schema of the exported columns
    restore: Callable[[Any], Any]  # pyarrow Table -> caller's type


def _module_name(obj: object) -> str:
    return type(obj).__module__.split(".")[0]


def to_arrow(data: object, columns: Sequence[str]) -> tuple[Any, FrameKind]:
    """The given columns of ``data`` as a pyarrow Table, and how to convert a result back.

    Accepts pandas DataFrames, Polars DataFrames and LazyFrames, pyarrow Tables and
    RecordBatches, and any object exporting an Arrow C stream (``__arrow_c_stream__``)."""
    pa = import_pyarrow()
    columns = list(columns)
    module = _module_name(data)
    if isinstance(data, pa.Table):
        _check_columns(data.schema.names, columns)
        table = data.select(columns)
        return table, FrameKind("arrow-table", table.schema, lambda t: _cast_like(t, table.schema))
    if isinstance(data, pa.RecordBatch):
        _check_columns(data.schema.names, columns)
        table = pa.Table.from_batches([data.select(columns)])
        return table, FrameKind(
            "arrow-batch", table.schema, lambda t: _cast_like(t, table.schema).combine_chunks().to_batches()[0]
            if t.num_rows else pa.RecordBatch.from_pylist([], schema=table.schema)
        )
    if module == "pandas":
        return _from_pandas(data, columns)
    if module == "polars":
        return _from_polars(data, columns)
    if hasattr(data, "__arrow_c_stream__"):
        table = pa.table(data)
        _check_columns(table.schema.names, columns)
        table = table.select(columns)
        return table, FrameKind("arrow-stream", table.schema, lambda t: _cast_like(t, table.schema))
    raise TypeError(
        f"data must be a pandas or Polars DataFrame, a pyarrow Table or RecordBatch, or an object "
        f"exporting an Arrow stream; got {type(data).__name__}"
    )


def from_arrow(table: Any, kind: FrameKind) -> Any:
    """A result table in the caller's frame type."""
    return kind.restore(table)


def _check_columns(available: Sequence[str], wanted: Sequence[str]) -> None:
    missing = [c for c in wanted if c not in available]
    if missing:
        raise ValueError(f"column(s) {missing} not found in data (privacy_unit / by); available columns: {list(available)}")


def _cast_like(table: Any, schema: Any) -> Any:
    """Cast each column back to the input's type where the result has it (key columns)."""
    pa = import_pyarrow()
    fields = []
    arrays = []
    for field in table.schema:
        column = table.column(field.name)
        if field.name in schema.names:
            target = schema.field(field.name).type
            if column.type != target:
                column = column.cast(target)
            fields.append(pa.field(field.name, target))
        else:
            fields.append(field)
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=table.schema.metadata))


def _released_pandas_dtype(dtype: Any, released: Any) -> Any:
    """The input's dtype for a released column. A categorical dtype lists every category of
    the input, released or not, which would publish the unreleased keys: keep only released
    categories (in the caller's order, which is their own public metadata)."""
    import pandas as pd

    if isinstance(dtype, pd.CategoricalDtype):
        present = set(released.dropna().tolist())
        return pd.CategoricalDtype([c for c in dtype.categories if c in present], ordered=dtype.ordered)
    return dtype


def _released_polars_dtype(dtype: Any, released: Any) -> Any:
    """As :func:`_released_pandas_dtype`: an Enum lists all its categories, so it is rebuilt
    from the released values."""
    import polars as pl

    if isinstance(dtype, pl.Enum):
        present = set(released.drop_nulls().cast(pl.String).to_list())
        return pl.Enum([c for c in dtype.categories.to_list() if c in present])
    return dtype


def _from_pandas(df: Any, columns: list[str]) -> tuple[Any, FrameKind]:
    import pandas as pd

    pa = import_pyarrow()
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"data must be a DataFrame, got pandas {type(df).__name__}")
    _check_columns([c for c in df.columns], columns)
    if df.columns.duplicated().any():
        dupes = sorted({str(c) for c in df.columns[df.columns.duplicated()]})
        raise ValueError(f"data has duplicate column names {dupes}")
    sub = df[columns]
    table = pa.Table.from_pandas(sub, preserve_index=False)
    dtypes = sub.dtypes

    def restore(t: Any) -> Any:
        out = t.to_pandas()
        keys = {c: _released_pandas_dtype(dtypes[c], out[c]) for c in columns if c in out.columns}
        return out.astype(keys) if len(out.columns) else out

    return table, FrameKind("pandas", table.schema, restore)


def _from_polars(data: Any, columns: list[str]) -> tuple[Any, FrameKind]:
    import polars as pl

    lazy = isinstance(data, pl.LazyFrame)
    if not (lazy or isinstance(data, pl.DataFrame)):
        raise TypeError(f"data must be a DataFrame or LazyFrame, got polars {type(data).__name__}")
    names = data.collect_schema().names() if lazy else data.columns
    _check_columns(names, columns)
    frame = data.select(columns)
    frame = frame.collect() if lazy else frame
    polars_schema = frame.schema
    table = frame.to_arrow()

    def restore(t: Any) -> Any:
        out = pl.from_arrow(t)
        assert isinstance(out, pl.DataFrame)
        out = out.cast({c: _released_polars_dtype(polars_schema[c], out[c]) for c in columns if c in out.columns})
        return out.lazy() if lazy else out

    return table, FrameKind("polars-lazy" if lazy else "polars", table.schema, restore)
