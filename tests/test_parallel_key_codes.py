"""Key codes on several threads (csrc/key_shards.h, dpselect/ingest/parallel_codes.py) are exactly
the one-thread code map's (csrc/keymap.h): 0, 1, 2, ... in order of first appearance, nulls one
value, NaN and -0.0 one value each, for any number of threads, chunks and seed; and the rows path
that uses them gives the same output for any number of threads."""
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
from dpselect.ingest._encode import KeyFactorizer
from dpselect.testing import InsecureDeterministicRNG
from key_codes_reference import first_appearance

THREADS = (1, 2, 3, 8)
SEED = 20261128  # the data only (numpy's generator never makes noise here)


def _buffers(array: pa.Array) -> tuple[int, int, Any, Any, int]:
    buffers = array.buffers()
    return len(array), array.offset, buffers[0], buffers[1], array.type.bit_width // 8


def serial(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    n, offset, validity, values, width = _buffers(array)
    return _count.KeyMap("word", 12345).encode_fixed(n, offset, validity, values, width)


def sharded(array: pa.Array, threads: int, chunks: int | None = None, seed: int = 99) -> tuple[np.ndarray, np.ndarray]:
    n, offset, validity, values, width = _buffers(array)
    return parallel_codes.encode_fixed(n, offset, validity, values, width, threads, seed, "key", chunks)


def _columns() -> dict[str, pa.Array]:
    g = np.random.default_rng(SEED)
    n = 20_000
    nulls = g.random(n) < 0.2
    zipf = np.minimum(g.zipf(1.3, n), 10**6)
    return {
        "int8": pa.array(g.integers(-128, 128, n).astype(np.int8)),
        "int16 nulls": pa.array(g.integers(-3000, 3000, n).astype(np.int16), mask=nulls),
        "int32 zipf": pa.array(zipf.astype(np.int32)),
        "int64 zipf nulls": pa.array(zipf.astype(np.int64) * -(2**40), mask=nulls),
        "uint64 high bits": pa.array(g.integers(0, 50, n).astype(np.uint64) << np.uint64(60)),
        "every value distinct": pa.array(g.permutation(n).astype(np.int64)),
        "one value": pa.array(np.full(n, 7, np.int32)),
        "one value and nulls": pa.array(np.full(n, 7, np.int32), mask=nulls),
        "all null (int64)": pa.array(np.zeros(n, np.int64), mask=np.ones(n, np.bool_)),
        "first row null": pa.array(np.arange(n) % 5, mask=np.arange(n) == 0),
        "date32": pa.array(g.integers(0, 400, n).astype(np.int32)).cast(pa.date32()),
        "timestamp": pa.array(g.integers(0, 10**6, n) * 10**9).cast(pa.timestamp("ns")),
        "float64 bits": pa.array(g.choice([0.5, 1.5, 2.0**70, -3.25], n)),
    }


COLUMNS = _columns()


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("name", COLUMNS)
def test_the_codes_are_the_serial_maps_for_any_threads_and_chunks(name: str, threads: int) -> None:
    array = COLUMNS[name]
    if pa.types.is_date32(array.type) or pa.types.is_timestamp(array.type) or pa.types.is_floating(array.type):
        array = array.view(pa.int32() if array.type.bit_width == 32 else pa.int64())
    codes, new_rows = serial(array)
    for chunks in (None, 1, 7, 64, 500):
        got_codes, got_rows = sharded(array, threads, chunks, seed=threads * 1000 + (chunks or 0))
        np.testing.assert_array_equal(got_codes, codes)
        np.testing.assert_array_equal(got_rows, new_rows)
    # and a slice (Arrow offset into the values and the validity bitmap)
    part = array.slice(13, len(array) - 20)
    np.testing.assert_array_equal(sharded(part, threads, 9)[0], serial(part)[0])


@pytest.fixture
def small_inputs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Let inputs of a few thousand rows take the threaded path (in chunks of 1000 rows), and
    count the times it is taken, so a test cannot pass on the serial path alone."""
    calls: list[int] = []
    real = parallel_codes.encode_fixed

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(parallel_codes, "MIN_ROWS", 1_000)
    monkeypatch.setattr(parallel_codes, "MIN_THREADS", 2)
    monkeypatch.setattr(parallel_codes, "_CHUNK_ROWS", 1_000)
    monkeypatch.setattr(parallel_codes, "encode_fixed", spy)
    return calls


def _floats() -> pa.Array:
    values = np.array([0.0, -0.0, np.nan, -np.nan, 1.0, np.inf, -np.inf, 1.0, -0.0], np.float64)
    bits = values.view(np.uint64).copy()
    bits[3] = 0x7FF8_0000_DEAD_BEEF  # a NaN with another payload
    return pa.array(np.tile(bits.view(np.float64), 500), mask=np.tile([False] * 8 + [True], 500))


@pytest.mark.parametrize("threads", THREADS[1:])
@pytest.mark.parametrize("column", [
    pytest.param(_floats(), id="float64 NaN -0.0 nulls"),
    pytest.param(pa.array(np.tile(np.float32([0.0, -0.0, np.nan, 2.5]), 1000)), id="float32"),
    pytest.param(pa.array(np.arange(4000) % 3 == 0, mask=np.arange(4000) % 7 == 0), id="bool nulls"),
    pytest.param(pa.chunked_array([pa.array(np.arange(3000) % 301)]), id="one-chunk column"),
    pytest.param(COLUMNS["timestamp"], id="timestamp"),
    pytest.param(COLUMNS["date32"], id="date32"),
])
def test_key_factorizer_gives_the_same_codes_and_keys_on_several_threads(small_inputs: list[int], column: Any,
                                                                           threads: int) -> None:
    one, many = KeyFactorizer("k"), KeyFactorizer("k")
    codes = one.encode(column, 1)
    assert not small_inputs  # threads=1: the serial map, as before
    np.testing.assert_array_equal(many.encode(column, threads), codes)
    assert small_inputs  # the threaded path was taken
    assert str(many.values.to_pylist()) == str(one.values.to_pylist())  # NaN != NaN: compared as text
    assert many.values.type == one.values.type and len(many) == len(one)
    # A later batch, as on the streaming path: old values keep their codes, new ones follow.
    later = pa.concat_arrays([(column.combine_chunks() if hasattr(column, "combine_chunks") else column).slice(3, 50),
                              pa.array([None], type=one.type)])
    np.testing.assert_array_equal(many.encode(later, threads), one.encode(later, threads))
    assert str(many.values.to_pylist()) == str(one.values.to_pylist())


def test_a_column_of_wide_values_or_a_later_batch_without_more_stays_on_one_thread(small_inputs: list[int]) -> None:
    # strings take the threaded path of their own (tests/test_parallel_string_codes.py); a column
    # of several chunks goes through a store (tests/test_key_store.py)
    KeyFactorizer("w").encode(pa.array([(i % 50).to_bytes(16, "little") for i in range(5000)], pa.binary(16)), 4)
    factorizer = KeyFactorizer("later")
    factorizer.encode(pa.array([1, 2]), 4)  # a first batch below MIN_ROWS: the map is filled
    factorizer.encode(pa.array(np.arange(5000) % 9), 4)  # not empty any more
    assert not small_inputs


@settings(max_examples=150, deadline=None)
@given(data=st.data(), width=st.sampled_from([1, 2, 4, 8]), threads=st.integers(1, 5))
def test_law_codes_are_first_appearance_for_any_input_chunks_and_seed(data: st.DataObject, width: int,
                                                                      threads: int) -> None:
    n = data.draw(st.integers(0, 300), label="n")
    distinct = data.draw(st.integers(1, 2 ** min(8 * width, 20)), label="distinct")
    values = data.draw(st.lists(st.integers(0, distinct - 1), min_size=n, max_size=n), label="values")
    nulls = data.draw(st.lists(st.booleans(), min_size=n, max_size=n), label="nulls") \
        if data.draw(st.booleans(), label="with nulls") else None
    offset = data.draw(st.integers(0, min(n, 9)), label="offset")
    typ = {1: pa.uint8(), 2: pa.uint16(), 4: pa.uint32(), 8: pa.uint64()}[width]
    array = pa.array(values, type=typ, mask=None if nulls is None else np.array(nulls, np.bool_)).slice(offset)
    chunks = data.draw(st.integers(1, len(array) + 1), label="chunks")
    seed = data.draw(st.integers(0, 2**64 - 1), label="seed")
    codes, new_rows = sharded(array, threads, chunks, seed)
    expected_codes, expected_rows = first_appearance(array.to_pylist())
    assert codes.tolist() == expected_codes
    assert new_rows.tolist() == expected_rows
    np.testing.assert_array_equal(codes, serial(array)[0])


# ------------------------------------------------------------------ the checks can fail

def _shard(value: int, seed: int, shards: int = 64) -> int:
    """A seeded hash of a value into shards (any hash shows the point)."""
    return hash((value, seed)) % shards


def _sharded_reference(values: list[int], seed: int, rank_by_first_row: bool) -> list[int]:
    """The sharded algorithm in Python: each shard's values get local codes in row order, then
    every (shard, local code) a global code, by the rank of its first row among all first rows
    (correct), or, in a deliberately broken copy, shard after shard in local order."""
    local: dict[int, dict[int, int]] = {}
    first_rows: dict[tuple[int, int], int] = {}
    for row, value in enumerate(values):
        table = local.setdefault(_shard(value, seed), {})
        if value not in table:
            table[value] = len(table)
            first_rows[(_shard(value, seed), table[value])] = row
    if rank_by_first_row:
        order = sorted(first_rows, key=first_rows.__getitem__)
    else:
        order = sorted(first_rows)
    code_of = {key: code for code, key in enumerate(order)}
    return [code_of[(_shard(v, seed), local[_shard(v, seed)][v])] for v in values]


def test_a_copy_that_ranks_by_shard_order_instead_of_first_row_is_caught() -> None:
    values = np.random.default_rng(SEED).integers(0, 200, 2000).tolist()
    expected, _ = first_appearance(values)
    assert _sharded_reference(values, 5, rank_by_first_row=True) == expected
    assert _sharded_reference(values, 5, rank_by_first_row=False) != expected  # the comparison fails it
    array = pa.array(values, type=pa.int64())
    assert sharded(array, 3, 8)[0].tolist() == expected


# ------------------------------------------------------------------ the boundary

def test_phases_out_of_order_or_twice_are_refused() -> None:
    values = np.arange(100, dtype=np.int64) % 7
    job = _count.ShardedKeyCodes(100, 0, None, values, 8, 2, 1)
    with pytest.raises(RuntimeError, match="out of order"):
        job.scatter(0)
    job.count(0)
    with pytest.raises(RuntimeError, match="already called"):
        job.count(0)
    with pytest.raises(RuntimeError, match="out of order"):
        job.layout()  # chunk 1 not counted yet
    job.count(1)
    job.layout()
    with pytest.raises(RuntimeError, match="every phase"):
        job.result()
    with pytest.raises(ValueError, match="piece"):
        job.scatter(2)


@pytest.mark.parametrize("kwargs, kind, match", [
    ({"width": 3}, ValueError, "1, 2, 4 or 8"),
    ({"n_chunks": 0}, ValueError, "n_chunks"),
    ({"n_chunks": 102}, ValueError, "n_chunks"),
    ({"n": 200}, ValueError, "values buffer holds"),
    ({"n": 1.5}, TypeError, "integers"),
    ({"seed": -1}, ValueError, "seed"),
    ({"validity": np.zeros(3, np.uint8)}, ValueError, "validity buffer holds 3"),
    ({"values": np.zeros(200, np.int64)[::2]}, TypeError, "values buffer"),
    ({"offset": -1}, ValueError, "bad sizes"),
])
def test_bad_sizes_are_refused_before_any_work(kwargs: dict[str, Any], kind: type[Exception], match: str) -> None:
    args = {"n": 100, "offset": 0, "validity": None, "values": np.zeros(100, np.int64), "width": 8,
            "n_chunks": 4, "seed": 1}
    args.update(kwargs)
    with pytest.raises(kind, match=match):
        _count.ShardedKeyCodes(*args.values())


def test_an_error_in_one_phase_stops_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    real = _count.ShardedKeyCodes

    class Failing:
        def __init__(self, *args: Any) -> None:
            self.job = real(*args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.job, name)

        def encode(self, shard: int, end: int | None = None) -> None:
            if shard <= 5 < (shard + 1 if end is None else end):
                raise MemoryError("no room for shard 5")
            self.job.encode(shard, end)

    monkeypatch.setattr(_count, "ShardedKeyCodes", Failing)
    with pytest.raises(MemoryError, match="shard 5"):
        sharded(pa.array(np.arange(5000) % 300), 3, 6)


# ------------------------------------------------------------------ the rows path

def _frame(n: int = 30_000) -> pd.DataFrame:
    g = np.random.default_rng(SEED)
    keys = np.minimum(g.zipf(1.4, n), 5000).astype(np.float64)
    keys[g.random(n) < 0.05] = np.nan
    return pd.DataFrame({"user": g.integers(0, 4000, n), "ikey": np.minimum(g.zipf(1.4, n), 5000),
                         "fkey": keys})


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("by", ["ikey", "fkey"])
def test_select_partitions_is_identical_for_any_threads_with_the_keys_coded_on_every_thread(
        small_inputs: list[int], monkeypatch: pytest.MonkeyPatch, by: str) -> None:
    monkeypatch.setattr(_counter, "_PIECE_ROWS", 4096)
    df = _frame()

    def run(threads: int) -> pd.DataFrame:
        return dpselect.select_partitions(df, privacy_unit="user", by=by, epsilon=2.0, delta=1e-6,
                                          max_partitions_contributed=3, counts=True,
                                          rng=InsecureDeterministicRNG(seed=11), threads=threads)

    first = run(1)
    assert len(first) > 0 and not small_inputs
    for threads in THREADS[1:]:
        pd.testing.assert_frame_equal(run(threads), first)
    assert small_inputs == [len(df)] * 3  # the whole key column, once per run on several threads


def test_the_codes_come_first_only_where_they_fit_the_memory_rule() -> None:
    n = 100_000
    wide = pa.table({"user": np.arange(n, dtype=np.int64), "key": np.arange(n, dtype=np.int64)})
    narrow = pa.table({"user": np.arange(n, dtype=np.int32), "key": np.arange(n, dtype=np.int32)})
    many = max(2, parallel_codes.MIN_THREADS)
    assert radix.codes_first(wide, "user", ["key"], many)
    assert not radix.codes_first(wide, "user", ["key"], 1)  # one thread: the serial path, as before
    assert not radix.codes_first(wide, "user", ["key"], many - 1)  # the keys beside the rest pay more
    assert not radix.codes_first(narrow, "user", ["key"], many)  # 16 bytes a row > 1.5 x 8
    assert not radix.codes_first(wide.slice(0, 1000), "user", ["key"], many)  # below MIN_ROWS
    strings = pa.table({"user": np.arange(n), "key": pa.array([str(i % 10) for i in range(n)])})
    assert radix.codes_first(strings, "user", ["key"], many)  # parallel_codes.encode_var
    wide16 = pa.table({"user": np.arange(n), "key": pa.array([(i % 10).to_bytes(16, "little") for i in range(n)],
                                                              pa.binary(16))})
    assert not radix.codes_first(wide16, "user", ["key"], many)  # 16-byte values: one thread
    two = pa.table({"user": np.arange(n), "a": np.arange(n), "b": np.arange(n)})
    assert radix.codes_first(two, "user", ["a", "b"], many)  # composite: each column, then the pairs
    assert not radix.codes_first(two, "user", ["a", "b"], many - 1)
    two_narrow = pa.table({"user": np.arange(n), "a": np.arange(n, dtype=np.int8), "b": np.arange(n, dtype=np.int8)})
    assert not radix.codes_first(two_narrow, "user", ["a", "b"], many)  # 16 bytes a row > 1.5 x 10
    assert not radix.codes_first(pa.table({"user": np.arange(n), "a": np.arange(n), "w": wide16.column("key")}),
                                 "user", ["a", "w"], many)  # one column the threads cannot code
    mixed = pa.table({"user": np.arange(n), "a": np.arange(n), "key": strings.column("key")})
    assert radix.codes_first(mixed, "user", ["a", "key"], many)  # integers and strings
    chunked = pa.concat_tables([wide.slice(0, n // 2), wide.slice(n // 2)])
    assert chunked.column("key").num_chunks == 2
    assert radix.codes_first(chunked, "user", ["key"], many)  # row groups: chunk after chunk
    assert not radix.codes_first(mixed, "user", ["a", "key"], many - 1)


@pytest.mark.filterwarnings("ignore")
def test_composite_keys_coded_first_give_the_same_release_for_any_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Composite keys (an integer and a string column) on every thread: each column coded by the
    threaded coder, then the pairs of codes; the release is the one thread's, for 1, 2, 3 and 8
    threads, and the threaded coders did run."""
    g = np.random.default_rng(7)  # test data only
    n = 120_000
    table = pa.table({"user": g.integers(0, 20_000, n), "a": g.integers(0, 30, n) * 1_000_003,
                      "s": pa.array([f"k{v}" for v in g.zipf(1.5, n) % 200])})
    monkeypatch.setattr(parallel_codes, "MIN_THREADS", 2)  # coding first at every count of threads below
    assert radix.codes_first(table, "user", ["a", "s"], 2)
    calls: list[str] = []
    real_fixed, real_var = parallel_codes.encode_fixed, parallel_codes.encode_var

    def spy_fixed(*args: Any, **kwargs: Any) -> Any:
        calls.append("fixed")
        return real_fixed(*args, **kwargs)

    def spy_var(*args: Any, **kwargs: Any) -> Any:
        calls.append("var")
        return real_var(*args, **kwargs)

    def run(threads: int) -> Any:
        return dpselect.select_partitions(table, privacy_unit="user", by=["a", "s"], epsilon=2.0, delta=1e-6,
                                          max_partitions_contributed=3, counts=True,
                                          rng=InsecureDeterministicRNG(seed=21), threads=threads)

    first = run(1)
    assert first.num_rows > 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(parallel_codes, "encode_fixed", spy_fixed)
        patch.setattr(parallel_codes, "encode_var", spy_var)
        for threads in (2, 3, 8):
            calls.clear()
            assert run(threads).equals(first), threads
            # once coding first, every column on the threads: the strings, the integers, the pairs
            assert sorted(calls) == ["fixed", "fixed", "var"], (threads, calls)
