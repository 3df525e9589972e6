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

``dpselect aggregate`` is a DP GROUP BY (:func:`dpselect.aggregate`, :mod:`dpselect.cli_aggregate`):
the released keys and, per key, user counts, row counts, sums and means, with the guarantee also
written as a JSON sidecar next to the output and, on request, the data holder's report (exact,
NOT differentially private). It reads the needed columns of the whole input into memory.

Every error and every interrupt ends in one line on stderr and an exit code (see
``dpselect --help``); the installed command starts in ``_dpselect_command``, which takes the
signals before the package is imported.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from dpselect import cli_aggregate
from dpselect.cli_common import (
    EXIT_CODES,
    EXIT_DATA,
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,  # re-exported: the codes are the command's interface
    EXIT_OK,
    EXIT_OUTPUT,
    EXIT_RNG,
    EXIT_TERMINATED,
    EXIT_USAGE,
    PAPER,
    Fail,
    add_privacy_arguments,
    byte_size,
    check_output_types,
    error,
    is_rng_failure,
    note,
    output_format,
    positive_int,
    probe_rng,
    quiet,
    rng_message,
    shown,
    write_err,
)
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

_EXAMPLE = """\
example:
  dpselect select visits.csv --privacy-unit user_id --by country --by city \\
      --epsilon 1 --delta 1e-6 --max-partitions-contributed 3 --counts -o released.csv
"""

_EPILOG = _EXAMPLE + "\n" + EXIT_CODES + """
Keys and privacy units are read as text from CSV and JSON lines (as written: "007" and "7"
differ), with their declared types from Parquet. A null key (empty CSV cell, JSON null or
missing field, Parquet null) is a key like any other value. A null privacy unit is not a
person: such rows are an error unless --drop-null-privacy-units. Output rows are sorted by key.
Counts (--counts) are noisy: only partitions whose noisy count passed the release threshold
are shown, so those near it lean high. JSON lines output is strict JSON: a float NaN or
infinite key is written as the string "NaN", "Infinity" or "-Infinity" (a null key as null).
See docs/rows.md and docs/privacy/.
"""


def _threshold(text: str) -> int:
    """--public-threshold: an integer up to 2**62, the largest the release kernel compares to."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {shown(text)}") from None
    if value > 2**62:
        raise argparse.ArgumentTypeError(f"expected an integer of at most 2**62, got {shown(text)}")
    return value


def _strategy_names() -> list[str]:
    from dpselect.mechanisms.registry import ROW_STRATEGIES, STRATEGIES

    return sorted(STRATEGIES) + ["auto"] + sorted(ROW_STRATEGIES)


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
    add_privacy_arguments(sel, required=True)
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
    sel.add_argument("--batch-size", type=positive_int, default=1 << 20, metavar="ROWS",
                     help="rows counted per step (default 1048576)")
    sel.add_argument("--block-size", type=byte_size, default=None, metavar="BYTES",
                     help="bytes read per block of CSV or JSON lines (default 1M); a CSV row must fit "
                     "in one block, and memory holds about 40 blocks")
    progress = sel.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None,
                          help="show a progress bar on stderr (default: when stderr is a terminal)")
    progress.add_argument("--no-progress", dest="progress", action="store_false", help="never show it")
    sel.add_argument("--quiet", "-q", action="store_true",
                     help="print nothing on stderr but errors (no progress, summary or warnings)")
    cli_aggregate.add_parser(commands)
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
    add_privacy_arguments(exp, required=True)
    exp.add_argument("--plot", metavar="FILE", help="also draw the keep-probability curves and the paper's "
                     "midpoint figures to FILE (PNG, SVG or PDF; needs the [plot] extra)")
    return parser


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
    commands = {"explain": _explain, "select": _select, "aggregate": cli_aggregate.run}
    try:
        return commands[args.command](args)
    except Fail as fail:
        error(str(fail), prog=prog)
        return fail.code
    except ImportError as exc:
        error(str(exc), prog=prog)
        return EXIT_INTERNAL
    except CertificationError as exc:  # a table failed its exact privacy check: a bug, never sampled
        error(f"internal error: {exc}; nothing was released. Please report this with the command line",
              prog=prog)
        return EXIT_INTERNAL


def _interruption(exc: KeyboardInterrupt, log: WriteLog | None, prog: str) -> int:
    """The message and exit code of a run stopped by a signal, saying exactly what it wrote.
    Once every output is in place the release stands: exit 0, so that no caller runs it again
    (a second release of the same data would spend the budget twice)."""
    what = "interrupted" if not isinstance(exc, Terminated) else f"terminated by signal {exc.signum}"
    if prog == "dpselect audit":
        error(what, newline=True, prog=prog)
        return exit_code(exc)
    if log is not None and log.complete:
        write_err(f"\ndpselect: {what} after every output was written in full ({', '.join(log.written)}): "
                  "the release stands")
        return EXIT_OK
    if log is None or not (log.written or log.partial):
        error(f"{what}; no output was written", newline=True, prog=prog)
        return exit_code(exc)
    untouched = [o for o in log.outputs if o not in log.written and o not in log.partial]
    parts = [f"written in full: {', '.join(log.written)}" if log.written else "",
             f"written in part: {', '.join(log.partial)}" if log.partial else "",
             f"not written (left as they were): {', '.join(untouched)}" if untouched else ""]
    error(f"{what} while writing the outputs; " + "; ".join(p for p in parts if p), newline=True, prog=prog)
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
            quiet(stream)
    if _interrupted:
        os._exit(code)
    sys.exit(code)


def _check_parameters(args: argparse.Namespace) -> Any:
    """The strategy, after checking every value typed, with errors naming the flags."""
    from dpselect.pipeline import build_strategy

    if not math.isfinite(args.epsilon) or args.epsilon < 0:
        raise Fail(EXIT_USAGE, f"--epsilon must be a finite number >= 0, got {args.epsilon:g}")
    if not math.isfinite(args.delta) or args.delta < 0 or args.delta >= 1:
        raise Fail(EXIT_USAGE, f"--delta must be in (0, 1), got {args.delta:g}")
    if args.delta == 0:
        raise Fail(EXIT_USAGE, f"--delta must be > 0: with delta = 0 no key can be released (Theorem 2 of "
                               f"{PAPER}: under pure DP the set of released keys cannot depend on the data)")
    strategies = _strategy_names()
    if args.strategy is None:
        args.strategy = "public" if args.public_partitions else "release"
    if args.strategy not in strategies:
        raise Fail(EXIT_USAGE, f"--strategy must be one of {', '.join(strategies)}; got {args.strategy!r}")
    if args.public_partitions and args.strategy not in ("public", "mixed"):
        raise Fail(EXIT_USAGE, "--public-partitions needs --strategy public or --strategy mixed")
    if not args.public_partitions and args.strategy in ("public", "mixed"):
        raise Fail(EXIT_USAGE, f"--strategy {args.strategy} needs --public-partitions FILE")
    if args.public_threshold is not None and args.strategy != "mixed":
        raise Fail(EXIT_USAGE, "--public-threshold applies to --strategy mixed only")
    by = list(args.by)
    twice = sorted({c for c in by if by.count(c) > 1})
    if twice:
        raise Fail(EXIT_USAGE, f"--by names {', '.join(repr(c) for c in twice)} more than once")
    if args.privacy_unit in by:
        raise Fail(EXIT_USAGE, f"--privacy-unit {args.privacy_unit!r} cannot also be a --by column")
    if args.counts and (args.count_column in by or args.count_column == args.privacy_unit or not args.count_column):
        raise Fail(EXIT_USAGE, f"--count-column {args.count_column!r} clashes with an input column; "
                               "choose another name with --count-column")
    if args.counts and args.strategy not in ("release", "public", "mixed", "auto"):
        raise Fail(EXIT_USAGE, f"--counts needs a strategy that releases noisy counts (--strategy release, "
                               f"public or mixed); --strategy {args.strategy} selects keys only")
    options: dict[str, Any] = {"neighbours": args.neighbours}
    if args.pre_threshold != 1:
        if args.strategy in ("public", "mixed", "auto"):
            raise Fail(EXIT_USAGE, f"--pre-threshold does not apply to --strategy {args.strategy}")
        options["pre_threshold"] = args.pre_threshold
    if args.public_threshold is not None:
        options["public_threshold"] = args.public_threshold
    for item in args.option:
        name, sep, text = item.partition("=")
        if not sep or not name or name in options:
            raise Fail(EXIT_USAGE, f"--option expects NAME=VALUE, once per name; got {item!r}")
        try:
            options[name] = int(text) if text.lstrip("-").isdigit() else float(text) if text != "optimal" else text
        except ValueError:
            raise Fail(EXIT_USAGE, f"--option {name}: expected a number, got {text!r}") from None
    try:
        strat = build_strategy(args.strategy, args.epsilon, args.delta, args.max_partitions_contributed,
                               args.counts, **options)
    except (ValueError, TypeError) as exc:
        raise Fail(EXIT_USAGE, _flags(str(exc))) from exc
    except OverflowError as exc:  # a number too large for a computation of the strategy
        raise Fail(EXIT_USAGE, f"the parameters are out of range for --strategy {args.strategy} ({exc}): lower "
                               "--max-partitions-contributed or the --option values") from exc
    if args.counts and not strat.releases_counts:
        raise Fail(EXIT_USAGE, f"--counts needs a strategy that releases noisy counts (--strategy release, "
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
        raise Fail(EXIT_USAGE, f"--epsilon must be a finite number > 0, got {args.epsilon:g}")
    if not math.isfinite(args.delta) or not 0 < args.delta < 1:
        raise Fail(EXIT_USAGE, f"--delta must be in (0, 1), got {args.delta:g}")
    try:
        text = explain_text(args.epsilon, args.delta, args.max_partitions_contributed,
                            pre_threshold=args.pre_threshold, neighbours=args.neighbours)
        if args.plot:
            plot_mechanisms(args.epsilon, args.delta, args.max_partitions_contributed, args.plot,
                            pre_threshold=args.pre_threshold, neighbours=args.neighbours)
    except ImportError as exc:
        raise Fail(EXIT_USAGE, f"{exc} (for --plot: pip install 'dpselect[plot]')") from exc
    except (ValueError, TypeError) as exc:
        raise Fail(EXIT_USAGE, _flags(str(exc))) from exc
    except OverflowError as exc:
        raise Fail(EXIT_USAGE, f"the parameters are out of range ({exc}): lower --max-partitions-contributed "
                               "or --pre-threshold") from exc
    except OSError as exc:  # the figure's file
        raise Fail(EXIT_OUTPUT, f"cannot write --plot {args.plot!r}: {exc.strerror or exc}") from exc
    if sys.stdout is None:
        raise Fail(EXIT_OUTPUT, "standard output is closed: nothing to print the comparison to")
    try:
        print(text, flush=True)
    except BrokenPipeError:  # the reader went away (e.g. `| head`): not an error
        quiet(sys.stdout)
        return EXIT_OK
    except OSError as exc:
        quiet(sys.stdout)
        raise Fail(EXIT_OUTPUT, f"cannot write to standard output: {exc.strerror or exc}") from exc
    if args.plot:
        write_err(f"dpselect: figures written to {args.plot}")
    return EXIT_OK


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
        raise Fail(EXIT_USAGE, str(exc)) from exc
    to_stdout = args.output in (None, "-")
    out_fmt = output_format(args, to_stdout)
    try:
        check_destination(None if to_stdout else args.output, out_fmt, protected=[args.input])
    except OutputError as exc:
        raise Fail(EXIT_OUTPUT, str(exc)) from exc
    probe_rng()

    try:
        budget = in_memory_budget()  # a parameter (an environment variable): checked before the input is read
    except ValueError as exc:
        raise Fail(EXIT_USAGE, str(exc)) from exc

    columns = [args.privacy_unit, *by]
    block_size = args.block_size or DEFAULT_BLOCK_SIZE
    try:
        source = open_batches(args.input, in_fmt, columns, args.batch_size, block_size)
    except InputError as exc:
        raise Fail(EXIT_INPUT, str(exc)) from exc
    except ColumnError as exc:
        raise Fail(EXIT_DATA, str(exc)) from exc
    try:
        check_column_types(source.schema, args.privacy_unit, by)
    except ColumnTypeError as exc:
        role = "--privacy-unit" if exc.role == "privacy_unit" else "--by"
        raise Fail(EXIT_DATA, f"{role} column {exc.column!r} of {args.input!r} has type {exc.type}: {exc.reason}") from exc
    schema = result_schema(source.schema, by, args.count_column if args.counts else None)
    check_output_types(schema, out_fmt)

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
        raise Fail(EXIT_INPUT, str(exc)) from exc
    except TypeError as exc:
        raise Fail(EXIT_DATA, f"{args.input!r}: {exc}") from exc
    except (pa.ArrowException, OSError, EOFError) as exc:
        raise Fail(EXIT_INPUT, f"cannot read {args.input!r} as {in_fmt}: {exc}") from exc
    except ValueError as exc:
        raise Fail(EXIT_DATA, f"{args.input!r}: {exc}") from exc
    except BaseException:
        progress.close()
        raise
    finally:
        batches.close()  # stops the reader thread if counting ended early

    try:
        counter.check_null_units()
    except NullPrivacyUnitError as exc:
        progress.close()
        raise Fail(EXIT_DATA, (
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
        if is_rng_failure(exc):
            raise Fail(EXIT_RNG, rng_message(exc)) from exc
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
        note(args, f"warning: dropped {counter.null_unit_rows} row(s) with a null privacy unit "
                   f"(column {args.privacy_unit!r}). This count is exact and NOT differentially "
                   "private: it is for you, the data holder; do not publish it.")
    try:
        write_table(released, None if to_stdout else args.output, out_fmt, protected=[args.input], log=args.write_log)
    except OutputError as exc:
        if to_stdout:
            quiet(sys.stdout)
        raise Fail(EXIT_OUTPUT, str(exc)) from exc
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `| head`): not an error for a shell pipeline.
        quiet(sys.stdout)
        return EXIT_OK
    where = "standard output" if to_stdout else repr(args.output)
    note(args, f"released {released.num_rows} partitions to {where}.")
    note(args, (released.schema.metadata or {}).get(GUARANTEE_METADATA_KEY, b"").decode())
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
        raise Fail(EXIT_INPUT, f"--public-partitions {args.public_partitions!r}: {exc}") from exc
    except (ColumnError, ValueError, TypeError) as exc:
        raise Fail(EXIT_DATA, f"--public-partitions {args.public_partitions!r}: {exc}") from exc


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


if __name__ == "__main__":  # pragma: no cover
    console_main()
