"""What every reader of :mod:`dpselect.io.files` shares: its errors, the batches it gives
(:class:`BatchSource`), the checks of the needed columns, compressed text streams, and the
conversion of value columns to the number type asked for. Public names are re-exported by
:mod:`dpselect.io.files`."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dpselect.errors import DPSelectError
from dpselect.ingest.rows import import_pyarrow
from dpselect.io._formats import strip_compression

__all__ = ["DEFAULT_BLOCK_SIZE", "BatchSource", "ColumnError", "InputError", "ValueColumnError", "check_columns",
           "one_line", "open_text", "to_numbers"]

# pyarrow's default. The streaming CSV reader keeps about 32 + (threads) blocks in flight
# (read-ahead), so this bounds the reader's memory; a row must fit in one block.
DEFAULT_BLOCK_SIZE = 1 << 20


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


def one_line(exc: BaseException | str) -> str:
    """An exception's message on one line (pyarrow's span several: "...\nDeserializing page
    header failed."), for an error message that is one line."""
    return re.sub(r"\s*\n\s*", "; ", str(exc).strip())


def check_columns(path: str, available: Sequence[str], columns: Sequence[str]) -> None:
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


def open_text(path: str) -> tuple[Any, Any]:
    """(decompressed stream, the file on disk) for a possibly compressed text file."""
    pa = import_pyarrow()
    _, codec = strip_compression(path)
    raw = pa.OSFile(path, "rb")
    try:
        stream = pa.CompressedInputStream(raw, codec) if codec else raw
    except BaseException:
        raw.close()
        raise
    return stream, raw


def to_numbers(array: Any, typ: Any, column: str, path: str, where: Callable[[int], str]) -> Any:
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
