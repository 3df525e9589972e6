"""dpselect.aggregate: a DP GROUP BY with one bounding, one budget, metrics, intervals, report."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import dpselect
from dpselect import _bound
from dpselect.aggregation.wide import Wide
from dpselect.testing import InsecureDeterministicRNG

pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

# A budget so large that the counts' discrete Laplace noise is 0 except with probability ~1e-40
# (scale κ·L∞/ε_metric ≤ 0.004 below): counts can then be compared with a reference exactly.
NOISELESS = 1e5


def search_log(seed: int = 0, n: int = 30_000, users: int = 3_000) -> pd.DataFrame:
    gen = np.random.Generator(np.random.PCG64(seed))  # test data only
    return pd.DataFrame({
        "user_id": gen.integers(0, users, n),
        "query": np.array(["maps", "mail", "news", "shop", "vids"])[gen.integers(0, 5, n)],
        "country": np.array(["ch", "de"])[gen.integers(0, 2, n)],
        "amount": np.round(gen.gamma(2.0, 40.0, n), 2),
        "items": gen.integers(1, 9, n),
    })


ALL_KEYS = [(q, c) for q in ["mail", "maps", "news", "shop", "vids"] for c in ["ch", "de"]]
METRICS = {"users": dpselect.count_distinct_units(), "rows": dpselect.count(),
           "spend": dpselect.sum("amount", bounds=(0, 1000)), "avg": dpselect.mean("amount", bounds=(0, 1000))}


def keyed(frame: pd.DataFrame, by=("query", "country")) -> pd.DataFrame:
    return frame.set_index(list(by)).sort_index()


def test_metrics_equal_pandas_when_bounding_keeps_everything_and_noise_is_negligible():
    df = search_log()
    out = dpselect.aggregate(df, privacy_unit="user_id", by=["query", "country"], metrics=METRICS,
                             epsilon=NOISELESS, delta=1e-6, max_partitions_contributed=10,
                             max_contributions_per_partition=10, public_partitions=ALL_KEYS)
    assert out.report().rows_kept == len(df)  # nobody has more than 10 keys or 10 rows in one
    got = keyed(out.frame)
    ref = df.groupby(["query", "country"]).agg(users=("user_id", "nunique"), rows=("amount", "size"),
                                               spend=("amount", "sum"), avg=("amount", "mean")).sort_index()
    np.testing.assert_array_equal(got["users"], ref["users"])
    np.testing.assert_array_equal(got["rows"], ref["rows"])
    # Values are snapped to a grid of 2^(10 - 30) before summing (at most half a step each), and
    # the sum's noise has scale κ·L∞·2^30 steps / ε_metric = 10·10·1024/25000 ≈ 4.1 in value:
    # 25 scales is exceeded with probability e^-25.
    step = 2.0 ** (math.ceil(math.log2(1000)) - 30)
    assert np.all(np.abs(got["spend"] - ref["spend"]) <= ref["rows"] * step / 2 + 25 * 4.1)
    assert np.allclose(got["avg"], ref["avg"], rtol=0, atol=0.05)
    assert out.guarantee.epsilon <= NOISELESS and out.guarantee.delta == 0  # public keys: no selection


def test_a_keys_count_and_sum_come_from_the_same_bounded_rows():
    # Every value is 1, so the sum of a key's kept rows is its count of kept rows: any bounding
    # that chose different rows for the two (as two separate libraries would) breaks equality.
    df = search_log(1).assign(one=1)
    for seed in range(3):
        out = dpselect.aggregate(df, privacy_unit="user_id", by=["query", "country"],
                                 metrics={"rows": dpselect.count(), "total": dpselect.sum("one", bounds=(0, 1)),
                                          "users": dpselect.count_distinct_units()},
                                 epsilon=NOISELESS, delta=1e-6, max_partitions_contributed=2,
                                 max_contributions_per_partition=3, public_partitions=ALL_KEYS,
                                 rng=InsecureDeterministicRNG(seed=seed))
        got = keyed(out.frame)
        np.testing.assert_array_equal(got["total"], got["rows"])
        assert got["users"].sum() <= 2 * df.user_id.nunique()
        assert np.all(got["rows"] <= 3 * got["users"])
        report = out.report()
        assert report.rows_kept == got["rows"].sum() and report.pairs_kept == got["users"].sum()


@pytest.mark.slow
def test_bounding_kernel_keeps_exact_uniform_subsets():
    # One user with rows in 3 partitions, 4 rows in partition 0: with κ = 1 each partition is
    # kept a third of the time; with L∞ = 1 each of partition 0's rows a quarter of the time.
    users = np.zeros(6, dtype=np.uint32)
    parts = np.array([0, 0, 0, 0, 1, 2], dtype=np.uint32)
    values = np.array([1, 2, 4, 8, 100, 1000], dtype=np.int64)
    picks: dict[int, int] = {}
    trials = 6_000
    rng = InsecureDeterministicRNG(seed=3)
    for _ in range(trials):
        users_kept, rows_kept, sums, before, totals = _bound.bound_rows(users, parts, 1, 3, 1, 1, [values],
                                                                         rng._test_state)
        assert users_kept.sum() == 1 and rows_kept.sum() == 1 and before.tolist() if before is not None else True
        total = Wide.from_words(sums[0]).clamped().sum()
        picks[int(total)] = picks.get(int(total), 0) + 1
    # P(partition 0) = 1/3, then each of its 4 rows 1/4: 1/12 each; partitions 1 and 2: 1/3 each.
    expected = {1: trials / 12, 2: trials / 12, 4: trials / 12, 8: trials / 12, 100: trials / 3, 1000: trials / 3}
    assert set(picks) == set(expected)
    chi2 = sum((picks[k] - e) ** 2 / e for k, e in expected.items())
    assert chi2 < 20.5  # χ² with 5 degrees of freedom: P(> 20.5) ≈ 0.001


def test_bounding_kernel_refuses_bad_codes_and_sums_exactly_in_128_bits():
    users = np.array([0, 1], dtype=np.uint32)
    parts = np.array([0, 5], dtype=np.uint32)
    with pytest.raises(ValueError, match="row 1"):
        _bound.bound_rows(users, parts, 2, 5, 1, 1, [], None)
    # Sums that leave int64 are exact (they used to stop the release with an OverflowError).
    huge = np.array([2**62, 2**62, 2**63 - 1, -(2**63)], dtype=np.int64)
    n = huge.size
    lowest = np.full(n, -(2**63), dtype=np.int64)
    out = _bound.bound_rows(np.arange(n, dtype=np.uint32), np.zeros(n, np.uint32), n, 1, 1, 1, [huge, lowest], None)
    assert Wide.from_words(out[2][0]).to_ints() == [2**62 + 2**62 + 2**63 - 1 - 2**63]
    assert Wide.from_words(out[2][1]).to_ints() == [-(2**65)]
    with pytest.raises(ValueError, match="max_contributions_per_partition"):
        _bound.bound_rows(users, np.zeros(2, np.uint32), 2, 1, 1, 0, [], None)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["count", "sum", "mean"])
def test_confidence_intervals_cover_the_bounded_value_at_their_level(kind):
    df = search_log(2, n=6_000, users=6_000)  # one row per user on average: bounding keeps all with κ, L∞ large
    metric = {"count": dpselect.count(), "sum": dpselect.sum("amount", bounds=(0, 400)),
              "mean": dpselect.mean("amount", bounds=(0, 400))}[kind]
    truth = df.assign(amount=df.amount.clip(0, 400)).groupby(["query", "country"])["amount"]
    true = {"count": truth.size(), "sum": truth.sum(), "mean": truth.mean()}[kind].sort_index()
    level, runs, covered, total = 0.9, 60, 0, 0
    for seed in range(runs):
        out = dpselect.aggregate(df, privacy_unit="user_id", by=["query", "country"], metrics={"m": metric},
                                 epsilon=0.5, delta=1e-6, max_partitions_contributed=10,
                                 max_contributions_per_partition=100, public_partitions=ALL_KEYS,
                                 confidence_level=level, rng=InsecureDeterministicRNG(seed=seed))
        got = keyed(out.frame)
        inside = (got["m_ci_low"] <= true + 1e-6) & (true - 1e-6 <= got["m_ci_high"])
        covered += int(inside.sum())
        total += inside.size
    # Clopper-Pearson style margin: 600 intervals at true coverage ≥ 0.9 fall below 0.86 with
    # probability < 0.001.
    assert covered / total >= 0.86


def test_bounds_are_found_privately_when_not_given_and_cover_the_data():
    gen = np.random.Generator(np.random.PCG64(4))
    n = 40_000
    df = pd.DataFrame({"u": np.arange(n), "k": gen.integers(0, 4, n), "x": gen.uniform(3, 900, n)})
    out = dpselect.aggregate(df, privacy_unit="u", by="k", metrics={"s": dpselect.sum("x")}, epsilon=2.0,
                             delta=1e-6, public_partitions=[0, 1, 2, 3], max_partitions_contributed=1, max_contributions_per_partition=1)
    lower, upper = out.bounds["x"]
    assert lower == 2.0 and upper == 1024.0  # the power-of-two bins around [3, 900]
    assert any("APPROX_BOUNDS" in c.what for c in out.guarantee.components)
    # Too little data for any bin to pass: not a failure of the release (that would depend on the
    # data), but NaN for the column's sums, the step's share spent and said.
    few = dpselect.aggregate(df.head(5), privacy_unit="u", by="k", metrics={"s": dpselect.sum("x")}, epsilon=1.0,
                             delta=1e-6, public_partitions=[0, 1, 2, 3], max_partitions_contributed=1,
                             max_contributions_per_partition=1)
    assert few.frame["s"].isna().all() and all(math.isnan(b) for b in few.bounds["x"])
    assert any("no bounds found" in c.what for c in few.guarantee.components)
    assert few.guarantee.epsilon_exact == out.guarantee.epsilon_exact / 2


def test_the_budget_adds_up_and_refuses_an_overspend_before_any_work():
    df = search_log(5, n=3_000)
    budget = dpselect.Budget(1.0, 1e-6)
    dpselect.aggregate(df, privacy_unit="user_id", by="query", metrics={"n": dpselect.count()}, epsilon=0.6,
                       delta=5e-7, budget=budget, max_partitions_contributed=1, max_contributions_per_partition=1)
    with pytest.raises(dpselect.BudgetExceededError, match="overspend"):
        dpselect.aggregate(df, privacy_unit="user_id", by="query", metrics={"n": dpselect.count()}, epsilon=0.6,
                           delta=5e-7, budget=budget, max_partitions_contributed=1, max_contributions_per_partition=1)
    assert budget.spent == (Fraction(3, 5), Fraction(1, 2_000_000))


def test_the_guarantee_composes_every_step_within_the_request():
    df = search_log(6)
    out = dpselect.aggregate(df, privacy_unit="user_id", by=["query", "country"], metrics=METRICS, epsilon=1.0,
                             delta=1e-6, max_partitions_contributed=2, weights={"selection": 2, "spend": 3}, max_contributions_per_partition=1)
    g = out.guarantee
    assert [c.what.split(" ")[0] for c in g.components] == ["selection", "users", "rows", "spend", "avg"]
    assert g.epsilon_exact <= Fraction(1) and g.delta_exact <= Fraction(1, 10**6)
    shares = [c.epsilon_exact for c in g.components]
    # avg is the released sum over the released count: no share, so the weights are 2 + 1 + 1 + 3.
    assert shares[0] == pytest.approx(2 / 7, rel=1e-9) and shares[3] == pytest.approx(3 / 7, rel=1e-9)
    assert shares[4] == 0
    assert g.is_dp and "basic sequential composition" in str(g)
    assert out.frame.attrs["dpselect_guarantee"] == str(g)
    table = dpselect.aggregate(pa.Table.from_pandas(df), privacy_unit="user_id", by="query",
                               metrics={"n": dpselect.count()}, epsilon=1.0, delta=1e-6,
                               rng=InsecureDeterministicRNG(seed=1), max_partitions_contributed=1, max_contributions_per_partition=1)
    text = table.frame.schema.metadata[b"dpselect.guarantee"].decode()
    assert text.startswith("NOT DP") and not table.guarantee.is_dp
    assert table.guarantee.as_dict()["differentially_private"] is False


def test_the_report_counts_what_bounding_and_clamping_removed():
    df = pd.DataFrame({"u": [1, 1, 1, 2, 2, 3], "k": ["a", "a", "b", "a", "b", "c"],
                       "x": [5.0, 50.0, 1.0, 2.0, 3.0, -4.0]})
    out = dpselect.aggregate(df, privacy_unit="u", by="k", metrics={"s": dpselect.sum("x", bounds=(0, 10))},
                             epsilon=1.0, delta=1e-6, max_partitions_contributed=1,
                             max_contributions_per_partition=1, public_partitions=["a", "b", "c"])
    r = out.report()
    # Users 1 and 2 keep one of their two keys and one row there; user 3 keeps its one row.
    assert (r.rows, r.rows_kept, r.pairs, r.pairs_kept, r.users) == (6, 3, 5, 3, 3)
    assert r.partitions == 3 and [b.partitions for b in r.buckets][:2] == [1, 2]
    clamp = r.clamping["x"]
    assert clamp.values == 3 and clamp.below + clamp.above <= 2  # -4 and 50 are clamped if kept
    assert "NOT differentially private" in str(r) and r.as_dict()["rows_kept"] == 3
    # Five rows per user in one key, one kept: bounding removed most rows, and the report says so.
    many = pd.DataFrame({"u": np.repeat(np.arange(50), 5), "k": "a", "x": 1.0})
    r = dpselect.aggregate(many, privacy_unit="u", by="k", metrics={"n": dpselect.count()}, epsilon=1.0,
                           delta=1e-6, public_partitions=["a"], max_partitions_contributed=1, max_contributions_per_partition=1).report()
    assert r.rows_kept == 50 and any("bounding removed 200 of 250 rows (80%)" in w for w in r.warnings)


@pytest.mark.parametrize("bad, error, message", [
    (dict(metrics={"s": dpselect.sum("missing", bounds=(0, 1))}), ValueError, "missing"),
    (dict(metrics={"s": dpselect.sum("query", bounds=(0, 1))}), TypeError, "must hold integers or floats"),
    (dict(metrics={}), TypeError, "non-empty dict"),
    (dict(metrics={"query": dpselect.count()}), ValueError, "also the by column 'query'"),
    (dict(metrics={"amount": dpselect.sum("amount", bounds=(0, 1))}), ValueError, "has the name of metric 'amount'"),
    (dict(metrics={"s": dpselect.count()}, weights={"nope": 1}), ValueError, "unknown step"),
    (dict(metrics={"s": dpselect.count()}, max_contributions_per_partition=0), ValueError,
     "max_contributions_per_partition"),
    (dict(metrics={"s": dpselect.count()}, confidence_level=1.5), ValueError, "confidence_level"),
    (dict(metrics={"s": dpselect.count()}, epsilon=-1.0), ValueError, "epsilon"),
])
def test_bad_inputs_name_the_parameter(bad, error, message):
    df = search_log(7, n=500)
    kwargs = dict(privacy_unit="user_id", by="query", epsilon=1.0, delta=1e-6, max_partitions_contributed=1,
                  max_contributions_per_partition=1)
    kwargs.update(bad)
    with pytest.raises(error, match=message):
        dpselect.aggregate(df, **kwargs)


def test_bad_values_and_bounds_are_refused():
    with pytest.raises(ValueError, match="inverted"):
        dpselect.sum("x", bounds=(5, 1))
    with pytest.raises(ValueError, match="finite"):
        dpselect.mean("x", bounds=(0, math.inf))
    df = pd.DataFrame({"u": [1, 2], "k": ["a", "b"], "x": [1.0, math.inf]})
    with pytest.raises(ValueError, match="NaN or infinite"):
        dpselect.aggregate(df, privacy_unit="u", by="k", metrics={"s": dpselect.sum("x", bounds=(0, 1))},
                           epsilon=1.0, delta=1e-6, max_partitions_contributed=1, max_contributions_per_partition=1)
    table = pa.table({"u": [1, 2], "k": ["a", "b"], "x": [1.0, math.nan]})
    with pytest.raises(ValueError, match="NaN or infinite"):
        dpselect.aggregate(table, privacy_unit="u", by="k", metrics={"s": dpselect.sum("x", bounds=(0, 1))},
                           epsilon=1.0, delta=1e-6, max_partitions_contributed=1, max_contributions_per_partition=1)
    df = pd.DataFrame({"u": [1, 2], "k": ["a", "b"], "x": [1.0, math.nan]})  # pandas' NaN becomes a null
    with pytest.raises(ValueError, match="null"):
        dpselect.aggregate(df, privacy_unit="u", by="k", metrics={"s": dpselect.sum("x", bounds=(0, 1))},
                           epsilon=1.0, delta=1e-6, max_partitions_contributed=1, max_contributions_per_partition=1)
    df = pd.DataFrame({"u": [1, 2], "k": ["a", "b"], "x": pd.array([1, None], dtype="Int64")})
    with pytest.raises(ValueError, match="null value"):
        dpselect.aggregate(df, privacy_unit="u", by="k", metrics={"s": dpselect.sum("x", bounds=(0, 1))},
                           epsilon=1.0, delta=1e-6, max_partitions_contributed=1, max_contributions_per_partition=1)
    with pytest.raises(ValueError, match="two different bounds"):
        dpselect.aggregate(df, privacy_unit="u", by="k", metrics={"s": dpselect.sum("x", bounds=(0, 1)),
                                                                  "m": dpselect.mean("x", bounds=(0, 2))},
                           epsilon=1.0, delta=1e-6, max_partitions_contributed=1, max_contributions_per_partition=1)


def test_polars_and_arrow_inputs_give_their_own_types():
    pl = pytest.importorskip("polars")
    df = search_log(8, n=5_000)
    for data in (pl.from_pandas(df), pa.Table.from_pandas(df, preserve_index=False)):
        out = dpselect.aggregate(data, privacy_unit="user_id", by="query", metrics={"n": dpselect.count()},
                                 epsilon=NOISELESS, delta=1e-6, public_partitions=["mail", "maps"], max_partitions_contributed=1, max_contributions_per_partition=1)
        assert type(out.frame).__module__.split(".")[0] == type(data).__module__.split(".")[0]
        frame, guarantee = out
        assert guarantee is out.guarantee


def test_select_partitions_charges_a_budget_reports_and_gives_count_intervals():
    df = search_log(9, n=20_000, users=20_000)
    budget = dpselect.Budget(1.5, 1e-5)
    out, report = dpselect.select_partitions(df, privacy_unit="user_id", by=["query", "country"], epsilon=1.0,
                                             delta=1e-5, counts=True, confidence_level=0.9, budget=budget,
                                             report=True)
    assert budget.spent == (Fraction(1), Fraction(1, 10**5))
    with pytest.raises(dpselect.BudgetExceededError):
        dpselect.select_partitions(df, privacy_unit="user_id", by="query", epsilon=1.0, delta=1e-6, budget=budget)
    assert list(out.columns[-3:]) == ["noisy_count", "noisy_count_ci_low", "noisy_count_ci_high"]
    assert np.all(out["noisy_count_ci_low"] < out["noisy_count"]) and np.all(out["noisy_count"] < out["noisy_count_ci_high"])
    exact = df.groupby(["query", "country"])["user_id"].nunique()
    assert report.candidates == exact.size and report.released == len(out)
    assert report.pairs == len(df.drop_duplicates(["user_id", "query", "country"]))
    assert report.pairs_kept == report.users == df.user_id.nunique()  # κ = 1: one key per user
    assert sum(b.partitions for b in report.buckets) == exact.size
    with pytest.raises(ValueError, match="confidence_level needs counts=True"):
        dpselect.select_partitions(df, privacy_unit="user_id", by="query", epsilon=1.0, delta=1e-5,
                                   strategy="pi_opt", confidence_level=0.9)


@pytest.mark.slow
def test_tsgd_count_intervals_cover_the_bounded_count():
    df = search_log(10, n=5_000, users=5_000)  # one row per user on average: κ = 1 keeps nearly all
    true = df.drop_duplicates(["user_id", "query"]).groupby("query")["user_id"].size()
    covered = total = 0
    for seed in range(40):
        out = dpselect.select_partitions(df, privacy_unit="user_id", by="query", epsilon=0.5, delta=1e-5,
                                         max_partitions_contributed=5, counts=True, confidence_level=0.8,
                                         public_partitions=sorted(true.index), rng=InsecureDeterministicRNG(seed=seed))
        got = out.set_index("query")
        covered += int(((got["noisy_count_ci_low"] <= true) & (true <= got["noisy_count_ci_high"])).sum())
        total += len(got)
    assert covered / total >= 0.74  # 200 intervals at coverage ≥ 0.8: below 0.74 with probability < 0.01


def test_bounds_found_per_partition_follow_each_partitions_own_range():
    gen = np.random.Generator(np.random.PCG64(11))
    n = 60_000
    small = pd.DataFrame({"u": np.arange(n), "k": "small", "x": gen.uniform(1, 3, n)})
    large = pd.DataFrame({"u": np.arange(n, 2 * n), "k": "large", "x": gen.uniform(1000, 3000, n)})
    tiny = pd.DataFrame({"u": [2 * n], "k": ["tiny"], "x": [5.0]})
    df = pd.concat([small, large, tiny], ignore_index=True)
    out = dpselect.aggregate(df, privacy_unit="u", by="k", metrics={"m": dpselect.mean("x"), "s": dpselect.sum("x")},
                             epsilon=20.0, delta=1e-6, public_partitions=["large", "small", "tiny"],
                             bounds_scope="partition", max_partitions_contributed=1, max_contributions_per_partition=1)
    got = out.frame.set_index("k")
    # Each partition's mean is near its own data's, which one dataset-wide range could not give
    # both at this precision.
    assert abs(got.loc["small", "m"] - small.x.mean()) < 0.05
    assert abs(got.loc["large", "m"] - large.x.mean()) < 20
    assert math.isnan(got.loc["tiny", "m"]) and math.isnan(got.loc["tiny", "s"])  # one value: no bin passes
    assert any("per partition" in c.what for c in out.guarantee.components)
    assert out.guarantee.epsilon_exact <= 20
    with pytest.raises(ValueError, match="bounds_scope"):
        dpselect.aggregate(df, privacy_unit="u", by="k", metrics={"m": dpselect.mean("x")}, epsilon=1.0,
                           delta=1e-6, bounds_scope="key", max_partitions_contributed=1, max_contributions_per_partition=1)


def test_null_privacy_units_are_refused_or_dropped_with_a_warning():
    df = pd.DataFrame({"u": pd.array([1, None, 2], dtype="Int64"), "k": ["a", "a", "b"], "x": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match="null"):
        dpselect.aggregate(df, privacy_unit="u", by="k", metrics={"n": dpselect.count()}, epsilon=1.0, delta=1e-6, max_partitions_contributed=1, max_contributions_per_partition=1)
    with pytest.warns(dpselect.ingest.rows.NullPrivacyUnitsDropped, match="dropped 1 row"):
        out = dpselect.aggregate(df, privacy_unit="u", by="k", metrics={"n": dpselect.count()}, epsilon=NOISELESS,
                                 delta=1e-6, public_partitions=["a", "b"], null_privacy_units="drop", max_partitions_contributed=1, max_contributions_per_partition=1)
    assert out.report().rows == 2 and out.report().null_unit_rows == 1


@pytest.mark.parametrize("strategy", ["public", "mixed", "dp_sips", "nope"])  # "auto" picks a count-based one
def test_only_count_based_selections_are_accepted(strategy):
    with pytest.raises(ValueError, match="strategy must be one of pi_opt, release, laplace, gaussian"):
        dpselect.aggregate(search_log(12, n=200), privacy_unit="user_id", by="query",
                           metrics={"n": dpselect.count()}, epsilon=1.0, delta=1e-6, strategy=strategy, max_partitions_contributed=1, max_contributions_per_partition=1)
