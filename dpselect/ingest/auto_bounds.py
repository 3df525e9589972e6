"""κ and L∞ chosen privately from the rows: ``max_partitions_contributed="auto"`` and
``max_contributions_per_partition="auto"`` (docs/privacy/auto-bounds.md).

κ: every user u adds 1 to one bin of a histogram of c_u, its number of distinct partitions, over
the power-of-two bins {1}, {2}, {3, 4}, {5..8}, ..., up to the bin of the largest κ auto may
choose (a cap fixed from the parameters; larger counts fall in that bin). Adding or removing one
user changes exactly one bin by 1 (L1 sensitivity 1), so exact discrete Laplace noise of scale
1/ε_κ on every bin (Canonne, Kamath, Steinke, NeurIPS 2020) makes the noisy histogram
ε_κ-DP (Dwork, McSherry, Nissim, Smith, TCC 2006, Proposition 1). κ is then read off the noisy
histogram alone — post-processing, no further cost (Dwork and Roth, *The Algorithmic Foundations
of Differential Privacy*, Proposition 2.1).

L∞: the same histogram over r_{u,p}, the rows of one (user, partition) pair, for ONE pair per
user chosen uniformly at random with the package CSPRNG among the user's pairs. One pair per user
keeps the sensitivity at 1 whatever κ is (with all of a user's ≤ κ kept pairs it would be κ, and
the noise κ times larger for κ times the data: no gain). A uniform pair of the user's pairs is
also a uniform pair of the κ pairs that κ-bounding keeps (a uniform element of a uniform subset),
so the histogram describes the pairs that survive bounding, in distribution, at any κ.

The rule, read only from the noisy histograms and public parameters (post-processing): with
public partitions, the pair of least estimated error for the metrics asked
(:mod:`dpselect.ingest.auto_rule`); otherwise (:func:`choose`) the smallest candidate 2^j
(capped) whose bin ends where the noisy cumulative count first reaches ``quantile`` of the noisy
total — a DP quantile of the users (or pairs); 1 when the noisy total is within the noise of
zero. Both are measured by bench/bench_auto_bounds.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from dpselect.ingest.auto_rule import MetricError, choose_by_error, metric_errors, readable_bins

if TYPE_CHECKING:  # pragma: no cover
    from dpselect.aggregation.noise import DiscreteLaplaceNoise

__all__ = ["AUTO", "HINDSIGHT_GRID", "KAPPA_QUANTILE", "KAPPA_QUANTILE_SELECTED",
           "LINF_QUANTILE", "MAX_AUTO_KAPPA", "MAX_AUTO_LINF", "N_BINS",
           "AutoBounds", "ErrorModel", "Hindsight", "PlanRequest", "bin_of", "choose", "choose_bounds",
           "choose_for_plan", "choose_from_histograms", "choose_from_pairs", "choose_kappa_from_histogram",
           "choose_kappa_from_sets", "feasible_caps", "hindsight", "histogram", "is_auto", "noise_for",
           "noisy_histogram", "one_pair_per_user", "pair_counts", "pair_tags", "plan_at_chosen", "plan_request",
           "refuse_other_strings",
           "select_with_auto_kappa", "split_epsilon", "with_chosen_kappa"]

AUTO = "auto"
# Bins 0..32: bin 0 is {1}, bin j >= 1 is (2^(j-1), 2^j]; counts of up to 2^32 (the most rows a
# release reads).
N_BINS = 33
# The largest κ auto may choose: a selection at κ = 2^8 already needs hundreds of users per key
# at ε = 1, and building it costs from a fraction of a second (π_opt) to seconds (Gaussian
# thresholding); beyond it the selection cannot be built at common budgets (each key runs at ε/κ).
MAX_AUTO_KAPPA = 2**8
# The largest L∞ auto may choose (the plan lowers both caps until every step's noise fits).
MAX_AUTO_LINF = 2**16
# The quantiles of the rule, for κ (of the users) and for L∞ (of the one pair per user):
# bench/bench_auto_bounds.py measures them against every fixed pair (docs/privacy/auto-bounds.md).
# κ is read lower when keys are selected from the data: the selection's threshold grows linearly
# with κ (each key runs at ε/κ) while a key's bounded user count grows more slowly, so the keys
# near the threshold, which decide how many are released, favour a small κ.
KAPPA_QUANTILE = Fraction(3, 4)  # select_partitions with the "public" strategy (no metrics to weigh)
KAPPA_QUANTILE_SELECTED = Fraction(1, 4)  # with keys selected from the data
LINF_QUANTILE = Fraction(1, 4)


def is_auto(value: object) -> bool:
    """Exactly the string "auto" (a bound given as "Auto" or 0.5 is refused by the bound's own
    check, naming the parameter)."""
    return isinstance(value, str) and value == AUTO


def refuse_other_strings(name: str, value: object, check: Any) -> None:
    """A bound given as a string other than "auto" ("Auto", "2"): the bound's own check's error
    (a TypeError naming the parameter), with the one string that is accepted."""
    if isinstance(value, str) and not is_auto(value):
        try:
            check(value)
        except TypeError as exc:
            raise type(exc)(f"{exc} (the one string accepted is 'auto': {name} chosen privately, "
                            "docs/privacy/auto-bounds.md)") from None


def bin_of(counts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The bin of each count >= 1: ceil(log2(c)), i.e. (c - 1).bit_length(), exactly in integers."""
    c = np.asarray(counts, dtype=np.int64)
    if c.size and (c.min() < 1 or c.max() > 2**32):
        raise ValueError("counts must be between 1 and 2**32")
    below = c - 1  # bit_length of c - 1, vectorised: the number of halvings to reach 0
    out = np.zeros(c.shape, dtype=np.int64)
    while np.any(below):
        nonzero = below > 0
        out += nonzero
        below >>= 1
    return out


def histogram(counts: npt.NDArray[np.int64], cap: int = 2**32) -> npt.NDArray[np.int64]:
    """The exact histogram of ``counts`` (one per user) over the power-of-two bins up to the bin
    of ``cap`` (a power of two), counts above ``cap`` in that last bin: log2(cap) + 1 bins. Bins
    beyond the largest candidate would only add noise (a noisy empty bin read as its positive
    part pulls the quantile up), so the histogram stops at the cap, which depends on the
    parameters alone."""
    n_bins = bin_of(np.array([cap]))[0] + 1
    return np.bincount(np.minimum(bin_of(counts), n_bins - 1), minlength=n_bins).astype(np.int64)


def noise_for(epsilon: Fraction) -> DiscreteLaplaceNoise:
    """The histogram's noise: each user changes one bin by 1 (L0 = 1, Δ = 1), scale 1/ε."""
    from dpselect.aggregation.noise import DiscreteLaplaceNoise  # here: dpselect.aggregation imports this package

    return DiscreteLaplaceNoise.for_epsilon(epsilon, sensitivity=1, max_partitions_contributed=1)


def noisy_histogram(exact: npt.NDArray[np.int64], epsilon: Fraction, rng: Any) -> npt.NDArray[np.int64]:
    """``exact`` plus exact discrete Laplace noise of scale 1/ε on every bin: ε-DP."""
    return noise_for(epsilon).add(np.asarray(exact, dtype=np.int64), rng=rng)


def choose(noisy: npt.NDArray[np.int64], *, quantile: Fraction, cap: int, scale: Fraction = Fraction(0)) -> int:
    """The bound read from a noisy histogram: 2^j for the first bin j where the cumulative noisy
    count reaches ``quantile`` of the noisy total, at most ``cap`` (a power of two). The bins are
    read as drawn, negative ones included: the noise has mean 0, so the empty bins' noise does
    not pull the quantile up (as reading a negative bin as 0 would). 1 when the noisy total is
    not above three standard deviations of its noise, 3·t·√(2·bins) for noise of scale ``t`` on
    each bin (the variance of discrete Laplace noise is below 2t²): too few users to read
    anything, and the smallest bound adds the least noise. Depends on nothing but its arguments
    (exact integer and rational arithmetic)."""
    bins = [int(x) for x in np.asarray(noisy, dtype=np.int64)]
    total = sum(bins)
    if total <= 0 or Fraction(total) ** 2 <= 18 * len(bins) * Fraction(scale) ** 2:
        return 1
    q = Fraction(quantile)
    running = 0
    for j, count in enumerate(bins):
        running += count
        if running * q.denominator >= q.numerator * total:
            return min(1 << j, cap)
    return cap  # not reached: the last running sum is the total


def pair_counts(users: npt.NDArray[np.uint32], partitions: npt.NDArray[np.uint32], n_users: int
                ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """From the encoded rows: c_u (distinct partitions of each user, 0 for a code with no row),
    and for every distinct (user, partition) pair, sorted, its user, its partition and its number
    of rows r_{u,p}."""
    key = (np.asarray(users, dtype=np.uint64) << np.uint64(32)) | np.asarray(partitions, dtype=np.uint64)
    pairs, rows = np.unique(key, return_counts=True)
    pair_users = (pairs >> np.uint64(32)).astype(np.int64)
    pair_parts = (pairs & np.uint64(0xFFFFFFFF)).astype(np.int64)
    per_user = np.bincount(pair_users, minlength=n_users).astype(np.int64)
    return per_user, pair_users, pair_parts, rows.astype(np.int64)


def one_pair_per_user(pair_users: npt.NDArray[np.int64], rows: npt.NDArray[np.int64], tags: npt.NDArray[Any]
                      ) -> npt.NDArray[np.int64]:
    """r_{u,p} of one pair per user: the user's pair with the smallest tag (``tags``, one per
    pair, drawn independently and uniformly: :func:`pair_tags`), so a uniform pair of the user's
    up to ties, which the pair order breaks. Each user's choice reads only its own pairs and their
    tags, which is all the sensitivity argument needs. ``pair_users`` is sorted (as
    :func:`pair_counts` gives it)."""
    if pair_users.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((tags, pair_users))  # by user, then by tag
    sorted_users = pair_users[order]
    first = np.ones(order.size, dtype=bool)
    first[1:] = sorted_users[1:] != sorted_users[:-1]
    return rows[order[first]]


def pair_tags(n_pairs: int, rng: Any) -> npt.NDArray[np.uint64]:
    """Independent uniform 62-bit tags, one per pair, from the package CSPRNG."""
    if n_pairs == 0:
        return np.zeros(0, dtype=np.uint64)
    return np.asarray(rng.uniform_below_array(1 << 62, n_pairs), dtype=np.uint64)


@dataclass(frozen=True)
class AutoBounds:
    """What the private choice released: the chosen bounds (None: given, not chosen), the noisy
    histograms they were read from, and the step's exact ε (the sum of the histograms')."""

    kappa: int | None
    linf: int | None
    noisy_kappa: npt.NDArray[np.int64] | None
    noisy_linf: npt.NDArray[np.int64] | None
    epsilon: Fraction
    kappa_quantile: Fraction
    linf_quantile: Fraction
    # Chosen by the ε-aware rule (public partitions, :mod:`dpselect.ingest.auto_rule`) rather
    # than read at the quantiles.
    by_error: bool = False

    def what(self, kappa: int, linf: int | None) -> str:
        """The step's name in a statement, with the values used."""
        chosen = [f"κ = {kappa}"] if self.kappa is not None else []
        chosen += [f"L∞ = {linf}"] if self.linf is not None else []
        return f"contribution bounds ({' and '.join(chosen)} chosen privately)"

    def statement(self) -> str:
        """The step's own guarantee."""
        parts = []
        if self.by_error:
            hist = [name for name, h in (("each user's number of distinct partitions", self.noisy_kappa),
                                         ("the rows of one uniformly chosen (user, partition) pair per user",
                                          self.noisy_linf)) if h is not None]
            return (f"a histogram of {' and of '.join(hist)} over power-of-two bins, each user in one bin of each "
                    "(L1 sensitivity 1), with exact discrete Laplace noise (Canonne, Kamath, Steinke, NeurIPS "
                    f"2020): {float(self.epsilon):.6g}-DP (ε = {self.epsilon}), δ = 0; the bounds are the powers "
                    "of two of least estimated error for the metrics' noise at the public keys, read from the "
                    "noisy histograms alone (post-processing). See docs/privacy/auto-bounds.md.")
        if self.noisy_kappa is not None:
            parts.append("a histogram of each user's number of distinct partitions (κ: its noisy "
                         f"{float(self.kappa_quantile):g}-quantile)")
        if self.noisy_linf is not None:
            parts.append("a histogram of the rows of one uniformly chosen (user, partition) pair per user (L∞: its "
                         f"noisy {float(self.linf_quantile):g}-quantile)")
        return (f"{' and '.join(parts)} over power-of-two bins, each user in one bin of each (L1 sensitivity 1), "
                f"with exact discrete Laplace noise (Canonne, Kamath, Steinke, NeurIPS 2020): "
                f"{float(self.epsilon):.6g}-DP (ε = {self.epsilon}), δ = 0; each bound is the upper end of its "
                "quantile's bin, read from the noisy histogram alone (post-processing). See "
                "docs/privacy/auto-bounds.md.")


def split_epsilon(epsilon: Fraction, kappa_auto: bool, linf_auto: bool) -> tuple[Fraction, Fraction]:
    """(ε_κ, ε_L) of the step's ε: halves when both are chosen, all of it to the one chosen."""
    if kappa_auto and linf_auto:
        return epsilon / 2, epsilon / 2
    return (epsilon, Fraction(0)) if kappa_auto else (Fraction(0), epsilon)


def choose_bounds(users: npt.NDArray[np.uint32], partitions: npt.NDArray[np.uint32], n_users: int, *,
                  epsilon: Fraction, kappa_cap: int | None, linf_cap: int | None, rng: Any,
                  kappa_quantile: Fraction = KAPPA_QUANTILE, linf_quantile: Fraction = LINF_QUANTILE) -> AutoBounds:
    """κ (if ``kappa_cap`` is given) and L∞ (if ``linf_cap`` is given) from the encoded rows,
    ε-DP in all (``epsilon`` split by :func:`split_epsilon`). Users with no row (a code of a
    dropped row) are in no bin."""
    per_user, pair_users, _, rows = pair_counts(users, partitions, n_users)
    return choose_from_pairs(per_user, pair_users, rows, epsilon=epsilon, kappa_cap=kappa_cap, linf_cap=linf_cap,
                             rng=rng, kappa_quantile=kappa_quantile, linf_quantile=linf_quantile)


def choose_from_pairs(per_user: npt.NDArray[np.int64], pair_users: npt.NDArray[np.int64],
                      rows: npt.NDArray[np.int64], *, epsilon: Fraction, kappa_cap: int | None, linf_cap: int | None,
                      rng: Any, kappa_quantile: Fraction = KAPPA_QUANTILE,
                      linf_quantile: Fraction = LINF_QUANTILE, by_error: ErrorModel | None = None) -> AutoBounds:
    """:func:`choose_bounds` from :func:`pair_counts`' arrays. With ``by_error`` (public
    partitions), the bounds are those of least estimated error
    (:func:`dpselect.ingest.auto_rule.choose_by_error`) instead of the quantiles, read from the
    same noisy histograms."""
    eps_k, eps_l = split_epsilon(epsilon, kappa_cap is not None, linf_cap is not None)
    kappa = linf = None
    noisy_k = noisy_l = None
    spent = Fraction(0)
    if kappa_cap is not None:
        noisy_k, kappa, eps = _read(histogram(per_user[per_user > 0], kappa_cap), eps_k, kappa_quantile, kappa_cap, rng)
        spent += eps
    if linf_cap is not None:
        chosen_rows = one_pair_per_user(pair_users, rows, pair_tags(int(pair_users.size), rng))
        noisy_l, linf, eps = _read(histogram(chosen_rows, linf_cap), eps_l, linf_quantile, linf_cap, rng)
        spent += eps
    return _found(kappa, linf, noisy_k, noisy_l, spent, (eps_k, eps_l), (kappa_cap, linf_cap),
                  (kappa_quantile, linf_quantile), by_error)


@dataclass(frozen=True)
class ErrorModel:
    """The public parameters the ε-aware rule weighs (with public partitions): each metric's
    noise (:func:`dpselect.ingest.auto_rule.metric_errors`), the number of public keys, and the
    given κ / L∞ (the plan's, used where that bound is not chosen)."""

    metrics: tuple[MetricError, ...]
    n_keys: int
    kappa: int
    linf: int


def _by_error(model: ErrorModel, noisy_k: npt.NDArray[np.int64] | None, noisy_l: npt.NDArray[np.int64] | None,
              eps_k: Fraction, eps_l: Fraction, kappa_cap: int | None, linf_cap: int | None) -> tuple[int | None,
                                                                                                   int | None]:
    """(κ, L∞) of the ε-aware rule from the noisy histograms (None: a bound not chosen)."""
    k_bins = None if noisy_k is None else readable_bins(noisy_k, noise_for(eps_k).scale)
    l_bins = None if noisy_l is None else readable_bins(noisy_l, noise_for(eps_l).scale)
    kappa, linf = choose_by_error(k_bins, l_bins, metrics=model.metrics, n_keys=model.n_keys,
                                  kappa=model.kappa if kappa_cap is None else kappa_cap,
                                  linf=model.linf if linf_cap is None else linf_cap)
    return (None if kappa_cap is None else kappa), (None if linf_cap is None else linf)


def choose_from_histograms(exact_kappa: npt.NDArray[np.int64] | None, exact_linf: npt.NDArray[np.int64] | None, *,
                           epsilon: Fraction, kappa_cap: int | None, linf_cap: int | None, rng: Any,
                           kappa_quantile: Fraction = KAPPA_QUANTILE,
                           linf_quantile: Fraction = LINF_QUANTILE, by_error: ErrorModel | None = None) -> AutoBounds:
    """:func:`choose_from_pairs` from the exact histograms themselves (:func:`histogram` of the
    c_u of every user with a row, up to ``kappa_cap``, and of the r_u of one uniformly chosen
    pair per user, up to ``linf_cap``; each None when its bound is given), computed elsewhere
    (by Spark's executors, :mod:`dpselect.spark`): the same noise, rule, split and statement."""
    eps_k, eps_l = split_epsilon(epsilon, kappa_cap is not None, linf_cap is not None)
    kappa = linf = None
    noisy_k = noisy_l = None
    spent = Fraction(0)
    if kappa_cap is not None:
        assert exact_kappa is not None
        noisy_k, kappa, eps = _read(_checked(exact_kappa, kappa_cap), eps_k, kappa_quantile, kappa_cap, rng)
        spent += eps
    if linf_cap is not None:
        assert exact_linf is not None
        noisy_l, linf, eps = _read(_checked(exact_linf, linf_cap), eps_l, linf_quantile, linf_cap, rng)
        spent += eps
    return _found(kappa, linf, noisy_k, noisy_l, spent, (eps_k, eps_l), (kappa_cap, linf_cap),
                  (kappa_quantile, linf_quantile), by_error)


def _found(kappa: int | None, linf: int | None, noisy_k: npt.NDArray[np.int64] | None,
           noisy_l: npt.NDArray[np.int64] | None, spent: Fraction, epsilons: tuple[Fraction, Fraction],
           caps: tuple[int | None, int | None], quantiles: tuple[Fraction, Fraction],
           by_error: ErrorModel | None) -> AutoBounds:
    """The choice from the noisy histograms: the quantiles' bounds, or with ``by_error`` (public
    partitions) the ε-aware rule's, read from the same histograms (post-processing)."""
    if by_error is not None:
        kappa, linf = _by_error(by_error, noisy_k, noisy_l, *epsilons, *caps)
    return AutoBounds(kappa, linf, noisy_k, noisy_l, spent, Fraction(quantiles[0]), Fraction(quantiles[1]),
                      by_error is not None)


def _checked(exact: npt.NDArray[np.int64], cap: int) -> npt.NDArray[np.int64]:
    """An exact histogram computed elsewhere, with the number of bins :func:`histogram` gives
    at ``cap`` (a wrong length would change the noise's reading, not only the counts)."""
    out = np.asarray(exact, dtype=np.int64)
    n_bins = int(bin_of(np.array([cap]))[0]) + 1
    if out.shape != (n_bins,) or (out.size and out.min() < 0):
        raise AssertionError(f"an exact histogram up to {cap} has {n_bins} non-negative bins, got {out!r}")
    return out


def _read(exact: npt.NDArray[np.int64], epsilon: Fraction, quantile: Fraction, cap: int, rng: Any
          ) -> tuple[npt.NDArray[np.int64], int, Fraction]:
    """One histogram's step: its noisy counts (ε-DP), the bound read from them, and the exact ε spent."""
    noise = noise_for(epsilon)
    noisy = noisy_histogram(exact, epsilon, rng)
    return noisy, choose(noisy, quantile=quantile, cap=cap, scale=noise.scale), noise.epsilon


def choose_kappa_from_sets(per_user: npt.NDArray[np.int64], *, epsilon: Fraction, cap: int, rng: Any,
                           quantile: Fraction = KAPPA_QUANTILE) -> AutoBounds:
    """κ alone, from each user's number of distinct partitions (a selection of keys has no L∞)."""
    return choose_kappa_from_histogram(histogram(per_user[per_user > 0], cap), epsilon=epsilon, cap=cap, rng=rng,
                                       quantile=quantile)


def choose_kappa_from_histogram(exact: npt.NDArray[np.int64], *, epsilon: Fraction, cap: int, rng: Any,
                                quantile: Fraction = KAPPA_QUANTILE) -> AutoBounds:
    """:func:`choose_kappa_from_sets` from the exact histogram of the c_u (computed elsewhere:
    by Spark's executors)."""
    noisy, kappa, spent = _read(_checked(exact, cap), epsilon, quantile, cap, rng)
    return AutoBounds(kappa, None, noisy, None, spent, Fraction(quantile), LINF_QUANTILE)


def feasible_caps(kappa: int | None, linf: int | None, check: Any) -> tuple[int, int]:
    """The largest candidates auto may choose, from the parameters alone: start at the caps
    (a given bound stays as given) and halve the larger auto one until ``check(κ, L∞)`` (every
    step's noise and the selection at those bounds) passes. The last failure is raised when even
    1 fails, so a release is refused before any data is read, never after."""
    k = MAX_AUTO_KAPPA if kappa is None else kappa
    lf = MAX_AUTO_LINF if linf is None else linf
    while True:
        try:
            check(k, lf)
            return k, lf
        except ValueError:
            if linf is None and lf > 1 and (kappa is not None or lf >= k):
                lf //= 2
            elif kappa is None and k > 1:
                k //= 2
            elif linf is None and lf > 1:
                lf //= 2
            else:
                raise


@dataclass(frozen=True)
class PlanRequest:
    """What an aggregate plan asks of the choice, from its parameters alone: the step's ε (the
    plan's "contribution_bounds" share), the caps of the bounds to choose (None: given), and the
    quantile of κ (lower when keys are selected from the data)."""

    epsilon: Fraction
    kappa_cap: int | None
    linf_cap: int | None
    kappa_quantile: Fraction
    linf_quantile: Fraction = LINF_QUANTILE
    # With public partitions: the ε-aware rule's public parameters (:class:`ErrorModel`).
    by_error: ErrorModel | None = None


def plan_request(plan: Any, n_public_keys: int | None = None) -> PlanRequest:
    """The :class:`PlanRequest` of an :class:`~dpselect.aggregation.plan.AggregatePlan` with a
    bound "auto" (on one machine and on Spark alike). With public partitions (``n_public_keys``,
    their number) the bounds are those of least estimated error for the plan's metrics
    (:mod:`dpselect.ingest.auto_rule`), otherwise the quantiles'."""
    from dpselect.aggregation.plan import CONTRIBUTION_BOUNDS

    eps, _ = plan.shares[CONTRIBUTION_BOUNDS]
    model = None
    if plan.public and n_public_keys:
        metrics = tuple(metric_errors(plan))
        model = ErrorModel(metrics, n_public_keys, plan.kappa, plan.linf) if metrics else None
    return PlanRequest(eps, plan.kappa if plan.auto_kappa else None, plan.linf if plan.auto_linf else None,
                       KAPPA_QUANTILE if plan.public else KAPPA_QUANTILE_SELECTED, LINF_QUANTILE, model)


def choose_for_plan(plan: Any, users: npt.NDArray[np.uint32], partitions: npt.NDArray[np.uint32], n_users: int,
                    n_partitions: int, rng: Any, n_public_keys: int | None = None) -> tuple[Any, Any, Hindsight]:
    """For :func:`dpselect.aggregate`: the plan at the privately chosen κ / L∞ (its selection
    rebuilt at the chosen κ, with its own share of the budget), the step's component, and the
    data holder's exact hindsight figures (NOT DP, :func:`hindsight`). The
    plan's κ / L∞ are the largest values the choice may take (checked before any data was read),
    and the step spends the plan's "contribution_bounds" share. With public partitions
    (``n_public_keys``, their number) the bounds are those of least estimated error for the
    plan's metrics (:mod:`dpselect.ingest.auto_rule`), otherwise the quantiles'."""
    request = plan_request(plan, n_public_keys)
    per_user, pair_users, pair_parts, rows = pair_counts(users, partitions, n_users)
    found = choose_from_pairs(per_user, pair_users, rows, epsilon=request.epsilon, kappa_cap=request.kappa_cap,
                              linf_cap=request.linf_cap, rng=rng, kappa_quantile=request.kappa_quantile,
                              linf_quantile=request.linf_quantile, by_error=request.by_error)
    chosen_plan, component = plan_at_chosen(plan, found)
    figures = hindsight(per_user, pair_users, pair_parts, rows, n_partitions, chosen_plan.kappa)
    return chosen_plan, component, figures


def plan_at_chosen(plan: Any, found: AutoBounds) -> tuple[Any, Any]:
    """The plan at the bounds ``found`` chose (the given one kept), and the step's component of
    the statement: "contribution bounds (κ = … and L∞ = … chosen privately)", (ε of the step, 0)."""
    from dataclasses import replace

    from dpselect.aggregation.guarantee import Component
    from dpselect.aggregation.plan import float_down
    from dpselect.ingest.plan import build_strategy

    kappa = plan.kappa if found.kappa is None else found.kappa
    linf = plan.linf if found.linf is None else found.linf
    try:
        # The plan again at the chosen bounds: each metric's noise, the δ split and the selection
        # (strategy "auto" included) fit the bounds that run (post-processing of the DP choice).
        chosen_plan = plan.at_bounds(kappa, linf)
    except ValueError:
        # Not expected (every check passed at the caps, and each step's noise only shrinks with
        # the bounds), but a release must not fail on the data: keep the plan's choices, scaled.
        strategy = plan.strategy
        if found.kappa is not None and strategy is not None:
            eps_sel, delta_sel = plan.shares["selection"]
            strategy = build_strategy(strategy.name, float_down(eps_sel), float_down(delta_sel), kappa, False, False)
        chosen_plan = replace(plan, kappa=kappa, linf=linf, strategy=strategy)
    return chosen_plan, Component(found.what(kappa, linf), found.epsilon, Fraction(0), found.statement())


def select_with_auto_kappa(counter: Any, auto: Any, rng: Any) -> tuple[Any, Any, int | None, AutoBounds]:
    """For :func:`dpselect.select_partitions` with ``max_partitions_contributed="auto"``: κ from
    the counter's user sets (ε of ``auto.epsilon``), the strategy rebuilt at κ (``auto``, a
    :class:`dpselect.ingest.plan.AutoKappa`), each user bounded to κ of its partitions (uniform,
    package CSPRNG, the row-bounding kernel with one row per pair), and the distinct-user
    counts: (partition counts, strategy, its counts' half-width, what was chosen)."""
    from dpselect import _bound
    from dpselect.ingest._counter import PartitionCounts

    sets, keys_of = counter.user_sets()
    per_user = np.diff(sets.ends.astype(np.int64), prepend=0)
    found = choose_kappa_from_sets(per_user, epsilon=auto.epsilon, cap=auto.cap, rng=rng, quantile=auto.quantile)
    assert found.kappa is not None
    strategy, half_width = auto.build(found.kappa)
    users = np.repeat(np.arange(per_user.size, dtype=np.uint32), per_user)
    counts = _bound.bound_rows(users, sets.partitions, int(per_user.size), sets.n_partitions, found.kappa, 1, [],
                               rng.test_state)[0]
    if strategy.count_cap is not None:
        np.minimum(counts, strategy.count_cap, out=counts)
    present = counts > 0
    return PartitionCounts(keys=keys_of(present), counts=counts[present]), strategy, half_width, found


def with_chosen_kappa(guarantee: Any, found: AutoBounds) -> Any:
    """A selection's statement composed with the step that chose its κ (basic sequential
    composition: the ε add up, δ is the selection's)."""
    from dataclasses import replace

    from dpselect.core.exact import as_fraction
    from dpselect.core.guarantee import delta_upper_float

    total = delta_upper_float(as_fraction(guarantee.epsilon) + found.epsilon)
    note = (f"κ = {found.kappa} was chosen privately (contribution bounds, κ chosen privately: "
            f"{float(found.epsilon):.6g}-DP, δ = 0; {found.statement()}); with the selection's "
            f"({guarantee.epsilon:g}, {float(guarantee.delta_exact):.3g}) the two compose by basic sequential "
            "composition.")
    return replace(guarantee, epsilon=total, mechanism=f"{guarantee.mechanism} with κ = {found.kappa} chosen "
                   "privately", notes=f"{guarantee.notes} {note}".strip())


# The bounds the data holder's report looks back on.
HINDSIGHT_GRID = (1, 2, 4, 8, 16)


@dataclass(frozen=True, repr=False)
class Hindsight:
    """Exact, NOT DP (for the data holder's report only): for each κ of HINDSIGHT_GRID, the
    expected number of users each partition keeps after κ-bounding, E_p = Σ_{u in p} min(1, κ/c_u)
    (each user keeps a uniform κ of its c_u partitions), and the expected share of (user,
    partition) pairs kept; for each L∞ of the grid, the expected share of rows kept at the
    release's κ, Σ min(r_{u,p}, L∞)·min(1, κ/c_u) / Σ r_{u,p}."""

    kappas: tuple[int, ...]
    expected_users: tuple[npt.NDArray[np.float64], ...]
    pairs_kept: tuple[float, ...]
    linfs: tuple[int, ...]
    rows_kept: tuple[float, ...]

    def __repr__(self) -> str:
        return "Hindsight(exact figures, NOT DP: for the data holder's report only)"


def hindsight(per_user: npt.NDArray[np.int64], pair_users: npt.NDArray[np.int64],
              pair_parts: npt.NDArray[np.int64], rows: npt.NDArray[np.int64], n_partitions: int,
              kappa: int) -> Hindsight:
    """The exact figures of :class:`Hindsight` from :func:`pair_counts`' arrays."""
    c = per_user[pair_users].astype(np.float64)
    users, pairs = [], []
    for k in HINDSIGHT_GRID:
        keep = np.minimum(1.0, k / c) if c.size else c
        users.append(np.bincount(pair_parts, weights=keep, minlength=n_partitions).astype(np.float64))
        pairs.append(float(keep.sum() / c.size) if c.size else 1.0)
    keep = np.minimum(1.0, kappa / c) if c.size else c
    total = float(rows.sum())
    kept_rows = tuple(float(np.sum(np.minimum(rows, lf) * keep) / total) if total else 1.0 for lf in HINDSIGHT_GRID)
    return Hindsight(HINDSIGHT_GRID, tuple(users), tuple(pairs), HINDSIGHT_GRID, kept_rows)
