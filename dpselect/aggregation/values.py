"""Value columns of a GROUP BY (what sums and means read): their types checked from the schema
before any work, their values read in place from Arrow memory."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dpselect._threads import current
from dpselect._workers import run_pieces
from dpselect.aggregation.grid import Grid
from dpselect.ingest.rows import import_pyarrow

__all__ = ["ValueColumn", "check_value_types", "is_integer_type"]

# Rows per step when value columns are converted: the float temporaries of one step stay small.
_STEP_ROWS = 1 << 20
_INT64_MAX = np.iinfo(np.int64).max


def is_integer_type(arrow_type: Any) -> bool:
    return bool(import_pyarrow().types.is_integer(arrow_type))


def check_value_types(schema: Any, columns: Sequence[str]) -> dict[str, bool]:
    """Each value column's type checked from the schema alone (integers or float32/float64):
    {column: is integer}. A TypeError names the column and its role."""
    pa = import_pyarrow()
    integer = {}
    for column in columns:
        typ = schema.field(column).type
        if not (pa.types.is_integer(typ) or pa.types.is_floating(typ)) or pa.types.is_float16(typ):
            raise TypeError(f"value column {column!r} (read by a sum or mean metric) must hold integers or floats "
                            f"(float32/float64), got {typ}: cast it first")
        integer[column] = pa.types.is_integer(typ)
    return integer


class ValueColumn:
    """A numeric value column read in place from its Arrow chunks (no copy of the whole column,
    except uint64, held as int64 with values above 2^63 − 1 saturated — beyond any bound, so
    clamping gives the same result), checked: no nulls, no NaN or infinity."""

    def __init__(self, batch: Any, column: str) -> None:
        pa = import_pyarrow()
        col = batch.column(column)
        check_value_types(batch.schema, [column])
        if col.null_count:
            raise ValueError(f"value column {column!r} has {col.null_count} null value(s) (a pandas NaN is one): "
                             "drop or fill them before aggregating (a null is not a number to sum)")
        self.name = column
        self.integer = pa.types.is_integer(col.type)
        chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
        self.chunks = [self._numbers(c.to_numpy(zero_copy_only=False)) for c in chunks if len(c)]
        self.size = sum(c.size for c in self.chunks)

    def _numbers(self, chunk: npt.NDArray[Any]) -> npt.NDArray[Any]:
        if chunk.dtype.kind == "f":
            bad = int(np.count_nonzero(~np.isfinite(chunk)))
            if bad:
                raise ValueError(f"value column {self.name!r} has {bad} NaN or infinite value(s): drop or impute "
                                 "them before aggregating")
        elif chunk.dtype == np.uint64:
            return np.minimum(chunk, np.uint64(_INT64_MAX)).astype(np.int64)
        return chunk

    def steps(self) -> Iterator[tuple[int, npt.NDArray[Any]]]:
        """(start row, values) in steps of at most _STEP_ROWS rows."""
        start = 0
        for chunk in self.chunks:
            for offset in range(0, chunk.size, _STEP_ROWS):
                piece = chunk[offset:offset + _STEP_ROWS]
                yield start + offset, piece
            start += chunk.size

    def units(self, grid: Grid) -> npt.NDArray[np.int64]:
        """Every value clamped and snapped to ``grid``, as int64 grid units: the steps on every
        thread (numpy releases the GIL in its loops), each writing its own rows."""
        out = np.empty(self.size, dtype=np.int64)
        steps = list(self.steps())
        threads = max(1, min(current(), len(steps)))

        def convert(share: list[tuple[int, npt.NDArray[Any]]]) -> None:
            for start, piece in share:
                out[start:start + piece.size] = grid.to_units(piece, name=f"value column {self.name!r}")

        run_pieces(convert, [(steps[t::threads],) for t in range(threads)], threads > 1)
        return out

    def take(self, kept: npt.NDArray[np.uint8]) -> npt.NDArray[Any]:
        """The values of the rows marked in ``kept`` (0 or 1 each), in row order: int64 for
        integer columns, else float64. The steps on every thread, a contiguous share each, each
        step writing its own span of the output (its start from the kept rows of the steps before
        it)."""
        dtype = np.float64 if not self.integer else np.int64
        steps = list(self.steps())
        masks = [kept[start:start + piece.size].view(bool) for start, piece in steps]
        threads = max(1, min(current(), len(steps)))
        shares = [range(len(steps) * t // threads, len(steps) * (t + 1) // threads) for t in range(threads)]
        counted = run_pieces(lambda share: [int(np.count_nonzero(masks[i])) for i in share],
                             [(share,) for share in shares], threads > 1)
        ends = np.cumsum([c for share in counted for c in share], dtype=np.int64)  # steps in order
        out = np.empty(int(ends[-1]) if steps else 0, dtype=dtype)

        def gather(share: range) -> None:
            for i in share:
                out[ends[i - 1] if i else 0:ends[i]] = steps[i][1][masks[i]]

        run_pieces(gather, [(share,) for share in shares], threads > 1)
        return out
