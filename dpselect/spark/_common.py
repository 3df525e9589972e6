"""What both entry points share: randomness on the executors, argument checks, the bounding
windows, and materialising a release once (docs/spark.md, "What runs where", "Randomness")."""
from __future__ import annotations

import hashlib
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpselect._optional import require
from dpselect.pipeline import GUARANTEE_METADATA_KEY, PRIVATE_METADATA_KEY, build_strategy
from dpselect.rng import SecureRNG, resolve_rng
from dpselect.rows import NullPrivacyUnitsDropped

# The count-based selections, and the public and mixed releases (the row mechanisms need every
# user's whole set of keys in one place, which Spark would have to gather).
SPARK_STRATEGIES = ("release", "pi_opt", "laplace", "gaussian", "public", "mixed")

# Internal column names (a user's column may not use them).
R = "__dpselect_r"
N = "__dpselect_n"
USERS = "__dpselect_users"
ROWS = "__dpselect_rows"
SUM = "__dpselect_sum_"
# Only for the data holder's report (exact, NOT DP), which keeps every key and every ranked row:
KEEP = "__dpselect_keep"  # the key was released
RANK = "__dpselect_rank"  # a row's or a pair's rank in its bounding window (kept iff <= the limit)
PAIRS = "__dpselect_pairs"  # a key's (user, key) pairs before bounding: its users before bounding
FIRSTS = "__dpselect_firsts"  # users whose first-ranked pair is in this key (summed over keys: the users)
ROWS_ALL = "__dpselect_rows_all"  # rows before bounding
ERROR_MARK = "dpselect refused the data: "

GUARANTEE = GUARANTEE_METADATA_KEY.decode()
PRIVATE = PRIVATE_METADATA_KEY.decode()


def spark() -> Any:
    """pyspark.sql, imported on first use (an ImportError with the extra to install)."""
    return require("pyspark.sql", feature="dpselect.spark", extra="spark")


# ---------------------------------------------------------------- randomness on the executors

def rng_spec(generator: SecureRNG) -> tuple[bytes, int] | None:
    state = generator._test_state
    return None if state is None else (bytes(state.seed), int(state.stream))


def executor_rng(spec: tuple[bytes, int] | None, step: bytes) -> SecureRNG:
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


def random_column(rng: SecureRNG, n: int) -> np.ndarray:
    """n independent uniform 64-bit values (as int64: Spark orders signed longs)."""
    return np.frombuffer(rng.random_bytes(8 * n), dtype=np.int64) if n else np.zeros(0, np.int64)


_STRATEGY_CACHE: dict[tuple[Any, ...], Any] = {}


def executor_strategy(args: tuple[Any, ...]) -> Any:
    """The strategy rebuilt on the executor (its kernel tables do not pickle), once per worker."""
    strat = _STRATEGY_CACHE.get(args)
    if strat is None:
        name, epsilon, delta, kappa, counts, allow, options = args
        strat = _STRATEGY_CACHE[args] = build_strategy(name, epsilon, delta, kappa, counts, allow, **dict(options))
    return strat


# ---------------------------------------------------------------- checks and plumbing

def check_frame(df: Any, privacy_unit: str, names: list[str], values: Sequence[str] = ()) -> None:
    sql = spark()
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


def drop_null_units(df: Any, privacy_unit: str, mode: str) -> tuple[Any, int]:
    """mode "drop": leave out rows with a null privacy unit, with the data holder's warning
    (one counting pass); the frame and the number dropped. Mode "error" is checked on the
    executors, in the first pass (``with_random(..., null_unit_check=True)``)."""
    if mode != "drop":
        return df, 0
    col = spark().functions.col(privacy_unit)
    dropped = df.filter(col.isNull()).count()
    if dropped:
        warnings.warn(NullPrivacyUnitsDropped(
            f"dropped {dropped} row(s) with a null privacy unit in column {privacy_unit!r} "
            "(null_privacy_units='drop'). This count is exact and NOT differentially private: it is "
            "for you, the data holder; do not publish it."), stacklevel=3)
    return df.filter(col.isNotNull()), int(dropped)


@dataclass(frozen=True)
class ValueSpec:
    """How :func:`with_random` prepares one value column: checked (no null, NaN or infinity:
    the single machine's refusals), then clamped to ``grid`` as int64 grid units, or, with no
    grid (bounds still to be found), kept as its values (int64 for ``integer``, else float64)."""

    label: str  # the column's name in the caller's DataFrame, for the messages
    grid: Any = None
    integer: bool = False


def with_random(df: Any, spec: tuple[bytes, int] | None, step: bytes, null_unit_check: bool,
                privacy_unit: str, values: Mapping[str, ValueSpec] | None = None) -> Any:
    """df plus a column of per-row 64-bit uniforms drawn on the executors; each column named in
    ``values`` is checked and converted as its :class:`ValueSpec` says."""
    sql = spark()
    types = sql.types
    values = dict(values or {})

    def typ(v: ValueSpec) -> Any:
        return types.LongType() if v.grid is not None or v.integer else types.DoubleType()

    fields = [types.StructField(f.name, typ(values[f.name]), False) if f.name in values else f
              for f in df.schema.fields]
    schema = types.StructType([*fields, types.StructField(R, types.LongType(), False)])
    unit_index = df.columns.index(privacy_unit)

    def convert(col: Any, v: ValueSpec) -> np.ndarray:
        label = f"value column {v.label!r}"
        if col.null_count:
            raise ValueError(f"{ERROR_MARK}{label} has {col.null_count} null value(s) in a batch: drop or fill them "
                             "before aggregating (a null is not a number to sum)")
        arr = col.to_numpy(zero_copy_only=False)
        try:
            if v.grid is not None:
                return v.grid.to_units(arr, name=label)
        except ValueError as exc:
            raise ValueError(f"{ERROR_MARK}{exc}") from None
        if v.integer:
            return arr.astype(np.int64)  # Spark's integral types are signed, at most 64 bits
        arr = arr.astype(np.float64)
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        if bad:
            raise ValueError(f"{ERROR_MARK}{label} has {bad} NaN or infinite value(s) in a batch: drop or impute "
                             "them before aggregating")
        return arr

    def draw(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        rng = executor_rng(spec, step)
        for batch in batches:
            if null_unit_check and batch.column(unit_index).null_count:
                raise ValueError(f"{ERROR_MARK}column {privacy_unit!r} has rows with a null privacy unit (a null "
                                 "is not one person); pass null_privacy_units='drop' to leave them out")
            columns = list(batch.columns)
            for i, name in enumerate(batch.schema.names):
                if name in values:
                    columns[i] = pa.array(convert(columns[i], values[name]))
            columns.append(pa.array(random_column(rng, batch.num_rows), pa.int64()))
            yield pa.RecordBatch.from_arrays(columns, names=[*batch.schema.names, R])

    return df.mapInArrow(draw, schema)


def keep_first(df: Any, partition_by: list[str], order_by: list[str], limit: int, rank: str | None = None) -> Any:
    """Per group of ``partition_by``, the ``limit`` rows of smallest (r, ``order_by``): a uniform
    subset of min(size, limit) rows, the r being independent uniforms (ties, of probability
    2^-64 per pair, broken by ``order_by``). With ``rank`` (for the data holder's report) no row
    is dropped: column ``rank`` holds each row's rank instead (kept iff ``rank <= limit``)."""
    sql = spark()
    F = sql.functions
    window = sql.Window.partitionBy(*partition_by).orderBy(F.col(R), *[F.col(c) for c in order_by])
    if rank is not None:
        return df.withColumn(rank, F.row_number().over(window)).drop(R)
    return df.withColumn(N, F.row_number().over(window)).filter(F.col(N) <= limit).drop(N, R)


def materialise(df: Any) -> Any:
    """Draw the release once: an eager local checkpoint (never recomputed). Errors raised by
    dpselect's checks on the executors come back as ValueError."""
    try:
        return df.localCheckpoint(eager=True)
    except Exception as exc:  # PythonException from an executor
        text = str(exc)
        at = text.find(ERROR_MARK)
        if at < 0:
            raise
        message = text[at + len(ERROR_MARK):].split("\n")[0]
        raise ValueError(message) from None


def sorted_by_key(df: Any, names: list[str]) -> Any:
    """Sorted by key as the single machine sorts (Arrow's order: NaN after every number, nulls
    last). Sorting checkpointed rows reads them back; it draws nothing again."""
    F = spark().functions
    return df.orderBy(*[F.col(n).asc_nulls_last() for n in names])


def annotate(df: Any, names: list[str], guarantee: str, private: bool) -> Any:
    """The statement in the metadata of every output column (Spark frames have no attrs)."""
    metadata = {GUARANTEE: guarantee, PRIVATE: bool(private)}
    for column in df.columns:
        df = df.withMetadata(column, metadata)
    return df


def guarantee_of(df: Any) -> str | None:
    """The privacy statement attached to a DataFrame returned by this module (None if absent)."""
    for f in df.schema.fields:
        if GUARANTEE in (f.metadata or {}):
            return str(f.metadata[GUARANTEE])
    return None


def check_strategy(strategy: object) -> str:
    """The strategy's name, or NotImplementedError for what runs on one machine only (a row
    mechanism, "auto", a strategy object), ValueError for an unknown name."""
    from dpselect.mechanisms import ROW_STRATEGIES

    names = ", ".join(SPARK_STRATEGIES)
    if isinstance(strategy, str) and strategy in SPARK_STRATEGIES:
        return strategy
    if isinstance(strategy, str) and (strategy in ROW_STRATEGIES or strategy == "auto"):
        what = "is a row mechanism: it needs" if strategy != "auto" else "may choose a row mechanism, which needs"
        raise NotImplementedError(f"strategy={strategy!r} {what} each user's whole set of keys in one place, which "
                                  f"dpselect.spark does not gather; on Spark use one of {names}, or run "
                                  "dpselect.select_partitions on one machine")
    if not isinstance(strategy, str):
        raise NotImplementedError(f"on Spark, strategy is given by name (one of {names}) with epsilon, delta and "
                                  f"options, not as an object; got {type(strategy).__name__}")
    raise ValueError(f"on Spark, strategy must be one of {names}, got {strategy!r}")
