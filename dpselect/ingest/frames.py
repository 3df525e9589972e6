"""DataFrames in and out: pandas, Polars and pyarrow, read as Arrow memory.

Only the columns a job needs are exported, through each library's own Arrow export (zero-copy
where the library allows); all computing happens in :mod:`dpselect.ingest.rows` and the C kernel.

Column types are checked from each library's own schema **before** anything is exported or
collected (:class:`dpselect.ingest.rows.ColumnTypeError`, naming the column): which types are refused
never depends on the values. A frame's dtypes are the caller's: when pandas infers an
``object`` column's type from its values, that inference is part of the caller's data, and
columns whose values mix types are refused.

The result is handed back in the caller's type with the caller's column types (a pandas
categorical stays categorical, a Polars ``Date`` stays ``Date``), converted exactly — never
through float64, so a released 64-bit key comes back bit for bit — and with a schema that
depends only on the input's schema, never on which keys were released.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dpselect.ingest.rows import ColumnTypeError, check_column_types, import_pyarrow, key_type

__all__ = ["FrameKind", "from_arrow", "result_schema", "to_arrow"]


@dataclass(frozen=True)
class FrameKind:
    """What the caller passed, and how to give a table back in the same shape."""

    name: str  # "pandas", "polars", "polars-lazy", "arrow-table", "arrow-batch", "arrow-stream"
    input_schema: Any  # pyarrow schema of the exported columns
    restore: Callable[[Any], Any]  # pyarrow Table -> caller's type

    def __repr__(self) -> str:
        return f"FrameKind({self.name!r}, columns={self.input_schema.names})"


def _module_name(obj: object) -> str:
    return type(obj).__module__.split(".")[0]


def result_schema(input_schema: Any, by: Sequence[str], count_column: str | None) -> Any:
    """The Arrow schema of a result, from the input's schema alone: the ``by`` columns in the
    type dpselect holds them in, then the int64 count column if counts are released."""
    pa = import_pyarrow()
    fields = [pa.field(name, key_type(input_schema.field(name).type)) for name in by]
    if count_column is not None:
        fields.append(pa.field(count_column, pa.int64()))
    return pa.schema(fields)


def to_arrow(data: object, privacy_unit: str, by: Sequence[str], values: Sequence[str] = ()
             ) -> tuple[Any, FrameKind]:
    """The ``privacy_unit``, ``by`` and ``values`` columns of ``data`` as a pyarrow Table, and
    how to convert a result back. Column presence and the unit's and keys' types are checked
    before any export (value columns' types are their reader's to check). A result gets the
    input's types back for its ``by`` columns only: every other column is dpselect's own.

    Accepts pandas DataFrames, Polars DataFrames and LazyFrames, pyarrow Tables and
    RecordBatches, and any object exporting an Arrow C stream (``__arrow_c_stream__``)."""
    pa = import_pyarrow()
    by, values = list(by), [v for v in values if v not in by and v != privacy_unit]
    columns = [privacy_unit, *by, *values]
    module = _module_name(data)
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        _check_columns(data.schema.names, [privacy_unit, *by], values)
        check_column_types(data.schema, privacy_unit, by)
        if isinstance(data, pa.RecordBatch):
            table = pa.Table.from_batches([data.select(columns)])
            return table, FrameKind("arrow-batch", table.schema,
                                    lambda t: _as_batch(_cast_like(t, table.schema, by)))
        table = data.select(columns)
        return table, FrameKind("arrow-table", table.schema, lambda t: _cast_like(t, table.schema, by))
    if module == "pandas":
        return _from_pandas(data, privacy_unit, by, values)
    if module == "polars":
        return _from_polars(data, privacy_unit, by, values)
    if hasattr(data, "__arrow_c_stream__"):
        reader = pa.RecordBatchReader.from_stream(data)
        _check_columns(reader.schema.names, [privacy_unit, *by], values)
        check_column_types(reader.schema, privacy_unit, by)  # before the stream is read
        table = reader.read_all().select(columns)
        return table, FrameKind("arrow-stream", table.schema, lambda t: _cast_like(t, table.schema, by))
    raise TypeError(
        f"data must be a pandas or Polars DataFrame, a pyarrow Table or RecordBatch, or an object "
        f"exporting an Arrow stream; got {type(data).__name__}"
    )


def from_arrow(table: Any, kind: FrameKind) -> Any:
    """A result table in the caller's frame type."""
    return kind.restore(table)


def _check_columns(available: Sequence[str], wanted: Sequence[str], values: Sequence[str] = ()) -> None:
    missing = [c for c in wanted if c not in available]
    if missing:
        raise ValueError(
            f"column(s) {missing} not found in data (check privacy_unit and by); "
            f"available columns: {list(available)}"
        )
    missing = [c for c in values if c not in available]
    if missing:
        raise ValueError(
            f"value column(s) {missing} read by the metrics not found in data (check the metrics' column names); "
            f"available columns: {list(available)}"
        )
    dupes = sorted({str(c) for c in available if list(available).count(c) > 1 and (c in wanted or c in values)})
    if dupes:
        raise ValueError(f"data has several columns named {dupes}: rename them so that every column read is "
                         "unambiguous")


def _cast_like(table: Any, schema: Any, by: Sequence[str]) -> Any:
    """Cast the ``by`` columns back to the input's types (every other column is dpselect's own:
    an input column that merely shares an output's name must never decide its type)."""
    pa = import_pyarrow()
    fields = []
    arrays = []
    for field in table.schema:
        column = table.column(field.name)
        if field.name in by and field.name in schema.names:
            target = schema.field(field.name).type
            if column.type != target:
                column = column.cast(target)
            fields.append(pa.field(field.name, target))
        else:
            fields.append(field)
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=table.schema.metadata))


def _as_batch(table: Any) -> Any:
    """One RecordBatch with exactly the table's schema (also when it has no rows)."""
    pa = import_pyarrow()
    return pa.RecordBatch.from_arrays([column.combine_chunks() for column in table.columns], schema=table.schema)


# --------------------------------------------------------------------------------------- pandas

# What pandas' own inference may say of an object column that dpselect can read as one type.
_PANDAS_OBJECT_KINDS = {"string", "bytes", "integer", "boolean", "date", "datetime", "datetime64",
                        "time", "decimal", "floating", "empty", "timedelta", "timedelta64"}


def _check_pandas_dtypes(df: Any, privacy_unit: str, by: list[str]) -> None:
    import pandas as pd

    for name in [privacy_unit, *by]:
        role = "privacy_unit" if name == privacy_unit else "by"
        dtype = df[name].dtype
        if isinstance(dtype, (pd.PeriodDtype, pd.IntervalDtype)):
            raise ColumnTypeError(name, role, dtype, "pandas periods and intervals are not read as keys; "
                                  f"convert the column first, e.g. df[{name!r}].astype(str)")
        if dtype == object:
            kind = pd.api.types.infer_dtype(df[name], skipna=True)
            if kind not in _PANDAS_OBJECT_KINDS:
                raise ColumnTypeError(
                    name, role, f"object ({kind})",
                    "its values are of mixed or unsupported Python types, so the column's type would "
                    f"depend on the data; give it one dtype first, e.g. df[{name!r}].astype('string')",
                )


def _from_pandas(df: Any, privacy_unit: str, by: list[str], values: list[str]) -> tuple[Any, FrameKind]:
    import pandas as pd

    pa = import_pyarrow()
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"data must be a DataFrame, got pandas {type(df).__name__}")
    columns = [privacy_unit, *by, *values]
    _check_columns(list(df.columns), [privacy_unit, *by], values)
    _check_pandas_dtypes(df, privacy_unit, by)
    sub = df[columns]
    fields = []
    for name in columns:
        try:
            fields.append(pa.Schema.from_pandas(sub[[name]], preserve_index=False).field(name))
        except (pa.ArrowException, ValueError, TypeError) as exc:
            role = "privacy_unit" if name == privacy_unit else "by" if name in by else "value"
            raise ColumnTypeError(name, role, sub[name].dtype, f"pyarrow cannot read it ({exc}); "
                                  f"give it one dtype first, e.g. df[{name!r}].astype('string')") from exc
    schema = pa.schema(fields)
    check_column_types(schema, privacy_unit, by)  # from the schema: nothing converted yet
    table = pa.Table.from_pandas(sub, schema=schema, preserve_index=False)
    dtypes = sub.dtypes

    def restore(t: Any) -> Any:
        data = {}
        for name in t.schema.names:
            dtype = dtypes[name] if name in by else None
            data[name] = _pandas_column(t.column(name), dtype)
        return pd.DataFrame(data, columns=t.schema.names)

    return table, FrameKind("pandas", table.schema, restore)


def _pandas_column(column: Any, dtype: Any) -> Any:
    """An Arrow column as a pandas Series of the input's ``dtype``, exactly: nullable and
    pyarrow-backed dtypes are built by their own Arrow constructor, object columns get Python
    integers (``to_pandas`` would give float64 whenever a null is present, and 2**57 - 1 would
    come back as 2**57)."""
    import pandas as pd

    if dtype is None:  # a column dpselect made (noisy counts and metrics): int64 or float64, no nulls
        return pd.Series(column.to_pandas())
    if isinstance(dtype, pd.CategoricalDtype):
        # The dtype would list every category of the input, released or not, which would
        # publish unreleased keys: keep only released ones, in the caller's order.
        # A public key outside the categories (public_partitions=) is added after them: it is
        # public, and dropping it would turn a released key into NaN.
        values = column.to_pandas(integer_object_nulls=True)
        present = list(dict.fromkeys(values.dropna().tolist()))
        known = set(dtype.categories)
        categories = [c for c in dtype.categories if c in set(present)] + [v for v in present if v not in known]
        kept = pd.CategoricalDtype(categories, ordered=dtype.ordered)
        return pd.Series(pd.Categorical(values, dtype=kept))
    if hasattr(dtype, "__from_arrow__"):
        return pd.Series(dtype.__from_arrow__(column), dtype=dtype)
    series = column.to_pandas(integer_object_nulls=True, date_as_object=dtype == object)
    return series if series.dtype == dtype else series.astype(dtype)


# --------------------------------------------------------------------------------------- polars

def _check_polars_dtypes(schema: Any, privacy_unit: str, by: list[str]) -> None:
    import polars as pl

    refused_keys = tuple(getattr(pl, n) for n in ("Object", "Int128", "UInt128", "Float16", "Unknown") if hasattr(pl, n))
    for name in [privacy_unit, *by]:
        dtype = schema[name]
        base = dtype.base_type() if hasattr(dtype, "base_type") else dtype
        if name == privacy_unit:
            ok = dtype.is_integer() or base in (pl.String, pl.Binary, pl.Categorical, pl.Enum, pl.Null)
            if base in (getattr(pl, "Int128", None), getattr(pl, "UInt128", None)):
                ok = False
            if not ok:
                why = "float ids would make 0.0 and -0.0 (and NaNs) one person or two at random; " \
                      if dtype.is_float() else ""
                raise ColumnTypeError(name, "privacy_unit", dtype, f"a privacy unit must be an integer, "
                                      f"string or bytes id; {why}cast it first, e.g. "
                                      f"pl.col({name!r}).cast(pl.Int64) or .cast(pl.String)")
        elif base in refused_keys or dtype.is_nested():
            what = "Object columns would be exported as memory addresses" if base == getattr(pl, "Object", None) \
                else "this Polars type has no exact Arrow form dpselect can key on"
            raise ColumnTypeError(name, "by", dtype, f"{what}; cast it first, e.g. "
                                  f"pl.col({name!r}).cast(pl.String)")


def _from_polars(data: Any, privacy_unit: str, by: list[str], values: list[str]) -> tuple[Any, FrameKind]:
    import polars as pl

    lazy = isinstance(data, pl.LazyFrame)
    if not (lazy or isinstance(data, pl.DataFrame)):
        raise TypeError(f"data must be a DataFrame or LazyFrame, got polars {type(data).__name__}")
    columns = [privacy_unit, *by, *values]
    schema = data.collect_schema() if lazy else data.schema
    _check_columns(list(schema.names()), [privacy_unit, *by], values)
    _check_polars_dtypes(schema, privacy_unit, by)  # before anything is collected
    frame = data.select(columns)
    frame = frame.collect() if lazy else frame
    polars_schema = frame.schema
    table = frame.to_arrow()
    check_column_types(table.schema, privacy_unit, by)

    def restore(t: Any) -> Any:
        out = pl.from_arrow(t)
        assert isinstance(out, pl.DataFrame)
        out = out.cast({c: _released_polars_dtype(polars_schema[c], out[c]) for c in by if c in out.columns})
        return out.lazy() if lazy else out

    return table, FrameKind("polars-lazy" if lazy else "polars", table.schema, restore)


def _released_polars_dtype(dtype: Any, released: Any) -> Any:
    """An Enum lists all its categories, released or not: it is rebuilt from the released
    values (in the caller's order)."""
    import polars as pl

    if isinstance(dtype, pl.Enum):
        # A public key outside the Enum (public_partitions=) is added after its categories.
        present = list(dict.fromkeys(released.drop_nulls().cast(pl.String).to_list()))
        known = dtype.categories.to_list()
        return pl.Enum([c for c in known if c in set(present)] + [v for v in present if v not in set(known)])
    return dtype
