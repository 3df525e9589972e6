"""Exact per-key sums in 128 bits, and the clamp that makes them safe to add noise to
(docs/privacy/aggregate.md, "Exact sums").

A key's sum of grid units can leave int64: 2^32 kept rows of values up to 2^52 grid units in
magnitude sum to 2^84. A sum computed in int64 would wrap (a released +8.59e9 becoming −8.59e9
when one user joins), and a sum that refuses to overflow makes the release fail depending on the
data. So the bounding kernel sums in 128 bits (csrc/wide_sum.h), shards and partial sums are
merged exactly here, and each key's exact total is then clamped to [−2^62, 2^62] before noise.
Clamping is 1-Lipschitz (|clamp(a) − clamp(b)| ≤ |a − b|), so every sensitivity still holds, and
the clamped total plus noise of scale at most 2^56 (:data:`MAX_NOISE_SCALE`, checked from the
parameters before any work) stays inside int64 except with probability below 2^-90.

Arrays of signed 128-bit integers are held as two numpy words, vectorised, with no Python loop
over keys."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["SUM_LIMIT", "MAX_NOISE_SCALE", "Wide", "sums_by_code"]

# Every exact statistic is clamped to [−SUM_LIMIT, SUM_LIMIT] before noise is added ...
SUM_LIMIT = 2**62
# ... and every noise scale (in the statistic's integer units) is at most this, so the noisy value
# leaves int64 only if |noise| > 2^62, an event of probability below 2·e^(−64) < 2^-90.
MAX_NOISE_SCALE = 2**56

_MASK32 = np.uint64(0xFFFFFFFF)


@dataclass(frozen=True)
class Wide:
    """Signed 128-bit integers: ``hi·2^64 + lo`` with ``hi`` int64 and ``lo`` uint64 arrays of one
    shape (two's complement, as the kernel writes them)."""

    lo: npt.NDArray[np.uint64]
    hi: npt.NDArray[np.int64]

    @classmethod
    def from_words(cls, words: npt.NDArray[np.uint64]) -> Wide:
        """From the kernel's layout: ``words[..., 0]`` the low word, ``words[..., 1]`` the high."""
        w = np.asarray(words, dtype=np.uint64)
        return cls(w[..., 0].copy(), w[..., 1].view(np.int64).copy())

    @classmethod
    def from_int64(cls, values: npt.ArrayLike) -> Wide:
        a = np.asarray(values, dtype=np.int64)
        return cls(a.view(np.uint64).copy(), np.where(a < 0, np.int64(-1), np.int64(0)))

    @classmethod
    def zeros(cls, shape: int | tuple[int, ...]) -> Wide:
        return cls(np.zeros(shape, np.uint64), np.zeros(shape, np.int64))

    @classmethod
    def from_halves(cls, high: npt.ArrayLike, low: npt.ArrayLike) -> Wide:
        """``high·2^32 + low`` for int64 ``high`` and ``low`` (each a sum of 32-bit halves)."""
        return cls.from_int64(high).shifted_left(32) + cls.from_int64(low)

    @classmethod
    def product(cls, x: npt.ArrayLike, r: npt.ArrayLike) -> Wide:
        """``x·r`` exactly, for int64 ``x`` and ``0 ≤ r < 2^32``: x = x1·2^32 + x0 with x0 in
        [0, 2^32), so x1·r fits int64 and x0·r fits uint64."""
        xa = np.asarray(x, dtype=np.int64)
        ra = np.asarray(r, dtype=np.int64)
        if ra.size and (ra.min() < 0 or ra.max() >= 2**32):
            raise ValueError("Wide.product: the second factor must lie in [0, 2**32)")
        x1 = xa >> 32
        x0 = xa.view(np.uint64) & _MASK32
        low = x0 * ra.astype(np.uint64)
        return cls.from_int64(x1 * ra).shifted_left(32) + cls(low, np.zeros(low.shape, np.int64))

    def shifted_left(self, bits: int) -> Wide:
        """``self·2^bits`` for 0 < bits < 64 (the caller knows the result fits 128 bits)."""
        hi = (self.hi.view(np.uint64) << np.uint64(bits)) | (self.lo >> np.uint64(64 - bits))
        return Wide(self.lo << np.uint64(bits), hi.view(np.int64))

    def __add__(self, other: Wide) -> Wide:
        lo = self.lo + other.lo  # mod 2^64
        carry = (lo < self.lo).astype(np.uint64)
        hi = self.hi.view(np.uint64) + other.hi.view(np.uint64) + carry
        return Wide(lo, hi.view(np.int64))

    def __neg__(self) -> Wide:
        lo = ~self.lo + np.uint64(1)
        hi = ~self.hi.view(np.uint64) + (lo == 0).astype(np.uint64)
        return Wide(lo, hi.view(np.int64))

    def __sub__(self, other: Wide) -> Wide:
        return self + (-other)

    def __getitem__(self, index: Any) -> Wide:  # whatever indexes an ndarray
        return Wide(self.lo[index], self.hi[index])

    @property
    def shape(self) -> tuple[int, ...]:
        return self.lo.shape

    def clamped(self, limit: int = SUM_LIMIT) -> npt.NDArray[np.int64]:
        """Each value clamped to [−limit, limit] (limit ≤ 2^63 − 1), as int64."""
        if not 0 < limit < 2**63:
            raise ValueError("limit must lie in (0, 2**63)")
        fits = ((self.hi == 0) & (self.lo <= np.uint64(limit))) | \
            ((self.hi == -1) & (self.lo >= np.uint64(2**64 - limit)))
        saturated = np.where(self.hi < 0, np.int64(-limit), np.int64(limit))
        return np.where(fits, self.lo.view(np.int64), saturated)

    def outside(self, limit: int = SUM_LIMIT) -> npt.NDArray[np.bool_]:
        """Where :meth:`clamped` changes the value."""
        return self.clamped(limit) != self.lo.view(np.int64) if self.lo.size else np.zeros(self.shape, bool)

    def to_ints(self) -> list[int]:
        """The exact values as Python ints (flattened; for reports and tests)."""
        return [int(h) * 2**64 + int(lo) for h, lo in zip(self.hi.ravel().tolist(), self.lo.ravel().tolist())]

    @classmethod
    def from_ints(cls, values: list[int]) -> Wide:
        """From Python ints in [−2^127, 2^127)."""
        lo = np.array([v & (2**64 - 1) for v in values], dtype=np.uint64)
        hi = np.array([(v >> 64) for v in values], dtype=np.int64)
        return cls(lo, hi)


def sums_by_code(units: npt.NDArray[np.int64], codes: npt.NDArray[np.intp], n: int) -> Wide:
    """Exact sums of int64 ``units`` per code in [0, n) (codes checked by the caller): sums of
    32-bit halves, each below 2^32·count (int64 while a code has fewer than 2^31 values), joined
    in 128 bits."""
    counts = np.bincount(codes, minlength=n)
    order = np.argsort(codes, kind="stable")
    grouped = units[order]
    starts = np.concatenate(([0], np.cumsum(counts)[:-1])) if n else np.zeros(0, dtype=np.int64)
    present = counts > 0
    low = np.zeros(n, dtype=np.int64)
    high = np.zeros(n, dtype=np.int64)
    if grouped.size:
        low[present] = np.add.reduceat(grouped & 0xFFFFFFFF, starts[present])
        high[present] = np.add.reduceat(grouped >> 32, starts[present])
    return Wide.from_halves(high, low)
