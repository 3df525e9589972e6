"""Constrained inference for the noisy hierarchical histogram of a quantile metric
(docs/privacy/quantiles.md, "Consistency").

The tree's noisy node counts y are redundant: a node's count is the sum of its children's. Every
node has the same noise law (one scale for the whole tree), so by the Gauss–Markov theorem the
least-squares leaf counts x̂ = (AᵀA)⁻¹Aᵀy (A: which leaves each noised node sums) are the best
linear unbiased estimate of the leaf counts, and every node's estimate, the sum of its leaves'
x̂, is the best linear unbiased estimate of its count: children sum to their parent, and every
prefix count has variance at most that of the same prefix read from the raw nodes. This is the
"universal histogram" inference of Hay, Rastogi, Miklau, Suciu (VLDB 2010), which Qardaji, Yang
and Li (VLDB 2013) analyse for any branching. It reads the noisy counts only: post-processing.

The root is not noised (the key's total is the sum of its level-1 nodes), so the least squares
separate into one problem per level-1 subtree; the full subtrees share one map. The map is
computed once per shape in exact rationals, as integers W over a common denominator D, and
applied to integer counts in float64 only where every partial sum is an integer below 2⁵³ (so
exactly), else in Python integers: an estimate is D·x̂ exactly, and a tree without noise gives
back its exact counts."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

__all__ = ["Consistent", "consistent_levels", "subtree_map"]

_EXACT_FLOAT = 2 ** 53


@dataclass(frozen=True)
class Consistent:
    """Node estimates per level 1..h, each (n_keys, nodes of the level that hold leaves), as
    numerators over the common ``denominator``: exact, consistent (a node's numerator is the sum
    of its children's)."""

    numerators: list[npt.NDArray[np.int64]]
    denominator: int

    def level(self, level: int) -> npt.NDArray[np.float64]:
        """The estimates of ``level`` (1..h) as floats (exact integers on a tree without noise)."""
        return self.numerators[level - 1] / self.denominator


def _subtree_incidence(branching: int, height: int, leaves: int) -> npt.NDArray[np.int64]:
    """Which of the subtree's ``leaves`` (the first of its b^height) each of its nodes sums, level
    by level from its root, left to right; nodes whose leaves all lie beyond are left out."""
    rows = []
    for level in range(height + 1):
        width = branching ** (height - level)
        for start in range(0, leaves, width):
            row = np.zeros(leaves, dtype=np.int64)
            row[start:start + width] = 1
            rows.append(row)
    return np.array(rows, dtype=np.int64)


def _solve_exact(gram: npt.NDArray[np.int64], rhs: npt.NDArray[np.int64]) -> tuple[list[list[Fraction]], int]:
    """X with gram·X = rhs, in exact rationals (Gauss–Jordan; gram is positive definite), and the
    least common denominator of its entries."""
    size = gram.shape[0]
    rows = [[Fraction(int(v)) for v in (*gram[i], *rhs[i])] for i in range(size)]
    for col in range(size):
        pivot = next(r for r in range(col, size) if rows[r][col] != 0)
        rows[col], rows[pivot] = rows[pivot], rows[col]
        inv = 1 / rows[col][col]
        rows[col] = [v * inv for v in rows[col]]
        for r in range(size):
            if r != col and rows[r][col] != 0:
                f = rows[r][col]
                rows[r] = [a - f * c for a, c in zip(rows[r], rows[col])]
    solution = [row[size:] for row in rows]
    denominator = 1
    for row in solution:
        for v in row:
            denominator = math.lcm(denominator, v.denominator)
    return solution, denominator


@functools.lru_cache(maxsize=64)
def subtree_map(branching: int, height: int, leaves: int) -> tuple[npt.NDArray[np.int64], int]:
    """(W, D): the least-squares map of a subtree of ``height`` levels below its root holding
    ``leaves`` leaves, x̂ = W·y / D, W of shape (leaves, nodes) in integers — exact."""
    a = _subtree_incidence(branching, height, leaves)
    solution, denominator = _solve_exact(a.T @ a, a.T)
    weights = np.array([[int(v * denominator) for v in row] for row in solution], dtype=np.int64)
    return weights, denominator


def _apply(y: npt.NDArray[np.int64], weights: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """y (..., nodes) · Wᵀ exactly: float64 BLAS when every partial sum stays below 2⁵³."""
    if y.size == 0:
        return np.zeros((*y.shape[:-1], weights.shape[0]), dtype=np.int64)
    bound = int(np.abs(y).max()) * int(np.abs(weights).sum(axis=1).max())
    if bound < _EXACT_FLOAT:
        return (y.astype(np.float64) @ weights.T.astype(np.float64)).astype(np.int64)
    # counts beyond 2⁵³/|W| (≥ 4·10¹¹ rows in one key): Python integers, then int64 (D·x̂ ≤ D·Σ|y|)
    return (y.astype(object) @ weights.T.astype(object)).astype(np.int64)


def consistent_levels(raw: list[npt.NDArray[np.int64]], branching: int, leaves: int) -> Consistent:
    """The consistent estimates of every node from ``raw``: per level ℓ = 1..h the noisy counts
    (n_keys, ⌈m / b^(h−ℓ)⌉) of the nodes that hold some of the m = ``leaves`` leaves."""
    height = len(raw)
    n = raw[0].shape[0]
    sub_leaves = branching ** (height - 1)
    full, rest = divmod(leaves, sub_leaves)
    parts: list[tuple[int, int, int]] = [(s, sub_leaves, s * sub_leaves) for s in range(full)]
    if rest:
        parts.append((full, rest, full * sub_leaves))
    maps = {size: subtree_map(branching, height - 1, size) for _, size, _ in parts}
    denominator = math.lcm(*(d for _, d in maps.values()))
    x = np.zeros((n, leaves), dtype=np.int64)

    def gather(first: int, count: int, size: int) -> npt.NDArray[np.int64]:
        # the nodes of subtrees first..first+count−1, level by level: (n, count, nodes per subtree)
        blocks = []
        for level in range(1, height + 1):
            per = -(-size // branching ** (height - level))  # nodes of this level holding leaves
            span = branching ** (level - 1)
            stop = first * span + (count * span if size == sub_leaves else per)  # a partial subtree: its nodes only
            blocks.append(raw[level - 1][:, first * span:stop].reshape(n, count, -1)[:, :, :per])
        return np.concatenate(blocks, axis=2)

    if full:
        weights, d = maps[sub_leaves]
        x[:, :full * sub_leaves] = (_apply(gather(0, full, sub_leaves), weights) * (denominator // d)
                                    ).reshape(n, full * sub_leaves)
    if rest:
        weights, d = maps[rest]
        x[:, full * sub_leaves:] = _apply(gather(full, 1, rest), weights)[:, 0, :] * (denominator // d)
    numerators = []
    padded = np.zeros((n, branching ** height), dtype=np.int64)
    padded[:, :leaves] = x
    for level in range(1, height + 1):
        width = branching ** (height - level)
        nodes = padded.reshape(n, branching ** level, width).sum(axis=2)
        numerators.append(nodes[:, :-(-leaves // width)])
    return Consistent(numerators, denominator)
