"""General graphs (pull-back, validity) and the lexicographic LP (docs/privacy/rainbow.md, "Graphs" and
"The lexicographic LP")."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("scipy")

from dpselect.rainbow import (  # noqa: E402
    InvalidBoundaryError,
    boundary_distances,
    check_boundary,
    dp_violation,
    lexicographic_lp,
    line_probabilities,
    pullback,
)

LP_TOLERANCE = 1e-7  # HiGHS tolerances are 1e-10 per row; observed gaps ~1e-8.


def path_edges(n_points: int) -> np.ndarray:
    return np.stack([np.arange(n_points - 1), np.arange(1, n_points)], axis=1)


def grid_edges(rows: int, cols: int) -> np.ndarray:
    index = np.arange(rows * cols).reshape(rows, cols)
    horizontal = np.stack([index[:, :-1].ravel(), index[:, 1:].ravel()], axis=1)
    vertical = np.stack([index[:-1, :].ravel(), index[1:, :].ravel()], axis=1)
    return np.concatenate([horizontal, vertical])


def lp_on_line(boundary, epsilon: float, n: int, delta: float = 0.0) -> np.ndarray:
    m = len(boundary)
    return lexicographic_lp(path_edges(n + 1), np.zeros(n + 1, int), [list(range(m))], {0: boundary}, epsilon, delta)


def test_closed_forms_equal_lp_on_random_lines() -> None:
    data = np.random.Generator(np.random.PCG64(7))
    worst = 0.0
    for trial in range(12):
        m = int(data.integers(2, 6))
        p = data.dirichlet(np.ones(m))
        if trial % 3 == 1:
            p = np.sort(p)
        epsilon = float(data.choice([0.1, 0.3, 0.7, 1.0, 2.0]))
        n = int(data.choice([3, 6, 12]))
        worst = max(worst, float(np.max(np.abs(lp_on_line(p, epsilon, n) - line_probabilities(p, epsilon, n)))))
    assert worst < LP_TOLERANCE


@pytest.mark.parametrize(
    ("boundary", "epsilon"), [([0.05, 0.95], 0.5), ([0.02, 0.08, 0.9], 0.5), ([0.3, 0.3, 0.4], 1.0)]
)
def test_delta_recursion_equals_lp(boundary: list[float], epsilon: float) -> None:
    # m = 2 derived, m = 3 numerically verified only (docs/privacy/rainbow.md): this is that verification.
    lp = lp_on_line(boundary, epsilon, 12, delta=0.01)
    closed = line_probabilities(boundary, epsilon, 12, delta=0.01)
    assert np.max(np.abs(lp - closed)) < LP_TOLERANCE
    assert dp_violation(closed, path_edges(13), epsilon, 0.01) <= 1e-15


def test_two_ends_same_distribution_is_pullback_to_nearer_end() -> None:
    boundary, epsilon, n_points = [0.1, 0.3, 0.6], 0.7, 12
    fixed = {0: boundary, n_points - 1: boundary}
    lp = lexicographic_lp(path_edges(n_points), np.zeros(n_points, int), [[0, 1, 2]], fixed, epsilon)
    nearer = np.minimum(np.arange(n_points), n_points - 1 - np.arange(n_points))
    assert np.max(np.abs(lp - line_probabilities(boundary, epsilon, nearer))) < LP_TOLERANCE


def test_two_different_ends_lexicographic_in_sums() -> None:
    # No pointwise optimum need exist (Gu et al., Generalized Rainbow DP): the LP returns a DP mechanism that keeps the
    # ends fixed and is no worse in the sum of first choices than the naive min-of-prefixes table.
    left, right, epsilon, n_points = [0.008, 0.384, 0.608], [0.318, 0.012, 0.670], 2.0, 3
    lp = lexicographic_lp(
        path_edges(n_points), np.zeros(n_points, int), [[0, 1, 2]], {0: left, n_points - 1: right}, epsilon
    )
    assert np.allclose(lp[0], left) and np.allclose(lp[-1], right)
    assert dp_violation(lp, path_edges(n_points), epsilon) < 1e-8
    # the tempting min of the two one-sided prefix recursions is not DP.
    i = np.arange(n_points)
    prefix = np.minimum(
        np.cumsum(line_probabilities(left, epsilon, i), axis=1),
        np.cumsum(line_probabilities(right, epsilon, i[::-1]), axis=1),
    )
    naive = np.diff(np.concatenate([np.zeros((n_points, 1)), prefix], axis=1), axis=1)
    assert dp_violation(naive, path_edges(n_points), epsilon) > 0.01


def test_invalid_fixed_distributions_make_lp_raise() -> None:
    with pytest.raises(InvalidBoundaryError):
        lexicographic_lp(path_edges(2), np.zeros(2, int), [[0, 1]], {0: [0.99, 0.01], 1: [0.01, 0.99]}, 0.1)


def two_region_grid() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    edges = grid_edges(5, 6)
    region = (np.arange(30) % 6 >= 3).astype(int)
    rainbows = np.array([[0, 1, 2], [2, 1, 0]])
    boundary = np.array([[0.2, 0.3, 0.5], [0.25, 0.3, 0.45]])
    return edges, region, rainbows, boundary


def test_pullback_equals_lp_on_grid() -> None:
    edges, region, rainbows, boundary = two_region_grid()
    result = pullback(edges, region, rainbows, boundary, 0.5)
    assert result.distances.reshape(5, 6)[0].tolist() == [2, 1, 0, 0, 1, 2]
    fixed = {int(d): boundary[region[d]] for d in np.flatnonzero(result.is_boundary)}
    lp = lexicographic_lp(edges, region, rainbows, fixed, 0.5)
    assert np.max(np.abs(lp - result.probabilities)) < LP_TOLERANCE
    assert dp_violation(result.probabilities, edges, 0.5) <= 1e-15


def test_pullback_on_irregular_graph_with_three_regions_equals_lp() -> None:
    data = np.random.Generator(np.random.PCG64(11))
    n = 24
    edges = path_edges(n)
    extra = data.integers(0, n, size=(10, 2))
    edges = np.concatenate([edges, extra[extra[:, 0] != extra[:, 1]]])
    region = np.repeat([0, 1, 2], 8)
    rainbows = np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1]])
    boundary = np.tile([0.3, 0.35, 0.35], (3, 1))  # identical boundaries are always valid
    result = pullback(edges, region, rainbows, boundary, 0.4)
    fixed = {int(d): boundary[region[d]] for d in np.flatnonzero(result.is_boundary)}
    lp = lexicographic_lp(edges, region, rainbows, fixed, 0.4)
    assert np.max(np.abs(lp - result.probabilities)) < LP_TOLERANCE


def test_invalid_boundary_raises_clear_error() -> None:
    edges, region, rainbows, _ = two_region_grid()
    bad = np.array([[0.9, 0.05, 0.05], [0.05, 0.05, 0.9]])
    with pytest.raises(InvalidBoundaryError, match="regions 0 and 1"):
        pullback(edges, region, rainbows, bad, 0.5)
    with pytest.raises(InvalidBoundaryError):
        check_boundary(edges, region, bad, 0.5)
    # the same boundaries are valid for a large enough epsilon
    check_boundary(edges, region, bad, math.log(18) + 1e-9)
    # and with delta covering the positive-part sum
    check_boundary(edges, region, bad, 0.5, delta=0.9)


def test_unreachable_component_gets_first_choice() -> None:
    # nodes 0-1-2 (two regions) and a separate component 3-4 entirely in region 1.
    edges = np.array([[0, 1], [1, 2], [3, 4]])
    region = np.array([0, 0, 1, 1, 1])
    result = pullback(edges, region, [[0, 1], [1, 0]], [[0.4, 0.6], [0.4, 0.6]], 1.0)
    assert np.isinf(result.distances[3:]).all()
    assert result.probabilities[3:].tolist() == [[0.0, 1.0], [0.0, 1.0]]


@pytest.mark.slow
def test_graph_inputs_agree() -> None:
    import scipy.sparse as sparse

    edges, region, rainbows, boundary = two_region_grid()
    expected = pullback(edges, region, rainbows, boundary, 0.5).probabilities
    matrix = sparse.coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(30, 30))
    assert np.array_equal(pullback(matrix, region, rainbows, boundary, 0.5).probabilities, expected)
    networkx = pytest.importorskip("networkx")
    graph = networkx.Graph()
    graph.add_nodes_from(range(30))
    graph.add_edges_from(edges.tolist())
    assert np.array_equal(pullback(graph, region, rainbows, boundary, 0.5).probabilities, expected)
    distances, is_boundary = boundary_distances(graph, region)
    assert is_boundary.sum() == 10 and distances.max() == 2


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"rainbows": [[0, 1, 1], [2, 1, 0]]}, ValueError, "permutation"),
        ({"rainbows": [[0, 1, 2], [0, 1, 2]]}, ValueError, "same rainbow"),
        ({"boundary": [[0.5, 0.5, 0.5], [0.3, 0.3, 0.4]]}, ValueError, "sum to 1"),
        ({"boundary": [[0.5, 0.5]]}, ValueError, "shape"),
        ({"region": np.full(30, -1)}, ValueError, ">= 0"),
        ({"graph": [[0, 99]]}, ValueError, "edge list"),
        ({"graph": "not a graph"}, TypeError, "graph must be"),
    ],
)
def test_graph_validation(kwargs: dict, error: type[Exception], message: str) -> None:
    edges, region, rainbows, boundary = two_region_grid()
    arguments = {"graph": edges, "region": region, "rainbows": rainbows, "boundary": boundary}
    arguments.update(kwargs)
    with pytest.raises(error, match=message):
        pullback(arguments["graph"], arguments["region"], arguments["rainbows"], arguments["boundary"], 0.5)
