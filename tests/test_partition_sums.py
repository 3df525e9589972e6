"""``aggregate``'s bounding on every thread with one copy of the outputs: each shard of the users
marks its rows (csrc/bound_rows.h's ``dps_bound_rows_mark``), the marked rows are sorted by range
of partitions (the same counting sort as the shards', with the marks), and the ranges add them
up (csrc/partition_sums.h), one range per thread at a time.

The reference is the kernel that adds into the outputs itself (``bound_rows_range``) with every
shard in turn into one set: the same draws, so with the deterministic test generator the users,
rows, exact 128-bit sums (value columns and squared offsets), users before bounding and kept rows
must be identical, for any number of threads and of ranges. A broken copy that counts kept rows
as users is shown to differ, so the law can fail."""
from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpselect import _bound
from dpselect._threads import using
from dpselect.aggregation import shards
from dpselect.rng import shard_test_state
from dpselect.testing import InsecureDeterministicRNG

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

SQUARES = [(1, 3, 0), (0, -5, 20)]


def _state(seed: int) -> Any:
    return InsecureDeterministicRNG(seed=seed).test_state


def _inputs(seed: int, n: int, n_users: int, n_parts: int) -> tuple[Any, ...]:
    """Rows with users coded 0 .. n_users' - 1 (all present), Zipf partitions, two value columns."""
    g = np.random.default_rng(seed)  # the data only: never noise
    raw = g.integers(0, max(n_users, 1), n)
    users = np.unique(raw, return_inverse=True)[1].astype(np.uint32).reshape(-1)
    partitions = (g.zipf(1.3, n) % n_parts).astype(np.uint32)
    values = [g.integers(-2**30, 2**30, n), g.integers(-1000, 1000, n)]
    return users, partitions, int(users.max()) + 1 if n else 0, values


def _reference(users: Any, partitions: Any, n_users: int, n_parts: int, kappa: int, linf: int, values: list[Any],
               seed: int) -> tuple[Any, ...]:
    """Every shard in turn, each adding into one set of outputs (the kernel's own sums)."""
    kept = np.zeros(users.size, np.uint8)
    state = _state(seed)
    count = shards.shard_count(n_users)
    rows, starts = shards.rows_by_shard(users, n_users, count, 1)
    out = None
    for s in range(count):
        out = _bound.bound_rows_range(users, partitions, n_parts, kappa, linf, values, shard_test_state(state, s),
                                      rows[starts[s]:starts[s + 1]], shards.first_user(s, count, n_users),
                                      shards.first_user(s + 1, count, n_users), out=out, users_before=True,
                                      kept=kept, squares=SQUARES)[:4]
    assert out is not None
    return (*out, kept)


def _sharded(users: Any, partitions: Any, n_users: int, n_parts: int, kappa: int, linf: int, values: list[Any],
             seed: int, threads: int) -> tuple[Any, ...]:
    kept = np.zeros(users.size, np.uint8)
    with using(threads):
        out = shards.bound_in_shards(users, partitions, n_users, n_parts, kappa, linf, values, _state(seed), kept,
                                     SQUARES)
    return (*out[:4], kept)


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 4000), n_users=st.integers(1, 3000),
       n_parts=st.integers(1, 500), kappa=st.integers(1, 4), linf=st.integers(1, 3),
       threads=st.sampled_from([1, 2, 3, 8]))
def test_marked_and_summed_by_range_equals_one_set_of_outputs(seed: int, n: int, n_users: int, n_parts: int,
                                                              kappa: int, linf: int, threads: int) -> None:
    users, partitions, n_users, values = _inputs(seed, n, n_users, n_parts)
    expected = _reference(users, partitions, n_users, n_parts, kappa, linf, values, seed)
    assert _same(_sharded(users, partitions, n_users, n_parts, kappa, linf, values, seed, threads), expected)


def test_a_large_input_on_many_threads_equals_one_set_of_outputs() -> None:
    """Several pieces of rows per count and place (64 Ki rows each), 64 shards, 32 ranges."""
    users, partitions, n_users, values = _inputs(7, 300_000, 40_000, 20_000)
    expected = _reference(users, partitions, n_users, 20_000, 3, 2, values, 7)
    for threads in (1, 2, 8):
        assert _same(_sharded(users, partitions, n_users, 20_000, 3, 2, values, 7, threads), expected)


def test_the_marks_are_what_the_header_says() -> None:
    """For one shard: KEPT on the kept rows of the kernel that sums; per partition, one USER mark
    per kept user and one BEFORE mark (on the lowest row) per distinct user before bounding."""
    users, partitions, n_users, values = _inputs(3, 5_000, 800, 60)
    rows = np.arange(users.size, dtype=np.uint32)
    kept = np.zeros(users.size, np.uint8)
    out = _bound.bound_rows_range(users, partitions, 60, 2, 2, values, _state(1), rows, 0, n_users,
                                  users_before=True, kept=kept)
    marks = np.zeros(users.size, np.uint8)
    totals = _bound.bound_rows_mark(users, partitions, rows, 60, 2, 2, _state(1), 0, n_users, marks)
    assert totals == out[4]
    assert np.array_equal(marks & _bound.MARK_KEPT, kept)
    user_rows = (marks & _bound.MARK_USER).astype(bool)
    assert np.array_equal(np.bincount(partitions[user_rows], minlength=60), out[0])
    assert not np.any(user_rows & ~kept.astype(bool))  # a user is counted by one of its kept rows
    pairs = users.astype(np.uint64) << np.uint64(32) | partitions
    _, lowest = np.unique(pairs, return_index=True)
    before = np.zeros(users.size, bool)
    before[lowest] = True
    assert np.array_equal((marks & _bound.MARK_BEFORE).astype(bool), before)
    assert np.array_equal(np.bincount(partitions[before], minlength=60), out[3])


_PARTITION_SUMS = _bound.partition_sums


def test_the_shards_copies_are_their_rows_codes_and_give_the_same_marks() -> None:
    """The shards' own copies (written by the place step) are the codes of their rows, and marking
    a shard from them marks exactly what marking from the whole input's columns does."""
    users, partitions, n_users, _ = _inputs(9, 30_000, 3_000, 200)
    rows, starts, shard_users, shard_partitions = shards.rows_by_shard_with_copies(users, partitions, n_users, 8, 3)
    plain_rows, plain_starts = shards.rows_by_shard(users, n_users, 8, 1)
    assert starts == plain_starts and np.array_equal(rows, plain_rows)
    assert np.array_equal(shard_users, users[rows]) and np.array_equal(shard_partitions, partitions[rows])
    span = slice(starts[2], starts[3])
    local = np.zeros(users.size, np.uint8)
    _bound.bound_rows_mark(shard_users[span], shard_partitions[span], rows[span], 200, 2, 2, _state(4),
                           shards.first_user(2, 8, n_users), shards.first_user(3, 8, n_users), local)
    whole = np.zeros(users.size, np.uint8)
    _bound.bound_rows_mark(users[rows[span]], partitions[rows[span]], rows[span], 200, 2, 2, _state(4),
                           shards.first_user(2, 8, n_users), shards.first_user(3, 8, n_users), whole)
    assert np.array_equal(local, whole) and local.any()
    n = users.size
    limits = np.array([n], np.uintp)
    with pytest.raises(ValueError, match="not both"):
        _bound.shard_rows_place(users, 0, n, n_users, np.zeros(1, np.uintp), limits, np.empty(n, np.uint32),
                                marks=np.ones(n, np.uint8), copies=(partitions, np.empty(n, np.uint32),
                                                                    np.empty(n, np.uint32)))
    with pytest.raises(ValueError, match="as long as rows"):
        _bound.shard_rows_place(users, 0, n, n_users, np.zeros(1, np.uintp), limits, np.empty(n, np.uint32),
                                copies=(partitions, np.empty(n - 1, np.uint32), np.empty(n, np.uint32)))
    with pytest.raises(ValueError, match="other_out overlaps"):
        _bound.shard_rows_place(users, 0, n, n_users, np.zeros(1, np.uintp), limits, np.empty(n, np.uint32),
                                copies=(partitions, np.empty(n, np.uint32), partitions))


@pytest.mark.parametrize("change, message", [
    (lambda u, p, r: (u, p, r[::-1].copy()), "entry"),  # rows out of order
    (lambda u, p, r: (u, p, np.where(r == r[-1], 10**6, r).astype(np.uint32)), "entry"),  # a row past the input
    (lambda u, p, r: (u + 1000, p, r), "entry"),  # a user outside the shard
    (lambda u, p, r: (u, p + 60, r), "entry"),  # a partition code past n_partitions
    (lambda u, p, r: (u[:-1], p, r), "one entry per row of rows"),
])
def test_marking_refuses_bad_copies(change: Callable[..., tuple[Any, ...]], message: str) -> None:
    users, partitions, n_users, _ = _inputs(2, 500, 50, 60)
    rows = np.arange(users.size, dtype=np.uint32)
    u, p, r = change(users, partitions, rows)
    marks = np.zeros(users.size, np.uint8)
    with pytest.raises(ValueError, match=message):
        _bound.bound_rows_mark(u, p, r, 60, 2, 2, _state(1), 0, n_users, marks)
    assert not marks.any()  # refused before any mark


def _broken_partition_sums(partitions: Any, marks: Any, rows: Any, first: int, last: int, n_partitions: int,
                           values: list[Any], out: tuple[Any, ...], squares: Any = ()) -> None:
    """A broken copy: every kept row counted as a user (the USER mark ignored)."""
    marks[rows] |= np.where(marks[rows] & _bound.MARK_KEPT, _bound.MARK_USER, 0).astype(np.uint8)
    _PARTITION_SUMS(partitions, marks, rows, first, last, n_partitions, values, out, squares)


def test_the_law_catches_users_counted_by_kept_row(monkeypatch: pytest.MonkeyPatch) -> None:
    users, partitions, n_users, values = _inputs(5, 20_000, 1_000, 100)  # ~20 rows a user: L∞ = 3 keeps several
    expected = _reference(users, partitions, n_users, 100, 2, 3, values, 5)
    assert _same(_sharded(users, partitions, n_users, 100, 2, 3, values, 5, 2), expected)
    monkeypatch.setattr(shards._bound, "partition_sums", _broken_partition_sums)
    assert not _same(_sharded(users, partitions, n_users, 100, 2, 3, values, 5, 2), expected)


def test_a_range_writes_its_partitions_only_and_leaves_kept_marks() -> None:
    partitions = np.array([0, 1, 2, 3, 2, 1], np.uint32)
    marks = np.array([7, 1, 3, 4, 0, 5], np.uint8)
    out = (np.full(4, -9, np.int64), np.full(4, -9, np.int64), np.full((1, 4, 2), 9, np.uint64),
           np.full(4, -9, np.int64))
    values = [np.array([10, 20, 30, 40, 50, 60], np.int64)]
    _bound.partition_sums(partitions, marks, np.array([1, 2, 5], np.uint32), 1, 3, 4, values, out)
    assert out[0].tolist() == [-9, -9 + 0, -9 + 1, -9]  # partition 1: rows 1 (kept), 5 (kept, before); 2: row 2
    assert out[1].tolist() == [-9, -9 + 2, -9 + 1, -9]
    assert out[3].tolist() == [-9, -9 + 1, -9, -9]
    assert out[2][0, :, 0].tolist() == [9, 9 + 20 + 60, 9 + 30, 9]
    assert marks.tolist() == [7, 1, 1, 4, 0, 1]  # the summed rows keep their KEPT bit only


@pytest.mark.parametrize("call, message", [
    (lambda p, m, o: _bound.partition_sums(p, m, np.array([0], np.uint32), 1, 2, 3, [], o), "row 0"),
    (lambda p, m, o: _bound.partition_sums(p, m, np.array([9], np.uint32), 0, 3, 3, [], o), "row 9"),
    (lambda p, m, o: _bound.partition_sums(p, m, np.zeros(0, np.uint32), 2, 1, 3, [], o), "last"),
    (lambda p, m, o: _bound.partition_sums(p, m, np.zeros(0, np.uint32), 0, 3, 4, [], o), "outputs of a call"),
    (lambda p, m, o: _bound.partition_sums(p, m[:2], np.zeros(0, np.uint32), 0, 3, 3, [], o), "marks"),
    (lambda p, m, o: _bound.partition_sums(p, m, np.zeros(0, np.uint32), 0, 3, 3, [], o, [(0, 0, 0)]), "squares"),
    (lambda p, m, o: _bound.partition_sums(p, p.view(np.uint8)[:3], np.zeros(0, np.uint32), 0, 3, 3, [], o),
     "overlaps"),
])
def test_partition_sums_refuses_bad_arguments(call: Callable[..., None], message: str) -> None:
    partitions = np.array([0, 1, 2], np.uint32)
    marks = np.ones(3, np.uint8)
    out = (np.zeros(3, np.int64), np.zeros(3, np.int64), np.zeros((1, 3, 2), np.uint64), None)
    with pytest.raises(ValueError, match=message):
        call(partitions, marks, out)


def test_a_kept_value_out_of_its_square_reach_is_refused() -> None:
    partitions = np.zeros(2, np.uint32)
    out = (np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros((2, 1, 2), np.uint64), None)
    values = [np.array([0, 2**31 + 1], np.int64)]
    with pytest.raises(ValueError, match="2\\*\\*31"):
        _bound.partition_sums(partitions, np.ones(2, np.uint8), np.arange(2, dtype=np.uint32), 0, 1, 1, values, out,
                              [(0, 0, 0)])
    # a row that is not kept is not squared
    _bound.partition_sums(partitions, np.array([1, 4], np.uint8), np.arange(2, dtype=np.uint32), 0, 1, 1, values,
                          out, [(0, 0, 0)])


def test_marked_rows_are_placed_by_range_in_row_order_and_checked() -> None:
    partitions = np.array([5, 0, 3, 9, 0, 7, 2], np.uint32)
    marks = np.array([1, 0, 4, 2, 1, 1, 0], np.uint8)
    counts = np.zeros(2, np.uintp)
    _bound.shard_rows_count(partitions, 0, 7, 10, counts, marks)
    assert counts.tolist() == [2, 3]  # range 0: partitions 0-4 (rows 2, 4); range 1: 5-9 (rows 0, 3, 5)
    rows = np.zeros(5, np.uint32)
    _bound.shard_rows_place(partitions, 0, 7, 10, np.array([0, 2], np.uintp), np.array([2, 5], np.uintp), rows, marks)
    assert rows.tolist() == [2, 4, 0, 3, 5]
    with pytest.raises(ValueError, match="prefix sums"):
        _bound.shard_rows_place(partitions, 0, 7, 10, np.array([0, 1], np.uintp), np.array([1, 5], np.uintp), rows,
                                marks)
    with pytest.raises(ValueError, match="row 3"):
        _bound.shard_rows_count(partitions, 0, 7, 9, np.zeros(2, np.uintp), marks)
    _bound.shard_rows_count(partitions, 0, 7, 9, np.zeros(2, np.uintp),
                            np.where(partitions == 9, 0, marks).astype(np.uint8))  # an unmarked row's code is unread
    with pytest.raises(ValueError, match="marks must have one entry per row"):
        _bound.shard_rows_count(partitions, 0, 7, 10, np.zeros(2, np.uintp), marks[:3])
    with pytest.raises(ValueError, match="counts overlaps codes"):
        _bound.shard_rows_count(partitions, 0, 7, 10, partitions[:4].view(np.uintp), marks)
    counts[:] = 0
    _bound.shard_rows_count(partitions, 0, 7, 10, counts)  # no marks: every row
    assert counts.tolist() == [4, 3]


def test_the_outputs_exist_once_whatever_the_threads() -> None:
    """Many partitions, few rows a partition: the memory the bounding allocates in numpy does not
    grow with T (it grew by 40 bytes a partition per thread when each thread had its own)."""
    users, partitions, n_users, values = _inputs(11, 200_000, 50_000, 200_000)
    n_parts = int(partitions.max()) + 1
    peaks = {}
    for threads in (1, 8):
        tracemalloc.start()
        _sharded(users, partitions, n_users, n_parts, 2, 2, values, 11, threads)
        peaks[threads] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peaks[8] < peaks[1] + 8 * n_parts  # one more set would be ≥ 40 bytes a partition
