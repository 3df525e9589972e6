"""Rows -> released partitions under pytest-benchmark, beside Polars and DuckDB distinct counts
on the same table in the same run (the baseline is the fastest of them that is installed).

Smaller than bench_rows.py (1e6 rows by default, in-process, no memory figures) so it fits
the pytest-benchmark workflow; bench_rows.py gives the 1e7-row table with peak memory.
Run: python -m pytest bench/bench_pipeline.py --benchmark-only
"""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from bench_rows import make_table  # noqa: E402  (shared data generator)

ROWS = int(os.environ.get("DPSELECT_BENCH_ROWS", 1_000_000))
GROUP = f"rows n={ROWS:.0e}"


@pytest.fixture(scope="module")
def table():
    pytest.importorskip("pyarrow")
    return make_table(ROWS, keys=ROWS // 10, users=ROWS // 10, seed=1)


def test_dpselect_end_to_end(benchmark, record, table):
    from dpselect import select_partitions

    run = lambda: select_partitions(table, privacy_unit="user", by="key", epsilon=1.0,  # noqa: E731
                                    delta=1e-5, max_partitions_contributed=3, counts=True)
    run()  # certify the tables outside the timing
    benchmark(run)
    record(GROUP, "dpselect (bound+count+release)", ROWS)


def test_polars_n_unique(benchmark, record, table):
    pl = pytest.importorskip("polars")
    df = pl.from_arrow(table)
    benchmark(lambda: df.group_by("key").agg(pl.col("user").n_unique()))
    record(GROUP, "baseline", ROWS)  # Polars is the faster baseline here (bench_rows.py)


def test_duckdb_count_distinct(benchmark, record, table):
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    con.register("t", table)
    benchmark(lambda: con.execute("SELECT key, COUNT(DISTINCT user) FROM t GROUP BY key").arrow())
    record(GROUP, "duckdb COUNT(DISTINCT)", ROWS)
