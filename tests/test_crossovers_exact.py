"""The crossover points n1, n2 and the release threshold k, decided exactly, against a 60-digit
evaluation of Theorem 1 and Definition 7 of Desfontaines, Voss, Gipson, Mandayam, PoPETs 2022
(docs/privacy/pi-opt.md, "Crossover points"), at random and edge (ε, δ)."""
from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

import mpmath
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import dpselect
from dpselect.core.params import validate_params
from dpselect.core.tables import tsgd_weights, keep_table, release_delta, tsgd_table
from dpselect.core.theory import exact_crossovers

# Closer than this to an integer, a 60-digit log term cannot decide its floor or ceil: the point
# is checked against the definitions instead (the table's first certain count, Lemma 1).
_UNDECIDED = mpmath.mpf(10) ** -45


class Reference(NamedTuple):
    n1: int | None  # None where the 60-digit value cannot decide it
    n2: int | None
    k: int | None


def _mp(x: Fraction) -> mpmath.mpf:
    return mpmath.mpf(x.numerator) / x.denominator


def _floor(x: mpmath.mpf) -> int | None:
    nearest = mpmath.nint(x)
    return None if abs(x - nearest) < _UNDECIDED else int(mpmath.floor(x))


def reference(eps: Fraction, delta: Fraction) -> Reference:
    """Theorem 1's n1 and n2 and Definition 7's k, in 60-digit arithmetic, at the exact rationals
    the parameters denote."""
    with mpmath.workdps(60):
        e, d = _mp(eps), _mp(delta)
        y = mpmath.exp(e)
        t = mpmath.log((y + 2 * d - 1) / ((y + 1) * d)) / e
        floor_t = _floor(t)
        if floor_t is None:
            return Reference(None, None, None)
        n1 = 1 + floor_t
        pi_n1 = d * mpmath.expm1(n1 * e) / mpmath.expm1(e)
        u = mpmath.log(1 + mpmath.expm1(e) / d * (1 - pi_n1)) / e
        floor_u = _floor(u)
        return Reference(n1, None if floor_u is None else n1 + floor_u, floor_t + 1)


def _exact(epsilon: float, delta: float) -> tuple[Fraction, Fraction]:
    params = validate_params(epsilon, delta)
    return params.partition_epsilon, params.partition_delta


# The audit's two points (each gave n1 = k = 2): a log term of 1 − 4.9e-17, and a plain one of
# 0.499 at δ = 1/2. Then the paper's parameter sets and the extremes of each parameter.
EDGES = [
    (float(math.log(3)), 0.2), (0.01, 0.5), (float(math.log(2)), 0.1), (1.0, 0.5), (3.0, 0.5), (1.0, 1e-5),
    (0.1, 1e-10), (0.5, 0.02), (1e-20, 0.02), (1e-3, 0.3), (40.0, 1e-12), (199.0, 1e-5), (300.0, 0.3),
    (5000.0, 1e-5), (2.0, 0.999999), (0.3, 0.9), (10.0, 1e-40), (1.0, 2.0**-140), (float(math.log(5)), 0.25),
]


@pytest.mark.parametrize("epsilon,delta", EDGES)
def test_exact_crossovers_match_the_60_digit_formula_at_edges(epsilon, delta):
    eps, d = _exact(epsilon, delta)
    ref = reference(eps, d)
    n1, n2 = exact_crossovers(eps, d)
    assert ref.n1 is not None and ref.k is not None
    assert n1 == ref.n1 == ref.k  # k = ceil(t) = 1 + floor(t): t is never an integer for ε > 0
    if ref.n2 is not None:
        assert n2 == ref.n2


def _assert_release_threshold(k: int, definition_7: int, eps: Fraction, delta: Fraction) -> None:
    """k is Definition 7's threshold, or the smallest larger one whose 64-bit quantized noise
    certifies δ' (the exact δ of the quantized release at Definition 7's k is above δ')."""
    assert definition_7 <= k <= definition_7 + 1
    if k > definition_7:
        weights, total = tsgd_weights(eps, definition_7)
        assert release_delta(weights, total, definition_7, eps) > delta


@pytest.mark.parametrize("epsilon,delta,expected", [
    (float(math.log(3)), 0.2, (1, 2, 1, 3)),
    (0.01, 0.5, (1, 1, 1, 2)),
])
def test_public_crossovers_at_the_audit_points(epsilon, delta, expected):
    """Both gave n1 = k = 2: a dict literal merged the test polynomial's y^1 terms at m = 1."""
    assert tuple(dpselect.crossovers(epsilon, delta)) == expected
    release = dpselect.make_strategy("release", epsilon=epsilon, delta=delta)
    assert release.k == expected[2]


def test_delta_one_half_n2_is_the_last_count_below_one():
    """At δ' = 1/2, n1 = 1 and Theorem 1's second log term is exactly 1 in the reals: n2 is
    decided by its definition (π(1) = 1/2 < 1 = π(2)), the table's first certain count."""
    for epsilon in (0.01, 0.5, 1.0, 7.0):
        eps, d = _exact(epsilon, 0.5)
        assert exact_crossovers(eps, d) == (1, 1)
        table = keep_table(validate_params(epsilon, 0.5))
        assert table.exact_probability(1) < 1 == table.exact_probability(2)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.floats(min_value=1e-4, max_value=1e3), st.floats(min_value=1e-40, max_value=0.999999))
@example(float(math.log(3)), 0.2)
@example(0.01, 0.5)
def test_exact_crossovers_match_the_60_digit_formula(epsilon, delta):
    eps, d = _exact(epsilon, delta)
    ref = reference(eps, d)
    n1, n2 = exact_crossovers(eps, d)
    if ref.n1 is not None:
        assert n1 == ref.n1 == ref.k
    if ref.n2 is not None:
        assert n2 == ref.n2


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.floats(min_value=0.05, max_value=300.0), st.floats(min_value=1e-15, max_value=0.99))
@example(float(math.log(3)), 0.2)
@example(0.01, 0.5)
def test_public_crossovers_match_the_60_digit_formula(epsilon, delta):
    """dpselect.crossovers: n1, n2 and k of the formula; the release really runs at k; the table
    keeps surely from n2 + 1 (or n2 + 2, within its rounding of 1 − δ')."""
    c = dpselect.crossovers(epsilon, delta)
    eps, d = _exact(epsilon, delta)
    ref = reference(eps, d)
    if ref.n1 is not None:
        assert c.n1 == ref.n1
        _assert_release_threshold(c.k, ref.k, eps, d)
    if ref.n2 is not None:
        assert c.n2 == ref.n2
    params = validate_params(epsilon, delta)
    assert tsgd_table(params).k == c.k
    table = keep_table(params)
    assert c.table_length in (c.n2 + 1, c.n2 + 2)
    assert table.exact_probability(c.n2) < 1 == table.exact_probability(c.table_length)
