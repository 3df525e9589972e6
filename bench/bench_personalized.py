"""Timings of PDP sum / PDP count on the Table-1 setting (|U| = 1e6), as ratios to a numpy pass.

Run: ``python -m pytest bench/bench_personalized.py --benchmark-only -q -s``
Targets: PDP sum < 1 s, PDP count < 0.5 s. The baseline is one plain numpy pass over
the same arrays (``np.minimum(values, cap).sum()`` plus ``phi.min()``), measured in the same run;
the reported ratio is median(mechanism) / median(baseline). Uses the package CSPRNG.
"""
from __future__ import annotations

import math
import time

import numpy as np
import pytest

from dpselect.personalized import pdp_count, pdp_sum

N_USERS = 10**6


@pytest.fixture(scope="module")
def table1() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    gen = np.random.Generator(np.random.PCG64(7))
    phi = gen.normal(1.0, 0.3, N_USERS)
    floor = 1 / (10 * math.sqrt(N_USERS))
    phi[phi < floor] = floor
    chosen = gen.choice(N_USERS, N_USERS // 10, replace=False)
    values = np.zeros(N_USERS, dtype=np.int64)
    drawn = gen.normal(1000, 200, chosen.size).astype(np.int64)
    drawn[drawn <= 0] = 1
    values[chosen] = drawn
    return phi, (values > 0).astype(np.int64), values


def _numpy_pass_seconds(values: np.ndarray, phi: np.ndarray, repeats: int = 15) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        int(np.minimum(values, 1024).sum())
        float(phi.min())
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _report(benchmark, name: str, baseline: float) -> None:
    median = benchmark.stats.stats.median
    ratio = median / baseline
    benchmark.extra_info["numpy_pass_seconds"] = baseline
    benchmark.extra_info["ratio_to_numpy_pass"] = ratio
    print(f"\n{name}: median {median:.4f} s, numpy pass {baseline * 1e3:.2f} ms, ratio {ratio:.1f}x")


def test_pdp_sum_1e6(benchmark, table1) -> None:
    phi, _, values = table1
    baseline = _numpy_pass_seconds(values, phi)
    benchmark.pedantic(pdp_sum, args=(values, phi, 10**7), kwargs={"beta": 0.1}, rounds=7, iterations=1)
    _report(benchmark, "pdp_sum (1e6 users)", baseline)


def test_pdp_count_1e6(benchmark, table1) -> None:
    phi, bits, _ = table1
    baseline = _numpy_pass_seconds(bits, phi)
    benchmark.pedantic(pdp_count, args=(bits, phi), kwargs={"beta": 0.1}, rounds=7, iterations=1)
    _report(benchmark, "pdp_count (1e6 users)", baseline)


def test_pdp_sum_1e6_all_nonzero(benchmark, table1) -> None:
    """Worst case for the per-user work: every one of the 1e6 users holds a non-zero value."""
    phi, _, _ = table1
    gen = np.random.Generator(np.random.PCG64(8))
    values = np.clip(gen.normal(1000, 200, N_USERS).astype(np.int64), 1, None)
    baseline = _numpy_pass_seconds(values, phi)
    benchmark.pedantic(pdp_sum, args=(values, phi, 10**7), kwargs={"beta": 0.1}, rounds=5, iterations=1)
    _report(benchmark, "pdp_sum (1e6 users, all non-zero)", baseline)
