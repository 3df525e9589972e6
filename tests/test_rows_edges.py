"""Raw rows and DataFrames at their edges: null and float privacy units, NaN keys in every input
type, exact 64-bit keys, refused column types (before any work), result schemas that never
depend on the data, the guarantee attached to results, and the counting kernel's memory."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")
pl = pytest.importorskip("polars")

from dpselect._count import PairCounter
from dpselect.ingest.pipeline import select_partitions
from dpselect.ingest.rows import (
    NullPrivacyUnitError,
    NullPrivacyUnitsDropped,
    PartitionCounts,
    RowCounter,
)
from dpselect.mechanisms import make_strategy
from dpselect.testing import InsecureDeterministicRNG

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

PARAMS = {"epsilon": 1.0, "delta": 1e-5}


def rng(seed: int = 0) -> InsecureDeterministicRNG:
    return InsecureDeterministicRNG(seed=seed)


class ArrowStream:
    """A minimal object exporting an Arrow C stream, which records whether it was read."""

    def __init__(self, table) -> None:
        self.table = table
        self.read = False

    def __arrow_c_stream__(self, requested_schema=None):
        def batches():
            self.read = True
            yield from self.table.to_batches()

        reader = pa.RecordBatchReader.from_batches(self.table.schema, batches())
        return reader.__arrow_c_stream__(requested_schema)


def chunked(*tables):
    """One Arrow table made of several chunks."""
    return pa.concat_tables(tables)


def as_inputs(table):
    """The same rows as every supported input type (several chunks where the type has them)."""
    polars_frame = pl.concat([pl.from_arrow(t) for t in table.to_batches()], rechunk=False)
    return {
        "arrow-table": table,
        "arrow-batch": table.combine_chunks().to_batches()[0],
        "arrow-stream": ArrowStream(table),
        "pandas": table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get),
        "polars": polars_frame,
        "polars-lazy": polars_frame.lazy(),
    }


def rows_of(out) -> list[tuple]:
    if isinstance(out, pl.LazyFrame):
        out = out.collect()
    if isinstance(out, pd.DataFrame):
        return [tuple(None if (v is None or v is pd.NA) else v for v in r) for r in out.itertuples(index=False)]
    if isinstance(out, pl.DataFrame):
        return [tuple(r) for r in out.iter_rows()]
    return [tuple(r.values()) for r in out.to_pylist()]


# ------------------------------------------------------------------ null and float privacy units

def users_with_nulls():
    """200 users in "big", 150 in "mid"; 3 rows without a privacy unit, in the last chunk."""
    first = pa.table({"user": pa.array(range(200), pa.int64()), "k": ["big"] * 200})
    second = pa.table({"user": pa.array(list(range(200, 350)) + [None] * 3, pa.int64()),
                       "k": ["mid"] * 150 + ["big", "mid", "tiny"]})
    return chunked(first, second)


@pytest.mark.parametrize("kind", ["arrow-table", "arrow-batch", "arrow-stream", "pandas", "polars", "polars-lazy"])
def test_null_privacy_units_are_refused_with_their_number(kind):
    data = as_inputs(users_with_nulls())[kind]
    with pytest.raises(ValueError, match=r"3 row\(s\) have a null privacy unit in column 'user'") as err:
        select_partitions(data, privacy_unit="user", by="k", rng=rng(), **PARAMS)
    assert "null_privacy_units='drop'" in str(err.value)
    assert isinstance(err.value, NullPrivacyUnitError) and err.value.rows == 3


@pytest.mark.parametrize("kind", ["arrow-table", "pandas", "polars-lazy"])
def test_dropping_null_privacy_units_reports_how_many(kind):
    table = users_with_nulls()
    data = as_inputs(table)[kind]
    with pytest.warns(NullPrivacyUnitsDropped, match=r"dropped 3 row\(s\).*NOT differentially private"):
        out = select_partitions(data, privacy_unit="user", by="k", counts=True, null_privacy_units="drop",
                                rng=rng(4), **PARAMS)
    # Exactly as if those rows were not there.
    without = table.filter(pa.compute.is_valid(table.column("user")))
    with warnings.catch_warnings():
        warnings.simplefilter("error", NullPrivacyUnitsDropped)  # nothing dropped: no warning
        expected = select_partitions(without, privacy_unit="user", by="k", counts=True, rng=rng(4), **PARAMS)
    assert rows_of(out) == rows_of(expected)


def test_null_privacy_unit_policy_is_checked():
    with pytest.raises(ValueError, match="null_privacy_units must be 'error' or 'drop'"):
        select_partitions(users_with_nulls(), privacy_unit="user", by="k", null_privacy_units="keep", **PARAMS)


def test_adding_a_person_without_id_cannot_move_other_counts():
    """The attack on merged null units: neighbours differ by one person whose id is missing.
    With the null rows refused the two datasets give the same answer (an error) whatever that
    person did; with them dropped, the person has no effect at all."""
    base = pd.DataFrame({"user": pd.array([None] * 4 + list(range(100)), dtype="Int64"),
                         "k": ["a", "b", "c", "d"] + ["a"] * 100})
    plus = pd.concat([base, pd.DataFrame({"user": pd.array([None, None], dtype="Int64"), "k": ["x", "y"]})])
    for frame in (base, plus):
        with pytest.raises(ValueError, match="null privacy unit"):
            select_partitions(frame, privacy_unit="user", by="k", rng=rng(), **PARAMS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NullPrivacyUnitsDropped)
        a = select_partitions(base, privacy_unit="user", by="k", counts=True, null_privacy_units="drop", rng=rng(9), **PARAMS)
        b = select_partitions(plus, privacy_unit="user", by="k", counts=True, null_privacy_units="drop", rng=rng(9), **PARAMS)
    assert rows_of(a) == rows_of(b)


@pytest.mark.parametrize("data", [
    pd.DataFrame({"user": [0.0, -0.0, 1.0], "k": ["a", "a", "b"]}),
    pd.DataFrame({"user": pd.array([1.0, 2.0], dtype="Float64"), "k": ["a", "b"]}),
    pa.table({"user": pa.array([0.0, -0.0], pa.float32()), "k": ["a", "a"]}),
    pl.DataFrame({"user": [0.0, -0.0], "k": ["a", "a"]}),
    pl.DataFrame({"user": [0.0, float("nan")], "k": ["a", "a"]}).lazy(),
    pa.table({"user": [True, False], "k": ["a", "a"]}),
], ids=["pandas-float", "pandas-Float64", "arrow-float32", "polars-float", "polars-lazy-nan", "arrow-bool"])
def test_privacy_unit_must_be_an_integer_string_or_bytes_id(data):
    with pytest.raises(TypeError, match=r"privacy_unit column 'user' has type .*integer, string or bytes"):
        select_partitions(data, privacy_unit="user", by="k", **PARAMS)


# ---------------------------------------------------------------------------------------- NaN

def nan_keys():
    """A NaN key with 150 users, spread over both chunks, beside a key of 200 users."""
    first = pa.table({"user": pa.array(range(250), pa.int64()), "k": [1.5] * 200 + [math.nan] * 50})
    second = pa.table({"user": pa.array(range(250, 352), pa.int64()), "k": [math.nan] * 100 + [-0.0, 0.0]})
    return chunked(first, second)


@pytest.mark.parametrize("kind", ["arrow-table", "arrow-batch", "arrow-stream", "pandas", "polars", "polars-lazy"])
def test_one_nan_key_never_fails_a_job(kind):
    data = as_inputs(nan_keys())[kind]
    out = select_partitions(data, privacy_unit="user", by="k", strategy="pi_opt", rng=rng(), **PARAMS)
    keys = [r[0] for r in rows_of(out)]
    assert 1.5 in keys
    if kind == "pandas":  # pandas exports NaN as a null: still one key, released as NaN
        assert sum(1 for k in keys if k is None or (isinstance(k, float) and math.isnan(k))) == 1
    else:
        assert sum(1 for k in keys if isinstance(k, float) and math.isnan(k)) == 1


def test_nan_in_a_composite_key_and_in_later_batches():
    counter = RowCounter("user", ["k", "s"])
    counter.feed(pa.table({"user": [1, 2], "k": [math.nan, 1.0], "s": ["a", "a"]}))
    counter.feed(pa.table({"user": [3, 4, 5], "k": [math.nan, math.nan, float("-nan")], "s": ["a", "b", "a"]}))
    result = counter.finish(10, None)
    got = sorted(((str(k), s), int(n)) for k, s, n in zip(result.keys.column("k").to_pylist(),
                                                         result.keys.column("s").to_pylist(), result.counts))
    assert got == [(("1.0", "a"), 1), (("nan", "a"), 3), (("nan", "b"), 1)]


# ---------------------------------------------------------------------------------- exact keys

@pytest.mark.parametrize("values,dtype", [
    ([2**57 - 1] * 100 + [None] * 100, "Int64"),
    ([2**64 - 1] * 100 + [None] * 100, "UInt64"),
    ([2**63 - 1] * 100 + [None] * 100, "int64[pyarrow]"),
    ([2**57 - 1] * 100 + [None] * 100, object),
])
def test_released_64_bit_keys_come_back_bit_exact(values, dtype):
    df = pd.DataFrame({"user": range(200), "k": pd.array(values, dtype=dtype)})
    out = select_partitions(df, privacy_unit="user", by="k", strategy="pi_opt", **PARAMS)
    assert out["k"].dtype == df["k"].dtype
    released = [v for v in out["k"].tolist() if not pd.isna(v)]
    assert released == [values[0]] and type(released[0]) is int
    assert out["k"].isna().sum() == 1


# ------------------------------------------------------------------------------------ clashes

def test_count_column_cannot_be_the_privacy_unit():
    df = pd.DataFrame({"user": range(300), "k": ["a"] * 300})
    with pytest.raises(ValueError, match="count_column 'user'"):
        select_partitions(df, privacy_unit="user", by="k", counts=True, count_column="user", **PARAMS)


def test_allow_no_release_reaches_the_strategy():
    df = pd.DataFrame({"user": range(300), "k": ["a"] * 300})
    with pytest.raises(ValueError, match="allow_no_release=True"):
        select_partitions(df, privacy_unit="user", by="k", epsilon=1.0, delta=0.0)
    out = select_partitions(df, privacy_unit="user", by="k", epsilon=1.0, delta=0.0, allow_no_release=True)
    assert list(out.columns) == ["k"] and len(out) == 0


# ------------------------------------------------------------------------ refused column types

class Boom(Exception):
    pass


def refused_inputs():
    def polars_lazy(column):
        """A LazyFrame whose collection raises: a check done after collecting would show Boom."""
        def boom(series):
            raise Boom("collected")
        frame = pl.DataFrame({"user": [1, 2], "k": column}).lazy()
        return frame.with_columns(pl.col("user").map_batches(boom, return_dtype=pl.Int64))

    uuid_type = pa.uuid() if hasattr(pa, "uuid") else None
    cases = {
        "polars-object": (polars_lazy(pl.Series([object(), object()], dtype=pl.Object)), "k"),
        "polars-int128": (polars_lazy(pl.Series([1, 2], dtype=pl.Int128)), "k"),
        "polars-list": (polars_lazy(pl.Series([[1], [2]])), "k"),
        "arrow-month-day-nano": (pa.table({"user": [1, 2], "k": pa.array([(1, 2, 3)] * 2, pa.month_day_nano_interval())}), "k"),
        "arrow-float16": (pa.table({"user": [1, 2], "k": pa.array(np.array([1, 2], np.float16))}), "k"),
        "pandas-period": (pd.DataFrame({"user": [1, 2], "k": pd.period_range("2024-01", periods=2, freq="M")}), "k"),
        "pandas-interval": (pd.DataFrame({"user": [1, 2], "k": pd.interval_range(0, 2)}), "k"),
        "pandas-mixed-object": (pd.DataFrame({"user": [1, 2], "k": pd.array([1, "a"], dtype=object)}), "k"),
        "pandas-mixed-numbers": (pd.DataFrame({"user": [1, 2], "k": pd.array([1, 2.5], dtype=object)}), "k"),
        "pandas-mixed-unit": (pd.DataFrame({"user": pd.array([1, "a"], dtype=object), "k": [1, 2]}), "user"),
        "polars-float-unit": (pl.DataFrame({"user": [1.0, 2.0], "k": [1, 2]}).lazy().with_columns(
            pl.col("k").map_batches(lambda s: (_ for _ in ()).throw(Boom()), return_dtype=pl.Int64)), "user"),
    }
    if uuid_type is not None:
        cases["arrow-extension"] = (pa.table({"user": [1, 2], "k": pa.array([b"0" * 16] * 2, pa.binary(16)).cast(uuid_type)}), "k")
    return cases


@pytest.mark.parametrize("name", sorted(refused_inputs()))
def test_unsupported_column_types_are_refused_before_any_work(name):
    data, column = refused_inputs()[name]
    with pytest.raises(TypeError, match=rf"column '{column}' has type"):
        select_partitions(data, privacy_unit="user", by="k", **PARAMS)


def test_arrow_stream_types_are_checked_before_it_is_read():
    stream = ArrowStream(pa.table({"user": [1, 2], "k": pa.array([1, 2], pa.float16())}))
    with pytest.raises(TypeError, match="column 'k'"):
        select_partitions(stream, privacy_unit="user", by="k", **PARAMS)
    assert not stream.read


# -------------------------------------------------------------- result schema never data-driven

def schema_of(out):
    if isinstance(out, pl.LazyFrame):
        return dict(out.collect_schema())
    if isinstance(out, pd.DataFrame):
        return {c: str(t) for c, t in out.dtypes.items()}
    if isinstance(out, pl.DataFrame):
        return dict(out.schema)
    return out.schema


@pytest.mark.parametrize("kind", ["arrow-table", "arrow-batch", "arrow-stream", "pandas", "polars", "polars-lazy"])
@pytest.mark.parametrize("counts", [False, True])
def test_empty_and_non_empty_results_have_the_same_schema(kind, counts):
    kept = pa.table({"user": pa.array(range(300), pa.int64()), "k": pa.array([7] * 300, pa.int32()),
                     "d": pa.array([None] * 300, pa.date32())})
    dropped = pa.table({"user": pa.array([1, 2], pa.int64()), "k": pa.array([7, 8], pa.int32()),
                        "d": pa.array([None, None], pa.date32())})
    outs = [select_partitions(as_inputs(t)[kind], privacy_unit="user", by=["k", "d"], counts=counts,
                              rng=rng(1), **PARAMS) for t in (kept, dropped)]
    assert len(rows_of(outs[0])) == 1 and len(rows_of(outs[1])) == 0
    assert type(outs[0]) is type(outs[1])
    a, b = schema_of(outs[0]), schema_of(outs[1])
    assert a == b
    if isinstance(a, pa.Schema):
        assert a.metadata is not None and a.metadata.keys() == b.metadata.keys()
        assert [f.name for f in a] == ["k", "d"] + (["noisy_count"] if counts else [])


def test_record_batch_result_has_the_result_schema_when_empty():
    batch = pa.record_batch({"user": pa.array([1, 2], pa.int64()), "k": ["a", "b"]})
    out = select_partitions(batch, privacy_unit="user", by="k", counts=True, rng=rng(), **PARAMS)
    assert isinstance(out, pa.RecordBatch) and out.num_rows == 0
    assert out.schema.names == ["k", "noisy_count"]
    assert b"dpselect.guarantee" in out.schema.metadata


# ---------------------------------------------------------------------------- guarantee, repr

def test_results_describe_the_contribution_bound_as_enforced():
    df = pd.DataFrame({"user": range(300), "k": ["a"] * 300})
    strategy = make_strategy("release", max_partitions_contributed=2, **PARAMS)
    expected = str(strategy.guarantee.enforced())
    out = select_partitions(df, privacy_unit="user", by="k", max_partitions_contributed=2, **PARAMS)
    assert out.attrs["dpselect_guarantee"] == expected
    arrow = select_partitions(pa.Table.from_pandas(df), privacy_unit="user", by="k", max_partitions_contributed=2, **PARAMS)
    assert arrow.schema.metadata[b"dpselect.guarantee"].decode() == expected
    assert expected != str(strategy.guarantee)  # the enforced statement is a different one


def test_reprs_are_readable_and_show_no_counts():
    counter = RowCounter("user", ["k"])
    counter.feed(pa.table({"user": [1, 2, 3], "k": ["secret", "a", "a"]}))
    assert repr(counter).startswith("RowCounter(privacy_unit='user', by=['k'], 3 rows fed")
    result = counter.finish(1, None, rng())
    text = repr(result)
    assert isinstance(result, PartitionCounts)
    assert text.startswith("PartitionCounts(2 partitions by ['k']") and "NOT private" in text
    assert "secret" not in text and "[" + "1" not in text.split("by")[0]
    assert repr(PairCounter()).startswith("PairCounter(0 distinct pairs")
