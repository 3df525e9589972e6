"""Raw rows → bounded counts (dpselect.ingest.rows): factorization of any key type, batches, nulls."""
from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")

from dpselect.ingest.rows import KeyFactorizer, NullPrivacyUnitError, RowCounter
from dpselect.testing import InsecureDeterministicRNG

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")


def reference(df: pd.DataFrame, by: list[str]) -> dict[tuple, int]:
    """Distinct users per key with pandas (nulls are keys), no bounding."""
    grouped = df.groupby(by, dropna=False)["user"].nunique(dropna=False)
    out = {}
    for key, n in grouped.items():
        key = key if isinstance(key, tuple) else (key,)
        out[tuple(None if pd.isna(k) else k for k in key)] = int(n)
    return out


def counted(table, by, kappa=10**9, cap=None, batches=1, rng=None, nulls="error") -> dict[tuple, int]:
    counter = RowCounter("user", by, null_privacy_units=nulls)
    rows = table.num_rows
    step = max(1, -(-rows // batches))
    for start in range(0, rows, step):
        counter.feed(table.slice(start, step))
    result = counter.finish(kappa, cap, rng)
    keys = [result.keys.column(name).to_pylist() for name in by]
    return {tuple(k): int(c) for k, c in zip(zip(*keys), result.counts)}


def random_frame(seed: int, n: int = 4_000) -> pd.DataFrame:
    gen = np.random.Generator(np.random.PCG64(seed))
    words = np.array(["apple", "pear", "fig", "kiwi", "plum", "lime", None], dtype=object)
    return pd.DataFrame(
        {
            "user": gen.integers(0, 300, n),
            "word": words[gen.integers(0, len(words), n)],
            "num": gen.integers(-3, 4, n),
            "day": [dt.date(2024, 1, 1) + dt.timedelta(days=int(x)) for x in gen.integers(0, 5, n)],
        }
    )


@pytest.mark.parametrize("by", [["word"], ["num"], ["day"], ["word", "num"], ["day", "word", "num"]])
@pytest.mark.parametrize("batches", [1, 5])
def test_counts_match_pandas_for_any_key_type(by, batches):
    df = random_frame(1)
    table = pa.Table.from_pandas(df, preserve_index=False)
    assert counted(table, by, batches=batches) == reference(df, by)


def test_nulls_are_keys_and_null_users_are_refused_or_dropped():
    table = pa.table({"user": [1, 2, None, None, 3], "k": ["a", None, None, "a", None]})
    with pytest.raises(NullPrivacyUnitError, match=r"2 row\(s\) have a null privacy unit.*null_privacy_units='drop'"):
        counted(table, ["k"])
    assert counted(table, ["k"], nulls="drop") == {("a",): 1, (None,): 2}


def test_string_user_ids_and_string_view_and_categorical():
    df = pd.DataFrame({"user": ["x", "y", "x", "z"], "k": pd.Categorical(["a", "b", "a", "a"])})
    table = pa.Table.from_pandas(df, preserve_index=False)
    assert counted(table, ["k"]) == {("a",): 2, ("b",): 1}
    view = pa.table({"user": pa.array(["x", "y"], pa.string_view()), "k": pa.array(["a", "a"], pa.string_view())})
    assert counted(view, ["k"]) == {("a",): 2}


def test_factorizer_is_stable_across_batches():
    f = KeyFactorizer("k")
    a = f.encode(pa.array(["b", "a", None, "b"]))
    b = f.encode(pa.array(["c", None, "a", "d"]))
    values = f.values.to_pylist()
    assert [values[i] for i in a] == ["b", "a", None, "b"]
    assert [values[i] for i in b] == ["c", None, "a", "d"]
    assert len(f) == 5 and len(set(values)) == 5
    with pytest.raises(TypeError, match="changed type"):
        f.encode(pa.array([dt.date(2024, 1, 1)]))


def test_all_null_first_batch_then_values():
    f = KeyFactorizer("k")
    f.encode(pa.array([None, None]))
    codes = f.encode(pa.array(["a", None]))
    assert f.values.to_pylist() == [None, "a"] and codes.tolist() == [1, 0]
    f.encode(pa.array(["b"], pa.large_string()))  # a wider string type is the same kind
    assert f.values.to_pylist() == [None, "a", "b"]


def test_chunked_columns():
    table = pa.Table.from_batches(
        [pa.record_batch({"user": [1, 2], "k": ["a", "b"]}), pa.record_batch({"user": [3, 1], "k": ["c", "a"]})]
    )
    assert table.column("k").num_chunks == 2
    assert counted(table, ["k"]) == {("a",): 1, ("b",): 1, ("c",): 1}


def test_bounded_counts_never_exceed_distinct_users_and_total_is_exact():
    df = random_frame(4, n=6_000)
    table = pa.Table.from_pandas(df, preserve_index=False)
    ref = reference(df, ["word", "num"])
    per_user = df.drop_duplicates(["user", "word", "num"]).groupby("user").size()
    for kappa in (1, 3):
        got = counted(table, ["word", "num"], kappa=kappa, rng=InsecureDeterministicRNG(seed=kappa))
        assert all(0 < n <= ref[k] for k, n in got.items())
        assert sum(got.values()) == int(np.minimum(per_user.to_numpy(), kappa).sum())


def test_partitions_emptied_by_bounding_are_absent():
    # user 1 is alone in "only1" and "only1b"; with κ = 1 one of them must disappear entirely.
    table = pa.table({"user": [1, 1, 2], "k": ["only1", "only1b", "shared"]})
    for seed in range(10):
        got = counted(table, ["k"], kappa=1, rng=InsecureDeterministicRNG(seed=seed))
        assert len(got) == 2 and ("shared",) in got
        assert all(n >= 1 for n in got.values())


def test_cap_saturates():
    table = pa.table({"user": list(range(50)), "k": ["a"] * 50})
    assert counted(table, ["k"], cap=23) == {("a",): 23}


def test_rowcounter_errors():
    with pytest.raises(ValueError, match="at least one"):
        RowCounter("user", [])
    counter = RowCounter("user", ["k"])
    with pytest.raises(ValueError, match="missing column"):
        counter.feed(pa.table({"user": [1]}))
    with pytest.raises(TypeError, match="scalar"):
        counter.feed(pa.table({"user": [1], "k": [[1, 2]]}))
    counter.finish(1, None)
    with pytest.raises(RuntimeError, match="finished"):
        counter.feed(pa.table({"user": [1], "k": ["a"]}))


def test_empty_input():
    counter = RowCounter("user", ["k"])
    counter.feed(pa.table({"user": pa.array([], pa.int64()), "k": pa.array([], pa.string())}))
    result = counter.finish(1, None)
    assert result.keys.num_rows == 0 and result.counts.size == 0


def test_missing_pyarrow_names_the_extra(monkeypatch):
    import sys

    from dpselect.ingest.rows import import_pyarrow

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match=r"dpselect\[arrow\]"):
        import_pyarrow()


def test_both_user_shards_are_bounded_reproducibly_and_from_different_streams():
    # finish bounds the even and odd user codes in two threads; with the test RNG each shard has
    # its own stream derived from the seed, so results repeat exactly whichever thread runs first.
    from dpselect.rng import shard_test_state

    users = np.repeat(np.arange(400), 6)
    parts = np.tile(np.arange(6), 400)
    table = pa.table({"user": users, "key": parts})
    runs = [counted(table, ["key"], kappa=1, rng=InsecureDeterministicRNG(seed=9)) for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    assert sum(runs[0].values()) == 400  # κ = 1: every user counted once
    base = InsecureDeterministicRNG(seed=9)._test_state
    assert shard_test_state(None, 1) is None and shard_test_state(base, 0) is base
    derived = shard_test_state(base, 1)
    assert derived.seed != base.seed and derived.stream == base.stream
    assert derived.seed == shard_test_state(base, 1).seed != shard_test_state(base, 2).seed
