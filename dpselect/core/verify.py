"""Independent exact verifiers of the tables the kernel samples from.

The builders in :mod:`dpselect.core.tables` construct tables so that they are DP by design; the
functions here re-check that claim from scratch on the very integers the kernel is handed.
They share nothing with the builders but the parameters: in particular they compute their own
lower bound on e^ε (by repeated squaring of 1 + ε/2^j, where the builders sum a Taylor series),
so a mistake in one exponential bound cannot hide itself. Everything is integer or
:class:`fractions.Fraction` arithmetic; no floating point is involved.

* :func:`verify_keep_table`: the four (ε', δ') inequalities between every count n and n + 1 of
  a fixed-point keep table (Desfontaines et al., PoPETs 2022, Lemma 1; docs/privacy/pi-opt.md);
* :func:`release_delta`: the exact δ of the thresholded TSGD release "publish n + X iff
  n + X > k" for the quantized noise, over every count and both directions (Theorem 6;
  docs/privacy/tsgd-release.md); :func:`release_delta_bruteforce` is its reference.
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpselect.errors import DPSelectError

__all__ = [
    "CertificationError",
    "exp_lower_by_squaring",
    "keep_numerators",
    "verify_keep_table",
    "release_delta",
    "release_delta_bruteforce",
]

# Relative accuracy of the verifier's bound on e^ε: far finer than the margin the builders leave
# (2^-(P - 24) with P >= 128), so a correct table always passes.
_VERIFY_ACCURACY_BITS = 320


class CertificationError(DPSelectError, RuntimeError):
    """A table failed its exact privacy check: never sample from it (a bug, not a user error)."""


# Deliberately not dpselect.core.exact's bounds, the package's one home of e^x bounds otherwise:
# the builders use those, and a bug in a bound shared by a builder and its checker would pass both.
def exp_lower_by_squaring(x: Fraction, accuracy_bits: int = _VERIFY_ACCURACY_BITS) -> Fraction:
    """A rational E <= e^x for x >= 0, within relative 2^-accuracy_bits of it.

    (1 + x/m)^m <= e^x for every m >= 1 (1 + t <= e^t). With m = 2^j the power is j squarings;
    each is floored to B fractional bits, which keeps every intermediate value below the true
    power (all values are >= 1, so flooring only lowers them). Errors: the gap
    e^x - (1 + x/m)^m <= e^x x^2/(2m), and the floors, whose relative effect at most doubles
    per squaring: 2^(j + 1 - B). j and B are chosen so both are below 2^-accuracy_bits."""
    if x < 0:
        raise ValueError("exp_lower_by_squaring needs x >= 0")
    if x == 0:
        return Fraction(1)
    magnitude = max(0, math.ceil(math.log2(float(x) + 1.0)))
    j = accuracy_bits + 2 * magnitude + 2
    bits = j + accuracy_bits + 2
    one = 1 << bits
    # v = floor((1 + x / 2^j) * 2^bits), then square j times with a floor each time.
    v = one + (x.numerator << bits) // (x.denominator << j)
    for _ in range(j):
        v = (v * v) >> bits
    return Fraction(v, one)


def keep_numerators(words: npt.ArrayLike) -> list[int]:
    """The table's entries as Python ints: an (N, limbs) uint64 array of big-endian limbs, or a
    1-D array of single 64-bit words."""
    arr = np.asarray(words, dtype=np.uint64)
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2:
        raise CertificationError("a keep table is an (N,) or (N, limbs) uint64 array")
    out = []
    for row in arr.tolist():
        value = 0
        for limb in row:
            value = (value << 64) | int(limb)
        out.append(value)
    return out


def verify_keep_table(words: npt.ArrayLike, partition_epsilon: Fraction, partition_delta: Fraction,
                      tail_certain: bool = True) -> Fraction:
    """Check, for every n, the four inequalities between pi(n) and pi(n + 1) exactly:

        (1) pi(n+1) <= E pi(n) + δ'          (2) pi(n) <= E pi(n+1) + δ'
        (3) 1 - pi(n+1) <= E (1 - pi(n)) + δ' (4) 1 - pi(n) <= E (1 - pi(n+1)) + δ'

    where pi(n) = q[n] / 2^(64 limbs) for n < N and pi(N) = 1 when the kernel keeps counts >= N
    surely (``tail_certain``; otherwise counts >= N keep q[N - 1] and there is nothing more to
    check), and E <= e^{ε'} is this module's own bound. For the two-point output space
    {keep, drop} these are exactly (ε', δ')-indistinguishability of neighbouring counts in both
    directions. Also checks q[0] = 0 (an absent partition is never kept), 0 <= q[n] < 2^w and
    that q is non-decreasing.
    Returns the smallest slack (a Fraction >= 0); raises CertificationError on any violation."""
    arr = np.asarray(words, dtype=np.uint64)
    limbs = 1 if arr.ndim == 1 else arr.shape[1]
    scale = 1 << (64 * limbs)
    values = keep_numerators(arr)
    if not values or values[0] != 0:
        raise CertificationError("keep table must start with q[0] = 0 (an absent partition is never kept)")
    if any(not 0 <= v < scale for v in values):
        raise CertificationError("keep table entries must lie in [0, 2^w)")
    if any(b < a for a, b in zip(values, values[1:])):
        # Not needed for DP (the four inequalities are), but the kernel's loader demands it.
        raise CertificationError("keep table entries must be non-decreasing")
    if partition_epsilon < 0 or not 0 <= partition_delta < 1:
        raise CertificationError("the verifier needs epsilon >= 0 and 0 <= delta < 1")
    e = exp_lower_by_squaring(Fraction(partition_epsilon))
    e_num, e_den = e.numerator, e.denominator
    d_num, d_den = partition_delta.numerator, partition_delta.denominator
    # Work in units of 1/(scale · e_den · d_den): every term below is an integer in those units.
    unit = e_den * d_den  # a probability q/scale becomes q * unit
    delta_units = d_num * scale * e_den  # δ' in the same units
    extended = values + [scale]
    min_slack: int | None = None
    for n in range(len(values) if tail_certain else len(values) - 1):
        lo, hi = extended[n], extended[n + 1]
        checks = (
            e_num * lo * d_den + delta_units - hi * unit,  # (1)
            e_num * hi * d_den + delta_units - lo * unit,  # (2)
            e_num * (scale - lo) * d_den + delta_units - (scale - hi) * unit,  # (3)
            e_num * (scale - hi) * d_den + delta_units - (scale - lo) * unit,  # (4)
        )
        worst = min(checks)
        if worst < 0:
            which = checks.index(worst) + 1
            raise CertificationError(f"keep table violates inequality ({which}) at n={n}")
        min_slack = worst if min_slack is None else min(min_slack, worst)
    return Fraction(min_slack or 0, scale * unit)


def release_delta(weights: list[int] | tuple[int, ...], total: int, k: int, epsilon: Fraction) -> Fraction:
    """Exact δ (at ε' = ``epsilon``) of the release "publish n + X iff n + X > k", where
    P[X = x] = weights[|x|] / total for |x| <= k: the supremum over n >= 0 of the hockey-stick
    divergence, both directions n -> n + 1 and n + 1 -> n.

    Step 1 checks exactly that neighbouring weights satisfy W(m - 1) <= E W(m) (E <= e^ε' is this
    module's own bound) and W(m) <= W(m - 1); then every output value both n and n + 1 can
    produce contributes nothing, and the sum reduces to the suppression event plus the one
    support edge each way. :func:`release_delta_bruteforce` is the full sum, for tests."""
    if len(weights) != k + 1 or total != weights[0] + 2 * sum(weights[1:]):
        raise CertificationError("TSGD weights do not match k and their total")
    e = exp_lower_by_squaring(Fraction(epsilon))
    # Integer arithmetic over the common denominator q · S (e = p / q): the same comparisons and
    # the same supremum as with Fractions, but hundreds of thousands of them take milliseconds.
    p, q = e.numerator, e.denominator
    for m in range(1, k + 1):
        if weights[m - 1] * q > p * weights[m] or weights[m] > weights[m - 1] or weights[m] < 1:
            raise CertificationError(f"TSGD weights break the e^eps ratio at |x|={m}")
    cdf = list(itertools.accumulate(weights[abs(x)] for x in range(-k, k + 1)))  # cdf[t + k] = S · P(X <= t)
    # n -> n + 1 suppresses with probability P(X <= k − n) against P(X <= k − n − 1), for n = 0 .. 2k
    # (index j = 2k − n of cdf; below −k the probability is 0); once n > 2k only the edge differs.
    # n + 1 -> n always has the edge: the value only one side can produce.
    edge = weights[k] * q  # q · S · P(X = k)
    worst = max(edge, cdf[0] * q)
    if k > 0:
        worst = max(worst, max(hi * q - p * lo for lo, hi in zip(cdf, cdf[1:])))
    return Fraction(worst, q * total)


def release_delta_bruteforce(weights: list[int] | tuple[int, ...], total: int, k: int, e: Fraction, n_max: int) -> Fraction:
    """Reference: the full hockey-stick sum over every output at ratio ``e``, for n in [0, n_max]."""

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
            gap = sum((max(Fraction(0), a.get(o, Fraction(0)) - e * b.get(o, Fraction(0))) for o in set(a) | set(b)),
                      Fraction(0))
            worst = max(worst, gap)
    return worst
