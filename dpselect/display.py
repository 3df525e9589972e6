"""How dpselect's results read in a terminal and a notebook: one-line summaries with numbers
rounded for reading, and small HTML tables for Jupyter's ``_repr_html_``.

Everything here is presentation. The exact values stay on the objects (``epsilon_exact``,
``delta_exact``: Fractions) and the full statements in their ``str()``; every piece of text
put into HTML goes through :func:`html.escape`, since column and metric names are the
caller's.

Internal: not part of the public API (the README's "What semver covers"); import what you need from ``dpselect``. It may change in any release."""
from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any

__all__ = ["clip", "describe_frame", "frame_html", "html_table", "mechanism_of", "readable_numbers", "short_name"]

# A fraction whose digits pass this is shown as a rounded decimal: 80-digit exact values help
# no reader, and the exact ones stay on the objects.
_LONG_FRACTION_DIGITS = 12
_FRACTION = re.compile(r"(?<![\d.])(\d+)/(\d+)(?![\d.])")
# Where a guarantee's statement stops naming its mechanism and starts stating its privacy.
_STATEMENT_STOPS = (" is (", " is, in exact", " is a strategy", " ran on a deterministic")
# The heads a statement may start with before it names the mechanism (dpselect.core.guarantee and
# dpselect.aggregation.noise write them).
_HEADS = (re.compile(r"NOT DP: [^.]*\.\s+(?:Were it [^,]*, )?"),
          re.compile(r"USER-SUPPLIED, NOT CERTIFIED BY DPSELECT: "))
_UNCERTIFIED = "NOT CERTIFIED BY DPSELECT ("


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)].rstrip() + "…"


def short_name(name: object, limit: int = 40) -> str:
    """A column or metric name for a one-line summary: as is when printable, else its repr (a
    newline in a name must not break the summary's lines), clipped."""
    text = str(name)
    return clip(text if text.isprintable() else repr(text), limit)


def readable_numbers(text: str) -> str:
    """``text`` with every long fraction (more than 12 digits in all) written as ≈ a 6-digit
    decimal; short ones (``400/3``) are kept."""
    def shorten(match: re.Match[str]) -> str:
        numerator, denominator = match.group(1), match.group(2)
        if len(numerator) + len(denominator) <= _LONG_FRACTION_DIGITS or int(denominator) == 0:
            return match.group(0)
        return f"≈{float(Fraction(int(numerator), int(denominator))):.6g}"
    return _FRACTION.sub(shorten, text)


def _closing(text: str, start: int) -> int:
    """The index just past the parenthesis closing the one at ``start`` (or len(text))."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def _strip_head(text: str) -> str:
    for head in _HEADS:
        match = head.match(text)
        if match:
            return text[match.end():]
    if text.startswith(_UNCERTIFIED):  # its reason may hold parentheses of its own
        end = _closing(text, len(_UNCERTIFIED) - 1)
        return text[end:].removeprefix(": ")
    return text


def _mechanism(text: str) -> str:
    """The mechanism a statement names: its words up to where it states its privacy, at the
    statement's own nesting level. A parenthesised statement inside it (a mean's noisy sum and
    noisy count) is replaced by the mechanism it names."""
    text = _strip_head(text)
    out: list[str] = []
    i = 0
    while i < len(text):
        if any(text.startswith(stop, i) for stop in _STATEMENT_STOPS):
            break
        if text.startswith(("; ", ". "), i):
            break
        if text[i] == "(":
            end = _closing(text, i)
            inner = text[i + 1:end - 1]
            out.append(f"({_mechanism(inner)})" if "differentially private" in inner else text[i:end])
            i = end
            continue
        out.append(text[i])
        i += 1
    return "".join(out).strip()


def mechanism_of(statement: str, limit: int = 160) -> str:
    """The mechanism a step's statement names (``"discrete Laplace noise of scale 20"``), its
    long fractions rounded for reading, clipped to ``limit`` characters; the statement's
    opening words when it names none that way."""
    found = _mechanism(statement) or statement
    return clip(readable_numbers(found), limit)


def _kind(frame: Any) -> str:
    return f"{type(frame).__module__.split('.')[0]} {type(frame).__name__}"


def describe_frame(frame: Any) -> tuple[str, int | None, list[str]]:
    """A frame's type (``"pandas DataFrame"``), its number of rows when known without
    computing anything (None for a lazy Polars or a Spark frame: counting would run a job),
    and its column names. Never raises: a summary must not fail where the frame would print."""
    kind = _kind(frame)
    try:
        if type(frame).__name__ == "LazyFrame":
            return kind, None, list(frame.collect_schema().names())
        if kind.startswith("pandas "):
            return kind, len(frame), [str(c) for c in frame.columns]
        if hasattr(frame, "num_rows"):  # pyarrow Table / RecordBatch
            return kind, int(frame.num_rows), list(frame.schema.names)
        if hasattr(frame, "height"):  # Polars DataFrame
            return kind, int(frame.height), list(frame.columns)
        return kind, None, [str(c) for c in getattr(frame, "columns", ())]
    except Exception:  # noqa: BLE001 (a repr must print whatever the frame library raises)
        return kind, None, []


# Frame types whose own HTML escapes column names and values (checked by tests/test_reprs.py);
# others (a Polars LazyFrame's plan view does not escape) are shown as their escaped repr.
_ESCAPING_HTML = ("pandas DataFrame", "polars DataFrame")


def frame_html(frame: Any) -> str | None:
    """A pandas or Polars DataFrame's own HTML; None for other frames (a Spark frame's HTML
    would run a job, a LazyFrame's shows its plan, unescaped)."""
    render = getattr(frame, "_repr_html_", None)
    if _kind(frame) not in _ESCAPING_HTML or not callable(render):
        return None
    try:
        text = render()
    except Exception:  # noqa: BLE001 (a view must not fail where the frame would print)
        return None
    return text if isinstance(text, str) else None


def html_table(header: Sequence[str], rows: Iterable[Sequence[str]], *, raw_columns: Iterable[int] = ()) -> str:
    """A small HTML table; every cell is escaped except those of ``raw_columns`` (HTML the
    caller built from escaped parts)."""
    raw = set(raw_columns)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell if j in raw else html.escape(cell)}</td>"
                                    for j, cell in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
