"""Certified tables: the keep table against pi_opt (closed form, float recurrence, 60-digit
reference), the exact verifier on a grid with negative controls, and the TSGD release's δ."""
from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from dpselect.core.params import validate_params
from dpselect.core.tables import (
    CertificationError,
    keep_table,
    release_delta,
    release_delta_bruteforce,
    tsgd_table,
    tsgd_weights,
    verify_keep_table,
)
from dpselect.core.theory import exact_crossovers, pi_opt_closed_form, pi_opt_crossovers
from dpselect.core.verify import exp_lower_by_squaring

mpmath.mp.dps = 60

# Test vectors of the paper's Theorem 1 (Desfontaines et al., PoPETs 2022), recomputed with the
# 60-digit recurrence `pi_reference` below: ε, δ, n1, n2, k, first n with pi = 1, pi(n1)
VECTORS = [
    (1, 1e-5, 11, 22, 11, 23, 0.348448),
    (0.1, 1e-10, 201, 401, 201, 402, 0.509828),
    (0.5, 1e-5, 21, 41, 21, 42, 0.559786),
    (2, 1e-3, 4, 8, 4, 9, 0.466416),
    (5, 1e-10, 5, 10, 5, 11, 0.0488456),
    (0.5, 0.02, 6, 11, 6, 12, 0.58840484458),
]
PAIRS = [(v[0], v[1]) for v in VECTORS]


def pi_reference(eps: float, delta: float, n_max: int) -> list[mpmath.mpf]:
    """The defining recurrence (Lemma 1) in 60-digit arithmetic, with the decimal parameters."""
    e = mpmath.mpf(repr(eps))
    d = mpmath.mpf(repr(delta))
    pis = [mpmath.mpf(0)]
    for _ in range(n_max):
        p = pis[-1]
        pis.append(min(mpmath.exp(e) * p + d, 1 - mpmath.exp(-e) * (1 - p - d), mpmath.mpf(1)))
    return pis


@pytest.mark.parametrize("eps,delta,n1,n2,k,first_one,pi_n1", VECTORS)
def test_spec_vectors(eps, delta, n1, n2, k, first_one, pi_n1):
    cross = pi_opt_crossovers(eps, delta)
    assert (cross.n1, cross.n2, cross.k) == (n1, n2, k)
    table = keep_table(validate_params(eps, delta))
    assert table.length == first_one
    ref = pi_reference(eps, delta, first_one + 1)
    assert float(ref[n1]) == pytest.approx(pi_n1, rel=1e-5)
    assert ref[first_one] == 1 and ref[first_one - 1] < 1


@pytest.mark.parametrize("eps,delta", PAIRS)
def test_closed_form_matches_reference(eps, delta):
    n2 = pi_opt_crossovers(eps, delta).n2
    ref = pi_reference(eps, delta, n2 + 3)
    closed = pi_opt_closed_form(np.arange(n2 + 3), eps, delta)
    for n in range(n2 + 3):
        assert abs(closed[n] - float(ref[n])) <= 1e-15 * max(1.0, float(ref[n])) + 1e-15


@pytest.mark.parametrize("eps,delta", PAIRS)
def test_float_recurrence_matches_reference(eps, delta):
    n2 = pi_opt_crossovers(eps, delta).n2
    ref = pi_reference(eps, delta, n2 + 3)
    p, out = 0.0, [0.0]
    for _ in range(n2 + 2):
        p = min(math.exp(eps) * p + delta, 1 - math.exp(-eps) * (1 - p - delta), 1.0)
        out.append(p)
    # the float recurrence drifts at small ε; it must stay within 1e-13 here
    assert max(abs(a - float(b)) for a, b in zip(out, ref)) < 1e-13


@pytest.mark.parametrize("eps,delta", PAIRS)
def test_quantized_table_is_below_and_close_to_pi_opt(eps, delta):
    table = keep_table(validate_params(eps, delta))
    ref = pi_reference(eps, delta, table.length)
    for n in range(table.length):
        exact = table.exact_probability(n)
        assert exact <= Fraction(str(ref[n])) + Fraction(1, 10**40)  # never above pi_opt
        assert float(ref[n]) - float(exact) <= 1e-12 * float(ref[n])


GRID = [
    (eps, delta, kappa, split)
    for eps in (0.01, 0.1, 0.5, 1.0, 3.0, 10.0)
    for delta in (1e-12, 1e-8, 1e-5, 0.01, 0.3)
    for kappa, split in ((1, "composition"), (3, "composition"), (3, "conservative"))
    if not (eps == 0.01 and delta == 1e-12 and kappa == 3)
]


@pytest.mark.parametrize("eps,delta,kappa,split", GRID)
def test_verifier_passes_on_grid(eps, delta, kappa, split):
    params = validate_params(eps, delta, kappa, split)
    table = keep_table(params)  # construction already verifies; verify again explicitly
    slack = verify_keep_table(table.words, params.partition_epsilon, params.partition_delta)
    assert slack >= 0
    # the composition of κ partitions stays within the requested budget, exactly
    assert params.compose(params.partition_delta) <= params.delta_exact
    assert params.partition_epsilon * kappa <= params.epsilon_exact


def _bumped(table, n: int, units: int) -> np.ndarray:
    """The table's words with q[n] raised by ``units`` units of 2^-w (carrying across limbs)."""
    values = [table.numerator(i) for i in range(table.length)]
    values[n] += units
    return np.array([[(v >> (64 * (table.limbs - 1 - w))) & (2**64 - 1) for w in range(table.limbs)]
                     for v in values], dtype=np.uint64)


def test_verifier_rejects_raised_entry():
    params = validate_params(1.0, 1e-5)
    table = keep_table(params)
    with pytest.raises(CertificationError, match="n=0"):
        # two units of 2^-w above the tight first step: (1) breaks
        verify_keep_table(_bumped(table, 1, 2), params.partition_epsilon, params.partition_delta)


def test_verifier_rejects_nonzero_start_bad_order_and_bad_epsilon():
    params = validate_params(1.0, 1e-5)
    table = keep_table(params)
    with pytest.raises(CertificationError, match="q\\[0\\] = 0"):
        verify_keep_table(_bumped(table, 0, 1), params.partition_epsilon, params.partition_delta)
    with pytest.raises(CertificationError, match="non-decreasing"):
        verify_keep_table(_bumped(table, 5, -table.numerator(5) + table.numerator(3)), params.partition_epsilon,
                          params.partition_delta)
    # the same table is not DP at a smaller epsilon
    with pytest.raises(CertificationError):
        verify_keep_table(table.words, params.partition_epsilon / 2, params.partition_delta)


def test_epsilon_zero_is_linear_in_delta():
    table = keep_table(validate_params(0.0, 1e-3))
    assert table.length == 1001
    ns = np.arange(1, 1000)
    assert np.allclose(table.probabilities(ns), ns * 1e-3, rtol=1e-12)


def test_small_deltas_are_exact_down_to_two_to_minus_144_and_refused_below():
    table = keep_table(validate_params(1.0, 1e-20))  # refused by 64-bit tables before
    assert table.exact_probability(1) == Fraction(math.floor(Fraction(1, 10**20) * table.scale), table.scale)
    assert table.limbs == 2 and keep_table(validate_params(1.0, 1e-30)).limbs == 3
    with pytest.raises(ValueError, match="raise delta or lower max_partitions_contributed"):
        keep_table(validate_params(1.0, 1e-45))


@pytest.mark.parametrize("eps,delta", [(1.0, 1e-5), (2.0, 1e-3), (0.5, 0.02), (5.0, 1e-10), (1.0, 0.2)])
def test_release_delta_matches_bruteforce(eps, delta):
    params = validate_params(eps, delta)
    table = tsgd_table(params)
    smart = release_delta(list(table.weights), table.total, table.k, params.partition_epsilon)
    e = exp_lower_by_squaring(params.partition_epsilon)  # the bound release_delta uses
    brute = release_delta_bruteforce(list(table.weights), table.total, table.k, e, 2 * table.k + 3)
    assert smart == brute
    assert smart == table.certified_delta <= params.partition_delta


@pytest.mark.parametrize("eps,delta,kappa", [(0.1, 1e-10, 1), (1.0, 1e-9, 10), (0.3, 1e-6, 2), (3.0, 1e-4, 1)])
def test_tsgd_table_is_certified_and_geometric(eps, delta, kappa):
    params = validate_params(eps, delta, kappa)
    table = tsgd_table(params)
    assert table.k >= pi_opt_crossovers(float(params.partition_epsilon), float(params.partition_delta)).k
    assert table.certified_delta <= params.partition_delta
    assert 2**64 - 2**32 <= table.total < 2**64
    assert int(table.cumulative[-1]) == table.total
    pmf = table.pmf()
    assert sum(pmf) == 1
    # close to the real-valued TSGD where the mass is not negligible
    e = float(params.partition_epsilon)
    z = sum(math.exp(-e * abs(x)) for x in range(-table.k, table.k + 1))
    for x in range(-table.k, table.k + 1):
        real = math.exp(-e * abs(x)) / z
        if real > 2.0**-40:
            assert abs(float(pmf[x + table.k]) - real) <= 1e-5 * real


def test_release_delta_detects_broken_weights():
    params = validate_params(1.0, 1e-5)
    table = tsgd_table(params)
    weights = list(table.weights)
    weights[3] = weights[2]  # a flat step: fine for the ratio, but then W(4) vs W(3) breaks e^eps
    weights[4] = weights[3] // 4
    with pytest.raises(CertificationError):
        release_delta(weights, sum(weights) * 2 - weights[0], table.k, params.partition_epsilon)


def _tsgd_weights_by_full_bisection(eps: Fraction, k: int) -> tuple[list[int], int]:
    """The reference: bisect all 64 bits of W(0) (what the builder did before it bracketed the
    answer from a float estimate)."""
    from dpselect.core.tables import _TSGD_BITS, _builder_exp_lower
    from dpselect.core.exact import ceil_div

    b_num = ceil_div(1 << (2 * _TSGD_BITS), _builder_exp_lower(eps, _TSGD_BITS))

    def weights_for(w0: int) -> tuple[list[int], int]:
        w = [w0]
        for _ in range(k):
            w.append(ceil_div(b_num * w[-1], 1 << _TSGD_BITS))
        return w, w[0] + 2 * sum(w[1:])

    lo, hi = 1, 2**64
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if weights_for(mid)[1] <= 2**64 - 1 else (lo, mid)
    return weights_for(lo)


@pytest.mark.parametrize("eps, k", [(Fraction(1, 1000), 3000), (Fraction(1, 10), 1), (Fraction(1, 10), 250),
                                    (Fraction(1, 2), 40), (Fraction(3), 5), (Fraction(20), 2), (Fraction(7, 3), 0)])
def test_tsgd_weights_are_the_largest_that_fit_64_bits(eps, k):
    """The bracketing search finds the same W(0), hence the same table, as bisecting every bit."""
    assert tsgd_weights(eps, k) == _tsgd_weights_by_full_bisection(eps, k)


@pytest.mark.parametrize("eps, delta, kappa", [(0.005, 1e-12, 10), (0.03, 1e-9, 10), (1.0, 1e-5, 1), (0.1, 1e-10, 3)])
def test_the_release_table_is_the_shortest_that_certifies(eps, delta, kappa):
    """The builder gallops and bisects over k (from n1 of Theorem 1 up): the k it picks certifies,
    and k − 1 either does not or is below n1, so the threshold is as low as a certified table allows."""
    params = validate_params(eps, delta, max_partitions_contributed=kappa)
    table = tsgd_table(params)
    e, d = params.partition_epsilon, params.partition_delta
    assert table.certified_delta <= d
    n1 = exact_crossovers(e, d)[0]
    assert table.k >= n1
    if table.k > n1:
        shorter, total = tsgd_weights(e, table.k - 1)
        assert release_delta(shorter, total, table.k - 1, e) > d


def test_release_delta_grows_when_tail_is_inflated():
    params = validate_params(1.0, 1e-5)
    table = tsgd_table(params)
    weights = list(table.weights)
    bigger_tail = weights[:-1] + [weights[-2] // 2]  # much more mass on the edge x = ±k
    total = bigger_tail[0] + 2 * sum(bigger_tail[1:])
    assert release_delta(bigger_tail, total, table.k, params.partition_epsilon) > table.certified_delta
