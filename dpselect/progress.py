"""A progress line on stderr for long inputs (no dependency; silent when not wanted)."""
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

    def update(self, rows: int, fraction: float | None) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if now - self.start < self.delay or now - self._last < self.interval:
            return
        self._last = now
        width = 30
        if fraction is not None:
            filled = round(width * fraction)
            bar = f"[{'#' * filled}{'.' * (width - filled)}] {100 * fraction:5.1f}%"
        else:
            bar = "[reading]"
        self.stream.write(f"\rdpselect: {bar} {rows:,} rows read, {now - self.start:.0f}s ")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
