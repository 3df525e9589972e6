"""The statement of a whole grouped release: its steps and their basic sequential composition
(docs/privacy/aggregate.md, "Composition")."""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dpselect.guarantee import delta_upper_float, format_delta

__all__ = ["AggregateGuarantee", "Component"]

REFERENCE = "docs/privacy/aggregate.md"


@dataclass(frozen=True)
class Component:
    """One step of the release: what it released, its exact (ε, δ), and its own statement."""

    what: str
    epsilon_exact: Fraction
    delta_exact: Fraction
    statement: str

    def as_dict(self) -> dict[str, Any]:
        return {"what": self.what, "epsilon": delta_upper_float(self.epsilon_exact),
                "delta": delta_upper_float(self.delta_exact), "statement": self.statement}


@dataclass(frozen=True)
class AggregateGuarantee:
    """(Σ ε_i, Σ δ_i)-DP by basic sequential composition (Dwork and Roth, *The Algorithmic
    Foundations of Differential Privacy*, Theorem 3.16) of the components, each computed from
    the same bounded rows. The totals are exact and never above the request."""

    components: tuple[Component, ...]
    requested_epsilon: Fraction
    requested_delta: Fraction
    kappa: int
    linf: int
    privacy_guaranteed: bool = True

    def __post_init__(self) -> None:
        if self.epsilon_exact > self.requested_epsilon or self.delta_exact > self.requested_delta:
            raise AssertionError("a grouped release composed to more than its budget")

    @property
    def epsilon_exact(self) -> Fraction:
        return sum((c.epsilon_exact for c in self.components), Fraction(0))

    @property
    def delta_exact(self) -> Fraction:
        return sum((c.delta_exact for c in self.components), Fraction(0))

    @property
    def epsilon(self) -> float:
        """ε rounded up to a float."""
        return delta_upper_float(self.epsilon_exact)

    @property
    def delta(self) -> float:
        """δ rounded up to a float."""
        return delta_upper_float(self.delta_exact)

    @property
    def is_dp(self) -> bool:
        return self.privacy_guaranteed

    def as_dict(self) -> dict[str, Any]:
        """For a JSON sidecar."""
        return {"differentially_private": self.is_dp, "epsilon": self.epsilon, "delta": self.delta,
                "requested_epsilon": float(self.requested_epsilon), "requested_delta": float(self.requested_delta),
                "neighbouring": "add or remove all rows of one privacy unit",
                "max_partitions_contributed": self.kappa, "max_contributions_per_partition": self.linf,
                "composition": "basic sequential composition", "components": [c.as_dict() for c in self.components],
                "statement": str(self), "reference": REFERENCE}

    def __str__(self) -> str:
        head = "" if self.privacy_guaranteed else (
            "NOT DP: made with the deterministic test RNG. Were it drawn with the secure generator, ")
        steps = "; ".join(f"({i}) {c.what}: ({float(c.epsilon_exact):.6g}, {format_delta(c.delta_exact)})"
                          for i, c in enumerate(self.components, start=1))
        return (f"{head}this grouped release (keys and every metric) is ({self.epsilon:.6g}, "
                f"{format_delta(self.delta_exact)})-differentially private (computational, ChaCha20 CSPRNG) for "
                "neighbouring datasets that add or remove all rows of one privacy unit (user): dpselect bounded "
                f"each user to {self.kappa} partition(s) and {self.linf} row(s) per partition (uniform choices), "
                f"and the steps compose by basic sequential composition: {steps}. See {REFERENCE}.")
