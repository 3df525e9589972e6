"""First-appearance codes of one column on several threads (csrc/key_shards.h): values of 1, 2, 4
or 8 bytes (:func:`encode_fixed`) or strings and binaries (:func:`encode_var`).

:class:`dpselect._count.KeyMap` codes a column one row after another with one hash map: on a whole
input the only step of the rows path that did not split over threads. Here the rows are split
into chunks and the values into :data:`dpselect._count.KEY_SHARDS` shards by a seeded hash, and
each phase of :class:`dpselect._count.ShardedKeyCodes` (``ShardedStringCodes``) runs its pieces on the package's worker
pool (:func:`dpselect._workers.run_pieces`). The codes are exactly the KeyMap's on an empty map
(0, 1, 2, ... in order of first appearance, nulls one value), whatever the threads and the seed,
so every output stays the same for any number of threads (docs/rows.md, "Threads"). With a
:class:`dpselect._count.KeyStore` the shards' maps persist from one batch to the next and the codes
continue, as one KeyMap's would: a streamed column is coded on every thread, batch after batch.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from dpselect import _count
from dpselect._workers import run_pieces

__all__ = ["GROUP_ROWS", "MIN_ROWS", "MIN_THREADS", "chunk_count", "encode_fixed", "encode_var"]

# Below this many rows one thread's KeyMap is faster than the phases' fixed costs.
MIN_ROWS = 1 << 16

# The rows path codes a whole input's keys first, on every thread, from this many threads on
# (dpselect.ingest.radix.codes_first). The phases do about 1.5 to 2 times the one-thread map's work
# (they read and write the rows several times where the map probes each once), while on one
# thread the keys are coded beside the rest of the grouping on the other threads, which then
# bounds the path at the map's time. bench_key_codes.py (1e7 rows, ~1e6 Zipf keys, 2 cores):
# the phases 43 CPU ns a row against the map's 27; the whole path 93 CPU ns a row with them, so
# coding first pays where 93 / T < 27, T >= 4 (at T = 2 both took ~51 ns a row of wall time).
# String keys (--strings, 2e6 rows, the decimal text of those keys): the phases 131 CPU ns a row
# against the map's 101, so the same threshold is on the safe side for them.
MIN_THREADS = 4

# A column in many chunks (a Parquet file's row groups, a CSV reader's blocks) is coded through a
# store in groups of consecutive chunks joined to this many rows at least (KeyFactorizer.encode):
# each call of the coder costs about a millisecond of hand-outs and allocations whatever its size,
# and joining costs a copy, about a nanosecond a row.
GROUP_ROWS = 1 << 20

# Rows per chunk at least: each chunk costs a row of 64 shard counters and a Python call per phase.
_CHUNK_ROWS = 1 << 15


def chunk_count(n: int, threads: int) -> int:
    """Chunks of rows for ``threads`` threads: four per thread (chunks differ in their nulls and
    values), none smaller than ``_CHUNK_ROWS`` rows, at least one."""
    return max(1, min(4 * threads, n // _CHUNK_ROWS))


def _each(task: Callable[[int], None], items: int, threads: int) -> None:
    """``task(i)`` for i in 0 .. items - 1 on up to ``threads`` threads, each taking the next item
    when it is free (shards differ in size: a frequent value makes its shard long). The first
    error stops the taking of new items and is raised once every thread has stopped."""
    if threads <= 1 or items <= 1:
        for i in range(items):
            task(i)
        return
    lock = threading.Lock()
    items_left = iter(range(items))
    errors: list[BaseException] = []

    def loop(_: int) -> None:
        while True:
            with lock:
                i = None if errors else next(items_left, None)
            if i is None:
                return
            try:
                task(i)
            except BaseException as exc:  # noqa: BLE001 - raised below, once every loop has stopped
                with lock:
                    errors.append(exc)

    run_pieces(loop, [(t,) for t in range(min(threads, items))], True)
    if errors:
        raise errors[0]


def _chunks(n: int, threads: int, chunks: int | None, store: _count.KeyStore | None) -> int:
    """The chunks of rows: as given, else :func:`chunk_count`; one for a batch a store codes on
    one thread (too few rows, or one thread), which :meth:`~dpselect._count.ShardedKeyCodes.run`
    then codes in one call."""
    if chunks is not None:
        return chunks
    if store is not None and (threads <= 1 or n < MIN_ROWS):
        return 1
    return chunk_count(n, threads)


def encode_fixed(n: int, offset: int, validity: Any, values: Any, width: int, threads: int, seed: int,
                 name: str = "column", chunks: int | None = None,
                 store: _count.KeyStore | None = None) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
    """(codes, new_rows) of n values of ``width`` bytes (1, 2, 4 or 8) from element ``offset`` of
    an Arrow values buffer and validity bitmap (None: no nulls), as
    ``KeyMap("word", ...).encode_fixed`` gives them on an empty map, computed on ``threads``
    threads. ``seed`` (from the package CSPRNG) places values in shards, never codes;
    ``chunks``: the chunks of rows (default :func:`chunk_count`). ``store``: a
    :class:`~dpselect._count.KeyStore` ("word") whose codes continue, as one KeyMap's would over
    the batches it has coded (``seed`` is then the store's)."""
    job = _count.ShardedKeyCodes(n, offset, validity, values, width, _chunks(n, threads, chunks, store), seed, name,
                                 store)
    return _run(job, threads)


def encode_var(n: int, offset: int, validity: Any, offsets: Any, offsets64: bool, data: Any, threads: int,
               seed: int, name: str = "column", chunks: int | None = None,
               store: _count.KeyStore | None = None) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
    """(codes, new_rows) of n variable-length values (Arrow string/binary: n + 1 offsets of 4 bytes,
    8 when ``offsets64``, from element ``offset``, into ``data``; validity None: no nulls), as
    ``KeyMap("bytes", ...).encode_var`` gives them on an empty map, computed on ``threads``
    threads; offsets out of order or past the data raise the same ValueError. ``seed``,
    ``chunks`` and ``store`` (kind "bytes") as in :func:`encode_fixed`."""
    job = _count.ShardedStringCodes(n, offset, validity, offsets, offsets64, data,
                                    _chunks(n, threads, chunks, store), seed, name, store)
    return _run(job, threads)


def _run(job: Any, threads: int) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
    """Every phase of a sharded coder, each phase's pieces on ``threads`` threads (all in one call
    where there is one chunk and one thread)."""
    if threads <= 1 and job.n_chunks == 1:
        return job.run()
    # The shards in ranges, four per thread (a frequent value makes its shard long: the threads
    # take ranges as they are free), so the hand-out costs a Python call per range, not per shard.
    groups = max(1, min(_count.KEY_SHARDS, 4 * threads))
    ranges = [(g * _count.KEY_SHARDS // groups, (g + 1) * _count.KEY_SHARDS // groups) for g in range(groups)]
    for phase, kind in job.phases():
        method: Callable[..., None] = getattr(job, phase)
        if kind == "once":
            method()
        elif kind == "chunk":
            _each(method, job.n_chunks, threads)
        else:
            def shard_range(g: int, method: Callable[..., None] = method) -> None:
                method(*ranges[g])
            _each(shard_range, groups, threads)
    return job.result()
