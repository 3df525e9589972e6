"""A checked DP SELECT as one :func:`dpselect.aggregate` call: the DuckDB query that produces
exactly the columns it needs, the metrics, and the contribution bounds (docs/sql.md, "Mapping").

Two ways to bound a privacy unit's rows within a group, chosen by whether the rows per unit and
group are bounded (``max_contributions_per_partition``, an OPTION or a parameter):

* per group (BigQuery's SUM, AVG and COUNT with ``contribution_bounds_per_group``): DuckDB first
  aggregates each (unit, key)'s rows — its SUM, AVG or COUNT — and dpselect clamps that one
  value per unit and group to the bounds, with L∞ = 1 (each unit has one row per group);
* per row (``max_contributions_per_partition`` = L given): dpselect keeps at most L rows of each
  unit in each group and clamps each row's value to ``contribution_bounds_per_row``.

Each is exact for the functions it accepts; a call that only the other one maps is refused."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpselect.aggregation import metrics as dp
from dpselect.aggregation.metrics import Metric
from dpselect.aggregation.quantiles import quantile
from dpselect.sql.dialect import SQLRefused, dialect, sqlglot
from dpselect.sql.query import Call, DPQuery

__all__ = ["Mapping", "map_query"]

_ROW_FUNCTIONS = ("PERCENTILE_CONT", "VAR_POP", "STDDEV_POP")


@dataclass(frozen=True)
class Mapping:
    """The aggregate call of a DP SELECT, without its data."""

    relation_sql: str  # DuckDB SQL producing the privacy unit, the keys and the value columns
    privacy_unit: str
    by: list[str]
    metrics: dict[str, Metric]
    max_partitions_contributed: int | float | str | None
    max_contributions_per_partition: int | float | str | None
    per_group: bool
    columns: list[str]  # the release's columns in SELECT order (keys the SELECT omits left out)


def _sql(node: Any) -> str:
    return str(node.sql(dialect=dialect()))


def map_query(query: DPQuery, max_contributions_per_partition: object = None) -> Mapping:
    """The aggregate call for ``query``; ``max_contributions_per_partition``: the parameter (the
    OPTION of that name is the same bound, given in the query)."""
    exp = sqlglot().exp
    option_linf = query.options.get("max_contributions_per_partition")
    if option_linf is not None and max_contributions_per_partition is not None:
        raise SQLRefused("OPTIONS max_contributions_per_partition", "is given both in the query and as a parameter; "
                                                                    "give it once")
    linf: Any = option_linf if option_linf is not None else max_contributions_per_partition
    per_group = linf is None
    unit = query.options["privacy_unit_column"]
    unit_name = unit.name
    outputs = {name for name, _ in query.items} | {name for _, name in query.keys}
    projections: dict[str, Any] = {unit_name: unit}
    for expression, name in query.keys:
        projections[name] = expression
    metrics: dict[str, Metric] = {}

    def column(expression: Any, label: str | None = None) -> str:
        """The value column for ``expression``: named as written, renamed if that is an output's name."""
        name = label or (expression.name if isinstance(expression, exp.Column) else _sql(expression))
        if name in outputs or name == unit_name:
            name = f"{name} (input)"
        if name in projections and _sql(projections[name]) != _sql(expression):
            name = f"{name} #{len(projections)}"
        projections[name] = expression
        return name

    for name, call in query.items:
        if call is None:
            continue
        if call.distinct:
            metrics[name] = _distinct(call, unit, per_group, column)
        elif per_group:
            metrics[name] = _per_group(call, column)
        else:
            metrics[name] = _per_row(call, column)
    base = query.base.copy()
    base.set("expressions", [exp.alias_(e.copy(), n, quoted=True) for n, e in projections.items()])
    if per_group:  # one row per (unit, key): every other column is an aggregate of that unit's rows there
        base.set("group", exp.Group(expressions=[e.copy() for e in [unit, *(k for k, _ in query.keys)]]))
        # A fixed order, so that a seeded run is reproducible (the bounding's choices follow row order).
        base.set("order", exp.Order(expressions=[exp.Ordered(this=exp.Literal.number(i + 1))
                                                 for i in range(1 + len(query.keys))]))
    shown = [name for name, _ in query.items]
    return Mapping(relation_sql=_sql(base), privacy_unit=unit_name, by=[n for _, n in query.keys], metrics=metrics,
                   max_partitions_contributed=query.options.get("max_groups_contributed"),
                   max_contributions_per_partition=1 if per_group else linf, per_group=per_group, columns=shown)


def _distinct(call: Call, unit: Any, per_group: bool, column: Any) -> Metric:
    exp = sqlglot().exp
    argument = call.argument
    if isinstance(argument, exp.Column) and argument.name == unit.name and (
            not argument.table or not unit.table or argument.table == unit.table):
        return dp.count_distinct_units()
    if per_group:
        raise SQLRefused(f"SELECT {call.text}", "COUNT(DISTINCT column) of a column other than the privacy unit "
                                                "reads each row: give max_contributions_per_partition (the rows per "
                                                "privacy unit and group; an OPTION or a parameter)")
    return dp.count_distinct(column(argument))


def _per_group(call: Call, column: Any) -> Metric:
    """BigQuery's per-group clamping: one value per (unit, key), computed by DuckDB."""
    exp = sqlglot().exp
    if call.function in _ROW_FUNCTIONS:
        raise SQLRefused(f"SELECT {call.text}", f"{call.function} clamps each row (contribution_bounds_per_row): "
                                                "give max_contributions_per_partition (the rows per privacy unit "
                                                "and group; an OPTION or a parameter)")
    if call.bounds_kind == "row":
        raise SQLRefused(f"SELECT {call.text}", "contribution_bounds_per_row clamps each row: give "
                                                "max_contributions_per_partition (an OPTION or a parameter), or use "
                                                "contribution_bounds_per_group")
    if call.argument is None:
        aggregate = exp.Cast(this=exp.Anonymous(this="COUNT", expressions=[exp.Star()]),
                             to=exp.DataType.build("BIGINT"))
    else:
        cast = "BIGINT" if call.function == "COUNT" else "DOUBLE"
        aggregate = exp.Cast(this=exp.Anonymous(this=call.function, expressions=[call.argument.copy()]),
                             to=exp.DataType.build(cast))
    label = f"{call.function}({'*' if call.argument is None else _sql(call.argument)})"
    name = column(aggregate, label)
    if call.function == "AVG":
        return dp.mean(name, bounds=call.bounds)
    return dp.sum(name, bounds=call.bounds)  # COUNT: the sum of each unit's clamped count


def _per_row(call: Call, column: Any) -> Metric:
    """Per-row clamping, at most L∞ rows per (unit, key)."""
    exp = sqlglot().exp
    if call.bounds_kind == "group":
        raise SQLRefused(f"SELECT {call.text}", "contribution_bounds_per_group clamps each privacy unit's total in "
                                                "a group, but with max_contributions_per_partition each row is "
                                                "clamped: write contribution_bounds_per_row => (lo, hi), or leave "
                                                "max_contributions_per_partition out for per-group bounds")
    if call.argument is None:
        if call.bounds is not None:
            raise SQLRefused(f"SELECT {call.text}", "COUNT(*) counts rows: it takes no bounds (each unit adds at "
                                                    "most max_contributions_per_partition rows to a group)")
        return dp.count()
    if call.function == "COUNT":  # non-null values: a sum of 0/1 indicators
        if call.bounds is not None:
            raise SQLRefused(f"SELECT {call.text}", "COUNT(column) counts rows: it takes no bounds")
        indicator = exp.Cast(this=exp.Not(this=exp.Is(this=call.argument.copy(), expression=exp.Null())),
                             to=exp.DataType.build("BIGINT"))
        return dp.sum(column(indicator, f"{_sql(call.argument)} IS NOT NULL"), bounds=(0, 1))
    name = column(call.argument.copy())
    if call.function == "PERCENTILE_CONT":
        assert call.q is not None
        return quantile(name, call.q, bounds=call.bounds)
    make = {"SUM": dp.sum, "AVG": dp.mean, "VAR_POP": dp.variance,
            "STDDEV_POP": dp.stddev}[call.function]
    return make(name, bounds=call.bounds)
