"""Which mechanism releases the most for (ε, δ, κ)? The comparison of Desfontaines et al.,
PoPETs 2022, §4–5 (Figures 1–4), on the keep probabilities that actually run.

Every candidate is built (so its table is certified, and its numbers are the kernel's), and
summarised by where its keep probability crosses 5 %, 50 % and 95 %: the partition size it
needs to be released. The one with the smallest midpoint releases the most partitions of every
size that matters; the choice depends on the public parameters only, never on the data. At
ε = 1, δ = 1e-5 this reproduces the paper's Figure 4: pi_opt is best for κ <= 2, the two are
within a few percent at κ = 3, Gaussian thresholding wins from κ = 4.

On raw rows (``rows=True``) the row mechanisms are candidates too: the count-based choice at
κ = 1, cumulative DP-SIPS from κ = 2 wherever Gaussian thresholding's midpoint is at most ROW_MARGIN times
the best budget split's (see :func:`recommend`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from dpselect.core.params import validate_params
from dpselect.mechanisms.base import TabledSelection
from dpselect.mechanisms.gaussian import GaussianThresholding
from dpselect.mechanisms.tsgd import TSGDRelease
from dpselect.mechanisms.cumulative import CumulativeSIPS

if TYPE_CHECKING:
    from dpselect.mechanisms.gaussian import GaussianThresholding

__all__ = ["Candidate", "Recommendation", "recommend", "keep_curve_points", "ROW_MARGIN", "ROW_MIN_KAPPA",
           "ROW_STRATEGY", "ROW_ROUNDS", "ROW_RATIO"]

# On raw rows, a row mechanism (cumulative DP-SIPS; DP-SIPS before it) is chosen from κ = ROW_MIN_KAPPA on, where Gaussian thresholding's midpoint
# is at most ROW_MARGIN times the best budget-splitting mechanism's. The ratio of midpoints is
# 1.13-1.39 at κ = 2 for ε <= 8 and δ from 1e-3 to 1e-12 (1.65 at ε = 16, δ = 1e-3), 0.95-1.07
# at κ = 3 for ε <= 4; DP-SIPS's later rounds, which the midpoints cannot show, made up for more
# than that on the synthetic Zipf users (bench/bench_utility.py: 1.9x Gaussian thresholding's keys
# at κ = 2, 1.7x pi_opt's) and the manual pages (bench/bench_auto.py: 1.7x, 1.6x), and cost
# 20 % against pi_opt on source-file identifiers. 1.5 stays under the gain measured where DP-SIPS
# wins, with room for the noise of the measurement.
ROW_MARGIN = 1.5
# At κ = 1 every user's single key carries full weight in the count-based mechanisms too, and
# pi_opt's Laplace-like noise on ε needs fewer users than the Gaussian noise the row mechanisms
# draw (a midpoint ratio of 1.3-1.8): pi_opt released up to 2.8x DP-SIPS's keys on identifiers.
# Where DP-SIPS's later rounds win at κ = 1 (many keys per user from a shared vocabulary) the gain
# depends on the data, which the choice may not read: the count-based choice is kept.
ROW_MIN_KAPPA = 2
# The row mechanism auto runs: cumulative DP-SIPS with its defaults, 5 rounds, each with half the
# next one's share of the budget. Deciding on the rounds' accumulated noisy weights, its last round
# has the whole budget's noise, so the early rounds' redistribution costs the late keys nothing:
# against DP-SIPS (3 rounds, ratio 0.1, auto's choice before) it released 10-20 % more on Python
# source identifiers at κ = 2 to 100, 18-58 % more on the manual pages and 17-34 % more on the
# standard library's identifiers at κ = 4 to 100, and 7-11 % more on the synthetic Zipf users
# (bench/bench_auto.py, bench/bench_utility.py, ε = 1, δ = 1e-5; docs/rows.md). Of the schedules
# simulated (3 to 8 rounds, ratios 0.1 to 0.7), 5 rounds at 1/2 was within 3 % of the best on
# every corpus.
ROW_STRATEGY = "cumulative_sips"
ROW_ROUNDS = 5
ROW_RATIO = 0.5
# The mechanisms that split the budget over the κ partitions (ε/κ each), against Gaussian
# thresholding's joint L2 calibration.
_SPLIT = ("pi_opt", "release", "laplace")

# (label, strategy name, options)
_COUNT_CANDIDATES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("pi_opt", "pi_opt", {}),
    ("release", "release", {}),
    ("laplace", "laplace", {}),
    ("gaussian", "gaussian", {}),
    ("gaussian (optimal split)", "gaussian", {"noise_share": "optimal"}),
)


@dataclass(frozen=True)
class Candidate:
    """One mechanism's numbers: the (real-valued, interpolated) partition sizes at which its
    keep probability reaches 5 %, 50 % and 95 %."""

    label: str
    strategy: str
    options: dict[str, Any]
    q05: float
    midpoint: float
    q95: float
    releases_counts: bool
    thresholds: dict[str, float] = field(default_factory=dict)

    def row(self) -> str:
        return f"{self.label:<26} {self.q05:>10.3f} {self.midpoint:>10.3f} {self.q95:>10.3f}"


@dataclass(frozen=True)
class Recommendation:
    """The chosen mechanism and the numbers behind the choice."""

    strategy: str
    options: dict[str, Any]
    label: str
    candidates: tuple[Candidate, ...]
    reason: str

    def table(self) -> str:
        head = f"{'mechanism':<26} {'5 %':>10} {'50 %':>10} {'95 %':>10}"
        return "\n".join([head, *(c.row() for c in self.candidates)])

    def __str__(self) -> str:
        return f"{self.reason}\n{self.table()}"


def _crossing(probability: Any, level: float, limit: int) -> float:
    """The real x where the keep probability (exact at integers, linear between) reaches level."""
    lo, hi = 0, 1
    while float(probability(hi)) < level:
        lo, hi = hi, hi * 2
        if hi > limit:
            return float("inf")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if float(probability(mid)) < level:
            lo = mid
        else:
            hi = mid
    p_lo, p_hi = float(probability(lo)), float(probability(hi))
    return lo + (level - p_lo) / (p_hi - p_lo) if p_hi > p_lo else float(hi)


def keep_curve_points(strategy: Any, levels: tuple[float, ...] = (0.05, 0.5, 0.95)) -> tuple[float, ...]:
    """Where a count-based strategy's exact keep probability reaches each level."""
    if not isinstance(strategy, (TabledSelection, TSGDRelease)):  # no keep curve rising with n to read
        return tuple(float("nan") for _ in levels)
    return tuple(_crossing(strategy.exact_keep_probability, level, 1 << 40) for level in levels)


def recommend(
    epsilon: float,
    delta: float,
    max_partitions_contributed: int = 1,
    *,
    counts: bool = False,
    rows: bool = False,
    delta_split: str = "composition",
    neighbours: str = "add_remove",
) -> Recommendation:
    """The count-based mechanism that releases the most at these parameters, with the numbers
    behind the choice. ``counts=True`` restricts the choice to mechanisms that also release noisy
    counts. ``rows=True``: the input is raw rows (each user's set of partitions is available), so
    the row mechanisms are candidates too (see below). Depends on the public parameters only,
    never on the data.

    For rows the choice is the count-based one (pi_opt, or TSGD's release where its midpoint is
    lower) at κ = 1 always, and from κ = ROW_MIN_KAPPA (2) on cumulative DP-SIPS (5 rounds, ratio
    1/2; docs/privacy/cumulative-sips.md) where
    Gaussian thresholding's midpoint is at most ROW_MARGIN times (50 % above) the best
    budget-splitting mechanism's (pi_opt, release, laplace), the count-based choice elsewhere:
    the row mechanism from κ = 2 for ε up to 8 and δ from 1e-3 to 1e-12. Whether a row mechanism beats
    pi_opt, and which one, depends on the data (README, "Which mechanism releases the most"); the
    choice is made from (ε, δ, κ) alone. Measured (``bench/bench_utility.py``: synthetic Zipf
    users and the standard library's identifiers; ``bench/bench_auto.py``: identifiers of Python
    source files, words of manual pages, Debian dependencies): pi_opt released the most at κ = 1
    on most corpora, up to 2.8× what DP-SIPS did; at κ = 2 DP-SIPS released 1.6–1.7× pi_opt's keys
    on the synthetic users and the manual pages and about 20 % less on identifiers; from κ = 4
    DP-SIPS released the most on every corpus but the standard library's identifiers, where
    weighted Gaussian released 5-13 % more (few keys are released in DP-SIPS's early rounds
    there, so only its last round's higher noise shows).
    The weighted mechanisms gain over Gaussian thresholding on the same budget (a user with
    fewer than κ keys gives each more weight; DP-SIPS's later rounds move weight from released
    keys to the others), which the midpoints of a single partition cannot show: hence the
    margin."""
    from dpselect.mechanisms.registry import make_strategy

    # A parameter no mechanism accepts (10**400, a negative δ...) is reported as itself, not as
    # "no mechanism can run".
    validate_params(epsilon, delta, max_partitions_contributed, delta_split, neighbours)
    if rows and not counts and neighbours == "add_remove":
        base = recommend(epsilon, delta, max_partitions_contributed, delta_split=delta_split)
        if max_partitions_contributed < ROW_MIN_KAPPA:
            reason = (f"On raw rows too: {base.reason[0].lower()}{base.reason[1:-1]}. At "
                      "max_partitions_contributed=1 the count-based choice is kept: each user's one key has full "
                      "weight in it too, and its noise needs fewer users than the row mechanisms' Gaussian noise.")
            return Recommendation(base.strategy, base.options, base.label, base.candidates, reason)
        split = min((c.midpoint for c in base.candidates if c.strategy in _SPLIT), default=math.inf)
        joint = min((c.midpoint for c in base.candidates if c.strategy == "gaussian"), default=math.inf)
        if not joint <= ROW_MARGIN * split:
            reason = (f"On raw rows too: {base.reason[0].lower()}{base.reason[1:-1]}. The row mechanisms (cumulative "
                      "DP-SIPS, weighted Gaussian) are chosen where Gaussian thresholding's midpoint is at most "
                      f"{100 * (ROW_MARGIN - 1):.0f} % above the best budget split's (here {joint:.2f} against "
                      f"{split:.2f}); beyond that their later rounds cannot make up for their noise.")
            return Recommendation(base.strategy, base.options, base.label, base.candidates, reason)
        try:
            sips = cast("CumulativeSIPS", make_strategy(ROW_STRATEGY, epsilon=epsilon, delta=delta,
                                                        max_partitions_contributed=max_partitions_contributed,
                                                        rounds=ROW_ROUNDS, ratio=ROW_RATIO))
        except ValueError:
            return base
        assert isinstance(sips, CumulativeSIPS)
        last = list(sips.thresholds.values())[-1]
        reason = (f"On raw rows, cumulative DP-SIPS ({sips.rounds} rounds, ratio {sips.ratio:g}; last-round "
                  f"threshold {last:.4g} on the accumulated weighted count): Gaussian thresholding's midpoint "
                  f"({joint:.2f}) is at most {100 * (ROW_MARGIN - 1):.0f} % above the best budget split's "
                  f"({split:.2f}), where the weighted mechanisms release more (a user with fewer keys gives each "
                  "more weight, later rounds give the weight of released keys to the others, and the last round "
                  f"decides with the whole budget's noise). On counts alone, {base.label} would be the choice: "
                  f"{base.reason[0].lower()}{base.reason[1:]}")
        return Recommendation(ROW_STRATEGY, {"rounds": sips.rounds, "ratio": sips.ratio}, ROW_STRATEGY,
                              base.candidates, reason)

    built: list[Candidate] = []
    for label, name, options in _COUNT_CANDIDATES:
        try:
            strategy = make_strategy(name, epsilon=epsilon, delta=delta,
                                     max_partitions_contributed=max_partitions_contributed,
                                     delta_split=delta_split, neighbours=neighbours, **options)
        except ValueError:
            continue  # not available at these parameters (e.g. Gaussian at huge ε)
        if counts and not strategy.releases_counts:
            continue
        q05, mid, q95 = keep_curve_points(strategy)
        chosen_options = dict(options)
        if options.get("noise_share") == "optimal":
            assert isinstance(strategy, GaussianThresholding)  # the one strategy with that option
            chosen_options["noise_share"] = strategy.noise_share
        built.append(Candidate(label, name, chosen_options, q05, mid, q95, strategy.releases_counts,
                               dict(strategy.thresholds)))
    if not built:
        raise ValueError("no mechanism can run at these parameters; raise epsilon or delta, or lower "
                         "max_partitions_contributed")
    best = min(built, key=lambda c: (c.midpoint, c.q95))
    runner = min((c for c in built if c.strategy != best.strategy), key=lambda c: c.midpoint, default=None)
    reason = (f"{best.label} releases the most at epsilon={epsilon:g}, delta={delta:g}, "
              f"max_partitions_contributed={max_partitions_contributed}: a partition needs {best.midpoint:.2f} "
              "users to be released with probability 1/2")
    if runner is not None:
        gain = (runner.midpoint - best.midpoint) / runner.midpoint
        reason += f" ({runner.label} needs {runner.midpoint:.2f}, {100 * gain:.1f} % more)"
    return Recommendation(best.strategy, best.options, best.label, tuple(built), reason + ".")

