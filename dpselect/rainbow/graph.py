"""Rainbow DP on general dataset graphs: regions, boundaries, distances and the pull-back of the
line optimum ([ZGD+22] Definitions 5-8 and Theorem 3; docs/privacy/rainbow.md, "Graphs").

A dataset graph has nodes 0..N-1. Each node belongs to a *region* (an int label in [0, R)); region
r has rainbow ``rainbows[r]`` (a permutation of the answers 0..m-1, most preferred first) and a
boundary distribution ``boundary[r]`` **indexed by answer** (``boundary[r][v]`` is the probability
of answer v on r's boundary). Distinct regions must have distinct rainbows (a region is the set
of datasets sharing one rainbow, [ZGD+22] Definition 5).

The optimal boundary-homogeneous mechanism gives node d, at graph distance i from its region's
boundary, the line optimum of its rainbow at index i. Nodes of a connected component that holds
a single region have no boundary; they get their most preferred answer with probability 1 (a
constant mechanism on a component without outside neighbours is 0-DP, and this one is the best).

Graph algorithms use scipy.sparse (optional extra ``pip install dpselect[graphs]``); networkx
graphs are accepted if networkx is installed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpselect._optional import require
from dpselect.errors import DPSelectError

from ._validate import SUM_TOLERANCE, check_delta, check_epsilon
from .line import line_probabilities

__all__ = [
    "InvalidBoundaryError",
    "PullBack",
    "as_adjacency",
    "boundary_distances",
    "check_boundary",
    "pullback",
]

#: Float tolerance of the boundary validity check (the exact check runs on the quantised table).
_BOUNDARY_TOLERANCE = 1e-12


class InvalidBoundaryError(DPSelectError, ValueError):
    """The boundary distributions violate DP across an edge between two regions, so no DP
    mechanism with that boundary exists (docs/privacy/rainbow.md, "Graphs": validity precondition)."""


def _require_scipy_sparse() -> Any:
    require("scipy.sparse.csgraph", feature="rainbow graph functions", extra="graphs")
    return require("scipy.sparse", feature="rainbow graph functions", extra="graphs")


def as_adjacency(graph: Any, n_nodes: int) -> Any:
    """Return the symmetric boolean CSR adjacency (scipy.sparse.csr_array) of ``graph``.

    ``graph`` may be a scipy sparse matrix/array (N x N, nonzero = edge), a networkx graph (node i
    is the i-th node of ``sorted(graph)`` if the nodes are 0..N-1, else of ``list(graph)``), or an
    integer edge list of shape (E, 2). Edges are made undirected (the neighbour relation of DP is
    symmetric) and self-loops are dropped.
    """
    sparse = _require_scipy_sparse()
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, (int, np.integer)) or n_nodes < 0:
        raise ValueError(f"n_nodes must be a non-negative int, got {n_nodes!r}")
    if sparse.issparse(graph):
        matrix = sparse.csr_array(graph)
        if matrix.shape != (n_nodes, n_nodes):
            raise ValueError(f"graph must be {n_nodes} x {n_nodes} (one row per dataset), got {matrix.shape}")
        coo = matrix.tocoo()
        rows, cols = coo.row.astype(np.int64), coo.col.astype(np.int64)
        keep = coo.data != 0
        rows, cols = rows[keep], cols[keep]
    elif hasattr(graph, "nodes") and hasattr(graph, "edges") and hasattr(graph, "adj"):
        nodes = list(graph.nodes)
        if len(nodes) != n_nodes:
            raise ValueError(f"graph has {len(nodes)} nodes but {n_nodes} datasets were described")
        if set(nodes) == set(range(n_nodes)):
            position = {node: node for node in nodes}
        else:
            position = {node: index for index, node in enumerate(nodes)}
        pairs = np.array([(position[u], position[v]) for u, v in graph.edges()], dtype=np.int64).reshape(-1, 2)
        rows, cols = pairs[:, 0], pairs[:, 1]
    else:
        pairs = np.asarray(graph)
        if pairs.size == 0:
            pairs = np.zeros((0, 2), dtype=np.int64)
        if pairs.ndim != 2 or pairs.shape[1] != 2:
            raise TypeError(
                "graph must be a scipy sparse adjacency matrix, a networkx graph or an (E, 2) integer edge list"
            )
        if pairs.size and not np.issubdtype(pairs.dtype, np.integer):
            raise TypeError(f"an edge list must hold integer node indices, got dtype {pairs.dtype}")
        pairs = pairs.astype(np.int64)
        if pairs.size and (pairs.min() < 0 or pairs.max() >= n_nodes):
            raise ValueError(f"edge list node indices must be in [0, {n_nodes})")
        rows, cols = pairs[:, 0], pairs[:, 1]
    off_diagonal = rows != cols
    rows, cols = rows[off_diagonal], cols[off_diagonal]
    data = np.ones(2 * rows.size, dtype=np.int8)
    symmetric = sparse.csr_array(
        (data, (np.concatenate([rows, cols]), np.concatenate([cols, rows]))), shape=(n_nodes, n_nodes)
    )
    symmetric.sum_duplicates()
    symmetric.data[:] = 1
    return symmetric


def edge_list(adjacency: Any) -> NDArray[np.int64]:
    """Undirected edges (u < v) of a symmetric CSR adjacency."""
    coo = adjacency.tocoo()
    upper = coo.row < coo.col
    return np.stack([coo.row[upper], coo.col[upper]], axis=1).astype(np.int64)


def check_regions(region: ArrayLike) -> NDArray[np.int64]:
    labels = np.asarray(region)
    if labels.ndim != 1:
        raise ValueError(f"region must be a 1-D array with one label per dataset, got shape {labels.shape}")
    if labels.size and (labels.dtype == bool or not np.issubdtype(labels.dtype, np.integer)):
        raise TypeError(f"region must hold integer region labels, got dtype {labels.dtype}")
    labels = labels.astype(np.int64)
    if labels.size and labels.min() < 0:
        raise ValueError("region labels must be >= 0")
    return labels


def check_rainbows(rainbows: ArrayLike, n_regions: int) -> NDArray[np.int64]:
    table = np.asarray(rainbows)
    if table.ndim != 2 or table.shape[1] < 2:
        raise ValueError(f"rainbows must have shape (regions, m) with m >= 2, got {table.shape}")
    if not np.issubdtype(table.dtype, np.integer):
        raise TypeError(f"rainbows must hold integer answers, got dtype {table.dtype}")
    table = table.astype(np.int64)
    m = table.shape[1]
    if table.shape[0] < n_regions:
        raise ValueError(f"rainbows has {table.shape[0]} rows but region labels go up to {n_regions - 1}")
    if np.any(np.sort(table, axis=1) != np.arange(m)):
        raise ValueError(f"every rainbow must be a permutation of the answers 0..{m - 1}")
    if np.unique(table, axis=0).shape[0] != table.shape[0]:
        raise ValueError("two regions have the same rainbow; a region is the set of datasets with one rainbow")
    return table


def _check_boundary_table(boundary: ArrayLike, shape: tuple[int, int]) -> NDArray[np.float64]:
    table = np.array(boundary, dtype=np.float64, copy=True)
    if table.shape != shape:
        raise ValueError(
            f"boundary must have shape {shape} (one distribution per region, by answer), got {table.shape}"
        )
    if not np.all(np.isfinite(table)) or np.any(table < 0):
        raise ValueError("boundary distributions must be finite and non-negative")
    sums = table.sum(axis=1)
    if np.any(np.abs(sums - 1.0) > SUM_TOLERANCE):
        raise ValueError(f"every boundary distribution must sum to 1 (within {SUM_TOLERANCE})")
    return table / sums[:, None]


def boundary_distances(graph: Any, region: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Distance of every dataset to its region's boundary, and the boundary mask ([ZGD+22] Definition 8).

    A node is on the boundary if it has a neighbour in another region. Distances are measured
    inside the region (the same as in the whole graph, since a path leaving the region crosses its
    boundary first), by one multi-source breadth-first search from all boundary nodes
    (scipy's C Dijkstra with unit weights, ``min_only=True``). Nodes that cannot reach a boundary
    (their component is a single region) get ``inf``.
    """
    labels = check_regions(region)
    adjacency = as_adjacency(graph, labels.size)
    return _distances(adjacency, labels)


def _distances(adjacency: Any, labels: NDArray[np.int64]) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    sparse = _require_scipy_sparse()
    from scipy.sparse.csgraph import dijkstra

    n = labels.size
    edges = edge_list(adjacency)
    crossing = labels[edges[:, 0]] != labels[edges[:, 1]]
    is_boundary = np.zeros(n, dtype=bool)
    is_boundary[edges[crossing].ravel()] = True
    inside = edges[~crossing]
    if n == 0:
        return np.zeros(0), is_boundary
    sources = np.flatnonzero(is_boundary)
    if sources.size == 0:
        return np.full(n, np.inf), is_boundary
    within = sparse.csr_array(
        (
            np.ones(2 * inside.shape[0]),
            (np.concatenate([inside[:, 0], inside[:, 1]]), np.concatenate([inside[:, 1], inside[:, 0]])),
        ),
        shape=(n, n),
    )
    distances = dijkstra(within, directed=False, indices=sources, unweighted=True, min_only=True)
    return np.asarray(distances, dtype=np.float64), is_boundary


def _unique_pairs(pairs: NDArray[np.int64], n_values: int) -> NDArray[np.int64]:
    """Distinct unordered pairs (a < b) among ``pairs``, dropping a == b (1-D keys: fast)."""
    if pairs.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    ordered = np.sort(pairs, axis=1)
    ordered = ordered[ordered[:, 0] != ordered[:, 1]]
    keys = np.unique(ordered[:, 0] * np.int64(n_values) + ordered[:, 1])
    return np.stack([keys // n_values, keys % n_values], axis=1).astype(np.int64)


def _violation(first: NDArray[np.float64], second: NDArray[np.float64], epsilon: float) -> float:
    factor = math.exp(min(epsilon, 700.0))
    return float(max(np.maximum(first - factor * second, 0.0).sum(), np.maximum(second - factor * first, 0.0).sum()))


def _check_cross_region(
    edges: NDArray[np.int64], labels: NDArray[np.int64], boundary: NDArray[np.float64], epsilon: float, delta: float
) -> None:
    crossing = edges[labels[edges[:, 0]] != labels[edges[:, 1]]]
    if crossing.size == 0:
        return
    pairs = np.sort(labels[crossing], axis=1)
    stride = int(pairs.max()) + 1
    _, first_edge = np.unique(pairs[:, 0] * stride + pairs[:, 1], return_index=True)
    for edge_index in first_edge:
        r, s = pairs[edge_index]
        excess = _violation(boundary[r], boundary[s], epsilon) - delta
        if excess > _BOUNDARY_TOLERANCE * max(1.0, math.exp(min(epsilon, 700.0))):
            u, v = crossing[edge_index]
            raise InvalidBoundaryError(
                f"boundary distributions of regions {r} and {s} are not ({epsilon}, {delta})-DP across the edge "
                f"({u}, {v}): worst violation {excess:.3g}; no DP mechanism has this boundary"
            )


def check_boundary(graph: Any, region: ArrayLike, boundary: ArrayLike, epsilon: float, delta: float = 0.0) -> None:
    """Raise :class:`InvalidBoundaryError` unless the boundary distributions are (epsilon, delta)-DP
    across every edge between two regions (docs/privacy/rainbow.md, "Graphs": validity precondition).

    ``boundary`` is (R, m), one distribution per region **indexed by answer**. Checked in floats
    with a 1e-12 tolerance; what runs is certified exactly by the mechanism.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    labels = check_regions(region)
    table = np.asarray(boundary)
    if table.ndim != 2:
        raise ValueError(f"boundary must have shape (regions, m), got {table.shape}")
    n_regions = int(labels.max()) + 1 if labels.size else 0
    table = _check_boundary_table(boundary, (max(n_regions, table.shape[0]), table.shape[1]))
    adjacency = as_adjacency(graph, labels.size)
    _check_cross_region(edge_list(adjacency), labels, table, epsilon, delta)


@dataclass(frozen=True)
class PullBack:
    """The optimal boundary-homogeneous mechanism on a graph, in compact form.

    ``rows`` (K, m) are the distinct distributions (by answer), one per (region, distance) that
    occurs; dataset d uses ``rows[row_of_node[d]]``. ``row_pairs`` (E, 2) lists the pairs of
    distinct rows that are neighbours somewhere in the graph: DP on these pairs is DP on the graph.
    """

    rows: NDArray[np.float64]
    row_of_node: NDArray[np.int64]
    row_pairs: NDArray[np.int64]
    distances: NDArray[np.float64]
    is_boundary: NDArray[np.bool_]
    region: NDArray[np.int64]
    epsilon: float
    delta: float

    @property
    def probabilities(self) -> NDArray[np.float64]:
        """(N, m) distribution of every dataset, by answer."""
        return self.rows[self.row_of_node]

    def __repr__(self) -> str:
        finite = self.distances[np.isfinite(self.distances)]
        farthest = int(finite.max()) if finite.size else None
        regions = int(np.unique(self.region).size)
        return (
            f"PullBack(datasets={self.row_of_node.size}, answers={self.rows.shape[1]}, regions={regions}, "
            f"distinct_rows={self.rows.shape[0]}, boundary_datasets={int(self.is_boundary.sum())}, "
            f"max_distance={farthest}, epsilon={self.epsilon}, delta={self.delta})"
        )


def pullback(
    graph: Any,
    region: ArrayLike,
    rainbows: ArrayLike,
    boundary: ArrayLike,
    epsilon: float,
    delta: float = 0.0,
) -> PullBack:
    """Pull the line optimum back to a dataset graph ([ZGD+22] Theorem 3; docs/privacy/rainbow.md, "Graphs").

    Parameters
    ----------
    graph
        The dataset graph: scipy sparse adjacency, networkx graph, or (E, 2) edge list.
    region
        (N,) region label of each dataset (an index into ``rainbows`` and ``boundary``).
    rainbows
        (R, m) the rainbow of each region: a permutation of the answers, most preferred first.
    boundary
        (R, m) the boundary distribution of each region, **indexed by answer** (not rainbow order).
    epsilon, delta
        Privacy parameters. delta > 0 uses the (epsilon, delta) line recursion (m <= 3; m = 3 is
        numerically verified only, docs/privacy/rainbow.md, "The line with δ > 0").

    Guarantee: if the boundary is valid (checked; :class:`InvalidBoundaryError` otherwise), the
    result is (epsilon, delta)-DP on the graph and is the unique optimal boundary-homogeneous
    mechanism for delta = 0 ([ZGD+22] Thm 2-3). Float table: build a
    :class:`~dpselect.rainbow.RainbowMechanism` (``graph_mechanism``) to sample from it.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    labels = check_regions(region)
    n = labels.size
    n_regions = int(labels.max()) + 1 if n else 0
    rainbow_table = check_rainbows(rainbows, n_regions)
    m = rainbow_table.shape[1]
    boundary_table = _check_boundary_table(boundary, (rainbow_table.shape[0], m))
    adjacency = as_adjacency(graph, n)
    edges = edge_list(adjacency)
    _check_cross_region(edges, labels, boundary_table, epsilon, delta)
    distances, is_boundary = _distances(adjacency, labels)

    # One row per (region, distance) that occurs; unreachable nodes get distance code -1.
    codes = np.where(np.isfinite(distances), distances, -1.0).astype(np.int64)
    stride = int(codes.max()) + 2 if n else 1
    keys = labels * stride + (codes + 1)
    unique_keys, row_of_node = np.unique(keys, return_inverse=True)
    row_of_node = row_of_node.astype(np.int64).reshape(-1)
    row_region = unique_keys // stride
    row_distance = unique_keys % stride - 1
    rows = np.empty((unique_keys.size, m), dtype=np.float64)
    for r in np.unique(row_region):
        members = np.flatnonzero(row_region == r)
        rainbow = rainbow_table[r]
        reachable = members[row_distance[members] >= 0]
        if reachable.size:
            in_rainbow_order = line_probabilities(boundary_table[r][rainbow], epsilon, row_distance[reachable], delta)
            rows[np.ix_(reachable, rainbow)] = in_rainbow_order
        unreachable = members[row_distance[members] < 0]
        if unreachable.size:
            rows[unreachable] = 0.0
            rows[unreachable, rainbow[0]] = 1.0

    row_pairs = _unique_pairs(row_of_node[edges], unique_keys.size)
    return PullBack(
        rows=rows,
        row_of_node=row_of_node,
        row_pairs=row_pairs.astype(np.int64),
        distances=distances,
        is_boundary=is_boundary,
        region=labels,
        epsilon=epsilon,
        delta=delta,
    )
