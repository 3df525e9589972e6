"""select / release on Zipf-like counts, beside the plain numpy pass ``counts > k`` over the
same array in the same run (targets: select <= 2x, release <= 5x, flat 1e6 -> 1e7).

Run: python -m pytest bench/bench_select.py --benchmark-only
"""
from __future__ import annotations

import numpy as np
import pytest

import dpselect

EPS, DELTA = 1.0, 1e-5
SIZES = [10**6, 10**7]


@pytest.fixture(scope="module", params=SIZES, ids=lambda n: f"n={n:.0e}")
def counts(request):
    # Bench input data only (not privacy noise): a seeded numpy generator is fine here.
    gen = np.random.Generator(np.random.PCG64(request.param))
    return np.minimum(gen.zipf(1.3, size=request.param), 10**9).astype(np.int64)


def test_baseline_numpy_threshold(benchmark, record, counts):
    k = dpselect.crossovers(EPS, DELTA).k
    benchmark(lambda: counts > k)
    record(f"select n={counts.size:.0e}", "baseline", counts.size)
    record(f"release n={counts.size:.0e}", "baseline", counts.size)


def test_select(benchmark, record, counts):
    dpselect.select(counts[:10], EPS, DELTA)  # build and certify the table outside the timing
    benchmark(dpselect.select, counts, EPS, DELTA)
    record(f"select n={counts.size:.0e}", "dpselect.select", counts.size)


def test_select_out(benchmark, record, counts):
    out = np.empty(counts.shape, bool)
    benchmark(dpselect.select, counts, EPS, DELTA, out=out)
    record(f"select n={counts.size:.0e}", "dpselect.select(out=)", counts.size)


def test_release(benchmark, record, counts):
    dpselect.release(counts[:10], EPS, DELTA)
    benchmark(dpselect.release, counts, EPS, DELTA)
    record(f"release n={counts.size:.0e}", "dpselect.release", counts.size)


def test_release_out(benchmark, record, counts):
    out = (np.empty(counts.shape, bool), np.empty(counts.shape, np.int64))
    benchmark(dpselect.release, counts, EPS, DELTA, out=out)
    record(f"release n={counts.size:.0e}", "dpselect.release(out=)", counts.size)


@pytest.mark.parametrize("strategy", ["laplace", "gaussian"])
def test_select_thresholding(benchmark, record, counts, strategy):
    """Laplace and Gaussian thresholding run the same certified-table kernel as pi_opt."""
    dpselect.select(counts[:10], EPS, DELTA, strategy=strategy)
    benchmark(dpselect.select, counts, EPS, DELTA, strategy=strategy)
    record(f"select n={counts.size:.0e}", f"dpselect.select({strategy})", counts.size)
