"""What the ``dpselect`` commands share: exit codes, argument types, the messages on stderr,
the output format, and the checks made before any work (the secure random source).

Messages go through :func:`write_err`: a standard error that is closed, full or gone loses
them, never the run (see :mod:`dpselect.cli`)."""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
from decimal import Decimal, InvalidOperation
from typing import Any, Callable

from dpselect.errors import DPSelectError

__all__ = [
    "api_flags",
    "strategy_names",
    "EXIT_CODES",
    "EXIT_DATA",
    "EXIT_INPUT",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_OUTPUT",
    "EXIT_RNG",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "INT64_MAX",
    "PAPER",
    "Fail",
    "add_privacy_arguments",
    "byte_size",
    "check_output_types",
    "error",
    "is_rng_failure",
    "note",
    "number",
    "output_format",
    "positive_int",
    "add_threads_argument",
    "thread_count",
    "positive_int_or_auto",
    "probe_rng",
    "quiet",
    "rng_message",
    "shown",
    "write_err",
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

PAPER = ('Desfontaines, Voss, Gipson, Mandayam, "Differentially private partition selection", '
         "PoPETs 2022")

EXIT_CODES = """\
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


class Fail(DPSelectError):
    """An error of a command: its message (one line on stderr) and its exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# Every count dpselect handles is an int64.
INT64_MAX = 2**63 - 1


def shown(text: str) -> str:
    """A value as typed, shortened if it is very long."""
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text)} characters)"


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {shown(text)}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {shown(text)}")
    if value > INT64_MAX:
        raise argparse.ArgumentTypeError(f"expected a positive integer of at most 2**63 - 1, got {shown(text)}")
    return value


def add_threads_argument(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--threads", type=thread_count, default=None, metavar="N",
                     help="threads to use (default: the environment variable DPSELECT_MAX_THREADS, else "
                     "every core this process may use, from its CPU affinity and cgroup quota); the "
                     "output does not depend on it")


def thread_count(text: str) -> int:
    """--threads: a whole number of threads, checked as ``threads=`` is in Python."""
    from dpselect._threads import resolve_threads

    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of threads (>= 1), got {shown(text)}") from None
    try:
        return resolve_threads(number, name="--threads")
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--threads ")) from None


def positive_int_or_auto(text: str) -> int | str:
    """A contribution bound: a positive integer, or exactly "auto" (chosen privately from the
    rows with a share of epsilon; docs/privacy/auto-bounds.md)."""
    if text == "auto":
        return text
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError as exc:  # the integer's message, saying "auto" is also accepted
        message = str(exc).replace("expected a positive integer,", "expected a positive integer or 'auto',", 1)
        raise argparse.ArgumentTypeError(message) from None


def byte_size(text: str) -> int:
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


def number(text: str) -> float:
    """A float64 that is the number typed, or as close as float64 allows: a nonzero number whose
    magnitude is below the smallest normal float64 (about 2.2e-308; it would become 0 or a
    subnormal with fewer significant digits than asked) or above the largest (it would become
    infinity) is refused here, naming the flag, rather than failing deep in a computation."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {shown(text)}") from None
    try:
        exact = Decimal(text.strip().replace("_", ""))
    except InvalidOperation:  # pragma: no cover - float() accepted it, so Decimal does too
        return value
    if exact.is_finite() and exact != 0:
        if math.isinf(value):
            raise argparse.ArgumentTypeError(f"{shown(text)} is too large for a float64 (at most "
                                             f"{sys.float_info.max:.17g})")
        if abs(value) < sys.float_info.min:
            raise argparse.ArgumentTypeError(f"{shown(text)} is too close to 0 for a float64 to hold (a nonzero "
                                             f"value must be at least {sys.float_info.min:.17g} in magnitude)")
    return value


def add_privacy_arguments(cmd: argparse.ArgumentParser, required: bool, selection_options: bool = True) -> None:
    cmd.add_argument("--epsilon", "-e", required=required, type=number,
                     help="privacy parameter epsilon >= 0" if selection_options else
                     "privacy parameter epsilon > 0, for the whole release (keys, bounds and every metric)")
    cmd.add_argument("--delta", "-d", required=required, type=number,
                     help="privacy parameter 0 < delta < 1" if selection_options else
                     "privacy parameter 0 < delta < 1, all of it for the key selection (0 is allowed with "
                     "--public-partitions)")
    if not selection_options:  # dpselect aggregate: κ has no default (see _require_contribution_bounds)
        cmd.add_argument("--max-partitions-contributed", type=positive_int_or_auto, default=None, metavar="K",
                         help="required: keep at most K partitions (keys) of each user, chosen uniformly at "
                         "random; the noise of every statistic grows with K. 'auto': K chosen privately from "
                         "the rows, with a share of epsilon")
        return
    cmd.add_argument("--max-partitions-contributed", type=positive_int_or_auto, default=1, metavar="N",
                     help="bound each user to at most N partitions, chosen uniformly at random "
                     "(default 1); the budget is split over them. 'auto': N chosen privately from the rows "
                     "with a tenth of epsilon (a count-based --strategy)")
    cmd.add_argument("--neighbours", choices=("add_remove", "replace"), default="add_remove",
                     help="neighbouring datasets: add or remove one user (default), or replace one user's "
                     "rows (bounded DP: the budget is split over twice as many partitions)")
    cmd.add_argument("--pre-threshold", type=positive_int, default=1, metavar="TAU",
                     help="never release a partition with fewer than TAU users; decide the rest on "
                     "users - (TAU - 1) (default 1: none)")


def error(message: str, newline: bool = False, prog: str = "dpselect") -> None:
    write_err(f"{chr(10) if newline else ''}{prog}: error: {message}")


def note(args: argparse.Namespace, message: str) -> None:
    if not args.quiet:
        write_err(f"dpselect: {message}")


def write_err(text: str) -> None:
    """Print ``text`` on stderr. If stderr is closed, full or a pipe whose reader went away, the
    text is lost and stderr is pointed at /dev/null, so that neither a later message nor the
    interpreter's final flush fails again: what was released stays released, with exit 0."""
    stream = sys.stderr
    if stream is None:  # started with stderr closed (print(file=None) would write to stdout)
        return
    try:
        print(text, file=stream, flush=True)
    except (OSError, ValueError):
        quiet(stream)


def quiet(stream: Any) -> None:
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


def deliver(write: Callable[[], object], to_stdout: bool) -> bool:
    """Run ``write`` (the release and its files): a failed write is Fail(EXIT_OUTPUT) with stdout
    silenced; a reader of stdout that went away (e.g. ``| head``) is not an error for a shell
    pipeline: False (the caller exits 0 and says nothing more). True when all was written."""
    from dpselect.io.files import OutputError

    try:
        write()
    except OutputError as exc:
        if to_stdout:
            quiet(sys.stdout)
        raise Fail(EXIT_OUTPUT, str(exc)) from exc
    except BrokenPipeError:
        quiet(sys.stdout)
        return False
    return True


def output_format(args: argparse.Namespace, to_stdout: bool) -> str:
    from dpselect.io.files import detect_format

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
        raise Fail(EXIT_USAGE, str(exc)) from exc


def check_output_types(schema: Any, out_fmt: str) -> None:
    """Refuse, before any work, key types the output format cannot hold."""
    from dpselect.ingest.rows import import_pyarrow, key_type

    pa = import_pyarrow()
    if out_fmt == "parquet":
        return
    for f in schema:
        t = key_type(f.type)
        if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
            raise Fail(EXIT_USAGE, f"column {f.name!r} holds bytes, which --output-format {out_fmt} cannot "
                                   "write faithfully; use --output-format parquet (or -o FILE.parquet)")


def probe_rng() -> None:
    """Draw from the secure generator once before any work, so an environment without a
    working OS random source fails fast."""
    from dpselect.rng import SecureRNG

    try:
        SecureRNG().random_bytes(16)
    except RuntimeError as exc:
        raise Fail(EXIT_RNG, rng_message(exc)) from exc


def rng_message(exc: BaseException) -> str:
    return (f"secure randomness is unavailable ({exc}); nothing was released. Check that the "
            "operating system's random source (getrandom, /dev/urandom) works here, then run again")


def is_rng_failure(exc: RuntimeError) -> bool:
    return "random number generator" in str(exc)


def strategy_names() -> list[str]:
    from dpselect.mechanisms.registry import ROW_STRATEGIES, STRATEGIES

    return sorted(STRATEGIES) + ["auto"] + sorted(ROW_STRATEGIES)


def api_flags(message: str) -> str:
    """A message from the Python API, with parameter names turned into the CLI's flags."""
    message = message.replace("takes the options", "takes only --option").replace("strategy '", "--strategy '")
    # strategy='release', 'public' or 'mixed' -> --strategy release, public or mixed
    message = re.sub(r"\bstrategy=('\w+'(?:, '\w+')*(?:,? or '\w+')?)",
                     lambda m: "--strategy " + m.group(1).replace("'", ""), message)
    message = re.sub(r"^strategy\b", "--strategy", message)
    message = re.sub(r"\bcounts=True", "--counts", message)
    message = re.sub(r"^by\b", "--by", message)
    message = re.sub(r"\ba by column\b", "a --by column", message)
    for name in ("max_partitions_contributed", "pre_threshold", "public_threshold", "public_partitions",
                 "privacy_unit", "count_column", "epsilon", "delta"):
        flag = f"--{name.replace('_', '-')}"
        message = message.replace(f"{name}=", f"{flag} ").replace(f" {name} ", f" {flag} ")
        if "_" in name:  # unmistakable for a word: replaced wherever it stands
            message = re.sub(rf"(?<![-\w]){name}\b", flag, message)
    return message
