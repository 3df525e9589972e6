"""A DP GROUP BY with statistics: dpselect.aggregate against Polars' plain group-by, same rows.

Data: N rows (default 1e7), string keys Zipf-distributed over ~1e6 keys, ~1e6 int64 users and a
float64 ``amount`` column (gamma-distributed). Each engine gets the same pyarrow table in its own
fresh process (so peak RSS is its own), in the same run:

* dpselect: ``aggregate(table, privacy_unit="user", by="key", metrics={users: count_distinct_units(),
  rows: count(), spend: sum("amount", bounds=(0, 500)), avg: mean("amount")}, epsilon=1, delta=1e-6,
  max_partitions_contributed=4, max_contributions_per_partition=10)`` = factorize + bound (κ and L∞)
  + per-key users, rows and exact sums + pi_opt selection + discrete Laplace noise on every metric;
* Polars: ``df.group_by("key").agg(pl.col("user").n_unique(), pl.len(), pl.col("amount").sum(),
  pl.col("amount").mean())`` (no bounding, no noise).

Run (Polars is a bench-only extra):

    python bench/bench_aggregate.py --rows 10000000 --repeat 3
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_rows import make_table, peak_rss_bytes, rss_bytes  # noqa: E402

ENGINES = ("dpselect", "polars")


def table_with_amount(rows: int, keys: int, users: int, seed: int):
    import numpy as np
    import pyarrow as pa

    table = make_table(rows, keys, users, seed)
    gen = np.random.Generator(np.random.PCG64(seed + 1))  # input data only
    return table.append_column("amount", pa.array(np.round(gen.gamma(2.0, 40.0, rows), 2)))


def worker(engine: str, rows: int, keys: int, users: int, seed: int, repeat: int) -> dict:
    table = table_with_amount(rows, keys, users, seed)
    input_bytes = table.nbytes
    if engine == "dpselect":
        import dpselect

        metrics = {"users": dpselect.count_distinct_units(), "rows": dpselect.count(),
                   "spend": dpselect.sum("amount", bounds=(0, 500)), "avg": dpselect.mean("amount", bounds=(0, 500))}

        def run():
            return dpselect.aggregate(table, privacy_unit="user", by="key", metrics=metrics, epsilon=1.0,
                                      delta=1e-6, max_partitions_contributed=4,
                                      max_contributions_per_partition=10).frame
    else:
        import polars as pl

        df = pl.from_arrow(table)

        def run():
            return df.group_by("key").agg(pl.col("user").n_unique(), pl.len(), pl.col("amount").sum().alias("s"),
                                          pl.col("amount").mean().alias("m"))

    base = rss_bytes()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    times, cpu, peak, out_rows = [], [], 0, 0
    for i in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = run()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        out_rows = out.num_rows if hasattr(out, "num_rows") else len(out)
        del out
        if i == 0:
            peak = peak_rss_bytes()
    return {"engine": engine, "best_s": min(times), "cpu_s": cpu[times.index(min(times))], "output_rows": out_rows,
            "input_bytes": input_bytes, "peak_extra_bytes": max(0, peak - base)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=None,
                        help="dpselect's threads (sets DPSELECT_MAX_THREADS for every worker; default: "
                        "the variable as set, else every available core)")
    args = parser.parse_args()
    if args.threads is not None:
        os.environ["DPSELECT_MAX_THREADS"] = str(args.threads)  # the workers inherit it
    if args.worker:
        print(json.dumps(worker(args.worker, args.rows, args.keys, args.users, args.seed, args.repeat)))
        return
    results = []
    for engine in ENGINES:
        cmd = [sys.executable, __file__, "--worker", engine, "--rows", str(args.rows), "--keys", str(args.keys),
               "--users", str(args.users), "--seed", str(args.seed), "--repeat", str(args.repeat)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            print(f"{engine}: failed\n{proc.stderr.strip()}", file=sys.stderr)
            continue
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    polars = next((r["best_s"] for r in results if r["engine"] == "polars"), None)
    print(f"rows={args.rows:,} keys~{args.keys:,} users~{args.users:,} kappa=4 linf=10 cores={os.cpu_count()} "
          f"repeat={args.repeat} load average after run={os.getloadavg()[0]:.2f}")
    print("| engine | best wall (s) | CPU (s) | ns/row | vs Polars | peak extra memory | / input columns | output rows |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        ratio = f"{r['best_s'] / polars:.2f}x" if polars else "-"
        print(f"| {r['engine']} | {r['best_s']:.2f} | {r['cpu_s']:.2f} | {1e9 * r['best_s'] / args.rows:.0f} | {ratio} | "
              f"{r['peak_extra_bytes'] / 2**20:,.0f} MiB | {r['peak_extra_bytes'] / r['input_bytes']:.2f}x "
              f"({r['input_bytes'] / 2**20:,.0f} MiB) | {r['output_rows']:,} |")


if __name__ == "__main__":
    main()
