"""Generate dpselect/data/demo_counts.csv: distinct users per search query, Zipf-like.

Synthetic input data for the demo (not privacy noise), so a seeded numpy generator is fine.
The package documents and loads it as ``dpselect.datasets`` "demo_counts" (``demo_counts()``).
Run: python scripts/make_demo_counts.py
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

WORDS = ["weather", "news", "recipe", "train", "flight", "hotel", "music", "movie", "football",
         "python", "garden", "bike", "camera", "laptop", "phone", "coffee", "tea", "museum",
         "concert", "library", "pharmacy", "dentist", "school", "taxi", "pizza", "sushi"]


def main() -> None:
    gen = np.random.Generator(np.random.PCG64(20261122))
    queries = sorted({f"{a} {b}" for a in WORDS for b in WORDS if a != b})
    gen.shuffle(queries)
    counts = np.minimum(gen.zipf(1.6, size=len(queries)), 5000)
    out = Path(__file__).resolve().parent.parent / "dpselect" / "data" / "demo_counts.csv"
    with out.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["query", "users"])
        writer.writerows(zip(queries, counts.tolist()))
    print(f"wrote {len(queries)} partitions to {out}")


if __name__ == "__main__":
    main()
