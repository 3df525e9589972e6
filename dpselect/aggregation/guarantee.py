"""The statement of a whole grouped release: its steps and their composition
(docs/privacy/aggregate.md, "Composition"): the Gaussian metrics (ρ-zCDP) compose as one group,
converted once to (ε_z, δ_z)-DP, and every step by basic sequential composition."""
from __future__ import annotations

import functools
import html
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dpselect.display import html_table, mechanism_of
from dpselect.core.guarantee import delta_upper_float, format_delta, format_upper
from dpselect.aggregation.accounting import rho_of_dp
from dpselect.aggregation.noise import zcdp_delta

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
    ``delta_exact``, the full statement ``statement``.

    A step with ``rho`` (a metric with discrete Gaussian noise) is ρ-zCDP: it belongs to the
    release's Gaussian group, whose ρ add up and are converted to (ε, δ) once; its
    ``epsilon_exact`` is its share of the group's ε_z and its ``delta_exact`` 0 (the group's δ_z
    is counted once, by :class:`AggregateGuarantee`)."""

    what: str
    epsilon_exact: Fraction
    delta_exact: Fraction
    statement: str
    rho: Fraction | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {"what": self.what, "epsilon": delta_upper_float(self.epsilon_exact),
               "delta": delta_upper_float(self.delta_exact), "statement": self.statement}
        if self.rho is not None:
            out["rho"] = delta_upper_float(self.rho)
        return out

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
        if self.rho is not None:
            return (f"Component({self.what!r}: ρ = {format_upper(self.rho)} (zCDP, of the Gaussian group's "
                    f"ε share {format_upper(self.epsilon_exact)}), {self.mechanism})")
        return (f"Component({self.what!r}: ε = {format_upper(self.epsilon_exact)}, "
                f"δ = {format_delta(self.delta_exact)}, {self.mechanism})")


@dataclass(frozen=True, repr=False)
class AggregateGuarantee:
    """(Σ ε_i + ε_z, Σ δ_i + δ_z)-DP by basic sequential composition (Dwork and Roth, *The
    Algorithmic Foundations of Differential Privacy*, Theorem 3.16) of the (ε, δ) components and
    the Gaussian group, each computed from the same bounded rows. The Gaussian group (the
    components with ``rho``) is Σρ_j-zCDP (Bun and Steinke, TCC 2016, Lemma 2.3), converted once
    at ε_z = the sum of its members' ε shares to δ_z = :func:`zcdp_delta` (Canonne, Kamath,
    Steinke, NeurIPS 2020, Corollary 13; certified in rationals). The totals are exact and never
    above the request. ``rho``: the release's ρ when every step is zCDP (see :attr:`rho`).

    ``str()`` is the full statement (the one in the released frame's metadata); ``repr()`` one
    line, rounded up for reading; ``epsilon_exact`` / ``delta_exact`` the exact totals
    (Fractions), ``components`` each step's."""

    components: tuple[Component, ...]
    requested_epsilon: Fraction
    requested_delta: Fraction
    kappa: int
    linf: int
    privacy_guaranteed: bool = True
    noise_choice: str = ""  # which noise each metric got and why, in one line (from the parameters only)

    def __post_init__(self) -> None:
        if self.epsilon_exact > self.requested_epsilon or self.delta_exact > self.requested_delta:
            raise AssertionError("a grouped release composed to more than its budget")

    @property
    def gaussian_components(self) -> tuple[Component, ...]:
        """The Gaussian group: the steps stated as ρ-zCDP."""
        return tuple(c for c in self.components if c.rho is not None)

    @functools.cached_property
    def gaussian_group(self) -> tuple[Fraction, Fraction, Fraction] | None:
        """(ρ, ε_z, δ_z) of the Gaussian group: ρ = Σρ_j, ε_z = Σ of its members' ε shares, and
        δ_z the certified δ of ρ-zCDP at ε_z; None without Gaussian metrics."""
        group = self.gaussian_components
        if not group:
            return None
        rho = sum((c.rho for c in group if c.rho is not None), Fraction(0))
        eps = sum((c.epsilon_exact for c in group), Fraction(0))
        return rho, eps, zcdp_delta(rho, eps)

    @property
    def epsilon_exact(self) -> Fraction:
        # Every step's ε: the Gaussian members' shares add up to ε_z, the group's conversion ε.
        return sum((c.epsilon_exact for c in self.components), Fraction(0))

    @property
    def delta_exact(self) -> Fraction:
        group = self.gaussian_group
        return sum((c.delta_exact for c in self.components if c.rho is None),
                   Fraction(0) if group is None else group[2])

    @property
    def rho(self) -> Fraction | None:
        """The release's ρ when every step is zCDP: Σρ_j of the Gaussian metrics plus min(ε²/2, ε)
        for each pure ε-DP step (ε-DP implies ε²/2-zCDP: Bun and Steinke, TCC 2016, Proposition 1.4;
        and ε-zCDP, D_α ≤ ε ≤ αε). None when a step is only (ε, δ)-DP with δ > 0 (a key selection)."""
        if any(c.rho is None and c.delta_exact > 0 for c in self.components):
            return None
        return sum((c.rho if c.rho is not None else rho_of_dp(c.epsilon_exact) for c in self.components), Fraction(0))

    def _conversion(self) -> str:
        """How the Gaussian group was converted, in words ('' without one)."""
        group = self.gaussian_group
        if group is None:
            return ""
        rho, eps, delta = group
        n = len(self.gaussian_components)
        return (f"the {n} Gaussian metric(s) compose to {float(rho):.6g}-zCDP (Bun and Steinke, TCC 2016, Lemma "
                f"2.3), converted once to ({float(eps):.6g}, {format_delta(delta)})-DP (Canonne, Kamath, Steinke, "
                "NeurIPS 2020, Corollary 13)")

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
        group = self.gaussian_group
        rho = self.rho
        return {"differentially_private": self.is_dp, "epsilon": self.epsilon, "delta": self.delta,
                "requested_epsilon": float(self.requested_epsilon), "requested_delta": float(self.requested_delta),
                "rho": None if rho is None else delta_upper_float(rho),
                "neighbouring": "add or remove all rows of one privacy unit",
                "max_partitions_contributed": self.kappa, "max_contributions_per_partition": self.linf,
                "composition": "basic sequential composition" + (
                    "; the Gaussian metrics by zCDP composition, converted once" if group else ""),
                "gaussian_group": None if group is None else {
                    "rho": delta_upper_float(group[0]), "epsilon": delta_upper_float(group[1]),
                    "delta": delta_upper_float(group[2]), "conversion": self._conversion()},
                "noise_choice": self.noise_choice, "components": [c.as_dict() for c in self.components],
                "statement": str(self), "reference": REFERENCE}

    def __str__(self) -> str:
        head = "" if self.privacy_guaranteed else (
            "NOT DP: made with the deterministic test RNG. Were it drawn with the secure generator, ")
        steps = "; ".join(f"({i}) {c.what}: " + (f"{float(c.rho):.6g}-zCDP" if c.rho is not None else
                                                  f"({float(c.epsilon_exact):.6g}, {format_delta(c.delta_exact)})")
                          for i, c in enumerate(self.components, start=1))
        conversion = self._conversion()
        if conversion:
            steps += f"; {conversion}"
        if self.rho is not None:
            steps += (f"; every step being zCDP (a pure epsilon-DP step as epsilon²/2-zCDP), the release is also "
                      f"{float(self.rho):.6g}-zCDP")
        return (f"{head}this grouped release (keys and every metric) is ({self.epsilon:.6g}, "
                f"{format_delta(self.delta_exact)})-differentially private (computational, ChaCha20 CSPRNG) for "
                "neighbouring datasets that add or remove all rows of one privacy unit (user): dpselect bounded "
                f"each user to {self.kappa} partition(s) and {self.linf} row(s) per partition (uniform choices), "
                f"and the steps compose by basic sequential composition: {steps}. "
                f"{self.noise_choice + ' ' if self.noise_choice else ''}See {REFERENCE}.")

    def summary(self) -> str:
        """The statement in one line: the totals rounded up for reading, the steps counted."""
        kinds = [c.kind for c in self.components]
        steps = (["private κ/L∞"] if "contribution bounds" in kinds else []) + (
            ["key selection"] if "selection" in kinds else []) + [
            f"{n} {what}{'s' if n > 1 else ''}" for what, n in (("private bound", kinds.count("bounds")),
                                                                ("metric", kinds.count("metric"))) if n]
        tag = "" if self.privacy_guaranteed else " [NOT DP: deterministic test RNG]"
        group = self.gaussian_group
        # The Gaussian metrics' ρ and the ε at which it was converted once (their δ is in the total).
        gauss = "" if group is None else f", Gaussian ρ = {format_upper(group[0])}"
        return (f"(ε = {format_upper(self.epsilon_exact)}, δ = {format_delta(self.delta_exact)})-DP GROUP BY: "
                f"{' + '.join(steps) or 'no step'}, κ = {self.kappa}, L∞ = {self.linf}{gauss}{tag}")

    def __repr__(self) -> str:
        return f"AggregateGuarantee: {self.summary()} — str() for the statement, .components for each step"

    def _repr_html_(self) -> str:
        """The steps as a table (ε and δ rounded up), the full statement folded below."""
        rows = [[str(i), c.what, format_upper(c.epsilon_exact),
                 format_delta(c.delta_exact) if c.rho is None else f"ρ = {format_upper(c.rho)} (zCDP)",
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
