"""The budget accountant (dpselect.aggregation.budget; docs/privacy/budget.md): exact sums,
refusals that name the step and the overspend and charge nothing, the ledger, splits, charges
from guarantees, thread safety, and bad inputs."""
from __future__ import annotations

import threading
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpselect.aggregation.budget import Budget, BudgetExceededError, Charge
from dpselect.aggregation.noise import DiscreteGaussianNoise, DiscreteLaplaceNoise
from dpselect.mechanisms import make_strategy


def test_sums_are_exact_where_floats_drift() -> None:
    budget = Budget(1.0, 1e-6)
    for i in range(10):
        budget.charge(0.1, 1e-7, what=f"step {i}")  # in floats, 0.1 * 10 != 1.0
    assert budget.spent == (Fraction(1), Fraction(1, 10**6))
    assert budget.remaining == (0, 0)
    with pytest.raises(BudgetExceededError):
        budget.charge(Fraction(1, 10**30), what="one more")


def test_a_refusal_names_the_step_and_the_overspend_and_charges_nothing() -> None:
    budget = Budget(1, 1e-6)
    budget.charge(0.75, 5e-7, what="partition selection")
    with pytest.raises(BudgetExceededError, match=r"'noisy sums'.*epsilon by 0\.25 \(it needs 0\.5, 0\.25 is left\)"):
        budget.charge(0.5, what="noisy sums")
    with pytest.raises(BudgetExceededError, match=r"'bounds'.*delta by 1e-06"):
        budget.charge(0.1, 1.5e-6, what="bounds")
    with pytest.raises(BudgetExceededError, match="epsilon by .*; delta by"):
        budget.charge(1, 1e-6, what="both")
    assert budget.spent == (Fraction(3, 4), Fraction(5, 10**7))
    assert [c.what for c in budget.ledger] == ["partition selection"]
    assert issubclass(BudgetExceededError, ValueError)


def test_ledger_and_summary() -> None:
    budget = Budget(2, 1e-5)
    first = budget.charge(Fraction(1, 3), what="selection")
    budget.charge(1, 1e-6, what="sums")
    assert first == Charge("selection", Fraction(1, 3), Fraction(0))
    text = budget.summary()
    lines = text.splitlines()
    assert lines[0] == "Budget: epsilon 2, delta 1e-05 (basic sequential composition)"
    assert lines[1] == "  1. selection: epsilon 1/3 (~0.333333), delta 0"
    assert lines[2] == "  2. sums: epsilon 1, delta 1e-06"
    assert lines[3] == "  spent: epsilon 4/3 (~1.33333), delta 1e-06; remaining: epsilon 2/3 (~0.666667), delta 9e-06"
    assert repr(budget) == text
    assert budget.can_charge(Fraction(2, 3), 9e-6) and not budget.can_charge(Fraction(2, 3) + Fraction(1, 10**20))


def test_split_is_exact_and_charges_nothing() -> None:
    budget = Budget(1, 1e-6)
    shares = budget.split(1, 1e-6, {"selection": 1, "bounds": 1, "metrics": 2})
    assert shares == {"selection": (Fraction(1, 4), Fraction(1, 4 * 10**6)),
                      "bounds": (Fraction(1, 4), Fraction(1, 4 * 10**6)),
                      "metrics": (Fraction(1, 2), Fraction(1, 2 * 10**6))}
    assert budget.spent == (0, 0)
    for step, (eps, delta) in shares.items():
        budget.charge(eps, delta, what=step)
    assert budget.remaining == (0, 0)  # the shares add up exactly


def test_split_of_what_remains_and_separate_delta_weights() -> None:
    budget = Budget(3, 1e-6)
    budget.charge(1, what="earlier")
    shares = budget.split(weights={"selection": 1, "bounds": 1, "sums": 1},
                          delta_weights={"selection": 1, "bounds": 0, "sums": 1})
    assert shares["bounds"] == (Fraction(2, 3), Fraction(0))
    assert shares["sums"] == (Fraction(2, 3), Fraction(1, 2 * 10**6))
    with pytest.raises(BudgetExceededError, match="cannot split"):
        budget.split(2.5, 0, {"a": 1})
    with pytest.raises(ValueError, match="same steps"):
        budget.split(1, 0, {"a": 1}, delta_weights={"b": 1})
    with pytest.raises(ValueError, match="weights"):
        budget.split(1, 0, {})
    with pytest.raises(ValueError, match="must not all be 0"):
        budget.split(1, 0, {"a": 0})
    with pytest.raises(ValueError, match=">= 0"):
        budget.split(1, 0, {"a": -1, "b": 2})


def test_charging_guarantees() -> None:
    budget = Budget(2, 1e-5)
    lap = DiscreteLaplaceNoise.for_epsilon(Fraction(1, 2), sensitivity=3)
    budget.charge_guarantee(lap.guarantee, what="sums")
    gauss = DiscreteGaussianNoise.for_epsilon_delta(1, 1e-6)
    budget.charge_guarantee(gauss.guarantee, what="counts")
    selection = make_strategy("pi_opt", epsilon=0.25, delta=1e-6)
    budget.charge_guarantee(selection.guarantee, what="selection")
    eps, delta = budget.spent
    assert eps == Fraction(7, 4)
    assert delta == gauss.guarantee.delta_exact + selection.guarantee.delta_exact and delta <= Fraction(2, 10**6)
    with pytest.raises(TypeError, match="zCDP"):
        budget.charge_guarantee(DiscreteGaussianNoise.for_rho(Fraction(1, 10)).guarantee, what="rho only")
    with pytest.raises(TypeError):
        budget.charge_guarantee(object(), what="nothing")


def test_concurrent_charges_never_overspend() -> None:
    budget = Budget(Fraction(1, 2), 0)
    successes: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        mine = 0
        for _ in range(1000):
            try:
                budget.charge(Fraction(1, 8000), what="tiny")
                mine += 1
            except BudgetExceededError:
                pass
        with lock:
            successes.append(mine)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(successes) == 4000
    assert budget.spent == (Fraction(1, 2), 0) and len(budget.ledger) == 4000


@pytest.mark.slow
@given(st.lists(st.tuples(st.fractions(0, 1), st.fractions(0, Fraction(1, 10**5))), max_size=30))
@settings(max_examples=100, deadline=None)
def test_the_ledger_always_adds_up_and_stays_within_budget(charges) -> None:
    budget = Budget(3, Fraction(1, 10**5))
    for i, (eps, delta) in enumerate(charges):
        fits = budget.can_charge(eps, delta)
        try:
            budget.charge(eps, delta, what=f"c{i}")
            assert fits
        except BudgetExceededError:
            assert not fits
    spent = budget.spent
    assert spent == (sum((c.epsilon for c in budget.ledger), Fraction(0)), sum((c.delta for c in budget.ledger), Fraction(0)))
    assert spent[0] <= 3 and spent[1] <= Fraction(1, 10**5)


@pytest.mark.parametrize("epsilon,delta,error", [
    (0, 0, ValueError), (-1, 0, ValueError), (float("nan"), 0, ValueError), (float("inf"), 0, ValueError),
    ("1", 0, TypeError), (True, 0, TypeError), (1, 1, ValueError), (1, -1e-9, ValueError), (1, None, TypeError),
])
def test_bad_budgets_are_refused(epsilon, delta, error) -> None:
    with pytest.raises(error):
        Budget(epsilon, delta)


@pytest.mark.parametrize("epsilon,delta,what,error", [
    (-0.1, 0, "x", ValueError), (float("nan"), 0, "x", ValueError), (0.1, -1e-9, "x", ValueError),
    ("0.1", 0, "x", TypeError), (0.1, 0, "", ValueError), (0.1, 0, None, ValueError), (0.1, 0, "   ", ValueError),
])
def test_bad_charges_are_refused(epsilon, delta, what, error) -> None:
    budget = Budget(1, 1e-6)
    with pytest.raises(error):
        budget.charge(epsilon, delta, what=what)
    assert budget.spent == (0, 0)
