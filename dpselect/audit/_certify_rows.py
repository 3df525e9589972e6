"""Certificates of the row mechanisms (weighted Gaussian and Laplace, DP-SIPS, cumulative
DP-SIPS, the policy references): their weights, noise and thresholds re-evaluated with rational bounds on the values
that run. The theorems their δ terms come from are taken from their papers (Gopi et al., ICML
2020; Swanberg et al., 2023) and listed under "not checked"."""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from dpselect.audit._certify_common import Result, composed_delta
from dpselect.core.exact import normal_tail_upper, sqrt_bounds
from dpselect.audit._targets import Target
from dpselect.audit.results import Check
from dpselect.core.verify import exp_lower_by_squaring
from dpselect.mechanisms.gaussian import agm_delta_upper
from dpselect.mechanisms.weighted import WeightedGaussian

__all__ = ["certify_cumulative_sips", "certify_dp_sips", "certify_policy", "certify_weighted"]

_WEIGHT_ONE = 1 << 32


def _weight_checks(weights: Any, kappa: int, norm: str) -> Check:
    w = [int(v) for v in weights]
    if norm == "l2":
        ok = all(m * w[m] * w[m] <= _WEIGHT_ONE * _WEIGHT_ONE for m in range(1, kappa + 1))
        what = "m * w_m^2 <= 1 (L2 norm of a user's vector)"
    else:
        ok = all(m * w[m] <= _WEIGHT_ONE for m in range(1, kappa + 1))
        what = "m * w_m <= 1 (L1 norm of a user's vector)"
    return Check("weights", ok, f"{what} for m = 1..{kappa}, in units of 2^-32")


def _gaussian_threshold_delta(rho: Fraction, sigma: Fraction, weights: Any, kappa: int) -> Fraction:
    """max over m of the composed probability that any of a new user's m partitions (weight w_m
    each, absent from the neighbour) passes ρ, with noise of spread σ."""
    worst = Fraction(0)
    for m in range(1, kappa + 1):
        tail = normal_tail_upper((rho - Fraction(int(weights[m]), _WEIGHT_ONE)) / sigma)
        worst = max(worst, composed_delta(tail, m)[0])
    return worst


def certify_weighted(target: Target) -> Result:
    s = target.strategy
    p = s.params
    kappa = p.max_partitions_contributed
    checks = [Check("claimed delta within the request", target.claimed_delta <= p.delta_exact,
                    f"claimed {float(target.claimed_delta):.6g} <= requested {float(p.delta_exact):.6g}")]
    if isinstance(s, WeightedGaussian):
        checks.append(_weight_checks(s.weights, kappa, "l2"))
        agm = agm_delta_upper(s.sigma, p.epsilon_exact, 1)
        thresholds = _gaussian_threshold_delta(Fraction(s.rho_units, _WEIGHT_ONE), s.sigma, s.weights, kappa)
        verified = agm + thresholds
        checks.append(Check("delta = delta_AGM(sigma) + new partitions passing rho", verified <= target.claimed_delta,
                            f"{float(agm):.6g} + {float(thresholds):.6g} = {float(verified):.6g} <= claimed "
                            f"{float(target.claimed_delta):.6g} (sigma {float(s.sigma):.6g}, rho "
                            f"{s.rho_units / _WEIGHT_ONE:.6g})"))
        not_checked = ["the analytic Gaussian mechanism's theorem and Gopi et al.'s argument (ICML 2020, Theorem 5.1)",
                       "the exactness of the tail draws (see the empirical audit; they assume erfc accurate to 2^-30)"]
    else:
        checks.append(_weight_checks(s.weights, kappa, "l1"))
        worst = Fraction(0)
        for m in range(1, kappa + 1):
            gap = Fraction(s.rho_units - int(s.weights[m]), _WEIGHT_ONE)
            tail = Fraction(1, 2) / exp_lower_by_squaring(p.epsilon_exact * gap) if gap >= 0 else Fraction(1)
            worst = max(worst, composed_delta(tail, m)[0])
        verified = worst
        checks.append(Check("new partitions pass rho with probability <= delta", verified <= target.claimed_delta,
                            f"max_m 1 - (1 - exp(-eps (rho - w_m))/2)^m = {float(verified):.6g} <= claimed "
                            f"{float(target.claimed_delta):.6g} (verifier's own bound on e^x)"))
        not_checked = ["Gopi et al.'s argument (pure epsilon on the partitions both neighbours have)",
                       "the exactness of the tail draws (see the empirical audit)"]
    extra = {"delta_claimed": target.claimed_delta, "delta_verified": verified}
    checked = ["the weights, sigma and threshold the mechanism runs with", "every term of its delta, with rational "
               "bounds"]
    return "rational bounds", checks, checked, not_checked, extra


def _rounds_checks(target: Target) -> list[Check]:
    """What DP-SIPS and cumulative DP-SIPS share: the claim within the request, the L2 weights, and
    the rounds' σ_j composing to one Gaussian of parameter σ."""
    s = target.strategy
    p = s.params
    share = sum((s.sigma * s.sigma / (sj * sj) for sj in s.sigmas), Fraction(0))
    return [Check("claimed delta within the request", target.claimed_delta <= p.delta_exact,
                  f"claimed {float(target.claimed_delta):.6g} <= requested {float(p.delta_exact):.6g}"),
            _weight_checks(s.weights, p.max_partitions_contributed, "l2"),
            Check("rounds compose to one Gaussian of parameter sigma", share <= 1,
                  f"sum_j sigma^2 / sigma_j^2 = {float(share):.12g} <= 1 ({s.rounds} rounds)")]


def certify_dp_sips(target: Target) -> Result:
    s = target.strategy
    p = s.params
    kappa = p.max_partitions_contributed
    checks = _rounds_checks(target)
    agm = agm_delta_upper(s.sigma, p.epsilon_exact, 1)
    thresholds = sum((_gaussian_threshold_delta(Fraction(r, _WEIGHT_ONE), sj, s.weights, kappa)
                      for sj, r in zip(s.sigmas, s.rhos)),
                     Fraction(0))
    verified = agm + thresholds
    checks.append(Check("delta = delta_AGM(sigma) + every round's new partitions passing its threshold",
                        verified <= target.claimed_delta,
                        f"{float(agm):.6g} + {float(thresholds):.6g} = {float(verified):.6g} <= claimed "
                        f"{float(target.claimed_delta):.6g}"))
    extra = {"delta_claimed": target.claimed_delta, "delta_verified": verified}
    checked = ["every round's sigma and threshold", "the rounds' Gaussian composition, exactly",
               "every term of delta, with rational bounds"]
    not_checked = ["Swanberg et al.'s argument (2023) and the analytic Gaussian theorem", "the exactness of the tail "
                   "draws (see the empirical audit)"]
    return "rational bounds", checks, checked, not_checked, extra


def certify_cumulative_sips(target: Target) -> Result:
    """docs/privacy/cumulative-sips.md: the rounds compose as DP-SIPS's; round j's threshold on
    the accumulated mean C_j must make a new user's keys (at most m, mean at most w_m) pass with
    probability at most its share, with the spread s_j of C_j recomputed here from the rounds' σ
    and combination weights, and the half cell the rounding may add."""
    from dpselect.mechanisms.cumulative import CELL_BITS

    s = target.strategy
    p = s.params
    kappa = p.max_partitions_contributed
    checks = _rounds_checks(target)
    half_cell = Fraction(1, 1 << (CELL_BITS + 1))
    thresholds = Fraction(0)
    for j, rho in enumerate(s.rhos):
        mass = sum(s.combination[:j + 1])
        variance = sum((Fraction(a, mass) ** 2 * sj * sj for a, sj in zip(s.combination, s.sigmas[:j + 1])),
                       Fraction(0))
        spread = sqrt_bounds(variance, 64)[1]
        # the rounding may add half a cell to C_j: the keys pass ρ_j − g/2 at spread s_j
        thresholds += _gaussian_threshold_delta(rho - half_cell, spread, s.weights, kappa)
        if s.cut_offs[j] != math.floor(mass * rho * (1 << CELL_BITS)):
            checks.append(Check(f"round {j + 1} cut-off", False, "the integer cut-off is not floor(A_j rho_j 2^6)"))
    agm = agm_delta_upper(s.sigma, p.epsilon_exact, 1)
    verified = agm + thresholds
    checks.append(Check("delta = delta_AGM(sigma) + every round's new keys passing its accumulated threshold",
                        verified <= target.claimed_delta,
                        f"{float(agm):.6g} + {float(thresholds):.6g} = {float(verified):.6g} <= claimed "
                        f"{float(target.claimed_delta):.6g}"))
    extra = {"delta_claimed": target.claimed_delta, "delta_verified": verified}
    checked = ["every round's sigma, accumulated spread, threshold and integer cut-off",
               "the rounds' Gaussian composition, exactly", "every term of delta, with rational bounds"]
    not_checked = ["the argument of docs/privacy/cumulative-sips.md and the analytic Gaussian theorem",
                   "the exactness of the rounded Gaussian draws (see the empirical audit; they assume erfc accurate "
                   "to 2^-30)"]
    return "rational bounds", checks, checked, not_checked, extra


def certify_policy(target: Target) -> Result:
    checks = [Check("not certified by dpselect", True,
                    "a reference implementation: its sequential updates are computed in floating point, so the "
                    "contraction argument of Gopi et al. is not certified on the values that run; its guarantee "
                    "says NOT CERTIFIED")]
    return "not certified", checks, [], ["the whole privacy claim (use weighted_gaussian or dp_sips for a "
                                         "certified mechanism)"], {}
