"""Validation of personalized-DP inputs and the exact reading of float privacy levels.

Model: docs/privacy/personalized.md, "Model". Every privacy decision in this package is taken on the
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
import operator
import sys
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpselect.core.checks import check_probability
from dpselect.core.exact import as_fraction

#: Smallest positive normal float64: lower bound of an admissible privacy level.
_SMALLEST_NORMAL = sys.float_info.min

#: The level the largest finite float stands for (its shortest decimal, as ``exact_value``).
_LARGEST_EXACT = as_fraction(sys.float_info.max)

__all__ = [
    "PersonalizedInput",
    "doubling_steps",
    "exact_floor_scaled",
    "exact_value",
    "smallest_float_above",
    "validate_beta",
    "validate_bound",
    "validate_input",
    "validate_integers",
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
    ``{u : exact_value(phi[u]) > k}`` (by monotonicity of :func:`exact_value`). Returns ``inf``
    when ``k`` is at or above the largest finite float (then that set is empty). ``k`` must be at
    least the smallest normal float (levels below it are refused by :func:`validate_phi`).
    """
    if k >= _LARGEST_EXACT:
        return math.inf  # no finite float stands for a level above k
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


def _scaled_product(phi: np.ndarray, scale: Fraction) -> np.ndarray:
    """phi · scale in float64, for any positive rational scale (even far beyond the float range).

    phi = m·2^e (``np.frexp``, exact) and scale = M·2^E with M a correctly rounded float in
    [1/2, 1); the product is ``ldexp(m·M, e + E)``: one rounding, a relative error of ~2 ulp, and
    overflow to inf or underflow towards 0 only where the exact product is itself out of range
    (``float(scale)`` would raise OverflowError for scale ≥ 2**1024).
    """
    exponent = scale.numerator.bit_length() - scale.denominator.bit_length()
    if exponent >= 0:
        mantissa = float(Fraction(scale.numerator, scale.denominator << exponent))
    else:
        mantissa = float(Fraction(scale.numerator << -exponent, scale.denominator))
    fraction, power = np.frexp(phi)
    with np.errstate(over="ignore", under="ignore"):
        return np.ldexp(fraction * mantissa, power + exponent)


def exact_floor_scaled(phi: np.ndarray, scale: Fraction, cap: int) -> np.ndarray:
    """``min(cap, ⌊scale · exact_value(phi[u])⌋)`` for every u, exactly, as int64.

    Float products that land within a relative 1e-9 of an integer are recomputed in
    ``Fraction`` once per distinct Φ value; all others are provably floored right by the float
    product (its relative error is a few ulp, far below the margin, for the normal floats that
    :func:`validate_phi` admits). Products are first clipped at cap + 1/2: a float product that
    large means the exact floor is ≥ cap. Any positive rational scale works (no float overflow).
    """
    if cap < 0:
        raise ValueError("cap must be >= 0")
    product = _scaled_product(np.asarray(phi, dtype=np.float64), Fraction(scale))
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
    """A read-only float64 copy of the per-user privacy levels; each must be finite and at least
    the smallest normal float 2.2250738585072014e-308.

    Subnormal floats are refused: their shortest decimal (which is the level the accounting
    charges) can differ from their binary value by a few percent, so float truncation levels
    ⌊s·Φ(u)⌋ could exceed what is charged. A level that small buys no accuracy anyway.
    """
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
    if not np.all(array >= _SMALLEST_NORMAL):
        raise ValueError(
            f"{name} must be >= {_SMALLEST_NORMAL!r} (the smallest normal float) for every user, got "
            f"{float(array.min())!r}: subnormal levels cannot be accounted exactly; raise them to that value"
        )
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


def validate_integers(values: Any, low: int, high: int, name: str = "values", limits: str = "") -> np.ndarray:
    """A read-only 1-D int64 copy of integer data that must lie in [low, high] (|low|, |high| ≤ 2**53).

    The range is checked on the caller's values *before* any cast to int64, so nothing can wrap
    into range: uint64 values ≥ 2**63, Python ints of any size (object arrays), floats ≥ 2**63
    and their negatives are all refused with a ValueError naming ``name``. Booleans count as 0/1;
    floats must be integer-valued. ``limits`` names the range in the error (default "[low, high]").
    """
    limits = limits or f"[{low}, {high}]"
    array = np.asarray(values)
    kind = array.dtype.kind
    if kind not in "biufO":
        raise TypeError(f"{name} must be an integer array, got dtype {array.dtype}")
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {array.shape}")
    if kind == "b":
        array = array.astype(np.int64)
    elif kind == "O":
        items = array.tolist()
        try:
            integers = [operator.index(item) for item in items]
        except TypeError:
            bad = next(item for item in items if not _is_integer_object(item))
            raise TypeError(f"{name} must hold integers, got {type(bad).__name__} {bad!r}") from None
        for position, item in enumerate(integers):
            if not low <= item <= high:
                raise ValueError(
                    f"{name} must lie in {limits}, got {item} at index {position}; "
                    "clip the data to the public bound first"
                )
        array = np.array(integers, dtype=np.int64)
    elif kind == "f":
        if not np.all(np.isfinite(array)) or not np.all(array == np.floor(array)):
            raise ValueError(f"{name} must be integers (the mechanisms add integer noise), got non-integer floats")
    if array.size and kind in "iuf":
        # Compared as Python numbers: ints exactly, floats exactly too (|low|, |high| ≤ 2**53).
        smallest, largest = array.min().item(), array.max().item()
        for extreme in (smallest, largest):
            if not low <= extreme <= high:
                raise ValueError(
                    f"{name} must lie in {limits}, got {extreme!r}; clip the data to the public bound first"
                )
    result = array.astype(np.int64, copy=True)
    result.setflags(write=False)
    return result


def _is_integer_object(item: Any) -> bool:  # anything: probed with operator.index
    try:
        operator.index(item)
    except TypeError:
        return False
    return True


def validate_values(values: Any, bound: int, name: str = "values") -> np.ndarray:
    """A read-only int64 copy of the integer values; each must lie in {0, ..., bound}."""
    return validate_integers(values, 0, bound, name, f"[0, bound={bound}]")


def validate_beta(beta: Any) -> float:
    """The failure probability β of the error bound, in the open interval (0, 1)."""
    return float(check_probability(beta, name="beta", low_open=True, high_open=True, what=" (a failure probability)",
                                   advice="; the usual choice is 0.1"))


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
    """Validate one call's inputs (docs/privacy/personalized.md, "Model"): shapes agree, ranges hold."""
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
