"""Demo: which search queries of a shipped counts file may be published?

    python -m dpselect.demo [--epsilon 1.0] [--delta 1e-5] [--counts FILE]

Reads ``query,users`` rows (distinct users per query; each user in one query), runs the
optimal selection and the TSGD thresholded release, and prints what each keeps. Without
``--counts`` it uses the shipped example ``dpselect.datasets.path("demo_counts")``, so it runs
from any directory.

Internal: a script (the README's first command), not an API.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

import dpselect
from dpselect import datasets


def read_counts(path: Path | None) -> tuple[list[str], np.ndarray]:
    source = path if path is not None else datasets.path("demo_counts")
    with source.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [r["query"] for r in rows], np.array([int(r["users"]) for r in rows], dtype=np.int64)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--counts", type=Path, default=None, help="CSV with columns query,users")
    args = parser.parse_args(argv)
    try:
        keys, counts = read_counts(args.counts)
        keep = dpselect.select(counts, args.epsilon, args.delta)
        released = dpselect.release(counts, args.epsilon, args.delta)
        cross = dpselect.crossovers(args.epsilon, args.delta)
    except (OSError, KeyError, ValueError, TypeError) as exc:
        print(f"dpselect demo: {exc}", file=sys.stderr)
        return 2
    print(f"{len(keys)} partitions, epsilon={args.epsilon}, delta={args.delta}: keep probability "
          f"reaches 1 at {cross.table_length} users; release threshold k={cross.k}")
    print(f"pi_opt keeps {int(keep.sum())} partitions; TSGD release publishes {int(released.keep.sum())}")
    order = np.argsort(-counts)
    print(f"{'query':<22}{'users':>7}  pi_opt  release")
    for i in list(order[:8]) + list(order[np.searchsorted(-counts[order], -cross.k * 2):][:8]):
        noisy = str(released.noisy_counts[i]) if released.keep[i] else "-"
        print(f"{keys[i]:<22}{counts[i]:>7}  {'kept' if keep[i] else '-':>6}  {noisy:>7}")
    print(dpselect.make_strategy("release", epsilon=args.epsilon, delta=args.delta).guarantee)
    return 0


if __name__ == "__main__":
    sys.exit(main())
