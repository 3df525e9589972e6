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

The results are the streaming path's in distribution: every user keeps a uniform subset of
min(d, κ) of its d distinct partitions, drawn with the package CSPRNG, and counts are exact up
to the cap. Partition codes are the same (the key columns go through the same code maps, in row
order); users are visited bucket by bucket, a bucket being an unseeded function of the user's
value, so with the deterministic test generator the results depend only on the data.
"""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np
import numpy.typing as npt

from dpselect import _count
from dpselect._workers import Lane

# The buckets are split in two halves: each is grouped, and later bounded, by its own thread.
SHARDS = 2


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
          encode_keys: Callable[[Any], npt.NDArray[np.uint32]]) -> _count.RadixPairs:
    """The distinct pairs of ``batch`` grouped by user. ``encode_keys`` gives the partition
    codes of a slice of rows (the caller's code maps, called in row order on this thread).

    Two threads. The worker counts the users per bucket (one pass over the column), then places
    each piece's users in their buckets, up to ``lookahead`` pieces ahead: it needs no partition
    code. This thread encodes each piece's keys, which cannot be split (codes are given in order
    of first appearance). The codes then go where their rows' users go (the users are read again
    and each bucket's rows are placed in row order on both sides, so no place is held per row):
    on the worker when it has nothing queued (the key encoding is usually the longer side), else
    here (when first touches of new memory slow the worker down, as at 5e7 rows on the project's
    virtual machine). Then each thread groups half of the buckets."""
    radix = _count.RadixPairs(batch.num_rows, seed, privacy_unit)
    pieces = [batch.slice(start, piece_rows) for start in range(0, batch.num_rows, piece_rows)]
    # The worker's tasks run one at a time, in the order given (pieces are placed in row order);
    # on an error, the tasks not started are cancelled and a running one is awaited.
    with Lane() as worker:
        laid_out = worker.submit(_count_and_layout, radix, batch, privacy_unit)
        placed: dict[int, Future[None]] = {
            j: worker.submit(_place, radix, privacy_unit, pieces[j]) for j in range(min(lookahead, len(pieces)))}
        handed: Future[None] | None = None  # the last scatter of codes given to the worker
        for i, piece in enumerate(pieces):
            if i + lookahead < len(pieces):
                placed[i + lookahead] = worker.submit(_place, radix, privacy_unit, pieces[i + lookahead])
            codes = encode_keys(piece)
            if i == 0:
                laid_out.result()  # its error, if any, rather than the pieces' that follow
            # The codes need no place from the users side: no waiting for it.
            ahead = i + 1 not in placed or placed[i + 1].done()
            handed = _scatter_codes(worker, handed, ahead, radix, privacy_unit, piece, codes)
        if handed is not None:
            handed.result()
        laid_out.result()
        for future in placed.values():
            future.result()
        radix.ready()
        half = radix.n_buckets // 2
        other = worker.submit(radix.group, half, radix.n_buckets)
        radix.group(0, half)
        other.result()
    radix.compact()
    return radix


def _count_and_layout(radix: _count.RadixPairs, batch: Any, privacy_unit: str) -> None:
    """Count the users of every bucket (one pass over the column), then lay the buckets out."""
    for n, offset, values, width in _user_pieces(batch.column(privacy_unit)):
        radix.count(n, offset, values, width)
    radix.layout()


def _place(radix: _count.RadixPairs, privacy_unit: str, piece: Any) -> None:
    """Place one piece's users in their buckets, in row order."""
    for n, offset, values, width in _user_pieces(piece.column(privacy_unit)):
        radix.scatter_users(n, offset, values, width, places=False)


def _put_codes(radix: _count.RadixPairs, privacy_unit: str, piece: Any, codes: npt.NDArray[np.uint32]) -> None:
    """Put one piece's partition codes where its rows' users went (reading the users again)."""
    start = 0
    for n, offset, values, width in _user_pieces(piece.column(privacy_unit)):
        radix.scatter_user_codes(n, offset, values, width, codes[start:start + n])
        start += n


def _scatter_codes(worker: Lane, handed: Future[None] | None, worker_ahead: bool, radix: _count.RadixPairs,
                   privacy_unit: str, piece: Any, codes: npt.NDArray[np.uint32]) -> Future[None] | None:
    """Scatter one piece's codes, one scatter of codes at a time (``handed``: the one on the
    worker, if any): on the worker when it has the next piece placed already (``worker_ahead``)
    and its last scatter done, else here. Returns the scatter now on the worker, if any."""
    if worker_ahead and (handed is None or handed.done()):
        if handed is not None:
            handed.result()
        # The worker has the next piece placed already: it takes this scatter too.
        return worker.submit(_put_codes, radix, privacy_unit, piece, codes)
    if handed is not None:
        handed.result()  # one scatter of codes at a time
    _put_codes(radix, privacy_unit, piece, codes)
    return None


def bound(radix: _count.RadixPairs, n_partitions: int, kappa: int, cap: int | None,
          states: list[Any]) -> npt.NDArray[np.int64]:
    """Counts per partition code after bounding every user (each half of the buckets on its own
    thread with its own CSPRNG stream, ``states[shard]``), summed and capped again."""
    with Lane() as worker:
        other = worker.submit(radix.finish, 1, SHARDS, n_partitions, kappa, cap, states[1])
        try:
            counts = radix.finish(0, SHARDS, n_partitions, kappa, cap, states[0])
        finally:
            counts_other = other.result()
    counts += counts_other
    if cap is not None:
        np.minimum(counts, cap, out=counts)
    return counts
