"""A budget stated in ρ (Budget.zcdp, Budget(rho=...); docs/privacy/zcdp.md, "A budget stated in
ρ"): exact composition in Fractions, ε → ε²/2 for (ε, δ)-DP charges, refusals that charge
nothing, the laws of the ledger, deliberately broken copies of the rule caught by the same
checks, and dpselect.aggregate charging such a budget each step's cost in ρ."""
from __future__ import annotations

import random
import re
import threading
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpselect
from dpselect.aggregation import accounting
from dpselect.aggregation.budget import INFORMATION_DELTA, Budget, BudgetExceededError
from dpselect.aggregation.noise import DiscreteGaussianNoise, DiscreteLaplaceNoise, zcdp_delta
from dpselect.aggregation.plan import plan_aggregate
from dpselect.selection import make_strategy
from dpselect.testing import InsecureDeterministicRNG, InsecureRNGWarning

pd = pytest.importorskip("pandas")


# ------------------------------------------------------------------ the rule, recomputed here

def cost(eps: Fraction, dlt: Fraction, rho: Fraction) -> tuple[Fraction, Fraction]:
    """What one charge costs a budget stated in ρ, written out independently of the package:
    its ρ for a zCDP step, ε·ε/2 for an (ε, δ)-DP one (Bun and Steinke, Proposition 1.4), and its δ."""
    assert not (eps and rho)
    return (rho if rho else min(eps * eps / 2, eps)), dlt


def check_within(budget: Budget, charged: list[tuple[Fraction, Fraction, Fraction]]) -> None:
    """What a budget stated in ρ must satisfy for the charges it accepted: ``spent`` is their
    costs added exactly, the ledger has one entry each, and it is within the total."""
    assert budget.rho is not None
    rho = sum((cost(*c)[0] for c in charged), Fraction(0))
    dlt = sum((c[1] for c in charged), Fraction(0))
    assert budget.spent == (rho, dlt) == (budget.spent_rho, dlt)
    assert len(budget.ledger) == len(charged)
    assert rho <= budget.rho and dlt <= budget.delta
    assert budget.remaining == (budget.rho - rho, budget.delta - dlt) and budget.remaining_rho == budget.rho - rho


# ------------------------------------------------------------------ the budget itself

def test_a_budget_stated_in_rho_takes_rho_and_converts_epsilon_to_its_square_over_two_exactly():
    budget = Budget.zcdp(Fraction(1, 2), delta=Fraction(1, 10**6))
    assert budget.is_zcdp and budget.rho == Fraction(1, 2) and budget.epsilon is None
    budget.charge_zcdp(Fraction(1, 10), what="noisy counts")
    budget.charge(Fraction(1, 3), what="laplace sums")                 # pure ε-DP: (1/3)²/2 = 1/18
    budget.charge(Fraction(1, 5), Fraction(1, 10**7), what="selection")  # (ε, δ)-DP: 1/50 and its δ
    budget.charge(0, Fraction(1, 10**7), what="approximate zCDP", rho=Fraction(1, 100))
    assert budget.spent == (Fraction(1, 10) + Fraction(1, 18) + Fraction(1, 50) + Fraction(1, 100),
                            Fraction(2, 10**7))
    assert [c.as_rho for c in budget.ledger] == [Fraction(1, 10), Fraction(1, 18), Fraction(1, 50), Fraction(1, 100)]
    # A float is read as the decimal written: 0.1 costs exactly 1/200.
    small = Budget(rho=1)
    small.charge(0.1, what="x")
    assert small.spent_rho == Fraction(1, 200)


def test_the_two_spellings_are_the_same_budget_and_bad_totals_are_refused():
    assert str(Budget(rho=0.25, delta=1e-6)) == str(Budget.zcdp(0.25, 1e-6))
    for bad, match in [(dict(), "exactly one"), (dict(epsilon=1, rho=1), "exactly one"),
                       (dict(rho=0), "rho must be > 0"), (dict(rho=-1), "rho"), (dict(rho=float("nan")), "rho"),
                       (dict(rho=1, delta=1.5), "delta"), (dict(rho=1e300), "rho = 1e\\+300 is far beyond"),
                       (dict(rho=2**40 + 1), "at most 2\\*\\*40")]:
        with pytest.raises(ValueError, match=match):
            Budget(**bad)
    with pytest.raises(ValueError, match="fully_adaptive=True .* delta > 0 is not proven"):
        Budget.zcdp(1, 1e-6, fully_adaptive=True)
    assert Budget.zcdp(1, fully_adaptive=True).fully_adaptive  # δ = 0: every charge ρ-zCDP, a zCDP filter
    with pytest.raises(ValueError, match="implied_dp is for a budget stated in rho"):
        Budget(1, 1e-6).implied_dp()


def test_refusals_name_the_parameter_and_charge_nothing():
    budget = Budget.zcdp(Fraction(1, 8))
    budget.charge(Fraction(1, 2), what="pure step")  # 1/8: the whole budget, exactly
    before = (budget.ledger, budget.spent, budget.summary())
    with pytest.raises(BudgetExceededError, match=r"rho by 1e-30 \(it needs rho 1e-30"):
        budget.charge_zcdp(Fraction(1, 10**30), what="one more")
    with pytest.raises(BudgetExceededError, match="delta by 1e-09.*Budget.zcdp\\(rho, delta=1e-6\\)"):
        Budget.zcdp(1).charge(0.1, 1e-9, what="a selection")
    with pytest.raises(ValueError, match="epsilon 0.1 and rho 0.1 together.*charge_zcdp\\(xi \\+ rho"):
        budget.charge(0.1, 0, what="mixed", rho=0.1)
    with pytest.raises(ValueError, match="epsilon 0.1 and rho 0.1 together"):
        Budget.zcdp(1).can_charge(0.1, 0, rho=0.1)
    with pytest.raises(ValueError, match="rho must be > 0"):
        budget.charge_zcdp(0, what="nothing")
    with pytest.raises(BudgetExceededError, match=r"rho by 1e\+300 \(it needs rho 1e\+300"):
        budget.charge(1e300, what="huge")  # min(ε²/2, ε) = ε: never an OverflowError
    assert (budget.ledger, budget.spent, budget.summary()) == before


def test_can_charge_agrees_with_charge_at_the_edge():
    budget = Budget.zcdp(Fraction(1, 2), delta=Fraction(1, 10**6))
    assert budget.can_charge(1, Fraction(1, 10**6)) and not budget.can_charge(1, Fraction(1, 10**6) + Fraction(1, 10**30))
    assert budget.can_charge_zcdp(Fraction(1, 2)) and not budget.can_charge_zcdp(Fraction(1, 2) + Fraction(1, 10**30))
    budget.charge(1, Fraction(1, 10**6), what="all of it")
    assert budget.remaining == (0, 0) and budget.remaining_rho == 0 and not budget.can_charge(Fraction(1, 10**20))


def test_the_summary_says_the_total_and_the_dp_it_implies_through_the_certified_conversion():
    budget = Budget.zcdp(Fraction(1, 2), delta=Fraction(1, 10**6))
    budget.charge(Fraction(1, 2), Fraction(1, 10**7), what="selection")
    budget.charge_zcdp(Fraction(1, 10), what="counts")
    eps, dlt = budget.implied_dp()
    conversion = accounting.convert(Fraction(0), Fraction(1, 2), Fraction(1, 10**6), Fraction(1, 10**6) + INFORMATION_DELTA)
    assert (eps, dlt) == (conversion.epsilon, conversion.delta)
    assert zcdp_delta(Fraction(1, 2), eps) <= INFORMATION_DELTA and dlt <= Fraction(2, 10**6)
    assert zcdp_delta(Fraction(1, 2), eps - Fraction(1, 10**9)) > INFORMATION_DELTA  # the smallest on its grid
    text = budget.summary()
    assert text.splitlines()[0].startswith("Budget: rho 0.5, delta 1e-06 (delta-approximate rho-zCDP")
    assert eps == Fraction("5.221534445") and "it implies (5.221534445, 2e-06)-DP" in text
    assert "1. selection: epsilon 0.5, delta 1e-07 (charged as rho 0.125" in text
    assert "2. counts: rho 0.1 (zCDP)" in text
    assert text.splitlines()[-1] == "  spent: rho 0.225, delta 1e-07; remaining: rho 0.275, delta 9e-07"
    assert budget.conversion.rho == Fraction(9, 40)  # what was spent, converted for information


def test_split_shares_rho_and_delta_exactly():
    budget = Budget.zcdp(Fraction(1, 2), delta=Fraction(1, 10**6))
    shares = budget.split(weights={"counts": 1, "sums": 2})
    assert shares == {"counts": (Fraction(1, 6), Fraction(1, 3 * 10**6)), "sums": (Fraction(1, 3), Fraction(2, 3 * 10**6))}
    assert budget.split(rho=0.3, delta=0, weights={"a": 1})["a"] == (Fraction(3, 10), 0)
    with pytest.raises(ValueError, match="epsilon: a budget stated in rho splits"):
        budget.split(0.1, 0, {"a": 1})
    with pytest.raises(BudgetExceededError):
        budget.split(rho=1, weights={"a": 1})
    with pytest.raises(ValueError, match="rho: a budget in"):
        Budget(1, 1e-6).split(rho=0.1, weights={"a": 1})
    assert budget.ledger == ()


def test_statements_are_charged_step_by_step():
    budget = Budget.zcdp(10, delta=Fraction(1, 10**5))
    gauss = DiscreteGaussianNoise.for_rho(Fraction(1, 100), sensitivity=1, max_partitions_contributed=4)
    budget.charge_guarantee(gauss.guarantee, what="gaussian")  # its ρ, never its (ε, δ)
    lap = DiscreteLaplaceNoise.for_epsilon(Fraction(1, 2), sensitivity=1, max_partitions_contributed=1)
    budget.charge_guarantee(lap.guarantee, what="laplace")
    both = DiscreteGaussianNoise.for_epsilon_delta(1, 1e-6)  # states ρ and (ε, δ): its ρ is charged
    budget.charge_guarantee(both.guarantee, what="gaussian with (epsilon, delta)")
    selection = make_strategy("pi_opt", epsilon=0.25, delta=1e-6).guarantee  # an (ε, δ) statement
    budget.charge_guarantee(selection, what="selection")
    spent = gauss.rho + lap.epsilon ** 2 / 2 + both.rho + Fraction(1, 32)
    assert budget.spent == (spent, selection.delta_exact)

    class Step:
        def __init__(self, eps: Fraction, dlt: Fraction, rho: Fraction | None = None) -> None:
            self.epsilon_exact, self.delta_exact, self.rho = eps, dlt, rho

    class Release:
        epsilon_exact, delta_exact = Fraction(2), Fraction(1, 10**6)
        components = (Step(Fraction(1, 2), Fraction(1, 10**6)), Step(Fraction(1, 2), Fraction(0)),
                      Step(Fraction(1), Fraction(0), Fraction(1, 50)))

    entry = budget.charge_guarantee(Release(), what="release")
    # Each (ε, δ) step on its own: 1/8 + 1/8 + 1/50, not (1/2 + 1/2)²/2 + 1/50.
    assert entry.as_rho == Fraction(1, 8) + Fraction(1, 8) + Fraction(1, 50) and entry.delta == Fraction(1, 10**6)
    whole = budget.charge_guarantee(Release(), what="release as one step", as_zcdp=False)
    assert whole.as_rho == 2 and whole.delta == Fraction(1, 10**6)  # its (ε, δ) = (2, 1e-6): 2²/2
    assert budget.spent == (spent + Fraction(1, 4) + Fraction(1, 50) + 2, selection.delta_exact + Fraction(2, 10**6))


def test_concurrent_charges_never_overspend_together():
    budget = Budget.zcdp(Fraction(1, 2))
    accepted: list[int] = []

    def worker(k: int) -> None:
        for i in range(200):
            try:
                budget.charge(Fraction(1, 10), what=f"thread {k} step {i}")  # 1/200 each: 100 fit
            except BudgetExceededError:
                continue
            accepted.append(1)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(accepted) == len(budget.ledger) == 100 and budget.spent == (Fraction(1, 2), 0)


# ------------------------------------------------------------------ laws (hypothesis)

AMOUNT = st.fractions(min_value=0, max_value=Fraction(3, 4), max_denominator=1000)
DELTA = st.sampled_from([Fraction(0), Fraction(1, 10**7), Fraction(3, 10**7), Fraction(1, 10**6)])
CHARGE = st.one_of(
    st.tuples(st.just(Fraction(0)), st.just(Fraction(0)), AMOUNT),   # ρ-zCDP
    st.tuples(AMOUNT, DELTA, st.just(Fraction(0))),                  # (ε, δ)-DP (pure when δ = 0)
    st.tuples(st.just(Fraction(0)), DELTA, AMOUNT),                  # δ-approximately ρ-zCDP
)


def run(budget: Budget, charges: list[tuple[Fraction, Fraction, Fraction]]) -> list[tuple[Fraction, Fraction, Fraction]]:
    """Charge each in turn; every refusal must be foreseen by can_charge and change nothing."""
    accepted = []
    for i, (eps, dlt, rho) in enumerate(charges):
        if eps == 0 and dlt == 0 and rho == 0:
            continue
        fits = budget.can_charge(eps, dlt, rho=rho)
        before = (budget.ledger, budget.spent)
        try:
            budget.charge(eps, dlt, rho=rho, what=f"step {i}")
        except BudgetExceededError:
            assert not fits and (budget.ledger, budget.spent) == before
        else:
            assert fits
            accepted.append((eps, dlt, rho))
        check_within(budget, accepted)
    return accepted


@settings(max_examples=150, deadline=None)
@given(total=st.fractions(min_value=Fraction(1, 100), max_value=2, max_denominator=100),
       delta=st.sampled_from([Fraction(0), Fraction(1, 10**6), Fraction(1, 10**5)]),
       charges=st.lists(CHARGE, max_size=12))
def test_laws_never_overspend_charges_sum_and_refusals_change_nothing(total, delta, charges):
    budget = Budget.zcdp(total, delta)
    accepted = run(budget, charges)
    # Acceptance is exactly "the costs, added, fit": recomputed here.
    rho, dlt = Fraction(0), Fraction(0)
    for c in charges:
        if c == (0, 0, 0):
            continue
        r, d = cost(*c)
        if rho + r <= total and dlt + d <= delta:
            rho, dlt = rho + r, dlt + d
    assert budget.spent == (rho, dlt)
    assert len(accepted) == len(budget.ledger)


@settings(max_examples=100, deadline=None)
@given(charges=st.lists(CHARGE, max_size=10), seed=st.integers(0, 2**32))
def test_the_totals_do_not_depend_on_the_order(charges, seed):
    budget = Budget.zcdp(100, Fraction(1, 10**4))  # room for any list: every charge is accepted
    accepted = run(budget, charges)
    shuffled = accepted[:]
    random.Random(seed).shuffle(shuffled)
    again = Budget.zcdp(100, Fraction(1, 10**4))
    assert run(again, shuffled) == shuffled
    assert again.spent == budget.spent and again.remaining == budget.remaining


# ------------------------------------------------------------------ broken copies, caught

def accepts_overspend(budget_total: Fraction) -> bool:
    """Whether the budget accepts a charge the rule refuses: an (ε, δ)-DP step of ε = 1/2 fills
    a budget of 1/8 exactly, and one more of ε = 1/10 does not fit."""
    budget = Budget.zcdp(budget_total)
    budget.charge(Fraction(1, 2), what="fills it")
    try:
        budget.charge(Fraction(1, 10), what="one more")
    except BudgetExceededError:
        return False
    return True


def test_a_copy_converting_epsilon_to_its_square_over_four_is_caught(monkeypatch):
    assert not accepts_overspend(Fraction(1, 8))
    charged = [(Fraction(1, 2), Fraction(0), Fraction(0))]
    budget = Budget.zcdp(1)
    budget.charge(*charged[0][:2], what="x")
    check_within(budget, charged)
    monkeypatch.setattr(accounting, "rho_of_dp", lambda eps: eps * eps / 4)
    assert accepts_overspend(Fraction(1, 8))  # the broken copy overspends ...
    budget = Budget.zcdp(1)
    budget.charge(*charged[0][:2], what="x")
    with pytest.raises(AssertionError):  # ... and the ledger's check sees it
        check_within(budget, charged)


def test_a_copy_forgetting_the_delta_is_caught(monkeypatch):
    charged = [(Fraction(1, 2), Fraction(1, 10**6), Fraction(0))]
    original = Budget._charge_rho

    def forgets(self, name, eps, dlt, rho, cost):  # type: ignore[no-untyped-def]
        return original(self, name, eps, Fraction(0), rho, cost)

    monkeypatch.setattr(Budget, "_charge_rho", forgets)
    budget = Budget.zcdp(1, Fraction(1, 10**6))
    budget.charge(*charged[0][:2], what="selection")
    with pytest.raises(AssertionError):
        check_within(budget, charged)
    budget.charge(*charged[0][:2], what="selection again")  # and a second δ is taken where none is left
    assert budget.spent[1] == 0


def test_a_statement_is_charged_each_steps_square_not_the_square_of_its_sum():
    # Σ ε_i²/2 per step is what the rule charges; (Σ ε_i)²/2 (the statement's total as one step)
    # or Σ ε_i (ε left linear) would be other amounts.
    class Step:
        rho = None

        def __init__(self, eps: Fraction) -> None:
            self.epsilon_exact, self.delta_exact = eps, Fraction(0)

    class Release:
        epsilon_exact, delta_exact = Fraction(1), Fraction(0)
        components = (Step(Fraction(1, 2)), Step(Fraction(1, 2)))

    entry = Budget.zcdp(1).charge_guarantee(Release(), what="r")
    assert entry.as_rho == Fraction(1, 4)
    assert entry.as_rho not in (Fraction(1, 2), Fraction(1))


# ------------------------------------------------------------------ aggregate with a budget stated in ρ

def frame(seed: int = 0, n: int = 4_000) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"user": rng.integers(0, 400, n), "key": rng.integers(0, 5, n), "v": rng.random(n)})


ARGS = dict(privacy_unit="user", by="key", epsilon=1.0, delta=1e-6, max_partitions_contributed=2,
            max_contributions_per_partition=3)
GAUSS = {"n": dpselect.count(noise="gaussian"), "s": dpselect.sum("v", bounds=(0, 1), noise="gaussian"),
         "m": dpselect.mean("v", bounds=(0, 1), noise="gaussian")}


def plan_of(metrics: dict, public: bool, **extra: object):  # type: ignore[no-untyped-def]
    args = {**ARGS, **extra}
    return plan_aggregate(privacy_unit=args["privacy_unit"], by=args["by"], metrics=metrics, epsilon=args["epsilon"],
                          delta=args["delta"], max_partitions_contributed=args["max_partitions_contributed"],
                          max_contributions_per_partition=args["max_contributions_per_partition"], public=public,
                          **{k: v for k, v in extra.items() if k not in ARGS})


def release(budget: Budget, metrics: dict, public: bool = True, **extra: object):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dpselect.aggregate(frame(), metrics=metrics, public_partitions=[0, 1, 2, 3, 4] if public else None,
                                  budget=budget, rng=InsecureDeterministicRNG(seed=1), **{**ARGS, **extra})


def actual_cost(guarantee) -> tuple[Fraction, Fraction]:  # type: ignore[no-untyped-def]
    """What the release states, step by step, in ρ and δ."""
    rho = sum((c.rho if c.rho is not None else c.epsilon_exact ** 2 / 2 for c in guarantee.components), Fraction(0))
    return rho, sum((c.delta_exact for c in guarantee.components if c.rho is None), Fraction(0))


def test_aggregate_with_public_keys_and_gaussian_metrics_charges_exactly_their_rho():
    plan = plan_of(GAUSS, public=True)
    assert plan.gaussian is not None and set(plan.noises.values()) == {"gaussian"}
    budget = Budget.zcdp(1)  # δ = 0: public keys and Gaussian metrics need none in zCDP
    out = release(budget, GAUSS)
    assert budget.spent == (plan.gaussian.rho, 0) and len(budget.ledger) == 1
    assert budget.ledger[0].rho == plan.gaussian.rho == budget.ledger[0].as_rho
    stated = actual_cost(out.guarantee)
    assert stated[0] <= plan.gaussian.rho and stated[1] == 0  # the noise is built at most at its share
    assert stated[0] > plan.gaussian.rho * (1 - Fraction(1, 10**6))
    # The same call with an (ε, δ) budget still charges the request, as before.
    eps_budget = Budget(2, 1e-5)
    release(eps_budget, GAUSS)
    assert eps_budget.spent == (Fraction(1), Fraction(1, 10**6))


def test_aggregate_with_selection_and_mixed_noise_charges_each_step():
    metrics = {"n": dpselect.count(noise="laplace"), "s": dpselect.sum("v", bounds=(0, 1), noise="gaussian")}
    plan = plan_of(metrics, public=False)
    eps_s, delta_s = plan.shares["selection"]
    assert plan.gaussian is not None and delta_s == Fraction(1, 2 * 10**6)  # half of δ, the other half δ_z
    want = eps_s ** 2 / 2 + plan.shares["n"][0] ** 2 / 2 + plan.gaussian.rho
    budget = Budget.zcdp(1, Fraction(1, 10**6))
    out = release(budget, metrics, public=False)
    assert budget.spent == (want, delta_s)
    stated = actual_cost(out.guarantee)
    assert stated[0] <= want and stated[1] <= delta_s


def test_aggregate_refuses_an_overspend_before_any_work_and_charges_nothing():
    budget = Budget.zcdp(Fraction(1, 100))
    for metrics, public, match in [({"n": dpselect.count()}, False, "delta by 1e-06"),  # a selection needs δ
                                   (GAUSS, True, "rho by")]:
        # The test generator warns when the release announces it, right after the charge and
        # before any work: no warning, so nothing ran.
        with warnings.catch_warnings(record=True) as seen, pytest.raises(BudgetExceededError, match=match):
            warnings.simplefilter("always")
            dpselect.aggregate(frame(), metrics=metrics, public_partitions=[0, 1, 2, 3, 4] if public else None,
                               budget=budget, rng=InsecureDeterministicRNG(seed=1), **ARGS)
        assert not [w for w in seen if issubclass(w.category, InsecureRNGWarning)]
    assert budget.ledger == () and budget.spent == (0, 0)


def test_aggregate_with_bounds_chosen_privately_is_charged_as_one_dp_step():
    budget = Budget.zcdp(1, Fraction(1, 10**6))
    release(budget, {"n": dpselect.count(noise="laplace")}, max_partitions_contributed="auto")
    # The noise of each step is chosen after the charge: the whole (ε, δ) = (1, 1e-6) as one step.
    assert budget.spent == (Fraction(1, 2), Fraction(1, 10**6))


def test_select_partitions_and_sql_charge_a_budget_stated_in_rho():
    budget = Budget.zcdp(1, Fraction(1, 10**5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dpselect.select_partitions(frame(), privacy_unit="user", by="key", epsilon=0.5, delta=1e-6, budget=budget,
                                   max_partitions_contributed=2)
    assert budget.spent == (Fraction(1, 8), Fraction(1, 10**6))  # one (ε, δ)-DP step: ε²/2 and δ
    pytest.importorskip("duckdb")
    query = ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, delta = 1e-6, max_groups_contributed = 2, "
             "privacy_unit_column = user) key, COUNT(*) AS n FROM t GROUP BY key")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = dpselect.sql(query, {"t": frame()}, budget=budget)
    # Through aggregate: each step's cost, covering what the release states, and less than the
    # whole (1, 1e-6) as one step (1²/2).
    rho, dlt = budget.spent[0] - Fraction(1, 8), budget.spent[1] - Fraction(1, 10**6)
    stated = actual_cost(out.guarantee)
    assert stated[0] <= rho < Fraction(1, 2) and stated[1] <= dlt <= Fraction(1, 10**6)
    assert len(budget.ledger) == 2


@pytest.mark.parametrize("metrics, public", [
    ({"n": dpselect.count(), "u": dpselect.count_distinct_units(), "s": dpselect.sum("v", bounds=(0, 1))}, False),
    ({"m": dpselect.mean("v"), "q": dpselect.median("v", bounds=(0, 1))}, True),
    ({"var": dpselect.variance("v", bounds=(0, 1), noise="gaussian"), "n": dpselect.count(noise="laplace")}, False),
])
def test_the_planned_charge_covers_what_the_release_states(metrics, public):
    budget = Budget.zcdp(10, Fraction(1, 10**5))
    out = release(budget, metrics, public=public)
    stated = actual_cost(out.guarantee)
    assert stated[0] <= budget.spent[0] and stated[1] <= budget.spent[1]


def test_the_example_of_the_privacy_page_runs_and_says_what_it_spends(capsys):
    page = Path(__file__).resolve().parent.parent / "docs" / "privacy" / "zcdp.md"
    if not page.is_file():
        pytest.skip("no docs beside the tests (an installed wheel)")
    blocks = [b for b in re.findall(r"```python\n(.*?)\n```", page.read_text(encoding="utf-8"), flags=re.S)
              if "Budget.zcdp(" in b]
    assert len(blocks) == 1
    namespace: dict = {}
    exec(compile(blocks[0], str(page), "exec"), namespace)
    budget = namespace["budget"]
    assert budget.spent == (Fraction(49, 200), Fraction(1, 10**7)) and budget.remaining_rho == Fraction(51, 200)
    eps, dlt = budget.implied_dp()
    assert round(float(eps), 2) == 5.22 and Fraction(199, 10**8) < dlt <= Fraction(2, 10**6)
    assert "it implies (5.221534445, 2e-06)-DP" in capsys.readouterr().out


def test_a_large_epsilon_costs_epsilon_not_its_square_over_two() -> None:
    """For ε > 2 the bound D_α ≤ ε ≤ αε is the smaller: an ε-DP step costs min(ε²/2, ε)."""
    from dpselect.aggregation.accounting import rho_of_dp

    assert rho_of_dp(Fraction(3)) == 3 and rho_of_dp(Fraction(2)) == 2 and rho_of_dp(Fraction(1)) == Fraction(1, 2)
    budget = Budget.zcdp(3)
    budget.charge(3, what="a large pure step")  # 4.5 as ε²/2: it fits only at ρ = ε
    assert budget.spent_rho == 3
