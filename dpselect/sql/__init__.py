"""A DP GROUP BY written in SQL: BigQuery's ``SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (...)``,
its FROM/JOIN/WHERE run by DuckDB, released by :func:`dpselect.aggregate` (docs/sql.md).

Needs the ``sql`` extra (duckdb, sqlglot, pyarrow), imported on first use:

* :mod:`~dpselect.sql.dialect`: the optional imports and the dialect queries are read in;
* :mod:`~dpselect.sql.clause`: the DIFFERENTIAL_PRIVACY clause, found by sqlglot's tokenizer;
* :mod:`~dpselect.sql.query`: the SELECT read into keys and DP aggregate calls, or refused;
* :mod:`~dpselect.sql.mapping`: that query as one :func:`dpselect.aggregate` call;
* :mod:`~dpselect.sql.release`: :func:`sql`, which runs it.

Internal: the modules of this package may change in any release; the public face is
:func:`dpselect.sql` (in ``dpselect.__all__``) and the ``dpselect sql`` command.
"""
from dpselect.sql.dialect import SQLRefused
from dpselect.sql.release import sql

__all__ = ["SQLRefused", "sql"]
