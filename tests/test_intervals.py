"""Confidence intervals (dpselect.aggregation.intervals; docs/privacy/confidence-intervals.md):
known half-widths, exactness and minimality against the exact laws, coverage ≥ level on
simulated releases (Clopper–Pearson), the mean's union-bound interval, and bad inputs."""
from __future__ import annotations

import functools
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dpselect.aggregation.intervals import (
    alpha_for,
    discrete_gaussian_half_width,
    discrete_gaussian_tail_upper,
    discrete_laplace_half_width,
    gaussian_half_width,
    interval,
    laplace_half_width,
    mean_confidence_interval,
    mean_interval,
    split_level,
    tsgd_half_width,
)
from dpselect.aggregation.noise import DiscreteGaussianNoise, DiscreteLaplaceNoise
from dpselect.core.params import validate_params
from dpselect.core.tables import tsgd_table
from dpselect.testing import InsecureDeterministicRNG

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

DRAWS = 20_000
CONFIDENCE = 1e-6  # a correct interval fails a coverage test with probability below this


def _rng(seed: int) -> InsecureDeterministicRNG:
    return InsecureDeterministicRNG(seed=seed, stream=3)


def coverage_upper(covered: int, n: int) -> float:
    """Clopper–Pearson upper confidence bound on the coverage, at confidence 1 − 1e-6."""
    return 1.0 if covered == n else float(stats.beta.ppf(1 - CONFIDENCE, covered + 1, n - covered))


def coverage_lower(covered: int, n: int) -> float:
    return 0.0 if covered == 0 else float(stats.beta.ppf(CONFIDENCE, covered, n - covered + 1))


# ------------------------------------------------------------------ known values

@pytest.mark.parametrize("level,laplace,gauss", [(0.95, 2.995732, 1.959964), (0.99, 4.605170, 2.575829)])
def test_continuous_half_widths(level, laplace, gauss) -> None:
    assert laplace_half_width(1, level) == pytest.approx(laplace, abs=1e-6)
    assert gaussian_half_width(1, level) == pytest.approx(gauss, abs=1e-6)
    assert np.allclose(laplace_half_width([1, 2], level), [laplace, 2 * laplace], atol=1e-5)


@pytest.mark.parametrize("scale,level,half", [(1, 0.95, 3), (1, 0.99, 4), (10, 0.95, 30), (10, 0.99, 46)])
def test_discrete_laplace_half_widths(scale, level, half) -> None:
    assert discrete_laplace_half_width(scale, level) == half
    assert DiscreteLaplaceNoise.for_epsilon(Fraction(1, scale)).confidence_interval(level) == half


@pytest.mark.parametrize("epsilon,k,h95,h99", [(1, 11, 3, 4), (0.1, 86, 30, 46)])
def test_tsgd_half_widths_from_the_certified_table(epsilon, k, h95, h99) -> None:
    table = tsgd_table(validate_params(epsilon, 1e-5))
    assert table.k == k
    assert (tsgd_half_width(table, 0.95), tsgd_half_width(table, 0.99)) == (h95, h99)
    assert tsgd_half_width(table, 1 - Fraction(1, 10**30)) == table.k  # the noise never exceeds k


# ------------------------------------------------------------------ exactness and minimality

def _dlap_tail(scale: Fraction, h: int) -> mpmath.mpf:
    mpmath.mp.dps = 50
    q = mpmath.exp(-mpmath.mpf(scale.denominator) / scale.numerator)
    return 2 * q ** (h + 1) / (1 + q)


@pytest.mark.slow
@given(st.fractions(min_value=Fraction(1, 20), max_value=Fraction(10**5), max_denominator=1000),
       st.sampled_from([0.5, 0.8, 0.9, 0.95, 0.99, 0.999, 1 - 1e-9]))
@settings(max_examples=120, deadline=None)
def test_discrete_laplace_half_width_is_the_smallest_exact_one(scale: Fraction, level: float) -> None:
    h = discrete_laplace_half_width(scale, level)
    alpha = alpha_for(level)
    a = mpmath.mpf(alpha.numerator) / alpha.denominator
    assert _dlap_tail(scale, h) <= a
    if h > 0:
        assert _dlap_tail(scale, h - 1) > a


@functools.lru_cache(maxsize=None)
def _dgauss_weights(sigma2: Fraction) -> tuple[int, tuple[mpmath.mpf, ...]]:
    """exp(−x²/(2σ²)) for x = 0 … 2·reach + 1 at 60 digits, computed once per σ² (every level and
    every half-width of one σ² reads the same terms)."""
    mpmath.mp.dps = 60
    s2 = mpmath.mpf(sigma2.numerator) / sigma2.denominator
    reach = int(40 * math.sqrt(float(sigma2))) + 40
    return reach, tuple(mpmath.exp(-mpmath.mpf(x * x) / (2 * s2)) for x in range(2 * reach + 2))


def _dgauss_tail(sigma2: Fraction, h: int) -> mpmath.mpf:
    """P[|X| > h] for the discrete Gaussian, summed over 40σ + 40 terms each side (the rest is
    below 1e-300 of it)."""
    reach, w = _dgauss_weights(sigma2)
    mpmath.mp.dps = 60
    z = w[0] + 2 * mpmath.fsum(w[1:reach + 1])
    outside = mpmath.fsum(w[h + 1:reach + h + 2])
    assert len(w[h + 1:reach + h + 2]) == reach + 1, "the half-width is beyond the precomputed terms"
    return 2 * outside / z


@pytest.mark.parametrize("sigma2", [Fraction(1, 10), Fraction(1, 2), Fraction(1), Fraction(7, 3), Fraction(30),
                                    Fraction(500), pytest.param(Fraction(40_000), marks=pytest.mark.slow)])
@pytest.mark.parametrize("level", [0.8, 0.95, 0.999])
def test_discrete_gaussian_half_width_covers_and_is_tight(sigma2: Fraction, level: float) -> None:
    h = discrete_gaussian_half_width(sigma2, level)
    alpha = alpha_for(level)
    a = mpmath.mpf(alpha.numerator) / alpha.denominator
    assert _dgauss_tail(sigma2, h) <= a
    bound = discrete_gaussian_tail_upper(sigma2, h)
    assert mpmath.mpf(bound.numerator) / bound.denominator >= _dgauss_tail(sigma2, h) * (1 - mpmath.mpf(10) ** -50)
    if h > 0:
        assert _dgauss_tail(sigma2, h - 1) > a  # and tight enough to give the exact answer here


@pytest.mark.parametrize("epsilon,delta", [(1, 1e-5), (0.5, 1e-8), (2, 1e-3)])
@pytest.mark.parametrize("level", [0.5, 0.9, 0.99])
def test_tsgd_half_width_is_exact_on_the_weights(epsilon, delta, level) -> None:
    table = tsgd_table(validate_params(epsilon, delta))
    pmf = table.pmf()
    h = tsgd_half_width(table, level)
    alpha = alpha_for(level)

    def outside(t: int) -> Fraction:
        return sum((p for x, p in zip(range(-table.k, table.k + 1), pmf) if abs(x) > t), Fraction(0))

    assert outside(h) <= alpha
    if h > 0:
        assert outside(h - 1) > alpha


# ------------------------------------------------------------------ coverage on simulated releases

def _coverage(noisy: np.ndarray, truth: np.ndarray, half: float) -> int:
    lo, hi = interval(noisy, half)
    return int(np.sum((lo <= truth) & (truth <= hi)))


def test_discrete_noise_intervals_cover_at_their_level() -> None:
    truth = np.arange(DRAWS, dtype=np.int64) * 3 - 1000
    cases = [(DiscreteLaplaceNoise(Fraction(3)), 0.9), (DiscreteLaplaceNoise(Fraction(250, 7)), 0.95),
             (DiscreteGaussianNoise(Fraction(10)), 0.9), (DiscreteGaussianNoise(Fraction(1, 3)), 0.99)]
    for seed, (noise, level) in enumerate(cases):
        noisy = noise.add(truth, rng=_rng(seed))
        covered = _coverage(noisy, truth, noise.confidence_interval(level))
        assert coverage_upper(covered, DRAWS) >= level, (noise, covered)


def test_a_too_narrow_interval_is_caught() -> None:
    """The coverage test has power: one unit narrower falls clearly below the level."""
    noise = DiscreteLaplaceNoise(Fraction(1))
    truth = np.zeros(DRAWS, dtype=np.int64)
    noisy = noise.add(truth, rng=_rng(20))
    half = noise.confidence_interval(0.95)
    assert float(1 - _dlap_tail(Fraction(1), half - 1)) < 0.93  # its exact coverage
    assert coverage_upper(_coverage(noisy, truth, half - 1), DRAWS) < 0.95


def test_tsgd_interval_covers_at_its_level() -> None:
    table = tsgd_table(validate_params(1, 1e-5))
    draws = _rng(21).sample_cumulative(table.cumulative, DRAWS) - table.k  # the release's noise
    h = tsgd_half_width(table, 0.8)
    covered = int(np.sum(np.abs(draws) <= h))
    assert coverage_upper(covered, DRAWS) >= 0.8
    assert coverage_lower(covered, DRAWS) <= float(1 - sum(p for x, p in zip(range(-11, 12), table.pmf()) if abs(x) > h))


def test_continuous_intervals_cover_at_their_level() -> None:
    numpy_rng = np.random.default_rng(22)  # test data: continuous noise is not a dpselect sampler
    for level in (0.9, 0.99):
        lap = numpy_rng.laplace(0, 2.5, DRAWS)
        gauss = numpy_rng.normal(0, 4.0, DRAWS)
        assert coverage_upper(int(np.sum(np.abs(lap) <= laplace_half_width(2.5, level))), DRAWS) >= level
        assert coverage_upper(int(np.sum(np.abs(gauss) <= gaussian_half_width(4.0, level))), DRAWS) >= level
        narrow = int(np.sum(np.abs(gauss) <= 0.9 * gaussian_half_width(4.0, level)))
        assert coverage_upper(narrow, DRAWS) < level


def test_mean_interval_covers_at_its_level() -> None:
    """Partitions with known sums (in grid units) and counts; the mean's interval, built from
    the two noisy values at level 1 − α/2 each, covers the true mean ≥ level of the time."""
    numpy_rng = np.random.default_rng(23)
    counts = numpy_rng.integers(1, 40, DRAWS).astype(np.int64)
    sums = (counts * numpy_rng.uniform(-5, 20, DRAWS) * 16).astype(np.int64)  # grid step 1/16
    sum_noise = DiscreteLaplaceNoise.for_epsilon(0.5, sensitivity=20 * 16)
    count_noise = DiscreteGaussianNoise.for_rho(Fraction(1, 2))
    level = 0.9
    noisy_sum = sum_noise.add(sums, rng=_rng(24)) / 16
    noisy_count = count_noise.add(counts, rng=_rng(25))
    lo, hi = mean_confidence_interval(noisy_sum, noisy_count, sum_noise, count_noise, level, sum_step=1 / 16,
                                      lower=-5, upper=20)
    truth = sums / 16 / counts
    covered = int(np.sum((lo <= truth) & (truth <= hi)))
    assert coverage_upper(covered, DRAWS) >= level
    assert np.all(lo >= -5) and np.all(hi <= 20) and np.all(lo <= hi)


def test_mean_interval_corners_and_clamping() -> None:
    lo, hi = mean_interval([10.0, -10.0], [4, 4], 2.0, 1.0)
    assert lo[0] <= 8 / 5 and hi[0] >= 12 / 3 and lo[0] == pytest.approx(8 / 5) and hi[0] == pytest.approx(4)
    assert lo[1] == pytest.approx(-4) and hi[1] == pytest.approx(-8 / 5)
    lo, hi = mean_interval([1.0], [0.2], 0.0, 0.5)  # count interval below 1: the true count is ≥ 1
    assert hi[0] == pytest.approx(1.0)
    lo, hi = mean_interval([100.0], [1], 50.0, 0.0, lower=0, upper=60)
    assert lo[0] == pytest.approx(50.0) and lo[0] <= 50.0 and hi[0] == 60.0
    with pytest.raises(ValueError, match="lower"):
        mean_interval([1.0], [1], 0.0, 0.0, lower=2, upper=1)
    with pytest.raises(ValueError, match="half-widths"):
        mean_interval([1.0], [1], -1.0, 0.0)


def test_interval_arithmetic() -> None:
    lo, hi = interval(np.array([5, -3], dtype=np.int64), 2)
    assert lo.tolist() == [3, -5] and hi.tolist() == [7, -1] and lo.dtype == np.int64
    flo, fhi = interval(np.array([0.1]), 0.2)
    assert flo[0] < -0.1 < 0.3 < fhi[0] and flo[0] == pytest.approx(-0.1)
    with pytest.raises(OverflowError):
        interval(np.array([2**63 - 2], dtype=np.int64), 5)
    with pytest.raises(ValueError, match="half_width"):
        interval(np.array([1]), -1)
    with pytest.raises(TypeError):
        interval(np.array(["a"]), 1.0)


def test_split_level_is_the_union_bound() -> None:
    assert split_level(0.9, 2) == Fraction(95, 100)
    assert split_level(Fraction(99, 100), 4) == 1 - Fraction(1, 400)
    with pytest.raises(ValueError, match="parts"):
        split_level(0.9, 0)


@pytest.mark.parametrize("level,error", [(0, ValueError), (1, ValueError), (1.5, ValueError), (-0.1, ValueError),
                                         (float("nan"), ValueError), ("0.9", TypeError), (True, TypeError)])
def test_bad_levels_are_refused(level, error) -> None:
    with pytest.raises(error, match="level"):
        alpha_for(level)
    with pytest.raises(error, match="level"):
        discrete_laplace_half_width(1, level)


@pytest.mark.parametrize("value", [0, -1, float("inf"), float("nan")])
def test_bad_noise_parameters_are_refused(value) -> None:
    with pytest.raises(ValueError):
        discrete_laplace_half_width(value, 0.9)
    with pytest.raises(ValueError):
        discrete_gaussian_half_width(value, 0.9)
    with pytest.raises(ValueError):
        laplace_half_width(value, 0.9)
    with pytest.raises(ValueError):
        gaussian_half_width(value, 0.9)
    with pytest.raises(TypeError):
        tsgd_half_width(value, 0.9)


def test_half_widths_of_arrays_of_parameters() -> None:
    widths = discrete_laplace_half_width(np.array([1, 10, 1]), 0.95)
    assert widths.tolist() == [3, 30, 3] and widths.dtype == np.int64
    assert discrete_gaussian_half_width([Fraction(1), Fraction(100)], 0.95).tolist() == [
        discrete_gaussian_half_width(1, 0.95), discrete_gaussian_half_width(100, 0.95)]
