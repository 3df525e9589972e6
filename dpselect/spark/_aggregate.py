"""``dpselect.spark.aggregate``: :func:`dpselect.aggregate` run by Spark."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from dpselect.aggregation.guarantee import AggregateGuarantee, Component
from dpselect.mechanisms.protocols import CountMechanism
from dpselect.rng import resolve_rng
from dpselect.spark._auto_bounds import choose_for_plan, ranked_pairs
from dpselect.spark._bounding import J, ReleaseKey, ValueSpec, index_identical_rows, keep_first, with_ranks
from dpselect.spark._bounds import VALUES, histograms, sum_values
from dpselect.spark._common import (
    FIRSTS,
    KEEP,
    PAIRS,
    RANK,
    ROWS,
    ROWS_ALL,
    SUM,
    UNIT,
    USERS,
    VALUE,
    annotate,
    check_frame,
    check_names,
    check_no_speculation,
    column,
    columns,
    drop_null_units,
    key_names,
    materialise,
    rng_spec,
    sorted_by_key,
    spark,
    sum_type,
)
from dpselect.spark._more_stats import (
    DVALUE,
    SQUARE,
    DistinctSpec,
    check_distinct_types,
    distinct_specs,
    distinct_value,
    key_aggregates,
    more_columns,
    pair_aggregates,
    square_columns,
)
from dpselect.spark._public import join_public, public_keys
from dpselect.spark._quantiles import LEAF, hist_columns, leaves_of, pair_leaf_counts
from dpselect.spark._release import Release, release_guarantee
from dpselect.spark._report import CHANGE, RAW, aggregate_report, clamping_columns, clamping_sums, hindsight_figures

__all__ = ["SparkAggregateResult", "aggregate"]

# Spark keeps a column's kept values of one (user, key) in one array while its bounds are found,
# and an array holds at most 2^31 - 16 values.
_MAX_LIST = 2**31 - 16


def _bounded_pairs(data: Any, privacy_unit: str, names: list[str], value_columns: list[str],
                   grids: Mapping[str, Any], integer: Mapping[str, bool], kappa: int, linf: int,
                   key: ReleaseKey, null_unit_check: bool, report: bool = False,
                   labels: Mapping[str, str] | None = None, trees: Mapping[str, Any] | None = None,
                   squares: Mapping[str, int] | None = None, distinct: Sequence[DistinctSpec] = ()) -> Any:
    """The lazy plan of the bounded (user, key) pairs: each user's rows in a key cut to the L∞ of
    smallest rank, then each user's pairs cut to the κ of smallest rank (pseudo-random ranks keyed
    by ``key``: the same rows and pairs on any re-run; ``_bounding``). ``data``: null units
    already dropped or (``null_unit_check``) refused here. Columns: the user, the keys, ``ROWS``
    (the pair's kept rows) and, for the i-th value column, ``SUM<i>`` (its kept values' exact
    sum in grid units, a decimal) if it has bounds, else ``VALUES<i>`` (the list of its kept
    values, for APPROX_BOUNDS and, once bounds are found, the sums), and for the i-th value column
    in ``trees`` (the leaves of its quantile tree) ``HIST<i>_<k>``, its kept rows in leaf k
    (``_quantiles``). For a value column in ``squares`` (a variance's: column → its index i) with
    a grid, ``SQUARE<i>``, the pair's Σq; for each count_distinct in ``distinct``, ``DSET<k>``,
    the pair's kept distinct values of its ``DVALUE<j>`` column (a column of ``data``, part of
    each row's identity: rows differing there are not interchangeable) (``_more_stats``).

    With ``report``, nothing is dropped: rows and pairs carry their ``RANK`` instead, and the
    pairs also ``ROWS_ALL`` and the clamping counts of the columns with bounds (``report.py``).
    ``labels``: the caller's names of the columns, for messages."""
    F = spark().functions
    labels = dict(labels or {})
    trees = dict(trees or {})
    squares = dict(squares or {})
    pair = [privacy_unit, *names]
    internal = {c: f"{SUM if c in grids else VALUES}{i}" for i, c in enumerate(value_columns)}
    raw = {c: f"{RAW}{i}" for i, c in enumerate(value_columns) if c in grids} if report else {}
    listed = list(dict.fromkeys(spec.value for spec in distinct))  # the count_distinct columns, as read
    rows = data.select(*columns(pair), *[column(c).alias(internal[c]) for c in value_columns],
                       *[column(c).cast("double").alias(r) for c, r in raw.items()],
                       *columns(listed)).repartition(column(privacy_unit))
    square_at = [i for c, i in squares.items() if c in grids]  # summed per row; the others once bounds are found
    if not value_columns and not listed:
        # Rows of one pair are interchangeable: keeping L∞ of them is keeping min(rows, L∞), drawn or not.
        counted = rows.groupBy(*columns(pair)).agg(F.count(F.lit(1)).alias(ROWS_ALL))
        pairs = counted.withColumn(ROWS, F.least(F.col(ROWS_ALL), F.lit(linf).cast("long")))
        pairs = pairs.select(*columns(pair), F.col(ROWS), *([F.col(ROWS_ALL)] if report else []))
    else:
        values = [*internal.values()]
        specs = {internal[c]: ValueSpec(labels.get(c, c), grids.get(c), integer[c], trees.get(c), f"{LEAF}{i}",
                                        f"{SQUARE}{i}" if c in squares and c in grids else None)
                 for i, c in enumerate(value_columns)}
        leaf_counts = [(i, trees[c].count) for i, c in enumerate(value_columns) if c in trees]
        # A row's identity: its user, key and values (the raw copies the report reads are functions
        # of them), and its index among the rows identical to it.
        indexed = index_identical_rows(rows, [*pair, *values, *listed], privacy_unit)
        # A capped count_distinct ranks each (user, key, value) triple with its own key (``_more_stats``).
        triples = [(spec.rank, key.for_step(b"distinct %d" % spec.k), [*pair, spec.value])
                   for spec in distinct if spec.cap is not None]
        drawn = with_ranks(indexed, key.for_step(b"rows"), [*pair, *values, *listed, J], False, privacy_unit, specs,
                           more_ranks=triples).drop(J)
        # Ties of rank are broken by the rows' content (grid units, the count_distinct columns, and
        # the raw values the report reads).
        content = [*values, *listed, *raw.values()]

        def pair_sum(c: str, col: str, kept: Any = None) -> Any:
            value = F.col(col) if kept is None else F.when(kept, F.col(col))
            # Exact: each term is an int64 cast to decimal, so no sum of one pair or of one key overflows.
            return (F.sum(value.cast(sum_type())) if c in grids else F.collect_list(value)).alias(col)

        if report:
            ranked = keep_first(drawn, pair, content, linf, rank=RANK)
            kept = F.col(RANK) <= linf
            pairs = ranked.groupBy(*columns(pair)).agg(
                F.count_if(kept).alias(ROWS), F.count(F.lit(1)).alias(ROWS_ALL),
                *[pair_sum(c, col, kept) for c, col in internal.items()],
                *[agg for i, m in leaf_counts for agg in pair_leaf_counts(i, m, kept)],
                *pair_aggregates(square_at, distinct, kept, report=True),
                *[agg for i, c in enumerate(value_columns) if c in grids
                  for agg in clamping_sums(F.col(raw[c]), grids[c], kept, i)])
        else:
            kept_rows = keep_first(drawn, pair, content, linf)
            pairs = kept_rows.groupBy(*columns(pair)).agg(
                F.count(F.lit(1)).alias(ROWS), *[pair_sum(c, col) for c, col in internal.items()],
                *[agg for i, m in leaf_counts for agg in pair_leaf_counts(i, m)],
                *pair_aggregates(square_at, distinct))
    ranked_pairs = with_ranks(pairs, key.for_step(b"pairs"), pair, null_unit_check, privacy_unit,
                              unit_label=labels.get(privacy_unit))
    return keep_first(ranked_pairs, [privacy_unit], names, kappa, rank=RANK if report else None)


def _per_key(pairs: Any, names: list[str], n_values: int, kappa: int, report: bool = False,
             hists: Sequence[str] = (), squares: Sequence[int] = (), distinct: Sequence[DistinctSpec] = ()) -> Any:
    """Per key of the bounded pairs: kept users (``USERS``), kept rows (``ROWS``), per value
    column, the exact sum of its grid units (``SUM<i>``, a decimal of 38 digits), then the kept
    rows per leaf of each quantile tree (``hists``), then ``more_columns`` (the variances' Σq and
    the distinct counts). With ``report``, every key of the data (``USERS`` may be 0), then
    ``report_columns``."""
    F = spark().functions
    sums = [f"{SUM}{i}" for i in range(n_values)]
    if not report:
        return pairs.groupBy(*columns(names)).agg(F.count(F.lit(1)).alias(USERS), F.sum(ROWS).alias(ROWS),
                                                  *[F.sum(F.col(c).cast(sum_type())).alias(c) for c in sums],
                                                  *[F.sum(c).alias(c) for c in hists],
                                                  *key_aggregates(squares, distinct))
    kept = F.col(RANK) <= kappa

    def kept_sum(column: str, zero: Any) -> Any:
        return F.sum(F.when(kept, F.col(column)).otherwise(zero)).alias(column)

    return pairs.groupBy(*columns(names)).agg(
        F.count_if(kept).alias(USERS), kept_sum(ROWS, F.lit(0)),
        *[F.sum(F.when(kept, F.col(c)).otherwise(F.lit(0)).cast(sum_type())).alias(c) for c in sums],
        *[kept_sum(c, F.lit(0)) for c in hists],
        *key_aggregates(squares, distinct, kept, report=True),
        F.count(F.lit(1)).alias(PAIRS), F.count_if(F.col(RANK) == 1).alias(FIRSTS), F.sum(ROWS_ALL).alias(ROWS_ALL),
        *[kept_sum(c, F.lit(0.0) if c.startswith(CHANGE) else F.lit(0)) for c in clamping_columns(n_values)])


def _aggregate_per_key(data: Any, privacy_unit: str, names: list[str], value_columns: list[str],
                       grids: Mapping[str, Any], kappa: int, linf: int, key: ReleaseKey,
                       null_unit_check: bool) -> Any:
    """The lazy plan of the per-key statistics when every value column has bounds (``grids``)."""
    integer = dict.fromkeys(value_columns, False)  # not read: a column with a grid becomes int64 units
    pairs = _bounded_pairs(data, privacy_unit, names, value_columns, grids, integer, kappa, linf, key,
                           null_unit_check)
    return _per_key(pairs, names, len(value_columns), kappa)


@dataclass(repr=False)
class SparkAggregateResult:
    """What :func:`aggregate` returns: ``frame``, a Spark DataFrame with one row per released key
    (sorted by key; its ``by`` columns then one column per metric, plus ``<metric>_ci_low`` /
    ``_ci_high`` with ``confidence_level``), already computed; ``guarantee``, the whole
    release's :class:`~dpselect.aggregation.guarantee.AggregateGuarantee`; ``bounds``, the
    clamping bounds per value column. :meth:`report`: the data holder's report, computed with
    the release when ``report=True`` was passed."""

    frame: Any
    guarantee: AggregateGuarantee
    bounds: dict[str, tuple[float, float]]
    _report: Any = field(default=None, repr=False)

    def report(self) -> Any:
        """The data holder's :class:`~dpselect.aggregation.report.AggregateReport` (exact, NOT
        DP: never publish it). On Spark it is computed with the release, from the same draw, so
        it must be asked for then: ``dpselect.spark.aggregate(..., report=True)``."""
        if self._report is None:
            raise ValueError("this release was made without report=True: on Spark the data holder's report is "
                             "computed with the release (from the same draw); a new call is a new release, so "
                             "charge it, and pass report=True")
        return self._report

    def __iter__(self) -> Any:
        return iter((self.frame, self.guarantee))

    # A short summary, as for the local result; the frame's rows are not counted (a Spark job).
    _report_hint = ".report(): the data holder's report, if made with report=True (exact, NOT DP)"

    def __repr__(self) -> str:
        from dpselect.aggregation.result import result_repr
        return result_repr(type(self).__name__, self.frame, self.guarantee, self.bounds, self._report_hint)

    def _repr_html_(self) -> str:
        from dpselect.aggregation.result import result_html
        return result_html(type(self).__name__, self.frame, self.guarantee, self.bounds, self._report_hint)

def aggregate(
    df: Any,
    *,
    privacy_unit: str,
    by: str | Sequence[str],
    metrics: Mapping[str, Any],
    epsilon: float,
    delta: float,
    max_partitions_contributed: int | str | None = None,
    max_contributions_per_partition: int | str | None = None,
    public_partitions: Any = None,
    strategy: str | CountMechanism = "auto",
    noise: str = "auto",
    bounds_scope: str = "dataset",
    weights: Mapping[str, object] | None = None,
    confidence_level: float | None = None,
    budget: Any = None,
    precision_bits: int | None = None,
    null_privacy_units: str = "error",
    report: bool = False,
    rng: object = None,
) -> SparkAggregateResult:
    """Release the keys of a GROUP BY of a Spark DataFrame and, per key, each metric, under
    (``epsilon``, ``delta``)-DP: :func:`dpselect.aggregate` run by Spark, with its statement
    (docs/privacy/aggregate.md): each user is bounded once (κ keys, then at most
    L∞ = ``max_contributions_per_partition`` rows in each kept key, uniform subsets drawn with
    the package CSPRNG on the executors), keys are selected by ``strategy`` (default "auto": the
    recommended count-based selection, as on one machine) on the bounded user counts with the
    selection's share of ε and of δ (a mechanism built by
    :func:`dpselect.make_strategy` spends its own (ε, δ), as on one machine), a value column
    of a sum, mean or quantile given no ``bounds`` gets them from APPROX_BOUNDS over every kept value (its
    "bounds:<column>" share; docs/privacy/approx-bounds.md), and every metric gets exact discrete
    Laplace noise of scale κ·Δ/ε_m or exact discrete Gaussian noise (``noise``: "auto", "laplace",
    "gaussian", or a metric's own ``noise=``; the Gaussian metrics compose as one zCDP group, as on
    one machine; Δ: 1 for a user count, L∞ for a row count, L∞·max|units| for a sum in grid
    units; a mean spends half its share on each of a sum of offsets and a row count, or reuses a
    released count and sum). A quantile metric (``quantile``, ``median``, ``min``, ``max``) is the
    single machine's noisy hierarchical histogram per key (docs/privacy/quantiles.md), read from
    each key's kept rows per leaf, counted by Spark. A ``variance`` or ``stddev`` reads each key's
    exact sum of squared grid offsets, and a ``count_distinct`` each key's distinct values among
    its kept (user, key) pairs (at most ``max_values_per_unit`` per pair, a uniform subset by
    keyed PRF ranks), both counted by Spark and released by the single machine's functions
    (docs/privacy/variance.md, docs/privacy/count-distinct.md). The budget is split by ``weights`` exactly as
    on one machine, and ``budget`` (a :class:`dpselect.Budget`) is charged (ε, δ) before any Spark job (a
    budget stated in ρ: each step's cost in ρ, as on one machine).

    ``max_partitions_contributed="auto"`` and/or ``max_contributions_per_partition="auto"``: κ / L∞
    chosen privately with the "contribution_bounds" share, as on one machine
    (docs/privacy/auto-bounds.md, "On Spark"): Spark counts, per user, its distinct keys c_u and
    the rows of one (user, key) pair chosen uniformly by keyed PRF ranks, bins them on the
    executors, and the driver adds the single machine's noise to those two small histograms and
    reads the bounds with its rule; every check is made at the largest values auto may choose,
    before any Spark job. The statement names the step and the chosen values; with ``report``,
    the report adds the single machine's hindsight figures.

    ``public_partitions`` (docs/privacy/public-partitions.md): keys known without looking at the
    data (a Spark DataFrame with the ``by`` columns in the data's types, a list of keys, or a
    pandas, Polars or Arrow table). Exactly these keys are released, nothing is selected (no
    "selection" share), and a listed key absent from the data gets every metric's noise drawn
    from 0 (a mean: the midpoint of its bounds plus noise).

    Value columns are clamped and snapped to the power-of-two grid of their bounds on the
    executors and summed exactly in Spark (int64 grid units summed as 38-digit decimals, which no
    sum of fewer than 2^63 rows leaves); each key's exact sum is clamped to ±2^62 grid units
    before its noise, as on one machine. ``bounds_scope``: "dataset" (one set of
    bounds per column, from one histogram over every kept value, counted by Spark); "partition"
    runs on one machine only (NotImplementedError).

    ``report=True``: also compute the data holder's report (exact, NOT DP; never publish it),
    read with ``result.report()``: the single machine's
    :class:`~dpselect.aggregation.report.AggregateReport`, from per-key aggregates of the same
    draw (the bounding then ranks rows and pairs instead of dropping them, which moves more data
    through the per-key shuffle).
    """
    from dpselect.aggregation.bounds import check_parameters as check_bounds_parameters
    from dpselect.aggregation.budget import Budget
    from dpselect.aggregation.grid import DEFAULT_PRECISION_BITS, Grid
    from dpselect.aggregation.plan import plan_aggregate
    from dpselect.aggregation.planned import planned_release

    sql = spark()
    types = sql.types
    if not isinstance(report, bool):
        raise TypeError(f"report must be a bool, got {type(report).__name__}")
    plan = plan_aggregate(privacy_unit=privacy_unit, by=by, metrics=metrics, epsilon=epsilon, delta=delta,
                          max_partitions_contributed=max_partitions_contributed,
                          max_contributions_per_partition=max_contributions_per_partition,
                          public=public_partitions is not None, strategy=strategy, bounds_scope=bounds_scope,
                          weights=weights, confidence_level=confidence_level,
                          precision_bits=DEFAULT_PRECISION_BITS if precision_bits is None else precision_bits,
                          null_privacy_units=null_privacy_units, noise=noise)
    names, checked, value_columns, given = plan.by, plan.metrics, plan.value_columns, plan.given_bounds
    auto_columns = plan.auto_columns
    eps_total, delta_total, precision_bits = plan.epsilon, plan.delta, plan.precision_bits
    confidence_level = plan.confidence_level
    if auto_columns and bounds_scope == "partition":
        raise NotImplementedError(f"bounds_scope='partition' (bounds found per released key) runs on one machine "
                                  f"only; on Spark use bounds_scope='dataset' (the default), give bounds=(lower, "
                                  f"upper) for {auto_columns}, or run dpselect.aggregate")
    if auto_columns and plan.linf > _MAX_LIST:
        raise ValueError(f"max_contributions_per_partition = {plan.linf} is too large on Spark for a column whose "
                         f"bounds are found privately ({auto_columns}): a user's kept values in a key are held in "
                         f"one Spark array, of at most {_MAX_LIST} values. Give those metrics bounds=(lower, upper), "
                         "or lower max_contributions_per_partition")
    if plan.distinct_columns and plan.linf > _MAX_LIST:
        raise ValueError(f"max_contributions_per_partition = {plan.linf} is too large on Spark for count_distinct of "
                         f"{plan.distinct_columns}: a user's distinct values in a key are held in one Spark array, of "
                         f"at most {_MAX_LIST} values. Lower max_contributions_per_partition")
    check_frame(df, privacy_unit, names, [c for c in value_columns if c not in names])
    check_distinct_types(df, plan.distinct_columns)
    check_names(df, plan.input_columns(), plan.output_columns)
    check_no_speculation(df)
    fields = {f.name: f.dataType for f in df.schema.fields}
    integer = {c: isinstance(fields[c], types.IntegralType) for c in value_columns}
    for c in auto_columns:  # APPROX_BOUNDS' own checks, from the parameters and the column's type
        check_bounds_parameters(plan.shares[f"bounds:{c}"][0], integer=integer[c], max_partitions_contributed=plan.kappa,
                                max_contributions_per_partition=plan.linf)
    grids = {c: Grid.for_bounds(lo, hi, precision_bits=precision_bits, integer=integer[c])
             for c, (lo, hi) in given.items()}
    key_fields = sorted((f for f in df.schema.fields if f.name in names), key=lambda f: names.index(f.name))
    public = None if public_partitions is None else public_keys(df, public_partitions, key_fields)
    # Every step reads the caller's columns under dpselect's own names; the result gets theirs back.
    keys = key_names(len(names))
    values = {c: f"{VALUE}{i}" for i, c in enumerate(value_columns)}
    if public is not None:
        public = public.select(*[column(n).alias(k) for n, k in zip(names, keys)])
    generator = resolve_rng(rng)
    if budget is not None:
        if not isinstance(budget, Budget):
            raise TypeError(f"budget must be a dpselect.Budget, got {type(budget).__name__}")
        budget.charge_guarantee(planned_release(plan),
                                what=f"spark.aggregate(by={names}, metrics={sorted(checked)})")
    spec = rng_spec(generator)
    key = ReleaseKey(generator)  # the test generator warns here, once for the whole call
    # The columns of the quantile metrics: their rows are counted per leaf of their tree (``_quantiles``).
    tree_columns = list(dict.fromkeys(m.column for m in checked.values() if m.kind == "quantile" and m.column))
    # The variances' columns (their Σq) and the count_distinct metrics (their distinct values) (``_more_stats``).
    squares = square_columns(checked, value_columns)

    renamed = df.select(column(privacy_unit).alias(UNIT), *[column(n).alias(k) for n, k in zip(names, keys)],
                        *[column(c).alias(v) for c, v in values.items()],
                        *[distinct_value(column(c), fields[c]).alias(f"{DVALUE}{j}")
                          for j, c in enumerate(plan.distinct_columns)])
    data, dropped = drop_null_units(renamed, UNIT, null_privacy_units, privacy_unit)
    chose: list[Component] = []  # the step that chose κ / L∞, first in the statement (as on one machine)
    auto_pairs = None
    if plan.auto_kappa or plan.auto_linf:  # κ / L∞ chosen privately (docs/privacy/auto-bounds.md, "On Spark")
        auto_pairs = ranked_pairs(data, UNIT, keys, key, null_privacy_units == "error", privacy_unit)
        # The number of public keys is public: the ε-aware rule weighs the noise per key with it.
        n_public = None if public is None else int(public.distinct().count())
        plan, step = choose_for_plan(plan, auto_pairs, generator, n_public)  # the noise, shares and selection at them
        chose.append(step)
    kappa, linf = plan.kappa, plan.linf
    shares, strat = plan.shares, plan.strategy
    distinct = distinct_specs(checked, plan.distinct_columns, linf)
    pairs = _bounded_pairs(data, UNIT, keys, list(values.values()), {values[c]: g for c, g in grids.items()},
                           {values[c]: integer[c] for c in value_columns}, kappa, linf, key,
                           null_privacy_units == "error", report,
                           labels={UNIT: privacy_unit, **{v: c for c, v in values.items()}},
                           trees={values[c]: leaves_of(c, grids, integer) for c in tree_columns if c in grids},
                           squares={values[c]: i for c, i in squares.items()}, distinct=distinct)
    components: list[Component] = []
    unbounded: list[str] = []
    if auto_columns:
        # The bounded pairs are drawn once (checkpointed): the histogram and the sums read the same kept values.
        pairs = materialise(pairs)
        lists = {f"{VALUES}{value_columns.index(c)}": c for c in auto_columns}
        kept = pairs.filter(pairs[RANK] <= kappa) if report else pairs
        counts = histograms(kept, {name: integer[c] for name, c in lists.items()})
        for name, c in lists.items():
            found, component = _found_grid(c, counts[name], shares[f"bounds:{c}"][0], integer[c], kappa, linf,
                                           precision_bits, generator)
            components.append(component)
            if found is None:  # no bin passed: NaN sums and means, not a failure (as on one machine)
                unbounded.append(c)
                found = Grid(0.0, 0.0, 0)  # every value 0 units: the sums read nothing
            grids[c] = found
        pairs = sum_values(pairs, {name: (c, grids[c], value_columns.index(c)) for name, c in lists.items()}, report,
                           {name: leaves_of(c, grids, integer) for name, c in lists.items()
                            if c in tree_columns and c not in unbounded},
                           [name for name, c in lists.items() if c in squares])
    leaves = {c: None if c in unbounded else leaves_of(c, grids, integer) for c in tree_columns}
    hists = [h for c, tree in leaves.items() if tree is not None
             for h in hist_columns(value_columns.index(c), tree.count)]
    per_key = _per_key(pairs, keys, len(value_columns), kappa, report, hists, list(squares.values()), distinct)
    stats = [USERS, ROWS, *[f"{SUM}{i}" for i in range(len(value_columns))], *hists,
             *more_columns(list(squares.values()), distinct, report)]
    if report:
        stats += [PAIRS, FIRSTS, ROWS_ALL, *clamping_columns(len(value_columns))]
    if public is not None:  # the listed keys, one absent from the data with zeros; with a report, the data's too
        per_key = join_public(per_key, public, keys, stats, only_public=not report)

    release = Release(keys, value_columns, checked, plan.metric_noise(kappa, linf), grids, kappa, linf,
                      confidence_level, strat, spec, public is not None, report, labels=plan.metric_labels(),
                      unbounded=tuple(unbounded), means=plan.means, selection_counts=plan.selection_counts,
                      leaves=leaves, spreads=plan.spreads, squares=squares, distinct=distinct)
    schema = release.schema([types.StructField(k, f.dataType, f.nullable) for k, f in zip(keys, key_fields)])
    if report:
        kept_fields = {f.name: f for f in per_key.schema.fields}
        full = types.StructType([*schema.fields, types.StructField(KEEP, types.BooleanType(), False),
                                 *[kept_fields[c] for c in stats]])
        decided = materialise(per_key.mapInArrow(release, full))
        released = decided.filter(decided[KEEP]).select(*columns(schema.names))
    else:
        released = materialise(per_key.mapInArrow(release, schema))
    guarantee = release_guarantee(release, strat, components, generator, eps_total, delta_total, plan.noise_reason,
                                  first=chose)
    frame = annotate(sorted_by_key(released, keys), dict(zip(keys, names)), str(guarantee), guarantee.is_dp)
    holder = None
    if report:
        figures = None if auto_pairs is None else hindsight_figures(auto_pairs, keys, kappa)  # exact, NOT DP
        holder = aggregate_report(decided, dropped, grids, value_columns, strat, eps_total, kappa, linf,
                                  public is not None,
                                  {s.name: s.cut for s in distinct if checked[s.name].max_values_per_unit is not None},
                                  hindsight=figures)
    return SparkAggregateResult(frame=frame, guarantee=guarantee,
                                bounds={c: (math.nan, math.nan) if c in unbounded else (g.lower, g.upper)
                                        for c, g in grids.items()}, _report=holder)


def _found_grid(column: str, counts: np.ndarray, epsilon: Fraction, integer: bool, kappa: int, linf: int,
                precision_bits: int, rng: Any) -> tuple[Any | None, Component]:
    """APPROX_BOUNDS on the driver over a column's histogram (noise and thresholds as on one
    machine): the grid of the bounds found, and the step's component of the guarantee."""
    from dpselect.aggregation.bounds import NotEnoughDataError, approx_bounds_from_histogram
    from dpselect.aggregation.grid import Grid
    from dpselect.aggregation.noise import DiscreteLaplaceNoise

    try:
        found = approx_bounds_from_histogram(counts, epsilon, integer=integer, max_partitions_contributed=kappa,
                                             max_contributions_per_partition=linf, rng=rng)
    except NotEnoughDataError:  # the step ran and spent its share; the column gets no bounds
        noise = DiscreteLaplaceNoise.for_epsilon(epsilon, sensitivity=linf, max_partitions_contributed=kappa)
        return None, Component(f"bounds of {column!r} (APPROX_BOUNDS; no bounds found)", noise.epsilon, Fraction(0),
                               str(noise.guarantee))
    grid = Grid.for_found_bounds(found.lower, found.upper, precision_bits=precision_bits, integer=integer)
    return grid, Component(f"bounds of {column!r} (APPROX_BOUNDS)", found.noise.epsilon, Fraction(0),
                           str(found.guarantee))
