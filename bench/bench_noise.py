"""The noise of one aggregate metric under discrete Laplace, discrete Gaussian, and noise="auto".

For each κ, the plan of ``dpselect.aggregate`` (:func:`dpselect.aggregation.plan.plan_aggregate`,
the one every front end runs; no data is read) gives the user-count metric's noise; the table
prints its standard deviation (Laplace: exact, from its scale; Gaussian: σ, which bounds the
discrete Gaussian's standard deviation) and, as a check, the sd measured over ``--draws`` draws
of the package CSPRNG. Two settings: public partitions (the metric gets all of ε and δ), and a
key selection sharing the budget (ε split 1:1; δ halved when a Gaussian group exists).

Run:

    python bench/bench_noise.py --epsilon 1 --delta 1e-6 --kappas 1,4,10,30,100
"""
from __future__ import annotations

import argparse
import math

import numpy as np

import dpselect
from dpselect.aggregation.noise import DiscreteLaplaceNoise
from dpselect.aggregation.plan import plan_aggregate


def noise_of(kappa: int, epsilon: float, delta: float, noise: str, public: bool, metrics: int):
    plan = plan_aggregate(privacy_unit="u", by="k", epsilon=epsilon, delta=delta, max_partitions_contributed=kappa,
                          max_contributions_per_partition=1, public=public, noise=noise,
                          metrics={f"m{i}": dpselect.count_distinct_units() for i in range(metrics)})
    return plan.noises["m0"], plan.metric_noise(kappa, 1)["m0"].make(1)


def sd(noise) -> float:
    return math.sqrt(noise.variance()) if isinstance(noise, DiscreteLaplaceNoise) else math.sqrt(float(noise.sigma2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--kappas", default="1,4,10,30,100")
    parser.add_argument("--metrics", type=int, default=1, help="user-count metrics sharing the budget")
    parser.add_argument("--draws", type=int, default=20_000)
    args = parser.parse_args()
    kappas = [int(k) for k in args.kappas.split(",")]
    for public in (True, False):
        print(f"\n{'public partitions' if public else 'with a key selection'}: user-count noise sd, "
              f"epsilon={args.epsilon:g}, delta={args.delta:g}, {args.metrics} metric(s)")
        print(f"{'kappa':>6} {'laplace':>10} {'gaussian':>10} {'auto':>10} {'auto picks':>10} {'measured':>10}")
        for kappa in kappas:
            _, lap = noise_of(kappa, args.epsilon, args.delta, "laplace", public, args.metrics)
            _, gauss = noise_of(kappa, args.epsilon, args.delta, "gaussian", public, args.metrics)
            kind, auto = noise_of(kappa, args.epsilon, args.delta, "auto", public, args.metrics)
            measured = float(np.std(auto.sample(args.draws)))
            print(f"{kappa:>6} {sd(lap):>10.1f} {sd(gauss):>10.1f} {sd(auto):>10.1f} {kind:>10} {measured:>10.1f}")


if __name__ == "__main__":
    main()
