"""PDP sum with personalized truncation (Algorithm B of [SDQY]; docs/privacy/personalized.md, "pdp_sum").

For a noise-scale parameter s the best truncation vector is τ(u) = ⌊s·Φ(u)⌋, so the private
search runs over s_i = 2^i/Φ_max, i = 0..t, t = max(1, ⌈log2(B·Φ_max/Φ_min)⌉) (exact):
S_i = Σ_u min(I(u), τ_i(u)) is released with discrete Laplace of scale L·s_i and shift
⌈L·s_i·ln(L/β)⌉, L = t + 1 (always within budget), and the output is max(0, max_i S̃_i).

Privacy (budget split): release i has sensitivity min(τ_i(u), B) ≤ s_i·Φ(u) for
user u, so it costs ≤ Φ(u)/L; over the L releases the total is ≤ Φ(u). τ_i is computed exactly
(``exact_floor_scaled``) and the scales are exact fractions, so this is exact, not approximate.
"""
from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from .params import (
    PersonalizedInput,
    doubling_steps,
    exact_floor_scaled,
    validate_beta,
    validate_bound,
    validate_input,
    validate_integers,
)
from .result import PersonalizedResult, PrivacyStatement, reference
from .selection import shifted_max

__all__ = ["pdp_sum", "pdp_sum_signed", "sum_candidates", "sum_scales", "truncation_loss"]


def sum_scales(
    phi_min: Fraction, phi_max: Fraction, bound: int, budget_fraction: Fraction = Fraction(1)
) -> tuple[int, tuple[Fraction, ...]]:
    """t and s_i = 2^i / (f·Φ_max), i = 0..t, for a budget fraction f."""
    t = doubling_steps(bound * phi_max / phi_min)
    return t, tuple(Fraction(2**i) / (budget_fraction * phi_max) for i in range(t + 1))


def sum_candidates(
    values: np.ndarray, phi: np.ndarray, scales: tuple[Fraction, ...], bound: int,
    budget_fraction: Fraction = Fraction(1),
) -> list[int]:
    """S_i = Σ_u min(I(u), ⌊s_i·f·Φ(u)⌋) for every scale, exactly.

    Users with value 0 contribute nothing and are skipped. τ grows with s, so a user whose
    value is no longer truncated stays untruncated: such users leave the working set and
    contribute their full value to every later candidate.
    """
    positive = values > 0
    active_values = values[positive]
    active_phi = phi[positive]
    settled = 0  # Σ of the values of users no longer truncated
    result: list[int] = []
    for s in scales:
        if active_values.size:
            tau = exact_floor_scaled(active_phi, s * budget_fraction, bound)
            untruncated = tau >= active_values
            released = int(active_values[untruncated].sum())
            truncated = ~untruncated
            active_values = active_values[truncated]
            active_phi = active_phi[truncated]
            result.append(settled + released + int(tau[truncated].sum()))
            settled += released
        else:
            result.append(settled)
    return result


def truncation_loss(
    scales: tuple[Fraction, ...], divisor: int, bound: int, budget_fraction: Fraction = Fraction(1)
) -> Callable[[Fraction], Fraction]:
    """Exact loss of the personalized-truncation search: Σ_i min(⌊s_i·f·Φ⌋, B)/(L·s_i)."""

    def loss(phi_u: Fraction) -> Fraction:
        total = Fraction(0)
        for s in scales:
            tau = min((s * budget_fraction * phi_u).__floor__(), bound)
            total += Fraction(tau) / (divisor * s)
        return total

    return loss


def _run(
    data: PersonalizedInput, rng: Any, budget_fraction: Fraction, method: str
) -> PersonalizedResult:
    t, scales = sum_scales(data.phi_min, data.phi_max, data.bound, budget_fraction)
    divisor = t + 1  # L = t + 1: always within budget (L = t is not, for levels close together)
    noise_scales = tuple(divisor * s for s in scales)
    candidates = sum_candidates(data.values, data.phi, scales, data.bound, budget_fraction)
    selection = shifted_max(candidates, noise_scales, divisor, data.beta, rng)
    guaranteed = bool(rng.privacy_guaranteed)
    privacy = PrivacyStatement(
        phi=data.phi,
        loss_of=truncation_loss(scales, divisor, data.bound, budget_fraction),
        description="Φ-PDP: user u's loss is Σ_i min(⌊s_i·Φ(u)⌋, B)/((t+1)·s_i) ≤ Φ(u)",
        reference=reference("PDP sum, Algorithm B"),
        privacy_guaranteed=guaranteed,
    )
    chosen = selection.chosen_index
    return PersonalizedResult(
        estimate=selection.estimate,
        method=method,
        chosen_index=chosen,
        chosen_parameter=None if chosen is None else scales[chosen],
        parameters=scales,
        noise_scales=noise_scales,
        shifts=selection.shifts,
        noisy_candidates=selection.noisy_candidates,
        beta=data.beta,
        failure_probability=min(1.0, (divisor + 1) * data.beta / (2 * divisor)),
        privacy=privacy,
        privacy_guaranteed=guaranteed,
        details={"t": t, "L": divisor},
    )


def pdp_sum(
    values: Any, phi: Any, bound: int, *, beta: float = 0.1, rng: Any = None
) -> PersonalizedResult:
    """Φ-PDP sum of integers in {0..B} by personalized truncation (Algorithm B of Sun, Dong, Qiu, Yi,
    SIGMOD 2025).

    Guarantee: Φ-PDP with L = t + 1 (proof: docs/privacy/personalized.md, "pdp_sum"; exact per-user losses in
    ``result.privacy``). Error (derived): with probability ≥ 1 − β,
    0 ≤ Sum − estimate ≤ min_i [Σ_u (I(u) − ⌊s_i Φ(u)⌋)_+ + 2·shift_i]. The error has a heavy
    tail of probability ≤ β/2: judge it by medians, not means.

    Parameters
    ----------
    values:
        Integer values I(u) in {0, ..., bound}, one per user (all users, zeros included).
    phi:
        Positive finite privacy levels Φ(u), same shape (floats read as shortest decimals).
    bound:
        The public bound B ≥ 1 on one user's value.
    beta:
        Failure probability of the error bound, in (0, 1).
    rng:
        ``None`` for the package CSPRNG, or an explicit test RNG.
    """
    from dpselect.rng import resolve_rng

    rng = resolve_rng(rng)
    return _run(validate_input(values, phi, bound, beta), rng, Fraction(1), "pdp_sum")


def pdp_sum_signed(
    values: Any, phi: Any, bound: int, *, beta: float = 0.1, rng: Any = None
) -> PersonalizedResult:
    """Φ-PDP sum of signed integers in [−B, B] (safe form; docs/privacy/personalized.md, "pdp_sum").

    Runs Algorithm B on the positive and negative parts, each with half of every user's budget
    (a neighbour may flip the sign and so change both parts) and β/2, and outputs the
    difference. Guarantee: Φ-PDP (each part ≤ Φ(u)/2).
    """
    from dpselect.rng import resolve_rng

    limit = validate_bound(bound)
    beta = validate_beta(beta)
    # Checked on the caller's values before any cast: |values| >= 2**63 cannot wrap into range.
    signed = validate_integers(values, -limit, limit, "values", f"[-bound, bound] = [-{limit}, {limit}]")
    positive = np.maximum(signed, 0)
    negative = np.maximum(-signed, 0)  # |values| <= bound <= 2**53: no overflow
    rng = resolve_rng(rng)
    half = Fraction(1, 2)
    plus = _run(validate_input(positive, phi, limit, beta / 2), rng, half, "pdp_sum_signed[+]")
    minus = _run(validate_input(negative, phi, limit, beta / 2), rng, half, "pdp_sum_signed[-]")
    loss_plus, loss_minus = plus.privacy.loss_of, minus.privacy.loss_of
    privacy = PrivacyStatement(
        phi=plus.privacy.phi,
        loss_of=lambda phi_u: loss_plus(phi_u) + loss_minus(phi_u),
        description="Φ-PDP: each sign part is (Φ/2)-PDP by Algorithm B",
        reference=reference("PDP sum, Algorithm B on each sign with Φ/2"),
        privacy_guaranteed=plus.privacy_guaranteed,
    )
    return PersonalizedResult(
        estimate=plus.estimate - minus.estimate,
        method="pdp_sum_signed",
        chosen_index=None,
        chosen_parameter=None,
        parameters=(),
        noise_scales=(),
        shifts=(),
        noisy_candidates=(),
        beta=beta,
        failure_probability=min(1.0, (plus.failure_probability or 0) + (minus.failure_probability or 0)),
        privacy=privacy,
        privacy_guaranteed=plus.privacy_guaranteed,
        details={"positive": plus, "negative": minus},
    )
