"""Time of the row mechanisms on 1e7 (user, key) pairs, each against weighted Gaussian (the
baseline) in the same run: DP-SIPS and cumulative DP-SIPS make several passes, and the
cumulative one sorts every user's keys once and draws a rounded Gaussian per candidate and round.

Data (numpy's seeded PCG64, input only, not privacy noise): ``DPSELECT_BENCH_PAIRS`` pairs
(default 1e7) from users holding 1–50 draws each of a Zipf(1.1) vocabulary of 10^6 keys, as in
``bench/bench_utility.py``'s synthetic users, deduplicated. κ = 16, ε = 1, δ = 1e-5.

    pytest bench/bench_row_mechanisms.py --benchmark-only -p no:cacheprovider
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import dpselect
from dpselect.mechanisms.weighted import UserSets

PAIRS = int(os.environ.get("DPSELECT_BENCH_PAIRS", 10_000_000))
KAPPA = 16
GROUP = f"row mechanisms, {PAIRS:.0e} pairs"


@pytest.fixture(scope="module")
def sets() -> UserSets:
    generator = np.random.default_rng(1)
    users = PAIRS // 25
    draws = generator.integers(1, 51, size=users)
    ranks = np.arange(1, 1_000_001, dtype=np.float64)
    cdf = np.cumsum(ranks ** -1.1)
    cdf /= cdf[-1]
    items = np.searchsorted(cdf, generator.random(int(draws.sum())))
    owner = np.repeat(np.arange(users), draws)
    pairs = np.unique(owner.astype(np.int64) << 20 | items)
    return UserSets.from_codes(pairs >> 20, pairs & ((1 << 20) - 1), 1 << 20)


@pytest.mark.parametrize("name", ["weighted_gaussian", "dp_sips", "cumulative_sips"])
def test_row_mechanism(benchmark, record, sets, name):
    strategy = dpselect.make_strategy(name, epsilon=1.0, delta=1e-5, max_partitions_contributed=KAPPA)
    released = benchmark.pedantic(strategy.select_sets, args=(sets,), rounds=3, iterations=1)
    assert released.any()
    record(GROUP, "baseline" if name == "weighted_gaussian" else name, sets.partitions.size)
