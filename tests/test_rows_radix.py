"""RowCounter on a whole in-memory input with integer privacy units (``feed(batch, final=True)``,
as ``select_partitions`` does): the rows are grouped by user through radix buckets
(dpselect.ingest.radix, csrc/radix_pairs.h) and give the streaming path's results: the same
distinct pairs, users and exact counts, every user bounded to min(d, κ) partitions, nulls
refused or dropped, results that depend only on the data and the test seed."""
from __future__ import annotations

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")

from dpselect.ingest import radix as _radix_rows  # noqa: E402  (after the skip without pyarrow)

from dpselect.ingest import _counter as rows  # noqa: E402  (after the skip without pyarrow)
from dpselect.ingest.pipeline import select_partitions  # noqa: E402
from dpselect.ingest.rows import NullPrivacyUnitError, RowCounter  # noqa: E402
from dpselect.testing import InsecureDeterministicRNG  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")


def table(n: int = 20_000, seed: int = 1, user_type=None, n_users: int = 1_500) -> pa.Table:
    gen = np.random.default_rng(seed)  # input data only
    user_type = pa.int64() if user_type is None else user_type
    users = gen.integers(0, n_users, n)
    return pa.table({
        "user": pa.array(users).cast(user_type),
        "key": pa.array([f"key-{v}" for v in gen.zipf(1.3, n) % 400]),
        "region": pa.array((users % 3).astype(np.int16)),
    })


def run(t: pa.Table, by: list[str], *, final: bool, kappa: int = 10**9, cap: int | None = None,
        seed: int = 5, nulls: str = "error") -> tuple[RowCounter, dict[tuple, int]]:
    """The counter (with ``sizes``: its users, pairs and partitions before finish) and the counts."""
    counter = RowCounter("user", by, null_privacy_units=nulls)
    counter.feed(t, final=final)
    counter.sizes = (counter.n_users, counter.n_pairs, counter.n_partitions)  # type: ignore[attr-defined]
    result = counter.finish(kappa, cap, rng=InsecureDeterministicRNG(seed))
    keys = zip(*[result.keys.column(name).to_pylist() for name in by])
    return counter, {k: int(c) for k, c in zip(keys, result.counts)}


@pytest.mark.parametrize("user_type", [pa.int8(), pa.uint16(), pa.int32(), pa.int64(), pa.uint64()])
@pytest.mark.parametrize("by", [["key"], ["key", "region"]])
def test_counts_users_and_pairs_match_the_streaming_path(user_type, by):
    t = table(user_type=user_type, n_users=100 if user_type == pa.int8() else 1_500)
    streamed, expected = run(t, by, final=False)
    grouped, got = run(t, by, final=True)
    assert grouped._radix_sizes is not None and streamed._radix_sizes is None
    assert got == expected
    assert grouped.sizes == streamed.sizes


def test_chunks_slices_and_a_record_batch():
    t = table(30_000)
    _, expected = run(t, ["key"], final=False)
    chunked = pa.Table.from_batches(t.to_batches(max_chunksize=7_001))
    assert chunked.column("user").num_chunks > 1
    assert run(chunked, ["key"], final=True)[1] == expected
    batch = t.combine_chunks().to_batches()[0]
    assert run(batch, ["key"], final=True)[1] == expected  # type: ignore[arg-type]
    sliced = table(31_000, seed=9).slice(1_000)  # buffers read from an offset
    assert sliced.column("user").chunk(0).offset == 1_000
    assert run(sliced, ["key"], final=True)[1] == run(sliced, ["key"], final=False)[1]


def test_bounding_keeps_min_d_kappa_per_user_and_the_cap_holds():
    t = table(25_000)
    users = t.column("user").to_numpy()
    keys = np.array(t.column("key").to_pylist())
    per_user = np.unique(np.unique(np.stack([users.astype(str), keys]), axis=1)[0], return_counts=True)[1]
    _, exact = run(t, ["key"], final=True)
    for kappa in (1, 3):
        _, got = run(t, ["key"], final=True, kappa=kappa)
        assert sum(got.values()) == int(np.minimum(per_user, kappa).sum())
        assert all(0 < n <= exact[k] for k, n in got.items())
    _, capped = run(t, ["key"], final=True, cap=7)
    assert capped == {k: min(n, 7) for k, n in exact.items()}


def test_results_depend_only_on_the_data_and_the_test_seed(monkeypatch):
    """The hash seed (random per input) and the pieces of the two-thread pipeline change nothing."""
    t = table(40_000)
    reference = run(t, ["key"], final=True, kappa=2)[1]
    assert run(t, ["key"], final=True, kappa=2)[1] == reference
    monkeypatch.setattr(rows, "_hash_seed", lambda: 0)
    monkeypatch.setattr(rows, "_PIECE_ROWS", 997)  # dozens of pieces on two threads
    monkeypatch.setattr(rows, "_LOOKAHEAD", 2)
    assert run(t, ["key"], final=True, kappa=2)[1] == reference
    assert run(t, ["key"], final=True, kappa=2, seed=6)[1] != reference  # the seed does matter


def test_null_privacy_units_are_refused_or_dropped():
    t = table(5_000)
    users = t.column("user").to_pylist()
    users[::50] = [None] * len(users[::50])
    with_nulls = t.set_column(0, "user", pa.array(users, pa.int64()))
    with pytest.raises(NullPrivacyUnitError, match="100 row"):
        run(with_nulls, ["key"], final=True)
    counter, got = run(with_nulls, ["key"], final=True, nulls="drop")
    assert counter.null_unit_rows == 100 and counter._radix_sizes is not None
    assert got == run(with_nulls, ["key"], final=False, nulls="drop")[1]


def test_other_privacy_unit_types_and_later_batches_stream():
    t = table(3_000)
    as_strings = t.set_column(0, "user", t.column("user").cast(pa.string()))
    counter, got = run(as_strings, ["key"], final=True)
    assert counter._radix_sizes is None and got == run(t, ["key"], final=True)[1]
    dictionary = t.set_column(0, "user", t.column("user").dictionary_encode())
    counter, got = run(dictionary, ["key"], final=True)
    assert counter._radix_sizes is None and got == run(t, ["key"], final=True)[1]
    # a final batch after others goes to the streaming sets like them
    counter = RowCounter("user", ["key"])
    counter.feed(t.slice(0, 1_000))
    counter.feed(t.slice(1_000), final=True)
    assert counter._radix_sizes is None and counter.n_pairs == run(t, ["key"], final=False)[0].sizes[1]


def test_narrow_columns_keep_the_streaming_path():
    """12 bytes a row would be several times the input for int8 users and int16 keys (3 bytes a
    row): such a table keeps the pair sets, whose size follows the few distinct pairs."""
    gen = np.random.default_rng(2)  # input data only
    users, keys = gen.integers(0, 100, 50_000), gen.integers(0, 300, 50_000)
    narrow = pa.table({"user": pa.array(users, pa.int8()), "key": pa.array(keys, pa.int16())})
    wide = pa.table({"user": pa.array(users, pa.int64()), "key": pa.array(keys, pa.int64())})
    counter, got = run(narrow, ["key"], final=True)
    assert counter._radix_sizes is None
    counter, expected = run(wide, ["key"], final=True)
    assert counter._radix_sizes is not None and got == expected


def test_nothing_may_follow_a_final_batch():
    t = table(1_000)
    counter = RowCounter("user", ["key"])
    counter.feed(t, final=True)
    with pytest.raises(RuntimeError, match="final=True: no batch may follow"):
        counter.feed(t)
    with pytest.raises(RuntimeError, match="final=True: no batch may follow"):
        counter.encode(t)
    with pytest.raises(TypeError, match="final must be a bool"):
        RowCounter("user", ["key"]).feed(t, final=1)  # type: ignore[arg-type]


def test_an_empty_final_batch():
    counter = RowCounter("user", ["key"])
    counter.feed(pa.table({"user": pa.array([], pa.int64()), "key": pa.array([], pa.string())}), final=True)
    result = counter.finish(1, None)
    assert result.keys.num_rows == 0 and result.counts.size == 0 and counter.n_users == 0


def test_user_sets_match_the_streaming_path():
    t = table(15_000)
    sets = {}
    for final in (False, True):
        counter = RowCounter("user", ["key"])
        counter.feed(t, final=final)
        user_sets, _ = counter.user_sets()
        starts = np.concatenate([[0], user_sets.ends[:-1]]).astype(np.int64)
        runs = [user_sets.partitions[s:e] for s, e in zip(starts, user_sets.ends.astype(np.int64))]
        sets[final] = sorted(tuple(sorted(run.tolist())) for run in runs)
    assert sets[True] == sets[False]


def test_an_error_on_either_thread_reaches_the_caller(monkeypatch):
    t = table(50_000)

    def broken_keys(self, column, threads=1, more=False):
        raise ValueError("column 'key' is broken")

    monkeypatch.setattr(rows, "_PIECE_ROWS", 4_096)
    monkeypatch.setattr(rows.KeyFactorizer, "encode", broken_keys)
    with pytest.raises(ValueError, match="is broken"):
        RowCounter("user", ["key"]).feed(t, final=True)
    monkeypatch.undo()

    def broken_users(pieces):
        raise MemoryError("no room for the scatter")

    monkeypatch.setattr(_radix_rows, "_user_pieces", broken_users)
    with pytest.raises(MemoryError, match="no room"):
        RowCounter("user", ["key"]).feed(t, final=True)


def test_select_partitions_groups_a_whole_frame_in_memory(monkeypatch):
    calls = []
    real = _radix_rows.group

    def spy(*args, **kwargs):
        calls.append(args[0].num_rows)
        return real(*args, **kwargs)

    monkeypatch.setattr(_radix_rows, "group", spy)
    t = table(20_000)
    out = select_partitions(t, privacy_unit="user", by="key", epsilon=5.0, delta=1e-3,
                            max_partitions_contributed=3, counts=True, rng=InsecureDeterministicRNG(1))
    assert calls == [20_000] and out.num_rows > 0
    again = select_partitions(t, privacy_unit="user", by="key", epsilon=5.0, delta=1e-3,
                              max_partitions_contributed=3, counts=True, rng=InsecureDeterministicRNG(1))
    assert again.equals(out)
