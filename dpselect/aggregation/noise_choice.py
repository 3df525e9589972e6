"""Which noise each metric of a grouped release gets, and what it spends (docs/aggregate.md,
"Noise"; docs/privacy/aggregate.md, "Composition").

Everything here is a function of the public parameters — ε, δ, κ, L∞, the metrics asked for,
their weights — never of the data, so the choice can be made (and checked) before any data is
read. Two laws are available for every metric: exact discrete Laplace noise, pure ε-DP
(:class:`~dpselect.aggregation.noise.DiscreteLaplaceNoise`), and exact discrete Gaussian noise,
ρ-zCDP (:class:`~dpselect.aggregation.noise.DiscreteGaussianNoise`). The Gaussian metrics of a
release form ONE group: their ρ add up (Bun and Steinke, TCC 2016, Lemma 2.3) and the total is
converted once to (ε_z, δ_z)-DP (Canonne, Kamath, Steinke, NeurIPS 2020, Corollary 13).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from dpselect.aggregation.metrics import Metric
from dpselect.aggregation.noise import DiscreteGaussianNoise, DiscreteLaplaceNoise, rho_for_epsilon_delta
from dpselect.aggregation.quantile_tree import plan_leaves, tree_noise_sds

__all__ = ["NOISE_CHOICES", "GaussianGroup", "MetricNoise", "MeanSource", "choose_noise", "gaussian_rho",
           "mean_sources", "noise_sds"]

NOISE_CHOICES = ("auto", "laplace", "gaussian")


@dataclass(frozen=True)
class MeanSource:
    """Where a mean takes what other metrics release: ``count`` (a ``count()`` metric's noisy
    row count, reused as the mean's divisor) and ``total`` (a ``sum`` of the same column: with a
    count too, the mean is their quotient, pure post-processing, and spends nothing)."""

    count: str | None
    total: str | None

    @property
    def derived(self) -> bool:
        return self.count is not None and self.total is not None


def mean_sources(metrics: Mapping[str, Metric]) -> dict[str, MeanSource]:
    """For each mean: the first ``count()`` metric and the first ``sum`` of its column, if asked.
    The kept rows, and so the row count and a column's sum, are the same for every metric (one
    bounding), so a released count and sum are exactly what the mean would spend budget on."""
    count = next((n for n, m in metrics.items() if m.kind == "count"), None)
    out = {}
    for name, m in metrics.items():
        if m.kind == "mean":
            total = next((n for n, s in metrics.items() if s.kind == "sum" and s.column == m.column), None)
            out[name] = MeanSource(count, total if count is not None else None)
    return out


@dataclass(frozen=True)
class GaussianGroup:
    """The Gaussian metrics' part of the budget: ε_z (the sum of their ε shares), δ_z, and
    ρ_z = the largest ρ whose CKS conversion certifies (ε_z, δ_z) (:func:`rho_for_epsilon_delta`)."""

    epsilon: Fraction
    delta: Fraction
    rho: Fraction


@dataclass(frozen=True)
class MetricNoise:
    """One metric's noise at a κ and L∞: its kind ("laplace", "gaussian", or "none" for a mean
    computed from a released sum and count), its ε share, and its ρ share (Gaussian only).
    :meth:`make` builds the noise for a sensitivity (known once the grid is: after private
    bounds), on a fraction ``part`` of the share (a mean splits its share in two)."""

    kind: str
    epsilon: Fraction
    rho: Fraction | None
    kappa: int
    linf: int

    def make(self, sensitivity: int, part: Fraction = Fraction(1)) -> DiscreteLaplaceNoise | DiscreteGaussianNoise:
        if self.kind == "gaussian":
            assert self.rho is not None
            return DiscreteGaussianNoise.for_rho(self.rho * part, sensitivity=sensitivity,
                                                 max_partitions_contributed=self.kappa)
        assert self.kind == "laplace"
        return DiscreteLaplaceNoise.for_epsilon(self.epsilon * part, sensitivity=sensitivity,
                                                max_partitions_contributed=self.kappa)


def gaussian_rho(epsilon: Fraction, delta: Fraction) -> Fraction | None:
    """ρ_z for (ε_z, δ_z), or None where no ρ > 0 certifies it (δ_z = 0, or far too small)."""
    if delta <= 0 or epsilon <= 0:
        return None
    try:
        return rho_for_epsilon_delta(epsilon, delta)
    except ValueError:
        return None


def _sensitivity(metric: Metric, linf: int) -> int:
    """The sensitivity the choice compares at: 1 for a user count, L∞ for a row count, L∞ grid
    units for a sum or mean (the grid is public but may be known only after private bounds; the
    ratio of the two laws' spreads hardly depends on it)."""
    if metric.kind == "count_distinct" and metric.max_values_per_unit is not None:
        return min(metric.max_values_per_unit, linf)
    return 1 if metric.kind == "count_distinct_units" else linf


def noise_sds(metric: Metric, epsilon: Fraction, rho: Fraction | None, kappa: int, linf: int
              ) -> tuple[float, float]:
    """(Laplace sd, Gaussian sd) of one metric's noise: discrete Laplace with ε share ``epsilon``
    (its exact standard deviation), discrete Gaussian with ρ share ``rho`` (σ, an upper bound on
    its standard deviation); inf where a law cannot be used."""
    if metric.kind == "quantile":  # the error of a noisy prefix count of each law's tree
        return tree_noise_sds(epsilon, rho, kappa, linf, plan_leaves(metric.bounds))
    delta1 = _sensitivity(metric, linf)
    try:
        lap = math.sqrt(DiscreteLaplaceNoise.for_epsilon(epsilon, sensitivity=delta1,
                                                         max_partitions_contributed=kappa).variance())
    except (ValueError, OverflowError, ZeroDivisionError):
        lap = math.inf
    if rho is None:
        return lap, math.inf
    try:
        gauss = math.sqrt(float(DiscreteGaussianNoise.for_rho(rho, sensitivity=delta1,
                                                              max_partitions_contributed=kappa).sigma2))
    except (ValueError, OverflowError):
        gauss = math.inf
    return lap, gauss


def _group_delta(delta: Fraction, selection_delta_free: bool, has_selection: bool) -> Fraction:
    """δ_z: half of δ when the selection shares it, all of it otherwise."""
    if not selection_delta_free:
        return Fraction(0)
    return delta / 2 if has_selection else delta


def choose_noise(metrics: Mapping[str, Metric], epsilons: Mapping[str, Fraction], noise: str,
                 delta_available: Fraction, has_selection: bool, kappa: int, linf: int
                 ) -> tuple[dict[str, str], GaussianGroup | None, str]:
    """Each metric's noise, the Gaussian group's budget (None without Gaussian metrics) and one
    line saying why.

    ``epsilons``: the ε share of every metric that spends budget (a derived mean is absent);
    ``delta_available``: the δ the selection and the Gaussian group may share (all of δ, or
    what a strategy object left); ``has_selection``: whether keys are selected.

    The rule for ``noise="auto"`` (a metric's own ``noise`` always wins): the Gaussian group is
    the metrics asked to be Gaussian plus the k free metrics of smallest weight, for the k
    that minimises the sum over metrics of (noise sd / its sd under Laplace)², among the k for
    which every free metric of the group has a smaller sd than under Laplace. Why this family
    suffices: a metric's Laplace sd over its Gaussian sd is 2·√(κρ_i)/ε_i = 2√(κρ_z/ε_z²)·√(ε_z/ε_i)
    (continuous approximation, any sensitivity), larger for a smaller share, and a larger group
    has a larger ε_z and ρ_z/ε_z² (ρ grows faster than linearly in ε at fixed δ), so adding a
    metric helps the others. With equal weights the ratio is the same for every metric, and the
    choice is all Gaussian or all Laplace."""
    if noise not in NOISE_CHOICES:
        raise ValueError(f"noise must be 'auto', 'laplace' or 'gaussian', got {noise!r}")
    spenders = [n for n in metrics if n in epsilons]
    wanted = {n: metrics[n].noise or (noise if noise != "auto" else None) for n in spenders}
    forced = [n for n in spenders if wanted[n] == "gaussian"]
    free = sorted((n for n in spenders if wanted[n] is None), key=lambda n: (epsilons[n], spenders.index(n)))
    delta_z = _group_delta(delta_available, delta_available > 0, has_selection)
    if forced and delta_z == 0:
        who = "noise='gaussian'" if noise == "gaussian" else f"metric {forced[0]!r} asks for noise='gaussian'"
        raise ValueError(f"{who}, but delta = 0 leaves none for it: Gaussian noise is zCDP, and its (epsilon, "
                         "delta) statement needs delta > 0; use delta > 0, or noise='laplace' (pure epsilon-DP)")

    def group_of(members: list[str]) -> GaussianGroup | None:
        if not members:
            return None
        eps_z = sum((epsilons[n] for n in members), Fraction(0))
        rho = gaussian_rho(eps_z, delta_z)
        return None if rho is None else GaussianGroup(eps_z, delta_z, rho)

    def rho_share(group: GaussianGroup, name: str) -> Fraction:
        return group.rho * epsilons[name] / group.epsilon

    best: tuple[float, list[str], GaussianGroup | None] | None = None
    for k in range(len(free) + 1):
        members = forced + free[:k]
        group = group_of(members)
        if members and group is None:
            if forced and k == 0:
                raise ValueError(f"delta = {float(delta_z):.3g} for the Gaussian metrics is too small for any "
                                 "rho to certify it; raise delta, or use noise='laplace'")
            continue
        cost, ok = 0.0, True
        for n in spenders:
            if n not in members:
                cost += 1.0
                continue
            assert group is not None
            lap, gauss = noise_sds(metrics[n], epsilons[n], rho_share(group, n), kappa, linf)
            if n in free[:k] and not gauss < lap:
                ok = False
            if math.isfinite(lap) and lap > 0:
                ratio = gauss / lap
                cost += ratio * ratio  # a product overflows to inf (the worst cost); ** would raise
        if ok and (best is None or cost < best[0]):
            best = (cost, members, group)
    assert best is not None  # k = 0 always qualifies
    _, members, group = best
    kinds = {n: ("gaussian" if n in members else "laplace") for n in spenders}
    overrides = any(metrics[n].noise is not None for n in spenders)
    return kinds, group, _reason(noise, overrides, kinds, free, members, delta_z)


def _reason(noise: str, overrides: bool, kinds: Mapping[str, str], free: list[str], members: list[str],
            delta_z: Fraction) -> str:
    gaussian = [n for n, k in kinds.items() if k == "gaussian"]
    laplace = [n for n, k in kinds.items() if k == "laplace"]
    if noise != "auto":
        head = f"noise={noise!r} asked" + (", and the metrics' own noise= kept" if overrides else "")
    elif not free:
        head = "each metric's noise as it asked"
    elif delta_z == 0:
        head = "noise='auto': Laplace for every metric, as delta = 0 leaves none for Gaussian noise (zCDP)"
    elif all(n in members for n in free):
        head = "noise='auto': Gaussian noise has the smaller standard deviation for every metric at these parameters"
    elif not any(n in members for n in free):
        head = "noise='auto': Laplace noise has the smaller standard deviation for every metric at these parameters"
    else:
        head = ("noise='auto': Gaussian noise for the metrics where it has the smaller standard deviation at "
                "these parameters")
    parts = []
    if gaussian:
        parts.append(f"Gaussian: {', '.join(gaussian)}")
    if laplace:
        parts.append(f"Laplace: {', '.join(laplace)}")
    return f"{head} ({'; '.join(parts)})." if parts else f"{head}."
