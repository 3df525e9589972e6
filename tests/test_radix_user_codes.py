"""The radix grouping without places (RadixPairs.scatter_user_codes, csrc/radix_pairs.h): codes
put where their users go by reading the users again give the same groups as the places path,
whatever the order in which the two sides run; misuse is refused. And the whole-input path's
worker threads (the package pool): results do not depend on them, calls from several threads or
after a fork work."""
from __future__ import annotations

import itertools
import os
import signal
import threading

import numpy as np
import pyarrow as pa
import pytest

from dpselect import _workers
from dpselect._count import RadixPairs
from dpselect.ingest.pipeline import select_partitions
from dpselect.testing import InsecureDeterministicRNG

from test_radix_pairs import data, grouped, model, runs_of

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")


def grouped_by_user(users: np.ndarray, parts: np.ndarray, *, splits: int = 1, codes_first: bool = False,
                    seed: int = 7) -> RadixPairs:
    """Every step with scatter_user_codes; the codes of all pieces before any user when
    ``codes_first`` (the codes side never needs the users side)."""
    users = np.ascontiguousarray(users)
    parts = np.ascontiguousarray(parts, dtype=np.uint32)
    radix = RadixPairs(len(users), seed, "user")
    bounds = list(itertools.pairwise(np.linspace(0, len(users), splits + 1).astype(int)))
    width = users.dtype.itemsize
    for lo, hi in bounds:
        radix.count(hi - lo, lo, users, width)
    radix.layout()
    if codes_first:
        for lo, hi in bounds:
            radix.scatter_user_codes(hi - lo, lo, users, width, parts[lo:hi])
        for lo, hi in bounds:
            assert radix.scatter_users(hi - lo, lo, users, width, places=False) is None
    else:
        for lo, hi in bounds:
            radix.scatter_users(hi - lo, lo, users, width, places=False)
            radix.scatter_user_codes(hi - lo, lo, users, width, parts[lo:hi])
    radix.ready()
    radix.group(0, radix.n_buckets // 2)
    radix.group(radix.n_buckets // 2, radix.n_buckets)
    radix.compact()
    return radix


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.int64, np.uint64])
@pytest.mark.parametrize("n", [0, 1, 17, 5_000, 70_000])
def test_codes_by_user_group_as_the_places_path_and_the_model(dtype, n):
    users, parts = data(n, n, max(1, n // 9), 300, dtype)
    reference = runs_of(grouped(users, parts, splits=3))
    assert reference == model(users, parts)[1]
    for codes_first in (False, True):
        assert runs_of(grouped_by_user(users, parts, splits=3, codes_first=codes_first)) == reference


def test_codes_by_user_bound_as_the_places_path_under_the_test_rng():
    users, parts = data(3, 60_000, 4_000, 500)
    results = []
    for radix in (grouped(users, parts, splits=4), grouped_by_user(users, parts, splits=4)):
        rng = InsecureDeterministicRNG(11)
        results.append([radix.finish(s, 2, 500, 3, None, state).tolist()
                        for s, state in enumerate([rng._test_state, rng._test_state])])
    assert results[0] == results[1]


def test_codes_by_user_misuse_is_refused():
    n = 40_000
    users = np.arange(n, dtype=np.int64)
    codes = np.zeros(n, dtype=np.uint32)
    radix = RadixPairs(n, 1, "user")
    with pytest.raises(RuntimeError, match="out of order"):
        radix.scatter_user_codes(n, 0, users, 8, codes)  # before the layout
    radix.count(n, 0, users, 8)
    radix.layout()
    with pytest.raises(ValueError, match="one code per user value"):
        radix.scatter_user_codes(n, 0, users, 8, codes[:-1])
    radix.scatter_user_codes(n // 2, 0, users, 8, codes[: n // 2])
    places = radix.scatter_users(n // 2, 0, users, 8)
    with pytest.raises(RuntimeError, match="out of order"):  # the two ways are not mixed
        radix.scatter_codes(places, codes[: n // 2])
    one_user = np.zeros(n, dtype=np.int64)  # not the values counted: their bucket overflows
    with pytest.raises(RuntimeError, match="out of order"):
        radix.scatter_user_codes(n // 2, n // 2, one_user, 8, codes[: n // 2])
    radix.scatter_users(n // 2, n // 2, users, 8, places=False)
    with pytest.raises(RuntimeError, match="out of order"):  # a failed scatter of codes poisons it
        radix.ready()
    mixed = RadixPairs(4, 1, "user")
    mixed.count(4, 0, users, 8)
    mixed.layout()
    mixed.scatter_codes(mixed.scatter_users(2, 0, users, 8), codes[:2])
    with pytest.raises(RuntimeError, match="out of order"):
        mixed.scatter_user_codes(2, 2, users, 8, codes[:2])


def _table(n: int, seed: int) -> pa.Table:
    gen = np.random.default_rng(seed)  # input data only
    return pa.table({"user": gen.integers(0, n // 5, n), "key": gen.zipf(1.3, n) % 400})


def _select(table: pa.Table, seed: int) -> list[tuple[int, int]]:
    out = select_partitions(table, privacy_unit="user", by="key", epsilon=4.0, delta=1e-3,
                            max_partitions_contributed=2, counts=True, rng=InsecureDeterministicRNG(seed))
    return list(zip(out.column("key").to_pylist(), out.column("noisy_count").to_pylist()))


def test_whole_input_calls_from_several_threads_match_calls_one_at_a_time():
    tables = [_table(40_000, s) for s in range(4)]
    expected = [_select(t, s) for s, t in enumerate(tables)]
    got: list[list[tuple[int, int]] | None] = [None] * 4

    def run(i: int) -> None:
        got[i] = _select(tables[i], i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == expected and all(e for e in expected)


def test_whole_input_calls_share_the_package_worker_pool():
    def worker_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("dpselect-worker")}

    table = _table(20_000, 5)
    _select(table, 1)
    first = worker_threads()
    assert 1 <= len(first) <= _workers.pool_size() and first <= set(_workers.threads())
    for _ in range(3):
        _select(table, 1)
        assert worker_threads() <= set(_workers.threads()) and len(worker_threads()) <= _workers.pool_size()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_whole_input_call_in_a_forked_child_uses_its_own_worker():
    table = _table(20_000, 6)
    expected = _select(table, 3)  # the parent's workers now exist
    assert _workers.threads()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a worker of the parent's would never run its tasks
        signal.alarm(60)  # a hang kills the child, and the comparison below fails
        try:
            os.write(write, repr(_select(table, 3)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        child = f.read()
    os.waitpid(pid, 0)
    assert child == repr(expected)
