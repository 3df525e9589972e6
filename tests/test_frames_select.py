"""select_partitions on pandas, Polars and Arrow: same answers, same types back, clear errors."""
from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")
pl = pytest.importorskip("polars")

from dpselect.ingest.pipeline import select_partitions
from dpselect.mechanisms import make_strategy
from dpselect.testing import InsecureDeterministicRNG

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

PARAMS = {"epsilon": 1.0, "delta": 1e-5}


def survey(seed: int = 0) -> pd.DataFrame:
    """Big partitions (hundreds of users: always kept), tiny ones (1–2 users: almost never),
    and one null key with many users (kept: a null is a key)."""
    gen = np.random.Generator(np.random.PCG64(seed))
    rows = []
    for i, size in enumerate([400, 300, 250, 120, 2, 1, 1]):
        for u in gen.choice(5_000, size=size, replace=False):
            rows.append((int(u), f"model-{i}", dt.date(2024, 1, 1 + i % 3)))
    for u in range(6_000, 6_200):
        rows.append((u, None, dt.date(2024, 1, 1)))
    df = pd.DataFrame(rows, columns=["user", "model", "day"])
    return df.sample(frac=1.0, random_state=1).reset_index(drop=True)


def as_rows(frame) -> list[tuple]:
    if isinstance(frame, pd.DataFrame):
        return [tuple(None if pd.isna(v) else v for v in r) for r in frame.itertuples(index=False)]
    if isinstance(frame, pl.DataFrame):
        return [tuple(r) for r in frame.iter_rows()]
    return [tuple(r.values()) for r in frame.to_pylist()]


def inputs(df):
    return {
        "pandas": df,
        "polars": pl.from_pandas(df),
        "arrow": pa.Table.from_pandas(df, preserve_index=False),
    }


@pytest.mark.parametrize("strategy,counts", [("release", True), ("release", False), ("pi_opt", False)])
def test_same_result_for_pandas_polars_arrow(strategy, counts):
    df = survey()
    results = {}
    for name, data in inputs(df).items():
        out = select_partitions(
            data, privacy_unit="user", by="model", strategy=strategy, counts=counts,
            max_partitions_contributed=2, rng=InsecureDeterministicRNG(seed=3), **PARAMS,
        )
        assert type(out) is type(data)
        results[name] = as_rows(out)
    assert results["pandas"] == results["polars"] == results["arrow"]
    keys = [r[0] for r in results["arrow"]]
    for big in ("model-0", "model-1", "model-2", "model-3"):
        assert big in keys
    assert None in keys  # the null key, 200 users
    assert "model-6" not in keys or strategy == "pi_opt"


def test_output_sorted_typed_and_counts_positive():
    df = survey()
    out = select_partitions(df, privacy_unit="user", by=["day", "model"], counts=True,
                            rng=InsecureDeterministicRNG(seed=1), **PARAMS)
    assert list(out.columns) == ["day", "model", "noisy_count"]
    assert out["model"].dtype == df["model"].dtype and out["day"].dtype == df["day"].dtype
    keys = list(zip(out["day"], out["model"].fillna("~")))
    assert keys == sorted(keys)  # sorted by key: row order reveals nothing about the input order
    k = make_strategy("release", **PARAMS).k
    assert (out["noisy_count"] > k).all()
    assert "differentially private" in out.attrs["dpselect_guarantee"]
    assert out.attrs["dpselect_privacy_guaranteed"] is False  # the test RNG


def test_types_come_back_as_given():
    df = pd.DataFrame({"user": range(300), "cat": pd.Categorical(["x"] * 300), "n": pd.array([7] * 300, "Int16")})
    out = select_partitions(df, privacy_unit="user", by=["cat", "n"], strategy="pi_opt", **PARAMS)
    assert out.dtypes.to_dict() == df[["cat", "n"]].dtypes.to_dict()
    assert as_rows(out) == [("x", 7)]
    lf = pl.from_pandas(df[["user"]]).with_columns(pl.lit(dt.date(2024, 5, 1)).alias("d"))
    lazy_out = select_partitions(lf.lazy(), privacy_unit="user", by="d", strategy="pi_opt", **PARAMS)
    assert isinstance(lazy_out, pl.LazyFrame)
    assert lazy_out.collect().schema["d"] == pl.Date
    batch = pa.record_batch({"user": list(range(300)), "k": ["a"] * 300})
    out_batch = select_partitions(batch, privacy_unit="user", by="k", counts=True, **PARAMS)
    assert isinstance(out_batch, pa.RecordBatch) and out_batch.column("k").to_pylist() == ["a"]
    arrow_out = select_partitions(pa.table(batch), privacy_unit="user", by="k", **PARAMS)
    assert b"dpselect.guarantee" in arrow_out.schema.metadata


def test_nothing_released_gives_empty_frame_of_right_shape():
    df = pd.DataFrame({"user": [1, 2, 3], "k": ["a", "b", "c"]})
    out = select_partitions(df, privacy_unit="user", by="k", counts=True, rng=InsecureDeterministicRNG(seed=0), **PARAMS)
    assert list(out.columns) == ["k", "noisy_count"] and len(out) == 0
    empty = select_partitions(pl.DataFrame({"user": [], "k": []}, schema={"user": pl.Int64, "k": pl.String}),
                              privacy_unit="user", by="k", **PARAMS)
    assert empty.shape == (0, 1) and empty.schema["k"] == pl.String


def test_bounding_applies_before_counting():
    """One user in 500 partitions with κ = 1 contributes to at most one of them."""
    df = pd.DataFrame({"user": [1] * 500 + list(range(2, 302)), "k": [f"p{i}" for i in range(500)] + ["shared"] * 300})
    out = select_partitions(df, privacy_unit="user", by="k", counts=True, rng=InsecureDeterministicRNG(seed=2), **PARAMS)
    assert set(out["k"]) == {"shared"}


def test_strategy_object_and_parameter_errors():
    df = survey()
    strat = make_strategy("pi_opt", epsilon=1.0, delta=1e-5, max_partitions_contributed=2)
    out = select_partitions(df, privacy_unit="user", by="model", strategy=strat)
    assert "model-0" in set(out["model"])
    with pytest.raises(ValueError, match="carries its own"):
        select_partitions(df, privacy_unit="user", by="model", strategy=strat, **PARAMS)
    with pytest.raises(ValueError, match="disagrees"):
        select_partitions(df, privacy_unit="user", by="model", strategy=strat, max_partitions_contributed=3)
    with pytest.raises(ValueError, match="counts=True"):
        select_partitions(df, privacy_unit="user", by="model", strategy="pi_opt", counts=True, **PARAMS)
    with pytest.raises(ValueError, match="strategy"):
        select_partitions(df, privacy_unit="user", by="model", strategy="laplace?", **PARAMS)
    with pytest.raises(TypeError, match="epsilon and delta"):
        select_partitions(df, privacy_unit="user", by="model")
    with pytest.raises(ValueError, match="epsilon"):
        select_partitions(df, privacy_unit="user", by="model", epsilon=-1, delta=1e-5)
    with pytest.raises(ValueError, match="not found"):
        select_partitions(df, privacy_unit="nobody", by="model", **PARAMS)
    with pytest.raises(ValueError, match="not found"):
        select_partitions(pl.from_pandas(df), privacy_unit="user", by="nothing", **PARAMS)
    with pytest.raises(ValueError, match="privacy_unit"):
        select_partitions(df, privacy_unit="user", by=["model", "user"], **PARAMS)
    with pytest.raises(ValueError, match="more than once"):
        select_partitions(df, privacy_unit="user", by=["model", "model"], **PARAMS)
    with pytest.raises(TypeError, match="by"):
        select_partitions(df, privacy_unit="user", by=[], **PARAMS)
    with pytest.raises(TypeError, match="data must be"):
        select_partitions({"user": [1]}, privacy_unit="user", by="model", **PARAMS)
    with pytest.raises(TypeError, match="counts"):
        select_partitions(df, privacy_unit="user", by="model", counts="yes", **PARAMS)
    with pytest.raises(TypeError, match="rng"):
        select_partitions(df, privacy_unit="user", by="model", rng=np.random.Generator(np.random.PCG64(1)), **PARAMS)


def test_input_frame_not_mutated():
    df = survey()
    before = df.copy(deep=True)
    select_partitions(df, privacy_unit="user", by="model", **PARAMS)
    pd.testing.assert_frame_equal(df, before)
