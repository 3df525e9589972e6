"""APPROX_BOUNDS: the per-partition cost and the rules' bounds on delay-like data
(docs/privacy/approx-bounds.md, "Measured").

* ``partition``: ``approx_bounds_per_partition`` over KEYS keys of VALUES values each (lognormal
  floats, so 2 × 2047 cells per key), secure generator; time (``time.perf_counter``) and peak
  Python-heap memory (``tracemalloc``), each repeat in a fresh process. ``--tree`` runs another
  checkout's dpselect (e.g. an older commit exported with ``git archive``) for before/after.
* ``rules``: 20 seeded runs of ``approx_bounds`` on delay-like values (80% uniform in −10…0,
  20% exponential of mean 60 capped at 1300; κ = L∞ = 8, ε = 0.2): the bounds of both rules on
  the same noisy histogram and the fraction of values each clamps.

Run:

    python bench/bench_bounds.py partition --keys 10000 --values 10 --repeat 3 [--tree /path/to/old]
    DPSELECT_ALLOW_INSECURE_RNG=1 python bench/bench_bounds.py rules --n 100000
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter

_CHILD = """
import json, time, tracemalloc, numpy as np
from dpselect.aggregation.bounds import approx_bounds_per_partition
keys, per = {keys}, {values}
codes = np.repeat(np.arange(keys), per)
values = np.random.default_rng(0).lognormal(3, 1, codes.size)
tracemalloc.start()
start = time.perf_counter()
found = approx_bounds_per_partition(values, codes, keys, 1.0)
elapsed = time.perf_counter() - start
print(json.dumps({{"seconds": elapsed, "peak_mib": tracemalloc.get_traced_memory()[1] / 2**20,
                  "found": int(found.found.sum())}}))
"""


def partition(args: argparse.Namespace) -> None:
    tree = os.path.abspath(args.tree) if args.tree else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": tree}
    for _ in range(args.repeat):
        out = subprocess.run([sys.executable, "-c", _CHILD.format(keys=args.keys, values=args.values)], env=env,
                             capture_output=True, text=True, check=True, cwd=tree)
        print(json.dumps({"tree": tree, "keys": args.keys, "values_per_key": args.values,
                          **json.loads(out.stdout.strip().splitlines()[-1])}))


def delay_like(n: int, seed: int, integer: bool):  # type: ignore[no-untyped-def]
    import numpy as np

    data = np.random.default_rng(seed)
    body_n = int(0.8 * n)
    body = data.integers(-10, 1, body_n) if integer else data.uniform(-10, 0, body_n)
    tail = np.minimum(data.exponential(60, n - body_n), 1300)
    return np.concatenate([body, np.ceil(tail).astype(np.int64) if integer else tail])


def rules(args: argparse.Namespace) -> None:
    import numpy as np

    import warnings

    from dpselect.aggregation.bounds import approx_bounds
    from dpselect.testing import InsecureDeterministicRNG, InsecureRNGWarning

    warnings.simplefilter("ignore", InsecureRNGWarning)  # the seeded runs are for measurement only

    for integer in (True, False):
        found: dict[str, list[tuple[object, object, float]]] = {"google": [], "tails": []}
        for seed in range(20):
            values = delay_like(args.n, seed, integer)
            result = approx_bounds(values, 0.2, max_partitions_contributed=8, max_contributions_per_partition=8,
                                   rng=InsecureDeterministicRNG(seed, 1))
            for rule, (lo, hi) in (("google", result.core), ("tails", (result.lower, result.upper))):
                found[rule].append((lo, hi, float(np.mean((values < lo) | (values > hi)))))
        for rule, runs in found.items():
            print(json.dumps({"n": args.n, "integer": integer, "rule": rule, "p95": float(np.percentile(values, 95)),
                              "bounds": {str(k): v for k, v in Counter((lo, hi) for lo, hi, _ in runs).items()},
                              "clamped": float(np.mean([c for _, _, c in runs]))}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("partition")
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--values", type=int, default=10)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--tree", default=None)
    r = sub.add_parser("rules")
    r.add_argument("--n", type=int, default=100_000)
    args = parser.parse_args()
    partition(args) if args.what == "partition" else rules(args)


if __name__ == "__main__":
    main()
