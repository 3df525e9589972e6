""":func:`sql`: a ``SELECT WITH DIFFERENTIAL_PRIVACY`` query, its FROM/JOIN/WHERE run by DuckDB,
released by :func:`dpselect.aggregate` (docs/sql.md)."""
from __future__ import annotations

import os
import re
from collections.abc import Mapping as MappingABC
from typing import Any

from dpselect._threads import for_call
from dpselect.aggregation.aggregate import aggregate
from dpselect.aggregation.grid import DEFAULT_PRECISION_BITS
from dpselect.aggregation.plan import plan_aggregate
from dpselect.aggregation.result import AggregateResult
from dpselect.sql.dialect import SQLRefused, duckdb
from dpselect.sql.mapping import Mapping, map_query
from dpselect.sql.query import read_query

__all__ = ["connect", "plan_sql", "reword", "run_relation", "shaped", "sql"]

# dpselect.aggregate's parameter names as the query names them.
_SQL_NAMES = (("max_partitions_contributed", "OPTIONS max_groups_contributed"),
              ("privacy_unit", "OPTIONS privacy_unit_column"),
              ("metric '", "SELECT item '"), ("metrics[", "SELECT item ["))


def reword(message: str) -> str:
    """A message of dpselect.aggregate's plan with its parameters named as in the query."""
    for name, sql_name in _SQL_NAMES:
        message = message.replace(sql_name, "\0").replace(name, sql_name).replace("\0", sql_name)
    message = message.replace("drop or fill them before aggregating",
                              "filter them out in the WHERE (... IS NOT NULL) or fill them (COALESCE)")
    return re.sub(r"^(epsilon|delta)\b", r"OPTIONS \1", message)


def _reworded(exc: Exception) -> Exception:
    """``exc`` with its message reworded, of the same class where that class takes a message."""
    try:
        return type(exc)(reword(str(exc)))
    except TypeError:
        return exc


def plan_sql(query: str, *, max_contributions_per_partition: object = None, public: bool = False,
             **parameters: Any) -> tuple[Mapping, dict[str, Any]]:
    """Parse and map ``query`` and check the resulting :func:`dpselect.aggregate` call with the
    library's one plan (dpselect.aggregation.plan), before any data is read: the mapping and the
    aggregate keyword arguments (all but the data)."""
    dp_query = read_query(query)
    mapping = map_query(dp_query, max_contributions_per_partition)
    arguments = dict(privacy_unit=mapping.privacy_unit, by=mapping.by, metrics=mapping.metrics,
                     epsilon=dp_query.options["epsilon"], delta=dp_query.options["delta"],
                     max_partitions_contributed=mapping.max_partitions_contributed,
                     max_contributions_per_partition=mapping.max_contributions_per_partition, **parameters)
    try:
        plan_aggregate(**arguments, public=public)
    except (ValueError, TypeError) as exc:
        raise _reworded(exc) from None
    arguments["order"] = dp_query.order
    return mapping, arguments


def sql(query: str, tables: MappingABC[str, Any] | None = None, *, budget: Any = None,
        max_contributions_per_partition: int | str | None = None, connection: Any = None,
        public_partitions: Any = None, strategy: str = "auto", noise: str = "auto", bounds_scope: str = "dataset",
        weights: MappingABC[str, object] | None = None, confidence_level: float | None = None,
        precision_bits: int = DEFAULT_PRECISION_BITS, null_privacy_units: str = "error",
        rng: object = None, threads: int | None = None) -> AggregateResult:
    """Release a ``SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (...)`` query (BigQuery's syntax) under
    (ε, δ)-DP: DuckDB runs its FROM, JOINs and WHERE, producing only the privacy unit, the GROUP BY
    keys and the value columns, and :func:`dpselect.aggregate` bounds, selects and releases them
    with the same noise, bounds, intervals and budget accounting (docs/sql.md).

    ``tables``: name -> pandas / Polars / Arrow object, or the path of a Parquet or CSV file, each
    readable by that name in the query; ``connection``: a DuckDB connection whose tables the query
    may read (default: a new in-memory one). A file can also be named in the FROM directly
    (``FROM 'visits.parquet'``). ``max_contributions_per_partition`` (L∞): bound the rows of each
    privacy unit in each group and clamp each row (per-row bounds); without it SUM, AVG and COUNT
    clamp each unit's total per group, as BigQuery does (docs/sql.md, "Mapping"). The other
    keyword arguments are :func:`dpselect.aggregate`'s (``threads`` too: checked before DuckDB
    runs; the release does not depend on it).

    The guarantee holds for neighbouring inputs of the bounding — the rows that the FROM and WHERE
    produce — that add or remove all rows of one privacy unit; a FROM that gives one unit more
    rows or groups than the bounds allow is bounded all the same. Everything is checked before
    DuckDB runs and before ``budget`` is charged. Returns the :class:`dpselect.AggregateResult`
    of the release, its frame a pyarrow Table with the SELECT's columns in its order."""
    if tables is not None and not isinstance(tables, MappingABC):
        raise TypeError(f"tables must be a dict of name -> table or file path, got {type(tables).__name__}")
    mapping, arguments = plan_sql(query, max_contributions_per_partition=max_contributions_per_partition,
                                  public=public_partitions is not None, strategy=strategy, noise=noise,
                                  bounds_scope=bounds_scope, weights=weights, confidence_level=confidence_level,
                                  precision_bits=precision_bits, null_privacy_units=null_privacy_units)
    order = arguments.pop("order")
    n_threads = for_call(threads)  # checked before DuckDB runs
    con = connect(connection, tables)
    table = run_relation(con, mapping)
    try:
        result = aggregate(table, **arguments, public_partitions=public_partitions, budget=budget, rng=rng,
                           threads=n_threads)
    except (ValueError, TypeError) as exc:
        raise _reworded(exc) from exc
    return shaped(result, mapping, order)


def run_relation(con: Any, mapping: Mapping) -> Any:
    """The FROM/JOIN/WHERE of the query, run by DuckDB, as an Arrow table of the needed columns."""
    db = duckdb()
    try:
        relation = con.sql(mapping.relation_sql)
    except db.Error as exc:
        raise SQLRefused("FROM/WHERE (run by DuckDB)", str(exc).splitlines()[0]) from None
    try:
        to_table = getattr(relation, "to_arrow_table", None)
        return to_table() if to_table is not None else relation.arrow()
    except db.Error as exc:
        raise ValueError(f"FROM/WHERE (run by DuckDB): {str(exc).splitlines()[0]}; nothing was released") from None


def shaped(result: AggregateResult, mapping: Mapping, order: list[tuple[str, bool]]) -> AggregateResult:
    """The release with the SELECT's columns in its order (a key the SELECT omits is left out)
    and its ORDER BY (post-processing of released values only)."""
    frame = result.frame
    names = frame.column_names
    columns = []
    for name in mapping.columns:
        columns += [c for c in (name, f"{name}_ci_low", f"{name}_ci_high") if c in names]
    frame = frame.select(columns)
    if order and frame.num_rows > 1:
        frame = frame.sort_by([(name, "descending" if desc else "ascending") for name, desc in order])
    return AggregateResult(frame=frame, guarantee=result.guarantee, bounds=result.bounds,
                           _make_report=result.report)


def connect(connection: Any, tables: MappingABC[str, Any] | None) -> Any:
    """The DuckDB connection a query runs on, with ``tables`` readable by their names."""
    db = duckdb()
    if connection is None:
        con = db.connect()
        # Only what is registered or named as a file is read, never a Python variable that happens
        # to share a table's name (DuckDB's replacement scans of the caller's frames).
        con.execute("SET python_enable_replacements = false")
    elif isinstance(connection, db.DuckDBPyConnection):
        con = connection
    else:
        raise TypeError(f"connection must be a duckdb connection, got {type(connection).__name__}")
    for name, table in (tables or {}).items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"tables: names must be non-empty str, got {name!r}")
        if isinstance(table, (str, os.PathLike)):
            path = os.fspath(table)
            lower = path.lower()
            if lower.endswith(".parquet"):
                relation = con.read_parquet(path)
            elif any(lower.endswith(ext) for ext in (".csv", ".tsv", ".csv.gz", ".tsv.gz")):
                relation = con.read_csv(path)
            else:
                raise ValueError(f"tables[{name!r}] = {path!r}: a file path must end in .parquet, .csv, .tsv, "
                                 ".csv.gz or .tsv.gz")
            relation.create_view(name, replace=True)
        else:
            try:
                con.register(name, table)
            except db.Error as exc:
                raise TypeError(f"tables[{name!r}]: DuckDB cannot read a {type(table).__name__}: "
                                f"{str(exc).splitlines()[0]}") from None
    return con
