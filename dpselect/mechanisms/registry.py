"""Build any mechanism by name from validated parameters (Google's builders' role): one place
that knows every strategy, its options and its δ = 0 behaviour."""
from __future__ import annotations

import functools
from typing import Any

from dpselect.mechanisms.base import BuiltInMechanism, NoRelease, UserSuppliedStrategy
from dpselect.mechanisms.cumulative import CumulativeSIPS
from dpselect.mechanisms.gaussian import GaussianThresholding
from dpselect.mechanisms.laplace import LaplaceThresholding
from dpselect.mechanisms.pi_opt import PiOptSelection
from dpselect.mechanisms.protocols import CountMechanism, RowMechanism, SelectionMechanism, SelectionStrategy
from dpselect.mechanisms.policy import PolicyGaussian, PolicyLaplace
from dpselect.mechanisms.public import MixedRelease, PublicPartitions
from dpselect.mechanisms.tsgd import TSGDRelease
from dpselect.mechanisms.weighted import DPSIPS, WeightedGaussian, WeightedLaplace
from dpselect.core.params import PrivacyParams, validate_params

__all__ = ["STRATEGIES", "ROW_STRATEGIES", "make_strategy", "BUILT_IN", "is_row_strategy", "strategy_options",
           "COUNT_RELEASES"]

# Count-based strategies: each decides a partition from its distinct-user count.
STRATEGIES: dict[str, type[CountMechanism]] = {
    "pi_opt": PiOptSelection,
    "release": TSGDRelease,
    "laplace": LaplaceThresholding,
    "gaussian": GaussianThresholding,
    "public": PublicPartitions,
    "mixed": MixedRelease,
}
# Row strategies: each needs every user's set of partitions, so they run on raw rows
# (select_partitions, the CLI, or select_rows on code arrays), not on counts.
ROW_STRATEGIES: dict[str, type[RowMechanism]] = {
    "weighted_gaussian": WeightedGaussian,
    "weighted_laplace": WeightedLaplace,
    "dp_sips": DPSIPS,
    "cumulative_sips": CumulativeSIPS,
    "policy_gaussian": PolicyGaussian,
    "policy_laplace": PolicyLaplace,
}
# Options each strategy accepts beyond the privacy parameters.
_OPTIONS: dict[str, tuple[str, ...]] = {
    "pi_opt": ("pre_threshold",),
    "release": ("pre_threshold",),
    "laplace": ("pre_threshold",),
    "gaussian": ("pre_threshold", "noise_share", "sigma_accuracy"),
    "public": (),
    "mixed": ("public_threshold",),
    "weighted_gaussian": ("noise_share",),
    "weighted_laplace": (),
    "dp_sips": ("rounds", "ratio", "noise_share"),
    "cumulative_sips": ("rounds", "ratio", "noise_share"),
    "policy_gaussian": ("alpha",),
    "policy_laplace": ("alpha",),
}
_CLASSES: dict[str, Any] = {**STRATEGIES, **ROW_STRATEGIES}  # each built as cls(params, **options)
BUILT_IN = (*STRATEGIES.values(), *ROW_STRATEGIES.values(), NoRelease)
# The strategies that publish a noisy count with every released key.
COUNT_RELEASES = ("release", "public", "mixed")


def is_row_strategy(strategy: object) -> bool:
    """True for mechanisms that need each user's set of partitions (not just counts)."""
    return strategy in ROW_STRATEGIES if isinstance(strategy, str) else isinstance(strategy, RowMechanism)


def strategy_options(name: str) -> tuple[str, ...]:
    """The options the strategy ``name`` takes beyond the privacy parameters (none for "auto",
    whose choice brings its own; none for a name that is not a strategy's)."""
    return _OPTIONS.get(name, ())


def _check_pre_threshold(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"pre_threshold must be an int >= 1, got {type(value).__name__}")
    if not 1 <= value <= 1_000_000:
        raise ValueError(f"pre_threshold must be between 1 (no pre-threshold) and 10^6, got {value}")
    return value


def make_strategy(
    strategy: str | SelectionMechanism | SelectionStrategy,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    max_partitions_contributed: int = 1,
    delta_split: str = "composition",
    neighbours: str = "add_remove",
    allow_no_release: bool = False,
    rows: bool = False,
    with_counts: bool = False,
    **options: Any,
) -> SelectionMechanism:
    """Build a strategy by name from validated parameters, or pass an already built strategy
    through (then the parameters must be omitted). Returns a
    :class:`~dpselect.mechanisms.protocols.CountMechanism` or a
    :class:`~dpselect.mechanisms.protocols.RowMechanism`, accepted by every front end that
    accepts its name.

    Names: "pi_opt", "release" (TSGD, noisy counts), "laplace", "gaussian", "public",
    "mixed", and "auto" (the one :func:`dpselect.recommend` picks) act on counts; the row
    mechanisms "weighted_gaussian", "weighted_laplace", "dp_sips", "cumulative_sips", "policy_gaussian" and
    "policy_laplace" act on each user's set of partitions (``select_partitions``, the CLI,
    :func:`dpselect.select_rows`). ``options``:
    ``pre_threshold`` (pi_opt, release, laplace, gaussian), ``noise_share`` and
    ``sigma_accuracy`` (gaussian), ``public_threshold`` (mixed). ``neighbours="replace"`` gives
    bounded DP. ``rows=True`` tells "auto" that each user's set of partitions is available (raw
    rows), so it may choose a row mechanism; ``with_counts=True`` makes it choose one that releases
    noisy counts. A count strategy object dpselect did not build (any
    :class:`~dpselect.mechanisms.protocols.SelectionStrategy`) is wrapped in
    :class:`UserSuppliedStrategy`: its guarantee is relayed as user-supplied, never certified."""
    if not isinstance(strategy, str):
        if isinstance(strategy, UserSuppliedStrategy) or (isinstance(strategy, BuiltInMechanism)
                                                          and isinstance(strategy, (CountMechanism, RowMechanism))):
            _no_parameters(epsilon, delta, options)
            return strategy
        if not isinstance(strategy, SelectionStrategy):
            raise TypeError(
                f"strategy must be one of {sorted(STRATEGIES) + ['auto'] + sorted(ROW_STRATEGIES)}, a mechanism "
                f"built by make_strategy, or a SelectionStrategy, got {type(strategy).__name__}"
            )
        _no_parameters(epsilon, delta, options)
        return UserSuppliedStrategy(strategy)
    if epsilon is None or delta is None:
        raise TypeError("epsilon and delta are required")
    if not isinstance(allow_no_release, bool):
        raise TypeError("allow_no_release must be a bool")
    params = validate_params(epsilon, delta, max_partitions_contributed, delta_split, neighbours)
    if strategy == "auto":
        from dpselect.mechanisms.recommend import recommend

        if options:
            raise ValueError(f"strategy='auto' takes no mechanism options, got {sorted(options)}")
        choice = recommend(epsilon, delta, max_partitions_contributed, delta_split=delta_split,
                           neighbours=neighbours, rows=rows, counts=with_counts)
        strategy, options = choice.strategy, dict(choice.options)
    if strategy not in STRATEGIES and strategy not in ROW_STRATEGIES:
        raise ValueError(f"strategy must be one of {sorted(STRATEGIES) + ['auto'] + sorted(ROW_STRATEGIES)}, "
                         f"got {strategy!r}")
    unknown = set(options) - set(_OPTIONS[strategy])
    if unknown:
        raise TypeError(f"strategy {strategy!r} takes the options {list(_OPTIONS[strategy]) or 'none'}, "
                        f"got {sorted(unknown)}")
    if "pre_threshold" in options:
        options["pre_threshold"] = _check_pre_threshold(options["pre_threshold"])
    if params.delta_exact == 0:
        if not allow_no_release:
            if strategy == "public":
                raise ValueError("delta = 0: the public release's TSGD noise needs delta > 0 (its support is "
                                 "truncated); use delta > 0")
            raise ValueError(
                f"delta = 0: strategy {strategy!r} can release nothing (Theorem 2 of Desfontaines et al., PoPETs "
                "2022: under pure DP the set of keys itself cannot depend on the data). Use delta > 0, or pass "
                "allow_no_release=True to get an empty selection on purpose."
            )
        return NoRelease(params, strategy, releases_counts=strategy in COUNT_RELEASES,
                         public_partitions=_CLASSES[strategy].public_partitions)
    return _built(strategy, params, tuple(sorted(options.items())))


def _no_parameters(epsilon: object, delta: object, options: dict[str, Any]) -> None:
    if epsilon is not None or delta is not None or options:
        raise ValueError("a strategy object carries its own parameters: pass epsilon, delta and options "
                         "to it, not here")


@functools.lru_cache(maxsize=64)
def _built(name: str, params: PrivacyParams, options: tuple[tuple[str, Any], ...]) -> SelectionMechanism:
    """Strategies are immutable, so one instance per parameter set serves every call."""
    return _CLASSES[name](params, **dict(options))
