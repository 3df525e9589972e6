"""Policy Laplace and policy Gaussian partition selection (Gopi, Gulhane, Kulkarni, Shen,
Shokouhi, Yekhanin, "Differentially private set union", ICML 2020, §4–5): a sequential
*reference implementation*; docs/privacy/weighted.md.

Users are visited one by one in a uniformly random order (drawn with the package CSPRNG);
each keeps at most κ of their partitions, chosen uniformly, and adds weight only to partitions
still below a cutoff Γ = ρ + α·(noise scale), filling their gaps: water-filling under an L1
budget of 1 (Laplace) or the gap vector scaled to L2 norm ≤ 1 (Gaussian). Partitions far above
the threshold stop absorbing weight, which goes to those that still need it. Then each
partition is released iff its weight plus Laplace (scale 1/ε) or Gaussian (σ for sensitivity
1 at (ε, δ/2)) noise exceeds the same ρ as the weighted mechanisms.

Not certified: the privacy argument of Gopi et al. rests on the updates being contractive in
exact arithmetic, and here they are computed in floating point (the decisions themselves are
exact draws, :mod:`dpselect.mechanisms.tail_draws`). The guarantee says so; for a certified
parallel mechanism use weighted Gaussian or DP-SIPS.
"""
from __future__ import annotations

import math
from numbers import Real
from typing import Any, Callable, cast

import numpy as np
import numpy.typing as npt

from dpselect.core.guarantee import PrivacyGuarantee
from dpselect.mechanisms.tail_draws import gaussian_tail_draws, laplace_tail_draws
from dpselect.mechanisms.weighted import (WEIGHT_BITS, UserSets, WeightedGaussian, WeightedLaplace, check_row_params,
                                          RowMechanismBase)
from dpselect.core.params import PrivacyParams
from dpselect.rng import resolve_rng

__all__ = ["PolicyLaplace", "PolicyGaussian"]

_ONE = 1 << WEIGHT_BITS


def _permutation(n: int, rng: object | None) -> npt.NDArray[np.int64]:
    """A uniformly random permutation of range(n): Fisher–Yates on exact uniform integers."""
    generator = resolve_rng(rng)
    order = np.arange(n, dtype=np.int64)
    for i in range(n - 1, 0, -1):
        j = generator.uniform_below(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def _user_choices(sets: UserSets, kappa: int, rng: object | None) -> list[npt.NDArray[np.uint32]]:
    """Each user's ≤ κ partitions, a uniform subset of their distinct ones."""
    generator = resolve_rng(rng)
    out = []
    start = 0
    for end in sets.ends.tolist():
        items = sets.partitions[start:end]
        start = end
        if items.size > kappa:
            picks = items.copy()
            for i in range(kappa):  # partial Fisher–Yates
                j = i + generator.uniform_below(picks.size - i)
                picks[i], picks[j] = picks[j], picks[i]
            items = picks[:kappa]
        out.append(items)
    return out


def _check_alpha(alpha: object) -> float:
    """α > 0, finite: the cutoff Γ = ρ + α·(noise scale) lies above the threshold ρ (Gopi et al.,
    §4–5); at α <= 0 the water-filling would cap every partition's weight at or below ρ."""
    if isinstance(alpha, bool) or not isinstance(alpha, Real):
        raise TypeError(f"alpha must be a real number > 0, got {type(alpha).__name__}")
    if not (math.isfinite(alpha) and cast(float, alpha) > 0):  # a Real compares as a float (numbers.Real is untyped)
        raise ValueError(f"alpha must be finite and > 0 (the cutoff is the threshold plus alpha noise scales), "
                         f"got {alpha!r}")
    return float(alpha)


class _Policy(RowMechanismBase):
    alpha: float
    _base: WeightedGaussian | WeightedLaplace
    _cutoff: float  # Γ: no partition's weight is raised above it
    # Each subclass's water-filling step (the gaps a user fills) and its exact draws against the threshold.
    _update: Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]]
    _draws: Callable[[npt.NDArray[np.int64], object | None], npt.NDArray[np.bool_]]

    @property
    def base(self) -> WeightedGaussian | WeightedLaplace:
        """The weighted mechanism whose threshold ρ and noise this one uses."""
        return self._base

    def _guarantee_text(self, mechanism: str) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            mechanism=mechanism, epsilon=float(self.params.epsilon_exact), delta_exact=self._base.certified_delta,
            max_partitions_contributed=self.params.max_partitions_contributed,
            reference=("Gopi, Gulhane, Kulkarni, Shen, Shokouhi, Yekhanin, \"Differentially private set union\", "
                       "ICML 2020, §4-5 (policy mechanisms); docs/privacy/weighted.md"),
            requested_delta=self.params.delta, neighbours=self.params.neighbour_text, certified=False,
            contribution_bound="enforced",
            uncertified_reason="a reference implementation: its sequential updates are computed in floating "
                               "point, so the contraction argument of the proof is not certified on the values "
                               "that run")

    def _histogram(self, sets: UserSets, cutoff: float, rng: object | None) -> npt.NDArray[np.float64]:
        kappa = self.params.max_partitions_contributed
        choices = _user_choices(sets, kappa, rng)
        histogram = np.zeros(sets.n_partitions, dtype=np.float64)
        for u in _permutation(len(choices), rng):
            items = choices[u]
            if items.size == 0:
                continue
            gaps = cutoff - histogram[items]
            open_ = gaps > 0
            if not open_.any():
                continue
            histogram[items[open_]] += self._update(gaps[open_])
        return histogram

    def _built_on(self, base: type[WeightedGaussian] | type[WeightedLaplace], params: PrivacyParams) -> Any:
        """The weighted mechanism whose threshold and noise this one uses; its refusals say so."""
        try:
            return base(params)
        except ValueError as err:
            raise ValueError(f"{self.name} uses the threshold and noise of {base.name}: {err}") from None

    def select_sets(self, sets: UserSets, rng: object | None = None) -> npt.NDArray[np.bool_]:
        histogram = self._histogram(sets, self._cutoff, rng)
        keep = np.zeros(sets.n_partitions, dtype=bool)
        present = np.flatnonzero(histogram > 0)
        units = np.floor(histogram[present] * _ONE).astype(np.int64)
        keep[present] = self._draws(self._base.rho_units - units, rng)
        return keep


class PolicyLaplace(_Policy):
    """Policy Laplace (ℓ1 water-filling), cutoff Γ = ρ + α/ε; a reference implementation."""

    name = "policy_laplace"
    _base: WeightedLaplace

    def __init__(self, params: PrivacyParams, alpha: float = 3.0) -> None:
        check_row_params(params)  # before anything is calibrated, as is alpha
        self.alpha = _check_alpha(alpha)
        self._base = self._built_on(WeightedLaplace, params)
        self.params = params
        self._cutoff = self._base.threshold + self.alpha / params.epsilon
        self.certified_delta = self._base.certified_delta

    @staticmethod
    def _update(gaps: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """u = min(gap, λ) with Σ u = min(1, Σ gap): water-filling."""
        if gaps.sum() <= 1:
            return gaps
        ordered = np.sort(gaps)
        remaining, level = 1.0, 0.0
        for i, g in enumerate(ordered):
            share = remaining / (ordered.size - i)
            if g >= share:
                level = share
                break
            remaining -= g
        else:
            level = ordered[-1]
        return np.minimum(gaps, level)

    def _draws(self, distance: npt.NDArray[np.int64], rng: object | None) -> npt.NDArray[np.bool_]:
        return laplace_tail_draws(distance, WEIGHT_BITS, self.params.epsilon_exact, rng)

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return self._guarantee_text(f"policy Laplace partition selection (alpha {self.alpha:g})")

    def __repr__(self) -> str:
        return f"PolicyLaplace({self.params!r}, alpha={self.alpha:g}) [reference implementation]"


class PolicyGaussian(_Policy):
    """Policy Gaussian (ℓ2 scaling of the gap vector), cutoff Γ = ρ + α σ; a reference
    implementation."""

    name = "policy_gaussian"
    _base: WeightedGaussian

    def __init__(self, params: PrivacyParams, alpha: float = 3.0) -> None:
        check_row_params(params)  # before σ is calibrated, as is alpha
        self.alpha = _check_alpha(alpha)
        self._base = self._built_on(WeightedGaussian, params)
        self.params = params
        self._cutoff = self._base.threshold + self.alpha * float(self._base.sigma)
        self.certified_delta = self._base.certified_delta

    @staticmethod
    def _update(gaps: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        norm = math.sqrt(float(np.dot(gaps, gaps)))
        return gaps * (min(1.0, norm) / norm)

    def _draws(self, distance: npt.NDArray[np.int64], rng: object | None) -> npt.NDArray[np.bool_]:
        return gaussian_tail_draws(distance, WEIGHT_BITS, self._base.sigma, rng)

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return self._guarantee_text(f"policy Gaussian partition selection (alpha {self.alpha:g})")

    def __repr__(self) -> str:
        return f"PolicyGaussian({self.params!r}, alpha={self.alpha:g}) [reference implementation]"

