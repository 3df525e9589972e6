"""Raw rows → released partitions: dpselect end to end against DuckDB and Polars distinct counts.

Data: N rows (default 1e7), string partition keys Zipf-distributed over ~1e6 keys,
~1e6 int64 users. Every engine gets the same pyarrow table, in its own fresh process (so peak
RSS is its own), in the same run:

* dpselect: ``select_partitions(table, privacy_unit="user", by="key", max_partitions_contributed=3)``
  = factorize + bound to κ = 3 + count distinct users + TSGD release (secure CSPRNG);
* DuckDB:  ``SELECT key, COUNT(DISTINCT user) FROM t GROUP BY key`` (no bounding, no DP);
* Polars:  ``df.group_by("key").agg(pl.col("user").n_unique())`` (no bounding, no DP).

Each engine lives in its own process for the whole run; after a warm-up run each, the timed
runs are interleaved (dpselect, DuckDB, Polars, dpselect, …), so that other jobs on a shared
machine slow every engine alike, and the ratio is taken per round: dpselect's time over the
faster baseline of the same round. Medians are reported. Peak memory is the process's peak RSS
during its first run minus its RSS once the input table is built (the memory one job needs),
reported against the Arrow size of the two input columns. DuckDB and Polars are bench-only
extras (``pip install duckdb polars``). Run:

    python bench/bench_rows.py --rows 10000000 --repeat 5 [--key-type int] [--kappa 1]
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


def build_run(engine: str, table, kappa: int):
    """The job of one engine on ``table``, as a function of no arguments. ``dpselect:PATH`` is
    dpselect imported from another checkout (built in place), e.g. the main branch, to time a
    change against it in the same rounds."""
    if engine.startswith("dpselect:"):
        sys.path.insert(0, os.path.abspath(engine.split(":", 1)[1]))
    if engine.startswith("dpselect"):
        import dpselect.mechanisms  # noqa: F401  (import cost outside the timing)
        from dpselect.ingest.pipeline import select_partitions

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
    return run


def worker(engine: str, rows: int, keys: int, users: int, seed: int, kappa: int = 3,
           key_type: str = "string") -> None:
    """A long-lived engine process: builds the table, then runs the job once per "run" line on
    standard input, answering each with a JSON line; "quit" ends it. The parent alternates its
    requests between engines, so a change in the machine's load hits every engine alike."""
    table = make_table(rows, keys, users, seed, key_type)
    input_bytes = table.nbytes
    run = build_run(engine, table, kappa)
    # Reset the high-water mark where the kernel allows it, else measure from here.
    base = rss_bytes()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        resettable = True
    except OSError:
        resettable = False
    print(json.dumps({"ready": engine}), flush=True)
    first = True
    for line in sys.stdin:
        if line.strip() != "run":
            break
        t0, c0 = time.perf_counter(), time.process_time()
        out = run()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        out_rows = out.num_rows if hasattr(out, "num_rows") else len(out)
        del out
        if first:
            # The memory of one job: later runs would add what the allocator kept from earlier ones.
            peak = max(0, peak_rss_bytes() - base)
            first = False
        print(json.dumps({"engine": engine, "wall_s": wall, "cpu_s": cpu, "output_rows": out_rows,
                          "input_bytes": input_bytes, "peak_extra_bytes": peak, "peak_reset": resettable}),
              flush=True)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per engine, interleaved")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per engine first")
    parser.add_argument("--engines", default=",".join(ENGINES),
                        help="comma-separated; dpselect:PATH adds dpselect from another checkout")
    parser.add_argument("--kappa", type=int, default=3, help="dpselect's max_partitions_contributed")
    parser.add_argument("--key-type", choices=("string", "int"), default="string")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=None,
                        help="dpselect's threads (sets DPSELECT_MAX_THREADS for every worker; default: "
                        "the variable as set, else every available core)")
    args = parser.parse_args()
    if args.threads is not None:
        os.environ["DPSELECT_MAX_THREADS"] = str(args.threads)  # the workers inherit it
    if args.worker:
        worker(args.worker, args.rows, args.keys, args.users, args.seed, args.kappa, args.key_type)
        return
    engines = args.engines.split(",")
    procs = {}
    for engine in engines:
        cmd = [sys.executable, __file__, "--worker", engine, "--rows", str(args.rows), "--keys", str(args.keys),
               "--users", str(args.users), "--seed", str(args.seed), "--kappa", str(args.kappa),
               "--key-type", args.key_type]
        procs[engine] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    runs: dict[str, list[dict]] = {engine: [] for engine in engines}
    failed = set()

    def ask(engine: str) -> dict | None:
        proc = procs[engine]
        try:
            proc.stdin.write("run\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            failed.add(engine)
            return None
        return json.loads(line)

    for engine in engines:  # wait until every table is built
        if not procs[engine].stdout.readline():
            failed.add(engine)
    # Warm-up runs (imports, first-touch allocations), then rounds that visit every engine in turn;
    # the peak memory is that of each engine's first run.
    for _ in range(args.warmup + args.repeat):
        for engine in engines:
            if engine not in failed:
                result = ask(engine)
                if result is not None:
                    runs[engine].append(result)
    for proc in procs.values():
        try:
            proc.stdin.write("quit\n")
            proc.stdin.close()
        except BrokenPipeError:
            pass
        proc.wait()
    for engine in sorted(failed):
        print(f"{engine}: failed", file=sys.stderr)
    timed = {e: r[args.warmup:] for e, r in runs.items() if e not in failed and len(r) > args.warmup}
    baselines = [e for e in timed if not e.startswith("dpselect")]
    # Per round: dpselect's time over the faster baseline of that same round.
    ratios = {}
    for engine, results in timed.items():
        if baselines:
            ratios[engine] = [r["wall_s"] / min(timed[b][i]["wall_s"] for b in baselines)
                              for i, r in enumerate(results)]
    load = os.getloadavg()[0]
    print(f"rows={args.rows:,} {args.key_type} keys~{args.keys:,} users~{args.users:,} kappa={args.kappa} "
          f"cores={os.cpu_count()} repeat={args.repeat} (interleaved, after {args.warmup} warm-up) "
          f"load average after run={load:.2f}")
    print("| engine | median wall (s) | best wall (s) | median CPU (s) | ns/row | median ratio to the faster "
          "baseline, same round | peak extra memory | / input columns | output rows |")
    print("|---|---|---|---|---|---|---|---|---|")
    for engine, results in timed.items():
        walls = [r["wall_s"] for r in results]
        first = runs[engine][0]
        ratio = f"{median(ratios[engine]):.2f}x" if engine in ratios else "-"
        print(f"| {engine} | {median(walls):.2f} | {min(walls):.2f} | {median([r['cpu_s'] for r in results]):.2f} | "
              f"{1e9 * median(walls) / args.rows:.0f} | {ratio} | {first['peak_extra_bytes'] / 2**20:,.0f} MiB | "
              f"{first['peak_extra_bytes'] / first['input_bytes']:.2f}x ({first['input_bytes'] / 2**20:,.0f} MiB) | "
              f"{first['output_rows']:,} |")
    if "dpselect" in ratios:
        print("dpselect / faster baseline per round: " + ", ".join(f"{x:.2f}" for x in ratios["dpselect"]))


if __name__ == "__main__":
    main()
