"""The package's worker threads, all of them, and their fork hook.

Three kinds of work run beside the caller's thread:

* the pieces of one big kernel batch, split across cores (:func:`run_pieces`, used by
  :mod:`dpselect._arrays`);
* the tasks of a pipeline that must run one at a time, in the order they were given, while the
  caller does its own share (:class:`Lane`: the encoders and pair-set inserts of
  :meth:`dpselect.ingest.rows.RowCounter.feed`, the radix grouping of a whole input, the bounding
  of a second shard of users);
* a reader that may wait on its input, or on its consumer, for as long as they take
  (:func:`start_thread`, the read-ahead of :func:`dpselect.io.files.read_ahead`).

The first two share one pool, created on first use and sized to the cores the process may use
(:func:`dpselect._threads.available_cores`: its affinity mask and cgroup quota): the caller's
thread does a share of every job, so the pool has one thread fewer (at least one). A call that
asks for more threads than that (``threads=`` above the cores) gets a larger pool, which later
calls keep using; its threads are started on demand. Its threads are started once: a thread started for each call cost a good part of a small
input's time, more on a busy machine, where the new thread must wait for a core. No pool task
ever waits for another task, which is what lets callers from any number of threads share a pool
of bounded size without a deadlock; work started on a pool thread runs there and then rather than
queue behind itself, and so does work given once the interpreter has shut its threads down (an
``atexit`` handler calling dpselect). A reader is the exception that gets a thread of its own: it
may block until the caller takes a batch, and a pool thread blocked so could be the one the
caller is waiting for.

Threads do not survive ``fork()``: a child starts with the forking thread alone, and a task given
to the parent's pool there would never run. One ``os.register_at_fork`` hook makes the child
forget the pool (without touching it: its locks may have been held by threads that no longer
exist); the child builds its own on first use, and the parent's pool is left as it was. The
CSPRNG's own fork detection is separate and unchanged (docs/privacy/randomness.md).
"""
from __future__ import annotations

import os
import threading
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from types import TracebackType
from typing import Any, TypeVar

from dpselect._threads import available_cores, requested

__all__ = ["Lane", "cores", "on_worker", "pool_size", "run_pieces", "start_thread", "threads"]

T = TypeVar("T")

_THREAD_PREFIX = "dpselect-worker"

_POOL: ThreadPoolExecutor | None = None
_POOL_WORKERS = 0  # the pool's max_workers (0: no pool yet)
_POOL_LOCK = threading.Lock()
# Whether the current thread is one of the pool's (set by the pool's initializer).
_LOCAL = threading.local()
# The pool's threads, for threads(): the executor's own list is private to it.
_THREADS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
_THREADS_LOCK = threading.Lock()


def cores() -> int:
    """The cores this process may use (its affinity mask, capped by its cgroup CPU quota; 1 where
    the system cannot tell)."""
    return available_cores()


def pool_size() -> int:
    """How many threads the pool may have: one per core besides the caller's, at least one, or
    more once a call asked for more threads than that."""
    return max(1, cores() - 1, _POOL_WORKERS)


def _mark_worker() -> None:
    _LOCAL.worker = True
    with _THREADS_LOCK:
        _THREADS.add(threading.current_thread())


def _forget_pool_after_fork() -> None:
    """In a forked child: the parent's pool has no threads here, and its locks may be held by
    threads that are gone. Drop it unseen; the child's first job builds its own."""
    global _POOL, _POOL_LOCK, _LOCAL, _THREADS, _THREADS_LOCK, _POOL_WORKERS
    _POOL = None
    _POOL_WORKERS = 0
    _POOL_LOCK = threading.Lock()
    _LOCAL = threading.local()
    _THREADS = weakref.WeakSet()
    _THREADS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_after_fork)


def _pool(workers: int = 1) -> ThreadPoolExecutor:
    """The pool, with room for at least ``workers`` threads: a smaller one is replaced by a larger
    one (the old one finishes what it was given, then its threads end)."""
    global _POOL, _POOL_WORKERS
    with _POOL_LOCK:
        if _POOL is None or _POOL_WORKERS < workers:
            old, size = _POOL, max(workers, max(1, cores() - 1), _POOL_WORKERS)
            _POOL = ThreadPoolExecutor(max_workers=size, thread_name_prefix=_THREAD_PREFIX,
                                       initializer=_mark_worker)
            _POOL_WORKERS = size
            if old is not None:
                old.shutdown(wait=False)
        return _POOL


def on_worker() -> bool:
    """Whether this thread is one of the pool's."""
    return bool(getattr(_LOCAL, "worker", False))


def threads() -> tuple[threading.Thread, ...]:
    """The pool's live threads in this process (none before the first job, nor in a forked child
    before its first job)."""
    with _THREADS_LOCK:
        return tuple(t for t in _THREADS if t.is_alive())


def _submit(fn: Callable[..., T], *args: Any) -> Future[T] | None:
    """``fn(*args)`` on the pool, or None where it cannot go there: on a pool thread (the job
    would wait behind itself once every thread waits so) or during interpreter shutdown (an
    ``atexit`` handler calling dpselect: "cannot schedule new futures"). A call that asked for
    more threads than the cores (:func:`dpselect._threads.using`) gets a pool with room for them;
    pieces beyond that wait for a free thread, as they do for a call within the cores."""
    if on_worker():
        return None
    asked = requested()
    try:
        return _pool(1 if asked is None else asked - 1).submit(fn, *args)
    except RuntimeError:
        return None


def run_pieces(work: Callable[..., T], pieces: Sequence[tuple[Any, ...]], parallel: bool) -> list[T]:
    """``work(*args)`` for each ``args`` of ``pieces``, the results in piece order: all on this
    thread, or (``parallel``) the first here and the others on the pool. Every piece finishes
    before an error is raised (the first piece's error wins), so no piece still runs when the
    caller sees it. Pieces the pool cannot take run here."""
    futures: list[Future[T] | None] = [None]
    if parallel and len(pieces) > 1:
        futures += [_submit(work, *args) for args in pieces[1:]]
    futures += [None] * (len(pieces) - len(futures))
    results: list[T] = []
    errors: list[BaseException] = []
    for args, future in zip(pieces, futures):
        try:
            results.append(work(*args) if future is None else future.result())
        except BaseException as exc:  # noqa: BLE001 - raised below, once every piece has finished
            errors.append(exc)
    if errors:
        raise errors[0]
    return results


class Lane:
    """Tasks that run one at a time, in the order they were given, on the pool, while the caller
    goes on with its own share: what a single worker thread of one's own would give, without
    starting one per call. Tasks must not wait for other tasks.

    Use it as a context manager: on leaving the block, the tasks not started are cancelled and a
    running one is waited for (as a pool of the call's own would on shutdown), so that no task of
    a failed call still touches its data when the error reaches the caller. Where the pool cannot
    take the work (on a pool thread, during interpreter shutdown), or ``inline=True`` (a call
    limited to one thread), each task runs when given."""

    def __init__(self, inline: bool = False) -> None:
        # inline: every task runs when given, on the caller's thread (a call limited to one thread).
        self._inline = inline
        self._lock = threading.Lock()
        self._queue: deque[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = deque()
        self._draining = False  # a _drain is queued or running and will see what is queued
        self._futures: list[Future[Any]] = []

    def submit(self, fn: Callable[..., T], /, *args: Any) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            self._queue.append((future, fn, args))
            self._futures.append(future)
            start = not self._draining
            self._draining = True
        if start and (self._inline or _submit(self._drain) is None):
            self._drain()
        return future

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._draining = False
                    return
                future, fn, args = self._queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue  # cancelled before it started
            try:
                result = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                future.set_exception(exc)
            else:
                future.set_result(result)

    def __enter__(self) -> Lane:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        running = [future for future in self._futures if not future.cancel()]
        wait(running)


def start_thread(target: Callable[[], None], name: str) -> threading.Thread:
    """Start ``target`` on a daemon thread of its own, ``dpselect-<name>``: for work that may
    block on something outside the package for as long as that takes (a slow input, a consumer
    that stopped taking batches), which a pool thread must never do. Daemon, so that a thread
    blocked on a pipe does not hold up the interpreter's exit."""
    thread = threading.Thread(target=target, name=f"dpselect-{name}", daemon=True)
    thread.start()
    return thread
