"""PDP bit counting by personalized deletion (Algorithm A of [SDQY]; docs/privacy/personalized.md, "pdp_count").

Candidates i = 0..t with thresholds k_i = 2^i·Φ_min, t = max(1, ⌈log2(Φ_max/Φ_min)⌉) (exact):
C_i counts the 1-bits of users with Φ(u) > k_i, released with discrete Laplace of scale
t/k_i and shift ⌈(t/k_i)·ln(t/β)⌉; output max(0, max_i C̃_i).

Privacy (budget split): release i costs a user with Φ(u) > k_i exactly
k_i/t < Φ(u)/t and costs everyone else 0; a user is included only while k_i < Φ(u) ≤ k_t, i.e.
in at most t releases, so the total is < Φ(u): Φ-PDP. The comparisons Φ(u) > k_i are exact
(``smallest_float_above``), and the scales t/k_i are exact fractions.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from .params import doubling_steps, smallest_float_above, validate_input
from .result import PersonalizedResult, PrivacyStatement, reference
from .selection import shifted_max

__all__ = ["count_candidates", "count_thresholds", "pdp_count"]


def count_thresholds(phi_min: Fraction, phi_max: Fraction) -> tuple[int, tuple[Fraction, ...]]:
    """t and the doubling thresholds k_i = 2^i·Φ_min, i = 0..t, exactly."""
    t = doubling_steps(phi_max / phi_min)
    return t, tuple(phi_min * 2**i for i in range(t + 1))


def count_candidates(bits: np.ndarray, phi: np.ndarray, thresholds: tuple[Fraction, ...]) -> list[int]:
    """C_i = #{u : bit(u) = 1 and Φ(u) > k_i} for every threshold, exactly."""
    levels = np.sort(phi[bits == 1])
    return [
        int(levels.size - np.searchsorted(levels, smallest_float_above(k), side="left"))
        for k in thresholds
    ]


def _count_loss(thresholds: tuple[Fraction, ...], divisor: int) -> Any:
    def loss(phi_u: Fraction) -> Fraction:
        # release i charges sensitivity 1 / scale (divisor / k_i) to users with Φ(u) > k_i
        return sum((k / divisor for k in thresholds if phi_u > k), Fraction(0))

    return loss


def pdp_count(
    bits: Any, phi: Any, *, beta: float = 0.1, rng: Any = None
) -> PersonalizedResult:
    """Φ-PDP count of 1-bits by personalized deletion (Algorithm A of Sun, Dong, Qiu, Yi, SIGMOD 2025).

    Guarantee: Φ-PDP — for neighbours differing in user u's bit, every output probability
    changes by at most a factor e^{Φ(u)} (proof: docs/privacy/personalized.md, "pdp_count"; each user's
    exact total loss is in ``result.privacy``). Error (derived): with probability
    ≥ 1 − (t+2)β/(2t), 0 ≤ Count − estimate ≤ min_i [#{1-bits with Φ(u) ≤ k_i} + 2·shift_i].

    Parameters
    ----------
    bits:
        0/1 array, one entry per user (all users of the public user set, zeros included).
    phi:
        Positive finite privacy levels Φ(u), same shape. Floats are read as their shortest
        decimal (0.1 means 1/10).
    beta:
        Failure probability of the error bound, in (0, 1).
    rng:
        ``None`` for the package CSPRNG, or an explicit test RNG.
    """
    from dpselect.rng import resolve_rng

    rng = resolve_rng(rng)
    data = validate_input(bits, phi, 1, beta, "bits")
    t, thresholds = count_thresholds(data.phi_min, data.phi_max)
    scales = tuple(Fraction(t) / k for k in thresholds)
    candidates = count_candidates(data.values, data.phi, thresholds)
    selection = shifted_max(candidates, scales, t, data.beta, rng)
    guaranteed = bool(rng.privacy_guaranteed)
    privacy = PrivacyStatement(
        phi=data.phi,
        loss_of=_count_loss(thresholds, t),
        description="Φ-PDP: user u's loss is Σ_{i: k_i < Φ(u)} k_i/t < Φ(u)",
        reference=reference("PDP count, Algorithm A"),
        privacy_guaranteed=guaranteed,
    )
    chosen = selection.chosen_index
    return PersonalizedResult(
        estimate=selection.estimate,
        method="pdp_count",
        chosen_index=chosen,
        chosen_parameter=None if chosen is None else thresholds[chosen],
        parameters=thresholds,
        noise_scales=scales,
        shifts=selection.shifts,
        noisy_candidates=selection.noisy_candidates,
        beta=data.beta,
        failure_probability=min(1.0, (t + 2) * data.beta / (2 * t)),
        privacy=privacy,
        privacy_guaranteed=guaranteed,
        details={"t": t},
    )
