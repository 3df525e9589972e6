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
"""
from __future__ import annotations

import atexit
import io
import json
import os
import queue
import re
import stat
import threading
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# The writers live in dpselect.io.outputs; re-exported here, where the CLI has always found them.
from dpselect.errors import DPSelectError
from dpselect.io.outputs import OutputError, check_destination, write_outputs, write_table
from dpselect.ingest.rows import import_pyarrow

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

INPUT_FORMATS = ("csv", "parquet", "jsonl")
OUTPUT_FORMATS = ("csv", "parquet", "jsonl")
_COMPRESSED = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".lz4": "lz4"}
# pyarrow's default. The streaming CSV reader keeps about 32 + (threads) blocks in flight
# (read-ahead), so this bounds the reader's memory; a row must fit in one block.
DEFAULT_BLOCK_SIZE = 1 << 20

# Overrides the memory an input may take to be counted whole (bytes; 0: always stream), see
# in_memory_budget. For tests and for hosts whose available memory the kernel misreports.
IN_MEMORY_ENV = "DPSELECT_IN_MEMORY_BYTES"

class InputError(DPSelectError):
    """The input cannot be opened or parsed."""


class ColumnError(DPSelectError):
    """A needed column is missing from the input, or ambiguous."""


class ValueColumnError(DPSelectError):
    """A numeric value column of ``path`` holds something that is not a number of its type.
    ``column`` names it (None if the reader could not tell which), ``detail`` says what."""

    def __init__(self, column: str | None, path: str, detail: str) -> None:
        self.column, self.path, self.detail = column, path, detail
        where = f"value column {column!r}" if column is not None else "a value column"
        super().__init__(f"{where} of {path!r}: {detail}")


def _strip_compression(name: str) -> tuple[str, str | None]:
    """(name without a compression suffix, pyarrow codec name or None)."""
    lower = name.lower()
    for suffix, codec in _COMPRESSED.items():
        if lower.endswith(suffix):
            return lower[: -len(suffix)], codec
    return lower, None


def detect_format(path: str, explicit: str | None, role: str) -> str:
    """The format named explicitly, or the one the file name says (``x.csv.gz`` is csv)."""
    allowed = INPUT_FORMATS if role == "input" else OUTPUT_FORMATS
    if explicit is not None:
        if explicit not in allowed:
            raise ValueError(f"--{role}-format must be one of {', '.join(allowed)}; got {explicit!r}")
        return explicit
    name, _ = _strip_compression(path)
    for suffix, fmt in ((".csv", "csv"), (".tsv", "csv"), (".parquet", "parquet"), (".pq", "parquet"),
                        (".jsonl", "jsonl"), (".ndjson", "jsonl"), (".json", "jsonl")):
        if name.endswith(suffix):
            return fmt
    raise ValueError(
        f"cannot tell the {role} format from the name {path!r}; "
        f"pass --{role}-format with one of {', '.join(allowed)}"
    )


def csv_delimiter(path: str) -> str:
    """Tab for ``.tsv`` (under any compression suffix), else comma."""
    name, _ = _strip_compression(path)
    return "\t" if name.endswith(".tsv") else ","


@dataclass
class BatchSource:
    """Record batches of the needed columns, their schema (fixed before the first row), and
    how far into the input they are."""

    batches: Iterator[Any]
    schema: Any  # pyarrow schema of the needed columns, as every batch will have it
    progress: Callable[[], float | None]  # fraction of the input consumed, if known
    rows: int | None = None  # rows in the input, where the format says (Parquet metadata)

    def __repr__(self) -> str:
        return f"BatchSource(columns={self.schema.names})"


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
            source = _parquet(path, columns, batch_rows, value_types)
        elif fmt == "csv":
            source = _csv(path, columns, block_size, value_types)
        else:
            source = _jsonl(path, columns, block_size, value_types)
    except (ColumnError, InputError, ValueColumnError):
        raise
    except (pa.ArrowException, OSError, ValueError, EOFError) as exc:
        raise InputError(f"cannot read {path!r} as {fmt}: {_one_line(exc)}") from exc
    source.batches = _reading(path, fmt, source.batches)
    return source


def _one_line(exc: BaseException) -> str:
    """An exception's message on one line (pyarrow's span several: "...\nDeserializing page
    header failed."), for an error message that is one line."""
    return re.sub(r"\s*\n\s*", "; ", str(exc).strip())


def _reading(path: str, fmt: str, batches: Iterator[Any]) -> Iterator[Any]:
    """The batches, a reader's failure while iterating (a corrupt page, a truncated stream)
    turned into InputError with a one-line message."""
    pa = import_pyarrow()
    try:
        yield from batches
    except (ColumnError, InputError, ValueColumnError):
        raise
    except (pa.ArrowException, OSError, EOFError) as exc:
        raise InputError(f"cannot read {path!r} as {fmt}: {_one_line(exc)}") from exc
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()


def _check_columns(path: str, available: Sequence[str], columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in available]
    if missing:
        raise ColumnError(
            f"column(s) {', '.join(repr(c) for c in missing)} not found in {path!r}; "
            f"available columns: {', '.join(repr(c) for c in available)}"
        )
    ambiguous = [c for c in columns if list(available).count(c) > 1]
    if ambiguous:
        raise ColumnError(
            f"column(s) {', '.join(repr(c) for c in ambiguous)} appear more than once in the header "
            f"of {path!r}; rename the duplicates so each needed column is unambiguous"
        )


def _parquet(path: str, columns: Sequence[str], batch_rows: int, value_types: dict[str, Any]) -> BatchSource:
    import pyarrow.parquet as pq

    pa = import_pyarrow()
    handle = pq.ParquetFile(path)
    _check_columns(path, handle.schema_arrow.names, columns)
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
                array = _numbers(array, f.type, f.name, path, lambda i: f"in row {before + i + 1}")
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


class _LineTally:
    """Physical lines, and empty ones, of a text stream fed in pieces, as pyarrow's CSV parser
    splits them (a line ends at ``\\n``, ``\\r\\n`` or a lone ``\\r``). Comparing them with the
    rows parsed catches a quoted value that swallowed the lines after it (an unterminated
    quote), which pyarrow reads without complaint."""

    def __init__(self) -> None:
        self.lines = 0
        self.empty = 0
        self._at_line_start = True  # the next byte starts a line
        self._pending_cr = False  # the last piece ended with \r: a \n next belongs to it

    def feed(self, piece: bytes) -> None:
        if not piece:
            return
        if self._pending_cr and piece[:1] == b"\n":
            piece = piece[1:]  # the second half of a \r\n already counted
            self._pending_cr = False
            if not piece:
                return
        a = np.frombuffer(piece, dtype=np.uint8)
        lf = a == 10
        if b"\r" in piece:
            cr = a == 13
            cr_then_lf = np.zeros(a.size, dtype=bool)
            cr_then_lf[:-1] = cr[:-1] & lf[1:]
            lf_after_cr = np.zeros(a.size, dtype=bool)
            lf_after_cr[1:] = cr_then_lf[:-1]
            starts = np.flatnonzero(cr | (lf & ~lf_after_cr))
            ends = starts + 1 + cr_then_lf[starts]
        else:
            starts = np.flatnonzero(lf)
            ends = starts + 1
        if starts.size == 0:
            self._at_line_start = False
            self._pending_cr = False
            return
        previous_end = np.empty_like(ends)
        previous_end[0] = 0 if self._at_line_start else -1
        previous_end[1:] = ends[:-1]
        self.lines += int(starts.size)
        self.empty += int(np.count_nonzero(starts == previous_end))
        last_end = int(ends[-1])
        self._at_line_start = last_end == a.size
        self._pending_cr = self._at_line_start and piece[-1:] == b"\r"

    def finish(self) -> None:
        if not self._at_line_start:  # a last line without a line break
            self.lines += 1
            self._at_line_start = True


class _CountingReader(io.RawIOBase):
    """The (decompressed) input as pyarrow's CSV reader pulls it, block by block: tallies its
    lines and records, after each block, how far into the file on disk it is (for an honest
    progress bar: pyarrow reads dozens of blocks ahead of what it has parsed)."""

    def __init__(self, stream: Any, raw: Any) -> None:
        super().__init__()
        self._stream = stream
        self._raw = raw
        self.tally = _LineTally()
        self.positions: list[int] = []  # file offset after each block read
        self.eof = False
        self._stopped = False
        self._reading = 0  # reads in progress (pyarrow calls read() from threads of its own)
        self._idle = threading.Condition()
        _LIVE_SOURCES.add(self)

    def readable(self) -> bool:
        return True

    def stop(self, wait: float = 0.0) -> None:
        """From now on every read is an end of file, so that pyarrow's read-ahead comes to an end
        instead of waiting for more; then wait up to ``wait`` seconds for the reads in progress
        (one blocked on a slow input may last)."""
        with self._idle:
            self._stopped = True
            self._idle.wait_for(lambda: self._reading == 0, timeout=wait)

    def read(self, size: int = -1) -> bytes:
        with self._idle:
            if self._stopped:
                return b""
            self._reading += 1
        try:
            return self._read(size)
        finally:
            with self._idle:
                self._reading -= 1
                self._idle.notify_all()

    def _read(self, size: int) -> bytes:
        data = self._stream.read(size) if size is not None and size >= 0 else self._stream.read()
        data = bytes(data)
        if data:
            self.tally.feed(data)
            try:
                self.positions.append(self._raw.tell())
            except (OSError, ValueError):  # a progress estimate must never break the run
                pass
        else:
            self.tally.finish()
            self.eof = True
        return data

    def close(self) -> None:
        if self.closed:
            return
        self.stop(wait=_STOP_WAIT_S)  # never close the stream under a read in progress
        try:
            self._stream.close()
            if self._raw is not self._stream:
                self._raw.close()
        finally:
            super().close()


def _open_text(path: str) -> tuple[Any, Any]:
    """(decompressed stream, the file on disk) for a possibly compressed text file."""
    pa = import_pyarrow()
    _, codec = _strip_compression(path)
    raw = pa.OSFile(path, "rb")
    try:
        stream = pa.CompressedInputStream(raw, codec) if codec else raw
    except BaseException:
        raw.close()
        raise
    return stream, raw


def _csv_header(path: str, delimiter: str, block_size: int) -> list[str]:
    """The header's column names, from the first block only."""
    import pyarrow.csv as pcsv

    pa = import_pyarrow()

    stream, raw = _open_text(path)
    try:
        # In Arrow's memory, not a Python bytes object: the reader below may drop its last
        # reference on one of pyarrow's threads, and a buffer backed by a Python object needs the
        # GIL to be freed there (a deadlock if the process is exiting with the GIL held: C exit()
        # under libFuzzer did, in CI).
        block = stream.read_buffer(block_size)
        first = block.to_pybytes()
    finally:
        stream.close()
        if raw is not stream:
            raw.close()
    if not first.strip():
        raise InputError(f"{path!r} is empty: a CSV input needs a header line naming its columns")
    if b"\n" not in first and b"\r" not in first and len(first) >= block_size:
        raise InputError(f"the header line of {path!r} is longer than the block size ({block_size} bytes); "
                         "raise it with --block-size")
    # pyarrow parses a first batch when it opens a file: give it whole lines only (the header
    # line, or every complete line of the block if the header's quotes span a line break).
    ends = [i for i in (first.find(b"\n"), first.find(b"\r")) if i >= 0]
    end = min(ends) if ends else -1
    if end >= 0 and first[:end].count(b'"') % 2 == 0:
        first = first[: end + 1]
    elif len(first) >= block_size:
        first = first[: max(first.rfind(b"\n"), first.rfind(b"\r")) + 1]
    header = pcsv.open_csv(
        pa.BufferReader(block.slice(0, len(first))),  # Arrow's memory: no pyarrow thread needs Python
        read_options=pcsv.ReadOptions(block_size=max(len(first), 1)),
        parse_options=pcsv.ParseOptions(delimiter=delimiter),
        convert_options=pcsv.ConvertOptions(include_columns=[]),
    )
    names = list(header.schema.names)
    header.close()
    return names


def _numbers(array: Any, typ: Any, column: str, path: str, where: Callable[[int], str]) -> Any:
    """``array`` (text, or numbers of another type) as ``typ``, or ValueColumnError naming the
    column, the first value that does not convert and ``where(its index)``. Text is read as
    written: a decimal integer for int64 (no sign '+', no hexadecimal), a decimal or exponent
    number, nan or inf for float64."""
    pa = import_pyarrow()
    import pyarrow.compute as pc

    def converts(part: Any) -> bool:
        try:
            part.cast(typ)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return False
        if pa.types.is_string(part.type) and pa.types.is_integer(typ):
            return bool(pc.all(pc.match_substring_regex(part, r"^-?[0-9]+$")).as_py() in (True, None))
        return True

    if converts(array):
        return array.cast(typ)
    lo, hi = 0, len(array)  # the first value that does not convert: in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if converts(array.slice(lo, mid - lo)):
            lo = mid
        else:
            hi = mid
    value = array[lo].as_py()
    raise ValueColumnError(column, path, f"the value {value!r} {where(lo)} cannot be read as {typ}")


def _csv_conversion_error(exc: BaseException, path: str, header: Sequence[str],
                          value_columns: Collection[str] = ()) -> ValueColumnError | InputError | None:
    """What a pyarrow CSV conversion error means, naming the column from the header: a value
    column (``value_columns``) holding something that is not a number of its type is a
    ValueColumnError; any other column is read as text, so its conversion error is bytes that
    are not UTF-8 (an InputError). None for any other error."""
    text = str(exc)
    if "conversion error" not in text:
        return None
    match = re.search(r"CSV column #(\d+)", text)
    index = int(match.group(1)) if match else -1
    column = header[index] if 0 <= index < len(header) else None
    detail = _one_line(re.sub(r"^In CSV column #\d+: ", "", text))
    if column is None or column in value_columns:
        return ValueColumnError(column, path, detail)
    return InputError(f"cannot read {path!r} as csv: column {column!r}: {detail} (the input must be UTF-8 text)")


def _csv(path: str, columns: Sequence[str], block_size: int, value_types: dict[str, Any]) -> BatchSource:
    """CSV, possibly compressed (by extension), read block by block with pyarrow."""
    pa = import_pyarrow()
    import pyarrow.csv as pcsv

    delimiter = csv_delimiter(path)
    header = _csv_header(path, delimiter, block_size)
    _check_columns(path, header, columns)
    size = os.path.getsize(path)
    stream, raw = _open_text(path)
    source = _CountingReader(stream, raw)
    # Keys are read as text: no type guess from the first block can be contradicted by a
    # later one, and "007" and "7" stay different keys. An empty cell is a null. Value
    # columns are read as text too, then converted to the number type asked for batch by batch
    # (a value that does not convert is reported with its row, and the reader stops cleanly).
    # Ctrl-C must stop the run the way SIGTERM does, through Python's handler once open_csv has
    # returned: pyarrow's own temporary SIGINT handler cancels open_csv midway, leaving tasks of
    # its thread pools behind, which abort the process at exit ("terminate called").
    pa.enable_signal_handlers(False)
    try:
        reader = pcsv.open_csv(
            source,
            read_options=pcsv.ReadOptions(block_size=block_size, use_threads=True),
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
    except BaseException as exc:
        source.stop()  # pyarrow may already be reading ahead: end the input for it
        source.close()
        conversion = _csv_conversion_error(exc, path, header, value_types) if isinstance(exc, pa.ArrowInvalid) else None
        if conversion is not None:
            raise conversion from exc
        raise
    schema = pa.schema([pa.field(c, value_types.get(c, pa.string())) for c in columns])
    consumed = [0]

    def convert(batch: Any, before: int) -> Any:
        if not value_types:
            return batch
        return pa.record_batch([
            _numbers(batch.column(c), value_types[c], c, path,
                     lambda i: f"in data row {before + i + 1} (after the header)") if c in value_types
            else batch.column(c) for c in columns], schema=schema)

    def position() -> float | None:
        # After k batches the parser has used about k + 1 blocks (a block's last line is
        # completed by the next one); the reader's read-ahead is not progress.
        if not size or not source.positions:
            return None
        index = min(consumed[0], len(source.positions) - 1)
        return min(1.0, source.positions[index] / size)

    guard = _CsvReader(reader, source)

    def batches() -> Iterator[Any]:
        rows = 0
        try:
            while True:
                try:
                    batch = guard.next()
                except StopIteration:
                    break
                consumed[0] += 1
                converted = convert(batch.select(list(columns)), rows)
                rows += batch.num_rows
                yield converted
            expected = source.tally.lines - source.tally.empty - 1  # minus the header
            if source.eof and rows != expected:
                raise InputError(
                    f"{path!r}: read {rows} rows but the file has {expected} non-empty lines after the "
                    "header: a quoted value spans several lines (an unterminated quote, or a line break "
                    "inside quotes, which dpselect does not read). Fix the quoting; nothing was released."
                )
        except pa.ArrowInvalid as exc:
            if "straddling" in str(exc):
                raise InputError(f"{path!r}: a row is longer than the block size ({block_size} bytes); "
                                 "raise it with --block-size") from exc
            conversion = _csv_conversion_error(exc, path, header, value_types)
            if conversion is not None:
                raise conversion from exc
            raise
        finally:
            guard.finish()

    return BatchSource(batches(), schema, position)


class _CsvReader:
    """pyarrow's streaming CSV reader over a _CountingReader, with an end that leaves no
    pyarrow thread inside Python. Its read-ahead threads call the source's read() on their own;
    one still doing so when the interpreter finalizes is a fatal error (SIGABRT), so a reader
    stopped early (an error, Ctrl-C, SIGTERM) is ended for them and drained, by whoever stops
    it first: the batches' generator, or at the latest an atexit hook (which runs before
    finalization, even when the generator was never started)."""

    def __init__(self, reader: Any, source: _CountingReader) -> None:
        self._reader = reader
        self._source = source
        self._lock = threading.Lock()
        self._done = False
        _LIVE_CSV_READERS.add(self)

    def next(self) -> Any:
        with self._lock:
            if self._done:
                raise StopIteration
            return self._reader.read_next_batch()

    def finish(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
            self._source.stop()  # every read from now on is an end of file...
            try:
                while True:  # ...so the read-ahead ends once what it holds is drained
                    self._reader.read_next_batch()
            except Exception:  # noqa: BLE001 - StopIteration at the end; a cut last line
                pass
            finally:
                self._reader.close()
                self._source.close()


_LIVE_CSV_READERS: weakref.WeakSet[_CsvReader] = weakref.WeakSet()
_LIVE_SOURCES: weakref.WeakSet[_CountingReader] = weakref.WeakSet()
# How long a stop waits for a read in progress (a slow input may block one much longer).
_STOP_WAIT_S = 5.0


@atexit.register
def _finish_csv_readers() -> None:
    """Before the interpreter finalizes: end every CSV input pyarrow may still be reading
    ahead, so that none of its threads is inside Python then."""
    for reader in list(_LIVE_CSV_READERS):
        reader.finish()
    for source in list(_LIVE_SOURCES):
        source.stop(wait=_STOP_WAIT_S)


def _jsonl(path: str, columns: Sequence[str], block_size: int, value_types: dict[str, Any]) -> BatchSource:
    """JSON lines, possibly compressed. Parsed with the json module so that each needed value is
    kept as text, as written (a number's literal, a string's content; true/false; an array or
    object as compact JSON): pyarrow's reader infers types from the values, so one unreleased
    2.5 would turn every released 1 into 1.0, and one string among numbers would fail the run.
    A value column is converted from that text to its number type (a JSON number, or a string
    holding one; null or a missing field is a null)."""
    pa = import_pyarrow()
    size = os.path.getsize(path)
    stream, raw = _open_text(path)
    schema = pa.schema([pa.field(c, value_types.get(c, pa.string())) for c in columns])
    position = [0]
    # One decoder for every line (json.loads with hooks would build one per call).
    decode = json.JSONDecoder(parse_int=str, parse_float=str, parse_constant=str).decode

    def as_text(value: Any, line: str, name: str) -> str | None:
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, bool):
            return "true" if value else "false"
        # An array or object: its compact JSON text (parsed again without the number hooks,
        # so numbers inside it are written as numbers).
        return json.dumps(json.loads(line)[name], separators=(",", ":"), ensure_ascii=False)

    def column(objs: list[dict[str, Any]], lines: list[str], name: str, first: int) -> Any:
        values = [obj.get(name) for obj in objs]
        try:
            text = pa.array(values, pa.string())
        except (pa.ArrowTypeError, pa.ArrowInvalid):  # booleans, arrays or objects among them
            text = pa.array([as_text(v, line, name) for v, line in zip(values, lines)], pa.string())
        if name not in value_types:
            return text
        return _numbers(text, value_types[name], name, path, lambda i: f"on line {first + i} (or after it, past empty lines)")

    def parse(text: str, first: int) -> tuple[list[dict[str, Any]], list[str]]:
        objs: list[dict[str, Any]] = []
        kept: list[str] = []
        for offset, line in enumerate(text.split("\n")):
            try:
                obj = decode(line)
            except ValueError as exc:
                if not line.strip():
                    continue  # an empty line
                raise InputError(f"{path!r} line {first + offset}: not valid JSON ({exc})") from exc
            if type(obj) is not dict:
                raise InputError(f"{path!r} line {first + offset}: expected a JSON object, got {type(obj).__name__}")
            objs.append(obj)
            kept.append(line)
        return objs, kept

    def batches() -> Iterator[Any]:
        number = 1  # of the first line not yet parsed
        tail = b""
        try:
            while True:
                chunk = bytes(stream.read(block_size))
                try:
                    position[0] = raw.tell()
                except (OSError, ValueError):
                    pass
                data = tail + chunk
                if chunk:  # parse whole lines only; the tail waits for the next block
                    cut = data.rfind(b"\n")
                    if cut < 0:
                        tail = data
                        continue
                    data, tail = data[:cut], data[cut + 1:]
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError as exc:
                    bad = number + data[: exc.start].count(b"\n")
                    raise InputError(f"{path!r} line {bad}: not UTF-8 text") from exc
                number += data.count(b"\n") + 1
                first = number - data.count(b"\n") - 1
                objs, lines = parse(text, first) if text else ([], [])
                if objs:
                    # One batch per block, holding only the needed columns: the parsed
                    # objects (every field of every line) are dropped at once.
                    yield pa.record_batch([column(objs, lines, c, first) for c in columns], schema=schema)
                if not chunk:
                    break
        finally:
            stream.close()
            if raw is not stream:
                raw.close()

    return BatchSource(batches(), schema, lambda: min(1.0, position[0] / size) if size else None)


def read_ahead(batches: Iterator[Any]) -> Iterator[Any]:
    """The same batches, the next one read (parsed, decompressed) on a thread of its own while
    the caller counts the current one. Exceptions of the reader come out here, in order; when
    the caller stops early (an error, a signal), the reader stops after its current batch."""
    done = object()
    slots: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(item: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                slots.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for batch in batches:
                if not put(("batch", batch)):
                    return
            put(("end", done))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            put(("error", exc))
        finally:
            # Close the source here and now (pyarrow's reader, the file), not when it is garbage
            # collected: that may be at interpreter exit, when pyarrow's threads still reading
            # ahead can no longer call back into Python (a fatal error, SIGABRT).
            close = getattr(batches, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001 - the source's own error was already handed over
                    pass

    reader = threading.Thread(target=read, name="dpselect-reader", daemon=True)
    reader.start()
    try:
        while True:
            kind, item = slots.get()
            if kind == "end":
                return
            if kind == "error":
                raise item
            yield item
    finally:
        stop.set()
        # A reader blocked on a slow input (a pipe) must not hold up an exit: it is a daemon.
        reader.join(timeout=1.0)


def _meminfo_available() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (Linux), None elsewhere."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> int | None:
    """What this process's cgroup (v2) may still allocate, when it has a memory limit: a
    container's limit is not in /proc/meminfo, which shows the host's memory."""
    try:
        with open("/proc/self/cgroup") as f:
            path = next((line.strip().split(":", 2)[2] for line in f if line.startswith("0::")), None)
        if path is None:
            return None
        base = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
        with open(os.path.join(base, "memory.max")) as f:
            limit = f.read().strip()
        if limit == "max":
            return None
        with open(os.path.join(base, "memory.current")) as f:
            used = int(f.read().strip())
        return max(0, int(limit) - used)
    except (OSError, ValueError, IndexError):
        return None


def in_memory_budget() -> int:
    """Bytes the CLI may hold to count an input whole (the needed columns in Arrow layout plus
    the grouping's bytes a row), rather than streaming it: half of the memory available when the
    run starts (the smaller of MemAvailable and what a cgroup limit leaves), so the whole-input
    path never pushes a job into swap or the OOM killer; 0 (always stream) where neither can be
    read. ``DPSELECT_IN_MEMORY_BYTES`` overrides it (0 streams every input)."""
    override = os.environ.get(IN_MEMORY_ENV)
    if override is not None:
        try:
            value = int(override)
        except ValueError:
            raise ValueError(f"{IN_MEMORY_ENV} must be a whole number of bytes >= 0, got {override!r}") from None
        if value < 0:
            raise ValueError(f"{IN_MEMORY_ENV} must be a whole number of bytes >= 0, got {override!r}")
        return value
    rooms = [room for room in (_meminfo_available(), _cgroup_room()) if room is not None]
    return min(rooms) // 2 if rooms else 0


# 10 ** k for k = 0..19: the canonical decimal text of a magnitude m of L digits has
# 10 ** (L - 1) <= m < 10 ** L (and "0" has one digit).
_POWERS_OF_TEN = np.array([10 ** k for k in range(20)], dtype=np.uint64)


def _decimal_chunk(array: Any) -> Any:
    """One string array of ids as int64, or None unless every value is the canonical decimal text
    of an int64 (digits, an optional leading '-', no leading zero, no '+', no '-0', no space)."""
    pa = import_pyarrow()
    n = len(array)
    if array.null_count or not n:
        return None
    _, offsets_buffer, data_buffer = array.buffers()
    wide = pa.types.is_large_string(array.type)
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64 if wide else np.int32)[array.offset: array.offset + n + 1]
    lengths = np.diff(offsets)
    if int(lengths.min()) < 1 or int(lengths.max()) > 20:
        return None
    data = np.frombuffer(data_buffer, dtype=np.uint8)[int(offsets[0]): int(offsets[-1])] \
        if data_buffer is not None else np.zeros(0, dtype=np.uint8)
    # Only digits and '-': rules out '+', spaces, hexadecimal, exponents, whatever else a
    # number parser may accept; with them, a text is canonical iff it has its value's length.
    if not bool(np.all((data - np.uint8(48) < 10) | (data == 45))):
        return None
    try:
        values = array.cast(pa.int64())  # a '-' anywhere but first, or a value out of range, fails
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    v = np.frombuffer(values.buffers()[1], dtype=np.int64)[values.offset: values.offset + n]
    negative = v < 0
    magnitude = v.view(np.uint64).copy()
    np.negative(magnitude, out=magnitude, where=negative)  # modulo 2**64: exact, also for -2**63
    digits = lengths - negative
    if int(digits.min()) < 1 or int(digits.max()) > 19:
        return None
    ok = (magnitude < _POWERS_OF_TEN[digits]) & ((digits == 1) | (magnitude >= _POWERS_OF_TEN[digits - 1]))
    return values if bool(np.all(ok)) else None


def decimal_ids(column: Any) -> Any:
    """A text column of ids (as the CSV reader gives privacy units) as int64 when every value is
    the canonical decimal text of an int64, else None. The map from canonical text to number is
    one to one, so the same rows have the same person either way ("007" and "7" are two people:
    such a column stays text); an integer column lets a whole input be grouped by radix buckets
    (dpselect.ingest._radix). A column with nulls stays text (the counter refuses or drops them)."""
    pa = import_pyarrow()
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return None
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    converted = []
    for chunk in chunks:
        if len(chunk) == 0:
            continue
        values = _decimal_chunk(chunk)
        if values is None:
            return None
        converted.append(values)
    return pa.chunked_array(converted, type=pa.int64())


def coalesce(batches: Iterator[Any], min_rows: Callable[[], int]) -> Iterator[Any]:
    """Group consecutive batches into tables of at least ``min_rows()`` rows (the last may be
    smaller): a reader's small blocks become batches large enough that the per-batch overhead
    (thread hand-off, Arrow calls) is small beside the per-row work."""
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
