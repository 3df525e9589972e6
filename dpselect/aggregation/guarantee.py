"""The statement of a whole grouped release: its steps and their basic sequential composition
(docs/privacy/aggregate.md, "Composition")."""
from __future__ import annotations

import html
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dpselect.display import html_table, mechanism_of
from dpselect.core.guarantee import delta_upper_float, format_delta, format_upper

__all__ = ["AggregateGuarantee", "Component"]

REFERENCE = "docs/privacy/aggregate.md"
# How the front ends name the steps that are not metrics (dpselect.aggregation.aggregate and
# dpselect.spark build the components).
_SELECTION = "selection of keys"
_BOUNDS = "bounds of "
_CONTRIBUTION = "contribution bounds"  # κ / L∞ chosen privately (dpselect.ingest.auto_bounds)


@dataclass(frozen=True, repr=False)
class Component:
    """One step of the release: what it released, its exact (ε, δ), and its own statement.
    ``repr()`` is one line, rounded for reading; the exact values are ``epsilon_exact`` and
    ``delta_exact``, the full statement ``statement``."""

    what: str
    epsilon_exact: Fraction
    delta_exact: Fraction
    statement: str

    def as_dict(self) -> dict[str, Any]:
        return {"what": self.what, "epsilon": delta_upper_float(self.epsilon_exact),
                "delta": delta_upper_float(self.delta_exact), "statement": self.statement}

    @property
    def kind(self) -> str:
        """The step's kind: "selection", "contribution bounds", "bounds" or "metric" (from its name)."""
        if self.what.startswith(_SELECTION):
            return "selection"
        if self.what.startswith(_CONTRIBUTION):
            return "contribution bounds"
        return "bounds" if self.what.startswith(_BOUNDS) else "metric"

    @property
    def mechanism(self) -> str:
        """The mechanism the statement names, for reading (long fractions rounded)."""
        return mechanism_of(self.statement)

    def __repr__(self) -> str:
        return (f"Component({self.what!r}: ε = {format_upper(self.epsilon_exact)}, "
                f"δ = {format_delta(self.delta_exact)}, {self.mechanism})")


@dataclass(frozen=True, repr=False)
class AggregateGuarantee:
    """(Σ ε_i, Σ δ_i)-DP by basic sequential composition (Dwork and Roth, *The Algorithmic
    Foundations of Differential Privacy*, Theorem 3.16) of the components, each computed from
    the same bounded rows. The totals are exact and never above the request.

    ``str()`` is the full statement (the one in the released frame's metadata); ``repr()`` one
    line, rounded up for reading; ``epsilon_exact`` / ``delta_exact`` the exact totals
    (Fractions), ``components`` each step's."""

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

    def summary(self) -> str:
        """The statement in one line: the totals rounded up for reading, the steps counted."""
        kinds = [c.kind for c in self.components]
        steps = (["private κ/L∞"] if "contribution bounds" in kinds else []) + (
            ["key selection"] if "selection" in kinds else []) + [
            f"{n} {what}{'s' if n > 1 else ''}" for what, n in (("private bound", kinds.count("bounds")),
                                                                ("metric", kinds.count("metric"))) if n]
        tag = "" if self.privacy_guaranteed else " [NOT DP: deterministic test RNG]"
        return (f"(ε = {format_upper(self.epsilon_exact)}, δ = {format_delta(self.delta_exact)})-DP GROUP BY: "
                f"{' + '.join(steps) or 'no step'}, κ = {self.kappa}, L∞ = {self.linf}{tag}")

    def __repr__(self) -> str:
        return f"AggregateGuarantee: {self.summary()} — str() for the statement, .components for each step"

    def _repr_html_(self) -> str:
        """The steps as a table (ε and δ rounded up), the full statement folded below."""
        rows = [[str(i), c.what, format_upper(c.epsilon_exact), format_delta(c.delta_exact),
                 f"<details><summary>{html.escape(c.mechanism)}</summary><small>{html.escape(c.statement)}"
                 "</small></details>"] for i, c in enumerate(self.components, start=1)]
        rows.append(["", "total (basic sequential composition)", format_upper(self.epsilon_exact),
                     format_delta(self.delta_exact), ""])
        head = html.escape(self.summary())
        if not self.privacy_guaranteed:
            head = f'<strong style="color:#b00020">{head}</strong>'
        return (f'<div class="dpselect-guarantee"><p><strong>AggregateGuarantee</strong>: {head}</p>'
                f"{html_table(['#', 'step', 'ε', 'δ', 'mechanism'], rows, raw_columns=[4])}"
                f"<details><summary>statement (str())</summary><p>{html.escape(str(self))}</p></details>"
                "<p><small>Rounded up for reading; exact values: .epsilon_exact, .delta_exact, and each "
                "component's.</small></p></div>")
