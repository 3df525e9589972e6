"""Certificates: re-verify, in exact rational arithmetic, the parameters that actually run.

For every built-in mechanism the audit reads the table, noise or thresholds from the built
strategy object (what its kernel handle was loaded from) and re-checks the DP inequalities:

* keep tables (pi_opt, Laplace thresholding, Gaussian thresholding at κ = 1): the four
  (ε', δ') inequalities between every n and n + 1 by :func:`dpselect.core.verify.verify_keep_table`,
  which shares nothing with the builders (Desfontaines et al., PoPETs 2022, Lemma 1), plus the
  worst neighbour ratio against e^{ε'};
* TSGD noise (release, public, mixed): the integer weights' neighbour ratios against the
  verifier's own bound on e^{ε'}, and the exact δ of the rule that runs — recomputed here for
  the actual release threshold (so a threshold off by one shows), and cross-checked against
  :func:`dpselect.core.verify.release_delta` at the paper's threshold k;
* the budget split: affected partitions × ε' <= ε exactly, and the composed δ recomputed with
  its own arithmetic (exact powers, or the Bonferroni upper bounds of inclusion–exclusion);
* Gaussian thresholding and the row mechanisms: every term of their δ (analytic Gaussian δ of
  σ, threshold tails, table rounding) re-evaluated with rational bounds on the values that run;
  the theorems those terms come from are taken from their papers (listed under "not checked");
* the grouped release: every discrete Laplace noise it draws is recorded during a dry run on a
  small synthetic table; its ε = L0·Δ/t follows from the exact pmf ratio bound
  P[X = x] / P[X = x + d] <= exp(|d|/t), and each Δ is checked against the metric's sensitivity.
"""
from __future__ import annotations

import contextlib
import math
import threading
import time
import warnings
from fractions import Fraction
from typing import Any, Iterator

import numpy as np

from dpselect.audit._targets import Target, build_target
from dpselect.audit.results import Certificate, Check
from dpselect.core.exact import as_fraction, exp_upper, normal_cdf_bounds, normal_tail_upper
from dpselect.mechanisms.base import NoRelease, TabledSelection
from dpselect.mechanisms.gaussian import GaussianThresholding, agm_delta_upper
from dpselect.mechanisms.policy import PolicyGaussian, PolicyLaplace
from dpselect.mechanisms.public import MixedRelease, PublicPartitions
from dpselect.mechanisms.tsgd import NoisyRelease, TSGDRelease
from dpselect.mechanisms.weighted import DPSIPS, WeightedGaussian, WeightedLaplace
from dpselect.core.tables import EPSILON_CAP
from dpselect.core.verify import CertificationError, exp_lower_by_squaring, keep_numerators, release_delta, verify_keep_table

__all__ = ["certificate", "composed_delta", "threshold_release_delta"]

# Exact powers (1 − δ')^m up to this many affected partitions; Bonferroni bounds beyond.
_EXACT_POWER_LIMIT = 4096
# The worst-ratio scan is skipped for tables longer than this (the verifier still runs).
_RATIO_SCAN_LIMIT = 200_000
_WEIGHT_ONE = 1 << 32


def certificate(mechanism: Any, epsilon: float | None = None, delta: float | None = None,
                max_partitions_contributed: int | None = None, **options: Any) -> Certificate:
    """Re-verify the parameters that run for ``mechanism`` at (ε, δ, κ).

    ``mechanism``: a name ("pi_opt", "release", "laplace", "gaussian", "public", "mixed",
    "weighted_gaussian", "weighted_laplace", "dp_sips", "policy_gaussian", "policy_laplace",
    "aggregate"), built exactly as :func:`dpselect.make_strategy` builds it (``options`` are its
    options), or a strategy object (then its own parameters are audited). Returns a
    :class:`~dpselect.audit.results.Certificate`; it never raises on a failed check (the check
    says what failed)."""
    start = time.perf_counter()
    target = build_target(mechanism, epsilon, delta, max_partitions_contributed, options)
    builder = _dispatch(target)
    kind, checks, checked, not_checked, extra = builder(target)
    return Certificate(
        mechanism=target.label, epsilon=target.epsilon, delta=target.delta, max_partitions_contributed=target.kappa,
        kind=kind, checks=tuple(checks), checked=tuple(checked), not_checked=tuple(not_checked),
        delta_claimed=extra.get("delta_claimed"), delta_verified=extra.get("delta_verified"),
        epsilon_effective=extra.get("epsilon_effective"), ratio_to_exp_eps=extra.get("ratio_to_exp_eps"),
        seconds=time.perf_counter() - start)


_Result = tuple[str, list[Check], list[str], list[str], dict[str, Any]]


def _dispatch(target: Target) -> Any:
    s = target.strategy
    if target.kind == "aggregate":
        return _certify_aggregate
    if isinstance(s, NoRelease):
        return _certify_no_release
    if isinstance(s, (PolicyGaussian, PolicyLaplace)):
        return _certify_policy
    if isinstance(s, GaussianThresholding):
        return _certify_gaussian
    if isinstance(s, NoisyRelease) or (hasattr(s, "table") and hasattr(getattr(s, "table"), "weights")):
        return _certify_noisy
    if isinstance(s, TabledSelection) or (hasattr(s, "table") and hasattr(getattr(s, "table"), "words")):
        return _certify_keep_table
    if isinstance(s, DPSIPS):
        return _certify_dp_sips
    if isinstance(s, (WeightedGaussian, WeightedLaplace)):
        return _certify_weighted
    return _certify_unknown


# ------------------------------------------------------------------ shared pieces

def composed_delta(partition_delta: Fraction, partitions: int) -> tuple[Fraction, bool]:
    """(1 − (1 − δ')^m, True) exactly for m <= 4096, else (an upper bound, False): the partial
    sums of inclusion–exclusion Σ_j (−1)^{j+1} C(m, j) δ'^j stopped after an odd term are upper
    bounds (Bonferroni), summed until the next term is below 2^-400 δ'. Independent of
    :mod:`dpselect.core.params` (which uses a floored binary power)."""
    x, m = Fraction(partition_delta), int(partitions)
    if x == 0 or m == 0:
        return Fraction(0), True
    if m == 1:
        return x, True
    if m <= _EXACT_POWER_LIMIT:
        return 1 - (1 - x) ** m, True
    total, term, j = Fraction(0), Fraction(1), 0
    floor = x / 2**400
    while True:
        j += 1
        term = term * (m - j + 1) * x / j  # C(m, j) x^j
        total += term if j % 2 else -term
        if j % 2 and (term * (m - j) * x / (j + 1) < floor or j >= m):
            return min(total, m * x), False


def _budget_checks(target: Target) -> tuple[list[Check], Any]:
    """ε split (affected × ε' <= ε, exactly) and claimed δ <= requested δ."""
    p = target.strategy.params
    m = p.affected_partitions
    checks = [Check("budget split (epsilon)", m * p.partition_epsilon <= p.epsilon_exact,
                    f"{m} affected partition(s) x epsilon' {float(p.partition_epsilon):.6g} = "
                    f"{float(m * p.partition_epsilon):.6g} <= epsilon {float(p.epsilon_exact):g}"),
              Check("claimed delta within the request", target.claimed_delta <= p.delta_exact,
                    f"claimed {float(target.claimed_delta):.6g} <= requested {float(p.delta_exact):.6g}")]
    return checks, p


def _composition_check(per_partition: Fraction, m: int, claimed: Fraction, what: str) -> tuple[Check, Fraction]:
    total, exact = composed_delta(per_partition, m)
    how = "exactly" if exact else "by Bonferroni upper bounds"
    ok = total <= claimed
    return Check(f"composition of {what}", ok,
                 f"1 - (1 - {float(per_partition):.6g})^{m} = {float(total):.6g} ({how}) <= claimed "
                 f"{float(claimed):.6g}"), total


def _float_ratio(ratio: Fraction | None, epsilon: Fraction) -> tuple[float | None, float | None]:
    """(ratio / e^ε', ln ratio) as floats."""
    if ratio is None or ratio <= 0:
        return None, None
    log_ratio = math.log(ratio.numerator) - math.log(ratio.denominator)
    return math.exp(log_ratio - float(epsilon)), log_ratio


def _handle_check(strategy: Any, table: Any) -> Check | None:
    """The kernel handle was loaded from these words: its shape must agree with them."""
    handle = getattr(strategy, "_handle", None)
    if handle is None:
        return None
    same = (int(handle.length) == table.length and int(handle.limbs) == table.limbs
            and bool(handle.tail_certain) == bool(table.tail_certain))
    return Check("kernel handle matches the table", same,
                 f"handle: {handle.length} entries x {handle.limbs} limb(s), tail certain {handle.tail_certain}; "
                 f"table: {table.length} x {table.limbs}, {table.tail_certain}")


# ------------------------------------------------------------------ keep tables

def _keep_ratio(words: Any, delta: Fraction, tail_certain: bool) -> Fraction | None:
    """The largest ratio, over every n and the four inequalities, that must be covered by e^{ε'}
    once δ' is spent: max (P − δ')/Q over the neighbouring probabilities (P, Q) of keep and
    drop."""
    values = keep_numerators(words)
    if len(values) > _RATIO_SCAN_LIMIT:
        return None
    arr = np.asarray(words)
    limbs = 1 if arr.ndim == 1 else arr.shape[1]
    scale = 1 << (64 * limbs)
    d = delta * scale  # δ' in table units (a Fraction)
    extended = values + ([scale] if tail_certain else [])
    best: Fraction | None = None
    for lo, hi in zip(extended, extended[1:]):
        for p, q in ((hi, lo), (lo, hi), (scale - lo, scale - hi), (scale - hi, scale - lo)):
            if p > d and q > 0:
                r = (p - d) / q
                if best is None or r > best:
                    best = r
    return best


def _certify_keep_table(target: Target) -> _Result:
    s = target.strategy
    checks, p = _budget_checks(target)
    table = s.table
    eps = min(p.partition_epsilon, EPSILON_CAP)
    per_partition = p.partition_delta  # the budget, never the table's own record of it
    handle = _handle_check(s, table)
    if handle is not None:
        checks.append(handle)
    try:
        slack = verify_keep_table(table.words, eps, per_partition, table.tail_certain)
        checks.append(Check("keep table: four (epsilon', delta') inequalities for every n", True,
                            f"{table.length} entries of {64 * table.limbs} bits verified at epsilon' "
                            f"{float(eps):.6g}, delta' {float(per_partition):.6g}; smallest slack "
                            f"{float(slack):.3g}"))
    except CertificationError as exc:
        checks.append(Check("keep table: four (epsilon', delta') inequalities for every n", False, str(exc)))
    composition, verified = _composition_check(per_partition, p.affected_partitions, target.claimed_delta,
                                               "the per-partition delta")
    checks.append(composition)
    ratio_to, log_ratio = _float_ratio(_keep_ratio(table.words, per_partition, table.tail_certain), eps)
    extra = {"delta_claimed": target.claimed_delta, "delta_verified": verified, "ratio_to_exp_eps": ratio_to,
             "epsilon_effective": None if log_ratio is None else log_ratio * p.affected_partitions}
    checked = ["the keep table the kernel handle was loaded from (strategy.table.words)",
               "every DP inequality between neighbouring counts, by dpselect.core.verify (independent of the builder)",
               "the budget split and the composition over the affected partitions"]
    not_checked = ["that the C kernel samples Bernoulli(q[n]/2^w) exactly (see the empirical audit and "
                   "tests/test_kernel_kat.py)", "that users contribute to at most kappa partitions (assumed of "
                   "counts; enforced by select_partitions)"]
    return "exact", checks, checked, not_checked, extra


def _certify_no_release(target: Target) -> _Result:
    checks = [Check("releases nothing", True, "delta = 0: no key is released and no randomness is used "
                    "(Desfontaines et al., PoPETs 2022, Theorem 2)")]
    return "exact", checks, ["the strategy releases nothing"], [], {"delta_claimed": target.claimed_delta,
                                                                    "delta_verified": Fraction(0)}


# ------------------------------------------------------------------ TSGD noise

def threshold_release_delta(weights: tuple[int, ...] | list[int], total: int, k: int, epsilon: Fraction,
                            threshold: int | None, listed: bool) -> Fraction:
    """The exact δ at ε' of "publish n + X iff n + X > threshold" (threshold None: always
    publish), X with P[X = x] = weights[|x|]/total, over every pair of neighbouring inputs:

    * n vs n + 1 for n >= 1, in both directions;
    * a partition absent from one side: with ``listed`` False (a private key) an absent key is
      not in the output at all, so the pair is (nothing, 1); with ``listed`` True (a public key)
      the absent key is processed with count 0, so the pair is (0, 1).

    Requires (and checks) W(m − 1) <= E W(m) and W(m) <= W(m − 1), E <= e^{ε'} the verifier's
    own bound: then every value both sides can publish contributes nothing, and each pair's
    hockey-stick sum reduces to the suppressed mass plus the support edge each side alone has."""
    if len(weights) != k + 1 or total != weights[0] + 2 * sum(weights[1:]):
        raise CertificationError("TSGD weights do not match k and their total")
    e = exp_lower_by_squaring(Fraction(epsilon))
    for m in range(1, k + 1):
        if weights[m - 1] > e * weights[m] or weights[m] > weights[m - 1] or weights[m] < 1:
            raise CertificationError(f"TSGD weights break the e^eps ratio at |x|={m}")
    cdf = [0]  # cdf[j] = S · P[X <= j − k − 1], j = 0 .. 2k + 1
    for x in range(-k, k + 1):
        cdf.append(cdf[-1] + weights[abs(x)])
    t = -k - 1 if threshold is None else int(threshold)

    def suppressed(n: int) -> Fraction:  # P[n + X <= t]
        j = min(max(t - n + k + 1, 0), 2 * k + 1)
        return Fraction(cdf[j], total)

    edge = Fraction(weights[k], total)
    worst = Fraction(0)
    if listed:
        start = 0
    else:  # nothing vs one user: P[1 + X > t] one way, 1 − E·P[⊥ | 1] the other
        one_bot = suppressed(1)
        worst = max(1 - one_bot, max(Fraction(0), 1 - e * one_bot))
        start = 1
    for n in range(start, max(start, t + k + 1) + 1):
        low, high = suppressed(n), suppressed(n + 1)
        forward = max(Fraction(0), low - e * high) + (edge if n - k > t else 0)  # n − k only n can publish
        backward = max(Fraction(0), high - e * low) + (edge if n + 1 + k > t else 0)
        worst = max(worst, forward, backward)
    return worst


def _certify_noisy(target: Target) -> _Result:
    s = target.strategy
    checks, p = _budget_checks(target)
    table = s.table
    eps = min(p.partition_epsilon, EPSILON_CAP)
    k, weights, total = table.k, tuple(int(w) for w in table.weights), int(table.total)
    expected = np.cumsum(np.array([weights[abs(x)] for x in range(-k, k + 1)], dtype=object))
    cumulative = [int(v) for v in np.asarray(table.cumulative)]
    checks.append(Check("kernel noise table = the certified weights", cumulative == [int(v) for v in expected]
                        and cumulative[-1] == total,
                        f"cumulative weights of x = -{k}..{k} (what WeightTableHandle loads) sum to {total}"))
    noise = getattr(s, "_noise", None)
    if noise is not None:
        checks.append(Check("kernel handle size", int(noise.size) == 2 * k + 1,
                            f"{noise.size} entries for 2k + 1 = {2 * k + 1}"))
    worst_ratio = max(Fraction(weights[m - 1], weights[m]) for m in range(1, k + 1)) if k else Fraction(1)
    rules: list[tuple[str, int | None, bool]] = []
    if isinstance(s, PublicPartitions):
        rules.append(("every listed key published", None, True))
    elif isinstance(s, MixedRelease):
        rules.append((f"private keys above {k}", k, False))
        t_pub = s.public_threshold
        rules.append((f"public keys above {t_pub}", None if t_pub < -k else t_pub, True))
    else:
        t = int(getattr(s, "release_threshold", k))
        rules.append((f"published above {t}", t, False))
    per_partition = Fraction(0)
    for label, threshold, listed in rules:
        try:
            d = threshold_release_delta(weights, total, k, eps, threshold, listed)
            per_partition = max(per_partition, d)
            checks.append(Check(f"exact delta of the rule that runs ({label})", d <= table.certified_delta,
                                f"{float(d):.6g} <= certified per-partition delta {float(table.certified_delta):.6g}"))
        except CertificationError as exc:
            checks.append(Check(f"exact delta of the rule that runs ({label})", False, str(exc)))
            per_partition = Fraction(1)
    try:
        reference = release_delta(list(weights), total, k, eps)
        mine = threshold_release_delta(weights, total, k, eps, k, False)
        checks.append(Check("two independent delta computations agree at threshold k", reference == mine,
                            f"dpselect.core.verify.release_delta {float(reference):.6g}, this audit {float(mine):.6g}"))
    except CertificationError as exc:
        checks.append(Check("TSGD weights' neighbour ratios <= e^eps'", False, str(exc)))
    composition, verified = _composition_check(per_partition, p.affected_partitions, target.claimed_delta,
                                               "the per-partition delta")
    checks.append(composition)
    ratio_to, log_ratio = _float_ratio(worst_ratio, eps)
    extra = {"delta_claimed": target.claimed_delta, "delta_verified": verified, "ratio_to_exp_eps": ratio_to,
             "epsilon_effective": None if log_ratio is None else log_ratio * p.affected_partitions}
    checked = ["the integer weights and cumulative table the kernel handle was loaded from",
               "their neighbour ratios against the verifier's own lower bound on e^eps'",
               "the exact delta of the release rule with the threshold the strategy passes to the kernel",
               "the budget split and the composition over the affected partitions"]
    not_checked = ["that the C kernel samples the weights exactly and applies the threshold it is passed (see the "
                   "empirical audit)", "that users contribute to at most kappa partitions (assumed of counts)"]
    return "exact", checks, checked, not_checked, extra


# ------------------------------------------------------------------ Gaussian thresholding

def _certify_gaussian(target: Target) -> _Result:
    s = target.strategy
    checks, p = _budget_checks(target)
    m = p.affected_partitions
    eps = p.epsilon_exact
    sigma, threshold, delta_p, gap = s.sigma, s.threshold_exact, s.delta_p, s.gap
    agm = agm_delta_upper(sigma, eps, m)
    checks.append(Check("analytic Gaussian delta of sigma (L2 sensitivity sqrt(affected partitions))", True,
                        f"sigma {float(sigma):.6g}: delta_AGM <= {float(agm):.6g} (Balle and Wang, ICML 2018, "
                        "Theorem 8, rational bounds)"))
    tail = normal_tail_upper((threshold - 1) / sigma)
    checks.append(Check("a one-user partition passes the threshold with probability <= delta_p", tail <= delta_p,
                        f"P[1 + Z > T] <= {float(tail):.6g} <= delta_p {float(delta_p):.6g} (T = {float(threshold):.6g})"))
    table = s.table
    handle = _handle_check(s, table)
    if handle is not None:
        checks.append(handle)
    values = keep_numerators(table.words)
    scale = table.scale
    shift = s.pre_threshold - 1
    bad, measured_gap = [], Fraction(0)
    if len(values) <= 4096:
        for n, q in enumerate(values):
            if n <= shift:
                if q != 0:
                    bad.append(n)
                continue
            lo, hi = normal_cdf_bounds((n - shift - threshold) / sigma, 64 * table.limbs + 16)
            if Fraction(q, scale) > hi:
                bad.append(n)
            measured_gap = max(measured_gap, hi - Fraction(q, scale))
        measured_gap = max(measured_gap, 1 - Fraction(values[-1], scale))
        checks.append(Check("table entries are lower bounds of Phi((n - T)/sigma) within g", not bad and
                            measured_gap <= gap, f"{len(values)} entries; largest gap {float(measured_gap):.3g} <= "
                            f"g {float(gap):.3g}" + (f"; entries above Phi at n = {bad[:5]}" if bad else "")))
    else:
        checks.append(Check("table entries are lower bounds of Phi((n - T)/sigma) within g", True,
                            f"skipped: {len(values)} entries (the builder's bound g {float(gap):.3g} is used)"))
    threshold_delta, exact = composed_delta(delta_p, m)
    rounding = (1 + exp_upper(eps, 64)) * 2**63 * gap
    verified = agm + threshold_delta + rounding
    checks.append(Check("delta = delta_AGM + thresholds + table rounding", verified <= target.claimed_delta,
                        f"{float(agm):.6g} + {float(threshold_delta):.6g} + {float(rounding):.3g} = "
                        f"{float(verified):.6g} <= claimed {float(target.claimed_delta):.6g}"))
    extra: dict[str, Any] = {"delta_claimed": target.claimed_delta, "delta_verified": verified}
    kind = "rational bounds"
    if m == 1:
        try:
            slack = verify_keep_table(table.words, eps, s.certified_delta, tail_certain=False)
            checks.append(Check("keep table: four (epsilon, delta) inequalities for every n (kappa = 1)", True,
                                f"smallest slack {float(slack):.3g}"))
            ratio_to, log_ratio = _float_ratio(_keep_ratio(table.words, s.certified_delta, False), eps)
            extra.update(ratio_to_exp_eps=ratio_to, epsilon_effective=log_ratio)
            kind = "exact"
        except CertificationError as exc:
            checks.append(Check("keep table: four (epsilon, delta) inequalities for every n (kappa = 1)", False,
                                str(exc)))
    checked = ["sigma, the threshold and the keep table the kernel handle was loaded from",
               "every term of the certified delta, re-evaluated with rational bounds (dpselect.core.exact)"]
    if m == 1:
        checked.append("the table's four (epsilon, delta) inequalities by dpselect.core.verify (kappa = 1)")
    not_checked = ["the analytic Gaussian mechanism's theorem (Balle and Wang, ICML 2018) and its joint application "
                   "to kappa counts (docs/privacy/gaussian-threshold.md)",
                   "the rational normal CDF bounds are the package's own (dpselect.core.exact), shared with the builder"]
    return kind, checks, checked, not_checked, extra


# ------------------------------------------------------------------ row mechanisms

def _weight_checks(weights: Any, kappa: int, norm: str) -> Check:
    w = [int(v) for v in weights]
    if norm == "l2":
        ok = all(m * w[m] * w[m] <= _WEIGHT_ONE * _WEIGHT_ONE for m in range(1, kappa + 1))
        what = "m * w_m^2 <= 1 (L2 norm of a user's vector)"
    else:
        ok = all(m * w[m] <= _WEIGHT_ONE for m in range(1, kappa + 1))
        what = "m * w_m <= 1 (L1 norm of a user's vector)"
    return Check("weights", ok, f"{what} for m = 1..{kappa}, in units of 2^-32")


def _gaussian_threshold_delta(rho_units: int, sigma: Fraction, weights: Any, kappa: int) -> Fraction:
    """max over m of the composed probability that any of a new user's m partitions (weight w_m
    each, absent from the neighbour) passes ρ."""
    worst = Fraction(0)
    for m in range(1, kappa + 1):
        gap = Fraction(rho_units - int(weights[m]), _WEIGHT_ONE)
        tail = normal_tail_upper(gap / sigma)
        worst = max(worst, composed_delta(tail, m)[0])
    return worst


def _certify_weighted(target: Target) -> _Result:
    s = target.strategy
    p = s.params
    kappa = p.max_partitions_contributed
    checks = [Check("claimed delta within the request", target.claimed_delta <= p.delta_exact,
                    f"claimed {float(target.claimed_delta):.6g} <= requested {float(p.delta_exact):.6g}")]
    if isinstance(s, WeightedGaussian):
        checks.append(_weight_checks(s.weights, kappa, "l2"))
        agm = agm_delta_upper(s.sigma, p.epsilon_exact, 1)
        thresholds = _gaussian_threshold_delta(s.rho_units, s.sigma, s.weights, kappa)
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


def _certify_dp_sips(target: Target) -> _Result:
    s = target.strategy
    p = s.params
    kappa = p.max_partitions_contributed
    checks = [Check("claimed delta within the request", target.claimed_delta <= p.delta_exact,
                    f"claimed {float(target.claimed_delta):.6g} <= requested {float(p.delta_exact):.6g}"),
              _weight_checks(s.weights, kappa, "l2")]
    share = sum((s.sigma * s.sigma / (sj * sj) for sj in s.sigmas), Fraction(0))
    checks.append(Check("rounds compose to one Gaussian of parameter sigma", share <= 1,
                        f"sum_j sigma^2 / sigma_j^2 = {float(share):.12g} <= 1 ({s.rounds} rounds)"))
    agm = agm_delta_upper(s.sigma, p.epsilon_exact, 1)
    thresholds = sum((_gaussian_threshold_delta(r, sj, s.weights, kappa) for sj, r in zip(s.sigmas, s.rhos)),
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


def _certify_policy(target: Target) -> _Result:
    checks = [Check("not certified by dpselect", True,
                    "a reference implementation: its sequential updates are computed in floating point, so the "
                    "contraction argument of Gopi et al. is not certified on the values that run; its guarantee "
                    "says NOT CERTIFIED")]
    return "not certified", checks, [], ["the whole privacy claim (use weighted_gaussian or dp_sips for a "
                                         "certified mechanism)"], {}


def _certify_unknown(target: Target) -> _Result:
    checks = [Check("not certified by dpselect", False,
                    f"{target.label!r} has no keep table, noise table or threshold this audit knows how to verify")]
    return "not certified", checks, [], ["everything"], {}


# ------------------------------------------------------------------ the grouped release

_RECORD_LOCK = threading.Lock()


@contextlib.contextmanager
def _recording_noise() -> Iterator[list[Any]]:
    """Record every DiscreteLaplaceNoise whose ``add`` runs (the object, hence the exact scale the
    kernel is handed) for the duration of one dry run."""
    from dpselect.aggregation.noise import DiscreteLaplaceNoise

    recorded: list[Any] = []
    original = DiscreteLaplaceNoise.add

    def add(self: Any, values: Any, *, out: Any = None, rng: Any = None) -> Any:
        recorded.append(self)
        return original(self, values, out=out, rng=rng)

    with _RECORD_LOCK:
        DiscreteLaplaceNoise.add = add  # type: ignore[method-assign]
        try:
            yield recorded
        finally:
            DiscreteLaplaceNoise.add = original  # type: ignore[method-assign]


def aggregate_metrics(bounds: tuple[float, float]) -> dict[str, Any]:
    """The metrics the grouped-release audits use: one of each kind, on a value column ``value``."""
    from dpselect.aggregation import metrics

    return {"users": metrics.count_distinct_units(), "rows": metrics.count(),
            "total": metrics.sum("value", bounds=bounds), "average": metrics.mean("value", bounds=bounds)}


def _expected_sensitivities(metrics: dict[str, Any], linf: int, bounds: tuple[float, float]) -> list[tuple[str, int]]:
    """The L∞ sensitivity each noise must have, in the order the release draws them, derived here
    from the metric's definition and the value grid (docs/privacy/aggregate.md)."""
    from dpselect.aggregation.aggregate import DEFAULT_PRECISION_BITS
    from dpselect.aggregation.grid import Grid

    grid = Grid.for_bounds(bounds[0], bounds[1], precision_bits=DEFAULT_PRECISION_BITS, integer=False)
    lo, hi = grid.lower_units, grid.upper_units
    out: list[tuple[str, int]] = []
    for name, m in metrics.items():
        if m.kind == "count_distinct_units":
            out.append((name, 1))
        elif m.kind == "count":
            out.append((name, linf))
        elif m.kind == "sum":
            out.append((name, linf * max(abs(lo), abs(hi), 1)))
        else:
            mid = (lo + hi) // 2
            out.append((f"{name} (sum of offsets)", linf * max(hi - mid, mid - lo, 1)))
            out.append((f"{name} (row count)", linf))
    return out


def _synthetic_rows(kappa: int, linf: int, bounds: tuple[float, float]) -> Any:
    """A small table: 300 users over three keys (so the selection keeps some), each user with up
    to κ keys and L∞ + 1 rows in each (so bounding acts), values across and beyond the bounds."""
    from dpselect.ingest.rows import import_pyarrow

    pa = import_pyarrow()
    users, keys, values = [], [], []
    span = bounds[1] - bounds[0]
    for u in range(300):
        for j in range(min(kappa + 1, 3)):
            for r in range(linf + 1):
                users.append(u)
                keys.append(f"key{(u + j) % 3}")
                values.append(bounds[0] - span / 2 + 2 * span * ((u * 7 + r * 3) % 11) / 10)
    return pa.table({"user": pa.array(users, pa.int64()), "key": pa.array(keys, pa.string()),
                     "value": pa.array(values, pa.float64())})


def _certify_aggregate(target: Target) -> _Result:
    import dpselect
    from dpselect.aggregation.plan import budget_shares, float_down, step_weights
    from dpselect.ingest.pipeline import build_strategy

    linf = int(target.options["linf"])
    bounds = tuple(float(b) for b in target.options["bounds"])
    metrics = aggregate_metrics(bounds)  # type: ignore[arg-type]
    eps, delta = as_fraction(target.epsilon), as_fraction(target.delta)  # type: ignore[arg-type]
    kappa = target.kappa
    checks: list[Check] = []
    table = _synthetic_rows(kappa, linf, bounds)  # type: ignore[arg-type]
    # The synthetic rows exceed L∞ on purpose, so bounding drops most of them: the data holder's
    # warning about that describes the audit's own table, not the user's data.
    from dpselect.aggregation.aggregate import BoundingDroppedMostRows

    with _recording_noise() as recorded, warnings.catch_warnings():
        warnings.simplefilter("ignore", BoundingDroppedMostRows)
        result = dpselect.aggregate(table, privacy_unit="user", by="key", metrics=metrics, epsilon=target.epsilon,
                                    delta=target.delta, max_partitions_contributed=kappa,
                                    max_contributions_per_partition=linf, strategy="pi_opt")
    guarantee = result.guarantee
    expected = _expected_sensitivities(metrics, linf, bounds)  # type: ignore[arg-type]
    noise_eps = Fraction(0)
    if len(recorded) != len(expected):
        checks.append(Check("every metric's noise was seen", False,
                            f"{len(recorded)} noise(s) drawn, {len(expected)} expected"))
    for (what, sensitivity), noise in zip(expected, recorded):
        eps_noise = Fraction(noise.max_partitions_contributed * noise.sensitivity) / noise.scale
        noise_eps += eps_noise
        ok = noise.sensitivity >= sensitivity and noise.max_partitions_contributed >= kappa
        checks.append(Check(f"noise of {what}", ok,
                            f"discrete Laplace of scale t = {float(noise.scale):.6g} on L0 = "
                            f"{noise.max_partitions_contributed} coordinate(s) of sensitivity {noise.sensitivity} "
                            f"(expected >= {sensitivity}): sup_x ln P[x]/P[x + d] = |d|/t, so epsilon = L0 * Delta / t "
                            f"= {float(eps_noise):.6g}"))
    selection = [c for c in guarantee.components if c.what.startswith("selection")]
    sel_eps = sum((c.epsilon_exact for c in selection), Fraction(0))
    sel_delta = sum((c.delta_exact for c in selection), Fraction(0))
    total_eps = noise_eps + sel_eps
    checks.append(Check("epsilon of the whole release", total_eps <= eps,
                        f"selection {float(sel_eps):.6g} + metrics {float(noise_eps):.6g} (recomputed from the "
                        f"noises that ran) = {float(total_eps):.6g} <= {float(eps):g}"))
    stated = guarantee.epsilon_exact
    checks.append(Check("the statement's epsilon matches what ran", stated == total_eps,
                        f"statement {float(stated):.6g}, recomputed {float(total_eps):.6g}"))
    verified_delta = sel_delta
    if selection:
        weights = step_weights(metrics, [], False, None)
        eps_sel, delta_sel = budget_shares(eps, delta, weights)["selection"]
        strat = build_strategy("pi_opt", float_down(eps_sel), float_down(delta_sel), kappa, False, False)
        inner = certificate(strat)
        failed = "; ".join(c.name for c in inner.checks if not c.passed)
        checks.append(Check("selection's keep table", inner.passed,
                            f"pi_opt at ({float(strat.params.epsilon_exact):.6g}, {float(strat.params.delta_exact):.3g}), "
                            f"kappa {kappa}: {'FAILED ' + failed if failed else 'verified by dpselect.core.verify'}"))
        if inner.delta_verified is not None:
            verified_delta = inner.delta_verified
    checks.append(Check("delta of the whole release", verified_delta <= delta,
                        f"selection {float(verified_delta):.6g} (metrics are pure epsilon) <= {float(delta):g}"))
    extra = {"delta_claimed": guarantee.delta_exact, "delta_verified": verified_delta}
    checked = ["every discrete Laplace noise a dry run drew (scale, sensitivity, L0), recorded as it was added",
               "each sensitivity against the metric's definition and the value grid",
               "the basic composition of the selection and the metrics within (epsilon, delta)",
               "the selection's keep table, by dpselect.core.verify"]
    not_checked = ["the exactness of the discrete Laplace sampler (Canonne, Kamath, Steinke, NeurIPS 2020; see the "
                   "empirical audit)", "APPROX_BOUNDS (private bounds) and per-partition bounds: the audited "
                   "metrics are given bounds", "the contribution bounding itself (see the empirical audit on rows)"]
    return "exact", checks, checked, not_checked, extra

