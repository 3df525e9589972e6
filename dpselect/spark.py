"""dpselect on Apache Spark: the same partition selection and grouped release, run by Spark
(tutorial and design: docs/spark.md).

:func:`select_partitions` and :func:`aggregate` take a Spark DataFrame and return one, with the
parameters, semantics and privacy statement of :func:`dpselect.select_partitions` and
:func:`dpselect.aggregate` (docs/privacy/contribution-bounding.md, docs/privacy/aggregate.md).

What runs where:

* in Spark SQL (the JVM): deduplicating (user, key) pairs, the contribution bounding (a window
  ``row_number() over (partition by user order by r, key) <= κ``, r a 64-bit uniform drawn per
  pair; likewise ``<= L∞`` over a user's rows in one key), and every per-key aggregate;
* in vectorised Arrow UDFs (``mapInArrow``) on the executors: drawing r from the package CSPRNG,
  converting value columns to grid units (:meth:`dpselect.aggregation.grid.Grid.to_units`), and,
  on the per-key aggregates only, the selection (``strategy.apply``) and the metrics' noise
  (:func:`dpselect.aggregation.metric_noise.noisy_metric`) in the C kernel;
* on the driver: argument checks, the budget split and the guarantee. No row reaches it.

The result is materialised once (``localCheckpoint(eager=True)``) before it is returned: a lazy
plan would draw new noise on every action, and two draws of a release are two releases. The
checkpointed blocks are never recomputed (a lost block fails the query instead).

PySpark is an optional dependency (``pip install "dpselect[spark]"``), imported on first use.
"""
from __future__ import annotations

import hashlib
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpselect._optional import require
from dpselect.aggregation.guarantee import AggregateGuarantee, Component
from dpselect.pipeline import GUARANTEE_METADATA_KEY, PRIVATE_METADATA_KEY, build_strategy, check_columns
from dpselect.rng import SecureRNG, resolve_rng
from dpselect.rows import NULL_PRIVACY_UNITS, NullPrivacyUnitsDropped

__all__ = ["SparkAggregateResult", "aggregate", "guarantee_of", "select_partitions"]

# The count-based selections (the row mechanisms need every user's whole set in one place, and
# public partitions are not supported on Spark yet).
SPARK_STRATEGIES = ("release", "pi_opt", "laplace", "gaussian")

# Internal column names (a user's column may not use them).
_R = "__dpselect_r"
_N = "__dpselect_n"
_USERS = "__dpselect_users"
_ROWS = "__dpselect_rows"
_SUM = "__dpselect_sum_"
_ERROR_MARK = "dpselect refused the data: "

_GUARANTEE = GUARANTEE_METADATA_KEY.decode()
_PRIVATE = PRIVATE_METADATA_KEY.decode()


def _spark() -> Any:
    return require("pyspark.sql", feature="dpselect.spark", extra="spark")


# ---------------------------------------------------------------- randomness on the executors

def _rng_spec(generator: SecureRNG) -> tuple[bytes, int] | None:
    state = generator._test_state
    return None if state is None else (bytes(state.seed), int(state.stream))


def _executor_rng(spec: tuple[bytes, int] | None, step: bytes) -> SecureRNG:
    """The generator of one Spark partition of one step. Secure: the executor's own CSPRNG state
    (per thread, keyed from the OS, re-keyed after fork, so forked Python workers never share a
    stream). Test: a ChaCha20 stream derived from the seed, the step and the partition id, so
    the result is deterministic for a fixed partitioning (and batch size) only."""
    if spec is None:
        return resolve_rng(None)
    from pyspark import TaskContext

    from dpselect.testing import InsecureDeterministicRNG

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    key, stream = spec
    seed = hashlib.sha256(b"dpselect spark %s %d\x00" % (step, partition) + key).digest()

    class _ExecutorTestRNG(InsecureDeterministicRNG):
        """The driver warned once for the whole call; the executors' logs stay readable."""

        def _announce(self) -> None:
            self._uses += 1

    return _ExecutorTestRNG(seed, stream)


def _random_column(rng: SecureRNG, n: int) -> np.ndarray:
    """n independent uniform 64-bit values (as int64: Spark orders signed longs)."""
    return np.frombuffer(rng.random_bytes(8 * n), dtype=np.int64) if n else np.zeros(0, np.int64)


_STRATEGIES: dict[tuple[Any, ...], Any] = {}


def _executor_strategy(args: tuple[Any, ...]) -> Any:
    """The strategy rebuilt on the executor (its kernel tables do not pickle), once per worker."""
    strat = _STRATEGIES.get(args)
    if strat is None:
        name, epsilon, delta, kappa, counts, allow, options = args
        strat = _STRATEGIES[args] = build_strategy(name, epsilon, delta, kappa, counts, allow, **dict(options))
    return strat


# ---------------------------------------------------------------- checks and plumbing

def _check_frame(df: Any, privacy_unit: str, names: list[str], values: Sequence[str] = ()) -> None:
    sql = _spark()
    if not isinstance(df, sql.DataFrame):
        raise TypeError(f"dpselect.spark needs a pyspark.sql.DataFrame, got {type(df).__name__}")
    types = sql.types
    fields = {f.name: f.dataType for f in df.schema.fields}
    for column in [privacy_unit, *names, *values]:
        if column not in fields:
            raise ValueError(f"column {column!r} is not in the DataFrame (columns: {list(fields)})")
        if column.startswith("__dpselect_"):
            raise ValueError(f"column names starting with '__dpselect_' are reserved, got {column!r}")
    unit = fields[privacy_unit]
    if isinstance(unit, (types.FloatType, types.DoubleType)):
        raise TypeError(f"privacy_unit column {privacy_unit!r} is {unit.simpleString()}: a float does not identify "
                        "a person exactly (0.0 and -0.0); cast it to an integer or a string")
    if not isinstance(unit, (types.IntegralType, types.StringType, types.BinaryType)):
        raise TypeError(f"privacy_unit column {privacy_unit!r} must hold integers, strings or bytes, got "
                        f"{unit.simpleString()}")
    for column in names:
        if isinstance(fields[column], (types.ArrayType, types.MapType, types.StructType)):
            raise TypeError(f"partition column {column!r} is {fields[column].simpleString()}: nested keys are "
                            "refused, as in dpselect.select_partitions")
    for column in values:
        typ = fields[column]
        if not isinstance(typ, (types.IntegralType, types.FloatType, types.DoubleType)):
            raise TypeError(f"value column {column!r} must hold integers or floats, got {typ.simpleString()}: "
                            "cast it first")


def _drop_null_units(df: Any, privacy_unit: str, mode: str) -> Any:
    """mode "drop": leave out rows with a null privacy unit, with the data holder's warning
    (one counting pass). Mode "error" is checked on the executors, in the first pass."""
    if mode != "drop":
        return df
    col = _spark().functions.col(privacy_unit)
    dropped = df.filter(col.isNull()).count()
    if dropped:
        warnings.warn(NullPrivacyUnitsDropped(
            f"dropped {dropped} row(s) with a null privacy unit in column {privacy_unit!r} "
            "(null_privacy_units='drop'). This count is exact and NOT differentially private: it is "
            "for you, the data holder; do not publish it."), stacklevel=3)
    return df.filter(col.isNotNull())


def _with_random(df: Any, spec: tuple[bytes, int] | None, step: bytes, null_unit_check: bool,
                 privacy_unit: str, grids: Mapping[str, Any] | None = None) -> Any:
    """df plus a column of per-row 64-bit uniforms drawn on the executors; with ``grids``, each
    value column is replaced by its clamped values in int64 grid units."""
    sql = _spark()
    types = sql.types
    grids = dict(grids or {})
    fields = []
    for f in df.schema.fields:
        fields.append(types.StructField(f.name, types.LongType(), False) if f.name in grids else f)
    schema = types.StructType([*fields, types.StructField(_R, types.LongType(), False)])
    unit_index = df.columns.index(privacy_unit)

    def draw(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        rng = _executor_rng(spec, step)
        for batch in batches:
            if null_unit_check and batch.column(unit_index).null_count:
                raise ValueError(f"{_ERROR_MARK}column {privacy_unit!r} has rows with a null privacy unit (a null "
                                 "is not one person); pass null_privacy_units='drop' to leave them out")
            columns = list(batch.columns)
            for i, name in enumerate(batch.schema.names):
                if name in grids:
                    col = columns[i]
                    if col.null_count:
                        raise ValueError(f"{_ERROR_MARK}value column {name!r} has {col.null_count} null value(s) in "
                                         "a batch: drop or fill them before aggregating")
                    try:
                        units = grids[name].to_units(col.to_numpy(zero_copy_only=False), name=f"value column {name!r}")
                    except ValueError as exc:
                        raise ValueError(f"{_ERROR_MARK}{exc}") from None
                    columns[i] = pa.array(units, pa.int64())
            columns.append(pa.array(_random_column(rng, batch.num_rows), pa.int64()))
            yield pa.RecordBatch.from_arrays(columns, names=[*batch.schema.names, _R])

    return df.mapInArrow(draw, schema)


def _keep_first(df: Any, partition_by: list[str], order_by: list[str], limit: int) -> Any:
    """Per group of ``partition_by``, the ``limit`` rows of smallest (r, ``order_by``): a uniform
    subset of min(size, limit) rows, the r being independent uniforms (ties, of probability
    2^-64 per pair, broken by ``order_by``)."""
    sql = _spark()
    F = sql.functions
    window = sql.Window.partitionBy(*partition_by).orderBy(F.col(_R), *[F.col(c) for c in order_by])
    return df.withColumn(_N, F.row_number().over(window)).filter(F.col(_N) <= limit).drop(_N, _R)


def _materialise(df: Any) -> Any:
    """Draw the release once: an eager local checkpoint (never recomputed). Errors raised by
    dpselect's checks on the executors come back as ValueError."""
    try:
        return df.localCheckpoint(eager=True)
    except Exception as exc:  # PythonException from an executor
        text = str(exc)
        at = text.find(_ERROR_MARK)
        if at < 0:
            raise
        message = text[at + len(_ERROR_MARK):].split("\n")[0]
        raise ValueError(message) from None


def _annotate(df: Any, names: list[str], guarantee: str, private: bool) -> Any:
    """The statement in the metadata of every output column (Spark frames have no attrs)."""
    metadata = {_GUARANTEE: guarantee, _PRIVATE: bool(private)}
    for column in df.columns:
        df = df.withMetadata(column, metadata)
    return df


def guarantee_of(df: Any) -> str | None:
    """The privacy statement attached to a DataFrame returned by this module (None if absent)."""
    for f in df.schema.fields:
        if _GUARANTEE in (f.metadata or {}):
            return str(f.metadata[_GUARANTEE])
    return None


def _check_strategy(strategy: object) -> str:
    if not isinstance(strategy, str) or strategy not in SPARK_STRATEGIES:
        raise ValueError(f"on Spark, strategy must be one of {', '.join(SPARK_STRATEGIES)} (a count-based selection "
                         f"given by name), got {strategy!r}")
    return strategy


# ---------------------------------------------------------------- select_partitions

def _select_per_key(df: Any, privacy_unit: str, names: list[str], kappa: int, spec: tuple[bytes, int] | None,
                    null_privacy_units: str) -> Any:
    """The lazy plan of the bounded distinct-user count per key (column ``__dpselect_users``):
    distinct (user, key) pairs, a uniform 64-bit value per pair, the κ smallest per user."""
    F = _spark().functions
    data = _drop_null_units(df.select(privacy_unit, *names), privacy_unit, null_privacy_units)
    # One shuffle by user serves the deduplication and the bounding window (hash partitioning by
    # user clusters every (user, key) too); the per-key count is the second and last shuffle.
    pairs = data.repartition(privacy_unit).dropDuplicates([privacy_unit, *names])
    drawn = _with_random(pairs, spec, b"bound", null_privacy_units == "error", privacy_unit)
    bounded = _keep_first(drawn, [privacy_unit], names, kappa)
    return bounded.groupBy(*names).agg(F.count(F.lit(1)).alias(_USERS))


def select_partitions(
    df: Any,
    *,
    privacy_unit: str,
    by: str | Sequence[str],
    epsilon: float,
    delta: float,
    max_partitions_contributed: int = 1,
    strategy: str = "release",
    counts: bool = False,
    count_column: str = "noisy_count",
    null_privacy_units: str = "error",
    allow_no_release: bool = False,
    rng: object = None,
    **options: Any,
) -> Any:
    """The partitions (distinct values of ``by``) of a Spark DataFrame that can be released under
    (``epsilon``, ``delta``)-DP: :func:`dpselect.select_partitions` run by Spark.

    Guarantee (the same statement, docs/privacy/contribution-bounding.md): the output (kept keys,
    and noisy counts with ``counts=True``) is (ε, δ)-differentially private for neighbouring
    datasets that add or remove all rows of one privacy unit. Each user's distinct keys are
    bounded to κ = ``max_partitions_contributed``, a uniform subset (the κ smallest of
    independent 64-bit uniforms drawn per (user, key) pair from the package CSPRNG on the
    executors), distinct users are counted per key, and the strategy decides each key at
    (ε/κ, 1 − (1 − δ)^{1/κ}) in the C kernel. ``strategy``: "release" (default; the k-TSGD
    thresholded release, with noisy counts if asked), "pi_opt", "laplace" or "gaussian";
    ``options`` go to :func:`dpselect.make_strategy` (``pre_threshold``, ``neighbours``...).

    Returns a Spark DataFrame of the released keys (with the input's key types), plus
    ``count_column`` (int64) with ``counts=True``, sorted by key and already computed (a local
    checkpoint: the noise is drawn once, whatever the actions run on it later). The statement is
    in every column's metadata (:func:`guarantee_of`). ``rng``: None (the secure CSPRNG, the
    only private choice) or a :class:`dpselect.testing.InsecureDeterministicRNG` for tests.
    """
    sql = _spark()
    F, types = sql.functions, sql.types
    names = check_columns(privacy_unit, by, count_column)
    if not isinstance(counts, bool):
        raise TypeError(f"counts must be a bool, got {type(counts).__name__}")
    if null_privacy_units not in NULL_PRIVACY_UNITS:
        raise ValueError(f"null_privacy_units must be 'error' or 'drop', got {null_privacy_units!r}")
    name = _check_strategy(strategy)
    strat = build_strategy(name, epsilon, delta, max_partitions_contributed, counts, allow_no_release, **options)
    kappa = strat.max_partitions_contributed
    generator = resolve_rng(rng)
    _check_frame(df, privacy_unit, names)
    args = (name, epsilon, delta, kappa, counts, allow_no_release, tuple(sorted(options.items())))
    spec = _rng_spec(generator)
    generator._announce()  # the test generator warns here, once for the whole call

    per_key = _select_per_key(df, privacy_unit, names, kappa, spec, null_privacy_units)

    key_fields = [f for f in df.schema.fields if f.name in names]
    key_fields.sort(key=lambda f: names.index(f.name))
    out_fields = list(key_fields)
    if counts:
        out_fields.append(types.StructField(count_column, types.LongType(), False))
    schema = types.StructType(out_fields)
    n_keys = len(names)

    def decide(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        strategy_ = _executor_strategy(args)
        rng_ = _executor_rng(spec, b"select")
        for batch in batches:
            users = batch.column(n_keys).to_numpy(zero_copy_only=False).astype(np.int64)
            result = strategy_.apply(users, rng=rng_)
            keep = np.asarray(result.keep, dtype=bool)
            mask = pa.array(keep, pa.bool_())
            columns = [batch.column(i).filter(mask) for i in range(n_keys)]
            if counts:
                columns.append(pa.array(np.asarray(result.noisy_counts, dtype=np.int64)[keep], pa.int64()))
            yield pa.RecordBatch.from_arrays(columns, names=schema.names)

    released = _materialise(per_key.mapInArrow(decide, schema))
    guarantee = strat.guarantee.enforced() if hasattr(strat.guarantee, "enforced") else strat.guarantee
    if not generator.privacy_guaranteed:
        guarantee = guarantee.under_test_rng()
    private = generator.privacy_guaranteed and bool(getattr(guarantee, "is_dp", True))
    # Sorting the checkpointed rows reads them back, it draws nothing again.
    return _annotate(released.orderBy(*names), names, str(guarantee), private)


# ---------------------------------------------------------------- aggregate

def _aggregate_per_key(df: Any, privacy_unit: str, names: list[str], value_columns: list[str],
                       grids: Mapping[str, Any], kappa: int, linf: int, spec: tuple[bytes, int] | None,
                       null_privacy_units: str) -> Any:
    """The lazy plan of the per-key statistics of the bounded rows: kept users
    (``__dpselect_users``), kept rows (``__dpselect_rows``) and, per value column in order, the
    sum of its clamped values in grid units (``__dpselect_sum_<i>``; null if it leaves int64).

    Rows → grid units and a uniform value per row → the L∞ smallest per (user, key) → per pair
    → a uniform value per pair → the κ smallest pairs per user → per key."""
    F = _spark().functions
    unit_cols = {c: f"{_SUM}{i}" for i, c in enumerate(value_columns)}
    rows = df.select(privacy_unit, *names, *[F.col(c).alias(unit_cols[c]) for c in value_columns])
    rows = _drop_null_units(rows, privacy_unit, null_privacy_units).repartition(privacy_unit)  # one shuffle by user
    drawn = _with_random(rows, spec, b"rows", null_privacy_units == "error", privacy_unit,
                         {unit_cols[c]: g for c, g in grids.items()})
    kept_rows = _keep_first(drawn, [privacy_unit, *names], [], linf)
    pairs = kept_rows.groupBy(privacy_unit, *names).agg(
        F.count(F.lit(1)).alias(_ROWS), *[F.sum(unit_cols[c]).alias(unit_cols[c]) for c in value_columns])
    bounded = _keep_first(_with_random(pairs, spec, b"pairs", False, privacy_unit), [privacy_unit], names, kappa)
    return bounded.groupBy(*names).agg(
        F.count(F.lit(1)).alias(_USERS), F.sum(_ROWS).alias(_ROWS),
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

    Value columns are clamped and snapped to the power-of-two grid of their ``bounds`` on the
    executors and summed as int64 grid units in Spark. On Spark every sum or mean needs its
    ``bounds`` (APPROX_BOUNDS is not run here); ``public_partitions`` is not supported.
    """
    from dpselect.aggregation.aggregate import (
        DEFAULT_PRECISION_BITS, SELECTION_STRATEGIES, _budget_amounts, _check_metrics, _float_down, _shares,
        _weights)
    from dpselect.aggregation.budget import Budget
    from dpselect.aggregation.grid import Grid
    from dpselect.aggregation.metric_noise import PartitionGrids, noisy_metric
    from dpselect.exact import as_fraction

    sql = _spark()
    F, types = sql.functions, sql.types
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
    if strategy not in SELECTION_STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(SELECTION_STRATEGIES)}, got {strategy!r}")
    eps_total, delta_total = _budget_amounts(epsilon, delta)
    shares = _shares(eps_total, delta_total, _weights(checked, [], False, weights))
    eps_sel, delta_sel = shares["selection"]
    sel_args = (strategy, _float_down(eps_sel), _float_down(delta_sel), max_partitions_contributed, False, False, ())
    strat = build_strategy(*sel_args[:6])
    _check_frame(df, privacy_unit, names, [c for c in value_columns if c not in names])
    fields = {f.name: f.dataType for f in df.schema.fields}
    grids = {c: Grid.for_bounds(lo, hi, precision_bits=precision_bits,
                                integer=isinstance(fields[c], types.IntegralType)) for c, (lo, hi) in given.items()}
    generator = resolve_rng(rng)
    if budget is not None:
        if not isinstance(budget, Budget):
            raise TypeError(f"budget must be a dpselect.Budget, got {type(budget).__name__}")
        budget.charge(eps_total, delta_total, what=f"spark.aggregate(by={names}, metrics={sorted(checked)})")
    spec = _rng_spec(generator)
    generator._announce()
    kappa, linf = max_partitions_contributed, max_contributions_per_partition

    # Rows → units and a random value per row → ≤ L∞ rows per (user, key) → per pair → a random
    # value per pair → ≤ κ pairs per user → per key.
    per_key = _aggregate_per_key(df, privacy_unit, names, value_columns, grids, kappa, linf, spec,
                                 null_privacy_units)

    key_fields = sorted((f for f in df.schema.fields if f.name in names), key=lambda f: names.index(f.name))
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

        strategy_ = _executor_strategy(sel_args)
        rng_ = _executor_rng(spec, b"release")
        for batch in batches:
            def column(i: int) -> np.ndarray:
                col = batch.column(i)
                if col.null_count:
                    raise ValueError(f"{_ERROR_MARK}a key's sum of grid units leaves int64: use coarser bounds "
                                     "or fewer precision_bits")
                return col.to_numpy(zero_copy_only=False).astype(np.int64)

            users = column(n_keys)
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

    released = _materialise(per_key.mapInArrow(decide, schema))

    # The statement, computed on the driver from the same parameters (the metric's noise object
    # depends on them only; the throwaway draw on one zero is discarded).
    selection = strat.guarantee.enforced() if hasattr(strat.guarantee, "enforced") else strat.guarantee
    if not generator.privacy_guaranteed:
        selection = selection.under_test_rng()
    components = [Component(f"selection of keys ({strat.name})", as_fraction(selection.epsilon),
                            selection.delta_exact, str(selection))]
    one = np.zeros(1, np.int64)
    for metric_name, m in checked.items():
        grid = PartitionGrids.of(grids[m.column], 1) if m.column else None
        *_, component = noisy_metric(metric_name, m, metric_eps[metric_name], kappa, linf, one, one,
                                     one if m.column else None, grid, None, resolve_rng(None))
        components.append(component)
    guarantee = AggregateGuarantee(components=tuple(components), requested_epsilon=eps_total,
                                   requested_delta=delta_total, kappa=kappa, linf=linf,
                                   privacy_guaranteed=generator.privacy_guaranteed and selection.is_dp)
    frame = _annotate(released.orderBy(*names), names, str(guarantee), guarantee.is_dp)
    return SparkAggregateResult(frame=frame, guarantee=guarantee,
                                bounds={c: (g.lower, g.upper) for c, g in grids.items()})

