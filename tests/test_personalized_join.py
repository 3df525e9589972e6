"""User-level PDP for join results with LP truncation (Algorithm C; docs/privacy/personalized.md)."""
from __future__ import annotations

import math

import numpy as np
import pytest

scipy = pytest.importorskip("scipy")
from dpselect.testing import InsecureDeterministicRNG
from scipy.optimize import linprog

from dpselect.personalized import pdp_join_sum
from dpselect.personalized.join import lp_truncated_sum, make_incidence
from dpselect.personalized.params import exact_floor_scaled, exact_value

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")


def _rng(seed: int = 1) -> InsecureDeterministicRNG:
    return InsecureDeterministicRNG(seed=seed, stream=0)


def _random_join(gen: np.random.Generator, n_users: int, n_records: int, max_owners: int, max_value: int):
    rows, cols = [], []
    for r in range(n_records):
        owners = gen.choice(n_users, size=int(gen.integers(1, min(max_owners, n_users) + 1)), replace=False)
        rows += [r] * owners.size
        cols += owners.tolist()
    return gen.integers(0, max_value + 1, n_records), np.array(rows), np.array(cols)


def _reference_lp(values, rows, cols, n_users, tau) -> float:
    n_records = values.size
    a = np.zeros((n_users, n_records))
    a[cols, rows] = 1
    res = linprog(-np.ones(n_records), A_ub=a, b_ub=tau, bounds=list(zip([0] * n_records, values)), method="highs")
    return -res.fun


def test_star_example_is_truncated_to_tau() -> None:
    """Per-record clipping misses the star; the LP caps the centre at τ = 1."""
    n = 8
    rows = np.concatenate([np.arange(n - 1), np.arange(n - 1)])
    cols = np.concatenate([np.zeros(n - 1, dtype=int), np.arange(1, n)])
    incidence = make_incidence(np.ones(n - 1, dtype=int), (rows, cols), n, 100)
    assert lp_truncated_sum(incidence, np.ones(n, dtype=int)) == 1
    # removing the centre drops the value by at most τ(centre) = 1
    removed = make_incidence(np.zeros(n - 1, dtype=int), (rows, cols), n, 100)
    assert lp_truncated_sum(removed, np.ones(n, dtype=int)) == 0
    assert lp_truncated_sum(incidence, np.full(n, n)) == n - 1  # τ covers everyone: the sum


@pytest.mark.slow
def test_lp_value_is_the_exact_floor_and_neighbours_move_by_at_most_tau() -> None:
    gen = np.random.Generator(np.random.PCG64(1))
    checked = 0
    for _ in range(60):
        n_users = int(gen.integers(2, 8))
        values, rows, cols = _random_join(gen, n_users, int(gen.integers(1, 10)), 3, 4)
        incidence = make_incidence(values, (rows, cols), n_users, 50)
        tau = gen.integers(0, 6, n_users)
        q = lp_truncated_sum(incidence, tau)
        reference = _reference_lp(values, rows, cols, n_users, tau)
        assert q == math.floor(reference + 1e-7)
        for u in range(n_users):
            owned = np.isin(np.arange(values.size), rows[cols == u])
            without = make_incidence(np.where(owned, 0, values), (rows, cols), n_users, 50)
            drop = q - lp_truncated_sum(without, tau)
            assert 0 <= drop <= tau[u]
            checked += 1
    assert checked > 100


def test_fractional_lp_optimum_is_floored_exactly() -> None:
    # a triangle of pair records with τ = 1: the LP optimum is 3/2 (x = 1/2 each)
    rows = np.array([0, 0, 1, 1, 2, 2])
    cols = np.array([0, 1, 1, 2, 2, 0])
    incidence = make_incidence(np.ones(3, dtype=int), (rows, cols), 3, 10)
    assert lp_truncated_sum(incidence, np.ones(3, dtype=int)) == 1


def test_sparse_matrix_input_matches_pairs() -> None:
    gen = np.random.Generator(np.random.PCG64(3))
    values, rows, cols = _random_join(gen, 6, 12, 3, 5)
    matrix = scipy.sparse.coo_matrix((np.ones(rows.size), (rows, cols)), shape=(12, 6))
    tau = gen.integers(0, 8, 6)
    a = lp_truncated_sum(make_incidence(values, matrix, 6, 100), tau)
    b = lp_truncated_sum(make_incidence(values, (rows, cols), 6, 100), tau)
    assert a == b


def test_join_privacy_accounting_is_exact() -> None:
    gen = np.random.Generator(np.random.PCG64(4))
    values, rows, cols = _random_join(gen, 10, 20, 2, 5)
    phi = gen.uniform(0.05, 2.0, 10)
    result = pdp_join_sum(values, (rows, cols), phi, 50, rng=_rng())
    assert result.privacy.verify()
    assert result.details["L"] == result.details["t"] + 1
    for u in range(10):
        assert result.privacy.accounted_loss(u) <= exact_value(phi[u])


@pytest.mark.slow
def test_join_estimate_is_within_the_derived_bound() -> None:
    """Derived bound: w.p. ≥ 1 − β, 0 ≤ Sum − est ≤ min_i [Sum − ⌊Q(I, τ_i)⌋ + 2·shift_i].

    Each run solves one LP per candidate τ_i (20 here): 2000 records of two owners keep that to
    seconds while the bound stays below the sum (about 0.88 of it) and each estimate below it."""
    gen = np.random.Generator(np.random.PCG64(5))
    n_users, n_records = 1000, 2000
    rows = np.repeat(np.arange(n_records), 2)
    cols = np.stack([gen.integers(0, 500, n_records), gen.integers(500, 1000, n_records)], axis=1).ravel()
    values = gen.integers(0, 101, n_records)
    phi = np.clip(gen.normal(1.0, 0.3, n_users), 0.01, None)
    truth = int(values.sum())
    incidence = make_incidence(values, (rows, cols), n_users, 10**4)
    first = pdp_join_sum(values, (rows, cols), phi, 10**4, beta=0.01, rng=_rng(0))
    candidates = [
        lp_truncated_sum(incidence, exact_floor_scaled(phi, s, 10**4)) for s in first.parameters
    ]
    assert candidates[-1] == truth  # τ_t covers every user: the LP is the plain sum
    assert candidates == sorted(candidates)
    bound = min(truth - q + 2 * shift for q, shift in zip(candidates, first.shifts))
    assert bound < truth  # the search beats releasing 0
    for seed in range(4):
        result = first if seed == 0 else pdp_join_sum(values, (rows, cols), phi, 10**4, beta=0.01, rng=_rng(seed))
        assert 0 <= truth - result.estimate <= bound


@pytest.mark.parametrize(
    "values, pairs, n_users, bound, error, match",
    [
        ([1, 2], (np.array([0]), np.array([0])), 2, 10, ValueError, "at least one user"),
        ([1, 20], (np.array([0, 1]), np.array([0, 1])), 2, 10, ValueError, "record_values must lie"),
        ([6, 6], (np.array([0, 1]), np.array([0, 0])), 2, 10, ValueError, "total contribution"),
        ([1, 2], (np.array([0, 1]), np.array([0, 5])), 2, 10, ValueError, "user_index out of range"),
        ([1, 2], "nope", 2, 10, TypeError, "record_users"),
        ([1.5, 2], (np.array([0, 1]), np.array([0, 1])), 2, 10, ValueError, "integers"),
    ],
)
def test_bad_join_input(values, pairs, n_users, bound, error, match) -> None:
    with pytest.raises(error, match=match):
        pdp_join_sum(np.array(values), pairs, np.ones(n_users), bound, rng=_rng())
