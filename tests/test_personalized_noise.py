"""Exact samplers of dpselect.personalized.noise (Canonne, Kamath, Steinke, NeurIPS 2020, Algorithms 1-2)."""
from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from dpselect.testing import InsecureDeterministicRNG

from dpselect.personalized.noise import (
    bernoulli_exp,
    discrete_laplace,
    keep_mask,
    keep_thresholds,
    sampling_keep_probability,
)

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")


def _rng(seed: int) -> InsecureDeterministicRNG:
    return InsecureDeterministicRNG(seed=seed, stream=0)


def _within(observed: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(observed - n * p) <= sigmas * math.sqrt(n * p * (1 - p)) + 1


@pytest.mark.slow
@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(7, 3)])
def test_bernoulli_exp_frequency(gamma: Fraction) -> None:
    rng = _rng(11)
    n = 4000
    hits = sum(bernoulli_exp(gamma, rng) for _ in range(n))
    assert _within(hits, n, math.exp(-float(gamma)))


@pytest.mark.slow
@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(3, 2), Fraction(10)])
def test_discrete_laplace_matches_exact_pmf(scale: Fraction) -> None:
    rng = _rng(5)
    n = 6000
    counts = Counter(discrete_laplace(scale, rng) for _ in range(n))
    q = math.exp(-1 / float(scale))
    for z in range(-4, 5):
        p = (1 - q) / (1 + q) * q ** abs(z)
        assert _within(counts[z], n, p), (z, counts[z], n * p)
    # symmetric
    positive = sum(c for z, c in counts.items() if z > 0)
    negative = sum(c for z, c in counts.items() if z < 0)
    assert abs(positive - negative) <= 5 * math.sqrt(positive + negative)


def test_discrete_laplace_huge_rational_scale_is_fast_and_centred() -> None:
    rng = _rng(9)
    scale = Fraction(10**11 * 39, 7)
    samples = [discrete_laplace(scale, rng) for _ in range(200)]
    # |Z| > 10·scale has probability e^-10 per draw
    assert max(abs(z) for z in samples) < 10 * scale
    assert float(np.median(np.abs(samples))) == pytest.approx(float(scale) * math.log(2), rel=0.35)


def test_discrete_laplace_rejects_bad_scale() -> None:
    with pytest.raises(ValueError):
        discrete_laplace(Fraction(0), _rng(1))


def test_keep_thresholds_never_exceed_the_exact_probability() -> None:
    mpmath.mp.prec = 200
    gen = np.random.Generator(np.random.PCG64(3))
    phi = np.concatenate([gen.uniform(1e-4, 3.0, 300), [1e-4, 0.5, 2.0]])
    for target in (0.7, 1.0, 2.9):
        p, cond = sampling_keep_probability(phi, target)
        q = keep_thresholds(p, cond)
        t_exact = mpmath.mpf(Fraction(repr(target)).numerator) / Fraction(repr(target)).denominator
        for value, threshold in zip(phi.tolist(), q.tolist()):
            f = Fraction(repr(value))
            exact = mpmath.expm1(mpmath.mpf(f.numerator) / f.denominator) / mpmath.expm1(t_exact)
            assert mpmath.mpf(threshold) / 2**64 <= exact
            if exact < 1:
                assert exact - mpmath.mpf(threshold) / 2**64 < 1e-9  # and close to it


def test_keep_mask_frequency() -> None:
    rng = _rng(2)
    n = 20000
    thresholds = np.full(n, 2**62, dtype=np.uint64)  # p = 1/4
    kept = keep_mask(thresholds, rng)
    assert _within(int(kept.sum()), n, 0.25)
    assert keep_mask(np.zeros(0, dtype=np.uint64), rng).size == 0
    assert not keep_mask(np.zeros(50, dtype=np.uint64), rng).any()
