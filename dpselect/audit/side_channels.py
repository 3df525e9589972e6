"""Side channels: random bytes consumed, and output schemas, on neighbouring inputs.

Bytes consumed. The package has no byte counter, so consumption is measured with the
deterministic test generator: after running the entry point on a fresh generator of seed s,
the next 32 bytes it serves are located in the stream that seed produces from the start; their
offset is the number of bytes the call consumed (skipped buffer ends included). Two claims of
docs/privacy/randomness.md ("Timing") are checked:

* for the count kernels the number of bytes a batch consumes has the same *distribution* for
  every input of the same size: compared with the Dvoretzky–Kiefer–Wolfowitz bound (Massart's
  constant) over ``trials`` seeds — under the claim a gap above the threshold happens with
  probability at most the false-alarm budget;
* where consumption is set by the random bytes alone (the release kernels; counts at or beyond
  a keep table's last entry; the discrete Laplace sampler, which draws before it adds), the same
  seed must consume *exactly* the same bytes on both inputs: any difference is flagged, with no
  false alarm.

The row mechanisms make no such claim (their work follows the data): their consumption is
measured and shown for information only.

Schemas. A released table's column names and types must not depend on the data: the audit
compares a non-empty release with the releases of an input without rows, of one user (empty but
with probability δ), and of the non-empty input plus one user, for ``select_partitions`` and
``aggregate`` (Arrow tables, and pandas frames when pandas is installed).

The test generator must be allowed explicitly (``DPSELECT_ALLOW_INSECURE_RNG=1``, or
``dpselect audit --allow-test-rng``); without it the consumption checks are skipped. Nothing
the audit computes with it is a release.
"""
from __future__ import annotations

import os
import time
import warnings
from typing import Any, Callable

import numpy as np
import numpy.typing as npt

from dpselect.audit._stats import dkw_threshold
from dpselect.audit._targets import Target, build_target, keep_curve
from dpselect.audit.empirical import pick_counts
from dpselect.audit.results import ConsumptionComparison, SchemaComparison, SideChannelAudit

__all__ = ["side_channels", "bytes_consumed"]

_FOLLOW = 32
_REFERENCE_START = 1 << 13
_REFERENCE_MAX = 1 << 24
_SEED_BASE = 0x5EED_A0D1


def _allowed() -> bool:
    from dpselect.testing import ALLOW_ENV

    return os.environ.get(ALLOW_ENV) == "1"


def bytes_consumed(operation: Callable[[Any], Any], seed: int) -> int:
    """How many bytes ``operation(rng)`` takes from the test generator's stream of ``seed``
    (its position when it returns). Needs ``DPSELECT_ALLOW_INSECURE_RNG=1``."""
    from dpselect.testing import InsecureDeterministicRNG, InsecureRNGWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureRNGWarning)
        rng = InsecureDeterministicRNG(seed)
        operation(rng)
        follow = rng.random_bytes(_FOLLOW)
        size = _REFERENCE_START
        while size <= _REFERENCE_MAX:
            reference = InsecureDeterministicRNG(seed).random_bytes(size)
            at = reference.find(follow)
            if at >= 0:
                return at
            size *= 4
    raise RuntimeError(f"the call consumed more than {_REFERENCE_MAX} bytes, or not from the generator it was given")


def _compare(entry: str, label_a: str, label_b: str, op_a: Callable[[Any], Any], op_b: Callable[[Any], Any],
             trials: int, alpha: float, claimed: bool, exact: bool) -> ConsumptionComparison:
    a = np.array([bytes_consumed(op_a, _SEED_BASE + i) for i in range(trials)])
    b = np.array([bytes_consumed(op_b, _SEED_BASE + i) for i in range(trials)])
    identical = float(np.mean(a == b))
    if exact:
        distance, threshold = 1.0 - identical, 0.0
    else:
        grid = np.union1d(a, b)
        cdf_a = np.searchsorted(np.sort(a), grid, side="right") / trials
        cdf_b = np.searchsorted(np.sort(b), grid, side="right") / trials
        distance = float(np.max(np.abs(cdf_a - cdf_b)))
        threshold = 2 * dkw_threshold(trials, alpha / 2)
    return ConsumptionComparison(entry=entry, input_a=label_a, input_b=label_b, trials=trials,
                                 mean_a=float(a.mean()), mean_b=float(b.mean()), identical_fraction=identical,
                                 distance=distance, threshold=threshold, claimed=claimed, exact=exact)


def side_channels(mechanism: Any, epsilon: float | None = None, delta: float | None = None,
                  max_partitions_contributed: int | None = None, *, trials: int = 1000, batch: int = 64,
                  false_alarm: float = 1e-6, schemas: bool = True, rows_entry: Callable[..., Any] | None = None,
                  **options: Any) -> SideChannelAudit:
    """Compare random bytes consumed (over ``trials`` seeds of the test generator, batches of
    ``batch`` partitions) and output schemas on neighbouring inputs. ``false_alarm`` bounds the
    probability that a mechanism keeping the documented claims is flagged. ``rows_entry``: the
    function called instead of :func:`dpselect.select_partitions` for the schema checks (same
    signature), to audit a wrapper. Returns a :class:`~dpselect.audit.results.SideChannelAudit`."""
    start = time.perf_counter()
    target = build_target(mechanism, epsilon, delta, max_partitions_contributed, options)
    skipped: list[str] = []
    comparisons: list[ConsumptionComparison] = []
    if not _allowed():
        skipped.append("bytes consumed: the test generator is not allowed here (set DPSELECT_ALLOW_INSECURE_RNG=1, "
                       "or run `dpselect audit --allow-test-rng`); nothing it computes is released")
        plan: list[tuple[str, str, str, Callable[[Any], Any], Callable[[Any], Any], bool, bool]] = []
    elif target.kind == "count":
        plan = _count_plan(target, batch)
    elif target.kind == "rows":
        plan = _row_plan(target, batch)
    else:
        plan = _noise_plan(target, batch)
    distributional = sum(1 for p in plan if p[5] and not p[6])
    alpha = false_alarm / max(1, distributional)
    for entry, label_a, label_b, op_a, op_b, claimed, exact in plan:
        comparisons.append(_compare(entry, label_a, label_b, op_a, op_b, trials, alpha, claimed, exact))
    schema_results: list[SchemaComparison] = []
    if schemas:
        try:
            schema_results = _schemas(target, rows_entry)
        except ImportError as exc:
            skipped.append(f"schemas: {exc}")
    return SideChannelAudit(mechanism=target.label, consumption=tuple(comparisons), schemas=tuple(schema_results),
                            false_alarm=false_alarm, skipped=tuple(skipped), seconds=time.perf_counter() - start)


# ------------------------------------------------------------------ what is compared

def _count_op(target: Target, counts: npt.NDArray[np.int64]) -> Callable[[Any], Any]:
    import dpselect

    s = target.strategy
    if not target.by_name:
        return lambda rng: s.apply(counts, rng=rng)
    kw: dict[str, Any] = dict(epsilon=target.epsilon, delta=target.delta, max_partitions_contributed=target.kappa,
                              **target.options)
    if target.public_partitions == "only":
        return lambda rng: dpselect.release(counts, public=True, rng=rng, **kw)
    if target.public_partitions == "mixed":
        mask = np.zeros(counts.shape, bool)
        return lambda rng: dpselect.release(counts, public=mask, rng=rng, **kw)
    if target.releases_counts:
        return lambda rng: dpselect.release(counts, rng=rng, **kw)
    return lambda rng: dpselect.select(counts, strategy=target.label, rng=rng, **kw)


def _count_plan(target: Target, batch: int) -> list[Any]:
    s = target.strategy
    curve = keep_curve(target)
    n_keep, _ = pick_counts(curve, target.kappa, float(target.claimed_delta), 10_000)
    cap = s.count_cap
    beyond = int(cap) if cap is not None else int(curve.size)
    release_kernel = target.releases_counts

    def full(n: int) -> npt.NDArray[np.int64]:
        return np.full(batch, n, dtype=np.int64)

    pairs = [("0", "1", full(0), full(1)), (str(n_keep), str(n_keep + 1), full(n_keep), full(n_keep + 1)),
             ("1", f"{beyond + 5}", full(1), full(beyond + 5))]
    entry = f"{target.label}: {batch} partitions"
    plan = [(entry, f"all {a}", f"all {b}", _count_op(target, x), _count_op(target, y), True, release_kernel)
            for a, b, x, y in pairs]
    if not release_kernel and cap is not None:  # N − 1, N and 10^12 read the same entry: the same bytes
        plan.append((entry, f"all {beyond - 1}", "all 10^12", _count_op(target, full(beyond - 1)),
                     _count_op(target, full(10**12)), True, True))
    return plan


def _row_plan(target: Target, batch: int) -> list[Any]:
    import dpselect
    from dpselect.audit.empirical import group_rows

    groups, kappa = max(1, batch // max(1, target.kappa)), target.kappa
    s = target.strategy

    def op(base: int, added: bool) -> Callable[[Any], Any]:
        users, parts = group_rows(groups, kappa, base, added)
        n = groups * kappa
        if not target.by_name:
            return lambda rng: s.select_rows(users, parts, n, rng=rng)
        return lambda rng: dpselect.select_rows(users, parts, target.epsilon, target.delta, strategy=target.label,
                                                max_partitions_contributed=kappa, n_partitions=n, rng=rng,
                                                **target.options)

    entry = f"{target.label}: select_rows, {groups} copies of {kappa} partition(s)"
    return [(entry, "5 users each", "plus one user", op(5, False), op(5, True), False, False)]


def _noise_plan(target: Target, batch: int) -> list[Any]:
    from dpselect.aggregation.noise import DiscreteLaplaceNoise

    noise = DiscreteLaplaceNoise.for_epsilon(target.epsilon, sensitivity=1, max_partitions_contributed=target.kappa)

    def op(value: int) -> Callable[[Any], Any]:
        values = np.full(batch, value, dtype=np.int64)
        return lambda rng: noise.add(values, rng=rng)

    entry = f"discrete Laplace noise (scale {float(noise.scale):g}) on {batch} values"
    return [(entry, "all 10", "all 11", op(10), op(11), True, True),
            (entry, "all 0", "all 10^9", op(0), op(10**9), True, True)]


# ------------------------------------------------------------------ schemas

def _schema_text(result: Any) -> str:
    schema = getattr(result, "schema", None)
    if schema is not None and hasattr(schema, "names") and hasattr(schema, "types"):
        return ", ".join(f"{n}: {t}" for n, t in zip(schema.names, schema.types))
    dtypes = getattr(result, "dtypes", None)
    if dtypes is not None:
        return ", ".join(f"{n}: {t}" for n, t in dtypes.items())
    return type(result).__name__


def _schemas(target: Target, rows_entry: Callable[..., Any] | None) -> list[SchemaComparison]:
    import dpselect
    from dpselect.ingest.rows import import_pyarrow

    pa = import_pyarrow()
    keys_small = {"user": pa.array([1], pa.int64()), "key": pa.array(["rare"], pa.string()),
                  "value": pa.array([1.0], pa.float64())}
    big = 400
    keys_big = {"user": pa.array(list(range(big)) + [big], pa.int64()),
                "key": pa.array(["common"] * big + ["rare"], pa.string()),
                "value": pa.array([2.0] * (big + 1), pa.float64())}
    plus_one = {k: pa.concat_arrays([v, pa.array([big + 1] if k == "user" else (["common"] if k == "key" else [3.0]),
                                                 v.type)]) for k, v in keys_big.items()}
    no_rows = {k: pa.array([], v.type) for k, v in keys_small.items()}
    reference = ("a non-empty release", pa.table(keys_big))
    inputs = [reference, ("no rows", pa.table(no_rows)), ("one user", pa.table(keys_small)),
              ("the same plus one user", pa.table(plus_one))]
    frames: list[tuple[str, Callable[[Any], Any]]] = [("arrow", lambda t: t)]
    try:
        import pandas  # noqa: F401

        frames.append(("pandas", lambda t: t.to_pandas()))
    except ImportError:
        pass
    out = []
    for frame_name, convert in frames:
        results = []
        for label, table in inputs:
            data = convert(table)
            if target.kind == "aggregate":
                from dpselect.audit.certify import aggregate_metrics

                lo, hi = target.options["bounds"]
                result = dpselect.aggregate(data, privacy_unit="user", by="key", metrics=aggregate_metrics((lo, hi)),
                                            epsilon=target.epsilon, delta=target.delta,
                                            max_partitions_contributed=target.kappa,
                                            max_contributions_per_partition=int(target.options["linf"])).frame
                entry = f"aggregate ({frame_name})"
            else:
                kw: dict[str, Any] = dict(privacy_unit="user", by="key", counts=target.releases_counts)
                use = target.public_partitions
                if use != "none":
                    kw["public_partitions"] = ["never-seen"] if use == "mixed" else ["common", "rare"]
                select = rows_entry or dpselect.select_partitions
                if target.by_name:
                    result = select(data, epsilon=target.epsilon, delta=target.delta,
                                    max_partitions_contributed=target.kappa, strategy=target.label, **target.options, **kw)
                else:
                    result = select(data, strategy=target.strategy, **kw)
                entry = f"select_partitions ({frame_name})"
            results.append((label, _schema_text(result)))
        (label_a, a) = results[0]
        for label_b, b in results[1:]:  # every input against the non-empty release
            out.append(SchemaComparison(entry, label_a, label_b, a, b))
    return out
