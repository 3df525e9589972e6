"""The data holder's report on a grouped release: what contribution bounding, clamping and key
selection lost, and what other parameters would change. Exact counts from the raw data: NOT
differentially private, for the data holder only (the "trusted analyst" of Desfontaines' thesis,
ETH Zürich 2022, §4.2.5); never publish it (docs/aggregate.md, "Reading the report")."""
from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dpselect.aggregation.grid import Grid
from dpselect.display import html_table
from dpselect.mechanisms.protocols import IndependentSelection

__all__ = ["AggregateReport", "BucketLoss", "ColumnClamping", "SelectionReport"]

HEADER = "dpselect data holder's report: exact, NOT differentially private; never publish it"
# Partitions are grouped by their number of users before bounding.
BUCKETS: tuple[tuple[int, float], ...] = ((1, 1), (2, 4), (5, 9), (10, 49), (50, 99), (100, 999), (1000, math.inf))
# Bounding is reported as the main loss when it removes more than this share of the rows.
MOST_ROWS = 0.5


@dataclass(frozen=True)
class ColumnClamping:
    """How clamping changed one value column's kept values."""

    bounds: tuple[float, float]
    values: int
    below: int
    above: int
    total_change: float  # Σ |x − clamp(x)|

    @classmethod
    def of(cls, kept_values: npt.NDArray[Any], grid: Grid) -> ColumnClamping:
        x = kept_values.astype(np.float64, copy=False)
        below = x < grid.lower
        above = x > grid.upper
        change = float(np.sum(grid.lower - x[below]) + np.sum(x[above] - grid.upper))
        return cls((grid.lower, grid.upper), int(x.size), int(below.sum()), int(above.sum()), change)


@dataclass(frozen=True)
class BucketLoss:
    """Partitions with ``low``–``high`` users before bounding."""

    low: int
    high: float
    partitions: int
    released: int
    expected_released: float | None  # Σ P(keep) at the bounded counts, when the rule has one

    @property
    def label(self) -> str:
        """``"1"``, ``"2-4"``, ``"1000+"``."""
        if math.isinf(self.high):
            return f"{self.low}+"
        return f"{self.low}" if self.low == self.high else f"{self.low}-{int(self.high)}"


@dataclass(frozen=True, repr=False)
class AggregateReport:
    """The data holder's report on a grouped release (exact, NOT DP). ``str()`` and ``repr()``
    are its text, a notebook shows it as tables; :meth:`as_dict` for a JSON file."""

    rows: int
    null_unit_rows: int
    rows_kept: int
    pairs: int
    pairs_kept: int
    users: int
    partitions: int            # in the data, before bounding
    candidates: int            # with a user left after bounding
    released: int
    buckets: tuple[BucketLoss, ...]
    clamping: dict[str, ColumnClamping]
    smallest_count_half: int | None     # users (after bounding) released with probability ≥ 0.5
    smallest_count_95: int | None       # ... ≥ 0.95
    expected_if_double_epsilon: float | None
    expected_released: float | None
    kappa: int
    linf: int
    warnings: tuple[str, ...] = field(default=())
    # With κ / L∞ chosen privately: per κ of 1, 2, 4, 8, 16, the expected share of (user, key)
    # pairs kept and of keys released (None without a selection); per L∞, the expected share of
    # rows kept at the release's κ (dpselect.ingest.auto_bounds.Hindsight).
    hindsight_kappa: tuple[tuple[int, float, float | None], ...] = field(default=())
    hindsight_linf: tuple[tuple[int, float], ...] = field(default=())
    # Per count_distinct metric with max_values_per_unit: the (user, key, value) triples its cap left
    # out (dpselect.aggregation.distinct).
    distinct_capped: dict[str, int] = field(default_factory=dict)

    @property
    def best_kappa(self) -> int | None:
        """The κ of 1, 2, 4, 8, 16 that would have released the most keys in expectation (the
        smallest of equals); None without figures or a selection. Exact, NOT DP."""
        scored = [(keys, -k) for k, _, keys in self.hindsight_kappa if keys is not None]
        return -max(scored)[1] if scored else None

    @classmethod
    def build(cls, *, totals: dict[str, int], null_unit_rows: int, users_before: npt.NDArray[np.int64],
              users_kept: npt.NDArray[np.int64], candidates: npt.NDArray[np.intp], released_codes: npt.NDArray[Any],
              strategy: Any, clamping: dict[str, ColumnClamping], epsilon: Fraction, kappa: int, linf: int,
              public: bool, clamped_sums: dict[str, int] | None = None, hindsight: Any = None,
              distinct_capped: dict[str, int] | None = None) -> AggregateReport:
        keep_probability = strategy.keep_probability if isinstance(strategy, IndependentSelection) else None
        released = np.zeros(users_before.size, dtype=bool)
        released[np.asarray(released_codes, dtype=np.int64)] = True
        expected_each = None
        if keep_probability is not None and not public:
            expected_each = np.zeros(users_before.size)
            expected_each[candidates] = keep_probability(users_kept[candidates])
        buckets = []
        for low, high in BUCKETS:
            inside = (users_before >= low) & (users_before <= high)
            buckets.append(BucketLoss(low, high, int(inside.sum()), int((released & inside).sum()),
                                      None if expected_each is None else float(expected_each[inside].sum())))
        half = ninety_five = None
        if keep_probability is not None and not public:
            half, ninety_five = _smallest_counts(keep_probability)
        double = None
        if not public and strategy is not None and keep_probability is not None:
            double = _expected_with(strategy, 2, users_kept[candidates])
        warnings = []
        rows, rows_kept = int(totals["rows"]), int(totals["rows_kept"])
        if rows and rows_kept < MOST_ROWS * rows:
            warnings.append(
                f"bounding removed {rows - rows_kept:,} of {rows:,} rows ({(rows - rows_kept) / rows:.0%}): the "
                "metrics describe a minority of the data. Raise max_partitions_contributed (users in many "
                "partitions) or max_contributions_per_partition (many rows per user and partition), at the cost "
                "of more noise per partition")
        for column, c in clamping.items():
            if c.values and (c.below + c.above) > 0.05 * c.values:
                warnings.append(f"clamping changed {c.below + c.above:,} of {c.values:,} kept values of {column!r} "
                                f"(bounds {c.bounds}): sums and means are biased toward the bounds")
        for column, keys in (clamped_sums or {}).items():
            if keys:
                warnings.append(f"the exact sum of {column!r} at {keys:,} released key(s) was beyond 2^62 grid units "
                                "and was clamped there before noise (its sums and means are too small in magnitude); "
                                "lower precision_bits, whose default of 30 makes this impossible below 2^32 rows")
        return cls(rows=rows + null_unit_rows if null_unit_rows and rows == 0 else rows,
                   null_unit_rows=int(null_unit_rows), rows_kept=rows_kept, pairs=int(totals["pairs"]),
                   pairs_kept=int(totals["pairs_kept"]), users=int(totals["users"]),
                   partitions=int((users_before > 0).sum()), candidates=int(candidates.size),
                   released=int(np.asarray(released_codes).size), buckets=tuple(buckets), clamping=clamping,
                   smallest_count_half=half, smallest_count_95=ninety_five, expected_if_double_epsilon=double,
                   expected_released=None if expected_each is None else float(expected_each.sum()),
                   kappa=kappa, linf=linf, warnings=tuple(warnings),
                   hindsight_kappa=_hindsight_kappa(hindsight, None if public else strategy),
                   hindsight_linf=() if hindsight is None else tuple(zip(hindsight.linfs, hindsight.rows_kept)),
                   distinct_capped=dict(distinct_capped or {}))

    def as_dict(self) -> dict[str, Any]:
        """For a JSON file next to the data (never next to the release)."""
        return {
            "note": HEADER,
            "rows": self.rows, "null_privacy_unit_rows": self.null_unit_rows, "rows_kept": self.rows_kept,
            "pairs": self.pairs, "pairs_kept": self.pairs_kept, "users": self.users,
            "partitions": self.partitions, "candidates": self.candidates, "released": self.released,
            "expected_released": self.expected_released,
            "expected_released_with_double_selection_epsilon": self.expected_if_double_epsilon,
            "smallest_user_count_released_with_probability_0.5": self.smallest_count_half,
            "smallest_user_count_released_with_probability_0.95": self.smallest_count_95,
            "loss_by_users_before_bounding": [
                {"users_from": b.low, "users_to": None if math.isinf(b.high) else int(b.high),
                 "partitions": b.partitions, "released": b.released, "expected_released": b.expected_released}
                for b in self.buckets],
            "clamping": {name: {"bounds": list(c.bounds), "values": c.values, "below": c.below, "above": c.above,
                                "total_change": c.total_change} for name, c in self.clamping.items()},
            "max_partitions_contributed": self.kappa, "max_contributions_per_partition": self.linf,
            "hindsight": {"kappa": [{"kappa": k, "pairs_kept": pairs, "expected_released": keys}
                                    for k, pairs, keys in self.hindsight_kappa],
                          "linf": [{"linf": lf, "rows_kept": share} for lf, share in self.hindsight_linf],
                          "best_kappa": self.best_kappa},
            "warnings": list(self.warnings),
            "count_distinct_values_left_out_by_max_values_per_unit": dict(self.distinct_capped),
        }

    def __str__(self) -> str:
        def share(part: int, whole: int) -> str:
            return f"{part:,} of {whole:,} ({part / whole:.1%})" if whole else f"{part:,} of 0"

        lines = [HEADER, "",
                 f"Bounding (κ = {self.kappa} partitions per user, {self.linf} rows per user and partition):",
                 f"  rows kept          {share(self.rows_kept, self.rows)}",
                 f"  (user, key) pairs  {share(self.pairs_kept, self.pairs)}",
                 f"  users              {self.users:,}"]
        if self.null_unit_rows:
            lines.append(f"  rows dropped for a null privacy unit: {self.null_unit_rows:,}")
        for name, c in self.clamping.items():
            lines.append(f"Clamping {name!r} to {c.bounds}: {c.below:,} below, {c.above:,} above of {c.values:,} "
                         f"kept values; total change {c.total_change:.6g}")
        for name, dropped in self.distinct_capped.items():
            lines.append(f"count_distinct {name!r}: max_values_per_unit left out {dropped:,} (user, key, value) "
                         "triple(s) of the kept rows")
        lines += ["", f"Partitions: {self.partitions:,} in the data, {self.candidates:,} with a user after "
                      f"bounding, {self.released:,} released"
                      + (f" (expected {self.expected_released:,.1f})" if self.expected_released is not None else "")]
        lines.append("  users before bounding | partitions | released | expected")
        for b in self.buckets:
            label = f"{b.low}+" if math.isinf(b.high) else (f"{b.low}" if b.low == b.high else f"{b.low}-{int(b.high)}")
            expected = "" if b.expected_released is None else f"{b.expected_released:,.1f}"
            lines.append(f"  {label:>21} | {b.partitions:>10,} | {b.released:>8,} | {expected}")
        if self.smallest_count_half is not None:
            lines.append(f"A partition needs {self.smallest_count_half:,} users after bounding to be released with "
                         f"probability 0.5, {self.smallest_count_95:,} for 0.95: coarser keys (fewer, larger "
                         "partitions) or a larger epsilon lower these.")
        if self.expected_if_double_epsilon is not None:
            lines.append(f"Doubling the selection's epsilon would release {self.expected_if_double_epsilon:,.1f} "
                         "partitions in expectation.")
        lines += self._hindsight_lines()
        lines += [f"WARNING: {w}" for w in self.warnings]
        return "\n".join(lines)

    def _hindsight_lines(self) -> list[str]:
        """What other bounds would have kept and released (only with bounds chosen privately)."""
        if not self.hindsight_kappa:
            return []
        lines = ["", "In hindsight (exact, NOT DP; expectations over the uniform bounding):",
                 "  κ  | (user, key) pairs kept | keys released (expected)"]
        for k, pairs, keys in self.hindsight_kappa:
            lines.append(f"  {k:>2} | {pairs:>22.1%} | {'' if keys is None else f'{keys:,.1f}'}")
        if self.best_kappa is not None:
            lines.append(f"  the most keys in expectation at κ = {self.best_kappa}")
        lines.append(f"  L∞ | rows kept at κ = {self.kappa}")
        lines += [f"  {lf:>2} | {share:.1%}" for lf, share in self.hindsight_linf]
        return lines

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        """The report's sections as small tables, the NOT-DP header and the warnings first."""
        bounding = html_table(["", "kept", "of", "share"], [
            ["rows", f"{self.rows_kept:,}", f"{self.rows:,}", _percent(self.rows_kept, self.rows)],
            ["(user, key) pairs", f"{self.pairs_kept:,}", f"{self.pairs:,}", _percent(self.pairs_kept, self.pairs)],
            ["users", f"{self.users:,}", "", ""]]
            + ([["rows dropped for a null privacy unit", f"{self.null_unit_rows:,}", "", ""]]
               if self.null_unit_rows else []))
        parts = [_html_head(self.warnings),
                 _section(f"Bounding (κ = {self.kappa} partitions per user, {self.linf} rows per user and "
                          "partition)", bounding)]
        if self.clamping:
            parts.append(_section("Clamping", html_table(
                ["column", "bounds", "below", "above", "kept values", "total change"],
                [[name, _bounds_text(c.bounds), f"{c.below:,}", f"{c.above:,}", f"{c.values:,}",
                  f"{c.total_change:.6g}"] for name, c in self.clamping.items()])))
        partitions = (f"Partitions: {self.partitions:,} in the data, {self.candidates:,} with a user after bounding, "
                      f"{self.released:,} released" + _expected(self.expected_released))
        parts.append(_section(partitions, _buckets_html(self.buckets, "users before bounding")))
        parts += _selection_notes(self.smallest_count_half, self.smallest_count_95, self.expected_if_double_epsilon,
                                  "Doubling the selection's epsilon",
                                  ": coarser keys (fewer, larger partitions) or a larger epsilon lower these")
        if self.hindsight_kappa:
            best = "" if self.best_kappa is None else f"; the most keys in expectation at κ = {self.best_kappa}"
            parts.append(_section(f"In hindsight (exact, NOT DP){best}", html_table(
                ["κ", "(user, key) pairs kept", "keys released (expected)"],
                [[str(k), f"{pairs:.1%}", "" if keys is None else f"{keys:,.1f}"]
                 for k, pairs, keys in self.hindsight_kappa])
                + html_table(["L∞", f"rows kept at κ = {self.kappa}"],
                             [[str(lf), f"{share:.1%}"] for lf, share in self.hindsight_linf])))
        return f'<div class="dpselect-report">{"".join(parts)}</div>'


def _hindsight_kappa(hindsight: Any, strategy: Any) -> tuple[tuple[int, float, float | None], ...]:
    """Per κ of the hindsight grid: the expected share of pairs kept, and the expected number of
    keys the selection (at the same ε and δ, at that κ) would release, read at each key's
    expected bounded user count (rounded; Σ_p P_keep(round(E_p)), an approximation of the
    expectation); None without a selection whose keep probability is known."""
    if hindsight is None:
        return ()
    from dpselect.ingest.plan import build_strategy

    out: list[tuple[int, float, float | None]] = []
    for k, users, pairs in zip(hindsight.kappas, hindsight.expected_users, hindsight.pairs_kept):
        keys = None
        if isinstance(strategy, IndependentSelection):
            params = strategy.params
            try:
                other = build_strategy(strategy.name, params.epsilon, params.delta, k, False, False)
            except (ValueError, TypeError):  # not buildable at this κ: it would release nothing
                other = None
            counts = np.rint(users[users > 0]).astype(np.int64)
            counts = counts[counts > 0]
            keys = 0.0 if other is None or not isinstance(other, IndependentSelection) else float(
                np.sum(other.keep_probability(counts)))
        out.append((k, pairs, keys))
    return tuple(out)


def _smallest_counts(keep_probability: Any, limit: int = 1 << 20) -> tuple[int | None, int | None]:
    """The smallest counts whose keep probability reaches 0.5 and 0.95 (None beyond ``limit``)."""
    counts = np.arange(1, limit + 1, dtype=np.int64)
    p = np.asarray(keep_probability(counts))
    half = np.flatnonzero(p >= 0.5)
    ninety_five = np.flatnonzero(p >= 0.95)
    return (int(counts[half[0]]) if half.size else None, int(counts[ninety_five[0]]) if ninety_five.size else None)


def _expected_with(strategy: IndependentSelection, factor: int, counts: npt.NDArray[np.int64]) -> float | None:
    """Expected releases if the selection had ``factor`` times its ε (same δ, same κ)."""
    from dpselect.ingest.plan import build_strategy

    params = strategy.params
    try:
        other = build_strategy(strategy.name, params.epsilon * factor, params.delta, params.max_partitions_contributed,
                               False, False)
    except (ValueError, TypeError):
        return None
    if not isinstance(other, IndependentSelection):
        return None
    return float(np.sum(other.keep_probability(counts)))


@dataclass(frozen=True, repr=False)
class SelectionReport:
    """The data holder's report on a key selection from raw rows (``select_partitions(...,
    report=True)``): what bounding and the selection lost. Exact, NOT differentially private."""

    rows: int
    null_unit_rows: int
    pairs: int
    pairs_kept: int
    users: int
    candidates: int
    released: int
    buckets: tuple[BucketLoss, ...]  # by user count after bounding
    smallest_count_half: int | None
    smallest_count_95: int | None
    expected_released: float | None
    expected_if_double_epsilon: float | None
    kappa: int
    warnings: tuple[str, ...] = field(default=())

    @classmethod
    def build(cls, *, rows: int, null_unit_rows: int, pairs: int, users: int, counts: npt.NDArray[np.int64],
              released: npt.NDArray[np.bool_], strategy: Any, kappa: int) -> SelectionReport:
        keep_probability = strategy.keep_probability if isinstance(strategy, IndependentSelection) else None
        expected_each = None if keep_probability is None else np.asarray(keep_probability(counts), dtype=float)
        buckets = []
        for low, high in BUCKETS:
            inside = (counts >= low) & (counts <= high)
            buckets.append(BucketLoss(low, high, int(inside.sum()), int((released & inside).sum()),
                                      None if expected_each is None else float(expected_each[inside].sum())))
        half = ninety_five = double = None
        if keep_probability is not None:
            half, ninety_five = _smallest_counts(keep_probability)
            double = _expected_with(strategy, 2, counts)
        pairs_kept = int(counts.sum())
        warnings = []
        if pairs and pairs_kept < MOST_ROWS * pairs:
            warnings.append(f"bounding removed {pairs - pairs_kept:,} of {pairs:,} (user, key) pairs "
                            f"({(pairs - pairs_kept) / pairs:.0%}): raise max_partitions_contributed to keep more")
        return cls(rows=int(rows), null_unit_rows=int(null_unit_rows), pairs=int(pairs), pairs_kept=pairs_kept,
                   users=int(users), candidates=int(counts.size), released=int(released.sum()),
                   buckets=tuple(buckets), smallest_count_half=half, smallest_count_95=ninety_five,
                   expected_released=None if expected_each is None else float(expected_each.sum()),
                   expected_if_double_epsilon=double, kappa=kappa, warnings=tuple(warnings))

    def as_dict(self) -> dict[str, Any]:
        return {
            "note": HEADER, "rows": self.rows, "null_privacy_unit_rows": self.null_unit_rows, "pairs": self.pairs,
            "pairs_kept": self.pairs_kept, "users": self.users, "candidates": self.candidates,
            "released": self.released, "expected_released": self.expected_released,
            "expected_released_with_double_epsilon": self.expected_if_double_epsilon,
            "smallest_user_count_released_with_probability_0.5": self.smallest_count_half,
            "smallest_user_count_released_with_probability_0.95": self.smallest_count_95,
            "loss_by_users_after_bounding": [
                {"users_from": b.low, "users_to": None if math.isinf(b.high) else int(b.high),
                 "partitions": b.partitions, "released": b.released, "expected_released": b.expected_released}
                for b in self.buckets],
            "max_partitions_contributed": self.kappa, "warnings": list(self.warnings),
        }

    def __str__(self) -> str:
        lines = [HEADER, "",
                 f"Bounding (κ = {self.kappa}): {self.pairs_kept:,} of {self.pairs:,} (user, key) pairs kept, "
                 f"{self.users:,} users, {self.rows:,} rows",
                 f"Partitions: {self.candidates:,} with a user after bounding, {self.released:,} released"
                 + (f" (expected {self.expected_released:,.1f})" if self.expected_released is not None else ""),
                 "  users after bounding | partitions | released | expected"]
        for b in self.buckets:
            label = f"{b.low}+" if math.isinf(b.high) else (f"{b.low}" if b.low == b.high else f"{b.low}-{int(b.high)}")
            expected = "" if b.expected_released is None else f"{b.expected_released:,.1f}"
            lines.append(f"  {label:>20} | {b.partitions:>10,} | {b.released:>8,} | {expected}")
        if self.smallest_count_half is not None:
            lines.append(f"A partition needs {self.smallest_count_half:,} users after bounding to be released with "
                         f"probability 0.5, {self.smallest_count_95:,} for 0.95.")
        if self.expected_if_double_epsilon is not None:
            lines.append(f"Doubling epsilon would release {self.expected_if_double_epsilon:,.1f} partitions in "
                         "expectation.")
        lines += [f"WARNING: {w}" for w in self.warnings]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        """The report's sections as small tables, the NOT-DP header and the warnings first."""
        bounding = html_table(["", "kept", "of", "share"], [
            ["(user, key) pairs", f"{self.pairs_kept:,}", f"{self.pairs:,}", _percent(self.pairs_kept, self.pairs)],
            ["users", f"{self.users:,}", "", ""], ["rows", f"{self.rows:,}", "", ""]])
        partitions = (f"Partitions: {self.candidates:,} with a user after bounding, {self.released:,} released"
                      + _expected(self.expected_released))
        parts = [_html_head(self.warnings), _section(f"Bounding (κ = {self.kappa})", bounding),
                 _section(partitions, _buckets_html(self.buckets, "users after bounding"))]
        parts += _selection_notes(self.smallest_count_half, self.smallest_count_95, self.expected_if_double_epsilon,
                                  "Doubling epsilon")
        return f'<div class="dpselect-report">{"".join(parts)}</div>'


# The HTML view (Jupyter): the header and warnings stand out; every text is escaped.
_HEADER_STYLE = "border:2px solid #b00020;background:#fdecea;color:#b00020;padding:6px 10px;font-weight:bold"
_WARNING_STYLE = "border-left:4px solid #e65100;background:#fff3e0;padding:4px 8px;margin:4px 0"


def _percent(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else ""


def _bounds_text(bounds: tuple[float, float]) -> str:
    lower, upper = bounds
    return "per partition" if math.isnan(lower) else f"[{lower:.6g}, {upper:.6g}]"  # NaN: bounds_scope="partition"


def _expected(value: float | None) -> str:
    return f" (expected {value:,.1f})" if value is not None else ""


def _html_head(warnings: Sequence[str]) -> str:
    head = f'<div style="{_HEADER_STYLE}"><strong>{html.escape(HEADER)}</strong></div>'
    return head + "".join(f'<div style="{_WARNING_STYLE}"><strong>WARNING</strong>: {html.escape(w)}</div>'
                          for w in warnings)


def _section(title: str, body: str) -> str:
    return f"<p><strong>{html.escape(title)}</strong></p>{body}"


def _buckets_html(buckets: Sequence[BucketLoss], by: str) -> str:
    return html_table([by, "partitions", "released", "expected"], [
        [b.label, f"{b.partitions:,}", f"{b.released:,}",
         "" if b.expected_released is None else f"{b.expected_released:,.1f}"] for b in buckets])


def _selection_notes(half: int | None, ninety_five: int | None, double: float | None, doubling: str,
                     advice: str = "") -> list[str]:
    notes = []
    if half is not None:
        notes.append(f"A partition needs {half:,} users after bounding to be released with probability 0.5"
                     + (f", {ninety_five:,} for 0.95" if ninety_five is not None else "") + f"{advice}.")
    if double is not None:
        notes.append(f"{doubling} would release {double:,.1f} partitions in expectation.")
    return [f"<p>{html.escape(n)}</p>" for n in notes]
