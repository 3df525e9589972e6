"""Array plumbing for the kernel: validate counts and out= arrays, run a 1-D kernel call over
any shape (one strided batch, in C order), split big batches across cores, and report bad input
clearly."""
from __future__ import annotations

from typing import Callable, Sequence, TypeVar

import numpy as np
import numpy.typing as npt

from dpselect import _workers
from dpselect._threads import current
from dpselect._kernel import NegativeCountError, first_negative

__all__ = ["as_counts", "check_out", "chunks", "run_all", "run_batched"]

# Below this many elements a second thread costs more than it saves.
PARALLEL_MIN = 1 << 19


def as_counts(counts: npt.ArrayLike, name: str = "counts") -> np.ndarray:
    """The caller's counts as an integer ndarray, never copied when already one.

    Refused, with a TypeError naming ``name``: booleans, floats, objects, timedelta/datetime
    (numpy counts timedelta64 as an integer type, but a duration is not a number of users) and
    masked arrays (their mask would be silently ignored, releasing the masked entries)."""
    if isinstance(counts, np.ma.MaskedArray):
        raise TypeError(
            f"{name} is a numpy masked array: its mask would be ignored and masked entries released. "
            f"Pass {name}.compressed() to drop them, or {name}.filled(0) to treat them as absent"
        )
    arr = counts if isinstance(counts, np.ndarray) else np.asarray(counts)
    if arr.dtype == np.bool_:
        raise TypeError(f"{name} must be integers (numbers of distinct users), got dtype bool")
    if arr.dtype.kind not in "iu":
        if arr.size == 0 and not isinstance(counts, np.ndarray) and arr.dtype.kind == "f":
            return np.zeros(arr.shape, dtype=np.int64)  # [] means no partitions
        raise TypeError(
            f"{name} must be an integer array (numbers of distinct users), got dtype {arr.dtype}; "
            "a fractional, object or time value is an input error, not something to round"
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


def _flat_view(a: np.ndarray) -> np.ndarray | None:
    """A 1-D view of every element of ``a`` in C (row-major) order, or None when the memory
    layout has no single stride for that order."""
    if a.ndim <= 1:
        return a.reshape(-1)
    try:
        return a.reshape(-1, copy=False)
    except ValueError:
        return None
    except TypeError:  # numpy < 2.1 has no copy= on reshape
        view = a.view()
        try:
            view.shape = (a.size,)
        except AttributeError:
            return None
        return view


def _threads_for(n: int, parallel: bool) -> int:
    """Pieces for a batch of n: one below PARALLEL_MIN, else up to the call's threads
    (:func:`dpselect._threads.current`), each piece at least PARALLEL_MIN / 2 elements."""
    if not parallel or n < PARALLEL_MIN:
        return 1
    return max(1, min(current(), n // (PARALLEL_MIN // 2)))


def chunks(views: tuple[np.ndarray, ...], parallel: bool) -> list[tuple[int, tuple[np.ndarray, ...]]]:
    """(flat start, 1-D views) pieces of the work; a big batch is split for several cores."""
    n = views[0].shape[0]
    threads = _threads_for(n, parallel)
    bounds = [n * t // threads for t in range(threads + 1)]
    return [(a, tuple(x[a:b] for x in views)) for a, b in zip(bounds, bounds[1:])]


_T = TypeVar("_T")


def run_all(
    work: Callable[..., _T], pieces: list[tuple[int, tuple[np.ndarray, ...]]], parallel: bool
) -> list[_T]:
    """work(*views) on every piece, in piece order: on this thread, or (parallel) the first
    here and the rest on the package's worker pool (:func:`dpselect._workers.run_pieces`: every
    piece finishes before an error is raised, the first piece's wins; pieces the pool cannot
    take run here)."""
    return _workers.run_pieces(work, [views for _, views in pieces], parallel)


def _negative_error(counts: np.ndarray, flat: int) -> ValueError:
    where = np.unravel_index(flat, counts.shape) if counts.ndim > 1 else (flat,)
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
    """Run kernel(counts_1d, *outs_1d) over every element, in C (row-major) order.

    Any shape and stride is one strided batch: a layout that has no single stride in C order
    (an F-ordered or sliced N-D array) is copied first, so the same logical counts give the
    same decisions from the same stream whatever their layout. Signed counts are first
    scanned for a negative value, before any randomness is drawn or any output written; the
    error names its index. With ``parallel`` (the secure CSPRNG only: each thread draws from
    its own state), large batches are split into contiguous chunks run on several cores."""
    flat_counts = _flat_view(counts)
    if flat_counts is None:
        flat_counts = np.ascontiguousarray(counts).reshape(-1)
    targets = [_flat_view(out) for out in outs]
    scratch = [np.empty(out.size, out.dtype) if t is None else t for out, t in zip(outs, targets)]
    if flat_counts.size == 0:
        return
    pieces = chunks((flat_counts, *scratch), parallel)
    if np.issubdtype(counts.dtype, np.signedinteger):
        found = run_all(lambda c, *_: first_negative(c), pieces, parallel)
        for (start, _), index in zip(pieces, found):
            if index >= 0:
                raise _negative_error(counts, start + int(index))
    try:
        run_all(kernel, pieces, parallel)
    except NegativeCountError as exc:  # defence in depth: the kernel checks again
        for out in outs:
            out[...] = 0
        raise ValueError(f"counts changed during the call: a negative count appeared ({exc})") from None
    for out, target, buffer in zip(outs, targets, scratch):
        if target is None:  # an out= array with no single-stride layout: fill it at the end
            out[...] = buffer.reshape(out.shape)
