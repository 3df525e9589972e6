"""Raw rows → distinct users per partition, each user bounded to κ partitions.

The expensive part of a real job is not the decision but what comes before it. Here:

1. **Check the column types** (:func:`check_column_types`), from the schema alone, before any
   row is read: whether a job can run must never depend on one person's values. Keys may be of
   any scalar Arrow type that compares exactly (strings, integers, dates, decimals, …); privacy
   units are integers, strings or bytes (a float id could merge ``0.0`` and ``-0.0``, two people).
2. **Factorize** every column to dense integer codes in C, reading the Arrow buffers
   directly (:class:`KeyFactorizer`, csrc/keymap.h): one persistent code map per column, so
   that rows can arrive in any number of batches. **A null is a key like any other** (all
   nulls of a column form one partition) and so is NaN (every NaN of a column is one key).
   Several ``by`` columns form one composite key (GROUP BY a, b), factorized pairwise.
3. **A null privacy unit is not a person.** Treating all such rows as one user would let a new
   person with a missing id change which partitions that merged "user" keeps, moving up to 2κ
   counts. By default the rows are counted and :meth:`RowCounter.finish` refuses to go on
   (:class:`NullPrivacyUnitError`, raised before any randomness is drawn or output exists);
   with ``null_privacy_units="drop"`` they are left out and counted in
   :attr:`RowCounter.null_unit_rows` (an exact count, for the data holder, not for publication).
4. **Count** in C (:class:`dpselect._count.PairCounter`, csrc/count.h): duplicate (user,
   partition) rows count once; each user keeps at most κ of their distinct partitions, chosen
   uniformly at random with the package CSPRNG (partial Fisher–Yates on exact uniform
   integers); counts saturate at the strategy's cap (π_opt(n) = 1 above the second crossover,
   Desfontaines et al., PoPETs 2022, Theorem 1; see docs/privacy/contribution-bounding.md).
5. Partitions whose count is 0 (every contribution dropped by bounding) are removed here: they
   are indistinguishable from partitions absent from the data and must never be released.

A whole input already in memory (``feed(batch, final=True)``, as ``select_partitions`` does) whose
privacy units are integers skips the user codes and the pair sets of steps 2 and 4: its rows are
grouped by user through radix buckets in cache-sized pieces (:mod:`dpselect.ingest._radix`,
csrc/radix_pairs.h), then bounded the same way. The key columns still go through their code maps.

Memory: the C pair set holds the distinct (user, partition) pairs, 8 bytes per slot at ≤ 80 %
load (10–20 bytes per distinct pair); the code maps hold each distinct key value once (a hash slot and a copy of its bytes).
Neither depends on the number of rows, which is what lets the CLI stream files larger than memory.

The counts returned by :meth:`RowCounter.finish` are **exact and not private**: they are the
input of a selection mechanism, never something to publish.
"""
from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from dpselect import _count

from dpselect.ingest import _radix as _radix_rows
from dpselect.errors import DPSelectError, DPSelectWarning
from dpselect.rng import resolve_rng, shard_test_state

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

__all__ = [
    "MAX_CODES",
    "NULL_PRIVACY_UNITS",
    "ColumnTypeError",
    "KeyFactorizer",
    "NullPrivacyUnitError",
    "NullPrivacyUnitsDropped",
    "PartitionCounts",
    "RowCounter",
    "arrow_from_numpy",
    "check_column_types",
    "import_pyarrow",
    "key_type",
]

# Codes are 32-bit in the kernel: at most this many distinct users, and distinct partitions.
MAX_CODES = _count.CODE_LIMIT

NullPolicy = Literal["error", "drop"]

# Rows per step of the encoding pipeline in RowCounter.feed: large enough that the per-piece
# Python work is negligible, small enough that the two threads overlap for most of a batch.
_PIECE_ROWS = 1 << 18

# How many pieces ahead the worker of RowCounter.feed encodes.
_LOOKAHEAD = 4

# Pieces smaller than this are encoded on one thread.
_THREAD_ROWS = 1 << 14

# The pair set is split in two by user code parity (the low bit): the two threads of
# RowCounter.feed each fill one half from the same rows, and RowCounter.finish bounds the two
# halves' users at once. Every user's pairs are in one half, which is all bounding needs.
_SHARD_MASK = 1
_SHARDS = 2

# Largest pre-size of the pair set taken from a hint (RowCounter.expect_rows): 2^24 pairs, a
# table of 2^25 slots (256 MiB). Above it the set grows as it fills.
_PRESIZE_CAP = 1 << 24
NULL_PRIVACY_UNITS: tuple[str, ...] = ("error", "drop")


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


def _normalize(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A column whose values can be hashed consistently across batches: dictionary columns
    are decoded (KeyFactorizer passes only one row per category), views become plain
    strings, and every float class is one bit pattern."""
    pa = import_pyarrow()
    typ = column.type
    target = key_type(typ)
    if target != typ:
        column = column.cast(target)
    if target in (pa.float32(), pa.float64()):
        # 0.0 and -0.0 (and NaNs with different payloads) hash apart but compare equal, so
        # their output order would follow the input order: make each class one value.
        import pyarrow.compute as pc

        zero = pa.scalar(0.0, target)
        column = pc.if_else(pc.equal(column, zero), zero, column)
        column = pc.if_else(pc.is_nan(column), pa.scalar(float("nan"), target), column)
    return column


def arrow_from_numpy(values: npt.NDArray[Any]) -> pa.Array:
    """A 1-D numpy array of numbers or booleans (no nulls) as an Arrow array, without a copy for
    numbers. ``pa.array(ndarray)`` would do the same but first imports pandas to look for pandas
    types: a third of a second of every CLI run, for nothing."""
    pa = import_pyarrow()
    values = np.ascontiguousarray(values)
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def _layout(typ: Any) -> tuple[str, str, int]:
    """How a normalised column is read from its Arrow buffers: (map kind, layout, width).
    Layouts: "null" (Arrow's null type, no buffers), "bool" (bit-packed: read as uint8),
    "var" (string/binary offsets, width 4 or 8 = offset size) and "fixed" (width bytes a value).
    Values of 1, 2, 4 or 8 bytes go to a "word" map, anything else to a "bytes" map."""
    pa = import_pyarrow()
    t = pa.types
    if t.is_null(typ):
        return "word", "null", 1
    if t.is_boolean(typ):
        return "word", "bool", 1
    if t.is_string(typ) or t.is_binary(typ):
        return "bytes", "var", 4
    if t.is_large_string(typ) or t.is_large_binary(typ):
        return "bytes", "var", 8
    width = typ.byte_width if t.is_fixed_size_binary(typ) else typ.bit_width // 8
    return ("word" if width in (1, 2, 4, 8) else "bytes"), "fixed", width


def _hash_seed() -> int:
    """A fresh seed for a code map's slot positions, from the package CSPRNG: values crafted to
    collide cannot be aimed at one probe chain. Codes never depend on it."""
    from dpselect.rng import SecureRNG

    return int.from_bytes(SecureRNG().random_bytes(8), "little")


class KeyFactorizer:
    """Dense codes 0, 1, 2, … for the distinct values of one column, stable across batches.

    The values are read straight from the column's Arrow buffers by the C code map
    (:class:`dpselect._count.KeyMap`, csrc/keymap.h): one pass, no intermediate dictionary,
    with the GIL released. Codes are given in order of first appearance, so a value keeps its
    code across batches and codes never depend on hashing. All nulls of a column are one value,
    and so are all NaNs (:func:`_normalize`). The distinct values are kept as Arrow arrays
    taken from the batches (value i has code i), for the output keys."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._chunks: list[Any] = []  # pa.Array pieces of the dictionary, in code order
        self._size = 0
        self._type: Any = None
        self._map: _count.KeyMap | None = None
        self._map_type: Any = None
        # (identity of the last dictionary, its index codes, the global code of each index code,
        # the dictionary itself)
        self._dictionary: tuple[Any, _count.DictionaryCodes, list[npt.NDArray[np.uint32]], Any] | None = None

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"KeyFactorizer({self.name!r}, {self._size} distinct values, type={self._type})"

    @property
    def type(self) -> Any:
        """The values' Arrow type (None before the first batch)."""
        return self._type

    @property
    def nbytes(self) -> int:
        """Bytes held by the C code map (its hash table and a copy of each distinct value)."""
        return 0 if self._map is None else self._map.nbytes

    def declare(self, typ: Any) -> None:
        """Fix the column's type before any value is seen (from the input's schema), so an
        empty input still yields typed results."""
        if self._type is None:
            self._type = key_type(typ)

    @property
    def values(self) -> pa.Array:
        """The distinct values, value i having code i."""
        pa = import_pyarrow()
        if not self._chunks:
            return pa.array([], type=self._type if self._type is not None else pa.null())
        if len(self._chunks) > 1:
            self._chunks = [pa.concat_arrays(self._chunks)]
        return self._chunks[0]

    def _same_kind(self, column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
        """A later batch in the first batch's type. Only lossless changes of representation
        are accepted (string widths, integer widths, a batch of nulls): casting a date to a
        string, say, could merge keys that differ."""
        pa = import_pyarrow()
        t = pa.types
        old, new = self._type, column.type
        if t.is_null(old):  # only nulls so far: they become nulls of the real type
            self._chunks = [chunk.cast(new) for chunk in self._chunks]
            self._type = new
            return column
        families = (
            lambda x: t.is_string(x) or t.is_large_string(x),
            lambda x: t.is_binary(x) or t.is_large_binary(x),
            t.is_integer,
        )
        if t.is_null(new) or any(f(old) and f(new) for f in families):
            try:
                return column.cast(old)  # safe cast: raises rather than truncate
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass
        raise TypeError(f"column {self.name!r} changed type from {old} to {new} between batches")

    def _code_map(self) -> _count.KeyMap:
        """The C map for the current type. When the type changes (a first batch of nulls, then
        real values), a new map is built by encoding the values seen so far in code order,
        which gives every one of them its old code."""
        if self._map is not None and self._map_type == self._type:
            return self._map
        kind, _, _ = _layout(self._type)
        fresh = _count.KeyMap(kind, _hash_seed(), self.name)
        if self._size:
            codes, _ = self._encode_array(fresh, self.values)
            if not np.array_equal(codes, np.arange(self._size, dtype=np.uint32)):
                raise RuntimeError(f"column {self.name!r}: re-encoding the values seen so far changed their codes")
        self._map, self._map_type = fresh, self._type
        return fresh

    @staticmethod
    def _encode_array(code_map: _count.KeyMap, array: pa.Array) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
        """(codes, rows where a code first appeared) of one Arrow array."""
        pa = import_pyarrow()
        _, layout, width = _layout(array.type)
        n = len(array)
        if layout == "null":
            return code_map.encode_fixed(n, 0, None, None, 1, all_null=True)
        if layout == "bool":  # bit-packed: one byte a value, same validity
            array = array.cast(pa.uint8())
        buffers = array.buffers()
        if layout == "var":
            return code_map.encode_var(n, array.offset, buffers[0], buffers[1], width == 8, buffers[2])
        return code_map.encode_fixed(n, array.offset, buffers[0], buffers[1], width)

    def encode(self, column: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.uint32]:
        """Codes of the column's values (uint32), extending the dictionary with new values."""
        pa = import_pyarrow()
        if pa.types.is_dictionary(column.type):
            return self._encode_dictionary(column)
        column = _normalize(column)
        if self._type is None:
            self._type = column.type
        elif column.type != self._type:
            column = self._same_kind(column)
        code_map = self._code_map()
        arrays = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        parts = []
        for array in arrays:
            codes, new_rows = self._encode_array(code_map, array)
            if len(new_rows):
                self._chunks.append(array.take(arrow_from_numpy(new_rows)))
            parts.append(codes)
        self._size = len(code_map)
        if not parts:
            return np.zeros(0, dtype=np.uint32)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


    def _encode_dictionary(self, column: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.uint32]:
        """A dictionary column (a pandas categorical, a Polars Categorical) without decoding every
        row: its indices get codes in C through a direct table (kept while the batches share
        one dictionary, as the chunks and slices of one categorical do), and only one row per
        index seen for the first time is decoded and encoded as usual. Dictionary values no
        row uses (a categorical keeps the categories of rows filtered away) never become keys."""
        pa = import_pyarrow()
        arrays = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        parts = []
        for array in arrays:
            dictionary = array.dictionary
            # The same buffers (immutable in Arrow) mean the same dictionary. The cache holds the
            # dictionary itself, so its buffers cannot be freed and their addresses reused by a
            # different dictionary while they serve as its identity.
            identity = (str(dictionary.type), dictionary.offset, len(dictionary),
                        tuple((b.address, b.size) if b is not None else None for b in dictionary.buffers()))
            if self._dictionary is None or self._dictionary[0] != identity:
                self._dictionary = (identity, _count.DictionaryCodes(len(dictionary), self.name), [], dictionary)
            _, local_codes, known, _ = self._dictionary
            indices = array.indices
            buffers = indices.buffers()
            local, first_rows = local_codes.encode(len(indices), indices.offset, buffers[0], buffers[1],
                                                   indices.type.bit_width // 8)
            if len(first_rows):
                representatives = array.take(arrow_from_numpy(first_rows)).dictionary_decode()
                known.append(self.encode(representatives))
                if len(known) > 1:
                    known[:] = [np.concatenate(known)]
            parts.append(known[0][local] if known else np.zeros(0, dtype=np.uint32))
        if not parts:
            self.encode(pa.array([], type=column.type.value_type))  # fixes the type, as for plain columns
            return np.zeros(0, dtype=np.uint32)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


class _CompositeKey:
    """Codes for a GROUP BY over several columns: column codes are combined pairwise into one
    64-bit word (left << 32 | right) and that word is factorized in turn."""

    def __init__(self, names: Sequence[str]) -> None:
        self.columns = [KeyFactorizer(name) for name in names]
        # combiners[i] factorizes (code of columns 0..i) << 32 | code of column i + 1
        self.combiners = [KeyFactorizer(f"({', '.join(names[: i + 2])})") for i in range(len(names) - 1)]

    def __len__(self) -> int:
        return len(self.combiners[-1]) if self.combiners else len(self.columns[0])

    def encode_codes(self, per_column: list[npt.NDArray[np.uint32]]) -> npt.NDArray[np.uint32]:
        pa = import_pyarrow()
        codes = per_column[0]
        for combiner, right in zip(self.combiners, per_column[1:]):
            word = (codes.astype(np.uint64) << np.uint64(32)) | right.astype(np.uint64)
            codes = combiner.encode(arrow_from_numpy(word.view(np.int64)))
        return codes

    def key_columns(self, codes: npt.NDArray[np.int64]) -> list[pa.Array]:
        """The key values of the given composite codes, one array per column."""
        pa = import_pyarrow()
        component = [np.empty(0, dtype=np.int64)] * len(self.columns)
        current = codes
        for i in range(len(self.combiners) - 1, -1, -1):
            words = np.asarray(self.combiners[i].values).view(np.uint64)[current]
            component[i + 1] = (words & np.uint64(0xFFFFFFFF)).astype(np.int64)
            current = (words >> np.uint64(32)).astype(np.int64)
        component[0] = current
        return [col.values.take(arrow_from_numpy(c.astype(np.int64, copy=False))) for col, c in zip(self.columns, component)]


@dataclass(frozen=True, repr=False)
class PartitionCounts:
    """Exact (NOT private) distinct-user counts after bounding, one entry per partition with a
    count >= 1. ``keys`` holds the key columns (an Arrow table, one column per ``by`` name)."""

    keys: pa.Table
    counts: npt.NDArray[np.int64]

    def __repr__(self) -> str:
        # No values: these counts are exact, and a repr ends up in logs.
        return (f"PartitionCounts({self.keys.num_rows} partitions by {self.keys.schema.names}; "
                "exact counts, NOT private: input of a selection, never to publish)")


def _null_count(column: Any) -> int:
    """Rows whose value is null. A dictionary column's null_count counts null indices only: an
    index pointing at a null dictionary value (``dictionary_encode(null_encoding="encode")``) is a
    null too, which pyarrow's is_null sees."""
    pa = import_pyarrow()
    if pa.types.is_dictionary(column.type):
        import pyarrow.compute as pc

        return int(pc.sum(pc.is_null(column), min_count=0).as_py())
    return int(column.null_count)


def _without_null_units(batch: Any, units: Any) -> Any:
    """The rows of ``batch`` whose privacy unit (``units``, its column) is not null. pyarrow has
    no filter (take) kernel for string and binary views: such columns are first made plain large
    strings and binaries, the type :func:`key_type` gives them anyway."""
    pa = import_pyarrow()
    plain = {pa.string_view(): pa.large_string(), pa.binary_view(): pa.large_binary()}
    if any(f.type in plain for f in batch.schema):
        batch = batch.cast(pa.schema([f.with_type(plain.get(f.type, f.type)) for f in batch.schema]))
    return batch.filter(pa.compute.is_valid(units))


def _merge_user_groups(groups: list[tuple[npt.NDArray[np.uintp], npt.NDArray[np.uint32]]]
                       ) -> tuple[npt.NDArray[np.uintp], npt.NDArray[np.uint32]]:
    """One grouping by user from the shards' groupings: every shard's non-empty users in its
    order, shard after shard (a shard indexes users by code, so the other shards' codes are
    empty there)."""
    lengths = [np.diff(ends, prepend=np.uintp(0)) for ends, _ in groups]
    kept = np.concatenate([n[n > 0] for n in lengths]).astype(np.uintp, copy=False)
    return np.cumsum(kept, dtype=np.uintp), np.concatenate([grouped for _, grouped in groups])


class RowCounter:
    """Feed rows in batches (Arrow tables or record batches), then :meth:`finish` once.

    ``expected_rows`` pre-sizes the C pair set (an upper bound on distinct pairs); leave it 0
    when streaming. ``null_privacy_units`` says what rows with a null privacy unit do:
    ``"error"`` (default) makes :meth:`finish` raise :class:`NullPrivacyUnitError` with their
    number; ``"drop"`` leaves them out (:attr:`null_unit_rows` counts them)."""

    def __init__(self, privacy_unit: str, by: Sequence[str], expected_rows: int = 0,
                 null_privacy_units: NullPolicy = "error") -> None:
        if not by:
            raise ValueError("by must name at least one partition column")
        if null_privacy_units not in NULL_PRIVACY_UNITS:
            raise ValueError(f"null_privacy_units must be 'error' or 'drop', got {null_privacy_units!r}")
        self.privacy_unit = privacy_unit
        self.by = list(by)
        self.null_privacy_units: NullPolicy = null_privacy_units
        self._users = KeyFactorizer(privacy_unit)
        self._key = _CompositeKey(self.by)
        if isinstance(expected_rows, bool) or not isinstance(expected_rows, int) or expected_rows < 0:
            raise ValueError(f"expected_rows must be an int >= 0, got {expected_rows!r}")
        self._expected_rows = expected_rows
        # Created at the first feed; one pair set per shard of the users (see _SHARD_MASK).
        self._counters: list[_count.PairCounter] | None = None
        # Instead, for a whole input with integer privacy units (feed(..., final=True)).
        self._radix: _count.RadixPairs | None = None
        self._radix_sizes: tuple[int, int] | None = None  # its (users, pairs), kept after finish
        self._fed_final = False
        self._finished = False
        self._schema: Any = None
        self.rows = 0  # rows fed, including rows with a null privacy unit
        self.null_unit_rows = 0  # of which had a null privacy unit (dropped, or the error)

    def __repr__(self) -> str:
        state = "finished" if self._finished else f"{self.rows} rows fed"
        return (f"RowCounter(privacy_unit={self.privacy_unit!r}, by={self.by}, {state}, "
                f"{self.n_users} users, {self.n_partitions} partitions, {self.n_pairs} pairs)")

    @property
    def n_users(self) -> int:
        return self._radix_sizes[0] if self._radix_sizes is not None else len(self._users)

    @property
    def n_partitions(self) -> int:
        return len(self._key)

    @property
    def n_pairs(self) -> int:
        if self._radix_sizes is not None:
            return self._radix_sizes[1]
        return 0 if self._counters is None else sum(c.n_pairs for c in self._counters)

    def key_types(self) -> list[Any]:
        """The Arrow type of each ``by`` column's values (None before the first batch)."""
        return [c.type for c in self._key.columns]

    def expect_rows(self, rows: int) -> None:
        """A hint, before the first :meth:`feed`, of how many rows will come (e.g. from a file's
        metadata): the pair set is then sized once instead of doubling its way up, each
        doubling moving every pair. Ignored after the first feed; capped, so that a wrong hint
        (many rows, few distinct pairs) costs at most a few hundred MiB."""
        if self._counters is None and rows > 0:
            self._expected_rows = max(self._expected_rows, min(int(rows), _PRESIZE_CAP))

    def _pair_counters(self) -> list[_count.PairCounter]:
        if self._counters is None:
            # Codes are dense and in first-appearance order, so each parity holds about half.
            per_shard = -(-self._expected_rows // _SHARDS)
            self._counters = [_count.PairCounter(per_shard) for _ in range(_SHARDS)]
        return self._counters

    def check_schema(self, schema: Any) -> None:
        """Check the columns' presence and types (see :func:`check_column_types`) and fix the
        key types. :meth:`feed` does it for the first batch; call it earlier to fail before
        any reading."""
        names = [self.privacy_unit, *self.by]
        missing = [n for n in names if n not in schema.names]
        if missing:
            raise ValueError(f"missing column(s) {missing} (privacy_unit / by); available: {schema.names}")
        check_column_types(schema, self.privacy_unit, self.by)
        if self._schema is None:
            self._schema = schema
            for factorizer, name in zip(self._key.columns, self.by):
                factorizer.declare(schema.field(name).type)

    def feed(self, batch: pa.Table | pa.RecordBatch, *, final: bool = False) -> None:
        """Add the rows of one batch (columns ``privacy_unit`` and every ``by`` name).

        ``final=True`` says no batch follows (the whole input is in memory, as in
        ``select_partitions``): when it is also the first batch and the privacy units are
        integers, the rows are grouped by user through radix buckets (:mod:`dpselect.ingest._radix`)
        rather than inserted into the streaming pair sets: same results in distribution, several
        times fewer cache misses, memory proportional to the rows while grouping."""
        pa = import_pyarrow()
        if self._finished:
            raise RuntimeError("this RowCounter has already been finished")
        if self._fed_final:
            raise RuntimeError("this RowCounter was fed a batch with final=True: no batch may follow it")
        if not isinstance(final, bool):
            raise TypeError(f"final must be a bool, got {type(final).__name__}")
        first = self.rows == 0
        self.check_schema(batch.schema)
        self._fed_final = final
        if batch.num_rows == 0:
            return
        self.rows += batch.num_rows
        units = batch.column(self.privacy_unit)
        nulls = _null_count(units)
        if nulls:
            self.null_unit_rows += nulls
            if self.null_privacy_units == "error":
                return  # finish() will refuse: only the number of such rows matters now
            batch = _without_null_units(batch, units)
            if batch.num_rows == 0:
                return
        if final and first and _radix_rows.eligible(batch, self.privacy_unit, self.by):
            self._radix = _radix_rows.group(batch, self.privacy_unit, _PIECE_ROWS, _LOOKAHEAD, _hash_seed(),
                                            self._encode_keys)
            self._radix_sizes = (self._radix.n_users, self._radix.n_pairs)
            return
        if batch.num_rows <= _PIECE_ROWS:
            # One piece: the two columns at once, then both shards.
            users, partitions = self._encode_both(batch)
            for shard, counter in enumerate(self._pair_counters()):
                counter.feed(users, partitions, _SHARD_MASK, shard)
            return
        pieces = [batch.slice(start, _PIECE_ROWS) for start in range(0, batch.num_rows, _PIECE_ROWS)]
        # A pipeline on two cores (the C code releases the GIL). For each piece, the worker
        # encodes one column side while this thread encodes the other, then the piece's pairs
        # are inserted, each user shard into its own set. Byte keys (strings, binaries, wide
        # values) cost about twice an integer column: the worker encodes them and this thread
        # encodes the users and inserts both shards. Otherwise the two sides cost the same: the
        # worker encodes the users and inserts shard 1, this thread the keys and shard 0; its
        # queue then alternates "encode piece i + _LOOKAHEAD" and "insert piece i, shard 1", so
        # at most _LOOKAHEAD + 1 pieces' codes are alive.
        keys_on_worker = any(self._is_bytes(batch, name) for name in self.by)
        there, here = (self._encode_keys, self._encode_users)
        if not keys_on_worker:
            there, here = here, there
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpselect-encode") as worker:
            # The worker's encodes run _LOOKAHEAD pieces ahead, so it stays busy while this thread
            # creates the pair sets (filling ~10 bytes per expected pair) on the first batch.
            encoded = {j: worker.submit(there, pieces[j]) for j in range(min(_LOOKAHEAD, len(pieces)))}
            inserts = []
            counters = self._pair_counters()
            try:
                for i, piece in enumerate(pieces):
                    if i + _LOOKAHEAD < len(pieces):
                        encoded[i + _LOOKAHEAD] = worker.submit(there, pieces[i + _LOOKAHEAD])
                    mine = here(piece)
                    theirs = encoded.pop(i).result()
                    users, partitions = (mine, theirs) if keys_on_worker else (theirs, mine)
                    if keys_on_worker:
                        counters[1].feed(users, partitions, _SHARD_MASK, 1)
                    else:
                        inserts.append(worker.submit(counters[1].feed, users, partitions, _SHARD_MASK, 1))
                    counters[0].feed(users, partitions, _SHARD_MASK, 0)
                for future in inserts:
                    future.result()
            finally:
                for future in [*encoded.values(), *inserts]:
                    future.cancel()

    def encode(self, batch: pa.Table | pa.RecordBatch) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32], Any]:
        """The user and partition code of every row of ``batch`` (one code per distinct value,
        kept across calls), for a caller that bounds rows itself (a grouped release needs each
        row, not only the distinct pairs). Rows with a null privacy unit are refused or dropped
        as in :meth:`feed`; the third value is the batch the codes describe (filtered when rows
        were dropped), to read value columns from. Decode partition codes with :meth:`keys_of`."""
        pa = import_pyarrow()
        if self._finished:
            raise RuntimeError("this RowCounter has already been finished")
        if self._fed_final:
            raise RuntimeError("this RowCounter was fed a batch with final=True: no batch may follow it")
        self.check_schema(batch.schema)
        self.rows += batch.num_rows
        units = batch.column(self.privacy_unit)
        nulls = _null_count(units)
        if nulls:
            self.null_unit_rows += nulls
            self.check_null_units()
            batch = _without_null_units(batch, units)
        if batch.num_rows <= _PIECE_ROWS:
            return (*self._encode_both(batch), batch)
        # The two columns' sides on two threads, piece by piece (see feed).
        pieces = [batch.slice(start, _PIECE_ROWS) for start in range(0, batch.num_rows, _PIECE_ROWS)]
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpselect-encode") as worker:
            futures = [worker.submit(self._encode_keys, piece) for piece in pieces]
            users = np.empty(batch.num_rows, dtype=np.uint32)
            partitions = np.empty(batch.num_rows, dtype=np.uint32)
            try:
                for i, (piece, future) in enumerate(zip(pieces, futures)):
                    start = i * _PIECE_ROWS
                    users[start:start + piece.num_rows] = self._encode_users(piece)
                    partitions[start:start + piece.num_rows] = future.result()
            finally:
                for future in futures:
                    future.cancel()
        return users, partitions, batch

    def keys_of(self, codes: npt.NDArray[np.int64]) -> Any:
        """The ``by`` values of the given partition codes, as an Arrow table."""
        pa = import_pyarrow()
        if self.n_partitions == 0 or len(codes) == 0:
            return pa.table({name: pa.array([], type=t if t is not None else pa.null())
                             for name, t in zip(self.by, self.key_types())})
        return pa.table(dict(zip(self.by, self._key.key_columns(np.asarray(codes, dtype=np.int64)))))

    def _encode_both(self, batch: Any) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
        """User and partition codes of one piece, the keys on a second thread when the piece is
        large enough for that to pay (starting a thread costs about 0.1 ms)."""
        if batch.num_rows < _THREAD_ROWS:
            return self._encode_users(batch), self._encode_keys(batch)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpselect-encode") as worker:
            keys = worker.submit(self._encode_keys, batch)
            try:
                users = self._encode_users(batch)
            finally:
                partitions = keys.result()
        return users, partitions

    @staticmethod
    def _is_bytes(batch: Any, name: str) -> bool:
        """Whether a column's values are compared as bytes (strings, binaries, wide values) row
        by row; a dictionary column is encoded by its integer indices."""
        pa = import_pyarrow()
        typ = batch.schema.field(name).type
        return not pa.types.is_dictionary(typ) and _layout(key_type(typ))[0] == "bytes"

    def _encode_users(self, piece: Any) -> npt.NDArray[np.uint32]:
        return self._users.encode(piece.column(self.privacy_unit))

    def _encode_keys(self, piece: Any) -> npt.NDArray[np.uint32]:
        """Partition codes of one piece of rows (composite over every ``by`` column)."""
        codes = [factorizer.encode(piece.column(name)) for factorizer, name in zip(self._key.columns, self.by)]
        return np.ascontiguousarray(self._key.encode_codes(codes))

    def check_null_units(self) -> None:
        """Raise :class:`NullPrivacyUnitError` if rows with a null privacy unit were fed and the
        policy is ``"error"``. :meth:`finish` calls it first."""
        if self.null_unit_rows and self.null_privacy_units == "error":
            raise NullPrivacyUnitError(self.privacy_unit, self.null_unit_rows)

    def user_sets(self) -> tuple[Any, Any]:
        """For mechanisms that need each user's whole set (weighted selection, DP-SIPS): the
        distinct pairs grouped by user (``dpselect.mechanisms.weighted.UserSets``), and a function
        from a keep mask over partition codes to the kept keys (an Arrow table). No randomness is
        used here: the mechanism bounds each user itself."""
        pa = import_pyarrow()
        from dpselect.mechanisms.weighted import UserSets

        if self._finished:
            raise RuntimeError("this RowCounter has already been finished")
        self.check_null_units()
        self._finished = True
        if self._radix is not None:
            ends, grouped = self._radix.groups()
            self._radix = None
        else:
            ends, grouped = _merge_user_groups([c.group(self.n_partitions) for c in self._pair_counters()])
        sets = UserSets(ends, grouped, self.n_partitions)

        def keys_of(keep: np.ndarray) -> Any:
            kept = np.flatnonzero(keep)
            if self.n_partitions == 0:
                arrays = [pa.array([], type=t if t is not None else pa.null()) for t in self.key_types()]
            else:
                arrays = self._key.key_columns(kept)
            return pa.table(dict(zip(self.by, arrays)))

        return sets, keys_of

    def finish(self, max_partitions_contributed: int, count_cap: int | None, rng: object = None) -> PartitionCounts:
        """Bound every user to ``max_partitions_contributed`` partitions (uniform choice, package
        CSPRNG), count distinct users per partition saturating at ``count_cap`` (None: exact),
        and return the partitions whose count is at least 1."""
        if self._finished:
            raise RuntimeError("this RowCounter has already been finished")
        self.check_null_units()  # before any randomness is drawn
        rng = resolve_rng(rng)
        rng.announce()
        self._finished = True
        states = [rng.test_state] + [shard_test_state(rng.test_state, shard) for shard in range(1, _SHARDS)]
        args = (self.n_partitions, max_partitions_contributed, count_cap)
        if self._radix is not None:
            counts = _radix_rows.bound(self._radix, *args, states)
            self._radix = None
            return self._partition_counts(counts)
        counters = self._pair_counters()
        # Each shard's users are bounded by their own thread with their own stream (a fresh
        # CSPRNG state per thread; for the test RNG, one derived stream per shard), and the
        # shards' counts are added. The cap is applied again to the sum: saturating each term at
        # the cap first changes nothing, as min(c, min(c, a) + min(c, b)) = min(c, a + b).
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpselect-bound") as worker:
            other = worker.submit(counters[1].finish, *args, states[1])
            try:
                counts = counters[0].finish(*args, states[0])
            finally:
                counts_other = other.result()
        counts += counts_other
        if count_cap is not None:
            np.minimum(counts, count_cap, out=counts)
        return self._partition_counts(counts)

    def _partition_counts(self, counts: npt.NDArray[np.int64]) -> PartitionCounts:
        """The partitions whose count is at least 1, with their keys."""
        pa = import_pyarrow()
        present = np.flatnonzero(counts > 0)
        if self.n_partitions == 0:
            key_arrays = [pa.array([], type=t if t is not None else pa.null()) for t in self.key_types()]
        else:
            key_arrays = self._key.key_columns(present)
        return PartitionCounts(keys=pa.table(dict(zip(self.by, key_arrays))), counts=counts[present])
