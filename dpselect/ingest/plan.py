"""One validated plan for a selection of keys from raw rows, shared by every front end
(:func:`dpselect.select_partitions`, ``dpselect select`` and :func:`dpselect.spark.select_partitions`).

:func:`plan_selection` checks every parameter and resolves everything that depends on the
parameters alone — the columns, the mechanism (from its name and the privacy parameters, or the
object given), public partitions, noisy counts and their intervals, what a budget is charged —
before any data is read or any budget is charged. So whether a release can run never depends on
the data, and a check is made once for all front ends (as :mod:`dpselect.aggregation.plan` does
for a GROUP BY with metrics).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, SupportsFloat

from dpselect.core.checks import check_level, check_max_partitions_contributed
from dpselect.core.params import PrivacyParams
from dpselect.ingest.auto_bounds import KAPPA_QUANTILE, KAPPA_QUANTILE_SELECTED, is_auto, refuse_other_strings
from dpselect.ingest.rows import NULL_PRIVACY_UNITS
from dpselect.mechanisms.protocols import CountMechanism, RowMechanism, SelectionMechanism

__all__ = ["AUTO_KAPPA_SHARE", "AutoKappa", "SelectionPlan", "build_strategy", "check_columns", "count_half_width",
           "plan_selection"]


def check_columns(privacy_unit: object, by: object, count_column: object | None) -> list[str]:
    """Validated ``by`` as a list of names (ValueError/TypeError naming the parameter).
    ``count_column``: the name of the noisy counts' column, or None when there is none."""
    if not isinstance(privacy_unit, str) or not privacy_unit:
        raise TypeError(f"privacy_unit must be a column name (non-empty str), got {privacy_unit!r}")
    names = [by] if isinstance(by, str) else by
    if not isinstance(names, (list, tuple)) or not names:
        raise TypeError(f"by must be a column name or a non-empty list of column names, got {by!r}")
    if not all(isinstance(n, str) and n for n in names):
        raise TypeError(f"by must contain only non-empty column names (str), got {by!r}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"by names {', '.join(repr(n) for n in twice)} more than once")
    if privacy_unit in names:
        raise ValueError(f"privacy_unit {privacy_unit!r} cannot also be a by column")
    if count_column is None:
        return list(names)
    if not isinstance(count_column, str) or not count_column:
        raise TypeError(f"count_column must be a non-empty str, got {count_column!r}")
    if count_column in names:
        raise ValueError(f"count_column {count_column!r} clashes with a by column of the same name; choose another "
                         "name")
    if count_column == privacy_unit:
        raise ValueError(f"count_column {count_column!r} clashes with the privacy_unit column's name; choose another "
                         "name")
    return list(names)


def build_strategy(
    strategy: Any,
    epsilon: float | None,
    delta: float | None,
    max_partitions_contributed: int | None,
    counts: bool,
    allow_no_release: bool = False,
    **options: Any,
) -> SelectionMechanism:
    """The mechanism, validated before any data is read: built by name with ``epsilon``,
    ``delta`` and κ (default 1; ``options`` — ``neighbours``, ``pre_threshold``,
    ``public_threshold``, ... — go to :func:`dpselect.make_strategy`), or the object given
    (built by ``make_strategy``, or a strategy it wraps), which carries its parameters: they
    must then be left out (a κ that disagrees with the object's is an error rather than
    silently ignored). ``counts``: noisy counts are wanted."""
    from dpselect.mechanisms.registry import COUNT_RELEASES, ROW_STRATEGIES, STRATEGIES, make_strategy

    if not isinstance(allow_no_release, bool):
        raise TypeError(f"allow_no_release must be a bool, got {type(allow_no_release).__name__}")
    if isinstance(strategy, str):
        if epsilon is None or delta is None:
            raise TypeError(f"epsilon and delta are required with strategy={strategy!r}")
        if counts and (strategy in STRATEGIES or strategy in ROW_STRATEGIES) and strategy not in COUNT_RELEASES:
            raise _no_counts(strategy)  # before building: a row mechanism's certification takes a while
        kappa = 1 if max_partitions_contributed is None else max_partitions_contributed
        if strategy == "auto":  # raw rows: a row mechanism may be the best choice, unless counts are wanted
            options = {**options, "rows": True, "with_counts": counts}
        strat = make_strategy(strategy, epsilon=epsilon, delta=delta, max_partitions_contributed=kappa,
                              allow_no_release=allow_no_release, **options)
    else:
        if epsilon is not None or delta is not None:
            raise ValueError("a strategy object carries its own epsilon and delta: do not pass them too")
        if allow_no_release or options:
            raise ValueError("allow_no_release and mechanism options apply to a strategy given by name; a "
                             "strategy object is built with its own (pass them to make_strategy)")
        strat = make_strategy(strategy)
        if max_partitions_contributed is not None and max_partitions_contributed != strat.max_partitions_contributed:
            raise ValueError(
                f"max_partitions_contributed={max_partitions_contributed} disagrees with the strategy's "
                f"{strat.max_partitions_contributed}; leave it out when passing a strategy object"
            )
    if counts and not strat.releases_counts:
        raise _no_counts(strat.name)
    return strat


def _no_counts(name: str) -> ValueError:
    return ValueError(f"counts=True needs a strategy that releases noisy counts (strategy='release', 'public' or "
                      f"'mixed'); strategy {name!r} only selects partitions")


def count_half_width(strategy: SelectionMechanism, counts: bool, confidence_level: object) -> int | None:
    """The half-width of the noisy counts' interval at ``confidence_level`` (None: not asked),
    exact on the certified TSGD table (docs/privacy/confidence-intervals.md)."""
    from dpselect.mechanisms.tsgd import NoisyRelease

    if confidence_level is None:
        return None
    level = float(check_level(confidence_level, name="confidence_level", float_below_one=True))
    if not counts or not isinstance(strategy, NoisyRelease):
        raise ValueError("confidence_level needs counts=True and a strategy that draws TSGD noise ('release', "
                         f"'public', 'mixed'), got counts={counts}, strategy={strategy.name!r}")
    from dpselect.aggregation.intervals import tsgd_half_width

    return tsgd_half_width(strategy.table, level)


@dataclass(frozen=True)
class SelectionPlan:
    """Everything a selection of keys from raw rows does that depends on its parameters alone,
    checked."""

    privacy_unit: str
    by: list[str]
    strategy: SelectionMechanism
    counts: bool
    count_column: str | None  # the noisy counts' column (None without counts=True)
    null_privacy_units: str
    public: bool  # public partitions are given (the strategy takes them)
    ci_half_width: int | None  # the noisy counts' interval, if asked
    report: bool
    epsilon: Fraction | None  # what a budget is charged: as given, or the strategy object's own
    delta: Fraction | None
    # max_partitions_contributed="auto" (docs/privacy/auto-bounds.md): κ's share of ε, and how to
    # rebuild the strategy at the chosen κ; the strategy above is built at the largest κ auto may
    # choose (every check made there).
    auto_kappa: AutoKappa | None = None

    @property
    def rows(self) -> bool:
        """The mechanism needs each user's set of partitions (a row mechanism), not counts."""
        return isinstance(self.strategy, RowMechanism)

    @property
    def only_public(self) -> bool:
        """Exactly the public keys are released (the data's other keys are not candidates)."""
        return self.strategy.public_partitions == "only"

    @property
    def kappa(self) -> int:
        return self.strategy.max_partitions_contributed

    @property
    def output_columns(self) -> list[str]:
        """The result's columns, in order: the keys, the noisy counts, their interval."""
        out = list(self.by)
        if self.counts and self.count_column is not None:
            out.append(self.count_column)
            if self.ci_half_width is not None:
                out += [f"{self.count_column}_ci_low", f"{self.count_column}_ci_high"]
        return out

    def charge(self, budget: Any, what: str) -> None:
        """Charge the release's (ε, δ) to ``budget`` (a :class:`dpselect.Budget`), before any work."""
        from dpselect.aggregation.budget import Budget

        if not isinstance(budget, Budget):
            raise TypeError(f"budget must be a dpselect.Budget, got {type(budget).__name__}")
        if self.epsilon is None or self.delta is None:
            raise ValueError("budget= needs epsilon and delta (or a strategy that carries them)")
        budget.charge(self.epsilon, self.delta, what=what)


def _charged(strategy: SelectionMechanism, epsilon: SupportsFloat | None, delta: SupportsFloat | None) -> tuple[Fraction | None, Fraction | None]:
    """(ε, δ) as given (read exactly through their shortest repr), or the strategy object's own."""
    from dpselect.core.exact import as_fraction

    params = strategy.params if isinstance(strategy.params, PrivacyParams) else None  # a user strategy's may not be
    eps = as_fraction(epsilon) if epsilon is not None else None if params is None else params.epsilon_exact
    dlt = as_fraction(delta) if delta is not None else None if params is None else params.delta_exact
    return eps, dlt


@dataclass(frozen=True)
class AutoKappa:
    """κ chosen privately for a selection: its share of ε and the strategy's parameters at the
    rest, to rebuild it at the chosen κ (below ``cap``, where it was checked)."""

    epsilon: Fraction
    cap: int
    strategy: str
    selection_epsilon: float
    delta: Any  # as given (build_strategy reads it)
    counts: bool
    allow_no_release: bool
    options: dict[str, Any]
    confidence_level: object

    @property
    def quantile(self) -> Fraction:
        """κ's quantile (docs/privacy/auto-bounds.md): lower when keys are selected from the data
        ("public" selects nothing)."""
        return KAPPA_QUANTILE if self.strategy == "public" else KAPPA_QUANTILE_SELECTED

    def build(self, kappa: int) -> tuple[SelectionMechanism, int | None]:
        """The strategy at κ, and its noisy counts' half-width (None: not asked)."""
        strat = build_strategy(self.strategy, self.selection_epsilon, self.delta, kappa, self.counts,
                               self.allow_no_release, **self.options)
        return strat, count_half_width(strat, self.counts, self.confidence_level)


# The share of ε that chooses κ privately in a selection of keys (the histogram sums over all
# users, the selection decides each key from its own count): docs/privacy/auto-bounds.md.
AUTO_KAPPA_SHARE = Fraction(1, 10)


def _auto_kappa(strategy: object, epsilon: Any, delta: Any, counts: bool, allow_no_release: object,
                options: dict[str, Any], confidence_level: object) -> AutoKappa:
    """Check max_partitions_contributed="auto" for a selection and find the largest κ whose
    strategy builds, from the parameters alone."""
    from dpselect.core.checks import check_delta, check_epsilon
    from dpselect.ingest.auto_bounds import feasible_caps
    from dpselect.mechanisms.registry import STRATEGIES

    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        shown = strategy if isinstance(strategy, str) else type(strategy).__name__
        raise ValueError(f"max_partitions_contributed='auto' needs a count-based strategy by name "
                         f"({', '.join(sorted(STRATEGIES))}), got {shown!r}: a strategy object carries its own "
                         "max_partitions_contributed, and 'auto' or a row mechanism choose from it")
    if epsilon is None or delta is None:
        raise TypeError(f"epsilon and delta are required with strategy={strategy!r}")
    eps = check_epsilon(epsilon, positive=True, zero_reason=": choosing max_partitions_contributed needs a "
                        "share of it")[1]
    check_delta(delta)
    from dpselect.aggregation.plan import float_down

    share = eps * AUTO_KAPPA_SHARE
    rest = float_down(eps - share)
    auto = AutoKappa(share, 1, strategy, rest, delta, counts, bool(allow_no_release), dict(options),
                     confidence_level)
    cap, _ = feasible_caps(None, 1, lambda k, _l: auto.build(k))
    return AutoKappa(share, cap, strategy, auto.selection_epsilon, auto.delta, counts, bool(allow_no_release),
                     dict(options), confidence_level)


def plan_selection(*, privacy_unit: object, by: object, epsilon: Any = None, delta: Any = None,
                   max_partitions_contributed: Any = None, strategy: object = None, counts: object = False,
                   count_column: object | None = "noisy_count", null_privacy_units: object = "error",
                   allow_no_release: object = False, public_partitions: bool = False,
                   confidence_level: object = None, report: object = False, **options: Any) -> SelectionPlan:
    """Check every parameter of a selection and resolve its mechanism, before any data is read.

    ``strategy``: a name (default "release", or "public" with public partitions) built with
    ``epsilon``, ``delta``, κ = ``max_partitions_contributed`` and ``options``, or a mechanism
    object (:func:`dpselect.make_strategy`), which carries its own. ``public_partitions``: keys
    known in advance are given (their values are read later, with the data). ``count_column``:
    None when no count column can be asked for. Raises TypeError or ValueError naming the
    parameter. Nothing here looks at the data."""
    names = check_columns(privacy_unit, by, count_column)
    assert isinstance(privacy_unit, str)
    if not isinstance(counts, bool):
        raise TypeError(f"counts must be a bool, got {type(counts).__name__}")
    if null_privacy_units not in NULL_PRIVACY_UNITS:
        raise ValueError(f"null_privacy_units must be 'error' or 'drop', got {null_privacy_units!r}")
    if strategy is None:
        strategy = "public" if public_partitions else "release"
    use = _public_use(strategy)
    shown = strategy.name if isinstance(strategy, (CountMechanism, RowMechanism)) else strategy
    if public_partitions and use == "none":
        raise ValueError("public_partitions needs strategy='public' or 'mixed' (only the listed keys, or the listed "
                         f"keys and the data's own), got strategy={shown!r}")
    if not public_partitions and use != "none":
        raise ValueError(f"strategy={shown!r} needs public_partitions")
    auto = None
    if is_auto(max_partitions_contributed):
        auto = _auto_kappa(strategy, epsilon, delta, counts, allow_no_release, options, confidence_level)
        strat, _ = auto.build(auto.cap)
    else:
        refuse_other_strings("max_partitions_contributed", max_partitions_contributed, check_max_partitions_contributed)
        strat = build_strategy(strategy, epsilon, delta, max_partitions_contributed, counts,
                               allow_no_release, **options)  # type: ignore[arg-type]
    if not isinstance(report, bool):
        raise TypeError(f"report must be a bool, got {type(report).__name__}")
    if report and isinstance(strat, RowMechanism):
        raise ValueError(f"report=True needs a count-based strategy; {strat.name!r} selects from users' sets")
    half_width = count_half_width(strat, counts, confidence_level)
    eps, dlt = _charged(strat, epsilon, delta)
    return SelectionPlan(privacy_unit=privacy_unit, by=names, strategy=strat, counts=counts,
                         count_column=count_column if counts else None,  # type: ignore[arg-type]
                         null_privacy_units=str(null_privacy_units), public=bool(public_partitions),
                         ci_half_width=half_width, report=report, epsilon=eps, delta=dlt, auto_kappa=auto)


def _public_use(strategy: object) -> str:
    """How the strategy (a name or an object) treats public partitions; "none" for what is not
    a mechanism (build_strategy refuses it with its own message)."""
    from dpselect.mechanisms.registry import STRATEGIES

    if isinstance(strategy, str):
        return STRATEGIES[strategy].public_partitions if strategy in STRATEGIES else "none"
    if isinstance(strategy, (CountMechanism, RowMechanism)):
        return strategy.public_partitions
    return "none"
