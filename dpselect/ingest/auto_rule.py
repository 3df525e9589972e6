"""The ε-aware rule for κ and L∞ chosen privately with public partitions
(docs/privacy/auto-bounds.md, "The rule, and how it was measured").

With the keys public, their number K is public, and so is every metric's noise at any (κ, L∞)
(the plan's shares, the noise kind, ε or ρ). The rule estimates, for every candidate pair, the
root mean squared relative error of each metric at a typical key, from the two noisy histograms
alone, and picks the pair whose geometric mean over the metrics is the smallest:

- dropped data (bias): the share of (user, partition) pairs that κ-bounding drops,
  Σ_u max(0, c_u − κ) / Σ_u c_u, and of rows that L∞-bounding drops, both read off the noisy
  histograms with each bin's users at the bin's midpoint;
- noise: the metric's noise variance at (κ, L∞) over the square of its value at a typical key,
  taken as TYPICAL_KEY_SHARE of the average key (Σ_u c_u / K pairs, times the rows per pair for
  row metrics).

It reads nothing but the noisy histograms and public parameters, in exact rational arithmetic:
post-processing of the DP histograms (Dwork and Roth, *The Algorithmic Foundations of
Differential Privacy*, Proposition 2.1), with no privacy cost.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["NOISE_FLOOR_SDS", "TYPICAL_KEY_SHARE", "VALUE_SHARE_OF_BOUND", "MetricError", "choose_by_error",
           "metric_errors", "readable_bins"]

# A noisy bin not above this many standard deviations of its noise (√2·t for discrete Laplace
# of scale t) is read as empty: an empty bin of large values (a midpoint of thousands of rows)
# would otherwise move the estimated totals by its noise times its midpoint.
NOISE_FLOOR_SDS = 3
# The key the error is weighed at, as a share of the average key (total / K): the keys of real
# data are skewed, and the typical (median) key is smaller than the average one.
TYPICAL_KEY_SHARE = Fraction(1, 2)
# The typical |value| of a summed column, as a share of the larger |bound|: bounds are chosen to
# cover the values, so a value is typically well inside them.
VALUE_SHARE_OF_BOUND = Fraction(1, 2)

# How bounding affects each kind of metric: "users" (a count of users: pairs dropped), "rows" (a
# total over rows: pairs and rows dropped), "values" (a total of a column: as rows, with its
# noise in units of the bound), "average" (a mean, variance or quantile: no bias from dropping,
# its noise divided by the kept rows).
_ROLES = {"count_distinct_units": "users", "count": "rows", "count_distinct": "rows", "sum": "values"}


@dataclass(frozen=True)
class MetricError:
    """One metric, for the rule: its role (see above) and its noise, whose variance at κ and
    sensitivity Δ is 2·κ²·Δ²/ε² for Laplace of scale κ·Δ/ε (``laplace_epsilon`` set) and
    κ·Δ²/(2ρ) for Gaussian noise of ρ (``gaussian_rho`` set): the continuous laws' variances,
    which the discrete ones match closely at any useful scale."""

    role: str
    laplace_epsilon: Fraction | None = None
    gaussian_rho: Fraction | None = None

    def variance(self, kappa: int, sensitivity: int) -> Fraction:
        if self.gaussian_rho is not None:
            return Fraction(kappa * sensitivity**2) / (2 * self.gaussian_rho)
        assert self.laplace_epsilon is not None
        return 2 * Fraction(kappa * sensitivity) ** 2 / self.laplace_epsilon**2


def metric_errors(plan: Any) -> list[MetricError]:
    """The rule's view of a plan's metrics (public parameters only): every metric that spends
    budget, with its noise at the plan's shares. A mean computed from a released sum and count
    spends nothing and is left out (its sum and count are in)."""
    out = []
    for name, noise in plan.metric_noise(1, 1).items():
        role = _ROLES.get(plan.metrics[name].kind, "average")
        if noise.kind == "gaussian":
            out.append(MetricError(role, gaussian_rho=Fraction(noise.rho)))
        else:
            out.append(MetricError(role, laplace_epsilon=Fraction(noise.epsilon)))
    return out


def readable_bins(noisy: npt.NDArray[np.int64], scale: Fraction) -> list[int]:
    """The noisy bins as the rule reads them: a bin above NOISE_FLOOR_SDS standard deviations of
    its noise (√2·scale) as drawn, any other as 0, and every bin after two consecutive unreadable
    ones (once one was readable) as 0. An empty bin of large values whose noise passed the floor
    by chance (a midpoint of thousands of rows) would move the estimated totals by its noise
    times its midpoint: past the data's last bins, nothing is read. Compared in squares, exactly."""
    floor_sq = 2 * NOISE_FLOOR_SDS**2 * Fraction(scale) ** 2
    bins = [int(v) for v in np.asarray(noisy, dtype=np.int64)]
    out = [0] * len(bins)
    started, gap = False, 0
    for j, x in enumerate(bins):
        if x > 0 and x * x > floor_sq:
            out[j], started, gap = x, True, 0
        elif started:
            gap += 1
            if gap == 2:
                break
    return out


def _midpoint(j: int) -> Fraction:
    """The midpoint of bin j: 1 for {1}, (2^(j−1) + 1 + 2^j)/2 for (2^(j−1), 2^j]."""
    return Fraction(1) if j == 0 else Fraction(3 * 2 ** (j - 1) + 1, 2)


def _kept(bins: Sequence[int], bound: int | None) -> Fraction:
    """Σ_j bins_j · min(midpoint_j, bound): the estimated total kept at ``bound`` (None: all)."""
    return sum((count * (_midpoint(j) if bound is None else min(_midpoint(j), Fraction(bound)))
                for j, count in enumerate(bins) if count), Fraction(0))


def choose_by_error(kappa_bins: Sequence[int] | None, linf_bins: Sequence[int] | None, *,
                    metrics: Sequence[MetricError], n_keys: int, kappa: int, linf: int) -> tuple[int, int]:
    """The (κ, L∞) of the candidates (powers of two up to ``kappa`` / ``linf``) with the least
    estimated error: the product over ``metrics`` of each one's mean squared relative error at a
    typical key (the geometric mean, squared, to the power of the number of metrics), ties to the
    smaller κ, then the smaller L∞. ``kappa_bins`` / ``linf_bins`` (:func:`readable_bins`): None
    where the bound is given (``kappa`` / ``linf`` is then the only candidate, and the rule
    takes it as every user's number of keys / every pair's rows). Exact rational arithmetic: a
    deterministic function of its arguments. None of the metrics, or histograms with nothing
    readable: (1, 1) where chosen (the least noise)."""
    kappas = [kappa] if kappa_bins is None else [1 << j for j in range(kappa.bit_length())]
    linfs = [linf] if linf_bins is None else [1 << j for j in range(linf.bit_length())]
    smallest = (kappas[0], linfs[0])
    if not metrics or (kappa_bins is not None and not any(kappa_bins)) or \
            (linf_bins is not None and not any(linf_bins)):
        return smallest
    if kappa_bins is None:  # κ given: every user (one per bin of the L∞ histogram) taken to have κ keys
        assert linf_bins is not None
        all_pairs = Fraction(sum(linf_bins) * kappa)
        pairs = {kappa: all_pairs}
    else:
        all_pairs = _kept(kappa_bins, None)
        pairs = {k: _kept(kappa_bins, k) for k in kappas}
    if linf_bins is None:  # L∞ given: every pair taken to have L∞ rows
        all_per_pair = Fraction(linf)
        per_pair = {linf: all_per_pair}
    else:
        sampled = sum(linf_bins)
        all_per_pair = _kept(linf_bins, None) / sampled
        per_pair = {lf: _kept(linf_bins, lf) / sampled for lf in linfs}
    key = TYPICAL_KEY_SHARE / n_keys  # the typical key's share of every total
    users_total = all_pairs * key
    rows_total = users_total * all_per_pair
    value_factor = 1 / VALUE_SHARE_OF_BOUND**2  # a sum's noise, in units of its typical value
    best: tuple[Fraction, int, int] | None = None
    for k in kappas:
        kept_users = pairs[k] * key
        for lf in linfs:
            kept_rows = kept_users * per_pair[lf]
            error = Fraction(1)
            for m in metrics:
                if m.role == "users":
                    error *= (1 - kept_users / users_total) ** 2 + m.variance(k, 1) / users_total**2
                elif m.role == "average":
                    error *= value_factor * m.variance(k, lf) / kept_rows**2
                else:
                    factor = value_factor if m.role == "values" else 1
                    error *= (1 - kept_rows / rows_total) ** 2 + factor * m.variance(k, lf) / rows_total**2
            if best is None or error < best[0]:
                best = (error, k, lf)
    assert best is not None
    return best[1], best[2]
