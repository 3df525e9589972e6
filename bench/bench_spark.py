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

Each is run ``--repeat`` times; the best wall time is reported. Also printed: each engine's
time at the largest size over its time at the smallest, and dpselect.spark's time over the plain
countDistinct. Run (PySpark and Java needed; ``pip install "dpselect[spark]"``):

    python bench/bench_spark.py --rows 1000000,10000000 --repeat 2
"""
from __future__ import annotations

import argparse
import os
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


def best(run, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1000000,10000000", help="comma-separated table sizes")
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--kappas", default="1,3")
    parser.add_argument("--repeat", type=int, default=2)
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
    results: dict[tuple[str, int], float] = {}
    outputs: dict[tuple[str, int], int] = {}
    with tempfile.TemporaryDirectory(prefix="dpselect-bench-spark-") as tmp:
        for rows in sizes:
            path = os.path.join(tmp, f"rows-{rows}.parquet")
            pq.write_table(make_table(rows, args.keys, args.users, args.seed), path)
            df = spark.read.parquet(path)

            def plain() -> None:
                df.groupBy("key").agg(F.countDistinct("user").alias("n")).write.format("noop").mode("overwrite").save()

            plain()  # warm-up: JIT, Python workers
            results["spark countDistinct", rows] = best(plain, args.repeat)
            dpselect.spark.select_partitions(df.limit(1000), privacy_unit="user", by="key", epsilon=1.0,
                                             delta=1e-5).count()  # warm-up: the workers import dpselect
            for kappa in kappas:
                def on_spark(kappa: int = kappa) -> None:
                    out = dpselect.spark.select_partitions(df, privacy_unit="user", by="key", epsilon=1.0, delta=1e-5,
                                                           max_partitions_contributed=kappa, counts=True)
                    outputs[f"dpselect.spark κ={kappa}", rows] = out.count()
                    out.unpersist()

                results[f"dpselect.spark κ={kappa}", rows] = best(on_spark, args.repeat)
            table = pq.read_table(path)
            for kappa in kappas:
                def local(kappa: int = kappa) -> None:
                    out = dpselect.select_partitions(table, privacy_unit="user", by="key", epsilon=1.0, delta=1e-5,
                                                     max_partitions_contributed=kappa, counts=True)
                    outputs[f"dpselect (one machine) κ={kappa}", rows] = out.num_rows

                results[f"dpselect (one machine) κ={kappa}", rows] = best(local, args.repeat)
            del table
    spark.stop()

    engines = list(dict.fromkeys(name for name, _ in results))
    small, large = min(sizes), max(sizes)
    print(f"{args.master}, cores={os.cpu_count()}, keys~{args.keys:,} users~{args.users:,}, best of {args.repeat}, "
          f"load average after run={os.getloadavg()[0]:.2f}")
    head = " | ".join(f"{r:,} rows (s)" for r in sizes)
    ratio_head = f" | {large:,} / {small:,}" if len(sizes) > 1 else ""
    print(f"| engine | {head}{ratio_head} | / countDistinct at {large:,} | released keys at {large:,} |")
    print("|---" * (len(sizes) + 4) + "|" if len(sizes) > 1 else "|---" * (len(sizes) + 3) + "|")
    base = results["spark countDistinct", large]
    for name in engines:
        cells = " | ".join(f"{results[name, r]:.2f}" for r in sizes)
        ratio = f" | {results[name, large] / results[name, small]:.1f}x" if len(sizes) > 1 else ""
        released = outputs.get((name, large), "-")
        released = f"{released:,}" if isinstance(released, int) else released
        print(f"| {name} | {cells}{ratio} | {results[name, large] / base:.2f}x | {released} |")


if __name__ == "__main__":
    main()
