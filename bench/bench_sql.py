"""`dpselect sql` against `dpselect aggregate` on one Parquet file, the same release: per-row
bounds (max_contributions_per_partition = 10, κ = 4) and the same four metrics — users, rows, a
clamped sum and a clamped mean of ``amount``. The baseline is `dpselect aggregate`; the ratio is
each round's sql time over that round's aggregate time (median over rounds), each command in its
own process, run in turn so that other jobs on a shared machine slow both alike.

Data: as bench_aggregate.py (string keys Zipf over ~1e6 keys, int64 users, a gamma ``amount``),
written once to a temporary directory (the writing is not timed). Run:

    python bench/bench_sql.py --rows 2000000 --repeat 3
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_aggregate import table_with_amount  # noqa: E402  (shared data generator)

QUERY = """SELECT WITH DIFFERENTIAL_PRIVACY
    OPTIONS (epsilon = 1, delta = 1e-6, max_groups_contributed = 4, privacy_unit_column = user,
             max_contributions_per_partition = 10)
    key, COUNT(DISTINCT user) AS users, COUNT(*) AS rows,
    SUM(amount, contribution_bounds_per_row => (0, 500)) AS spend,
    AVG(amount, contribution_bounds_per_row => (0, 500)) AS avg
FROM '{path}' GROUP BY key"""


def commands(path: str, out: str) -> dict[str, list[str]]:
    cli = [sys.executable, "-m", "dpselect.cli"]
    return {
        "aggregate": [*cli, "aggregate", path, "--privacy-unit", "user", "--by", "key", "--epsilon", "1",
                      "--delta", "1e-6", "--max-partitions-contributed", "4", "--max-contributions-per-partition",
                      "10", "--metric", "users", "--metric", "rows=count", "--metric", "spend=sum:amount:0:500",
                      "--metric", "avg=mean:amount:0:500", "-o", out + ".aggregate.csv", "-q"],
        "sql": [*cli, "sql", QUERY.format(path=path), "-o", out + ".sql.csv", "-q"],
    }


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rows.parquet")
        pq.write_table(table_with_amount(args.rows, args.keys, args.users, 0), path)
        cmds = commands(path, os.path.join(tmp, "out"))
        times: dict[str, list[float]] = {name: [] for name in cmds}
        ratios = []
        for _ in range(args.repeat):
            for name, cmd in cmds.items():
                times[name].append(timed(cmd))
            ratios.append(times["sql"][-1] / times["aggregate"][-1])
    for name, values in times.items():
        print(f"{name:>10}: median {statistics.median(values):.2f} s over {len(values)} run(s) "
              f"({', '.join(f'{v:.2f}' for v in values)})")
    print(f"sql / aggregate: median {statistics.median(ratios):.3f} ({', '.join(f'{r:.3f}' for r in ratios)}); "
          f"{args.rows:,} rows")


if __name__ == "__main__":
    main()
