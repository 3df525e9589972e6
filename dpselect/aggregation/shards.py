"""The row-level bounding of :func:`dpselect.aggregate` on every thread of the call.

The users are split into shards of consecutive user codes (codes are given in order of first
appearance, so a shard depends on the data and never on a seed or on the threads); how many
shards depends on the number of users alone (:func:`shard_count`). Shard s draws from its own
CSPRNG stream, ``shard_test_state(test_state, s)``: each thread's own secure state, or, with the
deterministic test generator, a stream derived from the seed and s. So with the test generator
the release is the same for any number of threads, and with the secure one every user is still
bounded by a uniform choice independent of every other user's (docs/privacy/aggregate.md).

Steps, each on the call's T threads (:func:`dpselect._threads.current`):

1. the rows are sorted by shard (a counting sort: T ranges of rows counted at once, then placed
   at once, each shard's rows kept in row order), with copies of their users' and partitions'
   codes in that order, so that bounding a shard reads arrays of its own size: 12 bytes a row;
2. the shards are bounded in T contiguous groups, each marking the rows of its own users (one
   byte a row, shared: kept, and which row counts its user among a partition's users after and
   before bounding; csrc/bound_rows.h's ``dps_bound_rows_mark``);
3. the marked rows are sorted by ranges of consecutive partition codes (the same counting sort,
   4 bytes a marked row), and each range's statistics are added up by one thread into the one
   set of outputs (8 bytes a partition for the users, the rows and the users before bounding, 16
   per value column for the exact sums), which no other range writes (csrc/partition_sums.h).

So the outputs exist once whatever T is: memory does not grow with the threads, and no step waits
on one thread to merge T copies. Integer sums do not depend on the order they are added in, so
the outputs are those of bounding every shard in turn into one set (``bound_rows_range``), for
any T.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dpselect import _bound
from dpselect._threads import current
from dpselect._workers import run_pieces
from dpselect.rng import shard_test_state

__all__ = ["MAX_SHARDS", "bound_in_shards", "shard_count"]

# At most this many shards; fewer for few users (about 64 users a shard at the least), so a small
# input is not cut into shards that cost more to call than to bound.
MAX_SHARDS = 64
_USERS_PER_SHARD = 64


def shard_count(n_users: int) -> int:
    """How many shards ``n_users`` users are bounded in (a function of the input alone)."""
    return max(1, min(MAX_SHARDS, n_users // _USERS_PER_SHARD))


def first_user(shard: int, shards: int, n_users: int) -> int:
    """The first user code of ``shard``: the least u with u · shards // n_users == shard."""
    return -(-shard * n_users // shards)


def _split(n: int, parts: int) -> list[list[int]]:
    return [list(range(n * k // parts, n * (k + 1) // parts)) for k in range(parts)]


def rows_by_shard(users: npt.NDArray[np.uint32], n_users: int, shards: int, threads: int
                  ) -> tuple[npt.NDArray[np.uint32], list[int]]:
    """Row indices sorted by shard (each shard's in row order) and each shard's start (shards + 1
    offsets), counted and placed on ``threads`` threads."""
    return _counting_sort(
        users.size, shards, threads,
        lambda lo, hi, counts: _bound.shard_rows_count(users, lo, hi, n_users, counts),
        lambda lo, hi, cursors, limits, rows: _bound.shard_rows_place(users, lo, hi, n_users, cursors, limits, rows))


def rows_by_shard_with_copies(users: npt.NDArray[np.uint32], partitions: npt.NDArray[np.uint32], n_users: int,
                              shards: int, threads: int) -> tuple[npt.NDArray[np.uint32], list[int],
                                                                  npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
    """:func:`rows_by_shard`, and beside the row indices their users' and partitions' codes in the
    same order (8 bytes a row, written by the same pass): the shards' own copies, which the
    bounding reads in cache instead of the whole input's columns in user order."""
    users_out = np.empty(users.size, dtype=np.uint32)
    partitions_out = np.empty(users.size, dtype=np.uint32)
    rows, starts = _counting_sort(
        users.size, shards, threads,
        lambda lo, hi, counts: _bound.shard_rows_count(users, lo, hi, n_users, counts),
        lambda lo, hi, cursors, limits, rows: _bound.shard_rows_place(
            users, lo, hi, n_users, cursors, limits, rows, copies=(partitions, users_out, partitions_out)))
    return rows, starts, users_out, partitions_out


def rows_by_range(partitions: npt.NDArray[np.uint32], marks: npt.NDArray[np.uint8], n_partitions: int,
                  ranges: int, threads: int) -> tuple[npt.NDArray[np.uint32], list[int]]:
    """The marked rows' indices sorted by range of consecutive partition codes (each range's in
    row order) and each range's start (ranges + 1 offsets), counted and placed on ``threads``
    threads."""
    return _counting_sort(
        partitions.size, ranges, threads,
        lambda lo, hi, counts: _bound.shard_rows_count(partitions, lo, hi, n_partitions, counts, marks),
        lambda lo, hi, cursors, limits, rows: _bound.shard_rows_place(partitions, lo, hi, n_partitions, cursors,
                                                                      limits, rows, marks))


def _counting_sort(n: int, buckets: int, threads: int, count: Callable[[int, int, Any], None],
                   place: Callable[[int, int, Any, Any, Any], None]) -> tuple[npt.NDArray[np.uint32], list[int]]:
    """A counting sort of n rows into ``buckets`` on ``threads`` threads, each bucket's rows in
    row order: ``count(lo, hi, counts)`` adds the rows of [lo, hi) of each bucket, then
    ``place(lo, hi, cursors, limits, rows)`` writes them (kernels that may run at once on
    different ranges of rows). Returns the sorted row indices and each bucket's start."""
    parts = max(1, min(threads, n // 65536 + 1))  # a thread of its own for each 64 Ki rows at most
    bounds = [n * k // parts for k in range(parts + 1)]
    counts = np.zeros((parts, buckets), dtype=np.uintp)
    run_pieces(lambda k: count(bounds[k], bounds[k + 1], counts[k]), [(k,) for k in range(parts)], parts > 1)
    starts = np.zeros(buckets + 1, dtype=np.uintp)
    np.cumsum(counts.sum(axis=0, dtype=np.uintp), out=starts[1:])
    cursors = np.empty_like(counts)  # range k's first row of each bucket goes after the earlier ranges'
    cursors[0] = starts[:-1]
    if parts > 1:
        cursors[1:] = starts[:-1] + np.cumsum(counts[:-1], axis=0, dtype=np.uintp)
    limits = cursors + counts
    rows = np.empty(int(starts[-1]), dtype=np.uint32)
    run_pieces(lambda k: place(bounds[k], bounds[k + 1], cursors[k], limits[k], rows), [(k,) for k in range(parts)],
               parts > 1)
    return rows, [int(x) for x in starts]


def first_partition(r: int, ranges: int, n_partitions: int) -> int:
    """The first partition code of range r: the least p with p · ranges // n_partitions == r."""
    return -(-r * n_partitions // ranges)


def _mark_shards(users: npt.NDArray[np.uint32], partitions: npt.NDArray[np.uint32], n_users: int, n_partitions: int,
                 kappa: int, linf: int, test_state: Any, marks: npt.NDArray[np.uint8], threads: int) -> dict[str, int]:
    """Steps 1 and 2: every shard bounded (shard s with its own stream), its rows marked in
    ``marks``; the shards taken by ``threads`` threads in contiguous groups. Returns the totals."""
    shards = shard_count(n_users)
    rows, starts, shard_users, shard_partitions = rows_by_shard_with_copies(users, partitions, n_users, shards,
                                                                            threads)

    def mark(which: list[int]) -> dict[str, int]:
        totals: dict[str, int] = {}
        for s in which:
            span = slice(starts[s], starts[s + 1])
            counted = _bound.bound_rows_mark(
                shard_users[span], shard_partitions[span], rows[span], n_partitions, kappa, linf,
                shard_test_state(test_state, s), first_user(s, shards, n_users), first_user(s + 1, shards, n_users),
                marks)
            totals = {key: totals.get(key, 0) + counted[key] for key in counted}
        return totals

    groups = _split(shards, min(threads, shards))
    counted = run_pieces(mark, [(g,) for g in groups], len(groups) > 1)
    return {key: sum(c[key] for c in counted) for key in counted[0]}


def bound_in_shards(users: npt.NDArray[np.uint32], partitions: npt.NDArray[np.uint32], n_users: int,
                    n_partitions: int, kappa: int, linf: int, units: list[npt.NDArray[np.int64]],
                    test_state: Any, kept: npt.NDArray[np.uint8], squares: Sequence[tuple[int, int, int]] = ()
                    ) -> tuple[Any, ...]:
    """Bound every shard of the users and add up the kept rows per partition: ``(users, rows,
    sums, users_before, totals)`` as :func:`dpselect._bound.bound_rows_range` returns them (with
    its ``squares``) for all the users at once; ``kept`` (zeroed, one byte a row) gets 1 for every
    kept row."""
    threads = current()
    width = max(n_partitions, 1)
    out = (np.zeros(width, np.int64), np.zeros(width, np.int64),
           np.zeros((max(len(units) + len(squares), 1), width, 2), np.uint64), np.zeros(width, np.int64))
    if n_users == 0:
        return (*out, {"rows": 0, "rows_kept": 0, "pairs": 0, "pairs_kept": 0, "users": 0})
    totals = _mark_shards(users, partitions, n_users, n_partitions, kappa, linf, test_state, kept, threads)
    if n_partitions == 0:  # then no row (marking checked every code), so nothing to add up
        return (*out, totals)
    # Ranges of partitions: a few per thread, so that a range heavy with rows (codes are given in
    # order of first appearance, so the busiest keys come first) does not hold up the others.
    ranges = max(1, min(n_partitions, 4 * threads))
    by_range, range_starts = rows_by_range(partitions, kept, n_partitions, ranges, threads)

    def add(r: int) -> None:
        _bound.partition_sums(partitions, kept, by_range[range_starts[r]:range_starts[r + 1]],
                              first_partition(r, ranges, n_partitions), first_partition(r + 1, ranges, n_partitions),
                              n_partitions, units, out, squares)

    run_pieces(add, [(r,) for r in range(ranges)], threads > 1)
    return (*out, totals)
