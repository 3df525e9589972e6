"""The streaming rows path (RowCounter fed in batches: string privacy units, the CLI's streamed
batches) on every thread: its distinct pairs are kept in a fixed number of pair sets by user code
(64, whatever the thread count), each piece's pairs scattered into them in one pass
(``_count.scatter_pairs``) and inserted by the threads shard group by shard group, and each shard
bounded with its own CSPRNG stream (``shard_test_state``). So with the deterministic test
generator the release is identical for 1, 2, 3 and 8 threads (more threads than this machine's
cores still run the parallel code), and bounding stays uniform per user: every user's pairs are in
one shard (docs/rows.md, "Threads"; docs/privacy/contribution-bounding.md)."""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpselect
from dpselect import _count, _threads
from dpselect.ingest import _counter, radix
from dpselect.rng import shard_test_state
from dpselect.testing import InsecureDeterministicRNG

pa = pytest.importorskip("pyarrow")

THREADS = (1, 2, 3, 8)

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_threads.ENV_VAR, raising=False)


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces of 4096 rows, so that a small input has many and goes through the pipeline."""
    monkeypatch.setattr(_counter, "_PIECE_ROWS", 4096)


def _frame(n: int = 40_000, users: int = 5_000, seed: int = 5) -> pd.DataFrame:
    g = np.random.default_rng(seed)  # the data only; the noise comes from the test CSPRNG
    return pd.DataFrame({
        "user": np.array([f"u{v}" for v in g.integers(0, users, n)], dtype=object),
        "ikey": g.integers(0, 300, n),
        "skey": np.array([f"k{v}" for v in g.integers(0, 300, n)], dtype=object),
    })


# ------------------------------------------------------------------ the same release for any T


@pytest.mark.parametrize("by", ["ikey", "skey"], ids=["int-keys", "string-keys"])
def test_string_privacy_units_release_identically_for_any_thread_count(small_pieces: None, by: str) -> None:
    """Both pipelines (integer keys: the worker encodes the users and inserts the last shard
    group; string keys: the worker encodes the keys and the other threads insert) and the
    bounding: same counts and same keys for every T."""
    df = _frame()

    def release(threads: int) -> pd.DataFrame:
        return dpselect.select_partitions(df, privacy_unit="user", by=by, epsilon=2.0, delta=1e-6,
                                          max_partitions_contributed=3, counts=True,
                                          rng=InsecureDeterministicRNG(seed=17), threads=threads)

    first = release(1)
    assert len(first) > 0
    for threads in THREADS[1:]:
        pd.testing.assert_frame_equal(release(threads), first)


def test_the_cli_streamed_batches_bound_identically_for_any_thread_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`dpselect select` on an input streamed in small batches (no in-memory budget), with
    ``--threads`` 1, 2, 3, 8: the bounded counts it hands to the release are the same. The CLI
    draws from the secure generator, so its bounding is given the test generator here."""
    from dpselect import cli
    from dpselect.io.files import IN_MEMORY_ENV

    monkeypatch.setenv(IN_MEMORY_ENV, "0")
    src = tmp_path / "rows.csv"
    _frame(n=20_000)[["user", "ikey"]].to_csv(src, index=False)
    seen: list[tuple[list[Any], list[int]]] = []
    finish = _counter.RowCounter.finish

    def deterministic(self: _counter.RowCounter, kappa: int, cap: int | None, rng: object = None) -> Any:
        counts = finish(self, kappa, cap, InsecureDeterministicRNG(seed=23))
        order = np.argsort(counts.keys.column("ikey").to_numpy())
        seen.append((counts.keys.column("ikey").to_numpy()[order].tolist(), counts.counts[order].tolist()))
        return counts

    monkeypatch.setattr(_counter.RowCounter, "finish", deterministic)
    for threads in THREADS:
        out = tmp_path / f"out{threads}.csv"
        assert cli.main(["select", str(src), "-u", "user", "-b", "ikey", "-e", "2", "-d", "1e-6",
                         "--max-partitions-contributed", "2", "--batch-size", "700", "--threads", str(threads),
                         "-q", "-o", str(out)]) == 0
    assert len(seen) == len(THREADS) and len(seen[0][0]) > 0
    assert all(s == seen[0] for s in seen[1:])


# ------------------------------------------------------------------ many shards, on every thread


class _SpyCounter(_count.PairCounter):
    """A pair set that records the test state each finish is given."""

    finished: list[tuple[int, bytes | None]] = []

    def finish(self, n_partitions: Any, kappa: Any, cap: Any, test_state: Any, *args: Any, **kwargs: Any) -> Any:
        _SpyCounter.finished.append((id(self), None if test_state is None else test_state.seed))
        return super().finish(n_partitions, kappa, cap, test_state, *args, **kwargs)


def test_the_streaming_path_bounds_64_shards_each_with_its_own_stream_on_every_thread(
        small_pieces: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every one of the 64 shards is a pair set of its own, bounded once with the stream of its
    shard; with 8 threads the bounding is split in 8 groups of shards run in parallel."""
    monkeypatch.setattr(_count, "PairCounter", _SpyCounter)
    _SpyCounter.finished = []
    calls: list[tuple[int, bool]] = []
    from dpselect._workers import run_pieces

    def spy(work: Any, pieces: Any, parallel: bool) -> Any:
        calls.append((len(pieces), parallel))
        return run_pieces(work, pieces, parallel)

    monkeypatch.setattr(_counter, "run_pieces", spy, raising=False)
    monkeypatch.setattr(radix, "run_pieces", spy)  # the bounding of shard groups (radix.bound_shard_groups)
    table = pa.Table.from_pandas(_frame(n=30_000), preserve_index=False)
    counter = _counter.RowCounter("user", ["ikey"])
    rng = InsecureDeterministicRNG(seed=3)
    with _threads.using(8):
        counter.feed(table)
        calls.clear()
        counter.finish(2, None, rng)
    assert len({counter_id for counter_id, _ in _SpyCounter.finished}) == 64
    seeds = [seed for _, seed in _SpyCounter.finished]
    state = rng.test_state
    assert sorted(seeds) == sorted(shard_test_state(state, s).seed for s in range(64))  # type: ignore[union-attr]
    assert calls == [(8, True)]


def test_each_shard_set_is_presized_for_its_share_of_the_rows() -> None:
    """The size hint is divided among the 64 sets, not among two."""
    counter = _counter.RowCounter("user", ["ikey"], expected_rows=64 * 10_000)
    counter.feed(pa.table({"user": ["a", "b"], "ikey": [1, 2]}))
    sets = counter._pair_counters()
    assert len(sets) == 64
    # 10 000 pairs a set at most 80 % full: 16 384 slots of 8 bytes, against 2^19 for a half.
    assert max(s.nbytes for s in sets) <= 16_384 * 8


# ------------------------------------------------------------------ bounding stays uniform per user


def test_bounding_in_64_shards_keeps_kappa_uniform_partitions_of_every_user(small_pieces: None) -> None:
    """User u has the five partitions 5u .. 5u + 4 of their own, so the counts (0 or 1) show which
    ones each user kept: exactly κ = 2 of them, each of the C(5, 2) = 10 subsets kept about
    equally often (a chi-square statistic on 9 degrees of freedom under a fixed, generous
    threshold; the test generator's seed is fixed, so the outcome is too), whatever the shard."""
    users, d, kappa = 12_000, 5, 2
    user_ids = np.repeat(np.arange(users), d)
    parts = user_ids * d + np.tile(np.arange(d), users)
    order = np.random.default_rng(8).permutation(parts.size)  # rows in any order
    table = pa.table({"user": pa.array([f"user{u}" for u in user_ids[order]]), "key": pa.array(parts[order])})
    counter = _counter.RowCounter("user", ["key"])
    with _threads.using(3):
        counter.feed(table)
        result = counter.finish(kappa, None, InsecureDeterministicRNG(seed=29))
    kept = result.keys.column("key").to_numpy()
    assert set(result.counts.tolist()) == {1}
    per_user = np.bincount(kept // d, minlength=users)
    assert (per_user == kappa).all()
    mask = np.zeros(users, dtype=np.int64)
    np.add.at(mask, kept // d, 1 << (kept % d))
    subsets = [sum(1 << j for j in c) for c in itertools.combinations(range(d), kappa)]
    observed = np.array([(mask == s).sum() for s in subsets])
    assert observed.sum() == users
    expected = users / len(subsets)
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < 40.0, (chi2, observed)  # P(chi2_9 > 40) < 1e-5


# ------------------------------------------------------------------ the kernel entry points


def test_scatter_pairs_is_a_stable_split_by_the_low_user_bits() -> None:
    g = np.random.default_rng(4)
    users = g.integers(0, 10_000, 50_000).astype(np.uint32)
    partitions = g.integers(0, 900, 50_000).astype(np.uint32)
    keys, starts = _count.scatter_pairs(users, partitions, 6)
    assert starts.shape == (65,) and starts[0] == 0 and starts[-1] == users.size
    for s in (0, 1, 37, 63):
        rows = np.flatnonzero((users & 63) == s)
        want = (users[rows].astype(np.uint64) >> np.uint64(6) << np.uint64(32)) | partitions[rows].astype(np.uint64)
        np.testing.assert_array_equal(keys[starts[s]:starts[s + 1]], want)


def test_scatter_pairs_checks_its_arguments() -> None:
    ok = np.zeros(3, np.uint32)
    with pytest.raises(ValueError, match="same length"):
        _count.scatter_pairs(ok, np.zeros(2, np.uint32), 6)
    with pytest.raises(ValueError, match="shard_bits"):
        _count.scatter_pairs(ok, ok, _count.PAIR_SHARD_BITS_MAX + 1)
    with pytest.raises(ValueError, match="row 1"):
        _count.scatter_pairs(ok, np.array([0, _count.CODE_LIMIT, 0], np.uint32), 6)
    with pytest.raises(TypeError, match="users"):
        _count.scatter_pairs(ok.astype(np.int64), ok, 6)
    keys, starts = _count.scatter_pairs(np.zeros(0, np.uint32), np.zeros(0, np.uint32), 2)
    assert keys.size == 0 and starts.tolist() == [0] * 5


@pytest.mark.parametrize("n, threads", [(0, 4), (1_000, 8), (50_000, 2), (50_000, 3), (50_001, 8)])
def test_the_scatter_on_several_threads_is_the_one_pass_scatter(monkeypatch: pytest.MonkeyPatch, n: int,
                                                                threads: int) -> None:
    """Ranges of rows counted and placed at their own cursors, at once: the same keys and runs."""
    monkeypatch.setattr(_counter, "_SCATTER_ROWS", 100)
    g = np.random.default_rng(n)
    users = g.integers(0, 1 << 20, n).astype(np.uint32)
    partitions = g.integers(0, 5_000, n).astype(np.uint32)
    keys, starts = _counter._scatter_pairs(users, partitions, threads)
    want_keys, want_starts = _count.scatter_pairs(users, partitions, _counter._SHARD_BITS)
    np.testing.assert_array_equal(keys, want_keys)
    np.testing.assert_array_equal(starts, want_starts)


def test_the_split_scatter_checks_its_arguments() -> None:
    users = np.arange(10, dtype=np.uint32)
    counts = np.zeros(4, np.uintp)
    with pytest.raises(ValueError, match="row 3"):
        _count.pair_shard_counts(users, np.array([0, 0, 0, _count.CODE_LIMIT] + [0] * 6, np.uint32), 2, 0, 10, counts)
    with pytest.raises(ValueError, match=r"counts must have 2\*\*shard_bits = 4 entries"):
        _count.pair_shard_counts(users, users, 2, 0, 10, np.zeros(3, np.uintp))
    with pytest.raises(ValueError, match="rows end"):
        _count.pair_shard_counts(users, users, 2, 0, 11, counts)
    with pytest.raises(ValueError, match="same length"):
        _count.pair_shard_counts(users, users[:9], 2, 0, 9, counts)
    counts[:] = 0  # the refused call counted the rows before the bad one
    _count.pair_shard_counts(users, users, 2, 0, 10, counts)
    assert counts.tolist() == [3, 3, 2, 2]
    keys = np.zeros(10, np.uint64)
    starts = np.array([0, 3, 6, 8], np.uintp)
    with pytest.raises(ValueError, match=r"limits must be <= len\(keys\)"):
        _count.place_pairs(users, users, 2, 0, 10, starts.copy(), starts + 5, keys)
    with pytest.raises(ValueError, match="not the prefix sums"):  # room for one row too few
        _count.place_pairs(users, users, 2, 0, 10, starts.copy(), np.array([3, 6, 8, 9], np.uintp), keys)
    shared = np.zeros(10, np.uint64)
    shared[:4] = starts
    with pytest.raises(ValueError, match="keys overlaps cursors"):
        _count.place_pairs(users, users, 2, 0, 10, shared[:4].view(np.uintp), (starts + counts).astype(np.uintp), shared)
    _count.place_pairs(users, users, 2, 0, 10, starts.copy(), (starts + counts).astype(np.uintp), keys)
    np.testing.assert_array_equal(keys, _count.scatter_pairs(users, users, 2)[0])


def test_feed_keys_refuses_a_half_at_the_code_limit() -> None:
    counter = _count.PairCounter()
    bad = np.array([5, (int(_count.CODE_LIMIT) << 32) | 1], np.uint64)
    with pytest.raises(ValueError, match="key 1"):
        counter.feed_keys(bad)
    with pytest.raises(ValueError, match="key 0"):
        _count.PairCounter().feed_keys(np.array([int(_count.CODE_LIMIT)], np.uint64))
    assert counter.n_pairs == 1  # the keys before the bad one stay


def test_finish_into_out_adds_and_saturates_the_sum() -> None:
    """Two shards finished into one array give the counts of one set holding both, capped."""
    users = np.arange(40, dtype=np.uint32)
    partitions = (users % 2).astype(np.uint32)
    whole = _count.PairCounter()
    whole.feed(users, partitions)
    exact = whole.finish(2, 1, None, None)
    for shared in (False, True):
        keys, starts = _count.scatter_pairs(users, partitions, 1)
        out = np.zeros(2, np.int64)
        for s in range(2):
            shard = _count.PairCounter()
            shard.feed_keys(keys[starts[s]:starts[s + 1]])
            shard.finish(2, 1, 15, None, out=out, shared=shared)
        np.testing.assert_array_equal(out, np.minimum(exact, 15))
    with pytest.raises(ValueError, match="out must hold"):
        _count.PairCounter().finish(3, 1, None, None, out=np.zeros(2, np.int64))


def test_user_sets_are_the_same_for_any_thread_count(small_pieces: None) -> None:
    """The weighted mechanisms' input (every user's set, users set after set) does not depend on T."""
    df = _frame(n=20_000)
    table = pa.Table.from_pandas(df, preserve_index=False)
    seen = []
    for threads in THREADS:
        counter = _counter.RowCounter("user", ["ikey"])
        with _threads.using(threads):
            counter.feed(table)
            sets, _ = counter.user_sets()
        seen.append((sets.ends.tolist(), sets.partitions.tolist()))
    assert len(seen[0][0]) == df["user"].nunique()
    assert all(s == seen[0] for s in seen[1:])
