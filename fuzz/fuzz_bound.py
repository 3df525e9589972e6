"""Fuzz target: row-level contribution bounding (dpselect._bound.bound_rows, and aggregate's bounding on
several threads, dpselect.aggregation.shards).

Random user and partition codes (some out of range), random value columns (extreme values,
whose sums leave int64), random κ and L∞ (0, small, huge), random shards, with or without the
kept-row mask and the users-before counts. Properties: bad arguments raise ValueError only; sums
are exact in 128 bits, never an error; with huge κ and L∞, users, rows, sums and users-before equal numpy's
(every row of the shard kept), and with small ones every bound holds: each user keeps at most κ
partitions and at most L∞ rows in each, the outputs are exactly the sums over the kept rows,
and the totals agree. On a whole input the same holds for the bounding on 1-4 threads (shards
marking their rows, ranges of partitions adding them up)."""
from __future__ import annotations

import _harness  # noqa: F401  (sys.path, environment)
import atheris

with atheris.instrument_imports(include=["dpselect"]):
    from dpselect import _bound
    from dpselect._threads import using
    from dpselect.aggregation import shards
    from dpselect.aggregation.wide import Wide
    from dpselect.testing import InsecureDeterministicRNG

import numpy as np

HUGE = 2 ** 64 - 1
BOUNDS = [1, 2, 3, HUGE, 2 ** 63, 2 ** 32, 0, 2 ** 64, -1]
VALUES = [0, 1, -1, 7, 2 ** 62, -(2 ** 62), 2 ** 63 - 1, -(2 ** 63)]


@atheris.instrument_func  # the target's own branches guide the search too (the C kernel is not instrumented)
def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    n = fdp.ConsumeIntInRange(0, 48)
    n_users = fdp.ConsumeIntInRange(0, 8)
    n_parts = fdp.ConsumeIntInRange(0, 6)
    users = np.array([fdp.ConsumeIntInRange(0, n_users + (fdp.ConsumeIntInRange(0, 30) == 0)) for _ in range(n)],
                     dtype=np.uint32)
    parts = np.array([fdp.ConsumeIntInRange(0, n_parts + (fdp.ConsumeIntInRange(0, 30) == 0)) for _ in range(n)],
                     dtype=np.uint32)
    n_values = fdp.ConsumeIntInRange(0, 3)
    values = [np.array([VALUES[fdp.ConsumeIntInRange(0, len(VALUES) - 1)] if fdp.ConsumeIntInRange(0, 3) == 0
                        else fdp.ConsumeIntInRange(-100, 100) for _ in range(n)], dtype=np.int64)
              for _ in range(n_values)]
    kappa = BOUNDS[fdp.ConsumeIntInRange(0, len(BOUNDS) - 1)]
    linf = BOUNDS[fdp.ConsumeIntInRange(0, len(BOUNDS) - 1)]
    shard_mask = [0, 1, 3, 2][fdp.ConsumeIntInRange(0, 3)]
    shard = fdp.ConsumeIntInRange(0, 3)
    before = fdp.ConsumeBool()
    with_kept = fdp.ConsumeBool()
    kept = np.zeros(n, dtype=np.uint8) if with_kept else None

    valid = (0 < kappa < 2 ** 64 and 0 < linf < 2 ** 64 and not (shard & ~shard_mask)
             and not (shard_mask & (shard_mask + 1)))
    codes_ok = bool(np.all(users < n_users)) and bool(np.all(parts < n_parts))
    try:
        out_users, out_rows, out_sums, out_before, totals = _bound.bound_rows(
            users, parts, n_users, n_parts, kappa, linf, values, None, shard_mask, shard, before, kept)
    except ValueError:
        assert not (valid and codes_ok), "valid arguments refused"
        return
    assert valid and codes_ok, "invalid arguments accepted"
    assert out_users.shape == out_rows.shape == (n_parts,)
    assert out_sums.shape == (n_values, n_parts, 2)
    mine = (users & shard_mask) == shard
    pairs = {(int(u), int(p)) for u, p, m in zip(users, parts, mine) if m}
    reference_before = np.bincount(np.array([p for _, p in pairs], dtype=np.int64), minlength=n_parts)[:n_parts]
    if before:
        assert np.array_equal(out_before, reference_before), (out_before, reference_before)
    else:
        assert out_before is None
    assert totals["rows"] == int(mine.sum()) and totals["pairs"] == len(pairs)
    assert totals["users"] == len({u for u, _ in pairs})
    if shard_mask == 0 and kappa < 2 ** 64 and linf < 2 ** 64:
        # The same bounding on 1-4 threads: every shard marks its rows, then ranges of partitions add them up
        # (dpselect.aggregation.shards); the outputs must be the sums over the rows it kept.
        threads = fdp.ConsumeIntInRange(1, 4)
        marks = np.zeros(n, dtype=np.uint8)
        with using(threads):
            s_users, s_rows, s_sums, s_before, s_totals = shards.bound_in_shards(
                users, parts, n_users, n_parts, kappa, linf, values, InsecureDeterministicRNG(seed=threads).test_state,
                marks)
        assert set(np.unique(marks).tolist()) <= {0, 1}
        if n_parts:
            assert np.array_equal(s_before[:n_parts], reference_before)
        _check_bounded(users, parts, values, n_parts, kappa, linf, mine, pairs, marks.astype(bool),
                       s_users[:n_parts], s_rows[:n_parts], s_sums[:len(values), :n_parts], s_totals)

    if kept is None:
        if kappa >= 2 ** 32 and linf >= 2 ** 32:  # nothing dropped: numpy's group-by
            kept_rows = mine
        else:
            return  # which rows were kept is unknown: the bounds are checked when kept is asked for
    else:
        assert set(np.unique(kept).tolist()) <= {0, 1}
        kept_rows = kept.astype(bool)
        assert not np.any(kept_rows & ~mine), "a row of another shard was kept"
        if kappa >= 2 ** 32 and linf >= 2 ** 32:
            assert np.array_equal(kept_rows, mine), "a row was dropped with huge bounds"
    _check_bounded(users, parts, values, n_parts, kappa, linf, mine, pairs, kept_rows, out_users, out_rows, out_sums,
                   totals)


def _check_bounded(users: np.ndarray, parts: np.ndarray, values: list[np.ndarray], n_parts: int, kappa: int, linf: int,
                   mine: np.ndarray, pairs: set[tuple[int, int]], kept_rows: np.ndarray, out_users: np.ndarray,
                   out_rows: np.ndarray, out_sums: np.ndarray, totals: dict[str, int]) -> None:
    """Every bound holds on the kept rows, and the outputs are exactly their sums."""
    by_user: dict[int, dict[int, int]] = {}
    for u, p in zip(users[kept_rows].tolist(), parts[kept_rows].tolist()):
        by_user.setdefault(u, {}).setdefault(p, 0)
        by_user[u][p] += 1
    for u, partitions in by_user.items():
        assert len(partitions) <= kappa, f"user {u} kept {len(partitions)} partitions > {kappa}"
        assert max(partitions.values()) <= linf, f"user {u} kept more than {linf} rows in a partition"
        assert (u, 0) is not None
    for (u, p) in pairs:  # a kept pair keeps min(r, L∞) of its r rows; a user keeps min(d, κ) pairs
        r = int(np.sum(mine & (users == u) & (parts == p)))
        got = by_user.get(u, {}).get(p, 0)
        assert got in (0, min(r, linf)), f"pair ({u}, {p}) kept {got} of {r} rows"
    for u in {u for u, _ in pairs}:
        d = len({p for uu, p in pairs if uu == u})
        assert len(by_user.get(u, {})) == min(d, kappa), f"user {u} kept {len(by_user.get(u, {}))} of {d}"
    ref_users = np.zeros(n_parts, dtype=np.int64)
    for partitions in by_user.values():
        for p in partitions:
            ref_users[p] += 1
    ref_rows = np.bincount(parts[kept_rows].astype(np.int64), minlength=n_parts)[:n_parts]
    assert np.array_equal(out_users, ref_users), (out_users, ref_users)
    assert np.array_equal(out_rows, ref_rows), (out_rows, ref_rows)
    for c, column in enumerate(values):
        exact = [sum(int(v) for v in column[kept_rows & (parts == p)]) for p in range(n_parts)]
        got = Wide.from_words(out_sums[c]).to_ints()  # exact in 128 bits: no sum wraps, none fails
        assert got == exact, (got, exact)
    assert totals["rows_kept"] == int(kept_rows.sum())
    assert totals["pairs_kept"] == sum(len(p) for p in by_user.values())


if __name__ == "__main__":
    _harness.main(TestOneInput)
