"""Validation of personalized-DP inputs and the exact reading of float privacy levels.

Spec: ``personalized.md`` §1 (model). Every privacy decision in this package is taken on the
*exact* value of a user's privacy level, never on a rounded float:

* A float Φ(u) is read as the shortest decimal that round-trips to it, ``Fraction(repr(x))``
  (``0.1`` means exactly 1/10, which is what the user typed).
* Thresholds on Φ are turned back into float comparisons that are *provably identical* to the
  exact comparison (:func:`smallest_float_above`), and truncation levels ⌊s·Φ(u)⌋ are computed
  in float and repaired exactly wherever the float product is near an integer
  (:func:`exact_floor_scaled`). So vectorized numpy code runs exactly the certified mechanism.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpselect.exact import as_fraction

__all__ = [
    "PersonalizedInput",
    "doubling_steps",
    "exact_floor_scaled",
    "exact_value",
    "smallest_float_above",
    "validate_beta",
    "validate_bound",
    "validate_input",
    "validate_phi",
    "validate_values",
]


def exact_value(x: float) -> Fraction:
    """The exact rational a float privacy level stands for: its shortest round-trip decimal.

    The map is strictly increasing on finite floats (rounding is monotone and distinct floats
    have distinct shortest decimals), so float order equals exact order.
    """
    return as_fraction(float(x))


def smallest_float_above(k: Fraction) -> float:
    """The smallest float f with ``exact_value(f) > k``.

    For a float array ``phi``, ``phi >= smallest_float_above(k)`` is then exactly the set
    ``{u : exact_value(phi[u]) > k}`` (by monotonicity of :func:`exact_value`).
    """
    f = float(k)
    while exact_value(f) <= k:
        f = math.nextafter(f, math.inf)
    while True:
        below = math.nextafter(f, -math.inf)
        if exact_value(below) > k:
            f = below
        else:
            return f


# |float(scale) * phi - scale * exact(phi)| is below ~4 ulp of the product; anything farther than
# this relative distance from an integer floors correctly in float. The margin is generous.
_NEAR_INTEGER_RELATIVE = 1e-9


def exact_floor_scaled(phi: np.ndarray, scale: Fraction, cap: int) -> np.ndarray:
    """``min(cap, ⌊scale · exact_value(phi[u])⌋)`` for every u, exactly, as int64.

    Float products that land within a relative 1e-9 of an integer are recomputed in
    ``Fraction`` once per distinct Φ value; all others are provably floored right by the float
    product (its relative error is a few ulp, far below the margin). Products are first clipped
    at cap + 1/2: a float product that large means the exact floor is ≥ cap.
    """
    if cap < 0:
        raise ValueError("cap must be >= 0")
    product = phi * float(scale)
    np.minimum(product, cap + 0.5, out=product)
    distance = product - np.rint(product)
    np.abs(distance, out=distance)
    suspicious = distance <= _NEAR_INTEGER_RELATIVE * product
    result = np.floor(product).astype(np.int64)
    if suspicious.any():
        values, inverse = np.unique(phi[suspicious], return_inverse=True)
        exact = np.array(
            [min(cap, math.floor(scale * exact_value(v))) for v in values.tolist()], dtype=np.int64
        )
        result[suspicious] = exact[inverse]
    np.minimum(result, cap, out=result)
    return result


def doubling_steps(ratio: Fraction) -> int:
    """``t = max(1, ⌈log2(ratio)⌉)`` computed exactly: the smallest t ≥ 1 with 2**t ≥ ratio."""
    t = 1
    while Fraction(2**t) < ratio:
        t += 1
    return t


def validate_phi(phi: Any, name: str = "phi") -> np.ndarray:
    """A read-only float64 copy of the per-user privacy levels; each must be positive and finite."""
    try:
        array = np.array(phi, dtype=np.float64, copy=True)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a 1-D array of positive floats: {exc}") from None
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one privacy level per user), got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{name} must contain at least one user")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    if not np.all(array > 0):
        raise ValueError(f"{name} must be > 0 for every user (Φ(u) is a privacy level)")
    array.setflags(write=False)
    return array


def validate_bound(bound: Any, name: str = "bound") -> int:
    """The public bound B: a positive integer (at most 2**53 so float arithmetic stays exact)."""
    if isinstance(bound, (bool, np.bool_)) or not isinstance(bound, (int, np.integer)):
        if isinstance(bound, (float, np.floating)) and float(bound).is_integer():
            bound = int(bound)
        else:
            raise TypeError(f"{name} must be a positive integer, got {bound!r}")
    bound = int(bound)
    if not 1 <= bound <= 2**53:
        raise ValueError(f"{name} must be in [1, 2**53], got {bound}")
    return bound


def validate_values(values: Any, bound: int, name: str = "values") -> np.ndarray:
    """A read-only int64 copy of the integer values; each must lie in {0, ..., bound}."""
    array = np.asarray(values)
    if array.dtype == np.bool_:
        array = array.astype(np.int64)
    elif array.dtype.kind == "f":
        if not np.all(np.isfinite(array)) or not np.all(array == np.floor(array)):
            raise ValueError(f"{name} must be integers (the mechanisms add integer noise)")
        array = array.astype(np.int64)
    elif array.dtype.kind in "iu":
        if array.dtype == np.uint64 and array.size and array.max() > np.iinfo(np.int64).max:
            raise ValueError(f"{name} must be <= bound={bound}")
        array = array.astype(np.int64, copy=True)
    else:
        raise TypeError(f"{name} must be an integer array, got dtype {array.dtype}")
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}")
    if array.size and (array.min() < 0 or array.max() > bound):
        raise ValueError(f"{name} must lie in [0, bound={bound}]")
    array.setflags(write=False)
    return array


def validate_beta(beta: Any) -> float:
    """The failure probability β of the error bound, in the open interval (0, 1)."""
    if isinstance(beta, (bool, np.bool_)) or not isinstance(beta, (int, float, np.integer, np.floating)):
        raise TypeError(f"beta must be a float in (0, 1), got {beta!r}")
    beta = float(beta)
    if not (0.0 < beta < 1.0):
        raise ValueError(f"beta must be in (0, 1), got {beta}")
    return beta


@dataclass(frozen=True)
class PersonalizedInput:
    """Validated inputs shared by the mechanisms: read-only arrays and exact Φ extremes."""

    values: np.ndarray
    phi: np.ndarray
    bound: int
    beta: float
    phi_min: Fraction
    phi_max: Fraction


def validate_input(
    values: Any, phi: Any, bound: Any, beta: Any, values_name: str = "values"
) -> PersonalizedInput:
    """Validate one call's inputs (spec personalized.md §1): shapes agree, ranges hold."""
    bound_int = validate_bound(bound)
    phi_array = validate_phi(phi)
    value_array = validate_values(values, bound_int, values_name)
    if value_array.shape != phi_array.shape:
        raise ValueError(
            f"{values_name} and phi must have the same shape (one value and one privacy level per user), "
            f"got {value_array.shape} and {phi_array.shape}"
        )
    return PersonalizedInput(
        values=value_array,
        phi=phi_array,
        bound=bound_int,
        beta=validate_beta(beta),
        phi_min=exact_value(phi_array.min()),
        phi_max=exact_value(phi_array.max()),
    )
