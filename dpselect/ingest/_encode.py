"""Dense integer codes for the values of key and privacy-unit columns, read in C.

Every column is factorized to codes 0, 1, 2, … in order of first appearance, reading the Arrow
buffers directly (:class:`KeyFactorizer`, csrc/keymap.h): one persistent code map per column, so
that rows can arrive in any number of batches. A null is a key like any other (all nulls of a
column form one partition) and so is NaN (every NaN of a column is one key). Several ``by``
columns form one composite key (GROUP BY a, b), factorized pairwise (:class:`CompositeKey`).
Public names are re-exported by :mod:`dpselect.ingest.rows`.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from dpselect import _count
from dpselect.ingest import parallel_codes
from dpselect.ingest._types import import_pyarrow, key_type

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

__all__ = ["CompositeKey", "KeyFactorizer", "arrow_from_numpy", "encoded_as_bytes", "encoded_in_parallel", "hash_seed"]


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


def encoded_as_bytes(typ: Any) -> bool:
    """Whether a column of this Arrow type is encoded by comparing each row's bytes (strings,
    binaries, values wider than 8 bytes), which costs about twice an integer column; a
    dictionary column is encoded by its integer indices."""
    pa = import_pyarrow()
    return not pa.types.is_dictionary(typ) and _layout(key_type(typ))[0] == "bytes"


def encoded_in_parallel(typ: Any) -> bool:
    """Whether :meth:`KeyFactorizer.encode` can code a column of this Arrow type on several threads
    (``threads=``): values of 1, 2, 4 or 8 bytes (integers, dates, times, timestamps, durations,
    floats, booleans) and strings and binaries (32- or 64-bit offsets), not a dictionary; other
    widths (decimals, fixed-size binaries) take one thread."""
    pa = import_pyarrow()
    if pa.types.is_dictionary(typ):
        return False
    kind, layout, _ = _layout(key_type(typ))
    return (kind == "word" and layout in ("fixed", "bool")) or layout == "var"


def _grouped(arrays: Sequence[Any], min_rows: int) -> Any:
    """The arrays in order, consecutive ones joined (a copy) until each has ``min_rows`` rows or
    the arrays run out: many chunks (a file's row groups or blocks) would each pay the sharded
    coder's fixed cost (``parallel_codes.GROUP_ROWS``)."""
    pa = import_pyarrow()
    group: list[Any] = []
    rows = 0
    for array in arrays:
        group.append(array)
        rows += len(array)
        if rows >= min_rows:
            yield group[0] if len(group) == 1 else pa.concat_arrays(group)
            group, rows = [], 0
    if group:
        yield group[0] if len(group) == 1 else pa.concat_arrays(group)


def hash_seed() -> int:
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
        # Instead of the map, once a batch was coded on several threads with more to come: the
        # shards' maps, kept across batches (csrc/shard_maps.h); same codes as the map.
        self._store: _count.KeyStore | None = None
        self._store_type: Any = None
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
        """Bytes held by the C code map (its hash table and a copy of each distinct value), or by
        the shards' maps that replace it."""
        return (0 if self._map is None else self._map.nbytes) + (0 if self._store is None else self._store.nbytes)

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

    def _check_rebuilt(self, codes: npt.NDArray[np.uint32]) -> None:
        """The values seen so far, coded in code order by a new map, must get their old codes."""
        if not np.array_equal(codes, np.arange(self._size, dtype=np.uint32)):
            raise RuntimeError(f"column {self.name!r}: re-encoding the values seen so far changed their codes")

    def _code_map(self) -> _count.KeyMap:
        """The C map for the current type. When the type changes (a first batch of nulls, then
        real values), or there is none yet after a first batch coded on several threads, a new
        map is built by encoding the values seen so far in code order, which gives every one of
        them its old code."""
        if self._map is not None and self._map_type == self._type:
            return self._map
        kind, _, _ = _layout(self._type)
        fresh = _count.KeyMap(kind, hash_seed(), self.name)
        if self._size:
            self._check_rebuilt(self._encode_array(fresh, self.values)[0])
        self._map, self._map_type = fresh, self._type
        self._store = None
        return fresh

    def _key_store(self, threads: int) -> _count.KeyStore:
        """The shards' maps for the current type (:func:`encoded_in_parallel`), built like
        :meth:`_code_map`'s map when there is none or the type changed: the values seen so far,
        coded in code order on ``threads`` threads, get their old codes."""
        if self._store is not None and self._store_type == self._type:
            return self._store
        kind, _, _ = _layout(self._type)
        fresh = _count.KeyStore(kind, hash_seed(), self.name)
        if self._size:
            self._check_rebuilt(self._sharded(self.values, threads, fresh)[0])
        self._store, self._store_type = fresh, self._type
        self._map = None
        return fresh

    def _sharded(self, array: pa.Array, threads: int,
                 store: _count.KeyStore | None) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
        """(codes, rows where a code first appeared) of one array by the sharded coder
        (:mod:`dpselect.ingest.parallel_codes`) on ``threads`` threads: codes from 0 without a
        store, else continuing the store's."""
        pa = import_pyarrow()
        _, layout, width = _layout(array.type)
        # bit-packed booleans are read as one byte a value, with the same validity
        read = array.cast(pa.uint8()) if layout == "bool" else array
        buffers = read.buffers()
        seed = hash_seed() if store is None else 0  # a store places values by its own seed
        if layout == "var":  # width: the offsets' size
            return parallel_codes.encode_var(len(read), read.offset, buffers[0], buffers[1], width == 8,
                                             buffers[2], threads, seed, self.name, store=store)
        return parallel_codes.encode_fixed(len(read), read.offset, buffers[0], buffers[1], width,
                                           threads, seed, self.name, store=store)

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

    def encode(self, column: pa.Array | pa.ChunkedArray, threads: int = 1, more: bool = False) -> npt.NDArray[np.uint32]:
        """Codes of the column's values (uint32), extending the dictionary with new values.

        ``threads`` > 1: a batch of fixed-width values or strings (:func:`encoded_in_parallel`)
        and at least ``parallel_codes.MIN_ROWS`` rows is coded on that many threads
        (:mod:`dpselect.ingest.parallel_codes`), with the same codes. ``more`` says batches may
        follow: the shards' maps are then kept (a :class:`dpselect._count.KeyStore`, which codes
        every later batch, on one thread when it is small), as they are for a column of several
        chunks; else a first batch of one chunk is coded without keeping them, and a map is built
        from the distinct values only if a later batch comes."""
        pa = import_pyarrow()
        if pa.types.is_dictionary(column.type):
            return self._encode_dictionary(column)
        column = _normalize(column)
        if self._type is None:
            self._type = column.type
        elif column.type != self._type:
            column = self._same_kind(column)
        arrays = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        rows = sum(len(array) for array in arrays)
        sharded = threads > 1 and rows >= parallel_codes.MIN_ROWS and encoded_in_parallel(self._type)
        if sharded and not more and self._size == 0 and self._store is None and len(arrays) == 1:
            return self._encode_parallel(arrays[0], threads)
        parts = []
        # Several chunks (a Parquet file's row groups, say) continue one another's codes, as
        # batches do: the store codes them chunk after chunk, each on every thread.
        if (self._store is not None or (sharded and (more or len(arrays) > 1))) and encoded_in_parallel(self._type):
            store = self._key_store(threads)
            for array in _grouped(arrays, parallel_codes.GROUP_ROWS):
                if len(array):
                    codes, new_rows = self._sharded(array, threads if len(array) >= parallel_codes.MIN_ROWS else 1,
                                                    store)
                    self._add_values(array, new_rows)
                    self._size = len(store)  # per array: the values stay in step if a later one fails
                    parts.append(codes)
        else:
            code_map = self._code_map()
            for array in arrays:
                codes, new_rows = self._encode_array(code_map, array)
                self._add_values(array, new_rows)
                self._size = len(code_map)
                parts.append(codes)
        if not parts:
            return np.zeros(0, dtype=np.uint32)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _add_values(self, array: pa.Array, new_rows: npt.NDArray[np.uint32]) -> None:
        """The values that first appeared at ``new_rows`` of ``array``, in code order."""
        if len(new_rows):
            self._chunks.append(array.take(arrow_from_numpy(new_rows)))


    def _encode_parallel(self, array: pa.Array, threads: int) -> npt.NDArray[np.uint32]:
        """The codes of a first batch on several threads. The map is dropped, not filled: a later
        batch's :meth:`_code_map` (or :meth:`_key_store`) builds it from the distinct values in
        code order, which gives each its code (a whole input, the common case here, has no
        later batch)."""
        codes, new_rows = self._sharded(array, threads, None)
        self._map = None
        self._chunks = []
        self._add_values(array, new_rows)
        self._size = len(new_rows)
        return codes

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


class CompositeKey:
    """Codes for a GROUP BY over several columns: column codes are combined pairwise into one
    64-bit word (left << 32 | right) and that word is factorized in turn."""

    def __init__(self, names: Sequence[str]) -> None:
        self.columns = [KeyFactorizer(name) for name in names]
        # combiners[i] factorizes (code of columns 0..i) << 32 | code of column i + 1
        self.combiners = [KeyFactorizer(f"({', '.join(names[: i + 2])})") for i in range(len(names) - 1)]

    def __len__(self) -> int:
        return len(self.combiners[-1]) if self.combiners else len(self.columns[0])

    def encode_codes(self, per_column: list[npt.NDArray[np.uint32]], threads: int = 1,
                     more: bool = False) -> npt.NDArray[np.uint32]:
        """The composite codes of rows given each column's codes (``threads`` and ``more`` as in
        :meth:`KeyFactorizer.encode`)."""
        codes = per_column[0]
        for combiner, right in zip(self.combiners, per_column[1:]):
            word = (codes.astype(np.uint64) << np.uint64(32)) | right.astype(np.uint64)
            codes = combiner.encode(arrow_from_numpy(word.view(np.int64)), threads, more)
        return codes

    def key_columns(self, codes: npt.NDArray[np.int64]) -> list[pa.Array]:
        """The key values of the given composite codes, one array per column."""
        component = [np.empty(0, dtype=np.int64)] * len(self.columns)
        current = codes
        for i in range(len(self.combiners) - 1, -1, -1):
            words = np.asarray(self.combiners[i].values).view(np.uint64)[current]
            component[i + 1] = (words & np.uint64(0xFFFFFFFF)).astype(np.int64)
            current = (words >> np.uint64(32)).astype(np.int64)
        component[0] = current
        return [col.values.take(arrow_from_numpy(c.astype(np.int64, copy=False))) for col, c in zip(self.columns, component)]
