"""PDP count (Algorithm A) and PDP sum (Algorithm B) of Sun, Dong, Qiu, Yi (SIGMOD 2025);
statements and proofs in docs/privacy/personalized.md."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from dpselect.testing import InsecureDeterministicRNG
from hypothesis import given, settings
from hypothesis import strategies as st

from dpselect.personalized import pdp_count, pdp_sum, pdp_sum_signed
from dpselect.personalized.count import count_candidates, count_thresholds
from dpselect.personalized.params import exact_value
from dpselect.personalized.selection import shift_for
from dpselect.personalized.sum import sum_candidates, sum_scales, truncation_loss

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")


def _rng(seed: int = 1) -> InsecureDeterministicRNG:
    return InsecureDeterministicRNG(seed=seed, stream=0)


def table1_data(n_users: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Table 1 default setting: Φ ~ N(1, 0.3²) floored at 1/(10√N); 10% non-zero; sum values int(N(1000, 200²))."""
    gen = np.random.Generator(np.random.PCG64(seed))
    phi = gen.normal(1.0, 0.3, n_users)
    phi[phi < 1 / (10 * math.sqrt(n_users))] = 1 / (10 * math.sqrt(n_users))
    chosen = gen.choice(n_users, n_users // 10, replace=False)
    values = np.zeros(n_users, dtype=np.int64)
    drawn = gen.normal(1000, 200, chosen.size).astype(np.int64)
    drawn[drawn <= 0] = 1
    values[chosen] = drawn
    bits = (values > 0).astype(np.int64)
    return phi, bits, values


# ---------------------------------------------------------------- deterministic (noise injected as 0)

def test_count_candidates_match_the_hand_computed_table() -> None:
    phi = np.array([0.1, 0.2, 0.4, 0.8, 1.6])
    t, k = count_thresholds(exact_value(0.1), exact_value(1.6))
    assert t == 4
    assert k == tuple(Fraction(x) for x in ("0.1", "0.2", "0.4", "0.8", "1.6"))
    assert count_candidates(np.ones(5, dtype=np.int64), phi, k) == [4, 3, 2, 1, 0]
    scales = [Fraction(t) / x for x in k]
    assert [float(s) for s in scales] == [40, 20, 10, 5, 2.5]
    shifts = [float(s) * math.log(t / 0.1) for s in scales]
    assert [round(x, 3) for x in shifts] == [147.555, 73.778, 36.889, 18.444, 9.222]
    assert [shift_for(s, t / 0.1) for s in scales] == [math.ceil(x) for x in shifts]


def test_sum_candidates_match_the_hand_computed_table() -> None:
    phi = np.array([0.5, 1.0, 2.0])
    values = np.array([10, 3, 7])
    t, s = sum_scales(exact_value(0.5), exact_value(2.0), 16)
    assert t == 6
    assert s == tuple(Fraction(x) for x in (0.5, 1, 2, 4, 8, 16, 32))
    assert sum_candidates(values, phi, s, 16) == [1, 3, 7, 12, 14, 18, 20]
    L = t + 1
    assert [float(L * x) for x in s] == [3.5, 7, 14, 28, 56, 112, 224]
    assert [round(float(L * x) * math.log(L / 0.1), 3) for x in s] == [
        14.87, 29.739, 59.479, 118.958, 237.916, 475.831, 951.663
    ]


# ---------------------------------------------------------------- exact privacy accounting

def _count_loss_exact(phi_u: Fraction, thresholds: tuple[Fraction, ...], divisor: int) -> Fraction:
    return sum((k / divisor for k in thresholds if phi_u > k), Fraction(0))


def _sum_loss_exact(phi_u: Fraction, scales: tuple[Fraction, ...], divisor: int, bound: int) -> Fraction:
    return sum((Fraction(min(math.floor(s * phi_u), bound)) / (divisor * s) for s in scales), Fraction(0))


phi_lists = st.lists(
    st.floats(min_value=1e-4, max_value=5.0, allow_nan=False, allow_infinity=False), min_size=1, max_size=12
)


@settings(max_examples=60, deadline=None)
@given(phi_lists, st.floats(min_value=0.01, max_value=0.5))
def test_count_every_user_within_budget_exactly(phi: list[float], beta: float) -> None:
    array = np.array(phi)
    result = pdp_count(np.ones(array.size, dtype=np.int64), array, beta=beta, rng=_rng())
    t = result.details["t"]
    for u, value in enumerate(phi):
        exact = exact_value(value)
        loss = _count_loss_exact(exact, result.parameters, t)
        assert result.privacy.accounted_loss(u) == loss
        assert loss < exact  # Algorithm A with L = t passes (docs/privacy/personalized.md)
    assert result.privacy.verify()


@settings(max_examples=60, deadline=None)
@given(phi_lists, st.integers(min_value=1, max_value=10**7))
def test_sum_every_user_within_budget_exactly(phi: list[float], bound: int) -> None:
    array = np.array(phi)
    values = np.full(array.size, bound, dtype=np.int64)
    result = pdp_sum(values, array, bound, rng=_rng())
    t, divisor = result.details["t"], result.details["L"]
    assert divisor == t + 1
    for u, value in enumerate(phi):
        exact = exact_value(value)
        loss = _sum_loss_exact(exact, result.parameters, divisor, bound)
        assert result.privacy.accounted_loss(u) == loss
        assert loss <= exact
    # the noise scales are exactly (t+1)·s_i
    assert result.noise_scales == tuple(divisor * s for s in result.parameters)


def test_sum_with_L_equal_t_would_break_the_budget_when_all_phi_are_equal() -> None:
    """Regression for choosing L = t + 1: L = t overspends by 1.25× (docs/privacy/personalized.md, "pdp_sum")."""
    phi_u = Fraction(1)
    t, scales = sum_scales(phi_u, phi_u, 16)
    assert t == 4
    assert _sum_loss_exact(phi_u, scales, t, 16) / phi_u == Fraction(5, 4)
    assert truncation_loss(scales, t + 1, 16)(phi_u) <= phi_u


def test_truncation_uses_exact_decimal_levels() -> None:
    # s·Φ = (2^i/0.3)·0.3 hits integers exactly; float products land on 0.9999999999999999 etc.
    phi = np.array([0.3, 0.3, 0.6, 0.9])
    _, scales = sum_scales(exact_value(0.3), exact_value(0.9), 8)
    candidates = sum_candidates(np.full(4, 8, dtype=np.int64), phi, scales, 8)
    want = [sum(min(8, math.floor(s * exact_value(p))) for p in phi) for s in scales]
    assert candidates == want


# ---------------------------------------------------------------- truncation properties

@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 50), st.floats(1e-3, 4.0)), min_size=1, max_size=15),
)
def test_sum_candidates_are_under_estimates_and_reach_the_sum(pairs: list[tuple[int, float]]) -> None:
    values = np.array([v for v, _ in pairs], dtype=np.int64)
    phi = np.array([p for _, p in pairs])
    _, scales = sum_scales(exact_value(phi.min()), exact_value(phi.max()), 50)
    candidates = sum_candidates(values, phi, scales, 50)
    assert all(c <= int(values.sum()) for c in candidates)
    assert candidates == sorted(candidates)
    assert candidates[-1] == int(values.sum())  # τ_t covers everyone: exact sum


# ---------------------------------------------------------------- edge cases

def test_all_phi_equal_gives_t_equal_one_for_count() -> None:
    result = pdp_count(np.ones(50, dtype=np.int64), np.full(50, 0.7), rng=_rng())
    assert result.details["t"] == 1
    assert len(result.parameters) == 2
    assert result.privacy.verify()


def test_all_values_zero() -> None:
    phi = np.linspace(0.1, 2.0, 100)
    estimates = [pdp_sum(np.zeros(100, dtype=np.int64), phi, 1000, rng=_rng(s)).estimate for s in range(10)]
    assert all(e >= 0 for e in estimates)
    assert np.median(estimates) == 0


def test_bound_one_sum_behaves_like_a_count() -> None:
    gen = np.random.Generator(np.random.PCG64(4))
    phi = gen.uniform(0.5, 2.0, 20000)
    bits = (gen.uniform(size=20000) < 0.5).astype(np.int64)
    truth = int(bits.sum())
    sums = [pdp_sum(bits, phi, 1, rng=_rng(s)).estimate for s in range(9)]
    counts = [pdp_count(bits, phi, rng=_rng(s)).estimate for s in range(9)]
    assert abs(np.median(sums) - truth) / truth < 0.01
    assert abs(np.median(counts) - truth) / truth < 0.01
    # with B = 1 the scale search has exactly the count's doubling steps
    assert pdp_sum(bits, phi, 1, rng=_rng()).details["t"] == pdp_count(bits, phi, rng=_rng()).details["t"]


def test_result_fields_and_insecure_flag() -> None:
    phi = np.array([0.5, 1.0, 2.0])
    result = pdp_sum(np.array([10, 3, 7]), phi, 16, rng=_rng())
    assert result.privacy_guaranteed is False and result.privacy.privacy_guaranteed is False
    assert len(result.noisy_candidates) == len(result.parameters) == len(result.shifts) == 7
    if result.chosen_index is None:
        assert result.estimate == 0
    else:
        assert result.estimate == result.noisy_candidates[result.chosen_index] == max(result.noisy_candidates)
        assert result.chosen_parameter == result.parameters[result.chosen_index]
    assert "Algorithm B" in result.privacy.reference and "SIGMOD 2025" in result.privacy.reference
    assert "docs/privacy/personalized.md" in result.privacy.reference


def test_inputs_are_not_mutated() -> None:
    phi = np.array([0.5, 1.0, 2.0])
    values = np.array([10, 3, 7])
    before = (phi.copy(), values.copy())
    pdp_sum(values, phi, 16, rng=_rng())
    pdp_count(values.clip(0, 1), phi, rng=_rng())
    assert np.array_equal(phi, before[0]) and np.array_equal(values, before[1])


def test_rng_must_be_a_package_rng() -> None:
    with pytest.raises(TypeError):
        pdp_sum(np.array([1]), np.array([1.0]), 1, rng=np.random.default_rng(0))


def test_signed_sum_uses_half_budget_per_part() -> None:
    gen = np.random.Generator(np.random.PCG64(8))
    phi = gen.uniform(0.2, 2.0, 30)
    values = gen.integers(-20, 21, 30)
    result = pdp_sum_signed(values, phi, 20, rng=_rng())
    assert result.privacy.verify()
    for u in range(30):
        plus = result.details["positive"].privacy.accounted_loss(u)
        assert plus <= exact_value(phi[u]) / 2
    big = gen.integers(-1000, 1001, 200000)
    phi_big = gen.uniform(0.5, 2.0, 200000)
    estimates = [pdp_sum_signed(big, phi_big, 1000, rng=_rng(s)).estimate for s in range(5)]
    truth = int(big.sum())
    scale = int(np.abs(big).sum())
    assert abs(np.median(estimates) - truth) / scale < 0.02


# ---------------------------------------------------------------- statistical: medians, coverage

def _count_bound(bits: np.ndarray, phi: np.ndarray, result) -> int:
    ones = np.sort(phi[bits == 1])
    best = None
    for k, shift in zip(result.parameters, result.shifts):
        deleted = sum(1 for p in ones.tolist() if exact_value(p) <= k) if ones.size < 5000 else int(
            np.searchsorted(ones, float(k), side="right"))
        value = deleted + 2 * shift
        best = value if best is None else min(best, value)
    return best


def _sum_bound(values: np.ndarray, phi: np.ndarray, result, biases: dict | None = None) -> int:
    """``biases``: the truncation bias per candidate scale, kept between calls on the same data
    (every run has the same candidates; only their noise differs)."""
    positive = values > 0
    biases = {} if biases is None else biases
    best = None
    for s, shift in zip(result.parameters, result.shifts):
        if s not in biases:
            tau = np.floor(phi[positive] * float(s))
            biases[s] = int(np.maximum(values[positive] - tau, 0).sum())
        value = biases[s] + 2 * shift + 1  # +1: float τ may be off by one for an exact integer
        best = value if best is None else min(best, value)
    return best


@pytest.mark.slow
def test_table1_setting_medians_and_coverage() -> None:
    phi, bits, values = table1_data(10**6, seed=7)
    true_count, true_sum = int(bits.sum()), int(values.sum())
    runs = 20
    count_errors, sum_errors = [], []
    count_inside = sum_inside = 0
    biases: dict = {}
    for seed in range(runs):
        c = pdp_count(bits, phi, beta=0.1, rng=_rng(100 + seed))
        s = pdp_sum(values, phi, 10**7, beta=0.1, rng=_rng(200 + seed))
        count_errors.append(abs(c.estimate - true_count) / true_count)
        sum_errors.append(abs(s.estimate - true_sum) / true_sum)
        count_inside += 0 <= true_count - c.estimate <= _count_bound(bits, phi, c)
        sum_inside += 0 <= true_sum - s.estimate <= _sum_bound(values, phi, s, biases)
    assert np.median(count_errors) < 0.015
    assert np.median(sum_errors) < 0.02
    # failure probability ≤ β = 0.1 → at least 14 of 20 inside is a very loose binomial check
    assert count_inside >= 14 and sum_inside >= 14


def test_bad_bits_and_signed_values_name_the_parameter() -> None:
    with pytest.raises(ValueError, match="bits must lie in"):
        pdp_count(np.array([0, 2]), np.array([1.0, 1.0]), rng=_rng())
    with pytest.raises(ValueError, match=r"\[-bound, bound\]"):
        pdp_sum_signed(np.array([-5, 2]), np.array([1.0, 1.0]), 4, rng=_rng())
