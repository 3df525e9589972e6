"""One in-memory input with integer privacy units: distinct pairs grouped by user through radix
buckets (csrc/radix_pairs.h), instead of a user code map and a pair set.

:class:`dpselect.ingest.rows.RowCounter` takes this path when it is told that a batch is the whole
input (``feed(batch, final=True)``, as ``select_partitions`` does) and the privacy-unit column
holds integers. The streaming path gives every row two random accesses into tables far larger
than the caches (the user's code, then the (user, partition) pair); here each row is copied once,
sequentially, into the bucket of its user, and each bucket of about 16,000 rows is
deduplicated and grouped in the L2 cache. Memory is 12 bytes a row while grouping, then 4 bytes
per distinct pair and 8 per user: proportional to the rows, so only an input already held in
memory comes here; streamed batches keep the pair sets.

Threads (:func:`dpselect._threads.current`, T of them): the users column is counted per piece of
rows and scattered per piece, each piece at the places a scatter in row order would give it, on
T - 1 helper threads while this thread encodes the keys (piece by piece: partition codes are
given in order of first appearance, so piece i's codes need piece i - 1's); every piece's codes
are scattered by whichever thread is free. From ``parallel_codes.MIN_THREADS`` threads on, key
columns of fixed-width values or strings are instead encoded whole, on every thread, before
the grouping (:func:`codes_first`, :mod:`dpselect.ingest.parallel_codes`: the same codes), and its pieces'
codes are only handed out. The buckets are grouped in T ranges at once, and
bounded in :data:`SHARDS` fixed shards of the buckets (a function of the input's size only), each
with its own CSPRNG stream, taken by the T threads: with the deterministic test generator the
counts are the same for any T (docs/rows.md, "Threads").

The results are the streaming path's in distribution: every user keeps a uniform subset of
min(d, κ) of its d distinct partitions, drawn with the package CSPRNG, and counts are exact up
to the cap. Partition codes are the same (the key columns go through the same code maps, in row
order); users are visited bucket by bucket, a bucket being an unseeded function of the user's
value, so with the deterministic test generator the results depend only on the data.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np
import numpy.typing as npt

from dpselect import _count
from dpselect._threads import current
from dpselect._workers import Lane, run_pieces
from dpselect.rng import shard_test_state

# The buckets are bounded in this many shards (fewer when there are fewer buckets), whatever the
# number of threads: the shards, and each one's CSPRNG stream, depend on the input's size only.
SHARDS = 64

# Pieces of codes waiting for a free helper beyond this many per helper are scattered by this
# thread instead: the codes in flight stay a few pieces (4 bytes a row each), not the input.
_BACKLOG = 2


# Bytes a row the grouping holds (a user hash and a partition code).
ROW_BYTES = 12


def eligible(batch: Any, privacy_unit: str, by: list[str]) -> bool:
    """Whether ``batch`` takes this path: its privacy units can be read as integer words (a
    plain Arrow integer column; a dictionary column is left to the streaming path), and the
    grouping's 12 bytes a row stay within one and a half times the Arrow size of the columns it
    reads (so narrow columns, say int8 users and int16 keys, whose few distinct pairs the pair
    sets hold in little memory, keep the streaming path: the job's peak stays within twice its
    input)."""
    import pyarrow as pa

    if not pa.types.is_integer(batch.schema.field(privacy_unit).type):
        return False
    # The size of the buffers the chunks point to (for a slice, the whole buffers): pyarrow's
    # nbytes costs some 4 MiB of memory on its first call in a process (pyarrow 26), more than
    # this path's whole footprint at 1e5 rows.
    columns = sum(chunk.get_total_buffer_size() for name in {privacy_unit, *by}
                  for chunk in _chunks(batch.column(name)))
    return 2 * ROW_BYTES * batch.num_rows <= 3 * columns


def codes_first(batch: Any, privacy_unit: str, by: list[str], threads: int) -> bool:
    """Whether the keys of an :func:`eligible` batch are coded all at once on ``threads`` threads
    before the grouping (:mod:`dpselect.ingest.parallel_codes`) rather than piece by piece on one
    thread beside it. Every ``by`` column must hold fixed-width values or strings, in one chunk or
    several (coded chunk after chunk, through the shards' maps kept between them: a Parquet
    file's row groups); composite keys: each column coded on every thread, then their pairs of
    codes, packed in 8 bytes, coded the same way; with ``parallel_codes.MIN_THREADS`` threads or more (below, the one
    thread coding beside the others is faster: on 2 cores also for strings and composite keys,
    by 10 to 30 %). And there must be room for the codes within the same one
    and a half times the columns' size that :func:`eligible` allows the grouping: 4 bytes a row
    held beside the grouping's 12; while coding, 4 bytes a row per column and the packed pairs'
    8. The coding itself holds, for a while before the grouping starts, at most the value and the
    row of each row besides the codes (16 bytes a row at most; strings: a copy of each value, 4
    bytes of length, its row and its shard, 9 bytes a row beside the column's own data)."""
    from dpselect.ingest._encode import encoded_in_parallel
    from dpselect.ingest import parallel_codes

    # Also KeyFactorizer.encode's own conditions for several threads: else the codes would be
    # computed on one thread, without the grouping beside them.
    types = [batch.schema.field(name).type for name in by]
    if (threads < max(2, parallel_codes.MIN_THREADS) or batch.num_rows < parallel_codes.MIN_ROWS
            or not all(encoded_in_parallel(t) for t in types)):
        return False
    columns = sum(chunk.get_total_buffer_size() for name in {privacy_unit, *by}
                  for chunk in _chunks(batch.column(name)))
    held = max(ROW_BYTES + 4, 4 * len(by) + (8 if len(by) > 1 else 0))
    return 2 * held * batch.num_rows <= 3 * columns


def _chunks(column: Any) -> list[Any]:
    return list(column.chunks) if hasattr(column, "chunks") else [column]


def _user_pieces(column: Any) -> list[tuple[int, int, Any, int]]:
    """(rows, offset, values buffer, width) of each chunk of an integer column without nulls."""
    pieces = []
    for chunk in _chunks(column):
        if chunk.null_count:
            raise ValueError("internal: null privacy units must be removed before grouping")
        pieces.append((len(chunk), chunk.offset, chunk.buffers()[1], chunk.type.bit_width // 8))
    return pieces


def group(batch: Any, privacy_unit: str, piece_rows: int, lookahead: int, seed: int,
          encode_keys: Callable[[Any], npt.NDArray[np.uint32]],
          codes: npt.NDArray[np.uint32] | None = None) -> _count.RadixPairs:
    """The distinct pairs of ``batch`` grouped by user. ``encode_keys`` gives the partition
    codes of a slice of rows (the caller's code maps, called in row order on this thread);
    ``codes``: every row's partition code, already computed (:func:`codes_first`), instead.

    T threads (:func:`dpselect._threads.current`): T - 1 helpers, each a :class:`Lane` (its tasks
    one at a time), count the pieces' users per bucket, then place each piece's users in their
    buckets; this thread encodes the keys, piece by piece in row order (it cannot be split), and
    hands each piece's codes to the helper with the least work queued, or scatters them itself
    when every helper has ``lookahead`` pieces or more waiting. Then the T threads group T ranges
    of the buckets. With T = 1 this thread does it all, in the same order."""
    if codes is not None:
        if len(codes) != batch.num_rows:
            raise ValueError(f"codes must hold one code per row ({batch.num_rows}), got {len(codes)}")
        encode_keys = _given(codes)
    radix = _count.RadixPairs(batch.num_rows, seed, privacy_unit)
    pieces = slices(batch, privacy_unit, piece_rows)
    threads = current()
    hist = radix.piece_histograms(len(pieces))
    helpers = [Lane() for _ in range(min(threads, len(pieces)) - 1)]
    queued: list[list[Future[None]]] = [[] for _ in helpers]
    try:
        # Counting: the pieces in contiguous groups, one per helper and one here at the end.
        groups = _split(len(pieces), len(helpers) + 1)
        counted = [helpers[h].submit(_count_pieces, radix, privacy_unit, pieces, hist, groups[h])
                   for h in range(len(helpers))]
        first_codes = encode_keys(pieces[0]) if pieces else None
        _count_pieces(radix, privacy_unit, pieces, hist, groups[-1])
        for future in counted:
            future.result()
        radix.layout_pieces(hist)
        for h, lane in enumerate(helpers):  # the users side, a group of pieces per helper
            queued[h].append(lane.submit(_place_pieces, radix, privacy_unit, pieces, hist, groups[h]))
        if not helpers:
            _place_pieces(radix, privacy_unit, pieces, hist, groups[-1])
        else:  # this thread's group goes to the helpers in turn: this thread has the keys to encode
            for k, j in enumerate(groups[-1]):
                queued[k % len(helpers)].append(
                    helpers[k % len(helpers)].submit(_place_pieces, radix, privacy_unit, pieces, hist, [j]))
        for i, piece in enumerate(pieces):
            codes = first_codes if i == 0 and first_codes is not None else encode_keys(piece)
            _hand_codes(helpers, queued, max(lookahead, _BACKLOG), radix, privacy_unit, piece, hist, i, codes)
        for futures in queued:
            for future in futures:
                future.result()
    finally:
        for lane in helpers:  # cancel what has not started, wait for what has
            lane.__exit__(None, None, None)
    radix.ready()
    ranges = _split(radix.n_buckets, min(threads, radix.n_buckets))
    run_pieces(lambda r: radix.group(r[0], r[-1] + 1) if r else None, [(r,) for r in ranges], threads > 1)
    radix.compact()
    return radix


def _given(codes: npt.NDArray[np.uint32]) -> Callable[[Any], npt.NDArray[np.uint32]]:
    """``encode_keys`` for codes already computed: each call, in row order, takes the next
    piece's rows."""
    at = 0

    def take(piece: Any) -> npt.NDArray[np.uint32]:
        nonlocal at
        start, at = at, at + piece.num_rows
        return codes[start:at]

    return take


def _split(n: int, parts: int) -> list[list[int]]:
    """0 .. n - 1 in ``parts`` contiguous groups of nearly equal size (some empty when n < parts)."""
    parts = max(1, parts)
    return [list(range(n * k // parts, n * (k + 1) // parts)) for k in range(parts)]


def _count_pieces(radix: _count.RadixPairs, privacy_unit: str, pieces: list[Any], hist: Any,
                  which: list[int]) -> None:
    """Count the users of each piece of ``which`` per bucket, into its row of ``hist``."""
    for j in which:
        radix.count_piece(*_one_piece(pieces[j].column(privacy_unit)), hist, j)


def _one_piece(column: Any) -> tuple[int, int, Any, int]:
    """(rows, offset, values buffer, width) of one piece's users: a piece lies within one chunk
    (:func:`slices`), so a scatter fills its places in one call; a column of several chunks (not
    made by :func:`slices`) is joined first."""
    pieces = _user_pieces(column)
    if len(pieces) == 1:
        return pieces[0]
    return _user_pieces(column.combine_chunks() if hasattr(column, "combine_chunks") else column)[0] \
        if pieces else (0, 0, None, 8)


def slices(batch: Any, privacy_unit: str, piece_rows: int) -> list[Any]:
    """``batch`` in pieces of at most ``piece_rows`` rows, none across a chunk boundary of the
    users column, in row order."""
    pieces = []
    at = 0
    for chunk in _chunks(batch.column(privacy_unit)):
        end = at + len(chunk)
        pieces += [batch.slice(start, min(piece_rows, end - start)) for start in range(at, end, piece_rows)]
        at = end
    return pieces


def _place_pieces(radix: _count.RadixPairs, privacy_unit: str, pieces: list[Any], hist: Any,
                  which: list[int]) -> None:
    """Scatter the users of each piece of ``which``."""
    for j in which:
        n, offset, values, width = _one_piece(pieces[j].column(privacy_unit))
        radix.scatter_piece(n, offset, values, width, hist, j)


def _hand_codes(helpers: list[Lane], queued: list[list[Future[None]]], backlog: int, radix: _count.RadixPairs,
                privacy_unit: str, piece: Any, hist: Any, index: int, codes: npt.NDArray[np.uint32]) -> None:
    """Scatter one piece's codes on the helper with the fewest tasks waiting, or here when every
    helper has ``backlog`` or more (or there is none)."""
    best = -1
    for h, futures in enumerate(queued):
        for future in [f for f in futures if f.done()]:
            future.result()  # a helper's error surfaces now, not after the whole input
            futures.remove(future)
        if len(futures) < backlog and (best < 0 or len(futures) < len(queued[best])):
            best = h
    if best < 0:
        _place_codes(radix, privacy_unit, piece, hist, index, codes)
    else:
        queued[best].append(helpers[best].submit(_place_codes, radix, privacy_unit, piece, hist, index, codes))


def _place_codes(radix: _count.RadixPairs, privacy_unit: str, piece: Any, hist: Any, index: int,
                 codes: npt.NDArray[np.uint32]) -> None:
    """Put one piece's partition codes where its rows' users go (reading the users again)."""
    n, offset, values, width = _one_piece(piece.column(privacy_unit))
    radix.scatter_piece(n, offset, values, width, hist, index, codes)


def shard_count(n_buckets: int) -> int:
    """How many shards the buckets are bounded in: :data:`SHARDS`, or one per bucket when there
    are fewer (a function of the input's size only, never of the threads)."""
    return max(1, min(SHARDS, n_buckets))


def bound(radix: _count.RadixPairs, n_partitions: int, kappa: int, cap: int | None,
          test_state: Any) -> npt.NDArray[np.int64]:
    """Counts per partition code after bounding every user: the buckets in :func:`shard_count`
    shards, shard s with its own CSPRNG stream (``shard_test_state(test_state, s)``: the secure
    generator's per-thread state, or a stream derived from the test seed and s), the shards taken
    by the threads in contiguous groups. Each thread adds into counts of its own, summed at the
    end and capped again (min(c, Σ min(c, a_t)) = min(c, Σ a_t)); where T such arrays would exceed
    4 bytes per distinct pair (many partitions), the threads add into one array with atomic
    saturating additions instead. Either way the counts do not depend on T."""
    shards = shard_count(radix.n_buckets)
    threads = min(current(), shards)
    groups = _split(shards, threads)
    def finish(s: int, out: npt.NDArray[np.int64], shared: bool) -> None:
        radix.finish(s, shards, n_partitions, kappa, cap, shard_test_state(test_state, s), out=out, shared=shared)

    return bound_shard_groups(groups, n_partitions, radix.n_pairs, cap, finish)


def bound_shard_groups(groups: Sequence[Sequence[int]], n_partitions: int, n_pairs: int, cap: int | None,
                       finish: Callable[[int, npt.NDArray[np.int64], bool], None]) -> npt.NDArray[np.int64]:
    """Counts per partition from bounding every shard (``finish(s, out, shared)`` adds shard s's
    bounded counts into ``out``), one thread per group of shards. Each thread adds into counts of
    its own, summed at the end and capped again (min(c, Σ min(c, a_t)) = min(c, Σ a_t)); where
    those arrays would exceed 4 bytes per distinct pair (many partitions), the threads add into
    one array with atomic saturating additions instead. Either way the counts do not depend on
    the number of groups."""
    threads = len(groups)
    shared = threads > 1 and (threads - 1) * 8 * n_partitions > 4 * max(n_pairs, 1)
    common = np.zeros(n_partitions, dtype=np.int64) if shared else None

    def run(which: Sequence[int]) -> npt.NDArray[np.int64]:
        counts = common if common is not None else np.zeros(n_partitions, dtype=np.int64)
        for s in which:
            finish(s, counts, shared)
        return counts

    results = run_pieces(run, [(g,) for g in groups], threads > 1)
    if common is not None:
        return common
    counts = results[0]
    for other in results[1:]:
        counts += other
    if cap is not None:
        np.minimum(counts, cap, out=counts)
    return counts
