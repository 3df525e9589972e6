"""Codes that continue across batches on every thread: the shards' maps kept in a store
(csrc/shard_maps.h, ``_count.KeyStore``) give, batch after batch, exactly the codes of one
one-thread code map fed the same batches (csrc/keymap.h): a value seen before keeps its code, a
new one gets the next in order of first appearance, nulls one value. A batch that fails before its
values enter the maps leaves the store as it was; one that fails after breaks it, and every later
batch is refused. The rows path uses it to code streamed batches on every thread
(``KeyFactorizer.encode(..., more=True)``, ``RowCounter`` from ``parallel_codes.MIN_THREADS``
threads), with the same release for any number of threads (docs/rows.md, "Threads")."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpselect
from dpselect import _count, _threads
from dpselect.ingest import _counter, parallel_codes
from dpselect.ingest._encode import KeyFactorizer
from dpselect.testing import InsecureDeterministicRNG
from key_codes_reference import first_appearance

THREADS = (1, 2, 3, 8)
SEED = 20261128  # the data only (numpy's generator never makes noise here)

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")


def _word_args(array: pa.Array) -> tuple[Any, ...]:
    validity, values = array.buffers()
    return len(array), array.offset, validity, values, array.type.bit_width // 8


def _var_args(array: pa.Array) -> tuple[Any, ...]:
    validity, offsets, data = array.buffers()
    wide = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
    return len(array), array.offset, validity, offsets, wide, data


def _map_codes(code_map: _count.KeyMap, array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    if not pa.types.is_string(array.type) and not pa.types.is_large_binary(array.type):
        return code_map.encode_fixed(*_word_args(array))
    return code_map.encode_var(*_var_args(array))


def _store_codes(store: _count.KeyStore, array: pa.Array, threads: int,
                 chunks: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    if store.kind == "word":
        return parallel_codes.encode_fixed(*_word_args(array), threads, 0, "key", chunks, store=store)
    return parallel_codes.encode_var(*_var_args(array), threads, 0, "key", chunks, store=store)


def _batches(kind: str) -> list[pa.Array]:
    """Batches of 0 to 30,000 rows over one alphabet (so later batches repeat earlier values and
    bring new ones), nulls in some, slices with an offset in others."""
    g = np.random.default_rng(SEED)
    out = []
    for i, n in enumerate((3_000, 0, 1, 17, 30_000, 5, 12_000, 2_000)):
        values = np.minimum(g.zipf(1.2, n + 3), 50_000 if kind != "int8" else 120)
        nulls = g.random(n + 3) < (0.1 if i % 3 else 0.0)
        if kind == "int64":
            array = pa.array(values.astype(np.int64) - 7, mask=nulls)
        elif kind == "int8":
            array = pa.array(values.astype(np.int8), mask=nulls)
        elif kind == "int16":
            array = pa.array(values.astype(np.int16), mask=nulls)
        elif kind == "float32":
            array = pa.array(values.astype(np.float32) / 8, mask=nulls)
        elif kind == "string":
            array = pa.array([f"v{v}" * (v % 4) for v in values.tolist()], type=pa.string(), mask=nulls)
        else:  # large_binary, with values longer than a word
            array = pa.array([b"x" * 70 + str(v).encode() for v in values.tolist()], type=pa.large_binary(), mask=nulls)
        out.append(array.slice(i % 3, n))
    return out


KINDS = {"int64": "word", "int8": "word", "int16": "word", "float32": "word", "string": "bytes",
         "large_binary": "bytes"}


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_store_continues_the_one_thread_maps_codes_batch_after_batch(kind: str, threads: int) -> None:
    code_map = _count.KeyMap(KINDS[kind], 12345)
    store = _count.KeyStore(KINDS[kind], 99)
    for array in _batches(kind):
        expected_codes, expected_new = _map_codes(code_map, array)
        chunks = None if threads == 1 else max(1, min(7, len(array)))
        codes, new_rows = _store_codes(store, array, threads, chunks)
        np.testing.assert_array_equal(codes, expected_codes)
        np.testing.assert_array_equal(new_rows, expected_new)
        assert len(store) == len(code_map)
    assert not store.broken and store.nbytes > 0


def test_the_batches_share_values_so_a_store_that_forgets_them_is_caught() -> None:
    """A broken copy that starts every batch with empty maps (a new store each batch) gives other
    codes on the same batches: the test above can fail."""
    code_map = _count.KeyMap("word", 1)
    differs = False
    for array in _batches("int64"):
        expected, _ = _map_codes(code_map, array)
        forgetful, _ = _store_codes(_count.KeyStore("word", 5), array, 3, max(1, min(7, len(array))))
        differs |= not np.array_equal(forgetful, expected)
    assert differs


@settings(max_examples=120, deadline=None)
@given(data=st.data(), threads=st.integers(1, 5), strings=st.booleans())
def test_law_codes_are_first_appearance_over_the_concatenated_batches(data: st.DataObject, threads: int,
                                                                     strings: bool) -> None:
    values = data.draw(st.lists(st.one_of(st.none(), st.integers(-4, 12)), max_size=120))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(values)), max_size=5)))
    store = _count.KeyStore("bytes" if strings else "word", data.draw(st.integers(0, 2**64 - 1)))
    got: list[int] = []
    for lo, hi in zip([0, *cuts], [*cuts, len(values)]):
        part = values[lo:hi]
        array = pa.array([None if v is None else f"s{v}" for v in part], type=pa.string()) if strings \
            else pa.array(part, type=pa.int64())
        chunks = data.draw(st.integers(1, len(part) + 1))
        codes, new_rows = _store_codes(store, array, threads, chunks)
        before = len(got)
        got.extend(codes.tolist())
        # new_rows: the batch's rows where the codes after the earlier batches' first appear
        expected_all, expected_new = first_appearance(values[:hi])
        assert [r - lo for r in expected_new if r >= lo] == new_rows.tolist()
        assert got == expected_all[:hi] and len(got) == before + len(part)
    assert len(store) == len(set(values))


# ------------------------------------------------------------------ failures

def test_a_batch_abandoned_after_its_values_entered_the_maps_breaks_the_store() -> None:
    store = _count.KeyStore("word", 3)
    _store_codes(store, pa.array(np.arange(100, dtype=np.int64)), 1)
    values = np.arange(50, 150, dtype=np.int64)
    job = _count.ShardedKeyCodes(100, 0, None, values, 8, 1, 0, "key", store)
    for name, kind in job.phases():
        if name == "rank_count":
            break  # abandoned with its new values in the maps and no codes given
        method = getattr(job, name)
        if kind == "once":
            method()
        else:
            for piece in range(_count.KEY_SHARDS if kind == "shard" else 1):
                method(piece)
    del job, method  # the last bound method holds the coder too
    assert store.broken
    with pytest.raises(RuntimeError, match="an earlier batch failed while being coded"):
        _store_codes(store, pa.array(values), 1)


def test_a_batch_refused_before_its_values_entered_the_maps_leaves_the_store_usable() -> None:
    """Bad offsets are found by the count, before any value enters the maps: the error names the
    row, the store is released whole, and the next batch continues the codes."""
    store, code_map = _count.KeyStore("bytes", 3), _count.KeyMap("bytes", 4)
    first, last = pa.array(["a", "b", None, "a"]), pa.array(["c", "a", None, "d"])
    _map_codes(code_map, first)
    _store_codes(store, first, 2)
    corrupt = (3, 0, None, np.array([0, 2, 1, 3], np.int32), False, np.frombuffer(b"abc", np.uint8))
    for threads, chunks in ((1, 1), (2, 3)):
        with pytest.raises(ValueError, match="offsets of row 1 are out of range"):
            parallel_codes.encode_var(*corrupt, threads, 0, "key", chunks, store=store)
    assert not store.broken and len(store) == 3
    expected = _map_codes(code_map, last)
    got = _store_codes(store, last, 2)
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])


def test_one_batch_at_a_time_and_one_kind_of_values() -> None:
    store = _count.KeyStore("word", 3)
    values = np.arange(10, dtype=np.int64)
    job = _count.ShardedKeyCodes(10, 0, None, values, 8, 1, 0, "key", store)
    with pytest.raises(RuntimeError, match="in use by another batch"):
        _count.ShardedKeyCodes(10, 0, None, values, 8, 1, 0, "key", store)
    assert job.run()[0].tolist() == list(range(10))
    assert _count.ShardedKeyCodes(10, 0, None, values, 8, 1, 0, "key", store).run()[1].tolist() == []
    with pytest.raises(RuntimeError, match="the other kind of values"):
        _count.ShardedStringCodes(1, 0, None, np.array([0, 1], np.int32), False, np.frombuffer(b"a", np.uint8), 1, 0,
                                  "key", store)
    with pytest.raises(ValueError, match="kind must be 'word' or 'bytes'"):
        _count.KeyStore("words", 1)
    with pytest.raises(RuntimeError, match=r"run\(\) codes a column of one chunk"):
        _count.ShardedKeyCodes(10, 0, None, values, 8, 2, 0, "key", _count.KeyStore("word", 1)).run()


def test_a_per_shard_phase_takes_ranges_of_shards_each_once() -> None:
    values = np.arange(2_000, dtype=np.int64) % 300
    job = _count.ShardedKeyCodes(len(values), 0, None, values, 8, 2, 7, "key")
    for name, kind in job.phases():
        method = getattr(job, name)
        if kind == "once":
            method()
        elif kind == "chunk":
            method(0)
            method(1)
        elif name == "encode":
            with pytest.raises(ValueError, match="end"):
                method(10, 10)  # an empty range
            with pytest.raises(ValueError, match="end"):
                method(0, _count.KEY_SHARDS + 1)
            method(0, 100)
            with pytest.raises(RuntimeError, match="already called on piece 99"):
                method(99, 120)
            method(130, _count.KEY_SHARDS)
            with pytest.raises(RuntimeError, match="already called on piece 130"):
                method(120, 140)  # refused whole: 120 .. 129 stay free
            method(120, 130)
            with pytest.raises(RuntimeError, match="out of order"):  # shards 100 .. 119 not encoded
                job.rank_count(0)
            method(100, 120)
        else:
            method(0, _count.KEY_SHARDS)
    codes, new_rows = job.result()
    assert codes.tolist() == (np.arange(2_000) % 300).tolist() and new_rows.tolist() == list(range(300))


# ------------------------------------------------------------------ the column coder

@pytest.fixture
def sharded_calls(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Inputs of a thousand rows take the threaded path (chunks of 500 rows); each call of the
    sharded coder is recorded (with a store or not), so a test cannot pass on the one-thread map."""
    calls: list[bool] = []
    fixed, var = parallel_codes.encode_fixed, parallel_codes.encode_var

    def spy(real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(kwargs.get("store") is not None)
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(parallel_codes, "MIN_ROWS", 1_000)
    monkeypatch.setattr(parallel_codes, "_CHUNK_ROWS", 500)
    monkeypatch.setattr(parallel_codes, "encode_fixed", spy(fixed))
    monkeypatch.setattr(parallel_codes, "encode_var", spy(var))
    return calls


def _column_batches() -> dict[str, list[Any]]:
    g = np.random.default_rng(SEED)
    ints = [pa.array(g.integers(0, 3_000, n)) for n in (4_000, 300, 2_500, 0, 1_200)]
    return {
        "int64": ints,
        "int32 then int64": [ints[0].cast(pa.int32()), *ints[1:]],
        "nulls first": [pa.nulls(1_500), *ints],
        "strings, chunked": [pa.chunked_array([pa.array([f"k{v}" for v in a.to_pylist()], type=pa.string())
                                                for a in (ints[0].slice(0, 1_100), ints[0].slice(1_100))]),
                             *(pa.array([f"k{v}" for v in a.to_pylist()], type=pa.string()) for a in ints[1:])],
        "booleans": [pa.array(g.random(n) < 0.3, mask=g.random(n) < 0.1) for n in (2_000, 1_500)],
    }


@pytest.mark.parametrize("threads", THREADS[1:])
@pytest.mark.parametrize("name", list(_column_batches()))
def test_a_column_streamed_on_several_threads_keeps_the_one_thread_codes_and_keys(
        sharded_calls: list[bool], name: str, threads: int) -> None:
    one, many = KeyFactorizer("k"), KeyFactorizer("k")
    for batch in _column_batches()[name]:
        np.testing.assert_array_equal(many.encode(batch, threads, more=True), one.encode(batch, 1))
        assert many.values.equals(one.values) and len(many) == len(one)
    assert any(sharded_calls)  # a store coded batches
    assert many.nbytes > 0


def test_without_more_a_first_batch_keeps_no_maps_and_a_later_one_rebuilds_them(sharded_calls: list[bool]) -> None:
    """The whole-input case: the first batch coded on every thread without a store (its maps
    freed); a batch that comes after all the same gets the earlier values' codes."""
    g = np.random.default_rng(SEED)
    first, later = pa.array(g.integers(0, 900, 3_000)), pa.array(g.integers(0, 1_200, 2_000))
    one, many = KeyFactorizer("k"), KeyFactorizer("k")
    np.testing.assert_array_equal(many.encode(first, 4), one.encode(first))
    assert sharded_calls == [False] and many.nbytes == 0
    np.testing.assert_array_equal(many.encode(later, 4, more=True), one.encode(later))
    assert many.values.equals(one.values)
    assert sharded_calls[1:] == [True, True]  # the earlier values into a new store, then the batch


def test_a_column_of_several_chunks_is_coded_chunk_after_chunk_on_every_thread(sharded_calls: list[bool]) -> None:
    """A whole input read from Parquet comes in chunks (row groups): they continue one another's
    codes through a store, each on every thread, even when no batch follows."""
    g = np.random.default_rng(SEED)
    column = pa.chunked_array([pa.array(g.integers(0, 900, n)) for n in (3_000, 1_500, 10, 2_000)])
    one, many = KeyFactorizer("k"), KeyFactorizer("k")
    np.testing.assert_array_equal(many.encode(column, 4), one.encode(column))
    assert many.values.equals(one.values)
    assert sharded_calls and all(sharded_calls)  # every chunk through the store


def test_small_chunks_are_joined_before_the_store_codes_them(sharded_calls: list[bool],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Twenty chunks of 300 rows (a CSV reader's blocks): joined into groups of at least
    ``GROUP_ROWS`` (1,000 here) rows, five calls of the coder instead of twenty, the same codes."""
    monkeypatch.setattr(parallel_codes, "GROUP_ROWS", 1_000)
    g = np.random.default_rng(SEED)
    column = pa.chunked_array([pa.array([f"s{v}" for v in g.integers(0, 700, 300)]) for _ in range(20)])
    one, many = KeyFactorizer("k"), KeyFactorizer("k")
    np.testing.assert_array_equal(many.encode(column, 3), one.encode(column))
    assert many.values.equals(one.values)
    assert sharded_calls == [True] * 5


def test_a_whole_input_of_row_groups_codes_its_keys_first_the_same_for_any_thread_count(
        sharded_calls: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    """Integer privacy units, keys in several chunks (a Parquet file's row groups): from 4
    threads the keys are coded before the grouping, chunk after chunk; the same release."""
    monkeypatch.delenv(_threads.ENV_VAR, raising=False)
    frame = _frame()
    table = pa.concat_tables([pa.Table.from_pandas(frame.iloc[i:i + 6_000], preserve_index=False)
                              for i in range(0, len(frame), 6_000)])
    assert table.column("skey").num_chunks == 4

    def release(threads: int) -> pa.Table:
        return dpselect.select_partitions(table, privacy_unit="iuser", by="skey", epsilon=2.0, delta=1e-6,
                                          max_partitions_contributed=3, counts=True,
                                          rng=InsecureDeterministicRNG(seed=17), threads=threads)

    first = release(1)
    assert not sharded_calls and first.num_rows > 0
    for threads in (4, 8):
        assert release(threads).equals(first)
    assert sharded_calls and all(sharded_calls)


# ------------------------------------------------------------------ the rows path

@pytest.fixture
def wide(monkeypatch: pytest.MonkeyPatch, sharded_calls: list[bool]) -> list[bool]:
    """The rows path codes column after column on every thread from 4 threads on; pieces of
    5,000 rows, so that a batch has several."""
    monkeypatch.setattr(_counter, "_WIDE_PIECE_ROWS", 5_000)
    monkeypatch.delenv(_threads.ENV_VAR, raising=False)
    return sharded_calls


def _frame(n: int = 24_000) -> pd.DataFrame:
    g = np.random.default_rng(SEED)
    return pd.DataFrame({"user": [f"u{v}" for v in g.integers(0, 3_000, n)], "iuser": g.integers(0, 3_000, n),
                         "ikey": g.integers(0, 200, n), "skey": [f"k{v}" for v in g.integers(0, 200, n)],
                         "second": g.integers(0, 3, n)})


def _streamed(table: pa.Table, user: str, by: list[str], threads: int, batch_rows: int = 7_000) -> Any:
    counter = _counter.RowCounter(user, by)
    with _threads.using(threads):
        for batch in table.to_batches(max_chunksize=batch_rows):
            counter.feed(batch)
        return counter.finish(3, None, InsecureDeterministicRNG(seed=11))


@pytest.mark.parametrize("user, by", [("user", ["ikey"]), ("user", ["skey"]), ("iuser", ["skey", "second"])],
                         ids=["string users, int keys", "string users, string keys", "int users, composite keys"])
def test_streamed_batches_give_the_same_counts_for_any_thread_count(wide: list[bool], user: str, by: list[str]) -> None:
    table = pa.Table.from_pandas(_frame(), preserve_index=False)
    first = _streamed(table, user, by, 1)
    assert not wide and len(first.counts) > 0
    for threads in (4, 8):
        got = _streamed(table, user, by, threads)
        assert got.keys.equals(first.keys)
        np.testing.assert_array_equal(got.counts, first.counts)
    assert any(wide)  # the stores coded streamed pieces


def test_a_whole_input_with_string_users_is_the_same_for_any_thread_count(wide: list[bool]) -> None:
    df = _frame()

    def release(threads: int) -> pd.DataFrame:
        return dpselect.select_partitions(df, privacy_unit="user", by="skey", epsilon=2.0, delta=1e-6,
                                          max_partitions_contributed=3, counts=True,
                                          rng=InsecureDeterministicRNG(seed=17), threads=threads)

    first = release(1)
    for threads in (4, 8):
        pd.testing.assert_frame_equal(release(threads), first)
    assert wide


def test_row_codes_for_a_grouped_release_are_the_same_for_any_thread_count(wide: list[bool]) -> None:
    table = pa.Table.from_pandas(_frame(), preserve_index=False)

    def codes(threads: int) -> tuple[np.ndarray, np.ndarray, Any]:
        counter = _counter.RowCounter("user", ["skey"])
        with _threads.using(threads):
            parts = [counter.encode(batch)[:2] for batch in table.to_batches(max_chunksize=9_000)]
        users, partitions = (np.concatenate(p) for p in zip(*parts))
        return users, partitions, counter.keys_of(np.arange(counter.n_partitions))

    users, partitions, keys = codes(1)
    for threads in (4, 8):
        got = codes(threads)
        np.testing.assert_array_equal(got[0], users)
        np.testing.assert_array_equal(got[1], partitions)
        assert got[2].equals(keys)
    assert any(wide)
    # a whole input (aggregate's call): one piece, no store kept, the same codes
    whole = _counter.RowCounter("user", ["skey"])
    with _threads.using(4):
        got_users, got_partitions, _ = whole.encode(table, more=False)
    assert whole._users.nbytes == 0
    np.testing.assert_array_equal(got_users, users)
    np.testing.assert_array_equal(got_partitions, partitions)
