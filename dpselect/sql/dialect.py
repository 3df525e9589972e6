"""sqlglot and DuckDB for :mod:`dpselect.sql`, imported on first use (the ``sql`` extra), and the
SQL dialect its queries are read in: DuckDB's, with BigQuery's DP aggregate functions taking
any arguments (docs/sql.md, "Parsing").

sqlglot checks each known function's argument count (``AVG(x)`` takes one), so BigQuery's DP
forms (``AVG(x, contribution_bounds_per_group => (0, 100))``) would not parse; in this dialect
those functions are parsed as plain calls whose arguments dpselect.sql.query reads itself."""
from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from dpselect._optional import require
from dpselect.errors import DPSelectError

__all__ = ["DP_FUNCTIONS", "SQLRefused", "dialect", "duckdb", "sqlglot"]

_FEATURE = "dpselect.sql (SELECT WITH DIFFERENTIAL_PRIVACY)"
# BigQuery's differentially private aggregate functions (and COUNT(DISTINCT ...)).
DP_FUNCTIONS = ("COUNT", "SUM", "AVG", "PERCENTILE_CONT", "VAR_POP", "STDDEV_POP")


class SQLRefused(DPSelectError, ValueError):
    """A query that is not a bounded differentially private aggregation, or that dpselect cannot
    map honestly to :func:`dpselect.aggregate`; the message starts with the clause."""

    def __init__(self, clause: str, why: str) -> None:
        super().__init__(f"{clause}: {why}")
        self.clause = clause


def sqlglot() -> ModuleType:
    glot = require("sqlglot", feature=_FEATURE, extra="sql")
    require("sqlglot.expressions", feature=_FEATURE, extra="sql")
    require("sqlglot.errors", feature=_FEATURE, extra="sql")
    require("sqlglot.tokens", feature=_FEATURE, extra="sql")
    return glot


def duckdb() -> ModuleType:
    return require("duckdb", feature=_FEATURE, extra="sql")


@functools.lru_cache(maxsize=1)
def dialect() -> Any:
    """DuckDB's dialect with the DP functions as plain calls (an instance, built once)."""
    sqlglot()
    from sqlglot import exp
    from sqlglot.dialects.duckdb import DuckDB

    def call(name: str) -> Any:
        return lambda args: exp.Anonymous(this=name, expressions=args)

    class DPDuckDB(DuckDB):
        class Parser(DuckDB.Parser):
            FUNCTIONS = {**DuckDB.Parser.FUNCTIONS, **{name: call(name) for name in DP_FUNCTIONS}}

    return DPDuckDB()
