"""The count_distinct metric of dpselect.aggregate (docs/privacy/count-distinct.md): exact
distinct counts of the kept rows, the per-unit cap, the sensitivity min(cap, L∞) checked by
brute force over neighbours, the noise's law checked statistically (a broken copy caught), the
accounting, the CLI's count_distinct:COL[:M], and bad inputs refused."""
from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")

import dpselect
from dpselect import cli
from dpselect.aggregation import distinct
from dpselect.aggregation.distinct import DistinctCounts, distinct_sensitivity, value_codes
from dpselect.aggregation.noise import DiscreteLaplaceNoise
from dpselect.aggregation.plan import plan_aggregate
from dpselect.testing import InsecureDeterministicRNG

warnings.filterwarnings("ignore", category=dpselect.DPSelectWarning)


def release(data, metrics, epsilon=2**20, kappa=4, linf=8, keys=None, **kw):
    return dpselect.aggregate(data, privacy_unit="u", by="k", metrics=metrics, epsilon=epsilon, delta=1e-6,
                              max_partitions_contributed=kappa, max_contributions_per_partition=linf,
                              public_partitions=keys, noise="laplace", rng=InsecureDeterministicRNG(seed=3), **kw)


def test_exact_distinct_counts_of_the_kept_rows_nulls_ignored():
    data = pd.DataFrame({"u": [1, 1, 2, 3, 3, 4, 5], "k": ["a", "a", "a", "b", "b", "b", "b"],
                         "c": ["x", "y", "x", None, "z", "z", "-0"]})
    f = release(data, {"d": dpselect.count_distinct("c")}, keys=["a", "b", "none"]).frame.set_index("k")["d"]
    assert f.to_dict() == {"a": 2, "b": 2, "none": 0}  # at ε = 2^20 the noise is 0 with overwhelming probability


def test_float_values_equal_as_numbers_are_one_value():
    data = pa.table({"u": [1, 2, 3, 4], "k": ["a"] * 4, "c": [0.0, -0.0, 1.5, 1.5]})
    assert int(release(data, {"d": dpselect.count_distinct("c")}, keys=["a"]).frame.to_pandas()["d"][0]) == 2


def test_matches_pandas_nunique_when_bounding_keeps_every_row():
    rng = np.random.default_rng(1)  # test data only
    n = 3000
    data = pd.DataFrame({"u": np.arange(n), "k": rng.integers(0, 5, n), "c": rng.integers(0, 400, n)})
    f = release(data, {"d": dpselect.count_distinct("c")}, kappa=1, linf=1).frame.set_index("k")["d"]
    assert (f == data.groupby("k")["c"].nunique()[f.index]).all()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 6)), min_size=1, max_size=60),
       st.integers(0, 5))
def test_removing_one_unit_changes_each_key_by_at_most_its_rows(rows, victim):
    """Without a cap: the count of distinct values is a function of the kept (key, value) pairs, so
    removing a unit's rows changes a key's count by at most that unit's rows in it (≤ L∞)."""
    u, p, v = (np.array(x, dtype=np.int64) for x in zip(*rows))
    full, _ = DistinctCounts.of(p, v, 4)
    keep = u != victim
    without, _ = DistinctCounts.of(p[keep], v[keep], 4)
    own = np.bincount(p[~keep], minlength=4)
    assert np.all(np.abs(full - without) <= own)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 9)), min_size=1, max_size=80),
       st.integers(1, 3), st.integers(0, 2**32))
def test_the_cap_keeps_at_most_cap_values_per_unit_and_key(rows, cap, seed):
    u, p, v = (np.array(x, dtype=np.int64) for x in zip(*rows))
    counts, dropped = DistinctCounts.of(p, v, 4, users=u, cap=cap, rng=InsecureDeterministicRNG(seed=seed))
    triples = {(a, b, c) for a, b, c in rows}
    per_pair: dict[tuple[int, int], int] = {}
    for a, b, _ in triples:
        per_pair[(a, b)] = per_pair.get((a, b), 0) + 1
    assert dropped == sum(max(0, n - cap) for n in per_pair.values())
    full, _ = DistinctCounts.of(p, v, 4)
    assert np.all(counts <= full)
    # each key keeps at least the values that some unit kept: at least min(cap, its distinct values) of one unit
    for key in range(4):
        best = max((min(cap, n) for (a, b), n in per_pair.items() if b == key), default=0)
        assert counts[key] >= best


def test_sensitivity_is_min_of_cap_and_linf_and_in_the_noise():
    assert distinct_sensitivity(dpselect.count_distinct("c"), 5) == 5
    assert distinct_sensitivity(dpselect.count_distinct("c", max_values_per_unit=2), 5) == 2
    assert distinct_sensitivity(dpselect.count_distinct("c", max_values_per_unit=9), 5) == 5
    p = plan_aggregate(privacy_unit="u", by="k", metrics={"d": dpselect.count_distinct("c", max_values_per_unit=2),
                                                          "n": dpselect.count()},
                       epsilon=Fraction(1, 3), delta=0, max_partitions_contributed=3, max_contributions_per_partition=5,
                       public=True, noise="laplace")
    assert p.shares["d"][0] == Fraction(1, 6) and p.distinct_columns == ["c"] and p.value_columns == []
    data = pd.DataFrame({"u": [1, 2], "k": ["a", "a"], "c": ["x", "y"]})
    res = dpselect.aggregate(data, privacy_unit="u", by="k", epsilon=Fraction(1, 3), delta=0,
                             metrics={"d": dpselect.count_distinct("c", max_values_per_unit=2), "n": dpselect.count()},
                             max_partitions_contributed=3, max_contributions_per_partition=5, public_partitions=["a"],
                             noise="laplace", rng=InsecureDeterministicRNG(seed=4))
    comp = next(c for c in res.guarantee.components if c.what.startswith("d ="))
    assert comp.epsilon_exact == Fraction(1, 6) and "sensitivity 2 per key" in comp.statement
    assert sum(c.epsilon_exact for c in res.guarantee.components) == Fraction(1, 3)


def _noise_sd_ratio(seed: int, n_keys: int = 4000) -> float:
    """The released counts' spread around the exact ones over the exact discrete Laplace sd at
    sensitivity L∞ = 4, κ = 1, ε = 1."""
    data = pd.DataFrame({"u": np.arange(n_keys), "k": np.arange(n_keys), "c": np.zeros(n_keys, int)})
    res = dpselect.aggregate(data, privacy_unit="u", by="k", epsilon=1, delta=0,
                             metrics={"d": dpselect.count_distinct("c")}, max_partitions_contributed=1,
                             max_contributions_per_partition=4, public_partitions=list(range(n_keys)),
                             rng=InsecureDeterministicRNG(seed=seed))
    noise = res.frame["d"].to_numpy() - 1
    return float(np.std(noise) / math.sqrt(DiscreteLaplaceNoise.for_epsilon(1, sensitivity=4).variance()))


def test_noise_has_the_exact_laplace_sd_and_a_broken_copy_is_caught(monkeypatch):
    # 4000 draws: the sd's relative standard error is about 3.5%; ±15% is > 4 se.
    assert abs(_noise_sd_ratio(21) - 1) < 0.15
    monkeypatch.setattr(distinct, "distinct_sensitivity", lambda metric, linf: linf // 2)
    assert abs(_noise_sd_ratio(22) - 0.5) < 0.1  # half the sensitivity: caught


def test_interval_coverage():
    n_keys = 2000
    data = pd.DataFrame({"u": np.arange(n_keys), "k": np.arange(n_keys), "c": np.arange(n_keys) % 3})
    res = dpselect.aggregate(data, privacy_unit="u", by="k", epsilon=1, delta=0, confidence_level=0.8,
                             metrics={"d": dpselect.count_distinct("c")}, max_partitions_contributed=1,
                             max_contributions_per_partition=4, public_partitions=list(range(n_keys)),
                             rng=InsecureDeterministicRNG(seed=8))
    f = res.frame
    inside = ((f["d_ci_low"] <= 1) & (1 <= f["d_ci_high"])).mean()
    assert inside >= 0.8 - 3 * math.sqrt(0.16 / n_keys)


@pytest.mark.parametrize("make,match,exc", [
    (lambda: dpselect.count_distinct(""), "column", TypeError),
    (lambda: dpselect.count_distinct("c", max_values_per_unit=0), "max_values_per_unit", ValueError),
    (lambda: dpselect.count_distinct("c", max_values_per_unit=2.0), "max_values_per_unit", TypeError),
    (lambda: dpselect.count_distinct("c", max_values_per_unit=True), "max_values_per_unit", TypeError),
    (lambda: dpselect.Metric("count_distinct", "c", (0, 1)), "no bounds", TypeError),
])
def test_bad_parameters_are_refused_naming_them(make, match, exc):
    with pytest.raises(exc, match=match):
        make()


def test_counting_the_privacy_unit_is_refused_with_advice():
    with pytest.raises(ValueError, match="count_distinct_units"):
        plan_aggregate(privacy_unit="u", by="k", metrics={"d": dpselect.count_distinct("u")}, epsilon=1, delta=1e-6,
                       max_partitions_contributed=1, max_contributions_per_partition=1, public=True)


def test_uncomparable_column_type_is_refused_naming_the_column():
    table = pa.table({"u": [1], "k": ["a"], "c": pa.array([[1, 2]])})
    with pytest.raises(TypeError, match="count_distinct column 'c'"):
        value_codes(table, "c")


def test_cli_count_distinct_and_variance(tmp_path, capsys):
    path = tmp_path / "in.csv"
    pd.DataFrame({"user": np.arange(300), "key": ["a", "b", "c"] * 100, "c": np.arange(300) % 7,
                  "delay": np.arange(300) % 50}).to_csv(path, index=False)
    out = tmp_path / "out.csv"
    code = cli.main(["aggregate", str(path), "--privacy-unit", "user", "--by", "key", "--epsilon", "1000", "--delta",
                     "1e-6", "--max-partitions-contributed", "1", "--max-contributions-per-partition", "1",
                     "--metric", "count_distinct:c", "--metric", "cd=count_distinct:c:1",
                     "--metric", "var=variance:delay:-60:300", "--metric", "stddev:delay", "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    f = pd.read_csv(out).set_index("key")
    assert list(f.columns) == ["count_distinct_c", "cd", "var", "stddev_delay"]
    assert (f["count_distinct_c"] == 7).all()


@pytest.mark.parametrize("spec,match", [("count_distinct:", "needs a column"), ("count_distinct:c:0", "M = '0'"),
                                        ("count_distinct:c:1:2", "count_distinct:COL:M"),
                                        ("count_distinct:user", "--metric users")])
def test_cli_bad_count_distinct_names_the_flag(tmp_path, capsys, spec, match):
    path = tmp_path / "in.csv"
    pd.DataFrame({"user": [1], "key": ["a"], "c": [1]}).to_csv(path, index=False)
    code = cli.main(["aggregate", str(path), "--privacy-unit", "user", "--by", "key", "--epsilon", "1", "--delta",
                     "1e-6", "--max-partitions-contributed", "1", "--max-contributions-per-partition", "1",
                     "--metric", spec, "-o", str(tmp_path / "o.csv")])
    err = capsys.readouterr().err
    assert code != 0 and match in err and "Traceback" not in err


def test_the_report_counts_what_the_cap_left_out():
    data = pd.DataFrame({"u": [1, 1, 1, 2], "k": ["a"] * 4, "c": ["x", "y", "z", "x"]})
    res = release(data, {"d": dpselect.count_distinct("c", max_values_per_unit=1)}, keys=["a"])
    report = res.report()
    assert report.distinct_capped == {"d": 2}
    assert "left out 2 (user, key, value)" in str(report)
    assert report.as_dict()["count_distinct_values_left_out_by_max_values_per_unit"] == {"d": 2}
    assert release(data, {"d": dpselect.count_distinct("c")}, keys=["a"]).report().distinct_capped == {}
