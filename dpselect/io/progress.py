"""A progress line on stderr for long inputs (no dependency; silent when not wanted).

The fraction shown is what the parser has consumed, not what the reader has fetched ahead of
it (see :func:`dpselect.io.files.open_batches`); after reading, the line names the phase running
(bounding and counting, release, writing), which can take a while on large inputs.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """Redraws one line at most every ``interval`` seconds, starting only after ``delay``
    seconds, so short runs print nothing."""

    def __init__(self, enabled: bool, stream: TextIO | None = None, delay: float = 1.0,
                 interval: float = 0.2, clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = clock()
        self.delay = delay
        self.interval = interval
        self._last = float("-inf")
        self._drawn = False
        self._rows = 0
        self._width = 0  # length of the last line drawn, to blank it when a shorter one follows

    def __repr__(self) -> str:
        return f"Progress(enabled={self.enabled}, {self._rows:,} rows)"

    def _draw(self, text: str, now: float) -> None:
        line = f"dpselect: {text}, {now - self.start:.0f}s"
        if self._put("\r" + line.ljust(self._width)):
            self._width = len(line)
            self._drawn = True

    def _put(self, text: str) -> bool:
        """Write to the stream; if it cannot take it (closed, full, a vanished reader), the bar
        goes away for the rest of the run: a progress line must never fail a run."""
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.enabled = self._drawn = False
            return False
        return True

    def update(self, rows: int, fraction: float | None) -> None:
        """While reading: rows read so far and the fraction of the input consumed, if known."""
        self._rows = rows
        if not self.enabled:
            return
        now = self.clock()
        if now - self.start < self.delay or now - self._last < self.interval:
            return
        self._last = now
        width = 30
        if fraction is not None:
            fraction = min(max(fraction, 0.0), 1.0)
            filled = round(width * fraction)
            bar = f"[{'#' * filled}{'.' * (width - filled)}] {100 * fraction:5.1f}%"
        else:
            bar = "[reading]"
        self._draw(f"{bar} {rows:,} rows read", now)

    def phase(self, name: str) -> None:
        """A step after reading has begun (e.g. "bounding contributions and counting"): shown
        at once if the line is already up or the run is already long."""
        if not self.enabled:
            return
        now = self.clock()
        if self._drawn or now - self.start >= self.delay:
            self._last = now
            self._draw(f"{self._rows:,} rows read; {name}", now)

    def close(self) -> None:
        if self._drawn:
            self._put("\n")
            self._drawn = False
