"""APPROX_BOUNDS (dpselect.aggregation.bounds; docs/privacy/approx-bounds.md): the thresholds
(Google's continuous formula and the exact discrete one), the bins and their edges, the scans
and the retry rule, recovery of power-of-two ranges on large data, clean failure on small data,
the per-partition mode, the false-positive rate, and bad inputs."""
from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy import stats

from dpselect.aggregation.bounds import (
    DEFAULT_SUCCESS_PROBABILITY,
    BinScheme,
    NotEnoughDataError,
    approx_bounds,
    approx_bounds_from_histogram,
    approx_bounds_per_partition,
    bin_cells,
    check_parameters,
    discrete_threshold,
    find_bounds,
    google_threshold,
    success_probabilities,
)
from dpselect.aggregation.grid import Grid
from dpselect.testing import InsecureDeterministicRNG

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

INT64_MAX = 2**63 - 1


def _rng(seed: int) -> InsecureDeterministicRNG:
    return InsecureDeterministicRNG(seed=seed, stream=5)


# ------------------------------------------------------------------ thresholds

@pytest.mark.parametrize("epsilon,p,expected", [
    (1, 1 - 1e-9, 24.88215), (0.1, 1 - 1e-9, 248.8215), (0.5, 1 - 1e-9, 49.76430), (1, 0.95, 7.129279),
    (0.1, 0.95, 71.29279),
])
def test_google_threshold_vectors(epsilon, p, expected) -> None:
    assert google_threshold(epsilon, p, 64) == pytest.approx(expected, rel=2e-7)


def _empty_success(scale: Fraction, k: int, bins: int) -> mpmath.mpf:
    """P[all 2B noisy counts of an empty dataset stay below k], discrete Laplace of scale b."""
    mpmath.mp.dps = 60
    q = mpmath.exp(-mpmath.mpf(scale.denominator) / scale.numerator)
    return (1 - q**k / (1 + q)) ** (2 * bins)


@pytest.mark.parametrize("scale", [Fraction(1), Fraction(10), Fraction(2), Fraction(7, 3), Fraction(1, 2)])
@pytest.mark.parametrize("p", [DEFAULT_SUCCESS_PROBABILITY, Fraction(95, 100), 1 - Fraction(1, 10**7)])
@pytest.mark.parametrize("bins", [64, 8, 2047])
def test_discrete_threshold_is_the_smallest_exact_one(scale, p, bins) -> None:
    k = discrete_threshold(scale, p, bins)
    target = mpmath.mpf(p.numerator) / p.denominator
    assert _empty_success(scale, k, bins) >= target
    assert k == 0 or _empty_success(scale, k - 1, bins) < target
    # the discrete tail q^K/(1+q) is heavier than the continuous e^(-K/b)/2: K is never below
    # the integer Google's continuous threshold rounds up to
    assert k >= math.ceil(google_threshold(float(1 / scale), float(p), bins))


def test_the_documented_threshold_at_epsilon_one() -> None:
    assert discrete_threshold(Fraction(1), DEFAULT_SUCCESS_PROBABILITY, 64) == 26
    assert math.ceil(google_threshold(1, 1 - 1e-9, 64)) == 25


@pytest.mark.parametrize("scale", [Fraction(1), Fraction(7, 3), Fraction(10), Fraction(1, 3), Fraction(50)])
@pytest.mark.parametrize("p", [DEFAULT_SUCCESS_PROBABILITY, Fraction(95, 100), 1 - Fraction(1, 10**7)])
@pytest.mark.parametrize("bins", [4, 64])
def test_discrete_threshold_matches_a_brute_force_search(scale, p, bins) -> None:
    """The bracketing search returns what walking up from 0 returns: the smallest K whose
    condition holds (checked in 60-digit arithmetic)."""
    target = mpmath.mpf(p.numerator) / p.denominator
    k = 0
    while _empty_success(scale, k, bins) < target:
        k += 1
    assert discrete_threshold(scale, p, bins) == k


def test_thresholds_at_huge_noise_scales_take_few_certified_evaluations(monkeypatch) -> None:
    """κ = L∞ = 2^20 at ε = 10⁻³ (scale about 1.1·10^15): each threshold is found with a
    handful of certified evaluations. The old search walked one integer at a time from a guess
    about b·10⁻⁸ too high (from float(p)), thousands of evaluations at scale 10^12 and minutes
    in all here."""
    from dpselect.aggregation import _bounds_thresholds

    calls = []
    real = _bounds_thresholds.certified
    monkeypatch.setattr(_bounds_thresholds, "certified", lambda *a: calls.append(a[1]) or real(*a))
    discrete_threshold.cache_clear()
    with pytest.raises(NotEnoughDataError):  # K ≈ 3·10^16: no bin of 10^4 values passes
        approx_bounds(np.arange(10_000), Fraction(1, 1000), max_partitions_contributed=2**20,
                      max_contributions_per_partition=2**20, rng=_rng(20))
    assert 3 <= len(calls) <= 3 * 12  # three thresholds (the retry order), a few evaluations each
    scale = Fraction(2**40 * 1000)
    calls.clear()
    thresholds = [discrete_threshold(scale, p, bins) for bins in (64, 2047)
                  for p in success_probabilities(DEFAULT_SUCCESS_PROBABILITY)]
    assert len(calls) <= 6 * 12
    # each is the smallest certified K: K − 1 fails the certificate, K passes
    bits = _bounds_thresholds._certificate_bits
    for (bins, p), k in zip([(b, p) for b in (64, 2047) for p in success_probabilities(DEFAULT_SUCCESS_PROBABILITY)],
                            thresholds):
        assert real(scale, k, p, bins, bits(scale, p, bins)) and not real(scale, k - 1, p, bins, bits(scale, p, bins))
        assert k == pytest.approx(float(scale) * -math.log((1 + math.exp(-1 / float(scale)))
                                                           * -math.expm1(math.log1p(-float(1 - p)) / (2 * bins))),
                                  rel=1e-12)


def test_scales_that_cannot_be_handled_are_refused_before_any_draw() -> None:
    rng = _rng(21)
    with pytest.raises(ValueError, match="max_partitions_contributed × max_contributions_per_partition / epsilon"):
        approx_bounds(np.arange(100), 1e-12, max_partitions_contributed=2**20, max_contributions_per_partition=2**20,
                      rng=rng)
    with pytest.raises(ValueError, match="success_probability"):
        approx_bounds(np.arange(100), 1e-3, max_partitions_contributed=2**20, max_contributions_per_partition=2**20,
                      success_probability=1 - Fraction(1, 10**1000), rng=rng)
    with pytest.raises(ValueError, match="max_partitions_contributed"):
        approx_bounds_per_partition(np.arange(100), np.zeros(100, np.int64), 1, 1e-12,
                                    max_partitions_contributed=2**20, max_contributions_per_partition=2**20, rng=rng)
    with pytest.raises(ValueError, match="threshold"):
        approx_bounds(np.arange(100), 1.0, threshold=2**62, rng=rng)
    assert rng._uses == 0  # refused from the parameters alone: nothing was drawn
    with pytest.raises(ValueError, match="max_contributions_per_partition / epsilon"):  # what callers check first
        check_parameters(1e-12, integer=True, max_partitions_contributed=2**20, max_contributions_per_partition=2**20)
    check_parameters(1e-3, integer=False, max_partitions_contributed=2**20, max_contributions_per_partition=2**20)
    with pytest.raises(ValueError, match="2\\*\\*54"):
        discrete_threshold(Fraction(2**60), DEFAULT_SUCCESS_PROBABILITY, 64)


def test_retry_rule_relaxes_p_tenfold_within_limits() -> None:
    assert success_probabilities(DEFAULT_SUCCESS_PROBABILITY) == [1 - Fraction(1, 10**9), 1 - Fraction(1, 10**8),
                                                                 1 - Fraction(1, 10**7)]
    assert success_probabilities(Fraction(95, 100)) == [Fraction(95, 100)]
    assert len(success_probabilities(1 - Fraction(1, 10**40))) == 30  # at most 30 attempts
    assert success_probabilities(1 - Fraction(1, 10**40))[-1] == 1 - Fraction(1, 10**11)


# ------------------------------------------------------------------ bins

def test_integer_bins_and_edges() -> None:
    scheme = BinScheme.default(integer=True)
    magnitudes = np.array([0, 1, 2, 3, 4, 5, 1024, 1025, 2**62, 2**62 + 1, 2**63, 2**64 - 1], dtype=np.uint64)
    assert scheme.index(magnitudes).tolist() == [0, 0, 1, 2, 2, 3, 10, 11, 62, 63, 63, 63]
    assert [scheme.upper_edge(i) for i in (0, 1, 10, 62, 63)] == [1, 2, 1024, 2**62, 2**63]
    assert [scheme.lower_edge(i) for i in (0, 1, 11)] == [0, 1, 1024]


def test_float_bins_and_edges() -> None:
    scheme = BinScheme.default(integer=False)
    tiny = np.nextafter(0, 1)
    x = np.array([0.0, tiny, 2.0**-1022, 2.0**-1022 * 1.5, 0.75, 1.0, 1.0000001, 1e308, np.finfo(float).max])
    assert scheme.index(x).tolist() == [0, 0, 0, 1, 1022, 1022, 1023, 2046, 2046]
    assert scheme.upper_edge(1022) == 1.0 and scheme.lower_edge(1023) == 1.0
    assert scheme.upper_edge(2046) == np.finfo(float).max


def test_scans_follow_googles_rules() -> None:
    scheme = BinScheme(True, 0, 8)
    zeros = np.zeros(8, dtype=np.int64)
    pos = zeros.copy()
    pos[[2, 5]] = 30
    assert find_bounds(pos, zeros, [26], scheme) == (2, 32, 1)  # (2, 4] … (16, 32]
    neg = zeros.copy()
    neg[[1, 3]] = 30
    assert find_bounds(zeros, neg, [26], scheme) == (-8, -1, 1)  # [-8, -4) … [-2, -1)
    assert find_bounds(pos, neg, [26], scheme) == (-8, 32, 1)
    only_zero = zeros.copy()
    only_zero[0] = 30
    assert find_bounds(only_zero, zeros, [26], scheme) == (0, 1, 1)
    assert find_bounds(zeros, zeros, [26], scheme) is None


def test_retry_finds_bounds_on_the_same_histogram() -> None:
    scheme = BinScheme(True, 0, 64)
    thresholds = [discrete_threshold(Fraction(1), p, 64) for p in success_probabilities(DEFAULT_SUCCESS_PROBABILITY)]
    assert thresholds == sorted(thresholds, reverse=True) and len(thresholds) == 3
    pos = np.zeros(64, dtype=np.int64)
    pos[5] = thresholds[2]  # passes only the third, most relaxed threshold
    assert find_bounds(pos, np.zeros(64, dtype=np.int64), thresholds, scheme) == (16, 32, 3)
    pos[5] = thresholds[2] - 1
    assert find_bounds(pos, np.zeros(64, dtype=np.int64), thresholds, scheme) is None
    assert find_bounds(pos, np.zeros(64, dtype=np.int64), [thresholds[2]], scheme) is None


# ------------------------------------------------------------------ on data

def test_recovers_the_power_of_two_range_of_large_data() -> None:
    data = np.random.default_rng(1)
    floats = data.uniform(3, 900, 100_000)
    found = approx_bounds(floats, 1.0, rng=_rng(1))
    assert (found.lower, found.upper) == (2.0, 1024.0)
    assert found.attempts == 1 and found.success_probability == DEFAULT_SUCCESS_PROBABILITY
    ints = data.integers(3, 901, 100_000)
    assert (approx_bounds(ints, 1.0, rng=_rng(2)).lower, approx_bounds(ints, 1.0, rng=_rng(2)).upper) == (2, 1024)
    both = approx_bounds(np.concatenate([-ints, ints // 200]), 1.0, rng=_rng(3))
    assert (both.lower, both.upper) == (-1024, 4)
    negative = approx_bounds(-floats, 1.0, rng=_rng(4))
    assert (negative.lower, negative.upper) == (-1024.0, -2.0)
    small = approx_bounds(data.uniform(0.001, 0.3, 100_000), 1.0, rng=_rng(5))
    assert (small.lower, small.upper) == (2.0**-10, 0.5)
    assert isinstance(found.lower, float) and isinstance(both.lower, int)


def test_extreme_integers() -> None:
    values = np.array([np.iinfo(np.int64).min] * 200 + [INT64_MAX] * 200, dtype=np.int64)
    found = approx_bounds(values, 1.0, rng=_rng(6))
    assert (found.lower, found.upper) == (-(2**63), 2**63)  # the top bin holds every int64
    zeros = approx_bounds(np.zeros(500, dtype=np.int64), 1.0, rng=_rng(7))
    assert (zeros.lower, zeros.upper) == (0, 1)


@pytest.mark.parametrize("seed", range(3))
def test_bounds_near_the_int64_ends_always_make_a_grid(seed: int) -> None:
    """Values above 2^62 (or below −2^62) fall in the top integer bin; its edge is 2^63 (a
    double exactly), not INT64_MAX, which the grid refused ("use a rounder bound") after the
    budget was charged."""
    top = INT64_MAX - np.arange(300, dtype=np.int64) * 7919
    bottom = -top - 1
    for values in (top, bottom, np.concatenate([top, bottom]), np.concatenate([top, np.arange(300)])):
        found = approx_bounds(values, 1.0, rng=_rng(30 + seed))
        grid = Grid.for_bounds(found.lower, found.upper, integer=True)
        assert grid.upper >= values.max() or values.max() < 2**62  # the top bin is kept whole
        assert grid.lower <= values.min() or values.min() > -(2**62)
        per = approx_bounds_per_partition(values, np.arange(values.size) % 2, 2, 1.0, rng=_rng(40 + seed))
        assert per.found.all()
        for lo, hi in zip(per.lower, per.upper):
            Grid.for_bounds(lo, hi, integer=True)
    assert approx_bounds(top, 1.0, rng=_rng(50 + seed)).upper == 2**63
    assert approx_bounds(bottom, 1.0, rng=_rng(60 + seed)).lower == -(2**63)


def test_a_histogram_counted_elsewhere_gives_the_same_release() -> None:
    # dpselect.spark counts the cells in Spark: the same counts and generator must give the same
    # noisy histogram and bounds as counting the values here.
    data = np.random.default_rng(9)
    for values, integer in ((data.integers(-40, 900, 5000), True), (data.normal(0, 50, 5000), False)):
        scheme = BinScheme.default(integer)
        counts = np.bincount(bin_cells(values, scheme), minlength=2 * scheme.num_bins)
        assert counts.sum() == values.size and counts[scheme.num_bins:].sum() == (values < 0).sum()
        direct = approx_bounds(values, 1.0, max_contributions_per_partition=2, rng=_rng(10))
        counted = approx_bounds_from_histogram(counts, 1.0, integer=integer, max_contributions_per_partition=2,
                                               rng=_rng(10))
        assert (counted.lower, counted.upper, counted.threshold) == (direct.lower, direct.upper, direct.threshold)
        assert np.array_equal(counted.noisy_positive, direct.noisy_positive)
        assert str(counted.guarantee) == str(direct.guarantee)
    with pytest.raises(ValueError, match="counts must be 128 non-negative integers"):
        approx_bounds_from_histogram(np.ones(64, np.int64), 1.0, integer=True)
    with pytest.raises(ValueError, match="counts must be 128 non-negative integers"):
        approx_bounds_from_histogram(-np.ones(128, np.int64), 1.0, integer=True)


def test_fails_cleanly_on_tiny_or_empty_data() -> None:
    for values in (np.array([5.0, 7.0, 300.0]), np.array([], dtype=np.int64), np.full(10, 100)):
        with pytest.raises(NotEnoughDataError, match="not enough data"):
            approx_bounds(values, 1.0, rng=_rng(8))
    assert issubclass(NotEnoughDataError, ValueError)


def test_contribution_bounds_scale_the_noise_and_the_threshold() -> None:
    values = np.random.default_rng(2).uniform(3, 900, 50_000)
    found = approx_bounds(values, 2.0, max_partitions_contributed=3, max_contributions_per_partition=4, rng=_rng(9))
    assert found.noise.scale == Fraction(12, 2)
    assert found.guarantee.epsilon_exact == 2 and found.guarantee.delta_exact == 0
    assert found.threshold == discrete_threshold(Fraction(6), DEFAULT_SUCCESS_PROBABILITY, 2047)
    assert not found.guarantee.is_dp  # the test generator made it
    assert approx_bounds(values, 2.0).guarantee.is_dp


def test_a_user_set_threshold_is_used_as_is() -> None:
    found = approx_bounds(np.full(40, 100), 1.0, threshold=10, rng=_rng(10))
    assert (found.lower, found.upper, found.threshold, found.attempts) == (64, 128, 10, 1)
    assert found.success_probability is None


@pytest.mark.slow
def test_false_positive_rate_of_an_empty_dataset_is_at_most_one_minus_p() -> None:
    """With p = 0.9 and 4 bins per sign, noise alone finds bounds in at most 10% of runs (the
    threshold is the smallest that guarantees it, so close to 10%)."""
    runs, hits = 3000, 0
    for _ in range(runs):
        try:
            approx_bounds(np.array([], dtype=np.int64), 1.0, success_probability=0.9, num_bins=4)
            hits += 1
        except NotEnoughDataError:
            pass
    upper = stats.beta.ppf(1 - 1e-6, hits + 1, runs - hits)
    lower = stats.beta.ppf(1e-6, hits, runs - hits + 1) if hits else 0.0
    exact = 1 - float(_empty_success(Fraction(1), discrete_threshold(Fraction(1), Fraction(9, 10), 4), 4))
    assert exact <= 0.1
    assert lower <= exact <= upper


# ------------------------------------------------------------------ per partition

def test_per_partition_bounds() -> None:
    data = np.random.default_rng(3)
    codes = data.integers(0, 4, 400_000)
    values = data.uniform(3, 900, 400_000) * np.array([1, 10, -1, 0.01])[codes]
    found = approx_bounds_per_partition(values, codes, 5, 1.0, rng=_rng(11))
    assert found.found.tolist() == [True, True, True, True, False]
    assert found.lower[:4].tolist() == [2.0, 32.0, -1024.0, 2.0**-5]  # (16, 32] holds too few of 30 … 9000
    assert found.upper[:4].tolist() == [1024.0, 16384.0, -2.0, 16.0]
    assert math.isnan(found.lower[4]) and math.isnan(found.upper[4]) and found.attempts[4] == 3
    ints = approx_bounds_per_partition(np.array([7] * 50 + [100] * 50), np.array([0] * 50 + [2] * 50), 3, 1.0,
                                       rng=_rng(12))
    assert ints.lower[[0, 2]].tolist() == [4, 64] and ints.upper[[0, 2]].tolist() == [8, 128]
    assert ints.found.tolist() == [True, False, True] and np.isnan(ints.lower[1])


def test_per_partition_checks_codes() -> None:
    with pytest.raises(ValueError, match="codes"):
        approx_bounds_per_partition([1.0, 2.0], [0, 3], 3, 1.0)
    with pytest.raises(ValueError, match="codes"):
        approx_bounds_per_partition([1.0, 2.0], [0], 3, 1.0)
    with pytest.raises(TypeError, match="codes"):
        approx_bounds_per_partition([1.0, 2.0], [0.0, 1.0], 3, 1.0)
    with pytest.raises(ValueError, match="n_partitions"):
        approx_bounds_per_partition([1.0], [0], -1, 1.0)


# ------------------------------------------------------------------ bad inputs

@pytest.mark.parametrize("values,error", [
    (np.array([1.0, np.nan]), ValueError), (np.array([1.0, np.inf]), ValueError), (np.array([-np.inf]), ValueError),
    (np.array(["a", "b"]), TypeError), (np.array([True]), TypeError), (np.array([1, None], dtype=object), TypeError),
    (np.ma.masked_array([1.0], mask=[1]), TypeError),
])
def test_bad_values_are_refused(values, error) -> None:
    with pytest.raises(error, match="values"):
        approx_bounds(values, 1.0)


@pytest.mark.parametrize("kwargs,error,name", [
    ({"epsilon": 0}, ValueError, "epsilon"), ({"epsilon": -1}, ValueError, "epsilon"),
    ({"epsilon": float("nan")}, ValueError, "epsilon"), ({"epsilon": "1"}, TypeError, "epsilon"),
    ({"success_probability": 1}, ValueError, "success_probability"),
    ({"success_probability": 0}, ValueError, "success_probability"),
    ({"success_probability": 1.5}, ValueError, "success_probability"),
    ({"num_bins": 0}, ValueError, "num_bins"), ({"max_partitions_contributed": 0}, ValueError, "max_partitions"),
    ({"max_contributions_per_partition": 1.5}, ValueError, "max_contributions"),
    ({"threshold": -1}, ValueError, "threshold"), ({"scale_exponent": 1.5}, TypeError, "scale_exponent"),
    ({"integer": True}, TypeError, "integer"),
])
def test_bad_parameters_are_refused(kwargs, error, name) -> None:
    args = {"epsilon": 1.0, **kwargs}
    epsilon = args.pop("epsilon")
    with pytest.raises(error, match=name):
        approx_bounds(np.array([1.0, 2.0]), epsilon, **args)
