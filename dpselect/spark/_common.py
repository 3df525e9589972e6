"""What both entry points share: column references, argument checks, the per-key steps'
randomness, and materialising a release once (docs/spark.md, "What runs where", "Randomness")."""
from __future__ import annotations

import hashlib
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dpselect._optional import require
from dpselect.ingest.pipeline import GUARANTEE_METADATA_KEY, PRIVATE_METADATA_KEY
from dpselect.mechanisms.base import BuiltInMechanism
from dpselect.mechanisms.protocols import CountMechanism, RowMechanism
from dpselect.rng import SecureRNG, resolve_rng
from dpselect.ingest.rows import NullPrivacyUnitsDropped

# The count-based selections, and the public and mixed releases (the row mechanisms need every
# user's whole set of keys in one place, which Spark would have to gather).
SPARK_STRATEGIES = ("release", "pi_opt", "laplace", "gaussian", "public", "mixed")

# Internal column names (a user's column may not use them).
USERS = "__dpselect_users"
ROWS = "__dpselect_rows"
SUM = "__dpselect_sum_"
# Only for the data holder's report (exact, NOT DP), which keeps every key and every ranked row:
KEEP = "__dpselect_keep"  # the key was released
RANK = "__dpselect_rank"  # a row's or a pair's rank in its bounding window (kept iff <= the limit)
PAIRS = "__dpselect_pairs"  # a key's (user, key) pairs before bounding: its users before bounding
FIRSTS = "__dpselect_firsts"  # users whose first-ranked pair is in this key (summed over keys: the users)
ROWS_ALL = "__dpselect_rows_all"  # rows before bounding
USER_PAIRS = "__dpselect_user_pairs"  # a user's (user, key) pairs before bounding: its c_u (κ and L∞ chosen privately)
ERROR_MARK = "dpselect refused the data: "
# The caller's columns are read once under these names, so that no step depends on what their own
# names hold (a dot, a backtick, a case that another column shares); the result gets them back.
UNIT = "__dpselect_unit"  # the privacy unit
KEY = "__dpselect_key_"  # the i-th by column
VALUE = "__dpselect_value_"  # the i-th value column

GUARANTEE = GUARANTEE_METADATA_KEY.decode()
PRIVATE = PRIVATE_METADATA_KEY.decode()


def spark() -> Any:
    """pyspark.sql, imported on first use (an ImportError with the extra to install)."""
    return require("pyspark.sql", feature="dpselect.spark", extra="spark")


def quote(name: str) -> str:
    """``name`` as a Spark column reference that means exactly that column: in backticks, a
    backtick doubled. Unquoted, Spark reads a dot as a struct field (``a.b``) and refuses a
    backtick."""
    return "`" + name.replace("`", "``") + "`"


def column(name: str) -> Any:
    """The column named ``name``, whatever characters the name holds (:func:`quote`)."""
    return spark().functions.col(quote(name))


def columns(names: Sequence[str]) -> list[Any]:
    return [column(n) for n in names]


def speculation_enabled(session: Any) -> bool:
    """Whether the session's scheduler launches speculative task copies (``spark.speculation``)."""
    return str(session.conf.get("spark.speculation", "false")).strip().lower() == "true"


def check_no_speculation(df: Any) -> None:
    """Refuse a session that runs speculative copies of tasks, before anything is charged. The
    per-key step draws its noise on the executors and stores its output as a local checkpoint;
    two copies of that step running at once on two executors could each store their block, with
    different noise, and later reads could see either: two releases of a key (docs/spark.md,
    "Drawn once")."""
    if speculation_enabled(df.sparkSession):
        raise ValueError("spark.speculation is enabled in this Spark session: a speculative copy of dpselect's per-key "
                         "step (the selection and the noise) could store a second, differently noised copy of a "
                         "key's released values, and reads could then see either. Start the session with "
                         "spark.speculation=false to run dpselect.spark")


# ---------------------------------------------------------------- randomness on the executors

def rng_spec(generator: SecureRNG) -> tuple[bytes, int] | None:
    state = generator.test_state
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

        def announce(self) -> None:
            self._uses += 1

    return _ExecutorTestRNG(seed, stream)


# ---------------------------------------------------------------- exact sums

# Sums of grid units are Spark decimals of 38 digits: a sum of fewer than 2^63 int64 values is
# below 2^126 < 10^38 in magnitude, so Spark's SUM never overflows or wraps, whatever the data
# (an int64 SUM would stop the release, or wrap, on a key whose exact sum leaves int64).
SUM_DIGITS = 38


def sum_type() -> Any:
    return spark().types.DecimalType(SUM_DIGITS, 0)


def wide_of(array: Any) -> Any:
    """An Arrow decimal128 array of integers (scale 0, no null) as a
    :class:`~dpselect.aggregation.wide.Wide`: Arrow keeps each value as 16 little-endian bytes
    of two's complement, the low and the high word that ``Wide`` holds."""
    import pyarrow as pa

    from dpselect.aggregation.wide import Wide

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if not pa.types.is_decimal128(array.type) or array.type.scale != 0 or array.null_count:
        raise ValueError(f"expected exact sums as decimal128(p, 0) without nulls, got {array.type} with "
                         f"{array.null_count} null(s)")
    words = np.frombuffer(array.buffers()[1], dtype="<u8", count=2 * (array.offset + len(array)))
    return Wide.from_words(words[2 * array.offset:].reshape(-1, 2).astype(np.uint64))


def arrow_of(wide: Any) -> Any:
    """A :class:`~dpselect.aggregation.wide.Wide` as an Arrow decimal128(38, 0) array (exact:
    every value of ``wide`` is a sum below 10^38 in magnitude)."""
    import pyarrow as pa

    words = np.empty((wide.shape[0], 2), dtype="<u8")
    words[:, 0] = wide.lo
    words[:, 1] = wide.hi.view(np.uint64)
    return pa.Array.from_buffers(pa.decimal128(SUM_DIGITS, 0), wide.shape[0], [None, pa.py_buffer(words.tobytes())])


# ---------------------------------------------------------------- checks and plumbing

def check_frame(df: Any, privacy_unit: str, names: list[str], values: Sequence[str] = ()) -> None:
    sql = spark()
    if not isinstance(df, sql.DataFrame):
        raise TypeError(f"dpselect.spark needs a pyspark.sql.DataFrame, got {type(df).__name__}")
    types = sql.types
    fields = {f.name: f.dataType for f in df.schema.fields}
    for name in [privacy_unit, *names, *values]:
        if name not in fields:
            raise ValueError(f"column {name!r} is not in the DataFrame (columns: {list(fields)})")
        if name.lower().startswith("__dpselect_"):
            raise ValueError(f"column names starting with '__dpselect_' are reserved, got {name!r}")
    unit = fields[privacy_unit]
    if isinstance(unit, (types.FloatType, types.DoubleType)):
        raise TypeError(f"privacy_unit column {privacy_unit!r} is {unit.simpleString()}: a float does not identify "
                        "a person exactly (0.0 and -0.0); cast it to an integer or a string")
    if not isinstance(unit, (types.IntegralType, types.StringType, types.BinaryType)):
        raise TypeError(f"privacy_unit column {privacy_unit!r} must hold integers, strings or bytes, got "
                        f"{unit.simpleString()}")
    for name in names:
        if isinstance(fields[name], (types.ArrayType, types.MapType, types.StructType)):
            raise TypeError(f"partition column {name!r} is {fields[name].simpleString()}: nested keys are "
                            "refused, as in dpselect.select_partitions")
    for name in values:
        typ = fields[name]
        if not isinstance(typ, (types.IntegralType, types.FloatType, types.DoubleType)):
            raise TypeError(f"value column {name!r} must hold integers or floats, got {typ.simpleString()}: "
                            "cast it first")


def _same_name(a: str, b: str) -> bool:
    """Whether Spark, comparing names without case (Java's equalsIgnoreCase), may take a and b
    for one column; erring towards yes for the odd letter whose case mappings differ in length."""
    return a == b or a.lower() == b.lower() or a.upper() == b.upper()


def check_names(df: Any, used: Sequence[str], outputs: Sequence[str]) -> None:
    """What Spark would refuse with a raw AnalysisException after the budget is charged, refused
    here first: a column read from the DataFrame that more than one of its columns answers to
    (a repeated name, or, as Spark resolves names without case by default, names differing in
    case only), output columns that differ in case only, and output names in dpselect's reserved
    prefix. dpselect's own checks (distinct names) have already run."""
    case_sensitive = str(df.sparkSession.conf.get("spark.sql.caseSensitive", "false")).strip().lower() == "true"

    def same(a: str, b: str) -> bool:
        return a == b if case_sensitive else _same_name(a, b)

    fields = [f.name for f in df.schema.fields]
    where = "" if case_sensitive else " (Spark compares column names without case: spark.sql.caseSensitive=false)"
    for name in dict.fromkeys(used):
        answering = [f for f in fields if same(f, name)]
        if len(answering) > 1:
            raise ValueError(f"column {name!r} is ambiguous in this DataFrame: it has columns {answering}{where}; "
                             "select or rename the columns first")
    for i, name in enumerate(outputs):
        if name.lower().startswith("__dpselect_"):
            raise ValueError(f"output column {name!r}: names starting with '__dpselect_' are reserved; rename it")
        for other in outputs[:i]:
            if same(other, name):
                raise ValueError(f"output columns {other!r} and {name!r} would be one column on Spark{where}; give "
                                 "every by column, metric and count column a name of its own")


def key_names(n: int) -> list[str]:
    return [f"{KEY}{i}" for i in range(n)]


def drop_null_units(df: Any, privacy_unit: str, mode: str, label: str) -> tuple[Any, int]:
    """mode "drop": leave out rows with a null privacy unit (column ``privacy_unit``, the
    caller's ``label``), with the data holder's warning (one counting pass); the frame and the
    number dropped. Mode "error" is checked on the executors, when the (user, key) pairs are
    ranked (``with_ranks(..., null_unit_check=True)``)."""
    if mode != "drop":
        return df, 0
    col = column(privacy_unit)
    dropped = df.filter(col.isNull()).count()
    if dropped:
        warnings.warn(NullPrivacyUnitsDropped(
            f"dropped {dropped} row(s) with a null privacy unit in column {label!r} "
            "(null_privacy_units='drop'). This count is exact and NOT differentially private: it is "
            "for you, the data holder; do not publish it."), stacklevel=3)
    return df.filter(col.isNotNull()), int(dropped)


def materialise(df: Any) -> Any:
    """Draw the release once: an eager local checkpoint (never recomputed). Errors raised by
    dpselect's checks on the executors come back as ValueError."""
    try:
        return df.localCheckpoint(eager=True)
    except Exception as exc:  # PythonException from an executor
        refusal = _refusal(exc)
        if refusal is exc:
            raise
        raise refusal from None


def collected(df: Any) -> list[Any]:
    """``df.collect()`` (a small aggregate), errors of dpselect's checks on the executors as
    ValueError, as :func:`materialise` gives them."""
    try:
        return list(df.collect())
    except Exception as exc:  # PythonException from an executor
        refusal = _refusal(exc)
        if refusal is exc:
            raise
        raise refusal from None


def _refusal(exc: Exception) -> Exception:
    """dpselect's own refusal carried by an executor's exception, as a ValueError; else ``exc``."""
    text = str(exc)
    at = text.find(ERROR_MARK)
    if at < 0:
        return exc
    return ValueError(text[at + len(ERROR_MARK):].split("\n")[0])


def sorted_by_key(df: Any, names: list[str]) -> Any:
    """Sorted by key as the single machine sorts (Arrow's order: NaN after every number, nulls
    last). Sorting checkpointed rows reads them back; it draws nothing again."""
    return df.orderBy(*[column(n).asc_nulls_last() for n in names])


def annotate(df: Any, names: Mapping[str, str], guarantee: str, private: bool) -> Any:
    """The result: every column renamed as ``names`` says (the keys get the caller's names back),
    with the statement in its metadata (Spark frames have no attrs)."""
    metadata = {GUARANTEE: guarantee, PRIVATE: bool(private)}
    return df.select(*[column(c).alias(names.get(c, c), metadata=metadata) for c in df.columns])


def guarantee_of(df: Any) -> str | None:
    """The privacy statement attached to a DataFrame returned by this module (None if absent)."""
    for f in df.schema.fields:
        if GUARANTEE in (f.metadata or {}):
            return str(f.metadata[GUARANTEE])
    return None


def check_strategy(strategy: object) -> Any:
    """The strategy, a name or a mechanism object built by :func:`dpselect.make_strategy` (its
    executors get a copy, built again from its parameters); NotImplementedError for what runs on
    one machine only (a row mechanism, "auto", a strategy dpselect did not build), ValueError for
    an unknown name."""
    from dpselect.mechanisms import ROW_STRATEGIES

    names = ", ".join(SPARK_STRATEGIES)
    if isinstance(strategy, str) and strategy in SPARK_STRATEGIES:
        return strategy
    shown = strategy.name if isinstance(strategy, RowMechanism) else strategy
    if isinstance(strategy, RowMechanism) or (isinstance(strategy, str) and (strategy in ROW_STRATEGIES
                                                                            or strategy == "auto")):
        what = "may choose a row mechanism, which needs" if strategy == "auto" else "is a row mechanism: it needs"
        raise NotImplementedError(f"strategy={shown!r} {what} each user's whole set of keys in one place, which "
                                  f"dpselect.spark does not gather; on Spark use one of {names}, or run "
                                  "dpselect.select_partitions on one machine")
    if isinstance(strategy, CountMechanism) and isinstance(strategy, BuiltInMechanism) \
            and strategy.name in SPARK_STRATEGIES:
        return strategy
    if not isinstance(strategy, str):
        raise NotImplementedError(f"on Spark, strategy is given by name (one of {names}) or as a mechanism built by "
                                  f"dpselect.make_strategy, whose executors build it again from its parameters; got "
                                  f"{type(strategy).__name__}, which dpselect did not build")
    raise ValueError(f"on Spark, strategy must be one of {names}, got {strategy!r}")
