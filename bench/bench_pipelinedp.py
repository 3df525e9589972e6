"""dpselect against PipelineDP's local backend on the same job, per row.

The job: rows (user, key) with string keys Zipf over rows/10 keys and rows/10 users (the data of
bench_rows.py); each user bounded to 3 partitions; a distinct-user count per partition; private
partition selection; ε = 1, δ = 1e-5.

* dpselect: ``select_partitions(table, ..., max_partitions_contributed=3, counts=True)`` on the
  Arrow table (best of 3 runs, after one warm-up run).
* PipelineDP: ``DPEngine.aggregate`` on ``LocalBackend`` with ``Metrics.PRIVACY_ID_COUNT``,
  ``max_partitions_contributed=3``, ``max_contributions_per_partition=1``, Laplace noise and its
  own private partition selection, fed a Python list of (user, key) tuples built before the
  timing; one run (it is slow).

PipelineDP is a bench-only dependency (``pip install pipeline-dp``); without it only dpselect
runs. Run:

    python bench/bench_pipelinedp.py --rows 100000,1000000
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_rows import make_table  # noqa: E402  (shared data generator)

EPSILON, DELTA, KAPPA = 1.0, 1e-5, 3


def time_dpselect(table) -> float:
    from dpselect import select_partitions

    def run():
        return select_partitions(table, privacy_unit="user", by="key", epsilon=EPSILON, delta=DELTA,
                                 max_partitions_contributed=KAPPA, counts=True)

    run()  # certifies the tables and imports outside the timing
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


def time_pipelinedp(table) -> float | None:
    try:
        import pipeline_dp
    except ImportError:
        return None
    rows = list(zip(table.column("user").to_pylist(), table.column("key").to_pylist()))
    t0 = time.perf_counter()
    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=DELTA)
    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
    params = pipeline_dp.AggregateParams(
        noise_kind=pipeline_dp.NoiseKind.LAPLACE, metrics=[pipeline_dp.Metrics.PRIVACY_ID_COUNT],
        max_partitions_contributed=KAPPA, max_contributions_per_partition=1)
    extractors = pipeline_dp.DataExtractors(privacy_id_extractor=lambda r: r[0],
                                            partition_extractor=lambda r: r[1], value_extractor=lambda r: 0)
    result = engine.aggregate(rows, params, extractors)
    accountant.compute_budgets()
    list(result)  # the local backend is lazy: this runs the job
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="100000,1000000", help="comma-separated row counts")
    args = parser.parse_args()
    print("| rows | dpselect (s) | ns/row | PipelineDP local (s) | ns/row | PipelineDP / dpselect per row |")
    print("|---|---|---|---|---|---|")
    for n in (int(x) for x in args.rows.split(",")):
        table = make_table(n, keys=max(n // 10, 1), users=max(n // 10, 1), seed=1)
        ours = time_dpselect(table)
        theirs = time_pipelinedp(table)
        other = "not installed | - | -" if theirs is None else \
            f"{theirs:.2f} | {1e9 * theirs / n:,.0f} | {theirs / ours:,.0f}×"
        print(f"| {n:,} | {ours:.3f} | {1e9 * ours / n:,.0f} | {other} |")


if __name__ == "__main__":
    main()
