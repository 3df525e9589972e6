"""The ``dpselect sql`` command: a ``SELECT WITH DIFFERENTIAL_PRIVACY`` query over files
(:func:`dpselect.sql`; docs/sql.md). The query is parsed, mapped and checked with the library's
plan before DuckDB reads anything; the release, its guarantee sidecar and, on request, the data
holder's report are written together (:func:`dpselect.io.outputs.write_outputs`)."""
from __future__ import annotations

import argparse
import json
import warnings
from typing import Any

from dpselect.cli.common import (
    EXIT_CODES,
    EXIT_DATA,
    EXIT_INPUT,
    EXIT_OK,
    EXIT_OUTPUT,
    EXIT_RNG,
    EXIT_USAGE,
    Fail,
    add_threads_argument,
    deliver,
    check_output_types,
    is_rng_failure,
    note,
    number,
    output_format,
    positive_int_or_auto,
    probe_rng,
    rng_message,
    write_err,
)

__all__ = ["add_parser", "run"]

_EXAMPLE = """\
example:
  dpselect sql "SELECT WITH DIFFERENTIAL_PRIVACY
                  OPTIONS (epsilon = 1, delta = 1e-6, max_groups_contributed = 2, privacy_unit_column = user_id)
                  country, COUNT(*, contribution_bounds_per_group => (0, 5)) AS visits
                FROM 'visits.parquet' GROUP BY country" -o released.csv
  (writes released.csv and released.csv.guarantee.json)
"""

_EPILOG = _EXAMPLE + "\n" + EXIT_CODES + """
FROM reads files named in the query ('visits.parquet', read_csv('visits.csv')) or given a name
with --table NAME=FILE (Parquet or CSV). DuckDB runs the FROM, JOINs and WHERE; dpselect bounds
each privacy unit to max_groups_contributed groups and releases the keys and DP aggregates.
Without --max-contributions-per-partition, SUM, AVG and COUNT clamp each unit's total per group
(contribution_bounds_per_group, as BigQuery); with it, each unit keeps at most L rows per group
and each row is clamped (contribution_bounds_per_row; needed by PERCENTILE_CONT, VAR_POP,
STDDEV_POP and COUNT(DISTINCT column)). See docs/sql.md.
"""


def add_parser(commands: Any) -> None:
    """Add the ``sql`` command to the ``dpselect`` parser's subcommands."""
    cmd = commands.add_parser(
        "sql",
        help="a DP GROUP BY written in SQL: SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (...) ... GROUP BY ...",
        description="Release a SELECT WITH DIFFERENTIAL_PRIVACY query (BigQuery's syntax) under (epsilon,\n"
        "delta)-DP: DuckDB runs its FROM, JOINs and WHERE, dpselect bounds, selects and adds noise\n"
        "(dpselect.sql, the same release as dpselect aggregate).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmd.add_argument("query", metavar="QUERY", help="the SELECT WITH DIFFERENTIAL_PRIVACY query")
    cmd.add_argument("--table", "-t", action="append", default=[], metavar="NAME=FILE",
                     help="make the Parquet or CSV FILE readable as NAME in the query (repeatable)")
    cmd.add_argument("--max-contributions-per-partition", type=positive_int_or_auto, default=None, metavar="L",
                     help="keep at most L rows of each privacy unit in each group and clamp each row "
                     "(contribution_bounds_per_row); the OPTION of the same name in the query does the same")
    cmd.add_argument("--strategy", default=None, choices=("auto", "pi_opt", "release", "laplace", "gaussian"),
                     help="key selection mechanism (default auto)")
    cmd.add_argument("--noise", choices=("auto", "laplace", "gaussian"), default="auto",
                     help="each metric's noise (default auto)")
    cmd.add_argument("--confidence-level", type=number, default=None, metavar="P",
                     help="also output NAME_ci_low and NAME_ci_high per DP aggregate")
    cmd.add_argument("--output", "-o", default="-", metavar="OUT", help="output file (default: standard output)")
    cmd.add_argument("--output-format", choices=("csv", "parquet", "jsonl"),
                     help="output format (default: from the output name; csv on standard output)")
    cmd.add_argument("--report", metavar="FILE",
                     help="write the data holder's report (exact, NOT differentially private) to FILE as JSON, or "
                     "to stderr with '-'; never publish it")
    add_threads_argument(cmd)
    cmd.add_argument("--quiet", "-q", action="store_true", help="print nothing on stderr but errors")


def _tables(items: list[str]) -> dict[str, str]:
    tables: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path:
            raise Fail(EXIT_USAGE, f"--table expects NAME=FILE, got {item!r}")
        if name in tables:
            raise Fail(EXIT_USAGE, f"--table names {name!r} twice")
        tables[name.strip()] = path
    return tables


def _flags(message: str) -> str:
    """A message of the library with its parameters as this command's flags."""
    message = message.replace("as a parameter", "as --max-contributions-per-partition")
    message = message.replace("an OPTION or a parameter", "an OPTION or --max-contributions-per-partition")
    return message.replace("confidence_level", "--confidence-level")


def run(args: argparse.Namespace) -> int:
    """`dpselect sql`: check the query, run it, write the release, its sidecar and the report."""
    import dpselect
    from dpselect.errors import DPSelectWarning
    from dpselect.io.files import OutputError, check_destination, write_outputs
    from dpselect.ingest.rows import import_pyarrow
    from dpselect.sql.release import connect, plan_sql, reword, run_relation, shaped

    tables = _tables(args.table)
    parameters = dict(strategy=args.strategy or "auto", noise=args.noise, confidence_level=args.confidence_level)
    try:
        mapping, arguments = plan_sql(args.query, max_contributions_per_partition=args.max_contributions_per_partition,
                                      **parameters)
    except (ValueError, TypeError) as exc:
        raise Fail(EXIT_USAGE, _flags(str(exc))) from exc
    order = arguments.pop("order")
    to_stdout = args.output in (None, "-")
    out_fmt = output_format(args, to_stdout)
    protected = list(tables.values())
    try:
        where = check_destination(None if to_stdout else args.output, out_fmt, protected=protected)
        sidecar = args.output + ".guarantee.json" if where.mode == "replace" else None
        if args.report not in (None, "-"):
            check_destination(args.report, "bytes", protected=protected)
    except OutputError as exc:
        raise Fail(EXIT_OUTPUT, str(exc)) from exc
    probe_rng()
    try:
        table = run_relation(connect(None, tables), mapping)
    except (ValueError, TypeError) as exc:  # a file DuckDB cannot read is the input's fault, the rest the data's
        raise Fail(EXIT_INPUT if "IO Error" in str(exc) else EXIT_DATA, _flags(str(exc))) from exc
    pa = import_pyarrow()
    check_output_types(pa.schema([table.schema.field(c) for c in mapping.by]), out_fmt)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DPSelectWarning)
            result = shaped(dpselect.aggregate(table, **arguments), mapping, order)
    except RuntimeError as exc:
        if is_rng_failure(exc):
            raise Fail(EXIT_RNG, rng_message(exc)) from exc
        raise
    except (ValueError, TypeError, OverflowError) as exc:
        raise Fail(EXIT_DATA, _flags(reword(str(exc)))) from exc
    del table
    guarantee = {**result.guarantee.as_dict(), "bounds": {c: [lo, hi] for c, (lo, hi) in sorted(result.bounds.items())},
                 "query": args.query}
    report = result.report() if args.report is not None else None
    items: list[tuple[Any, str | None, str]] = []
    if sidecar is not None:
        items.append(((json.dumps(guarantee, indent=2) + "\n").encode(), sidecar, "bytes"))
    if report is not None and args.report != "-":
        items.append(((json.dumps({"differentially_private": False, **report.as_dict()}, indent=2) + "\n").encode(),
                      args.report, "bytes"))
    items.append((result.frame, None if to_stdout else args.output, out_fmt))
    for warning in caught:
        if issubclass(warning.category, DPSelectWarning):
            note(args, f"warning: {_flags(reword(str(warning.message)))}")
    if not deliver(lambda: write_outputs(items, protected=protected, log=args.write_log,
                                         private=[args.report] if args.report not in (None, "-") else []), to_stdout):
        return EXIT_OK
    note(args, f"released {result.frame.num_rows} groups to {'standard output' if to_stdout else repr(args.output)}.")
    note(args, str(result.guarantee))
    if report is not None and args.report == "-":
        write_err(str(report))
    return EXIT_OK
