"""``public_partitions=`` on Spark: the caller's list of keys joined to the per-key aggregates
(docs/privacy/public-partitions.md; the single machine's join is :mod:`dpselect.ingest.public_keys`).

A listed key absent from the data gets every statistic 0, so its noisy value is noise drawn
from zero. Keys match as in the single machine: a null matches a null (``<=>``), and Spark's
join compares NaN with NaN and 0.0 with −0.0 as equal. The list is public information, so how
it is joined is not a privacy matter; its size only adds to the work.
"""
from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Any

from dpselect.spark._common import USERS, column, columns, spark

__all__ = ["PUBLIC", "join_public", "public_keys"]

PUBLIC = "__dpselect_public"  # True for a listed key
_PK = "__dpselect_pk_"


def public_keys(df: Any, public: Any, key_fields: Sequence[Any]) -> Any:
    """The public keys as a Spark DataFrame of the ``by`` columns with the data's names and types,
    one row per key. ``public``: a Spark DataFrame holding the ``by`` columns with exactly the
    data's types, or what :func:`dpselect.select_partitions` takes (a list of keys, a pandas,
    Polars or Arrow table), converted with the single machine's checks and messages."""
    sql = spark()
    types = sql.types
    names = [f.name for f in key_fields]
    if isinstance(public, sql.DataFrame):
        fields = {f.name: f.dataType for f in public.schema.fields}
        missing = [n for n in names if n not in fields]
        if missing:
            raise ValueError(f"public_partitions lacks the by column(s) {missing}")
        for f in key_fields:
            if fields[f.name] != f.dataType:
                raise TypeError(f"public_partitions column {f.name!r} is {fields[f.name].simpleString()}, the data's "
                                f"is {f.dataType.simpleString()}: cast it to the data's type first (a cast that "
                                "fails would silently turn a key into null)")
        frame = public.select(*columns(names))
    else:
        from pyspark.sql.pandas.types import to_arrow_schema

        from dpselect.ingest.public_keys import public_table

        schema = types.StructType([types.StructField(f.name, f.dataType, True) for f in key_fields])
        timezone = df.sparkSession.conf.get("spark.sql.session.timeZone")
        try:
            arrow_schema = to_arrow_schema(schema, timezone=timezone)
        except TypeError:  # pyspark 3.5 has no timezone argument (its timestamps are UTC)
            arrow_schema = to_arrow_schema(schema)
        table = public_table(public, arrow_schema)
        frame = df.sparkSession.createDataFrame(table, schema=schema)
    return frame.select(*columns(names)).dropDuplicates(names)


def join_public(per_key: Any, public: Any, names: list[str], stats: Sequence[str], *, only_public: bool) -> Any:
    """``per_key`` (the ``by`` columns, ``USERS`` and the other ``stats``, one row per key of the
    data) joined to the public keys: with ``only_public``, exactly the listed keys (the public
    release, and aggregate); else every key of either (the mixed release). A key keeps the data's
    value where the data has it; a key absent from the data gets 0 for every statistic (a null
    statistic is a count or an exact sum, never null); ``PUBLIC`` marks the listed keys."""
    F = spark().functions
    renamed = [f"{_PK}{i}" for i in range(len(names))]
    types = {f.name: f.dataType for f in per_key.schema.fields}
    listed = public.select(*[column(n).alias(r) for n, r in zip(names, renamed)]).withColumn(PUBLIC, F.lit(True))
    same_key = functools.reduce(operator.and_, [column(n).eqNullSafe(F.col(r)) for n, r in zip(names, renamed)])
    joined = listed.join(per_key, same_key, "left" if only_public else "full")
    in_data = F.col(USERS).isNotNull()
    return joined.select(
        *[F.when(in_data, column(n)).otherwise(F.col(r)).alias(n) for n, r in zip(names, renamed)],
        *[F.when(in_data, F.col(c)).otherwise(F.lit(0).cast(types[c])).alias(c) for c in stats],
        F.coalesce(F.col(PUBLIC), F.lit(False)).alias(PUBLIC))
