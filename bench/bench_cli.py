"""The CLI on files: `dpselect select` on a CSV and a Parquet file beside DuckDB reading the same
file (`SELECT key, COUNT(DISTINCT user) ... GROUP BY key`, no bounding, no DP), each in its own
process, in the same run; median wall time and CPU time, peak RSS of each process, and the
median over rounds of each engine's time over DuckDB's in the same round.

Engines, run in turn in each round (so that other jobs on a shared machine slow each alike):
``duckdb``; ``dpselect``, the CLI as it runs by default (an input that fits in half the available
memory is held and counted whole, see docs/rows.md "From files"); ``dpselect-streamed``, the
same CLI made to stream (``DPSELECT_IN_MEMORY_BYTES=0``); and with ``--compare PATH`` the CLI of
another checkout built in place (e.g. the main branch), to time a change in the same rounds.

Data: as bench_rows.py (string keys Zipf over ~1e6 keys, ~1e6 int64 users), written once to a
temporary directory (the writing is not timed). DuckDB is a bench-only extra (`pip install
duckdb`). Run:

    python bench/bench_cli.py --rows 10000000 --repeat 5 [--compare /path/to/main]
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
from bench_rows import make_table  # noqa: E402  (shared data generator)

DUCKDB = """
import sys, duckdb
path, fmt = sys.argv[1], sys.argv[2]
reader = "read_csv" if fmt == "csv" else "read_parquet"
rows = duckdb.sql(f"SELECT key, COUNT(DISTINCT user) AS n FROM {reader}('{path}') GROUP BY key").fetchall()
print(len(rows))
"""


def run(cmd: list[str], cwd: str, env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """(wall s, CPU s, peak RSS bytes) of one child process (its own rusage, from wait4), run in
    ``cwd``: `python -m` puts the working directory first on sys.path, ahead of PYTHONPATH, so a
    checkout as working directory would be the dpselect every engine imports."""
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, cwd=cwd, env={**os.environ, **(env or {})})
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise subprocess.CalledProcessError(child.returncode, cmd)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def write_files(rows: int, directory: str) -> None:
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    table = make_table(rows, 1_000_000, 1_000_000, seed=1)
    pcsv.write_csv(table, os.path.join(directory, "rows.csv"))
    pq.write_table(table, os.path.join(directory, "rows.parquet"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--compare", action="append", default=[], metavar="PATH",
                        help="also run the CLI of this checkout (built in place), e.g. the main branch")
    parser.add_argument("--write", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write:
        write_files(args.rows, args.write)
        return
    with tempfile.TemporaryDirectory() as tmp:
        # Written by a child process: the peak RSS a child reports includes its parent's at the
        # fork, so this process never holds the table.
        subprocess.run([sys.executable, os.path.abspath(__file__), "--rows", str(args.rows), "--write", tmp], check=True)
        files = {"csv": os.path.join(tmp, "rows.csv"), "parquet": os.path.join(tmp, "rows.parquet")}
        out = os.path.join(tmp, "released.csv")
        print(f"rows={args.rows:,} cores={os.cpu_count()} repeat={args.repeat} (rounds); "
              f"CSV {os.path.getsize(files['csv']) / 2**20:,.0f} MiB, Parquet {os.path.getsize(files['parquet']) / 2**20:,.0f} MiB")
        print("| file | engine | median wall (s) | CPU (s) | peak RSS (MiB) | ns/row | vs DuckDB (median of rounds) |")
        print("|---|---|---|---|---|---|---|")
        for fmt, path in files.items():
            cli = [sys.executable, "-m", "dpselect.cli", "select", path, "--privacy-unit", "user", "--by", "key",
                   "--epsilon", "1", "--delta", "1e-5", "--max-partitions-contributed", "3", "--counts", "-q",
                   "-o", out]
            jobs: dict[str, tuple[list[str], dict[str, str]]] = {
                "duckdb": ([sys.executable, "-c", DUCKDB, path, fmt], {}),
                "dpselect": (cli, {}),
                "dpselect-streamed": (cli, {"DPSELECT_IN_MEMORY_BYTES": "0"}),
            }
            for other in args.compare:
                jobs[f"dpselect:{other}"] = (cli, {"PYTHONPATH": os.path.abspath(other)})
            rounds: dict[str, list[tuple[float, float, int]]] = {engine: [] for engine in jobs}
            for _ in range(args.repeat):
                for engine, (cmd, env) in jobs.items():
                    rounds[engine].append(run(cmd, tmp, env))
            for engine, runs in rounds.items():
                # The ratio is taken per round (the same load on both), then its median.
                ratio = statistics.median(r[0] / d[0] for r, d in zip(runs, rounds["duckdb"]))
                wall = statistics.median(r[0] for r in runs)
                cpu = statistics.median(r[1] for r in runs)
                print(f"| {fmt} | {engine} | {wall:.2f} | {cpu:.2f} | {max(r[2] for r in runs) / 2**20:,.0f} | "
                      f"{1e9 * wall / args.rows:.0f} | {ratio:.2f}x |", flush=True)

if __name__ == "__main__":
    main()
