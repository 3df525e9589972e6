"""``select_partitions``: from raw rows in a DataFrame to the partitions that may be released.

Pipeline: check the columns' types from the schema → export the needed columns as Arrow memory
(:mod:`dpselect.ingest.frames`) → factorize keys and bound each user to κ partitions while counting
distinct users in C (:mod:`dpselect.ingest.rows`) → the selection strategy decides (π_opt,
Desfontaines et al., "Differentially private partition selection", PoPETs 2022, Theorems 1–2;
the k-TSGD thresholded release, Theorem 6; or any mechanism of
:mod:`dpselect.mechanisms.protocols`) → the kept keys, sorted by key, in the caller's frame type.
Every parameter is checked first, once, by :func:`dpselect.ingest.plan.plan_selection`. See
docs/rows.md and docs/privacy/contribution-bounding.md.
"""
from __future__ import annotations

from dataclasses import dataclass

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dpselect.ingest.frames import from_arrow, result_schema, to_arrow
from dpselect._threads import for_call, using
from dpselect.ingest.plan import SelectionPlan, build_strategy, check_columns, plan_selection
from dpselect.mechanisms.protocols import CountMechanism, RowMechanism
from dpselect.rng import resolve_rng
from dpselect.ingest.rows import (
    NullPrivacyUnitsDropped,
    PartitionCounts,
    RowCounter,
    arrow_from_numpy,
    import_pyarrow,
)

if TYPE_CHECKING:  # pragma: no cover
    from dpselect.core.guarantee import PrivacyGuarantee
    from dpselect.mechanisms import SelectionMechanism

__all__ = ["build_strategy", "check_columns", "release_table", "select_partitions"]

GUARANTEE_METADATA_KEY = b"dpselect.guarantee"
PRIVATE_METADATA_KEY = b"dpselect.privacy_guaranteed"


def release_rows(sets: Any, keys_of: Any, strat: RowMechanism, *, rng: object = None, schema: Any = None) -> Any:
    """Apply a row mechanism (weighted selection, DP-SIPS, policies) to the users' sets; the
    kept keys, sorted by key, as a pyarrow Table whose schema metadata carries the guarantee."""
    keep = strat.select_sets(sets, rng=rng)
    table = keys_of(keep)
    by = table.schema.names
    if table.num_rows > 1:
        table = table.sort_by([(name, "ascending") for name in by])
    if schema is not None:
        table = table.cast(schema)
    guarantee = strat.guarantee.enforced()
    if not resolve_rng(rng).privacy_guaranteed:
        guarantee = guarantee.under_test_rng()
    metadata = {
        GUARANTEE_METADATA_KEY: str(guarantee).encode(),
        PRIVATE_METADATA_KEY: b"true" if guarantee.is_dp else b"false",
    }
    return table.replace_schema_metadata(metadata)


def release_table(
    partitions: PartitionCounts,
    strat: CountMechanism,
    *,
    counts: bool,
    count_column: str = "noisy_count",
    rng: object = None,
    schema: Any = None,
    public: np.ndarray | None = None,
    ci_half_width: int | None = None,
    keep_mask: bool = False,
    chosen: Any = None,
) -> Any:
    """Apply the strategy to exact bounded counts (``public`` marks public partitions, whose
    count may be 0, for the public and mixed releases); the kept keys (plus noisy counts if asked),
    sorted by key, as a pyarrow Table whose schema metadata carries the guarantee (with κ
    enforced: the rows were bounded by dpselect). ``schema``, if given, is the result's schema
    decided before the data was read; the table is cast to it, so the output's types never
    depend on the data. ``chosen``: κ was chosen privately (:mod:`dpselect.ingest.auto_bounds`),
    and the statement composes that step with the selection.

    Sorting matters for privacy: row order by first appearance would reveal more than the
    released set (e.g. which partition the first user of the file belongs to)."""
    private = partitions.counts if public is None else partitions.counts[~public]
    if np.any(private <= 0):  # rows.py drops them; a zero must never reach a private selection
        raise AssertionError("a partition with no remaining user reached the selection step")
    result = strat.apply(partitions.counts, rng=rng, public=public)
    keep = np.asarray(result.keep, dtype=bool)
    table = partitions.keys.filter(arrow_from_numpy(np.asarray(keep, dtype=np.bool_)))
    if counts:
        if result.noisy_counts is None:
            raise ValueError("the strategy returned no noisy counts although it releases counts")
        noisy = np.asarray(result.noisy_counts, dtype=np.int64)[keep]
        table = table.append_column(count_column, arrow_from_numpy(np.asarray(noisy, dtype=np.int64)))
        if ci_half_width is not None:
            table = table.append_column(f"{count_column}_ci_low", arrow_from_numpy(noisy - ci_half_width))
            table = table.append_column(f"{count_column}_ci_high", arrow_from_numpy(noisy + ci_half_width))
    by = partitions.keys.schema.names
    if table.num_rows > 1:
        table = table.sort_by([(name, "ascending") for name in by])
    if schema is not None:
        table = table.cast(schema)
    # The rows were bounded here, so κ is enforced, not assumed of the caller.
    guarantee = result.guarantee.enforced()
    if chosen is not None:  # κ was chosen privately: the statement composes both steps
        from dpselect.ingest.auto_bounds import with_chosen_kappa

        guarantee = with_chosen_kappa(guarantee, chosen)
    metadata = {
        GUARANTEE_METADATA_KEY: str(guarantee).encode(),
        PRIVATE_METADATA_KEY: b"true" if _is_private(result.privacy_guaranteed, guarantee) else b"false",
    }
    table = table.replace_schema_metadata(metadata)
    return ReleasedTable(table, keep) if keep_mask else table


@dataclass(frozen=True)
class ReleasedTable:
    """A released table and which of the input partitions it kept (for the data holder's report)."""

    table: Any
    keep_mask: np.ndarray


def _is_private(privacy_guaranteed: bool, guarantee: PrivacyGuarantee) -> bool:
    """True only for dpselect's own certified mechanism run on the secure CSPRNG."""
    return bool(privacy_guaranteed) and guarantee.is_dp


def select_partitions(
    data: Any,
    *,
    privacy_unit: str,
    by: str | Sequence[str],
    epsilon: float | None = None,
    delta: float | None = None,
    max_partitions_contributed: int | None = None,
    strategy: str | SelectionMechanism | None = None,
    counts: bool = False,
    count_column: str = "noisy_count",
    null_privacy_units: str = "error",
    allow_no_release: bool = False,
    public_partitions: Any = None,
    confidence_level: float | None = None,
    budget: Any = None,
    report: bool = False,
    rng: object = None,
    threads: int | None = None,
    **options: Any,
) -> Any:
    """The partitions (distinct values of ``by``) that can be released under (ε, δ)-DP, from
    raw rows where each row is one contribution of the user in column ``privacy_unit``.

    Guarantee: the output (kept keys, and noisy counts when ``counts=True``) is
    (``epsilon``, ``delta``)-differentially private for neighbouring datasets that add or remove
    all rows of one privacy unit, whatever the number of rows or partitions that user has:
    each user is first bounded to ``max_partitions_contributed`` (κ) distinct partitions, chosen
    uniformly at random with the package CSPRNG, and each partition's decision runs at
    (ε/κ, 1 − (1 − δ)^{1/κ}) (docs/privacy/contribution-bounding.md). ``strategy="release"``
    (default) is the k-TSGD thresholded release (Desfontaines, Voss, Gipson, Mandayam,
    "Differentially private partition selection", PoPETs 2022, Theorem 6): keys whose noisy
    count exceeds the release threshold, with that noisy count if ``counts=True`` (noisy counts
    near the threshold are biased upward: only partitions whose noise pushed them over it are
    shown; docs/privacy/tsgd-release.md). ``strategy="pi_opt"`` keeps each partition with the
    optimal probability π_opt(n) (same paper, Theorems 1–2; docs/privacy/pi-opt.md) and
    releases no counts. Any mechanism object :func:`dpselect.make_strategy` returns (a count or a
    row mechanism) is accepted, and so is a ``dpselect.mechanisms.SelectionStrategy`` it wraps.
    The statement is in the result's metadata (pandas ``attrs``, Arrow schema metadata
    ``dpselect.guarantee``), with κ described as enforced.

    Parameters
    ----------
    data : pandas.DataFrame, polars.DataFrame / LazyFrame, pyarrow.Table / RecordBatch, or any
        object exporting an Arrow stream. Only ``privacy_unit`` and ``by`` are read. Their
        types are the caller's (see docs/rows.md): declare them rather than let a reader infer
        them from the values.
    privacy_unit : the column identifying the user: integers, strings or bytes (a float column
        is refused: 0.0 and -0.0 must not decide whether two people are one).
    by : a partition column, or several (GROUP BY a, b). Keys of any scalar Arrow type that
        compares exactly; a null is a key like any other value (all nulls form one partition),
        and so is NaN. Refused before any work: nested, extension, interval and float16
        columns, Polars Object/Int128, pandas Period/Interval and mixed-type object columns.
    epsilon, delta : the total privacy budget of the release (required with a strategy name;
        omitted with a strategy object, which carries its own).
    max_partitions_contributed : κ, the most partitions a user may influence (default 1).
    strategy : "release" (default; "public" with ``public_partitions``), "pi_opt", "laplace",
        "gaussian", "auto" (:func:`dpselect.recommend`'s choice with ``rows=True``, from ε, δ
        and κ alone, never the data: pi_opt or "release" at κ = 1, cumulative DP-SIPS from κ = 2 where
        Gaussian thresholding's midpoint is within 1.5 times pi_opt's, a count release with
        ``counts=True``), "public", "mixed"; the row
        mechanisms "weighted_gaussian", "weighted_laplace", "dp_sips", "cumulative_sips", "policy_gaussian",
        "policy_laplace" (each user's set is weighted: docs/privacy/weighted.md); or a
        ``SelectionStrategy`` object (``dpselect.make_strategy(...)``).
    public_partitions : keys known without looking at the data (a table or frame with the
        ``by`` columns, or a list of keys): with ``strategy="public"`` exactly these are
        released, each with its noisy count, whether or not they occur in the data; with
        ``"mixed"`` they are released above ``public_threshold`` and the data's other keys by
        the thresholded release (docs/privacy/public-partitions.md).
    options : mechanism options passed to :func:`dpselect.make_strategy`: ``neighbours``
        ("replace" for bounded DP), ``pre_threshold``, ``noise_share``, ``public_threshold``.
    counts : also return the noisy counts (column ``count_column``, which must differ from
        every input column used).
    null_privacy_units : "error" (default): rows whose privacy unit is null make the call fail
        (ValueError giving their number) before anything is released — a null is not one
        person. "drop": leave those rows out; their number is reported in a
        ``dpselect.ingest.rows.NullPrivacyUnitsDropped`` warning (exact, NOT differentially private:
        for the data holder, never to publish).
    allow_no_release : with ``delta=0`` no key can be released (Theorem 2 of the paper); pass
        True to get an empty result on purpose instead of an error.
    confidence_level : with ``counts=True`` and a strategy that draws TSGD noise ("release",
        "public", "mixed"), adds ``<count_column>_ci_low`` / ``_ci_high``: an interval that holds
        the bounded count with at least this probability, exact on the certified noise table
        (docs/privacy/confidence-intervals.md); it ignores the threshold (a released count is
        one whose noise pushed it up) and the rows bounding removed.
    budget : a :class:`dpselect.Budget` to charge (ε, δ) to before any work (a budget stated in
        ρ, :meth:`dpselect.Budget.zcdp`: ε²/2 and δ); the call fails, charging nothing, if that
        would overspend.
    report : also return the data holder's report (exact, NOT DP; never publish it):
        ``(result, report)``, a :class:`dpselect.aggregation.report.SelectionReport`.
    rng : None for the secure CSPRNG (the only private choice); tests may pass
        ``dpselect.testing.InsecureDeterministicRNG``.
    threads : how many threads the work may use (an int >= 1). Default: the environment variable
        ``DPSELECT_MAX_THREADS`` if set, else 1 inside a Spark task, else every core the process
        may use (its CPU affinity, capped by its cgroup CPU quota). The result does not depend on
        it: the work is split into shards fixed by the input, each with its own CSPRNG stream
        (docs/rows.md, "Threads").

    Returns the kept keys (one row per released partition, sorted by key) in the type of
    ``data``, with the input's column types (64-bit keys come back bit for bit) and a schema
    that depends only on the input's schema. Partitions whose users were all bounded away
    (count 0 after bounding) are never output.

    Memory: the Arrow export of the columns (zero-copy when possible), one 4-byte code per row
    and column while hashing, and the C pair set (11.4–22.9 bytes per distinct (user,
    partition) pair); with integer privacy units, instead of the pair set and the user codes,
    12 bytes a row while the rows are grouped by user; see docs/rows.md.
    """
    plan = plan_selection(privacy_unit=privacy_unit, by=by, epsilon=epsilon, delta=delta,
                          max_partitions_contributed=max_partitions_contributed, strategy=strategy, counts=counts,
                          count_column=count_column, null_privacy_units=null_privacy_units,
                          allow_no_release=allow_no_release, public_partitions=public_partitions is not None,
                          confidence_level=confidence_level, report=report, **options)
    n_threads = for_call(threads)  # a bad value fails before any work
    with using(n_threads):
        return _select(plan, data, privacy_unit, public_partitions, budget, rng)


def _select(plan: SelectionPlan, data: Any, privacy_unit: str, public_partitions: Any, budget: Any,
            rng: object) -> Any:
    """The work of :func:`select_partitions`, once every parameter is checked."""
    counts, count_column, null_privacy_units = plan.counts, plan.count_column or "noisy_count", plan.null_privacy_units
    report = plan.report
    names, strat, half_width = plan.by, plan.strategy, plan.ci_half_width
    rng = resolve_rng(rng)  # a wrong generator fails before any work
    table, kind = to_arrow(data, privacy_unit, names)
    schema = result_schema(table.schema, names, count_column if counts else None)
    if half_width is not None:
        pa = import_pyarrow()
        schema = schema.append(pa.field(f"{count_column}_ci_low", pa.int64()))
        schema = schema.append(pa.field(f"{count_column}_ci_high", pa.int64()))
    if budget is not None:
        plan.charge(budget, f"select_partitions(by={names})")
    from_arrow(schema.empty_table(), kind)  # a result that cannot be converted back fails now, not after the work
    counter = RowCounter(privacy_unit, names, expected_rows=table.num_rows,
                         null_privacy_units=null_privacy_units)  # type: ignore[arg-type]
    counter.feed(table, final=True)  # the whole input: integer users are grouped in memory
    del table  # the exported columns are no longer needed: lower the peak
    pairs = counter.n_pairs
    chosen = None
    if plan.auto_kappa is not None:  # κ chosen privately (docs/privacy/auto-bounds.md)
        from dpselect.ingest.auto_bounds import select_with_auto_kappa

        rng.announce()
        partitions, strat, half_width, chosen = select_with_auto_kappa(counter, plan.auto_kappa, rng)
        warn_dropped(counter, privacy_unit)
    elif isinstance(strat, RowMechanism):  # it needs every user's set, not counts
        sets, keys_of = counter.user_sets()
        warn_dropped(counter, privacy_unit)
        released = release_rows(sets, keys_of, strat, rng=rng, schema=schema)
        out = from_arrow(released, kind)
        _attach_guarantee(out, released)
        return out
    else:
        partitions = counter.finish(strat.max_partitions_contributed, strat.count_cap, rng)
        warn_dropped(counter, privacy_unit)
    public = None
    if public_partitions is not None:
        from dpselect.ingest.public_keys import with_public_partitions

        partitions, public = with_public_partitions(partitions, public_partitions, only_public=plan.only_public)
    released = release_table(partitions, strat, counts=counts, count_column=count_column, rng=rng, schema=schema,
                             public=public, ci_half_width=half_width, keep_mask=report, chosen=chosen)
    out = from_arrow(released.table if report else released, kind)
    _attach_guarantee(out, released.table if report else released)
    if not report:
        return out
    from dpselect.aggregation.report import SelectionReport

    private = np.ones(partitions.counts.size, dtype=bool) if public is None else ~public
    return out, SelectionReport.build(rows=counter.rows - counter.null_unit_rows, null_unit_rows=counter.null_unit_rows,
                                      pairs=pairs, users=counter.n_users, counts=partitions.counts[private],
                                      released=released.keep_mask[private], strategy=strat, kappa=strat.max_partitions_contributed)


def warn_dropped(counter: RowCounter, privacy_unit: str) -> None:
    if counter.null_unit_rows:
        warnings.warn(NullPrivacyUnitsDropped(
            f"dropped {counter.null_unit_rows} row(s) with a null privacy unit in column {privacy_unit!r} "
            "(null_privacy_units='drop'). This count is exact and NOT differentially private: it is "
            "for you, the data holder; do not publish it."), stacklevel=3)


def _attach_guarantee(out: Any, released: Any) -> None:
    """pandas frames carry the statement in ``attrs`` (Arrow tables already have it)."""
    attrs = getattr(out, "attrs", None)
    if isinstance(attrs, dict):
        metadata = released.schema.metadata or {}
        attrs["dpselect_guarantee"] = metadata.get(GUARANTEE_METADATA_KEY, b"").decode()
        attrs["dpselect_privacy_guaranteed"] = metadata.get(PRIVATE_METADATA_KEY) == b"true"
