"""The thresholds of APPROX_BOUNDS (docs/privacy/approx-bounds.md, steps 4 and 7).

* :func:`discrete_threshold`: the smallest integer K for which the 2B noisy counts of an empty
  dataset all stay below K with probability ≥ p, certified in exact arithmetic. It is found by
  a bracketing search around an accurate floating-point guess, so a handful of certified
  evaluations suffice at any noise scale (a linear walk from a poor guess took seconds per
  threshold at scales near 10^12).
* :func:`window_threshold`: the thresholds of the tails rule's extension tests, on sums of w
  adjacent noisy counts. They only decide how far the bounds extend (accuracy), never the
  privacy, and are computed in floating point from a Chernoff bound.
* :func:`check_scale`: refuses, from the parameters alone and before any work, a noise scale or
  a success probability whose thresholds the int64 noisy counts could not hold.
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Callable

from dpselect.core.exact import exp_neg_bounds, power_lower

__all__ = [
    "MAX_SCALE",
    "MAX_THRESHOLD",
    "check_scale",
    "discrete_threshold",
    "google_threshold",
    "success_probabilities",
    "smallest_true",
    "threshold_estimate",
    "window_threshold",
]

# Noisy counts are int64. With scale b ≤ 2^54 a draw leaves ±2^62 with probability below
# e^(−256) per cell, and the thresholds of every success probability down to 1 − 10⁻²⁰ stay
# below 2^60; a user-set threshold must stay below 2^61.
MAX_SCALE = Fraction(2**54)
MAX_THRESHOLD = 2**61
# Google's retry rule: relax p tenfold while it stays above this, at most _MAX_ATTEMPTS times.
MIN_SUCCESS_PROBABILITY = 1 - Fraction(1, 10**6)
_MAX_ATTEMPTS = 30


def google_threshold(epsilon: float, success_probability: float = 1 - 1e-9, num_bins: int = 64,
                     max_partitions_contributed: int = 1, max_contributions_per_partition: int = 1) -> float:
    """Google's current K for *continuous* Laplace noise of scale b = L0·L∞/ε: the quantile at
    p^(1/(2B)), K = −b·ln(2 − 2p^(1/(2B))). For reference and comparison only: dpselect's
    noise is discrete (see :func:`discrete_threshold`)."""
    b = max_partitions_contributed * max_contributions_per_partition / float(epsilon)
    root = math.exp(math.log(float(success_probability)) / (2 * num_bins))
    return -b * math.log(2 - 2 * root)


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


def _log_fraction(x: Fraction) -> float:
    """ln x for a positive rational, accurate even when x underflows a double."""
    return math.log(x.numerator) - math.log(x.denominator)


def threshold_estimate(scale: Fraction, success_probability: Fraction, num_bins: int) -> float:
    """A floating-point estimate of :func:`discrete_threshold`: the real K solving
    (1 − q^K/(1 + q))^(2B) = p, K = −b·ln((1 + q)(1 − p^(1/(2B)))), q = e^(−1/b).

    1 − p is taken from the exact rational (not from float(p), which keeps only about 7
    significant digits of 1 − 10⁻⁹ and put the old guess b·10⁻⁸ away from K)."""
    b = float(scale)
    gap = Fraction(1) - Fraction(success_probability)  # 1 − p, exactly
    if float(gap) > 1e-300:
        log_root_gap = math.log(-math.expm1(math.log1p(-float(gap)) / (2 * num_bins)))
    else:  # 1 − p^(1/(2B)) = (1 − p)/(2B) to far below a double's precision
        log_root_gap = _log_fraction(gap) - math.log(2 * num_bins)
    log_one_plus_q = math.log1p(math.exp(-1 / b)) if b > 0 else 0.0
    return -b * (log_one_plus_q + log_root_gap)


def check_scale(scale: Fraction, success_probability: Fraction | None, num_bins: int) -> None:
    """ValueError if the noise scale, or the largest threshold it implies at
    ``success_probability``, is beyond what int64 noisy counts hold. Parameters only: no data,
    no randomness, no certified arithmetic (the estimate is within far less than the margin)."""
    if scale > MAX_SCALE:
        raise ValueError(f"the noise scale is {float(scale):.6g}, above 2**54: noisy counts would not fit in int64")
    if success_probability is not None and threshold_estimate(scale, success_probability, num_bins) > MAX_THRESHOLD / 2:
        raise ValueError(f"success_probability = {float(success_probability)!r} (1 - {float(1 - success_probability):.3g}) "
                         f"at noise scale {float(scale):.6g} needs a threshold above 2**60: noisy counts would not "
                         "fit in int64")


def smallest_true(predicate: Callable[[int], bool], guess: int, lowest: int = 0) -> int:
    """The smallest k ≥ ``lowest`` with ``predicate(k)``, for a predicate that is monotone
    (false, …, false, true, true, …) and true somewhere. Gallops from ``guess`` (doubling
    steps) to bracket the answer, then bisects: about 2·log2|answer − guess| + 2 evaluations."""
    guess = max(lowest, guess)
    if predicate(guess):
        high, step = guess, 1  # predicate(high) holds
        while True:
            if high == lowest:
                return high
            candidate = max(lowest, high - step)
            if not predicate(candidate):
                low = candidate
                break
            high, step = candidate, step * 2
    else:
        low, step = guess, 1  # predicate(low) fails
        while True:
            candidate = low + step
            if predicate(candidate):
                high = candidate
                break
            low, step = candidate, step * 2
    while high - low > 1:  # predicate(low) fails, predicate(high) holds
        middle = (low + high) // 2
        if predicate(middle):
            high = middle
        else:
            low = middle
    return high


@functools.lru_cache(maxsize=64)
def _exp_neg_one_over(scale: Fraction, bits: int) -> Fraction:
    """A lower bound on q = e^(−1/b) (searches ask for it at every step)."""
    return exp_neg_bounds(1 / scale, bits)[0]


def tail_upper(scale: Fraction, k: int, bits: int) -> Fraction:
    """≥ P[X ≥ k] = q^k/(1 + q) for discrete Laplace X of scale b, q = e^(−1/b), k ≥ 0."""
    return exp_neg_bounds(k / scale, bits)[1] / (1 + _exp_neg_one_over(scale, bits))


def certified(scale: Fraction, k: int, p: Fraction, bins: int, bits: int) -> bool:
    """(1 − P[X ≥ k])^(2B) ≥ p, proven with an upper bound on the tail and a lower bound on the
    power (dpselect.core.exact.power_lower rounds every product down)."""
    tail = tail_upper(scale, k, bits)
    if tail >= 1:
        return False
    return power_lower(1 - tail, 2 * bins, bits) >= p


def _certificate_bits(scale: Fraction, p: Fraction, num_bins: int) -> int:
    """Precision of the certificate: 64 bits beyond log2(1/(1 − p)), log2(2B) and log2(b). With
    it the upper bound on the tail at k + 1 is below the one at k (their true ratio is
    e^(−1/b), and each bound is within 2^-bits of the truth), so the certificate is monotone in
    k and a bisection finds its smallest k."""
    gap = 1 - p
    return (64 + max(0, gap.denominator.bit_length() - gap.numerator.bit_length()) + (2 * num_bins).bit_length()
            + max(0, scale.numerator.bit_length() - scale.denominator.bit_length()))


@functools.lru_cache(maxsize=256)
def discrete_threshold(scale: Fraction, success_probability: Fraction, num_bins: int) -> int:
    """The smallest integer K ≥ 0 for which an empty dataset's 2B noisy counts (discrete Laplace
    of scale b) all stay below K with probability ≥ p, certified in rationals:
    (1 − q^K/(1 + q))^(2B) ≥ p with q = e^(−1/b).

    The search starts at :func:`threshold_estimate` (relative error about 10^-15) and brackets
    the answer with doubling steps, then bisects, so it needs about 2·log2(b·10^-14) + 4
    certified evaluations at most. ValueError for a scale or p whose threshold does not fit the
    noisy counts (:func:`check_scale`)."""
    scale = Fraction(scale)
    p = Fraction(success_probability)
    if scale <= 0 or not 0 < p < 1 or num_bins < 1:
        raise ValueError("discrete_threshold needs scale > 0, 0 < success_probability < 1 and num_bins >= 1")
    check_scale(scale, p, num_bins)
    bits = _certificate_bits(scale, p, num_bins)
    guess = max(0, math.ceil(threshold_estimate(scale, p, num_bins)))
    return smallest_true(lambda k: certified(scale, k, p, num_bins, bits), guess)


@functools.lru_cache(maxsize=256)
def window_threshold(scale: Fraction, width: int, log_rate: float) -> int:
    """The smallest integer T with P[X_1 + … + X_w ≥ T] ≤ e^log_rate for w independent discrete
    Laplace draws of scale b, from the exact tail q^T/(1 + q) for w = 1 and from the Chernoff
    bound inf_λ e^(−λT)·M(λ)^w for w ≥ 2, M(λ) = (1 − q)²/((1 − qe^λ)(1 − qe^(−λ))) the moment
    generating function (0 < λ < 1/b). Floating point: it sets how far the tails rule extends
    the bounds (accuracy), never the privacy."""
    b = float(scale)
    if width == 1:
        return max(0, math.ceil(b * (-log_rate - math.log1p(math.exp(-1 / b)))))

    def log_one_minus_exp(x: float) -> float:  # ln(1 − e^(−x)), x > 0
        return math.log(-math.expm1(-x))

    def needed(u: float) -> float:  # the T at which the bound with λ = u/b meets the rate
        log_m = 2 * log_one_minus_exp(1 / b) - log_one_minus_exp((1 - u) / b) - log_one_minus_exp((1 + u) / b)
        return b * (width * log_m - log_rate) / u

    low, high = 1e-9, 1 - 1e-9  # golden-section search: needed(u) is unimodal on (0, 1)
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(200):
        a, c = high - ratio * (high - low), low + ratio * (high - low)
        if needed(a) <= needed(c):
            high = c
        else:
            low = a
    return max(0, math.ceil(needed((low + high) / 2)))
