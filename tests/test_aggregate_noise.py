"""aggregate's noise: discrete Gaussian or Laplace per metric (noise="auto" chooses from the
parameters only), the Gaussian metrics composed as one zCDP group converted once, and no budget
spent twice (a mean reuses a released count and sum)."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpselect
from dpselect.aggregation.guarantee import AggregateGuarantee, Component
from dpselect.aggregation.noise import (
    DiscreteGaussianNoise,
    DiscreteLaplaceNoise,
    rho_for_epsilon_delta,
    zcdp_delta,
)
from dpselect.aggregation.noise_choice import MetricNoise, choose_noise
from dpselect.aggregation.plan import plan_aggregate
from dpselect.testing import InsecureDeterministicRNG

pd = pytest.importorskip("pandas")
pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

BOUNDS = dict(max_partitions_contributed=1, max_contributions_per_partition=1)


def plan(metrics, *, epsilon=1.0, delta=1e-6, kappa=1, linf=1, public=False, **kwargs):
    kwargs.setdefault("strategy", "pi_opt")  # "auto" has its own tests (it builds every candidate)
    return plan_aggregate(privacy_unit="u", by="k", metrics=metrics, epsilon=epsilon, delta=delta,
                          max_partitions_contributed=kappa, max_contributions_per_partition=linf, public=public,
                          **kwargs)


def users_per_key(keys: int, users: int) -> pd.DataFrame:
    """``keys`` keys of exactly ``users`` users each, one row per user (nothing is bounded away)."""
    return pd.DataFrame({"u": np.arange(keys * users), "k": np.repeat(np.arange(keys), users),
                         "x": np.tile(np.arange(users) % 7, keys).astype(np.int64),
                         "y": np.tile(np.arange(users) % 5, keys) * 1.5})


def sd(noise) -> float:
    return math.sqrt(noise.variance()) if isinstance(noise, DiscreteLaplaceNoise) else math.sqrt(float(noise.sigma2))


# ------------------------------------------------------------------ which noise

def test_a_metric_noise_is_checked_and_kept():
    assert dpselect.count().noise is None
    assert dpselect.sum("x", bounds=(0, 1), noise="gaussian").noise == "gaussian"
    with pytest.raises(ValueError, match="noise"):
        dpselect.count(noise="normal")
    with pytest.raises(ValueError, match="noise must be"):
        plan({"n": dpselect.count()}, noise="normal")


def test_auto_takes_gaussian_at_large_kappa_and_laplace_at_kappa_one():
    metrics = {"users": dpselect.count_distinct_units()}
    wide = plan(metrics, kappa=100, public=True)
    assert wide.noises == {"users": "gaussian"} and "Gaussian" in wide.noise_reason
    narrow = plan(metrics, kappa=1, public=True)
    assert narrow.noises == {"users": "laplace"} and "Laplace" in narrow.noise_reason
    assert narrow.gaussian is None
    # The figure the docs quote: sigma of the user count at epsilon 1, delta 1e-6, kappa 100.
    noise = wide.metric_noise(100, 1)["users"].make(1)
    assert isinstance(noise, DiscreteGaussianNoise) and sd(noise) <= 49.5


@settings(max_examples=40, deadline=None)
@given(kappa=st.integers(1, 300), weights=st.lists(st.integers(1, 4), min_size=1, max_size=4),
       eps=st.sampled_from([0.1, 1.0, 4.0]), public=st.booleans())
def test_auto_is_never_worse_than_laplace_for_any_metric(kappa, weights, eps, public):
    # choose_noise is what plan_aggregate runs (without building the selection, which is slow).
    kinds = [dpselect.count_distinct_units(), dpselect.count(), dpselect.sum("x", bounds=(0, 10)),
             dpselect.count_distinct_units()]
    metrics = {f"m{i}": kinds[i] for i in range(len(weights))}
    total = sum(weights) + (0 if public else 1)
    epsilons = {f"m{i}": Fraction(eps) * w / total for i, w in enumerate(weights)}
    chosen, group, _ = choose_noise(metrics, epsilons, "auto", Fraction(1, 10**6), not public, kappa, 2)
    for name, kind in chosen.items():
        laplace = MetricNoise("laplace", epsilons[name], None, kappa, 2)
        if kind == "gaussian":
            assert group is not None
            noise = MetricNoise(kind, epsilons[name], group.rho * epsilons[name] / group.epsilon, kappa, 2)
            delta1 = 1 if metrics[name].kind == "count_distinct_units" else 2  # a sum: L∞ grid units
            assert sd(noise.make(delta1)) < sd(laplace.make(delta1))


def test_a_metric_own_noise_wins_over_the_release_choice():
    p = plan({"a": dpselect.count(noise="laplace"), "b": dpselect.count_distinct_units(noise="gaussian"),
              "c": dpselect.count()}, kappa=1, noise="gaussian")
    assert p.noises == {"a": "laplace", "b": "gaussian", "c": "gaussian"}


def test_delta_zero_means_laplace_and_gaussian_is_refused():
    metrics = {"n": dpselect.count_distinct_units()}
    p = plan(metrics, delta=0, kappa=100, public=True)
    assert p.noises == {"n": "laplace"} and "delta = 0" in p.noise_reason
    with pytest.raises(ValueError, match="delta = 0"):
        plan(metrics, delta=0, kappa=100, public=True, noise="gaussian")
    with pytest.raises(ValueError, match="delta = 0"):
        plan({"n": dpselect.count(noise="gaussian")}, delta=0, public=True)


def test_the_choice_reads_no_data():
    kwargs = dict(privacy_unit="u", by="k", metrics={"n": dpselect.count_distinct_units()}, epsilon=1.0,
                  delta=1e-6, max_partitions_contributed=20, max_contributions_per_partition=1)
    texts = set()
    for seed, users in ((1, 3), (2, 40)):
        out = dpselect.aggregate(users_per_key(30, users), public_partitions=list(range(30)),
                                 rng=InsecureDeterministicRNG(seed=seed), **kwargs)
        texts.add(out.guarantee.noise_choice)
    assert len(texts) == 1 and "Gaussian" in texts.pop()


# ------------------------------------------------------------------ the δ split

def test_delta_is_split_between_the_selection_and_the_gaussian_group():
    delta = Fraction(1, 10**6)
    metrics = {"n": dpselect.count_distinct_units()}
    both = plan(metrics, kappa=4, noise="gaussian")
    assert both.shares["selection"][1] == delta / 2 and both.gaussian.delta == delta / 2
    assert both.gaussian.rho == rho_for_epsilon_delta(both.shares["n"][0], delta / 2)
    alone = plan(metrics, kappa=4, noise="gaussian", public=True)
    assert alone.gaussian.delta == delta and alone.gaussian.epsilon == 1
    none = plan(metrics, kappa=4, noise="laplace")
    assert none.shares["selection"][1] == delta and none.gaussian is None
    strategy = dpselect.make_strategy("pi_opt", epsilon=0.5, delta=4e-7, max_partitions_contributed=4)
    given = plan(metrics, kappa=4, noise="gaussian", strategy=strategy)
    assert given.gaussian.delta == delta - Fraction(4, 10**7)


# ------------------------------------------------------------------ the composition, exactly

@pytest.mark.slow
def test_the_release_composes_to_the_formula_exactly_and_within_the_request():
    df = users_per_key(20, 60)
    metrics = {"users": dpselect.count_distinct_units(noise="gaussian"), "rows": dpselect.count(noise="gaussian"),
               "lap": dpselect.count_distinct_units(noise="laplace"), "total": dpselect.sum("x", bounds=(0, 6)),
               "found": dpselect.sum("y", noise="gaussian")}
    eps, delta, kappa, linf = Fraction(3), Fraction(1, 10**6), 4, 2
    out = dpselect.aggregate(df, privacy_unit="u", by="k", metrics=metrics, epsilon=3.0, delta=1e-6,
                             max_partitions_contributed=kappa, max_contributions_per_partition=linf, strategy="pi_opt",
                             weights={"users": 2, "total": 3}, rng=InsecureDeterministicRNG(seed=3))
    g = out.guarantee
    # Recomputed independently: the shares from the weights (selection 5, one per metric; bounds:y
    # 1, users 2, rows 1, lap 1, total 3, found 1; 14 in all), then each step's noise.
    w = {"selection": 5, "bounds:y": 1, "users": 2, "rows": 1, "lap": 1, "total": 3, "found": 1}
    share = {k: eps * v / 14 for k, v in w.items()}
    by_name = {c.what.split(" = ")[0]: c for c in g.components}
    gaussian = [n for n, c in by_name.items() if c.rho is not None]
    assert {"users", "rows", "found"} <= set(gaussian) and "lap" not in gaussian
    eps_z = sum((share[n] for n in gaussian), Fraction(0))
    rho_z = rho_for_epsilon_delta(eps_z, delta / 2)
    sensitivity = {"users": 1, "rows": linf}
    rho = Fraction(0)
    for n in gaussian:
        if n in sensitivity:
            expected = DiscreteGaussianNoise.for_rho(rho_z * share[n] / eps_z, sensitivity=sensitivity[n],
                                                     max_partitions_contributed=kappa).rho
            assert by_name[n].rho == expected
        assert by_name[n].rho <= rho_z * share[n] / eps_z
        rho += by_name[n].rho
    lap = DiscreteLaplaceNoise.for_epsilon(share["lap"], sensitivity=1, max_partitions_contributed=kappa).epsilon
    assert by_name["lap"].epsilon_exact == lap and by_name["lap"].rho is None
    selection = g.components[0]
    bounds = next(c for c in g.components if c.kind == "bounds")
    laplace_eps = sum((c.epsilon_exact for c in g.components if c.rho is None and c.kind == "metric"), Fraction(0))
    want_eps = selection.epsilon_exact + bounds.epsilon_exact + laplace_eps + eps_z
    want_delta = selection.delta_exact + zcdp_delta(rho, eps_z)
    assert selection.delta_exact <= delta / 2
    assert (g.epsilon_exact, g.delta_exact) == (want_eps, want_delta)
    assert g.epsilon_exact <= eps and g.delta_exact <= delta
    assert g.gaussian_group == (rho, eps_z, zcdp_delta(rho, eps_z)) and g.rho is None
    assert "converted once" in str(g) and "Gaussian ρ" in g.summary()
    assert g.as_dict()["gaussian_group"]["rho"] >= float(rho)
    # A broken composition would not match: δ_z forgotten, or ρ summed and never converted.
    assert sum((c.delta_exact for c in g.components), Fraction(0)) != g.delta_exact
    assert g.delta_exact - selection.delta_exact != 0


def test_the_budget_assertion_catches_an_overspent_gaussian_group():
    members = (Component("a = count()", Fraction(1, 2), Fraction(0), "", rho=Fraction(1, 100)),
               Component("b = count()", Fraction(1, 2), Fraction(0), "", rho=Fraction(1, 100)))
    ok = AggregateGuarantee(components=members, requested_epsilon=Fraction(1), requested_delta=Fraction(1, 10**3),
                            kappa=1, linf=1)
    assert ok.delta_exact == zcdp_delta(Fraction(1, 50), Fraction(1)) > 0
    with pytest.raises(AssertionError, match="more than its budget"):  # δ_z has no room in the request
        AggregateGuarantee(components=members, requested_epsilon=Fraction(1), requested_delta=Fraction(0),
                           kappa=1, linf=1)


@pytest.mark.slow
def test_rho_is_stated_when_every_step_is_zcdp():
    df = users_per_key(10, 30)
    kwargs = dict(privacy_unit="u", by="k", epsilon=1.0, delta=1e-6, public_partitions=list(range(10)),
                  rng=InsecureDeterministicRNG(seed=4), max_partitions_contributed=50, max_contributions_per_partition=1)
    gauss = dpselect.aggregate(df, metrics={"a": dpselect.count_distinct_units(noise="gaussian"),
                                            "b": dpselect.count(noise="gaussian")}, **kwargs).guarantee
    assert gauss.rho == sum((c.rho for c in gauss.components), Fraction(0))
    assert "-zCDP" in str(gauss) and gauss.as_dict()["rho"] >= float(gauss.rho)
    mixed = dpselect.aggregate(df, metrics={"a": dpselect.count_distinct_units(noise="gaussian"),
                                            "b": dpselect.count(noise="laplace")}, **kwargs).guarantee
    lap = next(c for c in mixed.components if c.rho is None)
    assert mixed.rho == next(c.rho for c in mixed.components if c.rho) + lap.epsilon_exact ** 2 / 2
    selected = dpselect.aggregate(df, metrics={"a": dpselect.count_distinct_units(noise="gaussian")},
                                  **{**kwargs, "public_partitions": None}).guarantee
    assert selected.rho is None


# ------------------------------------------------------------------ the Gaussian metric's noise, measured

def test_gaussian_user_counts_have_sd_sigma_and_their_intervals_cover():
    keys, users, level = 4000, 3, 0.9
    df = users_per_key(keys, users)
    out = dpselect.aggregate(df, privacy_unit="u", by="k", metrics={"n": dpselect.count_distinct_units()},
                             epsilon=0.5, delta=1e-6, max_partitions_contributed=8, max_contributions_per_partition=1,
                             public_partitions=list(range(keys)), noise="gaussian", confidence_level=level,
                             rng=InsecureDeterministicRNG(seed=11))
    sigma = math.sqrt(float(plan({"n": dpselect.count_distinct_units()}, epsilon=0.5, kappa=8, public=True,
                                 noise="gaussian").metric_noise(8, 1)["n"].make(1).sigma2))
    frame = out.frame
    error = frame["n"].to_numpy() - users
    assert abs(error.std() / sigma - 1) < 0.06  # sd of 4000 draws: within 6 % (about 5 standard errors)
    assert abs(error.mean()) < 5 * sigma / math.sqrt(keys)
    covered = ((frame["n_ci_low"] <= users) & (users <= frame["n_ci_high"])).mean()
    assert covered >= level - 3 * math.sqrt(level * (1 - level) / keys)
    assert "discrete Gaussian" in out.guarantee.components[0].statement


# ------------------------------------------------------------------ no budget spent twice

def test_a_mean_reuses_the_released_count():
    p = plan({"n": dpselect.count(), "m": dpselect.mean("x", bounds=(0, 6))}, public=True, noise="laplace")
    assert set(p.shares) == {"n", "m"} and p.means["m"].count == "n" and not p.means["m"].derived
    df = users_per_key(5, 50)
    out = dpselect.aggregate(df, privacy_unit="u", by="k", metrics={"n": dpselect.count(),
                                                                    "m": dpselect.mean("x", bounds=(0, 6))},
                             epsilon=2.0, delta=1e-6, public_partitions=list(range(5)), noise="laplace",
                             rng=InsecureDeterministicRNG(seed=5), **BOUNDS)
    mean = next(c for c in out.guarantee.components if c.what.startswith("m ="))
    # All of its share on the sum of offsets (sensitivity 6: the grid's reach 3, twice) — one noise.
    assert mean.epsilon_exact == DiscreteLaplaceNoise.for_epsilon(Fraction(1), sensitivity=6).epsilon
    assert "released row count" in mean.statement
    assert out.guarantee.epsilon_exact == Fraction(2)


def test_a_mean_with_a_released_sum_and_count_is_their_quotient_and_spends_nothing():
    metrics = {"n": dpselect.count(), "s": dpselect.sum("x", bounds=(0, 6)), "m": dpselect.mean("x", bounds=(0, 6))}
    p = plan(metrics, public=True)
    assert "m" not in p.shares and p.means["m"].derived
    with pytest.raises(ValueError, match="leave it out of weights"):
        plan(metrics, public=True, weights={"m": 2})
    df = users_per_key(30, 40)
    out = dpselect.aggregate(df, privacy_unit="u", by="k", metrics=metrics, epsilon=1.0, delta=1e-6,
                             public_partitions=list(range(30)), confidence_level=0.9,
                             rng=InsecureDeterministicRNG(seed=6), **BOUNDS)
    f = out.frame
    want = np.where(f["n"] >= 1, np.clip(f["s"] / np.maximum(f["n"], 1), 0, 6), 3)
    np.testing.assert_allclose(f["m"], want, rtol=1e-12)
    assert (f["m_ci_low"] <= f["m"]).all() and (f["m"] <= f["m_ci_high"]).all()
    mean = next(c for c in out.guarantee.components if c.what.startswith("m ="))
    assert (mean.epsilon_exact, mean.delta_exact, mean.rho) == (0, 0, None)
    assert out.guarantee.epsilon_exact <= 1


def test_the_tsgd_release_noisy_user_counts_are_the_user_count_metric():
    from dpselect.aggregation.intervals import tsgd_half_width

    metrics = {"users": dpselect.count_distinct_units(), "rows": dpselect.count()}
    p = plan(metrics, strategy="release", noise="laplace")
    assert p.selection_counts == "users" and "users" not in p.shares and "users" not in p.noises
    # The selection weighs one per metric (2), plus the user count's own 1: 3 of 4.
    assert p.shares["selection"][0] == Fraction(3, 4)
    with pytest.raises(ValueError, match="weigh 'selection' instead"):
        plan(metrics, strategy="release", weights={"users": 2})
    # A user count that asks for its own noise keeps it; other strategies release no counts.
    assert plan({"users": dpselect.count_distinct_units(noise="laplace")}, strategy="release").selection_counts is None
    assert plan(metrics, strategy="pi_opt").selection_counts is None

    keys, users = 40, 200
    out = dpselect.aggregate(users_per_key(keys, users), privacy_unit="u", by="k", metrics=metrics, epsilon=1.0,
                             delta=1e-6, strategy="release", noise="laplace", confidence_level=0.9,
                             rng=InsecureDeterministicRNG(seed=7), **BOUNDS)
    strat = p.strategy
    f = out.frame
    assert len(f) == keys
    h = tsgd_half_width(strat.table, 0.9)
    assert (f["users_ci_high"] - f["users"] == h).all() and (f["users"] - f["users_ci_low"] == h).all()
    assert ((f["users"] - users).abs() <= strat.k).all()  # TSGD noise never exceeds k
    g = out.guarantee
    by_name = {c.what.split(" = ")[0]: c for c in g.components}
    assert (by_name["users"].epsilon_exact, by_name["users"].delta_exact) == (0, 0)
    assert g.epsilon_exact == g.components[0].epsilon_exact + by_name["rows"].epsilon_exact <= 1
    assert g.delta_exact == g.components[0].delta_exact <= Fraction(1, 10**6)


# ------------------------------------------------------------------ strategy="auto"

@pytest.mark.slow
@pytest.mark.parametrize("kappa", [1, 4])
def test_auto_strategy_is_the_recommended_count_selection_at_the_selection_share(kappa):
    from dpselect.aggregation.plan import float_down
    from dpselect.mechanisms.recommend import recommend

    metrics = {"n": dpselect.count()}
    p = plan(metrics, kappa=kappa, noise="laplace", strategy="auto")
    eps_s, delta_s = p.shares["selection"]
    want = recommend(float_down(eps_s), float_down(delta_s), kappa)
    assert p.strategy.name == want.strategy and "strategy='auto' chose" in p.noise_reason
    out = dpselect.aggregate(users_per_key(20, 300), privacy_unit="u", by="k", metrics=metrics, epsilon=1.0,
                             delta=1e-6, max_partitions_contributed=kappa, max_contributions_per_partition=1,
                             noise="laplace", rng=InsecureDeterministicRNG(seed=8))
    g = out.guarantee
    assert g.components[0].what == f"selection of keys ({want.strategy})"
    assert g.epsilon_exact == g.components[0].epsilon_exact + g.components[1].epsilon_exact <= 1
    assert g.delta_exact == g.components[0].delta_exact <= Fraction(1, 10**6)
    assert "strategy='auto' chose" in str(g)


@pytest.mark.slow
@pytest.mark.parametrize(("epsilon", "delta", "kappa"), [(1.0, 1e-5, 1), (0.25, 1e-8, 2), (4.0, 1e-3, 1),
                                                         (0.5, 5e-7, 2)])
def test_the_quick_auto_choice_is_what_recommend_chooses(epsilon: float, delta: float, kappa: int) -> None:
    # strategy="auto" skips building Gaussian tables where a budget-splitting selection is clearly
    # ahead: that shortcut must never choose differently from the full comparison.
    from dpselect.aggregation.plan import _clear_budget_split_choice
    from dpselect.mechanisms.recommend import recommend

    quick = _clear_budget_split_choice(epsilon, delta, kappa)
    assert quick is not None  # these points are clear cases (pi_opt far ahead at κ <= 2)
    full = recommend(epsilon, delta, kappa)
    assert (quick[0], {}) == (full.strategy, dict(full.options))
    assert quick[1] == min(c.midpoint for c in full.candidates if c.label == full.label)


def test_the_quick_auto_choice_defers_to_recommend_where_the_gaussian_is_close() -> None:
    from dpselect.aggregation.plan import _clear_budget_split_choice

    assert _clear_budget_split_choice(1.0, 1e-6, 8) is None  # Gaussian thresholding wins at κ = 8


def test_choosing_the_noise_at_a_huge_epsilon_does_not_overflow():
    # At ε = 1e6 a Laplace sd is so small that the squared ratio of the Gaussian's to it left the
    # float range: choose_noise raised a raw OverflowError from the parameters alone.
    import pyarrow as pa

    table = pa.table({"u": [i % 30 for i in range(100)], "k": [i % 3 for i in range(100)],
                      "x": [i * 0.1 for i in range(100)], "y": [float(i) for i in range(100)],
                      "s": [str(i % 7) for i in range(100)]})
    metrics = {"c": dpselect.count(), "v": dpselect.variance("x", (0, 10)), "sd": dpselect.stddev("x", (0, 10)),
               "d1": dpselect.count_distinct("s", max_values_per_unit=50), "d2": dpselect.count_distinct("s"),
               "vy": dpselect.variance("y"), "m": dpselect.mean("x", (0, 10))}
    result = dpselect.aggregate(table, privacy_unit="u", by="k", metrics=metrics, epsilon=1e6, delta=1e-6,
                                max_partitions_contributed=4, max_contributions_per_partition=100,
                                public_partitions=[0, 1, 2], confidence_level=0.9)
    assert result.frame.num_rows == 3
