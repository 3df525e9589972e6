"""What a grouped release will spend, step by step, from its plan alone: the statement its
budget is charged with before any data is read (docs/privacy/zcdp.md, "A budget stated in ρ").

A budget in (ε, δ) is charged the release's (ε, δ), as asked. A budget stated in ρ is charged
each step's own cost, so that its pure steps cost Σ min(ε_i²/2, ε_i) rather than (Σ ε_i)²/2: the selection
(an (ε, δ)-DP step) min(ε_s²/2, ε_s) and its δ; private bounds and discrete Laplace metrics (pure ε-DP)
min(ε_i²/2, ε_i) each; the Gaussian metrics their planned ρ, which add up to the group's ρ_z. Each is an
upper bound on what the release states for that step (the mechanisms are built at most at their
shares, every rounding toward privacy), and all of it depends on the parameters only.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from dpselect.aggregation.plan import AggregatePlan

__all__ = ["PlannedRelease", "PlannedStep", "planned_release"]


@dataclass(frozen=True)
class PlannedStep:
    """One step's share: ``rho`` for a Gaussian metric (ρ-zCDP; ``epsilon_exact`` is then its
    share of the group's ε), else the (``epsilon_exact``, ``delta_exact``) of an (ε, δ)-DP step."""

    what: str
    epsilon_exact: Fraction
    delta_exact: Fraction
    rho: Fraction | None = None


@dataclass(frozen=True)
class PlannedRelease:
    """The release's request (``epsilon_exact``, ``delta_exact``) and its steps. ``components``
    is empty when κ or L∞ is chosen privately at release: the noise of each metric (and so what
    each step costs in ρ) is then chosen after the charge, and a budget stated in ρ is charged
    the whole release as one (ε, δ)-DP step, ε²/2 and δ."""

    epsilon_exact: Fraction
    delta_exact: Fraction
    components: tuple[PlannedStep, ...]


def planned_release(plan: AggregatePlan) -> PlannedRelease:
    """The steps of ``plan`` and what each spends (:class:`PlannedRelease`)."""
    if plan.auto_kappa or plan.auto_linf:
        return PlannedRelease(plan.epsilon, plan.delta, ())
    steps = []
    for step, (eps, dlt) in plan.shares.items():
        if plan.noises.get(step) == "gaussian":
            group = plan.gaussian
            assert group is not None and dlt == 0
            # The metric's ρ share, as plan.metric_noise gives it: the shares add up to ρ_z exactly.
            steps.append(PlannedStep(step, eps, Fraction(0), group.rho * eps / group.epsilon))
        else:
            steps.append(PlannedStep(step, eps, dlt))
    return PlannedRelease(plan.epsilon, plan.delta, tuple(steps))
