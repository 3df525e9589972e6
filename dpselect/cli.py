"""The ``dpselect`` command line: differentially private partition selection on files.

    dpselect select INPUT --privacy-unit COL --by COL [COL ...] --epsilon E --delta D [options]

Reads CSV (optionally .gz/.bz2/.zst), Parquet or JSON lines in streamed batches (files larger
than memory work: memory grows with distinct (user, partition) pairs, not rows), bounds each
user to κ partitions and counts distinct users per partition in C, applies the selection
strategy (spec core.md §1, §3), and writes the kept keys, sorted, to a file (atomically) or
standard output. The privacy guarantee is printed on stderr.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

__all__ = ["EXIT_DATA", "EXIT_INPUT", "EXIT_INTERNAL", "EXIT_OK", "EXIT_OUTPUT", "EXIT_USAGE", "main"]

EXIT_OK = 0
EXIT_INTERNAL = 1  # a bug or a missing dependency: the message says which
EXIT_USAGE = 2  # bad option or parameter value (argparse uses 2 too)
EXIT_INPUT = 3  # input missing, unreadable or not parseable in the given format
EXIT_DATA = 4  # a needed column is missing, or its values cannot be used
EXIT_OUTPUT = 5  # the output cannot be written (or would overwrite the input)
EXIT_INTERRUPTED = 130

_EPILOG = """\
exit codes:
  0  success
  1  internal error or missing dependency (pip install 'dpselect[frames]')
  2  bad option or parameter value
  3  input file missing, unreadable, or not in the expected format
  4  a needed column is missing or its values cannot be used
  5  output cannot be written (or would overwrite the input)

A null (empty CSV cell, JSON null, Parquet null) is a key like any other value; a null privacy
unit is one privacy unit. Output rows are sorted by key. Counts (--counts) are noisy: only
partitions whose noisy count passed the threshold are shown, so those near it lean high.
"""


class _Fail(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpselect", description="Differentially private partition selection.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sel = commands.add_parser(
        "select",
        help="release the partitions (distinct keys) of a file under (epsilon, delta)-DP",
        description="Release the partitions (GROUP BY keys) of INPUT that pass a differentially "
        "private selection, optionally with noisy distinct-user counts.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sel.add_argument("input", metavar="INPUT", help="CSV (.csv, .csv.gz, .tsv), Parquet or JSON lines file")
    sel.add_argument("--privacy-unit", "-u", required=True, metavar="COL", help="column identifying the user")
    sel.add_argument("--by", "-b", required=True, nargs="+", action="extend", metavar="COL",
                     help="partition column(s); several columns form one key (GROUP BY a, b)")
    sel.add_argument("--epsilon", "-e", required=True, type=_number, help="privacy parameter epsilon > 0")
    sel.add_argument("--delta", "-d", required=True, type=_number, help="privacy parameter 0 < delta < 1")
    sel.add_argument("--max-partitions-contributed", "-k", type=_positive_int, default=1, metavar="K",
                     help="bound each user to at most K partitions, chosen uniformly at random (default 1)")
    sel.add_argument("--strategy", default="release",
                     help="selection mechanism: 'release' (TSGD thresholded release, default) or 'pi_opt'")
    sel.add_argument("--counts", action="store_true", help="also output the noisy distinct-user counts")
    sel.add_argument("--count-column", default="noisy_count", metavar="NAME", help="name of the count column")
    sel.add_argument("--output", "-o", default="-", metavar="FILE", help="output file (default: standard output)")
    sel.add_argument("--output-format", choices=("csv", "parquet", "jsonl"),
                     help="output format (default: from the output name, csv on standard output)")
    sel.add_argument("--input-format", choices=("csv", "parquet", "jsonl"), help="input format (default: from the name)")
    sel.add_argument("--batch-size", type=_positive_int, default=1 << 20, metavar="ROWS",
                     help="rows read per batch (default 1048576)")
    progress = sel.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None,
                          help="show a progress bar on stderr (default: when stderr is a terminal)")
    progress.add_argument("--no-progress", dest="progress", action="store_false")
    sel.add_argument("--quiet", "-q", action="store_true", help="print nothing on stderr but errors")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dpselect`` command; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return _select(args)
    except _Fail as fail:
        print(f"dpselect: error: {fail}", file=sys.stderr)
        return fail.code
    except ImportError as exc:
        print(f"dpselect: error: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
    except KeyboardInterrupt:
        print("\ndpselect: interrupted; no output was written", file=sys.stderr)
        return EXIT_INTERRUPTED


def _select(args: argparse.Namespace) -> int:
    from dpselect.files import (
        ColumnError,
        InputError,
        OutputError,
        coalesce,
        detect_format,
        open_batches,
        write_table,
    )
    from dpselect.pipeline import build_strategy, check_columns, release_table
    from dpselect.progress import Progress
    from dpselect.rows import RowCounter, import_pyarrow

    pa = import_pyarrow()
    # Everything the user typed is checked before the input is touched.
    try:
        in_fmt = detect_format(args.input, args.input_format, "input")
        to_stdout = args.output in (None, "-")
        out_fmt = args.output_format or ("csv" if to_stdout else detect_format(args.output, None, "output"))
        by = check_columns(args.privacy_unit, args.by, args.count_column)
        strat = build_strategy(args.strategy, args.epsilon, args.delta, args.max_partitions_contributed, args.counts)
    except (ValueError, TypeError) as exc:
        raise _Fail(EXIT_USAGE, str(exc)) from exc
    if (not to_stdout and os.path.exists(args.output) and os.path.exists(args.input)
            and os.path.samefile(args.output, args.input)):
        raise _Fail(EXIT_OUTPUT, f"refusing to overwrite the input file {args.input!r} with the output")

    columns = [args.privacy_unit, *by]
    try:
        source = open_batches(args.input, in_fmt, columns, args.batch_size)
    except InputError as exc:
        raise _Fail(EXIT_INPUT, str(exc)) from exc
    except ColumnError as exc:
        raise _Fail(EXIT_DATA, str(exc)) from exc

    show = args.progress if args.progress is not None else (sys.stderr.isatty() and not args.quiet)
    progress = Progress(enabled=bool(show))
    counter = RowCounter(args.privacy_unit, by)

    def min_rows() -> int:
        largest = max([counter.n_users, counter.n_partitions])
        return max(args.batch_size, 2 * largest)

    try:
        for table in coalesce(source.batches, min_rows):
            counter.feed(table)
            progress.update(counter.rows, source.progress())
    except TypeError as exc:
        raise _Fail(EXIT_DATA, f"{args.input!r}: {exc}") from exc
    except (pa.ArrowException, OSError, EOFError) as exc:
        raise _Fail(EXIT_INPUT, f"cannot read {args.input!r} as {in_fmt}: {exc}") from exc
    except ValueError as exc:
        raise _Fail(EXIT_DATA, f"{args.input!r}: {exc}") from exc
    finally:
        progress.close()

    partitions = counter.finish(strat.max_partitions_contributed, strat.count_cap)
    released = release_table(partitions, strat, counts=args.counts, count_column=args.count_column)
    try:
        write_table(released, None if to_stdout else args.output, out_fmt, protected=[args.input])
    except OutputError as exc:
        raise _Fail(EXIT_OUTPUT, str(exc)) from exc
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `| head`): not an error for a shell pipeline.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    if not args.quiet:
        where = "standard output" if to_stdout else repr(args.output)
        print(f"dpselect: released {released.num_rows} partitions to {where}.", file=sys.stderr)
        print(f"dpselect: {strat.guarantee}", file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
