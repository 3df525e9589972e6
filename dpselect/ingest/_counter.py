"""RowCounter: rows fed in batches → distinct users per partition, each user bounded to κ of them.

The columns are encoded to dense codes (:mod:`dpselect.ingest._encode`); the distinct (user,
partition) pairs are kept in C pair sets (:class:`dpselect._count.PairCounter`), or, for a whole
input with integer privacy units, grouped by user through radix buckets
(:mod:`dpselect.ingest.radix`); then every user keeps at most κ of their partitions, chosen
uniformly with the package CSPRNG, and the counts saturate at the strategy's cap. The whole path
is described in :mod:`dpselect.ingest.rows`, which re-exports the public names, and argued in
docs/privacy/contribution-bounding.md.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from dpselect import _count
from dpselect._threads import current
from dpselect._workers import Lane, run_pieces
from dpselect.ingest import parallel_codes, radix
from dpselect.ingest._encode import CompositeKey, KeyFactorizer, encoded_as_bytes, encoded_in_parallel, hash_seed
from dpselect.ingest._nulls import NULL_PRIVACY_UNITS, NullPolicy, NullPrivacyUnitError, null_count, without_null_units
from dpselect.ingest._types import check_column_types, import_pyarrow
from dpselect.rng import resolve_rng, shard_test_state

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

__all__ = ["MAX_CODES", "PartitionCounts", "RowCounter"]


def _hash_seed() -> int:
    """The radix grouping's hash seed (a module-level name, so a test can pin it)."""
    return hash_seed()


# Codes are 32-bit in the kernel: at most this many distinct users, and distinct partitions.
MAX_CODES = _count.CODE_LIMIT

# Rows per step of the encoding pipeline in RowCounter.feed: large enough that the per-piece
# Python work is negligible, small enough that the two threads overlap for most of a batch.
_PIECE_ROWS = 1 << 18

# How many pieces ahead the worker of RowCounter.feed encodes.
_LOOKAHEAD = 4

# Pieces smaller than this are encoded on one thread.
_THREAD_ROWS = 1 << 14

# From parallel_codes.MIN_THREADS threads on, a batch is fed in pieces of this many rows, each
# column of a piece coded on every thread (RowCounter._feed_on_every_thread): a bound on the
# pieces' codes and pairs (16 bytes a row), large enough that the coder's phases pay.
_WIDE_PIECE_ROWS = 1 << 22

# The pairs are kept in _SHARDS pair sets by user code (its low _SHARD_BITS bits), a number fixed
# whatever the thread count: each piece's pairs are scattered into the shards in one pass
# (_count.scatter_pairs), the threads insert whole shards, and RowCounter.finish bounds each
# shard with its own CSPRNG stream (shard_test_state), the threads taking contiguous groups of
# shards. Every user's pairs are in one shard, which is all bounding needs; the sets and the
# streams depend on the codes alone, so the result does not depend on the number of threads.
_SHARD_BITS = 6
_SHARDS = 1 << _SHARD_BITS

# Rows per thread at least when a piece's pairs are scattered on several threads (_scatter_pairs).
_SCATTER_ROWS = 1 << 16

# Largest pre-size of the pair set taken from a hint (RowCounter.expect_rows): 2^24 pairs, a
# table of 2^25 slots (256 MiB). Above it the set grows as it fills.
_PRESIZE_CAP = 1 << 24


@dataclass(frozen=True, repr=False)
class PartitionCounts:
    """Exact (NOT private) distinct-user counts after bounding, one entry per partition with a
    count >= 1. ``keys`` holds the key columns (an Arrow table, one column per ``by`` name)."""

    keys: pa.Table
    counts: npt.NDArray[np.int64]

    def __repr__(self) -> str:
        # No values: these counts are exact, and a repr ends up in logs.
        return (f"PartitionCounts({self.keys.num_rows} partitions by {self.keys.schema.names}; "
                "exact counts, NOT private: input of a selection, never to publish)")


def _shard_groups(threads: int) -> list[range]:
    """The shards in ``threads`` contiguous groups of nearly equal size (one group per shard
    when there are more threads than shards)."""
    n = max(1, min(threads, _SHARDS))
    return [range(g * _SHARDS // n, (g + 1) * _SHARDS // n) for g in range(n)]


def _insert(counters: list[_count.PairCounter], keys: npt.NDArray[np.uint64], starts: npt.NDArray[np.uintp],
            shards: range) -> None:
    """Insert the scattered pairs (``_count.scatter_pairs``) of each of ``shards`` into its set."""
    for s in shards:
        first, end = int(starts[s]), int(starts[s + 1])
        if end > first:
            counters[s].feed_keys(keys[first:end])


def _scatter_pairs(users: npt.NDArray[np.uint32], partitions: npt.NDArray[np.uint32],
                   threads: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uintp]]:
    """``_count.scatter_pairs`` into the ``_SHARDS`` sets on up to ``threads`` threads, with the
    same result: the rows are split into ranges, each range's pairs counted per shard, and each
    range placed at its own cursors (shard after shard, ranges in row order within a shard)."""
    n = len(users)
    parts = min(threads, n // _SCATTER_ROWS)
    if parts < 2:
        return _count.scatter_pairs(users, partitions, _SHARD_BITS)
    bounds = [n * i // parts for i in range(parts + 1)]
    ranges = list(zip(bounds[:-1], bounds[1:]))
    counts = np.zeros((parts, _SHARDS), dtype=np.uintp)
    run_pieces(_count.pair_shard_counts, [(users, partitions, _SHARD_BITS, lo, hi, counts[i])
                                          for i, (lo, hi) in enumerate(ranges)], True)
    starts = np.zeros(_SHARDS + 1, dtype=np.uintp)
    np.cumsum(counts.sum(axis=0), out=starts[1:])
    cursors = (starts[:-1] + np.cumsum(counts, axis=0) - counts).astype(np.uintp)
    limits = (cursors + counts).astype(np.uintp)
    keys = np.empty(n, dtype=np.uint64)
    run_pieces(_count.place_pairs, [(users, partitions, _SHARD_BITS, lo, hi, cursors[i], limits[i], keys)
                                    for i, (lo, hi) in enumerate(ranges)], True)
    return keys, starts


def _merge_user_groups(groups: list[tuple[npt.NDArray[np.uintp], npt.NDArray[np.uint32]]]
                       ) -> tuple[npt.NDArray[np.uintp], npt.NDArray[np.uint32]]:
    """One grouping by user from the shards' groupings: every shard's non-empty users in its
    order, shard after shard (a shard indexes users by code, so the other shards' codes are
    empty there)."""
    lengths = [np.diff(ends, prepend=np.uintp(0)) for ends, _ in groups]
    kept = np.concatenate([n[n > 0] for n in lengths]).astype(np.uintp, copy=False)
    return np.cumsum(kept, dtype=np.uintp), np.concatenate([grouped for _, grouped in groups])


class RowCounter:
    """Feed rows in batches (Arrow tables or record batches), then :meth:`finish` once.

    ``expected_rows`` pre-sizes the C pair set (an upper bound on distinct pairs); leave it 0
    when streaming. ``null_privacy_units`` says what rows with a null privacy unit do:
    ``"error"`` (default) makes :meth:`finish` raise :class:`NullPrivacyUnitError` with their
    number; ``"drop"`` leaves them out (:attr:`null_unit_rows` counts them)."""

    def __init__(self, privacy_unit: str, by: Sequence[str], expected_rows: int = 0,
                 null_privacy_units: NullPolicy = "error") -> None:
        if not by:
            raise ValueError("by must name at least one partition column")
        if null_privacy_units not in NULL_PRIVACY_UNITS:
            raise ValueError(f"null_privacy_units must be 'error' or 'drop', got {null_privacy_units!r}")
        self.privacy_unit = privacy_unit
        self.by = list(by)
        self.null_privacy_units: NullPolicy = null_privacy_units
        self._users = KeyFactorizer(privacy_unit)
        self._key = CompositeKey(self.by)
        if isinstance(expected_rows, bool) or not isinstance(expected_rows, int) or expected_rows < 0:
            raise ValueError(f"expected_rows must be an int >= 0, got {expected_rows!r}")
        self._expected_rows = expected_rows
        # Created at the first feed; one pair set per shard of the users (see _SHARD_BITS).
        self._counters: list[_count.PairCounter] | None = None
        # Instead, for a whole input with integer privacy units (feed(..., final=True)).
        self._radix: _count.RadixPairs | None = None
        self._radix_sizes: tuple[int, int] | None = None  # its (users, pairs), kept after finish
        self._fed_final = False
        self._finished = False
        self._schema: Any = None
        self.rows = 0  # rows fed, including rows with a null privacy unit
        self.null_unit_rows = 0  # of which had a null privacy unit (dropped, or the error)

    def __repr__(self) -> str:
        state = "finished" if self._finished else f"{self.rows} rows fed"
        return (f"RowCounter(privacy_unit={self.privacy_unit!r}, by={self.by}, {state}, "
                f"{self.n_users} users, {self.n_partitions} partitions, {self.n_pairs} pairs)")

    @property
    def n_users(self) -> int:
        return self._radix_sizes[0] if self._radix_sizes is not None else len(self._users)

    @property
    def n_partitions(self) -> int:
        return len(self._key)

    @property
    def n_pairs(self) -> int:
        if self._radix_sizes is not None:
            return self._radix_sizes[1]
        return 0 if self._counters is None else sum(c.n_pairs for c in self._counters)

    def key_types(self) -> list[Any]:
        """The Arrow type of each ``by`` column's values (None before the first batch)."""
        return [c.type for c in self._key.columns]

    def expect_rows(self, rows: int) -> None:
        """A hint, before the first :meth:`feed`, of how many rows will come (e.g. from a file's
        metadata): the pair set is then sized once instead of doubling its way up, each
        doubling moving every pair. Ignored after the first feed; capped, so that a wrong hint
        (many rows, few distinct pairs) costs at most a few hundred MiB."""
        if self._counters is None and rows > 0:
            self._expected_rows = max(self._expected_rows, min(int(rows), _PRESIZE_CAP))

    def _pair_counters(self) -> list[_count.PairCounter]:
        if self._counters is None:
            # Codes are dense and in first-appearance order, so each shard holds about 1/_SHARDS.
            per_shard = -(-self._expected_rows // _SHARDS)
            self._counters = [_count.PairCounter(per_shard) for _ in range(_SHARDS)]
        return self._counters

    def check_schema(self, schema: Any) -> None:
        """Check the columns' presence and types (see :func:`check_column_types`) and fix the
        key types. :meth:`feed` does it for the first batch; call it earlier to fail before
        any reading."""
        names = [self.privacy_unit, *self.by]
        missing = [n for n in names if n not in schema.names]
        if missing:
            raise ValueError(f"missing column(s) {missing} (privacy_unit / by); available: {schema.names}")
        check_column_types(schema, self.privacy_unit, self.by)
        if self._schema is None:
            self._schema = schema
            for factorizer, name in zip(self._key.columns, self.by):
                factorizer.declare(schema.field(name).type)

    def feed(self, batch: pa.Table | pa.RecordBatch, *, final: bool = False) -> None:
        """Add the rows of one batch (columns ``privacy_unit`` and every ``by`` name).

        ``final=True`` says no batch follows (the whole input is in memory, as in
        ``select_partitions``): when it is also the first batch and the privacy units are
        integers, the rows are grouped by user through radix buckets (:mod:`dpselect.ingest.radix`)
        rather than inserted into the streaming pair sets: same results in distribution, several
        times fewer cache misses, memory proportional to the rows while grouping."""
        self._check_open()
        if not isinstance(final, bool):
            raise TypeError(f"final must be a bool, got {type(final).__name__}")
        first = self.rows == 0
        self.check_schema(batch.schema)
        self._fed_final = final
        rows = self._countable_rows(batch)
        if rows is None:
            return
        if final and first and radix.eligible(rows, self.privacy_unit, self.by):
            threads = current()
            # The keys on every thread at once, before the grouping, where their codes fit the
            # memory rule (radix.codes_first): else piece by piece beside it, on this thread.
            codes = self._encode_keys(rows, threads) if radix.codes_first(rows, self.privacy_unit, self.by,
                                                                          threads) else None
            self._radix = radix.group(rows, self.privacy_unit, _PIECE_ROWS, _LOOKAHEAD, _hash_seed(),
                                      self._encode_keys, codes)
            self._radix_sizes = (self._radix.n_users, self._radix.n_pairs)
            return
        if self._wide(rows):
            self._feed_on_every_thread(rows, more=not (final and rows.num_rows <= _WIDE_PIECE_ROWS))
            return
        if rows.num_rows <= _PIECE_ROWS:
            # One piece: the two columns at once, then the shards on every thread.
            users, partitions = self._encode_both(rows)
            keys, starts = _count.scatter_pairs(users, partitions, _SHARD_BITS)
            counters = self._pair_counters()
            threads = current() if rows.num_rows >= _THREAD_ROWS else 1
            run_pieces(_insert, [(counters, keys, starts, g) for g in _shard_groups(threads)], threads > 1)
            return
        self._feed_pieces(rows)

    def _check_open(self) -> None:
        """Refuse a batch after :meth:`finish`, or after a batch fed with ``final=True``."""
        import_pyarrow()
        if self._finished:
            raise RuntimeError("this RowCounter has already been finished")
        if self._fed_final:
            raise RuntimeError("this RowCounter was fed a batch with final=True: no batch may follow it")

    def _countable_rows(self, batch: Any) -> Any:
        """The rows of ``batch`` to count, None when there are none: counts its rows and those
        with a null privacy unit, which are dropped (policy "drop") or, under "error", make the
        whole batch wait for :meth:`finish` to refuse (only the number of such rows matters)."""
        if batch.num_rows == 0:
            return None
        self.rows += batch.num_rows
        units = batch.column(self.privacy_unit)
        nulls = null_count(units)
        if not nulls:
            return batch
        self.null_unit_rows += nulls
        if self.null_privacy_units == "error":
            return None  # finish() will refuse: only the number of such rows matters now
        batch = without_null_units(batch, units)
        return batch if batch.num_rows else None

    def _wide(self, batch: Any) -> bool:
        """Whether to code ``batch`` column after column, each on every thread
        (:meth:`_feed_on_every_thread`): from ``parallel_codes.MIN_THREADS`` threads and
        ``parallel_codes.MIN_ROWS`` rows on, where the privacy units can be coded so. Below, the
        two-thread pipeline of :meth:`_feed_pieces` is faster (see parallel_codes.MIN_THREADS)."""
        return (current() >= parallel_codes.MIN_THREADS and batch.num_rows >= parallel_codes.MIN_ROWS
                and encoded_in_parallel(batch.schema.field(self.privacy_unit).type))

    def _code_on_every_thread(self, piece: Any, more: bool) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
        """User and partition codes of one piece, each column coded on every thread (the shards'
        maps kept for the next piece when ``more``: :meth:`KeyFactorizer.encode`)."""
        threads = current()
        users = self._users.encode(piece.column(self.privacy_unit), threads, more)
        return users, self._encode_keys(piece, threads, more)

    def _feed_on_every_thread(self, batch: Any, more: bool) -> None:
        """A batch into the pair sets, piece by piece (``_WIDE_PIECE_ROWS`` rows), every step on
        every thread: each column coded by the sharded coder, whose maps persist across pieces
        and batches, then the pairs scattered into the shards (:func:`_scatter_pairs`) and
        inserted, a group of shards per thread. ``more``: pieces or batches may follow (else a lone piece is coded without
        keeping the maps)."""
        threads = current()
        counters = self._pair_counters()
        groups = _shard_groups(threads)
        for start in range(0, batch.num_rows, _WIDE_PIECE_ROWS):
            piece = batch.slice(start, _WIDE_PIECE_ROWS)
            users, partitions = self._code_on_every_thread(piece, more or start + _WIDE_PIECE_ROWS < batch.num_rows)
            keys, starts = _scatter_pairs(users, partitions, threads)
            del users, partitions
            run_pieces(_insert, [(counters, keys, starts, g) for g in groups], len(groups) > 1)

    def _feed_pieces(self, batch: Any) -> None:
        """A batch of several pieces (``_PIECE_ROWS`` rows each) into the pair sets."""
        pieces = [batch.slice(start, _PIECE_ROWS) for start in range(0, batch.num_rows, _PIECE_ROWS)]
        # A pipeline (the C code releases the GIL). For each piece, the worker encodes one column
        # side while this thread encodes the other; this thread then scatters the piece's pairs
        # into the shards, and the shards are inserted in groups, one per thread. Byte keys
        # (strings, binaries, wide values) cost about twice an integer column: the worker encodes
        # them, this thread the users, and the other threads (this one and the pool's, the
        # worker's excepted) insert the shards. Otherwise the two sides cost the same: the worker
        # encodes the users and inserts the last group of shards, this thread and the pool the
        # others; the worker's queue then alternates "encode piece i + _LOOKAHEAD" and "insert
        # piece i, last group", so at most _LOOKAHEAD + 1 pieces' codes are alive.
        keys_on_worker = any(self._is_bytes(batch, name) for name in self.by)
        there: Callable[[Any], npt.NDArray[np.uint32]] = self._encode_keys
        here: Callable[[Any], npt.NDArray[np.uint32]] = self._encode_users
        if not keys_on_worker:
            there, here = here, there
        threads = current()
        groups = _shard_groups(max(1, threads - 1) if keys_on_worker else threads)
        # The worker's tasks run one at a time, in the order given: codes follow row order, and
        # each shard of the worker's group is inserted piece after piece.
        on_worker = groups[-1] if not keys_on_worker and len(groups) > 1 else None
        local = groups[:-1] if on_worker is not None else groups
        with Lane(inline=threads < 2) as worker:
            # The worker's encodes run _LOOKAHEAD pieces ahead, so it stays busy while this thread
            # creates the pair sets on the first batch.
            encoded = {j: worker.submit(there, pieces[j]) for j in range(min(_LOOKAHEAD, len(pieces)))}
            inserts = []
            counters = self._pair_counters()
            try:
                for i, piece in enumerate(pieces):
                    if i + _LOOKAHEAD < len(pieces):
                        encoded[i + _LOOKAHEAD] = worker.submit(there, pieces[i + _LOOKAHEAD])
                    mine = here(piece)
                    theirs = encoded.pop(i).result()
                    users, partitions = (mine, theirs) if keys_on_worker else (theirs, mine)
                    keys, starts = _count.scatter_pairs(users, partitions, _SHARD_BITS)
                    if on_worker is not None:
                        inserts.append(worker.submit(_insert, counters, keys, starts, on_worker))
                    run_pieces(_insert, [(counters, keys, starts, g) for g in local], len(local) > 1)
                for future in inserts:
                    future.result()
            finally:
                pending: list[Any] = [*encoded.values(), *inserts]
                for future in pending:
                    future.cancel()

    def encode(self, batch: pa.Table | pa.RecordBatch, *,
               more: bool = True) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32], Any]:
        """The user and partition code of every row of ``batch`` (one code per distinct value,
        kept across calls), for a caller that bounds rows itself (a grouped release needs each
        row, not only the distinct pairs). Rows with a null privacy unit are refused or dropped
        as in :meth:`feed`; the third value is the batch the codes describe (filtered when rows
        were dropped), to read value columns from. Decode partition codes with :meth:`keys_of`.
        ``more=False`` says no batch follows (a whole input): coded on every thread, the columns'
        code maps are then not kept (a later batch would rebuild them; the codes are the same)."""
        self._check_open()
        self.check_schema(batch.schema)
        self.rows += batch.num_rows
        units = batch.column(self.privacy_unit)
        nulls = null_count(units)
        if nulls:
            self.null_unit_rows += nulls
            self.check_null_units()
            batch = without_null_units(batch, units)
        if self._wide(batch):
            if not more:  # the whole input at once: the codes are its size anyway
                return (*self._code_on_every_thread(batch, more=False), batch)
            users = np.empty(batch.num_rows, dtype=np.uint32)
            partitions = np.empty(batch.num_rows, dtype=np.uint32)
            for start in range(0, batch.num_rows, _WIDE_PIECE_ROWS):
                end = min(start + _WIDE_PIECE_ROWS, batch.num_rows)
                users[start:end], partitions[start:end] = self._code_on_every_thread(
                    batch.slice(start, end - start), more=True)
            return users, partitions, batch
        if batch.num_rows <= _PIECE_ROWS:
            return (*self._encode_both(batch), batch)
        # The two columns' sides on two threads, piece by piece (see feed).
        pieces = [batch.slice(start, _PIECE_ROWS) for start in range(0, batch.num_rows, _PIECE_ROWS)]
        with Lane(inline=current() < 2) as worker:
            futures = [worker.submit(self._encode_keys, piece) for piece in pieces]
            users = np.empty(batch.num_rows, dtype=np.uint32)
            partitions = np.empty(batch.num_rows, dtype=np.uint32)
            try:
                for i, (piece, future) in enumerate(zip(pieces, futures)):
                    start = i * _PIECE_ROWS
                    users[start:start + piece.num_rows] = self._encode_users(piece)
                    partitions[start:start + piece.num_rows] = future.result()
            finally:
                for future in futures:
                    future.cancel()
        return users, partitions, batch

    def keys_of(self, codes: npt.NDArray[np.int64]) -> Any:
        """The ``by`` values of the given partition codes, as an Arrow table."""
        pa = import_pyarrow()
        if self.n_partitions == 0 or len(codes) == 0:
            return pa.table({name: pa.array([], type=t if t is not None else pa.null())
                             for name, t in zip(self.by, self.key_types())})
        return pa.table(dict(zip(self.by, self._key.key_columns(np.asarray(codes, dtype=np.int64)))))

    def _encode_both(self, batch: Any) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
        """User and partition codes of one piece, the keys on a second thread when the piece is
        large enough for that to pay (below, handing the task over costs more than it saves)."""
        if batch.num_rows < _THREAD_ROWS or current() < 2:
            return self._encode_users(batch), self._encode_keys(batch)
        with Lane() as worker:
            keys = worker.submit(self._encode_keys, batch)
            try:
                users = self._encode_users(batch)
            finally:
                partitions = keys.result()
        return users, partitions

    @staticmethod
    def _is_bytes(batch: Any, name: str) -> bool:
        """Whether a column's values are compared as bytes (strings, binaries, wide values) row
        by row; a dictionary column is encoded by its integer indices."""
        return encoded_as_bytes(batch.schema.field(name).type)

    def _encode_users(self, piece: Any) -> npt.NDArray[np.uint32]:
        return self._users.encode(piece.column(self.privacy_unit))

    def _encode_keys(self, piece: Any, threads: int = 1, more: bool = False) -> npt.NDArray[np.uint32]:
        """Partition codes of one piece of rows (composite over every ``by`` column), fixed-width
        or string keys on ``threads`` threads (``threads`` and ``more``: :meth:`KeyFactorizer.encode`)."""
        codes = [factorizer.encode(piece.column(name), threads, more) for factorizer, name in zip(self._key.columns, self.by)]
        return np.ascontiguousarray(self._key.encode_codes(codes, threads, more))

    def check_null_units(self) -> None:
        """Raise :class:`NullPrivacyUnitError` if rows with a null privacy unit were fed and the
        policy is ``"error"``. :meth:`finish` calls it first."""
        if self.null_unit_rows and self.null_privacy_units == "error":
            raise NullPrivacyUnitError(self.privacy_unit, self.null_unit_rows)

    def user_sets(self) -> tuple[Any, Any]:
        """For mechanisms that need each user's whole set (weighted selection, DP-SIPS): the
        distinct pairs grouped by user (``dpselect.mechanisms.weighted.UserSets``), and a function
        from a keep mask over partition codes to the kept keys (an Arrow table). No randomness is
        used here: the mechanism bounds each user itself."""
        pa = import_pyarrow()
        from dpselect.mechanisms.weighted import UserSets

        if self._finished:
            raise RuntimeError("this RowCounter has already been finished")
        self.check_null_units()
        self._finished = True
        if self._radix is not None:
            ends, grouped = self._radix.groups()
            self._radix = None
        else:
            counters = self._pair_counters()
            groups = _shard_groups(current())
            per_group = run_pieces(lambda g: [counters[s].group(self.n_partitions) for s in g],
                                   [(g,) for g in groups], len(groups) > 1)
            ends, grouped = _merge_user_groups([shard for group in per_group for shard in group])
        sets = UserSets(ends, grouped, self.n_partitions)

        def keys_of(keep: np.ndarray) -> Any:
            kept = np.flatnonzero(keep)
            if self.n_partitions == 0:
                arrays = [pa.array([], type=t if t is not None else pa.null()) for t in self.key_types()]
            else:
                arrays = self._key.key_columns(kept)
            return pa.table(dict(zip(self.by, arrays)))

        return sets, keys_of

    def finish(self, max_partitions_contributed: int, count_cap: int | None, rng: object = None) -> PartitionCounts:
        """Bound every user to ``max_partitions_contributed`` partitions (uniform choice, package
        CSPRNG), count distinct users per partition saturating at ``count_cap`` (None: exact),
        and return the partitions whose count is at least 1."""
        if self._finished:
            raise RuntimeError("this RowCounter has already been finished")
        self.check_null_units()  # before any randomness is drawn
        rng = resolve_rng(rng)
        rng.announce()
        self._finished = True
        args = (self.n_partitions, max_partitions_contributed, count_cap)
        if self._radix is not None:
            counts = radix.bound(self._radix, *args, rng.test_state)
            self._radix = None
            return self._partition_counts(counts)
        return self._partition_counts(self._bound_shards(*args, rng.test_state))

    def _bound_shards(self, n_partitions: int, kappa: int, cap: int | None, test_state: Any) -> npt.NDArray[np.int64]:
        """Counts per partition code after bounding every user: shard s with its own CSPRNG stream
        (``shard_test_state(test_state, s)``: the secure generator's per-thread state, or a stream
        derived from the test seed and s), the shards taken by the threads in contiguous groups.
        Each thread adds into counts of its own, summed at the end and capped again
        (min(c, Σ min(c, a_t)) = min(c, Σ a_t)); where those arrays would exceed 4 bytes per
        distinct pair (many partitions), the threads add into one array with atomic saturating
        additions instead (the rule of :func:`dpselect.ingest.radix.bound`). Either way the
        counts do not depend on the number of threads."""
        counters = self._pair_counters()
        def finish(s: int, out: npt.NDArray[np.int64], shared: bool) -> None:
            counters[s].finish(n_partitions, kappa, cap, shard_test_state(test_state, s), out=out, shared=shared)

        return radix.bound_shard_groups(_shard_groups(current()), n_partitions, self.n_pairs, cap, finish)

    def _partition_counts(self, counts: npt.NDArray[np.int64]) -> PartitionCounts:
        """The partitions whose count is at least 1, with their keys."""
        pa = import_pyarrow()
        present = np.flatnonzero(counts > 0)
        if self.n_partitions == 0:
            key_arrays = [pa.array([], type=t if t is not None else pa.null()) for t in self.key_types()]
        else:
            key_arrays = self._key.key_columns(present)
        return PartitionCounts(keys=pa.table(dict(zip(self.by, key_arrays))), counts=counts[present])
