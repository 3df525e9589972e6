"""The streaming rows path (``RowCounter`` pair sets: string privacy units) through
``select_partitions``: wall seconds of the best and the median of ``--repeat`` runs at ``--threads``,
and the CPU seconds of the median run.

``--batches N`` feeds the rows to a ``RowCounter`` in N batches instead (a streamed file, as the
CLI does), then bounds them. ``--min-threads T`` moves the thread count from which each column is
coded on every thread by the sharded coder (``parallel_codes.MIN_THREADS``, 4): with 2, a 2-core
machine shows that path's cost (its CPU seconds divided by the thread count are its wall time on
as many idle cores, less the serial scatter of the pairs).

Data: ``--rows`` rows, privacy units the text "user<k>" of ``--users`` uniform integers (Arrow
strings, so the radix path does not take them), keys ``--keys`` uniform integers. To compare two
source trees (before and after a change) on a shared machine, interleave their runs, e.g.:

    for r in 1 2 3 4; do for t in 1 2; do
      PYTHONPATH=/path/before python bench/bench_streaming_rows.py --threads $t --label before
      PYTHONPATH=/path/after  python bench/bench_streaming_rows.py --threads $t --label after
    done; done
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--users", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--label", default="")
    parser.add_argument("--batches", type=int, default=0, help="stream the rows in this many batches")
    parser.add_argument("--min-threads", type=int, default=0, help="override parallel_codes.MIN_THREADS")
    parser.add_argument("--int-users", action="store_true", help="integer privacy units instead of text")
    args = parser.parse_args()

    import pyarrow as pa

    import dpselect

    from dpselect._threads import using
    from dpselect.ingest import parallel_codes
    from dpselect.ingest.rows import RowCounter

    if args.min_threads:
        parallel_codes.MIN_THREADS = args.min_threads
    g = np.random.default_rng(1)  # the data only
    codes = g.integers(0, args.users, args.rows)
    users = pa.array(codes) if args.int_users else pa.array(np.char.add("user", codes.astype(str)).astype(object))
    table = pa.table({"user": users, "key": pa.array(g.integers(0, args.keys, args.rows))})
    batches = table.to_batches(max_chunksize=-(-args.rows // args.batches)) if args.batches else None

    def run() -> None:
        if batches is None:
            dpselect.select_partitions(table, privacy_unit="user", by="key", epsilon=1.0, delta=1e-6,
                                       max_partitions_contributed=4, threads=args.threads)
            return
        counter = RowCounter("user", ["key"])
        with using(args.threads):
            for batch in batches:
                counter.feed(batch)
            counter.finish(4, None)

    times, cpu = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(args.repeat):
            start, start_cpu = time.perf_counter(), time.process_time()
            run()
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
    print(f"{args.label} threads={args.threads} rows={args.rows} batches={args.batches} best={min(times):.3f}s "
          f"median={statistics.median(times):.3f}s cpu={statistics.median(cpu):.3f}s")


if __name__ == "__main__":
    main()
