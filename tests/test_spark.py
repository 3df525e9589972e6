"""dpselect.spark against the single-machine functions, on a local[2, 4] SparkSession started once
(two cores; a failed task is retried up to four times, as on a cluster).

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
from dpselect.aggregation.budget import BudgetExceededError  # noqa: E402
from dpselect.aggregation.grid import Grid  # noqa: E402
from dpselect.ingest.rows import NullPrivacyUnitsDropped, RowCounter  # noqa: E402
from dpselect.spark import _aggregate, _bounding, _common, _select  # noqa: E402
from dpselect.testing import InsecureDeterministicRNG  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::FutureWarning"),  # pyspark on pandas 3
    pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.timeout(600),
    pytest.mark.slow,  # a JVM and Python workers: the session alone takes tens of seconds
]

ROOT = Path(dpselect.__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from pyspark.sql import SparkSession

    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")}
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Shuffle files go to a directory of this session's own, which the fault-injection tests empty.
    local_dir = tmp_path_factory.mktemp("spark-local")
    builder = (SparkSession.builder.master("local[2,4]").appName("dpselect-tests")
               .config("spark.local.dir", str(local_dir))
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


def _key(seed: int | None = None):
    """A release key: from the secure CSPRNG, or from the test generator's seed."""
    return _bounding.ReleaseKey(dpselect.SecureRNG() if seed is None else InsecureDeterministicRNG(seed))


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
    per_key = _select._select_per_key(spark.createDataFrame(table), "user", ["key"], 3, _key(), True)
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
                                            2, 3, _key(), True)
    got = {r.key: (r[_common.USERS], r[_common.ROWS], int(r[_common.SUM + "0"])) for r in per_key.collect()}
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
    counts = [r[_common.USERS] for r in _select._select_per_key(df, "user", ["key"], 1, _key(), True).collect()]
    assert len(counts) == 3 and sum(counts) == 3000
    assert all(abs(c - 1000) < 5 * math.sqrt(3000 * (1 / 3) * (2 / 3)) for c in counts), counts


def test_linf_rows_are_uniform(spark):
    # 3000 users with rows valued 0, 1, 2, 3 in one key; L∞ = 1 keeps one: the sum is ≈ 1.5 per user.
    users = np.repeat(np.arange(3000), 4)
    values = np.tile(np.arange(4), 3000)
    df = frame(spark, user=users, key=np.zeros(users.size, np.int64), value=values)
    grid = Grid.for_bounds(0, 3, integer=True)
    per_key = _aggregate._aggregate_per_key(df, "user", ["key"], ["value"], {"value": grid}, 1, 1, _key(), True)
    row = per_key.collect()[0]
    assert row[_common.USERS] == row[_common.ROWS] == 3000
    assert abs(int(row[_common.SUM + "0"]) - 4500) < 5 * math.sqrt(3000 * 1.25)


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
    # weights: an ε share of 1 per step (the noise scale is checked here, not the default split).
    kwargs = dict(privacy_unit="user", by="key", metrics=metrics, epsilon=3.0, delta=1e-5,
                  max_partitions_contributed=1, max_contributions_per_partition=1, weights={"selection": 1})
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
    # The per-key step's generator on the executors: no two partitions (or forked workers) share
    # a stream, and a second run draws new values.
    def draw(batches):
        from dpselect.spark._common import executor_rng

        rng = executor_rng(None, b"t")
        for batch in batches:
            values = np.frombuffer(rng.random_bytes(8 * batch.num_rows), dtype=np.int64)
            yield pa.RecordBatch.from_arrays([pa.array(values)], names=["r"])

    df = spark.range(40000, numPartitions=4)
    first = [r.r for r in df.mapInArrow(draw, "r long").collect()]
    second = [r.r for r in df.mapInArrow(draw, "r long").collect()]
    assert len(set(first)) == len(first) == 40000
    assert not set(first) & set(second)


def test_ranks_are_a_keyed_function_of_each_row(spark):
    # Distinct rows get distinct 64-bit ranks; the same key ranks every row alike on any
    # partitioning and row order; another key ranks them independently.
    df = spark.range(40000, numPartitions=4)
    key, other = _key(), _key()

    def ranks(frame, k):
        out = _bounding.with_ranks(frame, k.for_step(b"t"), ["id"], False, "id").select("id", _bounding.R)
        return dict(rows_of(out))

    first = ranks(df, key)
    assert len(set(first.values())) == len(first) == 40000
    assert ranks(df.repartition(7).orderBy(spark_functions().rand()), key) == first
    second = ranks(df, other)
    assert not set(first.values()) & set(second.values())
    # Uniform: the top bit is a fair coin, the low byte's 256 values equally likely.
    values = np.array(list(first.values()), dtype=np.int64)
    assert abs((values < 0).mean() - 0.5) < 5 * math.sqrt(0.25 / values.size)
    low = np.bincount(values & 0xFF, minlength=256)
    assert ((low - 40000 / 256) ** 2 / (40000 / 256)).sum() < 255 + 5 * math.sqrt(2 * 255)


def spark_functions():
    from pyspark.sql import functions

    return functions


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
    with pytest.raises(ValueError, match="carries its own epsilon and delta"):  # an object: as on one machine
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
        assert _raised(lambda extra=extra: ds.select_partitions(df, **base, **extra)) == \
            _raised(lambda extra=extra: dpselect.select_partitions(table, **base, **extra)), extra
    for extra in (dict(confidence_level=0.0), dict(confidence_level=1), dict(budget=[1.0])):
        assert _raised(lambda extra=extra: ds.aggregate(df, metrics=metrics, **one, **base, **extra)) == \
            _raised(lambda extra=extra: dpselect.aggregate(table, metrics=metrics, **one, **base, **extra)), extra
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


def _quantile_table():
    """Each user in at most 3 keys with at most 4 rows in each: nothing is bounded at κ = 3, L∞ = 4."""
    table = _table(21, users=1500, keys=6, rows=5000, max_keys=3, max_rows=4)
    value = table["value"].to_numpy()
    return table.append_column("fvalue", pa.array(value * 0.37 + 0.01)).append_column("gvalue", pa.array(value * 1.3))


_QUANTILES = {"users": dpselect.count_distinct_units(),
              "med": dpselect.median("value", bounds=(0, 10)),  # one leaf per integer
              "q": dpselect.quantile("gvalue", [0.1, 0.9], bounds=(-5.5, 20)),  # 64 equal buckets
              "fmax": dpselect.max("fvalue"),  # bounds found privately: leaves counted after APPROX_BOUNDS
              "total": dpselect.sum("value", bounds=(0, 10))}
_QUANTILE_ARGS = dict(privacy_unit="user", by="key", delta=1e-5, max_partitions_contributed=3,
                      max_contributions_per_partition=4, confidence_level=0.9)


def test_quantiles_equal_the_single_machine_without_noise(spark):
    # ε = 1e6: every node of every tree gets noise 0, so both paths descend the same trees of the
    # same counts: the same values and intervals (a listed key absent from the data: its tree is
    # all 0), the same statement, and the report's clamping of the quantiles' columns.
    table = _quantile_table()
    df = spark.createDataFrame(table)
    kwargs = dict(metrics=_QUANTILES, epsilon=1e6, **_QUANTILE_ARGS)
    for extra in ({"report": True}, {"public_partitions": ["k1", "k4", "zz"]}):
        on_spark = ds.aggregate(df, **kwargs, **extra)
        local = dpselect.aggregate(table, **kwargs, public_partitions=extra.get("public_partitions"))
        got, want = on_spark.frame.toPandas(), local.frame.to_pandas()
        assert list(got.columns) == list(want.columns) and "q_p90_ci_high" in got.columns
        assert got.equals(want), (got, want)
        assert str(on_spark.guarantee) == str(local.guarantee) and on_spark.bounds == local.bounds
        data = got[got["users"] > 0]  # a key absent from the data: one point from its all-0 tree
        assert (data["q_p10"] < data["q_p90"]).all()
        if "report" in extra:
            # Without noise, integer leaves give the exact median: the clamped value of rank ⌈n/2⌉.
            rows = table.to_pandas().assign(v=lambda d: d["value"].clip(0, 10))
            exact = {k: float(np.sort(g["v"])[math.ceil(len(g) / 2) - 1]) for k, g in rows.groupby("key")}
            assert dict(zip(got["key"], got["med"])) == {k: exact[k] for k in got["key"]}
            report, local_report = on_spark.report().as_dict(), local.report().as_dict()
            for column in ("value", "fvalue", "gvalue"):  # a float sum, in another order
                change = report["clamping"][column].pop("total_change")
                assert change == pytest.approx(local_report["clamping"][column].pop("total_change"))
            assert report == local_report
        else:
            assert got["key"].tolist() == ["k1", "k4", "zz"] and got["users"].tolist()[2] == 0


def test_quantile_noise_and_statement_are_the_single_machines(spark):
    # At ε = 1 with a Gaussian and two Laplace trees: the same steps (budget shares, noise, tree
    # shapes, statements) as on one machine; every value lies in its bounds and in its interval.
    table = _quantile_table()
    metrics = {**_QUANTILES, "med": dpselect.median("value", bounds=(0, 10), noise="gaussian"),
               "q": dpselect.quantile("gvalue", [0.1, 0.9], bounds=(-5.5, 20), noise="laplace"),
               "fmax": dpselect.max("fvalue", bounds=(-2, 8), noise="laplace")}  # found bounds would vary
    kwargs = dict(metrics=metrics, epsilon=1.0, **_QUANTILE_ARGS)
    on_spark = ds.aggregate(spark.createDataFrame(table), **kwargs)
    local = dpselect.aggregate(table, **kwargs)
    assert str(on_spark.guarantee) == str(local.guarantee)
    assert on_spark.guarantee.components == local.guarantee.components
    trees = {c.what.split(" = ")[0]: c for c in on_spark.guarantee.components if "hierarchical" in c.statement}
    assert sorted(trees) == ["fmax", "med", "q"] and trees["med"].rho and trees["q"].rho is None
    got = on_spark.frame.toPandas()
    assert list(got.columns) == list(local.frame.to_pandas().columns)
    for column, (lo, hi) in (("med", (0, 10)), ("q_p10", (-5.5, 20)), ("q_p90", (-5.5, 20))):
        assert got[column].between(lo, hi).all(), got[column]
        assert (got[f"{column}_ci_low"] <= got[column]).all() and (got[column] <= got[f"{column}_ci_high"]).all()
    assert (got["med"] == got["med"].round()).all()  # integer leaves give integers, as on one machine


def _spread_table():
    """Each user in at most 3 keys with at most 4 rows in each: nothing is bounded at κ = 3, L∞ = 4.
    ``tag``: strings with nulls; ``f``: floats with NaN, −0.0, 0.0 and nulls; ``parity``: at most 2
    distinct values per user and key."""
    table = _table(31, users=1500, keys=6, rows=5000, max_keys=3, max_rows=4)
    value = table["value"].to_numpy()
    tag = [None if v % 11 == 0 else f"t{v % 7}" for v in value]
    f = [None if v == 3 else (math.nan if v == 4 else (-0.0 if v % 5 == 0 else float(v % 9))) for v in value]
    return (table.append_column("x", pa.array(value * 0.37 + 0.01)).append_column("tag", pa.array(tag))
            .append_column("f", pa.array(f, pa.float64())).append_column("parity", pa.array(value % 2)))


_SPREADS = {"users": dpselect.count_distinct_units(), "n": dpselect.count(),
            "vx": dpselect.variance("x", bounds=(-1, 6)),  # some values clamped
            "sx": dpselect.stddev("x", bounds=(-1, 6)),  # post-processing of vx
            "mx": dpselect.mean("x", bounds=(-1, 6)),  # vx reuses its noisy sum of offsets and row count
            "sv": dpselect.stddev("value"),  # bounds found privately: Σq summed once they are
            "dt": dpselect.count_distinct("tag"),
            "df": dpselect.count_distinct("f", max_values_per_unit=4),  # = L∞: never binds
            "dp": dpselect.count_distinct("parity", max_values_per_unit=2)}  # < L∞, drawn, but ≥ 2 values
_SPREAD_ARGS = dict(privacy_unit="user", by="key", delta=1e-5, max_partitions_contributed=3,
                    max_contributions_per_partition=4, confidence_level=0.9, precision_bits=4)


def test_variances_and_distinct_counts_equal_the_single_machine_without_noise(spark):
    # ε = 1e6 on a coarse grid: every noisy sum gets noise 0, so both paths release the same
    # integers' post-processing: values, intervals, statement, bounds, the report (the clamping of
    # the variances' columns, what each cap left out) and a listed key absent from the data.
    table = _spread_table()
    df = spark.createDataFrame(table)
    kwargs = dict(metrics=_SPREADS, epsilon=1e6, **_SPREAD_ARGS)
    for extra in ({"report": True}, {"public_partitions": ["k1", "k4", "zz"]}):
        on_spark = ds.aggregate(df, **kwargs, **extra)
        local = dpselect.aggregate(table, **kwargs, public_partitions=extra.get("public_partitions"))
        got, want = on_spark.frame.toPandas(), local.frame.to_pandas()
        assert list(got.columns) == list(want.columns) and "dt_ci_high" in got.columns
        assert got.equals(want), (got, want)
        assert str(on_spark.guarantee) == str(local.guarantee) and on_spark.bounds == local.bounds
        assert np.allclose(got["sx"] ** 2, got["vx"]) and (got["vx"][got["n"] > 0] > 0.5).all()
        if "report" in extra:
            # Nothing bounded: the distinct non-null tags of each key, and at most 2 parities.
            exact = table.to_pandas().groupby("key")["tag"].nunique()
            assert dict(zip(got["key"], got["dt"])) == {k: exact[k] for k in got["key"]}
            assert (got["dp"] == 2).all() and (got["df"] > 5).all()
            report, local_report = on_spark.report().as_dict(), local.report().as_dict()
            for column in ("x", "value"):  # a float sum, in another order
                change = report["clamping"][column].pop("total_change")
                assert change == pytest.approx(local_report["clamping"][column].pop("total_change"))
            assert report == local_report
            assert report["count_distinct_values_left_out_by_max_values_per_unit"] == {"df": 0, "dp": 0}
        else:
            assert got["key"].tolist() == ["k1", "k4", "zz"] and got["n"].tolist()[2] == 0
    # At ε = 1, with a Gaussian variance: the same steps (shares, noise, squares' shift, statements).
    metrics = {**_SPREADS, "sv": dpselect.stddev("value", bounds=(0, 12), noise="gaussian")}
    kwargs = dict(metrics=metrics, epsilon=1.0, **_SPREAD_ARGS)
    on_spark, local = ds.aggregate(df, **kwargs), dpselect.aggregate(table, **kwargs)
    assert str(on_spark.guarantee) == str(local.guarantee)
    assert on_spark.guarantee.components == local.guarantee.components
    got = on_spark.frame.toPandas()
    assert list(got.columns) == list(local.frame.to_pandas().columns)
    for column, top in (("vx", 3.5 ** 2), ("sx", 3.5), ("sv", 6.0)):
        assert got[column].between(0, top).all(), got[column]
        assert (got[f"{column}_ci_low"] <= got[column]).all() and (got[column] <= got[f"{column}_ci_high"]).all()


def test_count_distinct_cap_keeps_a_uniform_subset_on_spark(spark):
    # In each of 400 keys user a has values {A, B} and user b has {A}; with max_values_per_unit=1
    # a keeps A or B with probability 1/2, independently per key: the key has 1 or 2 distinct
    # values (ε = 1e6: no noise). The report counts the one value per key the cap left out.
    keys = [f"k{i}" for i in range(400)]
    table = pa.table({"user": [f"a{i}" for i in range(400)] * 2 + [f"b{i}" for i in range(400)],
                      "key": keys * 3, "c": ["A"] * 400 + ["B"] * 400 + ["A"] * 400})
    kwargs = dict(privacy_unit="user", by="key", metrics={"d": dpselect.count_distinct("c", max_values_per_unit=1)},
                  epsilon=1e6, delta=1e-5, max_partitions_contributed=1, max_contributions_per_partition=2,
                  public_partitions=keys)
    on_spark = ds.aggregate(spark.createDataFrame(table), report=True, **kwargs)
    local = dpselect.aggregate(table, **kwargs)
    counts = on_spark.frame.toPandas()["d"]
    assert set(counts) == {1, 2} and 0.4 < (counts == 2).mean() < 0.6, counts.value_counts()
    assert on_spark.guarantee.components == local.guarantee.components
    assert "sensitivity 1 per key, at most 1 per unit and key" in on_spark.guarantee.components[-1].statement
    left_out = on_spark.report().as_dict()["count_distinct_values_left_out_by_max_values_per_unit"]
    assert left_out == local.report().as_dict()["count_distinct_values_left_out_by_max_values_per_unit"] == {"d": 400}


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
    # Too little data for the histogram at ε = 1: as on one machine, not a failure of the release
    # (that would depend on the data) but NaN sums and means for those columns, the share spent.
    small = {**kwargs, "epsilon": 1.0}
    few = ds.aggregate(spark.createDataFrame(table.slice(0, 300)), **small)
    alone = dpselect.aggregate(table.slice(0, 300), **small)
    assert math.isnan(few.bounds["ivalue"][0]) and math.isnan(alone.bounds["ivalue"][0])
    frame = few.frame.toPandas()
    assert frame["isum"].isna().all() and frame["imean"].isna().all() and frame["bsum"].notna().all()
    assert "bounds of 'ivalue' (APPROX_BOUNDS; no bounds found)" in str(few.guarantee)
    assert few.guarantee.epsilon_exact == alone.guarantee.epsilon_exact
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


# ---------------------------------------------------------------- exact sums


def _big_values(users: int, value: int, key: str, rows_each: int = 1):
    return pa.table({"user": pa.array(np.repeat(np.arange(users), rows_each)),
                     "key": pa.array([key] * (users * rows_each)), "value": pa.array([value] * (users * rows_each))})


def test_a_key_whose_sum_leaves_int64_is_released_clamped_as_on_one_machine(spark):
    # bounds ±2^60 at 52 bits: one value is 2^52 units of 2^8. "big" sums n·2^52 units (2^63 and
    # past it from n = 2048 users), "neg" −n·2^52: each is clamped to ±2^62 units before noise of
    # scale 2^52/100, never refused, never wrapped, whatever n.
    metrics = {"total": dpselect.sum("value", bounds=(-2**60, 2**60)), "n": dpselect.count()}
    kwargs = dict(privacy_unit="user", by="key", metrics=metrics, epsilon=200.0, delta=1e-5, precision_bits=52,
                  max_partitions_contributed=1, max_contributions_per_partition=1, public_partitions=["big", "neg"])
    scale = 2.0**52 / 100
    for users in (2047, 2048, 3000):
        table = pa.concat_tables([_big_values(users, 2**60, "big"),
                                  _big_values(users, -2**60, "neg").set_column(0, "user", pa.array(
                                      np.arange(users, 2 * users)))])
        got = ds.aggregate(spark.createDataFrame(table), **kwargs).frame.toPandas()
        local = dpselect.aggregate(table, **kwargs).frame.to_pandas()
        assert got["key"].tolist() == ["big", "neg"]
        for sign, released, single in zip((1, -1), got["total"], local["total"]):
            assert abs(released / 2**8 - sign * 2**62) < 50 * scale, (users, released)
            assert abs(released - single) / 2**8 < 100 * scale
        assert abs(got["n"] - users).max() < 50


def test_a_pair_whose_sum_leaves_int64_is_summed_exactly(spark):
    # One user, 4096 rows of 2^52 units in one key, L∞ = 4096: the pair alone sums 2^64 units.
    table = _big_values(1, 2**60, "one", rows_each=4096)
    kwargs = dict(privacy_unit="user", by="key", metrics={"total": dpselect.sum("value", bounds=(0, 2**60))},
                  epsilon=4096.0, delta=1e-5, precision_bits=52, max_partitions_contributed=1,
                  max_contributions_per_partition=4096, public_partitions=["one"])
    out = ds.aggregate(spark.createDataFrame(table), **kwargs).frame.toPandas()
    assert abs(out["total"][0] / 2**8 - 2**62) < 50 * 2.0**52  # clamped to 2^62 units, noise of scale 2^52


# ---------------------------------------------------------------- names and parameters


@pytest.fixture
def no_spark_job(spark):
    """Fails the test if a Spark job ran inside the ``with`` block."""
    import contextlib
    import uuid

    @contextlib.contextmanager
    def check():
        sc = spark.sparkContext
        group = f"dpselect-no-job-{uuid.uuid4().hex}"
        sc.setJobGroup(group, "a refusal must start no Spark job")
        try:
            yield
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        assert list(sc.statusTracker().getJobIdsForGroup(group)) == []

    return check


def test_names_with_dots_and_backticks_work_as_on_one_machine(spark):
    gen = np.random.default_rng(15)
    n = 4000
    table = pa.table({"user.id": pa.array(gen.integers(0, 800, n)),
                      "k`ey": pa.array([f"k{k}" for k in gen.integers(0, 5, n)]),
                      "a.b": pa.array(gen.integers(0, 2, n).astype(bool)),
                      "v.a`l": pa.array(gen.integers(-3, 20, n)), "w": pa.array(gen.normal(3, 10, n))})
    df = spark.createDataFrame(table)
    metrics = {"us.ers": dpselect.count_distinct_units(), "ro`ws": dpselect.count(),
               "s.um": dpselect.sum("v.a`l", bounds=(0, 10)), "a`v.g": dpselect.mean("v.a`l", bounds=(0, 10)),
               "found": dpselect.sum("w")}
    # Nothing bounded (κ and L∞ at least every user's keys and rows per key) and a budget so large
    # that no noise is drawn: both paths compute the same function.
    linf = int(table.group_by(["user.id", "k`ey", "a.b"]).aggregate([("w", "count")])["w_count"].to_numpy().max())
    kwargs = dict(privacy_unit="user.id", by=["k`ey", "a.b"], metrics=metrics, epsilon=2.0**20, delta=1e-5,
                  max_partitions_contributed=10, max_contributions_per_partition=linf, precision_bits=4,
                  confidence_level=0.9)
    for extra in ({}, {"public_partitions": [("k1", True), ("zz", False)]}):
        on_spark = ds.aggregate(df, report=True, **kwargs, **extra)
        local = dpselect.aggregate(table, **kwargs, **extra)
        got = on_spark.frame.toPandas()
        assert list(got.columns) == list(local.frame.column_names)
        assert got.equals(local.frame.to_pandas()), (got, local.frame)
    select = dict(privacy_unit="user.id", by=["k`ey", "a.b"], epsilon=1e6, delta=1e-5, max_partitions_contributed=10,
                  counts=True, count_column="n.`", confidence_level=0.9)
    for extra in ({}, {"public_partitions": [("k1", True), ("zz", False)], "strategy": "mixed",
                       "public_threshold": 5}):
        out = ds.select_partitions(df, **select, **extra).toPandas()
        assert out.equals(dpselect.select_partitions(table, **select, **extra).to_pandas())
    with pytest.warns(NullPrivacyUnitsDropped, match=r"column 'user\.id'"):
        ds.select_partitions(spark.createDataFrame(table.set_column(0, "user.id", pa.array([None] * n, pa.int64()))),
                             **{**select, "null_privacy_units": "drop"})


def test_parameter_errors_are_refused_before_any_spark_job_or_charge(spark, no_spark_job):
    table = pa.table({"user": pa.array(np.arange(20)), "key": pa.array(np.arange(20) % 3),
                      "value": pa.array(np.ones(20)), "noisy_count_ci_low": pa.array(np.arange(20) % 2)})
    df = spark.createDataFrame(table)
    cased = spark.createDataFrame(table.append_column("KEY", pa.array(np.arange(20) % 2)))  # "key" is ambiguous
    nested = spark.createDataFrame(table.append_column("arr", pa.array([[1]] * 20)))
    budget = dpselect.Budget(100.0, 1e-3)
    base = dict(privacy_unit="user", by="key", epsilon=1.0, delta=1e-5, budget=budget)
    one = dict(max_partitions_contributed=1, max_contributions_per_partition=1)
    count = dpselect.count()
    bad_aggregates = [
        (dict(metrics={"n": count, "n_ci_low": count}, confidence_level=0.9, **one), "interval column"),
        (dict(metrics={"key": count}, **one), "by column"),
        (dict(metrics={"n": count}, max_partitions_contributed=1, max_contributions_per_partition=2**63),
         "L∞|2\\*\\*32"),
        (dict(metrics={"n": count}, max_partitions_contributed=2**63, max_contributions_per_partition=1), "2\\*\\*32"),
        # Laplace: at such an epsilon "auto" takes the Gaussian, whose delta-limited sigma fits.
        (dict(metrics={"n": count}, **one, epsilon=1e-300, noise="laplace"), "noise scale"),
        (dict(metrics={"value": count, "s": dpselect.sum("value", bounds=(0, 1))}, **one), "value column 'value'"),
        (dict(metrics={"s": dpselect.sum("user", bounds=(0, 10))}, **one), "privacy_unit"),
        (dict(metrics={"s": dpselect.sum("value")}, max_partitions_contributed=1,
              max_contributions_per_partition=2**31, epsilon=2.0**20), "Spark array|noise scale"),
        (dict(metrics={"Key": count}, **one), "would be one column"),
        (dict(metrics={"n": count, "N": count}, **one), "would be one column"),
        (dict(metrics={"__dpselect_keep": count}, **one), "reserved"),
        (dict(metrics={"d": dpselect.count_distinct("nothere")}, **one), "'nothere' is not in the DataFrame"),
        (dict(metrics={"d": dpselect.count_distinct("value")}, max_partitions_contributed=1,
              max_contributions_per_partition=2**31, epsilon=2.0**20), "Spark array|noise scale"),
        (dict(metrics={"v": dpselect.variance("value", bounds=(0, 1))}, precision_bits=40, **one), "64-bit"),
    ]
    bad_selects = [(dict(count_column="key"), "count_column"),
                   (dict(by="noisy_count_ci_low", counts=True, confidence_level=0.9, strategy="release"),
                    "would be one column")]
    calls = [(lambda kw=kw: ds.aggregate(df, **{**base, **kw}), match) for kw, match in bad_aggregates]
    calls += [(lambda kw=kw: ds.select_partitions(df, **{**base, **kw}), match) for kw, match in bad_selects]
    calls += [(lambda: ds.aggregate(cased, metrics={"n": count}, **one, **base), "ambiguous"),
              (lambda: ds.select_partitions(cased, **base), "ambiguous"),
              (lambda: ds.aggregate(nested, metrics={"d": dpselect.count_distinct("arr")}, **one, **base),
               "count_distinct column 'arr' has type array<bigint>, whose values cannot be compared")]
    for call, match in calls:
        with no_spark_job(), pytest.raises((ValueError, TypeError), match=match) as info:
            call()
        assert not type(info.value).__module__.startswith(("py4j", "pyspark")), info.value
    assert budget.spent == (0, 0)
    # A tiny epsilon is no parameter error for a selection: as on one machine, nothing is released.
    tiny = dict(privacy_unit="user", by="key", epsilon=1e-300, delta=1e-5, counts=True)
    assert ds.select_partitions(df, **tiny).count() == dpselect.select_partitions(table, **tiny).num_rows == 0


def test_a_session_with_speculative_tasks_is_refused(spark, monkeypatch, no_spark_job):
    df = frame(spark, user=np.arange(10), key=np.arange(10) % 2)
    monkeypatch.setattr(_common, "speculation_enabled", lambda session: True)
    budget = dpselect.Budget(10.0, 1e-3)
    with no_spark_job():
        with pytest.raises(ValueError, match="spark.speculation is enabled"):
            ds.select_partitions(df, privacy_unit="user", by="key", epsilon=1.0, delta=1e-5, budget=budget)
        with pytest.raises(ValueError, match="spark.speculation is enabled"):
            ds.aggregate(df, privacy_unit="user", by="key", metrics={"n": dpselect.count()}, epsilon=1.0,
                         delta=1e-5, max_partitions_contributed=1, max_contributions_per_partition=1, budget=budget)
    assert budget.spent == (0, 0)


def test_a_budget_stated_in_rho_is_charged_each_steps_cost_as_on_one_machine(spark, no_spark_job):
    table = pa.table({"user": pa.array(np.arange(40)), "key": pa.array(np.arange(40) % 4),
                      "value": pa.array(np.ones(40))})
    df = spark.createDataFrame(table)
    kw = dict(privacy_unit="user", by="key", epsilon=1.0, delta=1e-5, max_partitions_contributed=1,
              max_contributions_per_partition=1,
              metrics={"n": dpselect.count(noise="laplace"), "s": dpselect.sum("value", bounds=(0, 1), noise="gaussian")})
    on_spark, local = dpselect.Budget.zcdp(1, 1e-5), dpselect.Budget.zcdp(1, 1e-5)
    ds.aggregate(df, budget=on_spark, **kw)
    dpselect.aggregate(table, budget=local, **kw)
    # The selection's ε²/2 and δ, the Laplace count's ε²/2, the Gaussian sum's ρ: as on one machine.
    assert on_spark.spent == local.spent and 0 < on_spark.spent[0] < Fraction(1, 2)
    tight = dpselect.Budget.zcdp(Fraction(1, 1000), 1e-5)
    with no_spark_job(), pytest.raises(BudgetExceededError, match="budget stated in rho: rho by"):
        ds.aggregate(df, budget=tight, **kw)
    assert tight.ledger == ()


# ---------------------------------------------------------------- recomputation draws nothing new


def _three_keys_each(users: int, seed: int):
    """Each user has 6 rows over 3 of 40 keys (values 0-9): κ = 1 and L∞ = 1 bound everyone."""
    gen = np.random.default_rng(seed)
    own = gen.integers(0, 40, size=(users, 3))
    user = np.repeat(np.arange(users), 6)
    return pa.table({"user": pa.array(user), "key": pa.array(own[user, gen.integers(0, 3, user.size)]),
                     "value": pa.array(gen.integers(0, 10, user.size))})


_BOUND_ONE = dict(privacy_unit="user", by="key", epsilon=1e6, delta=1e-5, max_partitions_contributed=1)
_METRICS = {"users": dpselect.count_distinct_units(), "rows": dpselect.count(),
            "total": dpselect.sum("value", bounds=(0, 10))}


def test_the_bounding_depends_on_the_release_key_and_the_rows_only(spark):
    # The same release key (the test generator's seed) keeps the same rows and keys whatever the
    # partitioning and the order of the rows; ε = 1e6 draws no noise, so the releases are equal.
    table = _three_keys_each(3000, 16)
    F = spark_functions()
    frames = [spark.createDataFrame(table).repartition(2),
              spark.createDataFrame(table).orderBy(F.rand(5)).repartition(7)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        selected = [rows_of(ds.select_partitions(df, counts=True, rng=InsecureDeterministicRNG(3), **_BOUND_ONE))
                    for df in frames]
        aggregated = [rows_of(ds.aggregate(df, metrics=_METRICS, max_contributions_per_partition=1,
                                           rng=InsecureDeterministicRNG(3), **_BOUND_ONE).frame) for df in frames]
    assert selected[0] == selected[1] and aggregated[0] == aggregated[1]
    assert sum(r[1] for r in selected[0]) == sum(r[1] for r in aggregated[0]) == 3000  # each user in one key
    assert sum(r[2] for r in aggregated[0]) == 3000  # and one row


def _lose_shuffle_files_once(local_dir: str, marker: str):
    """A pass-through Arrow UDF that, in the first attempt of partition 3 of its stage, deletes
    every shuffle file of the session (as a lost disk would) and fails. Spark retries the task,
    finds the map outputs gone, recomputes the stages that wrote them — the bounding — and re-runs
    the reducers that had not finished, while those that had keep what they read."""
    def inject(batches):
        import glob

        from pyspark import TaskContext

        context = TaskContext.get()
        if context.partitionId() == 3 and context.attemptNumber() == 0 and not os.path.exists(marker):
            open(marker, "w").close()
            for path in glob.glob(os.path.join(local_dir, "**", "shuffle_*"), recursive=True):
                os.remove(path)
            raise RuntimeError("dpselect test: injected loss of the shuffle files")
        yield from batches

    return inject


def test_a_lost_shuffle_recomputed_mid_release_redraws_nothing(spark, monkeypatch, tmp_path):
    # Some reducers of the per-key stage finish, then the bounding's shuffle files are lost and
    # Spark recomputes the bounding for the others. Fresh draws would keep some users' keys twice
    # and others' not at all; ranks from the release key keep the same ones: each user counts in
    # exactly one key, and the release equals the one made without the fault.
    table = _three_keys_each(3000, 17)
    df = spark.createDataFrame(table)
    local_dir = spark.conf.get("spark.local.dir")
    sc = spark.sparkContext
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clean = rows_of(ds.aggregate(df, metrics=_METRICS, max_contributions_per_partition=1,
                                     rng=InsecureDeterministicRNG(4), **_BOUND_ONE).frame)
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")  # keep 4 reducers
    try:
        for module in (_select, _aggregate):
            original = module.materialise

            def faulty(frame, original=original, module=module):
                marker = str(tmp_path / module.__name__)
                return original(frame.mapInArrow(_lose_shuffle_files_once(local_dir, marker), frame.schema))

            monkeypatch.setattr(module, "materialise", faulty)
        sc.setJobGroup("dpselect-fault", "injected fault")
        selected = ds.select_partitions(df, counts=True, **_BOUND_ONE)  # the secure generator
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            faulted = rows_of(ds.aggregate(df, metrics=_METRICS, max_contributions_per_partition=1,
                                           rng=InsecureDeterministicRNG(4), **_BOUND_ONE).frame)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        spark.conf.unset("spark.sql.adaptive.coalescePartitions.enabled")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dpselect.spark._aggregate", "dpselect.spark._select"]
    tracker = sc.statusTracker()
    stages = [tracker.getStageInfo(s) for j in tracker.getJobIdsForGroup("dpselect-fault")
              for s in tracker.getJobInfo(j).stageIds]
    retried = [s for s in stages if s is not None and s.currentAttemptId > 0]
    assert retried, "the fault did not make Spark recompute a stage"
    assert sum(r[1] for r in rows_of(selected)) == 3000
    assert faulted == clean and sum(r[1] for r in faulted) == 3000


def test_aggregate_tsgd_counts_and_gaussian_metrics_equal_the_single_machine_without_noise(spark):
    # The release's own noisy user counts as the user-count metric, Gaussian noise, a mean reusing
    # the released sum and count: the same plan on both paths, so the same values and statement.
    table = _table(5, users=2000, keys=10, rows=6000, max_keys=2, max_rows=2)
    metrics = {"users": dpselect.count_distinct_units(), "rows": dpselect.count(noise="gaussian"),
               "total": dpselect.sum("value", bounds=(0, 10)), "avg": dpselect.mean("value", bounds=(0, 10))}
    kwargs = dict(privacy_unit="user", by="key", metrics=metrics, epsilon=1e6, delta=1e-5, strategy="release",
                  max_partitions_contributed=2, max_contributions_per_partition=2)
    on_spark = ds.aggregate(spark.createDataFrame(table), **kwargs)
    local = dpselect.aggregate(table, **kwargs)
    got, want = on_spark.frame.toPandas(), local.frame.to_pandas()
    assert got.equals(want), (got.head(), want.head())
    assert str(on_spark.guarantee) == str(local.guarantee) and "converted once" in str(local.guarantee)


# ---------------------------------------------------------------- κ and L∞ chosen privately ("auto")

_AUTO = dict(max_partitions_contributed="auto", max_contributions_per_partition="auto")
_AUTO_METRICS = {"users": dpselect.count_distinct_units(), "rows": dpselect.count(),
                 "total": dpselect.sum("value", bounds=(0, 10))}


def _auto_table(seed: int, users: int, n_keys, rows):
    """User u has ``n_keys(u)`` distinct keys of 12 (a random subset), its j-th with ``rows(u, j)`` rows."""
    gen = np.random.default_rng(seed)  # the input data only
    user: list[int] = []
    key: list[str] = []
    for u in range(users):
        for j, k in enumerate(gen.choice(12, n_keys(u), replace=False)):
            user += [u * 5 + 1] * rows(u, j)
            key += [f"k{k}"] * rows(u, j)
    return pa.table({"user": pa.array(user), "key": pa.array(key), "value": pa.array(gen.integers(0, 10, len(user)))})


def _without_hindsight(report: dict) -> tuple[dict, dict]:
    rest = dict(report)
    return rest, rest.pop("hindsight")


def test_auto_bounds_on_spark_equal_the_single_machine_without_noise(spark):
    # c_u in {3, 4} and every pair's rows in {3, 4}: every user in bin 2 of both histograms, so κ =
    # L∞ = 4 whatever pair is drawn, nothing is bounded, and at this ε no noise is drawn but 0.
    table = _auto_table(21, 600, lambda u: 3 + u % 2, lambda u, j: 3 + (u + j) % 2)
    kwargs = dict(privacy_unit="user", by="key", metrics=_AUTO_METRICS, epsilon=1e6, delta=1e-5, **_AUTO)
    budget = dpselect.Budget(2e6, 1e-4)
    on_spark = ds.aggregate(spark.createDataFrame(table), budget=budget, report=True, **kwargs)
    local = dpselect.aggregate(table, **kwargs)
    assert (on_spark.guarantee.kappa, on_spark.guarantee.linf) == (local.guarantee.kappa, local.guarantee.linf) == (4, 4)
    got, want = on_spark.frame.toPandas(), local.frame.to_pandas()
    assert got.equals(want), (got.head(), want.head())
    assert str(on_spark.guarantee) == str(local.guarantee) == ds.guarantee_of(on_spark.frame)
    # The step is named first with the values chosen, and spends the plan's "contribution_bounds" share.
    from dpselect.aggregation.plan import CONTRIBUTION_BOUNDS, plan_aggregate

    plan = plan_aggregate(privacy_unit="user", by="key", metrics=_AUTO_METRICS, epsilon=1e6, delta=1e-5,
                          max_partitions_contributed="auto", max_contributions_per_partition="auto", public=False)
    step = on_spark.guarantee.components[0]
    assert step == local.guarantee.components[0]
    assert step.what == "contribution bounds (κ = 4 and L∞ = 4 chosen privately)"
    assert (step.epsilon_exact, step.delta_exact) == (plan.shares[CONTRIBUTION_BOUNDS][0], 0)
    assert budget.spent == (Fraction(10**6), Fraction(1, 10**5))  # charged once, the whole release
    # The data holder's report, hindsight included (float sums in another order).
    (rest, hind), (want_rest, want_hind) = _without_hindsight(on_spark.report().as_dict()), \
        _without_hindsight(local.report().as_dict())
    assert rest == want_rest
    assert hind["best_kappa"] == want_hind["best_kappa"]
    for name in ("kappa", "linf"):
        assert [sorted(e.items()) for e in hind[name]] == [
            [(k, pytest.approx(v)) for k, v in sorted(e.items())] for e in want_hind[name]]
    assert "In hindsight (exact, NOT DP" in str(on_spark.report())


@pytest.mark.filterwarnings("ignore:contribution bounding kept")  # on one machine, at κ = 1
@pytest.mark.parametrize("public", [False, True])
def test_auto_kappa_reads_the_single_machines_quantile(spark, public):
    # Half the users have 1 key, half 4 (bins 0 and 2), every pair 2 rows (L∞ = 2): κ = 1 read at
    # the quantile 1/4 when keys are selected from the data, κ = 4 at 3/4 with public partitions.
    table = _auto_table(22, 400, lambda u: 1 if u % 2 else 4, lambda u, j: 2)
    listed = dict(public_partitions=[f"k{i}" for i in range(12)]) if public else {}
    kwargs = dict(privacy_unit="user", by="key", metrics=_AUTO_METRICS, epsilon=1e6, delta=1e-5, **_AUTO, **listed)
    on_spark = ds.aggregate(spark.createDataFrame(table), **kwargs)
    local = dpselect.aggregate(table, **kwargs)
    want = (4, 2) if public else (1, 2)
    assert (on_spark.guarantee.kappa, on_spark.guarantee.linf) == (local.guarantee.kappa, local.guarantee.linf) == want
    assert str(on_spark.guarantee) == str(local.guarantee)
    got, local_frame = on_spark.frame.toPandas(), local.frame.to_pandas()
    if public:  # nothing bounded: the same values
        assert got.equals(local_frame), (got.head(), local_frame.head())
    else:  # each user keeps one key drawn at random on each path: the same keys
        assert list(got["key"]) == list(local_frame["key"]) == [f"k{i}" for i in sorted(range(12), key=str)]


def test_select_with_auto_kappa_equals_the_single_machine_without_noise(spark):
    table = _auto_table(23, 500, lambda u: 2, lambda u, j: 1 + u % 3)  # c_u = 2: κ = 2 keeps every key
    kwargs = dict(privacy_unit="user", by="key", epsilon=1e6, delta=1e-5, max_partitions_contributed="auto",
                  counts=True, report=True)
    out, report = ds.select_partitions(spark.createDataFrame(table), **kwargs)
    local, local_report = dpselect.select_partitions(table, **kwargs)
    assert out.toPandas().equals(local.to_pandas())
    statement = ds.guarantee_of(out)
    assert statement == local.schema.metadata[b"dpselect.guarantee"].decode()
    assert "with κ = 2 chosen privately" in statement and "κ chosen privately: 100000-DP" in statement
    assert report.as_dict() == local_report.as_dict()


def test_auto_histograms_count_distinct_keys_and_one_uniform_pair_per_user(spark):
    # Every user has key "a" with 1 row and "b" with 4; the even users also "c" with 4. c_u is 2 or
    # 3 (bins 1 and 2; counting rows, 5 or 9, would be bins 3 and 4), and the L∞ histogram holds
    # each user once, its bin 0 with probability 1/2 or 1/3 (every pair of a user, 2.5 per user,
    # or always the first key, would not).
    from dpselect.ingest.auto_bounds import MAX_AUTO_KAPPA, MAX_AUTO_LINF, histogram
    from dpselect.spark import _auto_bounds

    n = 3000
    user: list[int] = []
    key: list[str] = []
    for u in range(n):
        for k, r in [("a", 1), ("b", 4)] + ([("c", 4)] if u % 2 == 0 else []):
            user += [u] * r
            key += [k] * r
    df = frame(spark, user=np.asarray(user), key=np.asarray(key))
    release_key = _key()
    pairs = _auto_bounds.ranked_pairs(df, "user", ["key"], release_key, True)
    exact_kappa, exact_linf = _auto_bounds.exact_histograms(pairs, MAX_AUTO_KAPPA, MAX_AUTO_LINF)
    assert exact_kappa.tolist() == histogram(np.array([2, 3] * (n // 2)), MAX_AUTO_KAPPA).tolist()
    assert exact_linf.sum() == n and exact_linf[0] + exact_linf[2] == n
    mean = n / 2 * (1 / 2) + n / 2 * (1 / 3)
    sd = math.sqrt(n / 2 * (1 / 4) + n / 2 * (2 / 9))
    assert abs(exact_linf[0] - mean) < 5 * sd, (exact_linf[0], mean)
    # A keyed function of the pairs: the same histograms on a re-run, another draw under another key.
    again = _auto_bounds.exact_histograms(_auto_bounds.ranked_pairs(df, "user", ["key"], release_key, True),
                                          MAX_AUTO_KAPPA, MAX_AUTO_LINF)
    assert again[1].tolist() == exact_linf.tolist()
    # κ alone: no L∞ histogram.
    assert _auto_bounds.exact_histograms(pairs, 8, None)[1] is None
    # A null privacy unit is refused with dpselect's message, from the first job.
    nulls = spark.createDataFrame(pa.table({"user": pa.array([1, None, 2]), "key": pa.array(["a", "a", "b"])}))
    with pytest.raises(ValueError, match="null privacy unit"):
        ds.aggregate(nulls, privacy_unit="user", by="key", metrics={"n": dpselect.count()}, epsilon=1.0,
                     delta=1e-5, **_AUTO)


def test_auto_bounds_refusals_come_before_any_spark_job_or_charge(spark, no_spark_job):
    df = frame(spark, user=np.arange(20), key=np.arange(20) % 3, value=np.ones(20))
    budget = dpselect.Budget(100.0, 1e-3)
    base = dict(privacy_unit="user", by="key", epsilon=1.0, delta=1e-5, budget=budget)
    count = {"n": dpselect.count()}
    obj = dpselect.make_strategy("pi_opt", epsilon=0.5, delta=1e-6)
    calls = [
        (lambda: ds.aggregate(df, metrics=count, max_partitions_contributed="Auto",
                              max_contributions_per_partition=1, **base), "the one string accepted is 'auto'"),
        (lambda: ds.aggregate(df, metrics=count, max_partitions_contributed=1,
                              max_contributions_per_partition="2", **base), "the one string accepted is 'auto'"),
        (lambda: ds.aggregate(df, metrics=count, **_AUTO, strategy=obj, **base), "needs the strategy by name"),
        (lambda: ds.aggregate(df, metrics=count, **_AUTO, **{**base, "delta": 0}), "delta = 0"),
        (lambda: ds.select_partitions(df, max_partitions_contributed="AUTO", **base),
         "the one string accepted is 'auto'"),
        (lambda: ds.select_partitions(df, privacy_unit="user", by="key", max_partitions_contributed="auto",
                                      strategy=obj, budget=budget),
         "needs a count-based strategy by name"),
        (lambda: ds.select_partitions(df, max_partitions_contributed="auto", **{**base, "epsilon": 0}),
         "epsilon"),
    ]
    for call, match in calls:
        with no_spark_job(), pytest.raises((ValueError, TypeError), match=match) as info:
            call()
        assert not type(info.value).__module__.startswith(("py4j", "pyspark")), info.value
    assert budget.spent == (0, 0)
