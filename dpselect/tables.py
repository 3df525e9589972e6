"""Certified tables: what the C kernel samples from, proven DP in exact arithmetic.

Keep table (spec rng-and-exactness.md §3.2–3.3)
    q[n] = 2^64 · pi(n) as integers for n < N, built by the pi_opt recurrence (seed 003,
    Lemma 1) with one-sided rounding; counts >= N are kept surely. An independent verifier
    checks the four (ε', δ') inequalities between every n and n + 1 in rational arithmetic with
    a lower bound on e^{ε'}, for the exact comparison ``U < q[n]`` the kernel executes.

TSGD table (spec rng-and-exactness.md §4.2; seed 003 Definitions 6–8, Theorem 6)
    Integer weights W(|x|), |x| <= k, whose neighbour ratios never exceed e^{ε'}; cumulative
    sums are sampled exactly by the kernel. The δ of the thresholded release (publish n + X iff
    n + X > k) is computed exactly for the quantized pmf, for every count n, and must not exceed
    the per-partition δ'.

Tables are cached by their exact parameters; arrays handed out are read-only.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpselect.exact import ceil_div, exp_lower
from dpselect.params import PrivacyParams
from dpselect.theory import pi_opt_crossovers

__all__ = [
    "CertificationError",
    "KeepTable",
    "TSGDTable",
    "keep_table",
    "tsgd_table",
    "verify_keep_table",
    "release_delta",
    "release_delta_bruteforce",
]

M = 2**64
# Longest table we build: ~(2/ε') ln(1/δ') entries. Past this, Python-side certification takes
# too long and the table stops fitting in cache.
MAX_TABLE_ENTRIES = 1 << 21
# Tables are built and certified at min(ε', EPSILON_CAP): beyond ln(2^64) ≈ 44.4 a 64-bit table
# cannot change any more, and a table certified at a smaller ε is DP at every larger one.
EPSILON_CAP = Fraction(64)
# Denominator bits for the builder's bound on e^{ε'}; the verifier uses more, independently.
_BUILD_BITS = 128
_VERIFY_BITS = 192


class CertificationError(RuntimeError):
    """A table failed its exact privacy check: never sample from it (a bug, not a user error)."""


# --------------------------------------------------------------------------- keep table

@dataclass(frozen=True)
class KeepTable:
    """q[n] / 2^64 is the keep probability of a partition with n users, for n < len(q);
    larger counts are kept with probability 1."""

    q: npt.NDArray[np.uint64]
    partition_epsilon: Fraction
    partition_delta: Fraction

    @property
    def length(self) -> int:
        """N: the first count that is kept with certainty."""
        return len(self.q)

    def probabilities(self, counts: npt.NDArray[np.integer]) -> npt.NDArray[np.float64]:
        """The kernel's keep probability for each count, rounded to float64 for display."""
        idx = np.minimum(counts, self.length)
        extended = np.append(self.q.astype(np.float64) / float(M), 1.0)
        return extended[idx]

    def exact_probability(self, n: int) -> Fraction:
        return Fraction(int(self.q[n]), M) if n < self.length else Fraction(1)


def _build_keep_q(eps: Fraction, delta: Fraction) -> list[int]:
    """The fixed-point recurrence of spec §3.2 (pi_opt's greedy recursion, Lemma 1):
    Q(n+1) = min(floor(A Q) + D, M − ceil(B (M − Q − D)), M), A <= e^ε', B >= e^−ε'."""
    a_num = math.floor(exp_lower(eps, _BUILD_BITS) * 2**_BUILD_BITS)  # A = a_num / 2^128
    # B = ceil(2^256 / a_num) / 2^128 >= 1/A >= e^{-ε'}, and B <= 1 because A >= 1.
    b_num = ceil_div(2 ** (2 * _BUILD_BITS), a_num)
    d = math.floor(delta * M)
    if d == 0:
        raise ValueError(
            f"per-partition delta {float(delta):.3g} is below 2^-64: no 64-bit keep table can "
            "release anything; raise delta or lower max_partitions_contributed"
        )
    q = [0]
    while True:
        cur = q[-1]
        grow = (a_num * cur >> _BUILD_BITS) + d
        rest = M - cur - d
        close = M - ceil_div(b_num * rest, 2**_BUILD_BITS) if rest > 0 else M
        nxt = min(grow, close, M)
        if nxt >= M:
            return q
        q.append(nxt)
        if len(q) > MAX_TABLE_ENTRIES:
            raise ValueError(
                f"the keep table would exceed {MAX_TABLE_ENTRIES} entries "
                f"(epsilon per partition {float(eps):.3g} is too small for delta {float(delta):.3g})"
            )


def verify_keep_table(q: npt.ArrayLike, partition_epsilon: Fraction, partition_delta: Fraction) -> Fraction:
    """Check inequalities (1)–(4) of spec §3.3 between n and n+1 for every n, exactly.

    pi(n) = q[n]/2^64 for n < N and pi(N) = 1; E <= e^{ε'} is this function's own Taylor bound.
    Returns the smallest slack (a Fraction >= 0); raises CertificationError on any violation."""
    values = [int(v) for v in np.asarray(q, dtype=np.uint64)]
    if not values or values[0] != 0:
        raise CertificationError("keep table must start with q[0] = 0 (an absent partition is never kept)")
    if any(v < 0 or v >= M for v in values):
        raise CertificationError("keep table entries must lie in [0, 2^64)")
    e = exp_lower(partition_epsilon, _VERIFY_BITS)
    e_num, e_den = e.numerator, e.denominator
    d_num, d_den = partition_delta.numerator, partition_delta.denominator
    # Work in units of 1/(M · e_den · d_den): every term below is an integer in those units.
    scale_q = e_den * d_den  # a probability q/M becomes q * scale_q
    unit_delta = d_num * M * e_den  # δ' in the same units
    extended = values + [M]
    min_slack: int | None = None
    for n in range(len(values)):
        lo, hi = extended[n], extended[n + 1]
        checks = (
            (e_num * lo * d_den + unit_delta) - hi * scale_q,  # (1) pi(n+1) <= E pi(n) + δ'
            (e_num * hi * d_den + unit_delta) - lo * scale_q,  # (2) pi(n) <= E pi(n+1) + δ'
            (e_num * (M - lo) * d_den + unit_delta) - (M - hi) * scale_q,  # (3)
            (e_num * (M - hi) * d_den + unit_delta) - (M - lo) * scale_q,  # (4)
        )
        worst = min(checks)
        if worst < 0:
            which = checks.index(worst) + 1
            raise CertificationError(f"keep table violates inequality ({which}) at n={n}")
        min_slack = worst if min_slack is None else min(min_slack, worst)
    return Fraction(min_slack or 0, M * e_den * d_den)


@functools.lru_cache(maxsize=64)
def _keep_table_cached(eps: Fraction, delta: Fraction) -> KeepTable:
    q = np.array(_build_keep_q(eps, delta), dtype=np.uint64)
    verify_keep_table(q, eps, delta)
    q.setflags(write=False)
    return KeepTable(q=q, partition_epsilon=eps, partition_delta=delta)


def keep_table(params: PrivacyParams) -> KeepTable:
    """The certified pi_opt keep table for these parameters (built, verified, cached)."""
    if params.partition_delta == 0:
        raise ValueError("delta = 0: pi_opt keeps nothing (Theorem 2)")
    return _keep_table_cached(min(params.partition_epsilon, EPSILON_CAP), params.partition_delta)


# --------------------------------------------------------------------------- TSGD table

@dataclass(frozen=True)
class TSGDTable:
    """P[X = x] = weights[|x|] / total for |x| <= k; cumulative is what the kernel samples."""

    k: int
    weights: tuple[int, ...]  # W(0), ..., W(k)
    total: int
    cumulative: npt.NDArray[np.uint64]  # over x = -k .. k
    partition_epsilon: Fraction
    certified_delta: Fraction  # exact δ of the thresholded release at ε' (per partition)

    def pmf(self) -> list[Fraction]:
        """Exact probabilities of x = -k .. k."""
        return [Fraction(self.weights[abs(x)], self.total) for x in range(-self.k, self.k + 1)]


def _tsgd_weights(eps: Fraction, k: int) -> tuple[list[int], int]:
    """W(0) = w0, W(m) = ceil(B W(m−1)) with B >= e^{−ε'}, w0 as large as keeps
    S = W(0) + 2 Σ W(m) <= 2^64 − 1 (spec §4.2)."""
    a_num = math.floor(exp_lower(eps, _BUILD_BITS) * 2**_BUILD_BITS)
    b_num = ceil_div(2 ** (2 * _BUILD_BITS), a_num)  # B = b_num / 2^128

    def weights_for(w0: int) -> tuple[list[int], int]:
        w = [w0]
        for _ in range(k):
            w.append(ceil_div(b_num * w[-1], 2**_BUILD_BITS))
        return w, w[0] + 2 * sum(w[1:])

    lo, hi = 1, M  # weights_for(lo) fits; find the largest w0 that does
    if weights_for(1)[1] > M - 1:
        raise ValueError(f"TSGD with k={k} does not fit 64-bit weights")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if weights_for(mid)[1] <= M - 1:
            lo = mid
        else:
            hi = mid
    return weights_for(lo)


def release_delta(weights: list[int], total: int, k: int, e: Fraction) -> Fraction:
    """Exact δ (at e^ε' >= e) of the release "publish n + X iff n + X > k", sup over n >= 0,
    both directions n -> n+1 and n+1 -> n.

    Step 1 checks exactly that neighbouring weights satisfy W(m−1) <= e·W(m); then every output
    value that both n and n+1 can produce contributes nothing, and the hockey-stick sum reduces
    to the suppression event ⊥ plus the support edges (one value each way). Tests compare this
    with :func:`release_delta_bruteforce` on small tables."""
    for m in range(1, k + 1):
        if weights[m - 1] > e * weights[m] or weights[m] > weights[m - 1]:
            raise CertificationError(f"TSGD weights break the e^eps ratio at |x|={m}")
    # cdf[t + k] = S · P(X <= t) for t in [-k, k]
    cdf = []
    running = 0
    for x in range(-k, k + 1):
        running += weights[abs(x)]
        cdf.append(running)

    def below(t: int) -> int:  # S · P(X <= t)
        if t < -k:
            return 0
        return cdf[min(t, k) + k]

    edge = Fraction(weights[k], total)  # the value only one side can produce
    worst = edge  # n+1 -> n always has it; n -> n+1 has it once n > 2k
    for n in range(0, 2 * k + 2):
        suppressed = Fraction(below(k - n), total) - e * Fraction(below(k - n - 1), total)
        forward = max(Fraction(0), suppressed) + (edge if n > 2 * k else 0)
        worst = max(worst, forward)
    return worst


def release_delta_bruteforce(weights: list[int], total: int, k: int, e: Fraction, n_max: int) -> Fraction:
    """Reference: the full hockey-stick sum over every output, for n in [0, n_max]."""

    def dist(n: int) -> dict[object, Fraction]:
        out: dict[object, Fraction] = {}
        for x in range(-k, k + 1):
            p = Fraction(weights[abs(x)], total)
            key: object = n + x if n + x > k else None
            out[key] = out.get(key, Fraction(0)) + p
        return out

    worst = Fraction(0)
    for n in range(n_max + 1):
        p, q = dist(n), dist(n + 1)
        for a, b in ((p, q), (q, p)):
            total_gap = sum(max(Fraction(0), a.get(o, Fraction(0)) - e * b.get(o, Fraction(0))) for o in set(a) | set(b))
            worst = max(worst, total_gap)
    return worst


@functools.lru_cache(maxsize=64)
def _tsgd_cached(eps: Fraction, delta: Fraction) -> TSGDTable:
    if eps == 0:
        raise ValueError("the TSGD release needs epsilon > 0 (with epsilon = 0 use select: Theorem 2)")
    k = pi_opt_crossovers(float(eps), float(delta)).k
    if 2 * k + 1 > MAX_TABLE_ENTRIES:
        raise ValueError(f"the TSGD table would need {2 * k + 1} entries; epsilon per partition is too small")
    e = exp_lower(eps, _VERIFY_BITS)
    # k from floating point may be one short of what the quantized table needs: grow it until
    # the exact δ is within budget (a larger k only lowers the δ of the release).
    for _ in range(64):
        weights, total = _tsgd_weights(eps, k)
        certified = release_delta(weights, total, k, e)
        if certified <= delta:
            break
        k += 1
    else:
        raise CertificationError("could not certify a TSGD table within the delta budget")
    cumulative = np.cumsum(np.array([weights[abs(x)] for x in range(-k, k + 1)], dtype=np.uint64))
    if int(cumulative[-1]) != total:
        raise CertificationError("cumulative weights overflowed")
    cumulative.setflags(write=False)
    return TSGDTable(k, tuple(weights), total, cumulative, eps, certified)


def tsgd_table(params: PrivacyParams) -> TSGDTable:
    """The certified TSGD table for the per-partition budget (built, certified, cached)."""
    if params.partition_delta == 0:
        raise ValueError("delta = 0: the thresholded release publishes nothing (Theorem 2)")
    return _tsgd_cached(min(params.partition_epsilon, EPSILON_CAP), params.partition_delta)
