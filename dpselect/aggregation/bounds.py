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
4. Upper bound: the upper edge of the highest positive bin with data; if none, the negative
   side's smaller-magnitude edge of the lowest negative bin with data. Lower bound: mirrored.
5. If either bound is missing, p ← 1 − 10(1 − p) and step 4 runs again on the same noisy
   histogram, while p > 1 − 10⁻⁶ and fewer than 30 attempts were made; then "not enough data".

The one deliberate difference from Google: the noisy counts are integers, so K is derived from
the discrete Laplace tail P[X ≥ K] = q^K/(1 + q), q = e^(−1/b), as the smallest integer with
(1 − q^K/(1 + q))^(2B) ≥ p, certified in rational arithmetic. Google's continuous formula
K = −b·ln(2 − 2p^(1/(2B))) is :func:`google_threshold`; at ε = 1, p = 1 − 10⁻⁹, B = 64 it gives
24.88215 (a noisy count must reach 25), the discrete rule gives 26.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from numbers import Integral, Real

import numpy as np
import numpy.typing as npt

from dpselect.aggregation.noise import DiscreteLaplaceNoise, NoiseGuarantee
from dpselect.aggregation._expbounds import exp_neg_bounds
from dpselect.exact import as_fraction
from dpselect.params import power_lower
from dpselect.rng import resolve_rng

__all__ = [
    "ApproxBounds",
    "PartitionBounds",
    "BinScheme",
    "approx_bounds",
    "approx_bounds_from_histogram",
    "approx_bounds_per_partition",
    "bin_cells",
    "discrete_threshold",
    "find_bounds",
    "google_threshold",
    "success_probabilities",
    "NotEnoughDataError",
    "DEFAULT_SUCCESS_PROBABILITY",
]

DEFAULT_SUCCESS_PROBABILITY = 1 - Fraction(1, 10**9)
# Google's retry rule: relax p tenfold while it stays above this, at most _MAX_ATTEMPTS times.
MIN_SUCCESS_PROBABILITY = 1 - Fraction(1, 10**6)
_MAX_ATTEMPTS = 30
_INT64_MAX = 2**63 - 1
_DBL_MAX = np.finfo(np.float64).max


class NotEnoughDataError(ValueError):
    """No bin passed the threshold, even after relaxing the success probability."""


# ------------------------------------------------------------------ thresholds

def google_threshold(epsilon: float, success_probability: float = 1 - 1e-9, num_bins: int = 64,
                     max_partitions_contributed: int = 1, max_contributions_per_partition: int = 1) -> float:
    """Google's current K for *continuous* Laplace noise of scale b = L0·L∞/ε: the quantile at
    p^(1/(2B)), K = −b·ln(2 − 2p^(1/(2B))). For reference and comparison only: dpselect's
    noise is discrete (see :func:`discrete_threshold`)."""
    b = max_partitions_contributed * max_contributions_per_partition / float(epsilon)
    root = math.exp(math.log(float(success_probability)) / (2 * num_bins))
    return -b * math.log(2 - 2 * root)


def _tail_upper(scale: Fraction, k: int, bits: int) -> Fraction:
    """≥ P[X ≥ k] = q^k/(1 + q) for discrete Laplace X of scale b, q = e^(−1/b), k ≥ 0."""
    return exp_neg_bounds(k / scale, bits)[1] / (1 + exp_neg_bounds(1 / scale, bits)[0])


def _certified(scale: Fraction, k: int, p: Fraction, bins: int, bits: int) -> bool:
    """(1 − P[X ≥ k])^(2B) ≥ p, proven with an upper bound on the tail and a lower bound on the
    power (dpselect.params.power_lower rounds every product down)."""
    tail = _tail_upper(scale, k, bits)
    if tail >= 1:
        return False
    return power_lower(1 - tail, 2 * bins, bits) >= p


@functools.lru_cache(maxsize=256)
def discrete_threshold(scale: Fraction, success_probability: Fraction, num_bins: int) -> int:
    """The smallest integer K ≥ 0 for which an empty dataset's 2B noisy counts (discrete Laplace
    of scale b) all stay below K with probability ≥ p, certified in rationals:
    (1 − q^K/(1 + q))^(2B) ≥ p with q = e^(−1/b)."""
    scale = Fraction(scale)
    p = Fraction(success_probability)
    bits = 64 + max(0, (1 - p).denominator.bit_length() - (1 - p).numerator.bit_length()) + (2 * num_bins).bit_length()
    q = math.exp(-1 / float(scale))
    root_gap = -math.expm1(math.log(float(p)) / (2 * num_bins))  # 1 − p^(1/(2B))
    guess = max(0, math.ceil(-float(scale) * math.log((1 + q) * root_gap)) - 1)
    k = guess
    while not _certified(scale, k, p, num_bins, bits):
        k += 1
    while k > 0 and _certified(scale, k - 1, p, num_bins, bits):
        k -= 1
    return k


def success_probabilities(success_probability: Fraction) -> list[Fraction]:
    """The p of every attempt of the retry rule, in order: p, then 1 − 10(1 − p) while it stays
    above 1 − 10⁻⁶, at most 30 attempts (exact arithmetic: from 1 − 10⁻⁹ the attempts are at
    1 − 10⁻⁹, 1 − 10⁻⁸ and 1 − 10⁻⁷)."""
    ps = [Fraction(success_probability)]
    while len(ps) < _MAX_ATTEMPTS:
        nxt = 1 - 10 * (1 - ps[-1])
        if not nxt > MIN_SUCCESS_PROBABILITY:
            break
        ps.append(nxt)
    return ps


# ------------------------------------------------------------------ bins

@dataclass(frozen=True)
class BinScheme:
    """B bins per sign on a base-2 log scale starting at 2^``scale_exponent``.

    Defaults follow Google's: integers start at 1 with 64 bins, floats at the smallest normal
    double 2^-1022 with 2047 bins (up to the largest double)."""

    integer: bool
    scale_exponent: int
    num_bins: int

    @classmethod
    def default(cls, integer: bool) -> BinScheme:
        return cls(True, 0, 64) if integer else cls(False, -1022, 2047)

    def upper_edge(self, i: int) -> int | float:
        """The larger-magnitude edge of bin i, 2^(s+i), saturated at the type's largest value."""
        e = self.scale_exponent + i
        if self.integer:
            return _INT64_MAX if e >= 63 else 1 << e
        return float(_DBL_MAX) if e >= 1024 else math.ldexp(1.0, e)

    def lower_edge(self, i: int) -> int | float:
        """The smaller-magnitude edge of bin i: 0 for bin 0, else the upper edge of bin i − 1."""
        return (0 if self.integer else 0.0) if i == 0 else self.upper_edge(i - 1)

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
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"epsilon must be a real number, got {type(value).__name__}")
    if not math.isfinite(float(value)) or float(value) <= 0:
        raise ValueError(f"epsilon must be positive and finite, got {value!r}")
    return as_fraction(value)


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or int(value) < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def _probability(value: object) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (Real, Fraction)):
        raise TypeError(f"success_probability must be a real number, got {type(value).__name__}")
    exact = Fraction(value) if isinstance(value, Fraction) else as_fraction(value)
    if not 0 < exact < 1:
        raise ValueError(f"success_probability must be strictly between 0 and 1, got {value!r}")
    return exact


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
    outside the bounds)."""

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


@dataclass(frozen=True)
class PartitionBounds:
    """Bounds for partitions 0 … n − 1 from their own noisy histograms. ``found[j]`` is False
    where no bin passed the threshold (then ``lower[j]`` and ``upper[j]`` are NaN for floats, 0
    for integers). ``attempts[j]`` is how many thresholds were tried."""

    lower: np.ndarray
    upper: np.ndarray
    found: np.ndarray
    attempts: np.ndarray
    thresholds: tuple[int, ...]
    noisy_positive: np.ndarray
    noisy_negative: np.ndarray
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


def _scan(noisy_pos: np.ndarray, noisy_neg: np.ndarray, k: int, scheme: BinScheme
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Google's scans over every row of (n, B) noisy histograms at threshold k (a bin has data
    iff its noisy count is ≥ k). Returns, per row: whether some bin has data; the lower bound's
    bin and whether it is on the negative side (the negative bin of largest magnitude with
    data, else the positive bin of smallest magnitude); the upper bound's bin and whether it is
    on the positive side (the positive bin of largest magnitude, else the negative bin of
    smallest magnitude). One bin with data gives both bounds."""
    pos = noisy_pos >= k
    neg = noisy_neg >= k
    b = scheme.num_bins
    has_pos, has_neg = pos.any(axis=1), neg.any(axis=1)
    top_pos = b - 1 - np.argmax(pos[:, ::-1], axis=1)
    first_pos = np.argmax(pos, axis=1)
    top_neg = b - 1 - np.argmax(neg[:, ::-1], axis=1)
    first_neg = np.argmax(neg, axis=1)
    lower_bin = np.where(has_neg, top_neg, first_pos)
    upper_bin = np.where(has_pos, top_pos, first_neg)
    return has_pos | has_neg, lower_bin, has_neg, upper_bin, has_pos


def find_bounds(noisy_positive: npt.ArrayLike, noisy_negative: npt.ArrayLike, thresholds: list[int],
                scheme: BinScheme) -> tuple[int | float, int | float, int] | None:
    """Steps 3–5 on one noisy histogram: (lower, upper, attempt) with the first threshold (in
    the retry order) at which some bin has data, or None ("not enough data"). Pure
    post-processing: no randomness."""
    pos = np.asarray(noisy_positive).reshape(1, -1)
    neg = np.asarray(noisy_negative).reshape(1, -1)
    for attempt, k in enumerate(thresholds, start=1):
        found, lower_bin, lower_neg, upper_bin, upper_pos = _scan(pos, neg, k, scheme)
        if found[0]:
            lower, upper = _bound_values(int(lower_bin[0]), bool(lower_neg[0]), int(upper_bin[0]),
                                         bool(upper_pos[0]), scheme)
            return lower, upper, attempt
    return None


def _bound_values(lower_bin: int, lower_negative: bool, upper_bin: int, upper_positive: bool,
                  scheme: BinScheme) -> tuple[int | float, int | float]:
    if lower_negative:
        edge = scheme.upper_edge(lower_bin)
        lower = -edge - 1 if scheme.integer and edge == _INT64_MAX else -edge  # INT64_MIN: "lowest"
    else:
        lower = scheme.lower_edge(lower_bin)
    if upper_positive:
        upper = scheme.upper_edge(upper_bin)
    else:
        upper = 0 - scheme.lower_edge(upper_bin)  # 0 − 0.0 is 0.0, never −0.0
    return lower, upper


def _setup(epsilon: object, max_partitions_contributed: object, max_contributions_per_partition: object,
           success_probability: object, threshold: object, scheme: BinScheme
           ) -> tuple[DiscreteLaplaceNoise, list[int], list[Fraction | None], int, int]:
    eps = _epsilon(epsilon)
    l0 = _positive_int("max_partitions_contributed", max_partitions_contributed)
    linf = _positive_int("max_contributions_per_partition", max_contributions_per_partition)
    noise = DiscreteLaplaceNoise.for_epsilon(eps, sensitivity=linf, max_partitions_contributed=l0)
    if threshold is not None:
        if isinstance(threshold, bool) or not isinstance(threshold, Integral) or int(threshold) < 0:
            raise ValueError(f"threshold must be a non-negative int, got {threshold!r}")
        return noise, [int(threshold)], [None], l0, linf  # a user-set K: no retry
    ps = success_probabilities(_probability(success_probability))
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

def approx_bounds(values: npt.ArrayLike, epsilon: object, *, max_partitions_contributed: int = 1,
                  max_contributions_per_partition: int = 1,
                  success_probability: object = DEFAULT_SUCCESS_PROBABILITY, threshold: int | None = None,
                  integer: bool | None = None, num_bins: int | None = None, scale_exponent: int | None = None,
                  rng: object | None = None) -> ApproxBounds:
    """APPROX_BOUNDS over the whole dataset: ``values`` are every contribution after
    contribution bounding (each user at most L0 partitions, L∞ values in each). ε-DP.

    Integer arrays use the integer bins (64 from 1), float arrays the float bins (2047 from
    2^-1022), unless ``integer`` says otherwise. ``threshold`` sets K directly (no retry).
    Raises :class:`NotEnoughDataError` ("not enough data…") when no bin passes."""
    arr, is_int = _values(values, integer)
    scheme = _scheme(is_int, num_bins, scale_exponent)
    counts = np.bincount(bin_cells(arr, scheme), minlength=2 * scheme.num_bins).astype(np.int64)
    return approx_bounds_from_histogram(counts, epsilon, integer=is_int,
                                        max_partitions_contributed=max_partitions_contributed,
                                        max_contributions_per_partition=max_contributions_per_partition,
                                        success_probability=success_probability, threshold=threshold,
                                        num_bins=num_bins, scale_exponent=scale_exponent, rng=rng)


def approx_bounds_from_histogram(counts: npt.ArrayLike, epsilon: object, *, integer: bool,
                                 max_partitions_contributed: int = 1, max_contributions_per_partition: int = 1,
                                 success_probability: object = DEFAULT_SUCCESS_PROBABILITY,
                                 threshold: int | None = None, num_bins: int | None = None,
                                 scale_exponent: int | None = None, rng: object | None = None) -> ApproxBounds:
    """:func:`approx_bounds` from a histogram counted elsewhere (dpselect.spark counts it in
    Spark): ``counts`` are the 2B cells of :func:`bin_cells` over every contribution after
    contribution bounding (L0 partitions, L∞ values in each), on the scheme of ``integer``,
    ``num_bins`` and ``scale_exponent``. Steps 2–5: noise, thresholds, bounds. ε-DP."""
    scheme = _scheme(bool(integer), num_bins, scale_exponent)
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
    result = find_bounds(noisy_pos, noisy_neg, thresholds, scheme)
    if result is not None:
        lower, upper, attempt = result
        return ApproxBounds(lower, upper, thresholds[attempt - 1], ps[attempt - 1], attempt, noisy_pos, noisy_neg,
                            scheme, noise, guarantee)
    raise NotEnoughDataError(
        f"not enough data to find bounds: no noisy bin count reached the threshold (last tried {thresholds[-1]}, "
        f"after {len(thresholds)} attempt(s)). Run over a larger dataset, spend more epsilon, lower "
        "success_probability, or give explicit bounds")


def approx_bounds_per_partition(values: npt.ArrayLike, codes: npt.ArrayLike, n_partitions: int, epsilon: object, *,
                                max_partitions_contributed: int = 1, max_contributions_per_partition: int = 1,
                                success_probability: object = DEFAULT_SUCCESS_PROBABILITY,
                                threshold: int | None = None, integer: bool | None = None,
                                num_bins: int | None = None, scale_exponent: int | None = None,
                                rng: object | None = None) -> PartitionBounds:
    """APPROX_BOUNDS for each partition 0 … n − 1 (``codes[i]`` is the partition of
    ``values[i]``), each from its own noisy histogram. ε-DP for all partitions together: one
    user's values change the histograms by at most L0·L∞ in L1 in total.

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
    negative, bins = _signed_magnitudes(arr, scheme)
    width = 2 * scheme.num_bins
    cells = c.astype(np.int64) * width + bins + negative * scheme.num_bins
    counts = np.bincount(cells, minlength=n * width).astype(np.int64)
    generator = resolve_rng(rng)
    noisy = noise.add(counts, rng=generator).reshape(n, width)
    noisy_pos, noisy_neg = noisy[:, :scheme.num_bins], noisy[:, scheme.num_bins:]
    found = np.zeros(n, dtype=bool)
    attempts = np.zeros(n, dtype=np.int64)
    lower_bin = np.zeros(n, dtype=np.intp)
    upper_bin = np.zeros(n, dtype=np.intp)
    lower_neg = np.zeros(n, dtype=bool)
    upper_pos = np.zeros(n, dtype=bool)
    for attempt, k in enumerate(thresholds, start=1):
        todo = ~found
        if not todo.any():
            break
        attempts[todo] = attempt
        f, lb, ln, ub, up = _scan(noisy_pos[todo], noisy_neg[todo], k, scheme)
        rows = np.flatnonzero(todo)[f]
        found[rows] = True
        lower_bin[rows], lower_neg[rows], upper_bin[rows], upper_pos[rows] = lb[f], ln[f], ub[f], up[f]
    dtype = np.int64 if scheme.integer else np.float64
    lower = np.zeros(n, dtype=dtype) if scheme.integer else np.full(n, np.nan)
    upper = np.zeros(n, dtype=dtype) if scheme.integer else np.full(n, np.nan)
    for j in np.flatnonzero(found):
        lower[j], upper[j] = _bound_values(int(lower_bin[j]), bool(lower_neg[j]), int(upper_bin[j]),
                                           bool(upper_pos[j]), scheme)
    guarantee = _guarantee(noise, l0, linf, generator.privacy_guaranteed, "per partition")
    return PartitionBounds(lower, upper, found, attempts, tuple(thresholds), noisy_pos, noisy_neg, scheme,
                           noise, guarantee)
