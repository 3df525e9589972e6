"""Where the time of raw rows goes: each step of the two paths of ``dpselect.ingest.rows``, one thread,
in CPU time per row (medians of interleaved repeats), and the ratio of the whole-input path to
the streaming path measured in the same run.

* streaming (several batches, the CLI; csrc/keymap.c, count_pairset.c, count.c): user codes, key
  codes, pair inserts into the two sets split by user parity, bounding of both sets;
* whole input with integer users (``select_partitions``; csrc/radix_pairs.c): key codes, users
  counted per bucket, users placed in their buckets, codes placed beside them, grouping,
  compaction, bounding of both halves.

Thread CPU time (``time.thread_time``) does not count the time a step waits for a core, so the
figures hold on a shared machine better than wall time does; they still grow when other jobs
share the caches. The data are bench_rows.py's (Zipf keys over ~1e6, ~1e6 int64 users). Run:

    python bench/bench_rows_phases.py --rows 10000000 --repeat 5 [--key-type int] [--kappa 3]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_rows import make_table  # noqa: E402  (shared data generator)


def streaming(table, kappa: int) -> dict[str, float]:
    from dpselect import _count

    from dpselect.ingest import rows
    clock = time.thread_time
    out: dict[str, float] = {}
    users, keys = rows.KeyFactorizer("user"), rows.KeyFactorizer("key")
    t = clock()
    user_codes = users.encode(table.column("user"))
    out["user codes"] = clock() - t
    t = clock()
    key_codes = keys.encode(table.column("key"))
    out["key codes"] = clock() - t
    sets = [_count.PairCounter(table.num_rows // 2) for _ in range(2)]
    t = clock()
    for shard, pair_set in enumerate(sets):
        pair_set.feed(user_codes, key_codes, 1, shard)
    out["pair inserts"] = clock() - t
    t = clock()
    for pair_set in sets:
        pair_set.finish(len(keys), kappa, None, None)
    out["bounding"] = clock() - t
    return out


def whole_input(table, kappa: int) -> dict[str, float]:
    from dpselect import _count

    from dpselect.ingest import radix as _radix_rows
    from dpselect.ingest import rows
    clock = time.thread_time
    out: dict[str, float] = {}
    keys = rows.KeyFactorizer("key")
    t = clock()
    key_codes = keys.encode(table.column("key"))
    out["key codes"] = clock() - t
    pieces = _radix_rows._user_pieces(table.column("user"))
    t = clock()
    radix = _count.RadixPairs(table.num_rows, 1, "user")
    for n, offset, values, width in pieces:
        radix.count(n, offset, values, width)
    radix.layout()
    out["users counted"] = clock() - t
    places, start, step = [], 0, 1 << 18
    t = clock()
    for n, offset, values, width in pieces:
        for lo in range(0, n, step):
            places.append(radix.scatter_users(min(step, n - lo), offset + lo, values, width))
    out["users placed"] = clock() - t
    t = clock()
    for chunk in places:
        radix.scatter_codes(chunk, key_codes[start:start + len(chunk)])
        start += len(chunk)
    radix.ready()
    out["codes placed"] = clock() - t
    t = clock()
    radix.group(0, radix.n_buckets)
    out["grouping"] = clock() - t
    t = clock()
    radix.compact()
    out["compaction"] = clock() - t
    t = clock()
    for shard in range(2):
        radix.finish(shard, 2, len(keys), kappa, None, None)
    out["bounding"] = clock() - t
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--kappa", type=int, default=3)
    parser.add_argument("--key-type", choices=("string", "int"), default="int")
    args = parser.parse_args()
    table = make_table(args.rows, 1_000_000, 1_000_000, 1, args.key_type)
    runs: dict[str, list[dict[str, float]]] = {"streaming": [], "whole input": []}
    for _ in range(args.repeat):  # interleaved, so that the machine's load hits both alike
        runs["streaming"].append(streaming(table, args.kappa))
        runs["whole input"].append(whole_input(table, args.kappa))
    print(f"rows={args.rows:,} {args.key_type} keys kappa={args.kappa} repeat={args.repeat} "
          f"load average after run={os.getloadavg()[0]:.2f}; CPU ns per row, one thread, medians")
    totals = {}
    for path, results in runs.items():
        print(f"| {path} | ns/row |\n|---|---|")
        for step in results[0]:
            print(f"| {step} | {1e9 * float(np.median([r[step] for r in results])) / args.rows:.1f} |")
        totals[path] = [sum(r.values()) for r in results]
        print(f"| **total** | {1e9 * float(np.median(totals[path])) / args.rows:.1f} |\n")
    ratio = np.median(np.array(totals["whole input"]) / np.array(totals["streaming"]))
    print(f"whole input / streaming, per repeat, median: {ratio:.2f}x")


if __name__ == "__main__":
    main()
