"""Files in and out for the CLI: streamed readers (CSV, Parquet, JSON lines), safe writers.

Readers yield Arrow record batches of the needed columns only, so files larger than memory
work: the counting state grows with distinct (user, partition) pairs, never with rows
(:mod:`dpselect.ingest.rows`), and the readers hold a bounded number of blocks (see docs/rows.md,
"Memory").

Every column is read with a type fixed before the first row: CSV and JSON-lines keys and
privacy units are read as text (as written), Parquet columns with their declared types. No
output may depend on an unreleased value, and a type inferred from the values would make one
person's row change how every released key is written. Numeric value columns (the sums and
means of ``dpselect aggregate``) are read with the type the caller names (``value_types``): a
value that is not a number of that type is an error naming the column, never a guess.

Writers go through a temporary file in the output's directory and an atomic rename, so a
reader of the output never sees half a file and a failed run leaves no partial output behind.
Outputs that are not regular files (a pipe, a character device) are written through; symlinks
are followed to the file they name; a read-only output is never replaced.

The readers and their helpers are modules of one purpose, whose public names this module
re-exports (import them from here): format detection (``dpselect.io._formats``), what every
reader shares (``dpselect.io._source``), one reader per format (``dpselect.io._csv``, ``_jsonl``,
``_parquet``), the read-ahead and coalescing of batches (``dpselect.io._batches``), integer ids
from text (``dpselect.io._ids``) and the memory an input may take whole (``dpselect.io._memory``);
the writers are :mod:`dpselect.io.outputs`.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

# The writers live in dpselect.io.outputs; re-exported here, where the CLI has always found them.
from dpselect.io.outputs import OutputError, check_destination, write_outputs, write_table
from dpselect.ingest.rows import import_pyarrow
from dpselect.io._batches import coalesce, read_ahead
from dpselect.io._csv import csv_source
from dpselect.io._formats import INPUT_FORMATS, OUTPUT_FORMATS, csv_delimiter, detect_format
from dpselect.io._ids import decimal_ids
from dpselect.io._jsonl import jsonl_source
from dpselect.io._memory import IN_MEMORY_ENV, in_memory_budget
from dpselect.io._parquet import parquet_source
from dpselect.io._source import DEFAULT_BLOCK_SIZE, BatchSource, ColumnError, InputError, ValueColumnError, one_line

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "INPUT_FORMATS",
    "OUTPUT_FORMATS",
    "BatchSource",
    "ColumnError",
    "InputError",
    "OutputError",
    "ValueColumnError",
    "check_destination",
    "IN_MEMORY_ENV",
    "coalesce",
    "decimal_ids",
    "in_memory_budget",
    "read_ahead",
    "csv_delimiter",
    "detect_format",
    "open_batches",
    "write_outputs",
    "write_table",
]

# Named after the module they are imported from (in tracebacks, reprs, pickles and the docs), as
# they were before the split.
for _public in (BatchSource, ColumnError, InputError, ValueColumnError, coalesce, csv_delimiter, decimal_ids,
                detect_format, in_memory_budget, read_ahead):
    _public.__module__ = __name__
del _public


def open_batches(path: str, fmt: str, columns: Sequence[str], batch_rows: int,
                 block_size: int = DEFAULT_BLOCK_SIZE, value_types: Mapping[str, Any] | None = None) -> BatchSource:
    """Stream the needed columns of a file. Raises InputError (cannot open or parse) or
    ColumnError (a column is missing or ambiguous) before the first batch is returned; while
    iterating, InputError for malformed content.

    ``value_types`` maps some of ``columns`` to a numeric Arrow type (int64, float64) they are
    read as: CSV cells are parsed as that type, JSON-lines values converted from their text,
    Parquet columns cast safely (no truncation, no overflow) from their declared type. A value
    that does not convert raises ValueColumnError (before or while iterating)."""
    pa = import_pyarrow()
    if not os.path.exists(path):
        raise InputError(f"input file {path!r} does not exist")
    if os.path.isdir(path):
        raise InputError(f"input {path!r} is a directory, not a file")
    if not os.access(path, os.R_OK):
        raise InputError(f"input file {path!r} is not readable (permission denied)")
    if not stat.S_ISREG(os.stat(path).st_mode):
        # Opening a FIFO would wait for a writer, then fail: the readers seek in their input.
        raise InputError(f"input {path!r} is not a regular file (a pipe or a device); dpselect reads files it "
                         "can seek in: save the input to a file first")
    value_types = dict(value_types or {})
    try:
        if fmt == "parquet":
            source = parquet_source(path, columns, batch_rows, value_types)
        elif fmt == "csv":
            source = csv_source(path, columns, block_size, value_types)
        else:
            source = jsonl_source(path, columns, block_size, value_types)
    except (ColumnError, InputError, ValueColumnError):
        raise
    except (pa.ArrowException, OSError, ValueError, EOFError) as exc:
        raise InputError(f"cannot read {path!r} as {fmt}: {one_line(exc)}") from exc
    source.batches = _reading(path, fmt, source.batches)
    return source


def _reading(path: str, fmt: str, batches: Iterator[Any]) -> Iterator[Any]:
    """The batches, a reader's failure while iterating (a corrupt page, a truncated stream)
    turned into InputError with a one-line message."""
    pa = import_pyarrow()
    try:
        yield from batches
    except (ColumnError, InputError, ValueColumnError):
        raise
    except (pa.ArrowException, OSError, EOFError) as exc:
        raise InputError(f"cannot read {path!r} as {fmt}: {one_line(exc)}") from exc
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
