"""Sparse noisy histograms for APPROX_BOUNDS per partition (docs/privacy/approx-bounds.md,
"Per partition, sparsely").

The dense mechanism adds independent discrete Laplace noise X (scale b) to every one of the
n·2B cells; the scan then reads only the cells whose noisy count reaches the smallest threshold
K, with their noisy counts. :func:`passing_cells` samples exactly that, with the same joint law,
while drawing noise only for the non-empty cells:

* a non-empty cell gets its own exact noise draw, as in the dense version;
* an empty cell's noisy count is X alone, and P[X ≥ K] = t = q^K/(1 + q) (q = e^(−1/b), K ≥ 0)
  independently for every cell. So the empty cells that pass are a run of independent
  Bernoulli(t) trials, whose gaps are independent geometric variables, P[G ≥ g] = (1 − t)^g:
  :func:`geometric_skip` samples each gap exactly, by inverse transform with a uniform U whose
  bits are drawn only as far as the comparison U < (1 − t)^g needs, against certified rational
  intervals around (1 − t)^g;
* given that an empty cell passes, its noisy count is K + Y with Y geometric, P[Y = y] =
  (1 − q)q^y (the discrete Laplace is memoryless beyond 0): Y is a discrete Laplace draw of the
  exact kernel conditioned on being ≥ 0 (accepted with probability 1/(1 + q) ≥ 1/2).

When t is large (a small user-set threshold) skipping saves nothing, and the empty cells are
noised in chunks instead (the dense law itself, in bounded memory). Which way is taken depends
only on public parameters.
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Callable

import numpy as np
import numpy.typing as npt

from dpselect.aggregation._bounds_thresholds import smallest_true
from dpselect.aggregation.noise import DiscreteLaplaceNoise
from dpselect.core.exact import exp_neg_interval, fixed_power
from dpselect.rng import SecureRNG

__all__ = ["DENSE_RATE", "LazyUniform", "PassRate", "geometric_skip", "pass_rate", "passing_cells",
           "passing_empty_cells"]

# Above this pass probability per empty cell, chunked dense draws are cheaper than skipping.
DENSE_RATE = 2.0**-10
_CHUNK = 1 << 20
_WORD = 1 << 64


class LazyUniform:
    """A uniform U in [0, 1) of which only the leading bits are drawn (64 at a time, from the
    package CSPRNG), as many as the comparisons asked of it need."""

    def __init__(self, rng: SecureRNG) -> None:
        self._rng = rng
        self._value = 0  # U lies in [value/2^bits, (value + 1)/2^bits)
        self._bits = 0

    def _extend(self) -> None:
        word = int(self._rng.uniform_below_array(_WORD, 1)[0])
        self._value = (self._value << 64) | word
        self._bits += 64

    def approx(self) -> float:
        """U to double precision (for a starting guess only)."""
        if self._bits == 0:
            self._extend()
        return max(math.ldexp(float(self._value >> max(0, self._bits - 64)), -min(self._bits, 64)), 2.0**-1074)

    def below(self, bounds: Callable[[int], tuple[Fraction, Fraction]]) -> bool:
        """Whether U < x, for the x that ``bounds(precision)`` brackets: lo ≤ x ≤ hi at every
        precision, with hi − lo ≤ 2^-precision. Exact: bits of U and precision are added until
        U's interval lies wholly below lo or wholly at or above hi (it ends with probability 1;
        after the first 64 bits, another round is needed with probability about 2^-63)."""
        if self._bits == 0:
            self._extend()
        while True:
            lo, hi = bounds(self._bits + 16)
            if (self._value + 1) * lo.denominator <= lo.numerator << self._bits:
                return True
            if self._value * hi.denominator >= hi.numerator << self._bits:
                return False
            self._extend()


class PassRate:
    """t = P[X ≥ K] = q^K/(1 + q) for discrete Laplace X of scale b (K ≥ 0), and certified
    intervals around the survival function (1 − t)^g of the gaps between passes."""

    def __init__(self, scale: Fraction, k: int) -> None:
        if k < 0:
            raise ValueError("the threshold must be >= 0")
        self.scale, self.k = Fraction(scale), int(k)
        b = float(self.scale)
        self.estimate = math.exp(-self.k / b - math.log1p(math.exp(-1 / b)))
        self._intervals: dict[int, tuple[Fraction, Fraction]] = {}

    def interval(self, bits: int) -> tuple[Fraction, Fraction]:
        """(lo, hi) around t, hi − lo ≤ 2^-bits, both dyadic (cheap to subtract and power)."""
        if bits not in self._intervals:
            ek_lo, ek_hi = exp_neg_interval(self.k / self.scale, bits + 3)
            q_lo, q_hi = exp_neg_interval(1 / self.scale, bits + 3)
            lo, hi = ek_lo / (1 + q_hi), ek_hi / (1 + q_lo)
            one = 1 << (bits + 3)  # round outward to multiples of 2^-(bits+3)
            self._intervals[bits] = (Fraction(lo.numerator * one // lo.denominator, one),
                                     Fraction(-((-hi.numerator * one) // hi.denominator), one))
        return self._intervals[bits]

    def survival(self, g: int, bits: int) -> tuple[Fraction, Fraction]:
        """(lo, hi) around (1 − t)^g, hi − lo ≤ 2^-bits."""
        work = -(-(bits + 2 * max(1, g).bit_length() + 8) // 32) * 32  # few distinct precisions
        t_lo, t_hi = self.interval(work)
        return fixed_power(1 - t_hi, g, work, upper=False), fixed_power(1 - t_lo, g, work, upper=True)


@functools.lru_cache(maxsize=64)
def pass_rate(scale: Fraction, k: int) -> PassRate:
    """The :class:`PassRate` of (b, K), kept with its intervals between releases."""
    return PassRate(scale, k)


def geometric_skip(rate: PassRate, remaining: int, rng: SecureRNG) -> int | None:
    """The number G of cells that fail before the first one that passes, each passing
    independently with probability t, among ``remaining`` cells: None when all of them fail.
    Exact inverse transform: G ≥ g iff U < (1 − t)^g for one uniform U."""
    u = LazyUniform(rng)
    if u.below(lambda bits: rate.survival(remaining, bits)):
        return None  # G ≥ remaining: no pass
    log_fail = math.log1p(-min(rate.estimate, 0.5))
    guess = min(remaining - 1, int(math.log(u.approx()) / log_fail)) if log_fail < 0 else 0
    # the smallest g with U ≥ (1 − t)^(g+1), i.e. G = g; it is at most remaining − 1
    return smallest_true(lambda g: not u.below(lambda bits: rate.survival(g + 1, bits)), guess)


def _geometric_offsets(count: int, noise: DiscreteLaplaceNoise, rng: SecureRNG) -> npt.NDArray[np.int64]:
    """``count`` independent Y with P[Y = y] = (1 − q)q^y, y ≥ 0: discrete Laplace draws of the
    exact kernel, the non-negative ones kept in order."""
    kept: list[npt.NDArray[np.int64]] = []
    have = 0
    while have < count:
        draws = noise.sample(2 * (count - have) + 8, rng=rng)
        draws = draws[draws >= 0]
        kept.append(draws)
        have += draws.size
    return np.concatenate(kept)[:count] if kept else np.zeros(0, dtype=np.int64)


def passing_empty_cells(n_cells: int, noise: DiscreteLaplaceNoise, k: int, rng: SecureRNG
                        ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """For n_cells cells of true count 0, each noised independently: the (sorted) indices of
    those whose noisy count is ≥ k, and their noisy counts, in exactly the dense law."""
    rate = pass_rate(noise.scale, k)
    if rate.estimate > DENSE_RATE:
        cells, values = [], []
        for start in range(0, n_cells, _CHUNK):
            draws = noise.sample(min(_CHUNK, n_cells - start), rng=rng)
            hit = np.flatnonzero(draws >= k)
            cells.append(hit + start)
            values.append(draws[hit])
        if not cells:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.concatenate(cells).astype(np.int64), np.concatenate(values).astype(np.int64)
    found: list[int] = []
    position = 0
    while position < n_cells:
        gap = geometric_skip(rate, n_cells - position, rng)
        if gap is None:
            break
        position += gap
        found.append(position)
        position += 1
    cells_array = np.asarray(found, dtype=np.int64)
    return cells_array, k + _geometric_offsets(cells_array.size, noise, rng)


def passing_cells(occupied: npt.NDArray[np.int64], counts: npt.NDArray[np.int64], n_cells: int,
                  noise: DiscreteLaplaceNoise, k: int, rng: SecureRNG
                  ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Cells 0 … n_cells − 1, of counts ``counts`` at the (sorted, distinct) indices
    ``occupied`` and 0 elsewhere, each noised independently: the indices of the cells whose
    noisy count is ≥ k, and their noisy counts, with the same joint law as noising every cell
    and keeping those, at the cost of one draw per occupied cell."""
    noisy = noise.add(counts, rng=rng)
    keep = noisy >= k
    empty_cells, empty_noisy = passing_empty_cells(n_cells, noise, k, rng)
    # every cell got an independent pass decision; those of occupied cells are dropped (their
    # noise is their own draw above), which leaves the empty cells' independent decisions
    position = np.searchsorted(occupied, empty_cells)
    is_occupied = (position < occupied.size) & (occupied[np.minimum(position, max(occupied.size - 1, 0))]
                                                == empty_cells) if occupied.size else np.zeros(empty_cells.size, bool)
    return (np.concatenate([occupied[keep], empty_cells[~is_occupied]]),
            np.concatenate([noisy[keep], empty_noisy[~is_occupied]]))
