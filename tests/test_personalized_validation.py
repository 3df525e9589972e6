"""Input validation of every personalized-DP entry point: nothing wraps, overflows or slips through.

Regressions: ``pdp_sum_signed`` cast values to int64 before checking them, so |values| >= 2**63
wrapped (a uint64 2**63 became -2**63, whose absolute value is negative) and was summed as 0
or -1; it accepted ``beta=1.5``; object arrays of Python ints were refused with a TypeError that
did not say what was wrong; subnormal or float-range-spanning privacy levels crashed with
OverflowError deep inside; a join user's total of 2**53 + 1 passed a bound of 2**53.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpselect.personalized import (
    naive_count,
    naive_sum,
    pdp_count,
    pdp_count_with_sampling,
    pdp_exponential_count,
    pdp_join_sum,
    pdp_sum,
    pdp_sum_signed,
    sampling_count,
    sampling_sum,
)
from dpselect.personalized.params import exact_floor_scaled, exact_value, smallest_float_above
from dpselect.personalized.selection import shift_for
from dpselect.testing import InsecureDeterministicRNG


pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")


def _rng(seed: int = 1) -> InsecureDeterministicRNG:
    return InsecureDeterministicRNG(seed=seed, stream=0)


HUGE_VALUES = [
    pytest.param(np.array([2**63, 1], dtype=np.uint64), id="uint64-2^63"),
    pytest.param(np.array([2**64 - 1, 1], dtype=np.uint64), id="uint64-max"),
    pytest.param([2**63, 1], id="list-2^63"),
    pytest.param([2**70, 1], id="python-int-2^70"),
    pytest.param(np.array([2**100, 1], dtype=object), id="object-2^100"),
    pytest.param([1e19, 1], id="float-1e19"),
]


@pytest.mark.parametrize("values", HUGE_VALUES)
def test_signed_sum_refuses_values_beyond_the_bound_before_any_cast(values) -> None:
    with pytest.raises(ValueError, match=r"values must lie in \[-bound, bound\]"):
        pdp_sum_signed(values, [1.0, 1.0], 10, rng=_rng())


@pytest.mark.parametrize(
    "values", [np.array([-(2**63), 1]), [-(2**70), 1], [-1e19, 1], np.array([-(2**100), 1], dtype=object)]
)
def test_signed_sum_refuses_large_negative_values(values) -> None:
    with pytest.raises(ValueError, match="values must lie in"):
        pdp_sum_signed(values, [1.0, 1.0], 10, rng=_rng())


def test_signed_sum_accepts_values_exactly_at_the_bound() -> None:
    result = pdp_sum_signed(np.array([-10, 10, 3], dtype=object), [1.0, 1.0, 1.0], 10, rng=_rng())
    assert result.privacy.verify()


@pytest.mark.parametrize("beta", [1.5, 1.0, 0.0, -0.1, math.nan, math.inf])
def test_signed_sum_validates_beta(beta: float) -> None:
    with pytest.raises(ValueError, match="beta"):
        pdp_sum_signed([1, -1], [1.0, 1.0], 10, beta=beta, rng=_rng())


def _join(values, phi, bound, **kwargs):
    pytest.importorskip("scipy")
    n = len(values)
    return pdp_join_sum(values, (np.arange(n), np.arange(n) % len(phi)), phi, bound, **kwargs)


BETA_ENTRY_POINTS = {
    "pdp_sum": lambda beta: pdp_sum([1, 2], [1.0, 2.0], 4, beta=beta, rng=_rng()),
    "pdp_sum_signed": lambda beta: pdp_sum_signed([1, -2], [1.0, 2.0], 4, beta=beta, rng=_rng()),
    "pdp_count": lambda beta: pdp_count([1, 0], [1.0, 2.0], beta=beta, rng=_rng()),
    "pdp_count_with_sampling": lambda beta: pdp_count_with_sampling([1, 0], [1.0, 2.0], beta=beta, rng=_rng()),
    "naive_sum": lambda beta: naive_sum([1, 2], [1.0, 2.0], 4, beta=beta, rng=_rng()),
    "sampling_sum": lambda beta: sampling_sum([1, 2], [1.0, 2.0], 4, beta=beta, rng=_rng()),
    "pdp_join_sum": lambda beta: _join([1, 2], [1.0, 2.0], 4, beta=beta, rng=_rng()),
}


@pytest.mark.parametrize("name", sorted(BETA_ENTRY_POINTS))
@pytest.mark.parametrize("beta", [1.5, 0.0, math.nan])
def test_every_entry_point_validates_beta(name: str, beta: float) -> None:
    with pytest.raises(ValueError, match="beta"):
        BETA_ENTRY_POINTS[name](beta)


VALUE_ENTRY_POINTS = {
    "pdp_sum": ("values", lambda v: pdp_sum(v, [1.0, 2.0], 4, rng=_rng())),
    "pdp_sum_signed": ("values", lambda v: pdp_sum_signed(v, [1.0, 2.0], 4, rng=_rng())),
    "naive_sum": ("values", lambda v: naive_sum(v, [1.0, 2.0], 4, rng=_rng())),
    "sampling_sum": ("values", lambda v: sampling_sum(v, [1.0, 2.0], 4, rng=_rng())),
    "pdp_count": ("bits", lambda v: pdp_count(v, [1.0, 2.0], rng=_rng())),
    "naive_count": ("bits", lambda v: naive_count(v, [1.0, 2.0], rng=_rng())),
    "sampling_count": ("bits", lambda v: sampling_count(v, [1.0, 2.0], rng=_rng())),
    "pdp_count_with_sampling": ("bits", lambda v: pdp_count_with_sampling(v, [1.0, 2.0], rng=_rng())),
    "pdp_exponential_count": ("bits", lambda v: pdp_exponential_count(v, [1.0, 2.0], rng=_rng())),
    "pdp_join_sum": ("record_values", lambda v: _join(v, [1.0, 2.0], 4, rng=_rng())),
}


@pytest.mark.parametrize("name", sorted(VALUE_ENTRY_POINTS))
@pytest.mark.parametrize(
    "values",
    [
        np.array([2**63, 1], dtype=np.uint64),
        np.array([2**100, 1], dtype=object),
        [2**70, 1],
        [1e19, 1],
        np.array([-(2**63), 1]),
    ],
    ids=["uint64-2^63", "object-2^100", "python-int-2^70", "float-1e19", "int64-min"],
)
def test_every_entry_point_refuses_huge_values_naming_them(name: str, values) -> None:
    parameter, call = VALUE_ENTRY_POINTS[name]
    with pytest.raises(ValueError, match=f"{parameter} must lie in"):
        call(values)


@pytest.mark.parametrize("name", sorted(VALUE_ENTRY_POINTS))
def test_object_arrays_of_small_integers_are_data(name: str) -> None:
    _, call = VALUE_ENTRY_POINTS[name]
    result = call(np.array([1, 0], dtype=object))
    assert result.privacy.verify()


def test_object_arrays_of_non_integers_are_a_type_error() -> None:
    with pytest.raises(TypeError, match="values must hold integers"):
        pdp_sum(np.array([1, None], dtype=object), [1.0, 1.0], 4, rng=_rng())
    with pytest.raises(TypeError, match="values must hold integers"):
        pdp_sum(np.array([1, 0.5], dtype=object), [1.0, 1.0], 4, rng=_rng())


@pytest.mark.parametrize("bound", [2**63, np.uint64(2**64 - 1), 2**53 + 1, 1e300, 0, -(2**63)])
def test_bounds_beyond_2_pow_53_are_refused(bound) -> None:
    with pytest.raises(ValueError, match="bound must be in"):
        pdp_sum([1, 2], [1.0, 1.0], bound, rng=_rng())
    with pytest.raises(ValueError, match="bound must be in"):
        pdp_sum_signed([1, -2], [1.0, 1.0], bound, rng=_rng())


@pytest.mark.parametrize("phi", [[1e-320, 1.0], [5e-324, 5e-324], [2.2250738585072009e-308, 1.0]])
def test_subnormal_privacy_levels_are_refused(phi: list[float]) -> None:
    # The shortest decimal of a subnormal float (the level that is charged) can differ from its
    # binary value by percents, so float truncation levels could exceed what is charged.
    for call in (
        lambda: pdp_sum([1, 2], phi, 4, rng=_rng()),
        lambda: pdp_count([1, 0], phi, rng=_rng()),
        lambda: pdp_sum_signed([1, -2], phi, 4, rng=_rng()),
    ):
        with pytest.raises(ValueError, match="phi must be >= 2.2250738585072014e-308"):
            call()


@pytest.mark.parametrize("phi", [[1.0, math.nan], [1.0, math.inf], [1.0, 0.0], [1.0, -1.0]])
def test_non_finite_or_non_positive_levels_are_refused(phi: list[float]) -> None:
    with pytest.raises(ValueError, match="phi must be"):
        pdp_sum_signed([1, -2], phi, 4, rng=_rng())


@pytest.mark.parametrize(
    "phi",
    [pytest.param([sys.float_info.min, 1.0], marks=pytest.mark.slow),
     pytest.param([1e-300, sys.float_info.max], marks=pytest.mark.slow),
     [sys.float_info.max] * 2, [sys.float_info.min] * 2],
)
def test_levels_spanning_the_float_range_run_and_are_accounted_exactly(phi: list[float]) -> None:
    # Used to raise OverflowError: float(2**i / phi_max) and float(k_i) beyond the float range.
    for result in (
        pdp_count([1, 1], phi, rng=_rng()),
        pdp_sum([3, 1], phi, 2**53, rng=_rng()),
        pdp_count_with_sampling([1, 1], phi, rng=_rng()),
    ):
        assert result.privacy.verify()
        assert all(shift >= 0 for shift in result.shifts)


def test_sampling_threshold_default_mean_does_not_overflow() -> None:
    result = sampling_count([1, 1], [sys.float_info.max, sys.float_info.max], rng=_rng())
    assert result.details["threshold"] == exact_value(sys.float_info.max)
    for threshold in (math.inf, math.nan, 1e-320, 0.0, -1.0):
        with pytest.raises(ValueError, match="threshold"):
            sampling_count([1, 1], [1.0, 2.0], threshold=threshold, rng=_rng())
    with pytest.raises(TypeError, match="threshold"):
        sampling_count([1, 1], [1.0, 2.0], threshold="1", rng=_rng())


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    phi=st.lists(
        st.floats(min_value=sys.float_info.min, max_value=sys.float_info.max, allow_nan=False, allow_infinity=False),
        min_size=1,
        max_size=8,
    ),
    exponent=st.integers(-1200, 1200),
    numerator=st.integers(1, 2**60),
    cap=st.integers(0, 2**53),
)
def test_exact_floor_scaled_for_any_scale(phi: list[float], exponent: int, numerator: int, cap: int) -> None:
    scale = Fraction(numerator) * Fraction(2) ** exponent
    got = exact_floor_scaled(np.array(phi), scale, cap)
    assert got.tolist() == [min(cap, math.floor(scale * exact_value(x))) for x in phi]


def test_smallest_float_above_the_float_range_is_infinity() -> None:
    assert smallest_float_above(exact_value(sys.float_info.max)) == math.inf
    assert smallest_float_above(Fraction(10) ** 400) == math.inf
    below = exact_value(sys.float_info.max) - 1
    assert smallest_float_above(below) == sys.float_info.max


def test_shift_for_noise_scales_beyond_the_float_range() -> None:
    scale = Fraction(2**1100, 3)
    shift = shift_for(scale, 10.0)
    assert shift == math.ceil(scale * Fraction(math.log(10.0)))
    assert shift_for(Fraction(40), 40.0) == math.ceil(40 * math.log(40.0))


def test_join_total_contribution_just_above_2_pow_53_is_refused() -> None:
    pytest.importorskip("scipy")
    values = np.array([2**53, 1], dtype=np.int64)
    owners = (np.array([0, 1]), np.array([0, 0]))  # both records belong to user 0: 2**53 + 1
    with pytest.raises(ValueError, match="total contribution"):
        pdp_join_sum(values, owners, [1.0, 1.0], 2**53, rng=_rng())


def test_join_explicit_zero_in_a_sparse_incidence_is_not_ownership() -> None:
    sparse = pytest.importorskip("scipy.sparse")
    from dpselect.personalized.join import make_incidence

    matrix = sparse.csr_matrix((np.array([1.0, 0.0, 1.0]), (np.array([0, 0, 1]), np.array([0, 1, 1]))), shape=(2, 2))
    incidence = make_incidence([3, 4], matrix, 2, 10)
    assert incidence.contributions.tolist() == [3, 4]


def test_join_record_indices_must_be_integers_in_range() -> None:
    pytest.importorskip("scipy")
    with pytest.raises(ValueError, match="user_index out of range"):
        pdp_join_sum([1, 2], (np.array([0, 1]), np.array([0, 2**64 - 1], dtype=np.uint64)), [1.0, 1.0], 4, rng=_rng())
    with pytest.raises(ValueError, match="integer arrays"):
        pdp_join_sum([1, 2], (np.array([0, 1.5]), np.array([0, 1])), [1.0, 1.0], 4, rng=_rng())
