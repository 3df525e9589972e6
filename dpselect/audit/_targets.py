"""What an audit is about: a shipped mechanism by name (built exactly as the package builds it),
or a strategy object (including one dpselect did not build), with its claim and its keep
probabilities."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from statistics import NormalDist
from typing import Any

import numpy as np

from dpselect.core.exact import as_fraction
from dpselect.mechanisms.cumulative import CumulativeSIPS
from dpselect.mechanisms.policy import PolicyGaussian, PolicyLaplace
from dpselect.mechanisms.protocols import CountMechanism, RowMechanism, SelectionStrategy
from dpselect.mechanisms.public import MixedRelease
from dpselect.mechanisms.registry import ROW_STRATEGIES, STRATEGIES, make_strategy
from dpselect.mechanisms.tsgd import NoisyRelease, TSGDRelease
from dpselect.mechanisms.weighted import DPSIPS, WeightedGaussian, WeightedLaplace

__all__ = [
    "COUNT_MECHANISMS",
    "ROW_MECHANISMS",
    "MECHANISMS",
    "Target",
    "build_target",
    "keep_curve",
    "added_weight",
    "release_floor",
]

COUNT_MECHANISMS: tuple[str, ...] = tuple(STRATEGIES)  # pi_opt, release, laplace, gaussian, public, mixed
ROW_MECHANISMS: tuple[str, ...] = tuple(ROW_STRATEGIES)  # weighted_*, dp_sips, policy_*
AGGREGATE = "aggregate"
MECHANISMS: tuple[str, ...] = (*COUNT_MECHANISMS, *ROW_MECHANISMS, AGGREGATE)

# The grouped release audited by default: its metrics, contribution bound per partition and the
# value column's bounds (a user's values are clamped to them).
AGGREGATE_DEFAULTS: dict[str, Any] = {"linf": 2, "bounds": (0.0, 8.0)}

_NORMAL = NormalDist()


@dataclass
class Target:
    """One audited mechanism: ``strategy`` is the object that runs (None for the grouped
    release, which is built per call), ``kind`` is "count", "rows" or "aggregate"."""

    label: str
    kind: str
    strategy: Any
    epsilon: float
    delta: float
    kappa: int
    claimed_epsilon: float
    claimed_delta: Fraction
    options: dict[str, Any] = field(default_factory=dict)
    by_name: bool = True

    @property
    def releases_counts(self) -> bool:
        return self.strategy is not None and bool(self.strategy.releases_counts)

    @property
    def public_partitions(self) -> str:
        """How the mechanism treats public keys: "none", "only" (the public release) or "mixed"."""
        return self.strategy.public_partitions if isinstance(self.strategy, (CountMechanism, RowMechanism)) else "none"

    @property
    def is_public(self) -> bool:
        return self.public_partitions != "none"


def build_target(mechanism: Any, epsilon: float | None, delta: float | None, kappa: int | None,
                 options: dict[str, Any]) -> Target:
    """Build by name exactly as ``dpselect.make_strategy`` does, or wrap a strategy object (whose
    parameters are its own: then epsilon, delta and κ must be left out)."""
    if isinstance(mechanism, str):
        if mechanism not in MECHANISMS:
            raise ValueError(f"mechanism must be one of {list(MECHANISMS)} or a strategy object, got {mechanism!r}")
        if epsilon is None or delta is None:
            raise TypeError(f"epsilon and delta are required to audit {mechanism!r}")
        k = 1 if kappa is None else kappa
        if mechanism == AGGREGATE:
            unknown = set(options) - set(AGGREGATE_DEFAULTS)
            if unknown:
                raise TypeError(f"the grouped release audit takes the options {sorted(AGGREGATE_DEFAULTS)}, "
                                f"got {sorted(unknown)}")
            opts = {**AGGREGATE_DEFAULTS, **options}
            return Target(AGGREGATE, "aggregate", None, float(epsilon), float(delta), k, float(epsilon),
                          as_fraction(float(delta)), opts)
        strategy = make_strategy(mechanism, epsilon=epsilon, delta=delta, max_partitions_contributed=k, **options)
        kind = "rows" if mechanism in ROW_MECHANISMS else "count"
        return _from_strategy(mechanism, kind, strategy, dict(options), by_name=True)
    if epsilon is not None or delta is not None or kappa is not None or options:
        raise ValueError("a strategy object carries its own parameters: pass neither epsilon, delta, "
                         "max_partitions_contributed nor options with it")
    if not isinstance(mechanism, (CountMechanism, RowMechanism, SelectionStrategy)):
        raise TypeError(f"cannot audit {type(mechanism).__name__}: expected a mechanism name, a mechanism built by "
                        "dpselect.make_strategy, or a SelectionStrategy object")
    kind = "rows" if isinstance(mechanism, RowMechanism) else "count"
    return _from_strategy(str(mechanism.name), kind, mechanism, {}, by_name=False)


def _from_strategy(label: str, kind: str, strategy: Any, options: dict[str, Any], by_name: bool) -> Target:
    params = strategy.params
    claim = strategy.guarantee
    return Target(label, kind, strategy, float(params.epsilon), float(params.delta),
                  int(params.max_partitions_contributed), float(claim.epsilon), Fraction(claim.delta_exact),
                  options, by_name)


# ------------------------------------------------------------------ keep probabilities

def _q(z: float) -> float:
    """P[Z > z] for a standard normal Z."""
    return _NORMAL.cdf(-z)


def _weighted(strategy: Any) -> WeightedGaussian | WeightedLaplace | DPSIPS | None:
    """The weighted mechanism whose weights, threshold and noise a row mechanism uses (the
    policy mechanisms threshold like their base); None for anything else."""
    if isinstance(strategy, (PolicyGaussian, PolicyLaplace)):
        return strategy.base
    return strategy if isinstance(strategy, (WeightedGaussian, WeightedLaplace, DPSIPS)) else None


def row_keep(strategy: Any, weight: np.ndarray) -> np.ndarray:
    """Approximate keep probability of a partition whose weighted count is ``weight`` (floats;
    only used to choose where to test, never for a verdict)."""
    if isinstance(strategy, CumulativeSIPS):  # a constant weight every round; the rounds' means are correlated,
        # taken as independent here: an estimate of where the keep curve lies, nothing more
        dropped = np.ones_like(weight)
        total = sum(strategy.combination)
        for j, threshold in enumerate(strategy.rhos):
            spread = float(strategy.sigma) / math.sqrt(sum(strategy.combination[:j + 1]) / total)
            dropped *= np.array([1 - _q((float(threshold) - w) / spread) for w in weight])
        return 1 - dropped
    base = _weighted(strategy)
    if base is None:
        raise TypeError(f"cannot audit the row mechanism {strategy!r}: it is none of dpselect's weighted mechanisms")
    if isinstance(base, DPSIPS):  # kept by some round
        dropped = np.ones_like(weight)
        for sigma, rho_units in zip(base.sigmas, base.rhos):
            dropped *= np.array([1 - _q((rho_units / 2**32 - w) / float(sigma)) for w in weight])
        return 1 - dropped
    rho = base.rho_units / 2**32
    if isinstance(base, WeightedGaussian):
        return np.array([_q((rho - w) / float(base.sigma)) for w in weight])
    eps = float(base.params.epsilon_exact)
    return np.array([0.5 * math.exp(-eps * (rho - w)) if w <= rho else 1 - 0.5 * math.exp(-eps * (w - rho))
                     for w in weight])


def added_weight(strategy: Any, kappa: int) -> float:
    """The weight one user with κ partitions adds to each of them (1 for count mechanisms)."""
    base = _weighted(strategy)
    if base is None:
        return 1.0
    return float(base.weights[kappa]) / 2**32


def release_floor(strategy: Any) -> int:
    """The count a noisy count must exceed to be published: the TSGD release's threshold, the
    noise bound k of the public and mixed releases (their private keys' threshold), 0 for a
    mechanism that publishes no counts."""
    if isinstance(strategy, TSGDRelease):
        return int(strategy.release_threshold)
    if isinstance(strategy, NoisyRelease):
        return int(strategy.k)
    return 0


def keep_curve(target: Target, limit: int = 20_000) -> np.ndarray:
    """π(n) for n = 0, 1, ... until it reaches (or stops approaching) 1: the probability that a
    partition of n single-partition users is released, as the mechanism states it (a count
    strategy's own ``keep_probability``; for the row mechanisms an approximation from σ and ρ)."""
    strategy = target.strategy
    if target.kind == "rows":
        n_max = 8
        while n_max < limit and row_keep(strategy, np.array([float(n_max)]))[0] < 1 - 1e-9:
            n_max *= 2
        return row_keep(strategy, np.arange(n_max + 1, dtype=np.float64))
    cap = strategy.count_cap
    if cap is None:
        k = strategy.k if isinstance(strategy, NoisyRelease) else 0
        cap = release_floor(strategy) + int(k) + 2
    n_max = min(int(cap) + 2, limit)
    if isinstance(strategy, MixedRelease):  # its private keys' rule
        return np.array([float(strategy._exact_above(n, strategy.k)) for n in range(n_max + 1)])
    return np.asarray(strategy.keep_probability(np.arange(n_max + 1, dtype=np.int64)), dtype=np.float64)
