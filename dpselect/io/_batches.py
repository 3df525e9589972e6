"""Batches in flight between a reader and the counter: read ahead on a thread of the reader's own
(:func:`read_ahead`), and grouped into tables large enough to pay for their hand-off
(:func:`coalesce`). Public names are re-exported by :mod:`dpselect.io.files`."""
from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Any

from dpselect._workers import start_thread
from dpselect.ingest.rows import import_pyarrow

__all__ = ["coalesce", "read_ahead"]


def read_ahead(batches: Iterator[Any]) -> Generator[Any, None, None]:  # a generator: close() stops the reader
    """The same batches, the next one read (parsed, decompressed) on a thread of its own while
    the caller counts the current one. Exceptions of the reader come out here, in order; when
    the caller stops early (an error, a signal), the reader stops after its current batch."""
    slots: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=1)
    stop = threading.Event()
    # May block on its input: a thread of its own.
    reader = start_thread(functools.partial(_read_into, batches, slots, stop), "reader")
    try:
        while True:
            kind, item = slots.get()
            if kind == "end":
                return
            if kind == "error":
                raise item
            yield item
    finally:
        stop.set()
        # A reader blocked on a slow input (a pipe) must not hold up an exit: it is a daemon.
        reader.join(timeout=1.0)


def _read_into(batches: Iterator[Any], slots: queue.Queue[tuple[str, Any]], stop: threading.Event) -> None:
    """The reader's side of :func:`read_ahead`: every batch, then the end or the error, into
    ``slots``, until ``stop`` is set; then the source is closed."""
    try:
        for batch in batches:
            if not _put(slots, stop, ("batch", batch)):
                return
        _put(slots, stop, ("end", None))
    except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
        _put(slots, stop, ("error", exc))
    finally:
        # Close the source here and now (pyarrow's reader, the file), not when it is garbage
        # collected: that may be at interpreter exit, when pyarrow's threads still reading
        # ahead can no longer call back into Python (a fatal error, SIGABRT).
        close = getattr(batches, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001 - the source's own error was already handed over
                pass


def _put(slots: queue.Queue[tuple[str, Any]], stop: threading.Event, item: tuple[str, Any]) -> bool:
    """Hand ``item`` over once there is room, unless the consumer stops first (False)."""
    while not stop.is_set():
        try:
            slots.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def coalesce(batches: Iterator[Any], min_rows: Callable[[], int]) -> Iterator[Any]:
    """Group consecutive batches into tables of at least ``min_rows()`` rows (the last may be
    smaller): a reader's small blocks become batches large enough that the per-batch overhead
    (thread hand-off, Arrow calls) is small beside the per-row work."""
    pa = import_pyarrow()
    pending: list[Any] = []
    rows = 0
    for batch in batches:
        pending.append(batch)
        rows += batch.num_rows
        if rows >= min_rows():
            yield pa.Table.from_batches(pending)
            pending, rows = [], 0
    if pending:
        yield pa.Table.from_batches(pending)
