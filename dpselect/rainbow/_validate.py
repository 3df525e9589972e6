"""Input validation shared by the rainbow modules.

Every public function of ``dpselect.rainbow`` validates its inputs here, so that bad input
raises a ValueError/TypeError naming the parameter and the reason, before any work is done.
Validators never mutate the caller's arrays: they return fresh (or read-only) copies.
"""

from __future__ import annotations

import operator
from numbers import Integral

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpselect.core import checks

#: Tolerance for "sums to one" on user-given probability vectors.
SUM_TOLERANCE = 1e-9

#: Largest distance we evaluate: float64 represents every integer up to 2**53 exactly.
MAX_DISTANCE = 2**53


def check_epsilon(epsilon: object, name: str = "epsilon") -> float:
    """Return epsilon as a float after checking it is a finite real number >= 0 (the package's
    vocabulary: :func:`dpselect.core.checks.check_epsilon`)."""
    return checks.check_epsilon(epsilon, name=name)[0]


def check_delta(delta: object, name: str = "delta") -> float:
    """Return delta as a float after checking 0 <= delta < 1."""
    return checks.check_delta(delta, name=name)[0]


def check_probability(p: object, name: str = "p") -> float:
    """Return a probability in [0, 1] as a float."""
    return float(checks.check_probability(p, name=name))


def check_distribution(probabilities: ArrayLike, name: str = "boundary") -> NDArray[np.float64]:
    """Return a fresh float64 probability vector (length m >= 2, entries >= 0, sum 1).

    The vector is renormalised by its sum, which moves it by at most SUM_TOLERANCE.
    """
    try:
        array = np.array(probabilities, dtype=np.float64, copy=True)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be a sequence of probabilities: {error}") from None
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if array.size < 2:
        raise ValueError(f"{name} must have m >= 2 outcomes, got {array.size}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must contain only finite numbers")
    if np.any(array < 0):
        raise ValueError(f"{name} must be non-negative, got min {array.min()!r}")
    total = float(array.sum())
    if abs(total - 1.0) > SUM_TOLERANCE:
        raise ValueError(f"{name} must sum to 1 (within {SUM_TOLERANCE}), got sum {total!r}")
    return array / total


def check_distribution_rows(table: ArrayLike, name: str) -> NDArray[np.float64]:
    """Return a fresh (K, m) float64 table whose rows are probability vectors."""
    try:
        array = np.array(table, dtype=np.float64, copy=True)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be a 2-D array of probabilities: {error}") from None
    if array.ndim != 2 or array.shape[1] < 2:
        raise ValueError(f"{name} must have shape (rows, m) with m >= 2, got {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must contain only finite numbers")
    if np.any(array < 0):
        raise ValueError(f"{name} must be non-negative, got min {array.min()!r}")
    sums = array.sum(axis=1)
    worst = float(np.max(np.abs(sums - 1.0))) if array.shape[0] else 0.0
    if worst > SUM_TOLERANCE:
        raise ValueError(f"every row of {name} must sum to 1 (within {SUM_TOLERANCE}); worst |sum-1| = {worst!r}")
    return array


def check_distances(distances: ArrayLike, name: str = "distances") -> NDArray[np.float64]:
    """Return distances as a fresh 1-D float64 array of exact non-negative integers.

    An int ``n`` means the whole line ``0, 1, ..., n``. Floats are accepted when they hold
    integer values (float64 is what the closed forms compute with; every integer below 2**53
    is exact in it).
    """
    if isinstance(distances, Integral) and not isinstance(distances, bool):
        n = int(distances)
        if n < 0:
            raise ValueError(f"{name} as a line length must be >= 0, got {n}")
        if n >= MAX_DISTANCE:
            raise ValueError(f"{name} must be < 2**53, got {n}")
        return np.arange(n + 1, dtype=np.float64)
    raw = np.asarray(distances)
    if raw.dtype == bool or not (np.issubdtype(raw.dtype, np.integer) or np.issubdtype(raw.dtype, np.floating)):
        raise TypeError(f"{name} must be an int or an array of non-negative integers, got dtype {raw.dtype}")
    if np.issubdtype(raw.dtype, np.integer):
        if raw.size and (raw.min() < 0 or raw.max() >= MAX_DISTANCE):
            raise ValueError(f"{name} must be non-negative integers below 2**53, got range [{raw.min()}, {raw.max()}]")
        return raw.astype(np.float64).reshape(-1)
    array = raw.astype(np.float64, copy=True).reshape(-1)
    if array.size:
        if not np.all(np.isfinite(array)):
            raise ValueError(f"{name} must be finite")
        if np.any(array < 0):
            raise ValueError(f"{name} must be non-negative, got min {array.min()!r}")
        if np.any(array != np.floor(array)):
            raise ValueError(f"{name} must be integers")
        if np.any(array >= MAX_DISTANCE):
            raise ValueError(f"{name} must be < 2**53")
    return array


def check_index_array(indices: ArrayLike, name: str, n_rows: int, shape: str) -> NDArray[np.int64]:
    """Return integer row indices in [0, n_rows) as a fresh int64 array.

    Floats and booleans are refused rather than truncated (an index 1.7 is a mistake, not row 1),
    and the range is checked on the caller's values before any cast, so a uint64 or a Python
    int >= 2**63 cannot wrap into range. ``shape`` names the expected shape in the error.
    """
    raw = np.asarray(indices)
    if raw.size == 0:
        return np.zeros(raw.shape, dtype=np.int64)
    if raw.dtype == object:
        try:
            raw = np.array([operator.index(value) for value in raw.ravel().tolist()], dtype=object).reshape(raw.shape)
        except TypeError:
            raise TypeError(f"{name} must hold integer row indices ({shape}), got non-integer objects") from None
    elif raw.dtype == bool or not np.issubdtype(raw.dtype, np.integer):
        raise TypeError(f"{name} must hold integer row indices ({shape}), got dtype {raw.dtype}")
    low, high = raw.min(), raw.max()
    if low < 0 or high >= n_rows:
        raise ValueError(f"{name} must index rows in [0, {n_rows}), got values in [{low}, {high}]")
    return raw.astype(np.int64)
