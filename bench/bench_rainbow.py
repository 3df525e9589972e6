"""Benchmarks of rainbow DP (targets: closed forms for 1e6 distances < 50 ms; pull-back on a
1e6-node graph in seconds). Each benchmark also times a baseline on the same data in the same run
and records the ratio in ``extra_info`` (and prints it with ``-s``).

Run:  python -m pytest bench/bench_rainbow.py --benchmark-only -s -q
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest

from dpselect.rainbow import graph_mechanism, line_probabilities, pullback

N = 1_000_000


def best_of(function: Callable[[], object], repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def report(benchmark, name: str, baseline: float) -> None:
    ratio = benchmark.stats.stats.min / baseline
    benchmark.extra_info["baseline_seconds"] = baseline
    benchmark.extra_info["ratio_to_baseline"] = ratio
    print(
        f"\n{name}: min {benchmark.stats.stats.min * 1e3:.1f} ms, baseline {baseline * 1e3:.1f} ms, ratio {ratio:.1f}"
    )


@pytest.mark.parametrize(
    ("boundary", "epsilon"),
    [([0.3, 0.7], 0.5), ([0.02, 0.10, 0.88], 0.3), ([0.01, 0.02, 0.07, 0.9], 1e-5)],
    ids=["m2", "m3", "m4-small-eps"],
)
def test_closed_form_sorted_distances(benchmark, boundary: list[float], epsilon: float) -> None:
    distances = np.arange(N)
    benchmark(line_probabilities, boundary, epsilon, distances)
    # baseline: one np.exp over the same (float) distances, with an argument that stays finite.
    as_float = distances.astype(np.float64)
    report(benchmark, f"closed form m={len(boundary)} (sorted)", best_of(lambda: np.exp(-as_float * 1e-6)))


def test_closed_form_unsorted_distances(benchmark) -> None:
    data = np.random.Generator(np.random.PCG64(0))
    distances = data.integers(0, 10**9, size=N)
    benchmark(line_probabilities, [0.02, 0.10, 0.88], 0.3, distances)
    as_float = distances.astype(np.float64)
    report(benchmark, "closed form m=3 (unsorted, up to 1e9)", best_of(lambda: np.exp(-as_float * 1e-9)))


def grid_graph(side: int):
    sparse = pytest.importorskip("scipy.sparse")
    index = np.arange(side * side).reshape(side, side)
    rows = np.concatenate([index[:, :-1].ravel(), index[:-1, :].ravel()])
    cols = np.concatenate([index[:, 1:].ravel(), index[1:, :].ravel()])
    adjacency = sparse.csr_array((np.ones(rows.size, dtype=np.int8), (rows, cols)), shape=(side * side, side * side))
    # three vertical bands with three rainbows
    region = np.minimum(index.ravel() % side * 3 // side, 2)
    return adjacency, region


RAINBOWS = np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1]])
BOUNDARY = np.array([[0.3, 0.35, 0.35], [0.32, 0.33, 0.35], [0.34, 0.33, 0.33]])
EPSILON = 0.2  # the boundaries above are 0.2-DP across region edges (max ratio 0.35/0.3 < e^0.2)


def test_pullback_grid_1e6(benchmark) -> None:
    from scipy.sparse.csgraph import connected_components

    adjacency, region = grid_graph(1000)
    benchmark.pedantic(pullback, args=(adjacency, region, RAINBOWS, BOUNDARY, EPSILON), rounds=3, iterations=1)
    report(benchmark, "pull-back, 1000x1000 grid", best_of(lambda: connected_components(adjacency, directed=False), 3))


def test_pullback_path_1e6(benchmark) -> None:
    sparse = pytest.importorskip("scipy.sparse")
    from scipy.sparse.csgraph import connected_components

    nodes = np.arange(N - 1)
    adjacency = sparse.csr_array((np.ones(N - 1, dtype=np.int8), (nodes, nodes + 1)), shape=(N, N))
    region = (np.arange(N) * 3 // N).astype(np.int64)
    benchmark.pedantic(pullback, args=(adjacency, region, RAINBOWS, BOUNDARY, EPSILON), rounds=3, iterations=1)
    report(benchmark, "pull-back, path of 1e6", best_of(lambda: connected_components(adjacency, directed=False), 3))


def test_certified_graph_mechanism_grid_1e6(benchmark) -> None:
    from scipy.sparse.csgraph import connected_components

    adjacency, region = grid_graph(1000)
    benchmark.pedantic(graph_mechanism, args=(adjacency, region, RAINBOWS, BOUNDARY, EPSILON), rounds=1, iterations=1)
    report(
        benchmark,
        "pull-back + quantise + exact certificate, grid",
        best_of(lambda: connected_components(adjacency, directed=False), 3),
    )
