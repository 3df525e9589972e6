"""The installed ``dpselect`` command (``[project.scripts]`` in pyproject.toml).

It lives outside the ``dpselect`` package on purpose: importing the package takes a few tenths
of a second (numpy, the C kernel, every mechanism), and a Ctrl-C or SIGTERM in that time would
otherwise end in a traceback (SIGINT) or a silent kill (SIGTERM), before any code of
:mod:`dpselect.cli` could handle it. Here the signals are taken first, the package is imported,
and :func:`dpselect.cli.console_main` runs the command, which reports every later interrupt
itself. Only the interpreter's own start, before this module runs, is out of reach.
"""
from __future__ import annotations

import os
import signal
import sys

__all__ = ["main"]


class _Stopped(KeyboardInterrupt):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum: int, frame: object) -> None:
    raise _Stopped(signum)


def main() -> None:
    """Run the ``dpselect`` command; exits with its code (128 + the signal if one stopped it
    before the command began)."""
    # Started with standard input, output or error closed, the files the imports and the
    # command open would take their numbers (dpselect.cli.signals.reserve_standard_fds, which
    # cannot be imported before the package is).
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    imported = False
    try:
        for name in ("SIGTERM", "SIGHUP"):  # SIGINT raises KeyboardInterrupt already
            # A signal the command was told to ignore (nohup ignores SIGHUP) stays ignored.
            if hasattr(signal, name) and signal.getsignal(getattr(signal, name)) is not signal.SIG_IGN:
                signal.signal(getattr(signal, name), _stop)
        from dpselect.cli import console_main

        imported = True
        console_main()  # exits; it handles the interrupts that reach it
    except KeyboardInterrupt as exc:  # while importing, or at the very edges of console_main
        signum = exc.signum if isinstance(exc, _Stopped) else signal.SIGINT
        what = "interrupted" if signum == signal.SIGINT else f"terminated by signal {signum}"
        try:
            sys.stderr.write(f"\ndpselect: error: {what}{'' if imported else '; no output was written'}\n")
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):  # stderr closed or full: the exit code says it
            pass
        os._exit(128 + signum)


if __name__ == "__main__":
    main()
