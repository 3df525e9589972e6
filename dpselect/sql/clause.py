"""The ``WITH DIFFERENTIAL_PRIVACY OPTIONS (...)`` clause of BigQuery's DP SELECT, found with
sqlglot's tokenizer and cut out of the query (docs/sql.md, "Parsing").

sqlglot parses no dialect's DP clause (its BigQuery dialect stops at ``SELECT WITH``), so the
clause is located among the query's *tokens* — never by a pattern over the raw text, which would
match inside a string literal or a comment — blanked out of the text (offsets kept, so sqlglot's
error positions still point into the query as written), and its options are parsed by sqlglot
as a select list of ``name = value`` comparisons."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpselect.sql.dialect import SQLRefused, dialect, sqlglot

__all__ = ["DPClause", "cut_clause", "OPTION_NAMES"]

# The options dpselect reads (BigQuery's, plus dpselect's rows-per-group bound); BigQuery's
# others are refused by name in dpselect.sql.query.
OPTION_NAMES = ("epsilon", "delta", "max_groups_contributed", "privacy_unit_column",
                "max_contributions_per_partition")


@dataclass(frozen=True)
class DPClause:
    """The query with the clause blanked out, and the clause's options (name -> sqlglot node)."""

    query: str
    options: dict[str, Any]


def cut_clause(query: str) -> DPClause:
    """Find the one ``SELECT WITH DIFFERENTIAL_PRIVACY [OPTIONS (...)]`` of ``query`` at the top
    level (not inside parentheses), blank it out and parse its options."""
    if not isinstance(query, str) or not query.strip():
        raise TypeError(f"query must be a non-empty SQL string, got {type(query).__name__} {query!r}"[:200])
    glot = sqlglot()
    TokenType = glot.tokens.TokenType
    try:
        tokens = dialect().tokenize(query)
    except glot.errors.TokenError as exc:
        raise SQLRefused("query", f"cannot be read as SQL: {exc}") from None
    found: list[tuple[int, int, int]] = []  # (index of the WITH token, paren depth, index after the clause)
    depth = 0
    for i, token in enumerate(tokens):
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
        elif (token.token_type == TokenType.SELECT and i + 2 < len(tokens)
              and tokens[i + 1].token_type == TokenType.WITH
              and tokens[i + 2].text.upper() == "DIFFERENTIAL_PRIVACY"):
            found.append((i + 1, depth, i + 3))
    if not found:
        raise SQLRefused("SELECT", "the query has no SELECT WITH DIFFERENTIAL_PRIVACY clause: only differentially "
                                   "private aggregations are released (SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS "
                                   "(epsilon = ..., delta = ..., max_groups_contributed = ..., privacy_unit_column "
                                   "= ...) key, COUNT(*) FROM ... GROUP BY key)")
    if len(found) > 1:
        raise SQLRefused("SELECT WITH DIFFERENTIAL_PRIVACY", "the query has several DIFFERENTIAL_PRIVACY clauses: "
                                                             "one release per query (run one query each)")
    start, depth, after = found[0]
    if depth != 0:
        raise SQLRefused("SELECT WITH DIFFERENTIAL_PRIVACY", "the DP SELECT is inside parentheses: a query over "
                                                             "the released table (a subquery wrapping it) is not "
                                                             "run here; query the result frame instead")
    options: dict[str, Any] = {}
    end = tokens[after - 1].end
    if after < len(tokens) and tokens[after].text.upper() == "OPTIONS":
        if after + 1 >= len(tokens) or tokens[after + 1].token_type != TokenType.L_PAREN:
            raise SQLRefused("OPTIONS", "expected OPTIONS (name = value, ...)")
        level, close = 0, None
        for j in range(after + 1, len(tokens)):
            level += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(tokens[j].token_type, 0)
            if level == 0:
                close = j
                break
        if close is None:
            raise SQLRefused("OPTIONS", "the parenthesis after OPTIONS is never closed")
        inner = query[tokens[after + 1].end + 1:tokens[close].start]
        options = _options(inner)
        end = tokens[close].end
    begin = tokens[start].start
    return DPClause(query[:begin] + " " * (end + 1 - begin) + query[end + 1:], options)


def _options(text: str) -> dict[str, Any]:
    """``name = value, ...`` as parsed by sqlglot (a select list of equalities)."""
    glot = sqlglot()
    if not text.strip():
        return {}
    try:
        parsed = glot.parse_one(f"SELECT {text}", read=dialect())
    except glot.errors.ParseError as exc:
        raise SQLRefused("OPTIONS", f"expected name = value, ...: {_first_line(exc)}") from None
    exp = glot.exp
    options: dict[str, Any] = {}
    for item in parsed.expressions:
        if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column) or item.this.table:
            raise SQLRefused("OPTIONS", f"expected name = value, got {item.sql(dialect=dialect())!r}")
        name = item.this.name.lower()
        if name in options:
            raise SQLRefused("OPTIONS", f"{name} is given twice")
        options[name] = item.expression
    return options


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
