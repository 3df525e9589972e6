"""The cost of a quantile metric against a mean metric in dpselect.aggregate, same rows, same run.

Data: ``DPSELECT_BENCH_ROWS`` rows (default 1e7), string keys Zipf-distributed over 1e5 keys, 1e6
users, a float64 ``amount`` (bench/bench_aggregate.py's table). Both releases bound the rows the
same way (κ = 4, L∞ = 10) and select keys with the default strategy; the baseline asks for
``mean("amount", bounds=(0, 500))``, the other for ``quantile("amount", [0.5, 0.9],
bounds=(0, 500))`` (its per-(key, leaf) counts, every node's noise, the consistent estimates
and the descent).

Run: python -m pytest bench/bench_quantiles_speed.py --benchmark-only
"""
from __future__ import annotations

import os
import sys
import warnings

import pytest

import dpselect

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_aggregate import table_with_amount  # noqa: E402

ROWS = int(float(os.environ.get("DPSELECT_BENCH_ROWS", "1e7")))
GROUP = f"aggregate n={ROWS:.0e}: quantile vs mean"


@pytest.fixture(scope="module")
def table():
    return table_with_amount(ROWS, 100_000, 1_000_000, 3)


def _run(table, metric):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dpselect.aggregate(table, privacy_unit="user", by="key", metrics={"m": metric}, epsilon=1.0,
                                  delta=1e-6, max_partitions_contributed=4, max_contributions_per_partition=10)


def test_baseline_mean(benchmark, record, table):
    benchmark.pedantic(_run, args=(table, dpselect.mean("amount", bounds=(0, 500))), rounds=3, iterations=1)
    record(GROUP, "baseline", ROWS)


def test_quantile(benchmark, record, table):
    benchmark.pedantic(_run, args=(table, dpselect.quantile("amount", [0.5, 0.9], bounds=(0, 500))), rounds=3,
                       iterations=1)
    record(GROUP, "quantile p50+p90", ROWS)
