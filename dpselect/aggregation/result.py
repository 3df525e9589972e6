"""What :func:`dpselect.aggregate` returns: the released frame, its guarantee, the clamping
bounds used, and the data holder's report (docs/aggregate.md)."""
from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dpselect.aggregation.guarantee import AggregateGuarantee
from dpselect.aggregation.report import AggregateReport
from dpselect.display import clip, describe_frame, frame_html, short_name

__all__ = ["AggregateResult", "result_html", "result_repr"]

REPORT_HINT = ".report(): the data holder's report (exact, NOT DP)"


def _shape(frame: Any) -> tuple[str, list[str]]:
    kind, rows, columns = describe_frame(frame)
    size = f"{len(columns)} column{'s' if len(columns) != 1 else ''}"
    if rows is None:
        return f"{kind}, {size} (rows not counted)", columns
    return f"{kind}, {rows:,} row{'s' if rows != 1 else ''} × {size}", columns


def _names(names: list[str], limit: int) -> str:
    """Names joined, up to ``limit`` characters with the count of the others."""
    shown: list[str] = []
    for i, name in enumerate(names):
        candidate = ", ".join([*shown, short_name(name)])
        rest = len(names) - i - 1
        if len(candidate) + (len(f", … (+{rest} more)") if rest else 0) > limit:
            return ", ".join([*shown, f"… (+{len(names) - i} more)"])
        shown.append(short_name(name))
    return ", ".join(shown)


def _bounds(bounds: Mapping[str, tuple[float, float]]) -> str:
    return clip(", ".join(f"{short_name(c, 30)} [{lo:.6g}, {hi:.6g}]" for c, (lo, hi) in bounds.items()), 110)


def result_repr(name: str, frame: Any, guarantee: AggregateGuarantee, bounds: Mapping[str, tuple[float, float]],
                report_hint: str = REPORT_HINT) -> str:
    """A grouped release in a few lines: the frame's type, shape and columns, the clamping
    bounds, the guarantee's summary and where to see more. Only what the release shows: the
    data holder's report (exact, NOT DP) is never read here."""
    shape, columns = _shape(frame)
    lines = [f"{name}: {shape}", f"  columns: {_names(columns, 140)}"]
    if bounds:
        lines.append(f"  bounds: {_bounds(bounds)}")
    lines += [f"  guarantee: {guarantee.summary()}",
              f"  .frame: the table; str(.guarantee): the statement; {report_hint}"]
    return "\n".join(lines)


def result_html(name: str, frame: Any, guarantee: AggregateGuarantee, bounds: Mapping[str, tuple[float, float]],
                report_hint: str = REPORT_HINT) -> str:
    """The frame's own HTML (pandas, Polars) under a short header: its type and shape, the
    guarantee's summary, the bounds; other frames as their columns and escaped repr."""
    shape, columns = _shape(frame)
    summary = html.escape(guarantee.summary())
    if not guarantee.privacy_guaranteed:
        summary = f'<strong style="color:#b00020">{summary}</strong>'
    extra = f"<br>bounds: {html.escape(_bounds(bounds))}" if bounds else ""
    table = frame_html(frame)
    if table is None:
        table = f"<p>columns: {html.escape(_names(columns, 400))}</p><pre>{html.escape(repr(frame))}</pre>"
    hint = f".frame: the table; .guarantee: the statement and each step; {report_hint}"
    return (f'<div class="dpselect-result"><p><strong>{html.escape(name)}</strong>: {html.escape(shape)}<br>'
            f"guarantee: {summary}{extra}</p>{table}<p><small>{html.escape(hint)}</small></p></div>")


@dataclass(repr=False)
class AggregateResult:
    """What :func:`aggregate` returns. ``frame``: one row per released key (sorted by key),
    its ``by`` columns then one column per metric (plus ``<metric>_ci_low`` /
    ``<metric>_ci_high`` with ``confidence_level``), in the caller's frame type; the guarantee
    is also in its metadata where the type has some (pandas ``attrs``, Arrow schema metadata).
    ``guarantee``: the whole release's statement. :meth:`report`: the data holder's view of
    what bounding, clamping and selection lost — exact, NOT differentially private.

    ``repr()`` (and a notebook's view) is a short summary of the release: the frame's shape and
    columns, the bounds, the guarantee in one line; never the report."""

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

    def __repr__(self) -> str:
        return result_repr(type(self).__name__, self.frame, self.guarantee, self.bounds)

    def _repr_html_(self) -> str:
        return result_html(type(self).__name__, self.frame, self.guarantee, self.bounds)
