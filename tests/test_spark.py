"""dpselect.spark against the single-machine functions, on a local[2] SparkSession started once.

Exact where the result is deterministic (κ ≥ every user's keys, L∞ ≥ every user's rows per key,
and, end to end, a budget so large that no noise is drawn but 0); statistical elsewhere (keep
rates, the uniform bounding, the noise's variance), with 5-sigma tolerances. Skipped where
pyspark or Java is missing."""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")
if shutil.which("java") is None:
    pytest.skip("Spark needs Java", allow_module_level=True)

import dpselect  # noqa: E402
from dpselect import spark as ds  # noqa: E402
from dpselect.aggregation.bounds import NotEnoughDataError  # noqa: E402
from dpselect.aggregation.budget import BudgetExceededError  # noqa: E402
from dpselect.aggregation.grid import Grid  # noqa: E402
from dpselect.rows import NullPrivacyUnitsDropped, RowCounter  # noqa: E402
from dpselect.spark import _aggregate, _common, _select  # noqa: E402
from dpselect.testing import InsecureDeterministicRNG  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::FutureWarning"),  # pyspark on pandas 3
    pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.timeout(600),
]

ROOT = Path(dpselect.__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")}
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = (SparkSession.builder.master("local[2]").appName("dpselect-tests")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.default.parallelism", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "2g")
               .config("spark.executorEnv.DPSELECT_ALLOW_INSECURE_RNG", "1"))
    if (ROOT / "pyproject.toml").is_file():  # a source tree: the Python workers must import this dpselect
        path = os.pathsep.join(p for p in (str(ROOT), saved["PYTHONPATH"]) if p)
        os.environ["PYTHONPATH"] = path
        builder = builder.config("spark.executorEnv.PYTHONPATH", path)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def frame(spark, **columns):
    return spark.createDataFrame(pa.table(columns))


def rows_of(df) -> list[tuple]:
    return [tuple(r) for r in df.collect()]


# ---------------------------------------------------------------- packaging


def test_importing_dpselect_does_not_import_pyspark():
    code = "import sys, dpselect, dpselect.spark; assert 'pyspark' not in sys.modules, 'pyspark imported'"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=str(ROOT))


def test_workers_import_the_same_dpselect(spark):
    def where(batches):
        import dpselect as worker_dpselect

        for batch in batches:
            yield pa.RecordBatch.from_arrays([pa.array([worker_dpselect.__file__] * batch.num_rows)], names=["f"])

    files = {r.f for r in spark.range(4, numPartitions=2).mapInArrow(where, "f string").collect()}
    assert files == {dpselect.__file__}


# ---------------------------------------------------------------- exact where deterministic


def _table(seed: int, users: int, keys: int, rows: int, max_keys: int, max_rows: int | None = None):
    """Each user touches at most ``max_keys`` keys (and at most ``max_rows`` rows in each)."""
    gen = np.random.default_rng(seed)
    own = gen.integers(0, keys, size=(users, max_keys))
    user = gen.integers(0, users, rows)
    key = own[user, gen.integers(0, max_keys, rows)]
    if max_rows is not None:  # keep at most max_rows rows per (user, key)
        order = np.lexsort((key, user))
        user, key = user[order], key[order]
        first = np.r_[True, (user[1:] != user[:-1]) | (key[1:] != key[:-1])]
        start = np.maximum.accumulate(np.where(first, np.arange(user.size), 0))
        keep = np.arange(user.size) - start < max_rows
        user, key = user[keep], key[keep]
    value = gen.integers(-5, 20, user.size)
    return pa.table({"user": pa.array(user * 7 + 3), "key": pa.array([f"k{k}" for k in key]),
                     "value": pa.array(value)})


def test_bounded_counts_are_exact_when_no_user_exceeds_kappa(spark):
    table = _table(1, users=3000, keys=40, rows=20000, max_keys=3)
    per_key = _select._select_per_key(spark.createDataFrame(table), "user", ["key"], 3, None, True)
    got = {r.key: r[_common.USERS] for r in per_key.collect()}
    counter = RowCounter("user", ["key"])
    counter.feed(table)
    parts = counter.finish(3, None, dpselect.SecureRNG())
    single = dict(zip(parts.keys.column("key").to_pylist(), parts.counts.tolist()))
    truth = table.to_pandas().groupby("key")["user"].nunique().to_dict()
    assert got == single == truth


def test_per_key_aggregates_are_exact_when_nothing_is_bounded(spark):
    table = _table(2, users=2000, keys=30, rows=12000, max_keys=2, max_rows=3)
    grid = Grid.for_bounds(0, 10, precision_bits=30, integer=True)
    per_key = _aggregate._aggregate_per_key(spark.createDataFrame(table), "user", ["key"], ["value"], {"value": grid},
                                    2, 3, None, True)
    got = {r.key: (r[_common.USERS], r[_common.ROWS], r[_common.SUM + "0"]) for r in per_key.collect()}
    pdf = table.to_pandas()
    pdf["units"] = grid.to_units(pdf["value"].to_numpy())
    truth = {k: (g["user"].nunique(), len(g), int(g["units"].sum())) for k, g in pdf.groupby("key")}
    assert got == truth


def test_aggregate_end_to_end_equals_single_machine_without_noise(spark):
    # A budget so large that every noise draw is 0 and pi_opt keeps every key of >= 2 users: the
    # two paths must then agree exactly on the bounded statistics.
    table = _table(3, users=3000, keys=25, rows=15000, max_keys=3, max_rows=2)
    metrics = {"users": dpselect.count_distinct_units(), "rows": dpselect.count(),
               "total": dpselect.sum("value", bounds=(0, 10)), "avg": dpselect.mean("value", bounds=(0, 10))}
    kwargs = dict(privacy_unit="user", by="key", metrics=metrics, epsilon=1e6, delta=1e-5,
                  max_partitions_contributed=3, max_contributions_per_partition=2)
    on_spark = ds.aggregate(spark.createDataFrame(table), **kwargs)
    local = dpselect.aggregate(table, **kwargs)
    got = on_spark.frame.toPandas()
    want = local.frame.to_pandas()
    assert list(got.columns) == list(want.columns)
    assert got.equals(want), (got.head(), want.head())
    assert str(on_spark.guarantee) == str(local.guarantee)
    assert on_spark.guarantee.is_dp and ds.guarantee_of(on_spark.frame) == str(local.guarantee)


def test_release_end_to_end_equals_single_machine_without_noise(spark):
    table = _table(4, users=2000, keys=20, rows=8000, max_keys=2)
    kwargs = dict(privacy_unit="user", by="key", epsilon=1e6, delta=1e-5, max_partitions_contributed=2, counts=True)
    out = ds.select_partitions(spark.createDataFrame(table), **kwargs)
    local = dpselect.select_partitions(table, **kwargs)
    assert out.toPandas().equals(local.to_pandas())
    assert ds.guarantee_of(out) == local.schema.metadata[b"dpselect.guarantee"].decode()


def test_key_types_nulls_and_several_columns_come_back(spark):
    n = 4000
    gen = np.random.default_rng(5)
    a = gen.integers(0, 3, n)
    table = pa.table({"user": pa.array(gen.integers(0, 1000, n).astype(str)),
                      "a": pa.array(np.where(a == 2, None, a).tolist(), pa.int32()),
                      "b": pa.array(gen.integers(0, 2, n).astype(bool))})
    df = spark.createDataFrame(table)
    out = ds.select_partitions(df, privacy_unit="user", by=["a", "b"], epsilon=1e6, delta=1e-5,
                               max_partitions_contributed=6)
    assert [(f.name, f.dataType) for f in out.schema.fields] == [(f.name, f.dataType) for f in df.schema.fields[1:]]
    # Sorted as on one machine (Arrow's order): nulls last.
    assert rows_of(out) == sorted(set(zip(table["a"].to_pylist(), table["b"].to_pylist())),
                                  key=lambda t: (t[0] is None, t[0] or 0, t[1]))
    local = dpselect.select_partitions(table, privacy_unit="user", by=["a", "b"], epsilon=1e6, delta=1e-5,
                                       max_partitions_contributed=6)
    assert rows_of(out) == [tuple(r.values()) for r in local.to_pylist()]


# ---------------------------------------------------------------- statistics


def test_kappa_subset_is_uniform(spark):
    # 3000 users, each with the same 3 keys (several rows each): κ = 1 keeps one, uniformly.
    users = np.repeat(np.arange(3000), 5)
    keys = np.random.default_rng(6).integers(0, 3, users.size)
    keys[::5], keys[1::5], keys[2::5] = 0, 1, 2
    df = frame(spark, user=users, key=keys)
    counts = [r[_common.USERS] for r in _select._select_per_key(df, "user", ["key"], 1, None, True).collect()]
    assert len(counts) == 3 and sum(counts) == 3000
    assert all(abs(c - 1000) < 5 * math.sqrt(3000 * (1 / 3) * (2 / 3)) for c in counts), counts


def test_linf_rows_are_uniform(spark):
    # 3000 users with rows valued 0, 1, 2, 3 in one key; L∞ = 1 keeps one: the sum is ≈ 1.5 per user.
    users = np.repeat(np.arange(3000), 4)
    values = np.tile(np.arange(4), 3000)
    df = frame(spark, user=users, key=np.zeros(users.size, np.int64), value=values)
    grid = Grid.for_bounds(0, 3, integer=True)
    per_key = _aggregate._aggregate_per_key(df, "user", ["key"], ["value"], {"value": grid}, 1, 1, None, True)
    row = per_key.collect()[0]
    assert row[_common.USERS] == row[_common.ROWS] == 3000
    assert abs(row[_common.SUM + "0"] - 4500) < 5 * math.sqrt(3000 * 1.25)


def test_keep_rate_matches_the_single_machine_and_pi_opt(spark):
    strat = dpselect.make_strategy("pi_opt", epsilon=1.0, delta=1e-3)
    n = next(m for m in range(1, 100) if strat.keep_probability([m])[0] > 0.4)
    p = float(strat.keep_probability([n])[0])
    keys = 800
    table = pa.table({"user": pa.array(np.arange(keys * n)), "key": pa.array(np.repeat(np.arange(keys), n))})
    kwargs = dict(privacy_unit="user", by="key", epsilon=1.0, delta=1e-3, strategy="pi_opt")
    on_spark = ds.select_partitions(spark.createDataFrame(table), **kwargs).count() / keys
    local = dpselect.select_partitions(table, **kwargs).num_rows / keys
    tol = 5 * math.sqrt(p * (1 - p) / keys)
    assert abs(on_spark - p) < tol and abs(local - p) < tol, (on_spark, local, p)


def _discrete_laplace_variance(scale: float) -> float:
    q = math.exp(-1 / scale)
    return 2 * q / (1 - q) ** 2


def test_metric_noise_has_the_single_machine_scale(spark):
    keys, per_key = 500, 40
    users = np.arange(keys * per_key)
    table = pa.table({"user": pa.array(users), "key": pa.array(users // per_key),
                      "value": pa.array(np.full(users.size, 4.0))})
    metrics = {"n": dpselect.count_distinct_units(), "total": dpselect.sum("value", bounds=(0, 8))}
    kwargs = dict(privacy_unit="user", by="key", metrics=metrics, epsilon=3.0, delta=1e-5,
                  max_partitions_contributed=1, max_contributions_per_partition=1)
    on_spark = ds.aggregate(spark.createDataFrame(table), **kwargs).frame.toPandas()
    local = dpselect.aggregate(table, **kwargs).frame.to_pandas()
    assert len(on_spark) == len(local) == keys  # 40 users: pi_opt keeps every key
    n_var = _discrete_laplace_variance(1 / 1.0)  # ε share 1, sensitivity 1, κ = 1
    grid = Grid.for_bounds(0, 8, precision_bits=30)
    s_var = _discrete_laplace_variance(grid.max_abs_units() / 1.0) * grid.step ** 2
    for result in (on_spark, local):
        n_noise = result["n"].to_numpy() - per_key
        s_noise = result["total"].to_numpy() - 4.0 * per_key
        assert abs(n_noise.mean()) < 5 * math.sqrt(n_var / keys)
        assert abs(s_noise.mean()) < 5 * math.sqrt(s_var / keys)
        assert 0.6 < n_noise.var() / n_var < 1.5
        assert 0.6 < s_noise.var() / s_var < 1.5


# ---------------------------------------------------------------- randomness


def test_executors_draw_fresh_secure_values(spark):
    df = spark.range(40000, numPartitions=4)
    first = [r[_common.R] for r in _common.with_random(df, None, b"t", False, "id").select(_common.R).collect()]
    second = [r[_common.R] for r in _common.with_random(df, None, b"t", False, "id").select(_common.R).collect()]
    assert len(set(first)) == len(first) == 40000  # no two partitions (or forked workers) share a stream
    assert not set(first) & set(second)


def test_the_release_is_drawn_once(spark):
    table = _table(7, users=2000, keys=20, rows=6000, max_keys=3)
    out = ds.select_partitions(spark.createDataFrame(table), privacy_unit="user", by="key", epsilon=1.0,
                               delta=1e-5, max_partitions_contributed=2, counts=True)
    first = rows_of(out)
    assert len(first) > 10 and rows_of(out) == first and out.count() == len(first)
    assert "differentially private" in ds.guarantee_of(out)
    assert out.schema["key"].metadata[_common.PRIVATE] is True


def test_test_rng_is_deterministic_for_a_fixed_partitioning(spark):
    table = _table(8, users=2000, keys=20, rows=6000, max_keys=3)
    df = spark.createDataFrame(table).repartition(3, "user")
    kwargs = dict(privacy_unit="user", by="key", epsilon=1.0, delta=1e-5, max_partitions_contributed=2, counts=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = ds.select_partitions(df, rng=InsecureDeterministicRNG(11), **kwargs)
        b = ds.select_partitions(df, rng=InsecureDeterministicRNG(11), **kwargs)
        c = ds.select_partitions(df, rng=InsecureDeterministicRNG(12), **kwargs)
    assert len(rows_of(a)) > 10
    assert rows_of(a) == rows_of(b) != rows_of(c)
    assert ds.guarantee_of(a).startswith("NOT DP") and a.schema["key"].metadata[_common.PRIVATE] is False


# ---------------------------------------------------------------- refusals


def test_null_privacy_units(spark):
    df = frame(spark, user=pa.array([1, None, 2, 3] * 50), key=pa.array([1, 1, 2, 2] * 50))
    kwargs = dict(privacy_unit="user", by="key", epsilon=1.0, delta=1e-5)
    with pytest.raises(ValueError, match="null privacy unit"):
        ds.select_partitions(df, **kwargs)
    with pytest.warns(NullPrivacyUnitsDropped, match="dropped 50 row"):
        out = ds.select_partitions(df, null_privacy_units="drop", **kwargs)
    assert out.count() <= 2


def test_refusals(spark):
    df = frame(spark, user=np.arange(10), key=np.arange(10) % 2, value=np.array([1.0] * 9 + [math.nan]),
               fuser=np.arange(10.0))
    base = dict(privacy_unit="user", by="key", epsilon=1.0, delta=1e-5)
    with pytest.raises(TypeError, match="float"):
        ds.select_partitions(df, **{**base, "privacy_unit": "fuser"})
    bounds = dict(max_partitions_contributed=1, max_contributions_per_partition=1)
    with pytest.raises(NotImplementedError, match="strategy='dp_sips' is a row mechanism"):
        ds.select_partitions(df, strategy="dp_sips", **base)
    with pytest.raises(NotImplementedError, match="strategy='auto' may choose a row mechanism"):
        ds.select_partitions(df, strategy="auto", **base)
    with pytest.raises(NotImplementedError, match="strategy is given by name"):
        ds.select_partitions(df, strategy=dpselect.make_strategy("pi_opt", epsilon=1.0, delta=1e-5), **base)
    with pytest.raises(ValueError, match="strategy must be one of release, pi_opt"):
        ds.select_partitions(df, strategy="pi-opt", **base)
    with pytest.raises(ValueError, match="public_partitions needs strategy='public'"):
        ds.select_partitions(df, strategy="release", public_partitions=[1], **base)
    with pytest.raises(ValueError, match="strategy='mixed' needs public_partitions"):
        ds.select_partitions(df, strategy="mixed", **base)
    with pytest.raises(TypeError, match="pyspark.sql.DataFrame"):
        ds.select_partitions(table := pa.table({"user": [1], "key": [1]}), **base)  # noqa: F841
    # NaN is refused with the column's own name, whether the column has bounds or not.
    with pytest.raises(ValueError, match="value column 'value' has 1 NaN or infinite value"):
        ds.aggregate(df, metrics={"s": dpselect.sum("value")}, **bounds, **base)
    with pytest.raises(ValueError, match="value column 'value' contains NaN"):
        ds.aggregate(df, metrics={"s": dpselect.sum("value", bounds=(0, 1))}, **bounds, **base)


# ---------------------------------------------------------------- budget and intervals


def test_select_charges_the_budget_and_adds_intervals_like_the_single_machine(spark):
    table = _table(9, users=1500, keys=15, rows=5000, max_keys=2)
    kwargs = dict(privacy_unit="user", by="key", epsilon=1e6, delta=1e-5, max_partitions_contributed=2, counts=True,
                  confidence_level=0.9)
    on_spark, local = dpselect.Budget(2e6, 1e-4), dpselect.Budget(2e6, 1e-4)
    out = ds.select_partitions(spark.createDataFrame(table), budget=on_spark, **kwargs)
    want = dpselect.select_partitions(table, budget=local, **kwargs).to_pandas()
    got = out.toPandas()
    assert list(got.columns) == ["key", "noisy_count", "noisy_count_ci_low", "noisy_count_ci_high"]
    assert got.equals(want)
    assert (got["noisy_count_ci_low"] <= got["noisy_count"]).all()  # ε = 1e6: the interval is one point
    assert on_spark.spent == local.spent == (Fraction(10**6), Fraction(1, 10**5))
    assert [c.what for c in on_spark.ledger] == ["spark.select_partitions(by=['key'])"]


def _raised(call):
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    return type(info.value), str(info.value)


def test_bad_budget_and_confidence_level_fail_as_on_one_machine_before_any_charge(spark):
    table = pa.table({"user": pa.array(np.arange(20)), "key": pa.array(np.arange(20) % 3),
                      "value": pa.array(np.ones(20))})
    df = spark.createDataFrame(table)
    base = dict(privacy_unit="user", by="key", epsilon=1.0, delta=1e-5)
    metrics = {"n": dpselect.count()}
    one = dict(max_partitions_contributed=1, max_contributions_per_partition=1)
    bad = [dict(counts=True, confidence_level=1.5), dict(counts=True, confidence_level=True),
           dict(counts=False, confidence_level=0.9), dict(strategy="pi_opt", confidence_level=0.9),
           dict(budget="epsilon 1"), dict(counts=True, confidence_level=0.9, budget=0.5)]
    for extra in bad:
        assert _raised(lambda: ds.select_partitions(df, **base, **extra)) == \
            _raised(lambda: dpselect.select_partitions(table, **base, **extra)), extra
    for extra in (dict(confidence_level=0.0), dict(confidence_level=1), dict(budget=[1.0])):
        assert _raised(lambda: ds.aggregate(df, metrics=metrics, **one, **base, **extra)) == \
            _raised(lambda: dpselect.aggregate(table, metrics=metrics, **one, **base, **extra)), extra
    # Overspending charges nothing and fails before any Spark job; a bad argument after a good
    # budget charges nothing either.
    budget = dpselect.Budget(0.5, 1e-5)
    with pytest.raises(BudgetExceededError, match="would overspend the budget: epsilon by 0.5"):
        ds.select_partitions(df, budget=budget, **base)
    with pytest.raises(BudgetExceededError, match="would overspend the budget: epsilon by 0.5"):
        ds.aggregate(df, metrics=metrics, budget=budget, **one, **base)
    with pytest.raises(ValueError, match="confidence_level"):
        ds.select_partitions(df, budget=budget, confidence_level=2.0, counts=True, **{**base, "epsilon": 0.1})
    assert budget.spent == (0, 0) and budget.ledger == ()


# ---------------------------------------------------------------- public partitions


def _float_keys(seed: int, n: int):
    """Float keys 0-4 plus null, NaN and -0.0 (which is the key 0.0), users touching few keys."""
    gen = np.random.default_rng(seed)
    key = gen.integers(0, 8, n).astype(float)
    key[key == 7] = np.nan
    key[key == 6] = -0.0
    return pa.table({"user": pa.array(gen.integers(0, 800, n)),
                     "key": pa.array([None if k == 5 else k for k in key.tolist()], pa.float64())})


def test_public_and_mixed_releases_equal_the_single_machine_without_noise(spark):
    # κ = 8 bounds nothing and ε = 1e6 draws no noise: both paths must give the same keys and counts,
    # the listed keys absent from the data (42, 43) with a count from 0, null and NaN matched as keys.
    table = _float_keys(10, 3000)
    df = spark.createDataFrame(table)
    public = [0.0, 1.0, None, float("nan"), 42.0, 43.0, 1.0]
    for strategy, extra in (("public", {}), ("mixed", {"public_threshold": 5})):
        kwargs = dict(privacy_unit="user", by="key", epsilon=1e6, delta=1e-5, max_partitions_contributed=8,
                      counts=True, public_partitions=public, strategy=strategy, **extra)
        out = ds.select_partitions(df, **kwargs)
        local = dpselect.select_partitions(table, **kwargs)
        got = out.toPandas()
        assert got.equals(local.to_pandas()), (strategy, got, local)
        assert ds.guarantee_of(out) == local.schema.metadata[b"dpselect.guarantee"].decode()
        if strategy == "public":
            assert got["key"].tolist()[:4] == [0.0, 1.0, 42.0, 43.0] and got["key"].isna().sum() == 2
            assert got["noisy_count"].tolist()[2:4] == [0, 0]
        else:  # public_threshold 5: the absent 42 and 43 stay out; the data's own keys 2-4 come in
            assert got["key"].tolist()[:5] == [0.0, 1.0, 2.0, 3.0, 4.0] and 42.0 not in got["key"].tolist()


def test_aggregate_over_public_partitions_equals_the_single_machine_without_noise(spark):
    table = _table(11, users=1500, keys=6, rows=4000, max_keys=6, max_rows=10)
    metrics = {"users": dpselect.count_distinct_units(), "rows": dpselect.count(),
               "total": dpselect.sum("value", bounds=(0, 10)), "avg": dpselect.mean("value", bounds=(0, 10))}
    kwargs = dict(privacy_unit="user", by="key", metrics=metrics, epsilon=1e6, delta=1e-5,
                  max_partitions_contributed=6, max_contributions_per_partition=10)
    listed = spark.createDataFrame(pa.table({"key": ["k1", "k3", "zz", "k1"], "other": [1, 2, 3, 4]}))
    on_spark = ds.aggregate(spark.createDataFrame(table), public_partitions=listed, **kwargs)
    local = dpselect.aggregate(table, public_partitions=["k1", "k3", "zz"], **kwargs)
    got = on_spark.frame.toPandas()
    assert got.equals(local.frame.to_pandas()), (got, local.frame)
    assert got["key"].tolist() == ["k1", "k3", "zz"]
    assert got.iloc[2, 1:].tolist() == [0, 0, 0.0, 5.0]  # absent: zeros, and the mean's midpoint
    assert str(on_spark.guarantee) == str(local.guarantee) and "selection" not in str(on_spark.guarantee)
    with pytest.raises(ValueError, match="made without report=True"):
        on_spark.report()
    with pytest.raises(TypeError, match="public_partitions column 'key' is bigint, the data's is string"):
        ds.aggregate(spark.createDataFrame(table), public_partitions=spark.range(3).withColumnRenamed("id", "key"),
                     **kwargs)
    with pytest.raises(ValueError, match=r"public_partitions lacks the by column\(s\) \['key'\]"):
        ds.aggregate(spark.createDataFrame(table), public_partitions=spark.range(3), **kwargs)


def test_public_keys_absent_from_the_data_get_the_single_machine_noise(spark):
    # 400 listed keys, none in the data: every released value is noise drawn from 0.
    absent = list(range(1000, 1400))
    df = frame(spark, user=np.arange(50), key=np.arange(50) % 5)
    kwargs = dict(privacy_unit="user", by="key", epsilon=1.0, delta=1e-5, public_partitions=absent)
    counts = ds.select_partitions(df, counts=True, **kwargs).toPandas()
    assert counts["key"].tolist() == absent
    reference = dpselect.release(np.zeros(200_000, np.int64), epsilon=1.0, delta=1e-5, public=True).noisy_counts
    out = ds.aggregate(df, metrics={"n": dpselect.count()}, max_partitions_contributed=1,
                       max_contributions_per_partition=1, **kwargs).frame.toPandas()
    assert out["key"].tolist() == absent
    for noise, var in ((counts["noisy_count"].to_numpy(), reference.var()),
                       (out["n"].to_numpy(), _discrete_laplace_variance(1 / 1.0))):
        assert abs(noise.mean()) < 5 * math.sqrt(var / noise.size)
        assert 0.6 < noise.var() / var < 1.5, (noise.var(), var)


# ---------------------------------------------------------------- APPROX_BOUNDS


def test_approx_bounds_equal_the_single_machine_without_noise(spark):
    # At ε = 1e5 the histogram's noise and, on a coarse grid (precision_bits=4), every metric's
    # noise is 0: the bounds found from Spark's histogram and the whole release must equal the
    # single machine's. An integer and a float column without bounds, one with bounds.
    gen = np.random.default_rng(12)
    n = 6000
    table = pa.table({"user": pa.array(gen.integers(0, 2000, n)),
                      "key": pa.array([f"k{k}" for k in gen.integers(0, 5, n)]),
                      "ivalue": pa.array(gen.integers(-30, 200, n)), "fvalue": pa.array(gen.normal(3, 40, n)),
                      "bvalue": pa.array(gen.integers(0, 5, n))})
    metrics = {"users": dpselect.count_distinct_units(), "isum": dpselect.sum("ivalue"),
               "imean": dpselect.mean("ivalue"), "fsum": dpselect.sum("fvalue"),
               "bsum": dpselect.sum("bvalue", bounds=(0, 3))}
    kwargs = dict(privacy_unit="user", by="key", metrics=metrics, epsilon=1e5, delta=1e-5,
                  max_partitions_contributed=5, max_contributions_per_partition=10, precision_bits=4)
    on_spark = ds.aggregate(spark.createDataFrame(table), **kwargs)
    local = dpselect.aggregate(table, **kwargs)
    assert on_spark.bounds == local.bounds == {"bvalue": (0.0, 3.0), "fvalue": (-256.0, 256.0),
                                               "ivalue": (-32.0, 256.0)}
    got = on_spark.frame.toPandas()
    assert got.equals(local.frame.to_pandas()), (got, local.frame)
    assert str(on_spark.guarantee) == str(local.guarantee)
    assert "bounds of 'fvalue' (APPROX_BOUNDS)" in str(on_spark.guarantee)
    # Too little data for the histogram at ε = 1: the single machine's error, from the driver.
    with pytest.raises(NotEnoughDataError, match="not enough data to find bounds"):
        ds.aggregate(spark.createDataFrame(table.slice(0, 300)), **{**kwargs, "epsilon": 1.0})
    with pytest.raises(NotImplementedError, match="bounds_scope='partition'.*runs on one machine only"):
        ds.aggregate(spark.createDataFrame(table), bounds_scope="partition", **kwargs)


# ---------------------------------------------------------------- the data holder's report


def _with_null_units(seed: int, n: int, keys: int):
    gen = np.random.default_rng(seed)
    units = gen.integers(0, 2000, n).tolist()
    units[:7] = [None] * 7
    return pa.table({"user": pa.array(units, pa.int64()),
                     "key": pa.array([f"k{k}" for k in gen.integers(0, keys, n)]),
                     "ivalue": pa.array(gen.integers(-30, 200, n)), "bvalue": pa.array(gen.integers(0, 5, n))})


def test_select_report_equals_the_single_machine(spark):
    # κ = 12 keys bounds nothing and ε = 1e6 draws no noise: every number of the report is exact.
    table = _with_null_units(13, 5000, 12)
    df = spark.createDataFrame(table)
    for extra in ({}, {"public_partitions": ["k1", "zz"], "counts": True}):
        kwargs = dict(privacy_unit="user", by="key", epsilon=1e6, delta=1e-5, max_partitions_contributed=12,
                      null_privacy_units="drop", report=True, **extra)
        with pytest.warns(NullPrivacyUnitsDropped, match="dropped 7 row"):
            out, report = ds.select_partitions(df, **kwargs)
        with pytest.warns(NullPrivacyUnitsDropped, match="dropped 7 row"):
            local, local_report = dpselect.select_partitions(table, **kwargs)
        assert out.toPandas().equals(local.to_pandas())
        assert report.as_dict() == local_report.as_dict(), (report, local_report)
        assert (report.rows, report.null_unit_rows, report.users) == (4993, 7, len(set(table["user"].to_pylist())) - 1)
    with pytest.raises(TypeError, match="report must be a bool"):
        ds.select_partitions(df, privacy_unit="user", by="key", epsilon=1.0, delta=1e-5, report="yes")


def test_aggregate_report_equals_the_single_machine(spark):
    # Nothing bounded (κ = 12 keys, L∞ = 10), no noise on a coarse grid: the report's counts,
    # buckets and clamping (of a column with bounds, and of one with bounds found) are exact.
    table = _with_null_units(14, 5000, 12)
    metrics = {"users": dpselect.count_distinct_units(), "isum": dpselect.sum("ivalue"),
               "bsum": dpselect.sum("bvalue", bounds=(0, 3))}
    kwargs = dict(privacy_unit="user", by="key", metrics=metrics, epsilon=1e5, delta=1e-5,
                  max_partitions_contributed=12, max_contributions_per_partition=10, precision_bits=2,
                  null_privacy_units="drop")
    with pytest.warns(NullPrivacyUnitsDropped):
        on_spark = ds.aggregate(spark.createDataFrame(table), report=True, **kwargs)
    with pytest.warns(NullPrivacyUnitsDropped):
        local = dpselect.aggregate(table, **kwargs)
    assert on_spark.frame.toPandas().equals(local.frame.to_pandas())
    got, want = on_spark.report().as_dict(), local.report().as_dict()
    for column in ("bvalue", "ivalue"):  # a float sum, in another order
        change = got["clamping"][column].pop("total_change")
        assert change == pytest.approx(want["clamping"][column].pop("total_change"))
    assert got == want, (on_spark.report(), local.report())
    assert got["clamping"]["bvalue"]["above"] > 0 and got["null_privacy_unit_rows"] == 7


def test_the_readme_spark_snippet_runs(spark, capsys):
    """The README's Spark section, run as written (its getOrCreate() finds this session): both
    calls return, the release prints its columns and its guarantee."""
    readme = ROOT / "README.md"
    if not readme.is_file():
        pytest.skip("no README.md beside this dpselect (an installed wheel)")
    text = readme.read_text(encoding="utf-8")
    section = text[text.index("### On Spark"):]
    start = section.index("```python\n") + len("```python\n")
    snippet = section[start:section.index("\n```", start)]
    assert "dpselect.spark.aggregate" in snippet and "dpselect.spark.select_partitions" in snippet
    namespace: dict = {}
    exec(compile(snippet, str(readme), "exec"), namespace)
    out = capsys.readouterr().out
    assert "noisy_count" in out and "users_ci_low" in out and "differentially private" in out
    assert set(namespace["out"].frame.columns) >= {"os", "users", "reports"}
