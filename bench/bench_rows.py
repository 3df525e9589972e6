"""Raw rows → released partitions: dpselect end to end against DuckDB and Polars distinct counts.

Data: N rows (default 1e7), string partition keys Zipf-distributed over ~1e6 keys,
~1e6 int64 users. Every engine gets the same pyarrow table, in its own fresh process (so peak
RSS is its own), in the same run:

* dpselect: ``select_partitions(table, privacy_unit="user", by="key", max_partitions_contributed=3)``
  = factorize + bound to κ = 3 + count distinct users + TSGD release (secure CSPRNG);
* DuckDB:  ``SELECT key, COUNT(DISTINCT user) FROM t GROUP BY key`` (no bounding, no DP);
* Polars:  ``df.group_by("key").agg(pl.col("user").n_unique())`` (no bounding, no DP).

Peak memory is the process's peak RSS during the first run minus its RSS once the input table is
built (the memory one job needs), reported against the Arrow size of the two input columns. DuckDB and Polars are bench-only extras
(``pip install duckdb polars``). Run:

    python bench/bench_rows.py --rows 10000000 --repeat 3
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ENGINES = ("dpselect", "duckdb", "polars")


def make_table(rows: int, keys: int, users: int, seed: int, key_type: str = "string"):
    import numpy as np
    import pyarrow as pa

    gen = np.random.Generator(np.random.PCG64(seed))  # input data only
    ranks = gen.zipf(1.1, rows) % keys
    if key_type == "int":
        key = pa.array(ranks * 104729 + 7)
    else:
        names = np.char.add("key-", np.arange(keys).astype(str)).astype(object)
        key = pa.array(names, pa.string()).take(pa.array(ranks))
    user = pa.array(gen.integers(0, users, rows) * 7919 + 12345)
    return pa.table({"user": user, "key": key})


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def worker(engine: str, rows: int, keys: int, users: int, seed: int, repeat: int, kappa: int = 3,
           key_type: str = "string") -> dict:
    table = make_table(rows, keys, users, seed, key_type)
    input_bytes = table.nbytes
    if engine == "dpselect":
        import dpselect.strategies  # noqa: F401  (import cost outside the timing)
        from dpselect.pipeline import select_partitions

        def run():
            return select_partitions(table, privacy_unit="user", by="key", epsilon=1.0, delta=1e-5,
                                     max_partitions_contributed=kappa, counts=True)
    elif engine == "duckdb":
        import duckdb

        con = duckdb.connect()
        con.register("t", table)

        def run():
            return con.sql("SELECT key, COUNT(DISTINCT user) AS n FROM t GROUP BY key").to_arrow_table()
    else:
        import polars as pl

        df = pl.from_arrow(table)

        def run():
            return df.group_by("key").agg(pl.col("user").n_unique())

    # Reset the high-water mark where the kernel allows it, else measure from here.
    base = rss_bytes()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        resettable = True
    except OSError:
        resettable = False
    times, cpu = [], []
    out_rows = 0
    peak = 0
    for i in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = run()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        out_rows = out.num_rows if hasattr(out, "num_rows") else len(out)
        del out
        if i == 0:
            # The memory of one job: later runs would add what the allocator kept from earlier ones.
            peak = peak_rss_bytes()
    return {
        "engine": engine, "best_s": min(times), "times_s": times, "cpu_s": cpu[times.index(min(times))], "output_rows": out_rows,
        "input_bytes": input_bytes, "peak_extra_bytes": max(0, peak - base), "peak_reset": resettable,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--kappa", type=int, default=3, help="dpselect's max_partitions_contributed")
    parser.add_argument("--key-type", choices=("string", "int"), default="string")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.rows, args.keys, args.users, args.seed, args.repeat,
                                args.kappa, args.key_type)))
        return
    results = []
    for engine in args.engines.split(","):
        cmd = [sys.executable, __file__, "--worker", engine, "--rows", str(args.rows), "--keys", str(args.keys),
               "--users", str(args.users), "--seed", str(args.seed), "--repeat", str(args.repeat),
               "--kappa", str(args.kappa), "--key-type", args.key_type]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            print(f"{engine}: failed\n{proc.stderr.strip().splitlines()[-1] if proc.stderr else ''}", file=sys.stderr)
            continue
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    fastest_baseline = min((r["best_s"] for r in results if r["engine"] != "dpselect"), default=None)
    load = os.getloadavg()[0]
    print(f"rows={args.rows:,} {args.key_type} keys~{args.keys:,} users~{args.users:,} kappa={args.kappa} cores={os.cpu_count()} "
          f"repeat={args.repeat} load average after run={load:.2f}")
    print("| engine | best wall (s) | CPU (s) | ns/row | vs fastest baseline | peak extra memory "
          "| / input columns | output rows |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        ratio = f"{r['best_s'] / fastest_baseline:.2f}x" if fastest_baseline else "-"
        print(f"| {r['engine']} | {r['best_s']:.2f} | {r['cpu_s']:.2f} | {1e9 * r['best_s'] / args.rows:.0f} | "
              f"{ratio} | {r['peak_extra_bytes'] / 2**20:,.0f} MiB | {r['peak_extra_bytes'] / r['input_bytes']:.2f}x "
              f"({r['input_bytes'] / 2**20:,.0f} MiB) | {r['output_rows']:,} |")


if __name__ == "__main__":
    main()
