"""Privacy units read as text (as CSV gives them) turned into 64-bit integers where that is
exactly the same partition of the rows into people (:func:`decimal_ids`). Public names are
re-exported by :mod:`dpselect.io.files`."""
from __future__ import annotations

from typing import Any

import numpy as np

from dpselect.ingest.rows import import_pyarrow

__all__ = ["decimal_ids"]

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
    (dpselect.ingest.radix). A column with nulls stays text (the counter refuses or drops them)."""
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
