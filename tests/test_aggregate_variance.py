"""The variance and stddev metrics of dpselect.aggregate (docs/privacy/variance.md): exact
accounting (sensitivities, shares, the composed guarantee, nothing spent twice when released
counts, sums and means are reused), the noise's law and the intervals' coverage checked
statistically, a deliberately broken copy caught, exact squares, and bad inputs refused."""
from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pd = pytest.importorskip("pandas")

import dpselect
from dpselect.aggregation import spread
from dpselect.aggregation.grid import Grid
from dpselect.aggregation.metric_noise import PartitionGrids, Released
from dpselect.aggregation.noise import DiscreteLaplaceNoise
from dpselect.aggregation.noise_choice import MetricNoise
from dpselect.aggregation.plan import plan_aggregate
from dpselect.aggregation.spread import (SpreadSource, noisy_spread, spread_parts, spread_sources, square_shift,
                                         square_sums, squared_offsets)
from dpselect.aggregation.wide import Wide
from dpselect.testing import InsecureDeterministicRNG

warnings.filterwarnings("ignore", category=dpselect.DPSelectWarning)


def plan(metrics, epsilon=1, **kw):
    params = dict(privacy_unit="u", by="k", metrics=metrics, epsilon=epsilon, delta=1e-6,
                  max_partitions_contributed=2, max_contributions_per_partition=3, public=True, noise="laplace")
    params.update(kw)
    return plan_aggregate(**params)


def one_row_each(values_by_key: dict[str, list[int]]) -> pd.DataFrame:
    """One row per user: with κ = L∞ = 1 bounding keeps every row."""
    rows = [(f"{k}-{i}", k, v) for k, vals in values_by_key.items() for i, v in enumerate(vals)]
    return pd.DataFrame(rows, columns=["u", "k", "x"])


# ------------------------------------------------------------------ exact accounting

def test_sensitivities_of_the_three_sums_are_googles_bounds_on_the_grid():
    g = Grid.for_bounds(-60, 300)
    mid = (g.lower_units + g.upper_units) // 2
    reach = max(g.upper_units - mid, mid - g.lower_units)
    t = square_shift(reach)
    assert (reach * reach) >> t < 2**spread.SQUARE_BITS <= (reach * reach) >> max(t - 1, 0) or t == 0
    q_max = (reach * reach + (1 << t >> 1)) >> t
    src = SpreadSource(None, None, None, None)
    parts = spread_parts(src, 3, reach).parts
    third = Fraction(1, 3)
    assert parts == ((third, 3 * q_max), (third, 3 * reach), (third, 3))
    # In values: L∞·((hi − lo)/2)² up to the grid's rounding (2^-30 relative).
    exact = Fraction(3) * Fraction(360, 2) ** 2
    in_values = Fraction(3 * q_max) * Fraction(2) ** (2 * g.exponent + t)
    assert abs(in_values - exact) / exact < Fraction(1, 2**29)


def test_brute_force_sensitivity_of_the_squares_and_a_broken_copy_is_caught(monkeypatch):
    """Over every unit value of small grids, one row adds at most Q to S2: Q is the max of q, so
    L∞ rows add at most L∞·Q, and spread_parts says exactly that. A copy with half of it fails."""
    def check() -> bool:
        ok = True
        for lo, hi, bits in [(0, 1000, 10), (-7, 3, 4), (-60, 300, 12), (0, 1, 3), (-5, 5, 31)]:
            g = Grid.for_bounds(lo, hi, precision_bits=bits)
            mid = (g.lower_units + g.upper_units) // 2
            reach = max(g.upper_units - mid, mid - g.lower_units, 1)
            t = square_shift(reach)
            units = np.arange(g.lower_units, g.upper_units + 1, dtype=np.int64) if g.upper_units - g.lower_units < 10**6 \
                else np.array([g.lower_units, mid, g.upper_units], dtype=np.int64)
            largest = int(squared_offsets(units, mid, t).max())
            sens = spread_parts(SpreadSource(None, None, None, None), 2, reach).parts[0][1]
            ok &= sens >= 2 * largest
        return ok

    assert check()
    monkeypatch.setattr(spread, "_largest_square", lambda widest: (widest * widest >> square_shift(widest)) // 2)
    assert not check()


@pytest.mark.parametrize("extra,own", [({}, 3), ({"n": dpselect.count()}, 2),
                                       ({"n": dpselect.count(), "m": dpselect.mean("x", (0, 10))}, 1),
                                       ({"m": dpselect.mean("x", (0, 10))}, 1),
                                       ({"n": dpselect.count(), "s": dpselect.sum("x", (0, 10))}, 1),
                                       ({"s": dpselect.sum("x", (0, 10))}, 3)])
def test_reuse_spends_nothing_twice_and_the_guarantee_adds_up_exactly(extra, own):
    metrics = {**extra, "v": dpselect.variance("x", (0, 10)), "sd": dpselect.stddev("x")}
    p = plan(metrics, epsilon=Fraction(3, 2))
    assert p.spreads["v"].own_parts == own
    assert p.spreads["sd"].twin == "v" and "sd" not in p.shares  # the stddev is the variance's square root
    spenders = [n for n in metrics if n != "sd"]
    assert set(p.shares) == set(spenders)
    assert sum(p.shares[n][0] for n in spenders) == Fraction(3, 2)
    data = one_row_each({"a": list(range(11)) * 4, "b": [5] * 30})
    res = dpselect.aggregate(data, privacy_unit="u", by="k", metrics=metrics, epsilon=Fraction(3, 2), delta=1e-6,
                             max_partitions_contributed=1, max_contributions_per_partition=1, public_partitions=["a", "b"],
                             noise="laplace", rng=InsecureDeterministicRNG(seed=1))
    comps = {c.what.split(" = ")[0]: c for c in res.guarantee.components}
    assert comps["sd"].epsilon_exact == 0
    assert comps["v"].epsilon_exact == p.shares["v"][0]  # its parts add up to its share, no more
    assert sum(c.epsilon_exact for c in res.guarantee.components) == Fraction(3, 2)


def test_weights_naming_the_derived_stddev_is_refused():
    with pytest.raises(ValueError, match="'sd'.*post-processing"):
        plan({"v": dpselect.variance("x", (0, 1)), "sd": dpselect.stddev("x")}, weights={"sd": 2})


def test_gaussian_variance_joins_the_zcdp_group_with_its_rho_share():
    metrics = {"n": dpselect.count(), "v": dpselect.variance("x", (0, 10))}
    p = plan(metrics, noise="gaussian")
    data = one_row_each({"a": list(range(11)) * 4})
    res = dpselect.aggregate(data, privacy_unit="u", by="k", metrics=metrics, epsilon=1, delta=1e-6,
                             max_partitions_contributed=2, max_contributions_per_partition=3, public_partitions=["a"],
                             noise="gaussian", rng=InsecureDeterministicRNG(seed=2))
    comps = {c.what.split(" = ")[0]: c for c in res.guarantee.components}
    noise = p.metric_noise(2, 3)["v"]
    # two parts (squares, offsets) of half the share each; each sampler's σ² is rounded up, so its ρ down
    assert noise.rho * Fraction(999, 1000) < comps["v"].rho <= noise.rho
    assert comps["n"].rho + comps["v"].rho <= p.gaussian.rho


# ------------------------------------------------------------------ exact squares

@settings(max_examples=200, deadline=None)
@given(st.integers(1, 31), st.data())
def test_squared_offsets_are_exact_round_half_up(bits, data):
    reach = data.draw(st.integers(1, 2**bits))
    mid = data.draw(st.integers(-2**bits, 2**bits))
    d = data.draw(st.lists(st.integers(-reach, reach), min_size=1, max_size=20))
    units = np.array([mid + x for x in d], dtype=np.int64)
    t = square_shift(reach)
    got = squared_offsets(units, mid, t).tolist()
    want = [(x * x + (1 << t >> 1)) >> t for x in d]
    assert got == want
    assert max(want) < 2**spread.SQUARE_BITS + 1


def test_square_sums_are_exact_in_128_bits():
    rng = np.random.default_rng(3)  # test data only
    q = rng.integers(0, 2**31 + 1, 200_000).astype(np.int64)
    codes = rng.integers(0, 7, q.size).astype(np.intp)
    got = square_sums(q, codes, 9).to_ints()
    want = [int(q[codes == c].astype(object).sum()) if (codes == c).any() else 0 for c in range(9)]
    assert got == want


def test_precision_bits_whose_squares_overflow_are_refused_from_the_parameters():
    with pytest.raises(ValueError, match="precision_bits <= 31"):
        plan({"v": dpselect.variance("x", (0, 1))}, precision_bits=32)
    plan({"v": dpselect.variance("x", (-1, 1))}, precision_bits=31)  # the largest that fits


# ------------------------------------------------------------------ the noise's law (statistical)

def _s2_noise_sd_ratio(seed: int, n_keys: int = 20_000) -> float:
    """Empirical sd of the noise on S2 over its exact sd: the variance reuses a released mean and
    count (fixed here), so its only noise is S2's, recovered as (var·N + m1²·N)·2^-t − S2."""
    g = Grid.for_bounds(0, 1024, precision_bits=10)
    assert g.exponent == 0
    grids = PartitionGrids.of(g, n_keys)
    n = 10**6
    rows = np.full(n_keys, n, np.int64)
    s2 = np.full(n_keys, 10_000 * n, np.int64)  # Σd² with mean offset 0: variance 10000
    noise_plan = MetricNoise("laplace", Fraction(1), None, 1, 1)
    count_noise = DiscreteLaplaceNoise.for_epsilon(1, sensitivity=1)
    offsets = Released(np.zeros(n_keys, np.int64), count_noise, Released(rows, count_noise))
    src = SpreadSource(None, "m", None, None)
    var, *_ = noisy_spread("v", dpselect.variance("x", (0, 1024)), noise_plan, src, rows, Wide.zeros(n_keys),
                           Wide.from_int64(s2), square_shift(512), grids, None, InsecureDeterministicRNG(seed=seed),
                           offsets=offsets)
    drawn = np.rint(var * n) - s2
    expected = DiscreteLaplaceNoise.for_epsilon(1, sensitivity=512 * 512).variance()
    return float(np.std(drawn) / math.sqrt(expected))


def test_the_squares_noise_has_the_exact_laplace_sd_and_a_broken_copy_is_caught(monkeypatch):
    # 20000 draws: the sd's relative standard error is about 1.6% (Laplace kurtosis 6): ±8% is > 5 se.
    assert abs(_s2_noise_sd_ratio(seed=11) - 1) < 0.08
    monkeypatch.setattr(spread, "_largest_square", lambda widest: (widest * widest) // 2)
    assert abs(_s2_noise_sd_ratio(seed=12) - 0.5) < 0.05  # half the sensitivity: caught


def test_interval_coverage_of_variance_and_stddev():
    """400 keys of 60 users each, one row each (nothing dropped): the 90% intervals must hold the
    exact population variance of the clamped rows in at least 90% of keys (minus 3 se)."""
    rng = np.random.default_rng(5)  # test data only
    keys = {f"k{i}": [int(v) for v in rng.integers(0, 30, 60)] + [40] for i in range(400)}  # 40 clamped to 30
    data = one_row_each(keys)
    res = dpselect.aggregate(data, privacy_unit="u", by="k", epsilon=2, delta=1e-6,
                             metrics={"v": dpselect.variance("x", (0, 30)), "sd": dpselect.stddev("x")},
                             max_partitions_contributed=1, max_contributions_per_partition=1,
                             public_partitions=sorted(keys), confidence_level=0.9,
                             rng=InsecureDeterministicRNG(seed=6))
    f = res.frame.set_index("k")
    truth = pd.Series({k: float(np.var(np.clip(v, 0, 30))) for k, v in keys.items()})[f.index]
    inside = (f["v_ci_low"] <= truth) & (truth <= f["v_ci_high"])
    assert inside.mean() >= 0.9 - 3 * math.sqrt(0.09 / 400)
    assert ((f["sd_ci_low"] <= np.sqrt(truth)) & (np.sqrt(truth) <= f["sd_ci_high"])).mean() >= inside.mean()
    assert np.allclose(f["sd"] ** 2, f["v"])
    assert (f["v"] >= 0).all() and (f["v"] <= 15**2).all()


def test_released_variance_is_close_to_the_truth_at_a_large_budget():
    keys = {"a": list(range(0, 101)) * 20, "b": [50] * 500}
    res = dpselect.aggregate(one_row_each(keys), privacy_unit="u", by="k", epsilon=50, delta=1e-6,
                             metrics={"v": dpselect.variance("x", (0, 100))}, max_partitions_contributed=1,
                             max_contributions_per_partition=1, public_partitions=["a", "b"],
                             rng=InsecureDeterministicRNG(seed=7))
    f = res.frame.set_index("k")["v"]
    assert abs(f["a"] - np.var(keys["a"])) < 30 and f["b"] < 30


# ------------------------------------------------------------------ bad inputs

@pytest.mark.parametrize("make,match,exc", [
    (lambda: dpselect.variance("x", (5, 1)), "inverted", ValueError),
    (lambda: dpselect.stddev(3), "column", TypeError),
    (lambda: dpselect.variance("x", (0, float("inf"))), "finite", ValueError),
    (lambda: dpselect.variance("x", noise="uniform"), "noise", ValueError),
    (lambda: dpselect.Metric("variance", "x", None, None, 3), "max_values_per_unit", TypeError),
])
def test_bad_metric_parameters_are_refused_naming_them(make, match, exc):
    with pytest.raises(exc, match=match):
        make()


def test_spread_sources_follow_the_metric_kinds_only():
    m = {"sd": dpselect.stddev("x"), "v": dpselect.variance("x"), "w": dpselect.variance("y"),
         "n": dpselect.count(), "s": dpselect.sum("y")}
    src = spread_sources(m)
    assert src["sd"] == SpreadSource("n", None, None, None)
    assert src["v"].twin == "sd"
    assert src["w"] == SpreadSource("n", None, "s", None)


def test_the_report_states_the_variance_columns_clamping():
    data = one_row_each({"a": [0, 5, 50, -3]})
    res = dpselect.aggregate(data, privacy_unit="u", by="k", epsilon=1, delta=1e-6,
                             metrics={"v": dpselect.variance("x", (0, 10))}, max_partitions_contributed=1,
                             max_contributions_per_partition=1, public_partitions=["a"],
                             rng=InsecureDeterministicRNG(seed=9))
    c = res.report().clamping["x"]
    assert (c.below, c.above, c.values) == (1, 1, 4)


@pytest.mark.parametrize("scope", ["dataset", "partition"])
def test_bounds_found_privately_give_a_variance_on_the_found_grid(scope):
    rng = np.random.default_rng(10)  # test data only
    keys = {"a": [int(v) for v in rng.integers(0, 100, 3000)], "b": [int(v) for v in rng.integers(0, 10, 3000)]}
    res = dpselect.aggregate(one_row_each(keys), privacy_unit="u", by="k", epsilon=20, delta=1e-6,
                             metrics={"v": dpselect.variance("x"), "sd": dpselect.stddev("x")},
                             max_partitions_contributed=1, max_contributions_per_partition=1, bounds_scope=scope,
                             public_partitions=["a", "b", "empty"], confidence_level=0.9,
                             rng=InsecureDeterministicRNG(seed=13))
    f = res.frame.set_index("k")
    lo, hi = (res.bounds["x"] if scope == "dataset" else (0, 127))
    assert abs(f.loc["a", "v"] - np.var(np.clip(keys["a"], lo, hi))) < 0.1 * np.var(keys["a"])
    assert f.loc["b", "v"] < 3 * np.var(keys["b"]) + 5
    assert np.allclose(f["sd"].dropna() ** 2, f["v"].dropna())
    assert (f["v_ci_low"].dropna() <= f["v"].dropna()).all() and (f["v"].dropna() <= f["v_ci_high"].dropna()).all()
    if scope == "partition":
        assert math.isnan(f.loc["empty", "v"])  # no bounds found for a key without data: NaN, not a failure


def test_variance_of_selected_keys_and_auto_contribution_bounds():
    rng = np.random.default_rng(11)  # test data only
    n = 20000
    data = pd.DataFrame({"u": rng.integers(0, 5000, n), "k": rng.integers(0, 3, n), "x": rng.integers(0, 60, n)})
    res = dpselect.aggregate(data, privacy_unit="u", by="k", epsilon=4, delta=1e-6,
                             metrics={"n": dpselect.count(), "v": dpselect.variance("x", (0, 60))},
                             max_partitions_contributed="auto", max_contributions_per_partition="auto",
                             rng=InsecureDeterministicRNG(seed=14))
    assert len(res.frame) == 3 and (abs(res.frame["v"] - 300) < 60).all()
    assert sum(c.epsilon_exact for c in res.guarantee.components) <= 4


def test_gaussian_interval_coverage():
    rng = np.random.default_rng(12)  # test data only
    keys = {f"k{i}": [int(v) for v in rng.integers(0, 20, 50)] for i in range(300)}
    res = dpselect.aggregate(one_row_each(keys), privacy_unit="u", by="k", epsilon=1, delta=1e-6,
                             metrics={"v": dpselect.variance("x", (0, 20))}, noise="gaussian",
                             max_partitions_contributed=1, max_contributions_per_partition=1,
                             public_partitions=sorted(keys), confidence_level=0.8,
                             rng=InsecureDeterministicRNG(seed=15))
    f = res.frame.set_index("k")
    truth = pd.Series({k: float(np.var(v)) for k, v in keys.items()})[f.index]
    assert ((f["v_ci_low"] <= truth) & (truth <= f["v_ci_high"])).mean() >= 0.8 - 3 * math.sqrt(0.16 / 300)


def _seeded_state(seed: int):
    return InsecureDeterministicRNG(seed=seed).test_state


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**16), st.integers(-(2**31), 2**31), st.integers(0, 62), st.integers(1, 3), st.integers(1, 3))
def test_the_kernel_sums_squared_offsets_as_a_column_of_them_would(seed, mid, shift, kappa, linf):
    # The bounding kernel's square columns (computed from a value column, no array of their own)
    # equal, exactly, the sums of an explicit column of q = round((u − mid)² / 2^shift), on the
    # same kept rows (same seed, same draws).
    from dpselect import _bound

    gen = np.random.default_rng(seed)  # input data only
    n, n_users, n_parts = 200, 30, 7
    users = gen.integers(0, n_users, n).astype(np.uint32)
    parts = gen.integers(0, n_parts, n).astype(np.uint32)
    units = np.clip(mid + gen.integers(-(2**31), 2**31 + 1, n), -(2**62), 2**62).astype(np.int64)
    q = spread.squared_offsets(units, mid, shift)
    rows = np.argsort(users, kind="stable").astype(np.uint32)

    def run(values, squares):
        kept = np.zeros(n, np.uint8)
        out = _bound.bound_rows_range(users, parts, n_parts, kappa, linf, values, _seeded_state(seed), rows, 0,
                                      n_users, kept=kept, squares=squares)
        return out, kept

    (_, _, with_column, _, _), kept_a = run([units, q], ())
    (_, _, with_square, _, _), kept_b = run([units], [(0, mid, shift)])
    assert np.array_equal(kept_a, kept_b)
    assert np.array_equal(with_column, with_square)
    expected = [sum(int(x) for x in q[(kept_a == 1) & (parts == p)]) for p in range(n_parts)]
    assert Wide.from_words(with_square[1, :n_parts]).to_ints() == expected


def test_the_kernel_refuses_a_square_that_would_not_fit():
    from dpselect import _bound

    users = np.zeros(2, np.uint32)
    parts = np.zeros(2, np.uint32)
    units = np.array([0, 2**31 + 1], dtype=np.int64)  # 2^31 + 1 from mid 0: its square is not below 2^62
    rows = np.arange(2, dtype=np.uint32)
    with pytest.raises(ValueError, match="more than 2\\*\\*31 units from its square column's mid"):
        _bound.bound_rows_range(users, parts, 1, 1, 2, [units], _seeded_state(0), rows, 0, 1, squares=[(0, 0, 0)])
    with pytest.raises(ValueError, match="shift"):
        _bound.bound_rows_range(users, parts, 1, 1, 2, [units], _seeded_state(0), rows, 0, 1, squares=[(0, 0, 63)])
    with pytest.raises(ValueError, match="source"):
        _bound.bound_rows_range(users, parts, 1, 1, 2, [units], _seeded_state(0), rows, 0, 1, squares=[(1, 0, 0)])
