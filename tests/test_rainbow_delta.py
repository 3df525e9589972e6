"""The (epsilon, delta) line: every table the closed forms return is (epsilon, delta)-DP, for every
epsilon up to the float limit and every delta in (0, 1), and it is still the optimum.

Regression: with delta > 0 and a large epsilon the small entries used to be computed as
1 - (something close to 1), which rounds to 0; ``line_probabilities([.5, .5], 36, 3, delta=0.3)``
returned the row [1, 0] after [.5, .5] (violation 0.2), and epsilon > 709 raised OverflowError.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dpselect.rainbow import binary_line, dp_violation, index_threshold, line_probabilities, prefix_thresholds

#: Largest DP violation tolerated on a float table: rounding only.
TOLERANCE = 1e-12


def line_edges(n_points: int) -> np.ndarray:
    return np.stack([np.arange(n_points - 1), np.arange(1, n_points)], axis=1)


def assert_dp_table(table: np.ndarray, epsilon: float, delta: float) -> None:
    assert np.all(np.isfinite(table)) and np.all(table >= 0.0)
    assert np.allclose(table.sum(axis=1), 1.0, rtol=0.0, atol=1e-12)
    assert dp_violation(table, line_edges(table.shape[0]), epsilon, delta) <= TOLERANCE


def test_audit_example_keeps_the_small_entry() -> None:
    table = line_probabilities([0.5, 0.5], epsilon=36, distances=3, delta=0.3)
    assert_dp_table(table, 36, 0.3)
    # the optimum: the second answer falls to e^-36 (0.5 - 0.3), then to 0 (it is below delta).
    assert table[1, 1] == pytest.approx(math.exp(-36) * 0.2, rel=1e-12)
    assert table[2, 1] == 0.0 and table[3, 1] == 0.0


@pytest.mark.parametrize("epsilon", [20.0, 36.0, 100.0, 700.0, 709.9, 710.0, 745.5, 800.0, 1e5, 1e308])
@pytest.mark.parametrize("delta", [5e-324, 1e-300, 1e-9, 0.3, 0.5, 1.0 - 2.0**-53])
def test_large_epsilon_grid(epsilon: float, delta: float) -> None:
    boundaries = ([0.5, 0.5], [0.0, 1.0], [1e-300, 1.0 - 1e-300])
    boundaries += ([0.2, 0.3, 0.5], [0.0, 0.0, 1.0], [1e-20, 1e-200, 1.0])
    for boundary in boundaries:
        assert_dp_table(line_probabilities(boundary, epsilon, 8, delta), epsilon, delta)
    assert np.all(np.isfinite(index_threshold([0.0, 1e-310, 0.5, 1.0], epsilon, delta)))


epsilons = st.one_of(
    st.floats(0.0, 50.0),
    st.floats(50.0, 1e6),
    st.floats(1e-300, 1e-6),
    st.sampled_from([700.0, 709.78, 709.79, 710.0, 745.0, 1e10, 1e308]),
)
deltas = st.one_of(
    st.floats(1e-12, 1.0, exclude_max=True),
    st.floats(5e-324, 1e-12),
    st.sampled_from([5e-324, 0.5, 1.0 - 2.0**-53]),
).filter(lambda delta: 0.0 < delta < 1.0)
probability = st.one_of(st.floats(0.0, 1.0), st.sampled_from([0.0, 5e-324, 1e-300, 1e-17, 0.5]))


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(p=probability, epsilon=epsilons, delta=deltas, n=st.integers(1, 40))
def test_binary_line_is_dp_for_every_epsilon_and_delta(p: float, epsilon: float, delta: float, n: int) -> None:
    check_binary_line(p, epsilon, delta, n)


def check_binary_line(p: float, epsilon: float, delta: float, n: int) -> None:
    table = binary_line(p, epsilon, n, delta)
    assert_dp_table(table, epsilon, delta)
    assert np.all(np.diff(table[:, 0]) >= -1e-15)  # the preferred answer never loses mass


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(
    weights=st.lists(probability, min_size=3, max_size=3).filter(lambda w: sum(w) > 0.0),
    tiny=st.booleans(),
    epsilon=epsilons,
    delta=deltas,
    n=st.integers(1, 40),
)
def test_ternary_line_is_dp_for_every_epsilon_and_delta(
    weights: list[float], tiny: bool, epsilon: float, delta: float, n: int
) -> None:
    p = ternary_boundary(weights, tiny)
    assume(abs(p.sum() - 1.0) < 1e-12)
    check_ternary_line(p, epsilon, delta, n)


def ternary_boundary(weights: list[float], tiny: bool) -> np.ndarray:
    p = np.array(weights) / sum(weights)
    if tiny:  # the hard case: the first two answers nearly absent, the last one nearly certain
        p = np.array([p[0] * 1e-200, p[1] * 1e-20, 0.0])
        p[2] = 1.0 - p[:2].sum()
    return p


def check_ternary_line(p: np.ndarray, epsilon: float, delta: float, n: int) -> None:
    table = line_probabilities(p, epsilon, n, delta)
    assert_dp_table(table, epsilon, delta)
    prefix = np.cumsum(table, axis=1)
    assert np.all(prefix[1:, :2] >= prefix[:-1, :2] - 1e-15)


@pytest.mark.parametrize("epsilon", [0.0, 1e-300, 1e-6, 0.5, 36.0, 709.79, 1e308])
@pytest.mark.parametrize("delta", [5e-324, 1e-12, 0.3, 1.0 - 2.0**-53])
def test_binary_and_ternary_lines_at_the_corners(epsilon: float, delta: float) -> None:
    """The corners of the strategies of the two property tests above, every run (hypothesis adds
    random points in between; test_large_epsilon_grid covers epsilon >= 20 more densely)."""
    for p in (0.0, 5e-324, 1e-17, 0.5, 1.0):
        check_binary_line(p, epsilon, delta, 40)
    for weights, tiny in (([1.0, 1.0, 1.0], False), ([1.0, 1.0, 1.0], True), ([1e-300, 0.0, 1.0], False),
                          ([0.5, 5e-324, 0.5], True)):
        boundary = ternary_boundary(weights, tiny)
        assert abs(boundary.sum() - 1.0) < 1e-12
        check_ternary_line(boundary, epsilon, delta, 40)


def iterate_one_step_map(boundary: np.ndarray, epsilon: float, delta: float, n: int) -> np.ndarray:
    """Independent reference: every prefix sum iterated with phi_delta in 50-digit arithmetic."""
    with mpmath.workdps(50):
        e, d = mpmath.exp(mpmath.mpf(epsilon)), mpmath.mpf(delta)
        prefixes = [mpmath.fsum(mpmath.mpf(float(x)) for x in boundary[:k]) for k in range(1, boundary.size)]
        rows = []
        for _ in range(n + 1):
            cumulative = [mpmath.mpf(0), *prefixes, mpmath.mpf(1)]
            rows.append([float(cumulative[k + 1] - cumulative[k]) for k in range(boundary.size)])
            prefixes = [min(e * x + d, 1 - (1 - x - d) / e, mpmath.mpf(1)) for x in prefixes]
    return np.array(rows)


@settings(max_examples=60, deadline=None)
@given(
    weights=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=3).filter(lambda w: sum(w) > 0.01),
    epsilon=st.floats(1e-4, 600.0),
    delta=st.floats(1e-12, 0.99),
    n=st.integers(1, 25),
)
def test_delta_line_is_still_the_optimum(weights: list[float], epsilon: float, delta: float, n: int) -> None:
    p = np.array(weights) / sum(weights)
    table = line_probabilities(p, epsilon, n, delta)
    assert np.max(np.abs(table - iterate_one_step_map(p, epsilon, delta, n))) < 1e-13


def test_epsilon_beyond_700_uses_the_700_optimum() -> None:
    # (700, delta)-DP implies (epsilon, delta)-DP for epsilon >= 700; the optima differ by ~e^-700.
    for boundary in ([0.3, 0.7], [0.1, 0.2, 0.7]):
        assert np.array_equal(line_probabilities(boundary, 1e4, 6, 0.01), line_probabilities(boundary, 700.0, 6, 0.01))
    assert prefix_thresholds([0.0, 1.0], 1e4, 0.01) == [1.0]


def test_unsorted_and_repeated_distances_give_the_same_rows() -> None:
    for boundary in ([0.05, 0.95], [0.01, 0.04, 0.95]):
        for epsilon, delta in ((0.3, 0.01), (25.0, 0.2), (1e-6, 1e-9)):
            table = line_probabilities(boundary, epsilon, 60, delta)
            picks = np.array([50, 3, 60, 0, 3, 17, 1])
            assert np.array_equal(line_probabilities(boundary, epsilon, picks, delta), table[picks])
