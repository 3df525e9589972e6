"""Baselines (docs/privacy/personalized.md, "Baselines"): naive, [JYC15] sampling, PDP EM, D4, D5."""
from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from dpselect.testing import InsecureDeterministicRNG

from dpselect.personalized import (
    naive_count,
    naive_sum,
    pdp_count,
    pdp_count_with_sampling,
    pdp_exponential_count,
    sampling_count,
    sampling_sum,
)
from dpselect.personalized.exponential import FACTOR_BITS, factor_numerators
from dpselect.personalized.noise import keep_thresholds, sampling_keep_probability
from dpselect.personalized.params import exact_value

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")


def _rng(seed: int = 1) -> InsecureDeterministicRNG:
    return InsecureDeterministicRNG(seed=seed, stream=0)


def _gaussian_setting(n_users: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    gen = np.random.Generator(np.random.PCG64(seed))
    phi = gen.normal(1.0, 0.3, n_users)
    floor = 1 / (10 * math.sqrt(n_users))
    phi[phi < floor] = floor
    chosen = gen.choice(n_users, n_users // 10, replace=False)
    values = np.zeros(n_users, dtype=np.int64)
    drawn = gen.normal(1000, 200, chosen.size).astype(np.int64)
    drawn[drawn <= 0] = 1
    values[chosen] = drawn
    return phi, (values > 0).astype(np.int64), values


def _mp(x: Fraction) -> mpmath.mpf:
    return mpmath.mpf(x.numerator) / x.denominator


# ---------------------------------------------------------------- privacy statements

def test_naive_charges_phi_min_to_everyone() -> None:
    phi = np.array([0.25, 1.0, 3.0])
    result = naive_count(np.array([1, 0, 1]), phi, rng=_rng())
    assert all(result.privacy.accounted_loss(u) == Fraction(1, 4) for u in range(3))
    assert result.privacy.verify()
    assert naive_sum(np.array([3, 0, 1]), phi, 4, rng=_rng()).privacy.verify()
    assert naive_sum(np.array([3, 0, 1]), phi, 4, method="laplace", rng=_rng()).privacy.verify()
    with pytest.raises(ValueError, match="method"):
        naive_sum(np.array([3, 0, 1]), phi, 4, method="gauss", rng=_rng())


def test_sampling_probability_is_below_the_jyc15_bound_exactly() -> None:
    """Kept with Q/2^64 ≤ (e^Φ − 1)/(e^{t_s} − 1) ⇒ loss ln(1 + π(e^{t_s} − 1)) ≤ Φ(u) ([JYC15])."""
    mpmath.mp.prec = 200
    phi = np.array([1e-4, 0.01, 0.3, 0.9, 0.999999])
    t_s = exact_value(1.0)
    p, cond = sampling_keep_probability(phi, 1.0)
    for value, q in zip(phi.tolist(), keep_thresholds(p, cond).tolist()):
        pi = mpmath.mpf(q) / 2**64
        loss = mpmath.log(1 + pi * mpmath.expm1(_mp(t_s)))
        assert loss <= _mp(exact_value(value))


def test_count_with_sampling_is_within_budget_exactly() -> None:
    """D4 safe form: π_i(u) = (e^{Φ/L} − 1)/(e^{k_i/L} − 1) ⇒ each release costs ≤ Φ(u)/L."""
    mpmath.mp.prec = 200
    gen = np.random.Generator(np.random.PCG64(2))
    phi = np.concatenate([gen.uniform(1e-3, 3.0, 40), [1e-3, 3.0]])
    result = pdp_count_with_sampling(np.ones(phi.size, dtype=np.int64), phi, rng=_rng())
    L = result.details["L"]
    assert L == result.details["t"] + 1
    for value in phi.tolist():
        exact = exact_value(value)
        total = mpmath.mpf(0)
        for k in result.parameters:
            eps_i = _mp(k / L)
            if exact > k:
                total += eps_i
            else:
                p, cond = sampling_keep_probability(np.array([value / L]), float(k) / L)
                pi = mpmath.mpf(int(keep_thresholds(p, cond)[0])) / 2**64
                total += mpmath.log(1 + pi * mpmath.expm1(eps_i))
        assert total <= _mp(exact)
    assert result.privacy.verify()


def test_em_factors_round_up_so_costs_never_exceed_phi() -> None:
    mpmath.mp.prec = 200
    gen = np.random.Generator(np.random.PCG64(5))
    phi = np.concatenate([gen.uniform(1e-4, 5.0, 200), [1e-4, 1e-12, 100.0, 2000.0]])
    for value, r in zip(phi.tolist(), factor_numerators(phi).tolist()):
        assert 1 <= r <= 2**FACTOR_BITS
        assert mpmath.mpf(r) / 2**FACTOR_BITS >= mpmath.exp(-_mp(exact_value(value)) / 2)


# ---------------------------------------------------------------- exact EM distribution (small instance)

@pytest.mark.slow
def test_em_samples_the_exact_weights() -> None:
    phi = np.array([0.3, 1.0, 2.0, 0.5, 0.05, 1.5])
    bits = np.array([1, 1, 0, 0, 1, 0])
    r = factor_numerators(phi).astype(np.float64) / 2**FACTOR_BITS
    ones, zeros = np.sort(r[bits == 1])[::-1], np.sort(r[bits == 0])[::-1]
    n = int(bits.sum())
    weights = {n: 1.0}
    for m in range(1, ones.size + 1):
        weights[n - m] = float(np.prod(ones[:m]))
    for m in range(1, zeros.size + 1):
        weights[n + m] = float(np.prod(zeros[:m]))
    total = sum(weights.values())
    runs = 6000
    rng = _rng(4)
    counts = Counter(pdp_exponential_count(bits, phi, rng=rng).estimate for _ in range(runs))
    assert set(counts) <= set(weights)
    for c, w in weights.items():
        p = w / total
        assert abs(counts[c] - runs * p) <= 5 * math.sqrt(runs * p * (1 - p)) + 1, (c, counts[c], runs * p)


def test_em_with_a_long_staircase_and_tail() -> None:
    # many tiny levels force long blocks; a few large ones force the geometric tail
    phi = np.concatenate([np.full(3000, 1e-3), np.full(2000, 1.0)])
    bits = np.zeros(phi.size, dtype=np.int64)
    bits[::2] = 1
    estimates = [pdp_exponential_count(bits, phi, rng=_rng(s)).estimate for s in range(5)]
    assert all(0 <= e <= phi.size for e in estimates)


# ---------------------------------------------------------------- Table 1 count row (Sun et al., SIGMOD 2025)

@pytest.mark.slow
def test_table1_count_methods() -> None:
    phi, bits, _ = _gaussian_setting(10**6, seed=7)
    truth = int(bits.sum())

    def median_error(method, runs: int) -> float:
        return float(np.median([abs(method(s) - truth) / truth for s in range(runs)]))

    sampling = median_error(lambda s: sampling_count(bits, phi, rng=_rng(s)).estimate, 9)
    naive = median_error(lambda s: naive_count(bits, phi, rng=_rng(s)).estimate, 9)
    pdp = median_error(lambda s: pdp_count(bits, phi, rng=_rng(s)).estimate, 9)
    em = median_error(lambda s: pdp_exponential_count(bits, phi, rng=_rng(s)).estimate, 5)
    with_sampling = median_error(lambda s: pdp_count_with_sampling(bits, phi, rng=_rng(s)).estimate, 5)
    assert abs(sampling - 0.16) < 0.01  # Table 1 of Sun et al.: 16.0%
    assert pdp < naive
    assert pdp < 0.015 and em < 0.01 and with_sampling < 0.015


@pytest.mark.slow
def test_table1_sum_methods() -> None:
    phi, _, values = _gaussian_setting(10**6, seed=7)
    truth = int(values.sum())
    naive = naive_sum(values, phi, 10**7, rng=_rng())
    sampling = [abs(float(sampling_sum(values, phi, 10**7, rng=_rng(s)).estimate) - truth) / truth for s in range(5)]
    assert abs(float(naive.estimate) - truth) / truth > 0.99  # D5 with Φ_min: ≈ 100%
    assert naive.details["radius"] == Fraction(1, 2)
    assert 0.19 < np.median(sampling) < 0.24  # 21% with the authors' radius 2^{i−1} (Table 1: 16.0%)
