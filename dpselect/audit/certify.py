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

Each family's certificates are a module of its own, whose public names this module re-exports
(import them from here): the shared checks (``dpselect.audit._certify_common``), the count
mechanisms (``_certify_tables``), the row mechanisms (``_certify_rows``) and the grouped release
(``_certify_aggregate``).
"""
from __future__ import annotations

import time
from typing import Any

from dpselect.audit._certify_aggregate import aggregate_metrics, certify_aggregate
from dpselect.audit._certify_common import Result, composed_delta
from dpselect.audit._certify_rows import certify_cumulative_sips, certify_dp_sips, certify_policy, certify_weighted
from dpselect.audit._certify_tables import (
    certify_gaussian,
    certify_keep_table,
    certify_no_release,
    certify_noisy,
    threshold_release_delta,
)
from dpselect.audit._targets import Target, build_target
from dpselect.audit.results import Certificate, Check
from dpselect.mechanisms.base import NoRelease, TabledSelection
from dpselect.mechanisms.gaussian import GaussianThresholding
from dpselect.mechanisms.policy import PolicyGaussian, PolicyLaplace
from dpselect.mechanisms.tsgd import NoisyRelease
from dpselect.mechanisms.cumulative import CumulativeSIPS
from dpselect.mechanisms.weighted import DPSIPS, WeightedGaussian, WeightedLaplace

__all__ = ["aggregate_metrics", "certificate", "composed_delta", "threshold_release_delta"]

# Named after the module they are imported from (in tracebacks, reprs, pickles and the docs), as
# they were before the split.
for _public in (aggregate_metrics, composed_delta, threshold_release_delta):
    _public.__module__ = __name__
del _public


def certificate(mechanism: Any, epsilon: float | None = None, delta: float | None = None,
                max_partitions_contributed: int | None = None, **options: Any) -> Certificate:
    """Re-verify the parameters that run for ``mechanism`` at (ε, δ, κ).

    ``mechanism``: a name ("pi_opt", "release", "laplace", "gaussian", "public", "mixed",
    "weighted_gaussian", "weighted_laplace", "dp_sips", "cumulative_sips", "policy_gaussian", "policy_laplace",
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


def _dispatch(target: Target) -> Any:
    s = target.strategy
    if target.kind == "aggregate":
        return certify_aggregate
    if isinstance(s, NoRelease):
        return certify_no_release
    if isinstance(s, (PolicyGaussian, PolicyLaplace)):
        return certify_policy
    if isinstance(s, GaussianThresholding):
        return certify_gaussian
    if isinstance(s, NoisyRelease):
        return certify_noisy
    if isinstance(s, TabledSelection):
        return certify_keep_table
    if isinstance(s, DPSIPS):
        return certify_dp_sips
    if isinstance(s, CumulativeSIPS):
        return certify_cumulative_sips
    if isinstance(s, (WeightedGaussian, WeightedLaplace)):
        return certify_weighted
    return _certify_unknown


def _certify_unknown(target: Target) -> Result:
    checks = [Check("not certified by dpselect", False,
                    f"{target.label!r} has no keep table, noise table or threshold this audit knows how to verify")]
    return "not certified", checks, [], ["everything"], {}
