"""The array API: decide per partition whether it may be released.

    keep = dpselect.select(counts, epsilon=1.0, delta=1e-5)
    keep, noisy = dpselect.release(counts, epsilon=1.0, delta=1e-5)
    dpselect.keep_probability(n, epsilon=1.0, delta=1e-5)
    dpselect.crossovers(epsilon=1.0, delta=1e-5)

``counts`` are numbers of distinct privacy units (users) per partition, any integer dtype and
shape, contiguous or strided; each user must contribute to at most
``max_partitions_contributed`` partitions (bound contributions before counting: see
``dpselect.select_partitions``). All randomness comes from the package CSPRNG.

Internal: not part of the public API (the README's "What semver covers"); import what you need from ``dpselect``. It may change in any release.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from dpselect._arrays import as_counts, check_out
from dpselect.mechanisms import (IndependentSelection, NoRelease, PiOptSelection, RowMechanism, TabledSelection,
                                 TSGDRelease, make_strategy)
from dpselect.core.theory import exact_crossovers

__all__ = ["select", "release", "select_rows", "keep_probability", "crossovers", "Crossovers", "Release"]


def _strategy(name: str, epsilon: float, delta: float, max_partitions_contributed: int,
              delta_split: str, allow_no_release: bool = False, **options: Any) -> Any:
    """The validated, cached strategy behind each function of this module."""
    return make_strategy(name, epsilon=epsilon, delta=delta, delta_split=delta_split,
                         max_partitions_contributed=max_partitions_contributed,
                         allow_no_release=allow_no_release, **options)


class Release(NamedTuple):
    """keep[i]: partition i is published; noisy_counts[i]: its published count n + X (> k),
    0 where not published."""

    keep: npt.NDArray[np.bool_]
    noisy_counts: npt.NDArray[np.int64]


class Crossovers(NamedTuple):
    """Per-partition crossover points (Desfontaines et al., PoPETs 2022, Theorem 1 and
    Definition 7), at ε' = ε/κ and δ', decided in exact arithmetic (docs/privacy/pi-opt.md).

    n1: last count of pure geometric growth of pi_opt; n2: last count with pi_opt(n) < 1;
    k: the release threshold of the TSGD release, as certified (Definition 7 gives n1; the
    quantized noise may need one more; n1 when δ' is too small for the release to run); table_length: the first count the certified kernel
    keeps with certainty. table_length = n2 + 1, except when pi_opt(n2) lies within the
    table's rounding (~2^-100) of 1 − δ', where the table, rounded toward privacy, needs
    n2 + 2 entries."""

    n1: int
    n2: int
    k: int
    table_length: int


def select(
    counts: npt.ArrayLike,
    epsilon: float,
    delta: float,
    *,
    strategy: str = "pi_opt",
    max_partitions_contributed: int = 1,
    delta_split: str = "composition",
    neighbours: str = "add_remove",
    allow_no_release: bool = False,
    out: np.ndarray | None = None,
    rng: object | None = None,
    **options: Any,
) -> npt.NDArray[np.bool_]:
    """Boolean mask of the partitions to release: by the optimal rule pi_opt (default), or by
    ``strategy="laplace"``, ``"gaussian"`` or ``"auto"`` (the one :func:`dpselect.recommend`
    finds releases the most); ``options`` are the strategy's (``pre_threshold``, ...).

    Guarantee (Desfontaines et al., PoPETs 2022, Theorem 1; docs/privacy/pi-opt.md and the
    page of the chosen mechanism): (ε, δ)-DP for adding or removing one user (or replacing one,
    ``neighbours="replace"``), *assuming* each user contributes to at most
    ``max_partitions_contributed`` of the counts (bound contributions first:
    :func:`dpselect.select_partitions` does); each partition is kept independently with the
    certified probability that :func:`keep_probability` reports. ``out``: a preallocated bool
    array of counts' shape. δ = 0 releases nothing (Theorem 2) and raises unless
    ``allow_no_release=True``."""
    built = _strategy(strategy, epsilon, delta, max_partitions_contributed, delta_split, allow_no_release,
                      neighbours=neighbours, **options)
    if not isinstance(built, TabledSelection):  # δ = 0 allowed, or a mechanism that is not keep/drop
        if isinstance(built, RowMechanism):  # it needs each user's set, not counts
            raise ValueError(f"strategy {strategy!r} selects from (user, partition) rows, not counts: use "
                             "dpselect.select_rows or dpselect.select_partitions")
        if built.releases_counts and not isinstance(built, NoRelease):
            raise ValueError(f"strategy {strategy!r} releases noisy counts: use dpselect.release")
        arr = as_counts(counts)
        target = None if out is None else check_out(out, arr.shape, np.dtype(np.bool_), "out")
        keep = built.apply(arr, rng=rng).keep
        if target is not None:
            target[...] = keep
            return target
        return keep
    return built.select(counts, out=out, rng=rng)


def release(
    counts: npt.ArrayLike,
    epsilon: float,
    delta: float,
    *,
    max_partitions_contributed: int = 1,
    delta_split: str = "composition",
    neighbours: str = "add_remove",
    allow_no_release: bool = False,
    out: tuple[np.ndarray, np.ndarray] | None = None,
    rng: object | None = None,
    pre_threshold: int = 1,
    public: bool | npt.ArrayLike = False,
    public_threshold: int | None = None,
) -> Release:
    """Thresholded release with TSGD noise: which partitions to publish and their noisy counts.

    Guarantee (Desfontaines et al., PoPETs 2022, Theorem 6; docs/privacy/tsgd-release.md): the
    published keys and counts together are (ε, δ)-DP for adding or removing one user who
    contributes to at most ``max_partitions_contributed`` of the counts (assumed), with the δ
    of the quantized noise certified exactly.
    Returns ``Release(keep, noisy_counts)`` (unpack as ``keep, noisy = release(...)``);
    ``out=(keep_out, noisy_out)`` writes into preallocated bool / int64 arrays. Needs ε > 0.
    With ``pre_threshold`` τ, partitions with fewer than τ users are never published.

    Public partitions (docs/privacy/public-partitions.md): ``public=True`` publishes every
    count (each a listed key, 0 when absent from the data) with its noisy count; a bool mask
    ``public`` marks the public ones among the data's, which are published above
    ``public_threshold`` (default k: no absent public key is ever published) while the others
    keep the thresholded rule."""
    if public is not False:
        if pre_threshold != 1 or out is not None:
            raise ValueError("public partitions take neither pre_threshold nor out=")
        if public is True:
            built = _strategy("public", epsilon, delta, max_partitions_contributed, delta_split, allow_no_release,
                              neighbours=neighbours)
            if public_threshold is not None:
                raise ValueError("public_threshold applies to a public mask (the mixed release), not public=True")
            result = built.apply(as_counts(counts), rng=rng)
        else:
            built = _strategy("mixed", epsilon, delta, max_partitions_contributed, delta_split, allow_no_release,
                              neighbours=neighbours, public_threshold=public_threshold)
            result = built.apply(as_counts(counts), rng=rng, public=np.asarray(public))
        assert result.noisy_counts is not None
        return Release(result.keep, result.noisy_counts)
    built = _strategy("release", epsilon, delta, max_partitions_contributed, delta_split, allow_no_release,
                      neighbours=neighbours, pre_threshold=pre_threshold)
    if not isinstance(built, TSGDRelease):  # δ = 0, explicitly allowed
        arr = as_counts(counts)
        if out is not None:
            if not isinstance(out, tuple) or len(out) != 2:
                raise TypeError("out must be a tuple (keep, noisy_counts) of preallocated arrays")
            keep_out = check_out(out[0], arr.shape, np.dtype(np.bool_), "out[0] (keep)")
            noisy_out = check_out(out[1], arr.shape, np.dtype(np.int64), "out[1] (noisy_counts)")
        result = built.apply(arr, rng=rng)
        assert result.noisy_counts is not None
        if out is not None:
            keep_out[...] = result.keep
            noisy_out[...] = result.noisy_counts
            return Release(keep_out, noisy_out)
        return Release(result.keep, result.noisy_counts)
    keep, noisy = built.release(counts, out=out, rng=rng)
    return Release(keep, noisy)


def keep_probability(
    n: npt.ArrayLike,
    epsilon: float,
    delta: float,
    *,
    strategy: str = "pi_opt",
    max_partitions_contributed: int = 1,
    delta_split: str = "composition",
    neighbours: str = "add_remove",
    **options: Any,
) -> npt.NDArray[np.float64] | float:
    """The probability that a partition of n users is released (vectorized), for any
    count-based strategy: "pi_opt" (default), "release", "laplace", "gaussian", "auto".

    These are the exact probabilities the kernel samples with (certified fixed-point table
    entries, or the TSGD release's exact P[n + X > k]), rounded to float64 for display — not a
    floating-point closed form."""
    built = _strategy(strategy, epsilon, delta, max_partitions_contributed, delta_split,
                      allow_no_release=True, neighbours=neighbours, **options)
    if not isinstance(built, IndependentSelection):  # a row mechanism, or the mixed release
        raise ValueError(f"strategy {strategy!r} does not keep a partition with a probability of its count "
                         "alone; keep_probability takes the count-based strategies: pi_opt, release, laplace, "
                         "gaussian, auto, public")
    arr = as_counts(n, "n")
    if arr.size and np.issubdtype(arr.dtype, np.signedinteger) and arr.min() < 0:
        raise ValueError("n must be non-negative (numbers of distinct users)")
    result = built.keep_probability(arr)
    return float(result) if arr.ndim == 0 else result


def select_rows(
    users: npt.ArrayLike,
    partitions: npt.ArrayLike,
    epsilon: float,
    delta: float,
    *,
    strategy: str = "weighted_gaussian",
    max_partitions_contributed: int = 1,
    n_partitions: int | None = None,
    rng: object | None = None,
    **options: Any,
) -> npt.NDArray[np.bool_]:
    """Partition selection on (user code, partition code) rows, for the mechanisms that need each
    user's whole set: "weighted_gaussian" (default), "weighted_laplace", "dp_sips",
    "cumulative_sips", "policy_gaussian", "policy_laplace". Returns keep[x] for every partition code
    x < n_partitions (default: the largest code + 1).

    Guarantee (docs/privacy/weighted.md; docs/privacy/cumulative-sips.md): (ε, δ)-DP for adding or removing all rows of one user;
    κ = ``max_partitions_contributed`` is *enforced*: each user keeps at most κ of their distinct
    partitions, chosen uniformly with the package CSPRNG, before weighting."""
    from dpselect.mechanisms.registry import ROW_STRATEGIES

    if strategy not in ROW_STRATEGIES:
        raise ValueError(f"strategy must be one of {sorted(ROW_STRATEGIES)} (count-based mechanisms take counts: "
                         f"dpselect.select), got {strategy!r}")
    built = _strategy(strategy, epsilon, delta, max_partitions_contributed, "composition", **options)
    return built.select_rows(users, partitions, n_partitions, rng=rng)


def crossovers(
    epsilon: float,
    delta: float,
    *,
    max_partitions_contributed: int = 1,
    delta_split: str = "composition",
) -> Crossovers:
    """n1, n2 (exact), the release threshold k and the certified table length for these
    parameters (needs ε > 0, δ > 0)."""
    # The strategy validates the parameters once; its params carry the per-partition budget.
    select_strategy = _strategy("pi_opt", epsilon, delta, max_partitions_contributed, delta_split,
                                allow_no_release=True)
    params = select_strategy.params
    if params.partition_epsilon == 0 or params.partition_delta == 0:
        raise ValueError("crossovers need epsilon > 0 and delta > 0 (Theorem 2 covers the rest)")
    assert isinstance(select_strategy, PiOptSelection)
    table = select_strategy.table  # built at min(ε', EPSILON_CAP): the same crossovers
    n1, n2 = exact_crossovers(table.partition_epsilon, table.partition_delta)
    try:
        release_strategy = _strategy("release", epsilon, delta, max_partitions_contributed, delta_split)
        assert isinstance(release_strategy, TSGDRelease)
        k = release_strategy.k
    except ValueError:  # δ' below what the release's 64-bit noise can certify
        k = n1  # Definition 7's threshold
    return Crossovers(n1, n2, k, table.length)
