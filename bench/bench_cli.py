"""The CLI on files: `dpselect select` on a CSV and a Parquet file beside DuckDB reading the same
file (`SELECT key, COUNT(DISTINCT user) ... GROUP BY key`, no bounding, no DP), each in its own
process, in the same run; wall time, CPU time and peak RSS of each process.

Data: as bench_rows.py (string keys Zipf over ~1e6 keys, ~1e6 int64 users), written once to a
temporary directory (the writing is not timed). DuckDB is a bench-only extra (`pip install
duckdb`). Run:

    python bench/bench_cli.py --rows 10000000 --repeat 3
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_rows import make_table  # noqa: E402  (shared data generator)

DUCKDB = """
import sys, duckdb
path, fmt = sys.argv[1], sys.argv[2]
reader = "read_csv" if fmt == "csv" else "read_parquet"
rows = duckdb.sql(f"SELECT key, COUNT(DISTINCT user) AS n FROM {reader}('{path}') GROUP BY key").fetchall()
print(len(rows))
"""


def run(cmd: list[str]) -> tuple[float, float, int]:
    """(wall s, CPU s, peak RSS bytes) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # ru_maxrss of the children is the largest so far: run the smaller job first if it matters.
    return wall, cpu, after.ru_maxrss * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    table = make_table(args.rows, 1_000_000, 1_000_000, seed=1)
    with tempfile.TemporaryDirectory() as tmp:
        files = {"csv": os.path.join(tmp, "rows.csv"), "parquet": os.path.join(tmp, "rows.parquet")}
        pcsv.write_csv(table, files["csv"])
        pq.write_table(table, files["parquet"])
        del table
        out = os.path.join(tmp, "released.csv")
        print(f"rows={args.rows:,} cores={os.cpu_count()} repeat={args.repeat} (best of); "
              f"CSV {os.path.getsize(files['csv']) / 2**20:,.0f} MiB, Parquet {os.path.getsize(files['parquet']) / 2**20:,.0f} MiB")
        print("| file | engine | best wall (s) | CPU (s) | ns/row | vs DuckDB |")
        print("|---|---|---|---|---|---|")
        for fmt, path in files.items():
            jobs = {
                "duckdb": [sys.executable, "-c", DUCKDB, path, fmt],
                "dpselect": [sys.executable, "-m", "dpselect.cli", "select", path, "--privacy-unit", "user",
                             "--by", "key", "--epsilon", "1", "--delta", "1e-5", "--max-partitions-contributed", "3",
                             "--counts", "-q", "-o", out],
            }
            best: dict[str, tuple[float, float]] = {}
            for _ in range(args.repeat):
                for engine, cmd in jobs.items():
                    wall, cpu, _rss = run(cmd)
                    if engine not in best or wall < best[engine][0]:
                        best[engine] = (wall, cpu)
            for engine, (wall, cpu) in best.items():
                print(f"| {fmt} | {engine} | {wall:.2f} | {cpu:.2f} | {1e9 * wall / args.rows:.0f} | "
                      f"{wall / best['duckdb'][0]:.2f}x |")


if __name__ == "__main__":
    main()
