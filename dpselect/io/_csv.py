"""CSV inputs, possibly compressed (by extension), read block by block with pyarrow's streaming
reader.

Every column is read as text (as written): no type guess from the first block can be contradicted
by a later one, and "007" and "7" stay different keys; value columns are then converted to the
number type asked for, batch by batch. pyarrow's reader reads ahead on threads of its own, which
must never be inside Python when the interpreter finalizes: a reader stopped early is ended and
drained (:class:`_CsvReader`), at the latest by an ``atexit`` hook. An unterminated quote, which
pyarrow reads without complaint, is caught by counting the file's lines (:class:`_LineTally`).
"""
from __future__ import annotations

import atexit
import io
import os
import re
import threading
import weakref
from collections.abc import Collection, Iterator, Sequence
from typing import Any

import numpy as np

from dpselect.ingest.rows import import_pyarrow
from dpselect.io._formats import csv_delimiter
from dpselect.io._source import (
    BatchSource,
    InputError,
    ValueColumnError,
    check_columns,
    one_line,
    open_text,
    to_numbers,
)

__all__ = ["csv_source"]


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


def _csv_header(path: str, delimiter: str, block_size: int) -> list[str]:
    """The header's column names, from the first block only."""
    import pyarrow.csv as pcsv

    pa = import_pyarrow()

    stream, raw = open_text(path)
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
    detail = one_line(re.sub(r"^In CSV column #\d+: ", "", text))
    if column is None or column in value_columns:
        return ValueColumnError(column, path, detail)
    return InputError(f"cannot read {path!r} as csv: column {column!r}: {detail} (the input must be UTF-8 text)")


def csv_source(path: str, columns: Sequence[str], block_size: int, value_types: dict[str, Any]) -> BatchSource:
    """CSV, possibly compressed (by extension), read block by block with pyarrow."""
    pa = import_pyarrow()
    delimiter = csv_delimiter(path)
    header = _csv_header(path, delimiter, block_size)
    check_columns(path, header, columns)
    size = os.path.getsize(path)
    stream, raw = open_text(path)
    source = _CountingReader(stream, raw)
    reader = _open_reader(source, path, header, columns, delimiter, block_size, value_types)
    schema = pa.schema([pa.field(c, value_types.get(c, pa.string())) for c in columns])
    consumed = [0]

    def convert(batch: Any, before: int) -> Any:
        if not value_types:
            return batch
        return pa.record_batch([
            to_numbers(batch.column(c), value_types[c], c, path,
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
            _check_every_line_read(source, rows, path)
        except pa.ArrowInvalid as exc:
            error = _read_error(exc, path, header, value_types, block_size)
            if error is not None:
                raise error from exc
            raise
        finally:
            guard.finish()

    return BatchSource(batches(), schema, position)


def _open_reader(source: _CountingReader, path: str, header: Sequence[str], columns: Sequence[str], delimiter: str,
                 block_size: int, value_types: dict[str, Any]) -> Any:
    """pyarrow's streaming reader of the needed columns, all read as text; on a failure, the
    input ended for pyarrow's read-ahead and closed, and a conversion error named after its
    column."""
    pa = import_pyarrow()
    import pyarrow.csv as pcsv

    # Keys are read as text: no type guess from the first block can be contradicted by a
    # later one, and "007" and "7" stay different keys. An empty cell is a null. Value
    # columns are read as text too, then converted to the number type asked for batch by batch
    # (a value that does not convert is reported with its row, and the reader stops cleanly).
    # Ctrl-C must stop the run the way SIGTERM does, through Python's handler once open_csv has
    # returned: pyarrow's own temporary SIGINT handler cancels open_csv midway, leaving tasks of
    # its thread pools behind, which abort the process at exit ("terminate called").
    pa.enable_signal_handlers(False)
    try:
        return pcsv.open_csv(
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


def _check_every_line_read(source: _CountingReader, rows: int, path: str) -> None:
    """At the end of the file, every non-empty line after the header must have been one row."""
    expected = source.tally.lines - source.tally.empty - 1  # minus the header
    if source.eof and rows != expected:
        raise InputError(
            f"{path!r}: read {rows} rows but the file has {expected} non-empty lines after the "
            "header: a quoted value spans several lines (an unterminated quote, or a line break "
            "inside quotes, which dpselect does not read). Fix the quoting; nothing was released."
        )


def _read_error(exc: BaseException, path: str, header: Sequence[str], value_types: dict[str, Any],
                block_size: int) -> InputError | ValueColumnError | None:
    """What a pyarrow error while reading means for the user (None: nothing more to say)."""
    if "straddling" in str(exc):
        return InputError(f"{path!r}: a row is longer than the block size ({block_size} bytes); "
                          "raise it with --block-size")
    return _csv_conversion_error(exc, path, header, value_types)


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
