"""Run every audit on every shipped mechanism (CI), or on one configuration (``dpselect audit``)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from dpselect.audit._targets import MECHANISMS, ROW_MECHANISMS
from dpselect.audit.certify import certificate
from dpselect.audit.empirical import SCENARIOS, empirical
from dpselect.audit.results import AuditReport, Certificate, EmpiricalAudit, SideChannelAudit
from dpselect.audit.side_channels import side_channels

__all__ = ["run_all", "main", "QUICK_POINTS", "FULL_POINTS"]

# (ε, δ, κ) audited per mechanism by run_all: a one-partition point and a κ > 1 point.
QUICK_POINTS: tuple[tuple[float, float, int], ...] = ((1.0, 1e-5, 1), (0.5, 1e-3, 3))
FULL_POINTS: tuple[tuple[float, float, int], ...] = ((1.0, 1e-5, 1), (0.5, 1e-3, 3), (2.0, 1e-7, 2), (0.2, 1e-2, 8))
# The grouped release is audited where its metrics' noise is not too wide to see anything.
AGGREGATE_POINTS: tuple[tuple[float, float, int], ...] = ((4.0, 1e-5, 1), (2.0, 1e-6, 2))
_POLICY = ("policy_gaussian", "policy_laplace")

Result = Certificate | EmpiricalAudit | SideChannelAudit


def _budgets(quick: bool, mechanism: str) -> dict[str, int]:
    """Trials per audit: the policy mechanisms loop over users in Python, so they get fewer."""
    if mechanism in _POLICY:
        return {"trials": 600 if quick else 10_000, "row_trials": 300 if quick else 4_000, "side": 100}
    if mechanism == "aggregate":  # fast per copy: more copies, so the metrics' noise shows something
        return {"trials": 1_000, "row_trials": 20_000 if quick else 200_000, "side": 300 if quick else 2_000}
    if mechanism in ROW_MECHANISMS:
        return {"trials": 40_000 if quick else 400_000, "row_trials": 4_000 if quick else 40_000,
                "side": 200 if quick else 1_000}
    return {"trials": 200_000 if quick else 4_000_000, "row_trials": 4_000 if quick else 40_000,
            "side": 300 if quick else 2_000}


def run_all(quick: bool = True, mechanisms: Sequence[str] | None = None,
            points: Sequence[tuple[float, float, int]] | None = None, *, certificates: bool = True,
            empirical_audits: bool = True, side_channel_audits: bool = True, false_alarm: float = 1e-6,
            trials: int | None = None, row_trials: int | None = None, null_trials: int | None = None,
            side_trials: int | None = None, scenarios: Sequence[str] | None = None,
            options: dict[str, Any] | None = None, progress: Callable[[Result], None] | None = None) -> AuditReport:
    """Audit every shipped mechanism (or ``mechanisms``) at a few (ε, δ, κ) ``points``.

    ``quick=True`` is what CI runs (under a minute on two cores): a certificate at every point,
    an empirical audit at every point with modest trial counts (plus the raw-row null-unit
    scenario for pi_opt at its first point), and the side-channel audit at the first point.
    ``trials``, ``row_trials``, ``null_trials``, ``side_trials`` and ``scenarios`` override the
    defaults. ``false_alarm`` bounds each empirical and side-channel audit's probability of
    flagging a mechanism that keeps its promise; the report's is at most their sum. ``progress``
    is called with each result as it is ready."""
    start = time.perf_counter()
    report = AuditReport()
    names = list(MECHANISMS if mechanisms is None else mechanisms)
    for name in names:
        if name not in MECHANISMS:
            raise ValueError(f"unknown mechanism {name!r}; known: {list(MECHANISMS)}")
    opts = dict(options or {})
    for name in names:
        chosen = list(points) if points is not None else list(
            AGGREGATE_POINTS if name == "aggregate" else (QUICK_POINTS if quick else FULL_POINTS))
        budget = _budgets(quick, name)
        for i, (eps, delta, kappa) in enumerate(chosen):
            results: list[Result] = []
            if certificates:
                results.append(certificate(name, eps, delta, kappa, **opts))
            if empirical_audits:
                default_nulls = 300 if (i == 0 and name == "pi_opt") else 0
                results.append(empirical(
                    name, eps, delta, kappa, trials=trials or budget["trials"],
                    row_trials=row_trials or budget["row_trials"],
                    null_trials=default_nulls if null_trials is None else null_trials, false_alarm=false_alarm,
                    scenarios=None if scenarios is None else tuple(scenarios), **opts))
            if side_channel_audits and i == 0:
                results.append(side_channels(name, eps, delta, kappa, trials=side_trials or budget["side"],
                                             false_alarm=false_alarm, **opts))
            for r in results:
                report.results.append(r)
                if progress is not None:
                    progress(r)
    report.seconds = time.perf_counter() - start
    return report


def _parse_option(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--option takes NAME=VALUE, got {text!r}")
    key, raw = text.split("=", 1)
    value: Any = raw
    for cast in (int, float):
        try:
            value = cast(raw)
            break
        except ValueError:
            continue
    return key, value


def build_parser(prog: str = "dpselect audit") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Re-verify dpselect's privacy claims on your configuration: exact certificates of the tables "
                    "and noise that run, empirical lower bounds on epsilon from the real entry points, and side "
                    "channels (random bytes consumed, output schemas). See docs/privacy/audit.md.")
    parser.add_argument("mechanisms", nargs="*", metavar="MECHANISM",
                        help=f"mechanisms to audit (default: all): {', '.join(MECHANISMS)}")
    parser.add_argument("--epsilon", type=float, help="audit this epsilon (with --delta; default: a few points)")
    parser.add_argument("--delta", type=float, help="audit this delta")
    parser.add_argument("--max-partitions-contributed", "-k", type=int, default=1, dest="kappa",
                        help="kappa, with --epsilon/--delta (default 1)")
    parser.add_argument("--option", action="append", type=_parse_option, default=[], metavar="NAME=VALUE",
                        help="a mechanism option, e.g. pre_threshold=5 or noise_share=0.6 (repeatable)")
    parser.add_argument("--only", choices=("certificate", "empirical", "side-channels"), action="append",
                        help="run only these audits (repeatable; default: all three)")
    parser.add_argument("--full", action="store_true", help="more points and about 10-20x the trials (minutes)")
    parser.add_argument("--trials", type=int, help="trials per side of each count scenario")
    parser.add_argument("--row-trials", type=int, help="copies of the small table per side of each raw-row scenario")
    parser.add_argument("--null-trials", type=int, help="calls per side of the null-privacy-unit scenario (0: skip)")
    parser.add_argument("--side-trials", type=int, help="seeds per side-channel comparison")
    parser.add_argument("--false-alarm", type=float, default=1e-6,
                        help="probability bound, per audit, of reporting a mechanism that keeps its promise as "
                             "refuted (default 1e-6)")
    parser.add_argument("--scenario", action="append", choices=SCENARIOS,
                        help="run only these empirical scenarios (repeatable)")
    parser.add_argument("--allow-test-rng", action="store_true",
                        help="allow the deterministic test generator in this process, for the byte-consumption "
                             "checks (nothing it computes is released)")
    parser.add_argument("--json", metavar="PATH", help="also write every result as JSON ('-' for stdout)")
    parser.add_argument("--quiet", "-q", action="store_true", help="print one line per audit")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``dpselect audit ...``: exit status 0 when every audit passes, 1 when one fails, 2 on a
    usage error."""
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if (args.epsilon is None) != (args.delta is None):
        parser.error("--epsilon and --delta go together")
    if args.allow_test_rng:
        from dpselect.testing import ALLOW_ENV

        os.environ[ALLOW_ENV] = "1"
    only = set(args.only or ("certificate", "empirical", "side-channels"))
    names = args.mechanisms or list(MECHANISMS)
    unknown = [n for n in names if n not in MECHANISMS]
    if unknown:
        parser.error(f"unknown mechanism(s) {unknown}; known: {', '.join(MECHANISMS)}")
    options = dict(args.option)
    quick = not args.full
    out = sys.stdout

    def show(result: Result) -> None:
        if not args.quiet:
            print(result, file=out, flush=True)
            print(file=out)

    points = [(args.epsilon, args.delta, args.kappa)] if args.epsilon is not None else None
    try:
        report = run_all(quick=quick, mechanisms=names, points=points, certificates="certificate" in only,
                         empirical_audits="empirical" in only, side_channel_audits="side-channels" in only,
                         false_alarm=args.false_alarm, trials=args.trials, row_trials=args.row_trials,
                         null_trials=args.null_trials, side_trials=args.side_trials, scenarios=args.scenario,
                         options=options, progress=show)
    except (TypeError, ValueError) as exc:
        print(f"dpselect audit: error: {exc}", file=sys.stderr)
        return 2
    print(report.summary(), file=out)
    if args.json:
        text = json.dumps(report.as_dict(), indent=2)
        if args.json == "-":
            print(text, file=out)
        else:
            with open(args.json, "w", encoding="utf-8") as handle:
                handle.write(text + "\n")
    return 0 if report.passed else 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
