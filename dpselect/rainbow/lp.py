"""Numeric solver: the sequential (lexicographic) LP (docs/privacy/rainbow.md, "The lexicographic LP").

For the cases no closed form covers: a line with two different fixed ends, fixed nodes anywhere,
more than three answers with delta > 0, or any graph with delta > 0 if you prefer a solver to
the (m = 3: numerically verified) recursion. Needs scipy (HiGHS): ``pip install dpselect[lp]``.

Stage k = 1..m-1 maximises the *sum over datasets* of the probability of each dataset's k-th
preferred answer, subject to the simplex rows, the fixed datasets, all DP rows, and the earlier
stages' optima (minus a relative slack of 1e-9). When a pointwise optimum exists (a valid
homogeneous boundary: one fixed end on a line, or the boundary of a graph's regions) this is it
([ZGD+22] Theorem 2). Otherwise (e.g. two different fixed ends) no pointwise optimum need exist
([GZG+24]) and the result is **lexicographic in sums**: one Pareto-optimal mechanism, the one that
is best for the sum of first choices, then of second choices, and so on.

The output is a float table accurate to the solver tolerance (~1e-9): DP rows may be violated by
about that much. :meth:`dpselect.rainbow.RainbowMechanism.from_table` absorbs this when it
quantises, and certifies the result exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpselect._optional import require

from ._validate import check_delta, check_distribution, check_epsilon
from .graph import (
    InvalidBoundaryError,
    check_rainbows,
    check_regions,
    edge_list,
    as_adjacency,
)

__all__ = ["lexicographic_lp"]

#: Relative slack with which earlier stages are held at their optimum (tighter makes HiGHS report
#: later stages infeasible on saturated instances).
_STAGE_SLACK = 1e-9


def _require_linprog() -> Any:
    return require("scipy.optimize", feature="the rainbow LP solver", extra="lp").linprog


def lexicographic_lp(
    graph: Any,
    region: ArrayLike,
    rainbows: ArrayLike,
    fixed: Mapping[int, ArrayLike],
    epsilon: float,
    delta: float = 0.0,
) -> NDArray[np.float64]:
    """Sequential lexicographic LP on a dataset graph (docs/privacy/rainbow.md, "The lexicographic LP").

    Parameters
    ----------
    graph
        scipy sparse adjacency, networkx graph or (E, 2) edge list over datasets 0..N-1.
    region, rainbows
        (N,) region label per dataset and (R, m) rainbow (answers, most preferred first) per region.
    fixed
        ``{dataset: distribution by answer}`` for the datasets whose distribution is given
        (e.g. the boundary); at least one is usually needed for a non-trivial answer.
    epsilon, delta
        Privacy parameters. For delta > 0 the positive-part form sum_v (P_d(v) - e^eps P_d'(v))_+ <= delta is used
        (m auxiliary variables per directed edge).

    Returns
    -------
    (N, m) float table, row d = dataset d's distribution by answer.

    Raises :class:`~dpselect.rainbow.InvalidBoundaryError` if the fixed distributions admit no
    (epsilon, delta)-DP mechanism (the LP is infeasible).
    """
    linprog = _require_linprog()
    import scipy.sparse as sparse

    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    labels = check_regions(region)
    n = labels.size
    if n == 0:
        raise ValueError("region must describe at least one dataset")
    rainbow_table = check_rainbows(rainbows, int(labels.max()) + 1)
    m = rainbow_table.shape[1]
    if not isinstance(fixed, Mapping):
        raise TypeError("fixed must be a mapping {dataset index: distribution by answer}")
    lower = np.zeros(n * m)
    upper = np.ones(n * m)
    for node, distribution in fixed.items():
        if isinstance(node, bool) or not isinstance(node, (int, np.integer)) or not 0 <= int(node) < n:
            raise ValueError(f"fixed dataset {node!r} is not an index in [0, {n})")
        values = check_distribution(distribution, f"fixed[{node}]")
        if values.size != m:
            raise ValueError(f"fixed[{node}] must have m = {m} entries, got {values.size}")
        lower[int(node) * m : int(node) * m + m] = values
        upper[int(node) * m : int(node) * m + m] = values

    edges = edge_list(as_adjacency(graph, n))
    directed = np.concatenate([edges, edges[:, ::-1]]) if edges.size else np.zeros((0, 2), np.int64)
    n_directed = directed.shape[0]
    n_aux = n_directed * m if delta > 0 else 0
    n_vars = n * m + n_aux
    factor = math.exp(min(epsilon, 700.0))

    # DP rows: x[u,c] - e^eps x[v,c] (- z[e,c]) <= 0 for every directed edge e = (u, v) and answer c.
    edge_index = np.repeat(np.arange(n_directed), m)
    colour = np.tile(np.arange(m), n_directed)
    row_ids = np.arange(n_directed * m)
    u_cols = directed[edge_index, 0] * m + colour
    v_cols = directed[edge_index, 1] * m + colour
    rows = [row_ids, row_ids]
    cols = [u_cols, v_cols]
    data = [np.ones(row_ids.size), np.full(row_ids.size, -factor)]
    n_rows = n_directed * m
    b_ub = [np.zeros(n_directed * m)]
    if delta > 0:
        aux = n * m + row_ids
        rows += [row_ids, n_rows + edge_index]
        cols += [aux, aux]
        data += [np.full(row_ids.size, -1.0), np.ones(row_ids.size)]
        n_rows += n_directed
        b_ub.append(np.full(n_directed, delta))
    a_ub = sparse.csr_array(
        (np.concatenate(data), (np.concatenate(rows), np.concatenate(cols))), shape=(n_rows, n_vars)
    )
    b_ub_vector = np.concatenate(b_ub)
    a_eq = sparse.csr_array((np.ones(n * m), (np.repeat(np.arange(n), m), np.arange(n * m))), shape=(n, n_vars))
    b_eq = np.ones(n)
    bounds = np.column_stack(
        [np.concatenate([lower, np.zeros(n_aux)]), np.concatenate([upper, np.full(n_aux, np.inf)])]
    )
    options = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}

    preferred = rainbow_table[labels]  # (N, m): answer of rank k for every dataset
    stage_rows: list[NDArray[np.float64]] = []
    stage_bounds: list[float] = []
    solution = None
    for rank in range(m - 1):
        objective = np.zeros(n_vars)
        objective[np.arange(n) * m + preferred[:, rank]] = -1.0
        if stage_rows:
            extra = sparse.csr_array(np.vstack(stage_rows))
            a_all = sparse.vstack([a_ub, extra], format="csr")
            b_all = np.concatenate([b_ub_vector, np.array(stage_bounds)])
        else:
            a_all, b_all = a_ub, b_ub_vector
        result = linprog(
            objective, A_ub=a_all, b_ub=b_all, A_eq=a_eq, b_eq=b_eq, bounds=bounds, method="highs", options=options
        )
        if result.status == 2:
            raise InvalidBoundaryError(
                f"no ({epsilon}, {delta})-DP mechanism has these fixed distributions (stage {rank + 1} LP infeasible)"
            )
        if result.status != 0:
            raise RuntimeError(f"HiGHS failed at stage {rank + 1}: {result.message}")
        optimum = -float(result.fun)
        stage_rows.append(objective)
        stage_bounds.append(-(optimum - _STAGE_SLACK * max(1.0, abs(optimum))))
        solution = result.x
    assert solution is not None
    table = np.clip(solution[: n * m].reshape(n, m), 0.0, 1.0)
    return table / table.sum(axis=1, keepdims=True)
