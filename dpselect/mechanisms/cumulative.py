"""Cumulative DP-SIPS: rounds of weighted Gaussian selection whose noisy weights add up.

DP-SIPS (Swanberg, Desfontaines, Haney, 2023) runs weighted Gaussian selection in rounds; a key
released in a round leaves every user's set, so later rounds give its weight to the others. Each
round there decides on its own noisy histogram, so a round's budget helps only the keys that round
releases: the budget spent early is lost to the keys released late, and the schedule has to keep
most of it for the last round (DP-SIPS's default gives it 90 %).

Here the rounds' noisy histograms are kept, and round j decides on their inverse-variance
weighted mean: a key that no round released is decided in the last round with the whole budget's
noise, as in one-round weighted Gaussian, while every round still moves weight from released keys
to the rest. So the schedule can spend more early (default: 5 rounds, each with half the budget
of the next) without losing the last round's precision.

Two things make the accumulated statistic provable (docs/privacy/cumulative-sips.md):

* each user orders their keys once, uniformly at random, and every round keeps the first κ keys
  not yet released: a key a user weighted stays weighted in every later round, and the number a
  user keeps never grows, so a key only one user holds has a mean at most that user's current
  weight, whatever the rounds before did;
* each round's noisy histogram is the continuous Gaussian mechanism rounded to a grid of 2^-6
  (exactly sampled, :mod:`dpselect.mechanisms.rounded_gaussian`): rounding is post-processing,
  so the rounds compose as Gaussian mechanisms (analytic Gaussian bound), and the rounding moves
  the statistic by at most half a cell, which the thresholds add.

The decision of each round is an exact integer comparison of the rounded sums with a certified
threshold. Own construction, argued in docs/privacy/cumulative-sips.md; the parts it rests on are
Gopi et al. (ICML 2020, Theorem 5.1), DP-SIPS's rounds, Balle & Wang (ICML 2018, Theorem 8) and
Dong, Roth, Su (2022, Corollary 3.3) for the composition of Gaussian mechanisms.
"""
from __future__ import annotations

import math
from fractions import Fraction
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from dpselect import _weighted
from dpselect.core.exact import normal_tail_upper, sqrt_bounds
from dpselect.core.guarantee import PrivacyGuarantee
from dpselect.core.params import PrivacyParams
from dpselect.mechanisms import weighted
from dpselect.mechanisms.gaussian import agm_delta_upper
from dpselect.mechanisms.rounded_gaussian import rounded_gaussian_draws
from dpselect.mechanisms.weighted import SWANBERG, GOPI, WEIGHT_BITS, RowMechanismBase, UserSets
from dpselect.rng import resolve_rng

__all__ = ["CumulativeSIPS", "CELL_BITS", "MAX_COMBINATION_WEIGHT"]

_ONE = 1 << WEIGHT_BITS
# The noisy histograms are rounded to multiples of 2^-CELL_BITS (a cell of 2^(32 − CELL_BITS)
# units of the weighted counts): narrow against any σ here (>= 1/2 at ε <= 50), so the half cell
# the thresholds add is below 1 % of them.
CELL_BITS = 6
_CELL = 1 << (WEIGHT_BITS - CELL_BITS)
# Largest sum of the integer combination weights a_j: with rounded values below 2^42 cells, the
# accumulated sums stay far inside int64.
MAX_COMBINATION_WEIGHT = 1 << 20
# Largest denominator of ``ratio``: the weights a_j = p^(r−1−j) q^j are exact integers.
_MAX_RATIO_DENOMINATOR = 64


def _check_rounds(rounds: object) -> int:
    if isinstance(rounds, bool) or not isinstance(rounds, int):
        raise TypeError(f"rounds must be an int between 1 and 12, got {type(rounds).__name__}")
    if not 1 <= rounds <= 12:
        raise ValueError(f"rounds must be between 1 and 12, got {rounds!r}")
    return rounds


def _check_ratio(ratio: object) -> Fraction:
    """ratio = p/q in (0, 1] with q <= 64, exactly (0.5, 0.3, 0.7; 1/3 within 1e-12 as a float)."""
    value = weighted.check_ratio(ratio)
    exact = Fraction(value).limit_denominator(_MAX_RATIO_DENOMINATOR)
    if abs(float(exact) - value) > 1e-12 * value:
        raise ValueError(f"ratio must be a fraction with a denominator of at most {_MAX_RATIO_DENOMINATOR} "
                         f"(such as 0.5, 0.3 or 0.25): the rounds' statistics are combined with exact integer "
                         f"weights; got {ratio!r}")
    return exact


def _combination_weights(rounds: int, ratio: Fraction) -> list[int]:
    """a_j = p^(r−1−j) q^j for ratio = p/q: proportional to ratio^(r−1−j), the budget shares."""
    p, q = ratio.numerator, ratio.denominator
    weights = [p ** (rounds - 1 - j) * q ** j for j in range(rounds)]
    if sum(weights) > MAX_COMBINATION_WEIGHT:
        raise ValueError(f"rounds={rounds} with ratio={float(ratio):g} gives the rounds combination weights that sum "
                         f"to {sum(weights):,}, above {MAX_COMBINATION_WEIGHT:,}: use fewer rounds, or a ratio "
                         "with a smaller denominator (such as 0.5)")
    return weights


class CumulativeSIPS(RowMechanismBase):
    """Cumulative DP-SIPS: DP-SIPS rounds that decide on the running inverse-variance weighted
    mean of every round's noisy weighted histogram (module docstring; own construction,
    docs/privacy/cumulative-sips.md).

    Round j = 0..r−1 has budget share f_j = a_j / Σa, a_j = p^(r−1−j) q^j for ``ratio`` = p/q
    (default 5 rounds, ratio 1/2: each round half the next), noise σ_j >= σ/√f_j, and the
    threshold's δ share f_j · δ · (1 − noise_share). Each user orders their keys once at random
    and weights, in every round, the first min(κ, left) keys not yet released (w_m = 1/√m).
    A key is a candidate from the first round it has weight; round j releases a candidate iff
    C_j = Σ_{l<=j} a_l Ŷ_l / Σ_{l<=j} a_l > ρ_j, Ŷ_l its round-l noisy weight rounded to 2^-6
    (draws for the rounds before it became a candidate are made then, with weight 0).

    Guarantee: (ε, δ̂)-DP for adding or removing one user's rows, δ̂ = δ̄_AGM(σ) + δ(1 − s) <= δ:
    the rounds' Gaussian mechanisms (L2 sensitivity 1) compose to one of noise σ, certified at
    (ε, δ·s) by the analytic Gaussian bound (Balle & Wang 2018, Theorem 8), and
    ρ_j = max_m (w_m + s_j z_m) + 2^-7, s_j² = Σ_{l<=j} (a_l/A_j)² σ_l², P[Z > z_m] <= δ_p(m, f_j δ(1 − s))
    proven, bounds the release of a key only the new user holds."""

    name = "cumulative_sips"
    rounds: int
    ratio: float
    sigma: Fraction
    sigmas: list[Fraction]  # each round's σ_j
    combination: list[int]  # a_j
    rhos: list[Fraction]  # each round's threshold ρ_j on the mean C_j
    cut_offs: list[int]  # release iff Σ_{l<=j} a_l k_l > cut_offs[j], k_l in cells of 2^-6
    weights: npt.NDArray[np.int64]

    def __init__(self, params: PrivacyParams, rounds: int = 5, ratio: float = 0.5, noise_share: float = 0.5) -> None:
        rounds = _check_rounds(rounds)
        exact_ratio = _check_ratio(ratio)
        combination = _combination_weights(rounds, exact_ratio)
        weighted.check_row_params(params)
        delta_noise, delta_threshold = weighted.split_delta(params, weighted.check_noise_share(noise_share))
        total = sum(combination)
        fractions = [Fraction(a, total) for a in combination]
        weighted.check_gaussian_deltas(params, "cumulative DP-SIPS", delta_noise, delta_threshold * min(fractions))
        # Round j's threshold is at most the DP-SIPS one at the same share (its s_j <= σ_j): the
        # same refusal, in floating point, before σ is certified.
        weighted.check_gaussian_thresholds(params, self.name, delta_noise,
                                           [(f, delta_threshold * f) for f in fractions])
        self.params = params
        self.rounds, self.ratio, self.combination = rounds, float(exact_ratio), combination
        eps = params.epsilon_exact
        sigma = weighted.certified_sigma(eps, delta_noise, 1, 1e-6)
        # μ_j² = f_j μ²: σ_j = σ/√f_j rounded up (more noise; Σ 1/σ_j² <= 1/σ² still).
        self.sigmas = [sqrt_bounds(sigma * sigma / f, 64)[1] for f in fractions]
        kappa = params.max_partitions_contributed
        self.weights = weighted.set_weights(kappa, "l2")
        half_cell = Fraction(1, 1 << (CELL_BITS + 1))
        self.rhos, self.cut_offs = [], []
        for j in range(rounds):
            mass = sum(combination[:j + 1])
            variance = sum((Fraction(a * a, mass * mass) * s * s for a, s in zip(combination, self.sigmas[:j + 1])),
                           Fraction(0))
            spread = sqrt_bounds(variance, 64)[1]  # s_j, rounded up
            rho = half_cell + _threshold(spread, self.weights, kappa, delta_threshold * fractions[j])
            weighted.check_rho_units(params, self.name, math.ceil(rho * _ONE))
            self.rhos.append(rho)
            # C_j > ρ_j  ⟺  Σ a_l k_l · 2^-6 > A_j ρ_j  ⟺  Σ a_l k_l > ⌊A_j ρ_j 2^6⌋ (integers)
            self.cut_offs.append(math.floor(mass * rho * (1 << CELL_BITS)))
        self.sigma = sigma
        self.certified_delta = agm_delta_upper(sigma, eps, 1) + delta_threshold

    @property
    def thresholds(self) -> dict[str, float]:
        return {f"round {j + 1} threshold": float(r) for j, r in enumerate(self.rhos)}

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return self._guarantee(f"cumulative DP-SIPS ({self.rounds} rounds of weighted Gaussian selection deciding on "
                               f"their accumulated noisy weights, ratio {self.ratio:g})",
                               f"own construction on {SWANBERG} and {GOPI}; docs/privacy/cumulative-sips.md")

    def select_sets(self, sets: UserSets, rng: object | None = None) -> npt.NDArray[np.bool_]:
        generator = resolve_rng(rng)
        generator.announce()
        n = sets.n_partitions
        # Each user's keys in one uniformly random order, fixed for every round (the argument
        # needs a weighted key to stay weighted): Fisher–Yates per user, in C.
        ordered = np.array(sets.partitions, dtype=np.uint32, copy=True)
        _weighted.shuffle_sets(sets.ends, ordered, generator.test_state)

        released = np.zeros(n, dtype=bool)
        candidate = np.zeros(n, dtype=bool)
        accumulated = np.zeros(n, dtype=np.int64)  # Σ_{l<=j} a_l k_l
        for j, (sigma_j, a_j, cut_off) in enumerate(zip(self.sigmas, self.combination, self.cut_offs)):
            histogram = self.prefix_histogram(sets.ends, ordered, released)
            entering = np.flatnonzero((histogram > 0) & ~candidate & ~released)
            for a_l, sigma_l in zip(self.combination[:j], self.sigmas[:j]):  # earlier rounds, weight 0 then
                draws = rounded_gaussian_draws(np.zeros(entering.size, dtype=np.int64), WEIGHT_BITS, sigma_l, _CELL,
                                               generator)
                accumulated[entering] = _add(accumulated[entering], a_l, draws)
            candidate[entering] = True
            live = np.flatnonzero(candidate & ~released)
            draws = rounded_gaussian_draws(histogram[live], WEIGHT_BITS, sigma_j, _CELL, generator)
            accumulated[live] = _add(accumulated[live], a_j, draws)
            released[live[accumulated[live] > cut_off]] = True
        return released

    def prefix_histogram(self, ends: npt.NDArray[np.uintp], ordered: npt.NDArray[np.uint32],
                         released: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
        """H_j: each user's first min(κ, left) keys not yet released, in their fixed order
        (``ordered``, grouped by ``ends``), each weighted w_m; exact int64 sums, in C."""
        histogram = np.zeros(released.size, dtype=np.int64)
        _weighted.weighted_prefix(ends, ordered, released, self.params.max_partitions_contributed, self.weights,
                                  histogram)
        return histogram

    def __repr__(self) -> str:
        return f"CumulativeSIPS({self.params!r}, rounds={self.rounds}, ratio={self.ratio:g})"


def _threshold(spread: Fraction, weights: npt.NDArray[np.int64], kappa: int, delta: Fraction) -> Fraction:
    """A dyadic t with P[Z > (t − w_m)/s] <= δ_p(m, δ) proven for every m = 1..κ: the float
    estimate max_m (w_m + s z_m), raised until one exact tail bound per m certifies it (κ bound
    evaluations, where a certified quantile per m would cost a bisection each)."""
    budgets = [weighted.per_partition_delta(delta, m) for m in range(1, kappa + 1)]
    ws = [Fraction(int(weights[m]), _ONE) for m in range(1, kappa + 1)]
    s = float(spread)
    guess = max(float(w) + s * -NormalDist().inv_cdf(max(float(b), 1e-300)) for w, b in zip(ws, budgets))
    scale = 1 << 40
    t = Fraction(math.ceil(guess * (1 + 1e-9) * scale) + 1, scale)
    while True:
        short = [i for i in range(kappa) if normal_tail_upper((t - ws[i]) / spread) > budgets[i]]
        if not short:
            return t
        t += Fraction(max(1, math.ceil(abs(t) * scale * 1e-7)), scale)


def _add(total: npt.NDArray[np.int64], a: int, draws: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """total + a·draws in int64, refused rather than wrapped: a draw beyond 2^42 cells (about
    10^11 users) has probability far below 2^-1000."""
    if draws.size and int(np.abs(draws).max()) >= 1 << 42:
        raise RuntimeError("cumulative DP-SIPS: a rounded noisy weight is beyond 2^42 cells; refusing to wrap around")
    return total + np.int64(a) * draws
