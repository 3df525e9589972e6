"""Ready-to-sample rainbow mechanisms: the optimum (line or graph) quantised and certified."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ._validate import check_distances
from .graph import pullback
from .line import line_probabilities
from .mechanism import RainbowMechanism

__all__ = ["line_mechanism", "graph_mechanism"]


def line_mechanism(boundary: ArrayLike, epsilon: float, n: int, delta: float = 0.0) -> RainbowMechanism:
    """The optimal mechanism on the line 0..n with boundary distribution ``boundary`` at index 0,
    as a :class:`RainbowMechanism` whose answers are **rainbow ranks** (0 = most preferred).

    Guarantee: (epsilon, delta)-DP between consecutive indices of the line, certified exactly on
    the sampled table; optimal up to the reported mixing weight (docs/privacy/rainbow.md, "The line optimum").
    """
    distances = check_distances(n, "n")
    table = line_probabilities(boundary, epsilon, distances, delta)
    pairs = np.stack([np.arange(distances.size - 1), np.arange(1, distances.size)], axis=1)
    description = (
        "line optimum of Zhou et al. (Rainbow DP, Thms 4-5) / D'Oliveira et al. (ISIT 2021); docs/privacy/rainbow.md"
    )
    return RainbowMechanism.from_table(table, pairs, epsilon, delta, description=description)


def graph_mechanism(
    graph: Any,
    region: ArrayLike,
    rainbows: ArrayLike,
    boundary: ArrayLike,
    epsilon: float,
    delta: float = 0.0,
) -> RainbowMechanism:
    """The optimal boundary-homogeneous mechanism on a dataset graph (pull-back of the line optimum,
    [ZGD+22] Theorems 2-3; docs/privacy/rainbow.md, "Graphs"), quantised and certified exactly on
    every pair of neighbouring datasets' rows.
    Answers are answer indices 0..m-1. Arguments as in :func:`dpselect.rainbow.pullback`
    (raises :class:`~dpselect.rainbow.InvalidBoundaryError` for an invalid boundary).
    """
    result = pullback(graph, region, rainbows, boundary, epsilon, delta)
    return RainbowMechanism.from_table(
        result.rows,
        result.row_pairs,
        epsilon,
        delta,
        row_of_node=result.row_of_node,
        description="pull-back of the line optimum, Zhou et al. (Rainbow DP, Thms 2-3); docs/privacy/rainbow.md",
    )
