"""A DP SELECT read into its parts — options, GROUP BY keys, DP aggregate calls, the FROM/WHERE
that DuckDB runs — or refused, naming the clause (docs/sql.md, "What is refused").

Only what is a bounded DP aggregation is accepted: every SELECT item is a GROUP BY key or one DP
aggregate function call, and nothing reads the true (un-noised) values after the aggregation
(HAVING, ORDER BY a true value, QUALIFY, window functions) or makes one person's rows depend on
other people's rows before it (a subquery in WHERE, LIMIT inside the FROM)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dpselect.sql.clause import OPTION_NAMES, cut_clause
from dpselect.sql.dialect import DP_FUNCTIONS, SQLRefused, dialect, sqlglot

__all__ = ["Call", "DPQuery", "read_query"]

# BigQuery options dpselect does not map, with why.
_UNMAPPED_OPTIONS = {
    "max_rows_contributed": "bounds a unit's rows over all groups; dpselect bounds the groups per unit "
                            "(max_groups_contributed) and the rows per unit and group "
                            "(max_contributions_per_partition): give those instead",
    "group_selection_strategy": "PUBLIC_GROUPS is dpselect.sql(..., public_partitions=KEYS) (a table of the keys, "
                                "known without the data); remove the option",
    "min_privacy_units_per_group": "dpselect's key selection sets its own threshold from epsilon and delta "
                                   "(docs/privacy/aggregate.md); remove the option",
}
_BOUNDS_ARGUMENTS = ("contribution_bounds_per_group", "contribution_bounds_per_row")


@dataclass(frozen=True)
class Call:
    """One DP aggregate call of the SELECT list."""

    function: str  # one of DP_FUNCTIONS
    argument: Any  # sqlglot expression; None for COUNT(*)
    distinct: bool = False
    q: float | None = None  # PERCENTILE_CONT's percentile
    bounds: tuple[int | float, int | float] | None = None
    bounds_kind: str | None = None  # "group" or "row"
    text: str = ""  # the call as written (sqlglot's rendering), for messages


@dataclass
class DPQuery:
    """The parts of a DP SELECT, checked."""

    options: dict[str, Any]
    keys: list[tuple[Any, str]]  # (expression, output name)
    items: list[tuple[str, Call | None]]  # SELECT order: (output name, call or None for a key)
    base: Any  # the SELECT with its FROM, joins, WHERE and CTEs (its list and GROUP BY replaced later)
    order: list[tuple[str, bool]] = field(default_factory=list)  # (output name, descending)


def _sql(node: Any) -> str:
    return str(node.sql(dialect=dialect()))


def _number(what: str, node: Any) -> int | float:
    """A numeric literal (possibly negated) as an int or a float."""
    exp = sqlglot().exp
    negative = isinstance(node, exp.Neg)
    inner = node.this if negative else node
    if isinstance(inner, exp.Paren):
        return _number(what, inner.this) * (-1 if negative else 1)
    if not isinstance(inner, exp.Literal) or inner.is_string:
        raise SQLRefused(what, f"expected a number, got {_sql(node)!r}")
    text = inner.this
    try:
        value: int | float = int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            raise SQLRefused(what, f"expected a number, got {text!r}") from None
    return -value if negative else value


def _read_options(raw: dict[str, Any]) -> dict[str, Any]:
    exp = sqlglot().exp
    for name in raw:
        if name in _UNMAPPED_OPTIONS:
            raise SQLRefused(f"OPTIONS {name}", _UNMAPPED_OPTIONS[name])
        if name not in OPTION_NAMES:
            raise SQLRefused(f"OPTIONS {name}", f"unknown option; the options are {', '.join(OPTION_NAMES)}")
    options: dict[str, Any] = {}
    for name in ("epsilon", "delta", "max_groups_contributed", "max_contributions_per_partition"):
        if name in raw:
            options[name] = _number(f"OPTIONS {name}", raw[name])
    unit = raw.get("privacy_unit_column")
    if unit is None:
        raise SQLRefused("OPTIONS privacy_unit_column", "is required: the column that identifies a person (or "
                                                        "whatever one record of the guarantee protects), e.g. "
                                                        "privacy_unit_column = user_id")
    if not isinstance(unit, exp.Column):
        raise SQLRefused("OPTIONS privacy_unit_column", f"must be a column name, got {_sql(unit)!r}")
    options["privacy_unit_column"] = unit
    for name in ("epsilon", "delta"):
        if name not in options:
            raise SQLRefused(f"OPTIONS {name}", "is required: the release's privacy budget")
    return options


def read_query(query: str) -> DPQuery:
    """Parse ``query`` (see :mod:`dpselect.sql`) and check that it is a bounded DP aggregation."""
    glot = sqlglot()
    exp = glot.exp
    clause = cut_clause(query)
    options = _read_options(clause.options)
    try:
        statements = glot.parse(clause.query, read=dialect())
    except glot.errors.ParseError as exc:
        raise SQLRefused("query", f"cannot be parsed: {str(exc).splitlines()[0]}") from None
    statements = [s for s in statements if s is not None]
    if len(statements) != 1:
        raise SQLRefused("query", "one statement only (no ';' between statements)")
    select = statements[0]
    if not isinstance(select, exp.Select):
        kind = type(select).__name__.upper()
        raise SQLRefused(kind, "the DP SELECT must be the whole query (no UNION, INTERSECT or EXCEPT around it, no "
                               "statement other than SELECT)")
    _refuse_clauses(select)
    if select.args.get("from_") is None:
        raise SQLRefused("FROM", "the DP SELECT needs a FROM: the rows to aggregate")
    group = select.args.get("group")
    if group is None or not group.expressions:
        raise SQLRefused("GROUP BY", "is required: a DP SELECT here releases groups (keys) and their statistics; "
                                     "for one overall figure GROUP BY a constant column and pass "
                                     "public_partitions with its one value")
    for part in ("rollup", "cube", "grouping_sets", "totals"):
        if group.args.get(part):
            raise SQLRefused("GROUP BY", f"{part.upper().replace('_', ' ')} is not supported: one grouping per query")
    for item in group.expressions:
        if isinstance(item, (exp.Rollup, exp.Cube, exp.GroupingSets)):
            raise SQLRefused("GROUP BY", f"{type(item).__name__.upper()} is not supported: one grouping per query")
    projections = list(select.expressions)
    items, key_of_item = _select_items(projections)
    keys = _group_keys(group.expressions, projections, items, key_of_item)
    key_exprs = {_sql(e) for e, _ in keys}
    for index, (_, call) in enumerate(items):
        if call is None and _sql(key_of_item[index]) not in key_exprs:
            raise SQLRefused("SELECT", f"{_sql(projections[index])!r} is neither a GROUP BY key nor a DP aggregate "
                                       "(COUNT, SUM, AVG, PERCENTILE_CONT, VAR_POP, STDDEV_POP): its true values "
                                       "would be released")
    names = [name for name, _ in items]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SQLRefused("SELECT", f"two items are named {twice[0]!r}: give each its own alias (AS name)")
    order = _order(select, names)
    base = select.copy()
    for part in ("group", "order", "expressions"):
        base.set(part, None if part != "expressions" else [])
    _refuse_inside(base)
    return DPQuery(options=options, keys=keys, items=items, base=base, order=order)


def _refuse_clauses(select: Any) -> None:
    refused = {"having": ("HAVING", "filters groups on their true (un-noised) values; filter the released frame "
                                    "instead"),
               "qualify": ("QUALIFY", "filters on window functions over the true values"),
               "windows": ("WINDOW", "window functions read the true values of other rows"),
               "limit": ("LIMIT", "keeps rows by position: on the DP SELECT it is post-processing best done on the "
                                  "released frame, and its keys are chosen by the selection, not by a limit"),
               "offset": ("OFFSET", "keeps rows by position; slice the released frame instead"),
               "distinct": ("SELECT DISTINCT", "a DP SELECT releases one row per group already"),
               "into": ("SELECT INTO", "the release is returned, never written into a table by the query")}
    for part, (clause, why) in refused.items():
        if select.args.get(part):
            raise SQLRefused(clause, why)


def _refuse_inside(base: Any) -> None:
    """What must not run before the bounding: window functions anywhere, subqueries in WHERE,
    LIMIT / OFFSET / window functions inside the FROM (which rows one person keeps would depend on
    other people's rows)."""
    exp = sqlglot().exp
    for node in base.walk():
        if isinstance(node, exp.Window):
            raise SQLRefused("window function", f"{_sql(node)!r}: a window function makes one row's value depend on "
                                                "other rows (other people's), before the bounding")
        if isinstance(node, (exp.Limit, exp.Offset, exp.Fetch)):
            raise SQLRefused("LIMIT before aggregation", f"{_sql(node)!r} inside the FROM keeps rows by position, so "
                                                         "whether one person's rows are kept depends on other "
                                                         "people's rows")
    where = base.args.get("where")
    if where is not None and any(isinstance(n, (exp.Subquery, exp.Select)) for n in where.walk()):
        raise SQLRefused("WHERE", "a subquery in WHERE makes each row's inclusion depend on other rows (other "
                                  "people's) before the bounding; join a public table instead, or filter on the "
                                  "row's own values")


def _select_items(projections: list[Any]) -> tuple[list[tuple[str, Call | None]], dict[int, Any]]:
    exp = sqlglot().exp
    items: list[tuple[str, Call | None]] = []
    key_of_item: dict[int, Any] = {}
    for index, projection in enumerate(projections):
        if isinstance(projection, exp.Star) or (isinstance(projection, exp.Column) and projection.is_star):
            raise SQLRefused("SELECT", "SELECT * would release true values: list the GROUP BY keys and the DP "
                                       "aggregates")
        inner = projection.unalias() if isinstance(projection, exp.Alias) else projection
        alias = projection.alias if isinstance(projection, exp.Alias) else None
        if isinstance(inner, exp.Anonymous) and str(inner.this).upper() in DP_FUNCTIONS:
            call = _call(inner)
            items.append((alias or _default_name(call), call))
            continue
        nested = next((n for n in inner.walk() if isinstance(n, exp.AggFunc) or (
            isinstance(n, exp.Anonymous) and str(n.this).upper() in DP_FUNCTIONS)), None)
        if nested is not None:
            if isinstance(nested, exp.Anonymous):
                raise SQLRefused("SELECT", f"{_sql(projection)!r}: an expression over a DP aggregate is not "
                                           "supported; select the aggregate itself and compute on the released "
                                           "frame")
            raise SQLRefused("SELECT", f"{_sql(nested)!r} is not a differentially private aggregate; the DP "
                                       "functions are COUNT, SUM, AVG, PERCENTILE_CONT, VAR_POP and STDDEV_POP")
        if any(isinstance(n, (exp.Subquery, exp.Select)) for n in inner.walk()):
            raise SQLRefused("SELECT", f"{_sql(projection)!r}: a subquery in the SELECT list reads raw rows")
        key_of_item[index] = inner
        items.append((alias or (inner.name if isinstance(inner, exp.Column) else _sql(inner)), None))
    return items, key_of_item


def _group_keys(expressions: list[Any], projections: list[Any], items: list[tuple[str, Call | None]],
                key_of_item: dict[int, Any]) -> list[tuple[Any, str]]:
    """Each GROUP BY key's expression and output name; an ordinal or a SELECT alias refers to
    its SELECT item."""
    exp = sqlglot().exp
    aliases = {name: i for i, (name, call) in enumerate(items) if call is None}
    by_text = {_sql(e): i for i, e in key_of_item.items()}
    keys: list[tuple[Any, str]] = []
    for expression in expressions:
        index = None
        if isinstance(expression, exp.Literal) and not expression.is_string:
            position = int(_number("GROUP BY", expression))
            if not 1 <= position <= len(projections):
                raise SQLRefused("GROUP BY", f"{position} is not the position of a SELECT item")
            if items[position - 1][1] is not None:
                raise SQLRefused("GROUP BY", f"{position} is the position of a DP aggregate, not of a key")
            index = position - 1
        elif isinstance(expression, exp.Column) and not expression.table and expression.name in aliases \
                and _sql(expression) not in by_text:
            index = aliases[expression.name]
        elif _sql(expression) in by_text:
            index = by_text[_sql(expression)]
        if any(isinstance(n, exp.AggFunc) or isinstance(n, (exp.Subquery, exp.Window)) or (
                isinstance(n, exp.Anonymous) and str(n.this).upper() in DP_FUNCTIONS) for n in expression.walk()):
            raise SQLRefused("GROUP BY", f"{_sql(expression)!r}: group by the rows' own values (no aggregate, "
                                         "window function or subquery)")
        if index is not None:
            keys.append((key_of_item[index], items[index][0]))
        else:  # a key that the SELECT list does not show: released too (its groups are released)
            keys.append((expression, expression.name if isinstance(expression, exp.Column) else _sql(expression)))
    texts = [_sql(e) for e, _ in keys]
    if len(set(texts)) != len(texts):
        raise SQLRefused("GROUP BY", "lists one key twice")
    return keys


def _default_name(call: Call) -> str:
    """An unaliased DP aggregate's output name (an alias is clearer: AS name)."""
    if call.argument is None:
        return call.function.lower()
    argument = call.argument.name if isinstance(call.argument, sqlglot().exp.Column) else _sql(call.argument)
    prefix = f"{call.function.lower()}{'_distinct' if call.distinct else ''}"
    if call.q is not None:
        from dpselect.aggregation.quantiles import suffix

        return f"{prefix}_{argument}_{suffix(call.q)}"
    return f"{prefix}_{argument}"


def _call(node: Any) -> Call:
    """A DP aggregate call's arguments: the value, PERCENTILE_CONT's percentile, the bounds."""
    exp = sqlglot().exp
    function = str(node.this).upper()
    text = _sql(node)
    positional = [a for a in node.expressions if not isinstance(a, exp.Kwarg)]
    bounds: tuple[int | float, int | float] | None = None
    kind = None
    for kwarg in (a for a in node.expressions if isinstance(a, exp.Kwarg)):
        name = kwarg.this.name.lower()
        if name not in _BOUNDS_ARGUMENTS:
            raise SQLRefused(f"SELECT {text}", f"unknown named argument {name!r}; the bounds are given as "
                                               "contribution_bounds_per_group => (lo, hi) or "
                                               "contribution_bounds_per_row => (lo, hi)")
        if bounds is not None:
            raise SQLRefused(f"SELECT {text}", "gives its bounds twice")
        pair = kwarg.expression
        if not isinstance(pair, exp.Tuple) or len(pair.expressions) != 2:
            raise SQLRefused(f"SELECT {text}", f"{name} must be a pair (lower, upper)")
        bounds = (_number(f"SELECT {text}", pair.expressions[0]), _number(f"SELECT {text}", pair.expressions[1]))
        kind = "group" if name.endswith("group") else "row"
    if not positional:
        raise SQLRefused(f"SELECT {text}", "needs an argument")
    first = positional[0]
    if isinstance(first, exp.Star):
        if function != "COUNT" or len(positional) != 1:
            raise SQLRefused(f"SELECT {text}", "* is an argument of COUNT(*) only")
        return Call(function, None, bounds=bounds, bounds_kind=kind, text=text)
    distinct = isinstance(first, exp.Distinct)
    if distinct:
        if function != "COUNT" or len(first.expressions) != 1 or bounds is not None:
            raise SQLRefused(f"SELECT {text}", "DISTINCT is supported as COUNT(DISTINCT column) only, without bounds")
        first = first.expressions[0]
    q = None
    expected = 2 if function == "PERCENTILE_CONT" else 1
    if len(positional) != expected:
        raise SQLRefused(f"SELECT {text}", f"{function} takes {'a value and a percentile' if expected == 2 else 'one value'}"
                                           f"{' and named bounds' if not distinct else ''}")
    if function == "PERCENTILE_CONT":
        q = float(_number(f"SELECT {text}", positional[1]))
        if not 0 <= q <= 1:
            raise SQLRefused(f"SELECT {text}", f"the percentile must be in [0, 1], got {q!r}")
    if any(isinstance(n, (exp.AggFunc, exp.Subquery, exp.Window)) for n in first.walk()):
        raise SQLRefused(f"SELECT {text}", "the argument must be a value of the row (no nested aggregate, "
                                           "window function or subquery)")
    return Call(function, first, distinct=distinct, q=q, bounds=bounds, bounds_kind=kind, text=text)


def _order(select: Any, names: list[str]) -> list[tuple[str, bool]]:
    """ORDER BY released columns only (post-processing of the release)."""
    exp = sqlglot().exp
    order = select.args.get("order")
    if order is None:
        return []
    out = []
    for item in order.expressions:
        target = item.this
        if not isinstance(target, exp.Column) or target.table or target.name not in names:
            raise SQLRefused("ORDER BY", f"{_sql(target)!r} is not a column of the release: ordering by a true "
                                         "value would reveal it; order by a selected key or DP aggregate's name")
        out.append((target.name, bool(item.args.get("desc"))))
    return out
