"""Laplace thresholding as Google's libraries define it (Korolova, Kenthapadi, Mishra, Ntoulas,
WWW 2009; Desfontaines et al., PoPETs 2022, Definition 9; docs/privacy/laplace-threshold.md).

A partition with n users is kept iff n + L > T with L ~ Laplace(b), b = κ/ε, and
T = 1 − b ln(2 δ_p) (δ_p <= 1/2) or 1 + b ln(2 (1 − δ_p)), δ_p the per-partition δ. The keep
probability has a closed form in e^{(n−1)ε/κ} alone:

    π(n) = δ_p e^{(n−1)ε'}                 while that is <= 1/2   (δ_p <= 1/2)
    π(n) = 1 − e^{−(n−1)ε'} / (4 δ_p)      above
    π(n) = 1 − (1 − δ_p) e^{−(n−1)ε'}      (δ_p > 1/2)

with ε' = ε/κ. dpselect samples a fixed-point table of lower bounds of π computed in integer
arithmetic (so no entry exceeds the exact value), and certifies the table that runs exactly like
pi_opt's: the four (ε', δ_p) inequalities between every n and n + 1 — which the Laplace rule
meets with room to spare, since π(n + 1) ≤ e^{ε'} π(n) for every n >= 1 (the Laplace mechanism
is pure ε'-DP on a count present in both neighbours) and π(1) = δ_p.
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

from dpselect.core.exact import exp_lower
from dpselect.core.guarantee import PrivacyGuarantee
from dpselect.mechanisms.base import TabledSelection
from dpselect.core.limits import epsilon_too_small, log_inverse
from dpselect.core.params import PrivacyParams
from dpselect.core.tables import (
    EPSILON_CAP,
    MAX_TABLE_ENTRIES,
    KeepTable,
    read_only,
    to_words,
    limbs_for,
    pre_thresholded,
    verify_keep_table,
)

__all__ = ["LaplaceThresholding", "laplace_keep_table", "laplace_threshold"]

KKMN = ("Korolova, Kenthapadi, Mishra, Ntoulas, \"Releasing search queries and clicks privately\", WWW 2009; "
        "Desfontaines et al., PoPETs 2022, Definition 9")
# Entries stop once 1 − π is below this: larger counts keep the last entry's probability.
_TAIL_GAP_BITS = 80


def laplace_threshold(partition_epsilon: Fraction, partition_delta: Fraction) -> float:
    """T for a per-partition (ε', δ_p) (scale b = 1/ε'): Google's CalculateThreshold."""
    b = 1 / float(partition_epsilon)
    d = float(partition_delta)
    return 1 - b * math.log(2 * d) if d <= 0.5 else 1 + b * math.log(2 * (1 - d))


def _approx(x: Fraction) -> str:
    """x > 0 to three digits, even below the smallest float (5e-324)."""
    if float(x) > 0:
        return f"{float(x):.3g}"
    exponent = math.floor(math.log10(x.numerator) - math.log10(x.denominator))
    return f"{float(x * Fraction(10) ** -exponent):.3g}e{exponent}"


def laplace_table_entries(eps: Fraction, delta: Fraction) -> float:
    """About how many entries the keep table at per-partition (ε', δ_p) has: 2 + (ln(1/δ_p) +
    80 ln 2)/ε' (the curve reaches 1 − 2^-80 there); inf when ε' is below the floats."""
    eps_float = float(eps)
    if not eps_float > 0:
        return math.inf
    return 2 + (log_inverse(delta) + _TAIL_GAP_BITS * math.log(2)) / eps_float


@functools.lru_cache(maxsize=32)
def laplace_keep_table(eps: Fraction, delta: Fraction) -> KeepTable:
    """The certified keep table of Laplace thresholding at per-partition (ε', δ_p)."""
    if eps <= 0:
        raise ValueError("Laplace thresholding needs epsilon > 0")
    limbs = limbs_for(delta)
    width = 64 * limbs
    scale = 1 << width
    bits = width + 64
    # A <= e^{ε'} in fixed point; A^m, floored at every product, stays below e^{mε'}.
    a = max(1 << bits, math.floor(exp_lower(eps, bits + 32) * 2**bits))
    one = 1 << bits
    # ln(1/δ_p) from the exact rational (float(δ_p) can underflow to 0); ε' as a float is 0 below
    # about 5e-324 (ε = 5e-324 at κ = 10^6): the table is then endless, refused like any too long.
    estimate = laplace_table_entries(eps, delta)
    if estimate > MAX_TABLE_ENTRIES:
        entries = f"about {estimate:.3g}" if math.isfinite(estimate) else "more than 1e308"
        raise ValueError(
            f"epsilon per partition {_approx(eps)} is too small for Laplace thresholding: its keep table "
            f"would need {entries} entries. Raise epsilon, or lower max_partitions_contributed"
        )
    gap = scale >> _TAIL_GAP_BITS
    d_num, d_den = delta.numerator, delta.denominator
    d_floor = d_num * scale // d_den  # floor(δ_p M)
    values = [0]
    power = one  # floor(2^bits A^{n-1})
    while True:
        if 2 * delta <= 1:
            u_num, u_den = d_num * power, d_den * one  # u_lo = δ_p A^{n−1}
            if 2 * u_num <= u_den:
                q = u_num * scale // u_den
            else:  # 1 − 1/(4 u_lo), rounded down
                q = scale - -(-u_den * scale // (4 * u_num))
        else:  # 1 − (1 − δ_p) / A^{n−1}, rounded down
            q = scale - -(-(d_den - d_num) * one * scale // (d_den * power))
        # Never above A q[n−1] + δ_p M either: at extreme ε (e^ε' beyond δ_p 2^w) the floor of q[1]
        # times e^ε' would otherwise exceed the slack δ_p that inequality (1) leaves.
        q = min(q, scale - 1, (a * values[-1] >> bits) + d_floor)
        values.append(max(q, values[-1]))
        if scale - q <= gap:
            break
        power = power * a >> bits
    words = to_words(values, limbs)
    verify_keep_table(words, eps, delta, tail_certain=False)
    return KeepTable(words=read_only(words), partition_epsilon=eps, partition_delta=delta, tail_certain=False)


class LaplaceThresholding(TabledSelection):
    """Laplace thresholding (Google's ``LaplacePartitionSelection``): keep iff n + Lap(κ/ε) > T.

    Guarantee: each partition is kept independently with probability q[n]/2^w from a
    certified table of lower bounds of the Laplace rule's keep probability π(n) (closed form in
    the module docstring); the table satisfies the four (ε/κ, δ_p) inequalities between every
    n and n + 1, checked in exact rational arithmetic by the independent verifier; with at most
    κ partitions per user the released key set is (ε, δ)-DP. Keep probabilities are within
    ~1e-12 relative of the closed form and never exceed it (Google's double-precision
    ``ProbabilityOfKeep`` agrees to ~1e-11, except where its own arithmetic drifts from the
    definition); counts beyond the table keep its last entry, within 2^-80 of 1."""

    name = "laplace"

    def __init__(self, params: PrivacyParams, pre_threshold: int = 1) -> None:
        if params.partition_epsilon == 0:
            raise ValueError("Laplace thresholding needs epsilon > 0 (with epsilon = 0 use 'pi_opt')")
        if params.partition_delta == 0:
            raise ValueError("Laplace thresholding needs delta > 0")
        self.params = params
        self.pre_threshold = pre_threshold
        eps, delta = min(params.partition_epsilon, EPSILON_CAP), params.partition_delta
        limbs_for(delta)  # a clear error for a δ_p too small to represent
        entries = laplace_table_entries(eps, delta)
        if entries > MAX_TABLE_ENTRIES:
            affected = params.affected_partitions
            shown = f"about {entries:.3g}" if math.isfinite(entries) else "more than 1e308"
            users = 1 + log_inverse(2 * delta) / float(eps) if float(eps) > 0 else math.inf
            need = f"about {users:,.4g}" if math.isfinite(users) else "more than 1e308"
            raise epsilon_too_small(
                params, self.name,
                f"epsilon per partition {_approx(eps)} is too small for its keep table, which would need {shown} "
                f"entries, more than {MAX_TABLE_ENTRIES:,} (a key would need {need} users to be released with "
                "probability 1/2)",
                fits=lambda e: laplace_table_entries(min(e / affected, EPSILON_CAP), delta) <= MAX_TABLE_ENTRIES,
                advice="or use strategy='pi_opt'")
        self._load(pre_thresholded(laplace_keep_table(eps, delta), pre_threshold))

    @property
    def threshold(self) -> float:
        """T (plus τ − 1): the noisy count a partition must exceed."""
        return laplace_threshold(self.params.partition_epsilon, self.params.partition_delta) + self.pre_threshold - 1

    @property
    def scale(self) -> float:
        """b = κ/ε, the Laplace scale."""
        return 1 / float(self.params.partition_epsilon)

    @property
    def thresholds(self) -> dict[str, float]:
        return {"threshold": self.threshold, "scale": self.scale}

    @property
    def guarantee(self) -> PrivacyGuarantee:
        p = self.params
        notes = f"Pre-threshold {self.pre_threshold}: partitions with fewer users are never released." \
            if self.pre_threshold > 1 else ""
        return PrivacyGuarantee(
            mechanism=f"Laplace thresholding (noise scale {self.scale:.6g}, threshold {self.threshold:.6g})",
            epsilon=float(p.epsilon_exact),
            delta_exact=p.compose(p.partition_delta),
            max_partitions_contributed=p.max_partitions_contributed,
            reference=f"{KKMN}; docs/privacy/laplace-threshold.md",
            requested_delta=p.delta,
            neighbours=p.neighbour_text,
            notes=notes,
        )

    def __repr__(self) -> str:
        tau = f", pre_threshold={self.pre_threshold}" if self.pre_threshold > 1 else ""
        return f"LaplaceThresholding({self.params!r}, threshold={self.threshold:.6g}{tau})"

