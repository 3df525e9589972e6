"""The ``dpselect`` command line: differentially private partition selection on files.

    dpselect select INPUT --privacy-unit COL --by COL [--by COL ...] --epsilon E --delta D [options]
    dpselect aggregate INPUT --privacy-unit COL --by COL ... --epsilon E --delta D --metric SPEC ... [options]

Reads CSV (optionally .gz/.bz2/.zst/.lz4), Parquet or JSON lines in streamed batches (files
larger than memory work: memory grows with distinct (user, partition) pairs, not rows, plus a
bounded number of read blocks), bounds each user to κ partitions and counts distinct users per
partition in C, applies the selection strategy (Desfontaines, Voss, Gipson, Mandayam,
"Differentially private partition selection", PoPETs 2022), and writes the kept keys, sorted,
to a file (atomically) or standard output. The privacy guarantee is printed on stderr.
Everything that can be checked before reading the input is: parameters, the output, the
columns' presence and types, and the output format's fit to them.

``dpselect aggregate`` is a DP GROUP BY (:func:`dpselect.aggregate`): the released keys and, per
key, user counts, row counts, sums and means, with the guarantee also written as a JSON sidecar
next to the output and, on request, the data holder's report (exact, NOT differentially
private). It reads the needed columns of the whole input into memory.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from dpselect.interrupts import Terminated, exit_code, ignore_signals, reserve_standard_fds, signals_as_interrupts
from dpselect.outputs import WriteLog
from dpselect.verify import CertificationError

__all__ = [
    "EXIT_DATA",
    "EXIT_INPUT",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_OUTPUT",
    "EXIT_RNG",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "build_parser",
    "main",
]

EXIT_OK = 0
EXIT_INTERNAL = 1  # a bug or a missing dependency: the message says which
EXIT_USAGE = 2  # bad option or parameter value (argparse uses 2 too)
EXIT_INPUT = 3  # input missing, unreadable or not parseable in the given format
EXIT_DATA = 4  # a needed column is missing, or its values cannot be used
EXIT_OUTPUT = 5  # the output cannot be written (or would overwrite the input)
EXIT_RNG = 6  # the operating system's random number generator failed: nothing released
EXIT_INTERRUPTED = 130  # SIGINT (Ctrl-C)
EXIT_TERMINATED = 143  # SIGTERM (128 + 15); SIGHUP gives 129

_PAPER = ('Desfontaines, Voss, Gipson, Mandayam, "Differentially private partition selection", '
          "PoPETs 2022")

_EXAMPLE = """\
example:
  dpselect select visits.csv --privacy-unit user_id --by country --by city \\
      --epsilon 1 --delta 1e-6 --max-partitions-contributed 3 --counts -o released.csv
"""

_EXIT_CODES = """\
exit codes:
  0    success: the release was written. Also when standard error could not be written to
       (the messages are lost, the release stands) or when a signal came once every output
       was in place (the message says so)
  1    internal error or missing dependency (pip install 'dpselect[arrow]')
  2    bad option or parameter value (found before any input is read)
  3    input file missing, unreadable, or not in the expected format
  4    a needed column is missing, ambiguous, of an unusable type, or has null privacy units
  5    output cannot be written (or would overwrite the input, or is read-only)
  6    the operating system's random number generator failed: nothing was released
  130  interrupted (Ctrl-C); 143 terminated (SIGTERM); 129 (SIGHUP): the message says which
       outputs, if any, were written (files are replaced all together or not at all)
"""

_EPILOG = _EXAMPLE + "\n" + _EXIT_CODES + """
Keys and privacy units are read as text from CSV and JSON lines (as written: "007" and "7"
differ), with their declared types from Parquet. A null key (empty CSV cell, JSON null or
missing field, Parquet null) is a key like any other value. A null privacy unit is not a
person: such rows are an error unless --drop-null-privacy-units. Output rows are sorted by key.
Counts (--counts) are noisy: only partitions whose noisy count passed the release threshold
are shown, so those near it lean high. JSON lines output is strict JSON: a float NaN or
infinite key is written as the string "NaN", "Infinity" or "-Infinity" (a null key as null).
See docs/rows.md and docs/privacy/.
"""


_AGGREGATE_EXAMPLE = """\
example:
  dpselect aggregate purchases.csv --privacy-unit user_id --by country \\
      --epsilon 1 --delta 1e-6 --max-partitions-contributed 2 --max-contributions-per-partition 5 \\
      --metric users --metric count --metric spend=sum:amount:0:500 --metric mean:amount:0:500 \\
      --confidence-level 0.95 --report report.json -o released.csv
  (writes released.csv and released.csv.guarantee.json; report.json is for you only)
"""

_AGGREGATE_EPILOG = _AGGREGATE_EXAMPLE + "\n" + _EXIT_CODES.replace(
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

_AGGREGATE_STRATEGIES = ("pi_opt", "release", "laplace", "gaussian")
_VALUE_TYPES = ("float64", "int64")


class _Fail(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# Every count dpselect handles is an int64.
_INT64_MAX = 2**63 - 1


def _shown(text: str) -> str:
    """A value as typed, shortened if it is very long."""
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text)} characters)"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {_shown(text)}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {_shown(text)}")
    if value > _INT64_MAX:
        raise argparse.ArgumentTypeError(f"expected a positive integer of at most 2**63 - 1, got {_shown(text)}")
    return value


def _threshold(text: str) -> int:
    """--public-threshold: an integer up to 2**62, the largest the release kernel compares to."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {_shown(text)}") from None
    if value > 2**62:
        raise argparse.ArgumentTypeError(f"expected an integer of at most 2**62, got {_shown(text)}")
    return value


def _byte_size(text: str) -> int:
    """A size in bytes, optionally with a K, M or G suffix (powers of 1024)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    body, scale = text.strip(), 1
    if body[-1:].lower() in units:
        body, scale = body[:-1], units[body[-1].lower()]
    try:
        value = int(body) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size in bytes such as 4194304 or 4M, got {text!r}") from None
    if not 1 << 10 <= value < 1 << 31:
        raise argparse.ArgumentTypeError(f"expected a size between 1K and 2G, got {text!r}")
    return value


def _number(text: str) -> float:
    """A float64 that is the number typed, or as close as float64 allows: a nonzero number whose
    magnitude is below the smallest normal float64 (about 2.2e-308; it would become 0 or a
    subnormal with fewer significant digits than asked) or above the largest (it would become
    infinity) is refused here, naming the flag, rather than failing deep in a computation."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {_shown(text)}") from None
    try:
        exact = Decimal(text.strip().replace("_", ""))
    except InvalidOperation:  # pragma: no cover - float() accepted it, so Decimal does too
        return value
    if exact.is_finite() and exact != 0:
        if math.isinf(value):
            raise argparse.ArgumentTypeError(f"{_shown(text)} is too large for a float64 (at most "
                                             f"{sys.float_info.max:.17g})")
        if abs(value) < sys.float_info.min:
            raise argparse.ArgumentTypeError(f"{_shown(text)} is too close to 0 for a float64 to hold (a nonzero "
                                             f"value must be at least {sys.float_info.min:.17g} in magnitude)")
    return value


def _strategy_names() -> list[str]:
    from dpselect.mechanisms.registry import ROW_STRATEGIES, STRATEGIES

    return sorted(STRATEGIES) + ["auto"] + sorted(ROW_STRATEGIES)


def _add_privacy_arguments(cmd: argparse.ArgumentParser, required: bool, selection_options: bool = True) -> None:
    cmd.add_argument("--epsilon", "-e", required=required, type=_number,
                     help="privacy parameter epsilon >= 0" if selection_options else
                     "privacy parameter epsilon > 0, for the whole release (keys, bounds and every metric)")
    cmd.add_argument("--delta", "-d", required=required, type=_number,
                     help="privacy parameter 0 < delta < 1" if selection_options else
                     "privacy parameter 0 < delta < 1, all of it for the key selection (0 is allowed with "
                     "--public-partitions)")
    if not selection_options:  # dpselect aggregate: κ has no default (see _require_contribution_bounds)
        cmd.add_argument("--max-partitions-contributed", type=_positive_int, default=None, metavar="K",
                         help="required: keep at most K partitions (keys) of each user, chosen uniformly at "
                         "random; the noise of every statistic grows with K")
        return
    cmd.add_argument("--max-partitions-contributed", type=_positive_int, default=1, metavar="N",
                     help="bound each user to at most N partitions, chosen uniformly at random "
                     "(default 1); the budget is split over them")
    cmd.add_argument("--neighbours", choices=("add_remove", "replace"), default="add_remove",
                     help="neighbouring datasets: add or remove one user (default), or replace one user's "
                     "rows (bounded DP: the budget is split over twice as many partitions)")
    cmd.add_argument("--pre-threshold", type=_positive_int, default=1, metavar="TAU",
                     help="never release a partition with fewer than TAU users; decide the rest on "
                     "users - (TAU - 1) (default 1: none)")


def build_parser() -> argparse.ArgumentParser:
    from dpselect import __version__

    parser = argparse.ArgumentParser(
        prog="dpselect",
        description="Differentially private partition selection: release the keys of a GROUP BY\n"
        "that are safe to publish (select), or the keys and their statistics (aggregate).",
        epilog=_EXAMPLE + "\nRun 'dpselect select --help' or 'dpselect aggregate --help' for every option;\n"
        "'dpselect audit --help' checks the mechanisms' guarantees (certificates and empirical audits).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"dpselect {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    sel = commands.add_parser(
        "select",
        help="release the partitions (distinct keys) of a file under (epsilon, delta)-DP",
        description="Release the partitions (GROUP BY keys) of INPUT that pass a differentially\n"
        "private selection, optionally with noisy distinct-user counts.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    strategies = _strategy_names()
    sel.add_argument("input", metavar="INPUT",
                     help="CSV (.csv, .tsv, optionally .gz/.bz2/.zst/.lz4), Parquet, or JSON lines file")
    sel.add_argument("--privacy-unit", "-u", required=True, metavar="COL", help="column identifying the user")
    sel.add_argument("--by", "-b", required=True, action="append", metavar="COL",
                     help="a partition column; repeat it for a key over several columns "
                     "(--by a --by b is GROUP BY a, b)")
    _add_privacy_arguments(sel, required=True)
    sel.add_argument("--strategy", default=None, metavar="{" + ",".join(strategies) + "}",
                     help="selection mechanism: 'release' (TSGD thresholded release, default; can "
                     "publish noisy counts), 'pi_opt' (optimal keep probability, keys only), 'laplace' "
                     "or 'gaussian' (thresholding, keys only), 'auto' (the one 'dpselect explain' "
                     "ranks first), 'public' or 'mixed' (with --public-partitions), or a mechanism on "
                     "each user's set: 'weighted_gaussian', 'weighted_laplace', 'dp_sips', "
                     "'policy_gaussian', 'policy_laplace' (keys only)")
    sel.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                     help="a mechanism option, repeatable: noise_share=0.6 (gaussian, weighted_gaussian, "
                     "dp_sips), sigma_accuracy=1e-9 (gaussian), rounds=4 and ratio=0.5 (dp_sips), alpha=2 "
                     "(policy_*)")
    sel.add_argument("--public-partitions", metavar="FILE",
                     help="a file (CSV, Parquet, JSON lines) listing keys known without the data, in the "
                     "--by columns: released with noisy counts whether or not they occur (--strategy "
                     "public, the default with this flag) or beside the data's own keys (--strategy mixed)")
    sel.add_argument("--public-threshold", type=_threshold, default=None, metavar="T",
                     help="with --strategy mixed: release a public key when its noisy count exceeds T "
                     "(default: the release threshold k, so no absent public key is released; T at most "
                     "minus k releases every public key present in the data)")
    sel.add_argument("--counts", action="store_true", help="also output the noisy distinct-user counts")
    sel.add_argument("--count-column", default="noisy_count", metavar="NAME",
                     help="name of the count column (default noisy_count)")
    sel.add_argument("--drop-null-privacy-units", action="store_true",
                     help="leave out rows whose privacy unit is null (default: refuse them); their "
                     "number is reported on stderr, for you only (it is exact, not private)")
    sel.add_argument("--output", "-o", default="-", metavar="FILE", help="output file (default: standard output)")
    sel.add_argument("--output-format", choices=("csv", "parquet", "jsonl"),
                     help="output format (default: from the output name; csv on standard output, "
                     "pipes and devices)")
    sel.add_argument("--input-format", choices=("csv", "parquet", "jsonl"), help="input format (default: from the name)")
    sel.add_argument("--batch-size", type=_positive_int, default=1 << 20, metavar="ROWS",
                     help="rows counted per step (default 1048576)")
    sel.add_argument("--block-size", type=_byte_size, default=None, metavar="BYTES",
                     help="bytes read per block of CSV or JSON lines (default 1M); a CSV row must fit "
                     "in one block, and memory holds about 40 blocks")
    progress = sel.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None,
                          help="show a progress bar on stderr (default: when stderr is a terminal)")
    progress.add_argument("--no-progress", dest="progress", action="store_false", help="never show it")
    sel.add_argument("--quiet", "-q", action="store_true",
                     help="print nothing on stderr but errors (no progress, summary or warnings)")
    _add_aggregate_parser(commands)
    exp = commands.add_parser(
        "explain",
        help="compare the selection mechanisms at given (epsilon, delta, N) and recommend one",
        description="Print each count-based mechanism's threshold and the partition sizes at which it "
        "releases with probability 5 %%, 50 %% and 95 %%, side by side, and the one that releases the most. "
        "Depends on the parameters only, never on data.",
        epilog="example:\n  dpselect explain --epsilon 1 --delta 1e-5 --max-partitions-contributed 4 "
        "--plot mechanisms.png",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_privacy_arguments(exp, required=True)
    exp.add_argument("--plot", metavar="FILE", help="also draw the keep-probability curves and the paper's "
                     "midpoint figures to FILE (PNG, SVG or PDF; needs the [plot] extra)")
    return parser


def _add_aggregate_parser(commands: Any) -> None:
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
    _add_privacy_arguments(agg, required=True, selection_options=False)
    agg.add_argument("--max-contributions-per-partition", type=_positive_int, default=None, metavar="L",
                     help="required: keep at most L rows of each user in each of its partitions, chosen "
                     "uniformly at random; row counts, sums and means get L times the noise")
    agg.add_argument("--metric", "-m", required=True, action="append", metavar="[NAME=]SPEC",
                     help="a statistic per released key, repeatable: users, count, sum:COL[:LO:HI] or "
                     "mean:COL[:LO:HI] (see below); NAME= names its output column")
    agg.add_argument("--value-type", action="append", default=[], metavar="COL=TYPE",
                     help="read the value column COL as TYPE, float64 or int64 (default: float64 from CSV "
                     "and JSON lines, the declared type from Parquet)")
    agg.add_argument("--confidence-level", type=_number, default=None, metavar="P",
                     help="also output NAME_ci_low and NAME_ci_high per metric: intervals holding the value "
                     "after bounding and clamping, before noise, with probability at least P (e.g. 0.95)")
    agg.add_argument("--public-partitions", metavar="FILE",
                     help="a file (CSV, Parquet, JSON lines) listing keys known without the data, in the --by "
                     "columns: exactly these keys are released (with statistics 0 plus noise where absent), "
                     "no selection runs and delta may be 0")
    agg.add_argument("--strategy", default=None, choices=_AGGREGATE_STRATEGIES,
                     help="key selection mechanism (default pi_opt, the optimal keep rule); not with "
                     "--public-partitions")
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
    agg.add_argument("--block-size", type=_byte_size, default=None, metavar="BYTES",
                     help="bytes read per block of CSV or JSON lines (default 1M); a CSV row must fit in one block")
    agg.add_argument("--quiet", "-q", action="store_true",
                     help="print nothing on stderr but errors and a --report - (no guarantee, summary or warnings)")


def main(argv: Sequence[str] | None = None, *, exiting: bool = False) -> int:
    """Entry point of the ``dpselect`` command; returns the exit code. Every error and every
    interrupt (Ctrl-C, SIGTERM, SIGHUP), from argument parsing to the last message, ends in one
    line on stderr and its exit code, never a traceback. ``exiting``: the process ends after this
    call (the command itself), so the signal handlers are left in place and, once the outcome is
    decided, later signals are ignored."""
    global _interrupted
    prog = "dpselect"
    log: WriteLog | None = None
    try:
        with signals_as_interrupts(restore=not exiting):
            argv = list(sys.argv[1:] if argv is None else argv)
            if argv and argv[0] == "audit":
                # The audits have their own parser (dpselect.audit.runner): exit 0 all pass, 1 a
                # failure. What they write is theirs to report: an interrupt claims nothing.
                from dpselect.audit.runner import main as audit_main

                prog = "dpselect audit"
                code = audit_main(argv[1:])
            else:
                parser = build_parser()
                if argv and argv[0] == "aggregate":
                    # Its errors carry its name, as argparse's own errors for it do.
                    prog = "dpselect aggregate"
                log = WriteLog()
                code = _command(parser, argv, prog, log)
            if exiting:
                ignore_signals()
            return code
    except KeyboardInterrupt as exc:
        _interrupted = True
        if exiting:
            ignore_signals()  # the cleanup has run: a second Ctrl-C must not cut the message short
        return _interruption(exc, log, prog)


def _command(parser: argparse.ArgumentParser, argv: list[str], prog: str, log: WriteLog) -> int:
    """Parse ``argv`` and run its command; its errors as (message on stderr, exit code)."""
    if not argv:
        parser.print_help()
        return EXIT_OK
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    args.write_log = log  # what the command has written, should a signal stop it
    commands = {"explain": _explain, "select": _select, "aggregate": _aggregate}
    try:
        return commands[args.command](args)
    except _Fail as fail:
        _error(str(fail), prog=prog)
        return fail.code
    except ImportError as exc:
        _error(str(exc), prog=prog)
        return EXIT_INTERNAL
    except CertificationError as exc:  # a table failed its exact privacy check: a bug, never sampled
        _error(f"internal error: {exc}; nothing was released. Please report this with the command line",
               prog=prog)
        return EXIT_INTERNAL


def _interruption(exc: KeyboardInterrupt, log: WriteLog | None, prog: str) -> int:
    """The message and exit code of a run stopped by a signal, saying exactly what it wrote.
    Once every output is in place the release stands: exit 0, so that no caller runs it again
    (a second release of the same data would spend the budget twice)."""
    what = "interrupted" if not isinstance(exc, Terminated) else f"terminated by signal {exc.signum}"
    if prog == "dpselect audit":
        _error(what, newline=True, prog=prog)
        return exit_code(exc)
    if log is not None and log.complete:
        _write_err(f"\ndpselect: {what} after every output was written in full ({', '.join(log.written)}): "
                   "the release stands")
        return EXIT_OK
    if log is None or not (log.written or log.partial):
        _error(f"{what}; no output was written", newline=True, prog=prog)
        return exit_code(exc)
    untouched = [o for o in log.outputs if o not in log.written and o not in log.partial]
    parts = [f"written in full: {', '.join(log.written)}" if log.written else "",
             f"written in part: {', '.join(log.partial)}" if log.partial else "",
             f"not written (left as they were): {', '.join(untouched)}" if untouched else ""]
    _error(f"{what} while writing the outputs; " + "; ".join(p for p in parts if p), newline=True, prog=prog)
    return exit_code(exc)


# Set by main() when a run ended on Ctrl-C or a signal, after its cleanup ran.
_interrupted = False


def console_main() -> None:
    """The ``dpselect`` command: main(), then exit with its code.

    A run stopped by a signal may leave pyarrow's reader threads mid-read (its CSV read-ahead);
    letting the interpreter finalize then can destroy a running C++ thread and abort the process
    (exit -6 instead of 128 + the signal). Its temporary output is already removed by then, so
    such a run flushes what it printed and leaves at once, without finalization."""
    reserve_standard_fds()
    code = main(exiting=True)
    for stream in (sys.stdout, sys.stderr):
        # A stream that cannot take what is left (a full disk, a vanished reader) must not make
        # the interpreter's own final flush fail and change the exit code to 120.
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            _quiet(stream)
    if _interrupted:
        os._exit(code)
    sys.exit(code)


def _error(message: str, newline: bool = False, prog: str = "dpselect") -> None:
    _write_err(f"{chr(10) if newline else ''}{prog}: error: {message}")


def _note(args: argparse.Namespace, message: str) -> None:
    if not args.quiet:
        _write_err(f"dpselect: {message}")


def _write_err(text: str) -> None:
    """Print ``text`` on stderr. If stderr is closed, full or a pipe whose reader went away, the
    text is lost and stderr is pointed at /dev/null, so that neither a later message nor the
    interpreter's final flush fails again: what was released stays released, with exit 0."""
    stream = sys.stderr
    if stream is None:  # started with stderr closed (print(file=None) would write to stdout)
        return
    try:
        print(text, file=stream, flush=True)
    except (OSError, ValueError):
        _quiet(stream)


def _check_parameters(args: argparse.Namespace) -> Any:
    """The strategy, after checking every value typed, with errors naming the flags."""
    from dpselect.pipeline import build_strategy

    if not math.isfinite(args.epsilon) or args.epsilon < 0:
        raise _Fail(EXIT_USAGE, f"--epsilon must be a finite number >= 0, got {args.epsilon:g}")
    if not math.isfinite(args.delta) or args.delta < 0 or args.delta >= 1:
        raise _Fail(EXIT_USAGE, f"--delta must be in (0, 1), got {args.delta:g}")
    if args.delta == 0:
        raise _Fail(EXIT_USAGE, f"--delta must be > 0: with delta = 0 no key can be released (Theorem 2 of "
                                f"{_PAPER}: under pure DP the set of released keys cannot depend on the data)")
    strategies = _strategy_names()
    if args.strategy is None:
        args.strategy = "public" if args.public_partitions else "release"
    if args.strategy not in strategies:
        raise _Fail(EXIT_USAGE, f"--strategy must be one of {', '.join(strategies)}; got {args.strategy!r}")
    if args.public_partitions and args.strategy not in ("public", "mixed"):
        raise _Fail(EXIT_USAGE, "--public-partitions needs --strategy public or --strategy mixed")
    if not args.public_partitions and args.strategy in ("public", "mixed"):
        raise _Fail(EXIT_USAGE, f"--strategy {args.strategy} needs --public-partitions FILE")
    if args.public_threshold is not None and args.strategy != "mixed":
        raise _Fail(EXIT_USAGE, "--public-threshold applies to --strategy mixed only")
    by = list(args.by)
    twice = sorted({c for c in by if by.count(c) > 1})
    if twice:
        raise _Fail(EXIT_USAGE, f"--by names {', '.join(repr(c) for c in twice)} more than once")
    if args.privacy_unit in by:
        raise _Fail(EXIT_USAGE, f"--privacy-unit {args.privacy_unit!r} cannot also be a --by column")
    if args.counts and (args.count_column in by or args.count_column == args.privacy_unit or not args.count_column):
        raise _Fail(EXIT_USAGE, f"--count-column {args.count_column!r} clashes with an input column; "
                                "choose another name with --count-column")
    if args.counts and args.strategy not in ("release", "public", "mixed", "auto"):
        raise _Fail(EXIT_USAGE, f"--counts needs a strategy that releases noisy counts (--strategy release, "
                                f"public or mixed); --strategy {args.strategy} selects keys only")
    options: dict[str, Any] = {"neighbours": args.neighbours}
    if args.pre_threshold != 1:
        if args.strategy in ("public", "mixed", "auto"):
            raise _Fail(EXIT_USAGE, f"--pre-threshold does not apply to --strategy {args.strategy}")
        options["pre_threshold"] = args.pre_threshold
    if args.public_threshold is not None:
        options["public_threshold"] = args.public_threshold
    for item in args.option:
        name, sep, text = item.partition("=")
        if not sep or not name or name in options:
            raise _Fail(EXIT_USAGE, f"--option expects NAME=VALUE, once per name; got {item!r}")
        try:
            options[name] = int(text) if text.lstrip("-").isdigit() else float(text) if text != "optimal" else text
        except ValueError:
            raise _Fail(EXIT_USAGE, f"--option {name}: expected a number, got {text!r}") from None
    try:
        strat = build_strategy(args.strategy, args.epsilon, args.delta, args.max_partitions_contributed,
                               args.counts, **options)
    except (ValueError, TypeError) as exc:
        raise _Fail(EXIT_USAGE, _flags(str(exc))) from exc
    except OverflowError as exc:  # a number too large for a computation of the strategy
        raise _Fail(EXIT_USAGE, f"the parameters are out of range for --strategy {args.strategy} ({exc}): lower "
                                "--max-partitions-contributed or the --option values") from exc
    if args.counts and not strat.releases_counts:
        raise _Fail(EXIT_USAGE, f"--counts needs a strategy that releases noisy counts (--strategy release, "
                                f"public or mixed); --strategy {args.strategy} selects keys only")
    return strat


def _flags(message: str) -> str:
    """A message from the Python API, with parameter names turned into the CLI's flags."""
    message = message.replace("takes the options", "takes only --option").replace("strategy '", "--strategy '")
    message = re.sub(r"\bstrategy='(\w+)'", r"--strategy \1", message)
    for name in ("max_partitions_contributed", "pre_threshold", "public_threshold", "epsilon", "delta"):
        flag = f"--{name.replace('_', '-')}"
        message = message.replace(f"{name}=", f"{flag} ").replace(f" {name} ", f" {flag} ")
        if "_" in name:  # unmistakable for a word: replaced wherever it stands
            message = re.sub(rf"(?<![-\w]){name}\b", flag, message)
    return message


def _explain(args: argparse.Namespace) -> int:
    """`dpselect explain`: the mechanisms side by side, the recommendation, optional figures."""
    from dpselect.explain import explain_text, plot_mechanisms

    if not math.isfinite(args.epsilon) or args.epsilon <= 0:
        raise _Fail(EXIT_USAGE, f"--epsilon must be a finite number > 0, got {args.epsilon:g}")
    if not math.isfinite(args.delta) or not 0 < args.delta < 1:
        raise _Fail(EXIT_USAGE, f"--delta must be in (0, 1), got {args.delta:g}")
    try:
        text = explain_text(args.epsilon, args.delta, args.max_partitions_contributed,
                            pre_threshold=args.pre_threshold, neighbours=args.neighbours)
        if args.plot:
            plot_mechanisms(args.epsilon, args.delta, args.max_partitions_contributed, args.plot,
                            pre_threshold=args.pre_threshold, neighbours=args.neighbours)
    except ImportError as exc:
        raise _Fail(EXIT_USAGE, f"{exc} (for --plot: pip install 'dpselect[plot]')") from exc
    except (ValueError, TypeError) as exc:
        raise _Fail(EXIT_USAGE, _flags(str(exc))) from exc
    except OverflowError as exc:
        raise _Fail(EXIT_USAGE, f"the parameters are out of range ({exc}): lower --max-partitions-contributed "
                                "or --pre-threshold") from exc
    except OSError as exc:  # the figure's file
        raise _Fail(EXIT_OUTPUT, f"cannot write --plot {args.plot!r}: {exc.strerror or exc}") from exc
    if sys.stdout is None:
        raise _Fail(EXIT_OUTPUT, "standard output is closed: nothing to print the comparison to")
    try:
        print(text, flush=True)
    except BrokenPipeError:  # the reader went away (e.g. `| head`): not an error
        _quiet(sys.stdout)
        return EXIT_OK
    except OSError as exc:
        _quiet(sys.stdout)
        raise _Fail(EXIT_OUTPUT, f"cannot write to standard output: {exc.strerror or exc}") from exc
    if args.plot:
        _write_err(f"dpselect: figures written to {args.plot}")
    return EXIT_OK


def _output_format(args: argparse.Namespace, to_stdout: bool) -> str:
    from dpselect.files import detect_format

    if args.output_format:
        return args.output_format
    if to_stdout:
        return "csv"
    try:
        mode = os.stat(args.output).st_mode
    except OSError:
        mode = 0
    import stat

    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return "csv"  # a pipe or device, like standard output
    try:
        return detect_format(args.output, None, "output")
    except ValueError as exc:
        raise _Fail(EXIT_USAGE, str(exc)) from exc


def _check_output_types(schema: Any, out_fmt: str) -> None:
    """Refuse, before any work, key types the output format cannot hold."""
    from dpselect.rows import import_pyarrow, key_type

    pa = import_pyarrow()
    if out_fmt == "parquet":
        return
    for f in schema:
        t = key_type(f.type)
        if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
            raise _Fail(EXIT_USAGE, f"column {f.name!r} holds bytes, which --output-format {out_fmt} cannot "
                                    "write faithfully; use --output-format parquet (or -o FILE.parquet)")


def _probe_rng() -> None:
    """Draw from the secure generator once before any work, so an environment without a
    working OS random source fails fast."""
    from dpselect.rng import SecureRNG

    try:
        SecureRNG().random_bytes(16)
    except RuntimeError as exc:
        raise _Fail(EXIT_RNG, _rng_message(exc)) from exc


def _rng_message(exc: BaseException) -> str:
    return (f"secure randomness is unavailable ({exc}); nothing was released. Check that the "
            "operating system's random source (getrandom, /dev/urandom) works here, then run again")


def _is_rng_failure(exc: RuntimeError) -> bool:
    return "random number generator" in str(exc)


def _select(args: argparse.Namespace) -> int:
    from dpselect.files import (
        DEFAULT_BLOCK_SIZE,
        ColumnError,
        InputError,
        OutputError,
        check_destination,
        coalesce,
        detect_format,
        in_memory_budget,
        open_batches,
        read_ahead,
        write_table,
    )
    from dpselect.frames import result_schema
    from dpselect.pipeline import GUARANTEE_METADATA_KEY, release_table
    from dpselect.progress import Progress
    from dpselect.rows import (
        ColumnTypeError,
        NullPrivacyUnitError,
        RowCounter,
        check_column_types,
        import_pyarrow,
    )

    pa = import_pyarrow()
    # Everything the user typed is checked before the input is touched.
    strat = _check_parameters(args)
    by = list(args.by)
    try:
        in_fmt = detect_format(args.input, args.input_format, "input")
    except ValueError as exc:
        raise _Fail(EXIT_USAGE, str(exc)) from exc
    to_stdout = args.output in (None, "-")
    out_fmt = _output_format(args, to_stdout)
    try:
        check_destination(None if to_stdout else args.output, out_fmt, protected=[args.input])
    except OutputError as exc:
        raise _Fail(EXIT_OUTPUT, str(exc)) from exc
    _probe_rng()

    try:
        budget = in_memory_budget()  # a parameter (an environment variable): checked before the input is read
    except ValueError as exc:
        raise _Fail(EXIT_USAGE, str(exc)) from exc

    columns = [args.privacy_unit, *by]
    block_size = args.block_size or DEFAULT_BLOCK_SIZE
    try:
        source = open_batches(args.input, in_fmt, columns, args.batch_size, block_size)
    except InputError as exc:
        raise _Fail(EXIT_INPUT, str(exc)) from exc
    except ColumnError as exc:
        raise _Fail(EXIT_DATA, str(exc)) from exc
    try:
        check_column_types(source.schema, args.privacy_unit, by)
    except ColumnTypeError as exc:
        role = "--privacy-unit" if exc.role == "privacy_unit" else "--by"
        raise _Fail(EXIT_DATA, f"{role} column {exc.column!r} of {args.input!r} has type {exc.type}: {exc.reason}") from exc
    schema = result_schema(source.schema, by, args.count_column if args.counts else None)
    _check_output_types(schema, out_fmt)

    show = not args.quiet and (args.progress if args.progress is not None else _isatty(sys.stderr))
    progress = Progress(enabled=bool(show))
    counter = RowCounter(args.privacy_unit, by,
                         null_privacy_units="drop" if args.drop_null_privacy_units else "error")
    counter.check_schema(source.schema)

    # The next batch is read while this one is counted. Encoding a batch costs O(its rows)
    # whatever was seen before (csrc/keymap.h), so batches stay at --batch-size rows.
    batches = read_ahead(source.batches)
    try:
        whole = _count_batches(counter, coalesce(batches, lambda: args.batch_size), source, budget, progress)
        if whole is not None:
            progress.phase("counting the whole input")
            _count_whole(counter, whole)
    except InputError as exc:
        raise _Fail(EXIT_INPUT, str(exc)) from exc
    except TypeError as exc:
        raise _Fail(EXIT_DATA, f"{args.input!r}: {exc}") from exc
    except (pa.ArrowException, OSError, EOFError) as exc:
        raise _Fail(EXIT_INPUT, f"cannot read {args.input!r} as {in_fmt}: {exc}") from exc
    except ValueError as exc:
        raise _Fail(EXIT_DATA, f"{args.input!r}: {exc}") from exc
    except BaseException:
        progress.close()
        raise
    finally:
        batches.close()  # stops the reader thread if counting ended early

    try:
        counter.check_null_units()
    except NullPrivacyUnitError as exc:
        progress.close()
        raise _Fail(EXIT_DATA, (
            f"{exc.rows} row(s) of {args.input!r} have a null privacy unit (column {exc.column!r}); a null "
            "is not one person. Fill in the ids, or pass --drop-null-privacy-units to leave these rows "
            "out. Nothing was released."
        )) from exc
    try:
        if hasattr(strat, "select_sets"):  # a row mechanism: every user's set, weighted
            from dpselect.pipeline import release_rows

            progress.phase("bounding and weighting")
            sets, keys_of = counter.user_sets()
            released = release_rows(sets, keys_of, strat, schema=schema)
        else:
            progress.phase("bounding contributions and counting")
            partitions = counter.finish(strat.max_partitions_contributed, strat.count_cap)
            public = None
            if args.public_partitions:
                partitions, public = _with_public(args, partitions, strat)
            progress.phase("selecting")
            released = release_table(partitions, strat, counts=args.counts, count_column=args.count_column,
                                     schema=schema, public=public)
        progress.phase("writing")
    except RuntimeError as exc:
        if _is_rng_failure(exc):
            raise _Fail(EXIT_RNG, _rng_message(exc)) from exc
        raise
    finally:
        progress.close()
    return _finish_output(args, counter, released, to_stdout, out_fmt)


# Bytes a row of a whole input takes beyond its Arrow columns: the radix grouping's 12
# (dpselect._radix_rows.ROW_BYTES), and 8 for the pieces in flight and the allocator's slack.
_WHOLE_ROW_BYTES = 12 + 8


class _HeldInput:
    """Tables of the input held in memory, in order, to be counted whole. Text privacy units
    (as the CSV reader gives them) are kept as int64 while every table's are canonical decimal
    int64 text (see decimal_ids): 8 bytes a row instead of the text, converted while the reader
    parses the next block, and the radix grouping applies. Converting back gives the very text
    read (canonical text and numbers correspond one to one): once a table's ids are not
    canonical, or the input is streamed after all, the converted tables are turned back."""

    def __init__(self, privacy_unit: str, schema: Any) -> None:
        from dpselect.rows import import_pyarrow

        pa = import_pyarrow()
        self.unit = privacy_unit
        self.text_type = schema.field(privacy_unit).type
        self.converting = pa.types.is_string(self.text_type) or pa.types.is_large_string(self.text_type)
        self.tables: list[Any] = []
        self.rows = 0
        self.bytes = 0

    def add(self, table: Any) -> None:
        from dpselect.files import decimal_ids

        if self.converting:
            ids = decimal_ids(table.column(self.unit))
            if ids is None:
                self.converting = False
            else:
                table = table.set_column(table.schema.get_field_index(self.unit), self.unit, ids)
        self.tables.append(table)
        self.rows += table.num_rows
        self.bytes += table.nbytes + _WHOLE_ROW_BYTES * table.num_rows

    def take(self, whole: bool) -> list[Any]:
        """The tables held, none held after: with int64 privacy units if every table's were
        converted and they are the ``whole`` input, else with the units' text as read (the
        batches streamed after them are text)."""
        tables, self.tables = self.tables, []
        if whole and self.converting:
            return tables
        return [t if t.schema.field(self.unit).type == self.text_type else
                t.set_column(t.schema.get_field_index(self.unit), self.unit, t.column(self.unit).cast(self.text_type))
                for t in tables]


def _count_batches(counter: Any, tables: Iterator[Any], source: Any, budget: int, progress: Any) -> Any:
    """Count the input's tables, or hold them while they fit in ``budget`` bytes (their Arrow
    size plus _WHOLE_ROW_BYTES a row): the whole input, as one table, when every table was held
    (to be counted by :func:`_count_whole`), else None once everything is counted. The tables
    held when the budget is passed are counted then, in order, and the rest streamed: a file
    larger than the budget costs no more memory than the budget, and its counts are the same."""
    from dpselect.rows import import_pyarrow

    held = _HeldInput(counter.privacy_unit, source.schema)
    streaming = budget <= 0
    for table in tables:
        if not streaming:
            held.add(table)
            if held.bytes <= budget:
                progress.update(held.rows, source.progress())
                continue
            streaming = True
            pending = held.take(whole=False)
        else:
            pending = [table]
        for piece in pending:
            if counter.rows == 0:  # size the pair set once: from the metadata, or extrapolated
                fraction = source.progress()
                counter.expect_rows(source.rows or (int(piece.num_rows / fraction) if fraction else 0))
            counter.feed(piece)
            progress.update(counter.rows, source.progress())
    if streaming:
        return None
    pa = import_pyarrow()
    tables = held.take(whole=True)
    return pa.concat_tables(tables) if tables else None


def _count_whole(counter: Any, table: Any) -> None:
    """Count an input held whole: with integer privacy units (a Parquet integer column, or CSV
    ids converted by _HeldInput), grouped by radix buckets (RowCounter.feed with final=True, as
    select_partitions does), about half the work of the streaming pair sets, with the same
    results in distribution; other inputs go through the pair sets, as when streaming."""
    counter.expect_rows(table.num_rows)  # for the pair sets, if the radix grouping does not apply
    counter.feed(table, final=True)


def _finish_output(args: argparse.Namespace, counter: Any, released: Any, to_stdout: bool, out_fmt: str) -> int:
    """Report dropped rows (to the data holder), write the release, print the guarantee."""
    from dpselect.files import OutputError, write_table
    from dpselect.pipeline import GUARANTEE_METADATA_KEY

    if counter.null_unit_rows:
        _note(args, f"warning: dropped {counter.null_unit_rows} row(s) with a null privacy unit "
                    f"(column {args.privacy_unit!r}). This count is exact and NOT differentially "
                    "private: it is for you, the data holder; do not publish it.")
    try:
        write_table(released, None if to_stdout else args.output, out_fmt, protected=[args.input], log=args.write_log)
    except OutputError as exc:
        if to_stdout:
            _quiet(sys.stdout)
        raise _Fail(EXIT_OUTPUT, str(exc)) from exc
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `| head`): not an error for a shell pipeline.
        _quiet(sys.stdout)
        return EXIT_OK
    where = "standard output" if to_stdout else repr(args.output)
    _note(args, f"released {released.num_rows} partitions to {where}.")
    _note(args, (released.schema.metadata or {}).get(GUARANTEE_METADATA_KEY, b"").decode())
    return EXIT_OK


def _with_public(args: argparse.Namespace, partitions: Any, strat: Any) -> Any:
    """Join the --public-partitions file's keys to the counted partitions."""
    from dpselect.files import ColumnError, InputError, detect_format, open_batches
    from dpselect.public_keys import with_public_partitions
    from dpselect.rows import import_pyarrow

    pa = import_pyarrow()
    by = list(args.by)
    try:
        fmt = detect_format(args.public_partitions, None, "input")
        source = open_batches(args.public_partitions, fmt, by, args.batch_size, args.block_size or 1 << 20)
        table = pa.Table.from_batches(list(source.batches), schema=source.schema)
        return with_public_partitions(partitions, table, only_public=strat.name == "public")
    except (InputError, OSError, pa.ArrowException) as exc:
        raise _Fail(EXIT_INPUT, f"--public-partitions {args.public_partitions!r}: {exc}") from exc
    except (ColumnError, ValueError, TypeError) as exc:
        raise _Fail(EXIT_DATA, f"--public-partitions {args.public_partitions!r}: {exc}") from exc


# ------------------------------------------------------------------------ dpselect aggregate

_METRIC_FORMS = ("users, count_distinct_units, count, rows, sum:COL, sum:COL:LO:HI, mean:COL or "
                 "mean:COL:LO:HI, each optionally as NAME=SPEC")


def _bound_number(text: str) -> int | float:
    """A bound as written: an int for an integer literal (exact for integer columns), else a float."""
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        return float(text)


def _parse_metric(item: str) -> tuple[str, Any]:
    """(output column name, Metric) from a --metric value; _Fail naming --metric otherwise."""
    import dpselect
    from dpselect.aggregation.grid import Grid

    def bad(why: str) -> _Fail:
        return _Fail(EXIT_USAGE, f"--metric {item!r}: {why}; the accepted forms are {_METRIC_FORMS}")

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
    if kind not in ("sum", "mean"):
        raise bad(f"unknown metric {kind!r}" if kind else "the metric is empty")
    parts = rest.split(":")
    if not parts[0]:
        raise bad(f"{kind} needs a value column, as {kind}:COL or {kind}:COL:LO:HI")
    if len(parts) not in (1, 3):
        raise bad(f"expected {kind}:COL or {kind}:COL:LO:HI (two bounds), got {len(parts) - 1} after the column")
    column, bounds = parts[0], None
    if len(parts) == 3:
        try:
            lo, hi = _bound_number(parts[1]), _bound_number(parts[2])
        except ValueError:
            raise bad(f"the bounds {_shown(parts[1])} and {_shown(parts[2])} must be numbers") from None
        try:
            finite = math.isfinite(lo) and math.isfinite(hi)
        except OverflowError:  # an integer beyond every float
            raise bad(f"the bounds must be at most {sys.float_info.max:.17g} in magnitude") from None
        if not finite:
            raise bad("the bounds must be finite numbers")
        if lo > hi:
            raise bad(f"the bounds are inverted: LO = {_shown(parts[1])} is above HI = {_shown(parts[2])}")
        try:  # what the clamping grid accepts (an integer bound must be a float exactly, ...)
            Grid.for_bounds(lo, hi)
        except (ValueError, TypeError, OverflowError) as exc:
            raise bad(str(exc)) from None
        bounds = (lo, hi)
    make = dpselect.sum if kind == "sum" else dpselect.mean
    return name or f"{kind}_{column}", make(column, bounds=bounds)


def _require_contribution_bounds(args: argparse.Namespace) -> None:
    """κ and L∞ have no default: a default of 1 silently keeps one row of each user, which on
    most real data is a small part of it."""
    missing = [flag for flag, value in (("--max-partitions-contributed K", args.max_partitions_contributed),
                                        ("--max-contributions-per-partition L", args.max_contributions_per_partition))
               if value is None]
    if missing:
        raise _Fail(EXIT_USAGE, (
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
        raise _Fail(EXIT_USAGE, f"--epsilon must be a finite number > 0, got {args.epsilon:g}")
    if not math.isfinite(args.delta) or args.delta < 0 or args.delta >= 1:
        raise _Fail(EXIT_USAGE, f"--delta must be in (0, 1), got {args.delta:g}")
    if args.public_partitions and args.strategy is not None:
        raise _Fail(EXIT_USAGE, "--strategy does not apply with --public-partitions: the listed keys are released "
                                "as they are, no selection runs")
    if args.delta == 0 and not args.public_partitions:
        raise _Fail(EXIT_USAGE, f"--delta must be > 0: with delta = 0 no key can be released (Theorem 2 of "
                                f"{_PAPER}: under pure DP the set of released keys cannot depend on the data); "
                                "delta may be 0 with --public-partitions")
    if args.confidence_level is not None and not 0 < args.confidence_level < 1:
        raise _Fail(EXIT_USAGE, f"--confidence-level must be in (0, 1), e.g. 0.95, got {args.confidence_level:g}")
    twice = sorted({c for c in by if by.count(c) > 1})
    if twice:
        raise _Fail(EXIT_USAGE, f"--by names {', '.join(repr(c) for c in twice)} more than once")
    if args.privacy_unit in by:
        raise _Fail(EXIT_USAGE, f"--privacy-unit {args.privacy_unit!r} cannot also be a --by column")
    metrics: dict[str, Any] = {}
    for item in args.metric:
        name, metric = _parse_metric(item)
        if name in metrics:
            raise _Fail(EXIT_USAGE, f"--metric: two metrics would be written to the column {name!r}; name one "
                                    "of them with NAME=SPEC (e.g. --metric spend=sum:amount)")
        metrics[name] = metric
    value_columns = sorted({m.column for m in metrics.values() if m.column is not None})
    for column in value_columns:
        if column == args.privacy_unit or column in by:
            role = "--privacy-unit" if column == args.privacy_unit else "a --by column"
            raise _Fail(EXIT_USAGE, f"--metric: the value column {column!r} is also {role}; sum or average "
                                    "another column (or a copy of it under another name)")
    bounds: dict[str, tuple[Any, Any]] = {}
    for name, m in metrics.items():
        if m.column is not None and m.bounds is not None:
            first = bounds.setdefault(m.column, m.bounds)
            if first != m.bounds:
                raise _Fail(EXIT_USAGE, f"--metric: the column {m.column!r} is given two different bounds, "
                                        f"{first[0]}:{first[1]} and {m.bounds[0]}:{m.bounds[1]}; a column is "
                                        "clamped once, so give the same LO:HI (or none) to each of its metrics")
    outputs = list(by)
    for name in metrics:
        outputs.append(name)
        if args.confidence_level is not None:
            outputs += [f"{name}_ci_low", f"{name}_ci_high"]
    for name in metrics:
        if name in {args.privacy_unit, *by, *value_columns}:
            raise _Fail(EXIT_USAGE, f"--metric: the output name {name!r} is also an input column (--privacy-unit, "
                                    "--by or a value column); choose another with NAME=SPEC")
    clash = sorted({c for c in outputs if outputs.count(c) > 1})
    if clash:
        raise _Fail(EXIT_USAGE, f"--metric: the output column(s) {', '.join(repr(c) for c in clash)} would be "
                                "written twice (with --confidence-level each metric adds NAME_ci_low and "
                                "NAME_ci_high); choose other names with NAME=SPEC")
    types: dict[str, str | None] = {}
    for item in args.value_type:
        column, sep, typ = item.partition("=")
        if not sep or not column or typ not in _VALUE_TYPES:
            raise _Fail(EXIT_USAGE, f"--value-type expects COL=TYPE with TYPE one of {', '.join(_VALUE_TYPES)}; "
                                    f"got {item!r}")
        if column not in value_columns:
            raise _Fail(EXIT_USAGE, f"--value-type {item!r}: {column!r} is not the column of a sum or mean "
                                    f"--metric (value columns: {', '.join(map(repr, value_columns)) or 'none'})")
        if column in types and types[column] != typ:
            raise _Fail(EXIT_USAGE, f"--value-type gives the column {column!r} two types")
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
    from dpselect.files import OutputError, check_destination

    protected = [args.input] + ([args.public_partitions] if args.public_partitions else [])
    try:
        where = check_destination(None if to_stdout else args.output, out_fmt, protected=protected)
    except OutputError as exc:
        raise _Fail(EXIT_OUTPUT, str(exc)) from exc
    sidecar = args.guarantee_json
    if sidecar is not None:
        if sidecar in ("", "-"):
            raise _Fail(EXIT_USAGE, "--guarantee-json needs a file name (the guarantee is printed on stderr too)")
        if not to_stdout and _same_file(sidecar, args.output):
            raise _Fail(EXIT_USAGE, f"--guarantee-json {sidecar!r} is the output file; give it another name")
    elif where.mode == "replace":
        sidecar = args.output + ".guarantee.json"
    named = {"the input": args.input, "the --public-partitions file": args.public_partitions,
             "the output": None if to_stdout else args.output, "the guarantee sidecar": sidecar}
    if args.report is not None and args.report != "-":
        if not args.report:
            raise _Fail(EXIT_USAGE, "--report needs a file name, or '-' for stderr")
        for what, path in named.items():
            if path is not None and _same_file(args.report, path):
                raise _Fail(EXIT_USAGE, f"--report {args.report!r} is {what}: the report is exact and NOT "
                                        "differentially private, it must never overwrite or sit in place of "
                                        "another file; give it a name of its own")
    for flag, path in (("--guarantee-json", sidecar), ("--report", None if args.report in (None, "-") else args.report)):
        if path is None:
            continue
        try:
            check_destination(path, "bytes", protected=protected)
        except OutputError as exc:
            what = "the guarantee sidecar" if flag == "--guarantee-json" and args.guarantee_json is None else flag
            raise _Fail(EXIT_OUTPUT, f"{what} {path!r}: {str(exc).replace(' with the output', '')}") from exc
    return sidecar, args.report


def _aggregate_flags(message: str) -> str:
    """A message of dpselect.aggregate (or its report) with its parameter names, those with an
    underscore that cannot be mistaken for words, turned into the CLI's flags."""
    message = message.replace("null_privacy_units='drop'", "--drop-null-privacy-units")
    for name in ("max_partitions_contributed", "max_contributions_per_partition", "confidence_level",
                 "public_partitions", "privacy_unit"):
        flag = f"--{name.replace('_', '-')}"
        message = message.replace(f"{name}=", f"{flag} ").replace(name, flag)
    return message


def _aggregate(args: argparse.Namespace) -> int:
    """`dpselect aggregate`: read the needed columns, call dpselect.aggregate, write the release,
    its guarantee sidecar and, if asked, the data holder's report."""
    import json

    import dpselect
    from dpselect.files import (
        DEFAULT_BLOCK_SIZE,
        ColumnError,
        InputError,
        OutputError,
        ValueColumnError,
        detect_format,
        open_batches,
        write_outputs,
    )
    from dpselect.rows import (
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
        raise _Fail(EXIT_USAGE, str(exc)) from exc
    to_stdout = args.output in (None, "-")
    out_fmt = _output_format(args, to_stdout)
    sidecar, report_to = _aggregate_destinations(args, out_fmt, to_stdout)
    _probe_rng()

    # Value columns: float64 from text formats unless --value-type says int64; Parquet keeps
    # its declared type unless --value-type names one.
    value_types = {c: pa.int64() if t == "int64" else pa.float64() for c, t in read_types.items()
                   if t is not None or in_fmt != "parquet"}
    columns = [args.privacy_unit, *by, *read_types]
    block_size = args.block_size or DEFAULT_BLOCK_SIZE
    try:
        source = open_batches(args.input, in_fmt, columns, 1 << 20, block_size, value_types=value_types)
        try:
            check_column_types(source.schema, args.privacy_unit, by)
        except ColumnTypeError as exc:
            role = "--privacy-unit" if exc.role == "privacy_unit" else "--by"
            raise _Fail(EXIT_DATA, f"{role} column {exc.column!r} of {args.input!r} has type {exc.type}: "
                                   f"{exc.reason}") from exc
        for column in read_types:
            typ = source.schema.field(column).type
            if not (pa.types.is_integer(typ) or pa.types.is_floating(typ)) or pa.types.is_float16(typ):
                raise _Fail(EXIT_DATA, f"--metric value column {column!r} of {args.input!r} has type {typ}: a "
                                       "value column must hold integers or floats (float32/float64); pass "
                                       f"--value-type {column}=float64 (or int64) to convert it")
        _check_output_types(pa.schema([source.schema.field(c) for c in by]), out_fmt)
        table = pa.Table.from_batches(list(source.batches), schema=source.schema)
    except InputError as exc:
        raise _Fail(EXIT_INPUT, str(exc)) from exc
    except ColumnError as exc:
        raise _Fail(EXIT_DATA, str(exc)) from exc
    except ValueColumnError as exc:
        raise _Fail(EXIT_DATA, f"--metric {exc}. A value column must hold numbers of its type only "
                               "(float64 unless --value-type says int64); nothing was released") from exc
    except (pa.ArrowException, OSError, EOFError) as exc:
        raise _Fail(EXIT_INPUT, f"cannot read {args.input!r} as {in_fmt}: {exc}") from exc

    public = _read_public_partitions(args) if args.public_partitions else None
    null_units = table.column(args.privacy_unit).null_count  # reported only if they are dropped
    try:
        with warnings.catch_warnings():
            # Dropped null privacy units are reported below, in the CLI's own words.
            warnings.simplefilter("ignore", NullPrivacyUnitsDropped)
            result = dpselect.aggregate(table, **_aggregate_parameters(args, metrics), public_partitions=public)
    except NullPrivacyUnitError as exc:
        raise _Fail(EXIT_DATA, (
            f"{exc.rows} row(s) of {args.input!r} have a null privacy unit (column {exc.column!r}); a null "
            "is not one person. Fill in the ids, or pass --drop-null-privacy-units to leave these rows "
            "out. Nothing was released."
        )) from exc
    except RuntimeError as exc:
        if _is_rng_failure(exc):
            raise _Fail(EXIT_RNG, _rng_message(exc)) from exc
        raise
    except (ValueError, TypeError) as exc:
        # Every parameter passed _check_with_library: what fails now fails on this data.
        raise _Fail(EXIT_DATA, f"{args.input!r}: {_aggregate_flags(str(exc))}") from exc
    except OverflowError as exc:  # a noisy statistic beyond int64: this data's sums at these scales
        raise _Fail(EXIT_DATA, f"{args.input!r}: {_aggregate_flags(str(exc).split(';')[0])}; nothing was released. "
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

    if null_units:
        _note(args, f"warning: dropped {null_units} row(s) with a null privacy unit (column {args.privacy_unit!r}). "
                    "This count is exact and NOT differentially private: it is for you, the data holder; do "
                    "not publish it.")
    try:
        write_outputs(items, protected=protected, private=[report_to] if report_to not in (None, "-") else [],
                      log=args.write_log)
    except OutputError as exc:
        if to_stdout:
            _quiet(sys.stdout)
        raise _Fail(EXIT_OUTPUT, str(exc)) from exc
    except BrokenPipeError:
        _quiet(sys.stdout)  # the reader of stdout went away (e.g. `| head`): not an error
        return EXIT_OK
    where = "standard output" if to_stdout else repr(args.output)
    _note(args, f"released {released.num_rows} partitions with {len(metrics)} metric(s) to {where}.")
    _note(args, str(result.guarantee))
    if sidecar is not None:
        _note(args, f"the guarantee and the bounds used are in {sidecar!r}.")
    if report is not None and report_to == "-":
        _write_err(_aggregate_flags(str(report)))
    elif report_to is not None:
        _note(args, f"the data holder's report is in {report_to!r}: exact and NOT differentially private; "
                    "never publish it.")
    return EXIT_OK


def _aggregate_parameters(args: argparse.Namespace, metrics: dict[str, Any]) -> dict[str, Any]:
    """The arguments of dpselect.aggregate that come from the command line (all but the data
    and the public partitions)."""
    return dict(privacy_unit=args.privacy_unit, by=list(args.by), metrics=metrics, epsilon=args.epsilon,
                delta=args.delta, max_partitions_contributed=args.max_partitions_contributed,
                max_contributions_per_partition=args.max_contributions_per_partition,
                strategy=args.strategy or "pi_opt", bounds_scope=args.bounds_scope,
                confidence_level=args.confidence_level,
                null_privacy_units="drop" if args.drop_null_privacy_units else "error")


class _InputNotRead(Exception):
    """Raised when dpselect.aggregate, called on _Unread, asks for its data."""


class _Unread:
    """Stands for the input in a call of dpselect.aggregate made before the input is read. The
    library checks every parameter before it touches its data (here an Arrow stream, which it
    opens first of all), so an error raised before _InputNotRead depends on the command line
    alone."""

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        raise _InputNotRead


def _check_with_library(args: argparse.Namespace, metrics: dict[str, Any]) -> None:
    """Have dpselect.aggregate check the parameters, before any input is read: an impossible
    budget split, a noise scale beyond the kernel, ... are usage errors naming the flags, never
    failures found after reading (which would look like errors in the data). Nothing is drawn
    or released: the call stops where it would read the data."""
    import dpselect
    from dpselect.rows import import_pyarrow

    pa = import_pyarrow()
    # Only whether there are public partitions matters before the data is read.
    public = pa.table({c: pa.array([], pa.string()) for c in args.by}) if args.public_partitions else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the real call gives any warning again
            dpselect.aggregate(_Unread(), **_aggregate_parameters(args, metrics), public_partitions=public)
    except _InputNotRead:
        return
    except (ValueError, TypeError) as exc:
        raise _Fail(EXIT_USAGE, _aggregate_flags(str(exc))) from exc
    except OverflowError as exc:
        raise _Fail(EXIT_USAGE, f"the parameters are out of range ({exc}): lower --max-partitions-contributed, "
                                "--max-contributions-per-partition or the --metric bounds, or raise --epsilon") from exc
    except RuntimeError as exc:
        if _is_rng_failure(exc):
            raise _Fail(EXIT_RNG, _rng_message(exc)) from exc
        raise


def _nan_as_null(table: Any, columns: Sequence[str]) -> Any:
    """``table`` with the NaNs of its float ``columns`` turned into nulls (schema metadata kept)."""
    import pyarrow.compute as pc

    from dpselect.rows import import_pyarrow

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
    from dpselect.files import ColumnError, InputError, detect_format, open_batches
    from dpselect.rows import import_pyarrow

    pa = import_pyarrow()
    try:
        fmt = detect_format(args.public_partitions, None, "input")
        source = open_batches(args.public_partitions, fmt, list(args.by), 1 << 20, args.block_size or 1 << 20)
        return pa.Table.from_batches(list(source.batches), schema=source.schema)
    except (InputError, OSError, pa.ArrowException) as exc:
        raise _Fail(EXIT_INPUT, f"--public-partitions {args.public_partitions!r}: {exc}") from exc
    except (ColumnError, ValueError) as exc:
        raise _Fail(EXIT_DATA, f"--public-partitions {args.public_partitions!r}: {exc}") from exc


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _quiet(stream: Any) -> None:
    """After a failed write to standard output or error, point it at /dev/null so that the
    interpreter's final flush cannot fail again (which would print a traceback and change the
    exit code)."""
    try:
        if stream is None:
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":  # pragma: no cover
    console_main()
