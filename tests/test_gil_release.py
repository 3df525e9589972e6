"""Every batch entry point of the extension modules releases the GIL while its C loop runs: shown
by an ordering of events, without measuring time.

The switch interval is made so long (``sys.setswitchinterval(1e6)``, restored after) that the
interpreter never asks a thread holding the GIL to drop it. Thread A sets an event, makes one call,
then sets ``done``; the main thread waits on that event. While A holds the GIL the main thread
cannot run at all, even once the event is set: if the call keeps the GIL, the main thread wakes
only after A has finished and sees ``done`` set, every time. If the call releases the GIL, the
main thread runs while A is still inside it and sees ``done`` unset. Seeing it unset once proves
the release; not seeing it can only mean the main thread was not scheduled in time, so a call is
given a few tries, each long enough (tens of milliseconds of C work) that one suffices.

The control cases show that the check can fail: a pure-Python copy of a kernel loop and a
builtin that runs in C holding the GIL are caught, and one C function (libc's ``memset``) is
caught when called through ``ctypes.PyDLL`` (which keeps the GIL) and passes through
``ctypes.CDLL`` (which releases it). The speed two threads gain from the release is measured in
``bench/bench_threads.py``, not here.

The entry points are called directly, with inputs built beforehand: the public functions split
big inputs over a worker pool and would wait on it (a wait releases the GIL too), which would
hide a kernel that holds it.
"""
from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dpselect
from dpselect import _bound, _count, _kernel, _noise, _rng, _weighted
from dpselect.mechanisms.weighted import UserSets, set_weights

DEADLINE_S = 120.0  # a deadlock guard only: every wait below normally ends within a second
TRIES = 4  # a release is proven by one try; more only cover a main thread not scheduled in time
SEED = 20240917  # the inputs only (numpy's generator makes data here, never noise)


def _main_thread_ran_during(call: Callable[[], object]) -> bool:
    """One try: True if the main thread ran Python code while another thread was inside call()."""
    started = threading.Event()
    state = {"done": False, "error": None}

    def run() -> None:
        started.set()
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            state["error"] = exc
        state["done"] = True

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e6)
    try:
        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        assert started.wait(DEADLINE_S), "the worker thread never started"
        ran_during = not state["done"]
    finally:
        sys.setswitchinterval(interval)
    worker.join(DEADLINE_S)
    assert not worker.is_alive(), "the call did not finish (deadlock)"
    if state["error"] is not None:
        raise state["error"]
    return ran_during


def assert_releases_the_gil(prepare: Callable[[], Callable[[], object]], what: str) -> None:
    """prepare() builds the inputs (in this thread) and returns the call to check."""
    for _ in range(TRIES):
        if _main_thread_ran_during(prepare()):
            return
    raise AssertionError(f"{what}: the main thread never ran while it did ({TRIES} tries): it holds the GIL")


def _rows(n: int, users: int = 200_000, partitions: int = 5_000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED)
    return (rng.integers(0, users, n).astype(np.uint32), rng.integers(0, partitions, n).astype(np.uint32))


def _fed_counter(n: int) -> _count.PairCounter:
    counter = _count.PairCounter(n)
    counter.feed(*_rows(n))
    return counter


def _select_into() -> Callable[[], object]:
    counts = np.full(8_000_000, 12, np.int64)
    out = np.empty(counts.size, np.bool_)
    handle = dpselect.make_strategy("pi_opt", epsilon=1.0, delta=1e-5)._handle
    return lambda: _kernel.select_into(counts, handle, out)


def _release_into() -> Callable[[], object]:
    counts = np.full(1_000_000, 12, np.int64)
    keep, noisy = np.empty(counts.size, np.bool_), np.empty(counts.size, np.int64)
    release = dpselect.make_strategy("release", epsilon=1.0, delta=1e-5)
    return lambda: _kernel.release_into(counts, release._noise, release.k, keep, noisy)


def _first_negative() -> Callable[[], object]:
    counts = np.full(16_000_000, 12, np.int64)
    return lambda: _kernel.first_negative(counts)


def _weighted_round() -> Callable[[], object]:
    sets = UserSets.from_codes(*_rows(4_000_000), 5_000)
    weights, histogram = set_weights(8, "l2"), np.zeros(5_000, np.int64)
    return lambda: _weighted.weighted_round(sets.ends, sets.partitions, None, 8, weights, histogram)


def _weighted_prefix() -> Callable[[], object]:
    sets = UserSets.from_codes(*_rows(4_000_000), 5_000)
    weights, histogram = set_weights(8, "l2"), np.zeros(5_000, np.int64)
    return lambda: _weighted.weighted_prefix(sets.ends, sets.partitions, None, 8, weights, histogram)


def _shuffle_sets() -> Callable[[], object]:
    sets = UserSets.from_codes(*_rows(4_000_000), 5_000)
    return lambda: _weighted.shuffle_sets(sets.ends, sets.partitions)


def _normal_upper_tail() -> Callable[[], object]:
    z = np.linspace(-8.0, 8.0, 4_000_000)
    return lambda: _weighted.normal_upper_tail(z)


def _bound_rows() -> Callable[[], object]:
    users, partitions = _rows(1_000_000)
    values = [np.arange(users.size, dtype=np.int64)]
    return lambda: _bound.bound_rows(users, partitions, 200_000, 5_000, 4, 2, values, None)


def _keymap_fixed() -> Callable[[], object]:
    values = np.random.default_rng(SEED).integers(0, 1_000, 4_000_000).astype(np.int32)
    return lambda: _count.KeyMap("word", 7).encode_fixed(values.size, 0, None, values, 4)


def _keymap_var() -> Callable[[], object]:
    cells = [f"k{x}".encode() for x in np.random.default_rng(SEED).integers(0, 100_000, 1_000_000).tolist()]
    offsets = np.cumsum([0] + [len(c) for c in cells]).astype(np.int32)
    data = b"".join(cells)
    return lambda: _count.KeyMap("bytes", 7).encode_var(len(cells), 0, None, offsets, False, data)


def _dictionary_codes() -> Callable[[], object]:
    indices = np.random.default_rng(SEED).integers(0, 1_000, 16_000_000).astype(np.int32)
    return lambda: _count.DictionaryCodes(1_000).encode(indices.size, 0, None, indices, 4)


def _shard_of(value: int, seed: int) -> int:
    """csrc/key_shards.c's shard of a value: the top bits of murmur3's finaliser of value ^ seed."""
    mask = 2**64 - 1
    k = (value ^ seed) & mask
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & mask
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & mask
    k ^= k >> 33
    return k >> (64 - (_count.KEY_SHARDS.bit_length() - 1))


def _fmix64(k: int) -> int:
    mask = 2**64 - 1
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & mask
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & mask
    return k ^ (k >> 33)


def _string_shard(value: bytes, seed: int) -> int:
    """csrc/key_shards.c's shard of a string: the top bits of hashing.h's dps_hash_bytes."""
    mask, golden = 2**64 - 1, 0x9E3779B97F4A7C15
    h = seed ^ ((len(value) * golden) & mask)
    whole = len(value) - len(value) % 8
    for at in range(0, whole, 8):
        h = ((h ^ _fmix64(int.from_bytes(value[at:at + 8], "little"))) * golden) & mask
        h ^= h >> 29
    if whole < len(value):
        rest = int.from_bytes(value[whole:], "little") ^ ((len(value) - whole) << 56)
        h = ((h ^ _fmix64(rest)) * golden) & mask
    return _fmix64(h) >> (64 - (_count.KEY_SHARDS.bit_length() - 1))


def _run_up_to(job: Any, phase: str, busy: int, keep: object) -> Callable[[], object]:
    """A sharded coder's phases run on its one chunk and every shard up to ``phase``, and that
    phase on its busy piece returned (the shard ``busy``, or the chunk)."""
    for name, kind in job.phases():
        method = getattr(job, name)
        if kind == "once":
            method()
            continue
        piece = busy if kind == "shard" else 0
        if kind == "shard":  # the empty shards first
            for s in range(_count.KEY_SHARDS):
                if s != busy:
                    method(s)
        if name == phase:
            return lambda: (method(piece), keep)  # the buffers kept alive while the call runs
        method(piece)
    raise AssertionError(f"no phase {phase}")


def _sharded_strings(n: int, phase: str) -> Callable[[], object]:
    """ShardedStringCodes over n rows of one 12-byte string (one chunk, one busy shard) brought up
    to ``phase``, and that phase on its busy piece."""
    seed, value = 7, b"one-string-k"
    offsets = np.arange(n + 1, dtype=np.int64) * len(value)
    data = np.frombuffer(value * n, np.uint8)
    job = _count.ShardedStringCodes(n, 0, None, offsets, True, data, 1, seed)
    return _run_up_to(job, phase, _string_shard(value, seed), (offsets, data))


def _sharded(n: int, phase: str) -> Callable[[], object]:
    """ShardedKeyCodes over n int32 rows (one chunk) brought up to ``phase``, and that phase on
    its one busy piece: the values are a few values of one shard, so that shard's map does all the
    rows' work."""
    seed = 7
    busy = _shard_of(0, seed)
    same = [v for v in range(2_000) if _shard_of(v, seed) == busy]
    values = np.array(same, np.int32)[np.random.default_rng(SEED).integers(0, len(same), n)]
    job = _count.ShardedKeyCodes(n, 0, None, values, 4, 1, seed)
    return _run_up_to(job, phase, busy, values)


def _sharded_run_in_store(n: int) -> Callable[[], object]:
    """ShardedKeyCodes.run over n int64 rows with a store that coded a batch before: every phase
    and the store's maps in one call."""
    values = np.random.default_rng(SEED).integers(0, 1 << 20, n)
    store = _count.KeyStore("word", 7)
    _count.ShardedKeyCodes(1_000, 0, None, values[:1_000], 8, 1, 0, "key", store).run()
    job = _count.ShardedKeyCodes(n, 0, None, values, 8, 1, 0, "key", store)
    return lambda: (job.run(), values, store)


def _pair_feed() -> Callable[[], object]:
    users, partitions = _rows(1_000_000)
    return lambda: _count.PairCounter(users.size).feed(users, partitions)


def _pair_group() -> Callable[[], object]:
    counter = _fed_counter(2_000_000)
    return lambda: counter.group(5_000)


def _pair_finish() -> Callable[[], object]:
    counter = _fed_counter(2_000_000)
    return lambda: counter.finish(5_000, 4, None, None)


def _scatter_pairs() -> Callable[[], object]:
    users, partitions = _rows(8_000_000)
    return lambda: _count.scatter_pairs(users, partitions, 6)


def _pair_shard_counts() -> Callable[[], object]:
    users, partitions = _rows(8_000_000)
    return lambda: _count.pair_shard_counts(users, partitions, 6, 0, users.size, np.zeros(64, np.uintp))


def _place_pairs() -> Callable[[], object]:
    users, partitions = _rows(8_000_000)
    counts = np.zeros(64, np.uintp)
    _count.pair_shard_counts(users, partitions, 6, 0, users.size, counts)
    starts = (np.cumsum(counts) - counts).astype(np.uintp)
    limits = (starts + counts).astype(np.uintp)
    keys = np.empty(users.size, np.uint64)
    return lambda: _count.place_pairs(users, partitions, 6, 0, users.size, starts.copy(), limits, keys)


def _pair_feed_keys() -> Callable[[], object]:
    keys, _ = _count.scatter_pairs(*_rows(1_000_000), 0)
    return lambda: _count.PairCounter(keys.size).feed_keys(keys)


def _pair_finish_shared() -> Callable[[], object]:
    counter = _fed_counter(2_000_000)
    counts = np.zeros(5_000, np.int64)
    return lambda: counter.finish(5_000, 4, None, None, out=counts, shared=True)


def _bound_rows_range() -> Callable[[], object]:
    users, partitions = _rows(1_000_000)
    values = [np.arange(users.size, dtype=np.int64)]
    rows = np.arange(users.size, dtype=np.uint32)
    return lambda: _bound.bound_rows_range(users, partitions, 5_000, 4, 2, values, None, rows, 0, 200_000)


def _bound_rows_mark() -> Callable[[], object]:
    users, partitions = _rows(1_000_000)
    rows = np.arange(users.size, dtype=np.uint32)
    return lambda: _bound.bound_rows_mark(users, partitions, rows, 5_000, 4, 2, None, 0, 200_000,
                                          np.zeros(users.size, np.uint8))


def _marked(n: int) -> tuple[np.ndarray, np.ndarray]:
    """n rows' partitions and marks: every row kept and counting its user."""
    _, partitions = _rows(n)
    return partitions, np.full(n, _bound.MARK_KEPT | _bound.MARK_USER | _bound.MARK_BEFORE, np.uint8)


def _shard_rows_place_copies() -> Callable[[], object]:
    users, partitions = _rows(4_000_000)
    counts = np.zeros(64, np.uintp)
    _bound.shard_rows_count(users, 0, users.size, 200_000, counts)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.uintp)
    limits = (starts + counts).astype(np.uintp)
    rows, users_out, partitions_out = (np.empty(users.size, np.uint32) for _ in range(3))
    return lambda: _bound.shard_rows_place(users, 0, users.size, 200_000, starts.copy(), limits, rows,
                                           copies=(partitions, users_out, partitions_out))


def _marked_rows_count() -> Callable[[], object]:
    partitions, marks = _marked(8_000_000)
    return lambda: _bound.shard_rows_count(partitions, 0, partitions.size, 5_000, np.zeros(64, np.uintp), marks)


def _marked_rows_place() -> Callable[[], object]:
    partitions, marks = _marked(4_000_000)
    counts = np.zeros(64, np.uintp)
    _bound.shard_rows_count(partitions, 0, partitions.size, 5_000, counts, marks)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.uintp)
    limits = (starts + counts).astype(np.uintp)
    rows = np.empty(partitions.size, np.uint32)
    return lambda: _bound.shard_rows_place(partitions, 0, partitions.size, 5_000, starts.copy(), limits, rows, marks)


def _partition_sums() -> Callable[[], object]:
    partitions, marks = _marked(4_000_000)
    values = [np.arange(partitions.size, dtype=np.int64)]
    rows = np.arange(partitions.size, dtype=np.uint32)
    out = (np.zeros(5_000, np.int64), np.zeros(5_000, np.int64), np.zeros((1, 5_000, 2), np.uint64),
           np.zeros(5_000, np.int64))
    return lambda: _bound.partition_sums(partitions, marks, rows, 0, 5_000, 5_000, values, out)


def _shard_rows_count() -> Callable[[], object]:
    users, _ = _rows(8_000_000)
    return lambda: _bound.shard_rows_count(users, 0, users.size, 200_000, np.zeros(64, np.uintp))


def _shard_rows_place() -> Callable[[], object]:
    users, _ = _rows(4_000_000)
    counts = np.zeros(64, np.uintp)
    _bound.shard_rows_count(users, 0, users.size, 200_000, counts)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.uintp)
    limits = (starts + counts).astype(np.uintp)
    rows = np.empty(users.size, np.uint32)
    return lambda: _bound.shard_rows_place(users, 0, users.size, 200_000, starts.copy(), limits, rows)


def _radix(n: int, stage: str) -> Callable[[], object]:
    """A RadixPairs of n rows (int64 users, one piece) brought up to ``stage``, and that step."""
    users, partitions = _rows(n)
    wide = users.astype(np.int64)
    radix = _count.RadixPairs(n, 7)
    hist = radix.piece_histograms(1)
    if stage == "count":
        return lambda: radix.count_piece(n, 0, wide, 8, hist, 0)
    radix.count_piece(n, 0, wide, 8, hist, 0)
    radix.layout_pieces(hist)
    if stage == "scatter":
        return lambda: radix.scatter_piece(n, 0, wide, 8, hist, 0)
    radix.scatter_piece(n, 0, wide, 8, hist, 0)
    radix.scatter_piece(n, 0, wide, 8, hist, 0, partitions)
    radix.ready()
    if stage == "group":
        return lambda: radix.group(0, radix.n_buckets)
    radix.group(0, radix.n_buckets)
    radix.compact()
    counts = np.zeros(5_000, np.int64)
    return lambda: radix.finish(0, 1, 5_000, 4, None, None, out=counts, shared=True)


def _cumulative() -> np.ndarray:
    return np.cumsum(np.full(100, 2**57, np.uint64))


ENTRY_POINTS: dict[str, Callable[[], Callable[[], object]]] = {
    # selection and release over counts
    "_kernel.select_into": _select_into,
    "_kernel.release_into": _release_into,
    "_kernel.first_negative": _first_negative,
    # the weighted kernel
    "_weighted.weighted_round": _weighted_round,
    "_weighted.weighted_prefix": _weighted_prefix,
    "_weighted.shuffle_sets": _shuffle_sets,
    "_weighted.normal_upper_tail": _normal_upper_tail,
    # the row kernels: bounding, pair counting and grouping, key encoding
    "_bound.bound_rows": _bound_rows,
    "_bound.bound_rows_range": _bound_rows_range,
    "_bound.bound_rows_mark": _bound_rows_mark,
    "_bound.shard_rows_place (copies)": _shard_rows_place_copies,
    "_bound.shard_rows_count (marked rows)": _marked_rows_count,
    "_bound.shard_rows_place (marked rows)": _marked_rows_place,
    "_bound.partition_sums": _partition_sums,
    "_bound.shard_rows_count": _shard_rows_count,
    "_bound.shard_rows_place": _shard_rows_place,
    "_count.RadixPairs.count_piece": lambda: _radix(8_000_000, "count"),
    "_count.RadixPairs.scatter_piece": lambda: _radix(4_000_000, "scatter"),
    "_count.RadixPairs.group": lambda: _radix(2_000_000, "group"),
    "_count.RadixPairs.finish (shared)": lambda: _radix(2_000_000, "finish"),
    "_count.PairCounter.feed": _pair_feed,
    "_count.PairCounter.group": _pair_group,
    "_count.PairCounter.finish": _pair_finish,
    "_count.PairCounter.finish (shared)": _pair_finish_shared,
    "_count.PairCounter.feed_keys": _pair_feed_keys,
    "_count.scatter_pairs": _scatter_pairs,
    "_count.pair_shard_counts": _pair_shard_counts,
    "_count.place_pairs": _place_pairs,
    "_count.KeyMap.encode_fixed": _keymap_fixed,
    "_count.KeyMap.encode_var": _keymap_var,
    "_count.DictionaryCodes.encode": _dictionary_codes,
    "_count.ShardedKeyCodes.count": lambda: _sharded(12_000_000, "count"),
    "_count.ShardedKeyCodes.scatter": lambda: _sharded(8_000_000, "scatter"),
    "_count.ShardedKeyCodes.encode": lambda: _sharded(8_000_000, "encode"),
    "_count.ShardedKeyCodes.finish": lambda: _sharded(8_000_000, "finish"),
    "_count.ShardedKeyCodes.run (a store)": lambda: _sharded_run_in_store(4_000_000),
    "_count.ShardedStringCodes.count": lambda: _sharded_strings(4_000_000, "count"),
    "_count.ShardedStringCodes.scatter": lambda: _sharded_strings(8_000_000, "scatter"),
    "_count.ShardedStringCodes.encode": lambda: _sharded_strings(4_000_000, "encode"),
    "_count.ShardedStringCodes.finish": lambda: _sharded_strings(8_000_000, "finish"),
    # the noise batch
    "_noise.add_discrete_laplace": lambda: (lambda v: lambda: _noise.add_discrete_laplace(v, 3, 1))(
        np.zeros(500_000, np.int64)),
    "_noise.add_discrete_gaussian": lambda: (lambda v: lambda: _noise.add_discrete_gaussian(v, 9, 1))(
        np.zeros(250_000, np.int64)),
    "_noise.bernoulli_exp": lambda: lambda: _noise.bernoulli_exp(1, 3, 2_000_000),
    # the generator's batches
    "_rng.random_bytes": lambda: lambda: _rng.random_bytes(16 << 20),
    "_rng.uniform_below_array": lambda: lambda: _rng.uniform_below_array(10**9, 1_000_000),
    "_rng.bernoulli_fixed": lambda: (lambda q: lambda: _rng.bernoulli_fixed(q))(np.full(8_000_000, 2**63, np.uint64)),
    "_rng.bernoulli_wide": lambda: (lambda q: lambda: _rng.bernoulli_wide(q))(np.full((8_000_000, 1), 2**63, np.uint64)),
    "_rng.sample_cumulative": lambda: (lambda c: lambda: _rng.sample_cumulative(c, 500_000))(_cumulative()),
}


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow) if name in (
    "_count.KeyMap.encode_var", "_count.DictionaryCodes.encode") else name for name in ENTRY_POINTS])
def test_the_batch_entry_point_releases_the_gil(name: str) -> None:
    assert_releases_the_gil(ENTRY_POINTS[name], name)


# ------------------------------------------------------------------ the check can fail

def _pure_python_select() -> Callable[[], object]:
    """A broken copy of the selection loop: the same table lookup per count, in Python."""
    counts = np.full(300_000, 12, np.int64).tolist()
    q = [2**63] * 64

    def select() -> list[bool]:
        return [q[min(c, 63)] > 2**62 for c in counts]

    return select


def _builtin_in_c_with_the_gil() -> Callable[[], object]:
    """A loop in C that keeps the GIL throughout (the builtin sum over a range)."""
    return lambda: sum(range(5_000_000))


def _memset(library: type[ctypes.CDLL]) -> Callable[[], Callable[[], object]]:
    def prepare() -> Callable[[], object]:
        buffer = np.ones(64 << 20, np.uint8)
        memset = library(None).memset
        memset.argtypes, memset.restype = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t], ctypes.c_void_p
        address = buffer.ctypes.data

        def fill() -> None:
            for _ in range(8):  # about half a gigabyte written: tens of milliseconds
                memset(address, 0, buffer.size)

        fill.buffer = buffer  # kept alive while the call runs
        return fill
    return prepare


@pytest.mark.slow
@pytest.mark.parametrize("prepare", [_pure_python_select, _builtin_in_c_with_the_gil, _memset(ctypes.PyDLL)],
                         ids=["pure-Python copy of the select loop", "builtin sum in C", "memset via ctypes.PyDLL"])
def test_a_call_that_keeps_the_gil_is_caught(prepare) -> None:
    """The main thread never runs during these calls, whatever the scheduling: they fail the
    check on every try, deterministically."""
    assert not _main_thread_ran_during(prepare())
    with pytest.raises(AssertionError, match="holds the GIL"):
        assert_releases_the_gil(prepare, "the broken copy")


def test_the_same_c_function_passes_once_it_releases_the_gil() -> None:
    """memset through ctypes.CDLL (which releases the GIL around foreign calls) passes where
    the same memset through ctypes.PyDLL is caught: the check sees the GIL, not C versus Python."""
    assert_releases_the_gil(_memset(ctypes.CDLL), "memset via ctypes.CDLL")


def test_the_switch_interval_is_restored() -> None:
    before = sys.getswitchinterval()
    _main_thread_ran_during(lambda: None)
    assert sys.getswitchinterval() == before
