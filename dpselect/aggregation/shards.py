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
   at once, each shard's rows kept in row order): 4 bytes a row;
2. the shards are bounded in T contiguous groups, each thread adding into outputs of its own
   (8 bytes a partition for the users, the rows and the users before bounding, 16 per value
   column for the exact sums), merged at the end. Fewer threads are used where those outputs
   would exceed 4 bytes per input row (many partitions and few rows), so memory stays
   proportional to the input.
"""
from __future__ import annotations

from collections.abc import Sequence
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
    n = users.size
    parts = max(1, min(threads, n // 65536 + 1))  # a thread of its own for each 64 Ki rows at most
    bounds = [n * k // parts for k in range(parts + 1)]
    counts = np.zeros((parts, shards), dtype=np.uintp)
    run_pieces(lambda k: _bound.shard_rows_count(users, bounds[k], bounds[k + 1], n_users, counts[k]),
               [(k,) for k in range(parts)], parts > 1)
    per_shard = counts.sum(axis=0, dtype=np.uintp)
    starts = np.zeros(shards + 1, dtype=np.uintp)
    np.cumsum(per_shard, out=starts[1:])
    cursors = np.empty_like(counts)
    cursors[0] = starts[:-1]
    if parts > 1:
        cursors[1:] = starts[:-1] + np.cumsum(counts[:-1], axis=0, dtype=np.uintp)
    limits = cursors + counts
    rows = np.empty(n, dtype=np.uint32)
    run_pieces(lambda k: _bound.shard_rows_place(users, bounds[k], bounds[k + 1], n_users, cursors[k], limits[k],
                                                 rows), [(k,) for k in range(parts)], parts > 1)
    return rows, [int(x) for x in starts]


def bound_in_shards(users: npt.NDArray[np.uint32], partitions: npt.NDArray[np.uint32], n_users: int,
                    n_partitions: int, kappa: int, linf: int, units: list[npt.NDArray[np.int64]],
                    test_state: Any, kept: npt.NDArray[np.uint8], squares: Sequence[tuple[int, int, int]] = ()
                    ) -> list[tuple[Any, ...]]:
    """Bound every shard of the users (``kept`` gets 1 for every kept row): one
    ``(users, rows, sums, users_before, totals)`` per thread used, as
    :func:`dpselect._bound.bound_rows_range` returns them (with its ``squares``), to be added up."""
    shards = shard_count(n_users)
    per_thread = max(n_partitions, 1) * (24 + 16 * max(len(units) + len(squares), 1))
    threads = max(1, min(current(), shards, 1 + 4 * users.size // per_thread))
    if n_users == 0:
        return [_bound.bound_rows_range(users, partitions, n_partitions, kappa, linf, units, test_state,
                                        np.zeros(0, np.uint32), 0, 0, users_before=True, kept=kept, squares=squares)]
    rows, starts = rows_by_shard(users, n_users, shards, current())

    def run(which: list[int]) -> tuple[Any, ...]:
        out: Any = None
        totals: dict[str, int] | None = None
        for s in which:
            result = _bound.bound_rows_range(
                users, partitions, n_partitions, kappa, linf, units, shard_test_state(test_state, s),
                rows[starts[s]:starts[s + 1]], first_user(s, shards, n_users), first_user(s + 1, shards, n_users),
                out=out, users_before=True, kept=kept, squares=squares)
            out = result[:4]
            counted: dict[str, int] = result[4]  # type: ignore[assignment]
            totals = counted if totals is None else {key: totals[key] + counted[key] for key in totals}
        assert out is not None and totals is not None  # every group has a shard: threads <= shards
        return (*out, totals)

    return run_pieces(run, [(g,) for g in _split(shards, threads)], threads > 1)
