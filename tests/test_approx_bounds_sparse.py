"""APPROX_BOUNDS per partition, drawn sparsely (dpselect.aggregation._bounds_sparse;
docs/privacy/approx-bounds.md, "Per partition, sparsely"): the empty cells that pass a
threshold and their noisy counts follow the exact law, the whole mechanism releases what the
dense one (every cell noised) releases with the same frequencies, and deliberately broken
samplers are caught by the same tests."""
from __future__ import annotations

import functools
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy import stats

from dpselect.aggregation import _bounds_sparse
from dpselect.aggregation._bounds_sparse import LazyUniform, PassRate, geometric_skip, passing_empty_cells
from dpselect.core import exact as _expbounds  # the e^x bounds' home
from dpselect.core.exact import exp_neg_interval
from dpselect.aggregation.bounds import approx_bounds_per_partition
from dpselect.aggregation.noise import DiscreteLaplaceNoise
from dpselect.testing import InsecureDeterministicRNG

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

NOISE = DiscreteLaplaceNoise(Fraction(1))  # ε = 1, L0 = L∞ = 1: q = e^-1


def _rng(seed: int) -> InsecureDeterministicRNG:
    return InsecureDeterministicRNG(seed=seed, stream=7)


def _exact_rate(scale: Fraction, k: int) -> float:
    mpmath.mp.dps = 40
    q = mpmath.exp(-mpmath.mpf(scale.denominator) / scale.numerator)
    return float(q**k / (1 + q))


# ------------------------------------------------------------------ the pieces

def test_lazy_uniform_compares_exactly_and_draws_more_bits_only_when_needed() -> None:
    u = LazyUniform(_rng(1))
    x = u.approx()
    assert u.below(lambda bits: (Fraction(x) + Fraction(1, 2**40), Fraction(x) + Fraction(1, 2**40)))
    assert not u.below(lambda bits: (Fraction(x) - Fraction(1, 2**40), Fraction(x) - Fraction(1, 2**40)))
    # an interval around U itself that shrinks with the precision asked: needs more bits
    v = LazyUniform(_rng(2))
    v.approx()  # draws the first 64 bits
    centre = Fraction(2 * v._value + 1, 2**65)  # the middle of U's first interval
    answer = v.below(lambda bits: (centre - Fraction(1, 2**bits), centre + Fraction(1, 2**bits)))
    assert v._bits > 64 and answer == (Fraction(v._value, 2**v._bits) < centre)


@pytest.mark.parametrize("y", [Fraction(0), Fraction(1, 3), Fraction(25), Fraction(2**16 + 1, 1), Fraction(10**5, 3),
                               Fraction(10**7)])
def test_exp_intervals_have_absolute_precision(y: Fraction) -> None:
    mpmath.mp.dps = 60
    exact = mpmath.exp(-mpmath.mpf(y.numerator) / y.denominator)
    for bits in (64, 150):
        lo, hi = exp_neg_interval(y, bits)
        assert mpmath.mpf(lo.numerator) / lo.denominator <= exact <= mpmath.mpf(hi.numerator) / hi.denominator
        assert 0 <= hi - lo <= Fraction(1, 2**bits)


def test_exp_intervals_keep_shrinking_past_the_saturation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past Y_SATURATE (lowered here, so that the case costs little) the interval comes from
    powers of e^(−y/m) and still shrinks with the precision asked, where exp_neg_bounds is
    stuck at its saturated upper bound."""
    monkeypatch.setattr(_expbounds, "Y_SATURATE", Fraction(64))
    _expbounds._saturated_upper.cache_clear()
    mpmath.mp.dps = 330  # about 1100 bits, finer than the 2^-900 compared
    for y in (Fraction(100), Fraction(1001, 3)):
        exact = mpmath.exp(-mpmath.mpf(y.numerator) / y.denominator)
        for bits in (600, 900):
            lo, hi = exp_neg_interval(y, bits)
            assert mpmath.mpf(lo.numerator) / lo.denominator <= exact <= mpmath.mpf(hi.numerator) / hi.denominator
            assert 0 < hi - lo <= Fraction(1, 2**bits)
        assert _expbounds.exp_neg_bounds(y, 900)[0] == 0  # the saturated bounds would never decide
    _expbounds._saturated_upper.cache_clear()


def test_pass_rate_intervals_contain_the_exact_rate_and_shrink() -> None:
    for scale, k in ((Fraction(1), 9), (Fraction(7, 3), 40), (Fraction(10**12), 25 * 10**12), (Fraction(1, 3), 10**6)):
        rate = PassRate(scale, k)
        mpmath.mp.dps = 120  # finer than the 2^-200 compared below
        q = mpmath.exp(-mpmath.mpf(scale.denominator) / scale.numerator)
        exact = q**k / (1 + q)
        for bits in (64, 200):
            lo, hi = rate.interval(bits)
            assert mpmath.mpf(lo.numerator) / lo.denominator <= exact <= mpmath.mpf(hi.numerator) / hi.denominator
            assert hi - lo <= Fraction(1, 2**bits)
        lo, hi = rate.survival(1000, 100)
        assert hi - lo <= Fraction(1, 2**100) and lo <= hi


def test_geometric_skips_follow_the_geometric_law() -> None:
    """Gaps between passes, P[G ≥ g] = (1 − t)^g with t = e^-2/(1 + e^-1) ≈ 0.099 (k = 2 at
    b = 1): chi-square against the exact law."""
    rate = PassRate(Fraction(1), 2)
    t = _exact_rate(Fraction(1), 2)
    rng = _rng(3)
    draws = [geometric_skip(rate, 10**9, rng) for _ in range(3000)]
    observed = np.bincount(np.minimum(draws, 30), minlength=31)
    expected = np.array([(1 - t) ** g * t for g in range(30)] + [(1 - t) ** 30]) * len(draws)
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    assert geometric_skip(PassRate(Fraction(1), 60), 1000, rng) is None  # t ≈ 6e-27


# ------------------------------------------------------------------ the empty cells' law

def _empty_cell_statistics(sampler, k: int, runs: int, n_cells: int) -> tuple[float, float, float]:
    """p-values of: the number of passes (exact binomial), their offsets above k (chi-square
    against the geometric law (1 − q)q^y) and their positions (chi-square, 8 equal blocks)."""
    rng = _rng(4)
    total, offsets, blocks = 0, [], np.zeros(8, dtype=np.int64)
    for _ in range(runs):
        cells, noisy = sampler(n_cells, NOISE, k, rng)
        assert np.all(np.diff(cells) > 0) and np.all(noisy >= k) and cells.size == noisy.size
        total += cells.size
        offsets.extend((noisy - k).tolist())
        blocks += np.bincount(cells * 8 // n_cells, minlength=8)
    t = _exact_rate(Fraction(1), k)
    count_p = stats.binomtest(total, runs * n_cells, t).pvalue
    q = math.exp(-1)
    observed = np.bincount(np.minimum(offsets, 6), minlength=7)
    expected = np.array([(1 - q) * q**y for y in range(6)] + [q**6]) * len(offsets)
    return count_p, stats.chisquare(observed, expected).pvalue, stats.chisquare(blocks).pvalue


@pytest.mark.parametrize("k", [9, 3])  # t ≈ 9e-5 (skipping), t ≈ 0.036 (chunked draws)
def test_passing_empty_cells_follow_the_exact_law(k: int) -> None:
    runs, n_cells = (400, 20_000) if k == 9 else (40, 20_000)
    assert (PassRate(Fraction(1), k).estimate > _bounds_sparse.DENSE_RATE) == (k == 3)
    assert min(_empty_cell_statistics(passing_empty_cells, k, runs, n_cells)) > 1e-4


@functools.lru_cache(maxsize=None)
def _broken_interval(y: Fraction, bits: int) -> tuple[Fraction, Fraction]:
    return exp_neg_interval(y, bits)


def _broken_rate(self: PassRate, bits: int) -> tuple[Fraction, Fraction]:
    """t without its 1/(1 + q) factor: 1 + q ≈ 1.37 times too many passes."""
    return _broken_interval(self.k / self.scale, bits)


def _broken_offsets(count: int, noise: DiscreteLaplaceNoise, rng: object) -> np.ndarray:
    """Offsets from the two-sided discrete Laplace (|Y|) instead of Y conditioned on Y ≥ 0."""
    return np.abs(noise.sample(count, rng=rng))


@pytest.mark.parametrize("broken", [pytest.param("rate", marks=pytest.mark.slow), "offsets"])
def test_the_law_tests_catch_a_broken_sampler(broken: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if broken == "rate":
        monkeypatch.setattr(PassRate, "interval", _broken_rate)
    else:
        monkeypatch.setattr(_bounds_sparse, "_geometric_offsets", _broken_offsets)
    assert min(_empty_cell_statistics(passing_empty_cells, 9, 400, 20_000)) < 1e-6


# ------------------------------------------------------------------ sparse against dense

def _dense_per_partition(values: np.ndarray, codes: np.ndarray, n: int, k: int, bins: int, rng: object
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The dense mechanism: every one of the n·2B cells noised, then Google's scan at k."""
    cells = codes * 2 * bins + np.where(values >= 0, 0, bins) + np.where(
        np.abs(values) <= 1, 0, np.ceil(np.log2(np.abs(values))).astype(np.int64))
    noisy = NOISE.add(np.bincount(cells, minlength=2 * bins * n).astype(np.int64), rng=rng).reshape(n, 2 * bins)
    line = np.concatenate([noisy[:, bins:][:, ::-1], noisy[:, :bins]], axis=1) >= k
    found = line.any(axis=1)
    low = np.argmax(line, axis=1)
    high = 2 * bins - 1 - np.argmax(line[:, ::-1], axis=1)
    return found, np.where(found, low, -1), np.where(found, high, -1)


def _categories(found: np.ndarray, low: np.ndarray, high: np.ndarray, kinds: np.ndarray) -> list[tuple[int, ...]]:
    return list(zip(kinds.tolist(), found.tolist(), low.tolist(), high.tolist()))


def _edges_to_line(bounds, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Line indices of the lower and upper bounds found (integer bins from 1)."""
    edges = [-(2.0 ** i) for i in range(bins - 1, -1, -1)] + [0.0] + [2.0 ** i for i in range(bins)]

    def index(x: np.ndarray, offset: int) -> np.ndarray:
        return np.array([edges.index(v) - offset if not math.isnan(v) else -1 for v in x])

    return index(bounds.lower, 0), index(bounds.upper, 1)


def _release_frequencies(sparse: bool, runs: int, k: int) -> dict[tuple[int, ...], int]:
    """(kind of partition, found, lowest line cell, highest line cell) counted over runs: kind 0
    is an empty partition, kind 1 holds 7 values in (4, 8], kind 2 holds 6 in (2, 4] and 7 in
    [−4, −2): near the threshold k = 7, so noise decides."""
    bins, n = 8, 1500
    kinds = np.arange(n) % 3
    values = np.concatenate([np.full(7, 6), np.full(6, 3), np.full(7, -3)])
    per = [np.zeros(0, np.int64), np.arange(7), np.arange(7, 20)]
    codes = np.concatenate([np.full(per[kinds[j]].size, j) for j in range(n)]).astype(np.int64)
    vals = np.concatenate([values[per[kinds[j]]] for j in range(n)]).astype(np.int64)
    rng = _rng(11 if sparse else 12)
    table: dict[tuple[int, ...], int] = {}
    for _ in range(runs):
        if sparse:
            found = approx_bounds_per_partition(vals, codes, n, 1.0, threshold=k, integer=True, num_bins=bins, rng=rng)
            low, high = _edges_to_line(found, bins)
            outcome = _categories(found.found, low, high, kinds)
        else:
            outcome = _categories(*_dense_per_partition(vals, codes, n, k, bins, rng), kinds)
        for key in outcome:
            table[key] = table.get(key, 0) + 1
    return table


def _homogeneity_pvalue(a: dict, b: dict) -> float:
    """Chi-square test that two tables of counts come from one law (categories with fewer than
    10 observations in all are pooled)."""
    keys = sorted(set(a) | set(b))
    big = [key for key in keys if a.get(key, 0) + b.get(key, 0) >= 10]
    rest = [key for key in keys if key not in big]
    rows = [[a.get(key, 0) for key in big] + [sum(a.get(key, 0) for key in rest)],
            [b.get(key, 0) for key in big] + [sum(b.get(key, 0) for key in rest)]]
    rows = np.array(rows)
    rows = rows[:, rows.sum(axis=0) > 0]
    return float(stats.chi2_contingency(rows).pvalue)


@pytest.mark.slow
@pytest.mark.parametrize("k", [7, 3])  # t ≈ 6.7e-4 (skipping), t ≈ 0.036 (chunked draws)
def test_sparse_releases_what_dense_releases(k: int) -> None:
    sparse, dense = _release_frequencies(True, 150, k), _release_frequencies(False, 150, k)
    assert sum(sparse.values()) == sum(dense.values())
    # empty partitions do find bounds now and then (noise alone), at the same rate
    assert sum(v for key, v in sparse.items() if key[0] == 0 and key[1]) > 5
    assert _homogeneity_pvalue(sparse, dense) > 1e-4


@pytest.mark.slow
def test_the_comparison_catches_a_broken_sparse_sampler(monkeypatch: pytest.MonkeyPatch) -> None:
    dense = _release_frequencies(False, 150, 7)
    monkeypatch.setattr(PassRate, "interval", _broken_rate)
    assert _homogeneity_pvalue(_release_frequencies(True, 150, 7), dense) < 1e-6


def test_per_partition_draws_one_noise_per_non_empty_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    """10^4 partitions of float values (4094 cells each): the noise kernel is asked for about
    as many draws as there are non-empty cells, not for the 4·10^7 cells."""
    drawn = []
    add = DiscreteLaplaceNoise.add

    def counting_add(self, values, **kwargs):
        drawn.append(np.asarray(values).size)
        return add(self, values, **kwargs)

    monkeypatch.setattr(DiscreteLaplaceNoise, "add", counting_add)
    data = np.random.default_rng(5)
    codes = np.repeat(np.arange(10_000), 10)
    found = approx_bounds_per_partition(data.lognormal(3, 1, codes.size), codes, 10_000, 1.0, rng=_rng(13))
    assert found.lower.shape == (10_000,) and not found.found.any()  # 10 values never pass K = 29
    assert sum(drawn) <= codes.size + 100
