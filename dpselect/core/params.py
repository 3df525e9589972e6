"""Validation of privacy parameters and the per-partition budget.

A user touches at most κ = ``max_partitions_contributed`` partitions. Each partition's
mechanism runs at ε' = ε/κ and δ' chosen so that κ independent (ε', δ') mechanisms compose to
(ε, δ) (docs/privacy/contribution-bounding.md):

* ``delta_split="composition"`` (default): δ' ≈ 1 − (1 − δ)^{1/κ}, the largest δ' allowed by
  the composition theorem for independent mechanisms (Kairouz, Oh, Viswanath, ICML 2015,
  Theorem 3.3 with i = 0), as Google's library does;
* ``delta_split="conservative"``: δ' = δ/κ (basic composition).

δ' is irrational in general: we use a rational δ' just below the true value and prove the
composition bound 1 − (1 − δ')^κ ≤ δ with a certified lower bound on (1 − δ')^κ (binary
powering with every product rounded down), in O(log κ) big-integer products. So validation
takes microseconds for any κ, and validated parameters are cached.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from dpselect.core.exact import power_lower
from dpselect.core.checks import check_choice, check_delta, check_epsilon, check_max_partitions_contributed

__all__ = ["PrivacyParams", "validate_params", "DeltaSplit", "power_lower", "composed_delta_upper",
           "composition_delta"]

DeltaSplit = Literal["composition", "conservative"]
_SPLITS = ("composition", "conservative")
Neighbours = Literal["add_remove", "replace"]
_NEIGHBOURS = ("add_remove", "replace")
# Fractional bits of the certified power bound: its relative error is below 2^-(bits - 2 log κ).
_POWER_BITS = 256


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
    neighbours: Neighbours = "add_remove"

    @property
    def affected_partitions(self) -> int:
        """How many partitions two neighbouring datasets can differ in, by one user each: κ for
        adding or removing a user, 2κ when a user's rows are replaced (bounded DP: the κ old
        partitions lose the user, κ new ones gain them; Desfontaines et al., PoPETs 2022, §5)."""
        return self.max_partitions_contributed * (2 if self.neighbours == "replace" else 1)

    @property
    def neighbour_text(self) -> str:
        if self.neighbours == "replace":
            return "replace all rows of one privacy unit (user) by other rows (bounded DP)"
        return "add or remove all rows of one privacy unit (user)"

    def compose(self, partition_delta: Fraction) -> Fraction:
        """A certified upper bound on the total δ of the affected partitions, each using
        ``partition_delta``: m δ'' (conservative) or 1 − (1 − δ'')^m, m = affected_partitions."""
        return composed_delta_upper(partition_delta, self.affected_partitions, self.delta_split)

    def __repr__(self) -> str:
        return (f"PrivacyParams(epsilon={self.epsilon:g}, delta={self.delta:g}, "
                f"max_partitions_contributed={self.max_partitions_contributed}, "
                f"delta_split={self.delta_split!r}"
                f"{', neighbours=replace' if self.neighbours == 'replace' else ''}; "
                f"per partition epsilon'={float(self.partition_epsilon):.6g}, "
                f"delta'={float(self.partition_delta):.6g})")


def composed_delta_upper(partition_delta: Fraction, kappa: int, split: str) -> Fraction:
    """Upper bound on the δ of κ composed (ε', partition_delta) mechanisms."""
    basic = kappa * partition_delta  # 1 − (1 − x)^κ <= κx: also valid, and tighter in rounding
    if split == "conservative" or partition_delta == 0 or kappa == 1:
        return basic
    return min(basic, 1 - power_lower(1 - partition_delta, kappa, _bits_for(partition_delta)))


def _bits_for(delta: Fraction) -> int:
    """Enough fractional bits that rounding is negligible next to δ itself."""
    magnitude = delta.denominator.bit_length() - delta.numerator.bit_length()  # ≈ log2(1/δ)
    return _POWER_BITS + max(0, magnitude)


# What a huge parameter would have meant, where it has a meaning.
_TOO_LARGE_ADVICE = (": pass a float such as 1e300 instead; every count-based mechanism builds the same table for "
                     "any epsilon / max_partitions_contributed >= 200 (docs/privacy/pi-opt.md), and the Gaussian and "
                     "weighted mechanisms take epsilon <= 50")


def validate_params(
    epsilon: object,
    delta: object,
    max_partitions_contributed: object = 1,
    delta_split: object = "composition",
    neighbours: object = "add_remove",
) -> PrivacyParams:
    """Check (ε, δ, κ, split, neighbours) and derive the exact per-partition budget.

    ``neighbours="replace"`` (bounded DP) runs every partition at ε/(2κ) and the δ split over
    2κ partitions: replacing one user's rows changes up to 2κ counts by one.

    Raises :class:`dpselect.errors.ParameterTypeError` (a TypeError) for a wrong type and
    :class:`dpselect.errors.ParameterError` (a ValueError) for a value out of range, naming the
    parameter (the vocabulary of :mod:`dpselect.core.checks`). ε = 0 and δ = 0 are valid here;
    mechanisms decide what they can do with them (Desfontaines et al., PoPETs 2022, Theorem 2).
    Cached: repeated calls cost a dict lookup."""
    eps, eps_exact = check_epsilon(epsilon, too_large=_TOO_LARGE_ADVICE)
    dlt, delta_exact = check_delta(delta)
    kappa = check_max_partitions_contributed(max_partitions_contributed)
    check_choice(delta_split, name="delta_split", choices=_SPLITS)
    check_choice(neighbours, name="neighbours", choices=_NEIGHBOURS)
    return _validated(eps, dlt, eps_exact, delta_exact, kappa, delta_split, neighbours)


@functools.lru_cache(maxsize=256)
def _validated(eps: float, dlt: float, eps_exact: Fraction, delta_exact: Fraction, kappa: int,
               delta_split: str, neighbours: str) -> PrivacyParams:
    affected = kappa * (2 if neighbours == "replace" else 1)
    partition_epsilon = eps_exact / affected
    if delta_split == "conservative":
        partition_delta = delta_exact / affected
    else:
        partition_delta = composition_delta(delta_exact, affected)
    return PrivacyParams(
        epsilon=eps,
        delta=dlt,
        max_partitions_contributed=kappa,
        delta_split=delta_split,  # type: ignore[arg-type]
        epsilon_exact=eps_exact,
        delta_exact=delta_exact,
        partition_epsilon=partition_epsilon,
        partition_delta=partition_delta,
        neighbours=neighbours,  # type: ignore[arg-type]
    )


def _round_down(value: float, significant_bits: int = 64) -> Fraction:
    """A short dyadic rational <= value (> 0): value's leading ``significant_bits`` bits."""
    shift = significant_bits - math.frexp(value)[1]  # >= significant_bits, as 0 < value < 1
    return Fraction(math.floor(Fraction(value) * 2**shift), 2**shift)


def composition_delta(delta: Fraction, kappa: int) -> Fraction:
    """A rational δ' just below 1 − (1 − δ)^{1/κ} with 1 − (1 − δ')^κ <= δ, proven with
    :func:`power_lower`. Never rounds a positive δ' to 0 (κ = 10^30 gives δ' ≈ δ/κ, not 0)."""
    if kappa == 1 or delta == 0:
        return delta
    estimate = -math.expm1(math.log1p(-float(delta)) / kappa)
    if not estimate > 0:  # float underflow: fall back to basic composition, which always holds
        return delta / kappa
    candidate = _round_down(estimate)
    # Step down until the bound is proven; one step is almost always enough.
    for _ in range(64):
        if 1 - power_lower(1 - candidate, kappa, _bits_for(delta)) <= delta:
            return candidate
        candidate = candidate * (1 - Fraction(1, 2**40))
    return delta / kappa  # basic composition: κ δ' = δ, always valid
