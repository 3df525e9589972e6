"""dpselect against PipelineDP's local backend on the same job, per row.

Two jobs, chosen by ``--job`` (default ``select``).

``select``: rows (user, key) with string keys Zipf over rows/10 keys and rows/10 users (the data of
bench_rows.py); each user bounded to 3 partitions; a distinct-user count per partition; private
partition selection; ε = 1, δ = 1e-5.

* dpselect: ``select_partitions(table, ..., max_partitions_contributed=3, counts=True)`` on the
  Arrow table (best of 3 runs, after one warm-up run).
* PipelineDP: ``DPEngine.aggregate`` on ``LocalBackend`` with ``Metrics.PRIVACY_ID_COUNT``,
  ``max_partitions_contributed=3``, ``max_contributions_per_partition=1``, Laplace noise and its
  own private partition selection, fed a Python list of (user, key) tuples built before the
  timing; one run (it is slow).

``aggregate``: the rows of bench_aggregate.py (the same (user, key) plus a float64 ``amount``,
gamma-distributed), rows/10 keys and rows/10 users; a DP GROUP BY with a distinct-user count, a
row count, a sum and a mean of ``amount`` per key; each user bounded to 4 partitions and 10 rows
per partition, amounts clamped to [0, 500]; private partition selection; ε = 1, δ = 1e-6.

* dpselect: ``aggregate(table, privacy_unit="user", by="key", metrics={users:
  count_distinct_units(), rows: count(), spend: sum("amount", bounds=(0, 500)), avg:
  mean("amount", bounds=(0, 500))}, max_partitions_contributed=4,
  max_contributions_per_partition=10)`` on the Arrow table (best of 3 runs, after one warm-up).
* PipelineDP: ``DPEngine.aggregate`` on ``LocalBackend`` with ``Metrics.PRIVACY_ID_COUNT``,
  ``COUNT``, ``SUM`` and ``MEAN``, ``max_partitions_contributed=4``,
  ``max_contributions_per_partition=10``, ``min_value=0``, ``max_value=500``, Laplace noise and
  its own private partition selection (its default, truncated geometric), fed a Python list of
  (user, key, amount) tuples built before the timing; one run.

PipelineDP is a bench-only dependency (``pip install pipeline-dp``); without it only dpselect
runs. Run:

    python bench/bench_pipelinedp.py --rows 100000,1000000
    python bench/bench_pipelinedp.py --job aggregate --rows 100000,1000000
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_aggregate import table_with_amount  # noqa: E402  (same rows plus an amount column)
from bench_rows import make_table  # noqa: E402  (shared data generator)

EPSILON, DELTA, KAPPA = 1.0, 1e-5, 3
# The aggregate job (bench_aggregate.py's settings).
AGG_EPSILON, AGG_DELTA, AGG_KAPPA, AGG_LINF, AGG_BOUNDS = 1.0, 1e-6, 4, 10, (0, 500)


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
    result = engine.aggregate(rows, params, extractors, max_partitions_contributed=1, max_contributions_per_partition=1)
    accountant.compute_budgets()
    list(result)  # the local backend is lazy: this runs the job
    return time.perf_counter() - t0


def time_dpselect_aggregate(table) -> float:
    import dpselect

    metrics = {"users": dpselect.count_distinct_units(), "rows": dpselect.count(),
               "spend": dpselect.sum("amount", bounds=AGG_BOUNDS), "avg": dpselect.mean("amount", bounds=AGG_BOUNDS)}

    def run():
        return dpselect.aggregate(table, privacy_unit="user", by="key", metrics=metrics, epsilon=AGG_EPSILON,
                                  delta=AGG_DELTA, max_partitions_contributed=AGG_KAPPA,
                                  max_contributions_per_partition=AGG_LINF).frame

    run()  # imports and first-call costs outside the timing
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


def time_pipelinedp_aggregate(table) -> float | None:
    try:
        import pipeline_dp
    except ImportError:
        return None
    rows = list(zip(table.column("user").to_pylist(), table.column("key").to_pylist(),
                    table.column("amount").to_pylist()))
    t0 = time.perf_counter()
    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=AGG_EPSILON, total_delta=AGG_DELTA)
    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
    m = pipeline_dp.Metrics
    params = pipeline_dp.AggregateParams(
        noise_kind=pipeline_dp.NoiseKind.LAPLACE, metrics=[m.PRIVACY_ID_COUNT, m.COUNT, m.SUM, m.MEAN],
        max_partitions_contributed=AGG_KAPPA, max_contributions_per_partition=AGG_LINF,
        min_value=AGG_BOUNDS[0], max_value=AGG_BOUNDS[1])
    extractors = pipeline_dp.DataExtractors(privacy_id_extractor=lambda r: r[0],
                                            partition_extractor=lambda r: r[1], value_extractor=lambda r: r[2])
    result = engine.aggregate(rows, params, extractors, max_partitions_contributed=1, max_contributions_per_partition=1)
    accountant.compute_budgets()
    list(result)  # the local backend is lazy: this runs the job
    return time.perf_counter() - t0


JOBS = {
    "select": (lambda n: make_table(n, keys=max(n // 10, 1), users=max(n // 10, 1), seed=1),
               time_dpselect, time_pipelinedp),
    "aggregate": (lambda n: table_with_amount(n, keys=max(n // 10, 1), users=max(n // 10, 1), seed=1),
                  time_dpselect_aggregate, time_pipelinedp_aggregate),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="100000,1000000", help="comma-separated row counts")
    parser.add_argument("--job", choices=tuple(JOBS), default="select",
                        help="select: select_partitions with counts (default); aggregate: a DP GROUP BY "
                             "with user count, row count, sum and mean")
    args = parser.parse_args()
    build, ours_fn, theirs_fn = JOBS[args.job]
    print("| rows | dpselect (s) | ns/row | PipelineDP local (s) | ns/row | PipelineDP / dpselect per row |")
    print("|---|---|---|---|---|---|")
    for n in (int(x) for x in args.rows.split(",")):
        table = build(n)
        ours = ours_fn(table)
        theirs = theirs_fn(table)
        other = "not installed | - | -" if theirs is None else \
            f"{theirs:.2f} | {1e9 * theirs / n:,.0f} | {theirs / ours:,.0f}×"
        print(f"| {n:,} | {ours:.3f} | {1e9 * ours / n:,.0f} | {other} |")


if __name__ == "__main__":
    main()
