"""Parquet inputs, read in batches of the needed columns with their declared types (value
columns cast safely to the number type asked for)."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from dpselect.ingest.rows import import_pyarrow
from dpselect.io._source import BatchSource, check_columns, to_numbers

__all__ = ["parquet_source"]


def parquet_source(path: str, columns: Sequence[str], batch_rows: int, value_types: dict[str, Any]) -> BatchSource:
    import pyarrow.parquet as pq

    pa = import_pyarrow()
    handle = pq.ParquetFile(path)
    check_columns(path, handle.schema_arrow.names, columns)
    declared = [handle.schema_arrow.field(c) for c in columns]
    schema = pa.schema([f.with_type(value_types[f.name]) if f.name in value_types else f for f in declared])
    total = handle.metadata.num_rows
    done = [0]

    def convert(batch: Any, before: int) -> Any:
        if not value_types:
            return batch
        arrays = []
        for f in schema:
            array = batch.column(f.name)
            if f.name in value_types and array.type != f.type:
                # A safe cast: no truncation, no overflow.
                array = to_numbers(array, f.type, f.name, path, lambda i: f"in row {before + i + 1}")
            arrays.append(array)
        return pa.record_batch(arrays, schema=schema)

    def batches() -> Iterator[Any]:
        try:
            for batch in handle.iter_batches(batch_size=batch_rows, columns=list(columns)):
                before = done[0]
                done[0] += batch.num_rows
                yield convert(batch.select(list(columns)), before)
        finally:
            handle.close()

    return BatchSource(batches(), schema, lambda: done[0] / total if total else None, rows=total)
