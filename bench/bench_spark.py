"""dpselect on Spark against a plain Spark COUNT(DISTINCT) and against dpselect on one machine.

Data: ``bench_rows.make_table`` (string keys Zipf-distributed over ~1e6 keys, ~1e6 int64 users),
written to Parquet in a temporary directory, at each of ``--rows`` (default 1e6 and 1e7). In the
same run, on one local SparkSession (``--master``, default local[2]):

* ``spark countDistinct``: ``groupBy("key").agg(countDistinct("user"))`` written to the no-op sink
  (no bounding, no DP);
* ``dpselect.spark κ=k``: ``dpselect.spark.select_partitions(df, ..., max_partitions_contributed=k,
  counts=True)`` (dedup, bounding, per-key counts and the TSGD release, materialised);
* ``dpselect (one machine) κ=k``: ``dpselect.select_partitions`` on the same rows read from the
  same Parquet file into a pyarrow table (the read is not timed).

After one warm-up run of each, the timed runs are interleaved, ``--repeat`` rounds of every
engine in turn, so that other jobs on the machine slow every engine alike; the table shows the
median wall time of each, each engine's median at the largest size over its median at the
smallest, and the median over the rounds of its time over the plain countDistinct's time in the
same round. Run (PySpark and Java needed; ``pip install "dpselect[spark]"``):

    python bench/bench_spark.py --rows 1000000,10000000 --repeat 3
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
if (ROOT / "pyproject.toml").is_file():  # a source tree: this dpselect, here and in Spark's Python workers
    sys.path.insert(0, str(ROOT))

from bench_rows import make_table  # noqa: E402


def session(master: str, driver_memory: str):
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = (SparkSession.builder.master(master).appName("dpselect-bench")
               .config("spark.driver.memory", driver_memory)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", os.environ.get("BENCH_SHUFFLE_PARTITIONS", "8")))
    if (ROOT / "pyproject.toml").is_file():
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        os.environ["PYTHONPATH"] = path
        builder = builder.config("spark.executorEnv.PYTHONPATH", path)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def timed(run) -> float:
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1000000,10000000", help="comma-separated table sizes")
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--kappas", default="1,3")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved timed rounds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g")
    args = parser.parse_args()
    sizes = [int(float(r)) for r in args.rows.split(",")]
    kappas = [int(k) for k in args.kappas.split(",")]

    import warnings

    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    import dpselect
    import dpselect.spark

    warnings.filterwarnings("ignore", category=FutureWarning)  # pyspark on pandas 3
    spark = session(args.master, args.driver_memory)
    times: dict[tuple[str, int], list[float]] = {}
    outputs: dict[tuple[str, int], int] = {}
    with tempfile.TemporaryDirectory(prefix="dpselect-bench-spark-") as tmp:
        for rows in sizes:
            path = os.path.join(tmp, f"rows-{rows}.parquet")
            pq.write_table(make_table(rows, args.keys, args.users, args.seed), path)
            df = spark.read.parquet(path)
            table = pq.read_table(path)
            engines: dict[str, object] = {}

            # Each engine binds this size's data as default arguments, not by name from the loop.
            def plain(df=df) -> None:
                df.groupBy("key").agg(F.countDistinct("user").alias("n")).write.format("noop").mode("overwrite").save()

            engines["spark countDistinct"] = plain
            for kappa in kappas:
                def on_spark(kappa: int = kappa, df=df, rows: int = rows) -> None:
                    out = dpselect.spark.select_partitions(df, privacy_unit="user", by="key", epsilon=1.0, delta=1e-5,
                                                           max_partitions_contributed=kappa, counts=True)
                    outputs[f"dpselect.spark κ={kappa}", rows] = out.count()
                    out.unpersist()

                engines[f"dpselect.spark κ={kappa}"] = on_spark
            for kappa in kappas:
                def local(kappa: int = kappa, table=table, rows: int = rows) -> None:
                    out = dpselect.select_partitions(table, privacy_unit="user", by="key", epsilon=1.0, delta=1e-5,
                                                     max_partitions_contributed=kappa, counts=True)
                    outputs[f"dpselect (one machine) κ={kappa}", rows] = out.num_rows

                engines[f"dpselect (one machine) κ={kappa}"] = local
            for run in engines.values():  # warm-up: JIT, Python workers importing dpselect, tables
                run()
            for _ in range(args.repeat):
                for name, run in engines.items():
                    times.setdefault((name, rows), []).append(timed(run))
            del engines, run, table  # the engines hold the table too: free it before the next size's
    spark.stop()

    names = list(dict.fromkeys(name for name, _ in times))
    small, large = min(sizes), max(sizes)
    median = {key: statistics.median(values) for key, values in times.items()}
    print(f"{args.master}, cores={os.cpu_count()}, keys~{args.keys:,} users~{args.users:,}, medians of {args.repeat} "
          f"interleaved rounds, load average after run={os.getloadavg()[0]:.2f}")
    head = " | ".join(f"{r:,} rows (s)" for r in sizes)
    ratio_head = f" | {large:,} / {small:,}" if len(sizes) > 1 else ""
    print(f"| engine | {head}{ratio_head} | / countDistinct at {large:,} (per round) | released keys at {large:,} |")
    print("|---" * (len(sizes) + 4) + "|" if len(sizes) > 1 else "|---" * (len(sizes) + 3) + "|")
    base = times["spark countDistinct", large]
    for name in names:
        cells = " | ".join(f"{median[name, r]:.2f}" for r in sizes)
        ratio = f" | {median[name, large] / median[name, small]:.1f}x" if len(sizes) > 1 else ""
        per_round = [t / b for t, b in zip(times[name, large], base)]
        released = outputs.get((name, large), "-")
        released = f"{released:,}" if isinstance(released, int) else released
        print(f"| {name} | {cells}{ratio} | {statistics.median(per_round):.2f}x "
              f"({', '.join(f'{r:.2f}' for r in per_round)}) | {released} |")


if __name__ == "__main__":
    main()
