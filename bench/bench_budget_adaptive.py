"""Why the budget's ρ rule is stated for charges planned in advance (docs/privacy/zcdp.md,
"Adaptivity"): an analyst who picks the second charge from the first output raises the exact δ.

Budget (ε, δ) = (1, 1e-3). First a Gaussian step of ρ_1 (privacy loss L1 ~ N(ρ_1, 2ρ_1)).
Then, if L1 > t, randomized response with the ε the rule leaves (ε − ε_z(ρ_1)); otherwise a
Gaussian with the ρ the rule leaves (R − ρ_1, R the largest certified total). Each fixed
sequence fits the budget by the rule. The script prints the exact δ at ε = 1 (numerical
integration) of each fixed sequence and of the adaptive one.

    python bench/bench_budget_adaptive.py
"""
from __future__ import annotations

import math
from fractions import Fraction

from scipy import integrate, stats

from dpselect.aggregation.accounting import epsilon_for_rho
from dpselect.aggregation.noise import rho_for_epsilon_delta

EPS, DELTA = 1.0, Fraction(1, 1000)
RHO1, THRESHOLD = 0.002, 0.15


def gaussian_delta(rho: float, eps: float) -> float:
    """Exact δ(ε) of a Gaussian step with privacy loss N(ρ, 2ρ)."""
    s = math.sqrt(2 * rho)
    return float(stats.norm.sf((eps - rho) / s) - math.exp(eps) * stats.norm.sf((eps + rho) / s))


def sequence_delta(t: float) -> float:
    total_rho = float(rho_for_epsilon_delta(Fraction(EPS), DELTA))
    xi2 = EPS - float(epsilon_for_rho(Fraction(RHO1), DELTA))
    rho2 = total_rho - RHO1
    p = math.exp(xi2) / (1 + math.exp(xi2))
    s1 = math.sqrt(2 * RHO1)

    def integrand(l1: float) -> float:
        if l1 > t:  # randomized response: loss +ξ2 with probability p, −ξ2 otherwise
            rest = (p * max(0.0, 1 - math.exp(EPS - l1 - xi2))
                    + (1 - p) * max(0.0, 1 - math.exp(EPS - l1 + xi2)))
        else:
            rest = gaussian_delta(rho2, EPS - l1)
        return float(stats.norm.pdf(l1, RHO1, s1)) * rest

    lo, hi = RHO1 - 12 * s1, RHO1 + 12 * s1
    points = [t] if lo < t < hi else None
    return float(integrate.quad(integrand, lo, hi, points=points, limit=400, epsabs=1e-13)[0])


def main() -> None:
    print(f"budget (ε, δ) = ({EPS}, {float(DELTA)}); first step ρ = {RHO1}")
    print(f"always randomized response second: δ = {sequence_delta(-math.inf):.3g}")
    print(f"always Gaussian second:            δ = {sequence_delta(math.inf):.3g}")
    print(f"adaptive (threshold {THRESHOLD}):        δ = {sequence_delta(THRESHOLD):.3g}")


if __name__ == "__main__":
    main()
