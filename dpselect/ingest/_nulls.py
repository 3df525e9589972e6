"""Rows whose privacy unit is null: they belong to no known person.

Treating all such rows as one user would let a new person with a missing id change which
partitions that merged "user" keeps, moving up to 2κ counts. By default they are counted and the
counter refuses to go on (:class:`NullPrivacyUnitError`, before any randomness is drawn or output
exists); with ``null_privacy_units="drop"`` they are left out and counted exactly, for the data
holder only (docs/rows.md). Public names are re-exported by :mod:`dpselect.ingest.rows`.
"""
from __future__ import annotations

from typing import Any, Literal

from dpselect.errors import DPSelectError, DPSelectWarning
from dpselect.ingest._types import import_pyarrow

__all__ = ["NULL_PRIVACY_UNITS", "NullPolicy", "NullPrivacyUnitError", "NullPrivacyUnitsDropped", "null_count",
           "without_null_units"]

NullPolicy = Literal["error", "drop"]
NULL_PRIVACY_UNITS: tuple[str, ...] = ("error", "drop")


class NullPrivacyUnitError(DPSelectError, ValueError):
    """Rows whose privacy unit is null: they belong to no known person. ``rows`` is how many."""

    def __init__(self, column: str, rows: int) -> None:
        self.column, self.rows = column, rows
        super().__init__(
            f"{rows} row(s) have a null privacy unit in column {column!r}; a null is not one "
            "person (merging them would let one new person change which partitions that merged "
            "'user' keeps). Fill in the ids, or pass null_privacy_units='drop' to leave these "
            "rows out (the number dropped is then reported as a warning, for you only: it is "
            "exact, not differentially private)."
        )


class NullPrivacyUnitsDropped(DPSelectWarning):
    """Rows with a null privacy unit were dropped (``null_privacy_units="drop"``). The count in
    the message is exact and NOT differentially private: it is for the data holder only."""


def null_count(column: Any) -> int:
    """Rows whose value is null. A dictionary column's null_count counts null indices only: an
    index pointing at a null dictionary value (``dictionary_encode(null_encoding="encode")``) is a
    null too, which pyarrow's is_null sees."""
    pa = import_pyarrow()
    if pa.types.is_dictionary(column.type):
        import pyarrow.compute as pc

        return int(pc.sum(pc.is_null(column), min_count=0).as_py())
    return int(column.null_count)


def without_null_units(batch: Any, units: Any) -> Any:
    """The rows of ``batch`` whose privacy unit (``units``, its column) is not null. pyarrow has
    no filter (take) kernel for string and binary views: such columns are first made plain large
    strings and binaries, the type :func:`key_type` gives them anyway."""
    pa = import_pyarrow()
    plain = {pa.string_view(): pa.large_string(), pa.binary_view(): pa.large_binary()}
    if any(f.type in plain for f in batch.schema):
        batch = batch.cast(pa.schema([f.with_type(plain.get(f.type, f.type)) for f in batch.schema]))
    return batch.filter(pa.compute.is_valid(units))
