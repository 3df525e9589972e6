"""APPROX_BOUNDS: private clamping bounds from a noisy logarithmic histogram
(docs/privacy/approx-bounds.md).

The algorithm of Google's differential-privacy library (``ApproxBounds``) and of Desfontaines'
thesis (ETH Zürich, §4.2.5), with exact discrete Laplace noise on the bin counts:

1. Two histograms of B bins, for values ≥ 0 and < 0. With scale 2^s, bin i of a magnitude x
   covers (2^(s+i−1), 2^(s+i)], bin 0 covers [0, 2^s] (0 goes to the positive histogram), and
   magnitudes beyond the last edge go to bin B − 1.
2. Each of the 2B counts gets independent discrete Laplace noise of scale b = L0·L∞/ε: one user
   contributes at most L0·L∞ values (L0 partitions, L∞ values each), so the histogram has L1
   sensitivity L0·L∞ and the noisy histogram is ε-DP. Everything after is post-processing.
3. A bin "has data" when its noisy count is ≥ K, where K makes all 2B bins of an *empty* dataset
   stay below K with probability ≥ p (the success probability, 1 − 10⁻⁹ by default).
4. The *core*: from the lowest to the highest bin (on the real line) with data. Google's rule
   (``rule="google"``) returns its outer edges.
5. If no bin has data, p ← 1 − 10(1 − p) and step 4 runs again on the same noisy histogram,
   while p > 1 − 10⁻⁶ and fewer than 30 attempts were made; then "not enough data".
6. The tails rule (``rule="tails"``, the default) then moves each bound outward while the
   noisy counts just beyond it clearly hold more than a small fraction of the data
   (:mod:`dpselect.aggregation._bounds_rules`): a long tail spread thinly over many bins, each
   far below K, stays inside the bounds instead of being clamped.

The one deliberate difference from Google: the noisy counts are integers, so K is derived from
the discrete Laplace tail P[X ≥ K] = q^K/(1 + q), q = e^(−1/b), as the smallest integer with
(1 − q^K/(1 + q))^(2B) ≥ p, certified in rational arithmetic. Google's continuous formula
K = −b·ln(2 − 2p^(1/(2B))) is :func:`google_threshold`; at ε = 1, p = 1 − 10⁻⁹, B = 64 it gives
24.88215 (a noisy count must reach 25), the discrete rule gives 26.

Per partition, the noisy histograms are drawn sparsely (:mod:`dpselect.aggregation._bounds_sparse`):
one noise draw per non-empty cell, the same joint law of everything the scan reads.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Integral

import numpy as np
import numpy.typing as npt

from dpselect.aggregation._bounds_rules import RULES, cell_to_line, extend, first_core, sparse_cores
from dpselect.aggregation._bounds_sparse import passing_cells
from dpselect.aggregation._bounds_thresholds import (
    MAX_SCALE,
    MAX_THRESHOLD,
    discrete_threshold,
    google_threshold,
    success_probabilities,
    threshold_estimate,
)
from dpselect.aggregation.noise import DiscreteLaplaceNoise, NoiseGuarantee
from dpselect.core.checks import (
    check_epsilon,
    check_max_contributions_per_partition,
    check_max_partitions_contributed,
    check_positive_int,
    check_probability,
    short,
)
from dpselect.errors import DPSelectError, ParameterError
from dpselect.rng import resolve_rng

__all__ = [
    "ApproxBounds",
    "PartitionBounds",
    "BinScheme",
    "approx_bounds",
    "approx_bounds_from_histogram",
    "approx_bounds_per_partition",
    "bin_cells",
    "check_parameters",
    "discrete_threshold",
    "find_bounds",
    "google_threshold",
    "success_probabilities",
    "NotEnoughDataError",
    "DEFAULT_SUCCESS_PROBABILITY",
    "RULES",
]

DEFAULT_SUCCESS_PROBABILITY = 1 - Fraction(1, 10**9)
# The largest edge of the integer bins: 2^63, one above INT64_MAX, so that the top bin
# (2^62, 2^63] holds every int64 and its edge is a double exactly (INT64_MAX is not: the grid
# refused it, after the budget was charged).
_INT_TOP = 2**63
_DBL_MAX = np.finfo(np.float64).max


class NotEnoughDataError(DPSelectError, ValueError):
    """No bin passed the threshold, even after relaxing the success probability."""


# ------------------------------------------------------------------ bins

@dataclass(frozen=True)
class BinScheme:
    """B bins per sign on a base-2 log scale starting at 2^``scale_exponent``.

    Defaults follow Google's: integers start at 1 with 64 bins, floats at the smallest normal
    double 2^-1022 with 2047 bins (up to the largest double). Every edge is exactly a double."""

    integer: bool
    scale_exponent: int
    num_bins: int

    @classmethod
    def default(cls, integer: bool) -> BinScheme:
        return cls(True, 0, 64) if integer else cls(False, -1022, 2047)

    def upper_edge(self, i: int) -> int | float:
        """The larger-magnitude edge of bin i, 2^(s+i), saturated at 2^63 for integers (the top
        bin holds every int64 up to 2^63 − 1) and at the largest double for floats."""
        e = self.scale_exponent + i
        if self.integer:
            return _INT_TOP if e >= 63 else 1 << e
        return float(_DBL_MAX) if e >= 1024 else math.ldexp(1.0, e)

    def lower_edge(self, i: int) -> int | float:
        """The smaller-magnitude edge of bin i: 0 for bin 0, else the upper edge of bin i − 1."""
        return (0 if self.integer else 0.0) if i == 0 else self.upper_edge(i - 1)

    def line_edges(self, j: int) -> tuple[int | float, int | float]:
        """(left, right) edges on the real line of line cell j: j < B is the negative bin
        B − 1 − j, j ≥ B the positive bin j − B."""
        b = self.num_bins
        if j >= b:
            return self.lower_edge(j - b), self.upper_edge(j - b)
        i = b - 1 - j
        return -self.upper_edge(i), 0 - self.lower_edge(i)  # 0 − 0.0 is 0.0, never −0.0

    def index(self, magnitudes: np.ndarray) -> np.ndarray:
        """Bin of each magnitude: ⌈log2 x⌉ − s, clamped to [0, B − 1] (exact, no float log)."""
        if self.integer:
            ceil_log2 = _ceil_log2_uint(magnitudes)
        else:
            mantissa, exponent = np.frexp(magnitudes)
            ceil_log2 = np.where(mantissa == 0.5, exponent - 1, exponent).astype(np.int64)
            ceil_log2 = np.where(magnitudes == 0, np.iinfo(np.int64).min, ceil_log2)
        return np.clip(ceil_log2 - self.scale_exponent, 0, self.num_bins - 1).astype(np.intp)


def _ceil_log2_uint(x: np.ndarray) -> np.ndarray:
    """⌈log2 x⌉ for uint64 x ≥ 1 (bit length of x − 1), and a very negative number for x = 0."""
    v = x.astype(np.uint64) - np.uint64(1)  # wraps for 0, masked below
    _, guess = np.frexp(v.astype(np.float64))  # bit length, or one too many when v rounds up
    guess = guess.astype(np.int64)
    shift = np.clip(guess - 1, 0, 63).astype(np.uint64)
    too_big = (guess > 0) & ((v >> shift) == 0)
    bits = guess - too_big.astype(np.int64)
    return np.where(x == 0, np.iinfo(np.int64).min // 2, bits)


# ------------------------------------------------------------------ input checks

def _epsilon(value: object) -> Fraction:
    return check_epsilon(value, positive=True)[1]


_COUNT_CHECKS = {"max_partitions_contributed": check_max_partitions_contributed,
                 "max_contributions_per_partition": check_max_contributions_per_partition}


def _positive_int(name: str, value: object) -> int:
    # A value of another type than int is a ParameterError (a ValueError) here, a float κ or L∞
    # included, as this function has always refused them; the other entry points raise the
    # vocabulary's ParameterTypeError.
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ParameterError(f"{name} must be a positive int, got {type(value).__name__} {short(value)}")
    check = _COUNT_CHECKS.get(name)
    return check(value) if check is not None else check_positive_int(value, name=name)


def _probability(value: object) -> Fraction:
    return check_probability(value, name="success_probability", low_open=True, high_open=True,
                             what=" (the chance that bounds are found)")


def _rule(value: object) -> str:
    if value not in RULES:
        raise ValueError(f"rule must be one of {', '.join(map(repr, RULES))}, got {value!r}")
    return str(value)


def _values(values: npt.ArrayLike, integer: bool | None) -> tuple[np.ndarray, bool]:
    if isinstance(values, np.ma.MaskedArray):
        raise TypeError("values is a masked array: its mask would be ignored")
    arr = np.asarray(values)
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iuf":
        raise TypeError(f"values must be a numeric (integer or float) array, got dtype {arr.dtype}")
    arr = arr.ravel()
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr)
        if bad.any():
            raise ValueError(f"values contains NaN or infinity (first at index {int(np.flatnonzero(bad)[0])}): "
                             "drop or impute such values first")
    is_int = arr.dtype.kind in "iu" if integer is None else bool(integer)
    if is_int and arr.dtype.kind == "f":
        raise TypeError("integer=True needs an integer array; float values use the float bins")
    return arr, is_int


def _signed_magnitudes(arr: np.ndarray, scheme: BinScheme) -> tuple[np.ndarray, np.ndarray]:
    """(is negative, bin index) of every value."""
    if scheme.integer:
        if arr.dtype.kind == "u":
            negative = np.zeros(arr.shape, dtype=bool)
            magnitude = arr.astype(np.uint64)
        else:
            x = arr.astype(np.int64)
            negative = x < 0
            # |INT64_MIN| = 2^63 fits in uint64: negate in unsigned arithmetic
            magnitude = np.where(negative, (~x.view(np.uint64)) + np.uint64(1), x.view(np.uint64))
    else:
        x = arr.astype(np.float64)
        negative = x < 0
        magnitude = np.abs(x)
    return negative, scheme.index(magnitude)


def bin_cells(values: np.ndarray, scheme: BinScheme) -> np.ndarray:
    """The histogram cell of every value (checked numeric and finite): its bin i for a value ≥ 0,
    B + i for a negative one, so the 2B counts are ``np.bincount(cells, minlength=2B)``."""
    negative, bins = _signed_magnitudes(values, scheme)
    return bins + negative * scheme.num_bins


# ------------------------------------------------------------------ results

@dataclass(frozen=True)
class ApproxBounds:
    """Bounds found over the whole dataset, with everything they were computed from.

    ``noisy_positive[i]`` and ``noisy_negative[i]`` are the noisy bin counts (the ε-DP release;
    the bounds are post-processing of them, and so is the fraction of values they suggest lie
    outside the bounds). ``core`` holds the bounds of Google's rule on the same counts (equal to
    ``(lower, upper)`` with ``rule="google"``)."""

    lower: int | float
    upper: int | float
    threshold: int
    success_probability: Fraction | None  # None when the threshold was set directly
    attempts: int
    noisy_positive: np.ndarray
    noisy_negative: np.ndarray
    scheme: BinScheme
    noise: DiscreteLaplaceNoise
    guarantee: NoiseGuarantee
    rule: str = "tails"
    core: tuple[int | float, int | float] | None = None


@dataclass(frozen=True)
class PartitionBounds:
    """Bounds for partitions 0 … n − 1 from their own noisy histograms (Google's rule).
    ``found[j]`` is False where no bin passed the threshold (then ``lower[j]`` and ``upper[j]``
    are NaN). ``lower`` and ``upper`` are float64 for both kinds of values: every edge is 0 or
    ±2^k, exact in a double (the top integer edge 2^63 does not fit int64). ``attempts[j]`` is
    how many thresholds were tried. The noisy histograms are drawn sparsely and not kept."""

    lower: np.ndarray
    upper: np.ndarray
    found: np.ndarray
    attempts: np.ndarray
    thresholds: tuple[int, ...]
    scheme: BinScheme
    noise: DiscreteLaplaceNoise
    guarantee: NoiseGuarantee


def _guarantee(noise: DiscreteLaplaceNoise, l0: int, linf: int, private: bool, what: str) -> NoiseGuarantee:
    g = NoiseGuarantee(
        mechanism=f"APPROX_BOUNDS ({what}; noisy log histogram, discrete Laplace of scale {noise.scale})",
        epsilon_exact=noise.epsilon,
        delta_exact=Fraction(0),
        sensitivity=linf,
        max_partitions_contributed=l0,
        reference="docs/privacy/approx-bounds.md",
        notes=(f"Each user adds at most {l0 * linf} values, so the histogram moves by at most "
               f"{l0 * linf} in L1; the bounds are post-processing of the noisy counts."),
    )
    return g if private else g.under_test_rng()


def _line(noisy_positive: npt.ArrayLike, noisy_negative: npt.ArrayLike) -> np.ndarray:
    """The 2B noisy counts in real-line order (negative bins from the largest magnitude)."""
    return np.concatenate([np.asarray(noisy_negative, dtype=np.int64).ravel()[::-1],
                           np.asarray(noisy_positive, dtype=np.int64).ravel()])


def find_bounds(noisy_positive: npt.ArrayLike, noisy_negative: npt.ArrayLike, thresholds: list[int],
                scheme: BinScheme, *, rule: str = "google", scale: Fraction | None = None
                ) -> tuple[int | float, int | float, int] | None:
    """Steps 4–6 on one noisy histogram: (lower, upper, attempt) with the first threshold (in
    the retry order) at which some bin has data, or None ("not enough data"). Pure
    post-processing: no randomness. ``rule="tails"`` needs the noise ``scale``."""
    line = _line(noisy_positive, noisy_negative)
    if line.size != 2 * scheme.num_bins:
        raise ValueError(f"noisy_positive and noisy_negative must have {scheme.num_bins} counts each")
    found = first_core(line, list(thresholds))
    if found is None:
        return None
    low, high, attempt = found
    if _rule(rule) == "tails":
        if scale is None:
            raise ValueError("rule='tails' needs the noise scale (scale=)")
        low, high = extend(line, low, high, Fraction(scale))
    return scheme.line_edges(low)[0], scheme.line_edges(high)[1], attempt


def _setup(epsilon: object, max_partitions_contributed: object, max_contributions_per_partition: object,
           success_probability: object, threshold: object, scheme: BinScheme
           ) -> tuple[DiscreteLaplaceNoise, list[int], Sequence[Fraction | None], int, int]:
    """The noise and the thresholds, every parameter checked before any work or draw."""
    eps = _epsilon(epsilon)
    l0 = _positive_int("max_partitions_contributed", max_partitions_contributed)
    linf = _positive_int("max_contributions_per_partition", max_contributions_per_partition)
    too_large = ValueError(
        f"max_partitions_contributed × max_contributions_per_partition / epsilon = {l0} × {linf} / {float(eps):.6g} "
        f"is above 2**54: the noisy counts would not fit in int64 and no bin could ever pass the threshold. "
        "Lower max_partitions_contributed or max_contributions_per_partition, spend more epsilon, or give "
        "explicit bounds")
    if Fraction(l0 * linf) / eps > MAX_SCALE:
        raise too_large
    noise = DiscreteLaplaceNoise.for_epsilon(eps, sensitivity=linf, max_partitions_contributed=l0)
    if noise.scale > MAX_SCALE:  # rounded up to a rational the kernel takes
        raise too_large
    if threshold is not None:
        if isinstance(threshold, bool) or not isinstance(threshold, Integral) or not 0 <= int(threshold) <= MAX_THRESHOLD:
            raise ValueError(f"threshold must be an int between 0 and 2**61, got {threshold!r}")
        return noise, [int(threshold)], [None], l0, linf  # a user-set K: no retry
    ps = success_probabilities(_probability(success_probability))
    if threshold_estimate(noise.scale, ps[0], scheme.num_bins) > MAX_THRESHOLD / 2:
        raise ValueError(
            f"success_probability = {float(ps[0])!r} (1 - {float(1 - ps[0]):.3g}) needs a threshold above 2**60 at the "
            f"noise scale {float(noise.scale):.6g} (max_partitions_contributed × max_contributions_per_partition / "
            "epsilon): the noisy counts would not fit in int64. Use a success_probability further from 1")
    return noise, [discrete_threshold(noise.scale, p, scheme.num_bins) for p in ps], ps, l0, linf


def _scheme(integer: bool, num_bins: object, scale_exponent: object) -> BinScheme:
    base = BinScheme.default(integer)
    bins = base.num_bins if num_bins is None else _positive_int("num_bins", num_bins)
    if scale_exponent is None:
        exponent = base.scale_exponent
    elif isinstance(scale_exponent, bool) or not isinstance(scale_exponent, Integral):
        raise TypeError("scale_exponent must be an int (the smallest bin edge is 2**scale_exponent)")
    else:
        exponent = int(scale_exponent)
        if integer and exponent < 0:
            raise ValueError("integer bins need scale_exponent >= 0")
        if not integer and not -1074 <= exponent <= 1023:
            raise ValueError("scale_exponent must be between -1074 and 1023 for floats")
    return BinScheme(integer, exponent, bins)


# ------------------------------------------------------------------ entry points

def check_parameters(epsilon: object, *, integer: bool, max_partitions_contributed: int = 1,
                     max_contributions_per_partition: int = 1,
                     success_probability: object = DEFAULT_SUCCESS_PROBABILITY, threshold: int | None = None,
                     num_bins: int | None = None, scale_exponent: int | None = None, rule: str = "tails") -> None:
    """Raise the ValueError or TypeError that :func:`approx_bounds`,
    :func:`approx_bounds_from_histogram` or :func:`approx_bounds_per_partition` would raise for
    these parameters, from the parameters alone: no data, no randomness. Callers that charge a
    budget call it first, so that a release never fails after the charge (a noise scale
    L0·L∞/ε above 2^54, or a success probability so close to 1 that its threshold leaves int64,
    is refused here)."""
    scheme = _scheme(bool(integer), num_bins, scale_exponent)
    _rule(rule)
    _setup(epsilon, max_partitions_contributed, max_contributions_per_partition, success_probability, threshold,
           scheme)


def approx_bounds(values: npt.ArrayLike, epsilon: object, *, max_partitions_contributed: int = 1,
                  max_contributions_per_partition: int = 1,
                  success_probability: object = DEFAULT_SUCCESS_PROBABILITY, threshold: int | None = None,
                  integer: bool | None = None, num_bins: int | None = None, scale_exponent: int | None = None,
                  rule: str = "tails", rng: object | None = None) -> ApproxBounds:
    """APPROX_BOUNDS over the whole dataset: ``values`` are every contribution after
    contribution bounding (each user at most L0 partitions, L∞ values in each). ε-DP.

    Integer arrays use the integer bins (64 from 1), float arrays the float bins (2047 from
    2^-1022), unless ``integer`` says otherwise. ``threshold`` sets K directly (no retry).
    ``rule`` turns the noisy histogram into bounds: ``"tails"`` (default) keeps thin long tails
    inside the bounds, ``"google"`` is Google's outermost-bins rule (docs/privacy/approx-bounds.md).
    Raises :class:`NotEnoughDataError` ("not enough data…") when no bin passes."""
    arr, is_int = _values(values, integer)
    check_parameters(epsilon, integer=is_int, max_partitions_contributed=max_partitions_contributed,
                     max_contributions_per_partition=max_contributions_per_partition,
                     success_probability=success_probability, threshold=threshold, num_bins=num_bins,
                     scale_exponent=scale_exponent, rule=rule)
    scheme = _scheme(is_int, num_bins, scale_exponent)
    counts = np.bincount(bin_cells(arr, scheme), minlength=2 * scheme.num_bins).astype(np.int64)
    return approx_bounds_from_histogram(counts, epsilon, integer=is_int,
                                        max_partitions_contributed=max_partitions_contributed,
                                        max_contributions_per_partition=max_contributions_per_partition,
                                        success_probability=success_probability, threshold=threshold,
                                        num_bins=num_bins, scale_exponent=scale_exponent, rule=rule, rng=rng)


def approx_bounds_from_histogram(counts: npt.ArrayLike, epsilon: object, *, integer: bool,
                                 max_partitions_contributed: int = 1, max_contributions_per_partition: int = 1,
                                 success_probability: object = DEFAULT_SUCCESS_PROBABILITY,
                                 threshold: int | None = None, num_bins: int | None = None,
                                 scale_exponent: int | None = None, rule: str = "tails",
                                 rng: object | None = None) -> ApproxBounds:
    """:func:`approx_bounds` from a histogram counted elsewhere (dpselect.spark counts it in
    Spark): ``counts`` are the 2B cells of :func:`bin_cells` over every contribution after
    contribution bounding (L0 partitions, L∞ values in each), on the scheme of ``integer``,
    ``num_bins`` and ``scale_exponent``. Steps 2–6: noise, thresholds, bounds. ε-DP."""
    scheme = _scheme(bool(integer), num_bins, scale_exponent)
    rule = _rule(rule)
    noise, thresholds, ps, l0, linf = _setup(epsilon, max_partitions_contributed, max_contributions_per_partition,
                                             success_probability, threshold, scheme)
    counts = np.asarray(counts)
    if counts.shape != (2 * scheme.num_bins,) or counts.dtype.kind not in "iu" or (counts < 0).any():
        raise ValueError(f"counts must be {2 * scheme.num_bins} non-negative integers (2 × num_bins cells), got "
                         f"shape {counts.shape} and dtype {counts.dtype}")
    counts = counts.astype(np.int64)
    generator = resolve_rng(rng)
    noisy = noise.add(counts, rng=generator)
    noisy_pos, noisy_neg = noisy[:scheme.num_bins], noisy[scheme.num_bins:]
    guarantee = _guarantee(noise, l0, linf, generator.privacy_guaranteed, "whole dataset")
    line = _line(noisy_pos, noisy_neg)
    found = first_core(line, thresholds)
    if found is None:
        raise NotEnoughDataError(
            f"not enough data to find bounds: no noisy bin count reached the threshold (last tried {thresholds[-1]}, "
            f"after {len(thresholds)} attempt(s)). Run over a larger dataset, spend more epsilon, lower "
            "success_probability, or give explicit bounds")
    low, high, attempt = found
    core = (scheme.line_edges(low)[0], scheme.line_edges(high)[1])
    if rule == "tails":
        low, high = extend(line, low, high, noise.scale)
    return ApproxBounds(scheme.line_edges(low)[0], scheme.line_edges(high)[1], thresholds[attempt - 1],
                        ps[attempt - 1], attempt, noisy_pos, noisy_neg, scheme, noise, guarantee, rule, core)


def approx_bounds_per_partition(values: npt.ArrayLike, codes: npt.ArrayLike, n_partitions: int, epsilon: object, *,
                                max_partitions_contributed: int = 1, max_contributions_per_partition: int = 1,
                                success_probability: object = DEFAULT_SUCCESS_PROBABILITY,
                                threshold: int | None = None, integer: bool | None = None,
                                num_bins: int | None = None, scale_exponent: int | None = None,
                                rng: object | None = None) -> PartitionBounds:
    """APPROX_BOUNDS for each partition 0 … n − 1 (``codes[i]`` is the partition of
    ``values[i]``), each from its own noisy histogram, with Google's rule. ε-DP for all
    partitions together: one user's values change the histograms by at most L0·L∞ in L1 in
    total.

    The n·2B noisy counts are drawn sparsely: one noise draw per non-empty cell, and for the
    empty cells an exact sample of which ones reach the threshold (the same joint law of
    everything the scan reads; docs/privacy/approx-bounds.md). Time and memory grow with the
    number of values, not with n·2B.

    Run it only on a partition set that is public or already released by a DP selection: the
    list of partitions is not protected here. Partitions where no bin passes get ``found`` False
    (no error)."""
    arr, is_int = _values(values, integer)
    c = np.asarray(codes)
    if c.dtype == np.bool_ or c.dtype.kind not in "iu":
        raise TypeError(f"codes must be integers, got dtype {c.dtype}")
    c = c.ravel()
    if c.size != arr.size:
        raise ValueError(f"codes has {c.size} entries, values has {arr.size}")
    if isinstance(n_partitions, bool) or not isinstance(n_partitions, Integral) or int(n_partitions) < 0:
        raise ValueError(f"n_partitions must be a non-negative int, got {n_partitions!r}")
    n = int(n_partitions)
    if c.size and (c.min() < 0 or c.max() >= n):
        raise ValueError(f"codes must lie in [0, {n})")
    scheme = _scheme(is_int, num_bins, scale_exponent)
    noise, thresholds, ps, l0, linf = _setup(epsilon, max_partitions_contributed, max_contributions_per_partition,
                                             success_probability, threshold, scheme)
    width = 2 * scheme.num_bins
    if n * width >= 2**62:
        raise ValueError(f"n_partitions × 2 × num_bins = {n} × {width} cells is too many to index")
    negative, bins = _signed_magnitudes(arr, scheme)
    flat = c.astype(np.int64) * width + bins + negative * scheme.num_bins
    if n * width <= 4 * flat.size + 2**20:  # dense data: counting beats sorting
        counts = np.bincount(flat, minlength=n * width)
        occupied = np.flatnonzero(counts)
        counts = counts[occupied]
    else:
        occupied, counts = np.unique(flat, return_counts=True)
    generator = resolve_rng(rng)
    cells, noisy = passing_cells(occupied, counts.astype(np.int64), n * width, noise, min(thresholds), generator)
    found, attempts, low, high = sparse_cores(cells // width, cell_to_line(cells % width, scheme.num_bins), noisy,
                                              n, thresholds)
    left = np.array([scheme.line_edges(j)[0] for j in range(width)], dtype=np.float64)
    right = np.array([scheme.line_edges(j)[1] for j in range(width)], dtype=np.float64)
    lower = np.where(found, left[low], np.nan)
    upper = np.where(found, right[high], np.nan)
    guarantee = _guarantee(noise, l0, linf, generator.privacy_guaranteed, "per partition")
    return PartitionBounds(lower, upper, found, attempts, tuple(thresholds), scheme, noise, guarantee)
