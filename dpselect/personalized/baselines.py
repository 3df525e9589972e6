"""Baselines for personalized DP (the comparisons of [SDQY] Table 1), all with exact noise.

Statements and proofs: docs/privacy/personalized.md, "Baselines".

* D1 naive: the strictest level Φ_min for everyone (:func:`naive_count`, :func:`naive_sum`).
* D2 [JYC15] sampling: keep user u with probability (e^{Φ(u)} − 1)/(e^{t_s} − 1) when
  Φ(u) < t_s, then run a t_s-DP mechanism (:func:`sampling_count`, :func:`sampling_sum`).
* D4 PDP count with sampling, in the safe form L = t + 1
  (:func:`pdp_count_with_sampling`).
* D5 the standard-DP sum used inside D1 and D2 (:func:`universal_sum`).
* D3 PDP exponential mechanism lives in :mod:`dpselect.personalized.exponential`.

Per-user coins use ``rng.uniform_below_array(2**64, n) < Q`` with Q the keep probability
rounded *down* to 64-bit fixed point (``noise.keep_thresholds``): exact, and on the safe side.
"""
from __future__ import annotations

import math
import sys
from fractions import Fraction
from typing import Any

import numpy as np

from .count import count_thresholds
from .noise import RandomSource, discrete_laplace, keep_mask, keep_thresholds, sampling_keep_probability
from .params import exact_value, smallest_float_above, validate_input
from .result import PRIVACY_DOC, PersonalizedResult, PrivacyStatement
from .result import reference as _reference
from .selection import shifted_max

__all__ = [
    "naive_count",
    "naive_sum",
    "pdp_count_with_sampling",
    "sampling_count",
    "sampling_sum",
    "universal_sum",
]


_SAMPLING_REFERENCE = (
    "Jorgensen, Yu, Cormode, Conservative or Liberal? Personalized Differential Privacy (ICDE 2015), "
    f"Sample mechanism; {PRIVACY_DOC}"
)


def _simple_result(
    estimate: int | Fraction, method: str, data_phi: np.ndarray, loss_of: Any, description: str,
    reference: str, guaranteed: bool, details: dict[str, object] | None = None, beta: float | None = None,
) -> PersonalizedResult:
    privacy = PrivacyStatement(
        phi=data_phi, loss_of=loss_of, description=description, reference=reference, privacy_guaranteed=guaranteed
    )
    return PersonalizedResult(
        estimate=estimate, method=method, chosen_index=None, chosen_parameter=None, parameters=(),
        noise_scales=(), shifts=(), noisy_candidates=(), beta=beta, failure_probability=None,
        privacy=privacy, privacy_guaranteed=guaranteed, details=details or {},
    )


def universal_sum(
    values: np.ndarray, epsilon: Fraction, beta: float, bound: int, rng: RandomSource
) -> tuple[Fraction, dict[str, object]]:
    """D5, the standard-DP sum that [SDQY]'s experiments use inside D1 and D2, ε-DP.

    ε' = ε/2, β' = β/2; AboveThreshold (threshold noise scale 2/ε', query noise 4/ε') over
    #{x ≤ 2^i}, i = 0..⌊log2 B⌋−1, against |D| − (6/ε')ln(2/β'); radius r = 2^{i−1} (as the code;
    half the covering power of two); release Σ min(x, r) + Lap(2r/ε). Noise is exact discrete
    Laplace; the sum is kept on the half-integer grid (values ×2) so r = 1/2 stays exact.
    Guarantee: ε-DP under change-one-value neighbours (ε/2 for the SVT, ε/2 for the release).
    """
    eps_half = epsilon / 2
    beta_half = beta / 2
    n = int(values.size)
    ordered = np.sort(values)
    threshold_shift = float(6 / eps_half) * math.log(2 / beta_half)
    noisy_threshold = n + discrete_laplace(2 / eps_half, rng)
    top = bound.bit_length() - 1  # ⌊log2 B⌋
    stop = top
    for i in range(top):
        below = int(np.searchsorted(ordered, 2**i, side="right"))
        noisy = below + discrete_laplace(4 / eps_half, rng)
        # Q̃_i > T̃ ⇔ (Q_i + Z_i) − (|D| + Z_T) > −shift: post-processing of the noisy integers
        if noisy - noisy_threshold > -threshold_shift:
            stop = i
            break
    twice_radius = 2**stop  # 2r = 2^i
    twice_sum = int(np.minimum(2 * ordered, twice_radius).sum())
    noisy_twice = twice_sum + discrete_laplace(Fraction(2 * twice_radius) / epsilon, rng)
    return Fraction(noisy_twice, 2), {"radius": Fraction(twice_radius, 2), "svt_index": stop}


def naive_count(bits: Any, phi: Any, *, rng: Any = None) -> PersonalizedResult:
    """D1 naive count: Count + Lap(1/Φ_min), exact discrete Laplace.

    Guarantee: Φ_min-DP, hence Φ-PDP (every user's loss is Φ_min ≤ Φ(u)).
    """
    from dpselect.rng import resolve_rng

    rng = resolve_rng(rng)
    data = validate_input(bits, phi, 1, 0.5, "bits")
    estimate = int(data.values.sum()) + discrete_laplace(1 / data.phi_min, rng)
    phi_min = data.phi_min
    return _simple_result(
        estimate, "naive_count", data.phi, lambda _p: phi_min, "Φ_min-DP for everyone",
        _reference("naive baseline"), bool(rng.privacy_guaranteed),
    )


def naive_sum(
    values: Any, phi: Any, bound: int, *, beta: float = 0.1, method: str = "universal", rng: Any = None
) -> PersonalizedResult:
    """D1 naive sum: Φ_min for everyone.

    ``method="universal"`` (default) is what Table 1 ran: D5 with ε = Φ_min;
    ``method="laplace"`` is the slides' Sum + Lap(B/Φ_min). Guarantee: Φ_min-DP, hence Φ-PDP.
    """
    from dpselect.rng import resolve_rng

    rng = resolve_rng(rng)
    data = validate_input(values, phi, bound, beta)
    details: dict[str, object] = {}
    if method == "universal":
        estimate: int | Fraction
        estimate, details = universal_sum(data.values, data.phi_min, data.beta, data.bound, rng)
    elif method == "laplace":
        estimate = int(data.values.sum()) + discrete_laplace(data.bound / data.phi_min, rng)
    else:
        raise ValueError(f"method must be 'universal' or 'laplace', got {method!r}")
    phi_min = data.phi_min
    return _simple_result(
        estimate, f"naive_sum[{method}]", data.phi, lambda _p: phi_min, "Φ_min-DP for everyone",
        _reference("naive baseline"), bool(rng.privacy_guaranteed), details, data.beta,
    )


def _sample(values: np.ndarray, phi: np.ndarray, threshold: Fraction, rng: RandomSource) -> np.ndarray:
    """[JYC15] sampling: zero out each user with Φ(u) < t_s independently w.p. 1 − π(u).

    Only users with a non-zero value draw coins (a zero stays zero either way).
    """
    sampled = values.copy()
    # exact: t_s is the exact value of a float, so Φ(u) < t_s ⇔ float Φ(u) < float(t_s)
    at_stake = np.flatnonzero((values != 0) & (phi < float(threshold)))
    probability, condition = sampling_keep_probability(phi[at_stake], float(threshold))
    kept = keep_mask(keep_thresholds(probability, condition), rng)
    sampled[at_stake[~kept]] = 0
    return sampled


def _float_or_inf(value: Fraction) -> float:
    """float(value), or inf beyond the float range (a keep probability against an infinite
    threshold is 0: the user is dropped, which only lowers its privacy loss)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _sampling_threshold(phi: np.ndarray, threshold: float | None) -> Fraction:
    """t_s as an exact level: the given float, or the mean of Φ (summed as Φ/N: no overflow)."""
    if threshold is None:
        value = float(np.sum(phi / phi.size))
    else:
        if isinstance(threshold, (bool, np.bool_)) or not isinstance(threshold, (int, float, np.integer, np.floating)):
            raise TypeError(f"threshold must be a float privacy level or None, got {threshold!r}")
        value = float(threshold)
    if not (math.isfinite(value) and value >= sys.float_info.min):
        raise ValueError(
            f"threshold must be a finite float >= {sys.float_info.min!r} (a privacy level), got {threshold!r}; "
            "None uses the mean of phi"
        )
    return exact_value(value)


def _sampling_loss(threshold: Fraction) -> Any:
    # [JYC15] Thm: sampling w.p. ≤ (e^Φ − 1)/(e^{t_s} − 1) then a t_s-DP mechanism costs ≤ Φ(u);
    # users with Φ(u) ≥ t_s are kept for sure and pay t_s.
    return lambda phi_u: min(phi_u, threshold)


def sampling_count(
    bits: Any, phi: Any, *, threshold: float | None = None, rng: Any = None
) -> PersonalizedResult:
    """D2 [JYC15] sampling count: sample, then count + Lap(1/t_s).

    ``threshold`` t_s defaults to the mean of Φ over all users (as the authors' code). No
    reweighting (as the code). Guarantee: Φ-PDP ([JYC15] Sample mechanism).
    """
    from dpselect.rng import resolve_rng

    rng = resolve_rng(rng)
    data = validate_input(bits, phi, 1, 0.5, "bits")
    t_s = _sampling_threshold(data.phi, threshold)
    sampled = _sample(data.values, data.phi, t_s, rng)
    estimate = int(sampled.sum()) + discrete_laplace(1 / t_s, rng)
    return _simple_result(
        estimate, "sampling_count", data.phi, _sampling_loss(t_s), "Φ-PDP by [JYC15] sampling",
        _SAMPLING_REFERENCE, bool(rng.privacy_guaranteed), {"threshold": t_s},
    )


def sampling_sum(
    values: Any, phi: Any, bound: int, *, beta: float = 0.1, threshold: float | None = None,
    rng: Any = None,
) -> PersonalizedResult:
    """D2 [JYC15] sampling sum: sample, then D5 with ε = t_s.

    Guarantee: Φ-PDP ([JYC15] Sample mechanism composed with the t_s-DP D5).
    """
    from dpselect.rng import resolve_rng

    rng = resolve_rng(rng)
    data = validate_input(values, phi, bound, beta)
    t_s = _sampling_threshold(data.phi, threshold)
    sampled = _sample(data.values, data.phi, t_s, rng)
    estimate, details = universal_sum(sampled, t_s, data.beta, data.bound, rng)
    details["threshold"] = t_s
    return _simple_result(
        estimate, "sampling_sum", data.phi, _sampling_loss(t_s), "Φ-PDP by [JYC15] sampling",
        _SAMPLING_REFERENCE, bool(rng.privacy_guaranteed), details, data.beta,
    )


def pdp_count_with_sampling(
    bits: Any, phi: Any, *, beta: float = 0.1, rng: Any = None
) -> PersonalizedResult:
    """D4 PDP count with sampling ([SDQY] Table 1, "PDP Count (with sampling)"), safe form.

    Algorithm A's thresholds k_i, but users with Φ(u) < k_i are kept with the tight probability
    π_i(u) = (e^{Φ(u)/L} − 1)/(e^{k_i/L} − 1) instead of deleted, L = t + 1 in the noise
    (scale L/k_i) and the shift. Guarantee: Φ-PDP — each release costs ≤ Φ(u)/L (sampled:
    ln(1 + π(e^{k_i/L} − 1)) ≤ Φ(u)/L; counted in full: k_i/L ≤ Φ(u)/L), over L releases.
    """
    from dpselect.rng import resolve_rng

    rng = resolve_rng(rng)
    data = validate_input(bits, phi, 1, beta, "bits")
    t, thresholds = count_thresholds(data.phi_min, data.phi_max)
    divisor = t + 1
    scales = tuple(Fraction(divisor) / k for k in thresholds)
    ones_phi = data.phi[data.values == 1]
    candidates: list[int] = []
    for k in thresholds:
        above = ones_phi >= smallest_float_above(k)  # exactly Φ(u) > k_i: counted in full
        full = int(np.count_nonzero(above))
        at_stake = ones_phi[~above]  # Φ(u) ≤ k_i: the float π rounds down, so Φ = k_i is safe too
        probability, condition = sampling_keep_probability(at_stake / divisor, _float_or_inf(k / divisor))
        kept = keep_mask(keep_thresholds(probability, condition), rng)
        candidates.append(full + int(np.count_nonzero(kept)))
    selection = shifted_max(candidates, scales, divisor, data.beta, rng)
    guaranteed = bool(rng.privacy_guaranteed)
    privacy = PrivacyStatement(
        phi=data.phi,
        loss_of=lambda phi_u: sum((min(phi_u, k) / divisor for k in thresholds), Fraction(0)),
        description="Φ-PDP: each of the t+1 releases costs ≤ min(Φ(u), k_i)/(t+1)",
        reference=_reference("PDP count with sampling, safe form L = t + 1"),
        privacy_guaranteed=guaranteed,
    )
    chosen = selection.chosen_index
    return PersonalizedResult(
        estimate=selection.estimate, method="pdp_count_with_sampling", chosen_index=chosen,
        chosen_parameter=None if chosen is None else thresholds[chosen], parameters=thresholds,
        noise_scales=scales, shifts=selection.shifts, noisy_candidates=selection.noisy_candidates,
        beta=data.beta, failure_probability=min(1.0, (divisor + 1) * data.beta / (2 * divisor)),
        privacy=privacy, privacy_guaranteed=guaranteed, details={"t": t, "L": divisor},
    )
