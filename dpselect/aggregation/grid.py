"""Values on a power-of-two grid: exact integer sums, integer noise, exact release
(docs/privacy/discrete-noise.md, "Floats").

Adding floating-point noise to a float sum leaks through the low-order bits of the result
(Mironov, CCS 2012). So dpselect never adds noise to a float:

1. each value is clamped to [lower, upper] and snapped to the nearest multiple of a power of
   two g = 2^e (an exact float operation);
2. the snapped values are integers u = v/g ("grid units"), summed exactly as integers;
3. integer noise (:mod:`dpselect.aggregation.noise`) is added in grid units;
4. the release is (sum + noise)·g: a multiple of g, exactly representable whenever the integer
   fits in 53 bits, and otherwise the float nearest to it. That last rounding is applied to an
   already-noisy integer, so it is post-processing and leaks nothing.

g is chosen from the bounds: e = ⌈log2 max(|lower|, |upper|)⌉ − ``precision_bits`` (30 by
default), so snapping moves a value by at most 2^-31 of the largest magnitude allowed, and every
value is at most 2^30 units. The sensitivity of a sum in units is then at most
L∞·max(|lower units|, |upper units|), an integer.

Sums per partition are exact in 128 bits (:class:`dpselect.aggregation.wide.Wide`); a release
clamps each to ±2^62 units before noise. So that no released value or interval can overflow to
infinity, e is at most :data:`MAX_EXPONENT` (released values stay below 2^(63+e) ≤ 2^1022).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import overload

import numpy as np
import numpy.typing as npt

from dpselect.aggregation.wide import Wide, sums_by_code

__all__ = ["Grid", "DEFAULT_PRECISION_BITS", "MAX_EXPONENT"]

# A relative precision of 2^-30 (about 1e-9) per value: room for 2^32 rows of 2^30 units in a
# 62-bit sum, and far finer than any noise a release adds.
DEFAULT_PRECISION_BITS = 30
# The largest grid exponent: a noisy sum is an int64 of grid units, below 2^63, so its float
# value (units·2^e) stays below 2^1022, and an interval's ends stay finite.
MAX_EXPONENT = 1023 - 64
_INT64_MAX = 2**63 - 1
# Smallest exponent of a normal double: a finer grid would make values/g overflow or lose bits.
_MIN_EXPONENT = -1022


def _finite_bound(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    try:
        as_float = float(value)
    except OverflowError:
        as_float = math.inf
    if not math.isfinite(as_float):
        raise ValueError(f"{name} must be a finite number within the float range, got {_short(value)}")
    if isinstance(value, (int, np.integer)) and as_float != int(value):
        raise ValueError(f"{name} = {value} is not exactly representable as a float; use a rounder bound")
    return as_float


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def _ceil_log2(x: float) -> int:
    """⌈log2 x⌉ for x > 0, exactly (frexp, not log)."""
    mantissa, exponent = math.frexp(x)  # x = mantissa · 2^exponent, 0.5 ≤ mantissa < 1
    return exponent - 1 if mantissa == 0.5 else exponent


@dataclass(frozen=True)
class Grid:
    """Clamping bounds and the power-of-two step 2^``exponent`` values are snapped to.

    ``lower_units`` and ``upper_units`` are the bounds in grid units, rounded inward (so a
    snapped, clamped value never leaves [lower, upper])."""

    lower: float
    upper: float
    exponent: int

    def __post_init__(self) -> None:
        lower = _finite_bound("lower", self.lower)
        upper = _finite_bound("upper", self.upper)
        if lower > upper:
            raise ValueError(f"lower = {self.lower!r} is above upper = {self.upper!r}: bounds are inverted")
        if isinstance(self.exponent, bool) or not isinstance(self.exponent, (int, np.integer)):
            raise TypeError(f"exponent must be an int, got {type(self.exponent).__name__}")
        if not _MIN_EXPONENT <= int(self.exponent) <= MAX_EXPONENT:
            raise ValueError(f"exponent must be between {_MIN_EXPONENT} and {MAX_EXPONENT}, got {self.exponent}")
        object.__setattr__(self, "lower", lower)
        object.__setattr__(self, "upper", upper)
        object.__setattr__(self, "exponent", int(self.exponent))
        if self.lower_units > self.upper_units:
            raise ValueError(f"no multiple of the grid step 2**{self.exponent} lies in [{lower!r}, {upper!r}]: "
                             "widen the bounds so that they hold a multiple of the step")
        if max(abs(self.lower_units), abs(self.upper_units)) > _INT64_MAX:
            raise ValueError(f"the bounds are more than 2**63 grid steps of 2**{self.exponent}: use a coarser grid")

    @classmethod
    def for_bounds(cls, lower: float, upper: float, *, precision_bits: int = DEFAULT_PRECISION_BITS,
                   integer: bool = False) -> Grid:
        """The grid of step 2^(⌈log2 max(|lower|, |upper|)⌉ − precision_bits).

        With ``integer=True`` (integer columns) the step is at least 1, so integers within
        2^precision_bits of zero are represented exactly."""
        lo = _finite_bound("lower", lower)
        hi = _finite_bound("upper", upper)
        if lo > hi:
            raise ValueError(f"lower = {lower!r} is above upper = {upper!r}: bounds are inverted")
        if isinstance(precision_bits, bool) or not isinstance(precision_bits, int) or not 1 <= precision_bits <= 62:
            raise ValueError(f"precision_bits must be an int between 1 and 62, got {precision_bits!r}")
        magnitude = max(abs(lo), abs(hi))
        exponent = _ceil_log2(magnitude) - precision_bits if magnitude > 0 else 0
        if integer:
            exponent = max(exponent, 0)
        if exponent > MAX_EXPONENT:
            limit = MAX_EXPONENT + precision_bits
            raise ValueError(f"bounds ({_short(lower)}, {_short(upper)}) are too large to release a sum or mean: "
                             f"at precision_bits={precision_bits} every |bound| must be at most 2**{limit} "
                             f"(about {math.ldexp(1.0, limit):.3g}), so that noisy sums stay finite floats")
        return cls(lo, hi, max(exponent, _MIN_EXPONENT))

    @classmethod
    def for_found_bounds(cls, lower: float, upper: float, *, precision_bits: int = DEFAULT_PRECISION_BITS,
                         integer: bool = False) -> Grid:
        """:meth:`for_bounds` of bounds found privately, each first clipped to the largest
        magnitude a grid takes (2^(MAX_EXPONENT + precision_bits)): clamping to narrower bounds is
        post-processing of the noisy ones, so a release never fails on bounds the data suggested."""
        limit = math.ldexp(1.0, MAX_EXPONENT + precision_bits) if MAX_EXPONENT + precision_bits < 1024 else math.inf
        lo = min(max(float(lower), -limit), limit)
        hi = min(max(float(upper), -limit), limit)
        if integer:  # whole numbers that a float holds exactly (2^63 and beyond are powers of two)
            lo, hi = float(math.ceil(lo)), float(math.floor(hi))
        return cls.for_bounds(lo, hi, precision_bits=precision_bits, integer=integer)

    @property
    def step(self) -> float:
        """g = 2^exponent."""
        return math.ldexp(1.0, self.exponent)

    @property
    def lower_units(self) -> int:
        """⌈lower / g⌉: the smallest value a unit array can hold."""
        return math.ceil(math.ldexp(self.lower, -self.exponent))

    @property
    def upper_units(self) -> int:
        """⌊upper / g⌋: the largest value a unit array can hold."""
        return math.floor(math.ldexp(self.upper, -self.exponent))

    def max_abs_units(self) -> int:
        """The largest |value| in units: the sensitivity of a sum to one value."""
        return max(abs(self.lower_units), abs(self.upper_units))

    def sum_sensitivity(self, max_contributions_per_partition: int = 1) -> int:
        """L∞·max|units|: how much one user can change one partition's sum, in units."""
        if isinstance(max_contributions_per_partition, bool) or not isinstance(max_contributions_per_partition, int) \
                or max_contributions_per_partition < 1:
            raise ValueError("max_contributions_per_partition must be a positive int")
        return max_contributions_per_partition * self.max_abs_units()

    def to_units(self, values: npt.ArrayLike, name: str = "values") -> np.ndarray:
        """Clamp ``values`` to [lower, upper] and snap them to the grid: int64 grid units.

        Floats are divided by g (exact: g is a power of two) and rounded to the nearest
        integer, ties to even; integers are shifted, ties toward +inf. NaN and infinities are
        refused (a ValueError naming ``name`` and the first position), as are non-numeric
        arrays (TypeError)."""
        if isinstance(values, np.ma.MaskedArray):
            raise TypeError(f"{name} is a masked array: its mask would be ignored")
        arr = np.asarray(values)
        if arr.dtype == np.bool_ or arr.dtype.kind not in "iuf":
            raise TypeError(f"{name} must be a numeric (integer or float) array, got dtype {arr.dtype}")
        lo, hi = self.lower_units, self.upper_units
        if arr.dtype.kind == "f":
            x: np.ndarray = arr.astype(np.float64)  # below, x is the integers' int64 copy
            bad = ~np.isfinite(x)
            if bad.any():
                where = int(np.flatnonzero(bad.ravel())[0])
                raise ValueError(f"{name} contains NaN or infinity (first at flat index {where}): drop or "
                                 "impute such values before aggregating")
            units = np.rint(np.ldexp(x, -self.exponent))  # exact scaling, then nearest integer
            return np.clip(units, lo, hi).astype(np.int64)
        if arr.dtype.kind == "u":
            x = np.minimum(arr, np.uint64(_INT64_MAX)).astype(np.int64)
        else:
            x = arr.astype(np.int64)
        if self.exponent <= 0:
            # Integers are exact multiples of g ≤ 1: clamp in value space, then scale exactly
            # (the result is within the bounds in units, which fit in int64).
            clamped = np.clip(x, math.ceil(self.lower), math.floor(self.upper))
            return np.clip(np.left_shift(clamped, -self.exponent), lo, hi).astype(np.int64)
        if self.exponent < 63:
            # floor(x / g) + [remainder ≥ g/2]: round to nearest, ties up, in int64 without overflow
            remainder = x & ((1 << self.exponent) - 1)
            units = (x >> self.exponent) + (remainder >= (1 << (self.exponent - 1))).astype(np.int64)
        else:  # a step of 2^63 or more for int64 data: exact in Python integers
            half = 1 << (self.exponent - 1)
            units = np.array([(int(v) + half) >> self.exponent for v in x.ravel()], dtype=np.int64).reshape(x.shape)
        return np.clip(units, lo, hi).astype(np.int64)

    @overload
    def sum_units(self, units: npt.ArrayLike, codes: None = None, n_partitions: int | None = None) -> int: ...

    @overload
    def sum_units(self, units: npt.ArrayLike, codes: npt.ArrayLike, n_partitions: int | None = None) -> Wide: ...

    def sum_units(self, units: npt.ArrayLike, codes: npt.ArrayLike | None = None,
                  n_partitions: int | None = None) -> int | Wide:
        """Exact integer sums of grid units: one Python int over everything, or, with partition
        ``codes`` (integers in [0, n_partitions)), one exact 128-bit sum per partition
        (:class:`~dpselect.aggregation.wide.Wide`; ``.clamped()`` gives the int64 a release adds
        noise to)."""
        u = np.asarray(units)
        if u.dtype.kind not in "iu" or u.dtype == np.bool_:
            raise TypeError(f"units must be integers, got dtype {u.dtype}")
        u = u.astype(np.int64).ravel()
        if codes is None:
            return _exact_total(u)
        c = np.asarray(codes)
        if c.dtype.kind not in "iu" or c.dtype == np.bool_:
            raise TypeError(f"codes must be integers, got dtype {c.dtype}")
        c = c.ravel()
        if c.shape != u.shape:
            raise ValueError(f"codes has {c.size} entries, units has {u.size}")
        if isinstance(n_partitions, bool) or not isinstance(n_partitions, int) or n_partitions < 0:
            raise ValueError("n_partitions must be a non-negative int when codes are given")
        if c.size and (c.min() < 0 or c.max() >= n_partitions):
            raise ValueError(f"codes must lie in [0, {n_partitions})")
        return sums_by_code(u, c.astype(np.intp), n_partitions)

    def release(self, noisy_units: npt.ArrayLike) -> np.ndarray:
        """(noisy units)·g as float64: exact when |noisy units| < 2^53, else the nearest float
        (post-processing of an already-noisy integer: no privacy impact)."""
        arr = np.asarray(noisy_units)
        if arr.dtype == object:
            return np.array([math.ldexp(float(int(v)), self.exponent) for v in arr.ravel()],
                            dtype=np.float64).reshape(arr.shape)
        if arr.dtype.kind not in "iu" or arr.dtype == np.bool_:
            raise TypeError(f"noisy_units must be integers, got dtype {arr.dtype}")
        return np.ldexp(arr.astype(np.float64), self.exponent)


def _exact_total(u: np.ndarray) -> int:
    """Σ u as a Python int: 32-bit halves summed in int64 cannot overflow below 2^31 values."""
    total = 0
    for start in range(0, u.size, 1 << 30):
        chunk = u[start:start + (1 << 30)]
        low = (chunk & 0xFFFFFFFF).sum(dtype=np.int64)
        high = (chunk >> 32).sum(dtype=np.int64)
        total += int(high) * 2**32 + int(low)
    return total
