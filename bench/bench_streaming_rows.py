"""The streaming rows path (``RowCounter`` pair sets: string privacy units) through
``select_partitions``: wall seconds of the best and the median of ``--repeat`` runs at ``--threads``.

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
    args = parser.parse_args()

    import pyarrow as pa

    import dpselect

    g = np.random.default_rng(1)  # the data only
    users = np.char.add("user", g.integers(0, args.users, args.rows).astype(str))
    table = pa.table({"user": pa.array(users.astype(object)), "key": pa.array(g.integers(0, args.keys, args.rows))})
    times = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(args.repeat):
            start = time.perf_counter()
            dpselect.select_partitions(table, privacy_unit="user", by="key", epsilon=1.0, delta=1e-6,
                                       max_partitions_contributed=4, threads=args.threads)
            times.append(time.perf_counter() - start)
    print(f"{args.label} threads={args.threads} rows={args.rows} best={min(times):.3f}s "
          f"median={statistics.median(times):.3f}s")


if __name__ == "__main__":
    main()
