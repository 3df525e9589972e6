"""``dpselect.spark.select_partitions``: :func:`dpselect.select_partitions` run by Spark."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from dpselect.ingest.auto_bounds import AutoBounds, choose_kappa_from_histogram, with_chosen_kappa
from dpselect.ingest.plan import AutoKappa, plan_selection
from dpselect.mechanisms.protocols import CountMechanism
from dpselect.rng import resolve_rng
from dpselect.spark._auto_bounds import exact_histograms, ranked_pairs
from dpselect.spark._bounding import ReleaseKey, keep_first, with_ranks
from dpselect.spark._common import (
    FIRSTS,
    KEEP,
    PAIRS,
    RANK,
    ROWS,
    UNIT,
    USERS,
    annotate,
    check_frame,
    check_names,
    check_no_speculation,
    check_strategy,
    column,
    columns,
    drop_null_units,
    executor_rng,
    key_names,
    materialise,
    rng_spec,
    sorted_by_key,
    spark,
)
from dpselect.spark._public import PUBLIC, join_public, public_keys
from dpselect.spark._report import selection_report

__all__ = ["select_partitions"]


def _select_per_key(data: Any, privacy_unit: str, names: list[str], kappa: int, key: ReleaseKey,
                    null_unit_check: bool, report: bool = False, unit_label: str | None = None) -> Any:
    """The lazy plan of the bounded distinct-user count per key (column ``USERS``): distinct
    (user, key) pairs, a pseudo-random rank per pair (keyed by ``key``: the same on any re-run),
    the κ smallest per user. ``data``: the user and key columns, null units already dropped or
    (``null_unit_check``) refused here.

    With ``report``, every key of the data, and for the data holder's report ``PAIRS`` (its
    users before bounding), ``FIRSTS`` and ``ROWS`` (summed over keys: the users and the rows);
    ``USERS`` may then be 0."""
    F = spark().functions
    pair = [privacy_unit, *names]
    # One shuffle by user serves the deduplication and the bounding window (hash partitioning by
    # user clusters every (user, key) too); the per-key count is the second and last shuffle.
    by_user = data.repartition(column(privacy_unit))

    def ranked(pairs: Any) -> Any:
        return with_ranks(pairs, key.for_step(b"pairs"), pair, null_unit_check, privacy_unit, unit_label=unit_label)

    if not report:
        bounded = keep_first(ranked(by_user.dropDuplicates(pair)), [privacy_unit], names, kappa)
        return bounded.groupBy(*columns(names)).agg(F.count(F.lit(1)).alias(USERS))
    pairs = by_user.groupBy(*columns(pair)).agg(F.count(F.lit(1)).alias(ROWS))
    ranks = keep_first(ranked(pairs), [privacy_unit], names, kappa, rank=RANK)
    return ranks.groupBy(*columns(names)).agg(F.count_if(F.col(RANK) <= kappa).alias(USERS),
                                              F.count(F.lit(1)).alias(PAIRS),
                                              F.count_if(F.col(RANK) == 1).alias(FIRSTS), F.sum(ROWS).alias(ROWS))


def select_partitions(
    df: Any,
    *,
    privacy_unit: str,
    by: str | Sequence[str],
    epsilon: float | None = None,
    delta: float | None = None,
    max_partitions_contributed: int | str | None = None,
    strategy: str | CountMechanism | None = None,
    counts: bool = False,
    count_column: str = "noisy_count",
    null_privacy_units: str = "error",
    allow_no_release: bool = False,
    public_partitions: Any = None,
    confidence_level: float | None = None,
    budget: Any = None,
    report: bool = False,
    rng: object = None,
    **options: Any,
) -> Any:
    """The partitions (distinct values of ``by``) of a Spark DataFrame that can be released under
    (``epsilon``, ``delta``)-DP: :func:`dpselect.select_partitions` run by Spark.

    Guarantee (the same statement, docs/privacy/contribution-bounding.md): the output (kept keys,
    and noisy counts with ``counts=True``) is (ε, δ)-differentially private for neighbouring
    datasets that add or remove all rows of one privacy unit. Each user's distinct keys are
    bounded to κ = ``max_partitions_contributed``, a uniform subset (the κ smallest of 64-bit
    pseudo-random ranks, a keyed PRF of each (user, key) pair under a secret drawn per release
    from the package CSPRNG, so that a task Spark re-runs ranks alike), distinct users are
    counted per key, and the strategy decides each key at
    (ε/κ, 1 − (1 − δ)^{1/κ}) in the C kernel. ``strategy``: "release" (default; the k-TSGD
    thresholded release, with noisy counts if asked), "pi_opt", "laplace", "gaussian", and with
    ``public_partitions`` "public" (its default) or "mixed"; ``options`` go to
    :func:`dpselect.make_strategy` (``pre_threshold``, ``neighbours``, ``public_threshold``...);
    or one of those mechanisms built by :func:`dpselect.make_strategy`, which carries its own
    ``epsilon``, ``delta`` and κ (then leave them out; the executors build it again from its
    parameters). ``max_partitions_contributed="auto"`` (with a strategy by name): κ chosen
    privately with a tenth of ε, as on one machine (docs/privacy/auto-bounds.md, "On Spark"):
    Spark counts each user's distinct keys, the driver adds the single machine's noise to their
    small histogram, and the strategy is built at the κ read from it. Every parameter is checked
    first by :func:`dpselect.ingest.plan.plan_selection`, as on one machine. The row mechanisms, "auto"
    and strategies dpselect did not build run on one machine only (NotImplementedError).

    ``public_partitions`` (docs/privacy/public-partitions.md): keys known without looking at the
    data, as a Spark DataFrame with the ``by`` columns (the data's types), a list of keys, or a
    pandas, Polars or Arrow table. With "public" exactly these keys are released, each with its
    TSGD-noised count (from 0 for a key absent from the data): nothing is selected; with "mixed"
    they are released above ``public_threshold`` and the data's other keys by the thresholded
    release.

    ``confidence_level`` (with ``counts=True`` and a strategy that draws TSGD noise) adds
    ``<count_column>_ci_low`` / ``_ci_high``, exact on the certified noise table
    (docs/privacy/confidence-intervals.md). ``budget``: a :class:`dpselect.Budget` charged
    (ε, δ) after the arguments and the DataFrame's schema are checked and before any Spark job
    (nothing is charged if the charge would overspend), as :func:`dpselect.select_partitions`
    does. ``report=True`` returns ``(frame, report)``, the data holder's
    :class:`~dpselect.aggregation.report.SelectionReport` (exact, NOT DP; never publish it),
    built on the driver from per-key aggregates of the same draw (a count of keys per bounded
    user count, and four totals), with a count-based strategy.

    Returns a Spark DataFrame of the released keys (with the input's key types), plus
    ``count_column`` (int64) with ``counts=True`` (and the interval's int64 columns), sorted by
    key and already computed (a local checkpoint: the noise is drawn once, whatever the actions
    run on it later). The statement is in every column's metadata (:func:`guarantee_of`).
    ``rng``: None (the secure CSPRNG, the only private choice) or a
    :class:`dpselect.testing.InsecureDeterministicRNG` for tests.
    """
    sql = spark()
    types = sql.types
    if strategy is not None:
        strategy = check_strategy(strategy)  # what runs on one machine only is refused first
    plan = plan_selection(privacy_unit=privacy_unit, by=by, epsilon=epsilon, delta=delta,
                          max_partitions_contributed=max_partitions_contributed, strategy=strategy, counts=counts,
                          count_column=count_column, null_privacy_units=null_privacy_units,
                          allow_no_release=allow_no_release, public_partitions=public_partitions is not None,
                          confidence_level=confidence_level, report=report, **options)
    names, strat, half_width = plan.by, plan.strategy, plan.ci_half_width
    assert isinstance(strat, CountMechanism)  # check_strategy lets no row mechanism through
    generator = resolve_rng(rng)
    check_frame(df, privacy_unit, names)
    check_names(df, [privacy_unit, *names], plan.output_columns)
    check_no_speculation(df)
    key_fields = sorted((f for f in df.schema.fields if f.name in names), key=lambda f: names.index(f.name))
    public = None if public_partitions is None else public_keys(df, public_partitions, key_fields)
    # Every step reads the caller's columns under dpselect's own names; the result gets theirs back.
    keys = key_names(len(names))
    if public is not None:
        public = public.select(*[column(n).alias(k) for n, k in zip(names, keys)])
    if budget is not None:
        plan.charge(budget, f"spark.select_partitions(by={names})")
    spec = rng_spec(generator)
    key = ReleaseKey(generator)  # the test generator warns here, once for the whole call

    renamed = df.select(column(privacy_unit).alias(UNIT), *[column(n).alias(k) for n, k in zip(names, keys)])
    data, dropped = drop_null_units(renamed, UNIT, null_privacy_units, privacy_unit)
    chosen = None
    if plan.auto_kappa is not None:  # κ chosen privately (docs/privacy/auto-bounds.md, "On Spark")
        strat, half_width, chosen = _choose_kappa(data, keys, plan.auto_kappa, key, null_privacy_units == "error",
                                                  privacy_unit, generator)
    kappa = strat.max_partitions_contributed
    per_key = _select_per_key(data, UNIT, keys, kappa, key, null_privacy_units == "error", report, privacy_unit)
    stats = [USERS, PAIRS, FIRSTS, ROWS] if report else [USERS]
    if public is not None:  # with a report, every key of the data too (its totals count them)
        per_key = join_public(per_key, public, keys, stats, only_public=plan.only_public and not report)

    out_fields = [types.StructField(k, f.dataType, f.nullable) for k, f in zip(keys, key_fields)]
    if counts:
        out_fields.append(types.StructField(count_column, types.LongType(), False))
    if half_width is not None:
        out_fields.append(types.StructField(f"{count_column}_ci_low", types.LongType(), False))
        out_fields.append(types.StructField(f"{count_column}_ci_high", types.LongType(), False))
    schema = types.StructType(out_fields)
    if report:
        extra = [types.StructField(c, types.BooleanType(), False) for c in (KEEP, PUBLIC)]
        extra += [types.StructField(c, types.LongType(), False) for c in stats]
        full = types.StructType([*out_fields, *extra])
        decide = _Decide(strat, spec, full.names, len(names), counts, half_width, public is not None, report)
        decided = materialise(per_key.mapInArrow(decide, full))
        released = decided.filter(decided[KEEP]).select(*columns(schema.names))
    else:
        decide = _Decide(strat, spec, schema.names, len(names), counts, half_width, public is not None, report)
        released = materialise(per_key.mapInArrow(decide, schema))
    guarantee = strat.guarantee.enforced()
    if chosen is not None:  # the statement composes the choice of κ with the selection, as on one machine
        guarantee = with_chosen_kappa(guarantee, chosen)
    if not generator.privacy_guaranteed:
        guarantee = guarantee.under_test_rng()
    private = generator.privacy_guaranteed and guarantee.is_dp
    out = annotate(sorted_by_key(released, keys), dict(zip(keys, names)), str(guarantee), private)
    if not report:
        return out
    return out, selection_report(decided, dropped, strat, kappa)


def _choose_kappa(data: Any, keys: list[str], auto: AutoKappa, key: ReleaseKey, null_unit_check: bool,
                  unit_label: str, generator: Any) -> tuple[CountMechanism, int | None, AutoBounds]:
    """κ chosen privately for the selection, as on one machine (``select_with_auto_kappa``): the
    exact histogram of the c_u, counted by Spark, gets its noise on the driver, and the strategy
    is built again at the κ read from it: (strategy, its counts' half-width, what was chosen)."""
    pairs = ranked_pairs(data, UNIT, keys, key, null_unit_check, unit_label)
    exact, _ = exact_histograms(pairs, auto.cap, None)
    assert exact is not None
    found = choose_kappa_from_histogram(exact, epsilon=auto.epsilon, cap=auto.cap, rng=generator,
                                        quantile=auto.quantile)
    assert found.kappa is not None
    strat, half_width = auto.build(found.kappa)
    assert isinstance(strat, CountMechanism)  # AutoKappa builds count-based strategies only
    return strat, half_width, found


class _Decide:
    """The per-key step, run by ``mapInArrow`` on the executors over batches of per-key counts
    (the ``by`` columns, ``USERS``, then the other statistics, then ``PUBLIC`` with public
    partitions): the strategy decides each candidate key in the C kernel (a key of the data
    with a user left after bounding; with public partitions, the listed keys, and for "mixed"
    the data's too). Each key's decision depends on its own count and fresh randomness only, so
    batch by batch is the same mechanism as all keys at once. Out: the released keys (and noisy
    counts); with ``report``, every key with ``KEEP``, ``PUBLIC`` and its statistics."""

    def __init__(self, strategy: CountMechanism, spec: tuple[bytes, int] | None, out: list[str], n_keys: int,
                 counts: bool, half_width: int | None, public: bool, report: bool) -> None:
        # Pickled for the executors, the strategy is built again there from its parameters.
        self.strategy, self.spec, self.out, self.n_keys = strategy, spec, out, n_keys
        self.counts, self.half_width, self.public, self.report = counts, half_width, public, report

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        strategy = self.strategy
        rng = executor_rng(self.spec, b"select")
        n = self.n_keys
        for batch in batches:
            users = batch.column(n).to_numpy(zero_copy_only=False).astype(np.int64)
            listed = (batch.column(batch.num_columns - 1).to_numpy(zero_copy_only=False).astype(bool) if self.public
                      else np.zeros(users.size, dtype=bool))
            candidate = listed if strategy.public_partitions == "only" else listed | (users > 0)
            # With public partitions, "mixed" releases the public keys above public_threshold, the others above k.
            result = strategy.apply(users[candidate], rng=rng, public=listed[candidate] if self.public else None)
            keep = np.zeros(users.size, dtype=bool)
            keep[candidate] = np.asarray(result.keep, dtype=bool)
            noisy = np.zeros(users.size, dtype=np.int64)
            if self.counts:
                noisy[candidate] = np.asarray(result.noisy_counts, dtype=np.int64)
            rows = slice(None) if self.report else keep  # the report keeps every key, with KEEP
            columns = [batch.column(i).filter(pa.array(keep)) if not self.report else batch.column(i)
                       for i in range(n)]
            if self.counts:
                columns.append(pa.array(noisy[rows], pa.int64()))
                if self.half_width is not None:
                    columns += [pa.array(noisy[rows] - self.half_width, pa.int64()),
                                pa.array(noisy[rows] + self.half_width, pa.int64())]
            if self.report:
                columns += [pa.array(keep), pa.array(listed)]
                columns += [batch.column(i).cast(pa.int64()) for i in range(n, batch.num_columns - self.public)]
            yield pa.RecordBatch.from_arrays(columns, names=self.out)
