"""The rules that turn APPROX_BOUNDS' noisy histogram into bounds (docs/privacy/approx-bounds.md,
steps 5–7). Pure post-processing of the noisy counts: no data, no randomness.

Both rules read the 2B cells on the real line: line index j < B is the negative bin B − 1 − j
(largest magnitudes first), j ≥ B the positive bin j − B. A cell "has data" at threshold K when
its noisy count is ≥ K.

* ``"google"`` (Google's ``ApproxBounds``, Desfontaines' thesis §4.2.5): the bounds are the
  outer edges of the outermost cells with data, at the first threshold of the retry order at
  which some cell has data.
* ``"tails"``: the same cells (the *core*), then each bound moves outward while some window of
  w ∈ {1, 2, 4, …, 32} adjacent cells beyond it holds, in noisy count, clearly more than a
  fraction α of the core's mass: at least ⌈α·N̂⌉ + T(w, ⌊log2 d⌋) for a window starting d cells
  beyond the bound, where the sum of w noise draws exceeds T(w, k) with probability at most
  10⁻³·2^-(2k+1)/6. Each step moves the bound to the start of the furthest passing window. A
  long tail whose cells are each far below K but which together hold many values is then kept
  inside the bounds, and so is one across the ~2,000 empty float cells around 0, while noise
  alone moves a bound with probability at most 10⁻³ per step.
"""
from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpselect.aggregation._bounds_thresholds import window_threshold

__all__ = [
    "EXTENSION_RATE",
    "EXTENSION_WIDTHS",
    "RULES",
    "TAIL_FRACTION",
    "cell_to_line",
    "core",
    "extend",
    "first_core",
    "sparse_cores",
]

RULES = ("tails", "google")
# The tails rule: the fraction of the core's noisy mass a window beyond a bound must clearly
# exceed (central 99%), the chance that noise alone extends a bound by one cell at a given
# position, and the window widths tried (spread over a factor 2^32 of magnitudes).
TAIL_FRACTION = Fraction(1, 200)
EXTENSION_RATE = 1e-3
EXTENSION_WIDTHS = (1, 2, 4, 8, 16, 32)


def cell_to_line(cells: npt.NDArray[np.int64], num_bins: int) -> npt.NDArray[np.int64]:
    """Line index of histogram cells (bin i ≥ 0 for values ≥ 0, B + i for negative ones)."""
    cells = np.asarray(cells, dtype=np.int64)
    return np.where(cells < num_bins, cells + num_bins, 2 * num_bins - 1 - cells)


def core(line: npt.NDArray[np.int64], k: int) -> tuple[int, int] | None:
    """(lowest, highest) line index with a noisy count ≥ k, or None."""
    passing = np.flatnonzero(line >= k)
    if passing.size == 0:
        return None
    return int(passing[0]), int(passing[-1])


def first_core(line: npt.NDArray[np.int64], thresholds: list[int]) -> tuple[int, int, int] | None:
    """Google's scan with the retry rule: (lowest, highest, attempt) at the first threshold in
    the retry order at which some cell has data, or None ("not enough data")."""
    for attempt, k in enumerate(thresholds, start=1):
        found = core(line, k)
        if found is not None:
            return found[0], found[1], attempt
    return None


@functools.lru_cache(maxsize=64)
def _window_thresholds(scale: Fraction, blocks: int) -> npt.NDArray[np.int64]:
    """T[w, k]: the threshold of a window of width EXTENSION_WIDTHS[w] starting 2^k to 2^(k+1) − 1
    cells beyond the bound. Block k gets the rate EXTENSION_RATE·2^-(k+1), shared by its 2^k
    positions and the widths, so the rates of all windows tested in one step sum to at most
    EXTENSION_RATE: nearby windows need little evidence, far ones about as much as a single
    cell needs at Google's threshold."""
    table = np.zeros((len(EXTENSION_WIDTHS), blocks), dtype=np.int64)
    for k in range(blocks):
        log_rate = math.log(EXTENSION_RATE / len(EXTENSION_WIDTHS)) - (2 * k + 1) * math.log(2)
        for i, w in enumerate(EXTENSION_WIDTHS):
            table[i, k] = window_threshold(scale, w, log_rate)
    return table


def _furthest_start(sums: list[npt.NDArray[np.int64]], distance: npt.NDArray[np.int64],
                    table: npt.NDArray[np.int64], extra: int) -> int | None:
    """The largest distance d at which some window (``sums[w][d − 1]`` is the noisy count of
    the window of width w starting d cells beyond the bound) passes its threshold, or None."""
    best = None
    block = np.frexp(distance.astype(np.float64))[1] - 1  # ⌊log2 d⌋, exact for d ≥ 1
    for i, window in enumerate(sums):
        m = window.size
        if m == 0:
            continue
        passing = np.flatnonzero(window >= table[i, block[:m]] + extra)
        if passing.size:
            d = int(distance[passing[-1]])
            best = d if best is None else max(best, d)
    return best


def extend(line: npt.NDArray[np.int64], low: int, high: int, scale: Fraction) -> tuple[int, int]:
    """The tails rule's outward extension of the core [low, high] (line indices): each step
    moves the bound to the start of the furthest window beyond it that passes its threshold,
    until none does. A window starting d cells beyond the bound passes when its noisy count is
    at least ⌈α·N̂⌉ + T[w, ⌊log2 d⌋] (N̂ the noisy count of the core, clipped at 0)."""
    n = line.size
    line = np.asarray(line, dtype=np.int64)
    limit = 2**62 // max(n, 1)
    if n == 0 or (int(line.min()) > -limit and int(line.max()) < limit):  # int64 partial sums are exact
        cumulative = np.concatenate([[0], np.cumsum(line)])
    else:  # exact Python ints: sums of large int64 noisy counts would overflow
        cumulative = np.array([0, *itertools.accumulate(int(v) for v in line)], dtype=object)
    extra = math.ceil(TAIL_FRACTION * max(0, int(cumulative[high + 1]) - int(cumulative[low])))
    table = _window_thresholds(Fraction(scale), n.bit_length())

    def windows_above(h: int) -> list[npt.NDArray[np.int64]]:  # window (w) starting h + d, d = 1, 2, …
        return [cumulative[h + 1 + w:] - cumulative[h + 1:n + 1 - w] if h + w < n else np.zeros(0, np.int64)
                for w in EXTENSION_WIDTHS]

    def windows_below(lo: int) -> list[npt.NDArray[np.int64]]:  # window (w) ending lo − d
        return [(cumulative[lo:w - 1:-1] - cumulative[lo - w::-1][:max(0, lo - w + 1)])
                if lo - w >= 0 else np.zeros(0, np.int64) for w in EXTENSION_WIDTHS]

    distance = np.arange(1, n + 1, dtype=np.int64)
    while high + 1 < n:
        step = _furthest_start(windows_above(high), distance, table, extra)
        if step is None:
            break
        high += step
    while low > 0:
        step = _furthest_start(windows_below(low), distance, table, extra)
        if step is None:
            break
        low -= step
    return low, high


def sparse_cores(partitions: npt.NDArray[np.int64], line_index: npt.NDArray[np.int64],
                 noisy: npt.NDArray[np.int64], n_partitions: int, thresholds: list[int]
                 ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Google's scan with the retry rule over many histograms given sparsely: the cells
    (``partitions``, ``line_index``) whose noisy count ``noisy`` is at least the last
    threshold (every other cell passes none). Returns, per partition, whether some cell has
    data at some attempt, the attempts made (the first that found, else all of them), and the
    lowest and highest line index with data at that attempt (0 where none)."""
    m = len(thresholds)
    ascending = np.asarray(thresholds[::-1], dtype=np.int64)
    if np.any(np.diff(ascending) < 0):
        raise ValueError("thresholds must be in the retry order (non-increasing)")
    # a cell with noisy count v has data from attempt m − #{K ≤ v} + 1 on (the K are a suffix)
    level = m - np.searchsorted(ascending, noisy, side="right") + 1
    attempt = np.full(n_partitions, m + 1, dtype=np.int64)
    np.minimum.at(attempt, partitions, level)
    found = attempt <= m
    at_attempt = level == attempt[partitions]
    low = np.full(n_partitions, np.iinfo(np.int64).max, dtype=np.int64)
    high = np.full(n_partitions, -1, dtype=np.int64)
    np.minimum.at(low, partitions[at_attempt], line_index[at_attempt])
    np.maximum.at(high, partitions[at_attempt], line_index[at_attempt])
    return found, np.where(found, attempt, m), np.where(found, low, 0), np.where(found, high, 0)
