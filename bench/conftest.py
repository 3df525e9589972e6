"""Benchmark helpers: every timing is reported next to a baseline measured in the same run."""
from __future__ import annotations

from collections import defaultdict

import pytest

# group -> name -> (median seconds, elements)
RESULTS: dict[str, dict[str, tuple[float, int]]] = defaultdict(dict)
BASELINE = "baseline"


@pytest.fixture
def record(benchmark):
    """Call as record(group, name, elements) after benchmark(...) ran."""

    def _record(group: str, name: str, elements: int) -> None:
        RESULTS[group][name] = (benchmark.stats.stats.median, elements)

    return _record


def pytest_terminal_summary(terminalreporter):
    if not RESULTS:
        return
    terminalreporter.section("dpselect: time per element and ratio to the baseline of the same run")
    for group, rows in sorted(RESULTS.items()):
        base = rows.get(BASELINE)
        for name, (seconds, elements) in sorted(rows.items(), key=lambda kv: kv[0] != BASELINE):
            per = seconds / max(elements, 1) * 1e9
            ratio = f"{seconds / base[0]:6.2f}x" if base else "   n/a"
            terminalreporter.write_line(f"{group:<28} {name:<34} {per:9.2f} ns/elem  {ratio}")
