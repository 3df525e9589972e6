"""Certificates of the mechanisms that decide from counts through a table: keep tables (π_opt,
Laplace thresholding; Gaussian thresholding at κ = 1) verified by :mod:`dpselect.core.verify`,
the TSGD noise of the releases with the exact δ of the rule that runs, and Gaussian thresholding's
δ terms with rational bounds. Re-exported by :mod:`dpselect.audit.certify`."""
from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from dpselect.audit._certify_common import (
    Result,
    budget_checks,
    composed_delta,
    composition_check,
    float_ratio,
    handle_check,
)
from dpselect.audit._targets import Target, release_floor
from dpselect.audit.results import Check
from dpselect.core.exact import exp_upper, normal_cdf_bounds, normal_tail_upper
from dpselect.core.tables import EPSILON_CAP
from dpselect.core.verify import CertificationError, exp_lower_by_squaring, keep_numerators, release_delta, verify_keep_table
from dpselect.mechanisms.gaussian import agm_delta_upper
from dpselect.mechanisms.public import MixedRelease, PublicPartitions

__all__ = ["certify_gaussian", "certify_keep_table", "certify_no_release", "certify_noisy", "threshold_release_delta"]

# The worst-ratio scan is skipped for tables longer than this (the verifier still runs).
_RATIO_SCAN_LIMIT = 200_000


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


def certify_keep_table(target: Target) -> Result:
    s = target.strategy
    checks, p = budget_checks(target)
    table = s.table
    eps = min(p.partition_epsilon, EPSILON_CAP)
    per_partition = p.partition_delta  # the budget, never the table's own record of it
    handle = handle_check(s, table)
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
    composition, verified = composition_check(per_partition, p.affected_partitions, target.claimed_delta,
                                               "the per-partition delta")
    checks.append(composition)
    ratio_to, log_ratio = float_ratio(_keep_ratio(table.words, per_partition, table.tail_certain), eps)
    extra = {"delta_claimed": target.claimed_delta, "delta_verified": verified, "ratio_to_exp_eps": ratio_to,
             "epsilon_effective": None if log_ratio is None else log_ratio * p.affected_partitions}
    checked = ["the keep table the kernel handle was loaded from (strategy.table.words)",
               "every DP inequality between neighbouring counts, by dpselect.core.verify (independent of the builder)",
               "the budget split and the composition over the affected partitions"]
    not_checked = ["that the C kernel samples Bernoulli(q[n]/2^w) exactly (see the empirical audit and "
                   "tests/test_kernel_kat.py)", "that users contribute to at most kappa partitions (assumed of "
                   "counts; enforced by select_partitions)"]
    return "exact", checks, checked, not_checked, extra


def certify_no_release(target: Target) -> Result:
    checks = [Check("releases nothing", True, "delta = 0: no key is released and no randomness is used "
                    "(Desfontaines et al., PoPETs 2022, Theorem 2)")]
    return "exact", checks, ["the strategy releases nothing"], [], {"delta_claimed": target.claimed_delta,
                                                                    "delta_verified": Fraction(0)}


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


def certify_noisy(target: Target) -> Result:
    s = target.strategy
    checks, p = budget_checks(target)
    table = s.table
    eps = min(p.partition_epsilon, EPSILON_CAP)
    k, weights, total = table.k, tuple(int(w) for w in table.weights), int(table.total)
    expected = np.cumsum(np.array([weights[abs(x)] for x in range(-k, k + 1)], dtype=object))
    cumulative = [int(v) for v in np.asarray(table.cumulative)]
    checks.append(Check("kernel noise table = the certified weights", cumulative == [int(v) for v in expected]
                        and cumulative[-1] == total,
                        f"cumulative weights of x = -{k}..{k} (what WeightTableHandle loads) sum to {total}"))
    noise = s._noise
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
        t = release_floor(s)
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
    composition, verified = composition_check(per_partition, p.affected_partitions, target.claimed_delta,
                                               "the per-partition delta")
    checks.append(composition)
    ratio_to, log_ratio = float_ratio(worst_ratio, eps)
    extra = {"delta_claimed": target.claimed_delta, "delta_verified": verified, "ratio_to_exp_eps": ratio_to,
             "epsilon_effective": None if log_ratio is None else log_ratio * p.affected_partitions}
    checked = ["the integer weights and cumulative table the kernel handle was loaded from",
               "their neighbour ratios against the verifier's own lower bound on e^eps'",
               "the exact delta of the release rule with the threshold the strategy passes to the kernel",
               "the budget split and the composition over the affected partitions"]
    not_checked = ["that the C kernel samples the weights exactly and applies the threshold it is passed (see the "
                   "empirical audit)", "that users contribute to at most kappa partitions (assumed of counts)"]
    return "exact", checks, checked, not_checked, extra


def certify_gaussian(target: Target) -> Result:
    s = target.strategy
    checks, p = budget_checks(target)
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
    handle = handle_check(s, table)
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
            ratio_to, log_ratio = float_ratio(_keep_ratio(table.words, s.certified_delta, False), eps)
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
