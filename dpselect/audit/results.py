"""Result objects of the audits: each prints as a short readable report (``str``) and turns into
plain JSON-ready data (``as_dict``)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from dpselect.core.guarantee import format_delta

__all__ = [
    "Check",
    "Certificate",
    "EventEstimate",
    "EmpiricalAudit",
    "ConsumptionComparison",
    "SchemaComparison",
    "SideChannelAudit",
    "AuditReport",
]


def _num(value: Fraction | float | None) -> float | None:
    if value is None:
        return None
    return float(value)


def _fmt_delta(value: Fraction | float | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, Fraction):
        return format_delta(value) if value >= 0 else "-" + format_delta(-value)
    return f"{value:.4g}"


def _fmt_eps(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.3f}"


@dataclass(frozen=True)
class Check:
    """One verified inequality (or a reason it could not be verified)."""

    name: str
    passed: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


@dataclass(frozen=True)
class Certificate:
    """What :func:`dpselect.audit.certificate` re-verified about the parameters that run.

    ``kind``: "exact" (every DP inequality of the sampled table or noise checked in rational
    arithmetic by a verifier independent of the builder), "rational bounds" (the privacy
    argument's terms re-evaluated with the package's rational bounds; the argument itself,
    e.g. the analytic Gaussian mechanism, is taken from its paper), or "not certified".
    ``delta_verified``: the total δ recomputed here; ``delta_slack`` = claimed − verified (>= 0
    when the claim holds). ``ratio_to_exp_eps``: the largest ratio between neighbouring output
    probabilities that needs ε (after δ is spent), divided by e^{ε'} per partition (<= 1 when the
    claim holds); ``epsilon_effective``: the ε that ratio corresponds to, composed over the
    affected partitions."""

    mechanism: str
    epsilon: float
    delta: float
    max_partitions_contributed: int
    kind: str
    checks: tuple[Check, ...]
    checked: tuple[str, ...]
    not_checked: tuple[str, ...]
    delta_claimed: Fraction | None = None
    delta_verified: Fraction | None = None
    epsilon_effective: float | None = None
    ratio_to_exp_eps: float | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def delta_slack(self) -> Fraction | None:
        if self.delta_claimed is None or self.delta_verified is None:
            return None
        return self.delta_claimed - self.delta_verified

    def as_dict(self) -> dict[str, Any]:
        return {
            "audit": "certificate", "mechanism": self.mechanism, "epsilon": self.epsilon, "delta": self.delta,
            "max_partitions_contributed": self.max_partitions_contributed, "kind": self.kind,
            "passed": self.passed, "delta_claimed": _num(self.delta_claimed),
            "delta_verified": _num(self.delta_verified), "delta_slack": _num(self.delta_slack),
            "epsilon_effective": self.epsilon_effective, "ratio_to_exp_eps": self.ratio_to_exp_eps,
            "checks": [c.as_dict() for c in self.checks], "checked": list(self.checked),
            "not_checked": list(self.not_checked), "seconds": round(self.seconds, 3),
        }

    def __str__(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        lines = [f"certificate [{verdict}] {self.mechanism} at epsilon={self.epsilon:g}, delta={self.delta:g}, "
                 f"kappa={self.max_partitions_contributed} ({self.kind}, {self.seconds:.2f} s)"]
        if self.delta_claimed is not None:
            lines.append(f"  delta claimed {_fmt_delta(self.delta_claimed)}, recomputed "
                         f"{_fmt_delta(self.delta_verified)}, slack {_fmt_delta(self.delta_slack)}")
        if self.ratio_to_exp_eps is not None:
            relation = "<=" if self.ratio_to_exp_eps <= 1 else "ABOVE"
            lines.append(f"  worst neighbour ratio / e^eps' = {self.ratio_to_exp_eps:.9g} (effective epsilon "
                         f"{self.epsilon_effective:.6g} {relation} {self.epsilon:g})")
        for c in self.checks:
            lines.append(f"  [{'ok' if c.passed else 'FAILED'}] {c.name}: {c.detail}")
        if self.not_checked:
            lines.append("  not checked: " + "; ".join(self.not_checked))
        return "\n".join(lines)


@dataclass(frozen=True)
class EventEstimate:
    """One neighbouring pair and the event the pilot half chose, evaluated on the held-out half.

    ``p1_lower`` bounds P[E | D] from below and ``p0_upper`` bounds P[E | D'] from above, each at
    confidence 1 − ``alpha`` (exact Clopper–Pearson; ``p0_upper`` is exact 0 when D' is the
    empty output, known without sampling). ``epsilon_lb`` = ln((p1_lower − δ)/p0_upper)."""

    scenario: str
    neighbours: str
    direction: str
    event: str
    trials: int
    hits: int
    reference_hits: int
    p1_lower: float
    p0_upper: float
    alpha: float
    epsilon_lb: float
    claimed_epsilon: float

    @property
    def refutes(self) -> bool:
        return self.epsilon_lb > self.claimed_epsilon

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "neighbours": self.neighbours, "direction": self.direction,
                "event": self.event, "trials": self.trials, "hits": self.hits,
                "reference_hits": self.reference_hits, "p1_lower": self.p1_lower, "p0_upper": self.p0_upper,
                "alpha": self.alpha, "epsilon_lb": None if math.isinf(self.epsilon_lb) else self.epsilon_lb,
                "epsilon_lb_infinite": math.isinf(self.epsilon_lb), "refutes": self.refutes}

    def line(self) -> str:
        flag = "  REFUTES" if self.refutes else ""
        if self.claimed_epsilon == 0:
            flag += " (claim: epsilon 0)"
        return (f"  {self.scenario:<22} eps_lb {_fmt_eps(self.epsilon_lb):>6}  [{self.direction}] P[{self.event}]: "
                f"{self.hits}/{self.trials} vs {self.reference_hits}/{self.trials} "
                f"(p1 >= {self.p1_lower:.3g}, p0 <= {self.p0_upper:.3g}){flag}")


@dataclass(frozen=True)
class EmpiricalAudit:
    """What :func:`dpselect.audit.empirical` measured: a lower bound on ε per neighbouring pair.

    ``refuted`` is True when some ``epsilon_lb`` exceeds the claimed ε (or a defect was seen);
    for a mechanism that keeps its promise this happens with probability at most
    ``false_alarm`` (a union bound over every bound computed)."""

    mechanism: str
    epsilon: float
    delta: float
    max_partitions_contributed: int
    estimates: tuple[EventEstimate, ...]
    false_alarm: float
    defects: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def epsilon_lb(self) -> float:
        return max((e.epsilon_lb for e in self.estimates), default=0.0)

    @property
    def refuted(self) -> bool:
        return bool(self.defects) or any(e.refutes for e in self.estimates)

    @property
    def passed(self) -> bool:
        return not self.refuted

    def as_dict(self) -> dict[str, Any]:
        lb = self.epsilon_lb
        return {"audit": "empirical", "mechanism": self.mechanism, "epsilon": self.epsilon, "delta": self.delta,
                "max_partitions_contributed": self.max_partitions_contributed, "passed": self.passed,
                "refuted": self.refuted, "epsilon_lb": None if math.isinf(lb) else lb,
                "epsilon_lb_infinite": math.isinf(lb), "false_alarm": self.false_alarm,
                "estimates": [e.as_dict() for e in self.estimates], "defects": list(self.defects),
                "skipped": list(self.skipped), "seconds": round(self.seconds, 3)}

    def __str__(self) -> str:
        verdict = "REFUTED" if self.refuted else "PASS"
        lines = [f"empirical [{verdict}] {self.mechanism} at epsilon={self.epsilon:g}, delta={self.delta:.4g} "
                 f"(claimed), kappa={self.max_partitions_contributed}: epsilon_lb = {_fmt_eps(self.epsilon_lb)} "
                 f"(false-alarm probability <= {self.false_alarm:.1g}, {self.seconds:.2f} s)"]
        lines.extend(e.line() for e in self.estimates)
        lines.extend(f"  DEFECT: {d}" for d in self.defects)
        lines.extend(f"  skipped: {s}" for s in self.skipped)
        return "\n".join(lines)


@dataclass(frozen=True)
class ConsumptionComparison:
    """Random bytes consumed on two inputs of the same size, over ``trials`` seeds of the test
    generator: the largest gap between the two empirical distributions (Kolmogorov distance)
    against the DKW threshold at which a gap is significant. ``claimed``: whether the docs claim
    the two distributions are equal (docs/privacy/randomness.md); an unclaimed pair is shown
    for information and never flags."""

    entry: str
    input_a: str
    input_b: str
    trials: int
    mean_a: float
    mean_b: float
    identical_fraction: float
    distance: float
    threshold: float
    claimed: bool
    exact: bool = False

    @property
    def flagged(self) -> bool:
        return self.claimed and self.distance > self.threshold

    def as_dict(self) -> dict[str, Any]:
        return {"entry": self.entry, "input_a": self.input_a, "input_b": self.input_b, "trials": self.trials,
                "mean_bytes_a": self.mean_a, "mean_bytes_b": self.mean_b,
                "identical_fraction": self.identical_fraction, "distance": self.distance,
                "threshold": self.threshold, "claimed": self.claimed, "exact": self.exact, "flagged": self.flagged}

    def line(self) -> str:
        tag = "FLAGGED" if self.flagged else ("ok" if self.claimed else "info (no claim)")
        if self.exact:
            verdict = f"same bytes on {self.identical_fraction:.1%} of {self.trials} seeds (100% required)"
        else:
            verdict = f"distance {self.distance:.3f} (flagged above {self.threshold:.3f}, {self.trials} seeds)"
        return (f"  [{tag}] {self.entry}: mean bytes {self.mean_a:.1f} ({self.input_a}) vs {self.mean_b:.1f} "
                f"({self.input_b}); {verdict}")


@dataclass(frozen=True)
class SchemaComparison:
    """The output's column names and types on two neighbouring inputs."""

    entry: str
    input_a: str
    input_b: str
    schema_a: str
    schema_b: str

    @property
    def equal(self) -> bool:
        return self.schema_a == self.schema_b

    def as_dict(self) -> dict[str, Any]:
        return {"entry": self.entry, "input_a": self.input_a, "input_b": self.input_b, "schema_a": self.schema_a,
                "schema_b": self.schema_b, "equal": self.equal}

    def line(self) -> str:
        if self.equal:
            return f"  [ok] {self.entry}: same schema ({self.input_a} / {self.input_b}): {self.schema_a}"
        return (f"  [FLAGGED] {self.entry}: schema depends on the data: {self.schema_a} ({self.input_a}) vs "
                f"{self.schema_b} ({self.input_b})")


@dataclass(frozen=True)
class SideChannelAudit:
    """Byte consumption and output schemas on neighbouring inputs."""

    mechanism: str
    consumption: tuple[ConsumptionComparison, ...]
    schemas: tuple[SchemaComparison, ...]
    false_alarm: float
    skipped: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def flagged(self) -> bool:
        return any(c.flagged for c in self.consumption) or any(not s.equal for s in self.schemas)

    @property
    def passed(self) -> bool:
        return not self.flagged

    def as_dict(self) -> dict[str, Any]:
        return {"audit": "side_channels", "mechanism": self.mechanism, "passed": self.passed,
                "flagged": self.flagged, "false_alarm": self.false_alarm,
                "consumption": [c.as_dict() for c in self.consumption],
                "schemas": [s.as_dict() for s in self.schemas], "skipped": list(self.skipped),
                "seconds": round(self.seconds, 3)}

    def __str__(self) -> str:
        verdict = "FLAGGED" if self.flagged else "PASS"
        lines = [f"side channels [{verdict}] {self.mechanism} (false-alarm probability <= {self.false_alarm:.1g}, "
                 f"{self.seconds:.2f} s)"]
        lines.extend(c.line() for c in self.consumption)
        lines.extend(s.line() for s in self.schemas)
        lines.extend(f"  skipped: {s}" for s in self.skipped)
        return "\n".join(lines)


@dataclass
class AuditReport:
    """Every audit :func:`dpselect.audit.run_all` ran, in order."""

    results: list[Certificate | EmpiricalAudit | SideChannelAudit] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> list[Certificate | EmpiricalAudit | SideChannelAudit]:
        return [r for r in self.results if not r.passed]

    def as_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "seconds": round(self.seconds, 3),
                "results": [r.as_dict() for r in self.results]}

    def summary(self) -> str:
        """One line per audit."""
        lines = []
        for r in self.results:
            if isinstance(r, Certificate):
                extra = f"slack {_fmt_delta(r.delta_slack)}" if r.delta_slack is not None else r.kind
                lines.append(f"{'PASS' if r.passed else 'FAIL':<7} certificate   {r.mechanism:<18} "
                             f"eps={r.epsilon:<4g} delta={r.delta:<7g} kappa={r.max_partitions_contributed:<2} {extra}")
            elif isinstance(r, EmpiricalAudit):
                lines.append(f"{'PASS' if r.passed else 'REFUTED':<7} empirical     {r.mechanism:<18} "
                             f"eps={r.epsilon:<4g} delta={r.delta:<7.3g} kappa={r.max_partitions_contributed:<2} "
                             f"eps_lb={_fmt_eps(r.epsilon_lb)}")
            else:
                skipped = " (bytes consumed: skipped)" if any(s.startswith("bytes") for s in r.skipped) else ""
                lines.append(f"{'PASS' if r.passed else 'FLAGGED':<7} side-channels {r.mechanism:<18} "
                             f"{len(r.consumption)} consumption pair(s), {len(r.schemas)} schema pair(s){skipped}")
        verdict = "all audits passed" if self.passed else f"{len(self.failures)} audit(s) FAILED"
        lines.append(f"{verdict} ({len(self.results)} audits, {self.seconds:.1f} s)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return "\n\n".join(str(r) for r in self.results) + "\n\n" + self.summary()
