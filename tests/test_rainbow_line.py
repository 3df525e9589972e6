"""Closed forms on the line (Zhou et al., Rainbow DP, Theorems 4-5; docs/privacy/rainbow.md): reference
vectors (tests/data) and property tests."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpselect.rainbow import (
    binary_line,
    dp_violation,
    index_threshold,
    line_probabilities,
    prefix_thresholds,
    switch_value,
    ternary_line,
)

# Reference lines shipped with the tests; provenance in tests/data/README.md.
VECTORS_PATH = Path(__file__).resolve().parent / "data" / "rainbow_vectors.json"
VECTORS = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))["cases"]


def line_edges(n_points: int) -> np.ndarray:
    return np.stack([np.arange(n_points - 1), np.arange(1, n_points)], axis=1)


@pytest.mark.parametrize("case", VECTORS, ids=[case["name"] for case in VECTORS])
def test_reference_vectors(case: dict) -> None:
    expected = np.array(case["probabilities"])
    got = line_probabilities(case["boundary"], case["eps"], len(expected) - 1, case["delta"])
    # The vectors are printed with 12 decimals.
    assert np.max(np.abs(got - expected)) < 1e-11
    if case["etas_of_prefix_sums"] is not None:
        expected_etas = [math.inf if eta is None else eta for eta in case["etas_of_prefix_sums"]]
        assert prefix_thresholds(case["boundary"], case["eps"]) == expected_etas
    assert dp_violation(got, line_edges(len(got)), case["eps"], case["delta"]) <= 1e-15


def test_vector_file_has_all_twelve_cases() -> None:
    assert len(VECTORS) == 12


def test_substitute_example_2_rows() -> None:
    # ternary_substitute_example2 of tests/data/rainbow_vectors.json, six decimals.
    rows = np.array(
        [
            [0.090000, 0.130000, 0.780000],
            [0.148385, 0.214334, 0.637281],
            [0.244645, 0.353377, 0.401978],
            [0.403352, 0.352836, 0.243812],
            [0.638115, 0.214006, 0.147879],
            [0.780505, 0.129801, 0.089693],
        ]
    )
    assert np.max(np.abs(ternary_line([0.09, 0.13, 0.78], 0.5, 5) - rows)) < 1e-6


def random_boundary(rng: np.random.Generator, m: int) -> np.ndarray:
    kind = rng.integers(3)
    p = rng.dirichlet(np.ones(m))
    if kind == 1:  # "inverse order": least preferred most likely
        p = np.sort(p)
    elif kind == 2:  # tiny first colour
        p[0] = 10.0 ** rng.uniform(-12, -3)
        p /= p.sum()
    return p


def test_ternary_closed_form_equals_prefix_recursion() -> None:
    data = np.random.Generator(np.random.PCG64(2024))
    worst = 0.0
    for _ in range(300):
        p = random_boundary(data, 3)
        epsilon = float(data.choice([0.1, 0.3, 0.7, 1.0, 2.0, 4.0]))
        worst = max(worst, float(np.max(np.abs(ternary_line(p, epsilon, 60) - line_probabilities(p, epsilon, 60)))))
    assert worst < 1e-14


@pytest.mark.parametrize(
    ("boundary", "epsilon", "regime"),
    [
        ([0.02, 0.10, 0.88], 0.3, "eta_R < eta_B"),
        ([0.05, 0.0, 0.95], 2.0, "eta_R = eta_B"),
        ([0.6, 0.3, 0.1], 0.5, "eta_B = 0"),
        ([0.0, 0.3, 0.7], 1.0, "p_B = 0"),
    ],
)
def test_ternary_regimes(boundary: list[float], epsilon: float, regime: str) -> None:
    eta_b, eta_r = prefix_thresholds(boundary, epsilon)
    table = ternary_line(boundary, epsilon, 40)
    blue, red, green = table.T
    i = np.arange(41)
    if regime == "eta_R < eta_B":
        assert eta_r < eta_b
        # eq. (12) growth phase, eq. (21) first regime and eq. (29) decay after eta_R.
        assert np.allclose(blue[: int(eta_b) + 1], np.exp(i[: int(eta_b) + 1] * epsilon) * boundary[0], rtol=1e-13)
        assert np.allclose(red[: int(eta_r) + 1], np.exp(i[: int(eta_r) + 1] * epsilon) * boundary[1], rtol=1e-13)
        assert np.allclose(green[int(eta_r) + 1 :] / green[int(eta_r) : -1], math.exp(-epsilon), rtol=1e-10)
        # red rises then falls inside (eta_R, eta_B] (Example 1 behaviour).
        middle = red[int(eta_r) : int(eta_b) + 1]
        assert np.argmax(middle) not in (0, middle.size - 1)
    elif regime == "eta_R = eta_B":
        assert eta_r == eta_b
        assert np.all(red == 0.0)
    elif regime == "eta_B = 0":
        assert eta_b == 0 and eta_r == 0
        assert np.allclose(red[1:] / red[:-1], math.exp(-epsilon), rtol=1e-10)
        assert np.allclose(green[1:] / green[:-1], math.exp(-epsilon), rtol=1e-10)
    else:
        assert eta_b == math.inf
        assert np.all(blue == 0.0)
        # reduces to the binary optimum of red against green.
        assert np.allclose(table[:, 1:], binary_line(0.3, epsilon, 40), atol=1e-15)


def test_threshold_convention_at_exact_switch_point() -> None:
    epsilon = 0.7
    x_star = switch_value(epsilon)
    # x = x* e^{-2 eps}: e^{(i-1) eps} x = x* exactly at i = 3 (up to rounding), eta = 3 or 2 both fine.
    x = x_star * math.exp(-2 * epsilon)
    eta = index_threshold([x], epsilon)[0]
    assert eta in (2.0, 3.0)
    assert index_threshold([0.0], epsilon)[0] == math.inf
    assert index_threshold([0.9], epsilon)[0] == 0.0


@settings(max_examples=60, deadline=None)
@given(
    weights=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=6).filter(lambda w: sum(w) > 0.01),
    epsilon=st.floats(0.01, 5.0),
)
def test_line_laws(weights: list[float], epsilon: float) -> None:
    p = np.array(weights) / sum(weights)
    table = line_probabilities(p, epsilon, 80)
    assert np.all(table >= 0) and np.allclose(table.sum(axis=1), 1.0, atol=1e-13)
    # per-colour ratio law, in both directions (pure DP), up to float rounding.
    assert dp_violation(table, line_edges(81), epsilon) <= 1e-14
    # prefix sums are non-decreasing along the line.
    prefix = np.cumsum(table, axis=1)
    assert np.all(prefix[1:] >= prefix[:-1] - 1e-14)
    # the output does not depend on the length (a prefix of a longer line).
    assert np.array_equal(line_probabilities(p, epsilon, 20), table[:21])
    # evaluating arbitrary (unsorted) distances gives the same rows.
    picks = np.array([50, 3, 80, 0, 3, 17])
    assert np.allclose(line_probabilities(p, epsilon, picks), table[picks], atol=1e-15)
    # the preferred colour tends to 1 when it has positive mass.
    if p[0] > 0:
        far = line_probabilities(p, epsilon, [10**7])[0, 0]
        assert far == pytest.approx(1.0)


def test_stable_for_huge_distances_and_tiny_probabilities() -> None:
    distances = np.array([0, 1, 10, 10**6, 10**9, 2**52])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for boundary in ([1e-300, 0.5, 0.5 - 1e-300], [5e-324, 1 - 5e-324], [0.2, 0.3, 0.5]):
            for epsilon in (1e-9, 0.5, 50.0, 1000.0):
                table = line_probabilities(boundary, epsilon, distances)
                assert np.all(np.isfinite(table)) and np.all(table >= 0)
                assert np.allclose(table.sum(axis=1), 1.0, atol=1e-12)
        table = line_probabilities([0.05, 0.95], 0.5, distances, delta=0.01)
        assert np.all(np.isfinite(table))


def test_epsilon_zero_is_constant() -> None:
    assert np.array_equal(line_probabilities([0.2, 0.8], 0.0, 5), np.tile([0.2, 0.8], (6, 1)))
    # delta > 0 with epsilon = 0: phi(x) = min(x + delta, 1).
    table = binary_line(0.2, 0.0, 10, delta=0.1)
    assert np.allclose(table[:, 0], np.minimum(0.2 + 0.1 * np.arange(11), 1.0))


def test_binary_delta_matches_one_step_map() -> None:
    epsilon, delta, x = 0.4, 0.02, 0.03
    table = binary_line(x, epsilon, 30, delta)
    values = [x]
    for _ in range(30):
        v = values[-1]
        values.append(min(math.exp(epsilon) * v + delta, 1 - math.exp(-epsilon) * (1 - v - delta), 1.0))
    assert np.max(np.abs(table[:, 0] - values)) < 1e-14


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: line_probabilities([0.5, 0.6], 1.0, 3), ValueError, "sum to 1"),
        (lambda: line_probabilities([1.2, -0.2], 1.0, 3), ValueError, "non-negative"),
        (lambda: line_probabilities([1.0], 1.0, 3), ValueError, "m >= 2"),
        (lambda: line_probabilities([0.5, 0.5], -1.0, 3), ValueError, "epsilon"),
        (lambda: line_probabilities([0.5, 0.5], math.inf, 3), ValueError, "epsilon"),
        (lambda: line_probabilities([0.5, 0.5], "1", 3), TypeError, "epsilon"),
        (lambda: line_probabilities([0.5, 0.5], 1.0, 3, delta=1.0), ValueError, "delta"),
        (lambda: line_probabilities([0.5, 0.5], 1.0, [1, -2]), ValueError, "non-negative"),
        (lambda: line_probabilities([0.5, 0.5], 1.0, [1.5]), ValueError, "integers"),
        (lambda: line_probabilities([0.5, 0.5], 1.0, -1), ValueError, "distances"),
        (lambda: line_probabilities([0.25] * 4, 1.0, 3, delta=0.1), ValueError, "m <= 3"),
        (lambda: ternary_line([0.5, 0.5], 1.0, 3), ValueError, "3 entries"),
        (lambda: binary_line(1.5, 1.0, 3), ValueError, "p must be"),
    ],
)
def test_validation(call, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        call()


def test_inputs_not_mutated() -> None:
    boundary = np.array([0.1, 0.2, 0.7])
    distances = np.array([3, 1, 2])
    line_probabilities(boundary, 0.5, distances)
    assert boundary.tolist() == [0.1, 0.2, 0.7] and distances.tolist() == [3, 1, 2]
