"""Validation of privacy parameters and the per-partition budget (spec core.md §2).

A user touches at most κ = ``max_partitions_contributed`` partitions. Each partition's
mechanism runs at ε' = ε/κ and δ' chosen so that κ independent (ε', δ') mechanisms compose to
(ε, δ):

* ``delta_split="composition"`` (default): δ' = 1 − (1 − δ)^{1/κ}, the largest δ' allowed by
  the composition theorem for independent mechanisms (Kairouz–Oh–Viswanath 2015, Thm 3.3 with
  i = 0), as Google's library does;
* ``delta_split="conservative"``: δ' = δ/κ (basic composition).

δ' is irrational in general; we use a rational δ' no larger than the true value and check the
composition bound 1 − (1 − δ')^κ ≤ δ exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from numbers import Integral, Real
from typing import Literal

from dpselect.exact import as_fraction

__all__ = ["PrivacyParams", "validate_params", "DeltaSplit"]

DeltaSplit = Literal["composition", "conservative"]
_SPLITS = ("composition", "conservative")


@dataclass(frozen=True)
class PrivacyParams:
    """Validated parameters and the exact per-partition budget derived from them."""

    epsilon: float
    delta: float
    max_partitions_contributed: int
    delta_split: DeltaSplit
    epsilon_exact: Fraction
    delta_exact: Fraction
    partition_epsilon: Fraction
    partition_delta: Fraction

    def compose(self, partition_delta: Fraction) -> Fraction:
        """Total δ of κ partitions that each use ``partition_delta`` (exact)."""
        kappa = self.max_partitions_contributed
        if self.delta_split == "conservative":
            return kappa * partition_delta
        return 1 - (1 - partition_delta) ** kappa


def _check_real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    as_float = float(value)
    if not math.isfinite(as_float):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return as_float


def validate_params(
    epsilon: object,
    delta: object,
    max_partitions_contributed: object = 1,
    delta_split: object = "composition",
) -> PrivacyParams:
    """Check (ε, δ, κ, split) and derive the exact per-partition budget.

    Raises TypeError for a wrong type and ValueError for a value out of range, naming the
    parameter. ε = 0 and δ = 0 are valid here; mechanisms decide what they can do with them
    (spec core.md §1, Theorem 2)."""
    eps = _check_real("epsilon", epsilon)
    if eps < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    dlt = _check_real("delta", delta)
    if not 0 <= dlt < 1:
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    if isinstance(max_partitions_contributed, bool) or not isinstance(max_partitions_contributed, Integral):
        raise TypeError(
            f"max_partitions_contributed must be a positive int, got {type(max_partitions_contributed).__name__}"
        )
    kappa = int(max_partitions_contributed)
    if kappa < 1:
        raise ValueError(f"max_partitions_contributed must be >= 1, got {kappa}")
    if delta_split not in _SPLITS:
        raise ValueError(f"delta_split must be one of {_SPLITS}, got {delta_split!r}")

    eps_exact = as_fraction(eps)
    delta_exact = as_fraction(dlt)
    partition_epsilon = eps_exact / kappa
    if delta_split == "conservative":
        partition_delta = delta_exact / kappa
    else:
        partition_delta = _composition_delta(delta_exact, kappa)
    return PrivacyParams(
        epsilon=eps,
        delta=dlt,
        max_partitions_contributed=kappa,
        delta_split=delta_split,  # type: ignore[arg-type]
        epsilon_exact=eps_exact,
        delta_exact=delta_exact,
        partition_epsilon=partition_epsilon,
        partition_delta=partition_delta,
    )


def _composition_delta(delta: Fraction, kappa: int) -> Fraction:
    """Largest convenient rational δ' with 1 − (1 − δ')^κ ≤ δ, checked exactly."""
    if kappa == 1 or delta == 0:
        return delta
    estimate = -math.expm1(math.log1p(-float(delta)) / kappa)
    candidate = Fraction(estimate).limit_denominator(2**80)
    # Step down until the exact composition bound holds; one step is almost always enough.
    while 1 - (1 - candidate) ** kappa > delta:
        candidate = candidate * (1 - Fraction(1, 2**40))
    return candidate
