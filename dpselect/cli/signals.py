"""Signals and standard streams for the ``dpselect`` command: every interrupt ends in one line.

SIGINT (Ctrl-C), SIGTERM and SIGHUP all stop a run the same way, as a KeyboardInterrupt, so
that every cleanup (a temporary output file) runs on the way out. Two moments are different:

* the renames that put several outputs in place together (a release, its guarantee sidecar,
  the data holder's report) are one step: a signal arriving during them is held until they are
  all done (:func:`signals_held`), so a reader never finds a new guarantee beside an old release;
* once a run's outcome is decided, a late signal changes nothing (:func:`ignore_signals`).

Python runs signal handlers in the main thread only, between bytecodes; elsewhere these
helpers leave the handlers alone.
"""
from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "STOP_SIGNALS",
    "Terminated",
    "exit_code",
    "ignore_signals",
    "reserve_standard_fds",
    "signals_as_interrupts",
    "signals_held",
]

# The signals that stop a run: Ctrl-C, kill's default, a closed terminal.
STOP_SIGNALS: tuple[int, ...] = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                                      if hasattr(signal, name))


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C so every cleanup runs on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def exit_code(exc: KeyboardInterrupt) -> int:
    """128 + the signal's number: 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP (the shell's
    convention for a process stopped by a signal)."""
    return 128 + (exc.signum if isinstance(exc, Terminated) else signal.SIGINT)


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated(signum)


def _swap(signum: int, handler: Any) -> tuple[Any, BaseException | None]:
    """signal.signal(signum, handler), made also when a signal is pending: Python runs the
    current handler before it changes it, and the exception that handler raises aborts the
    change. Returns the previous handler and that exception (None if none), for the caller to
    raise once its own state is consistent."""
    pending: BaseException | None = None
    while True:
        try:
            return signal.signal(signum, handler), pending
        except KeyboardInterrupt as exc:
            pending = pending or exc


def _install(handler: Any, signums: tuple[int, ...], previous: dict[int, Any]) -> BaseException | None:
    """Install ``handler`` for ``signums``, recording the handlers replaced in ``previous``;
    the first interrupt met on the way, once every handler is in place. A signal the process
    was told to ignore (``nohup`` ignores SIGHUP, a shell's background job SIGINT) stays ignored."""
    pending: BaseException | None = None
    for signum in signums:
        if signal.getsignal(signum) is signal.SIG_IGN:
            continue
        previous[signum], exc = _swap(signum, handler)
        pending = pending or exc
    return pending


def _restore(previous: dict[int, Any]) -> BaseException | None:
    """Put back every handler; the first interrupt met while doing so."""
    pending: BaseException | None = None
    for signum, handler in previous.items():
        _, exc = _swap(signum, handler)
        pending = pending or exc
    return pending


@contextmanager
def signals_as_interrupts(restore: bool = True) -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Terminated` while the body runs (SIGINT raises
    KeyboardInterrupt, Python's default). With ``restore`` the previous handlers come back after;
    a command that exits after the body leaves them in place."""
    previous: dict[int, Any] = {}
    try:
        pending = _install(_raise_terminated, tuple(s for s in STOP_SIGNALS if s != signal.SIGINT), previous)
    except ValueError:  # not the main thread: leave signals alone
        pending = None
    try:
        if pending is not None:
            raise pending
        yield
    finally:
        late = _restore(previous) if restore else None
        if late is not None:
            raise late


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP while the body runs, then deliver the first one held to
    the handler it would have met. For short steps that must not be cut in the middle; a step
    that can block (writing to a pipe) must not be run under it."""
    held: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        held.append(signum)

    previous: dict[int, Any] = {}
    try:
        pending = _install(hold, STOP_SIGNALS, previous)
    except ValueError:  # not the main thread: nothing can be held here
        pending = None
    try:
        if pending is not None:  # arrived before the step began: it is not held
            raise pending
        yield
    finally:
        late = _restore(previous)
        if late is not None:
            raise late
        if held:
            signal.raise_signal(held[0])  # its handler runs now (a default action applies as it would have)


def ignore_signals() -> None:
    """Ignore the stop signals from now on: the run's outcome is decided and printed, so a late
    Ctrl-C must not turn it into a traceback (an interrupt while one is pending is ignored too)."""
    try:
        for signum in STOP_SIGNALS:
            _swap(signum, signal.SIG_IGN)  # one that arrived before is ignored like the later ones
    except ValueError:  # not the main thread
        pass


def reserve_standard_fds() -> None:
    """Open /dev/null on standard input, output or error where the command was started with
    them closed (``2>&-``): otherwise the next file opened (an input, a temporary output) would
    get their number, and anything written to "standard error" would land in it. ``sys.stdout``
    and ``sys.stderr`` stay None, so the command still knows they were closed."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
