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

_AGGREGATE_EPILOG = _AGGREGATE_EXAMPLE + "\n" + _EXIT_CODES + """
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
COL=int64 reads COL as integers instead (exact integer sums, step 1), --value-type COL=float64
converts a Parquet column. An empty cell, null, NaN or infinity in a value column is an error.
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
    cmd.add_argument("--epsilon", "-e", required=required, type=_number, help="privacy parameter epsilon >= 0")
    cmd.add_argument("--delta", "-d", required=required, type=_number, help="privacy parameter 0 < delta < 1")
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
        description="Differentially private partition selection: release the keys of a GROUP BY "
        "that are safe to publish (select), or the keys and their statistics (aggregate).",
        epilog=_EXAMPLE + "\nRun 'dpselect select --help' or 'dpselect aggregate --help' for every option.",
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
                     "as JSON, or to stderr as text with '-'. Exact and NOT differentially private: never "
                     "publish it, never next to the release")
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
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
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
            _error("interrupted; no output was written" if not isinstance(exc, _Terminated)
                   else f"terminated by signal {exc.signum}; no output was written", newline=True, prog=prog)
            return 128 + exc.signum if isinstance(exc, _Terminated) else EXIT_INTERRUPTED


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
    batches = read_ahead(source.batches)
    try:
        for table in coalesce(batches, lambda: args.batch_size):
            if counter.rows == 0:  # size the pair set once: from the metadata, or extrapolated
                fraction = source.progress()
                counter.expect_rows(source.rows or (int(table.num_rows / fraction) if fraction else 0))
            counter.feed(table)
            progress.update(counter.rows, source.progress())
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
    sys.exit(main())
