"""The ``dpselect aggregate`` command: a DP GROUP BY of a file (:func:`dpselect.aggregate`).

Every parameter is checked before the input is read: by the CLI (:func:`_aggregate_plan`), then
by the library itself on the same values (:func:`_check_with_library`). The needed columns of
the whole input are read into memory; the release, its guarantee sidecar and, on request, the
data holder's report are written together (:func:`dpselect.io.outputs.write_outputs`).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any, Callable

from dpselect.cli.common import (
    EXIT_CODES,
    EXIT_DATA,
    EXIT_INPUT,
    EXIT_OK,
    EXIT_OUTPUT,
    EXIT_RNG,
    EXIT_USAGE,
    add_threads_argument,
    PAPER,
    Fail,
    deliver,
    add_privacy_arguments,
    byte_size,
    check_output_types,
    is_rng_failure,
    note,
    number,
    output_format,
    positive_int_or_auto,
    probe_rng,
    rng_message,
    shown,
    write_err,
)

__all__ = ["add_parser", "run"]

_AGGREGATE_EXAMPLE = """\
example:
  dpselect aggregate purchases.csv --privacy-unit user_id --by country \\
      --epsilon 1 --delta 1e-6 --max-partitions-contributed 2 --max-contributions-per-partition 5 \\
      --metric users --metric count --metric spend=sum:amount:0:500 --metric mean:amount:0:500 \\
      --confidence-level 0.95 --report report.json -o released.csv
  (writes released.csv and released.csv.guarantee.json; report.json is for you only)
"""

_AGGREGATE_EPILOG = _AGGREGATE_EXAMPLE + "\n" + EXIT_CODES.replace(
    "or has null privacy units", "has null privacy units,\n       or a value column holds something other than numbers, or a noisy statistic of\n"
    "       this data does not fit in int64 at these --max-* bounds and --metric bounds") + """
--max-partitions-contributed K and --max-contributions-per-partition L are required: each user
keeps at most K keys and L rows in each (chosen at random), the rest is dropped, and the noise
grows with both. Choose them from what is known without this data (the limits of the system
that produced it, its public description, a held-out sample), never from exact statistics of
the data released, such as its --report: a choice made from those is not covered by the
guarantee.

metrics (--metric [NAME=]SPEC, repeatable; the output column is NAME, or the default shown):
  users, count_distinct_units   privacy units (users) kept in the key after bounding   [users]
  count, rows                   rows kept in the key after bounding                    [count]
  sum:COL, sum:COL:LO:HI        sum of the numeric column COL over the kept rows        [sum_COL]
  mean:COL, mean:COL:LO:HI      mean of COL over the kept rows                          [mean_COL]
  quantile:COL:Q[:LO:HI]        the Q-quantile of COL (Q in [0, 1], e.g. 0.9)           [pQ_COL, p90_COL]
  quantile:COL:Q1,Q2,...[:LO:HI]  several quantiles of COL from one noisy tree, for one
                                share of epsilon       [quantiles_COL_p50, quantiles_COL_p90, ...]
  median:COL[:LO:HI]            the median of COL (the 0.5-quantile)                    [median_COL]
  min:COL[:LO:HI], max:COL[...] the 0- and 1-quantiles of COL: values whose rank is within
                                the noise of the smallest / largest (not the exact extremes)
                                                                                        [min_COL, max_COL]
  variance:COL, variance:COL:LO:HI  population variance of COL over the kept rows   [variance_COL]
  stddev:COL, stddev:COL:LO:HI  population standard deviation of COL                    [stddev_COL]
  count_distinct:COL, count_distinct:COL:M  distinct values of COL (any type) in the kept rows;
                                M: at most M distinct values per user and key   [count_distinct_COL]
Each value of COL is clamped to [LO, HI]. A column is clamped once: its metrics must give the
same LO:HI, or some give it and the others none. A column no metric gives bounds to gets them
privately (APPROX_BOUNDS, with its own share of epsilon); the bounds used are in the sidecar.
Column names containing ':' cannot be used in a SPEC. A statistic without a value (a sum or
mean of a key whose own bounds were not found, --bounds-scope partition) is written empty: an
empty CSV cell, a JSON null, a Parquet null. JSON lines output is strict JSON: a float NaN or
infinite key is written as the string "NaN", "Infinity" or "-Infinity".

Value columns are read from CSV and JSON lines as float64 (a JSON string holding a number is
read as that number), from Parquet with their declared integer or float type; --value-type
COL=int64 reads COL as integers instead (then sums are released as whole numbers),
--value-type COL=float64 converts a Parquet column (decimal, boolean, text). An empty cell, null, NaN or infinity in a value column is an error.
Keys and privacy units are read as by 'dpselect select' (text from CSV and JSON lines).

The budget (epsilon, delta) is split in equal shares of epsilon between the key selection
(with all of delta), each column whose bounds are found privately, and each metric; the
guarantee printed on stderr, and written to OUT.guarantee.json (or --guarantee-json FILE), lists
every step. No sidecar is written for standard output, a pipe or a device unless
--guarantee-json names a file. Output rows are sorted by key.

The input is read whole: the needed columns (privacy unit, keys, value columns) of every row
are held in memory. Unlike 'dpselect select', files larger than memory are not supported.
See docs/aggregate.md and docs/privacy/aggregate.md.
"""

_AGGREGATE_STRATEGIES = ("auto", "pi_opt", "release", "laplace", "gaussian")

_VALUE_TYPES = ("float64", "int64")


def add_parser(commands: Any) -> None:
    """Add the ``aggregate`` command to the ``dpselect`` parser's subcommands."""
    agg = commands.add_parser(
        "aggregate",
        help="a DP GROUP BY: release keys and per-key user counts, row counts, sums and means",
        description="Release, under (epsilon, delta)-DP, the keys of a GROUP BY over INPUT that pass a\n"
        "differentially private selection and, per key, the statistics asked for with --metric\n"
        "(dpselect.aggregate). Each user is bounded once; the keys and every metric come from the\n"
        "same kept rows. Writes the release to OUT, its guarantee to OUT.guarantee.json and to\n"
        "stderr, and with --report the data holder's report (exact, NOT differentially private).",
        epilog=_AGGREGATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    agg.add_argument("input", metavar="INPUT",
                     help="CSV (.csv, .tsv, optionally .gz/.bz2/.zst/.lz4), Parquet, or JSON lines file; read whole "
                     "into memory (needed columns only)")
    agg.add_argument("--privacy-unit", "-u", required=True, metavar="COL", help="column identifying the user")
    agg.add_argument("--by", "-b", required=True, action="append", metavar="COL",
                     help="a partition column; repeat it for a key over several columns "
                     "(--by a --by b is GROUP BY a, b)")
    add_privacy_arguments(agg, required=True, selection_options=False)
    agg.add_argument("--max-contributions-per-partition", type=positive_int_or_auto, default=None, metavar="L",
                     help="required: keep at most L rows of each user in each of its partitions, chosen "
                     "uniformly at random; row counts, sums and means get L times the noise. 'auto': L "
                     "chosen privately from the rows, with a share of epsilon")
    agg.add_argument("--metric", "-m", required=True, action="append", metavar="[NAME=]SPEC",
                     help="a statistic per released key, repeatable: users, count, sum:COL[:LO:HI] or "
                     "mean:COL[:LO:HI] (see below); NAME= names its output column")
    agg.add_argument("--value-type", action="append", default=[], metavar="COL=TYPE",
                     help="read the value column COL as TYPE, float64 or int64 (default: float64 from CSV "
                     "and JSON lines, the declared type from Parquet)")
    agg.add_argument("--confidence-level", type=number, default=None, metavar="P",
                     help="also output NAME_ci_low and NAME_ci_high per metric: intervals holding the value "
                     "after bounding and clamping, before noise, with probability at least P (e.g. 0.95)")
    agg.add_argument("--public-partitions", metavar="FILE",
                     help="a file (CSV, Parquet, JSON lines) listing keys known without the data, in the --by "
                     "columns: exactly these keys are released (with statistics 0 plus noise where absent), "
                     "no selection runs and delta may be 0")
    agg.add_argument("--strategy", default=None, choices=_AGGREGATE_STRATEGIES,
                     help="key selection mechanism (default auto: the one that needs the fewest users to "
                     "release a key at the selection's share, from the parameters only); not with "
                     "--public-partitions")
    agg.add_argument("--noise", choices=("auto", "laplace", "gaussian"), default="auto",
                     help="each metric's noise: discrete Laplace (pure epsilon-DP), discrete Gaussian (zCDP, "
                     "needs delta > 0), or auto (the default: the one with the smaller standard deviation, "
                     "from the parameters alone; the guarantee says which each metric got and why)")
    agg.add_argument("--bounds-scope", choices=("dataset", "partition"), default="dataset",
                     help="for a sum or mean given no bounds: find them once over all kept values (dataset, "
                     "the default) or per released key from its own values (partition; a key where none is "
                     "found gets an empty value: an empty CSV cell, null in JSON lines and Parquet)")
    agg.add_argument("--drop-null-privacy-units", action="store_true",
                     help="leave out rows whose privacy unit is null (default: refuse them); their number "
                     "is reported on stderr, for you only (it is exact, not private)")
    agg.add_argument("--output", "-o", default="-", metavar="OUT", help="output file (default: standard output)")
    agg.add_argument("--output-format", choices=("csv", "parquet", "jsonl"),
                     help="output format (default: from the output name; csv on standard output, pipes and "
                     "devices)")
    agg.add_argument("--guarantee-json", metavar="FILE",
                     help="where to write the guarantee as JSON (default: OUT.guarantee.json next to a file "
                     "output; none for standard output, pipes and devices)")
    agg.add_argument("--report", metavar="FILE",
                     help="write the data holder's report (what bounding, clamping and selection lost) to FILE "
                     "as JSON (a new file readable by you only), or to stderr as text with '-'. Exact and "
                     "NOT differentially private: never publish it, never next to the release")
    agg.add_argument("--input-format", choices=("csv", "parquet", "jsonl"),
                     help="input format (default: from the name)")
    agg.add_argument("--block-size", type=byte_size, default=None, metavar="BYTES",
                     help="bytes read per block of CSV or JSON lines (default 1M); a CSV row must fit in one block")
    add_threads_argument(agg)
    agg.add_argument("--quiet", "-q", action="store_true",
                     help="print nothing on stderr but errors and a --report - (no guarantee, summary or warnings)")


_METRIC_FORMS = ("users, count_distinct_units, count, rows, sum:COL, sum:COL:LO:HI, mean:COL or "
                 "mean:COL:LO:HI, quantile:COL:Q or quantile:COL:Q:LO:HI (Q: one or several as 0.5,0.9), median/min/max:COL or "
                 "median/min/max:COL:LO:HI, variance:COL, variance:COL:LO:HI, stddev:COL, stddev:COL:LO:HI, "
                 "count_distinct:COL or count_distinct:COL:M, each optionally as NAME=SPEC")
_QUANTILE_KINDS = ("quantile", "median", "min", "max")


def _bound_number(text: str) -> int | float:
    """A bound as written: an int for an integer literal (exact for integer columns), else a float."""
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        return float(text)


def _parse_metric(item: str) -> tuple[str, Any]:
    """(output column name, Metric) from a --metric value; Fail naming --metric otherwise."""
    import dpselect
    from dpselect.aggregation.grid import Grid

    def bad(why: str) -> Fail:
        return Fail(EXIT_USAGE, f"--metric {item!r}: {why}; the accepted forms are {_METRIC_FORMS}")

    name, sep, spec = item.partition("=")
    if not sep or ":" in name:  # no NAME= (a '=' after a ':' belongs to a column name)
        name, spec = "", item
    elif not name.strip():
        raise bad("the NAME before '=' is empty")
    kind, _, rest = spec.strip().partition(":")
    kind = kind.strip().lower()
    if kind in ("users", "count_distinct_units", "count", "rows"):
        if rest:
            raise bad(f"{kind} takes no column or bounds")
        counts_users = kind in ("users", "count_distinct_units")
        return (name or ("users" if counts_users else "count"),
                dpselect.count_distinct_units() if counts_users else dpselect.count())
    if kind == "count_distinct":
        return _parse_count_distinct(name, rest, bad)
    if kind not in ("sum", "mean", "variance", "stddev", *_QUANTILE_KINDS):
        raise bad(f"unknown metric {kind!r}" if kind else "the metric is empty")
    parts = rest.split(":")
    if not parts[0]:
        raise bad(f"{kind} needs a value column, as {kind}:COL or {kind}:COL:LO:HI" if kind != "quantile" else
                  "quantile needs a value column and a quantile, as quantile:COL:Q or quantile:COL:Q:LO:HI")
    q: list[float] | None = None
    if kind == "quantile":  # quantile:COL:Q[,Q...][:LO:HI]
        if len(parts) not in (2, 4):
            raise bad("expected quantile:COL:Q or quantile:COL:Q:LO:HI (Q in [0, 1], e.g. 0.9, or several "
                      "separated by commas, e.g. 0.5,0.9)")
        q = [_parse_quantile(text, bad) for text in parts[1].split(",")]
        if len(set(q)) != len(q):
            raise bad(f"the quantiles {shown(parts[1])} list one twice: give each once")
        parts = [parts[0], *parts[2:]]
    if len(parts) not in (1, 3):
        raise bad(f"expected {kind}:COL or {kind}:COL:LO:HI (two bounds), got {len(parts) - 1} after the column")
    column, bounds = parts[0], None
    if len(parts) == 3:
        try:
            lo, hi = _bound_number(parts[1]), _bound_number(parts[2])
        except ValueError:
            raise bad(f"the bounds {shown(parts[1])} and {shown(parts[2])} must be numbers") from None
        try:
            finite = math.isfinite(lo) and math.isfinite(hi)
        except OverflowError:  # an integer beyond every float
            raise bad(f"the bounds must be at most {sys.float_info.max:.17g} in magnitude") from None
        if not finite:
            raise bad("the bounds must be finite numbers")
        if lo > hi:
            raise bad(f"the bounds are inverted: LO = {shown(parts[1])} is above HI = {shown(parts[2])}")
        try:  # what the clamping grid accepts (an integer bound must be a float exactly, ...)
            Grid.for_bounds(lo, hi)
        except (ValueError, TypeError, OverflowError) as exc:
            raise bad(str(exc)) from None
        bounds = (lo, hi)
    if q is not None:
        from dpselect.aggregation.quantiles import suffix

        if len(q) > 1:  # one tree, one share: columns NAME_p50, NAME_p90, ...
            try:
                several = dpselect.quantile(column, q, bounds=bounds)
            except ValueError as exc:  # two quantiles with one column name
                raise bad(str(exc).replace("quantile(..., q=)", "the quantiles")) from None
            return name or f"quantiles_{column}", several
        return name or f"{suffix(q[0])}_{column}", dpselect.quantile(column, q[0], bounds=bounds)
    if kind in _QUANTILE_KINDS:
        make_q = {"median": dpselect.median, "min": dpselect.min, "max": dpselect.max}[kind]
        return name or f"{kind}_{column}", make_q(column, bounds=bounds)
    make = {"sum": dpselect.sum, "mean": dpselect.mean, "variance": dpselect.variance, "stddev": dpselect.stddev}[kind]
    return name or f"{kind}_{column}", make(column, bounds=bounds)


def _parse_quantile(text: str, bad: Callable[[str], Fail]) -> float:
    """One Q of quantile:COL:Q (a number in [0, 1])."""
    try:
        q = float(text)
    except ValueError:
        raise bad(f"the quantile {shown(text)} must be a number in [0, 1] (e.g. 0.9)") from None
    if not 0.0 <= q <= 1.0:  # NaN fails too
        raise bad(f"the quantile {shown(text)} must be in [0, 1] (0.5 for the median, 0.9 for the 90th percentile)")
    return q


def _parse_count_distinct(name: str, rest: str, bad: Callable[[str], Fail]) -> tuple[str, Any]:
    """count_distinct:COL or count_distinct:COL:M (M: max_values_per_unit, a positive integer)."""
    import dpselect

    parts = rest.split(":")
    if not parts[0]:
        raise bad("count_distinct needs a column, as count_distinct:COL or count_distinct:COL:M")
    if len(parts) > 2:
        raise bad(f"expected count_distinct:COL or count_distinct:COL:M, got {len(parts) - 1} fields after the column")
    cap = None
    if len(parts) == 2:
        if not parts[1].strip().isdigit() or not 1 <= int(parts[1]) < 2**32:
            raise bad(f"M = {shown(parts[1])} must be a positive integer below 2**32 (the most distinct values one "
                      "user adds to one key)")
        cap = int(parts[1])
    return name or f"count_distinct_{parts[0]}", dpselect.count_distinct(parts[0], max_values_per_unit=cap)


def _require_contribution_bounds(args: argparse.Namespace) -> None:
    """κ and L∞ have no default: a default of 1 silently keeps one row of each user, which on
    most real data is a small part of it."""
    missing = [flag for flag, value in (("--max-partitions-contributed K", args.max_partitions_contributed),
                                        ("--max-contributions-per-partition L", args.max_contributions_per_partition))
               if value is None]
    if missing:
        raise Fail(EXIT_USAGE, (
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} required: each user keeps at most K "
            "partitions (keys) and L rows in each, the rest is dropped, and the noise of the statistics grows with "
            "K and L. Choose them from what is known without this data (the limits of the system that produced "
            "it, public knowledge, a held-out sample), never from exact statistics of the data released (such "
            "as --report): a choice made from them is not covered by the guarantee"))


def _aggregate_plan(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The metrics by output name and the value columns' read types (None: as declared),
    after checking every value typed, with errors naming the flags."""
    by = list(args.by)
    _require_contribution_bounds(args)
    if not math.isfinite(args.epsilon) or args.epsilon <= 0:
        raise Fail(EXIT_USAGE, f"--epsilon must be a finite number > 0, got {args.epsilon:g}")
    if not math.isfinite(args.delta) or args.delta < 0 or args.delta >= 1:
        raise Fail(EXIT_USAGE, f"--delta must be in (0, 1), got {args.delta:g}")
    if args.public_partitions and args.strategy is not None:
        raise Fail(EXIT_USAGE, "--strategy does not apply with --public-partitions: the listed keys are released "
                               "as they are, no selection runs")
    if args.delta == 0 and not args.public_partitions:
        raise Fail(EXIT_USAGE, f"--delta must be > 0: with delta = 0 no key can be released (Theorem 2 of "
                               f"{PAPER}: under pure DP the set of released keys cannot depend on the data); "
                               "delta may be 0 with --public-partitions")
    if args.confidence_level is not None and not 0 < args.confidence_level < 1:
        raise Fail(EXIT_USAGE, f"--confidence-level must be in (0, 1), e.g. 0.95, got {args.confidence_level:g}")
    twice = sorted({c for c in by if by.count(c) > 1})
    if twice:
        raise Fail(EXIT_USAGE, f"--by names {', '.join(repr(c) for c in twice)} more than once")
    if args.privacy_unit in by:
        raise Fail(EXIT_USAGE, f"--privacy-unit {args.privacy_unit!r} cannot also be a --by column")
    metrics: dict[str, Any] = {}
    for item in args.metric:
        name, metric = _parse_metric(item)
        if name in metrics:
            raise Fail(EXIT_USAGE, f"--metric: two metrics would be written to the column {name!r}; name one "
                                   "of them with NAME=SPEC (e.g. --metric spend=sum:amount)")
        metrics[name] = metric
    value_columns = sorted({m.column for m in metrics.values() if m.column is not None and m.kind != "count_distinct"})
    distinct_columns = sorted({m.column for m in metrics.values() if m.kind == "count_distinct"})
    if args.privacy_unit in distinct_columns:
        raise Fail(EXIT_USAGE, f"--metric count_distinct:{args.privacy_unit}: that counts the --privacy-unit column; "
                               "use --metric users (the users in each key, with noise of sensitivity 1, not "
                               "--max-contributions-per-partition)")
    for column in value_columns:
        if column == args.privacy_unit or column in by:
            role = "--privacy-unit" if column == args.privacy_unit else "a --by column"
            raise Fail(EXIT_USAGE, f"--metric: the value column {column!r} is also {role}; sum or average "
                                   "another column (or a copy of it under another name)")
    bounds: dict[str, tuple[Any, Any]] = {}
    for m in metrics.values():
        if m.column is not None and m.bounds is not None:
            first = bounds.setdefault(m.column, m.bounds)
            if first != m.bounds:
                raise Fail(EXIT_USAGE, f"--metric: the column {m.column!r} is given two different bounds, "
                                       f"{first[0]}:{first[1]} and {m.bounds[0]}:{m.bounds[1]}; a column is "
                                       "clamped once, so give the same LO:HI (or none) to each of its metrics")
    from dpselect.aggregation.quantiles import output_columns

    outputs = list(by)
    for name, metric in metrics.items():
        for column in output_columns(name, metric):  # NAME, or NAME_p50, NAME_p90, ... of several quantiles
            if column in {args.privacy_unit, *by, *value_columns, *distinct_columns}:
                raise Fail(EXIT_USAGE, f"--metric: the output name {column!r} is also an input column "
                                       "(--privacy-unit, --by or a value column); choose another with NAME=SPEC")
            outputs.append(column)
            if args.confidence_level is not None:
                outputs += [f"{column}_ci_low", f"{column}_ci_high"]
    clash = sorted({c for c in outputs if outputs.count(c) > 1})
    if clash:
        raise Fail(EXIT_USAGE, f"--metric: the output column(s) {', '.join(repr(c) for c in clash)} would be "
                               "written twice (with --confidence-level each metric adds NAME_ci_low and "
                               "NAME_ci_high); choose other names with NAME=SPEC")
    types: dict[str, str | None] = {}
    for item in args.value_type:
        column, sep, typ = item.partition("=")
        if not sep or not column or typ not in _VALUE_TYPES:
            raise Fail(EXIT_USAGE, f"--value-type expects COL=TYPE with TYPE one of {', '.join(_VALUE_TYPES)}; "
                                   f"got {item!r}")
        if column not in value_columns:
            raise Fail(EXIT_USAGE, f"--value-type {item!r}: {column!r} is not the column of a sum or mean "
                                   f"--metric (value columns: {', '.join(map(repr, value_columns)) or 'none'})")
        if column in types and types[column] != typ:
            raise Fail(EXIT_USAGE, f"--value-type gives the column {column!r} two types")
        types[column] = typ
    return metrics, {c: types.get(c) for c in value_columns}


def _same_file(a: str, b: str) -> bool:
    """Whether two paths name one file (existing or not; symlinks followed)."""
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def _aggregate_destinations(args: argparse.Namespace, out_fmt: str, to_stdout: bool) -> tuple[Any, Any]:
    """(sidecar path or None, report path, "-" or None), every destination checked before any work."""
    from dpselect.io.files import OutputError, check_destination

    protected = [args.input] + ([args.public_partitions] if args.public_partitions else [])
    try:
        where = check_destination(None if to_stdout else args.output, out_fmt, protected=protected)
    except OutputError as exc:
        raise Fail(EXIT_OUTPUT, str(exc)) from exc
    sidecar = args.guarantee_json
    if sidecar is not None:
        if sidecar in ("", "-"):
            raise Fail(EXIT_USAGE, "--guarantee-json needs a file name (the guarantee is printed on stderr too)")
        if not to_stdout and _same_file(sidecar, args.output):
            raise Fail(EXIT_USAGE, f"--guarantee-json {sidecar!r} is the output file; give it another name")
    elif where.mode == "replace":
        sidecar = args.output + ".guarantee.json"
    named = {"the input": args.input, "the --public-partitions file": args.public_partitions,
             "the output": None if to_stdout else args.output, "the guarantee sidecar": sidecar}
    if args.report is not None and args.report != "-":
        if not args.report:
            raise Fail(EXIT_USAGE, "--report needs a file name, or '-' for stderr")
        for what, path in named.items():
            if path is not None and _same_file(args.report, path):
                raise Fail(EXIT_USAGE, f"--report {args.report!r} is {what}: the report is exact and NOT "
                                       "differentially private, it must never overwrite or sit in place of "
                                       "another file; give it a name of its own")
    for flag, path in (("--guarantee-json", sidecar), ("--report", None if args.report in (None, "-") else args.report)):
        if path is None:
            continue
        try:
            check_destination(path, "bytes", protected=protected)
        except OutputError as exc:
            what = "the guarantee sidecar" if flag == "--guarantee-json" and args.guarantee_json is None else flag
            raise Fail(EXIT_OUTPUT, f"{what} {path!r}: {str(exc).replace(' with the output', '')}") from exc
    return sidecar, args.report


def _aggregate_flags(message: str) -> str:
    """A message of dpselect.aggregate (or its report) with its parameter names, those with an
    underscore that cannot be mistaken for words, turned into the CLI's flags."""
    message = message.replace("null_privacy_units='drop'", "--drop-null-privacy-units")
    for choice in ("auto", "laplace", "gaussian"):
        message = message.replace(f"noise={choice!r}", f"--noise {choice}")
    for name in ("max_partitions_contributed", "max_contributions_per_partition", "confidence_level",
                 "public_partitions", "privacy_unit"):
        flag = f"--{name.replace('_', '-')}"
        message = message.replace(f"{name}=", f"{flag} ").replace(name, flag)
    return message


def run(args: argparse.Namespace) -> int:
    """`dpselect aggregate`: read the needed columns, call dpselect.aggregate, write the release,
    its guarantee sidecar and, if asked, the data holder's report."""
    import json

    import dpselect
    from dpselect.io.files import (
        DEFAULT_BLOCK_SIZE,
        ColumnError,
        InputError,
        ValueColumnError,
        detect_format,
        open_batches,
        write_outputs,
    )
    from dpselect.errors import DPSelectWarning
    from dpselect.ingest.rows import (
        ColumnTypeError,
        NullPrivacyUnitError,
        NullPrivacyUnitsDropped,
        check_column_types,
        import_pyarrow,
    )

    pa = import_pyarrow()
    # Everything the user typed is checked before the input is touched: by the CLI, then by
    # the library on the same parameters.
    metrics, read_types = _aggregate_plan(args)
    _check_with_library(args, metrics)
    by = list(args.by)
    try:
        in_fmt = detect_format(args.input, args.input_format, "input")
    except ValueError as exc:
        raise Fail(EXIT_USAGE, str(exc)) from exc
    to_stdout = args.output in (None, "-")
    out_fmt = output_format(args, to_stdout)
    sidecar, report_to = _aggregate_destinations(args, out_fmt, to_stdout)
    probe_rng()

    # Value columns: float64 from text formats unless --value-type says int64; Parquet keeps
    # its declared type unless --value-type names one.
    value_types = {c: pa.int64() if t == "int64" else pa.float64() for c, t in read_types.items()
                   if t is not None or in_fmt != "parquet"}
    distinct = [m.column for m in metrics.values() if m.kind == "count_distinct" and m.column not in read_types]
    columns = [args.privacy_unit, *by, *read_types, *dict.fromkeys(c for c in distinct if c not in by)]
    block_size = args.block_size or DEFAULT_BLOCK_SIZE
    try:
        source = open_batches(args.input, in_fmt, columns, 1 << 20, block_size, value_types=value_types)
        try:
            check_column_types(source.schema, args.privacy_unit, by)
        except ColumnTypeError as exc:
            role = "--privacy-unit" if exc.role == "privacy_unit" else "--by"
            raise Fail(EXIT_DATA, f"{role} column {exc.column!r} of {args.input!r} has type {exc.type}: "
                                  f"{exc.reason}") from exc
        for column in read_types:
            typ = source.schema.field(column).type
            if not (pa.types.is_integer(typ) or pa.types.is_floating(typ)) or pa.types.is_float16(typ):
                raise Fail(EXIT_DATA, f"--metric value column {column!r} of {args.input!r} has type {typ}: a "
                                      "value column must hold integers or floats (float32/float64); pass "
                                      f"--value-type {column}=float64 (or int64) to convert it")
        check_output_types(pa.schema([source.schema.field(c) for c in by]), out_fmt)
        table = pa.Table.from_batches(list(source.batches), schema=source.schema)
    except InputError as exc:
        raise Fail(EXIT_INPUT, str(exc)) from exc
    except ColumnError as exc:
        raise Fail(EXIT_DATA, str(exc)) from exc
    except ValueColumnError as exc:
        raise Fail(EXIT_DATA, f"--metric {exc}. A value column must hold numbers of its type only "
                              "(float64 unless --value-type says int64); nothing was released") from exc
    except (pa.ArrowException, OSError, EOFError) as exc:
        raise Fail(EXIT_INPUT, f"cannot read {args.input!r} as {in_fmt}: {exc}") from exc

    public = _read_public_partitions(args) if args.public_partitions else None
    null_units = table.column(args.privacy_unit).null_count  # reported only if they are dropped
    try:
        with warnings.catch_warnings(record=True) as caught:
            # Dropped null privacy units are reported below, in the CLI's own words; the library's
            # other warnings (e.g. that bounding dropped most rows) too, with its flags, and not at all
            # under --quiet.
            warnings.simplefilter("ignore", NullPrivacyUnitsDropped)
            warnings.simplefilter("always", DPSelectWarning)
            result = dpselect.aggregate(table, **_aggregate_parameters(args, metrics), public_partitions=public)
        for other in caught:
            if not issubclass(other.category, DPSelectWarning):
                warnings.warn_explicit(other.message, other.category, other.filename, other.lineno)
    except NullPrivacyUnitError as exc:
        raise Fail(EXIT_DATA, (
            f"{exc.rows} row(s) of {args.input!r} have a null privacy unit (column {exc.column!r}); a null "
            "is not one person. Fill in the ids, or pass --drop-null-privacy-units to leave these rows "
            "out. Nothing was released."
        )) from exc
    except RuntimeError as exc:
        if is_rng_failure(exc):
            raise Fail(EXIT_RNG, rng_message(exc)) from exc
        raise
    except (ValueError, TypeError) as exc:
        # Every parameter passed _check_with_library: what fails now fails on this data.
        raise Fail(EXIT_DATA, f"{args.input!r}: {_aggregate_flags(str(exc))}") from exc
    except OverflowError as exc:  # a noisy statistic beyond int64: this data's sums at these scales
        raise Fail(EXIT_DATA, f"{args.input!r}: {_aggregate_flags(str(exc).split(';')[0])}; nothing was released. "
                              "The noise and the sums grow with --max-partitions-contributed, "
                              "--max-contributions-per-partition and the --metric bounds, the noise shrinks "
                              "with --epsilon: lower the first or raise the last") from exc
    del table

    # A statistic with no value (a sum or mean whose bounds were not found for its key) is an
    # empty value in every output format, never a NaN (which JSON cannot hold).
    released = _nan_as_null(result.frame, [name for name in result.frame.column_names if name not in by])
    guarantee = {**result.guarantee.as_dict(),
                 "bounds": {c: [lo, hi] for c, (lo, hi) in sorted(result.bounds.items())},
                 "metrics": {name: str(m) for name, m in metrics.items()},
                 "release": None if to_stdout else os.path.basename(args.output)}
    report = result.report() if report_to is not None else None  # built only when asked for
    # The sidecar and the report are renamed into place before the release: a release never
    # appears without its guarantee next to it.
    items: list[tuple[Any, str | None, str]] = []
    if sidecar is not None:
        items.append(((json.dumps(guarantee, indent=2) + "\n").encode(), sidecar, "bytes"))
    if report is not None and report_to != "-":
        document = {"differentially_private": False, **report.as_dict()}
        document["warnings"] = [_aggregate_flags(w) for w in document["warnings"]]
        items.append(((json.dumps(document, indent=2) + "\n").encode(), report_to, "bytes"))
    items.append((released, None if to_stdout else args.output, out_fmt))
    protected = [args.input] + ([args.public_partitions] if args.public_partitions else [])

    for warning in caught:
        if issubclass(warning.category, DPSelectWarning):
            note(args, f"warning: {_aggregate_flags(str(warning.message))}")
    if null_units:
        note(args, f"warning: dropped {null_units} row(s) with a null privacy unit (column {args.privacy_unit!r}). "
                   "This count is exact and NOT differentially private: it is for you, the data holder; do "
                   "not publish it.")
    if not deliver(lambda: write_outputs(items, protected=protected, log=args.write_log,
                                         private=[report_to] if report_to not in (None, "-") else []), to_stdout):
        return EXIT_OK
    where = "standard output" if to_stdout else repr(args.output)
    note(args, f"released {released.num_rows} partitions with {len(metrics)} metric(s) to {where}.")
    note(args, str(result.guarantee))
    if sidecar is not None:
        note(args, f"the guarantee and the bounds used are in {sidecar!r}.")
    if report is not None and report_to == "-":
        write_err(_aggregate_flags(str(report)))
    elif report_to is not None:
        note(args, f"the data holder's report is in {report_to!r}: exact and NOT differentially private; "
                   "never publish it.")
    return EXIT_OK


def _aggregate_parameters(args: argparse.Namespace, metrics: dict[str, Any]) -> dict[str, Any]:
    """The arguments of dpselect.aggregate that come from the command line (all but the data
    and the public partitions)."""
    return dict(privacy_unit=args.privacy_unit, by=list(args.by), metrics=metrics, epsilon=args.epsilon,
                delta=args.delta, max_partitions_contributed=args.max_partitions_contributed,
                max_contributions_per_partition=args.max_contributions_per_partition,
                strategy=args.strategy or "auto", bounds_scope=args.bounds_scope, noise=args.noise,
                confidence_level=args.confidence_level,
                null_privacy_units="drop" if args.drop_null_privacy_units else "error")


def _check_with_library(args: argparse.Namespace, metrics: dict[str, Any]) -> None:
    """Check the parameters with the library's own plan (the one every front end runs), before any
    input is read: an impossible budget split, a noise scale that cannot fit, ... are usage errors
    naming the flags, never failures found after reading (which would look like errors in the
    data)."""
    from dpselect.aggregation.plan import plan_aggregate

    parameters = _aggregate_parameters(args, metrics)
    try:
        plan_aggregate(**parameters, public=bool(args.public_partitions))
    except (ValueError, TypeError) as exc:
        raise Fail(EXIT_USAGE, _aggregate_flags(str(exc))) from exc
    except RuntimeError as exc:
        if is_rng_failure(exc):
            raise Fail(EXIT_RNG, rng_message(exc)) from exc
        raise


def _nan_as_null(table: Any, columns: Sequence[str]) -> Any:
    """``table`` with the NaNs of its float ``columns`` turned into nulls (schema metadata kept)."""
    import pyarrow.compute as pc

    from dpselect.ingest.rows import import_pyarrow

    pa = import_pyarrow()
    for name in columns:
        i = table.schema.get_field_index(name)
        column = table.column(i)
        if pa.types.is_floating(column.type) and pc.any(pc.is_nan(column)).as_py():
            table = table.set_column(i, table.schema.field(i),
                                     pc.if_else(pc.is_nan(column), pa.scalar(None, column.type), column))
    return table


def _read_public_partitions(args: argparse.Namespace) -> Any:
    """The --public-partitions file's --by columns, as a table (keys as dpselect select reads them)."""
    from dpselect.io.files import ColumnError, InputError, detect_format, open_batches
    from dpselect.ingest.rows import import_pyarrow

    pa = import_pyarrow()
    try:
        fmt = detect_format(args.public_partitions, None, "input")
        source = open_batches(args.public_partitions, fmt, list(args.by), 1 << 20, args.block_size or 1 << 20)
        return pa.Table.from_batches(list(source.batches), schema=source.schema)
    except (InputError, OSError, pa.ArrowException) as exc:
        raise Fail(EXIT_INPUT, f"--public-partitions {args.public_partitions!r}: {exc}") from exc
    except (ColumnError, ValueError) as exc:
        raise Fail(EXIT_DATA, f"--public-partitions {args.public_partitions!r}: {exc}") from exc
