"""APPROX_BOUNDS' rules (dpselect.aggregation._bounds_rules; docs/privacy/approx-bounds.md,
steps 5–7): the tails rule keeps a long, thin tail inside the bounds where Google's rule clamps
it, is no worse on light-tailed data, extends through pure noise only at its documented rate,
contains Google's bounds and fails exactly when they fail."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dpselect.aggregation import _bounds_rules
from dpselect.aggregation._bounds_rules import EXTENSION_RATE, EXTENSION_WIDTHS, TAIL_FRACTION, extend
from dpselect.aggregation._bounds_thresholds import window_threshold
from dpselect.aggregation.bounds import BinScheme, approx_bounds, approx_bounds_from_histogram, find_bounds
from dpselect.aggregation.noise import DiscreteLaplaceNoise
from dpselect.testing import InsecureDeterministicRNG

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

DELAY = {"epsilon": 0.2, "max_partitions_contributed": 8, "max_contributions_per_partition": 8}  # b = 320


def _rng(seed: int) -> InsecureDeterministicRNG:
    return InsecureDeterministicRNG(seed=seed, stream=9)


def delay_like(n: int, seed: int, integer: bool) -> np.ndarray:
    """Departure-delay-like values: 80% uniform in −10…0, 20% an exponential tail of mean 60
    capped at 1300 (integer minutes, or floats)."""
    data = np.random.default_rng(seed)
    body_n = int(0.8 * n)
    body = data.integers(-10, 1, body_n) if integer else data.uniform(-10, 0, body_n)
    tail = np.minimum(data.exponential(60, n - body_n), 1300)
    return np.concatenate([body, np.ceil(tail).astype(np.int64) if integer else tail])


# ------------------------------------------------------------------ on long tails

@pytest.mark.slow
@pytest.mark.parametrize("integer", [True, False])
def test_the_tails_rule_covers_the_95th_percentile_of_a_long_tail(integer: bool) -> None:
    """10^5 delay-like values at κ = L∞ = 8, ε = 0.2: no tail bin reaches K ≈ 8000, so Google's
    rule returns (−16, −2) or so and clamps every positive delay (about 30% of the values); the
    tails rule returns (−16, 128) and clamps about 2%."""
    covered = {"tails": 0, "google": 0}
    for seed in range(20):
        values = delay_like(100_000, seed, integer)
        p95 = np.percentile(values, 95)
        for rule in covered:
            found = approx_bounds(values, rng=_rng(seed), rule=rule, **DELAY)
            covered[rule] += found.upper >= p95 and found.lower <= np.percentile(values, 5)
    assert covered["tails"] >= 19
    assert covered["google"] <= 1


def test_the_tails_rule_contains_googles_bounds_on_the_same_noisy_counts() -> None:
    values = delay_like(100_000, 1, True)
    tails = approx_bounds(values, rng=_rng(1), **DELAY)
    google = approx_bounds(values, rng=_rng(1), rule="google", **DELAY)
    assert np.array_equal(tails.noisy_positive, google.noisy_positive)
    assert tails.core == google.core == (google.lower, google.upper)
    assert (tails.rule, google.rule) == ("tails", "google")
    assert tails.lower <= google.lower and google.upper < tails.upper
    clamped = {f.rule: float(np.mean((values < f.lower) | (values > f.upper))) for f in (tails, google)}
    assert clamped["tails"] < 0.05 < 0.2 < clamped["google"]


LIGHT = [
    (lambda d: d.normal(0, 50, 5000), 1.0), (lambda d: d.normal(0, 50, 100_000), 1.0),
    (lambda d: d.uniform(3, 900, 100_000), 1.0), (lambda d: d.normal(100, 10, 10_000), 0.5),
    (lambda d: d.integers(0, 101, 50_000), 1.0),
]


@pytest.mark.parametrize("case", range(len(LIGHT)))
def test_the_tails_rule_is_no_worse_on_light_tails(case: int) -> None:
    """Symmetric or light-tailed data: the tails rule returns Google's bounds in most runs and
    never more than one bin further out on either side."""
    make, epsilon = LIGHT[case]
    same = 0
    for seed in range(10):
        values = make(np.random.default_rng(seed))
        found = approx_bounds(values, epsilon, rng=_rng(100 + seed))
        (google_lower, google_upper), (lower, upper) = found.core, (found.lower, found.upper)
        same += (lower, upper) == (google_lower, google_upper)
        for ours, theirs in ((lower, google_lower), (upper, google_upper)):
            assert abs(ours) <= max(2 * abs(theirs), 1)
    assert same >= 8


# ------------------------------------------------------------------ laws of the rule

@st.composite
def histograms(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    bins = draw(st.integers(2, 40))
    cells = st.integers(-60, 400)
    pos = np.array(draw(st.lists(cells, min_size=bins, max_size=bins)), dtype=np.int64)
    neg = np.array(draw(st.lists(cells, min_size=bins, max_size=bins)), dtype=np.int64)
    return pos, neg


def _reference_extend(line: np.ndarray, low: int, high: int, scale: Fraction) -> tuple[int, int]:
    """The extension written out cell by cell, window by window (the documented rule)."""
    n = line.size
    line = [int(v) for v in line]  # Python ints: no overflow

    def total(a: int, b: int) -> int:
        return sum(line[a:b])

    extra = math.ceil(TAIL_FRACTION * max(0, total(low, high + 1)))

    def threshold(w: int, d: int) -> int:
        k = d.bit_length() - 1
        log_rate = math.log(EXTENSION_RATE / len(EXTENSION_WIDTHS)) - (2 * k + 1) * math.log(2)
        return window_threshold(scale, w, log_rate) + extra

    while True:
        starts = [d for d in range(1, n - high) for w in EXTENSION_WIDTHS
                  if high + d + w <= n and total(high + d, high + d + w) >= threshold(w, d)]
        if not starts:
            break
        high += max(starts)
    while True:
        ends = [d for d in range(1, low + 1) for w in EXTENSION_WIDTHS
                if low - d - w + 1 >= 0 and total(low - d - w + 1, low - d + 1) >= threshold(w, d)]
        if not ends:
            break
        low -= max(ends)
    return low, high


@pytest.mark.slow
@given(histograms(), st.sampled_from([Fraction(1), Fraction(3), Fraction(20)]), st.integers(20, 300))
@settings(max_examples=150, deadline=None)
def test_the_tails_rule_is_an_outward_extension_of_googles(hist, scale, k) -> None:
    pos, neg = hist
    scheme = BinScheme(True, 0, pos.size)
    google = find_bounds(pos, neg, [k], scheme)
    tails = find_bounds(pos, neg, [k], scheme, rule="tails", scale=scale)
    assert (google is None) == (tails is None)  # the same existence test: "not enough data" alike
    if google is not None:
        assert tails[0] <= google[0] and google[1] <= tails[1] and tails[2] == google[2]
        line = np.concatenate([neg[::-1], pos])
        passing = np.flatnonzero(line >= k)
        assert extend(line, int(passing[0]), int(passing[-1]), scale) == _reference_extend(
            line, int(passing[0]), int(passing[-1]), scale)


def test_the_extension_is_exact_with_huge_noisy_counts() -> None:
    """Noisy counts near ±2^61 (scale near 2^54): partial sums leave int64, the rule does not."""
    data = np.random.default_rng(3)
    scale = Fraction(2**53)
    for _ in range(20):
        line = data.integers(-(2**61), 2**61, 64)
        line[30:34] = 2**61 + data.integers(0, 2**60, 4)
        assert extend(line, 30, 33, scale) == _reference_extend(line, 30, 33, scale)


@pytest.mark.slow
def test_pure_noise_extends_a_bound_at_most_at_the_documented_rate() -> None:
    """A histogram with data in two adjacent bins and nothing else: the tails rule moves a bound
    beyond them only through noise, at most EXTENSION_RATE per side per step."""
    noise = DiscreteLaplaceNoise(Fraction(5))
    scheme = BinScheme(False, -1022, 2047)
    counts = np.zeros(2 * scheme.num_bins, dtype=np.int64)
    counts[1030:1032] = 300  # little mass: α·N̂ adds 3, below one noise scale
    runs, extended = 2000, 0
    rng = _rng(7)
    for _ in range(runs):
        noisy = noise.add(counts, rng=rng)
        pos, neg = noisy[:scheme.num_bins], noisy[scheme.num_bins:]
        google = find_bounds(pos, neg, [160], scheme)
        tails = find_bounds(pos, neg, [160], scheme, rule="tails", scale=noise.scale)
        extended += tails[:2] != google[:2]
    assert extended <= stats.binom.ppf(1 - 1e-6, runs, 2 * EXTENSION_RATE)


@pytest.mark.slow
def test_window_thresholds_bound_the_exact_tail_of_sums() -> None:
    """P[X_1 + … + X_w ≥ T_w] ≤ the rate, for the exact law of the sum (convolution)."""
    for scale in (Fraction(1), Fraction(7, 2)):
        q = math.exp(-1 / float(scale))
        support = np.arange(-400, 401)
        pmf = (1 - q) / (1 + q) * q ** np.abs(support)
        for w, log_rate in ((1, -10.0), (2, -10.0), (8, -14.0), (32, -9.0)):
            law = np.array([1.0])
            for _ in range(w):
                law = np.convolve(law, pmf)
            values = np.arange(law.size) - 400 * w
            t = window_threshold(scale, w, log_rate)
            assert law[values >= t].sum() <= math.exp(log_rate)
            assert law[values >= t // 2].sum() > math.exp(log_rate)  # and not absurdly loose


def test_rule_is_checked() -> None:
    with pytest.raises(ValueError, match="rule"):
        approx_bounds(np.arange(100), 1.0, rule="quantile")
    with pytest.raises(ValueError, match="rule"):
        approx_bounds_from_histogram(np.zeros(128, np.int64), 1.0, integer=True, rule="Google")
    with pytest.raises(ValueError, match="scale"):
        find_bounds(np.full(4, 50), np.zeros(4), [26], BinScheme(True, 0, 4), rule="tails")
    assert _bounds_rules.RULES == ("tails", "google")
