"""Weighted partition selection on (user, partition) rows: weighted Gaussian and weighted Laplace
(Gopi, Gulhane, Kulkarni, Shen, Shokouhi, Yekhanin, "Differentially private set union", ICML
2020, Theorem 5.1) and DP-SIPS (Swanberg, Desfontaines, Haney, "DP-SIPS: a simpler, more
scalable mechanism for differentially private partition selection", 2023);
docs/privacy/weighted.md.

Each user keeps at most κ of their distinct partitions, chosen uniformly; a user who kept m
spreads a weight of w_m over each of them, w_m = ⌊2^32 / √m⌋ / 2^32 (Gaussian: the user's
vector has L2 norm ≤ 1) or ⌊2^32 / m⌋ / 2^32 (Laplace: L1 norm ≤ 1). A partition is released
iff its weighted count H plus noise exceeds ρ. Unlike count-based mechanisms, a user with few
partitions gives each of them more weight, so partitions of such users need fewer users.

Privacy (D' = D plus one user who kept m partitions): on the partitions present in both, the
weighted histograms differ by a vector of norm ≤ 1, so the Gaussian mechanism (σ calibrated by
the analytic Gaussian bound for sensitivity 1) is (ε, δ_noise)-DP, or the Laplace one ε-DP;
each of the ≤ m partitions only D' has is released with probability P[w_m + Z > ρ] ≤ δ_p(m),
where (1 − δ_p(m))^m ≥ 1 − δ_threshold, and ρ = max over m = 1..κ of the smallest value that
achieves it. Thresholding is post-processing. The decisions are exact Bernoulli draws on the
tail probabilities (:mod:`dpselect.mechanisms.tail_draws`).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from numbers import Real
from statistics import NormalDist
from typing import Callable, cast

import numpy as np
import numpy.typing as npt

from dpselect import _weighted
from dpselect.core.exact import exp_lower, sqrt_bounds
from dpselect.core.guarantee import PrivacyGuarantee
from dpselect.core.limits import MAX_WEIGHTED_THRESHOLD, epsilon_too_small, log_inverse
from dpselect.mechanisms.base import BuiltInMechanism
from dpselect.mechanisms.gaussian import (MAX_GAUSSIAN_EPSILON, agm_delta_upper, certified_sigma, gaussian_threshold,
                                          google_sigma)
from dpselect.mechanisms.protocols import RowMechanism
from dpselect.mechanisms.tail_draws import gaussian_tail_draws, laplace_tail_draws
from dpselect.core.params import PrivacyParams, composition_delta
from dpselect.rng import resolve_rng

__all__ = ["UserSets", "WeightedGaussian", "WeightedLaplace", "DPSIPS", "GOPI", "SWANBERG", "MAX_KAPPA", "MAX_EPSILON"]

GOPI = ("Gopi, Gulhane, Kulkarni, Shen, Shokouhi, Yekhanin, \"Differentially private set union\", "
        "ICML 2020, Theorem 5.1")
SWANBERG = ("Swanberg, Desfontaines, Haney, \"DP-SIPS: a simpler, more scalable mechanism for "
            "differentially private partition selection\", 2023")
WEIGHT_BITS = 32
_ONE = 1 << WEIGHT_BITS
# Largest κ of the weighted mechanisms: certifying ρ costs about 10 ms per set size (minutes here).
MAX_KAPPA = 1 << 16
# Largest ε of the weighted mechanisms (as for Gaussian thresholding).
MAX_EPSILON = MAX_GAUSSIAN_EPSILON


@dataclass
class UserSets:
    """Each user's distinct partition codes, grouped: user u's are ``partitions[start:ends[u]]``
    (start the previous end). Not private: the input of a mechanism."""

    ends: npt.NDArray[np.uintp]
    partitions: npt.NDArray[np.uint32]
    n_partitions: int

    @classmethod
    def from_codes(cls, users: npt.ArrayLike, partitions: npt.ArrayLike, n_partitions: int | None = None) -> UserSets:
        """From two integer code arrays of equal length (one row per contribution)."""
        from dpselect import _count

        u = np.ascontiguousarray(users, dtype=np.uint32)
        p = np.ascontiguousarray(partitions, dtype=np.uint32)
        if u.shape != p.shape or u.ndim != 1:
            raise ValueError("users and partitions must be 1-D arrays of the same length")
        n = int(p.max()) + 1 if n_partitions is None and p.size else (n_partitions or 0)
        counter = _count.PairCounter(u.size)
        counter.feed(u, p)
        ends, grouped = counter.group(n)
        return cls(ends, grouped, n)

    def __repr__(self) -> str:
        return f"UserSets({self.ends.size} users, {self.partitions.size} distinct pairs, {self.n_partitions} partitions)"


@functools.lru_cache(maxsize=64)
def set_weights(kappa: int, norm: str) -> npt.NDArray[np.int64]:
    """w[m] in units of 2^-32 for m = 0..κ: ⌊2^32/√m⌋ (L2) or ⌊2^32/m⌋ (L1); never above.
    Every mechanism calls it before certifying its threshold, one exact bound per m = 1..κ (about
    10 ms each): κ above MAX_KAPPA is refused here, at once, rather than after hours."""
    if kappa > MAX_KAPPA:  # the mechanisms check first (_check_kappa); a direct call is refused too
        raise ValueError(f"weighted partition selection supports max_partitions_contributed up to {MAX_KAPPA}, "
                         f"got {kappa}")
    w = [0] + [math.isqrt((_ONE * _ONE) // m) if norm == "l2" else _ONE // m for m in range(1, kappa + 1)]
    out = np.array(w, dtype=np.int64)
    out.setflags(write=False)
    return out


def weighted_histogram(sets: UserSets, kappa: int, weights: npt.NDArray[np.int64], excluded: npt.NDArray[np.bool_] | None,
               rng: object | None) -> npt.NDArray[np.int64]:
    generator = resolve_rng(rng)
    generator.announce()
    histogram = np.zeros(sets.n_partitions, dtype=np.int64)
    _weighted.weighted_round(sets.ends, sets.partitions, excluded, kappa, weights, histogram, generator.test_state)
    return histogram


class RowMechanismBase(BuiltInMechanism, RowMechanism):
    """What every row mechanism shares: parameters, guarantee plumbing, the entry point."""

    releases_counts = False
    certified_delta: Fraction

    def _guarantee(self, mechanism: str, reference: str) -> PrivacyGuarantee:
        p = self.params
        return PrivacyGuarantee(mechanism=mechanism, epsilon=float(p.epsilon_exact), delta_exact=self.certified_delta,
                                max_partitions_contributed=p.max_partitions_contributed, reference=reference,
                                requested_delta=p.delta, neighbours=p.neighbour_text,
                                contribution_bound="enforced",  # every user's set is bounded inside
                                certificate="with rational bounds on the noise's delta and the thresholds' tails; "
                                            "every decision is an exact draw on its tail probability")

    def select_rows(self, users: npt.ArrayLike, partitions: npt.ArrayLike, n_partitions: int | None = None,
                    rng: object | None = None) -> npt.NDArray[np.bool_]:
        """keep[x] for every partition code x, from one (user code, partition code) per row."""
        return self.select_sets(UserSets.from_codes(users, partitions, n_partitions), rng=rng)


def _check_epsilon(params: PrivacyParams) -> None:
    """ε in (0, MAX_EPSILON]: the thresholds are certified in exact arithmetic, whose cost grows
    with ε (e^ε's series; the analytic Gaussian bound's normal tails), without end at ε = 1e300."""
    if params.delta_exact == 0 or params.epsilon_exact == 0:
        raise ValueError("weighted partition selection needs epsilon > 0 and delta > 0")
    if params.epsilon > MAX_EPSILON:
        raise ValueError(f"weighted partition selection supports epsilon up to {MAX_EPSILON:g}, got "
                         f"{params.epsilon:g}")


def _check_kappa(params: PrivacyParams) -> None:
    """κ <= MAX_KAPPA (the threshold is certified once per set size 1..κ). Checked before σ is
    calibrated: at a tiny ε and δ that calibration alone takes minutes and then fails with a
    message about the noise, which would hide the real mistake."""
    kappa = params.max_partitions_contributed
    if kappa > MAX_KAPPA:
        raise ValueError(f"weighted partition selection supports max_partitions_contributed up to {MAX_KAPPA} "
                         f"(its threshold is certified for every set size 1..κ, about 10 ms each), got {kappa}; "
                         "bound contributions more tightly, or use a count-based strategy (dpselect.select)")


def check_noise_share(noise_share: object) -> float:
    if isinstance(noise_share, bool) or not isinstance(noise_share, Real):
        raise TypeError(f"noise_share must be a real number in (0, 1), got {type(noise_share).__name__}")
    if not 0 < cast(float, noise_share) < 1:  # a Real compares as a float does (numbers.Real is untyped)
        raise ValueError(f"noise_share must be in (0, 1) (the share of delta that calibrates the noise), "
                         f"got {noise_share!r}")
    return float(noise_share)


def check_ratio(ratio: object) -> float:
    """DP-SIPS's ``ratio``: a real number in (0, 1], each round's share of the budget relative to
    the next."""
    if isinstance(ratio, bool) or not isinstance(ratio, Real):
        raise TypeError(f"ratio must be a real number in (0, 1], got {type(ratio).__name__}")
    if not 0 < cast(float, ratio) <= 1:  # a Real compares as a float does (numbers.Real is untyped)
        raise ValueError(f"ratio must be in (0, 1] (each round's share of the budget relative to the next), "
                         f"got {ratio!r}")
    return float(cast(float, ratio))


def check_row_params(params: PrivacyParams) -> None:
    """Everything about (ε, δ, κ, neighbours) a weighted mechanism needs, all of it before any
    calibration: every mistake is a ValueError at once."""
    _check_epsilon(params)
    _check_kappa(params)
    if params.affected_partitions != params.max_partitions_contributed:
        raise ValueError("weighted mechanisms support neighbours='add_remove' only (each user's whole set is "
                         "added or removed); use a count-based strategy for neighbours='replace'")


# Smallest δ a Gaussian certificate here can prove: the rational bounds on Φ are 2^-256 wide
# (dpselect.core.exact.normal_cdf_bounds), and the analytic Gaussian bound multiplies one by e^ε <= 2^73.
# Below it σ's calibration, or the threshold's search, would step on for hours and then fail.
MIN_GAUSSIAN_DELTA = Fraction(1, 2**160)


def check_gaussian_deltas(params: PrivacyParams, name: str, delta_noise: Fraction, delta_threshold: Fraction) -> None:
    """δ of the noise, and δ of the thresholds per set size (at least δ_threshold/κ), both
    provable (MIN_GAUSSIAN_DELTA), checked before σ is calibrated."""
    smallest = min(delta_noise, delta_threshold / params.max_partitions_contributed)
    if smallest < MIN_GAUSSIAN_DELTA:
        raise ValueError(f"delta = {params.delta:g} is too small for {name} at max_partitions_contributed = "
                         f"{params.max_partitions_contributed}: its Gaussian noise and thresholds are certified for "
                         f"a delta of at least 2**-160 (about {float(MIN_GAUSSIAN_DELTA):.2g}) each, and this "
                         f"splits delta down to {float(smallest):.3g}; raise delta, or use 'weighted_laplace'")


def _threshold_fits(rho: float) -> bool:
    """ρ (in users) on the 2^-32 grid, plus any weighted count, must stay within int64."""
    return rho <= MAX_WEIGHTED_THRESHOLD


def _refuse_threshold(params: PrivacyParams, name: str, rho: float, fits: Callable[[Fraction], bool],
                      top: Fraction) -> ValueError:
    size = f"about {rho:,.4g}" if math.isfinite(rho) else "beyond 1e308"
    return epsilon_too_small(
        params, name,
        f"its threshold on the weighted count would be {size}, so a key would need about that many users (each "
        f"holding only that key) to be released with probability 1/2, more than the {MAX_WEIGHTED_THRESHOLD:,} the "
        "weighted counts' fixed-point grid (2^-32 units in int64) can hold",
        fits=fits, top=top, advice="or use strategy='pi_opt'")


def check_gaussian_thresholds(params: PrivacyParams, name: str, delta_noise: Fraction,
                               rounds: list[tuple[Fraction, Fraction]]) -> None:
    """Refuse, in floating point and before σ is certified, thresholds that cannot fit the grid:
    ``rounds`` = (share f_j of the Gaussian budget, δ of that round's thresholds); ρ_j is at
    most 1 + σ_j z, σ_j = σ/√f_j, z the normal quantile of the smallest per-set-size δ."""
    kappa = params.max_partitions_contributed
    quantiles = [(f, -NormalDist().inv_cdf(max(float(per_partition_delta(d, kappa)), 1e-300))) for f, d in rounds]

    def rho(epsilon: float) -> float:
        sigma = google_sigma(epsilon, float(delta_noise), 1.0, 1e-3)
        return max(1 + sigma / math.sqrt(float(f)) * z for f, z in quantiles)

    if not _threshold_fits(rho(params.epsilon) * 1.01):
        raise _refuse_threshold(params, name, rho(params.epsilon), lambda e: _threshold_fits(rho(float(e)) * 1.01),
                                Fraction(MAX_EPSILON))


def check_rho_units(params: PrivacyParams, name: str, units: int) -> None:
    """The exact threshold, on the grid (a safety net behind the float predictions)."""
    if units > MAX_WEIGHTED_THRESHOLD << WEIGHT_BITS:
        raise _refuse_threshold(params, name, units / _ONE, lambda e: False, Fraction(MAX_EPSILON))


def split_delta(params: PrivacyParams, noise_share: float) -> tuple[Fraction, Fraction]:
    """(δ of the noise, δ of the thresholds); the caller has run check_row_params."""
    delta_noise = params.delta_exact * Fraction(noise_share)
    return delta_noise, params.delta_exact - delta_noise


def per_partition_delta(delta: Fraction, m: int) -> Fraction:
    """A rational δ_p(m) with 1 − (1 − δ_p)^m <= δ, proven."""
    return composition_delta(delta, m)


class WeightedGaussian(RowMechanismBase):
    """Weighted Gaussian partition selection (Gopi et al., ICML 2020, Theorem 5.1).

    Guarantee: (ε, δ)-DP for adding or removing one user's rows (κ enforced by the bounding
    inside): σ is calibrated by the analytic Gaussian bound for L2 sensitivity 1 at
    (ε, δ · noise_share), certified with rational bounds; ρ makes the release of any of a new
    user's own partitions at most δ · (1 − noise_share), also certified (module docstring)."""

    name = "weighted_gaussian"
    norm = "l2"

    def __init__(self, params: PrivacyParams, noise_share: float = 0.5) -> None:
        check_row_params(params)
        delta_noise, delta_threshold = split_delta(params, check_noise_share(noise_share))
        check_gaussian_deltas(params, "weighted Gaussian selection", delta_noise, delta_threshold)
        check_gaussian_thresholds(params, self.name, delta_noise, [(Fraction(1), delta_threshold)])
        self.params = params
        eps = params.epsilon_exact
        sigma = certified_sigma(eps, delta_noise, 1, 1e-6)
        self.sigma = sigma
        self.weights = set_weights(params.max_partitions_contributed, self.norm)
        # ρ = max_m [w_m + σ z_m], P[Z > σ z_m] <= δ_p(m), each proven; on the 2^-32 grid, rounded up.
        rho = max(Fraction(int(self.weights[m]), _ONE) - 1 + gaussian_threshold(sigma, per_partition_delta(delta_threshold, m))
                  for m in range(1, params.max_partitions_contributed + 1))
        self.rho_units = math.ceil(rho * _ONE)
        check_rho_units(params, self.name, self.rho_units)
        self.certified_delta = agm_delta_upper(sigma, eps, 1) + delta_threshold

    @property
    def threshold(self) -> float:
        return self.rho_units / _ONE

    @property
    def thresholds(self) -> dict[str, float]:
        return {"threshold": self.threshold, "sigma": float(self.sigma)}

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return self._guarantee(f"weighted Gaussian partition selection (noise sigma {float(self.sigma):.6g}, "
                               f"threshold {self.threshold:.6g} on the weighted count)",
                               f"{GOPI}; docs/privacy/weighted.md")

    def select_sets(self, sets: UserSets, rng: object | None = None) -> npt.NDArray[np.bool_]:
        histogram = weighted_histogram(sets, self.params.max_partitions_contributed, self.weights, None, rng)
        return self._decide(histogram, rng)

    def _decide(self, histogram: npt.NDArray[np.int64], rng: object | None) -> npt.NDArray[np.bool_]:
        keep = np.zeros(histogram.size, dtype=bool)
        present = np.flatnonzero(histogram > 0)  # absent partitions are never released
        keep[present] = gaussian_tail_draws(self.rho_units - histogram[present], WEIGHT_BITS, self.sigma, rng)
        return keep

    def __repr__(self) -> str:
        return f"WeightedGaussian({self.params!r}, sigma={float(self.sigma):.6g}, threshold={self.threshold:.6g})"


class WeightedLaplace(RowMechanismBase):
    """Weighted Laplace partition selection (Gopi et al., ICML 2020): L1-normalised weights,
    Laplace noise of scale 1/ε (pure ε-DP on partitions present in both neighbours), and ρ such
    that a new user's own partitions are released with probability at most δ in all."""

    name = "weighted_laplace"
    norm = "l1"

    def __init__(self, params: PrivacyParams) -> None:
        check_row_params(params)
        kappa = params.max_partitions_contributed
        smallest = per_partition_delta(params.delta_exact, kappa)

        def predicted(epsilon: Fraction) -> float:  # 1 + ln(1/(2 δ_p(κ)))/ε, the largest t, in logs
            if smallest >= Fraction(1, 2):
                return 2.0
            log_t = math.log(log_inverse(2 * smallest)) - math.log(epsilon.numerator) + math.log(epsilon.denominator)
            return 1 + math.exp(log_t) if log_t < 700 else math.inf

        if not _threshold_fits(predicted(params.epsilon_exact) * 1.01):
            raise _refuse_threshold(params, self.name, predicted(params.epsilon_exact),
                                    lambda e: _threshold_fits(predicted(e) * 1.01), Fraction(MAX_EPSILON))
        self.params = params
        eps = params.epsilon_exact
        self.weights = set_weights(params.max_partitions_contributed, self.norm)
        rho = Fraction(0)
        for m in range(1, params.max_partitions_contributed + 1):
            delta_p = per_partition_delta(params.delta_exact, m)
            # a t on the 2^-32 grid with e^{-ε t}/2 <= δ_p, proven with a lower bound on e^{εt} (found
            # from a float guess stepping up: possibly a hair above the smallest, never below it)
            t = Fraction(math.ceil(math.log(1 / (2 * float(delta_p))) / float(eps) * _ONE) + 1, _ONE)
            while Fraction(1, 2) / exp_lower(eps * t, 128) > delta_p:
                t += Fraction(max(1, int(t * _ONE) >> 30), _ONE)
            rho = max(rho, Fraction(int(self.weights[m]), _ONE) + t)
        self.rho_units = math.ceil(rho * _ONE)
        check_rho_units(params, self.name, self.rho_units)
        self.certified_delta = params.delta_exact

    @property
    def threshold(self) -> float:
        return self.rho_units / _ONE

    @property
    def thresholds(self) -> dict[str, float]:
        return {"threshold": self.threshold, "scale": 1 / float(self.params.epsilon_exact)}

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return self._guarantee(f"weighted Laplace partition selection (noise scale {1 / self.params.epsilon:.6g}, "
                               f"threshold {self.threshold:.6g} on the weighted count)",
                               f"{GOPI}; docs/privacy/weighted.md")

    def select_sets(self, sets: UserSets, rng: object | None = None) -> npt.NDArray[np.bool_]:
        histogram = weighted_histogram(sets, self.params.max_partitions_contributed, self.weights, None, rng)
        keep = np.zeros(histogram.size, dtype=bool)
        present = np.flatnonzero(histogram > 0)
        keep[present] = laplace_tail_draws(self.rho_units - histogram[present], WEIGHT_BITS,
                                           self.params.epsilon_exact, rng)
        return keep

    def __repr__(self) -> str:
        return f"WeightedLaplace({self.params!r}, threshold={self.threshold:.6g})"


class DPSIPS(RowMechanismBase):
    """DP-SIPS (Swanberg, Desfontaines, Haney, 2023): weighted Gaussian selection run for
    ``rounds`` rounds; partitions released in a round are removed from every user's set before
    the next round's bounding and weighting, so later rounds spend their weight on what is
    left. Round j gets the share f_j ∝ ratio^(rounds − 1 − j) of the Gaussian budget (μ_j² = f_j μ²)
    and of the threshold's δ; the last round is the largest. Defaults: 3 rounds, ratio 0.1 (the
    last round keeps 90 % of the budget: in dpselect's utility benchmark this matched single-round
    weighted Gaussian where redistribution cannot help and beat it by 2–3× where it can; a
    third-party implementation uses 0.3).

    Guarantee: the rounds' Gaussian mechanisms (sensitivity 1 each) compose exactly to one
    Gaussian mechanism of parameter μ (Σ μ_j² = μ²), certified (ε, δ · noise_share)-DP by the
    analytic Gaussian bound; the thresholds' δ's add up to δ · (1 − noise_share)."""

    name = "dp_sips"
    rounds: int
    ratio: float
    sigma: Fraction
    sigmas: list[Fraction]  # each round's σ_j
    rhos: list[int]  # each round's threshold, in 2^-32 units
    weights: npt.NDArray[np.int64]

    def __init__(self, params: PrivacyParams, rounds: int = 3, ratio: float = 0.1, noise_share: float = 0.5) -> None:
        if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= 20:
            raise ValueError(f"rounds must be an int between 1 and 20, got {rounds!r}")
        ratio = check_ratio(ratio)
        check_row_params(params)
        delta_noise, delta_threshold = split_delta(params, check_noise_share(noise_share))
        self.params = params
        self.rounds, self.ratio = rounds, float(ratio)
        eps = params.epsilon_exact
        shares = [Fraction(self.ratio).limit_denominator(10**6) ** (rounds - 1 - j) for j in range(rounds)]
        total = sum(shares)
        fractions = [s / total for s in shares]
        check_gaussian_deltas(params, "DP-SIPS", delta_noise, delta_threshold * min(fractions))
        check_gaussian_thresholds(params, self.name, delta_noise, [(f, delta_threshold * f) for f in fractions])
        # σ of the one Gaussian mechanism the rounds compose to (sensitivity 1), certified
        sigma = certified_sigma(eps, delta_noise, 1, 1e-6)
        # Round j: μ_j² = f_j μ², i.e. σ_j = σ / sqrt(f_j) (rounded up: more noise, still composing to ≤ μ²).
        self.sigmas = [sqrt_bounds(sigma * sigma / f, 64)[1] for f in fractions]
        self.weights = set_weights(params.max_partitions_contributed, "l2")
        self.rhos = []
        for f, sigma_j in zip(fractions, self.sigmas):
            delta_j = delta_threshold * f
            rho = max(Fraction(int(self.weights[m]), _ONE) - 1 + gaussian_threshold(sigma_j, per_partition_delta(delta_j, m))
                      for m in range(1, params.max_partitions_contributed + 1))
            self.rhos.append(math.ceil(rho * _ONE))
            check_rho_units(params, self.name, self.rhos[-1])
        self.sigma = sigma  # the rounds' σ_j >= σ/sqrt(f_j) compose to a Gaussian at least this noisy
        self.certified_delta = agm_delta_upper(sigma, eps, 1) + delta_threshold

    @property
    def thresholds(self) -> dict[str, float]:
        return {f"round {j + 1} threshold": r / _ONE for j, r in enumerate(self.rhos)}

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return self._guarantee(f"DP-SIPS ({self.rounds} rounds of weighted Gaussian selection, ratio {self.ratio:g})",
                               f"{SWANBERG}; {GOPI}; docs/privacy/weighted.md")

    def select_sets(self, sets: UserSets, rng: object | None = None) -> npt.NDArray[np.bool_]:
        released = np.zeros(sets.n_partitions, dtype=bool)
        kappa = self.params.max_partitions_contributed
        for sigma_j, rho_j in zip(self.sigmas, self.rhos):
            histogram = weighted_histogram(sets, kappa, self.weights, released, rng)
            present = np.flatnonzero((histogram > 0) & ~released)
            released[present] |= gaussian_tail_draws(rho_j - histogram[present], WEIGHT_BITS, sigma_j, rng)
        return released

    def __repr__(self) -> str:
        return f"DPSIPS({self.params!r}, rounds={self.rounds}, ratio={self.ratio:g})"
