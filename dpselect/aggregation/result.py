"""What :func:`dpselect.aggregate` returns: the released frame, its guarantee, the clamping
bounds used, and the data holder's report (docs/aggregate.md)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dpselect.aggregation.guarantee import AggregateGuarantee
from dpselect.aggregation.report import AggregateReport

__all__ = ["AggregateResult"]


@dataclass
class AggregateResult:
    """What :func:`aggregate` returns. ``frame``: one row per released key (sorted by key),
    its ``by`` columns then one column per metric (plus ``<metric>_ci_low`` /
    ``<metric>_ci_high`` with ``confidence_level``), in the caller's frame type; the guarantee
    is also in its metadata where the type has some (pandas ``attrs``, Arrow schema metadata).
    ``guarantee``: the whole release's statement. :meth:`report`: the data holder's view of
    what bounding, clamping and selection lost — exact, NOT differentially private."""

    frame: Any
    guarantee: AggregateGuarantee
    bounds: dict[str, tuple[float, float]]
    _make_report: Callable[[], AggregateReport] = field(repr=False)
    _report: AggregateReport | None = field(default=None, repr=False)

    def report(self) -> AggregateReport:
        """For the data holder only (NOT DP): never publish it. Built on the first call (it
        evaluates the selection's keep probability over a million counts)."""
        if self._report is None:
            self._report = self._make_report()
        return self._report

    def __iter__(self) -> Any:  # ``frame, guarantee = aggregate(...)`` reads naturally
        return iter((self.frame, self.guarantee))
