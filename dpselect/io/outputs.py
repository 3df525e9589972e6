"""Writing the CLI's outputs: whole or not at all, and several outputs as one release.

A regular file is written in full to a temporary file beside it (synced, with the permissions
it will keep) and renamed over its destination, so a reader never sees half a file and a failed
run leaves no partial output behind. Pipes and character devices (a FIFO, ``/dev/stdout``) and
standard output are written through; symlinks are followed to the file they name; a read-only
output is never replaced.

Several outputs (``dpselect aggregate``'s release, its guarantee sidecar and the data holder's
report) are renamed into place one after another, the release last, with SIGINT, SIGTERM and
SIGHUP held meanwhile (:func:`dpselect.cli.signals.signals_held`): an interrupt leaves either
none or all of them replaced. A :class:`WriteLog` says which were written when something else
(SIGKILL aside) stopped the run part way.

JSON lines are strict JSON (RFC 8259): a float NaN or infinity, which JSON cannot write as a
number, is written as the string "NaN", "Infinity" or "-Infinity" (the convention of Protocol
Buffers' JSON mapping), never as a bare ``NaN`` token.
"""
from __future__ import annotations

import json
import math
import os
import signal
import stat
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from dpselect.errors import DPSelectError
from dpselect.ingest.rows import import_pyarrow

__all__ = [
    "OutputError",
    "WriteLog",
    "check_destination",
    "json_line",
    "write_outputs",
    "write_table",
]

# Fault injection for the test suite only: deliver SIGTERM to ourselves at a named point, so
# that signal handling can be tested deterministically (no sleeps, no races).
_TEST_SIGNAL_ENV = "DPSELECT_TEST_SIGTERM_AT"


class OutputError(DPSelectError):
    """The output cannot be written."""


def _test_signal_point(point: str) -> None:
    if os.environ.get(_TEST_SIGNAL_ENV) == point:
        os.kill(os.getpid(), signal.SIGTERM)


@dataclass
class WriteLog:
    """What :func:`write_outputs` has written, for a caller stopped part way (by a signal) to say
    exactly which outputs changed. Outputs are named as messages show them ('out.csv', or
    standard output)."""

    outputs: list[str] = field(default_factory=list)  # every destination, once all are checked
    written: list[str] = field(default_factory=list)  # written in full (a file renamed into place)
    partial: list[str] = field(default_factory=list)  # a pipe, device or standard output begun, not finished

    @property
    def complete(self) -> bool:
        """Every output is written in full: the release stands."""
        return bool(self.outputs) and len(self.written) == len(self.outputs)



@dataclass
class _Destination:
    """Where and how an output is written."""

    path: str | None  # None: standard output
    mode: str  # "stdout", "through" (a pipe or device, written in place), "replace" (atomic)
    shown: str = field(default="")


def check_destination(destination: str | None, fmt: str, protected: Sequence[str] = ()) -> _Destination:
    """Decide how ``destination`` will be written, and refuse what cannot be, before any work.
    Raises OutputError with what to do instead."""
    if destination in (None, "-"):
        if sys.stdout is None:
            raise OutputError("standard output is closed; give an output file with -o FILE")
        if fmt == "parquet" and sys.stdout.isatty():
            raise OutputError("parquet output is binary: give an output file with -o FILE.parquet")
        return _Destination(None, "stdout", "standard output")
    assert destination is not None
    shown = repr(destination)
    try:
        st = os.stat(destination)  # follows symlinks
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputError(f"cannot use {shown} as output: {exc.strerror or exc}") from exc
    if st is not None:
        for path in protected:
            if os.path.exists(path) and os.path.samefile(destination, path):
                raise OutputError(f"refusing to overwrite the input file {path!r} with the output")
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(f"output {shown} is a directory; give a file name")
        target = os.path.realpath(destination)
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode) or target.startswith("/proc/"):
            # A pipe, a terminal, /dev/null, /dev/stdout: written in place, never replaced.
            return _Destination(destination, "through", shown)
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(f"output {shown} is neither a regular file nor a pipe or character device; "
                              "give a regular file name")
        if st.st_mode & 0o222 == 0 or not os.access(target, os.W_OK):
            raise OutputError(f"output {shown} is read-only; dpselect does not replace it. Make it "
                              "writable (chmod u+w) or remove it, or choose another name with -o")
    else:
        # A new file, or a symlink to a file not yet created: write where the link points.
        target = os.path.realpath(destination)
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise OutputError(f"output directory {directory!r} does not exist")
    # The output is written to a new file beside it, then renamed: both need the directory
    # writable (permissions, or a read-only file system). Refused now, before any work.
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {shown}: its directory {directory!r} is not writable")
    return _Destination(target, "replace", shown)


def write_table(table: Any, destination: str | None, fmt: str, protected: Sequence[str] = (),
                log: WriteLog | None = None) -> None:
    """Write ``table`` to ``destination`` (None or "-": standard output). Regular files are
    replaced atomically; pipes and character devices are written through. Refuses to write
    over any path in ``protected`` (the input). Raises OutputError (BrokenPipeError when the
    reader of standard output went away). ``log`` as for :func:`write_outputs`."""
    write_outputs([(table, destination, fmt)], protected, log=log)


def write_outputs(items: Sequence[tuple[Any, str | None, str]], protected: Sequence[str] = (),
                  private: Sequence[str] = (), log: WriteLog | None = None) -> None:
    """Write several outputs together: each item is (content, destination, fmt), the content a
    table (fmt csv, parquet or jsonl) or bytes (fmt "bytes"), the destination as for
    :func:`write_table`. Every regular file is first written in full to a temporary file beside
    it; then the pipes, devices and standard output are written; then every temporary file is
    renamed over its destination, in the order of ``items`` (give the release last), with the
    stop signals held until the last rename is done. A failure before the renames leaves every
    regular-file destination as it was and no temporary file behind. Raises OutputError
    (BrokenPipeError when the reader of standard output went away: the regular files are still
    renamed, as what was written there was released). A new file whose destination is in
    ``private`` is created readable by its owner only (an existing one keeps its permissions).
    ``log``, if given, records each output as it is written."""
    pa = import_pyarrow()
    log = log if log is not None else WriteLog()
    places = [(content, check_destination(destination, fmt, protected), fmt, destination in private)
              for content, destination, fmt in items]
    files = [where.path for _, where, _, _ in places if where.mode == "replace" and where.path is not None]
    twice = sorted({path for path in files if files.count(path) > 1})
    if twice:
        raise OutputError(f"two outputs would be written to the same file {twice[0]!r}; give them different names")
    log.outputs[:] = [where.shown for _, where, _, _ in places]
    staged: list[tuple[str, _Destination]] = []
    try:
        for content, where, fmt, owner_only in places:
            if where.mode == "replace":
                staged.append((_stage(content, where, fmt, 0o600 if owner_only else 0o666), where))
        broken: BrokenPipeError | None = None
        for content, where, fmt, _ in places:
            if where.mode == "replace":
                continue
            log.partial.append(where.shown)
            if where.mode == "stdout":
                try:
                    _write_stdout(content, fmt)
                except BrokenPipeError as exc:
                    broken = exc
                    continue
            else:
                assert where.path is not None
                try:
                    with open(where.path, "wb") as sink:
                        _write(content, sink, fmt)
                except (OSError, pa.ArrowException) as exc:
                    raise OutputError(f"cannot write {where.shown}: {getattr(exc, 'strerror', None) or exc}") from exc
            log.partial.remove(where.shown)
            log.written.append(where.shown)
        # Imported here, not at the top: dpselect.cli imports this module, and dpselect.io.files
        # (which imports this module) must import on its own, before dpselect.cli.
        from dpselect.cli.signals import signals_held

        # One step: a reader never finds a new guarantee or report beside an old release.
        with signals_held():
            while staged:
                tmp, where = staged[0]
                assert where.path is not None
                try:
                    os.replace(tmp, where.path)
                except OSError as exc:
                    raise OutputError(f"cannot write {where.shown}: {exc.strerror or exc}") from exc
                finally:
                    if not os.path.lexists(tmp):  # renamed, whatever stopped the run just after
                        staged.pop(0)
                        log.written.append(where.shown)
        if broken is not None:
            raise broken
    finally:
        for tmp, _ in staged:  # also on KeyboardInterrupt and SIGTERM: never leave a temp file
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _write_stdout(content: Any, fmt: str) -> None:
    pa = import_pyarrow()
    try:
        _write(content, sys.stdout.buffer, fmt)
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        raise
    except (OSError, pa.ArrowException) as exc:
        if isinstance(exc, OSError) and exc.errno == 32:  # EPIPE wrapped by pyarrow
            raise BrokenPipeError(*exc.args) from exc
        raise OutputError(f"cannot write to standard output: {getattr(exc, 'strerror', None) or exc}") from exc


def _stage(content: Any, where: _Destination, fmt: str, new_mode: int = 0o666) -> str:
    """Write ``content`` in full to a new temporary file beside ``where`` (synced, with the
    permissions the destination will keep); its name. Nothing is left behind on failure."""
    pa = import_pyarrow()
    assert where.path is not None
    directory = os.path.dirname(where.path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".dpselect-", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise OutputError(f"cannot write {where.shown}: cannot create a file in {directory!r}: {exc.strerror}") from exc
    try:
        with os.fdopen(fd, "wb") as sink:
            _write(content, sink, fmt)
            sink.flush()
            _test_signal_point("write")
            os.fsync(sink.fileno())
        if os.path.exists(where.path):  # keep the permissions of the file being replaced
            os.chmod(tmp, os.stat(where.path).st_mode & 0o7777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, new_mode & ~umask)
    except BaseException as exc:  # also KeyboardInterrupt and SIGTERM: never leave the temp file
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, (OSError, pa.ArrowException)):
            raise OutputError(f"cannot write {where.shown}: {getattr(exc, 'strerror', None) or exc}") from exc
        raise
    return tmp


def _write(table: Any, sink: IO[bytes], fmt: str) -> None:
    if fmt == "bytes":
        sink.write(table)
    elif fmt == "csv":
        import pyarrow.csv as pcsv

        pcsv.write_csv(table, sink)
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, sink)
    elif fmt == "jsonl":
        for row in table.to_pylist():
            sink.write(json_line(row).encode() + b"\n")
    else:  # pragma: no cover - formats are validated earlier
        raise ValueError(f"unknown output format {fmt!r}")


def json_line(row: dict[str, Any]) -> str:
    """One row as a line of strict JSON: a null is null, a float NaN or infinity the string
    "NaN", "Infinity" or "-Infinity" (JSON has no such numbers, and a NaN key is not a null
    one), values JSON has no type for (dates, decimals) their text."""
    try:
        return json.dumps(row, default=str, ensure_ascii=False, allow_nan=False)
    except ValueError:  # a non-finite float somewhere: the rare row pays for the walk
        return json.dumps(_finite(row), default=str, ensure_ascii=False, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value

