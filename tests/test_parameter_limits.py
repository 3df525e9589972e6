"""Parameters a mechanism cannot serve are refused from the parameters alone, before any table,
noise or threshold is built, with a ValueError that names epsilon, says what a key would need and
which epsilon works (dpselect.core.limits; docs/privacy/limits.md); huge ε is a clear ValueError or
the documented cap; min_users_to_release says what a key needs at the parameters that do run."""
from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpselect
from dpselect.core import tables
from dpselect.mechanisms import gaussian, laplace, registry, weighted


class Built(Exception):
    """Raised by a patched builder: the mechanism went on to build something."""


@pytest.fixture
def no_building(monkeypatch):
    """Every expensive builder raises Built: a refusal must come before all of them."""
    registry._built.cache_clear()

    def refuse(*args, **kwargs):
        raise Built

    monkeypatch.setattr(tables, "_keep_table_cached", refuse)
    monkeypatch.setattr(tables, "_tsgd_cached", refuse)
    monkeypatch.setattr(laplace, "laplace_keep_table", refuse)
    monkeypatch.setattr(gaussian, "certified_sigma", refuse)
    monkeypatch.setattr(gaussian, "_gaussian_table", refuse)
    monkeypatch.setattr(weighted, "certified_sigma", refuse)
    yield
    registry._built.cache_clear()


def _works_from(message: str) -> float:
    found = re.search(r"epsilon >= ([0-9.e+-]+) works at this delta", message)
    assert found, message
    return float(found.group(1))


# The audit's cases: ε = 1e-30 built for 90-105 s before an error (the release's noise at δ = 5e-7),
# Gaussian thresholding would have computed exact normal bounds for an hour, ε <= 1e-320 overflowed.
TOO_SMALL = [
    ("pi_opt", 1e-30, 1e-8, 1), ("pi_opt", 5e-324, 1e-8, 3), ("pi_opt", 0.0, 1e-8, 1),
    ("release", 1e-30, 5e-7, 1), ("release", 1e-320, 1e-6, 1), ("release", 1e-7, 1e-6, 2),
    ("laplace", 1e-30, 1e-5, 1), ("laplace", 1e-5, 1e-5, 1),
    ("gaussian", 1e-30, 1e-5, 1), ("gaussian", 1e-320, 1e-5, 1), ("gaussian", 1e-3, 1e-5, 1),
    ("public", 1e-30, 1e-6, 1), ("mixed", 1e-30, 1e-6, 1),
]


@pytest.mark.parametrize("name,epsilon,delta,kappa", TOO_SMALL)
def test_a_tiny_epsilon_is_refused_before_anything_is_built(no_building, name, epsilon, delta, kappa):
    with pytest.raises(ValueError) as raised:
        dpselect.make_strategy(name, epsilon=epsilon, delta=delta, max_partitions_contributed=kappa)
    message = str(raised.value)
    assert f"is too small for strategy '{name}'" in message and message.startswith("epsilon = ")
    assert "users" in message  # what a key would need
    _works_from(message)


@pytest.mark.parametrize("name,epsilon,delta,kappa", TOO_SMALL)
def test_the_epsilon_the_refusal_gives_works(no_building, name, epsilon, delta, kappa):
    with pytest.raises(ValueError) as raised:
        dpselect.make_strategy(name, epsilon=epsilon, delta=delta, max_partitions_contributed=kappa)
    works = _works_from(str(raised.value))
    with pytest.raises(Built):  # accepted: it goes on to build
        dpselect.make_strategy(name, epsilon=works, delta=delta, max_partitions_contributed=kappa)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["pi_opt", "release", "laplace", "gaussian"]),
       st.floats(min_value=-320, max_value=1), st.floats(min_value=-14, max_value=-1), st.integers(1, 8))
def test_refused_or_accepted_the_advice_holds(no_building, name, log_epsilon, log_delta, kappa):
    """A law over random parameters: a mechanism either goes on to build (Built) or refuses with a
    ValueError whose "epsilon >= X works" is accepted; nothing else escapes (no OverflowError)."""
    epsilon, delta = 10.0**log_epsilon, 10.0**log_delta
    try:
        dpselect.make_strategy(name, epsilon=epsilon, delta=delta, max_partitions_contributed=kappa)
    except Built:
        return
    except ValueError as err:
        message = str(err)
        if not message.startswith("epsilon = "):  # a δ the mechanism cannot represent or certify
            assert re.match(r"(per-partition )?delta", message), message
            return
        if "no epsilon works" in message:
            return
        works = _works_from(message)
        assert works > epsilon
        with pytest.raises(Built):
            dpselect.make_strategy(name, epsilon=works, delta=delta, max_partitions_contributed=kappa)


# The Gaussian ones' σ is set by δ alone at a tiny ε (~8e4 at δ = 1e-5, which fits): they need a
# small δ as well to overflow.
ROW_CASES = [(name, epsilon, delta) for name in ("weighted_laplace", "policy_laplace")
             for epsilon, delta in ((1e-12, 1e-5), (1e-320, 1e-5), (1e-30, 1e-12), (5e-324, 1e-20))] + [
    (name, epsilon, delta) for name in ("weighted_gaussian", "dp_sips", "policy_gaussian")
    for epsilon, delta in ((1e-30, 1e-12), (5e-324, 1e-20))]


@pytest.mark.parametrize("name,epsilon,delta", ROW_CASES)
def test_row_mechanisms_refuse_a_threshold_beyond_their_grid(name, epsilon, delta):
    """ε = 1e-12 made weighted Laplace's threshold 1e13 users: an OverflowError at construction
    (ε <= 1e-320: math range error) or, for the Gaussian ones, when the data were drawn."""
    registry._built.cache_clear()
    users = np.arange(3, dtype=np.int64)
    with pytest.raises(ValueError, match=r"epsilon = .* is too small for strategy .*fixed-point grid"):
        dpselect.select_rows(users, users, epsilon, delta, strategy=name)


# ------------------------------------------------------------------ huge epsilon

HUGE = 10**400


@pytest.mark.parametrize("call", [
    lambda: dpselect.select([1, 2], HUGE, 1e-5),
    lambda: dpselect.release([1, 2], HUGE, 1e-5),
    lambda: dpselect.keep_probability(3, HUGE, 1e-5),
    lambda: dpselect.crossovers(HUGE, 1e-5),
    lambda: dpselect.recommend(HUGE, 1e-5),
    lambda: dpselect.recommend(HUGE, 1e-5, rows=True),
    lambda: dpselect.make_strategy("auto", epsilon=HUGE, delta=1e-5, rows=True),
    lambda: dpselect.select_rows([0, 1], [0, 1], HUGE, 1e-5),
], ids=["select", "release", "keep_probability", "crossovers", "recommend", "recommend_rows", "auto", "select_rows"])
def test_an_int_epsilon_beyond_the_floats_is_a_short_clear_error(call):
    with pytest.raises(ValueError, match=r"epsilon = 1e400 \(an int of 401 digits\) is too large") as raised:
        call()
    assert len(str(raised.value)) < 400 and "1e300" in str(raised.value)


@pytest.mark.parametrize("name", sorted(registry.STRATEGIES) + sorted(registry.ROW_STRATEGIES) + ["auto"])
@pytest.mark.parametrize("epsilon", [1e308, 1e300, 5e4])
def test_the_largest_floats_build_capped_or_are_refused_clearly(name, epsilon):
    """Count-based tables are built at ε' = min(ε/κ, 200) (docs/privacy/pi-opt.md); the Gaussian and
    weighted mechanisms refuse ε > 50 by name."""
    try:
        built = dpselect.make_strategy(name, epsilon=epsilon, delta=1e-5)
    except ValueError as err:
        assert "epsilon up to 50" in str(err)
        return
    assert built.params.epsilon == epsilon
    if hasattr(built, "table") and hasattr(built.table, "partition_epsilon"):
        assert built.table.partition_epsilon in (Fraction(200), Fraction(0))


# ------------------------------------------------------------------ min_users_to_release

@pytest.mark.parametrize("name", ["pi_opt", "release", "laplace", "gaussian"])
@pytest.mark.parametrize("epsilon,delta,kappa,tau", [(1.0, 1e-5, 1, 1),
                                                     pytest.param(0.1, 1e-8, 3, 1, marks=pytest.mark.slow),
                                                     (2.0, 1e-3, 2, 5)])
def test_min_users_to_release_is_the_first_count_with_a_half_chance(name, epsilon, delta, kappa, tau):
    strategy = dpselect.make_strategy(name, epsilon=epsilon, delta=delta, max_partitions_contributed=kappa,
                                      pre_threshold=tau)
    n = strategy.min_users_to_release
    assert n >= tau
    assert strategy.exact_keep_probability(n) >= Fraction(1, 2) > strategy.exact_keep_probability(n - 1)
    sure = strategy.users_for_release(0.95)
    assert sure is not None and sure >= n and strategy.exact_keep_probability(sure) >= Fraction(95, 100)
    if name == "release":
        assert n == strategy.release_threshold + 1


@pytest.mark.slow
def test_min_users_to_release_warns_of_a_tiny_epsilon():
    """At ε = 1e-30 pi_opt is pi(n) = n δ (Theorem 2's limit): a key needs 50,000 users for a
    half chance at δ = 1e-5, which a GROUP BY can say in a warning."""
    assert 50_000 <= dpselect.make_strategy("pi_opt", epsilon=1e-30, delta=1e-5).min_users_to_release <= 50_001
    assert dpselect.make_strategy("pi_opt", epsilon=1.0, delta=1e-5).min_users_to_release == 12


def test_min_users_to_release_of_the_other_count_strategies():
    assert dpselect.make_strategy("pi_opt", epsilon=1.0, delta=0.0, allow_no_release=True).min_users_to_release is None
    assert dpselect.make_strategy("public", epsilon=1.0, delta=1e-5).min_users_to_release == 0
    mixed = dpselect.make_strategy("mixed", epsilon=1.0, delta=1e-5)
    assert mixed.min_users_to_release == mixed.k + 1


@pytest.mark.parametrize("probability", [0, -0.5, 1.5, math.nan])
def test_users_for_release_checks_its_probability(probability):
    with pytest.raises(ValueError, match="probability must be in"):
        dpselect.make_strategy("pi_opt", epsilon=1.0, delta=1e-5).users_for_release(probability)
    with pytest.raises(TypeError):
        dpselect.make_strategy("pi_opt", epsilon=1.0, delta=1e-5).users_for_release("1/2")
