"""Files in and out for the CLI: streamed readers (CSV, Parquet, JSON lines), atomic writers.

Readers yield Arrow record batches of the needed columns only, so files larger than memory
work: the counting state grows with distinct (user, partition) pairs, never with rows
(:mod:`dpselect.rows`). Writers go through a temporary file in the output's directory and an
atomic rename, so a reader of the output never sees half a file and a failed run leaves no
partial output behind.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

from dpselect.rows import import_pyarrow

__all__ = [
    "INPUT_FORMATS",
    "OUTPUT_FORMATS",
    "BatchSource",
    "ColumnError",
    "InputError",
    "OutputError",
    "coalesce",
    "detect_format",
    "open_batches",
    "write_table",
]

INPUT_FORMATS = ("csv", "parquet", "jsonl")
OUTPUT_FORMATS = ("csv", "parquet", "jsonl")
_COMPRESSED = (".gz", ".bz2", ".zst", ".lz4")


class InputError(Exception):
    """The input cannot be opened or parsed."""


class ColumnError(Exception):
    """A needed column is not in the input."""


class OutputError(Exception):
    """The output cannot be written."""


def detect_format(path: str, explicit: str | None, role: str) -> str:
    """The format named explicitly, or the one the file name says (``x.csv.gz`` is csv)."""
    allowed = INPUT_FORMATS if role == "input" else OUTPUT_FORMATS
    if explicit is not None:
        if explicit not in allowed:
            raise ValueError(f"{role} format must be one of {', '.join(allowed)}; got {explicit!r}")
        return explicit
    name = path.lower()
    for suffix in _COMPRESSED:
        name = name.removesuffix(suffix)
    for suffix, fmt in ((".csv", "csv"), (".tsv", "csv"), (".parquet", "parquet"), (".pq", "parquet"),
                        (".jsonl", "jsonl"), (".ndjson", "jsonl"), (".json", "jsonl")):
        if name.endswith(suffix):
            return fmt
    raise ValueError(
        f"cannot tell the {role} format from the name {path!r}; "
        f"pass --{role}-format with one of {', '.join(allowed)}"
    )


@dataclass
class BatchSource:
    """Record batches of the needed columns, and how far into the input they are."""

    batches: Iterator[Any]
    progress: Callable[[], float | None]  # fraction of the input consumed, if known


def open_batches(path: str, fmt: str, columns: Sequence[str], batch_rows: int) -> BatchSource:
    """Stream the needed columns of a file. Raises InputError (cannot open or parse) or
    ColumnError (a column is missing) before the first batch is returned."""
    pa = import_pyarrow()
    if not os.path.exists(path):
        raise InputError(f"input file {path!r} does not exist")
    if os.path.isdir(path):
        raise InputError(f"input {path!r} is a directory, not a file")
    if not os.access(path, os.R_OK):
        raise InputError(f"input file {path!r} is not readable (permission denied)")
    try:
        if fmt == "parquet":
            return _parquet(path, columns, batch_rows)
        return _text(path, fmt, columns, batch_rows)
    except (ColumnError, InputError):
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(f"cannot read {path!r} as {fmt}: {exc}") from exc


def _check_columns(path: str, available: Sequence[str], columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in available]
    if missing:
        raise ColumnError(
            f"column(s) {', '.join(repr(c) for c in missing)} not found in {path!r}; "
            f"available columns: {', '.join(repr(c) for c in available)}"
        )


def _parquet(path: str, columns: Sequence[str], batch_rows: int) -> BatchSource:
    import pyarrow.parquet as pq

    handle = pq.ParquetFile(path)
    _check_columns(path, handle.schema_arrow.names, columns)
    total = handle.metadata.num_rows
    done = [0]

    def batches() -> Iterator[Any]:
        for batch in handle.iter_batches(batch_size=batch_rows, columns=list(columns)):
            done[0] += batch.num_rows
            yield batch

    return BatchSource(batches(), lambda: done[0] / total if total else None)


def _text(path: str, fmt: str, columns: Sequence[str], batch_rows: int) -> BatchSource:
    """CSV or JSON lines, possibly compressed (by extension), read block by block."""
    pa = import_pyarrow()
    raw = pa.OSFile(path, "rb")
    size = os.path.getsize(path)
    compression = pa.Codec.detect(path).name if _is_compressed(path) else None
    stream = pa.CompressedInputStream(raw, compression) if compression else raw
    block_size = max(1 << 20, min(64 << 20, batch_rows * 64))  # about batch_rows rows of ~64 bytes
    if fmt == "csv":
        import pyarrow.csv as pcsv

        delimiter = "\t" if path.lower().replace(".gz", "").endswith(".tsv") else ","
        # Check the header first, so a missing column is reported as such.
        header = pcsv.open_csv(
            _open_stream(path, compression),
            read_options=pcsv.ReadOptions(block_size=1 << 16),
            parse_options=pcsv.ParseOptions(delimiter=delimiter),
            convert_options=pcsv.ConvertOptions(column_types={}, include_columns=[]),
        )
        _check_columns(path, header.schema.names, columns)
        header.close()
        # Keys are read as text: no type guess from the first block can be contradicted by a
        # later one, and "007" and "7" stay different keys. An empty cell is a null key.
        reader = pcsv.open_csv(
            stream,
            read_options=pcsv.ReadOptions(block_size=block_size),
            parse_options=pcsv.ParseOptions(delimiter=delimiter),
            convert_options=pcsv.ConvertOptions(
                include_columns=list(columns),
                include_missing_columns=False,
                column_types={c: pa.string() for c in columns},
                null_values=[""],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        )
    else:
        import pyarrow.json as pjson

        if not hasattr(pjson, "open_json"):  # pragma: no cover - old pyarrow
            raise InputError("streaming JSON lines needs pyarrow >= 19: pip install -U pyarrow")
        reader = pjson.open_json(stream, read_options=pjson.ReadOptions(block_size=block_size))
    _check_columns(path, reader.schema.names, columns)

    def position() -> float | None:
        try:
            return min(1.0, raw.tell() / size) if size else None
        except (OSError, ValueError, RuntimeError):  # a progress estimate must never break the run
            return None

    def batches() -> Iterator[Any]:
        try:
            for batch in reader:
                yield batch.select(list(columns))
        finally:
            raw.close()

    return BatchSource(batches(), position)


def _open_stream(path: str, compression: str | None) -> Any:
    pa = import_pyarrow()
    return pa.input_stream(path, compression=compression)


def _is_compressed(path: str) -> bool:
    return path.lower().endswith(_COMPRESSED)


def coalesce(batches: Iterator[Any], min_rows: Callable[[], int]) -> Iterator[Any]:
    """Group consecutive batches into tables of at least ``min_rows()`` rows (the last may be
    smaller). Dictionary lookups cost O(dictionary size) per table, so keeping tables at least
    as large as the dictionaries keeps the total cost linear in the rows."""
    pa = import_pyarrow()
    pending: list[Any] = []
    rows = 0
    for batch in batches:
        pending.append(batch)
        rows += batch.num_rows
        if rows >= min_rows():
            yield pa.Table.from_batches(pending)
            pending, rows = [], 0
    if pending:
        yield pa.Table.from_batches(pending)


def write_table(table: Any, destination: str | None, fmt: str, protected: Sequence[str] = ()) -> None:
    """Write ``table`` to ``destination`` (None or "-": standard output) atomically.

    Refuses to write over any path in ``protected`` (the input). Raises OutputError."""
    if destination in (None, "-"):
        if fmt == "parquet" and sys.stdout.isatty():
            raise OutputError("parquet output is binary: give an output file with -o FILE.parquet")
        _write(table, sys.stdout.buffer, fmt)
        sys.stdout.buffer.flush()
        return
    target = os.path.abspath(destination)
    for path in protected:
        if os.path.exists(target) and os.path.exists(path) and os.path.samefile(target, path):
            raise OutputError(f"refusing to overwrite the input file {path!r} with the output")
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise OutputError(f"output directory {directory!r} does not exist")
    if os.path.isdir(target):
        raise OutputError(f"output {destination!r} is a directory; give a file name")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".dpselect-", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise OutputError(f"cannot create a file in {directory!r}: {exc.strerror}") from exc
    try:
        with os.fdopen(fd, "wb") as sink:
            _write(table, sink, fmt)
            sink.flush()
            os.fsync(sink.fileno())
        if os.path.exists(target):  # keep the permissions of the file being replaced
            os.chmod(tmp, os.stat(target).st_mode & 0o7777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise OutputError(f"cannot write {destination!r}: {exc.strerror or exc}") from exc
        raise


def _write(table: Any, sink: IO[bytes], fmt: str) -> None:
    if fmt == "csv":
        import pyarrow.csv as pcsv

        pcsv.write_csv(table, sink)
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, sink)
    elif fmt == "jsonl":
        for row in table.to_pylist():
            sink.write(json.dumps(row, default=str, ensure_ascii=False).encode() + b"\n")
    else:  # pragma: no cover - formats are validated earlier
        raise ValueError(f"unknown output format {fmt!r}")
