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
import signal
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

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
  0    success
  1    internal error or missing dependency (pip install 'dpselect[arrow]')
  2    bad option or parameter value
  3    input file missing, unreadable, or not in the expected format
  4    a needed column is missing, ambiguous, of an unusable type, or has null privacy units
  5    output cannot be written (or would overwrite the input, or is read-only)
  6    the operating system's random number generator failed: nothing was released
  130  interrupted (Ctrl-C); 143 terminated (SIGTERM): nothing was written
"""

_EPILOG = _EXAMPLE + "\n" + _EXIT_CODES + """
Keys and privacy units are read as text from CSV and JSON lines (as written: "007" and "7"
differ), with their declared types from Parquet. A null key (empty CSV cell, JSON null or
missing field, Parquet null) is a key like any other value. A null privacy unit is not a
person: such rows are an error unless --drop-null-privacy-units. Output rows are sorted by key.
Counts (--counts) are noisy: only partitions whose noisy count passed the release threshold
are shown, so those near it lean high. See docs/rows.md and docs/privacy/.
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
    "or has null privacy units", "has null privacy units,\n       or a value column holds something other than numbers") + """
metrics (--metric [NAME=]SPEC, repeatable; the output column is NAME, or the default shown):
  users, count_distinct_units   privacy units (users) kept in the key after bounding   [users]
  count, rows                   rows kept in the key after bounding                    [count]
  sum:COL, sum:COL:LO:HI        sum of the numeric column COL over the kept rows        [sum_COL]
  mean:COL, mean:COL:LO:HI      mean of COL over the kept rows                          [mean_COL]
Each value of COL is clamped to [LO, HI]. A column is clamped once: its metrics must give the
same LO:HI, or some give it and the others none. A column no metric gives bounds to gets them
privately (APPROX_BOUNDS, with its own share of epsilon); the bounds used are in the sidecar.
Column names containing ':' cannot be used in a SPEC.

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


class _Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C so every cleanup (the output's temporary file)
    runs on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
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
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


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
    cmd.add_argument("--max-partitions-contributed", type=_positive_int, default=1, metavar="N",
                     help="bound each user to at most N partitions, chosen uniformly at random "
                     "(default 1); the budget is split over them")
    if not selection_options:
        return
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
    sel.add_argument("--public-threshold", type=int, default=None, metavar="T",
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
    agg.add_argument("--max-contributions-per-partition", type=_positive_int, default=1, metavar="L",
                     help="keep at most L rows of each user in each of its partitions, chosen uniformly at "
                     "random (default 1); row counts, sums and means get L times the noise")
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
                     "found gets an empty value)")
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


@contextmanager
def _signals_as_interrupts() -> Iterator[None]:
    """SIGTERM and SIGHUP behave like Ctrl-C while the command runs, so a killed run removes
    its temporary output like an interrupted one (the default action would leave it behind)."""

    def handler(signum: int, frame: Any) -> None:
        raise _Terminated(signum)

    previous = {}
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is None:
            continue
        try:
            previous[signum] = signal.signal(signum, handler)
        except ValueError:  # not the main thread: leave signals alone
            pass
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dpselect`` command; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "audit":
        # The audits have their own parser (dpselect.audit.runner): exit 0 all pass, 1 a failure.
        from dpselect.audit.runner import main as audit_main

        return audit_main(argv[1:])
    parser = build_parser()
    if not argv:
        parser.print_help()
        return EXIT_OK
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    commands = {"explain": _explain, "select": _select, "aggregate": _aggregate}
    # The aggregate command's errors carry its name, as argparse's own errors for it do.
    prog = "dpselect aggregate" if args.command == "aggregate" else "dpselect"
    with _signals_as_interrupts():
        try:
            return commands[args.command](args)
        except _Fail as fail:
            _error(str(fail), prog=prog)
            return fail.code
        except ImportError as exc:
            _error(str(exc), prog=prog)
            return EXIT_INTERNAL
        except KeyboardInterrupt as exc:
            global _interrupted
            _interrupted = True
            _error("interrupted; no output was written" if not isinstance(exc, _Terminated)
                   else f"terminated by signal {exc.signum}; no output was written", newline=True, prog=prog)
            return 128 + exc.signum if isinstance(exc, _Terminated) else EXIT_INTERRUPTED


# Set by main() when a run ended on Ctrl-C or a signal, after its cleanup ran.
_interrupted = False


def console_main() -> None:
    """The ``dpselect`` command: main(), then exit with its code.

    A run stopped by a signal may leave pyarrow's reader threads mid-read (its CSV read-ahead);
    letting the interpreter finalize then can destroy a running C++ thread and abort the process
    (exit -6 instead of 128 + the signal). Its temporary output is already removed by then, so
    such a run flushes what it printed and leaves at once, without finalization."""
    code = main()
    if _interrupted:
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    sys.exit(code)


def _error(message: str, newline: bool = False, prog: str = "dpselect") -> None:
    try:
        print(f"{chr(10) if newline else ''}{prog}: error: {message}", file=sys.stderr)
    except (OSError, AttributeError):  # stderr closed too: the exit code is all there is
        pass


def _note(args: argparse.Namespace, message: str) -> None:
    if not args.quiet and sys.stderr is not None:
        print(f"dpselect: {message}", file=sys.stderr)


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
    if args.counts and not strat.releases_counts:
        raise _Fail(EXIT_USAGE, f"--counts needs a strategy that releases noisy counts (--strategy release, "
                                f"public or mixed); --strategy {args.strategy} selects keys only")
    return strat


def _flags(message: str) -> str:
    """A message from the Python API, with parameter names turned into the CLI's flags."""
    message = message.replace("takes the options", "takes only --option").replace("strategy '", "--strategy '")
    for name in ("max_partitions_contributed", "pre_threshold", "public_threshold", "epsilon", "delta"):
        message = message.replace(f"{name}=", f"--{name.replace('_', '-')} ").replace(
            f" {name} ", f" --{name.replace('_', '-')} ")
    return message


def _explain(args: argparse.Namespace) -> int:
    """`dpselect explain`: the mechanisms side by side, the recommendation, optional figures."""
    from dpselect.explain import explain_text, plot_mechanisms

    if not math.isfinite(args.epsilon) or args.epsilon <= 0:
        raise _Fail(EXIT_USAGE, f"--epsilon must be a finite number > 0, got {args.epsilon:g}")
    if not math.isfinite(args.delta) or not 0 < args.delta < 1:
        raise _Fail(EXIT_USAGE, f"--delta must be in (0, 1), got {args.delta:g}")
    try:
        print(explain_text(args.epsilon, args.delta, args.max_partitions_contributed,
                           pre_threshold=args.pre_threshold, neighbours=args.neighbours))
        if args.plot:
            plot_mechanisms(args.epsilon, args.delta, args.max_partitions_contributed, args.plot,
                            pre_threshold=args.pre_threshold, neighbours=args.neighbours)
            print(f"dpselect: figures written to {args.plot}", file=sys.stderr)
    except ImportError as exc:
        raise _Fail(EXIT_USAGE, f"{exc} (for --plot: pip install 'dpselect[plot]')") from exc
    except (ValueError, TypeError) as exc:
        raise _Fail(EXIT_USAGE, _flags(str(exc))) from exc
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
    try:
        budget = in_memory_budget()
    except ValueError as exc:
        raise _Fail(EXIT_USAGE, str(exc)) from exc
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
        write_table(released, None if to_stdout else args.output, out_fmt, protected=[args.input])
    except OutputError as exc:
        if to_stdout:
            _quiet_stdout()
        raise _Fail(EXIT_OUTPUT, str(exc)) from exc
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `| head`): not an error for a shell pipeline.
        _quiet_stdout()
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
            raise bad(f"the bounds {parts[1]!r} and {parts[2]!r} must be numbers") from None
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise bad("the bounds must be finite numbers")
        if lo > hi:
            raise bad(f"the bounds are inverted: LO = {parts[1]} is above HI = {parts[2]}")
        bounds = (lo, hi)
    make = dpselect.sum if kind == "sum" else dpselect.mean
    return name or f"{kind}_{column}", make(column, bounds=bounds)


def _aggregate_plan(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The metrics by output name and the value columns' read types (None: as declared),
    after checking every value typed, with errors naming the flags."""
    by = list(args.by)
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
    # Everything the user typed is checked before the input is touched.
    metrics, read_types = _aggregate_plan(args)
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
            result = dpselect.aggregate(
                table, privacy_unit=args.privacy_unit, by=by, metrics=metrics, epsilon=args.epsilon,
                delta=args.delta, max_partitions_contributed=args.max_partitions_contributed,
                max_contributions_per_partition=args.max_contributions_per_partition, public_partitions=public,
                strategy=args.strategy or "pi_opt", bounds_scope=args.bounds_scope,
                confidence_level=args.confidence_level,
                null_privacy_units="drop" if args.drop_null_privacy_units else "error")
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
        raise _Fail(EXIT_DATA, f"{args.input!r}: {_aggregate_flags(str(exc))}") from exc
    del table

    released = result.frame
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
        write_outputs(items, protected=protected, private=[report_to] if report_to not in (None, "-") else [])
    except OutputError as exc:
        if to_stdout:
            _quiet_stdout()
        raise _Fail(EXIT_OUTPUT, str(exc)) from exc
    except BrokenPipeError:
        _quiet_stdout()  # the reader of stdout went away (e.g. `| head`): not an error
        return EXIT_OK
    where = "standard output" if to_stdout else repr(args.output)
    _note(args, f"released {released.num_rows} partitions with {len(metrics)} metric(s) to {where}.")
    _note(args, str(result.guarantee))
    if sidecar is not None:
        _note(args, f"the guarantee and the bounds used are in {sidecar!r}.")
    if report is not None and report_to == "-":
        _print_err(_aggregate_flags(str(report)))
    elif report_to is not None:
        _note(args, f"the data holder's report is in {report_to!r}: exact and NOT differentially private; "
                    "never publish it.")
    return EXIT_OK


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


def _print_err(text: str) -> None:
    try:
        print(text, file=sys.stderr)
    except (OSError, AttributeError):
        pass


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _quiet_stdout() -> None:
    """After a failed write to standard output, point it at /dev/null so the interpreter's final
    flush cannot fail again (which would print a traceback and change the exit code)."""
    try:
        if sys.stdout is None:
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":  # pragma: no cover
    console_main()
