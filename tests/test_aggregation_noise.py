"""Exact discrete noise (csrc/discrete_noise.c, dpselect.aggregation.noise;
docs/privacy/discrete-noise.md): the samplers follow the exact pmf (G-tests on a million draws,
which catch a deliberately broken sampler), the privacy statements hold on the exact pmf, the
test generator replays and is gated, and every bad input is refused."""
from __future__ import annotations

import math
import random
import threading
import warnings
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dpselect import _noise
from dpselect.core.exact import exp_neg_bounds
from dpselect.aggregation.grid import Grid
from dpselect.aggregation.noise import (
    DiscreteGaussianNoise,
    DiscreteLaplaceNoise,
    NoiseGuarantee,
    representable_scale,
    representable_sigma2,
    rho_for_epsilon_delta,
    zcdp_delta,
)
from dpselect.testing import InsecureDeterministicRNG, InsecureRNGWarning

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

N_DRAWS = 1_000_000
INT64_MAX = 2**63 - 1
P_FLOOR = 1e-6  # a correct sampler fails a test with probability 1e-6


def _rng(seed: int = 7, stream: int = 0) -> InsecureDeterministicRNG:
    return InsecureDeterministicRNG(seed=seed, stream=stream)


# ------------------------------------------------------------------ exact laws (mpmath)

def dlap_pmf(scale: Fraction, lo: int, hi: int) -> np.ndarray:
    """P[X = x] for x in [lo, hi], discrete Laplace of scale t: (1 − q)/(1 + q)·q^|x| with
    q = exp(−1/t) and the constant in 30-digit arithmetic, the powers in double precision
    (relative error ~1e-13, far below what a million draws can see)."""
    mpmath.mp.dps = 30
    q = mpmath.exp(-mpmath.mpf(scale.denominator) / scale.numerator)
    c = float((1 - q) / (1 + q))
    x = np.abs(np.arange(lo, hi + 1, dtype=np.float64))
    return c * np.exp(x * float(mpmath.log(q)))


def dgauss_pmf(sigma2: Fraction, lo: int, hi: int) -> np.ndarray:
    """P[X = x] for x in [lo, hi], discrete Gaussian: exp(−x²/(2σ²))/Z, the normaliser summed
    far into the tails (60σ) with exact rounding (math.fsum)."""
    s2 = float(sigma2)
    reach = int(60 * math.sqrt(s2)) + 60
    y = np.arange(-reach, reach + 1, dtype=np.float64)
    z = math.fsum(np.exp(-y * y / (2 * s2)).tolist())
    x = np.arange(lo, hi + 1, dtype=np.float64)
    return np.exp(-x * x / (2 * s2)) / z


def g_test(samples: np.ndarray, pmf: np.ndarray, lo: int, bins: int = 200) -> float:
    """p-value of the G-test of ``samples`` against the exact ``pmf`` of x = lo … lo + len − 1:
    consecutive values are merged into about ``bins`` cells of equal mass, the two tails
    (everything outside the support given) into one cell each."""
    n = samples.size
    below = float(np.sum(samples < lo))
    above = float(np.sum(samples >= lo + pmf.size))
    inside = np.bincount((samples[(samples >= lo) & (samples < lo + pmf.size)] - lo).astype(np.int64),
                         minlength=pmf.size).astype(float)
    edges = np.searchsorted(np.cumsum(pmf), np.linspace(0, pmf.sum(), bins + 1)[1:-1])
    edges = np.unique(edges)
    observed = np.add.reduceat(inside, np.concatenate(([0], edges + 1)))
    expected = np.add.reduceat(pmf, np.concatenate(([0], edges + 1))) * n
    tail_mass = max(0.0, 1.0 - pmf.sum())
    observed = np.concatenate((observed, [below + above]))
    expected = np.concatenate((expected, [tail_mass * n]))
    keep = expected > 0
    assert observed[~keep].sum() == 0, "a draw landed where the exact law has no mass"
    observed, expected = observed[keep], expected[keep]
    expected *= observed.sum() / expected.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        g = 2 * np.sum(np.where(observed > 0, observed * np.log(observed / expected), 0.0))
    return float(stats.chi2.sf(g, observed.size - 1))


def _support(scale: float, reach: float = 12.0) -> tuple[int, int]:
    half = int(reach * scale) + 8
    return -half, half


# ------------------------------------------------------------------ the pmf, exactly

LAPLACE_SCALES = [Fraction(1), Fraction(7, 3), Fraction(100), pytest.param(Fraction(10**6), marks=pytest.mark.slow)]


@pytest.mark.parametrize("scale", LAPLACE_SCALES, ids=str)
def test_discrete_laplace_follows_the_exact_pmf(scale: Fraction) -> None:
    draws = DiscreteLaplaceNoise(scale).sample(N_DRAWS, rng=_rng(1))
    lo, hi = _support(float(scale), 9.0)
    assert g_test(draws, dlap_pmf(scale, lo, hi), lo) > P_FLOOR


GAUSSIAN_SIGMA2 = [Fraction(1, 4), Fraction(2), Fraction(100), Fraction(10**6)]


@pytest.mark.parametrize("sigma2", GAUSSIAN_SIGMA2, ids=str)
def test_discrete_gaussian_follows_the_exact_pmf(sigma2: Fraction) -> None:
    draws = DiscreteGaussianNoise(sigma2).sample(N_DRAWS, rng=_rng(2))
    lo, hi = _support(math.sqrt(float(sigma2)), 7.0)
    assert g_test(draws, dgauss_pmf(sigma2, lo, hi), lo) > P_FLOOR


def test_the_g_test_catches_broken_samplers() -> None:
    """The test above is not vacuous: a scale off by one, a rounded continuous Laplace and a
    rounded continuous Gaussian (the usual shortcuts) all fail it."""
    lo, hi = _support(7 / 3, 9.0)
    off_by_one = _noise.add_discrete_laplace(np.zeros(N_DRAWS, np.int64), 8, 3, None, _rng(3)._test_state)
    assert g_test(off_by_one, dlap_pmf(Fraction(7, 3), lo, hi), lo) < P_FLOOR
    numpy_rng = np.random.default_rng(4)  # test data only: these are the broken samplers
    rounded = np.rint(numpy_rng.laplace(0, 1, N_DRAWS)).astype(np.int64)
    lo, hi = _support(1, 9.0)
    assert g_test(rounded, dlap_pmf(Fraction(1), lo, hi), lo) < P_FLOOR
    rounded_normal = np.rint(numpy_rng.normal(0, math.sqrt(2), N_DRAWS)).astype(np.int64)
    lo, hi = _support(math.sqrt(2), 7.0)
    assert g_test(rounded_normal, dgauss_pmf(Fraction(2), lo, hi), lo) < P_FLOOR
    sigma_off = DiscreteGaussianNoise(Fraction(3)).sample(N_DRAWS, rng=_rng(5))
    assert g_test(sigma_off, dgauss_pmf(Fraction(2), lo, hi), lo) < P_FLOOR


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2),
                                   Fraction(2**100 + 1, 2**99), Fraction(10**30, 10**30 - 7)], ids=str)
def test_bernoulli_exp_is_exact(gamma: Fraction) -> None:
    n = 200_000
    hits = int(_noise.bernoulli_exp(gamma.numerator, gamma.denominator, n, _rng(6)._test_state).sum())
    p = math.exp(-float(gamma))
    assert abs(hits - n * p) <= 6 * math.sqrt(n * p * (1 - p)) + 1e-9
    if gamma == 0:
        assert hits == n


def test_bernoulli_exp_of_a_large_gamma_never_fires() -> None:
    assert not _noise.bernoulli_exp(100, 1, 10_000, _rng(8)._test_state).any()  # p = e^-100


def test_noise_is_symmetric_and_centred_at_scale() -> None:
    draws = DiscreteLaplaceNoise(Fraction(10**12)).sample(20_000, rng=_rng(9))
    # |X| > 40 t has probability e^-40; the median of |X| is about t ln 2
    assert np.abs(draws).max() < 40 * 10**12
    assert np.median(np.abs(draws)) == pytest.approx(10**12 * math.log(2), rel=0.05)
    assert abs(int((draws > 0).sum()) - int((draws < 0).sum())) < 6 * math.sqrt(20_000)


# ------------------------------------------------------------------ privacy on the exact pmf

@pytest.mark.parametrize("epsilon,sensitivity,l0", [(1, 1, 1), (0.5, 3, 2), (2, 7, 1)])
def test_laplace_ratio_is_bounded_by_its_epsilon_and_reaches_it(epsilon, sensitivity, l0) -> None:
    noise = DiscreteLaplaceNoise.for_epsilon(epsilon, sensitivity=sensitivity, max_partitions_contributed=l0)
    assert noise.epsilon <= Fraction(str(epsilon))
    shift = sensitivity * l0  # the L1 move of one user, here all on one coordinate (the worst case)
    mpmath.mp.dps = 40
    q = mpmath.exp(-mpmath.mpf(noise.scale.denominator) / noise.scale.numerator)
    bound = mpmath.exp(mpmath.mpf(noise.epsilon.numerator) / noise.epsilon.denominator)
    ratios = [q ** abs(x) / q ** abs(x - shift) for x in range(-60, 61)]
    assert max(ratios) <= bound * (1 + mpmath.mpf(10) ** -30)
    assert max(ratios) >= bound * (1 - mpmath.mpf(10) ** -30)  # the statement is tight


def _dgauss_masses(sigma2: Fraction, reach: int) -> dict[int, mpmath.mpf]:
    """The exact pmf in 30-digit arithmetic (normaliser summed 60 terms beyond ``reach``)."""
    mpmath.mp.dps = 30
    s2 = mpmath.mpf(sigma2.numerator) / sigma2.denominator
    z = mpmath.fsum(mpmath.exp(-mpmath.mpf(y * y) / (2 * s2)) for y in range(-reach - 60, reach + 61))
    return {x: mpmath.exp(-mpmath.mpf(x * x) / (2 * s2)) / z for x in range(-reach, reach + 1)}


@pytest.mark.parametrize("sigma2,shift", [(Fraction(1, 2), 1), (Fraction(9, 4), 1), (Fraction(20), 3)])
def test_gaussian_renyi_and_hockey_stick_within_the_statement(sigma2: Fraction, shift: int) -> None:
    """On the exact pmf: the Rényi divergence of N_Z(0, σ²) from N_Z(Δ, σ²) is ≤ αρ (zCDP) and
    the exact δ(ε) (hockey-stick) is ≤ the certified conversion, for ε = 0.5, 1, 2."""
    noise = DiscreteGaussianNoise(sigma2, sensitivity=shift)
    reach = int(40 * math.sqrt(float(sigma2))) + 40
    p = _dgauss_masses(sigma2, reach)
    rho = mpmath.mpf(noise.rho.numerator) / noise.rho.denominator
    for alpha in (2, 5, 20):
        moment = mpmath.fsum(p[x] ** alpha * p[x - shift] ** (1 - alpha) for x in range(-reach + shift, reach + 1))
        assert mpmath.log(moment) / (alpha - 1) <= alpha * rho * (1 + mpmath.mpf(10) ** -20)
    for eps in (Fraction(1, 2), Fraction(1), Fraction(2)):
        e = mpmath.exp(mpmath.mpf(eps.numerator) / eps.denominator)
        exact = mpmath.fsum(max(0, p[x] - e * p[x - shift]) for x in range(-reach + shift, reach + 1))
        assert exact <= noise.delta_for_epsilon(eps)


def test_gaussian_two_coordinates_compose_as_zcdp() -> None:
    """L0 = 2: one user moves two coordinates by 1. The exact δ of the product law is within
    the statement for ρ = 2·1²/(2σ²)."""
    sigma2 = Fraction(3, 2)
    noise = DiscreteGaussianNoise(sigma2, sensitivity=1, max_partitions_contributed=2)
    reach = 40
    p = _dgauss_masses(sigma2, reach)
    e = mpmath.e
    exact = mpmath.fsum(max(0, p[x] * p[y] - e * p[x - 1] * p[y - 1])
                        for x in range(-reach + 1, reach + 1) for y in range(-reach + 1, reach + 1))
    assert exact <= noise.delta_for_epsilon(1)
    assert noise.rho == Fraction(1) / sigma2


def _cks_delta_inf(rho: float, eps: float) -> float:
    """inf over α > 1 of exp((α−1)(αρ−ε))(1 − 1/α)^α/(α − 1), in 40-digit arithmetic: the
    derivative of its log, (2α − 1)ρ − ε + ln(1 − 1/α), increases in α; bisect on its sign."""
    mpmath.mp.dps = 40
    r, e = mpmath.mpf(rho), mpmath.mpf(eps)
    lo, hi = mpmath.mpf(1) + mpmath.mpf(10) ** -30, mpmath.mpf(10) ** 6
    for _ in range(300):
        mid = (lo + hi) / 2
        if (2 * mid - 1) * r - e + mpmath.log(1 - 1 / mid) < 0:
            lo = mid
        else:
            hi = mid
    a = (lo + hi) / 2
    return float(mpmath.exp((a - 1) * (a * r - e)) * (1 - 1 / a) ** a / (a - 1))


@pytest.mark.parametrize("rho,eps", [(Fraction(1, 2), 1), (Fraction(1, 20), 1), (Fraction(1, 200), Fraction(1, 10)),
                                     (Fraction(1, 1000), 1)])
def test_zcdp_conversion_is_a_certified_upper_bound_close_to_cks(rho, eps) -> None:
    certified = float(zcdp_delta(rho, eps))
    best = _cks_delta_inf(float(rho), float(eps))
    assert best * (1 - 1e-12) <= certified <= best * (1 + 1e-6)  # an upper bound, at a near-optimal alpha
    # never below what the continuous Gaussian mechanism (also ρ-zCDP) actually needs
    mu = math.sqrt(2 * float(rho))
    gauss = stats.norm.cdf(-float(eps) / mu + mu / 2) - math.exp(float(eps)) * stats.norm.cdf(-float(eps) / mu - mu / 2)
    assert certified >= gauss
    # and better than the classic exp(−(ε − ρ)²/(4ρ))
    assert certified <= math.exp(-(float(eps) - float(rho)) ** 2 / (4 * float(rho)))


@pytest.mark.parametrize("epsilon,delta", [(1, 1e-5), (0.1, 1e-9), (3, 1e-3)])
def test_sigma_for_epsilon_delta_is_certified_and_nearly_minimal(epsilon, delta) -> None:
    noise = DiscreteGaussianNoise.for_epsilon_delta(epsilon, delta, sensitivity=5, max_partitions_contributed=3)
    target = Fraction(str(delta))
    assert noise.delta_for_epsilon(Fraction(str(epsilon))) <= target
    assert noise.guarantee.delta_exact <= target and noise.guarantee.epsilon_exact == Fraction(str(epsilon))
    assert noise.rho == Fraction(25 * 3) / (2 * noise.sigma2)
    # 0.1% less variance would overspend delta: the search does not leave much on the table
    tighter = zcdp_delta(noise.rho / Fraction(999, 1000), Fraction(str(epsilon)))
    assert tighter > target
    assert rho_for_epsilon_delta(epsilon, delta) >= noise.rho


# ------------------------------------------------------------------ kernel parameters

@pytest.mark.slow
@given(st.fractions(min_value=Fraction(1, 10**6), max_value=Fraction(10**20)))
@settings(max_examples=150, deadline=None)
def test_representable_sigma2_rounds_up_and_fits(target: Fraction) -> None:
    sigma2 = representable_sigma2(target)
    assert sigma2 >= target
    assert sigma2 - target <= target * Fraction(1, 2**10) + Fraction(1, 2**40)
    lap_num, lap_den, shift_num, shift_den, gamma_den = _noise.gaussian_parameters(sigma2.numerator, sigma2.denominator)
    assert Fraction(lap_num, lap_den) * Fraction(shift_num, shift_den) == sigma2  # t·μ = σ²
    assert gamma_den == 2 * sigma2 * shift_den**2 and gamma_den < 2**100
    assert max(lap_num, lap_den, shift_num, shift_den) < 2**63
    assert 0.5 <= lap_num / lap_den / max(1.0, math.sqrt(float(sigma2))) <= 2  # t ≈ σ: fast acceptance


@pytest.mark.slow
@given(st.fractions(min_value=Fraction(1, 10**9), max_value=Fraction(2**20)), st.integers(1, 2**45), st.integers(1, 50))
@settings(max_examples=150, deadline=None)
def test_laplace_for_epsilon_never_spends_more_than_asked(eps: Fraction, sensitivity: int, l0: int) -> None:
    try:
        noise = DiscreteLaplaceNoise.for_epsilon(eps, sensitivity=sensitivity, max_partitions_contributed=l0)
    except ValueError as exc:  # scale ≥ 2^63: refused, naming the scale
        assert "scale" in str(exc) and Fraction(sensitivity * l0) / eps >= 2**63 - 1
        return
    assert noise.epsilon <= eps
    # The scale is rounded up to a multiple of 2^-k with k <= 62 (denominators below 2^63): that
    # costs epsilon less than 2^-62 / scale relatively, which exceeds 2^-50 for scales below 2^-12.
    target = Fraction(sensitivity * l0) / eps
    assert noise.epsilon >= eps * (1 - max(Fraction(1, 2**50), Fraction(1, 2**62) / target))
    assert noise.scale == representable_scale(Fraction(sensitivity * l0) / eps)


@pytest.mark.slow
@given(st.fractions(min_value=0, max_value=2000, max_denominator=10**12))
@settings(max_examples=200, deadline=None)
def test_exp_bounds_bracket_the_exact_value(y: Fraction) -> None:
    mpmath.mp.dps = 80
    lo, hi = exp_neg_bounds(y, 128)
    exact = mpmath.exp(-mpmath.mpf(y.numerator) / y.denominator)
    assert mpmath.mpf(lo.numerator) / lo.denominator <= exact <= mpmath.mpf(hi.numerator) / hi.denominator
    assert hi - lo <= hi * Fraction(1, 2**120)


def _as_mpf(x: Fraction) -> mpmath.mpf:
    return mpmath.mpf(x.numerator) / x.denominator


@pytest.mark.slow
@given(st.fractions(min_value=2000, max_value=2**16, max_denominator=10**6))
@settings(max_examples=50, deadline=None)
def test_exp_bounds_keep_their_precision_for_large_arguments(y: Fraction) -> None:
    """Significant bits, not fixed point: e^(−y) near 2^-94548 is bracketed as tightly as e^(−1)
    (the fixed-point version needed 1.44·y bits of Taylor terms: minutes beyond y = 10^5)."""
    mpmath.mp.dps = 60
    lo, hi = exp_neg_bounds(y, 128)
    exact = mpmath.exp(-_as_mpf(y))
    assert _as_mpf(lo) <= exact <= _as_mpf(hi)
    assert hi - lo <= hi * Fraction(1, 2**120)
    assert hi.denominator & (hi.denominator - 1) == 0 and lo.denominator & (lo.denominator - 1) == 0


@pytest.mark.parametrize("y", [Fraction(2**16) + Fraction(1, 3), Fraction(10**6), Fraction(10**300)])
def test_exp_bounds_saturate_beyond_two_to_the_sixteen(y: Fraction) -> None:
    mpmath.mp.dps = 30
    lo, hi = exp_neg_bounds(y, 128)
    assert lo == 0
    assert hi == exp_neg_bounds(Fraction(2**16), 128)[1]
    assert mpmath.exp(-_as_mpf(y)) <= _as_mpf(hi) < mpmath.mpf(2) ** -94_000


def test_certificates_at_a_huge_epsilon_per_step_are_immediate() -> None:
    """ε per step of 10^7 (a scale of 10^-7): the noise is almost surely 0, the half-widths and
    the APPROX_BOUNDS threshold are 0 or 1. These computed e^(−10^7) bit by bit before."""
    from dpselect.aggregation.bounds import discrete_threshold
    from dpselect.aggregation.intervals import discrete_gaussian_half_width, discrete_laplace_half_width

    tiny = Fraction(1, 10**7)
    assert discrete_laplace_half_width(tiny, 0.95) == 0
    assert discrete_gaussian_half_width(tiny, 0.999) == 0
    assert discrete_threshold(tiny, Fraction(999_999_999, 10**9), 64) == 1


@pytest.mark.slow
@given(st.integers(0, 2**128 - 1), st.integers(1, 2**128 - 1), st.booleans())
@settings(max_examples=400, deadline=None)
def test_u128_divmod_native_and_portable(n: int, d: int, portable: bool) -> None:
    assert _noise._u128_divmod(n, d, portable) == divmod(n, d)


@pytest.mark.slow
@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.booleans())
@settings(max_examples=300, deadline=None)
def test_u128_mul_native_and_portable(a: int, b: int, portable: bool) -> None:
    assert _noise._u128_mul64(a, b, portable) == a * b


def test_u128_divmod_edges() -> None:
    for n, d in [(2**128 - 1, 1), (2**128 - 1, 2**128 - 1), (2**127, 2**64 - 1), (2**64, 2**64 + 1), (0, 5),
                 (2**100 + 12345, 2**36 + 7)]:
        for portable in (False, True):
            assert _noise._u128_divmod(n, d, portable) == divmod(n, d)
    with pytest.raises(ValueError):
        _noise._u128_divmod(1, 0)


# ------------------------------------------------------------------ the test generator

def test_same_seed_same_noise_other_seed_other_noise() -> None:
    values = np.arange(1000, dtype=np.int64)
    for noise in (DiscreteLaplaceNoise(Fraction(5, 2)), DiscreteGaussianNoise(Fraction(7))):
        a = noise.add(values, rng=_rng(11))
        b = noise.add(values, rng=_rng(11))
        c = noise.add(values, rng=_rng(12))
        d = noise.add(values, rng=_rng(11, stream=1))
        assert np.array_equal(a, b)
        assert not np.array_equal(a, c) and not np.array_equal(a, d)


def test_test_generator_warns_and_marks_not_dp() -> None:
    noise = DiscreteLaplaceNoise(Fraction(1))
    with pytest.warns(InsecureRNGWarning):
        noise.sample(3, rng=_rng())
    text = str(noise.guarantee.under_test_rng())
    assert text.startswith("NOT DP") and not noise.guarantee.under_test_rng().is_dp


def test_test_generator_is_gated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DPSELECT_ALLOW_INSECURE_RNG", raising=False)
    with pytest.raises(RuntimeError, match="tests only"):
        InsecureDeterministicRNG(seed=1)


@pytest.mark.parametrize("rng", [np.random.default_rng(0), random.Random(0), 42])
def test_foreign_generators_are_refused(rng: object) -> None:
    with pytest.raises(TypeError, match="rng must be None"):
        DiscreteLaplaceNoise(Fraction(1)).sample(3, rng=rng)


def test_binding_refuses_anything_but_a_test_state() -> None:
    z = np.zeros(3, dtype=np.int64)
    with pytest.raises(TypeError):
        _noise.add_discrete_laplace(z, 1, 1, None, object())
    with pytest.raises(TypeError):
        _noise.add_discrete_gaussian(z, 1, 1, None, "seed")


def test_one_test_generator_cannot_serve_two_threads_at_once() -> None:
    rng = _rng(13)
    errors: list[BaseException] = []
    big = np.zeros(2_000_000, dtype=np.int64)

    def run() -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                DiscreteLaplaceNoise(Fraction(3)).add(big, rng=rng)
        except RuntimeError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors and all("already in use" in str(e) for e in errors)


def test_secure_generator_fills_every_chunk_of_a_parallel_batch() -> None:
    n = 1_200_000  # above the size at which batches are split across threads
    out = np.full(n, -(2**62), dtype=np.int64)
    DiscreteLaplaceNoise(Fraction(100)).add(np.zeros(n, dtype=np.int64), out=out)
    assert np.abs(out).max() < 100 * 60  # no sentinel left, no garbage
    assert abs(out.mean()) < 1.0 and 19_000 < out.var() < 21_000
    assert NoiseGuarantee  # the statement type is public


# ------------------------------------------------------------------ overflow and arrays

def test_overflow_of_value_plus_noise_raises_and_zeroes_out() -> None:
    values = np.full(1000, INT64_MAX - 1, dtype=np.int64)
    out = np.full(1000, 5, dtype=np.int64)
    with pytest.raises(OverflowError, match="does not fit in int64"):
        DiscreteLaplaceNoise(Fraction(1)).add(values, out=out, rng=_rng(14))
    assert not out.any()
    with pytest.raises(OverflowError):
        DiscreteGaussianNoise(Fraction(4)).add(-values - 1, rng=_rng(15))
    with pytest.raises(OverflowError):  # the noise itself beyond int64: |X| > 2^63 w.p. e^-2 per draw
        DiscreteLaplaceNoise(Fraction(2**62)).sample(200, rng=_rng(16))


def test_in_place_and_shapes() -> None:
    values = np.arange(12, dtype=np.int64).reshape(3, 4)
    expected = DiscreteLaplaceNoise(Fraction(2)).add(values, rng=_rng(17))
    assert expected.shape == (3, 4)
    DiscreteLaplaceNoise(Fraction(2)).add(values, out=values, rng=_rng(17))
    assert np.array_equal(values, expected)
    small = np.array([1, 2, 3], dtype=np.int16)
    assert DiscreteLaplaceNoise(Fraction(2)).add(small, rng=_rng(18)).dtype == np.int64
    assert DiscreteLaplaceNoise(Fraction(2)).add(np.array([2**40, -5], dtype=object), rng=_rng(18)).dtype == np.int64
    assert DiscreteGaussianNoise(Fraction(2)).sample(0).size == 0


@pytest.mark.parametrize("values,error", [
    (np.array([1.5, 2.0]), TypeError),
    (np.array([True, False]), TypeError),
    (np.array(["1", "2"]), TypeError),
    (np.array([1, "x"], dtype=object), TypeError),
    (np.array([2**64], dtype=object), OverflowError),
    (np.array([2**63], dtype=np.uint64), OverflowError),
    (np.ma.masked_array([1, 2], mask=[0, 1]), TypeError),
])
def test_bad_values_are_refused(values, error) -> None:
    with pytest.raises(error, match="values"):
        DiscreteLaplaceNoise(Fraction(1)).add(values)


def test_binding_checks_arrays() -> None:
    z = np.zeros(4, dtype=np.int64)
    with pytest.raises(TypeError, match="int64"):
        _noise.add_discrete_laplace(z.astype(np.int32), 1, 1)
    with pytest.raises(ValueError, match="1-D"):
        _noise.add_discrete_laplace(z.reshape(2, 2), 1, 1)
    with pytest.raises(ValueError, match="length"):
        _noise.add_discrete_laplace(z, 1, 1, np.zeros(3, dtype=np.int64))
    with pytest.raises(TypeError, match="out"):
        _noise.add_discrete_laplace(z, 1, 1, np.zeros(4, dtype=np.float64))
    buffer = np.zeros(8, dtype=np.int64)
    with pytest.raises(ValueError, match="overlaps"):
        _noise.add_discrete_laplace(buffer[:4], 1, 1, buffer[2:6])
    read_only = np.zeros(4, dtype=np.int64)
    read_only.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        _noise.add_discrete_laplace(z, 1, 1, read_only)
    with pytest.raises(TypeError, match="numpy array"):
        _noise.add_discrete_laplace([1, 2], 1, 1)


@pytest.mark.parametrize("num,den,name,error", [
    (0, 1, "scale_num", ValueError), (1, 0, "scale_den", ValueError), (-3, 1, "scale_num", ValueError),
    (2**63, 1, "scale_num", ValueError), (1, 2**63, "scale_den", ValueError), (1.5, 1, "scale_num", TypeError),
    (True, 1, "scale_num", TypeError),
])
def test_binding_refuses_scales_that_do_not_fit(num, den, name, error) -> None:
    with pytest.raises(error, match=name):
        _noise.add_discrete_laplace(np.zeros(2, dtype=np.int64), num, den)


@pytest.mark.parametrize("scale,error", [
    (0, ValueError), (-1, ValueError), (float("nan"), ValueError), (float("inf"), ValueError),
    (True, TypeError), ("1", TypeError), (Fraction(2**64, 3), ValueError), (Fraction(1, 2**63), ValueError),
])
def test_noise_objects_refuse_bad_scales(scale, error) -> None:
    with pytest.raises(error, match="scale"):
        DiscreteLaplaceNoise(scale)


@pytest.mark.parametrize("sigma2,error", [
    (0, ValueError), (-2, ValueError), (float("nan"), ValueError), (None, TypeError),
    (Fraction(2**62 + 1, 3**38), ValueError), (Fraction(10**30), ValueError),
])
def test_noise_objects_refuse_bad_variances(sigma2, error) -> None:
    with pytest.raises(error, match="sigma2"):
        DiscreteGaussianNoise(sigma2)


def test_budget_arguments_are_checked() -> None:
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="epsilon"):
            DiscreteLaplaceNoise.for_epsilon(bad)
    with pytest.raises(ValueError, match="sensitivity"):
        DiscreteLaplaceNoise.for_epsilon(1, sensitivity=0)
    with pytest.raises(TypeError, match="max_partitions_contributed"):
        DiscreteGaussianNoise.for_rho(1, max_partitions_contributed=1.5)
    with pytest.raises(ValueError, match="delta"):
        DiscreteGaussianNoise.for_epsilon_delta(1, 1)
    with pytest.raises(ValueError, match="delta"):
        DiscreteGaussianNoise.for_epsilon_delta(1, 0)
    with pytest.raises(ValueError, match="alpha"):
        zcdp_delta(1, 1, alpha=1)
    with pytest.raises(ValueError, match="size"):
        DiscreteLaplaceNoise(Fraction(1)).sample(-1)


def test_guarantee_text_states_epsilon_delta_and_rho() -> None:
    lap = DiscreteLaplaceNoise.for_epsilon(0.3, sensitivity=2, max_partitions_contributed=3)
    assert lap.guarantee.epsilon_exact == Fraction(3, 10) and lap.guarantee.delta_exact == 0
    assert "(0.3, 0)-differentially private" in str(lap.guarantee) and "at most 3 coordinate(s)" in str(lap.guarantee)
    gauss = DiscreteGaussianNoise.for_rho(Fraction(1, 8), sensitivity=2)
    assert gauss.rho <= Fraction(1, 8) and gauss.guarantee.epsilon is None
    assert "zCDP" in str(gauss.guarantee) and "differentially private" not in str(gauss.guarantee)


# ------------------------------------------------------------------ the grid (floats never meet noise)

def test_grid_step_follows_the_bounds() -> None:
    assert Grid.for_bounds(-3.5, 900.0).exponent == 10 - 30  # ⌈log2 900⌉ = 10
    assert Grid.for_bounds(-1024.0, 1.0).exponent == 10 - 30  # a power of two is its own ceiling
    assert Grid.for_bounds(0.0, 1e-300).exponent == -1022  # never finer than the smallest normal double
    assert Grid.for_bounds(0.0, 1e-290).exponent == math.frexp(1e-290)[1] - 30
    assert Grid.for_bounds(-5, 10**6, integer=True).exponent == 0
    assert Grid.for_bounds(0, 2**60, integer=True).exponent == 30
    assert Grid.for_bounds(0.0, 0.0).exponent == 0
    assert Grid.for_bounds(-3.5, 900.0, precision_bits=20).step == 2.0**-10


def test_grid_clamps_and_snaps_exactly() -> None:
    grid = Grid.for_bounds(-3.5, 900.0, precision_bits=40)
    g = grid.step
    values = np.array([1.0, -10.0, 1000.0, 0.1, 3.3, -3.5, 900.0, 2.5 * g, 3.5 * g, -2.5 * g])
    units = grid.to_units(values)
    assert units.dtype == np.int64
    assert units[:3].tolist() == [2**30, grid.lower_units, grid.upper_units]
    assert units[7:].tolist() == [2, 4, -2]  # ties to even, exactly
    released = grid.release(units)
    clamped = np.clip(values, -3.5, 900.0)
    assert np.all(np.abs(released - clamped) <= g / 2)
    assert np.all(released / g == np.rint(released / g))  # multiples of g, exactly


def test_grid_integers_round_half_up_and_never_overflow() -> None:
    grid = Grid.for_bounds(-(2**62), 2**62, integer=True, precision_bits=40)  # step 2^22
    x = np.array([2**21, 2**21 - 1, -(2**21), -(2**21) - 1, 2**63 - 1, -(2**63)], dtype=np.int64)
    assert grid.to_units(x).tolist() == [1, 0, 0, -1, 2**40, -(2**40)]
    small = Grid.for_bounds(-3, 5, precision_bits=40)  # a fine grid for integer data: exact shifts
    assert small.to_units(np.array([-7, 2, 9])).tolist() == [-3 * 2**37, 2 * 2**37, 5 * 2**37]
    unsigned = Grid.for_bounds(0, 100, integer=True)
    assert unsigned.to_units(np.array([2**64 - 1, 7], dtype=np.uint64)).tolist() == [100, 7]


@given(st.lists(st.integers(-(2**40), 2**40), max_size=200), st.integers(1, 5))
@settings(max_examples=100, deadline=None)
def test_grid_sums_are_exact(units: list[int], n: int) -> None:
    grid = Grid.for_bounds(-1.0, 1.0)
    arr = np.array(units, dtype=np.int64)
    codes = np.arange(arr.size) % n
    assert grid.sum_units(arr) == sum(units)
    sums = grid.sum_units(arr, codes, n)
    assert sums.to_ints() == [sum(units[i::n]) for i in range(n)]


def test_grid_sums_past_int64_are_exact_and_clamped_before_noise() -> None:
    grid = Grid.for_bounds(-1.0, 1.0)
    big = np.full(4, 2**62, dtype=np.int64)
    sums = grid.sum_units(big, np.array([0, 0, 0, 1]), 3)
    assert sums.to_ints() == [3 * 2**62, 2**62, 0]
    assert sums.clamped().tolist() == [2**62, 2**62, 0]  # what a release adds noise to
    fits = grid.sum_units(np.array([2**62, 2**62, -(2**62)], dtype=np.int64), np.zeros(3, dtype=int), 1)
    assert fits.to_ints() == [2**62]
    assert grid.sum_units(np.full(8, 2**62, dtype=np.int64)) == 2**65


def test_grid_release_is_noisy_units_times_the_step() -> None:
    grid = Grid.for_bounds(0.0, 10.0)
    units = grid.to_units(np.random.default_rng(5).uniform(0, 10, 1000))
    total = np.array([grid.sum_units(units)], dtype=np.int64)
    noise = DiscreteLaplaceNoise.for_epsilon(1, sensitivity=grid.sum_sensitivity(2))
    assert noise.scale == 2 * grid.max_abs_units()
    noisy = noise.add(total, rng=_rng(30))
    released = grid.release(noisy)
    assert released[0] == math.ldexp(float(noisy[0]), grid.exponent)
    assert Fraction(released[0]) / Fraction(grid.step) == int(noisy[0])  # exact: a multiple of g


@pytest.mark.parametrize("values,error,match", [
    (np.array([1.0, np.nan]), ValueError, "amounts contains NaN"), (np.array([np.inf]), ValueError, "flat index 0"),
    (np.array(["1.0"]), TypeError, "amounts"), (np.array([True]), TypeError, "amounts"),
    (np.array([1 + 2j]), TypeError, "amounts"), (np.ma.masked_array([1.0], mask=[1]), TypeError, "amounts"),
    (np.array([1, None], dtype=object), TypeError, "amounts"),
])
def test_grid_refuses_bad_values(values, error, match) -> None:
    with pytest.raises(error, match=match):
        Grid.for_bounds(0.0, 1.0).to_units(values, name="amounts")


@pytest.mark.parametrize("lower,upper,kwargs,error,match", [
    (5.0, 1.0, {}, ValueError, "inverted"), (float("nan"), 1.0, {}, ValueError, "lower"),
    (0.0, float("inf"), {}, ValueError, "upper"), ("0", 1.0, {}, TypeError, "lower"),
    (0.0, 1.0, {"precision_bits": 0}, ValueError, "precision_bits"),
    (0.0, 1.0, {"precision_bits": 63}, ValueError, "precision_bits"), (0, 2**63 + 1, {}, ValueError, "upper"),
])
def test_grid_refuses_bad_bounds(lower, upper, kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        Grid.for_bounds(lower, upper, **kwargs)


def test_grid_checks_codes_and_units() -> None:
    grid = Grid.for_bounds(0.0, 1.0)
    with pytest.raises(ValueError, match="codes"):
        grid.sum_units(np.array([1, 2]), np.array([0, 5]), 2)
    with pytest.raises(TypeError, match="units"):
        grid.sum_units(np.array([1.5]))
    with pytest.raises(ValueError, match="n_partitions"):
        grid.sum_units(np.array([1]), np.array([0]), None)
    with pytest.raises(ValueError, match="inverted"):
        Grid(1.0, 0.0, 0)
    with pytest.raises(ValueError, match="no multiple"):
        Grid(0.25, 0.75, 0)
