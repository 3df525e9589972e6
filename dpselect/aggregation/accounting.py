"""The (ε, δ) that a ledger of mixed charges spends: approximate zCDP composition, one certified
conversion (docs/privacy/zcdp.md).

Every charge is δ_i-approximately (ξ_i, ρ_i)-zCDP: an (ε, δ)-DP step is (ξ = ε, ρ = 0, δ), a
ρ-zCDP step is (0, ρ, 0). Steps whose privacy parameters are fixed in advance compose by adding
ξ, ρ and δ (Bun and Steinke, TCC 2016, approximate zCDP), and the total is
(Σξ + ε_z, Σδ + δ_z)-DP, where ρ = Σρ is converted once to (ε_z, δ_z) by Canonne, Kamath and
Steinke's bound (NeurIPS 2020, Corollary 13), certified in rational arithmetic by
:func:`dpselect.aggregation.noise.zcdp_delta`. The argument, and the condition on adaptivity,
are on docs/privacy/zcdp.md.

All amounts are Fractions; every rounding goes toward privacy: ε_z is the smallest ε on a grid of
10^-9 that the certificate accepts, never a float estimate.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

from dpselect.aggregation.noise import log_zcdp_delta_estimate, rho_for_epsilon_delta, zcdp_delta

__all__ = ["Conversion", "convert", "epsilon_for_rho", "fits", "max_rho", "rho_of_charge", "rho_of_dp"]

REFERENCE = "docs/privacy/zcdp.md"
GRID = 10**9  # ε_z is a multiple of 1/GRID: short to print, and finer than any budget is written


@dataclass(frozen=True)
class Conversion:
    """What a ledger's totals convert to: ``xi`` = Σξ (the (ε, δ) charges' ε), ``rho`` = Σρ,
    ``delta_approx`` = Σδ; ρ is converted once to (``epsilon_z``, ``delta_z``), certified:
    ``zcdp_delta(rho, epsilon_z) == delta_z`` (both 0 when ρ = 0). The ledger is
    (``epsilon``, ``delta``)-DP."""

    xi: Fraction
    rho: Fraction
    delta_approx: Fraction
    epsilon_z: Fraction
    delta_z: Fraction

    @property
    def epsilon(self) -> Fraction:
        """Σξ + ε_z."""
        return self.xi + self.epsilon_z

    @property
    def delta(self) -> Fraction:
        """Σδ + δ_z."""
        return self.delta_approx + self.delta_z


def _epsilon_float(rho: float, log_delta: float) -> float:
    """The ε at which CKS's bound reaches δ = exp(log_delta), in floating point (a starting
    point only; ln δ is given because δ itself may be below the smallest float)."""
    target = log_delta
    lo, hi = 0.0, rho + 2 * math.sqrt(rho * -log_delta) + 1.0  # Bun-Steinke's ε is larger
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if log_zcdp_delta_estimate(rho, mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


@functools.lru_cache(maxsize=1024)
def _epsilon_grid(rho: Fraction, delta: Fraction) -> int:
    def certified(k: int) -> bool:
        return zcdp_delta(rho, Fraction(k, GRID)) <= delta

    log_delta = math.log(delta.numerator) - math.log(delta.denominator)  # exact enough for any size
    guess = _epsilon_float(float(rho), log_delta) * GRID
    hi = math.ceil(guess * (1 + 1e-9)) + 1
    step = max(1, hi // 10**6)
    while not certified(hi):  # the float guess was a little low: walk up, doubling
        hi += step
        step *= 2
    lo = max(0, math.floor(guess * (1 - 1e-6)) - 1)
    step = max(1, lo // 10**6)
    while lo > 0 and certified(lo):
        lo = max(0, lo - step)
        step *= 2
    if lo == 0 and certified(0):
        return 0
    while hi - lo > 1:  # certified(hi), not certified(lo)
        mid = (lo + hi) // 2
        if certified(mid):
            hi = mid
        else:
            lo = mid
    return hi


def epsilon_for_rho(rho: Fraction, delta: Fraction) -> Fraction:
    """The smallest ε, a multiple of 10^-9, with ``zcdp_delta(rho, ε) <= delta``: ρ-zCDP is
    then (ε, δ)-DP (certified; found by bisection on ε with the certificate as its test).
    0 when ρ = 0; ValueError when ρ > 0 and δ = 0 (no finite ε)."""
    if rho == 0:
        return Fraction(0)
    if delta <= 0:
        raise ValueError("a rho-zCDP total converts to (epsilon, delta)-DP only with delta > 0")
    return Fraction(_epsilon_grid(Fraction(rho), Fraction(delta)), GRID)


def fits(xi: Fraction, rho: Fraction, delta_approx: Fraction, epsilon: Fraction, delta: Fraction) -> bool:
    """Whether totals (Σξ, Σρ, Σδ) are within a budget (ε, δ): Σξ ≤ ε, Σδ ≤ δ and, when ρ > 0,
    the conversion certified at exactly the ε and δ left, zcdp_delta(ρ, ε − Σξ) ≤ δ − Σδ."""
    if xi > epsilon or delta_approx > delta:
        return False
    if rho == 0:
        return True
    left = delta - delta_approx
    return left > 0 and zcdp_delta(rho, epsilon - xi) <= left


def convert(xi: Fraction, rho: Fraction, delta_approx: Fraction, delta: Fraction,
            epsilon_cap: Fraction | None = None) -> Conversion:
    """The conversion of totals (Σξ, Σρ, Σδ) with δ − Σδ left for ρ: ε_z the smallest certified
    ε there (:func:`epsilon_for_rho`), or ``epsilon_cap`` when that is smaller and certified
    too (so totals that :func:`fits` a budget never report more than it)."""
    if rho == 0:
        return Conversion(xi, rho, delta_approx, Fraction(0), Fraction(0))
    left = delta - delta_approx
    eps_z = epsilon_for_rho(rho, left)
    if epsilon_cap is not None and epsilon_cap < eps_z and zcdp_delta(rho, epsilon_cap) <= left:
        eps_z = epsilon_cap
    return Conversion(xi, rho, delta_approx, eps_z, zcdp_delta(rho, eps_z))


def max_rho(xi: Fraction, delta_approx: Fraction, epsilon: Fraction, delta: Fraction) -> Fraction:
    """About the largest total ρ that fits with (Σξ, Σδ) in a budget (ε, δ) (certified: it
    fits; from :func:`dpselect.aggregation.noise.rho_for_epsilon_delta`); 0 when no ρ does."""
    if xi >= epsilon or delta_approx >= delta:
        return Fraction(0)
    rho = rho_for_epsilon_delta(epsilon - xi, delta - delta_approx)
    return rho if fits(xi, rho, delta_approx, epsilon, delta) else Fraction(0)


# --------------------------------------------------------------- a budget stated in ρ (zCDP)

def rho_of_dp(epsilon: Fraction) -> Fraction:
    """min(ε²/2, ε): an ε-DP step is (ε²/2)-zCDP (Bun and Steinke, TCC 2016, Proposition 1.4)
    and also ε-zCDP (D_α ≤ D_∞ ≤ ε ≤ εα for every α > 1), the second being smaller for ε > 2;
    an (ε, δ)-DP step is δ-approximately that in the mixture form of docs/privacy/zcdp.md (both
    arguments applied to the good parts of the mixture, whose max-divergence is at most ε)."""
    return min(epsilon * epsilon / 2, epsilon)


def rho_of_charge(epsilon: Fraction, delta: Fraction, rho: Fraction) -> Fraction:
    """The ρ a charge costs a budget stated in ρ (docs/privacy/zcdp.md, "A budget stated in ρ"),
    its δ being charged as it is: ρ for a δ-approximately ρ-zCDP step (ε = 0), ε²/2 for an
    (ε, δ)-DP step (ρ = 0). A step stated only as δ-approximately (ξ, ρ)-zCDP with ξ > 0 and
    ρ > 0 is refused (ValueError): its Rényi bound ξ + ρα does not give ε²/2 for its ξ."""
    if epsilon and rho:
        raise ValueError(
            f"epsilon {float(epsilon):.6g} and rho {float(rho):.6g} together (a delta-approximately (xi, rho)-zCDP step) cannot be charged "
            "to a budget stated in rho: only a pure or (epsilon, delta)-DP step converts epsilon to epsilon**2/2. "
            "Charge the step's parts separately (charge(epsilon, delta, what=...) for its (epsilon, delta)-DP part, "
            "charge_zcdp(rho, what=...) for its zCDP part), or, if only its (xi, rho) bound is known, "
            "charge_zcdp(xi + rho, what=...) (xi + rho*alpha <= (xi + rho)*alpha for every alpha > 1)")
    return rho if rho else rho_of_dp(epsilon)
