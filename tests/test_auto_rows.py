"""strategy="auto" on raw rows: pi_opt where it releases more (κ = 1, 2), DP-SIPS from κ = 3, the
choice a function of (ε, δ, κ) alone (dpselect.recommend; README, "Which mechanism releases the
most"; bench/bench_auto.py measures it on real data)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpselect
from dpselect.mechanisms import DPSIPS, PiOptSelection
from dpselect.mechanisms.recommend import ROW_MARGIN

# Every test builds certified DP-SIPS or pi_opt strategies over a grid of (ε, δ, κ): seconds each.
pytestmark = pytest.mark.slow

EPSILONS = [0.25, 0.5, 1.0, 2.0, 4.0]


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-8])
@pytest.mark.parametrize("kappa", [1, 2])
def test_auto_on_rows_keeps_pi_opt_at_kappa_one_and_two(epsilon, delta, kappa):
    """DP-SIPS at κ = 1 released 7 keys where pi_opt released 34 (real data): a weighted
    mechanism cannot gain there, where each user gives a single key full weight."""
    rec = dpselect.recommend(epsilon, delta, kappa, rows=True)
    assert rec.strategy == "pi_opt", rec.reason
    built = dpselect.make_strategy("auto", epsilon=epsilon, delta=delta, max_partitions_contributed=kappa, rows=True)
    assert isinstance(built, PiOptSelection)


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("kappa", [3, 4, 8])
def test_auto_on_rows_picks_dp_sips_from_kappa_three(epsilon, kappa):
    rec = dpselect.recommend(epsilon, 1e-5, kappa, rows=True)
    assert rec.strategy == "dp_sips", rec.reason
    built = dpselect.make_strategy("auto", epsilon=epsilon, delta=1e-5, max_partitions_contributed=kappa, rows=True)
    assert isinstance(built, DPSIPS)


def test_auto_on_counts_and_with_counts_are_unchanged():
    assert dpselect.recommend(1.0, 1e-5, 1).strategy == "pi_opt"
    assert dpselect.recommend(1.0, 1e-5, 4).strategy == "gaussian"
    assert dpselect.recommend(1.0, 1e-5, 1, rows=True, counts=True).strategy == "release"
    assert dpselect.recommend(1.0, 1e-5, 4, rows=True, neighbours="replace").strategy != "dp_sips"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.floats(min_value=0.2, max_value=8.0), st.sampled_from([1e-3, 1e-5, 1e-7, 1e-9]), st.integers(1, 6))
def test_the_row_choice_is_the_margin_rule_on_public_midpoints(epsilon, delta, kappa):
    """A law: DP-SIPS exactly where Gaussian thresholding's midpoint is at most ROW_MARGIN times
    the best budget split's, the count-based choice elsewhere (public parameters only)."""
    counts = dpselect.recommend(epsilon, delta, kappa)
    rows = dpselect.recommend(epsilon, delta, kappa, rows=True)
    mids = {c.strategy: min(d.midpoint for d in counts.candidates if d.strategy == c.strategy)
            for c in counts.candidates}
    split = min(mids[s] for s in ("pi_opt", "release", "laplace") if s in mids)
    expected = "dp_sips" if mids["gaussian"] <= ROW_MARGIN * split else counts.strategy
    assert rows.strategy == expected
    if kappa == 1:
        assert rows.strategy == "pi_opt"


def _mechanism_of(table, **kwargs) -> str:
    out = dpselect.select_partitions(table, privacy_unit="user", by="item", epsilon=1.0, delta=1e-5,
                                     strategy="auto", **kwargs)
    return out.schema.metadata[b"dpselect.guarantee"].decode().split(" is (")[0]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 30)), min_size=1, max_size=400),
       st.sampled_from([1, 2, 3, 5]))
def test_the_choice_never_depends_on_the_data(pairs, kappa):
    pa = pytest.importorskip("pyarrow")
    users, items = (np.array(column, dtype=np.int64) for column in zip(*pairs))
    data = pa.table({"user": users, "item": items})
    other = pa.table({"user": np.arange(1000, dtype=np.int64), "item": np.zeros(1000, dtype=np.int64)})
    assert _mechanism_of(data, max_partitions_contributed=kappa) == _mechanism_of(
        other, max_partitions_contributed=kappa)
