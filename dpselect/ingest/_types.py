"""The Arrow types the raw-rows path reads, checked from the schema alone.

Whether a job can run must never depend on one person's values, so every column is judged by
its declared type before any row is read (:func:`check_column_types`). Keys may be of any scalar
Arrow type that compares exactly (strings, integers, dates, decimals, …); privacy units are
integers, strings or bytes (a float id could merge ``0.0`` and ``-0.0``, two people). Public
names are re-exported by :mod:`dpselect.ingest.rows`.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from dpselect.errors import DPSelectError

__all__ = ["ColumnTypeError", "check_column_types", "import_pyarrow", "key_type"]


def import_pyarrow() -> Any:
    """pyarrow, or an ImportError that says which extra to install."""
    try:
        import pyarrow
        import pyarrow.compute
    except ImportError as exc:  # pragma: no cover - exercised only without pyarrow
        raise ImportError(
            "dpselect needs pyarrow to read rows and DataFrames: pip install 'dpselect[arrow]'"
        ) from exc
    return pyarrow


class ColumnTypeError(DPSelectError, TypeError):
    """A privacy-unit or key column has a type dpselect cannot use. Raised from the schema
    alone, before any row is read. ``column`` names the column, ``reason`` says why."""

    def __init__(self, column: str, role: str, typ: object, reason: str) -> None:
        self.column, self.role, self.type, self.reason = column, role, typ, reason
        super().__init__(f"{role} column {column!r} has type {typ}: {reason}")


def _scalar_kind(typ: Any) -> str | None:
    """"unit-ok" / "key-ok" / None (refused) for a non-dictionary Arrow type."""
    pa = import_pyarrow()
    t = pa.types
    if t.is_null(typ) or t.is_integer(typ) or t.is_string(typ) or t.is_large_string(typ) \
            or t.is_binary(typ) or t.is_large_binary(typ) or t.is_fixed_size_binary(typ) \
            or typ in (pa.string_view(), pa.binary_view()):
        return "unit-ok"
    if t.is_boolean(typ) or typ in (pa.float32(), pa.float64()) or t.is_decimal(typ) \
            or t.is_date(typ) or t.is_time(typ) or t.is_timestamp(typ) or t.is_duration(typ):
        return "key-ok"
    return None


def _refusal(typ: Any) -> str:
    """Why a key type is refused, with what to do instead."""
    pa = import_pyarrow()
    t = pa.types
    if isinstance(typ, pa.BaseExtensionType):
        return (f"extension types (here {typ.extension_name!r}) are not read as keys; cast the "
                f"column to its storage type ({typ.storage_type}) or to strings first")
    if t.is_float16(typ):
        return "half-precision floats are not supported as keys; cast the column to float32 or float64"
    if t.is_interval(typ):
        return "intervals have no total order and are not supported as keys; cast them to strings"
    if t.is_nested(typ) or t.is_union(typ):
        return "keys must be scalar values; flatten the column or cast it to strings"
    return "this type is not supported as a key; cast the column to strings, integers or dates"


def key_type(typ: Any) -> Any:
    """The type key values have inside dpselect (and in results): a dictionary column (a pandas
    categorical, a Polars Categorical) is decoded, and views become plain strings/binaries."""
    pa = import_pyarrow()
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    if typ == pa.string_view():
        return pa.large_string()
    if typ == pa.binary_view():
        return pa.large_binary()
    return typ


def check_column_types(schema: Any, privacy_unit: str, by: Sequence[str]) -> None:
    """Refuse, from the schema alone, columns dpselect cannot use (:class:`ColumnTypeError`,
    naming the column). Run before any row is read, so that whether a job runs depends only on
    the declared types, never on one person's values."""
    pa = import_pyarrow()
    for name in [privacy_unit, *by]:
        role = "privacy_unit" if name == privacy_unit else "by"
        declared = schema.field(name).type
        typ = declared.value_type if pa.types.is_dictionary(declared) else declared
        kind = _scalar_kind(typ)
        if role == "privacy_unit" and kind != "unit-ok":
            if pa.types.is_floating(typ):
                reason = ("a privacy unit must be an integer, string or bytes id: float ids "
                          "would make 0.0 and -0.0 (and NaNs) one person or two at random; cast "
                          "the column to integers or strings first")
            else:
                reason = ("a privacy unit must be an integer, string or bytes id; cast the "
                          "column to integers or strings first")
            raise ColumnTypeError(name, role, declared, reason)
        if kind is None:
            raise ColumnTypeError(name, role, declared, _refusal(typ))
