"""``dpselect.spark.aggregate``: :func:`dpselect.aggregate` run by Spark."""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpselect.aggregation.guarantee import AggregateGuarantee, Component
from dpselect.pipeline import build_strategy, check_columns
from dpselect.rng import resolve_rng
from dpselect.rows import NULL_PRIVACY_UNITS
from dpselect.spark._common import (
    ERROR_MARK,
    ROWS,
    SUM,
    USERS,
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

__all__ = ["SparkAggregateResult", "aggregate"]


# ---------------------------------------------------------------- aggregate

def _aggregate_per_key(df: Any, privacy_unit: str, names: list[str], value_columns: list[str],
                       grids: Mapping[str, Any], kappa: int, linf: int, spec: tuple[bytes, int] | None,
                       null_privacy_units: str) -> Any:
    """The lazy plan of the per-key statistics of the bounded rows: kept users
    (``__dpselect_users``), kept rows (``__dpselect_rows``) and, per value column in order, the
    sum of its clamped values in grid units (``__dpselect_sum_<i>``; null if it leaves int64).

    Rows → grid units and a uniform value per row → the L∞ smallest per (user, key) → per pair
    → a uniform value per pair → the κ smallest pairs per user → per key."""
    F = spark().functions
    unit_cols = {c: f"{SUM}{i}" for i, c in enumerate(value_columns)}
    rows = df.select(privacy_unit, *names, *[F.col(c).alias(unit_cols[c]) for c in value_columns])
    rows = drop_null_units(rows, privacy_unit, null_privacy_units).repartition(privacy_unit)  # one shuffle by user
    drawn = with_random(rows, spec, b"rows", null_privacy_units == "error", privacy_unit,
                         {unit_cols[c]: g for c, g in grids.items()})
    kept_rows = keep_first(drawn, [privacy_unit, *names], [], linf)
    pairs = kept_rows.groupBy(privacy_unit, *names).agg(
        F.count(F.lit(1)).alias(ROWS), *[F.sum(unit_cols[c]).alias(unit_cols[c]) for c in value_columns])
    bounded = keep_first(with_random(pairs, spec, b"pairs", False, privacy_unit), [privacy_unit], names, kappa)
    return bounded.groupBy(*names).agg(
        F.count(F.lit(1)).alias(USERS), F.sum(ROWS).alias(ROWS),
        *[F.try_sum(unit_cols[c]).alias(unit_cols[c]) for c in value_columns])


@dataclass
class SparkAggregateResult:
    """What :func:`aggregate` returns: ``frame``, a Spark DataFrame with one row per released key
    (sorted by key; its ``by`` columns then one column per metric, plus ``<metric>_ci_low`` /
    ``_ci_high`` with ``confidence_level``), already computed; ``guarantee``, the whole
    release's :class:`~dpselect.aggregation.guarantee.AggregateGuarantee`; ``bounds``, the
    clamping bounds per value column."""

    frame: Any
    guarantee: AggregateGuarantee
    bounds: dict[str, tuple[float, float]]

    def __iter__(self) -> Any:
        return iter((self.frame, self.guarantee))


def aggregate(
    df: Any,
    *,
    privacy_unit: str,
    by: str | Sequence[str],
    metrics: Mapping[str, Any],
    epsilon: float,
    delta: float,
    max_partitions_contributed: int = 1,
    max_contributions_per_partition: int = 1,
    strategy: str = "pi_opt",
    public_partitions: Any = None,
    weights: Mapping[str, object] | None = None,
    confidence_level: float | None = None,
    budget: Any = None,
    precision_bits: int | None = None,
    null_privacy_units: str = "error",
    rng: object = None,
) -> SparkAggregateResult:
    """Release the keys of a GROUP BY of a Spark DataFrame and, per key, each metric, under
    (``epsilon``, ``delta``)-DP: :func:`dpselect.aggregate` run by Spark, with its statement
    (docs/privacy/aggregate.md): each user is bounded once (κ keys, then at most
    L∞ = ``max_contributions_per_partition`` rows in each kept key, uniform subsets drawn with
    the package CSPRNG on the executors), keys are selected by ``strategy`` on the bounded user
    counts with the selection's share of ε and all of δ, and every metric gets exact discrete
    Laplace noise of scale κ·Δ/ε_m (Δ: 1 for a user count, L∞ for a row count, L∞·max|units| for
    a sum in grid units; a mean spends half its share on each of a sum of offsets and a row
    count). The budget is split by ``weights`` exactly as on one machine.

    ``public_partitions`` (docs/privacy/public-partitions.md): keys known without looking at the
    data (a Spark DataFrame with the ``by`` columns in the data's types, a list of keys, or a
    pandas, Polars or Arrow table). Exactly these keys are released, nothing is selected (no
    "selection" share), and a listed key absent from the data gets every metric's noise drawn
    from 0 (a mean: the midpoint of its bounds plus noise).

    Value columns are clamped and snapped to the power-of-two grid of their ``bounds`` on the
    executors and summed as int64 grid units in Spark. On Spark every sum or mean needs its
    ``bounds`` (APPROX_BOUNDS is not run here).
    """
    from dpselect.aggregation.aggregate import (
        DEFAULT_PRECISION_BITS,
        SELECTION_STRATEGIES,
        _budget_amounts,
        _check_metrics,
        _float_down,
        _shares,
        _weights,
    )
    from dpselect.aggregation.budget import Budget
    from dpselect.aggregation.grid import Grid
    from dpselect.aggregation.metric_noise import PartitionGrids, noisy_metric
    from dpselect.exact import as_fraction

    sql = spark()
    types = sql.types
    names = check_columns(privacy_unit, by, "__dpselect_unused__")
    if null_privacy_units not in NULL_PRIVACY_UNITS:
        raise ValueError(f"null_privacy_units must be 'error' or 'drop', got {null_privacy_units!r}")
    for label, value in (("max_partitions_contributed", max_partitions_contributed),
                         ("max_contributions_per_partition", max_contributions_per_partition)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be an int >= 1, got {value!r}")
    precision_bits = DEFAULT_PRECISION_BITS if precision_bits is None else precision_bits
    if isinstance(precision_bits, bool) or not isinstance(precision_bits, int) or not 1 <= precision_bits <= 52:
        raise ValueError(f"precision_bits must be an int between 1 and 52, got {precision_bits!r}")
    if confidence_level is not None and (isinstance(confidence_level, bool) or not isinstance(confidence_level, float)
                                         or not 0 < confidence_level < 1):
        raise ValueError(f"confidence_level must be a float in (0, 1), e.g. 0.95, got {confidence_level!r}")
    checked = _check_metrics(metrics, {privacy_unit, *names})
    value_columns = sorted({m.column for m in checked.values() if m.column is not None})
    clash = set(checked) & set(value_columns)
    if clash:
        raise ValueError(f"metric name(s) {sorted(clash)} are also value columns; choose other names")
    given: dict[str, tuple[float, float]] = {}
    for metric_name, m in checked.items():
        if m.column is None:
            continue
        if m.bounds is None:
            raise ValueError(f"metrics[{metric_name!r}]: on Spark a {m.kind}() needs bounds=(lower, upper) "
                             "(finding them privately with APPROX_BOUNDS runs on one machine only)")
        previous = given.setdefault(m.column, m.bounds)
        if previous != m.bounds:
            raise ValueError(f"column {m.column!r} is given two different bounds, {previous} and {m.bounds}: "
                             "one column is clamped once")
    eps_total, delta_total = _budget_amounts(epsilon, delta)
    shares = _shares(eps_total, delta_total, _weights(checked, [], public_partitions is not None, weights))
    if strategy not in SELECTION_STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(SELECTION_STRATEGIES)} (a count-based selection of "
                         f"keys), got {strategy!r}; for a list of keys known in advance pass public_partitions")
    strat = sel_args = None
    if public_partitions is None:
        eps_sel, delta_sel = shares["selection"]
        sel_args = (strategy, _float_down(eps_sel), _float_down(delta_sel), max_partitions_contributed, False, False,
                    ())
        strat = build_strategy(*sel_args[:6])
    check_frame(df, privacy_unit, names, [c for c in value_columns if c not in names])
    key_fields = sorted((f for f in df.schema.fields if f.name in names), key=lambda f: names.index(f.name))
    public = None if public_partitions is None else public_keys(df, public_partitions, key_fields)
    fields = {f.name: f.dataType for f in df.schema.fields}
    grids = {c: Grid.for_bounds(lo, hi, precision_bits=precision_bits,
                                integer=isinstance(fields[c], types.IntegralType)) for c, (lo, hi) in given.items()}
    generator = resolve_rng(rng)
    if budget is not None:
        if not isinstance(budget, Budget):
            raise TypeError(f"budget must be a dpselect.Budget, got {type(budget).__name__}")
        budget.charge(eps_total, delta_total, what=f"spark.aggregate(by={names}, metrics={sorted(checked)})")
    spec = rng_spec(generator)
    generator._announce()
    kappa, linf = max_partitions_contributed, max_contributions_per_partition

    # Rows → units and a random value per row → ≤ L∞ rows per (user, key) → per pair → a random
    # value per pair → ≤ κ pairs per user → per key.
    per_key = _aggregate_per_key(df, privacy_unit, names, value_columns, grids, kappa, linf, spec,
                                 null_privacy_units)
    if public is not None:  # exactly the listed keys, a key absent from the data with zeros
        per_key = join_public(per_key, public, names, [USERS, ROWS, *[f"{SUM}{i}" for i in range(len(value_columns))]],
                              only_public=True)

    out_fields = list(key_fields)
    for metric_name, m in checked.items():
        typ = types.LongType() if m.kind in ("count", "count_distinct_units") else types.DoubleType()
        out_fields.append(types.StructField(metric_name, typ, False))
        if confidence_level is not None:
            out_fields.append(types.StructField(f"{metric_name}_ci_low", typ, True))
            out_fields.append(types.StructField(f"{metric_name}_ci_high", typ, True))
    schema = types.StructType(out_fields)
    n_keys = len(names)
    level = confidence_level
    metric_items = list(checked.items())
    metric_eps = {metric_name: shares[metric_name][0] for metric_name in checked}

    def decide(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        strategy_ = None if sel_args is None else executor_strategy(sel_args)
        rng_ = executor_rng(spec, b"release")
        for batch in batches:
            def column(i: int) -> np.ndarray:
                col = batch.column(i)
                if col.null_count:
                    raise ValueError(f"{ERROR_MARK}a key's sum of grid units leaves int64: use coarser bounds "
                                     "or fewer precision_bits")
                return col.to_numpy(zero_copy_only=False).astype(np.int64)

            users = column(n_keys)
            if strategy_ is None:  # public partitions: every listed key, nothing selected
                keep = np.ones(users.size, dtype=bool)
            else:
                keep = np.asarray(strategy_.apply(users, rng=rng_).keep, dtype=bool)
            mask = pa.array(keep, pa.bool_())
            out = [batch.column(i).filter(mask) for i in range(n_keys)]
            users, rows_ = users[keep], column(n_keys + 1)[keep]
            sums = {c: column(n_keys + 2 + i)[keep] for i, c in enumerate(value_columns)}
            n = int(keep.sum())
            for metric_name, m in metric_items:
                grid = PartitionGrids.of(grids[m.column], n) if m.column else None
                values, low, high, _ = noisy_metric(metric_name, m, metric_eps[metric_name], kappa, linf, users,
                                                    rows_, sums[m.column] if m.column else None, grid, level, rng_)
                out.append(pa.array(np.asarray(values)))
                if level is not None:
                    out.append(pa.array(np.asarray(low)))
                    out.append(pa.array(np.asarray(high)))
            yield pa.RecordBatch.from_arrays(out, names=schema.names)

    released = materialise(per_key.mapInArrow(decide, schema))

    # The statement, computed on the driver from the same parameters (the metric's noise object
    # depends on them only; the throwaway draw on one zero is discarded).
    components = []
    selection_dp = True
    if strat is not None:
        selection = strat.guarantee.enforced() if hasattr(strat.guarantee, "enforced") else strat.guarantee
        if not generator.privacy_guaranteed:
            selection = selection.under_test_rng()
        components.append(Component(f"selection of keys ({strat.name})", as_fraction(selection.epsilon),
                                    selection.delta_exact, str(selection)))
        selection_dp = selection.is_dp
    one = np.zeros(1, np.int64)
    for metric_name, m in checked.items():
        grid = PartitionGrids.of(grids[m.column], 1) if m.column else None
        *_, component = noisy_metric(metric_name, m, metric_eps[metric_name], kappa, linf, one, one,
                                     one if m.column else None, grid, None, resolve_rng(None))
        components.append(component)
    guarantee = AggregateGuarantee(components=tuple(components), requested_epsilon=eps_total,
                                   requested_delta=delta_total, kappa=kappa, linf=linf,
                                   privacy_guaranteed=generator.privacy_guaranteed and selection_dp)
    frame = annotate(sorted_by_key(released, names), names, str(guarantee), guarantee.is_dp)
    return SparkAggregateResult(frame=frame, guarantee=guarantee,
                                bounds={c: (g.lower, g.upper) for c, g in grids.items()})
