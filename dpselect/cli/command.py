"""The ``dpselect`` command's entry point: dispatch to a command, and turn every error and
interrupt into one line on stderr and an exit code (:mod:`dpselect.cli`)."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from dpselect._threads import resolve_threads, using
from dpselect.cli import aggregate as cli_aggregate
from dpselect.cli import explain as cli_explain
from dpselect.cli import select as cli_select
from dpselect.cli import sql as cli_sql
from dpselect.cli.common import EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, Fail, error, quiet, write_err
from dpselect.cli.parser import build_parser
from dpselect.cli.signals import Terminated, exit_code, ignore_signals, reserve_standard_fds, signals_as_interrupts
from dpselect.core.verify import CertificationError
from dpselect.io.outputs import WriteLog

__all__ = ["console_main", "main"]


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
                if argv and argv[0] in ("aggregate", "sql"):
                    # Its errors carry its name, as argparse's own errors for it do.
                    prog = f"dpselect {argv[0]}"
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
    commands = {"explain": cli_explain.run, "select": cli_select.run, "aggregate": cli_aggregate.run,
                "sql": cli_sql.run}
    try:
        threads = 1 if args.command == "explain" else resolve_threads(getattr(args, "threads", None),
                                                                       name="--threads")
    except (TypeError, ValueError) as exc:  # DPSELECT_MAX_THREADS set to something else than a number
        error(str(exc), prog=prog)
        return EXIT_USAGE
    try:
        with using(threads):
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
