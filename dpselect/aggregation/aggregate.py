"""A differentially private GROUP BY from raw rows: keys and their statistics in one call
(docs/privacy/aggregate.md; tutorial: docs/aggregate.md).

One bounding, one budget: every user is bounded once (κ partitions, then at most L∞ rows in
each, uniform choices from the package CSPRNG) and the key selection and every metric are
computed from those same kept rows, so a key's count and its sum describe the same rows. The
budget (ε, δ) is split between the selection, the private bounds of value columns given none,
and the metrics, and the statement composes them by basic sequential composition."""
from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dpselect._threads import for_call, using
from dpselect.aggregation.bounds import NotEnoughDataError, approx_bounds, approx_bounds_per_partition
from dpselect.aggregation.bounds import check_parameters as check_bounds_parameters
from dpselect.aggregation.budget import Budget
from dpselect.aggregation.grid import DEFAULT_PRECISION_BITS, Grid
from dpselect.aggregation.guarantee import AggregateGuarantee, Component
from dpselect.aggregation.metrics import Metric
from dpselect.aggregation.metric_noise import PartitionGrids, release_metrics, selection_counts_metric
from dpselect.aggregation.more_stats import (distinct_rows, early_square_columns, grid_square_spec, more_statistics,
                                             needs_kept_partitions, positions)
from dpselect.aggregation.noise import DiscreteLaplaceNoise
from dpselect.aggregation.plan import AggregatePlan, plan_aggregate
from dpselect.aggregation.planned import planned_release
from dpselect.aggregation.quantile_release import in_metric_order, release_quantile_metrics
from dpselect.aggregation.report import MOST_ROWS, AggregateReport, ColumnClamping
from dpselect.aggregation.result import AggregateResult
from dpselect.aggregation.values import ValueColumn, check_value_types
from dpselect.aggregation.wide import Wide, sums_by_code
from dpselect.core.exact import as_fraction
from dpselect.errors import DPSelectWarning
from dpselect.ingest.auto_bounds import choose_for_plan
from dpselect.ingest.frames import FrameKind, from_arrow, result_schema, to_arrow
from dpselect.ingest.pipeline import GUARANTEE_METADATA_KEY, PRIVATE_METADATA_KEY, warn_dropped
from dpselect.ingest.public_keys import public_table, with_public_partitions
from dpselect.rng import resolve_rng
from dpselect.aggregation.shards import bound_in_shards
from dpselect.ingest.rows import PartitionCounts, RowCounter, arrow_from_numpy
from dpselect.mechanisms.protocols import CountMechanism, IndependentSelection
from dpselect.mechanisms.tsgd import TSGDRelease

__all__ = ["AggregateResult", "BoundingDroppedMostRows", "NothingReleased", "aggregate", "DEFAULT_PRECISION_BITS",
           "INTERVALS_METADATA_KEY"]

INTERVALS_METADATA_KEY = b"dpselect.intervals"


class NothingReleased(DPSelectWarning):
    """No key passed the selection. The warning's figure (how many users a key needs) comes from
    the parameters alone."""


class BoundingDroppedMostRows(DPSelectWarning):
    """Contribution bounding removed most of the rows. The figure is exact and NOT differentially
    private: it is for the data holder, never part of the release."""


def _bound_all(users: npt.NDArray[np.uint32], partitions: npt.NDArray[np.uint32], n_users: int, n_partitions: int,
               kappa: int, linf: int, units: list[npt.NDArray[np.int64]], squares: list[tuple[int, int, int]], rng: Any
               ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], list[Wide], npt.NDArray[np.int64],
                          npt.NDArray[np.uint8], dict[str, int]]:
    """The kernel on every shard of the users (:mod:`dpselect.aggregation.shards`: shards fixed
    by the input, one CSPRNG stream each, taken by the call's threads; the kept rows then added up
    per partition, a range of partitions per thread, into one set of outputs): the exact 128-bit
    sums are one per value column, then one per ``squares`` entry (a column's squared offsets,
    (column index, mid, shift), summed by the kernel from the units)."""
    kept = np.zeros(users.size, dtype=np.uint8)
    users_kept, rows_kept, words, before, totals = bound_in_shards(
        users, partitions, n_users, n_partitions, kappa, linf, units, rng.test_state, kept, squares)
    sums = [Wide.from_words(words[i, :n_partitions]) for i in range(len(units) + len(squares))]
    return users_kept[:n_partitions], rows_kept[:n_partitions], sums, before[:n_partitions], kept, totals


def aggregate(
    data: Any,
    *,
    privacy_unit: str,
    by: str | Sequence[str],
    metrics: Mapping[str, Metric],
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
    budget: Budget | None = None,
    precision_bits: int = DEFAULT_PRECISION_BITS,
    null_privacy_units: str = "error",
    rng: object = None,
    threads: int | None = None,
) -> AggregateResult:
    """Release, under (ε, δ)-DP, the keys of a GROUP BY and a statistic per key for each metric.

    Guarantee: the released keys, every metric value and the private bounds are together
    (``epsilon``, ``delta``)-differentially private for neighbouring datasets that add or remove
    all rows of one privacy unit, by basic sequential composition of the steps below, each on
    the same bounded rows (docs/privacy/aggregate.md):

    1. bounding: each user keeps κ = ``max_partitions_contributed`` of its partitions and at most
       L∞ = ``max_contributions_per_partition`` of its rows in each, uniform subsets drawn with
       the package CSPRNG. Both are required: they are what one person may contribute, and
       should come from public knowledge of the data (or a held-out sample), never from the
       exact report of the data released; or "auto": chosen privately from the rows, a noisy
       quantile of a power-of-two histogram (users' distinct keys for κ, one pair's rows per user
       for L∞) with the "contribution_bounds" share of ε, a pure-DP step of its own in the
       statement (docs/privacy/auto-bounds.md). Every check is then made at the largest value
       auto may choose (κ ≤ 256, L∞ ≤ 65536, halved until every step's noise fits);
    2. selection (skipped with ``public_partitions``): ``strategy`` on the bounded distinct-user
       counts, with the selection's share of ε and of δ (all of it, or half when Gaussian metrics
       take the other half): "pi_opt" (the optimal rule of Desfontaines, Voss, Gipson, Mandayam,
       PoPETs 2022, Theorems 1–3), "release" (TSGD: its noisy user counts are then the
       ``count_distinct_units`` metric, whose weight goes to the selection), "laplace",
       "gaussian", or "auto" (default: the one that needs the fewest users to release a key at
       that share and κ, from the parameters only; :func:`dpselect.mechanisms.recommend.recommend`).
       A mechanism built by :func:`dpselect.make_strategy` (one of those, at the same κ) spends its
       own (ε, δ) instead: the other steps share the rest of ε;
    3. bounds: a value column of a sum or mean given no ``bounds`` gets them from APPROX_BOUNDS
       over all kept values (its own share; docs/privacy/approx-bounds.md);
    4. metrics: each gets its share of ε and exact discrete Laplace noise, or exact discrete
       Gaussian noise (Canonne, Kamath, Steinke, NeurIPS 2020) scaled to its sensitivity: κ for a
       user count, κ·L∞ for a row count, κ·L∞·max|value| in grid units for a sum; a mean is its
       bounds' midpoint plus a noisy sum of offsets from it over a noisy row count, each with half
       its share (or the released ``count()`` as divisor; or, with a released ``sum`` of its
       column too, their quotient, spending nothing). A quantile metric (``quantile``, ``median``,
       ``min``, ``max``; several q at once for one share) is read from a hierarchical histogram of
       the clamped values per key with noise on every node, of sensitivity κ·L∞·h in L1 and
       κ·h·L∞² in squared L2 for a tree of height h (docs/privacy/quantiles.md). ``noise``: "auto" (default: per metric, the
       law with the smaller standard deviation, from the parameters only), "laplace" or
       "gaussian"; a metric's own ``noise=`` wins. The Gaussian metrics compose as one zCDP group,
       converted once to (ε, δ) (docs/privacy/aggregate.md, "Composition").
       Values are clamped and snapped to a power-of-two grid first (Mironov, CCS 2012), so no
       float noise is ever added; sums are exact (128-bit) and each key's is clamped to ±2^62
       grid units before noise, a 1-Lipschitz step that keeps every sensitivity.

    Every parameter is checked (:func:`dpselect.aggregation.plan.plan_aggregate`) before any
    data is read or the budget charged, including that every step's noise fits 64-bit integers,
    so whether a release succeeds does not depend on the data.

    The budget's default weights depend on the parameters only: one per metric for the selection
    (a key not released loses every metric, so the selection weighs as much as all of them; plus
    1 where strategy "release" serves the user count), 1 per column whose bounds are found, 1 per
    metric that spends budget, 1/4 for κ / L∞ chosen privately (docs/aggregate.md, "Budget
    split"); ``weights`` changes any of them by name
    ("selection", "bounds:<column>", "contribution_bounds", a metric's name). With ``budget`` (a
    :class:`dpselect.Budget`) the call charges (ε, δ) before any work and fails without charging
    if that would overspend; a budget stated in ρ (:meth:`dpselect.Budget.zcdp`) is charged each
    step's cost in ρ instead: the Gaussian metrics' ρ, ε²/2 and δ for every other step
    (:func:`dpselect.aggregation.planned.planned_release`; docs/privacy/zcdp.md).

    ``bounds_scope``: where APPROX_BOUNDS looks for a column given no bounds. "dataset" (default):
    once over every kept value, one grid and one noise scale for all keys (more data per
    histogram). "partition": each released key gets its own bounds from its own noisy histogram
    (after the selection, so only released keys are looked at); a key where no bin passes gets
    NaN for that column's sums and means. Both spend the column's "bounds:<column>" share.

    ``confidence_level`` (e.g. 0.95) adds ``<metric>_ci_low`` / ``<metric>_ci_high`` columns:
    intervals that hold the value after bounding and clamping, before noise, with at least that
    probability; they do not account for what bounding and clamping removed, nor for the
    selection (docs/privacy/confidence-intervals.md; ``report()`` says how much was removed).

    ``threads``: how many threads the work may use (an int >= 1); default ``DPSELECT_MAX_THREADS``
    if set, else 1 inside a Spark task, else every core the process may use (affinity and cgroup
    quota). The release does not depend on it: users are bounded in shards fixed by the input,
    each with its own CSPRNG stream (docs/rows.md, "Threads").

    Returns an :class:`AggregateResult`: ``.frame`` in the caller's frame type (pandas, Polars,
    Arrow), ``.guarantee``, ``.bounds`` (the clamping bounds used per value column) and
    ``.report()`` for the data holder (exact, NOT DP).
    """
    plan = plan_aggregate(privacy_unit=privacy_unit, by=by, metrics=metrics, epsilon=epsilon, delta=delta,
                          max_partitions_contributed=max_partitions_contributed,
                          max_contributions_per_partition=max_contributions_per_partition,
                          public=public_partitions is not None, strategy=strategy, bounds_scope=bounds_scope,
                          weights=weights, confidence_level=confidence_level, precision_bits=precision_bits,
                          null_privacy_units=null_privacy_units, noise=noise)
    n_threads = for_call(threads)
    generator = resolve_rng(rng)
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(f"budget must be a dpselect.Budget, got {type(budget).__name__}")
    # The schema's checks (columns, types, the public keys against the key types) come before the
    # budget is charged: they depend on the parameters and the schema, never on the values.
    table, kind = to_arrow(data, plan.privacy_unit, plan.by, values=plan.input_columns()[1 + len(plan.by):])
    integer = check_value_types(table.schema, plan.value_columns)
    for c in plan.auto_columns:  # APPROX_BOUNDS' own checks, from the parameters and the column's type
        check_bounds_parameters(plan.shares[f"bounds:{c}"][0], integer=integer[c], max_partitions_contributed=plan.kappa,
                                max_contributions_per_partition=plan.linf)
    grids = {c: Grid.for_bounds(lo, hi, precision_bits=plan.precision_bits, integer=integer[c])
             for c, (lo, hi) in plan.given_bounds.items()}
    listed = None
    if public_partitions is not None:
        listed = public_table(public_partitions, result_schema(table.schema, plan.by, None))
    if budget is not None:
        budget.charge_guarantee(planned_release(plan), what=f"aggregate({plan.describe()})")
    generator.announce()
    with using(n_threads):
        return _release(plan, table, kind, grids, integer, listed, generator)


def _release(plan: AggregatePlan, table: Any, kind: FrameKind, grids: dict[str, Grid], integer: dict[str, bool],
             listed: Any, generator: Any) -> AggregateResult:
    """The work of :func:`aggregate`, once the plan is checked and the budget charged."""
    counter = RowCounter(plan.privacy_unit, plan.by, null_privacy_units=plan.null_privacy_units)  # type: ignore[arg-type]
    users, partitions, used = counter.encode(table, more=False)
    warn_dropped(counter, plan.privacy_unit)
    chose = figures = None
    if plan.auto_kappa or plan.auto_linf:  # κ / L∞ chosen privately (docs/privacy/auto-bounds.md)
        plan, chose, figures = choose_for_plan(plan, users, partitions, counter.n_users, counter.n_partitions,
                                               generator, None if listed is None else int(listed.num_rows))
    kappa, linf = plan.kappa, plan.linf
    values = {c: ValueColumn(used, c) for c in plan.value_columns}
    known = [c for c in plan.value_columns if c in grids]
    units = [values[c].units(grids[c]) for c in known]
    squared = early_square_columns(plan.metrics, plan.spreads, known)  # summed per key by the kernel, with the units
    squares = [(known.index(c), *grid_square_spec(grids[c])) for c in squared]
    n_parts = counter.n_partitions
    users_kept, rows_kept, wide_sums, users_before, kept, totals = _bound_all(
        users, partitions, counter.n_users, n_parts, kappa, linf, units, squares, generator)
    distinct = distinct_rows(plan.metrics, used, users, kept)  # count_distinct's kept values (and units)
    del units, users
    _warn_if_bounding_dropped_most(totals, kappa, linf)
    column_sums = dict(zip(known, wide_sums))
    early_squares = dict(zip(squared, wide_sums[len(known):]))
    components: list[Component] = [] if chose is None else [chose]
    kept_values = {c: values[c].take(kept) for c in plan.value_columns}
    del values, used, table  # the input's columns are no longer read
    quantiles = {n: m for n, m in plan.metrics.items() if m.kind == "quantile"}
    kept_partitions = partitions[kept.view(bool)] if plan.auto_columns or quantiles or \
        needs_kept_partitions(plan.metrics, plan.spreads, squared) else None
    del partitions
    unbounded: list[str] = []  # columns where no bin of the noisy histogram passed
    for c in plan.auto_columns if plan.bounds_scope == "dataset" else ():
        eps_b, _ = plan.shares[f"bounds:{c}"]
        try:
            found = approx_bounds(kept_values[c], eps_b, max_partitions_contributed=kappa,
                                  max_contributions_per_partition=linf, integer=integer[c], rng=generator)
        except NotEnoughDataError:
            # Not a failure of the release (that would depend on the data): the step ran and spent its
            # share, and the column's sums and means are released as NaN, as with bounds per key.
            unbounded.append(c)
            noise = DiscreteLaplaceNoise.for_epsilon(eps_b, sensitivity=linf, max_partitions_contributed=kappa)
            components.append(Component(f"bounds of {c!r} (APPROX_BOUNDS; no bounds found)", noise.epsilon,
                                        Fraction(0), str(noise.guarantee)))
            continue
        grids[c] = Grid.for_found_bounds(found.lower, found.upper, precision_bits=plan.precision_bits,
                                         integer=integer[c])
        assert kept_partitions is not None  # set whenever there are auto_columns
        column_sums[c] = grids[c].sum_units(grids[c].to_units(kept_values[c], name=c), kept_partitions, n_parts)
        components.append(Component(f"bounds of {c!r} (APPROX_BOUNDS)", found.noise.epsilon, Fraction(0),
                                    str(found.guarantee)))
    clamping = {c: ColumnClamping.of(kept_values[c], grids[c]) for c in plan.value_columns if c in grids}

    # Candidates: partitions with a user left after bounding, or the public list.
    candidates = np.flatnonzero(users_kept > 0)
    strat = plan.strategy
    selection_guarantee = None
    given: dict[str, Any] = {}
    if listed is not None:
        data_keys = counter.keys_of(candidates)
        joined, _ = with_public_partitions(PartitionCounts(data_keys, candidates + 1), listed, only_public=True)
        index = joined.counts - 1  # -1: a listed key absent from the data (all statistics 0)
        keys = joined.keys
        released = np.ones(index.size, dtype=bool)
    else:
        index = candidates
        keys = counter.keys_of(candidates)
        assert strat is not None  # the plan builds one whenever keys are selected
        result = strat.apply(users_kept[candidates], rng=generator)
        released = np.asarray(result.keep, dtype=bool)
        if not released.any():
            _warn_nothing_released(strat)
        selection_guarantee = result.guarantee.enforced()
        if plan.selection_counts is not None:  # the TSGD release's noisy user counts are that metric
            assert result.noisy_counts is not None and isinstance(strat, TSGDRelease)
            name = plan.selection_counts
            given[name] = selection_counts_metric(plan.metric_labels()[name], result.noisy_counts[released],
                                                  strat.table, plan.confidence_level)
        components.insert(0 if chose is None else 1, Component(
            f"selection of keys ({strat.name})", as_fraction(selection_guarantee.epsilon),
            selection_guarantee.delta_exact, str(selection_guarantee)))

    out_index = index[released]
    present = out_index >= 0
    at = np.where(present, out_index, 0)

    def stat(array: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return np.where(present, array[at], 0).astype(np.int64) if array.size else np.zeros(out_index.size, np.int64)

    def stat_wide(sums: Wide) -> Wide:
        if not sums.shape[0]:
            return Wide.zeros(out_index.size)
        picked = sums[at]
        return Wide(np.where(present, picked.lo, np.uint64(0)), np.where(present, picked.hi, np.int64(0)))

    n_out = out_index.size
    position = positions(out_index, present, n_parts)  # data partition code -> output row (−1: not released)
    out_grids = {c: PartitionGrids.of(g, n_out) for c, g in grids.items()}
    out_sums = {c: stat_wide(column_sums[c]) for c in grids}
    for c in unbounded:
        out_grids[c], out_sums[c] = PartitionGrids.none(n_out), Wide.zeros(n_out)
    for c in plan.auto_columns if plan.bounds_scope == "partition" else ():
        assert kept_partitions is not None
        eps_b, _ = plan.shares[f"bounds:{c}"]
        out_grids[c], out_sums[c], clamping[c], component = _partition_bounds(
            kept_values[c], kept_partitions, position, n_out, eps_b, kappa, linf, plan.precision_bits,
            integer[c], generator, c)
        components.append(component)
    # Quantile metrics read the kept values themselves (a noisy tree of them per key).
    trees = release_quantile_metrics(plan.metric_labels(), quantiles, plan.metric_noise(kappa, linf),  # type: ignore[arg-type]
                                     kept_values, kept_partitions, position, n_out,
                                     {c: grids.get(c) for c in plan.value_columns}, integer,
                                     plan.confidence_level, generator)
    extra = more_statistics(plan.metrics, plan.spreads, kept_values, kept_partitions, grids, out_grids,
                            position, n_out, distinct, n_parts, generator,
                            early_squares)
    del kept_values
    clamped_sums = {c: int(np.count_nonzero(w.outside())) for c, w in out_sums.items()}

    level = plan.confidence_level
    columns: dict[str, npt.NDArray[Any]] = {}
    metrics_out = release_metrics(plan.metric_labels(), {n: m for n, m in plan.metrics.items() if n not in trees},
                                  plan.metric_noise(kappa, linf), plan.means, stat(users_kept), stat(rows_kept),
                                  out_sums, out_grids, level, generator, given, extra)
    for tree_columns, component in in_metric_order(plan.metrics, trees, metrics_out).values():
        for column, (values_out, low, high) in tree_columns.items():
            columns[column] = values_out
            if level is not None:
                columns[f"{column}_ci_low"], columns[f"{column}_ci_high"] = low, high
        components.append(component)

    guarantee = AggregateGuarantee(components=tuple(components), requested_epsilon=plan.epsilon,
                                   requested_delta=plan.delta, kappa=kappa, linf=linf, noise_choice=plan.noise_reason,
                                   privacy_guaranteed=generator.privacy_guaranteed and (
                                       selection_guarantee is None or selection_guarantee.is_dp))
    frame = _frame(plan, keys if listed is not None else keys.filter(arrow_from_numpy(released)), columns, guarantee,
                   kind)
    null_unit_rows, released_codes = counter.null_unit_rows, out_index[present]

    def make_report() -> AggregateReport:
        return AggregateReport.build(
            totals=totals, null_unit_rows=null_unit_rows, users_before=users_before, users_kept=users_kept,
            candidates=candidates, released_codes=released_codes, strategy=strat, clamping=clamping,
            epsilon=plan.epsilon, kappa=kappa, linf=linf, public=listed is not None, clamped_sums=clamped_sums,
            hindsight=figures, distinct_capped={n: c for n, c in extra.capped.items()
                                                if plan.metrics[n].max_values_per_unit is not None})

    return AggregateResult(frame=frame, guarantee=guarantee,
                           bounds={**{c: (g.lower, g.upper) for c, g in grids.items()},
                                   **{c: (math.nan, math.nan) for c in unbounded}}, _make_report=make_report)


def intervals_caveat(kappa: int, linf: int) -> str:
    """What the intervals cover, stated next to them (a property of the method, not of the data)."""
    return (f"Each interval holds, with at least its confidence level, the statistic of the rows kept by "
            f"contribution bounding (at most {kappa} key(s) per privacy unit and {linf} row(s) per key) with "
            "values clamped to the bounds; it does not cover what bounding and clamping removed, which the data "
            "holder's report() states (exact, not DP).")


def _frame(plan: AggregatePlan, keys: Any, columns: dict[str, npt.NDArray[Any]], guarantee: AggregateGuarantee,
           kind: FrameKind) -> Any:
    """The released table in the caller's frame type, sorted by key, the guarantee (and what the
    intervals cover) in its metadata."""
    out = keys
    for name, array in columns.items():
        out = out.append_column(name, arrow_from_numpy(np.ascontiguousarray(array)))
    if out.num_rows > 1:
        out = out.sort_by([(name, "ascending") for name in plan.by])
    metadata = {GUARANTEE_METADATA_KEY: str(guarantee).encode(),
                PRIVATE_METADATA_KEY: b"true" if guarantee.is_dp else b"false"}
    if plan.confidence_level is not None:
        metadata[INTERVALS_METADATA_KEY] = intervals_caveat(plan.kappa, plan.linf).encode()
    frame = from_arrow(out.replace_schema_metadata(metadata), kind)
    attrs = getattr(frame, "attrs", None)
    if isinstance(attrs, dict):
        attrs["dpselect_guarantee"] = str(guarantee)
        attrs["dpselect_privacy_guaranteed"] = guarantee.is_dp
        if plan.confidence_level is not None:
            attrs["dpselect_intervals"] = intervals_caveat(plan.kappa, plan.linf)
    return frame


def _warn_nothing_released(strategy: CountMechanism) -> None:
    needed = strategy.min_users_to_release if isinstance(strategy, IndependentSelection) else None
    figure = (f"at these parameters a key needs {needed:,} users (after bounding) to be released with "
              "probability 1/2" if needed else "at these parameters no key can be released")
    warnings.warn(NothingReleased(
        f"no key was released: {figure} (the selection's epsilon is {float(strategy.params.epsilon_exact):.3g}). "
        "Raise epsilon or the 'selection' weight, use coarser keys, or pass public_partitions if the keys are "
        "known in advance."), stacklevel=4)


def _warn_if_bounding_dropped_most(totals: dict[str, int], kappa: int, linf: int) -> None:
    rows, kept = totals["rows"], totals["rows_kept"]
    if rows and rows - kept > MOST_ROWS * rows:
        warnings.warn(BoundingDroppedMostRows(
            f"contribution bounding kept {kept} of {rows} rows ({kept / rows:.1%}) at max_partitions_contributed="
            f"{kappa} and max_contributions_per_partition={linf}: the statistics describe the kept rows only. "
            "These figures are exact and NOT differentially private: they are for you, the data holder; do not "
            "publish them, and do not tune the bounds on them (choose them from public knowledge or a held-out "
            "sample, docs/aggregate.md)."), stacklevel=4)


def _partition_bounds(values: npt.NDArray[Any], partitions: npt.NDArray[np.uint32], position: npt.NDArray[np.intp],
                      n_out: int, epsilon: Fraction, kappa: int, linf: int,
                      precision_bits: int, integer: bool, rng: Any, column: str
                      ) -> tuple[PartitionGrids, Wide, ColumnClamping, Component]:
    """APPROX_BOUNDS per released partition over its kept values (``values`` and ``partitions``
    are the kept rows'; ``position``: each data partition's output row, −1 if not released), then
    each partition's sums of its values snapped to its own grid."""
    where = position[partitions]
    inside = where >= 0
    values, where = values[inside], where[inside]
    found = approx_bounds_per_partition(values, where, n_out, epsilon, max_partitions_contributed=kappa,
                                        max_contributions_per_partition=linf, integer=integer, rng=rng)
    grids = PartitionGrids.from_bounds(found.lower, found.upper, found.found, precision_bits, integer)
    usable = grids.found[where]
    sums = sums_by_code(grids.units(values[usable], where[usable]), where[usable], n_out)
    x = values[usable].astype(np.float64)
    lo, hi = grids.lower[where[usable]], grids.upper[where[usable]]
    clamping = ColumnClamping((math.nan, math.nan), int(x.size), int((x < lo).sum()), int((x > hi).sum()),
                              float(np.sum(np.maximum(lo - x, 0)) + np.sum(np.maximum(x - hi, 0))))
    component = Component(f"bounds of {column!r} per partition (APPROX_BOUNDS)", found.noise.epsilon,
                          Fraction(0), str(found.guarantee))
    return grids, sums, clamping, component
