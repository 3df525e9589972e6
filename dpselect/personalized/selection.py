"""Shifted-max selection over under-estimating candidates ([R2T]; docs/privacy/personalized.md, "Tools").

Each candidate j is an integer under-estimate Q_j of the target, released as
``Q_j + Z_j − shift_j`` with Z_j exact discrete Laplace of scale b_j and the public shift
``shift_j = ⌈b_j · ln(L/β)⌉``. The output is ``max(0, max_j …)``.

Guarantee (derived for the discrete Laplace): for integer m ≥ 1,
P[Z ≥ m] = q^m/(1+q) with q = e^{−1/b}, so P[Z > shift] ≤ e^{−shift/b}·q/(1+q) < β/(2L), and the
same for the lower tail. With L' candidates, with probability ≥ 1 − (L'+1)·β/(2L) every
candidate stays below the truth and the best one loses at most 2·shift_j.

The shifts are data-independent, and the max is post-processing of the composed releases, so
computing them in floating point is outside the privacy path.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from .noise import RandomSource, discrete_laplace

__all__ = ["ShiftedMax", "shift_for", "shifted_max"]


#: Noise scales below this are multiplied in float; larger ones (possible with privacy levels
#: spanning the whole float range) in exact rationals, where float(scale) would overflow.
_FLOAT_SCALE_LIMIT = Fraction(2**1000)


def shift_for(scale: Fraction, multiplier_log_argument: float) -> int:
    """The public integer shift ⌈scale · ln(L/β)⌉ (``multiplier_log_argument`` = L/β)."""
    logarithm = math.log(multiplier_log_argument)
    if scale < _FLOAT_SCALE_LIMIT:
        return math.ceil(float(scale) * logarithm)
    return math.ceil(Fraction(scale) * Fraction(logarithm))


@dataclass(frozen=True)
class ShiftedMax:
    estimate: int
    chosen_index: int | None
    shifts: tuple[int, ...]
    noisy_candidates: tuple[int, ...]


def shifted_max(
    candidates: Sequence[int], scales: Sequence[Fraction], divisor: int, beta: float, rng: RandomSource
) -> ShiftedMax:
    """Release every candidate with exact discrete Laplace noise, shift down, take max(0, ·)."""
    shifts = tuple(shift_for(b, divisor / beta) for b in scales)
    noisy = tuple(
        int(q) + discrete_laplace(b, rng) - shift for q, b, shift in zip(candidates, scales, shifts)
    )
    best = max(range(len(noisy)), key=lambda j: noisy[j])
    if noisy[best] <= 0:
        return ShiftedMax(0, None, shifts, noisy)
    return ShiftedMax(noisy[best], best, shifts, noisy)
