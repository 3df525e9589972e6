"""The ε-aware rule for κ and L∞ chosen privately with public partitions: a deterministic
function of the noisy histograms and the public parameters alone (docs/privacy/auto-bounds.md,
"The rule, and how it was measured")."""
from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpselect
from dpselect.aggregation.plan import plan_aggregate
from dpselect.ingest import auto_bounds
from dpselect.ingest.auto_rule import MetricError, choose_by_error, metric_errors, readable_bins
from dpselect.testing import InsecureDeterministicRNG

_METRICS = {"n": dpselect.count(), "users": dpselect.count_distinct_units(),
            "total": dpselect.sum("value", bounds=(0, 10))}
# Users with 1, 3–4, 9–16 and 33–64 keys (and as many rows per pair), 1000 in each bin.
_NOISY = np.array([1000, 0, 1000, 0, 1000, 0, 1000] + [0] * 30, dtype=np.int64)


def _frame(n_users: int, keys_per_user: int, rows: int = 1, seed: int = 0) -> pd.DataFrame:
    gen = np.random.default_rng(seed)  # the input data only
    users = np.repeat(np.arange(n_users), keys_per_user * rows)
    keys = np.concatenate([np.repeat(gen.choice(20, keys_per_user, replace=False), rows) for _ in range(n_users)])
    return pd.DataFrame({"user": users, "key": keys, "value": gen.uniform(0, 10, users.size)})


def _public(data: pd.DataFrame, monkeypatch: pytest.MonkeyPatch, epsilon: float = 1, **kwargs: Any) -> Any:
    """A release with public keys whose noisy histograms are _NOISY, whatever the data."""
    monkeypatch.setattr(auto_bounds, "noisy_histogram", lambda exact, eps, rng: _NOISY[:exact.size].copy())
    args: dict[str, Any] = dict(privacy_unit="user", by="key", metrics=_METRICS, epsilon=epsilon, delta=1e-6,
                                max_partitions_contributed="auto", max_contributions_per_partition="auto",
                                public_partitions=list(range(20)), rng=InsecureDeterministicRNG(7))
    args.update(kwargs)
    return dpselect.aggregate(data, **args).guarantee


@pytest.mark.parametrize("linf", [1, "auto"])
def test_the_rule_sees_epsilon(monkeypatch: pytest.MonkeyPatch, linf: Any) -> None:
    # The same noisy histograms: at a small ε the noise of a large κ (and L∞) costs more than the
    # data it keeps; at a large ε it does not. A quantile rule chooses the same at every ε.
    small = _public(_frame(300, 3), monkeypatch, epsilon=0.1, max_contributions_per_partition=linf)
    large = _public(_frame(300, 3), monkeypatch, epsilon=10, max_contributions_per_partition=linf)
    assert small.kappa * small.linf < large.kappa * large.linf
    assert small.kappa <= large.kappa and small.linf <= large.linf
    assert "least estimated error" in small.components[0].statement


def test_the_choice_reads_only_the_noisy_histograms(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two different datasets with the same noisy histograms get the same bounds: those of the rule
    # on the histograms and the plan's public parameters.
    a = _public(_frame(300, 3), monkeypatch)
    b = _public(_frame(40, 7, rows=3, seed=1), monkeypatch)
    assert (a.kappa, a.linf) == (b.kappa, b.linf)
    plan = plan_aggregate(privacy_unit="user", by="key", metrics=_METRICS, epsilon=1, delta=1e-6,
                          max_partitions_contributed="auto", max_contributions_per_partition="auto", public=True)
    scale = auto_bounds.noise_for(plan.shares["contribution_bounds"][0] / 2).scale
    expected = choose_by_error(readable_bins(_NOISY[:plan.kappa.bit_length()], scale),
                               readable_bins(_NOISY[:plan.linf.bit_length()], scale),
                               metrics=metric_errors(plan), n_keys=20, kappa=plan.kappa, linf=plan.linf)
    assert (a.kappa, a.linf) == expected


def test_keys_selected_from_the_data_keep_the_quantile_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    g = _public(_frame(300, 3), monkeypatch, public_partitions=None, max_contributions_per_partition=1)
    assert "0.25-quantile" in g.components[0].statement


def test_readable_bins_drop_what_is_within_the_noise() -> None:
    # Scale 10: the floor is 3·√2·10 ≈ 42.4. A bin under it is 0; after two unreadable bins in a
    # row nothing is read (a far bin whose noise passed the floor by chance).
    assert readable_bins(np.array([-5, 100, 20, 50, 43, 3, 1, 400]), Fraction(10)) == [0, 100, 0, 50, 43, 0, 0, 0]
    assert readable_bins(np.array([42, -60, 0]), Fraction(10)) == [0, 0, 0]


def test_nothing_readable_gives_the_smallest_bounds() -> None:
    m = [MetricError("rows", laplace_epsilon=Fraction(1))]
    assert choose_by_error([0] * 9, [0] * 9, metrics=m, n_keys=10, kappa=256, linf=256) == (1, 1)
    assert choose_by_error([0] * 9, None, metrics=m, n_keys=10, kappa=256, linf=4) == (1, 4)
    assert choose_by_error([5, 5], [5, 5], metrics=[], n_keys=10, kappa=2, linf=2) == (1, 1)


_bins = st.lists(st.integers(0, 10**6), min_size=1, max_size=12)
_roles = st.lists(st.sampled_from(["users", "rows", "values", "average"]), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(bins=_bins, roles=_roles, gaussian=st.booleans(), eps=st.fractions(Fraction(1, 1000), 10),
       more=st.fractions(1, 1000), given_bound=st.sampled_from([1, 4, 64]), keys=st.integers(1, 10**4),
       which=st.sampled_from(["kappa", "linf"]))
def test_a_larger_epsilon_never_chooses_a_smaller_bound(bins: list[int], roles: list[str], gaussian: bool,
                                                        eps: Fraction, more: Fraction, given_bound: int, keys: int,
                                                        which: str) -> None:
    # With one bound chosen (the other given), each metric's error is a bias that does not grow
    # with the bound plus its noise variance times one factor, which a larger ε lowers for every
    # metric at once: the bound of least error cannot go down as ε goes up.
    def pick(e: Fraction) -> int:
        metrics = [MetricError(r, gaussian_rho=e * e / 2) if gaussian else MetricError(r, laplace_epsilon=e)
                   for r in roles]
        cap = 1 << (len(bins) - 1)
        k, lf = (choose_by_error(bins, None, metrics=metrics, n_keys=keys, kappa=cap, linf=given_bound)
                 if which == "kappa" else
                 choose_by_error(None, bins, metrics=metrics, n_keys=keys, kappa=given_bound, linf=cap))
        return k if which == "kappa" else lf

    assert pick(eps) <= pick(eps * (1 + more))
