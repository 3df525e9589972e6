"""``dpselect.spark.aggregate``: :func:`dpselect.aggregate` run by Spark."""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from dpselect.aggregation.guarantee import AggregateGuarantee, Component
from dpselect.exact import as_fraction
from dpselect.pipeline import build_strategy, check_columns
from dpselect.rng import resolve_rng
from dpselect.rows import NULL_PRIVACY_UNITS
from dpselect.spark._bounds import VALUES, histograms, sum_values
from dpselect.spark._common import (
    ERROR_MARK,
    FIRSTS,
    KEEP,
    PAIRS,
    RANK,
    ROWS,
    ROWS_ALL,
    SUM,
    USERS,
    ValueSpec,
    annotate,
    check_frame,
    drop_null_units,
    executor_rng,
    executor_strategy,
    keep_first,
    materialise,
    rng_spec,
    sorted_by_key,
    spark,
    with_random,
)
from dpselect.spark._public import join_public, public_keys
from dpselect.spark._report import CHANGE, RAW, aggregate_report, clamping_columns, clamping_sums

__all__ = ["SparkAggregateResult", "aggregate"]


def _bounded_pairs(data: Any, privacy_unit: str, names: list[str], value_columns: list[str],
                   grids: Mapping[str, Any], integer: Mapping[str, bool], kappa: int, linf: int,
                   spec: tuple[bytes, int] | None, null_unit_check: bool, report: bool = False) -> Any:
    """The lazy plan of the bounded (user, key) pairs: each user's rows in a key cut to the L∞ of
    smallest r, then each user's pairs cut to the κ of smallest r (independent uniforms from the
    CSPRNG). ``data``: null units already dropped or (``null_unit_check``) refused here.
    Columns: the user, the keys, ``ROWS`` (the pair's kept rows) and, for the i-th value column,
    ``SUM<i>`` (its kept values' sum in grid units) if it has bounds, else ``VALUES<i>`` (the
    list of its kept values, for APPROX_BOUNDS and, once bounds are found, the sums).

    With ``report``, nothing is dropped: rows and pairs carry their ``RANK`` instead, and the
    pairs also ``ROWS_ALL`` and the clamping counts of the columns with bounds (``report.py``)."""
    F = spark().functions
    internal = {c: f"{SUM if c in grids else VALUES}{i}" for i, c in enumerate(value_columns)}
    raw = {c: f"{RAW}{i}" for i, c in enumerate(value_columns) if c in grids} if report else {}
    rows = data.select(privacy_unit, *names, *[F.col(c).alias(internal[c]) for c in value_columns],
                       *[F.col(c).cast("double").alias(r) for c, r in raw.items()])
    specs = {internal[c]: ValueSpec(c, grids.get(c), integer[c]) for c in value_columns}
    drawn = with_random(rows.repartition(privacy_unit), spec, b"rows", null_unit_check, privacy_unit, specs)
    if report:
        ranked = keep_first(drawn, [privacy_unit, *names], [], linf, rank=RANK)
        kept = F.col(RANK) <= linf
        pairs = ranked.groupBy(privacy_unit, *names).agg(
            F.count_if(kept).alias(ROWS), F.count(F.lit(1)).alias(ROWS_ALL),
            *[(F.sum(F.when(kept, F.col(col))) if c in grids else F.collect_list(F.when(kept, F.col(col)))).alias(col)
              for c, col in internal.items()],
            *[agg for i, c in enumerate(value_columns) if c in grids
              for agg in clamping_sums(F.col(raw[c]), grids[c], kept, i)])
        return keep_first(with_random(pairs, spec, b"pairs", False, privacy_unit), [privacy_unit], names, kappa,
                          rank=RANK)
    kept_rows = keep_first(drawn, [privacy_unit, *names], [], linf)
    pairs = kept_rows.groupBy(privacy_unit, *names).agg(
        F.count(F.lit(1)).alias(ROWS),
        *[(F.sum(col) if c in grids else F.collect_list(col)).alias(col) for c, col in internal.items()])
    return keep_first(with_random(pairs, spec, b"pairs", False, privacy_unit), [privacy_unit], names, kappa)


def _per_key(pairs: Any, names: list[str], n_values: int, kappa: int, report: bool = False) -> Any:
    """Per key of the bounded pairs: kept users (``USERS``), kept rows (``ROWS``) and, per value
    column, the sum of its grid units (``SUM<i>``; null if it leaves int64: ``try_sum``). With
    ``report``, every key of the data (``USERS`` may be 0), then ``report_columns``."""
    F = spark().functions
    sums = [f"{SUM}{i}" for i in range(n_values)]
    if not report:
        return pairs.groupBy(*names).agg(F.count(F.lit(1)).alias(USERS), F.sum(ROWS).alias(ROWS),
                                         *[F.try_sum(c).alias(c) for c in sums])
    kept = F.col(RANK) <= kappa

    def kept_sum(column: str, zero: Any) -> Any:
        return F.sum(F.when(kept, F.col(column)).otherwise(zero)).alias(column)

    return pairs.groupBy(*names).agg(
        F.count_if(kept).alias(USERS), kept_sum(ROWS, F.lit(0)),
        *[F.try_sum(F.when(kept, F.col(c)).otherwise(F.lit(0))).alias(c) for c in sums],
        F.count(F.lit(1)).alias(PAIRS), F.count_if(F.col(RANK) == 1).alias(FIRSTS), F.sum(ROWS_ALL).alias(ROWS_ALL),
        *[kept_sum(c, F.lit(0.0) if c.startswith(CHANGE) else F.lit(0)) for c in clamping_columns(n_values)])


def _aggregate_per_key(data: Any, privacy_unit: str, names: list[str], value_columns: list[str],
                       grids: Mapping[str, Any], kappa: int, linf: int, spec: tuple[bytes, int] | None,
                       null_unit_check: bool) -> Any:
    """The lazy plan of the per-key statistics when every value column has bounds (``grids``)."""
    integer = dict.fromkeys(value_columns, False)  # not read: a column with a grid becomes int64 units
    pairs = _bounded_pairs(data, privacy_unit, names, value_columns, grids, integer, kappa, linf, spec,
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
    max_partitions_contributed: int | None = None,
    max_contributions_per_partition: int | None = None,
    public_partitions: Any = None,
    strategy: str = "pi_opt",
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
    the package CSPRNG on the executors), keys are selected by ``strategy`` on the bounded user
    counts with the selection's share of ε and all of δ, a value column of a sum or mean given
    no ``bounds`` gets them from APPROX_BOUNDS over every kept value (its "bounds:<column>"
    share; docs/privacy/approx-bounds.md), and every metric gets exact discrete Laplace noise of
    scale κ·Δ/ε_m (Δ: 1 for a user count, L∞ for a row count, L∞·max|units| for a sum in grid
    units; a mean spends half its share on each of a sum of offsets and a row count). The budget
    is split by ``weights`` exactly as on one machine, and ``budget`` (a :class:`dpselect.Budget`)
    is charged (ε, δ) before any Spark job.

    ``public_partitions`` (docs/privacy/public-partitions.md): keys known without looking at the
    data (a Spark DataFrame with the ``by`` columns in the data's types, a list of keys, or a
    pandas, Polars or Arrow table). Exactly these keys are released, nothing is selected (no
    "selection" share), and a listed key absent from the data gets every metric's noise drawn
    from 0 (a mean: the midpoint of its bounds plus noise).

    Value columns are clamped and snapped to the power-of-two grid of their bounds on the
    executors and summed as int64 grid units in Spark. ``bounds_scope``: "dataset" (one set of
    bounds per column, from one histogram over every kept value, counted by Spark); "partition"
    runs on one machine only (NotImplementedError).

    ``report=True``: also compute the data holder's report (exact, NOT DP; never publish it),
    read with ``result.report()``: the single machine's
    :class:`~dpselect.aggregation.report.AggregateReport`, from per-key aggregates of the same
    draw (the bounding then ranks rows and pairs instead of dropping them, which moves more data
    through the per-key shuffle).
    """
    from dpselect.aggregation.budget import Budget
    from dpselect.aggregation.grid import Grid
    from dpselect.aggregation.plan import plan_aggregate

    sql = spark()
    types = sql.types
    if not isinstance(report, bool):
        raise TypeError(f"report must be a bool, got {type(report).__name__}")
    plan = plan_aggregate(privacy_unit=privacy_unit, by=by, metrics=metrics, epsilon=epsilon, delta=delta,
                          max_partitions_contributed=max_partitions_contributed,
                          max_contributions_per_partition=max_contributions_per_partition,
                          public=public_partitions is not None, strategy=strategy, bounds_scope=bounds_scope,
                          weights=weights, confidence_level=confidence_level,
                          **({} if precision_bits is None else {"precision_bits": precision_bits}),
                          null_privacy_units=null_privacy_units)
    names, checked, value_columns, given = plan.by, plan.metrics, plan.value_columns, plan.given_bounds
    auto_columns, shares, strat, sel_args = plan.auto_columns, plan.shares, plan.strategy, plan.strategy_args
    eps_total, delta_total, precision_bits = plan.epsilon, plan.delta, plan.precision_bits
    confidence_level = plan.confidence_level
    if auto_columns and bounds_scope == "partition":
        raise NotImplementedError(f"bounds_scope='partition' (bounds found per released key) runs on one machine "
                                  f"only; on Spark use bounds_scope='dataset' (the default), give bounds=(lower, "
                                  f"upper) for {auto_columns}, or run dpselect.aggregate")
    if sel_args is not None:
        sel_args = (*sel_args, ())
    check_frame(df, privacy_unit, names, [c for c in value_columns if c not in names])
    fields = {f.name: f.dataType for f in df.schema.fields}
    integer = {c: isinstance(fields[c], types.IntegralType) for c in value_columns}
    grids = {c: Grid.for_bounds(lo, hi, precision_bits=precision_bits, integer=integer[c])
             for c, (lo, hi) in given.items()}
    key_fields = sorted((f for f in df.schema.fields if f.name in names), key=lambda f: names.index(f.name))
    public = None if public_partitions is None else public_keys(df, public_partitions, key_fields)
    generator = resolve_rng(rng)
    if budget is not None:
        if not isinstance(budget, Budget):
            raise TypeError(f"budget must be a dpselect.Budget, got {type(budget).__name__}")
        budget.charge(eps_total, delta_total, what=f"spark.aggregate(by={names}, metrics={sorted(checked)})")
    spec = rng_spec(generator)
    generator._announce()
    kappa, linf = plan.kappa, plan.linf

    inputs = [privacy_unit, *names, *[c for c in value_columns if c not in names]]
    data, dropped = drop_null_units(df.select(*inputs), privacy_unit, null_privacy_units)
    pairs = _bounded_pairs(data, privacy_unit, names, value_columns, grids, integer, kappa, linf, spec,
                           null_privacy_units == "error", report)
    components: list[Component] = []
    if auto_columns:
        # The bounded pairs are drawn once (checkpointed): the histogram and the sums read the same kept values.
        pairs = materialise(pairs)
        lists = {f"{VALUES}{value_columns.index(c)}": c for c in auto_columns}
        kept = pairs.filter(pairs[RANK] <= kappa) if report else pairs
        counts = histograms(kept, {name: integer[c] for name, c in lists.items()})
        for name, c in lists.items():
            grids[c], component = _found_grid(c, counts[name], shares[f"bounds:{c}"][0], integer[c], kappa, linf,
                                               precision_bits, generator)
            components.append(component)
        pairs = sum_values(pairs, {name: (c, grids[c], value_columns.index(c)) for name, c in lists.items()}, report)
    per_key = _per_key(pairs, names, len(value_columns), kappa, report)
    stats = [USERS, ROWS, *[f"{SUM}{i}" for i in range(len(value_columns))]]
    if report:
        stats += [PAIRS, FIRSTS, ROWS_ALL, *clamping_columns(len(value_columns))]
    if public is not None:  # the listed keys, one absent from the data with zeros; with a report, the data's too
        per_key = join_public(per_key, public, names, stats, only_public=not report)

    release = _Release(names, value_columns, checked, {name: shares[name][0] for name in checked}, grids, kappa, linf,
                       confidence_level, sel_args, spec, public is not None, report)
    schema = release.schema(key_fields)
    if report:
        kept_fields = {f.name: f for f in per_key.schema.fields}
        full = types.StructType([*schema.fields, types.StructField(KEEP, types.BooleanType(), False),
                                 *[kept_fields[c] for c in stats]])
        decided = materialise(per_key.mapInArrow(release, full))
        released = decided.filter(decided[KEEP]).select(*schema.names)
    else:
        released = materialise(per_key.mapInArrow(release, schema))
    guarantee = _guarantee(release, strat, components, generator, eps_total, delta_total)
    frame = annotate(sorted_by_key(released, names), names, str(guarantee), guarantee.is_dp)
    holder = None
    if report:
        holder = aggregate_report(decided, dropped, grids, value_columns, strat, eps_total, kappa, linf,
                                  public is not None)
    return SparkAggregateResult(frame=frame, guarantee=guarantee,
                                bounds={c: (g.lower, g.upper) for c, g in grids.items()}, _report=holder)


def _found_grid(column: str, counts: np.ndarray, epsilon: Fraction, integer: bool, kappa: int, linf: int,
                precision_bits: int, rng: Any) -> tuple[Any, Component]:
    """APPROX_BOUNDS on the driver over a column's histogram (noise and thresholds as on one
    machine): the grid of the bounds found, and the step's component of the guarantee."""
    from dpselect.aggregation.bounds import approx_bounds_from_histogram
    from dpselect.aggregation.grid import Grid

    found = approx_bounds_from_histogram(counts, epsilon, integer=integer, max_partitions_contributed=kappa,
                                         max_contributions_per_partition=linf, rng=rng)
    grid = Grid.for_found_bounds(found.lower, found.upper, precision_bits=precision_bits, integer=integer)
    return grid, Component(f"bounds of {column!r} (APPROX_BOUNDS)", found.guarantee.epsilon_exact, Fraction(0),
                           str(found.guarantee))


class _Release:
    """The per-key step, run by ``mapInArrow`` on the executors over batches of per-key
    aggregates (the ``by`` columns, ``USERS``, ``ROWS``, one ``SUM<i>`` per value column): the
    selection (none with public partitions) and every metric's noise, in the C kernel. Each
    key's decision and noise depend on its own aggregates and fresh randomness only, so batch by
    batch is the same mechanism as all keys at once."""

    def __init__(self, names: list[str], value_columns: list[str], metrics: Mapping[str, Any],
                 epsilons: Mapping[str, Fraction], grids: Mapping[str, Any], kappa: int, linf: int,
                 level: float | None, selection: tuple[Any, ...] | None, spec: tuple[bytes, int] | None,
                 public: bool = False, report: bool = False) -> None:
        self.names, self.value_columns, self.metrics = names, value_columns, dict(metrics)
        self.epsilons, self.grids, self.kappa, self.linf = dict(epsilons), dict(grids), kappa, linf
        self.level, self.selection, self.spec, self.public, self.report = level, selection, spec, public, report

    def schema(self, key_fields: list[Any]) -> Any:
        types = spark().types
        out = list(key_fields)
        for name, m in self.metrics.items():
            typ = types.LongType() if m.kind in ("count", "count_distinct_units") else types.DoubleType()
            out.append(types.StructField(name, typ, False))
            if self.level is not None:
                out.append(types.StructField(f"{name}_ci_low", typ, True))
                out.append(types.StructField(f"{name}_ci_high", typ, True))
        return types.StructType(out)

    def metric(self, name: str, users: np.ndarray, rows: np.ndarray, sums: Mapping[str, np.ndarray], rng: Any
               ) -> tuple[Any, Any, Any, Component]:
        """One metric's noisy values (and interval) over keys with these statistics."""
        from dpselect.aggregation.metric_noise import PartitionGrids, noisy_metric

        from dpselect.aggregation.wide import Wide

        m = self.metrics[name]
        grid = PartitionGrids.of(self.grids[m.column], users.size) if m.column else None
        label = f"{name} = {m}"
        return noisy_metric(label, m, self.epsilons[name], self.kappa, self.linf, users, rows,
                            Wide.from_int64(sums[m.column]) if m.column else None, grid, self.level, rng)

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        strategy = None if self.selection is None else executor_strategy(self.selection)
        rng = executor_rng(self.spec, b"release")
        n_keys = len(self.names)
        for batch in batches:
            def column(i: int) -> np.ndarray:
                col = batch.column(i)
                if col.null_count:
                    raise ValueError(f"{ERROR_MARK}a key's sum of grid units leaves int64: use coarser bounds "
                                     "or fewer precision_bits")
                return col.to_numpy(zero_copy_only=False).astype(np.int64)

            users = column(n_keys)
            listed = (batch.column(batch.num_columns - 1).to_numpy(zero_copy_only=False).astype(bool)
                      if self.public else None)
            if strategy is None:  # public partitions: every listed key, nothing selected
                keep = listed if listed is not None else np.ones(users.size, dtype=bool)
            else:
                candidate = users > 0  # with a report every key of the data comes, some bounded away
                keep = np.zeros(users.size, dtype=bool)
                keep[candidate] = np.asarray(strategy.apply(users[candidate], rng=rng).keep, dtype=bool)
            rows = column(n_keys + 1)[keep]
            sums = {c: column(n_keys + 2 + i)[keep] for i, c in enumerate(self.value_columns)}
            if self.report:  # every key, KEEP saying which are released (the others' metrics are 0)
                out = [batch.column(i) for i in range(n_keys)]
            else:
                out = [batch.column(i).filter(pa.array(keep)) for i in range(n_keys)]
            for name in self.metrics:
                for array in self.metric(name, users[keep], rows, sums, rng)[:3 if self.level is not None else 1]:
                    out.append(pa.array(self._spread(np.asarray(array), keep) if self.report else np.asarray(array)))
            names = [*self.names, *self._metric_columns()]
            if self.report:
                out.append(pa.array(keep))
                out += [batch.column(i) for i in range(n_keys, batch.num_columns - self.public)]
                names += [KEEP, *batch.schema.names[n_keys:batch.num_columns - self.public]]
            yield pa.RecordBatch.from_arrays(out, names=names)

    @staticmethod
    def _spread(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
        """The released keys' values at their rows, 0 elsewhere (those rows are filtered out)."""
        full = np.zeros(keep.size, dtype=values.dtype)
        full[keep] = values
        return full

    def _metric_columns(self) -> list[str]:
        suffixes = ("", "_ci_low", "_ci_high") if self.level is not None else ("",)
        return [f"{name}{s}" for name in self.metrics for s in suffixes]


def _guarantee(release: _Release, strat: Any, components: list[Component], generator: Any, epsilon: Fraction,
               delta: Fraction) -> AggregateGuarantee:
    """The statement, computed on the driver from the same parameters and grids (a metric's
    component depends on them only; the throwaway draw on one zero is discarded). Components in
    the single machine's order: the selection, the bounds found, the metrics."""
    steps = []
    selection_dp = True
    if strat is not None:
        selection = strat.guarantee.enforced() if hasattr(strat.guarantee, "enforced") else strat.guarantee
        if not generator.privacy_guaranteed:
            selection = selection.under_test_rng()
        steps.append(Component(f"selection of keys ({strat.name})", as_fraction(selection.epsilon),
                               selection.delta_exact, str(selection)))
        selection_dp = selection.is_dp
    steps += components
    one = np.zeros(1, np.int64)
    sums = {c: one for c in release.value_columns}
    for name in release.metrics:
        steps.append(release.metric(name, one, one, sums, resolve_rng(None))[3])
    return AggregateGuarantee(components=tuple(steps), requested_epsilon=epsilon, requested_delta=delta,
                              kappa=release.kappa, linf=release.linf,
                              privacy_guaranteed=generator.privacy_guaranteed and selection_dp)
