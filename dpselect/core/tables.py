"""Certified tables: what the C kernel samples from, proven DP in exact arithmetic.

Keep table (Desfontaines et al., PoPETs 2022, Theorem 1 and Lemma 1; docs/privacy/pi-opt.md)
    q[n] = 2^w · pi(n) as integers of w = 128 or 192 bits (two or three 64-bit limbs) for
    n < N, built by the pi_opt recurrence with one-sided rounding; counts >= N are kept surely.
    The width is chosen so that δ' is represented to better than 2^-48 relative: keep
    probabilities equal pi_opt to ~1e-13 relative for every per-partition δ' >= 2^-144.

TSGD table (Definitions 6–8, Theorem 6; docs/privacy/tsgd-release.md)
    Integer weights W(|x|), |x| <= k, whose neighbour ratios never exceed e^{ε'}; cumulative
    sums are sampled exactly by the kernel. The δ of the thresholded release (publish n + X iff
    n + X > k) is computed exactly for the quantized pmf, for every count n, and must not exceed
    the per-partition δ'.

Every table is re-checked when built by :mod:`dpselect.core.verify`, which shares nothing with the
builders here but the parameters (its own bound on e^ε, its own arithmetic). Tables are cached by
their exact parameters and handed out as read-only views of immutable ``bytes``: nobody, not
even with ``setflags(write=True)``, can change what a later call samples from (the kernel
handles additionally keep private copies).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from dpselect.core.exact import ceil_div, exp_lower
from dpselect.core.limits import MAX_KEEP_TABLE_ENTRIES, MAX_RELEASE_THRESHOLD, epsilon_too_small
from dpselect.core.params import PrivacyParams
from dpselect.core.theory import exact_crossovers, exact_n1
from dpselect.core.verify import (
    CertificationError,
    keep_numerators,
    release_delta,
    release_delta_bruteforce,
    verify_keep_table,
)

if TYPE_CHECKING:  # for the annotation only: KeepTable.handle imports the kernel itself
    from dpselect import _kernel

__all__ = [
    "CertificationError",
    "KeepTable",
    "TSGDTable",
    "keep_table",
    "tsgd_table",
    "tsgd_weights",
    "verify_keep_table",
    "release_delta",
    "release_delta_bruteforce",
    "MAX_TABLE_ENTRIES",
    "MIN_PARTITION_DELTA",
    "EPSILON_CAP",
]

# Longest table we build: ~(2/ε') ln(1/δ') entries. Past this, exact certification takes too
# long and the table stops fitting in cache.
MAX_TABLE_ENTRIES = MAX_KEEP_TABLE_ENTRIES
# Smallest per-partition δ' a keep table represents to 2^-48 relative (three 64-bit limbs).
MIN_PARTITION_DELTA = Fraction(1, 2**144)
_MAX_LIMBS = 3
# Tables are built and certified at min(ε', EPSILON_CAP): beyond it a 192-bit table cannot change
# any more (e^200 > 2^288), and a table certified at a smaller ε is DP at every larger one.
EPSILON_CAP = Fraction(200)


def read_only(array: np.ndarray) -> np.ndarray:
    """A read-only view of an immutable copy: numpy refuses to make a view of ``bytes`` writable."""
    view = np.frombuffer(array.tobytes(), dtype=array.dtype).reshape(array.shape)
    assert not view.flags.writeable
    return view


def _builder_exp_lower(eps: Fraction, bits: int) -> int:
    """a with a / 2^bits <= e^{ε'}, deliberately 2^-(bits - 24) relative below the exact bound:
    the independent verifier's own bound is far more accurate than that margin, so a table built
    with it always passes verification (at a utility cost of ~N · 2^-(bits - 24), negligible)."""
    a = math.floor(exp_lower(eps, bits + 32) * 2**bits)
    return max(1 << bits, a - (a >> (bits - 24)) - 1)  # A >= 1 is always valid: e^ε' >= 1


# --------------------------------------------------------------------------- keep table

@dataclass(frozen=True)
class KeepTable:
    """pi(n) = q[n] / 2^(64 limbs) is the keep probability of a partition with n users, for
    n < N = ``length``; larger counts are kept with probability 1 (``tail_certain``) or keep
    q[N − 1]'s probability. ``words`` is the (N, limbs) uint64 array of big-endian limbs the
    kernel samples from (read-only). ``partition_epsilon``/``partition_delta`` are the (ε', δ')
    at which the four per-partition inequalities were verified; (0, 0) when the table's
    certificate is of another kind (Gaussian thresholding with κ > 1)."""

    words: npt.NDArray[np.uint64]
    partition_epsilon: Fraction
    partition_delta: Fraction
    tail_certain: bool = True  # counts >= N kept surely (pi_opt); else they keep q[N - 1]'s probability

    @property
    def length(self) -> int:
        """N: counts >= N are treated alike (kept surely when ``tail_certain``)."""
        return int(self.words.shape[0])

    @property
    def limbs(self) -> int:
        return int(self.words.shape[1])

    @property
    def scale(self) -> int:
        """2^w: q[n] / scale is the keep probability."""
        return 1 << (64 * self.limbs)

    def numerator(self, n: int) -> int:
        """q[n] as an exact integer (for n >= N: scale, or q[N - 1] without a certain tail)."""
        if n < 0:
            raise ValueError("counts are non-negative")
        if n >= self.length:
            if self.tail_certain:
                return self.scale
            n = self.length - 1
        value = 0
        for limb in self.words[n].tolist():
            value = (value << 64) | int(limb)
        return value

    def exact_probability(self, n: int) -> Fraction:
        """The kernel's keep probability for a partition of n users, exactly."""
        return Fraction(self.numerator(n), self.scale)

    @functools.cached_property
    def _float_probabilities(self) -> npt.NDArray[np.float64]:
        """Each entry correctly rounded to float64 (int / int division rounds correctly), then 1."""
        scale = self.scale
        values = [q / scale for q in keep_numerators(self.words)]
        values.append(1.0 if self.tail_certain else values[-1])
        out = np.array(values, dtype=np.float64)
        out.setflags(write=False)
        return out

    def probabilities(self, counts: npt.NDArray[np.integer]) -> npt.NDArray[np.float64]:
        """The kernel's keep probability for each (non-negative) count, as float64."""
        idx = np.minimum(np.asarray(counts).astype(np.uint64, copy=False), np.uint64(self.length))
        return self._float_probabilities[idx.astype(np.intp)]

    def __repr__(self) -> str:
        tail = "" if self.tail_certain else ", tail saturates"
        return (f"KeepTable(N={self.length}, bits={64 * self.limbs}{tail}, "
                f"epsilon'={float(self.partition_epsilon):.6g}, delta'={float(self.partition_delta):.6g})")

    def handle(self) -> _kernel.KeepTableHandle:
        """This table loaded into the kernel (its private copy)."""
        from dpselect import _kernel

        return _kernel.KeepTableHandle(self.words, self.tail_certain)


def limbs_for(delta: Fraction) -> int:
    """The number of 64-bit limbs that represents δ' to 2^-48 relative (so π(1) = δ' exactly up
    to that): two for δ' >= 2^-80, three down to 2^-144."""
    for limbs in range(2, _MAX_LIMBS + 1):
        if delta * 2 ** (64 * limbs) >= 2**48:
            return limbs
    raise ValueError(
        f"per-partition delta {float(delta):.3g} is below {float(MIN_PARTITION_DELTA):.3g}, the smallest "
        "a keep table represents exactly enough; raise delta or lower max_partitions_contributed"
    )


def _build_keep_q(eps: Fraction, delta: Fraction, limbs: int) -> list[int]:
    """The fixed-point recurrence (pi_opt's greedy recursion, Lemma 1) with one-sided rounding:
    Q(n+1) = min(floor(A Q) + D, M − ceil(B (M − Q − D)), M), A <= e^ε', B >= e^−ε',
    D = floor(δ' M), M = 2^(64 limbs). Each step satisfies the four DP inequalities by
    construction; :func:`dpselect.core.verify.verify_keep_table` re-checks them independently."""
    m = 1 << (64 * limbs)
    bits = 64 * limbs + 64
    a_num = _builder_exp_lower(eps, bits)  # A = a_num / 2^bits
    # B = ceil(2^(2 bits) / a_num) / 2^bits >= 1/A >= e^{-ε'}, and B <= 1 because A >= 1.
    b_num = ceil_div(1 << (2 * bits), a_num)
    d = math.floor(delta * m)
    q = [0]
    while True:
        cur = q[-1]
        grow = (a_num * cur >> bits) + d
        rest = m - cur - d
        close = m - ceil_div(b_num * rest, 1 << bits) if rest > 0 else m
        nxt = min(grow, close, m)
        if nxt >= m:
            return q
        q.append(nxt)
        if len(q) > MAX_TABLE_ENTRIES:
            raise ValueError(table_too_long_message(eps, delta))


def table_too_long_message(eps: Fraction, delta: Fraction) -> str:
    return (
        f"epsilon per partition {float(eps):.3g} is too small for delta per partition {float(delta):.3g}: "
        f"the keep table would exceed {MAX_TABLE_ENTRIES} entries (partitions would need millions of "
        "users to be released). Raise epsilon, or lower max_partitions_contributed"
    )


def to_words(values: list[int], limbs: int) -> np.ndarray:
    rows = [[(v >> (64 * (limbs - 1 - w))) & (2**64 - 1) for w in range(limbs)] for v in values]
    return np.array(rows, dtype=np.uint64).reshape(len(values), limbs)


@functools.lru_cache(maxsize=64)
def _keep_table_cached(eps: Fraction, delta: Fraction) -> KeepTable:
    limbs = limbs_for(delta)
    words = to_words(_build_keep_q(eps, delta, limbs), limbs)
    verify_keep_table(words, eps, delta)
    return KeepTable(words=read_only(words), partition_epsilon=eps, partition_delta=delta)


def keep_table_length(eps: Fraction, delta: Fraction) -> int | None:
    """The length n2 + 1 of the keep table at (ε', δ'), decided exactly in milliseconds (the
    builder's rounding may add one entry); None when it exceeds MAX_TABLE_ENTRIES."""
    if eps == 0:
        length = math.ceil(1 / delta)  # pi(n) = min(1, n δ') (Theorem 2)
    else:
        try:
            length = exact_crossovers(min(eps, EPSILON_CAP), delta, limit=MAX_TABLE_ENTRIES)[1] + 1
        except ValueError:
            return None
    return length if length <= MAX_TABLE_ENTRIES else None


def check_table_length(eps: Fraction, delta: Fraction) -> None:
    """Refuse, in milliseconds and before any building, parameters whose keep table would be
    longer than MAX_TABLE_ENTRIES (its length is n2 + 1, decided exactly; n2 + 2 at most)."""
    if keep_table_length(eps, delta) is None:
        raise ValueError(table_too_long_message(eps, delta))


def keep_table(params: PrivacyParams) -> KeepTable:
    """The certified pi_opt keep table for these parameters (built, verified, cached). Parameters
    whose table would be too long to build in reasonable time are refused first, from the
    parameters alone (:mod:`dpselect.core.limits`)."""
    if params.partition_delta == 0:
        raise ValueError("delta = 0: pi_opt keeps nothing (Theorem 2)")
    eps = min(params.partition_epsilon, EPSILON_CAP)
    delta = params.partition_delta
    limbs_for(delta)  # a clear error for a δ' too small to represent
    if keep_table_length(eps, delta) is None:
        affected = params.affected_partitions
        raise epsilon_too_small(
            params, "pi_opt",
            f"a key would be released surely only from more than {MAX_TABLE_ENTRIES:,} users on, and the certified "
            "keep table would have as many entries, too many to build and check in reasonable time",
            fits=lambda e: keep_table_length(e / affected, delta) is not None,
            advice="a larger delta also shortens the table")
    return _keep_table_cached(eps, delta)


# --------------------------------------------------------------------------- TSGD table

@dataclass(frozen=True)
class TSGDTable:
    """P[X = x] = weights[|x|] / total for |x| <= k; cumulative is what the kernel samples."""

    k: int
    weights: tuple[int, ...]  # W(0), ..., W(k)
    total: int
    cumulative: npt.NDArray[np.uint64]  # over x = -k .. k, read-only
    partition_epsilon: Fraction
    certified_delta: Fraction  # exact δ of the thresholded release at ε' (per partition)

    def pmf(self) -> list[Fraction]:
        """Exact probabilities of x = -k .. k."""
        return [Fraction(self.weights[abs(x)], self.total) for x in range(-self.k, self.k + 1)]

    def __repr__(self) -> str:
        return (f"TSGDTable(k={self.k}, epsilon'={float(self.partition_epsilon):.6g}, "
                f"certified delta'={float(self.certified_delta):.6g})")


_TSGD_BITS = 128


def tsgd_weights(eps: Fraction, k: int) -> tuple[list[int], int]:
    """W(0) = w0, W(m) = ceil(B W(m−1)) with B >= e^{−ε'}, w0 as large as keeps
    S = W(0) + 2 Σ W(m) <= 2^64 − 1."""
    a_num = _builder_exp_lower(eps, _TSGD_BITS)
    b_num = ceil_div(1 << (2 * _TSGD_BITS), a_num)  # B = b_num / 2^128

    def weights_for(w0: int) -> tuple[list[int], int]:
        # W(m) = ceil(b_num W(m−1) / 2^128), written out (-(-x >> s) is the ceiling of x / 2^s):
        # this loop is the whole cost of building a long table.
        w = [w0]
        last, minus_b, shift = w0, -b_num, _TSGD_BITS
        for _ in range(k):
            last = -((minus_b * last) >> shift)
            w.append(last)
        return w, w0 + 2 * (sum(w) - w0)

    limit = 2**64 - 1
    if weights_for(1)[1] > limit:
        raise ValueError(f"TSGD with k={k} does not fit 64-bit weights")
    # S(w0) is nondecreasing in w0, so the largest w0 with S(w0) <= limit is found by bisection.
    # A float estimate of limit / (1 + 2 Σ B^m) lands within about k of it: bracket it by
    # galloping out from there (a few evaluations) instead of bisecting all 64 bits, each
    # evaluation being k big-integer steps.
    b = b_num / float(1 << _TSGD_BITS)
    ratio = 1 + 2 * b * (1 - b**k) / (1 - b) if b < 1 else 1 + 2 * k
    guess = min(max(1, int(limit / ratio)), 2**64 - 1)
    step = max(1, k)
    if weights_for(guess)[1] <= limit:
        lo, hi = guess, min(guess + step, 2**64)
        while hi < 2**64 and weights_for(hi)[1] <= limit:
            lo, hi, step = hi, min(hi + 2 * step, 2**64), 2 * step
    else:
        lo, hi = max(1, guess - step), guess
        while lo > 1 and weights_for(lo)[1] > limit:
            lo, hi, step = max(1, lo - 2 * step), lo, 2 * step
    # weights_for(lo) fits (lo = 1 was checked above), hi = 2^64 or weights_for(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if weights_for(mid)[1] <= limit:
            lo = mid
        else:
            hi = mid
    return weights_for(lo)


@functools.lru_cache(maxsize=64)
def _tsgd_cached(eps: Fraction, delta: Fraction) -> TSGDTable:
    if eps == 0:
        raise ValueError("the TSGD release needs epsilon > 0 (with epsilon = 0 use select: Theorem 2)")
    if delta * (2**64 - 1) < 2:
        # The tail weight W(k) >= 1 of a 64-bit table alone costs 1/S >= 2^-64 of δ'.
        raise ValueError(
            f"delta per partition {float(delta):.3g} is below what the release's 64-bit noise table can "
            f"certify (about {2 / 2**64:.2g}): raise delta, lower max_partitions_contributed, or use "
            "strategy='pi_opt' (keys only; certified down to a per-partition delta of 2^-144)"
        )
    try:  # k of Definition 7 is n1 exactly (docs/privacy/tsgd-release.md)
        k = exact_crossovers(eps, delta, limit=MAX_TABLE_ENTRIES)[0]
    except ValueError:
        k = MAX_TABLE_ENTRIES
    if 2 * k + 1 > MAX_TABLE_ENTRIES:
        raise ValueError(
            f"epsilon per partition {float(eps):.3g} is too small for delta per partition {float(delta):.3g}: "
            f"the release's noise table would need {2 * k + 1} entries or more. Raise epsilon, or lower "
            "max_partitions_contributed"
        )
    # k from floating point may be short of what the quantized table needs (by dozens at tiny ε'):
    # find the smallest k in [k, k + 63] whose exact δ is within budget. A larger k only lowers the
    # δ of the release, so gallop up (k, k + 1, k + 3, k + 7, ...) and bisect the last gap instead
    # of building every table in between; whatever k is chosen, its table is certified here.
    def certify(size: int) -> tuple[list[int], int, Fraction]:
        weights, total = tsgd_weights(eps, size)
        return weights, total, release_delta(weights, total, size, eps)

    last, failed, size, step = k + 63, k - 1, k, 1  # failed: the largest size known to fail
    while True:
        weights, total, certified = certify(size)
        if certified <= delta:
            found = (size, weights, total, certified)
            break
        if size >= last:
            raise ValueError(
                f"no 64-bit TSGD table certifies delta per partition {float(delta):.3g} at epsilon per "
                f"partition {float(eps):.3g}: raise delta, or use strategy='pi_opt' (keys only)"
            )
        failed, size, step = size, min(size + step, last), 2 * step
    while found[0] - failed > 1:
        mid = (failed + found[0]) // 2
        weights, total, certified = certify(mid)
        if certified <= delta:
            found = (mid, weights, total, certified)
        else:
            failed = mid
    k, weights, total, certified = found
    cumulative = np.cumsum(np.array([weights[abs(x)] for x in range(-k, k + 1)], dtype=np.uint64))
    if int(cumulative[-1]) != total:
        raise CertificationError("cumulative weights overflowed")
    return TSGDTable(k, tuple(weights), total, read_only(cumulative), eps, certified)


def tsgd_table(params: PrivacyParams, strategy: str = "release") -> TSGDTable:
    """The certified TSGD table for the per-partition budget (built, certified, cached). A k of
    Definition 7 above MAX_RELEASE_THRESHOLD is refused first, from the parameters alone
    (:mod:`dpselect.core.limits`): the noise's 2k + 1 weights would take minutes to certify."""
    if params.partition_delta == 0:
        raise ValueError("delta = 0: the thresholded release publishes nothing (Theorem 2)")
    eps, delta = min(params.partition_epsilon, EPSILON_CAP), params.partition_delta
    if eps > 0 and delta * (2**64 - 1) >= 2 and exact_n1(eps, delta, MAX_RELEASE_THRESHOLD) is None:
        affected = params.affected_partitions

        def fits(e: Fraction) -> bool:
            return e > 0 and exact_n1(min(e / affected, EPSILON_CAP), delta, MAX_RELEASE_THRESHOLD) is not None

        raise epsilon_too_small(
            params, strategy,
            f"its release threshold k (Definition 7) would exceed {MAX_RELEASE_THRESHOLD:,}, so a key would need "
            f"more than {MAX_RELEASE_THRESHOLD:,} users to be released with probability 1/2, and the noise's "
            f"2k + 1 exact weights would take minutes to certify",
            fits=fits, advice="or use strategy='pi_opt' (keys only)")
    return _tsgd_cached(eps, delta)


def pre_thresholded(table: KeepTable, pre_threshold: int) -> KeepTable:
    """The table of the same mechanism run on max(0, n − (τ − 1)) with τ = ``pre_threshold``:
    partitions with fewer than τ users are never kept, the others behave as if τ − 1 of their
    users were removed (Google's ``pre_threshold``). The shifted count has sensitivity 1, so
    the table stays DP; it is re-verified like any other before it is used."""
    if pre_threshold == 1:
        return table
    zeros = np.zeros((pre_threshold - 1, table.limbs), dtype=np.uint64)
    words = np.concatenate([zeros, np.asarray(table.words)])
    if table.partition_delta > 0:  # a table certified by the four inequalities stays so
        verify_keep_table(words, table.partition_epsilon, table.partition_delta, table.tail_certain)
    return KeepTable(words=read_only(words), partition_epsilon=table.partition_epsilon,
                     partition_delta=table.partition_delta, tail_certain=table.tail_certain)
