"""The budget's ρ rule against a privacy-loss-distribution (PLD) accountant, same mechanisms.

A grouped release at κ = 8: key selection charged as (0.5, 1e-7), then 4 metrics of L0 = κ
coordinates each, with discrete Gaussian noise (charged by ρ: added, converted once,
docs/privacy/zcdp.md) or discrete Laplace noise (charged by ε: basic composition). Each row
gives ε at δ = 1e-6 by dpselect's certified rule and by Google's dp-accounting PLD accountant
(pessimistic estimates, in floating point: not certified by dpselect). dp-accounting is not a
dependency of dpselect; install it apart, e.g.

    python -m pip install --target /tmp/dpacc dp-accounting
    python bench/bench_budget_pld.py --dp-accounting /tmp/dpacc
"""
from __future__ import annotations

import argparse
import math
import sys
from fractions import Fraction
from typing import Any

from dpselect.aggregation.budget import Budget
from dpselect.aggregation.noise import DiscreteGaussianNoise, DiscreteLaplaceNoise

KAPPA = 8
METRICS = 4
DELTA = Fraction(1, 10**6)
SELECTION = (Fraction(1, 2), Fraction(1, 10**7))


def _pld(dp_path: str | None) -> tuple[Any, Any]:
    if dp_path:
        sys.path.append(dp_path)  # after dpselect's own numpy and scipy
    try:
        from dp_accounting.pld import common, privacy_loss_distribution  # type: ignore[import-not-found]
    except ImportError as exc:
        raise SystemExit(f"this comparison needs dp-accounting ({exc}): python -m pip install --target /tmp/dpacc "
                         "dp-accounting, then --dp-accounting /tmp/dpacc") from exc
    return common, privacy_loss_distribution


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dp-accounting", help="a folder holding dp_accounting (pip install --target)")
    args = parser.parse_args()
    common, pld = _pld(args.dp_accounting)

    def with_selection(mechanism: Any) -> float:
        sel = pld.from_privacy_parameters(common.DifferentialPrivacyParameters(*map(float, SELECTION)))
        return float(sel.compose(mechanism.self_compose(METRICS * KAPPA)).get_epsilon_for_delta(float(DELTA)))

    print(f"| κ = {KAPPA}, selection {tuple(map(float, SELECTION))}, {METRICS} metrics | dpselect budget | PLD |")
    print("|---|---|---|")
    for sigma2 in (100, 400, 1600):
        noise = DiscreteGaussianNoise(Fraction(sigma2), 1, KAPPA)
        budget = Budget(100, DELTA)
        budget.charge(*SELECTION, what="selection")
        for i in range(METRICS):
            budget.charge_zcdp(noise.rho, what=f"metric {i}")
        eps_pld = with_selection(pld.from_discrete_gaussian_mechanism(math.sqrt(sigma2), sensitivity=1))
        print(f"| discrete Gaussian σ² = {sigma2} (ρ = {float(noise.rho):g} each) | {float(budget.spent[0]):.3f} "
              f"(ρ rule) | {eps_pld:.3f} |")
    for scale in (10, 20, 40):
        lap = DiscreteLaplaceNoise(Fraction(scale), 1, KAPPA)
        budget = Budget(100, DELTA)
        budget.charge(*SELECTION, what="selection")
        for i in range(METRICS):
            budget.charge_guarantee(lap.guarantee, what=f"metric {i}")
        eps_pld = with_selection(pld.from_discrete_laplace_mechanism(1 / scale, sensitivity=1))
        print(f"| discrete Laplace t = {scale} (ε = {float(lap.epsilon):g} each) | {float(budget.spent[0]):.3f} "
              f"(basic) | {eps_pld:.3f} |")


if __name__ == "__main__":
    main()
