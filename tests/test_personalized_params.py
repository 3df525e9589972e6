"""Validation and exact arithmetic helpers of dpselect.personalized (docs/privacy/personalized.md, "Model")."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpselect.personalized.params import (
    doubling_steps,
    exact_floor_scaled,
    exact_value,
    smallest_float_above,
    validate_input,
)

positive_floats = st.floats(min_value=1e-6, max_value=1e3, allow_nan=False, allow_infinity=False)


def test_exact_value_is_the_typed_decimal() -> None:
    assert exact_value(0.1) == Fraction(1, 10)
    assert exact_value(2.5) == Fraction(5, 2)
    assert exact_value(1e-4) == Fraction(1, 10000)


@settings(deadline=None)
@given(positive_floats, positive_floats)
def test_exact_value_preserves_order(a: float, b: float) -> None:
    assert (a < b) == (exact_value(a) < exact_value(b))


@settings(deadline=None)
@given(st.fractions(min_value=Fraction(1, 10**6), max_value=Fraction(10**4)))
def test_smallest_float_above_matches_exact_comparison(k: Fraction) -> None:
    f = smallest_float_above(k)
    assert exact_value(f) > k
    assert exact_value(math.nextafter(f, -math.inf)) <= k


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    st.lists(positive_floats, min_size=1, max_size=20),
    st.fractions(min_value=Fraction(1, 1000), max_value=Fraction(10**5)),
    st.integers(min_value=0, max_value=10**6),
)
def test_exact_floor_scaled_equals_fraction_floor(phi: list[float], scale: Fraction, cap: int) -> None:
    array = np.array(phi)
    got = exact_floor_scaled(array, scale, cap)
    want = [min(cap, math.floor(scale * exact_value(x))) for x in phi]
    assert got.tolist() == want


def test_exact_floor_scaled_on_exact_integers() -> None:
    # 0.1 * 30 is exactly 3 in decimal semantics although 0.1*30.0 in float is 3.0000000000000004
    phi = np.array([0.1, 0.3, 0.7])
    assert exact_floor_scaled(phi, Fraction(30), 100).tolist() == [3, 9, 21]
    # 0.29 * 100 is exactly 29, while the float product is 28.999999999999996
    assert exact_floor_scaled(np.array([0.29]), Fraction(100), 1000).tolist() == [29]


def test_doubling_steps() -> None:
    assert doubling_steps(Fraction(1)) == 1
    assert doubling_steps(Fraction(2)) == 1
    assert doubling_steps(Fraction(16)) == 4
    assert doubling_steps(Fraction(17)) == 5
    assert doubling_steps(Fraction(5, 4)) == 1


@pytest.mark.parametrize(
    "values, phi, bound, beta, error, match",
    [
        ([1, 2], [0.5, -1.0], 4, 0.1, ValueError, "phi must be > 0"),
        ([1, 2], [0.5, np.nan], 4, 0.1, ValueError, "phi must be finite"),
        ([1, 2], [0.5, np.inf], 4, 0.1, ValueError, "phi must be finite"),
        ([1, 2], [0.5], 4, 0.1, ValueError, "same shape"),
        ([1, 5], [0.5, 1.0], 4, 0.1, ValueError, "values must lie in"),
        ([1, -1], [0.5, 1.0], 4, 0.1, ValueError, "values must lie in"),
        ([1, 1.5], [0.5, 1.0], 4, 0.1, ValueError, "values must be integers"),
        ([1, 2], [0.5, 1.0], 0, 0.1, ValueError, "bound"),
        ([1, 2], [0.5, 1.0], 2.5, 0.1, TypeError, "bound"),
        ([1, 2], [0.5, 1.0], 4, 0.0, ValueError, "beta"),
        ([1, 2], [0.5, 1.0], 4, 1.0, ValueError, "beta"),
        ([1, 2], [0.5, 1.0], 4, "x", TypeError, "beta"),
        ([["a"]], [0.5], 4, 0.1, TypeError, "values"),
        ([], [], 4, 0.1, ValueError, "at least one user"),
        ([[1, 2]], [[0.5, 1.0]], 4, 0.1, ValueError, "1-D"),
    ],
)
def test_bad_input_is_rejected_with_a_named_reason(values, phi, bound, beta, error, match) -> None:
    with pytest.raises(error, match=match):
        validate_input(values, phi, bound, beta)


def test_validation_copies_and_never_mutates() -> None:
    values = np.array([1, 2, 3])
    phi = np.array([0.5, 1.0, 2.0])
    data = validate_input(values, phi, 3, 0.1)
    values[0] = 0
    phi[0] = 9.0
    assert data.values[0] == 1 and data.phi[0] == 0.5
    assert not data.values.flags.writeable and not data.phi.flags.writeable
    assert data.phi_min == Fraction(1, 2) and data.phi_max == 2
