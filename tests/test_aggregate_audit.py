"""Regression tests for what an independent audit, a hostile test campaign and two real-data trials
found silently wrong in ``dpselect.aggregate``: sums that wrapped, outputs that took an input
column's type, names that overwrote each other, public keys that were truncated, releases whose
success depended on the data, parameters checked after the work, and text that misled."""
from __future__ import annotations

import math
import time
import warnings
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

import dpselect
from dpselect.testing import InsecureDeterministicRNG

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")
pl = pytest.importorskip("polars")

BASE = dict(privacy_unit="u", by="k", epsilon=1.0, delta=1e-6, max_partitions_contributed=1,
            max_contributions_per_partition=1)


def _rng(seed: int = 7) -> InsecureDeterministicRNG:
    return InsecureDeterministicRNG(seed=seed)


def _run(data, **kwargs):
    args = {**BASE, **kwargs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dpselect.aggregate(data, rng=_rng(), **args)


# ------------------------------------------------------------------ sums never wrap


def test_a_sum_past_int64_grid_units_is_clamped_never_wrapped():
    # 3,000 rows of 1.75 at 52 bits: 3,000 · 1.75·2^51 grid units leave int64. The release used to
    # wrap to about -2,942 with an interval that excluded the truth.
    df = pd.DataFrame({"u": np.arange(3000), "k": "a", "x": 1.75})
    out = _run(df, metrics={"s": dpselect.sum("x", bounds=(0.0, 2.0))}, public_partitions=["a"], epsilon=1e3,
               precision_bits=52, confidence_level=0.95)
    value = float(out.frame["s"].iloc[0])
    limit = math.ldexp(1.0, 62 - 51)  # the clamp: 2^62 units of 2^-51
    assert 0 < value and abs(value - limit) < 1e-3  # saturated at the clamp, never negative
    assert out.frame["s_ci_low"].iloc[0] <= limit <= out.frame["s_ci_high"].iloc[0]
    assert any("clamped" in w for w in out.report().warnings)
    # Well inside the range (the default precision), the sum is the truth plus a little noise.
    inside = _run(df, metrics={"s": dpselect.sum("x", bounds=(0.0, 2.0))}, public_partitions=["a"], epsilon=1e3)
    assert abs(float(inside.frame["s"].iloc[0]) - 5250) < 1


@pytest.mark.parametrize("users", [4094, 4095])
def test_one_more_user_never_flips_the_sign_of_a_sum(users):
    # At 52 bits a value of 1.0 is 2^52 grid units: two shards of ~2^11 rows each fit int64, their
    # total does not. It used to wrap to a large negative sum (or, one user more, fail).
    df = pd.DataFrame({"u": np.arange(users), "k": "a", "x": 1.0})
    out = _run(df, metrics={"s": dpselect.sum("x", bounds=(0.0, 1.0))}, public_partitions=["a"],
               epsilon=1e3, precision_bits=52)
    assert float(out.frame["s"].iloc[0]) == pytest.approx(1024, abs=1)  # clamped at 2^62 units of 2^-52


def test_a_mean_uses_exact_offsets():
    # Σ(u − mid) over 6,000 rows at the upper bound leaves int64 at 52 bits: it is computed in 128
    # bits and clamped (the mean stays in the upper half), where it used to wrap to the lower bound.
    df = pd.DataFrame({"u": np.arange(6000), "k": "a", "x": 2.0})
    out = _run(df, metrics={"m": dpselect.mean("x", bounds=(0.0, 2.0))}, public_partitions=["a"], epsilon=1e3,
               precision_bits=52)
    assert 1.0 < float(out.frame["m"].iloc[0]) <= 2.0


# ------------------------------------------------------------------ output columns and names


def test_an_input_column_named_like_an_output_is_refused_before_the_budget_is_charged():
    # A uint8 value column named users_ci_high used to make users' interval bound wrap 1001 -> 240.
    df = pd.DataFrame({"u": np.arange(1001), "k": "a", "users_ci_high": np.ones(1001, np.uint8)})
    budget = dpselect.Budget(10, 1e-3)
    metrics = {"users": dpselect.count_distinct_units(), "s": dpselect.sum("users_ci_high", bounds=(0, 1))}
    with pytest.raises(ValueError, match="value column 'users_ci_high' has the name of the interval column"):
        dpselect.aggregate(df, metrics=metrics, budget=budget, confidence_level=0.95, **BASE)
    assert budget.spent[0] == 0


def test_output_columns_keep_dpselects_types_whatever_the_input_has():
    # The by column comes back in its own type; every other column is dpselect's, never the type
    # of an input column (a value column's uint8 must not narrow a metric).
    df = pd.DataFrame({"u": np.arange(600), "k": np.full(600, 3, np.uint8), "x": np.full(600, 200, np.uint8)})
    out = _run(df, metrics={"users": dpselect.count_distinct_units(), "total": dpselect.sum("x", bounds=(0, 255))},
               public_partitions=[3], epsilon=100.0, confidence_level=0.95)
    assert out.frame["k"].dtype == np.uint8
    assert out.frame["users"].dtype == np.int64 and out.frame["total"].dtype == np.float64
    assert out.frame["total"].iloc[0] > 1000  # 120,000, not wrapped to a uint8


@pytest.mark.parametrize("kind", ["pandas", "polars", "arrow"])
def test_a_key_named_like_an_interval_column_is_refused_up_front(kind):
    df = pd.DataFrame({"u": np.arange(10), "a_ci_low": "x"})
    data = {"pandas": df, "polars": pl.from_pandas(df), "arrow": pa.Table.from_pandas(df)}[kind]
    budget = dpselect.Budget(10, 1e-3)
    with pytest.raises(ValueError, match="interval column 'a_ci_low' of metric 'a' is also the by column"):
        dpselect.aggregate(data, privacy_unit="u", by="a_ci_low", metrics={"a": dpselect.count()}, epsilon=1.0,
                           delta=1e-6, max_partitions_contributed=1, max_contributions_per_partition=1,
                           confidence_level=0.9, budget=budget)
    assert budget.spent[0] == 0


def test_metric_names_that_collide_with_interval_columns_are_refused():
    df = pd.DataFrame({"u": np.arange(10), "k": "x"})
    with pytest.raises(ValueError, match="metric 'a_ci_low' is also the interval column 'a_ci_low' of metric 'a'"):
        _run(df, metrics={"a": dpselect.count(), "a_ci_low": dpselect.count()}, confidence_level=0.9)
    # Without intervals the same names are fine.
    out = _run(df, metrics={"a": dpselect.count(), "a_ci_low": dpselect.count()}, public_partitions=["x"])
    assert list(out.frame.columns) == ["k", "a", "a_ci_low"]


def test_summing_the_privacy_unit_is_refused_clearly():
    df = pd.DataFrame({"u": np.arange(10), "k": "x"})
    with pytest.raises(ValueError, match="privacy_unit column 'u'"):
        _run(df, metrics={"s": dpselect.sum("u", bounds=(0, 10))})


def test_a_missing_value_column_names_the_metrics_not_the_keys():
    df = pd.DataFrame({"u": np.arange(10), "k": "x"})
    with pytest.raises(ValueError, match="value column.*'nope'.*metrics' column names"):
        _run(df, metrics={"s": dpselect.sum("nope", bounds=(0, 10))})


def test_a_value_column_of_a_refused_type_is_called_a_value_column():
    df = pd.DataFrame({"u": np.arange(10), "k": "x", "v": pd.Series([1, "a"] * 5, dtype=object)})
    with pytest.raises(TypeError, match="value column 'v'"):
        _run(df, metrics={"s": dpselect.sum("v", bounds=(0, 10))})


# ------------------------------------------------------------------ public keys


def test_public_keys_that_an_int_key_cannot_hold_are_refused_not_truncated():
    df = pd.DataFrame({"u": np.arange(40), "k": np.arange(40) % 4})
    with pytest.raises(TypeError, match="public_partitions"):
        _run(df, metrics={"n": dpselect.count()}, public_partitions=[1.5, 2.75])
    with pytest.raises(TypeError, match="public_partitions"):
        _run(df, metrics={"n": dpselect.count()}, public_partitions=["one"])
    with pytest.raises(TypeError, match="public_partitions"):
        _run(df, metrics={"n": dpselect.count()}, public_partitions=[2**70])
    out = _run(df, metrics={"n": dpselect.count()}, public_partitions=[1.0, 2])  # whole floats are exact
    assert out.frame["k"].tolist() == [1, 2]


def test_a_public_key_outside_a_categorical_or_enum_comes_back_as_itself():
    df = pd.DataFrame({"u": np.arange(30), "k": pd.Categorical(["a", "b", "c"] * 10)})
    out = _run(df, metrics={"n": dpselect.count()}, public_partitions=["a", "zzz"])
    assert out.frame["k"].tolist() == ["a", "zzz"]
    frame = pl.DataFrame({"u": np.arange(30), "k": ["a", "b", "c"] * 10}, schema={"u": pl.Int64,
                                                                                  "k": pl.Enum(["a", "b", "c"])})
    out = _run(frame, metrics={"n": dpselect.count()}, public_partitions=["b", "new"])
    assert out.frame["k"].to_list() == ["b", "new"]


@pytest.mark.parametrize("listed", [{"a", "c"}, np.array(["a", "c"]), pd.Series(["a", "c"]), pa.array(["a", "c"]),
                                    pl.Series(["a", "c"])])
def test_public_keys_as_a_set_array_or_series(listed):
    df = pd.DataFrame({"u": np.arange(30), "k": ["a", "b", "c"] * 10})
    out = _run(df, metrics={"n": dpselect.count()}, public_partitions=listed)
    assert out.frame["k"].tolist() == ["a", "c"]


def test_one_key_given_as_a_str_is_refused_with_advice():
    df = pd.DataFrame({"u": np.arange(30), "k": ["a", "b", "c"] * 10})
    with pytest.raises(TypeError, match=r"wrap a single key in a list, e.g. public_partitions=\['abc'\]"):
        _run(df, metrics={"n": dpselect.count()}, public_partitions="abc")


# ------------------------------------------------------------------ success never depends on the data


def test_a_noise_scale_that_cannot_fit_is_refused_from_the_parameters_before_any_work():
    # L∞ = 2^31 with a sum used to fail 7 in 20 identical calls ("values[i] + noise does not fit").
    df = pd.DataFrame({"u": np.arange(10), "k": "a", "x": 1.0})
    budget = dpselect.Budget(10, 1e-3)
    for _ in range(3):
        with pytest.raises(ValueError, match="noise scale .* above 2\\*\\*56"):
            dpselect.aggregate(df, privacy_unit="u", by="k", metrics={"s": dpselect.sum("x", bounds=(0, 1))},
                               epsilon=1.0, delta=1e-6, max_partitions_contributed=1,
                               max_contributions_per_partition=2**31, budget=budget)
    assert budget.spent[0] == 0


def test_a_uint64_value_above_int64_is_clamped_not_refused():
    df = pd.DataFrame({"u": np.arange(3), "k": "a", "x": np.array([1, 2, 2**64 - 1], dtype=np.uint64)})
    out = _run(df, metrics={"s": dpselect.sum("x", bounds=(0, 10))}, public_partitions=["a"], epsilon=1e3)
    assert abs(float(out.frame["s"].iloc[0]) - 13) < 1
    found = _run(df, metrics={"s": dpselect.sum("x")}, public_partitions=["a"], epsilon=1e3)
    assert found.frame["s"].notna().all()


# ------------------------------------------------------------------ parameters before work


@pytest.mark.parametrize("kwargs, match", [
    # Laplace pinned: at such an epsilon the discrete Gaussian (delta > 0) is still representable.
    (dict(epsilon=1e-30, noise="laplace", strategy="pi_opt"), "noise scale"),
    (dict(epsilon=1e-320, noise="laplace", strategy="pi_opt"), "noise scale"),
    (dict(noise="gaussian", delta=0), "delta = 0"),
    (dict(noise="normal"), "noise must be"),
    (dict(epsilon=10**400), "epsilon"),
    (dict(epsilon=float("inf")), "epsilon"),
    (dict(weights={"n": 10**400}), "weights"),
    (dict(weights={"n": 1e-300}), "weights"),
    (dict(max_contributions_per_partition=2**64), "max_contributions_per_partition"),
    (dict(max_partitions_contributed=2**100), "max_partitions_contributed"),
    (dict(max_partitions_contributed=1.0), "max_partitions_contributed"),
])
def test_parameter_errors_are_value_or_type_errors_raised_before_reading_the_data(kwargs, match):
    class Untouchable:  # any read of the data fails the test
        def __getattr__(self, name):
            raise AssertionError(f"the data was read ({name}) before a parameter error")

    start = time.process_time()
    with pytest.raises((ValueError, TypeError), match=match):
        dpselect.aggregate(Untouchable(), **{**BASE, "metrics": {"n": dpselect.count()}, **kwargs})
    assert time.process_time() - start < 30  # not a timing claim: a guard against minutes of table building


def test_bounds_beyond_the_float_range_or_too_large_to_sum_are_refused_up_front():
    with pytest.raises(ValueError, match="float range"):
        dpselect.sum("x", bounds=(0, 2**1100))
    df = pd.DataFrame({"u": np.arange(10), "k": "a", "x": 1.0})
    with pytest.raises(ValueError, match="too large to release a sum or mean"):
        _run(df, metrics={"s": dpselect.sum("x", bounds=(-1e308, 1e308))}, public_partitions=["a"])


def test_bounds_near_the_limit_release_finite_sums_means_and_intervals():
    df = pd.DataFrame({"u": np.arange(200), "k": "a", "x": np.linspace(-1e296, 1e296, 200)})
    out = _run(df, metrics={"s": dpselect.sum("x", bounds=(-1e297, 1e297)),
                            "m": dpselect.mean("x", bounds=(-1e297, 1e297))},
               public_partitions=["a"], epsilon=10.0, confidence_level=0.9)
    values = out.frame.drop(columns="k").to_numpy(dtype=float)
    assert np.isfinite(values).all()
    assert -1e297 <= out.frame["m"].iloc[0] <= 1e297
    # the mean is not pinned at a bound (it was computed as ldexp(offsets, e) / count)
    assert abs(out.frame["m"].iloc[0]) < 1e297


@pytest.mark.parametrize("bounds", [(np.float64(0), np.int64(10)), (Fraction(0), Fraction(10)),
                                    (Decimal("0"), Decimal("10"))])
def test_bounds_of_any_real_type_are_accepted(bounds):
    df = pd.DataFrame({"u": np.arange(10), "k": "a", "x": 3.0})
    out = _run(df, metrics={"s": dpselect.sum("x", bounds=bounds)}, public_partitions=["a"], epsilon=1e3)
    assert abs(float(out.frame["s"].iloc[0]) - 30) < 1


def test_numpy_integers_are_accepted_for_kappa_and_linf():
    df = pd.DataFrame({"u": np.arange(10), "k": "a"})
    out = _run(df, metrics={"n": dpselect.count()}, public_partitions=["a"],
               max_partitions_contributed=np.int64(2), max_contributions_per_partition=np.uint8(3))
    assert out.guarantee.kappa == 2 and out.guarantee.linf == 3


# ------------------------------------------------------------------ the bounds: required, and said


def test_kappa_and_linf_are_required_with_advice():
    df = pd.DataFrame({"u": np.arange(10), "k": "a"})
    for missing in ("max_partitions_contributed", "max_contributions_per_partition"):
        kwargs = {k: v for k, v in BASE.items() if k != missing}
        with pytest.raises(TypeError, match=f"{missing} .* is required.*publicly known"):
            dpselect.aggregate(df, metrics={"n": dpselect.count()}, **kwargs)


def test_the_data_holder_is_warned_when_bounding_removed_most_rows():
    df = pd.DataFrame({"u": np.repeat(np.arange(50), 5), "k": "a"})
    with pytest.warns(dpselect.aggregation.aggregate.BoundingDroppedMostRows, match="kept 50 of 250 rows"):
        dpselect.aggregate(df, metrics={"n": dpselect.count()}, public_partitions=["a"], rng=_rng(), **BASE)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dpselect.aggregation.aggregate.BoundingDroppedMostRows)  # kept most rows
        warnings.simplefilter("ignore", dpselect.testing.InsecureRNGWarning)
        dpselect.aggregate(df, metrics={"n": dpselect.count()}, public_partitions=["a"], rng=_rng(),
                           **{**BASE, "max_contributions_per_partition": 5})


def test_the_guarantee_says_where_each_metrics_bounds_came_from():
    df = pd.DataFrame({"u": np.arange(100), "k": "a", "x": np.arange(100.0)})
    out = _run(df, metrics={"s": dpselect.sum("x", bounds=(0, 100)), "m": dpselect.mean("x")},
               public_partitions=["a"])
    text = str(out.guarantee)
    assert "m = mean('x', bounds=(0, 100), given with metric 's')" in text
    assert "bounds found privately" not in text


def test_intervals_state_what_they_cover():
    df = pd.DataFrame({"u": np.arange(100), "k": "a"})
    out = _run(df, metrics={"n": dpselect.count()}, public_partitions=["a"], confidence_level=0.9)
    assert "rows kept by contribution bounding" in out.frame.attrs["dpselect_intervals"]
    table = _run(pa.Table.from_pandas(df), metrics={"n": dpselect.count()}, public_partitions=["a"],
                 confidence_level=0.9).frame
    assert b"does not cover what bounding and clamping removed" in table.schema.metadata[b"dpselect.intervals"]


def test_integer_sums_have_integer_interval_ends():
    df = pd.DataFrame({"u": np.arange(1000), "k": "a", "x": np.full(1000, 444, np.int64)})
    out = _run(df, metrics={"s": dpselect.sum("x", bounds=(0, 1000))}, public_partitions=["a"],
               confidence_level=0.95)
    for column in ("s", "s_ci_low", "s_ci_high"):
        value = float(out.frame[column].iloc[0])
        assert value == int(value), (column, value)


def test_delta_zero_advice_names_what_aggregate_takes():
    df = pd.DataFrame({"u": np.arange(10), "k": "a"})
    with pytest.raises(ValueError, match="public_partitions") as err:
        _run(df, metrics={"n": dpselect.count()}, delta=0)
    assert "allow_no_release" not in str(err.value)


@pytest.mark.parametrize("strategy", ["pi_opt", "release", "laplace", pytest.param("gaussian", marks=pytest.mark.slow)])
def test_an_empty_release_says_how_many_users_a_key_needs(strategy):
    df = pd.DataFrame({"u": np.arange(30), "k": np.arange(30) % 3})
    with pytest.warns(dpselect.aggregation.aggregate.NothingReleased, match=r"a key needs [\d,]+ users"):
        out = dpselect.aggregate(df, metrics={"n": dpselect.count()}, strategy=strategy, rng=_rng(),
                                 **{**BASE, "epsilon": 0.1})
    assert len(out.frame) == 0
