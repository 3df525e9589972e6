"""A differentially private GROUP BY from raw rows: keys and their statistics in one call
(docs/privacy/aggregate.md; tutorial: docs/aggregate.md).

One bounding, one budget: every user is bounded once (κ partitions, then at most L∞ rows in
each, uniform choices from the package CSPRNG) and the key selection and every metric are
computed from those same kept rows, so a key's count and its sum describe the same rows. The
budget (ε, δ) is split between the selection, the private bounds of value columns given none,
and the metrics, and the statement composes them by basic sequential composition."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dpselect import _bound
from dpselect.aggregation.bounds import approx_bounds, approx_bounds_per_partition
from dpselect.aggregation.budget import Budget
from dpselect.aggregation.grid import Grid
from dpselect.aggregation.guarantee import AggregateGuarantee, Component
from dpselect.aggregation.metrics import Metric
from dpselect.aggregation.metric_noise import PartitionGrids, noisy_metric
from dpselect.aggregation.report import AggregateReport, ColumnClamping
from dpselect.exact import as_fraction
from dpselect.frames import from_arrow, to_arrow

from dpselect.pipeline import GUARANTEE_METADATA_KEY, PRIVATE_METADATA_KEY, _warn_dropped, build_strategy, check_columns
from dpselect.rng import resolve_rng, shard_test_state
from dpselect.rows import NULL_PRIVACY_UNITS, RowCounter, arrow_from_numpy, import_pyarrow

__all__ = ["AggregateResult", "aggregate", "DEFAULT_PRECISION_BITS"]

# Values are snapped to a grid of step 2^(⌈log2 max|bound|⌉ − 30): a relative precision of
# 2^-30 (about 1e-9) per value, and room for 2^33 kept rows per partition before a sum in grid
# units could leave int64 (the kernel refuses, never wraps).
DEFAULT_PRECISION_BITS = 30
_SHARD_MASK = 1  # users split by code parity between two threads, as in dpselect.rows
# The key selections aggregate runs on the bounded user counts (the row mechanisms need each
# user's set, and "public"/"mixed" are what public_partitions= does).
SELECTION_STRATEGIES = ("pi_opt", "release", "laplace", "gaussian")


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


def _float_down(x: Fraction) -> float:
    """A float that the mechanisms read (through its shortest repr, as every dpselect parameter)
    as at most x: a budget share handed to code that takes floats is never rounded up."""
    f = float(x)
    while as_fraction(f) > x:
        f = math.nextafter(f, -math.inf)
    return f


def _check_metrics(metrics: object, reserved: set[str]) -> dict[str, Metric]:
    if not isinstance(metrics, Mapping) or not metrics:
        raise TypeError("metrics must be a non-empty dict of name -> metric, e.g. "
                        "{'users': dpselect.count_distinct_units(), 'spend': dpselect.sum('amount', bounds=(0, 500))}")
    checked: dict[str, Metric] = {}
    for name, metric in metrics.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"metric names must be non-empty str, got {name!r}")
        if not isinstance(metric, Metric):
            raise TypeError(f"metrics[{name!r}] must be made by dpselect.count(), count_distinct_units(), sum() "
                            f"or mean(), got {type(metric).__name__}")
        if name in reserved:
            raise ValueError(f"metric name {name!r} is also an input column (privacy_unit, by or a value column); "
                             "choose another name")
        checked[name] = metric
    return checked


def _weights(metrics: dict[str, Metric], auto_columns: list[str], public: bool,
             weights: Mapping[str, object] | None) -> dict[str, Fraction]:
    """The budget shares' weights: 1 for the selection (none with public partitions), 1 per value
    column whose bounds are found privately ("bounds:<column>"), 1 per metric; ``weights``
    overrides any of them."""
    default: dict[str, Fraction] = {}
    if not public:
        default["selection"] = Fraction(1)
    for column in auto_columns:
        default[f"bounds:{column}"] = Fraction(1)
    for name in metrics:
        default[name] = Fraction(1)
    if weights is None:
        return default
    if not isinstance(weights, Mapping):
        raise TypeError(f"weights must be a dict of step -> weight, got {type(weights).__name__}")
    unknown = set(weights) - set(default)
    if unknown:
        raise ValueError(f"weights names unknown step(s) {sorted(unknown)}; the steps are {sorted(default)}")
    for step, w in weights.items():
        if isinstance(w, bool) or not isinstance(w, (int, float, Fraction)) or not math.isfinite(w) or w <= 0:
            raise ValueError(f"weights[{step!r}] must be a positive number, got {w!r}")
        default[step] = Fraction(w)
    return default


def _budget_amounts(epsilon: object, delta: object) -> tuple[Fraction, Fraction]:
    """(ε, δ) as exact fractions, checked (a float is taken at its exact binary value)."""
    Budget(epsilon, delta)  # the accountant's own checks: positive finite ε, δ in [0, 1)
    return as_fraction(epsilon), as_fraction(delta)  # type: ignore[arg-type]


def _shares(epsilon: Fraction, delta: Fraction, weights: dict[str, Fraction]) -> dict[str, tuple[Fraction, Fraction]]:
    """Each step's (ε, δ): ε in proportion to the weights, exactly (the shares sum to ε); all of
    δ to the selection, the one step that needs it (the metrics' noise is pure ε-DP)."""
    total = sum(weights.values(), Fraction(0))
    return {step: (epsilon * w / total, delta if step == "selection" else Fraction(0)) for step, w in weights.items()}


# Rows per step when value columns are converted: the float temporaries of one step stay small.
_STEP_ROWS = 1 << 20


class ValueColumn:
    """A numeric value column read in place from its Arrow chunks (no copy of the whole column),
    checked: integers or floats, no nulls, no NaN or infinity."""

    def __init__(self, batch: Any, column: str) -> None:
        pa = import_pyarrow()
        col = batch.column(column)
        typ = col.type
        if not (pa.types.is_integer(typ) or pa.types.is_floating(typ)) or pa.types.is_float16(typ):
            raise TypeError(f"value column {column!r} must hold integers or floats (float32/float64), got {typ}: "
                            "cast it first")
        if col.null_count:
            raise ValueError(f"value column {column!r} has {col.null_count} null value(s) (a pandas NaN is one): "
                             "drop or fill them before aggregating (a null is not a number to sum)")
        self.name = column
        self.integer = pa.types.is_integer(typ)
        chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
        self.chunks = [c.to_numpy(zero_copy_only=False) for c in chunks if len(c)]
        for chunk in self.chunks:
            if chunk.dtype.kind == "f":
                bad = int(np.count_nonzero(~np.isfinite(chunk)))
                if bad:
                    raise ValueError(f"value column {column!r} has {bad} NaN or infinite value(s): drop or impute "
                                     "them before aggregating")
            elif chunk.dtype.kind == "u" and chunk.size and chunk.max() > np.iinfo(np.int64).max:
                raise ValueError(f"value column {column!r} has values above 2**63 - 1")
        self.size = sum(c.size for c in self.chunks)

    def steps(self) -> Any:
        """(start row, values) in steps of at most _STEP_ROWS rows."""
        start = 0
        for chunk in self.chunks:
            for offset in range(0, chunk.size, _STEP_ROWS):
                piece = chunk[offset:offset + _STEP_ROWS]
                yield start + offset, piece
            start += chunk.size

    def units(self, grid: Grid) -> npt.NDArray[np.int64]:
        """Every value clamped and snapped to ``grid``, as int64 grid units."""
        out = np.empty(self.size, dtype=np.int64)
        for start, piece in self.steps():
            out[start:start + piece.size] = grid.to_units(piece, name=f"value column {self.name!r}")
        return out

    def take(self, kept: npt.NDArray[np.uint8]) -> npt.NDArray[Any]:
        """The values of the rows marked in ``kept``."""
        parts = [piece[kept[start:start + piece.size].view(bool)] for start, piece in self.steps()]
        dtype = np.float64 if not self.integer else np.int64
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


def _bound_all(users: npt.NDArray[np.uint32], partitions: npt.NDArray[np.uint32], n_users: int, n_partitions: int,
               kappa: int, linf: int, units: list[npt.NDArray[np.int64]], rng: Any
               ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64],
                          npt.NDArray[np.int64], npt.NDArray[np.uint8], dict[str, int]]:
    """The kernel on both user shards at once (one thread each, one stream each), summed."""
    kept = np.zeros(users.size, dtype=np.uint8)
    states = [rng._test_state, shard_test_state(rng._test_state, 1)]

    def run(shard: int) -> Any:
        return _bound.bound_rows(users, partitions, n_users, n_partitions, kappa, linf, units, states[shard],
                                 _SHARD_MASK, shard, users_before=True, kept=kept)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpselect-bound") as worker:
        other = worker.submit(run, 1)
        try:
            mine = run(0)
        finally:
            theirs = other.result()
    totals = {key: mine[4][key] + theirs[4][key] for key in mine[4]}
    return (mine[0] + theirs[0], mine[1] + theirs[1], mine[2] + theirs[2], mine[3] + theirs[3], kept, totals)


def aggregate(
    data: Any,
    *,
    privacy_unit: str,
    by: str | Sequence[str],
    metrics: Mapping[str, Metric],
    epsilon: float,
    delta: float,
    max_partitions_contributed: int = 1,
    max_contributions_per_partition: int = 1,
    public_partitions: Any = None,
    strategy: str = "pi_opt",
    bounds_scope: str = "dataset",
    weights: Mapping[str, object] | None = None,
    confidence_level: float | None = None,
    budget: Budget | None = None,
    precision_bits: int = DEFAULT_PRECISION_BITS,
    null_privacy_units: str = "error",
    rng: object = None,
) -> AggregateResult:
    """Release, under (ε, δ)-DP, the keys of a GROUP BY and a statistic per key for each metric.

    Guarantee: the released keys, every metric value and the private bounds are together
    (``epsilon``, ``delta``)-differentially private for neighbouring datasets that add or remove
    all rows of one privacy unit, by basic sequential composition of the steps below, each on
    the same bounded rows (docs/privacy/aggregate.md):

    1. bounding: each user keeps κ = ``max_partitions_contributed`` of its partitions and at most
       L∞ = ``max_contributions_per_partition`` of its rows in each, uniform subsets drawn with
       the package CSPRNG;
    2. selection (skipped with ``public_partitions``): ``strategy`` (default "pi_opt", the
       optimal rule of Desfontaines, Voss, Gipson, Mandayam, PoPETs 2022, Theorems 1–3) on the
       bounded distinct-user counts, with the selection's share of ε and all of δ;
    3. bounds: a value column of a sum or mean given no ``bounds`` gets them from APPROX_BOUNDS
       over all kept values (its own share; docs/privacy/approx-bounds.md);
    4. metrics: each gets its share of ε and exact discrete Laplace noise (Canonne, Kamath,
       Steinke, NeurIPS 2020) scaled to its sensitivity: κ for a user count, κ·L∞ for a row
       count, κ·L∞·max|value| in grid units for a sum; a mean is its bounds' midpoint plus a
       noisy sum of offsets from it over a noisy row count, each with half its share.
       Values are clamped and snapped to a power-of-two grid first (Mironov, CCS 2012), so no
       float noise is ever added.

    The budget's default weights are 1 for the selection, 1 per column whose bounds are found,
    1 per metric; ``weights`` changes any of them by name ("selection", "bounds:<column>",
    a metric's name). With ``budget`` (a :class:`dpselect.Budget`) the call charges (ε, δ)
    before any work and fails without charging if that would overspend.

    ``bounds_scope``: where APPROX_BOUNDS looks for a column given no bounds. "dataset" (default):
    once over every kept value, one grid and one noise scale for all keys (more data per
    histogram). "partition": each released key gets its own bounds from its own noisy histogram
    (after the selection, so only released keys are looked at); a key where no bin passes gets
    NaN for that column's sums and means. Both spend the column's "bounds:<column>" share.

    ``confidence_level`` (e.g. 0.95) adds ``<metric>_ci_low`` / ``<metric>_ci_high`` columns:
    intervals that hold the value after bounding and clamping, before noise, with at least that
    probability; they do not account for clamping or for the selection
    (docs/privacy/confidence-intervals.md).

    Returns an :class:`AggregateResult`: ``.frame`` in the caller's frame type (pandas, Polars,
    Arrow), ``.guarantee``, ``.bounds`` (the clamping bounds used per value column) and
    ``.report()`` for the data holder (exact, NOT DP).
    """
    names = check_columns(privacy_unit, by, "__dpselect_unused__")
    if null_privacy_units not in NULL_PRIVACY_UNITS:
        raise ValueError(f"null_privacy_units must be 'error' or 'drop', got {null_privacy_units!r}")
    for label, value in (("max_partitions_contributed", max_partitions_contributed),
                         ("max_contributions_per_partition", max_contributions_per_partition)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be an int >= 1, got {value!r}")
    if isinstance(precision_bits, bool) or not isinstance(precision_bits, int) or not 1 <= precision_bits <= 52:
        raise ValueError(f"precision_bits must be an int between 1 and 52, got {precision_bits!r}")
    if confidence_level is not None and (isinstance(confidence_level, bool) or not isinstance(confidence_level, float)
                                         or not 0 < confidence_level < 1):
        raise ValueError(f"confidence_level must be a float in (0, 1), e.g. 0.95, got {confidence_level!r}")
    if bounds_scope not in ("dataset", "partition"):
        raise ValueError(f"bounds_scope must be 'dataset' or 'partition', got {bounds_scope!r}")
    checked = _check_metrics(metrics, {privacy_unit, *names})
    value_columns = sorted({m.column for m in checked.values() if m.column is not None})
    clash = set(checked) & set(value_columns)
    if clash:
        raise ValueError(f"metric name(s) {sorted(clash)} are also value columns; choose other names")
    given_bounds: dict[str, tuple[float, float]] = {}
    for name, m in checked.items():
        if m.column is not None and m.bounds is not None:
            previous = given_bounds.setdefault(m.column, m.bounds)
            if previous != m.bounds:
                raise ValueError(f"column {m.column!r} is given two different bounds, {previous} and {m.bounds}: "
                                 "one column is clamped once")
    auto_columns = [c for c in value_columns if c not in given_bounds]
    eps_total, delta_total = _budget_amounts(epsilon, delta)
    shares = _shares(eps_total, delta_total, _weights(checked, auto_columns, public_partitions is not None, weights))
    if strategy not in SELECTION_STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(SELECTION_STRATEGIES)} (a count-based selection of "
                         f"keys), got {strategy!r}; for a list of keys known in advance pass public_partitions")
    strat = None
    if public_partitions is None:
        eps_sel, delta_sel = shares["selection"]
        strat = build_strategy(strategy, _float_down(eps_sel), _float_down(delta_sel), max_partitions_contributed,
                               False, False)
    generator = resolve_rng(rng)
    if budget is not None:
        if not isinstance(budget, Budget):
            raise TypeError(f"budget must be a dpselect.Budget, got {type(budget).__name__}")
        budget.charge(eps_total, delta_total, what=f"aggregate(by={names}, metrics={sorted(checked)})")
    generator._announce()

    table, kind = to_arrow(data, privacy_unit, [*names, *[c for c in value_columns if c not in names]])
    counter = RowCounter(privacy_unit, names, null_privacy_units=null_privacy_units)  # type: ignore[arg-type]
    users, partitions, used = counter.encode(table)
    _warn_dropped(counter, privacy_unit)
    values = {c: ValueColumn(used, c) for c in value_columns}
    kappa, linf = max_partitions_contributed, max_contributions_per_partition
    grids = {c: Grid.for_bounds(lo, hi, precision_bits=precision_bits, integer=values[c].integer)
             for c, (lo, hi) in given_bounds.items()}
    known = [c for c in value_columns if c in grids]
    units = [values[c].units(grids[c]) for c in known]
    n_users, n_parts = counter.n_users, counter.n_partitions
    users_kept, rows_kept, sums, users_before, kept, totals = _bound_all(
        users, partitions, n_users, n_parts, kappa, linf, units, generator)
    del units
    column_sums = {c: sums[i] for i, c in enumerate(known)}
    components: list[Component] = []
    kept_values = {c: values[c].take(kept) for c in value_columns}
    del values, used, table  # the input's columns are no longer read
    kept_partitions = partitions[kept.view(bool)] if auto_columns else None
    del partitions
    for c in auto_columns if bounds_scope == "dataset" else ():
        eps_b, _ = shares[f"bounds:{c}"]
        integer = kept_values[c].dtype.kind in "iu"
        found = approx_bounds(kept_values[c], eps_b, max_partitions_contributed=kappa,
                              max_contributions_per_partition=linf, integer=integer, rng=generator)
        grids[c] = Grid.for_bounds(found.lower, found.upper, precision_bits=precision_bits, integer=integer)
        column_sums[c] = np.asarray(grids[c].sum_units(grids[c].to_units(kept_values[c], name=c),
                                                       kept_partitions, n_parts))
        components.append(Component(f"bounds of {c!r} (APPROX_BOUNDS)", found.guarantee.epsilon_exact, Fraction(0),
                                    str(found.guarantee)))
    clamping = {c: ColumnClamping.of(kept_values[c], grids[c]) for c in value_columns if c in grids}
    del users

    # Candidates: partitions with a user left after bounding, or the public list.
    candidates = np.flatnonzero(users_kept > 0)
    public_mask = None
    if public_partitions is not None:
        from dpselect.public_keys import with_public_partitions
        from dpselect.rows import PartitionCounts

        data_keys = counter.keys_of(candidates)
        listed, public_mask = with_public_partitions(PartitionCounts(data_keys, candidates + 1), public_partitions,
                                                     only_public=True)
        index = listed.counts - 1  # -1: a listed key absent from the data (all statistics 0)
        keys = listed.keys
        released = np.ones(index.size, dtype=bool)
        selection_guarantee = None
    else:
        index = candidates
        keys = counter.keys_of(candidates)
        assert strat is not None
        result = strat.apply(users_kept[candidates], rng=generator)
        released = np.asarray(result.keep, dtype=bool)
        selection_guarantee = result.guarantee.enforced() if hasattr(result.guarantee, "enforced") else result.guarantee
        components.insert(0, Component(f"selection of keys ({strat.name})", as_fraction(selection_guarantee.epsilon),
                                       selection_guarantee.delta_exact, str(selection_guarantee)))

    out_index = index[released]
    present = out_index >= 0
    at = np.where(present, out_index, 0)

    def stat(array: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return np.where(present, array[at], 0).astype(np.int64) if array.size else np.zeros(out_index.size, np.int64)

    n_out = out_index.size
    out_grids = {c: PartitionGrids.of(g, n_out) for c, g in grids.items()}
    out_sums = {c: stat(column_sums[c]) for c in grids}
    for c in auto_columns if bounds_scope == "partition" else ():
        assert kept_partitions is not None
        eps_b, _ = shares[f"bounds:{c}"]
        out_grids[c], out_sums[c], clamping[c], component = _partition_bounds(
            kept_values[c], kept_partitions, out_index, present, n_parts, eps_b, kappa, linf, precision_bits,
            generator, c)
        components.append(component)
    del kept_values

    columns: dict[str, npt.NDArray[Any]] = {}
    for name, m in checked.items():
        eps_m, _ = shares[name]
        values_out, low, high, component = noisy_metric(name, m, eps_m, kappa, linf, stat(users_kept),
                                                        stat(rows_kept), out_sums[m.column] if m.column else None,
                                                        out_grids[m.column] if m.column else None, confidence_level,
                                                        generator)
        columns[name] = values_out
        if confidence_level is not None:
            columns[f"{name}_ci_low"], columns[f"{name}_ci_high"] = low, high
        components.append(component)

    guarantee = AggregateGuarantee(components=tuple(components), requested_epsilon=eps_total,
                                   requested_delta=delta_total, kappa=kappa, linf=linf,
                                   privacy_guaranteed=generator.privacy_guaranteed and (
                                       selection_guarantee is None or selection_guarantee.is_dp))
    out = keys.filter(arrow_from_numpy(released)) if public_partitions is None else keys
    for name, array in columns.items():
        out = out.append_column(name, arrow_from_numpy(np.ascontiguousarray(array)))
    if out.num_rows > 1:
        out = out.sort_by([(name, "ascending") for name in names])
    out = out.replace_schema_metadata({
        GUARANTEE_METADATA_KEY: str(guarantee).encode(),
        PRIVATE_METADATA_KEY: b"true" if guarantee.is_dp else b"false",
    })
    frame = from_arrow(out, kind)
    attrs = getattr(frame, "attrs", None)
    if isinstance(attrs, dict):
        attrs["dpselect_guarantee"] = str(guarantee)
        attrs["dpselect_privacy_guaranteed"] = guarantee.is_dp
    null_unit_rows, released_codes, public = counter.null_unit_rows, out_index[present], public_partitions is not None

    def make_report() -> AggregateReport:
        return AggregateReport.build(
            totals=totals, null_unit_rows=null_unit_rows, users_before=users_before, users_kept=users_kept,
            candidates=candidates, released_codes=released_codes, strategy=strat, clamping=clamping,
            epsilon=eps_total, kappa=kappa, linf=linf, public=public)

    return AggregateResult(frame=frame, guarantee=guarantee,
                           bounds={c: (g.lower, g.upper) for c, g in grids.items()}, _make_report=make_report)


def _partition_bounds(values: npt.NDArray[Any], partitions: npt.NDArray[np.uint32], out_index: npt.NDArray[np.intp],
                      present: npt.NDArray[np.bool_], n_parts: int, epsilon: Fraction, kappa: int, linf: int,
                      precision_bits: int, rng: Any, column: str
                      ) -> tuple[PartitionGrids, npt.NDArray[np.int64], ColumnClamping, Component]:
    """APPROX_BOUNDS per released partition over its kept values (``values`` and ``partitions``
    are the kept rows'), then each partition's sums of its values snapped to its own grid."""
    position = np.full(n_parts, -1, dtype=np.intp)  # data partition code -> output row
    position[out_index[present]] = np.flatnonzero(present)
    where = position[partitions]
    inside = where >= 0
    values, where = values[inside], where[inside]
    integer = values.dtype.kind in "iu"
    found = approx_bounds_per_partition(values, where, out_index.size, epsilon, max_partitions_contributed=kappa,
                                        max_contributions_per_partition=linf, integer=integer, rng=rng)
    grids = PartitionGrids.from_bounds(found.lower, found.upper, found.found, precision_bits, integer)
    usable = grids.found[where]
    sums = np.zeros(out_index.size, dtype=np.int64)
    np.add.at(sums, where[usable], grids.units(values[usable], where[usable]))
    x = values[usable].astype(np.float64)
    lo, hi = grids.lower[where[usable]], grids.upper[where[usable]]
    clamping = ColumnClamping((math.nan, math.nan), int(x.size), int((x < lo).sum()), int((x > hi).sum()),
                              float(np.sum(np.maximum(lo - x, 0)) + np.sum(np.maximum(x - hi, 0))))
    component = Component(f"bounds of {column!r} per partition (APPROX_BOUNDS)", found.guarantee.epsilon_exact,
                          Fraction(0), str(found.guarantee))
    return grids, sums, clamping, component
