"""The grouped release's certificate: every discrete Laplace noise it draws is recorded during a
dry run on a small synthetic table; its ε = L0·Δ/t follows from the exact pmf ratio bound
P[X = x] / P[X = x + d] <= exp(|d|/t), each Δ is checked against the metric's sensitivity, and the
selection's keep table is certified as any other (docs/privacy/aggregate.md)."""
from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from dpselect.audit._certify_common import Result
from dpselect.audit._targets import Target
from dpselect.audit.results import Check
from dpselect.core.exact import as_fraction

__all__ = ["aggregate_metrics", "certify_aggregate"]

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
    from dpselect.aggregation.noise_choice import mean_sources

    grid = Grid.for_bounds(bounds[0], bounds[1], precision_bits=DEFAULT_PRECISION_BITS, integer=False)
    lo, hi = grid.lower_units, grid.upper_units
    out: list[tuple[str, int]] = []
    means = mean_sources(metrics)  # a mean reuses a released count (and sum): fewer noises, drawn last
    for name, m in [*[(n, m) for n, m in metrics.items() if m.kind != "mean"],
                    *[(n, m) for n, m in metrics.items() if m.kind == "mean"]]:
        if m.kind == "mean" and means[name].derived:
            continue
        if m.kind == "count_distinct_units":
            out.append((name, 1))
        elif m.kind == "count":
            out.append((name, linf))
        elif m.kind == "sum":
            out.append((name, linf * max(abs(lo), abs(hi), 1)))
        else:
            mid = (lo + hi) // 2
            out.append((f"{name} (sum of offsets)", linf * max(hi - mid, mid - lo, 1)))
            if means[name].count is None:
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


def certify_aggregate(target: Target) -> Result:
    import dpselect
    from dpselect.aggregation.plan import budget_shares, float_down, step_weights
    from dpselect.audit.certify import certificate  # which imports this module
    from dpselect.ingest.pipeline import build_strategy

    linf = int(target.options["linf"])
    bounds = tuple(float(b) for b in target.options["bounds"])
    metrics = aggregate_metrics(bounds)  # type: ignore[arg-type]
    eps, delta = as_fraction(target.epsilon), as_fraction(target.delta)
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
                                    max_contributions_per_partition=linf, strategy="pi_opt", noise="laplace")
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
