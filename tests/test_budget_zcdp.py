"""ρ-zCDP charges in the budget accountant (dpselect.aggregation.budget and .accounting;
docs/privacy/zcdp.md): the rule recomputed independently and certified, refusals that charge
nothing, the order of the ledger, the gain over converting each charge, statements with ρ, and
deliberately broken copies of the rule caught by the same checks."""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, replace
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpselect.aggregation import accounting
from dpselect.aggregation.accounting import Conversion, epsilon_for_rho
from dpselect.aggregation.budget import Budget, BudgetExceededError, Charge
from dpselect.aggregation.noise import DiscreteGaussianNoise, DiscreteLaplaceNoise, zcdp_delta

MICRO = Fraction(1, 10**6)
GRID = 10**9


# ------------------------------------------------------------------ the rule, recomputed here

def _certified(rho: Fraction, eps: Fraction, delta: Fraction) -> bool:
    return zcdp_delta(rho, eps) <= delta


def reference_epsilon_z(rho: Fraction, delta_left: Fraction, cap: Fraction) -> Fraction:
    """The smallest multiple of 10^-9 certified at δ_left (plain bisection from a bracket found
    by doubling: no float guess), or the cap when that is smaller and certified."""
    if rho == 0:
        return Fraction(0)
    hi = 1
    while not _certified(rho, Fraction(hi, GRID), delta_left):
        hi *= 2
    lo = 0
    if _certified(rho, Fraction(0), delta_left):
        return Fraction(0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _certified(rho, Fraction(mid, GRID), delta_left):
            hi = mid
        else:
            lo = mid
    eps = Fraction(hi, GRID)
    return cap if cap < eps and _certified(rho, cap, delta_left) else eps


def check_ledger(budget: Budget) -> None:
    """What every budget must satisfy, whatever its ledger: ``spent`` is Σξ + ε_z and
    Σδ + δ_z for the ledger's totals, ε_z the smallest certified ε at the δ the (ε, δ) charges
    leave, δ_z its certified δ, and all of it within the budget."""
    ledger = budget.ledger
    xi = sum((c.epsilon for c in ledger), Fraction(0))
    rho = sum((c.rho for c in ledger), Fraction(0))
    dlt = sum((c.delta for c in ledger), Fraction(0))
    left = budget.delta - dlt
    eps_z = reference_epsilon_z(rho, left, budget.epsilon - xi)
    delta_z = zcdp_delta(rho, eps_z) if rho else Fraction(0)
    assert delta_z <= left, "the conversion is not certified within the delta left"
    assert budget.spent == (xi + eps_z, dlt + delta_z), "spent is not the rule's total"
    assert budget.spent[0] <= budget.epsilon and budget.spent[1] <= budget.delta, "overspent"
    assert budget.spent_rho == rho


# ------------------------------------------------------------------ the rule, exactly

def test_two_rho_charges_then_an_epsilon_delta_charge() -> None:
    budget = Budget(2, MICRO)
    budget.charge_zcdp(Fraction(1, 100), what="noisy counts")
    budget.charge_zcdp(Fraction(3, 100), what="noisy sums")
    budget.charge(Fraction(1, 4), Fraction(1, 10**7), what="selection")
    check_ledger(budget)
    conv = budget.conversion
    assert (conv.xi, conv.rho, conv.delta_approx) == (Fraction(1, 4), Fraction(1, 25), Fraction(1, 10**7))
    # independently: the conversion of ρ = 0.04 with δ = 9e-7 left, then the (ε, δ) charge added
    eps_z = reference_epsilon_z(Fraction(1, 25), Fraction(9, 10**7), Fraction(7, 4))
    assert budget.spent == (Fraction(1, 4) + eps_z, Fraction(1, 10**7) + zcdp_delta(Fraction(1, 25), eps_z))
    assert zcdp_delta(Fraction(1, 25), eps_z) <= Fraction(9, 10**7)
    assert not _certified(Fraction(1, 25), eps_z - Fraction(1, GRID), Fraction(9, 10**7))  # smallest on the grid
    assert 1.25 < float(eps_z) < 1.35  # CKS: about 1.30 for ρ = 0.04 at δ = 9e-7
    assert budget.ledger[0] == Charge("noisy counts", Fraction(0), Fraction(0), Fraction(1, 100))


def test_the_conversion_is_near_the_real_optimum() -> None:
    """ε_z is within 10^-6 of the infimum over α of CKS's ε (estimated here in floats by a
    dense scan over α, itself a little above the infimum)."""
    for rho, delta in ((Fraction(1, 100), MICRO), (Fraction(1, 2), Fraction(1, 10**9)), (Fraction(5), Fraction(1, 10**5))):
        r, d = float(rho), float(delta)
        best = min(a * r + (math.log(1 / d) + (a - 1) * math.log1p(-1 / a) - math.log(a)) / (a - 1)
                   for a in (1 + math.exp(k / 2000) for k in range(-20000, 20000)))
        eps = float(epsilon_for_rho(rho, delta))
        assert abs(eps - best) <= 1e-6, (rho, delta, eps, best)


def test_a_delta_below_the_smallest_float_still_converts() -> None:
    """δ = 10^-320 is 0 as a float: the search works from ln δ, the certificate in Fractions."""
    tiny = Fraction(1, 10**320)
    eps = epsilon_for_rho(Fraction(1, 100), tiny)
    assert zcdp_delta(Fraction(1, 100), eps) <= tiny < zcdp_delta(Fraction(1, 100), eps - Fraction(1, GRID))
    budget = Budget(10, tiny)
    budget.charge_zcdp(Fraction(1, 100), what="counts")
    check_ledger(budget)


def test_without_rho_nothing_changes() -> None:
    budget = Budget(1, MICRO)
    budget.charge(Fraction(1, 3), Fraction(1, 10**7), what="a")
    assert budget.spent == (Fraction(1, 3), Fraction(1, 10**7))
    assert budget.conversion == Conversion(Fraction(1, 3), Fraction(0), Fraction(1, 10**7), Fraction(0), Fraction(0))
    check_ledger(budget)


# ------------------------------------------------------------------ refusals

def test_an_overspending_rho_charge_is_refused_and_charges_nothing() -> None:
    budget = Budget(1, MICRO)
    budget.charge(Fraction(1, 2), Fraction(1, 10**7), what="selection")
    budget.charge_zcdp(Fraction(1, 1000), what="counts")
    before = (budget.spent, budget.ledger, budget.conversion)
    with pytest.raises(BudgetExceededError, match=r"'sums' \(rho 0\.1\) would overspend.*at most rho .* more.*Nothing was charged"):
        budget.charge_zcdp(Fraction(1, 10), what="sums")
    assert (budget.spent, budget.ledger, budget.conversion) == before
    assert not budget.can_charge_zcdp(Fraction(1, 10))
    # an (ε, δ) charge that leaves too little for the ρ already charged is refused too
    with pytest.raises(BudgetExceededError, match="certifies no epsilon"):
        budget.charge(Fraction(1, 2) - Fraction(1, 10**6), what="more")
    assert (budget.spent, budget.ledger) == before[:2]
    check_ledger(budget)


def test_remaining_rho_fits_and_nothing_more_does() -> None:
    budget = Budget(1, MICRO)
    budget.charge(Fraction(1, 4), Fraction(1, 10**7), what="selection")
    room = budget.remaining_rho
    assert room > 0 and budget.can_charge_zcdp(room)
    budget.charge_zcdp(room, what="all the rest")
    assert budget.spent[0] <= 1
    with pytest.raises(BudgetExceededError):
        budget.charge_zcdp(room / 1000, what="more")  # the search for room leaves far less unused
    check_ledger(budget)


def test_rho_needs_a_budget_with_delta_and_bad_rho_is_refused() -> None:
    budget = Budget(1)
    with pytest.raises(BudgetExceededError, match="delta > 0"):
        budget.charge_zcdp(Fraction(1, 100), what="counts")
    assert budget.remaining_rho == 0 and not budget.can_charge_zcdp(Fraction(1, 100))
    budget = Budget(1, MICRO)
    for bad, error in ((-0.1, ValueError), (float("nan"), ValueError), (float("inf"), ValueError), ("0.1", TypeError),
                       (True, TypeError), (0, ValueError)):
        with pytest.raises(error):
            budget.charge_zcdp(bad, what="x")
    with pytest.raises(ValueError):
        budget.charge_zcdp(Fraction(1, 100), what="")
    assert budget.ledger == () and budget.spent == (0, 0)


# ------------------------------------------------------------------ laws

CHARGES = st.lists(st.one_of(
    st.tuples(st.just("dp"), st.fractions(0, 1, max_denominator=1000), st.fractions(0, Fraction(1, 10**6), max_denominator=10**8)),
    st.tuples(st.just("rho"), st.fractions(Fraction(1, 1000), Fraction(1, 5), max_denominator=1000), st.just(Fraction(0))),
), max_size=8)


def _charge(budget: Budget, kind: str, a: Fraction, b: Fraction, what: str) -> None:
    if kind == "dp":
        budget.charge(a, b, what=what)
    else:
        budget.charge_zcdp(a, what=what)


@pytest.mark.slow
@given(CHARGES, st.randoms(use_true_random=False))
@settings(max_examples=25, deadline=None)
def test_any_order_stays_within_budget_and_the_order_does_not_change_the_total(charges, rnd) -> None:
    budget = Budget(3, Fraction(1, 10**5))
    for i, (kind, a, b) in enumerate(charges):
        fits = budget.can_charge(a, b) if kind == "dp" else budget.can_charge_zcdp(a)
        try:
            _charge(budget, kind, a, b, f"c{i}")
            assert fits
        except BudgetExceededError:
            assert not fits
    check_ledger(budget)
    accepted = list(budget.ledger)
    rnd.shuffle(accepted)
    again = Budget(3, Fraction(1, 10**5))
    for entry in accepted:  # every prefix of a permutation of an accepted ledger fits: totals only grow to the same end
        again.charge(entry.epsilon, entry.delta, what=entry.what, rho=entry.rho)
    assert again.spent == budget.spent and again.conversion == budget.conversion


def test_composing_rho_beats_converting_each_charge() -> None:
    """Ten Gaussian charges of ρ = 0.01 with δ = 10^-6 in all: added then converted once,
    ε ≈ 2.14; each converted at δ = 10^-7 and added, ε ≈ 6.90."""
    budget = Budget(10, MICRO)
    for i in range(10):
        budget.charge_zcdp(Fraction(1, 100), what=f"metric {i}")
    composed = budget.spent[0]
    separately = 10 * epsilon_for_rho(Fraction(1, 100), Fraction(1, 10**7))
    assert composed == epsilon_for_rho(Fraction(1, 10), MICRO)
    assert composed < separately / 3
    assert 2.1 < float(composed) < 2.2 and 6.8 < float(separately) < 7.0
    check_ledger(budget)


def test_concurrent_rho_charges_never_overspend() -> None:
    step = Fraction(1, 500)
    sequential = Budget(1, MICRO)
    while sequential.can_charge_zcdp(step):
        sequential.charge_zcdp(step, what="one")
    expected = len(sequential.ledger)
    budget = Budget(1, MICRO)
    successes: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        mine = 0
        for _ in range(4):
            try:
                budget.charge_zcdp(step, what="tiny")
                mine += 1
            except BudgetExceededError:
                pass
        with lock:
            successes.append(mine)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 4 < expected < 24 and sum(successes) == expected == len(budget.ledger)
    check_ledger(budget)


# ------------------------------------------------------------------ statements with ρ

def test_gaussian_and_laplace_statements() -> None:
    budget = Budget(2, MICRO)
    gauss = DiscreteGaussianNoise.for_rho(Fraction(1, 50), sensitivity=2, max_partitions_contributed=3)
    with pytest.raises(TypeError, match="as_zcdp=True"):
        budget.charge_guarantee(gauss.guarantee, what="counts")  # ρ only: the caller opts in to zCDP accounting
    entry = budget.charge_guarantee(gauss.guarantee, what="counts", as_zcdp=True)
    assert entry.rho == gauss.rho and entry.epsilon == entry.delta == 0
    converted = DiscreteGaussianNoise.for_epsilon_delta(Fraction(1, 2), Fraction(1, 10**7))
    budget.charge_guarantee(converted.guarantee, what="sums", as_zcdp=True)  # its ρ, not its (ε, δ)
    lap = DiscreteLaplaceNoise.for_epsilon(Fraction(1, 4), sensitivity=3)
    budget.charge_guarantee(lap.guarantee, what="selection-free metric")
    with pytest.raises(TypeError, match="needs a statement with a rho"):
        budget.charge_guarantee(lap.guarantee, what="x", as_zcdp=True)
    with pytest.raises(TypeError, match="as_zcdp must be"):
        budget.charge_guarantee(gauss.guarantee, what="x", as_zcdp="yes")  # type: ignore[arg-type]
    assert [c.rho for c in budget.ledger] == [gauss.rho, converted.rho, 0]
    assert budget.spent_rho == gauss.rho + converted.rho and budget.conversion.xi == Fraction(1, 4)
    check_ledger(budget)
    # charged as its (ε, δ) instead, the same Gaussian costs more
    plain = Budget(2, MICRO)
    plain.charge_guarantee(converted.guarantee, what="sums", as_zcdp=False)
    assert plain.spent == (Fraction(1, 2), converted.guarantee.delta_exact)


@dataclass(frozen=True)
class _Step:
    what: str
    epsilon_exact: Fraction
    delta_exact: Fraction
    rho: Fraction | None = None


@dataclass(frozen=True)
class _Release:
    components: tuple[_Step, ...]
    epsilon_exact: Fraction = Fraction(3)
    delta_exact: Fraction = MICRO
    rho: Fraction | None = None


def test_a_grouped_release_is_one_charge_of_its_parts() -> None:
    release = _Release((_Step("selection of keys", Fraction(1, 2), Fraction(1, 10**7)),
                        _Step("count", Fraction(1), Fraction(1, 10**7), Fraction(1, 100)),
                        _Step("sum", Fraction(1), Fraction(1, 10**7), Fraction(1, 50)),
                        _Step("bounds of x", Fraction(1, 10), Fraction(0))))
    budget = Budget(2, MICRO)
    entry = budget.charge_guarantee(release, what="aggregate", as_zcdp=True)
    assert entry == Charge("aggregate", Fraction(3, 5), Fraction(1, 10**7), Fraction(3, 100))
    check_ledger(budget)
    # a release whose own rho covers only its Gaussian steps still pays for its selection
    covered = Budget(2, MICRO).charge_guarantee(replace(release, rho=Fraction(3, 100)), what="aggregate", as_zcdp=True)
    assert covered == Charge("aggregate", Fraction(3, 5), Fraction(1, 10**7), Fraction(3, 100))
    all_zcdp = _Release((_Step("count", Fraction(1), Fraction(1, 10**7), Fraction(1, 10)),
                         _Step("sum", Fraction(1), Fraction(1, 10**7), Fraction(1, 10))), rho=Fraction(1, 5))
    assert Budget(4, MICRO).charge_guarantee(all_zcdp, what="all zCDP", as_zcdp=True).rho == Fraction(1, 5)
    with pytest.raises(TypeError, match="needs a statement with a rho"):  # components, none with a rho
        Budget(4, MICRO).charge_guarantee(_Release((_Step("selection of keys", Fraction(1), Fraction(0)),),
                                                   rho=Fraction(1, 5)), what="x", as_zcdp=True)
    assert Budget(4, MICRO).charge_guarantee(release, what="as stated").epsilon == 3  # default: the (ε, δ) it states


def test_summary_shows_rho_and_the_conversion() -> None:
    budget = Budget(2, MICRO)
    budget.charge(Fraction(1, 2), Fraction(1, 10**7), what="selection")
    budget.charge_zcdp(Fraction(1, 100), what="counts")
    lines = budget.summary().splitlines()
    assert lines[0] == ("Budget: epsilon 2, delta 1e-06 (basic sequential composition; rho-zCDP charges added and "
                        "converted once, docs/privacy/zcdp.md)")
    assert lines[1] == "  1. selection: epsilon 0.5, delta 1e-07"
    assert lines[2] == "  2. counts: rho 0.01 (zCDP)"
    eps_z = budget.conversion.epsilon_z
    assert lines[3].startswith(f"  zCDP: rho 0.01 in all, with delta 9e-07 left for it, converts to epsilon {float(eps_z)!r}, "
                               f"delta {float(zcdp_delta(Fraction(1, 100), eps_z)):.4g}")
    assert lines[3].endswith("(certified); plus (epsilon, delta) charges (0.5, 1e-07)")
    assert lines[4].startswith(f"  spent: epsilon {float(eps_z + Fraction(1, 2))!r}, delta 1e-06;")


# ------------------------------------------------------------------ broken copies are caught

def _drop_delta_z(xi, rho, delta_approx, delta, epsilon_cap=None):  # type: ignore[no-untyped-def]
    conv = _REAL_CONVERT(xi, rho, delta_approx, delta, epsilon_cap)
    return replace(conv, delta_z=Fraction(0))


def _ignore_approximate_delta(xi, rho, delta_approx, delta, epsilon_cap=None):  # type: ignore[no-untyped-def]
    conv = _REAL_CONVERT(xi, rho, Fraction(0), delta, epsilon_cap)  # converts at the whole δ, as if none were spent
    return replace(conv, delta_approx=delta_approx)


_REAL_CONVERT = accounting.convert


class _PerChargeBudget(Budget):
    """Converts every ρ charge separately (δ left shared equally) and adds the ε: not the rule."""

    @property
    def spent(self) -> tuple[Fraction, Fraction]:
        ledger = self.ledger
        rhos = [c.rho for c in ledger if c.rho]
        dlt = sum((c.delta for c in ledger), Fraction(0))
        left = self.delta - dlt
        eps = sum((c.epsilon for c in ledger), Fraction(0)) + sum(
            (epsilon_for_rho(r, left / len(rhos)) for r in rhos), Fraction(0))
        return eps, dlt + sum((zcdp_delta(r, epsilon_for_rho(r, left / len(rhos))) for r in rhos), Fraction(0))


def _mixed_ledger(budget: Budget) -> Budget:
    budget.charge_zcdp(Fraction(1, 100), what="counts")
    budget.charge_zcdp(Fraction(1, 100), what="sums")
    budget.charge(Fraction(1, 4), Fraction(2, 10**7), what="selection")
    return budget


@pytest.mark.parametrize("broken", [_drop_delta_z, _ignore_approximate_delta])
def test_a_broken_conversion_is_caught(broken, monkeypatch) -> None:
    monkeypatch.setattr(accounting, "convert", broken)
    budget = _mixed_ledger(Budget(3, MICRO))
    with pytest.raises(AssertionError):
        check_ledger(budget)


def test_converting_each_charge_separately_is_caught() -> None:
    budget = _mixed_ledger(_PerChargeBudget(3, MICRO))
    with pytest.raises(AssertionError, match="rule's total"):
        check_ledger(budget)
    check_ledger(_mixed_ledger(Budget(3, MICRO)))  # and the real one passes the same check


# ------------------------------------------------------------------ a fully adaptive analyst

def test_fully_adaptive_budgets_take_epsilon_delta_charges_first_then_rho_only() -> None:
    budget = Budget(2, MICRO, fully_adaptive=True)
    budget.charge(Fraction(1, 2), Fraction(1, 10**7), what="selection")
    budget.charge_zcdp(Fraction(1, 100), what="counts")
    budget.charge_zcdp(Fraction(1, 100), what="sums")
    before = (budget.spent, budget.ledger)
    assert not budget.can_charge(Fraction(1, 10))
    with pytest.raises(BudgetExceededError, match="fully_adaptive.*Nothing was charged"):
        budget.charge(Fraction(1, 10), what="another selection")
    with pytest.raises(BudgetExceededError, match="fully_adaptive"):
        budget.charge(0, Fraction(1, 10**8), what="a delta only")
    assert (budget.spent, budget.ledger) == before
    check_ledger(budget)
    fresh = Budget(2, MICRO, fully_adaptive=True)
    with pytest.raises(BudgetExceededError, match="fully_adaptive"):  # a mixed charge: its (ε, δ) part is not first
        fresh.charge(Fraction(1, 2), Fraction(1, 10**7), rho=Fraction(1, 100), what="a grouped release")
    assert fresh.ledger == () and fresh.fully_adaptive and not Budget(1).fully_adaptive
    with pytest.raises(TypeError, match="fully_adaptive"):
        Budget(1, MICRO, fully_adaptive=1)  # type: ignore[arg-type]
    # the same sequence in a budget planned in advance
    planned = Budget(2, MICRO)
    planned.charge_zcdp(Fraction(1, 100), what="counts")
    planned.charge(Fraction(1, 10), what="another selection")
    check_ledger(planned)


def test_the_examples_of_the_zcdp_page_run_as_written() -> None:
    import re
    from pathlib import Path

    page = Path(__file__).resolve().parent.parent / "docs" / "privacy" / "zcdp.md"
    if not page.is_file():
        pytest.skip("no docs beside the tests (an installed wheel)")
    blocks = re.findall(r"```python\n(.*?)\n```", page.read_text(encoding="utf-8"), flags=re.S)
    # The example of a budget stated in ρ is run by tests/test_budget_rho.py.
    blocks = [b for b in blocks if "Budget.zcdp(" not in b]
    assert len(blocks) == 2
    namespace: dict = {}
    for block in blocks:  # the second re-checks the ledger the first made
        exec(compile(block, str(page), "exec"), namespace)
    check_ledger(namespace["budget"])
    assert namespace["budget"].spent_rho == 2 * namespace["noise"].rho
