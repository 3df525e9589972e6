"""Empirical audits: run the real entry points on neighbouring inputs many times and bound ε from
below (docs/privacy/audit.md).

Scenarios (each a pair of neighbouring inputs D, D' differing by one user):

* ``absent_vs_one``: one user alone in κ partitions (each of count 1) against no such partition
  at all (the empty output, known exactly): the release probability itself must be <= δ;
* ``zero_vs_one``: the same κ partitions at count 1 against count 0 run through the kernel
  (a zero-count private partition must never be released: a release is reported as a defect);
* ``n_vs_n+1@keep`` / ``@drop``: κ partitions at count n + 1 against n, at the counts where the
  stated keep probability changes most (chosen from the mechanism's own ``keep_probability``);
* ``public_zero_vs_one`` (mixed): a public key absent from the data against one user;
* ``rows_absent_vs_one`` / ``rows_user_added``: raw rows through ``select_partitions``, one user
  with rows in κ + 1 keys (so contribution bounding acts) added to nothing / to n users per key;
* ``rows_null_unit`` (opt-in, ``null_trials`` > 0): a person whose privacy unit is null added to
  raw rows, with ``null_privacy_units="drop"``: their rows must not change the output at all, so
  this pair's claim is ε = δ = 0; one call per trial;
* ``aggregate_metrics``: ``dpselect.aggregate`` with public partitions, one user with L∞ + 1
  rows in κ + 1 keys and values beyond the bounds added to n users per key.

Trials are vectorised: ``trials`` one-partition decisions are one call on an array of
``trials × κ`` counts. The raw-row and aggregate scenarios put ``row_trials`` independent
copies of the small table in one call (disjoint users and keys); for every shipped mechanism each
copy's output depends only on its own rows (bounding is per user, decisions per partition), so
the copies are independent trials of the same neighbouring pair — a mechanism that couples
copies is audited by the per-call ``rows_null_unit`` design instead.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import numpy.typing as npt

from dpselect.audit._events import Side, evaluate, split_alpha
from dpselect.audit._targets import Target, added_weight, build_target, keep_curve, release_floor
from dpselect.audit.results import EmpiricalAudit, EventEstimate
from dpselect.errors import DPSelectError

__all__ = ["empirical", "SCENARIOS"]

SCENARIOS = ("absent_vs_one", "zero_vs_one", "n_vs_n+1", "public_zero_vs_one", "rows_absent_vs_one",
             "rows_user_added", "rows_null_unit", "aggregate_metrics")
_PATTERN_MAX_KEYS = 6


@dataclass
class _Scenario:
    name: str
    neighbours: str
    run: Callable[[], tuple[Side, Side]]
    categorical: frozenset[str] = frozenset()
    zero_check: bool = False  # D' holds zero-count private partitions: none may be released
    claim: tuple[float, float] | None = None  # (ε, δ) this pair must satisfy, if not the mechanism's


def empirical(mechanism: Any, epsilon: float | None = None, delta: float | None = None,
              max_partitions_contributed: int | None = None, *, trials: int = 1_000_000,
              row_trials: int = 20_000, null_trials: int = 0, false_alarm: float = 1e-6,
              scenarios: tuple[str, ...] | None = None, rows_entry: Callable[..., Any] | None = None,
              **options: Any) -> Any:
    """Run ``mechanism``'s real entry points on neighbouring inputs and bound ε from below.

    ``mechanism``: a name (built as :func:`dpselect.make_strategy` builds it, and run through
    ``dpselect.select`` / ``release`` / ``select_rows`` / ``select_partitions`` /
    ``aggregate``) or a strategy object (run through its own ``apply`` / ``select_rows`` and
    through ``select_partitions(strategy=...)``). ``trials``: trials per side of each count
    scenario; ``row_trials``: copies of the small table per side of each raw-row scenario;
    ``null_trials``: calls per side of ``rows_null_unit`` (0: skipped). ``rows_entry``: the
    function called instead of :func:`dpselect.select_partitions` (same signature), to audit a
    wrapper. ``false_alarm``: the probability, at most, that a mechanism keeping its promise is
    reported refuted. Uses the secure generator. Returns an
    :class:`~dpselect.audit.results.EmpiricalAudit`."""
    start = time.perf_counter()
    target = build_target(mechanism, epsilon, delta, max_partitions_contributed, options)
    if target.kind == "aggregate":
        built = _aggregate_scenarios(target, row_trials)
    else:
        built = _count_scenarios(target, trials) if target.kind == "count" else _row_scenarios(target, trials)
        built += _raw_row_scenarios(target, row_trials, null_trials, rows_entry)
    wanted = set(SCENARIOS if scenarios is None else scenarios)
    unknown = wanted - set(SCENARIOS)
    if unknown:
        raise ValueError(f"unknown scenario(s) {sorted(unknown)}; known: {list(SCENARIOS)}")
    chosen = [s for s in built if s.name.split("@")[0] in wanted]
    skipped = [] if scenarios is None else [
        f"{name}: not applicable to {target.label}" + (" (or null_trials = 0)" if name == "rows_null_unit" else "")
        for name in sorted(wanted) if not any(s.name.split("@")[0] == name for s in built)]
    alpha = split_alpha(false_alarm, len(chosen))
    claimed_eps, claimed_delta = target.claimed_epsilon, float(target.claimed_delta)
    estimates: list[EventEstimate] = []
    defects: list[str] = []
    for scenario in chosen:
        try:
            d, d0 = scenario.run()
        except _Skip as why:
            skipped.append(f"{scenario.name}: {why}")
            continue
        if isinstance(d, _Claim):  # the aggregate reports its claim with its first run
            claimed_eps, claimed_delta = d.epsilon, d.delta
            d, d0 = d.sides
        if scenario.zero_check:
            released = int(np.count_nonzero(d0.scores["kept"] > 0))
            if released:
                defects.append(f"{scenario.name}: {released} of {d0.scores['kept'].size} trials released a "
                               "private partition with zero users (an absent partition must never be released)")
        eps_s, delta_s = scenario.claim if scenario.claim is not None else (claimed_eps, claimed_delta)
        estimates.append(evaluate(scenario.name, scenario.neighbours, d, d0, delta_s, eps_s, alpha,
                                  scenario.categorical))
    return EmpiricalAudit(mechanism=target.label, epsilon=claimed_eps, delta=claimed_delta,
                          max_partitions_contributed=target.kappa, estimates=tuple(estimates),
                          false_alarm=false_alarm, defects=tuple(defects), skipped=tuple(skipped),
                          seconds=time.perf_counter() - start)


class _Skip(DPSelectError):
    """A scenario that cannot run here (a missing optional dependency)."""


@dataclass
class _Claim:
    epsilon: float
    delta: float
    sides: tuple[Side, Side]


# ------------------------------------------------------------------ where to test

def pick_counts(curve: npt.NDArray[Any], kappa: int, delta: float, trials: int, increment: float = 1.0,
                curve_at: Callable[[npt.NDArray[Any]], npt.NDArray[Any]] | None = None) -> tuple[int, int]:
    """(n_keep, n_drop): the counts n >= 1 where "all κ kept" (resp. "all κ dropped") separates
    n + 1 from n best, by an approximate ε bound at ``trials`` trials (a choice of where to look,
    never part of a verdict)."""
    n = np.arange(1, max(2, curve.size - 1))
    low = curve[n]
    high = curve_at(n + increment) if curve_at is not None else curve[np.minimum(n + 1, curve.size - 1)]
    half = max(1, trials // 2)
    z = 5.0

    def proxy(p1: npt.NDArray[Any], p0: npt.NDArray[Any]) -> npt.NDArray[Any]:
        lo1 = p1 - delta - z * np.sqrt(p1 * (1 - p1) / half)
        hi0 = p0 + z * np.sqrt(p0 * (1 - p0) / half) + z * z / half
        with np.errstate(divide="ignore", invalid="ignore"):
            value: npt.NDArray[Any] = np.where(lo1 > 0, np.log(np.maximum(lo1, 1e-300) / hi0), -1.0 + lo1)
        return value

    choices = []
    for p1, p0 in ((high ** kappa, low ** kappa), ((1 - low) ** kappa, (1 - high) ** kappa)):
        score = proxy(p1, p0)
        if score.max() <= 0:  # too few trials to see a ratio anywhere: look where the rates differ most
            score = p1 - p0
        choices.append(int(n[int(np.argmax(score))]))
    return choices[0], choices[1]


# ------------------------------------------------------------------ counts (the array API)

def _count_entry(target: Target) -> Callable[[npt.NDArray[np.int64], npt.NDArray[np.bool_] | None],
                                             tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64] | None]]:
    """The public function a user calls: dpselect.select / dpselect.release by name, the
    strategy's own ``apply`` for an object."""
    import dpselect

    s = target.strategy
    use = target.public_partitions
    if not target.by_name:
        def run_object(counts: npt.NDArray[np.int64], public: npt.NDArray[np.bool_] | None) -> Any:
            result = s.apply(counts, public=public) if public is not None else s.apply(counts)
            return np.asarray(result.keep), None if result.noisy_counts is None else np.asarray(result.noisy_counts)
        return run_object
    kw: dict[str, Any] = dict(epsilon=target.epsilon, delta=target.delta, max_partitions_contributed=target.kappa,
                              **target.options)

    def run(counts: npt.NDArray[np.int64], public: npt.NDArray[np.bool_] | None) -> Any:
        if use == "only":
            return tuple(dpselect.release(counts, public=True, **kw))
        if use == "mixed":
            mask = np.zeros(counts.shape, bool) if public is None else public
            return tuple(dpselect.release(counts, public=mask, **kw))
        if target.releases_counts:
            return tuple(dpselect.release(counts, **kw))
        return dpselect.select(counts, strategy=target.label, **kw), None
    return run


def _floor_value(target: Target) -> float:
    """The score of a partition that is not released, below every released noisy count."""
    return float(release_floor(target.strategy))


def _count_sides(target: Target, entry: Callable[..., Any], trials: int, count: int | None,
                 public: bool = False) -> Side:
    """κ partitions per trial, all at ``count``; None: the partitions are absent (exact)."""
    kappa = target.kappa
    floor = _floor_value(target)
    if count is None:
        scores = {"kept": np.zeros(trials)}
        if target.releases_counts:
            scores["sum"] = np.full(trials, kappa * floor)
        return Side(scores, exact=True)
    counts = np.full(trials * kappa, count, dtype=np.int64)
    keep, noisy = entry(counts, np.ones(counts.size, bool) if public else None)
    keep = np.asarray(keep, dtype=bool).reshape(trials, kappa)
    scores = {"kept": keep.sum(axis=1).astype(np.float64)}
    if noisy is not None:
        values = np.where(keep, np.asarray(noisy).reshape(trials, kappa), floor)
        scores["sum"] = values.sum(axis=1).astype(np.float64)
    return Side(scores)


def _count_pair(target: Target, entry: Callable[..., Any], trials: int, n: int) -> tuple[Side, Side]:
    return _count_sides(target, entry, trials, n + 1), _count_sides(target, entry, trials, n)


def _count_scenarios(target: Target, trials: int) -> list[_Scenario]:
    entry = _count_entry(target)
    kappa = target.kappa
    listed = target.public_partitions == "only"
    out: list[_Scenario] = []
    users = f"one user in {kappa} partition(s)"
    if not listed:
        out.append(_Scenario("absent_vs_one", f"D: {users}, each of count 1; D': the partitions are absent",
                             lambda: (_count_sides(target, entry, trials, 1), _count_sides(target, entry, trials, None))))
    out.append(_Scenario("zero_vs_one", f"D: {users}, each of count 1; D': count 0 through the kernel",
                         lambda: (_count_sides(target, entry, trials, 1), _count_sides(target, entry, trials, 0)),
                         zero_check=not listed))
    if target.public_partitions == "mixed":
        out.append(_Scenario("public_zero_vs_one", f"D: {users} of public keys, count 1; D': the public keys, count 0",
                             lambda: (_count_sides(target, entry, trials, 1, public=True),
                                      _count_sides(target, entry, trials, 0, public=True))))
    curve = keep_curve(target)
    if listed:
        points = {"values": 3}
    else:
        n_keep, n_drop = pick_counts(curve, kappa, float(target.claimed_delta), trials)
        points = {"keep": n_keep} if n_keep == n_drop else {"keep": n_keep, "drop": n_drop}
    for label, n in points.items():
        out.append(_Scenario(f"n_vs_n+1@{label}", f"D: {kappa} partition(s) of count {n + 1}; D': of count {n} "
                             "(the user is in all of them)",
                             functools.partial(_count_pair, target, entry, trials, n)))
    return out


# ------------------------------------------------------------------ row mechanisms (select_rows)

def _row_entry(target: Target) -> Callable[[npt.NDArray[np.int64], npt.NDArray[np.int64], int], npt.NDArray[np.bool_]]:
    import dpselect

    s = target.strategy
    if not target.by_name:
        return lambda users, parts, n: np.asarray(s.select_rows(users, parts, n))
    return lambda users, parts, n: np.asarray(dpselect.select_rows(
        users, parts, target.epsilon, target.delta, strategy=target.label, max_partitions_contributed=target.kappa,
        n_partitions=n, **target.options))


def group_rows(groups: int, keys: int, base: int, added: bool) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``groups`` copies of: ``keys`` partitions with ``base`` single-partition users each, plus
    (``added``) one user with a row in every partition of the copy. Users and partitions are
    disjoint across copies."""
    part = np.arange(groups * keys, dtype=np.int64)
    users = [np.arange(groups * keys * base, dtype=np.int64)]
    parts = [np.repeat(part, base)]
    if added:
        first = groups * keys * base
        users.append(np.repeat(np.arange(first, first + groups, dtype=np.int64), keys))
        parts.append(part)
    return np.concatenate(users), np.concatenate(parts)


def _kept_scores(keep: npt.NDArray[np.bool_], keys: int, values: npt.NDArray[np.float64] | None = None
                 ) -> dict[str, npt.NDArray[np.float64]]:
    """Per copy: how many of its keys were kept, which ones (a bit pattern), the sum of values."""
    kept = keep.reshape(-1, keys)
    scores = {"kept": kept.sum(axis=1).astype(np.float64)}
    if keys <= _PATTERN_MAX_KEYS:
        scores["pattern"] = (kept.astype(np.int64) << np.arange(keys)).sum(axis=1).astype(np.float64)
    if values is not None:
        scores["sum"] = values.reshape(-1, keys).sum(axis=1)
    return scores


def _row_scenarios(target: Target, trials: int) -> list[_Scenario]:
    entry = _row_entry(target)
    kappa = target.kappa
    groups = max(2, trials)
    from dpselect.audit._targets import row_keep

    curve = keep_curve(target)
    w = added_weight(target.strategy, kappa)
    n_keep, n_drop = pick_counts(curve, kappa, float(target.claimed_delta), groups, increment=w,
                                 curve_at=lambda h: row_keep(target.strategy, np.asarray(h, dtype=np.float64)))

    def sides(base: int) -> tuple[Side, Side]:
        n = groups * kappa
        d = Side(_kept_scores(entry(*group_rows(groups, kappa, base, True), n), kappa))
        if base == 0:
            empty = {"kept": np.zeros(groups)}
            if kappa <= _PATTERN_MAX_KEYS:
                empty["pattern"] = np.zeros(groups)
            return d, Side(empty, exact=True)
        return d, Side(_kept_scores(entry(*group_rows(groups, kappa, base, False), n), kappa))

    cat = frozenset({"pattern"})
    out = [_Scenario("absent_vs_one", f"D: one user alone in {kappa} partition(s); D': nothing", lambda: sides(0), cat)]
    for label, n in ({"keep": n_keep} if n_keep == n_drop else {"keep": n_keep, "drop": n_drop}).items():
        out.append(_Scenario(f"n_vs_n+1@{label}", f"D: {kappa} partition(s) of {n} single-partition users plus one "
                             f"user in all of them; D': without that user", functools.partial(sides, n), cat))
    return out


# ------------------------------------------------------------------ raw rows (select_partitions)

def _rows_call(target: Target, rows_entry: Callable[..., Any] | None) -> Callable[..., Any]:
    import dpselect

    entry = rows_entry or dpselect.select_partitions
    use = target.public_partitions
    counts = target.releases_counts

    def call(table: Any, keys: list[int], **extra: Any) -> Any:
        kw: dict[str, Any] = dict(privacy_unit="user", by="key", counts=counts, **extra)
        if use != "none":
            kw["public_partitions"] = keys if use == "only" else [-1]
        if target.by_name:
            return entry(table, epsilon=target.epsilon, delta=target.delta, max_partitions_contributed=target.kappa,
                         strategy=target.label, **target.options, **kw)
        return entry(table, strategy=target.strategy, **kw)
    return call


def _pyarrow() -> Any:
    try:
        from dpselect.ingest.rows import import_pyarrow

        return import_pyarrow()
    except ImportError as exc:
        raise _Skip("pyarrow is not installed (pip install 'dpselect[arrow]')") from exc


def _released(result: Any, groups: int, keys: int, floor: float) -> dict[str, npt.NDArray[np.float64]]:
    """Per copy scores from a released table of integer keys (group · keys + j)."""
    pa = _pyarrow()
    table = result if isinstance(result, pa.Table) else pa.Table.from_pandas(result)
    released = np.asarray(table.column("key").to_numpy(zero_copy_only=False), dtype=np.int64)
    keep = np.zeros(groups * keys, dtype=bool)
    valid = released[(released >= 0) & (released < groups * keys)]
    keep[valid] = True
    values = None
    if "noisy_count" in table.column_names:
        values = np.full(groups * keys, floor)
        values[valid] = np.asarray(table.column("noisy_count").to_numpy(), dtype=np.float64)[
            (released >= 0) & (released < groups * keys)]
    return _kept_scores(keep, keys, values)


def _raw_row_scenarios(target: Target, groups: int, null_trials: int,
                       rows_entry: Callable[..., Any] | None) -> list[_Scenario]:
    kappa = target.kappa
    keys = kappa + 1  # the added user has rows in one more key than κ: bounding must act
    call = _rows_call(target, rows_entry)
    floor = _floor_value(target) if target.releases_counts else 0.0
    groups = max(2, groups)
    curve = keep_curve(target)
    n_keep, n_drop = pick_counts(curve, kappa, float(target.claimed_delta), groups)
    all_keys = list(range(groups * keys))

    def table(base: int, added: bool) -> Any:
        pa = _pyarrow()
        users, parts = group_rows(groups, keys, base, added)
        if added:  # every row of the added users twice: distinct counting must see one user
            tail = slice(groups * keys * base, None)
            users, parts = np.concatenate([users, users[tail]]), np.concatenate([parts, parts[tail]])
        return pa.table({"user": pa.array(users, pa.int64()), "key": pa.array(parts, pa.int64())})

    def sides(base: int) -> tuple[Side, Side]:
        d = Side(_released(call(table(base, True), all_keys), groups, keys, floor))
        if base == 0 and target.public_partitions != "only":
            empty = {"kept": np.zeros(groups), "pattern": np.zeros(groups)}
            if target.releases_counts:
                empty["sum"] = np.full(groups, keys * floor)
            return d, Side(empty, exact=True)
        return d, Side(_released(call(table(base, False), all_keys), groups, keys, floor))

    cat = frozenset({"pattern"}) if keys <= _PATTERN_MAX_KEYS else frozenset()
    out = [_Scenario("rows_absent_vs_one", f"raw rows: D: one user with rows in {keys} keys of their own; D': "
                     "nothing", lambda: sides(0), cat)]
    for label, n in ({"keep": n_keep} if n_keep == n_drop else {"keep": n_keep, "drop": n_drop}).items():
        out.append(_Scenario(f"rows_user_added@{label}", f"raw rows: D: {keys} keys of {n} users each plus one user "
                             f"with rows in all {keys}; D': without that user", functools.partial(sides, n), cat))
    if null_trials > 0:
        out.append(_null_unit_scenario(target, call, null_trials))
    return out


def _null_unit_scenario(target: Target, call: Callable[..., Any], trials: int) -> _Scenario:
    """D': κ keys of n users each, n where the stated keep probability jumps most; D: the same
    plus a person whose privacy unit is null, with a row in each of those keys. With
    ``null_privacy_units="drop"`` that person's rows are left out, so D and D' must give the same
    output distribution: the claim tested here is ε = 0, δ = 0 (any difference the bounds can see
    refutes it). One call per trial: a defect that couples rows across the table (merging every
    null-unit row into one user, say) would be diluted by many copies in one call."""
    kappa = target.kappa
    keys = kappa
    floor = _floor_value(target) if target.releases_counts else 0.0
    n, _ = pick_counts(keep_curve(target), kappa, 0.0, 1)  # where the keep rates differ most

    def build(added: bool) -> Any:
        pa = _pyarrow()
        users: list[int | None] = list(range(n * keys))
        parts = [j for j in range(keys) for _ in range(n)]
        if added:
            users += [None] * keys
            parts += list(range(keys))
        return pa.table({"user": pa.array(users, pa.int64()), "key": pa.array(parts, pa.int64())})

    def run_side(added: bool) -> Side:
        import warnings

        from dpselect.ingest.rows import NullPrivacyUnitsDropped

        table = build(added)
        rows = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NullPrivacyUnitsDropped)
            for _ in range(trials):
                rows.append(_released(call(table, list(range(keys)), null_privacy_units="drop"), 1, keys, floor))
        return Side({k: np.concatenate([r[k] for r in rows]) for k in rows[0]})

    return _Scenario("rows_null_unit", f"raw rows, null_privacy_units='drop': D: D' plus a person whose privacy unit "
                     f"is null, with a row in each key; D': {keys} key(s) of {n} users (one call per trial; claim: "
                     "the null rows change nothing, epsilon = delta = 0)",
                     lambda: (run_side(True), run_side(False)),
                     frozenset({"pattern"}) if keys <= _PATTERN_MAX_KEYS else frozenset(), claim=(0.0, 0.0))


# ------------------------------------------------------------------ the grouped release

def _aggregate_scenarios(target: Target, groups: int) -> list[_Scenario]:
    import dpselect
    from dpselect.audit.certify import aggregate_metrics

    kappa = target.kappa
    linf = int(target.options["linf"])
    lo, hi = (float(b) for b in target.options["bounds"])
    keys = kappa + 1
    base = 10
    groups = max(2, groups)
    metrics = aggregate_metrics((lo, hi))
    all_keys = list(range(groups * keys))

    def table(added: bool) -> Any:
        pa = _pyarrow()
        users, parts = group_rows(groups, keys, base, added)
        values = np.full(users.size, (lo + hi) / 2)
        reps = np.full(users.size, linf, dtype=np.int64)
        if added:
            tail = slice(groups * keys * base, None)
            reps[tail] = linf + 1  # one row more than L∞ per key, and values beyond the bounds
            values[tail] = hi + (hi - lo)
        users, parts, values = (np.repeat(x, reps) for x in (users, parts, values))
        return pa.table({"user": pa.array(users, pa.int64()), "key": pa.array(parts, pa.int64()),
                         "value": pa.array(values, pa.float64())})

    scales: dict[str, float] = {}

    def side(added: bool) -> tuple[Side, Any]:
        result = dpselect.aggregate(table(added), privacy_unit="user", by="key", metrics=metrics,
                                    epsilon=target.epsilon, delta=target.delta, max_partitions_contributed=kappa,
                                    max_contributions_per_partition=linf, public_partitions=all_keys,
                                    noise="laplace")
        frame = result.frame
        order = np.asarray(frame.column("key").to_numpy(), dtype=np.int64)
        scores: dict[str, npt.NDArray[np.float64]] = {}
        combined = np.zeros(groups)
        for name in metrics:
            column = np.zeros(groups * keys)
            column[order] = np.asarray(frame.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)
            per_group = column.reshape(groups, keys).sum(axis=1)
            scores[name] = per_group
            if name in scales:
                combined += per_group / scales[name]
        scores["combined"] = combined
        return Side(scores), result.guarantee

    def run() -> Any:
        for c in result_components(target, metrics, linf, (lo, hi)):
            scales[c[0]] = c[1]
        d, claim = side(True)
        d0, _ = side(False)
        return _Claim(float(claim.epsilon_exact), float(claim.delta_exact), (d, d0)), None

    return [_Scenario("aggregate_metrics", f"dpselect.aggregate with public keys: D: {keys} keys of {base} users "
                      f"({linf} rows each) plus one user with {linf + 1} rows in all {keys} (values beyond the "
                      "bounds); D': without that user", run)]


def result_components(target: Target, metrics: dict[str, Any], linf: int, bounds: tuple[float, float]
                      ) -> list[tuple[str, float]]:
    """Each additive metric's noise scale in output units (to weight the combined score): t =
    κ·Δ/ε_m with the budget split evenly (the default weights, public partitions) between the
    metrics that spend budget (a mean of a released sum and count spends none)."""
    from dpselect.aggregation.noise_choice import mean_sources

    derived = [n for n, source in mean_sources(metrics).items() if source.derived]
    eps_m = target.epsilon / (len(metrics) - len(derived))
    kappa = target.kappa
    reach = max(abs(bounds[0]), abs(bounds[1]), 1e-300)
    out = []
    for name, m in metrics.items():
        if m.kind == "count_distinct_units":
            out.append((name, kappa / eps_m))
        elif m.kind == "count":
            out.append((name, kappa * linf / eps_m))
        elif m.kind == "sum":
            out.append((name, kappa * linf * reach / eps_m))
    return out

