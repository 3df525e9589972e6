"""String and binary key codes on several threads (csrc/key_shards.h, ``parallel_codes.encode_var``)
are exactly the one-thread code map's (csrc/keymap.h, ``KeyMap("bytes").encode_var``): 0, 1, 2, ...
in order of first appearance, nulls one value, for any number of threads, chunks and seed; two
values are one only when their bytes are equal; corrupt offsets are refused as the map refuses
them; and the rows path that uses them gives the same output for any number of threads."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpselect
from dpselect import _count
from dpselect.ingest import _counter, parallel_codes, radix
from dpselect.ingest._encode import KeyFactorizer, encoded_in_parallel
from dpselect.testing import InsecureDeterministicRNG
from key_codes_reference import first_appearance

THREADS = (1, 2, 3, 8)
SEED = 20261128  # the data only (numpy's generator never makes noise here)


def _buffers(array: pa.Array) -> tuple[int, int, Any, Any, bool, Any]:
    validity, offsets, data = array.buffers()
    wide = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
    return len(array), array.offset, validity, offsets, wide, data


def serial(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    return _count.KeyMap("bytes", 12345).encode_var(*_buffers(array))


def sharded(array: pa.Array, threads: int, chunks: int | None = None, seed: int = 99) -> tuple[np.ndarray, np.ndarray]:
    return parallel_codes.encode_var(*_buffers(array), threads, seed, "key", chunks)


def _columns() -> dict[str, pa.Array]:
    g = np.random.default_rng(SEED)
    n = 20_000
    nulls = g.random(n) < 0.2
    zipf = np.minimum(g.zipf(1.3, n), 10**6)
    text = [str(z) for z in zipf.tolist()]
    prefix = "p" * 70  # longer than 64 bytes: values differ only after eight full words
    long_values = [prefix + t for t in text]
    return {
        "zipf text": pa.array(text),
        "zipf text nulls": pa.array(text, mask=nulls),
        "empty strings and nulls": pa.array(["" if i % 3 else None for i in range(n)]),
        "empty strings among others": pa.array(["" if z == 1 else t for z, t in zip(zipf.tolist(), text)]),
        "long shared prefixes": pa.array(long_values, mask=nulls),
        "same length, last byte differs": pa.array([f"{prefix}{z % 256:03d}" for z in zipf.tolist()]),
        "prefixes of one another": pa.array(["a" * (z % 90) for z in zipf.tolist()]),
        "every value distinct": pa.array([str(v) for v in g.permutation(n).tolist()]),
        "one value": pa.array(["same"] * n),
        "all null": pa.array([None] * n, type=pa.string()),
        "first row null": pa.array([None] + text[1:]),
        "large_string": pa.array(long_values, type=pa.large_string(), mask=nulls),
        "binary with zero bytes": pa.array([b"\x00" * (z % 5) + b"\x01" * (z % 3) for z in zipf.tolist()]),
        "large_binary": pa.array([t.encode() for t in text], type=pa.large_binary(), mask=nulls),
        "unicode": pa.array([("é" * (z % 4)) + "ü" for z in zipf.tolist()]),
    }


COLUMNS = _columns()


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("name", COLUMNS)
def test_the_codes_are_the_serial_maps_for_any_threads_and_chunks(name: str, threads: int) -> None:
    array = COLUMNS[name]
    codes, new_rows = serial(array)
    expected_codes, expected_rows = first_appearance(array.to_pylist())
    assert codes.tolist() == expected_codes and new_rows.tolist() == expected_rows
    for chunks in (None, 1, 7, 64, 500):
        got_codes, got_rows = sharded(array, threads, chunks, seed=threads * 1000 + (chunks or 0))
        np.testing.assert_array_equal(got_codes, codes)
        np.testing.assert_array_equal(got_rows, new_rows)
    # and a slice (Arrow offset into the offsets and the validity bitmap, not the data)
    part = array.slice(13, len(array) - 20)
    assert part.offset == 13
    np.testing.assert_array_equal(sharded(part, threads, 9)[0], serial(part)[0])
    np.testing.assert_array_equal(sharded(part, threads, 9)[1], serial(part)[1])


def test_no_rows_and_one_row() -> None:
    for values in ([], [None], [""], ["x"]):
        array = pa.array(values, type=pa.string())
        for chunks in range(1, len(values) + 2):
            codes, new_rows = sharded(array, 2, chunks)
            assert codes.tolist() == first_appearance(values)[0]
            assert new_rows.tolist() == first_appearance(values)[1]


@settings(max_examples=150, deadline=None)
@given(data=st.data(), threads=st.integers(1, 5), large=st.booleans(), binary=st.booleans())
def test_law_codes_are_first_appearance_for_any_strings_chunks_and_seed(data: st.DataObject, threads: int,
                                                                        large: bool, binary: bool) -> None:
    # a small alphabet and short strings: many repeats, empty strings, shared prefixes
    values = data.draw(st.lists(st.one_of(st.none(), st.text("ab\x00é", max_size=4)), max_size=300), label="values")
    offset = data.draw(st.integers(0, min(len(values), 9)), label="offset")
    typ = {(False, False): pa.string(), (True, False): pa.large_string(),
           (False, True): pa.binary(), (True, True): pa.large_binary()}[(large, binary)]
    cells = [v.encode() if binary and v is not None else v for v in values]
    array = pa.array(cells, type=typ).slice(offset)
    chunks = data.draw(st.integers(1, len(array) + 1), label="chunks")
    seed = data.draw(st.integers(0, 2**64 - 1), label="seed")
    codes, new_rows = sharded(array, threads, chunks, seed)
    expected_codes, expected_rows = first_appearance(array.to_pylist())
    assert codes.tolist() == expected_codes
    assert new_rows.tolist() == expected_rows
    np.testing.assert_array_equal(codes, serial(array)[0])


# ------------------------------------------------------------------ the checks can fail

def _weak_hash(value: str) -> int:
    """A hash with collisions on purpose: the length and the first character."""
    return len(value) * 1000 + (ord(value[0]) if value else 0)


def _sharded_reference(values: list[str], equal_bytes: bool) -> list[int]:
    """The sharded algorithm in Python with a weak hash: each shard's map finds a value by its hash
    and then compares its bytes (correct), or, in a deliberately broken copy, trusts the hash."""
    shards = 4
    local: dict[int, list[tuple[int, str]]] = {}
    local_of: list[tuple[int, int]] = []
    first_rows: dict[tuple[int, int], int] = {}
    for row, value in enumerate(values):
        h = _weak_hash(value)
        table = local.setdefault(h % shards, [])
        code = next((code for code, (seen_hash, seen) in enumerate(table)
                     if seen_hash == h and (seen == value or not equal_bytes)), None)
        if code is None:
            code = len(table)
            table.append((h, value))
            first_rows[(h % shards, code)] = row
        local_of.append((h % shards, code))
    order = sorted(first_rows, key=first_rows.__getitem__)
    code_of = {key: code for code, key in enumerate(order)}
    return [code_of[key] for key in local_of]


def test_a_copy_that_trusts_equal_hashes_or_lengths_is_caught() -> None:
    """The coder's seeded 64-bit hash gives no collisions one could write down, so a copy that
    trusts equal hashes is shown on the Python reference with a weak hash; on the C coder, values
    of one length catch a copy that compares lengths and not bytes (with the hash cut to 16 bits,
    a C copy that trusts the hash fails the tests above too)."""
    # values of one length and one first character: the weak hash collides on all of them
    values = [f"k{z % 37:03d}" for z in np.random.default_rng(SEED).zipf(1.3, 3000).tolist()]
    expected, _ = first_appearance(values)
    assert _sharded_reference(values, equal_bytes=True) == expected
    assert _sharded_reference(values, equal_bytes=False) != expected  # the comparison fails it
    # The C coder on the same values: equal lengths (a copy comparing only lengths merges them)
    # and equal first eight bytes (a copy comparing a prefix merges them).
    for threads in (1, 3):
        assert sharded(pa.array(values), threads, 5)[0].tolist() == expected
        long_values = ["x" * 64 + v for v in values]
        assert sharded(pa.array(long_values), threads, 5)[0].tolist() == expected


def test_a_copy_that_ranks_by_shard_instead_of_first_row_is_caught() -> None:
    """Values in many shards, first appearing in an order no shard order can give."""
    values = [str(v) for v in np.random.default_rng(SEED).permutation(5000).tolist()]
    codes, new_rows = sharded(pa.array(values), 3, 8)
    assert codes.tolist() == list(range(5000)) and new_rows.tolist() == list(range(5000))


# ------------------------------------------------------------------ the boundary

def _corrupt(offsets: list[int], data: bytes, wide: bool = False, n: int | None = None,
             validity: Any = None) -> tuple[int, int, Any, Any, bool, Any]:
    dtype = np.int64 if wide else np.int32
    return (len(offsets) - 1 if n is None else n), 0, validity, np.array(offsets, dtype), wide, \
        np.frombuffer(data, np.uint8)


@pytest.mark.parametrize("args, row", [
    pytest.param(_corrupt([0, 2, 1, 3], b"abc"), 1, id="decreasing"),
    pytest.param(_corrupt([0, 2, 4], b"abc"), 1, id="past the data"),
    pytest.param(_corrupt([5, 5, 5], b"abc"), 0, id="first offset past the data"),
    pytest.param(_corrupt([0, -1, 2], b"abc"), 0, id="negative int32"),
    pytest.param(_corrupt([0, 1, -(2**40)], b"abc", wide=True), 1, id="negative int64"),
    pytest.param(_corrupt([0, 1, 2**33], b"abc", wide=True), 1, id="int64 beyond 2**32 bytes"),
    pytest.param(_corrupt([0, 1, 0, 3], b"abc", validity=np.array([0b101], np.uint8)), 1, id="under a null"),
])
def test_bad_offsets_are_refused_naming_the_maps_row(args: tuple[Any, ...], row: int) -> None:
    with pytest.raises(ValueError, match=f"offsets of row {row} are out of range") as serial_error:
        _count.KeyMap("bytes", 1, "key").encode_var(*args)
    for threads, chunks in ((1, 1), (2, 2), (3, len(args[3]))):
        with pytest.raises(ValueError, match=f"offsets of row {row} are out of range") as error:
            parallel_codes.encode_var(*args, threads, 7, "key", chunks)
        assert str(error.value) == str(serial_error.value)


def test_the_first_bad_row_is_named_whichever_chunk_finds_one_first() -> None:
    offsets = list(range(10_001))
    offsets[3_001] = 9_000  # row 3000 ends past row 3001's end: row 3001 decreases
    offsets[8_001] = 20_000  # past the data
    args = _corrupt(offsets, b"z" * 10_000)
    for threads in (1, 2, 8):
        with pytest.raises(ValueError, match="offsets of row 3001 are"):
            parallel_codes.encode_var(*args, threads, 7, "key", 10)


@pytest.mark.parametrize("change, kind, match", [
    ({"n": 10}, ValueError, "offsets buffer holds"),
    ({"n": 2**32}, ValueError, "bad sizes"),
    ({"offset": -1}, ValueError, "bad sizes"),
    ({"n_chunks": 0}, ValueError, "n_chunks"),
    ({"n_chunks": 5}, ValueError, "n_chunks"),
    ({"seed": 2**64}, ValueError, "seed"),
    ({"validity": np.zeros(0, np.uint8)}, ValueError, "validity buffer holds 0"),
    ({"offsets": np.zeros(10, np.int32)[::2]}, TypeError, "offsets buffer"),
    ({"n": 2.0}, TypeError, "integers"),
])
def test_bad_sizes_are_refused_before_any_work(change: dict[str, Any], kind: type[Exception], match: str) -> None:
    args = {"n": 3, "offset": 0, "validity": None, "offsets": np.array([0, 1, 2, 3], np.int32),
            "offsets64": False, "data": b"abc", "n_chunks": 2, "seed": 1}
    args.update(change)
    with pytest.raises(kind, match=match):
        _count.ShardedStringCodes(*args.values())


def test_a_coder_reads_one_column_once() -> None:
    job = _count.ShardedStringCodes(3, 0, None, np.array([0, 1, 2, 3], np.int32), False, b"abc", 1, 1)
    with pytest.raises(RuntimeError, match="once"):
        job.__init__(3, 0, None, np.array([0, 1, 2, 3], np.int32), False, b"abc", 1, 1)
    with pytest.raises(RuntimeError, match="out of order"):
        job.scatter(0)


# ------------------------------------------------------------------ the factorizer and the rows path

@pytest.fixture
def small_inputs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Let inputs of a few thousand rows take the threaded path (in chunks of 1000 rows), and
    count the times the string coder is taken, so a test cannot pass on the serial path alone."""
    calls: list[int] = []
    real = parallel_codes.encode_var

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(parallel_codes, "MIN_ROWS", 1_000)
    monkeypatch.setattr(parallel_codes, "_CHUNK_ROWS", 1_000)
    monkeypatch.setattr(parallel_codes, "encode_var", spy)
    return calls


@pytest.mark.parametrize("typ", [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()])
def test_string_and_binary_types_are_coded_in_parallel_and_wider_fixed_values_are_not(typ: pa.DataType) -> None:
    assert encoded_in_parallel(typ)
    assert not encoded_in_parallel(pa.decimal128(10, 2))
    assert not encoded_in_parallel(pa.binary(16))
    assert not encoded_in_parallel(pa.dictionary(pa.int32(), typ))


@pytest.mark.parametrize("threads", THREADS[1:])
@pytest.mark.parametrize("column", [
    pytest.param(COLUMNS["zipf text nulls"].slice(0, 4000), id="string nulls"),
    pytest.param(COLUMNS["large_binary"].slice(5, 4000), id="large_binary slice"),
    pytest.param(pa.chunked_array([COLUMNS["long shared prefixes"].slice(0, 3000)]), id="one-chunk column"),
])
def test_key_factorizer_gives_the_same_codes_and_keys_on_several_threads(small_inputs: list[int], column: Any,
                                                                           threads: int) -> None:
    one, many = KeyFactorizer("k"), KeyFactorizer("k")
    codes = one.encode(column, 1)
    assert not small_inputs  # threads=1: the serial map, as before
    np.testing.assert_array_equal(many.encode(column, threads), codes)
    assert small_inputs  # the threaded path was taken
    assert many.values.equals(one.values) and len(many) == len(one)
    # A later batch, as on the streaming path: old values keep their codes, new ones follow.
    first = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    later = pa.concat_arrays([first.slice(3, 50), pa.array([None, b"new" if one.type in (
        pa.binary(), pa.large_binary()) else "new"], type=one.type)])
    np.testing.assert_array_equal(many.encode(later, threads), one.encode(later, threads))
    assert many.values.equals(one.values)


def _frame(n: int = 100_000) -> pd.DataFrame:
    g = np.random.default_rng(SEED)
    keys = pd.array([f"key-{z}" for z in np.minimum(g.zipf(1.4, n), 5000).tolist()], dtype=object)
    keys[g.random(n) < 0.05] = None
    return pd.DataFrame({"user": g.integers(0, 10_000, n), "skey": keys})


@pytest.mark.filterwarnings("ignore")
def test_select_partitions_on_string_keys_is_identical_at_one_and_four_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = parallel_codes.encode_var
    monkeypatch.setattr(parallel_codes, "encode_var", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    df = _frame()
    table = pa.Table.from_pandas(df, preserve_index=False).cast(pa.schema([("user", pa.int64()),
                                                                            ("skey", pa.string())]))
    assert radix.codes_first(table, "user", ["skey"], 4)

    def run(threads: int) -> Any:
        return dpselect.select_partitions(table, privacy_unit="user", by="skey", epsilon=2.0, delta=1e-6,
                                          max_partitions_contributed=3, counts=True,
                                          rng=InsecureDeterministicRNG(seed=11), threads=threads)

    first = run(1)
    assert len(first) > 0 and not calls
    assert run(4).equals(first)
    assert calls == [len(df)]  # the whole key column, coded on every thread


@pytest.mark.filterwarnings("ignore")
def test_select_partitions_on_string_keys_is_identical_for_any_threads_in_small_chunks(small_inputs: list[int],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel_codes, "MIN_THREADS", 2)
    monkeypatch.setattr(_counter, "_PIECE_ROWS", 4096)
    df = _frame(30_000)

    def run(threads: int) -> pd.DataFrame:
        return dpselect.select_partitions(df, privacy_unit="user", by="skey", epsilon=2.0, delta=1e-6,
                                          max_partitions_contributed=2, counts=True,
                                          rng=InsecureDeterministicRNG(seed=5), threads=threads)

    first = run(1)
    for threads in THREADS[1:]:
        pd.testing.assert_frame_equal(run(threads), first)
    assert small_inputs == [len(df)] * 3
