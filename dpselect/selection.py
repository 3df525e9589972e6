"""The array API: decide per partition whether it may be released.

    keep = dpselect.select(counts, epsilon=1.0, delta=1e-5)
    keep, noisy = dpselect.release(counts, epsilon=1.0, delta=1e-5)
    dpselect.keep_probability(n, epsilon=1.0, delta=1e-5)
    dpselect.crossovers(epsilon=1.0, delta=1e-5)

``counts`` are numbers of distinct privacy units (users) per partition, any integer dtype and
shape, contiguous or strided; each user must contribute to at most
``max_partitions_contributed`` partitions (bound contributions before counting: see
``dpselect.select_partitions``). All randomness comes from the package CSPRNG.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from dpselect.strategies import PiOptSelection, TSGDRelease, make_strategy
from dpselect.theory import pi_opt_crossovers

__all__ = ["select", "release", "keep_probability", "crossovers", "Crossovers", "Release"]


def _strategy(name: str, epsilon: float, delta: float, max_partitions_contributed: int,
              delta_split: str, allow_no_release: bool = False) -> object:
    """The validated, cached strategy behind each function of this module."""
    return make_strategy(name, epsilon=epsilon, delta=delta, delta_split=delta_split,
                         max_partitions_contributed=max_partitions_contributed,
                         allow_no_release=allow_no_release)


class Release(NamedTuple):
    """keep[i]: partition i is published; noisy_counts[i]: its published count n + X (> k),
    0 where not published."""

    keep: npt.NDArray[np.bool_]
    noisy_counts: npt.NDArray[np.int64]


class Crossovers(NamedTuple):
    """Per-partition crossover points (seed 003 Theorem 1, Definition 7), at ε' = ε/κ and δ'.

    n1: last count of pure geometric growth; n2: last count with keep probability < 1 in
    exact arithmetic; k: TSGD threshold of the release (as certified); table_length: first
    count the certified kernel keeps with certainty (>= n2 + 1)."""

    n1: int
    n2: int
    k: int
    table_length: int


def select(
    counts: npt.ArrayLike,
    epsilon: float,
    delta: float,
    *,
    max_partitions_contributed: int = 1,
    delta_split: str = "composition",
    allow_no_release: bool = False,
    out: np.ndarray | None = None,
    rng: object | None = None,
) -> npt.NDArray[np.bool_]:
    """Boolean mask of the partitions to release, by the optimal rule pi_opt.

    Guarantee (spec core.md §1–2; rng-and-exactness.md §3): (ε, δ)-DP for adding or removing
    one user who contributes to at most ``max_partitions_contributed`` partitions; each
    partition is kept independently with the certified probability that
    :func:`keep_probability` reports. ``out``: a preallocated bool array of counts' shape.
    δ = 0 releases nothing (Theorem 2) and raises unless ``allow_no_release=True``."""
    strategy = _strategy("pi_opt", epsilon, delta, max_partitions_contributed, delta_split, allow_no_release)
    if not isinstance(strategy, PiOptSelection):  # δ = 0, explicitly allowed
        keep = strategy.apply(counts, rng=rng).keep
        if out is not None:
            out[...] = keep
            return out
        return keep
    return strategy.select(counts, out=out, rng=rng)


def release(
    counts: npt.ArrayLike,
    epsilon: float,
    delta: float,
    *,
    max_partitions_contributed: int = 1,
    delta_split: str = "composition",
    allow_no_release: bool = False,
    out: tuple[np.ndarray, np.ndarray] | None = None,
    rng: object | None = None,
) -> Release:
    """Thresholded release with TSGD noise: which partitions to publish and their noisy counts.

    Guarantee (spec core.md §3, Theorem 6; rng-and-exactness.md §4): the published keys and
    counts together are (ε, δ)-DP, with the δ of the quantized noise certified exactly.
    Returns ``Release(keep, noisy_counts)`` (unpack as ``keep, noisy = release(...)``);
    ``out=(keep_out, noisy_out)`` writes into preallocated bool / int64 arrays. Needs ε > 0."""
    strategy = _strategy("release", epsilon, delta, max_partitions_contributed, delta_split, allow_no_release)
    if not isinstance(strategy, TSGDRelease):  # δ = 0, explicitly allowed
        result = strategy.apply(counts, rng=rng)
        assert result.noisy_counts is not None
        if out is not None:
            out[0][...] = result.keep
            out[1][...] = result.noisy_counts
            return Release(out[0], out[1])
        return Release(result.keep, result.noisy_counts)
    keep, noisy = strategy.release(counts, out=out, rng=rng)
    return Release(keep, noisy)


def keep_probability(
    n: npt.ArrayLike,
    epsilon: float,
    delta: float,
    *,
    max_partitions_contributed: int = 1,
    delta_split: str = "composition",
) -> npt.NDArray[np.float64] | float:
    """The keep probability :func:`select` uses for a partition of n users (vectorized).

    These are the certified fixed-point values q[n]/2^64 the kernel samples with (exactly,
    then rounded to float64 for display), not the floating-point closed form."""
    strategy = _strategy("pi_opt", epsilon, delta, max_partitions_contributed, delta_split, allow_no_release=True)
    arr = np.asarray(n)
    if isinstance(strategy, PiOptSelection):
        result = strategy.keep_probability(arr)
    else:  # δ = 0: nothing is ever kept (Theorem 2)
        result = strategy.apply(arr).keep.astype(np.float64)
    return float(result) if np.ndim(n) == 0 else result


def crossovers(
    epsilon: float,
    delta: float,
    *,
    max_partitions_contributed: int = 1,
    delta_split: str = "composition",
) -> Crossovers:
    """n1, n2, k and the certified table length for these parameters (needs ε > 0, δ > 0)."""
    # The strategy validates the parameters once; its params carry the per-partition budget.
    select_strategy = _strategy("pi_opt", epsilon, delta, max_partitions_contributed, delta_split,
                                allow_no_release=True)
    params = select_strategy.params
    if params.partition_epsilon == 0 or params.partition_delta == 0:
        raise ValueError("crossovers need epsilon > 0 and delta > 0 (Theorem 2 covers the rest)")
    theory = pi_opt_crossovers(float(params.partition_epsilon), float(params.partition_delta))
    release_strategy = _strategy("release", epsilon, delta, max_partitions_contributed, delta_split)
    assert isinstance(select_strategy, PiOptSelection) and isinstance(release_strategy, TSGDRelease)
    return Crossovers(theory.n1, theory.n2, release_strategy.k, select_strategy.table.length)
