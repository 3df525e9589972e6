"""Argument checks shared by the extension modules (``dpselect/_*.pyx``), before any C code runs.

Cython's own conversions are not enough at this boundary: a ``uint32_t`` or ``uint64_t``
parameter takes a float and truncates it (``1.9`` becomes ``1``), a typed memoryview accepts a
misaligned buffer that the C code then reads through a misaligned pointer (undefined behaviour),
and their errors do not name the parameter. Every refusal here is a TypeError (wrong kind of
object or dtype) or a ValueError (wrong value, shape, layout or writability) whose message starts
with the parameter's name; nothing is rounded or converted to another dtype.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

__all__ = ["check_int", "check_array", "check_disjoint"]

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1


def check_int(name: str, value: object, low: int, high: int) -> int:
    """``value`` as a Python int in [low, high]; booleans and non-integers are refused."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    value = int(value)
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")
    return value


def _as_ndarray(name: str, obj: object) -> np.ndarray:
    if isinstance(obj, np.ndarray):
        return obj
    try:
        view = memoryview(obj)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be a numpy array, got {type(obj).__name__}") from None
    try:
        return np.asarray(view)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name}: buffer format {view.format!r} is not an array numpy reads ({exc})") from None


def check_array(name: str, obj: object, dtypes: Iterable[npt.DTypeLike], *, ndim: int = 1, writable: bool = False,
                copy: bool = False) -> np.ndarray:
    """``obj`` as an ndarray of one of ``dtypes`` (native byte order) with ``ndim`` dimensions,
    C-contiguous and aligned, as the kernel reads it through typed pointers.

    ``copy``: an input the kernel only reads may be copied into that layout (same values, same
    dtype); otherwise a non-contiguous or misaligned array is refused (an output must be written
    where the caller will look, and a silent copy of an input would hide the cost)."""
    arr = _as_ndarray(name, obj)
    allowed = [np.dtype(d) for d in dtypes]
    if arr.dtype not in allowed or not arr.dtype.isnative:
        expected = " or ".join(d.name for d in allowed)
        raise TypeError(f"{name} must have dtype {expected} (native byte order), got {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension{'s' if ndim != 1 else ''}, got {arr.ndim}")
    if writable and not arr.flags.writeable:
        raise ValueError(f"{name} is read-only")
    if not (arr.flags.c_contiguous and arr.flags.aligned):
        if copy and not writable:
            return np.require(arr, requirements=["C", "A"])
        raise ValueError(f"{name} must be a C-contiguous, aligned array (a view with strides, or at an odd "
                         "address, cannot be passed to the kernel in place)")
    return arr


def check_disjoint(outputs: dict[str, np.ndarray], inputs: dict[str, np.ndarray]) -> None:
    """Refuse an output that shares memory with an input or with another output (ValueError
    naming both). The kernels read their inputs while they write their outputs, so an overlap
    would change what they read half-way: a wrong answer, or a code or offset already checked
    turned into one out of range. Judged on the arrays' spans (numpy's may_share_memory), so
    interleaved views of one buffer are refused too."""
    names = list(outputs)
    for i, out_name in enumerate(names):
        others = {**{n: outputs[n] for n in names[i + 1:]}, **inputs}
        for other_name, other in others.items():
            if other is not None and np.may_share_memory(outputs[out_name], other):
                raise ValueError(f"{out_name} overlaps {other_name}: pass separate arrays")
