"""Array plumbing for the kernel: validate counts and out= arrays, run a 1-D kernel call over
any shape without copying, split big batches across cores, and report bad input clearly."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

import numpy as np
import numpy.typing as npt

from dpselect._kernel import NegativeCountError, first_negative

__all__ = ["as_counts", "check_out", "run_batched"]

# Below this many elements a second thread costs more than it saves.
PARALLEL_MIN = 1 << 19
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def as_counts(counts: npt.ArrayLike) -> np.ndarray:
    """The caller's counts as an integer ndarray, never copied when already one."""
    arr = counts if isinstance(counts, np.ndarray) else np.asarray(counts)
    if arr.dtype == np.bool_:
        raise TypeError("counts must be integers (numbers of distinct users), got dtype bool")
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.integer):
        if arr.size == 0 and not isinstance(counts, np.ndarray):
            return np.zeros(arr.shape, dtype=np.int64)  # [] means no partitions
        raise TypeError(
            f"counts must be an integer array (numbers of distinct users), got dtype {arr.dtype}; "
            "a fractional or object count is an input error, not something to round"
        )
    if not arr.dtype.isnative:
        # The kernel reads native integers; a big-endian count read as little-endian would be
        # a different (huge) count. Convert: a copy, but never a silently wrong answer.
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr


def check_out(out: object, shape: tuple[int, ...], dtype: np.dtype, name: str) -> np.ndarray:
    """A caller-provided output array: right type, shape and dtype, writable."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(out).__name__}")
    if out.shape != shape:
        raise ValueError(f"{name} has shape {out.shape}, expected {shape} (the shape of counts)")
    if out.dtype != dtype:
        raise TypeError(f"{name} must have dtype {np.dtype(dtype).name}, got {out.dtype}")
    if not out.flags.writeable:
        raise ValueError(f"{name} is read-only")
    return out


def _rows(arrays: Sequence[np.ndarray]) -> tuple[list[tuple[np.ndarray, ...]], str]:
    """1-D views covering every element, and the order ("C" or "F") in which they do."""
    first = arrays[0]
    if first.ndim == 1:
        return [tuple(arrays)], "C"
    if first.ndim == 0:
        return [tuple(a.reshape(1) for a in arrays)], "C"
    for order, flag in (("C", "C_CONTIGUOUS"), ("F", "F_CONTIGUOUS")):
        if all(a.flags[flag] for a in arrays):
            return [tuple(a.reshape(-1, order=order) for a in arrays)], order  # views, no copy
    # Strided N-D: walk rows along the last axis; each row is a strided 1-D view.
    return [tuple(a[idx] for a in arrays) for idx in np.ndindex(*first.shape[:-1])], "C"


def _forget_pool_after_fork() -> None:
    """Threads do not survive fork(): a child must build its own pool, never wait on the
    parent's (whose workers do not exist in the child)."""
    global _POOL, _POOL_LOCK
    _POOL = None
    _POOL_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_after_fork)


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=max(1, (os.cpu_count() or 1) - 1),
                                       thread_name_prefix="dpselect")
        return _POOL


def _threads_for(n: int, parallel: bool) -> int:
    if not parallel or n < PARALLEL_MIN:
        return 1
    return max(1, min(os.cpu_count() or 1, n // (PARALLEL_MIN // 2), 8))


def _chunks(rows: list[tuple[np.ndarray, ...]], parallel: bool) -> list[tuple[int, tuple[np.ndarray, ...]]]:
    """(flat start, 1-D views) pieces of the work; big rows are split for several cores."""
    pieces, base = [], 0
    for row in rows:
        n = row[0].shape[0]
        threads = _threads_for(n, parallel)
        bounds = [n * t // threads for t in range(threads + 1)]
        pieces += [(base + a, tuple(x[a:b] for x in row)) for a, b in zip(bounds, bounds[1:])]
        base += n
    return pieces


def _run_all(
    work: Callable[..., object], pieces: list[tuple[int, tuple[np.ndarray, ...]]], parallel: bool
) -> list[object]:
    """work(*views) on every piece: in order on this thread, or (parallel) the first here and the
    rest on the pool. Every piece finishes before an error is raised (the first piece's wins)."""
    if not parallel:
        return [work(*views) for _, views in pieces]
    futures = [_pool().submit(work, *views) for _, views in pieces[1:]]
    results: list[object] = []
    errors: list[BaseException] = []
    try:
        results.append(work(*pieces[0][1]))
    except BaseException as exc:
        errors.append(exc)
    for future in futures:
        try:
            results.append(future.result())
        except BaseException as exc:
            errors.append(exc)
    if errors:
        raise errors[0]
    return results


def _negative_error(counts: np.ndarray, flat: int, order: str) -> ValueError:
    where = np.unravel_index(flat, counts.shape, order=order) if counts.ndim > 1 else (flat,)
    position = ", ".join(str(int(i)) for i in where)
    value = counts[tuple(int(i) for i in where)] if counts.ndim else counts[()]
    return ValueError(
        f"counts[{position}] = {int(value)} is negative: counts are numbers of distinct users "
        "(nothing was drawn or written)"
    )


def run_batched(
    kernel: Callable[..., None],
    counts: np.ndarray,
    outs: Sequence[np.ndarray],
    parallel: bool,
) -> None:
    """Run kernel(counts_1d, *outs_1d) over every element.

    Signed counts are first scanned for a negative value, before any randomness is drawn or any
    output written (spec rng-and-exactness.md §3.1); the error names its index. With
    ``parallel`` (the secure CSPRNG only: each thread draws from its own state), large batches
    are split into contiguous chunks run on several cores."""
    rows, order = _rows([counts, *outs])
    pieces = _chunks(rows, parallel)
    if not pieces or pieces[0][1][0].size == 0 and len(pieces) == 1:
        return
    if np.issubdtype(counts.dtype, np.signedinteger):
        found = _run_all(lambda c, *_: first_negative(c), pieces, parallel)
        for (start, _), index in zip(pieces, found):
            if index >= 0:
                raise _negative_error(counts, start + int(index), order)
    try:
        _run_all(kernel, pieces, parallel)
    except NegativeCountError as exc:  # defence in depth: the kernel checks again
        for out in outs:
            out[...] = 0
        raise ValueError(f"counts changed during the call: a negative count appeared ({exc})") from None
