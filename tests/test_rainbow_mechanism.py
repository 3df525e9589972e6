"""The certified, quantised mechanism and the exact DP check (docs/privacy/rainbow.md, "What is certified at
run time"; quantisation as documented in dpselect/rainbow/mechanism.py)."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import mpmath
import numpy as np
import pytest

from dpselect.rainbow import (
    RainbowMechanism,
    dp_violation,
    exact_dp_violation,
    exp_lower_bound,
    line_mechanism,
    line_probabilities,
)
from dpselect.rainbow.mechanism import TOTAL

# Reference lines shipped with the tests; provenance in tests/data/README.md.
VECTORS_PATH = Path(__file__).resolve().parent / "data" / "rainbow_vectors.json"
VECTORS = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))["cases"]


def line_pairs(n_points: int) -> np.ndarray:
    return np.stack([np.arange(n_points - 1), np.arange(1, n_points)], axis=1)


def reference_violation(weights: np.ndarray, total: int, pairs: np.ndarray, epsilon: float, delta: float) -> Fraction:
    """Independent, slow, all-Fraction evaluation of max over edges/directions/subsets."""
    bound = exp_lower_bound(epsilon)
    worst = Fraction(0)
    for u, v in pairs:
        for a, b in ((u, v), (v, u)):
            excess = sum(
                (
                    max(Fraction(int(weights[a, c]), total) - bound * Fraction(int(weights[b, c]), total), Fraction(0))
                    for c in range(weights.shape[1])
                ),
                Fraction(0),
            )
            worst = max(worst, excess)
    return worst - min(Fraction(delta), Fraction(repr(delta)))


@pytest.mark.parametrize("epsilon", [0.0, 1e-9, 0.1, 0.5, 1.0, 2.0, 10.0, 64.0, 700.0])
def test_exp_lower_bound_is_certified_and_tight(epsilon: float) -> None:
    bound = exp_lower_bound(epsilon)
    with mpmath.workdps(80):
        # the binary value of the float and its decimal reading: the bound is below both.
        readings = [mpmath.mpf(Fraction(epsilon).numerator) / Fraction(epsilon).denominator, mpmath.mpf(repr(epsilon))]
        value = mpmath.mpf(bound.numerator) / bound.denominator
        for reading in readings:
            assert value <= mpmath.exp(min(reading, 64))
        assert value >= mpmath.exp(min(min(readings), 64)) * (1 - mpmath.mpf(2) ** -100)


@pytest.mark.parametrize("case", VECTORS, ids=[case["name"] for case in VECTORS])
def test_quantised_closed_forms_are_certified(case: dict) -> None:
    n = len(case["probabilities"]) - 1
    mechanism = line_mechanism(case["boundary"], case["eps"], n, case["delta"])
    assert mechanism.certificate <= 0
    # the independent Fraction evaluation agrees and is never positive.
    assert (
        reference_violation(mechanism.weights, TOTAL, line_pairs(n + 1), case["eps"], case["delta"])
        == mechanism.certificate
    )
    assert np.all(mechanism.weights.astype(object).sum(axis=1) == TOTAL)
    # what runs is within the mixing weight (+ quantisation) of the optimum.
    gap = np.max(np.abs(mechanism.probabilities - np.array(case["probabilities"])))
    assert gap <= mechanism.mixing_weight + 1e-11
    assert mechanism.mixing_weight < 1e-12


@pytest.mark.parametrize(
    ("boundary", "epsilon", "delta", "n"),
    [
        ([0.2, 0.3, 0.5], 1e-6, 0.0, 50),
        ([0.01, 0.02, 0.07, 0.9], 50.0, 0.0, 10),
        ([1e-200, 0.5, 0.5 - 1e-200], 2.0, 0.0, 400),
        ([0.5, 0.5], 0.0, 0.0, 5),
        ([0.1, 0.9], 0.0, 0.05, 30),
        ([0.02, 0.08, 0.9], 3.0, 1e-9, 40),
    ],
)
def test_certified_in_hard_regimes(boundary: list[float], epsilon: float, delta: float, n: int) -> None:
    mechanism = line_mechanism(boundary, epsilon, n, delta)
    assert mechanism.certificate <= 0
    assert mechanism.mixing_weight <= 1e-6


def test_naive_rounding_would_break_dp_and_ours_does_not() -> None:
    # Decaying colours fall below one unit of 2**-63: independent rounding gives 1 vs 0 or 2 vs 1.
    epsilon, n = 2.0, 40
    table = line_probabilities([0.01, 0.2, 0.79], epsilon, n)
    naive = np.round(np.ldexp(table, 63)).astype(object)
    naive[:, 0] += TOTAL - naive.sum(axis=1)
    assert exact_dp_violation(naive, TOTAL, line_pairs(n + 1), epsilon) > 0
    assert line_mechanism([0.01, 0.2, 0.79], epsilon, n).certificate <= 0


def test_exact_check_catches_a_one_unit_violation() -> None:
    mechanism = line_mechanism([0.1, 0.9], 0.5, 6)
    weights = mechanism.weights.astype(object)
    pairs = line_pairs(7)
    # make row 1's preferred weight exactly floor(E * row 0's) + 1: one unit over the bound.
    bound = exp_lower_bound(0.5)
    target = (bound * weights[0, 0]).__floor__() + 1
    weights[1, 1] -= target - weights[1, 0]
    weights[1, 0] = target
    assert exact_dp_violation(weights, TOTAL, pairs, 0.5) > 0
    assert dp_violation(np.ldexp(weights.astype(float), -63), pairs, 0.5) <= 1e-15  # floats cannot see it


def test_exact_check_delta_and_validation() -> None:
    weights = np.array([[6, 4], [4, 6]])
    # P = (0.6, 0.4) vs (0.4, 0.6) at epsilon = 0: worst subset violation 0.2.
    assert exact_dp_violation(weights, 10, [[0, 1]], 0.0) == Fraction(1, 5)
    assert exact_dp_violation(weights, 10, [[0, 1]], 0.0, 0.2) == 0
    assert exact_dp_violation(weights, 10, [[0, 1]], math.log(1.5) + 1e-12) <= 0
    with pytest.raises(ValueError, match="sum to total"):
        exact_dp_violation([[1, 2]], 10, [[0, 0]], 1.0)
    with pytest.raises(ValueError, match="edges"):
        exact_dp_violation(weights, 10, [[0, 5]], 1.0)


def test_lp_output_is_absorbed_and_certified() -> None:
    pytest.importorskip("scipy")
    from dpselect.rainbow import lexicographic_lp

    n_points = 10
    lp = lexicographic_lp(
        line_pairs(n_points), np.zeros(n_points, int), [[0, 1, 2]], {0: [0.05, 0.15, 0.8], 9: [0.6, 0.3, 0.1]}, 1.0
    )
    mechanism = RainbowMechanism.from_table(lp, line_pairs(n_points), 1.0)
    assert mechanism.certificate <= 0
    assert mechanism.mixing_weight < 1e-6


def test_refuses_a_table_that_is_not_dp() -> None:
    with pytest.raises(ValueError, match="not"):
        RainbowMechanism.from_table([[0.9, 0.1], [0.1, 0.9]], [[0, 1]], 1.0)


def test_graph_mechanism_certifies_every_edge() -> None:
    pytest.importorskip("scipy")
    from dpselect.rainbow import graph_mechanism

    index = np.arange(36).reshape(6, 6)
    edges = np.concatenate(
        [
            np.stack([index[:, :-1].ravel(), index[:, 1:].ravel()], 1),
            np.stack([index[:-1].ravel(), index[1:].ravel()], 1),
        ]
    )
    region = (index.ravel() % 6 >= 2).astype(int)
    mechanism = graph_mechanism(edges, region, [[0, 1, 2], [1, 2, 0]], [[0.2, 0.3, 0.5], [0.25, 0.3, 0.45]], 0.4)
    assert mechanism.certificate <= 0
    # the row-level certificate covers the node level: recheck on the full per-node table.
    per_node = mechanism.weights[mechanism.row_of_node]
    assert exact_dp_violation(per_node, TOTAL, edges, 0.4) <= 0
    assert mechanism.probabilities.shape == (36, 3)
    assert "docs/privacy/rainbow.md" in mechanism.guarantee and "Rainbow DP" in mechanism.guarantee
    assert "spec" not in mechanism.guarantee


def test_exact_probability_and_repr() -> None:
    mechanism = line_mechanism([0.3, 0.7], 1.0, 3)
    assert mechanism.exact_probability(0, 0) + mechanism.exact_probability(0, 1) == 1
    assert abs(float(mechanism.exact_probability(0, 0)) - 0.3) < 1e-12
    assert "RainbowMechanism" in repr(mechanism)
    with pytest.raises(ValueError, match="answer"):
        mechanism.exact_probability(0, 2)


# ------------------------------------------------------------------ sampling (needs the package RNG)


def deterministic_rng():
    testing = pytest.importorskip("dpselect.testing")
    return testing.InsecureDeterministicRNG(seed=1234, stream=0)


@pytest.mark.filterwarnings("ignore::Warning")
def test_sampling_frequencies_match_the_table() -> None:
    rng = deterministic_rng()
    mechanism = line_mechanism([0.02, 0.1, 0.88], 0.3, 12)
    draws = 40_000
    for dataset in (0, 6, 12):
        result = mechanism.sample(np.full(draws, dataset), rng=rng)
        assert result.privacy_guaranteed is False
        counts = np.bincount(result.answers, minlength=3)
        expected = mechanism.probabilities[dataset] * draws
        chi_square = float(np.sum((counts - expected) ** 2 / expected))
        assert chi_square < 16.3  # 99.97th percentile of chi-square with 2 degrees of freedom


@pytest.mark.filterwarnings("ignore::Warning")
def test_sampling_never_returns_zero_probability_answers_and_keeps_shape() -> None:
    rng = deterministic_rng()
    mechanism = line_mechanism([0.05, 0.0, 0.95], 2.0, 5)
    result = mechanism.sample(np.array([[0, 1], [5, 5]]), rng=rng)
    assert result.answers.shape == (2, 2)
    assert not np.any(mechanism.sample(np.arange(6).repeat(500), rng=rng).answers == 1)
    with pytest.raises(ValueError, match="datasets"):
        mechanism.sample([6], rng=rng)
    with pytest.raises(TypeError, match="datasets"):
        mechanism.sample([0.5], rng=rng)


@pytest.mark.parametrize(
    ("row_pairs", "row_of_node", "error", "message"),
    [
        # a float index used to be truncated (1.7 -> row 1): the mechanism was certified on the wrong edge
        ([[0, 1.7], [1, 2], [2, 3]], None, TypeError, "row_pairs must hold integer"),
        ([[0, 1], [1, 2], [2, 3]], [0.5, 1, 2, 3], TypeError, "row_of_node must hold integer"),
        ([[0, 1], [1, 2], [2, 3]], [True, False, True, False], TypeError, "row_of_node"),
        ([[0, 2**64]], None, ValueError, "row_pairs must index rows"),
        (np.array([[0, 2**64 - 1]], dtype=np.uint64), None, ValueError, "row_pairs must index rows"),
        ([[0, 1]], np.array([0, 1, 2, 2**63], dtype=np.uint64), ValueError, "row_of_node must index rows"),
        ([0, 1, 1, 2], None, ValueError, r"shape \(E, 2\)"),
    ],
)
def test_from_table_refuses_indices_it_would_have_to_truncate_or_wrap(row_pairs, row_of_node, error, message) -> None:
    table = line_probabilities([0.3, 0.7], 1.0, 3)
    with pytest.raises(error, match=message):
        RainbowMechanism.from_table(table, row_pairs, 1.0, row_of_node=row_of_node)


@pytest.mark.filterwarnings("ignore::Warning")
def test_readable_reprs() -> None:
    pytest.importorskip("scipy")
    from dpselect.rainbow import graph_mechanism, pullback

    mechanism = line_mechanism([0.3, 0.7], 1.0, 3)
    text = repr(mechanism)
    assert "certified=True" in text and "datasets=4" in text and "line optimum" in text
    drawn = mechanism.sample(np.zeros(1000, dtype=np.int64), rng=deterministic_rng())
    shown = repr(drawn)
    assert shown.startswith("SampledAnswers(answers=[") and "shape=(1000,)" in shown
    assert "privacy_guaranteed=False" in shown and len(shown) < 200
    result = pullback([[0, 1], [1, 2], [2, 3]], [0, 0, 0, 1], [[0, 1], [1, 0]], [[0.45, 0.55], [0.45, 0.55]], 0.5)
    assert repr(result) == (
        "PullBack(datasets=4, answers=2, regions=2, distinct_rows=4, boundary_datasets=2, max_distance=2, "
        "epsilon=0.5, delta=0.0)"
    )
    graph = graph_mechanism([[0, 1], [1, 2]], [0, 0, 1], [[0, 1], [1, 0]], [[0.45, 0.55], [0.45, 0.55]], 0.5)
    assert "pull-back" in repr(graph)
