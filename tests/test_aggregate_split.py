"""aggregate's default budget split: the selection weighs one per metric (a key not released loses
every metric), each budget-spending metric and each privately found column's bounds 1, κ / L∞
chosen privately 1/4 — from the parameters alone, never the data; ``weights=`` overrides."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import dpselect
from dpselect.aggregation.plan import AUTO_BOUNDS_WEIGHT, SELECTION_WEIGHT_PER_METRIC, plan_aggregate
from dpselect.testing import InsecureDeterministicRNG

pd = pytest.importorskip("pandas")
pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")


def plan(metrics, *, epsilon=1.0, public=False, kappa=2, linf=2, **kwargs):
    kwargs.setdefault("strategy", "pi_opt")
    return plan_aggregate(privacy_unit="u", by="k", metrics=metrics, epsilon=epsilon, delta=1e-6,
                          max_partitions_contributed=kappa, max_contributions_per_partition=linf, public=public,
                          **kwargs)


FOUR = {"flights": dpselect.count(), "users": dpselect.count_distinct_units(),
        "distance": dpselect.sum("d", bounds=(0, 5000)), "delay": dpselect.mean("y", bounds=(-60, 300))}


@pytest.mark.parametrize("epsilon", [Fraction(1, 2), Fraction(1), Fraction(4)])
@pytest.mark.parametrize("names", [["users"], ["flights", "users"], ["flights", "users", "distance", "delay"]])
def test_the_selection_weighs_one_per_metric_and_the_shares_sum_to_epsilon(epsilon, names):
    metrics = {n: FOUR[n] for n in names}
    p = plan(metrics, epsilon=float(epsilon))
    m = len(metrics)
    assert SELECTION_WEIGHT_PER_METRIC == 1
    total = m + m  # the selection's m, then 1 per metric
    assert p.shares["selection"][0] == epsilon * m / total == epsilon / 2
    for name in metrics:
        assert p.shares[name][0] == epsilon / total
    assert sum((eps for eps, _ in p.shares.values()), Fraction(0)) == epsilon


def test_the_rule_counts_found_bounds_auto_bounds_derived_means_and_the_tsgd_user_count():
    # A column without bounds: its "bounds:<column>" step weighs 1; κ / L∞ "auto": 1/4.
    metrics = {"users": dpselect.count_distinct_units(), "s": dpselect.sum("x")}
    p = plan(metrics, kappa="auto", linf="auto", epsilon=4.0)
    w = {"selection": Fraction(2), "users": Fraction(1), "s": Fraction(1), "bounds:x": Fraction(1),
         "contribution_bounds": AUTO_BOUNDS_WEIGHT}
    total = sum(w.values())
    assert {k: v[0] for k, v in p.shares.items()} == {k: 4 * v / total for k, v in w.items()}
    # A mean computed from a released sum and count spends nothing, but is still a metric the
    # selection decides: it counts for the selection's weight.
    derived = {"n": dpselect.count(), "s": dpselect.sum("x", bounds=(0, 9)), "m": dpselect.mean("x")}
    p = plan(derived)
    assert "m" not in p.shares
    assert {k: v[0] for k, v in p.shares.items()} == {"selection": Fraction(3, 5), "n": Fraction(1, 5),
                                                        "s": Fraction(1, 5)}
    # The TSGD release serves the user count: its 1 goes to the selection, on top of one per metric.
    p = plan({"users": dpselect.count_distinct_units(), "rows": dpselect.count()}, strategy="release",
             noise="laplace")
    assert p.selection_counts == "users"
    assert {k: v[0] for k, v in p.shares.items()} == {"selection": Fraction(3, 4), "rows": Fraction(1, 4)}
    # With public partitions there is no selection: the metrics share ε equally.
    p = plan(FOUR, public=True)
    assert {k: v[0] for k, v in p.shares.items()} == {n: Fraction(1, 4) for n in FOUR}


def test_weights_still_override_the_default_by_name():
    p = plan(FOUR, weights={"selection": 1})
    assert {k: v[0] for k, v in p.shares.items()} == {"selection": Fraction(1, 5), **{n: Fraction(1, 5) for n in FOUR}}
    p = plan(FOUR, weights={"delay": 4})
    assert p.shares["selection"][0] == Fraction(4, 11) and p.shares["delay"][0] == Fraction(4, 11)
    with pytest.raises(ValueError, match="unknown step"):
        plan(FOUR, weights={"nope": 1})


def flights(seed: int, users: int) -> pd.DataFrame:
    r = np.random.default_rng(seed)  # test data only; no privacy noise
    n = users * 3
    return pd.DataFrame({"u": r.integers(0, users, n), "k": r.integers(0, 5, n),
                         "d": r.integers(0, 5000, n), "y": r.integers(-60, 300, n)})


def test_the_default_shares_are_the_same_for_two_datasets():
    # Same parameters, different data: the same plan, and the same ε per step in the guarantee.
    assert plan(FOUR).shares == plan(FOUR).shares
    components = []
    for seed, users in ((1, 400), (2, 3000)):
        out = dpselect.aggregate(flights(seed, users), privacy_unit="u", by="k", metrics=FOUR, epsilon=1.0,
                                 delta=1e-6, max_partitions_contributed=2, max_contributions_per_partition=2,
                                 strategy="pi_opt", rng=InsecureDeterministicRNG(seed=seed))
        components.append([(c.what, c.epsilon_exact, c.delta_exact) for c in out.guarantee.components])
    assert components[0] == components[1]
    shares = plan(FOUR).shares
    selection = next(c for c in components[0] if c[0].startswith("selection"))
    assert selection[1] <= shares["selection"][0] == Fraction(1, 2)
