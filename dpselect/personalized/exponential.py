"""PDP exponential mechanism for counts ("PDP EM", [JYC15]; docs/privacy/personalized.md, "Baselines"), exact.

Output c ∈ {0..N} with P[c] ∝ exp(score(c)/2), score(c) = −(least total Φ of users whose bit
must flip to make the count c). Writing c = n ∓ m, the weight is a product of per-user factors
e^{−Φ/2} over the m flipped users with the smallest Φ (ones for c < n, zeros for c > n).

Exactness. Each factor e^{−Φ(u)/2} is replaced by a dyadic rational r(u) = ⌈…⌉/2^60 with
r(u) ≥ e^{−Φ(u)/2}, i.e. a per-user cost ĉ(u) = −2·ln r(u) ≤ Φ(u). The mechanism actually run is
the exponential mechanism for the score with costs ĉ: its sensitivity in user u is ≤ ĉ(u) ≤ Φ(u)
(flipping u's bit changes every least-cost by at most ĉ(u)), so it is exactly Φ-PDP. The weights
W(c) are then rational, and c is drawn *exactly* by rejection from a rational envelope: the
centre, a staircase of blocks on each side (height = the weight at the block start, weight
halving at most once per block), and a geometric tail; each step uses only
``rng.uniform_below`` and ``rng.bernoulli`` on integers. Expected work is a few proposals.

Timing caveat: the number of proposals and the tail's geometric loop are random and correlated
with the output (as for every rejection sampler); do not expose per-call timings.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from .noise import RandomSource
from .params import validate_input
from .result import PersonalizedResult, PrivacyStatement

__all__ = ["FACTOR_BITS", "factor_numerators", "pdp_exponential_count"]

FACTOR_BITS = 60
_ONE = 1 << FACTOR_BITS
# float exp is within a few ulp; 2**-45 relative is a wide safety margin on the upward rounding
_UP_MARGIN = 1.0 + 2.0**-45
# the staircase stops once the weight is below e^-60 of the centre's; the rest is the tail
_STAIRCASE_LOG_FLOOR = -60.0


def factor_numerators(phi: np.ndarray) -> np.ndarray:
    """r(u)·2^60 = ⌈e^{−Φ(u)/2}·(1 + 2⁻⁴⁵)·2^60⌉ clipped to [1, 2^60], as uint64.

    Guarantees r(u) ≥ e^{−Φ(u)/2} for the exact Φ(u) (float exp error ≪ 2⁻⁴⁵; the test checks
    it with mpmath), so ĉ(u) = −2 ln r(u) ≤ Φ(u).
    """
    scaled = np.ceil(np.exp(-np.asarray(phi, dtype=np.float64) / 2) * _UP_MARGIN * float(_ONE))
    return np.clip(scaled, 1.0, float(_ONE)).astype(np.uint64)


def _product(values: list[int]) -> int:
    """Π values by a balanced product tree (Karatsuba-friendly for long runs)."""
    if len(values) <= 32:
        return math.prod(values)
    middle = len(values) // 2
    return _product(values[:middle]) * _product(values[middle:])


# Rationals here are kept as (numerator, denominator) integer pairs, never normalized: the
# numbers can have millions of bits and a gcd would cost more than everything else.
Ratio = tuple[int, int]


def _round_up_dyadic(numerator: int, denominator: int, bits: int = 64) -> Ratio:
    """A dyadic m/2^k ≥ numerator/denominator with a ``bits``-bit mantissa m (both > 0)."""
    shift = bits - (numerator.bit_length() - denominator.bit_length())
    if shift >= 0:
        mantissa = -((-numerator << shift) // denominator)
        return mantissa, 1 << shift
    mantissa = -((-numerator) // (denominator << -shift))
    return mantissa << -shift, 1


@dataclass(frozen=True)
class _Piece:
    """An envelope piece: m ∈ [start, end] (block) or m > start (tail, ``end == start``).

    ``height`` is a dyadic upper bound Ĥ on the weight W at the anchor (the block start, or M
    for the tail) and ``chain`` the factors f ≤ 1 with Π f = W(anchor)/Ĥ: accepting with
    Bernoulli of every f and of the within-piece ratio accepts with probability
    W(m)/envelope(m) exactly, without ever forming the huge exact W(anchor).
    """

    direction: int
    start: int
    end: int
    is_tail: bool
    height: Ratio
    chain: tuple[Ratio, ...]


@dataclass(frozen=True)
class _Side:
    """One side of the count (c = n − m or c = n + m): descending factors and envelope pieces."""

    numerators: list[int]
    pieces: list[_Piece]

    def weight_ratio(self, low: int, high: int) -> Ratio:
        """W(high)/W(low) = Π_{low < j ≤ high} r_j, exactly."""
        return _product(self.numerators[low:high]), 1 << (FACTOR_BITS * (high - low))


def _build_side(numerators: np.ndarray, direction: int) -> _Side:
    ordered = np.sort(numerators)[::-1]
    size = int(ordered.size)
    side = _Side([int(x) for x in ordered.tolist()], [])
    if size == 0:
        return side
    logs = np.log(ordered.astype(np.float64) / float(_ONE))
    cumulative = np.concatenate(([0.0], np.cumsum(logs)))  # cumulative[m] ≈ ln W(m)
    floor_hits = np.flatnonzero(cumulative < _STAIRCASE_LOG_FLOOR)
    tail_start = size if floor_hits.size == 0 else int(floor_hits[0])
    while tail_start < size and side.numerators[tail_start] == _ONE:
        tail_start += 1  # the tail needs a ratio ρ < 1
    anchor = 1
    height: Ratio = (side.numerators[0], _ONE)  # W(1) = r_1 exactly
    chain: tuple[Ratio, ...] = ()
    while True:
        # block [anchor, end]: the weight falls by about half (a float plan; exactness is in W)
        target = -(cumulative[anchor] - math.log(2))
        end = int(np.searchsorted(-cumulative, target, side="left")) - 1
        end = min(max(end, anchor), tail_start)
        side.pieces.append(_Piece(direction, anchor, end, False, height, chain))
        next_anchor = end + 1 if end < tail_start else tail_start
        if next_anchor > anchor:
            ratio_num, ratio_den = side.weight_ratio(anchor, next_anchor)
            exact_num, exact_den = height[0] * ratio_num, height[1] * ratio_den  # W(next)·Ĥ/W(anchor)
            new_height = _round_up_dyadic(exact_num, exact_den)
            chain = chain + ((exact_num * new_height[1], exact_den * new_height[0]),)
            height = new_height
        anchor = next_anchor
        if end >= tail_start:
            break
    if tail_start < size:
        # tail anchored at M = tail_start: envelope Ĥ·ρ^j for m = M + j, ρ = r_{M+1} < 1
        side.pieces.append(_Piece(direction, tail_start, tail_start, True, height, chain))
    return side


def _choose(masses: list[Ratio], rng: RandomSource) -> int:
    """Index i with probability masses[i] / Σ masses, exactly (all denominators are small)."""
    as_fractions = [Fraction(n, d) for n, d in masses]
    denominator = math.lcm(*(m.denominator for m in as_fractions))
    integers = [m.numerator * (denominator // m.denominator) for m in as_fractions]
    u = rng.uniform_below(sum(integers))
    for index, weight in enumerate(integers):
        if u < weight:
            return index
        u -= weight
    raise AssertionError("unreachable")


def _accept(p: Ratio, rng: RandomSource) -> bool:
    numerator, denominator = p
    return numerator >= denominator or bool(rng.bernoulli(numerator, denominator))


def _sample_offset(sides: tuple[_Side, _Side], rng: RandomSource) -> int:
    """Signed offset c − n drawn exactly from P ∝ W (rejection from the rational envelope)."""
    entries: list[tuple[_Side, _Piece] | None] = [None]
    masses: list[Ratio] = [(1, 1)]  # the centre c = n has weight 1
    for side in sides:
        for piece in side.pieces:
            entries.append((side, piece))
            if piece.is_tail:
                rho = side.numerators[piece.start]
                # Ĥ·ρ/(1 − ρ) with ρ = rho/2^60
                masses.append((piece.height[0] * rho, piece.height[1] * (_ONE - rho)))
            else:
                masses.append(((piece.end - piece.start + 1) * piece.height[0], piece.height[1]))
    while True:
        entry = entries[_choose(masses, rng)]
        if entry is None:
            return 0
        side, piece = entry
        if piece.is_tail:
            rho = side.numerators[piece.start]
            j = 1
            while rng.bernoulli(rho, _ONE):  # P(j) = (1 − ρ) ρ^{j−1}
                j += 1
            m = piece.start + j
            if m > len(side.numerators):
                continue  # outside the support: reject
            # W(m) / (W(M)·ρ^j) = Π_{M<i≤m} r_i / ρ^j ≤ 1
            ratio_num, _ = side.weight_ratio(piece.start, m)
            inner = (ratio_num, rho**j)
        else:
            m = piece.start + rng.uniform_below(piece.end - piece.start + 1)
            inner = side.weight_ratio(piece.start, m)  # W(m)/W(start) ≤ 1
        if all(_accept(f, rng) for f in piece.chain) and _accept(inner, rng):
            return piece.direction * m


def pdp_exponential_count(bits: Any, phi: Any, *, rng: Any = None) -> PersonalizedResult:
    """PDP exponential mechanism for a count (Jorgensen, Yu, Cormode, ICDE 2015), exact.

    Guarantee: Φ-PDP — the score's sensitivity in user u is ĉ(u) ≤ Φ(u) and the weights are
    exp(score/2), so every output probability moves by at most e^{Φ(u)} (see module docstring
    for why the dyadic factors keep this exact).
    """
    from dpselect.rng import resolve_rng

    rng = resolve_rng(rng)
    data = validate_input(bits, phi, 1, 0.5, "bits")
    numerators = factor_numerators(data.phi)
    ones = data.values == 1
    sides = (_build_side(numerators[ones], -1), _build_side(numerators[~ones], +1))
    count = int(np.count_nonzero(ones))
    estimate = count + _sample_offset(sides, rng)
    guaranteed = bool(rng.privacy_guaranteed)
    privacy = PrivacyStatement(
        phi=data.phi,
        loss_of=lambda phi_u: phi_u,
        description="Φ-PDP: exponential mechanism, score sensitivity ĉ(u) ≤ Φ(u), weights exp(score/2)",
        reference="Jorgensen, Yu, Cormode, Conservative or Liberal? Personalized Differential Privacy (ICDE 2015), "
        "PDP exponential mechanism; docs/privacy/personalized.md",
        privacy_guaranteed=guaranteed,
    )
    return PersonalizedResult(
        estimate=estimate, method="pdp_exponential_count", chosen_index=None, chosen_parameter=None,
        parameters=(), noise_scales=(), shifts=(), noisy_candidates=(), beta=None,
        failure_probability=None, privacy=privacy, privacy_guaranteed=guaranteed,
    )
