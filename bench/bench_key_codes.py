"""Key codes on several threads (csrc/key_shards.h) against the one-thread code map (csrc/keymap.h),
and the whole-input rows path with and without them.

Data: bench_rows.py's integer keys (Zipf over ~1e6 keys, 1e7 rows by default) and int64 users;
with ``--strings``, the keys are the decimal text of those integers (an Arrow string column), coded
by ``KeyMap.encode_var`` and ``parallel_codes.encode_var``.

* key codes: ``KeyMap.encode_fixed`` (serial) against ``parallel_codes.encode_fixed`` on 1 and T
  threads; wall time and the process's CPU time (every thread's), ns per row;
* rows path: ``RowCounter.feed(table, final=True)`` + ``finish`` on T threads with the keys coded
  first on every thread (after) or piece by piece on one thread beside the grouping (before:
  ``radix.codes_first`` forced off; "after" is taken at any T, below ``parallel_codes.MIN_THREADS``
  too); wall ns per row, and the process's CPU time.

Repeats are interleaved, so that other jobs on a shared machine slow every variant alike, and
ratios are taken per repeat (medians reported). Run:

    python bench/bench_key_codes.py --rows 10000000 --repeat 5 --threads 2
    python bench/bench_key_codes.py --rows 2000000 --repeat 5 --threads 2 --strings
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_rows import make_table  # noqa: E402  (shared data generator)


def timed(call: Callable[[], object]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    from dpselect import _count, _threads
    from dpselect.ingest import parallel_codes, radix
    from dpselect.ingest.rows import RowCounter

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--strings", action="store_true", help="string keys: the decimal text of the integers")
    args = parser.parse_args()
    table = make_table(args.rows, 1_000_000, 1_000_000, 1, "int")
    if args.strings:
        import pyarrow as pa

        table = table.set_column(1, "key", table.column("key").cast(pa.string()))
    key = table.column("key").combine_chunks()
    buffers = key.buffers()
    n = len(key)
    kind = "string" if args.strings else "int"

    def serial() -> object:
        if args.strings:
            return _count.KeyMap("bytes", 1).encode_var(n, key.offset, buffers[0], buffers[1], False, buffers[2])
        return _count.KeyMap("word", 1).encode_fixed(n, key.offset, buffers[0], buffers[1], key.type.bit_width // 8)

    def sharded(threads: int) -> object:
        if args.strings:
            return parallel_codes.encode_var(n, key.offset, buffers[0], buffers[1], False, buffers[2], threads, 1)
        return parallel_codes.encode_fixed(n, key.offset, buffers[0], buffers[1], key.type.bit_width // 8,
                                           threads, 1)
    real_codes_first = radix.codes_first

    real_min_threads = parallel_codes.MIN_THREADS

    def rows_path(codes_first: bool) -> None:
        radix.codes_first = real_codes_first if codes_first else (lambda *a: False)
        parallel_codes.MIN_THREADS = 2  # measured at any T >= 2, whatever the default threshold
        try:
            with _threads.using(args.threads):
                counter = RowCounter("user", ["key"])
                counter.feed(table, final=True)
                counter.finish(3, None)
        finally:
            radix.codes_first = real_codes_first
            parallel_codes.MIN_THREADS = real_min_threads

    variants: dict[str, Callable[[], object]] = {
        "key codes, KeyMap (1 thread)": serial,
        "key codes, sharded, 1 thread": lambda: sharded(1),
        f"key codes, sharded, {args.threads} threads": lambda: sharded(args.threads),
        f"rows path, {args.threads} threads, keys serial (before)": lambda: rows_path(False),
        f"rows path, {args.threads} threads, keys sharded (after)": lambda: rows_path(True),
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for call in variants.values():  # warm-up
        call()
    for _ in range(args.repeat):
        for name, call in variants.items():
            results[name].append(timed(call))
    print(f"rows={args.rows:,} {kind} keys, threads={args.threads}, cores={os.cpu_count()}, repeat={args.repeat}, "
          f"load average after run={os.getloadavg()[0]:.2f}; medians, ns per row")
    print("| variant | wall | CPU, all threads |\n|---|---|---|")
    for name, runs in results.items():
        wall = 1e9 * float(np.median([r[0] for r in runs])) / args.rows
        cpu = 1e9 * float(np.median([r[1] for r in runs])) / args.rows
        print(f"| {name} | {wall:.1f} | {cpu:.1f} |")
    names = list(variants)

    def ratio(a: str, b: str) -> float:
        return float(np.median([x[0] / y[0] for x, y in zip(results[a], results[b])]))

    print(f"\nkey codes wall, KeyMap / sharded on {args.threads} threads: {ratio(names[0], names[2]):.2f}x")
    print(f"rows path wall, before / after: {ratio(names[3], names[4]):.2f}x")


if __name__ == "__main__":
    main()
