"""An exact (ε, δ) privacy budget accountant (docs/privacy/budget.md, docs/privacy/zcdp.md).

Basic sequential composition (Dwork and Roth, *The Algorithmic Foundations of Differential
Privacy*, 2014, Theorem 3.16): mechanisms that are (ε_i, δ_i)-DP on the same data are together
(Σ ε_i, Σ δ_i)-DP. :class:`Budget` keeps a ledger of charges in exact rational arithmetic and
refuses, before anything runs, any charge that would take the total above the budget: there is
no floating-point sum that could drift past it.

ρ-zCDP charges (Gaussian noise) compose by adding ρ, and their total is converted to (ε, δ)
once, with the δ the (ε, δ) charges leave (:mod:`dpselect.aggregation.accounting`): much tighter
than converting each one and adding.

A budget can also be stated in ρ (:meth:`Budget.zcdp`, as Tumult Analytics' ρ budgets and OpenDP's
zero-concentrated divergence): its total is δ-approximately ρ-zCDP, ρ-zCDP charges add their ρ and
an (ε, δ)-DP charge costs min(ε²/2, ε) and its δ (docs/privacy/zcdp.md, "A budget stated in ρ").

A charge records what it paid for; several steps of one release (partition selection, bounds,
noisy metrics) are usually planned together with :meth:`Budget.split`.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping

from dpselect.aggregation import accounting
from dpselect.aggregation.accounting import Conversion
from dpselect.core.checks import check_delta, check_epsilon, check_nonnegative_real
from dpselect.core.guarantee import format_delta
from dpselect.errors import DPSelectError

__all__ = ["Budget", "BudgetExceededError", "Charge", "INFORMATION_DELTA", "MAX_RHO"]

# The δ given to converting a budget stated in ρ to (ε, δ) where it is shown for information only.
INFORMATION_DELTA = Fraction(1, 10**6)
# The largest total ρ: ε²/2 of the largest ε a release takes (2**20); beyond it nothing is private.
MAX_RHO = Fraction(2**40)


class BudgetExceededError(DPSelectError, ValueError):
    """A charge would spend more than the budget has left (nothing was charged)."""


@dataclass(frozen=True)
class Charge:
    """One entry of the ledger: ``what`` was paid with (epsilon, delta) and ``rho``: the step
    is δ-approximately (ε, ρ)-zCDP (docs/privacy/zcdp.md); ρ = 0 for an (ε, δ)-DP step, ε = δ = 0
    for a ρ-zCDP one."""

    what: str
    epsilon: Fraction
    delta: Fraction
    rho: Fraction = Fraction(0)
    # In a budget stated in ρ: the ρ the charge cost (its ρ, plus min(ε²/2, ε) for each (ε, δ)-DP part).
    as_rho: Fraction | None = None

    def __str__(self) -> str:
        if self.rho == 0:
            text = f"{self.what}: epsilon {_show(self.epsilon)}, delta {format_delta(self.delta)}"
        else:
            parts = [f"rho {_show(self.rho)} (zCDP)"]
            if self.epsilon or self.delta:
                parts.append(f"epsilon {_show(self.epsilon)}, delta {format_delta(self.delta)}")
            text = f"{self.what}: {'; '.join(parts)}"
        if self.as_rho is not None and self.as_rho != self.rho:
            text += f" (charged as rho {_show(self.as_rho)}: min(epsilon**2/2, epsilon) for each (epsilon, delta)-DP part)"
        return text


def _show(value: Fraction) -> str:
    """An exact value as a short decimal when it is one, else as a fraction with its float (its
    order of magnitude beyond the floats, e.g. the ε²/2 of a huge ε)."""
    try:
        as_float = float(value)
    except OverflowError:
        return f"about 1e{len(str(value.numerator // value.denominator)) - 1}"
    if Fraction(repr(as_float)) == value:
        return f"{as_float:g}" if Fraction(f"{as_float:g}") == value else repr(as_float)
    return f"{value} (~{as_float:.6g})"


def _epsilon(value: object) -> Fraction:
    """An amount of ε: a non-negative finite real, exactly (floats read as the decimal written)."""
    return check_epsilon(value)[1]


def _delta(value: object) -> Fraction:
    """An amount of δ: in [0, 1), exactly."""
    return check_delta(value)[1]


def _rho(value: object) -> Fraction:
    """An amount of ρ: a non-negative finite real, exactly."""
    return check_nonnegative_real("rho", value)[1]


def _what(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("what must be a non-empty string saying what the charge pays for")
    return value


class Budget:
    """A total (ε, δ) to be spent by basic sequential composition, with a ledger; ρ-zCDP
    charges (:meth:`charge_zcdp`) compose by adding ρ and are converted to (ε, δ) once
    (docs/privacy/zcdp.md). ``Budget(rho=...)`` (or :meth:`Budget.zcdp`) is a budget stated in
    ρ instead: see :meth:`zcdp`.

    In a budget in (ε, δ), ``spent`` and ``remaining`` are (ε, δ): what the ledger's totals
    convert to. A charge fits iff that certified conversion of the new totals is within the
    budget. (In a budget stated in ρ they are (ρ, δ), and a charge fits iff its cost in ρ and its
    δ, added exactly, are within the total.)

    Mixing the two kinds of charge is proven for a sequence whose charges are planned in
    advance (each step may use earlier outputs, its parameters may not). For an analyst who
    chooses the next charge after seeing results, ``fully_adaptive=True`` enforces an order
    that is proven for that too: every (ε, δ) charge before the first ρ charge, then only ρ
    charges (docs/privacy/zcdp.md, "Adaptivity"). With charges of one kind only, both modes
    are the same and proven for an adaptive analyst.

    Thread-safe: charges are checked and recorded under one lock, so concurrent charges can
    never overspend together."""

    def __init__(self, epsilon: object = None, delta: object = 0, *, rho: object = None,
                 fully_adaptive: bool = False) -> None:
        if (epsilon is None) == (rho is None):
            raise ValueError("give the budget's epsilon (a total (epsilon, delta), e.g. Budget(1, 1e-6)) or its rho "
                             "(a total stated in zCDP, e.g. Budget(rho=0.5) or Budget.zcdp(0.5, delta=1e-6)), "
                             f"exactly one of them; got epsilon={epsilon!r}, rho={rho!r}")
        # Exactly one of the two totals: ε (a budget in (ε, δ)) or ρ (a budget stated in zCDP).
        self._epsilon: Fraction | None = None
        self._rho: Fraction | None = None
        if rho is None:
            self._epsilon = check_epsilon(epsilon, positive=True,
                                          zero_reason=": a budget of 0 cannot pay for anything")[1]
        else:
            self._rho = check_epsilon(rho, name="rho", positive=True,
                                      zero_reason=": a budget of 0 cannot pay for anything")[1]
            if self._rho > MAX_RHO:
                raise ValueError(f"rho = {_show(self._rho)} is far beyond any meaningful privacy guarantee: at most "
                                 "2**40 here (epsilon**2/2 of the largest epsilon a release takes, 2**20)")
        self._delta = _delta(delta)
        if not isinstance(fully_adaptive, bool):
            raise TypeError(f"fully_adaptive must be True or False, got {fully_adaptive!r}")
        if fully_adaptive and self._rho is not None and self._delta > 0:
            raise ValueError(
                "fully_adaptive=True with a budget stated in rho and delta > 0 is not proven: composing "
                "delta-approximate zCDP steps whose sizes are chosen after seeing results is an open question "
                "(docs/privacy/zcdp.md, \"Adaptivity of a budget stated in rho\"). Use delta=0 (every charge then rho-zCDP, which an "
                "interactive analyst may choose adaptively), or fully_adaptive=False for charges planned in advance")
        self._fully_adaptive = fully_adaptive
        self._ledger: list[Charge] = []
        # Σξ (ε of (ε, δ) charges), Σρ, Σδ; in a budget stated in ρ, Σξ stays 0 and Σρ is what the
        # charges cost in ρ (min(ε²/2, ε) for each (ε, δ)-DP part).
        self._totals = (Fraction(0), Fraction(0), Fraction(0))
        self._conversion = accounting.convert(Fraction(0), Fraction(0), Fraction(0), self._delta)
        self._lock = threading.Lock()

    @classmethod
    def zcdp(cls, rho: object, delta: object = 0, *, fully_adaptive: bool = False) -> Budget:
        """A budget stated in ρ: its total is ρ-zCDP (Bun and Steinke, TCC 2016, Definition 1.1;
        Tumult Analytics' ρ budgets, OpenDP's zero-concentrated divergence) or, with ``delta`` > 0,
        δ-approximately ρ-zCDP (OpenDP's approximate zCDP (ρ, δ); the mixture form of
        docs/privacy/zcdp.md), for mechanisms that need a δ, like a key selection.

        Charges compose exactly, in Fractions: a ρ-zCDP charge (:meth:`charge_zcdp`) adds its
        ρ; an (ε, δ)-DP charge (:meth:`charge`, a pure ε-DP one with δ = 0) adds min(ε²/2, ε) to ρ and
        its δ (Bun and Steinke, Proposition 1.4, applied to the good part of the mixture); a
        statement (:meth:`charge_guarantee`) each of its steps so. A charge that would take
        Σρ above ``rho`` or Σδ above ``delta`` is refused, charging nothing. ``spent``,
        ``remaining`` and :meth:`split` are in (ρ, δ); :meth:`implied_dp` gives the (ε, δ) the
        total implies, through the certified conversion of docs/privacy/zcdp.md.

        Proven for charges planned in advance; with ``delta`` = 0 (every charge then ρ-zCDP)
        also for an analyst who chooses the next charge after seeing results. ``fully_adaptive=True``
        is refused with ``delta`` > 0 (docs/privacy/zcdp.md, "Adaptivity of a budget stated in ρ")."""
        return cls(rho=rho, delta=delta, fully_adaptive=fully_adaptive)

    @property
    def is_zcdp(self) -> bool:
        """Whether the budget is stated in ρ (:meth:`zcdp`) rather than in (ε, δ)."""
        return self._rho is not None

    @property
    def rho(self) -> Fraction | None:
        """The total ρ of a budget stated in ρ; None for a budget in (ε, δ)."""
        return self._rho

    @property
    def fully_adaptive(self) -> bool:
        """Whether (ε, δ) charges are refused after a ρ charge (docs/privacy/zcdp.md, "Adaptivity")."""
        return self._fully_adaptive

    @property
    def epsilon(self) -> Fraction | None:
        """The total ε; None for a budget stated in ρ (see :meth:`implied_dp`)."""
        return self._epsilon

    @property
    def delta(self) -> Fraction:
        """The total δ."""
        return self._delta

    @property
    def spent(self) -> tuple[Fraction, Fraction]:
        """(ε, δ) charged so far: (Σε, Σδ) of the (ε, δ) charges plus the certified conversion
        of Σρ (docs/privacy/zcdp.md). In a budget stated in ρ: (Σρ, Σδ), what the charges cost."""
        with self._lock:
            if self._rho is not None:
                return self._totals[1], self._totals[2]
            return self._conversion.epsilon, self._conversion.delta

    @property
    def spent_rho(self) -> Fraction:
        """Σρ of the ρ-zCDP charges so far (in a budget stated in ρ, with min(ε²/2, ε) for each
        (ε, δ)-DP charge)."""
        with self._lock:
            return self._totals[1]

    @property
    def conversion(self) -> Conversion:
        """How the totals were converted: Σξ, Σρ, Σδ and ρ's (ε_z, δ_z). In a budget stated in
        ρ, for information: Σρ converted with 10^-6 more δ (:meth:`implied_dp` for another δ)."""
        with self._lock:
            if self._rho is not None:
                return accounting.convert(Fraction(0), self._totals[1], self._totals[2],
                                          self._totals[2] + INFORMATION_DELTA)
            return self._conversion

    def implied_dp(self, delta: object = INFORMATION_DELTA) -> tuple[Fraction, Fraction]:
        """For a budget stated in ρ: the (ε, δ)-DP its whole total implies, ``delta`` (> 0) being
        the δ given to converting ρ, added to the budget's own: (ε_z, δ_budget + δ_z) with ε_z
        certified by the conversion every budget uses (Canonne, Kamath, Steinke, NeurIPS 2020,
        Corollary 13; :func:`dpselect.aggregation.accounting.convert`; docs/privacy/zcdp.md)."""
        if self._rho is None:
            raise ValueError("implied_dp is for a budget stated in rho; this one is stated in (epsilon, delta): "
                             "read budget.epsilon and budget.delta")
        extra = _delta(delta)
        if extra == 0:
            raise ValueError("delta must be > 0: rho-zCDP implies (epsilon, delta)-DP only with some delta for the "
                             "conversion, e.g. implied_dp(1e-6)")
        conv = accounting.convert(Fraction(0), self._rho, self._delta, self._delta + extra)
        return conv.epsilon, conv.delta

    @property
    def remaining(self) -> tuple[Fraction, Fraction]:
        """(ε, δ) still available (with ρ charged, a later (ε, δ) charge is checked against the
        new conversion, so it may fit with more δ than this shows: ask :meth:`can_charge`).
        In a budget stated in ρ: (ρ, δ) still available."""
        with self._lock:
            if self._rho is not None:
                return self._rho - self._totals[1], self._delta - self._totals[2]
            assert self._epsilon is not None
            return self._epsilon - self._conversion.epsilon, self._delta - self._conversion.delta

    @property
    def remaining_rho(self) -> Fraction:
        """About the largest ρ a :meth:`charge_zcdp` could still take now (certified to fit;
        0 when none fits, e.g. in a budget with δ = 0). In a budget stated in ρ: exactly the ρ
        left."""
        with self._lock:
            xi, rho, dlt = self._totals
            if self._rho is not None:
                return self._rho - rho
            assert self._epsilon is not None
            return max(Fraction(0), accounting.max_rho(xi, dlt, self._epsilon, self._delta) - rho)

    @property
    def ledger(self) -> tuple[Charge, ...]:
        """Every charge, in order."""
        with self._lock:
            return tuple(self._ledger)

    def _out_of_order(self, eps: Fraction, dlt: Fraction, rho: Fraction) -> bool:
        """Whether ``fully_adaptive`` refuses the charge: an (ε, δ) part with or after ρ."""
        return self._fully_adaptive and bool(eps or dlt) and (rho > 0 or self._totals[1] > 0)

    def _fits(self, eps: Fraction, dlt: Fraction, rho: Fraction) -> bool:
        xi, total_rho, total_delta = self._totals
        if self._rho is not None:
            return self._fits_rho(accounting.rho_of_charge(eps, dlt, rho), dlt)
        if self._out_of_order(eps, dlt, rho):
            return False
        assert self._epsilon is not None
        return accounting.fits(xi + eps, total_rho + rho, total_delta + dlt, self._epsilon, self._delta)

    def _fits_rho(self, cost: Fraction, dlt: Fraction) -> bool:
        """In a budget stated in ρ: whether Σρ + cost and Σδ + dlt are within it."""
        assert self._rho is not None
        return self._totals[1] + cost <= self._rho and self._totals[2] + dlt <= self._delta

    def can_charge(self, epsilon: object, delta: object = 0, *, rho: object = 0) -> bool:
        """Whether a charge of (ε, δ) (and ρ) would fit now (a later charge may still be refused)."""
        eps, dlt, r = _epsilon(epsilon), _delta(delta), _rho(rho)
        with self._lock:
            return self._fits(eps, dlt, r)

    def can_charge_zcdp(self, rho: object) -> bool:
        """Whether a ρ-zCDP charge of ``rho`` would fit now."""
        return self.can_charge(0, 0, rho=rho)

    def charge(self, epsilon: object, delta: object = 0, *, what: str, rho: object = 0) -> Charge:
        """Record a charge of (ε, δ) for ``what``, or raise :class:`BudgetExceededError` naming
        it and the overspend, charging nothing. ``rho`` > 0 adds a ρ-zCDP part (the step is then
        δ-approximately (ε, ρ)-zCDP; docs/privacy/zcdp.md)."""
        name = _what(what)
        eps, dlt, r = _epsilon(epsilon), _delta(delta), _rho(rho)
        if self._rho is not None:
            return self._charge_rho(name, eps, dlt, r, accounting.rho_of_charge(eps, dlt, r))
        if r > 0 and self._delta == 0:
            raise BudgetExceededError(
                f"charging {name!r}: a rho-zCDP charge needs a budget with delta > 0 (rho-zCDP converts to "
                "(epsilon, delta)-DP only for delta > 0); create the Budget with a delta, e.g. Budget(1, 1e-6). "
                "Nothing was charged.")
        with self._lock:
            xi, total_rho, total_delta = self._totals
            if self._out_of_order(eps, dlt, r):
                raise BudgetExceededError(
                    f"charging {name!r}: this Budget is fully_adaptive, and an (epsilon, delta) part after or with a "
                    "rho charge is proven only for charges planned in advance (docs/privacy/zcdp.md, \"Adaptivity\"): "
                    "make the (epsilon, delta) charges first, charge a grouped release by its (epsilon, delta) "
                    "statement, or use Budget(..., fully_adaptive=False) for a sequence planned in advance. "
                    "Nothing was charged.")
            new = (xi + eps, total_rho + r, total_delta + dlt)
            assert self._epsilon is not None
            if not accounting.fits(new[0], new[1], new[2], self._epsilon, self._delta):
                raise BudgetExceededError(self._overspend(name, eps, dlt, r, new))
            conversion = accounting.convert(new[0], new[1], new[2], self._delta, self._epsilon - new[0])
            entry = Charge(name, eps, dlt, r)
            self._ledger.append(entry)
            self._totals = new
            self._conversion = conversion
            return entry

    def _charge_rho(self, name: str, eps: Fraction, dlt: Fraction, rho: Fraction, cost: Fraction) -> Charge:
        """Record a charge costing ``cost`` in ρ and ``dlt`` in δ to a budget stated in ρ, or
        refuse it (charging nothing); ``eps`` and ``rho`` are what the step stated."""
        assert self._rho is not None
        with self._lock:
            _, total_rho, total_delta = self._totals
            if not self._fits_rho(cost, dlt):
                problems = []
                if total_rho + cost > self._rho:
                    needs = f"rho {_show(cost)}" + (" (min(epsilon**2/2, epsilon) of its (epsilon, delta)-DP part)" if eps else "")
                    problems.append(f"rho by {_show(total_rho + cost - self._rho)} (it needs {needs}, "
                                    f"{_show(self._rho - total_rho)} is left)")
                if total_delta + dlt > self._delta:
                    problems.append(f"delta by {format_delta(total_delta + dlt - self._delta)} (it needs "
                                    f"{format_delta(dlt)}, {format_delta(self._delta - total_delta)} is left"
                                    + ("; a step with delta > 0 needs a budget with one, e.g. "
                                       "Budget.zcdp(rho, delta=1e-6)" if self._delta == 0 else "") + ")")
                raise BudgetExceededError(f"charging {name!r} would overspend the budget stated in rho: "
                                          + "; ".join(problems) + ". Nothing was charged.")
            entry = Charge(name, eps, dlt, rho, as_rho=cost)
            self._ledger.append(entry)
            self._totals = (Fraction(0), total_rho + cost, total_delta + dlt)
            return entry

    def charge_zcdp(self, rho: object, *, what: str) -> Charge:
        """Record a ρ-zCDP charge (e.g. discrete Gaussian noise: ``noise.rho``) for ``what``.
        The ρ of all such charges add up and are converted to (ε, δ) once, with the δ that the
        (ε, δ) charges leave (docs/privacy/zcdp.md). Raises :class:`BudgetExceededError`,
        charging nothing, when the new total would not fit."""
        r = _rho(rho)
        if r == 0:
            raise ValueError("rho must be > 0 for a zCDP charge")
        return self.charge(0, 0, what=what, rho=r)

    def _overspend(self, name: str, eps: Fraction, dlt: Fraction, rho: Fraction,
                   new: tuple[Fraction, Fraction, Fraction]) -> str:
        """The message of a refusal (called under the lock; a budget in (ε, δ))."""
        total = self._epsilon
        assert total is not None
        if rho == 0 and new[1] == 0:  # no ρ anywhere: the message of basic composition
            spent_eps, spent_delta = self._conversion.epsilon, self._conversion.delta
            problems = []
            if new[0] > total:
                problems.append(f"epsilon by {_show(new[0] - total)} (it needs {_show(eps)}, "
                                f"{_show(total - spent_eps)} is left)")
            if new[2] > self._delta:
                problems.append(f"delta by {format_delta(new[2] - self._delta)} (it needs {format_delta(dlt)}, "
                                f"{format_delta(self._delta - spent_delta)} is left)")
            return f"charging {name!r} would overspend the budget: " + "; ".join(problems) + ". Nothing was charged."
        needs = ", ".join(p for p in (f"epsilon {_show(eps)}" if eps else "", f"delta {format_delta(dlt)}" if dlt else "",
                                      f"rho {_show(rho)}" if rho else "") if p) or "nothing"
        if new[0] > total or new[2] > self._delta:
            why = (f"the (epsilon, delta) charges alone would total ({_show(new[0])}, {format_delta(new[2])}), over "
                   f"the budget ({_show(total)}, {format_delta(self._delta)})")
        else:
            left = self._delta - new[2]
            why = (f"rho {_show(new[1])} in all, with delta {format_delta(left)} left for its conversion, certifies "
                   f"no epsilon within the {_show(total - new[0])} that the (epsilon, delta) charges leave")
        room = accounting.max_rho(self._totals[0] + eps, self._totals[2] + dlt, total, self._delta)
        hint = f"; at most rho {_show(max(Fraction(0), room - self._totals[1]))} more would fit with it" if rho else ""
        return f"charging {name!r} ({needs}) would overspend the budget: {why}{hint}. Nothing was charged."

    def charge_guarantee(self, guarantee: object, *, what: str, as_zcdp: bool | None = None) -> Charge:
        """Charge what a guarantee states: any object with ``epsilon_exact`` (or ``epsilon``)
        and ``delta_exact`` (a :class:`dpselect.core.guarantee.PrivacyGuarantee` or a
        :class:`dpselect.aggregation.noise.NoiseGuarantee`), or its ``rho``.

        ``as_zcdp=True`` charges the statement's ρ (a ρ-zCDP statement, e.g. discrete Gaussian
        noise, composes more tightly as ρ than as its (ε, δ)); a statement made of
        ``components`` (a grouped release) is then charged as one step: the ρ of the components
        that carry one, the (ε, δ) of the others. By default (None) the (ε, δ) is charged when
        the statement gives one, as planned, and a statement with only ρ is refused with advice;
        ``as_zcdp=False`` always charges (ε, δ).

        In a budget stated in ρ (:meth:`zcdp`), by default (``as_zcdp`` None or True) a statement
        made of ``components`` is charged as one step: the ρ of the components that carry one
        plus min(ε²/2, ε) for each other one, and their δ; else the statement's ρ when it has one; else
        its (ε, δ) as one (ε, δ)-DP step (min(ε²/2, ε) and δ), as ``as_zcdp=False`` always does."""
        if as_zcdp is not None and not isinstance(as_zcdp, bool):
            raise TypeError(f"as_zcdp must be True, False or None, got {as_zcdp!r}")
        if self._rho is not None and as_zcdp is not False:
            charged = self._charge_statement_in_rho(guarantee, what)
            if charged is not None:
                return charged
        if as_zcdp:
            return self._charge_zcdp_statement(guarantee, what)
        epsilon = getattr(guarantee, "epsilon_exact", None)
        if epsilon is None:
            epsilon = getattr(guarantee, "epsilon", None)
        delta = getattr(guarantee, "delta_exact", None)
        if epsilon is None or delta is None:
            advice = (" (a zCDP-only statement: charge its rho with charge_guarantee(..., as_zcdp=True) or "
                      "charge_zcdp(rho, what=...))" if getattr(guarantee, "rho", None) is not None else
                      " (a zCDP-only statement must be converted to (epsilon, delta) first, or charged by its rho)")
            raise TypeError("guarantee must state an epsilon and a delta_exact" + advice)
        return self.charge(epsilon, delta, what=what)

    def _charge_statement_in_rho(self, guarantee: object, what: str) -> Charge | None:
        """A budget stated in ρ: the statement's components (each ρ, or min(ε²/2, ε) and its δ), or its
        ρ; None when it has neither (it is then charged by its (ε, δ))."""
        assert self._rho is not None
        components = getattr(guarantee, "components", None)
        if components:
            name = _what(what)
            eps, dlt, total_rho, cost = Fraction(0), Fraction(0), Fraction(0), Fraction(0)
            for component in components:
                part = getattr(component, "rho", None)
                if part is not None:
                    total_rho += _rho(part)
                    cost += _rho(part)
                else:  # an (ε, δ)-DP step: min(ε²/2, ε), each step on its own (Σε_i²/2, not (Σε_i)²/2)
                    e = _epsilon(getattr(component, "epsilon_exact", None))
                    eps += e
                    dlt += _delta(getattr(component, "delta_exact", None))
                    cost += accounting.rho_of_dp(e)
            return self._charge_rho(name, eps, dlt, total_rho, cost)
        rho = getattr(guarantee, "rho", None)
        if rho is not None:
            return self.charge_zcdp(rho, what=what)
        return None

    def _charge_zcdp_statement(self, guarantee: object, what: str) -> Charge:
        # Components first: a statement's own ρ might cover only its zCDP steps, and a step
        # without ρ must still be charged its (ε, δ).
        components = getattr(guarantee, "components", None)
        if components:
            eps, dlt, total_rho = Fraction(0), Fraction(0), Fraction(0)
            for component in components:
                part = getattr(component, "rho", None)
                if part is not None:
                    total_rho += _rho(part)
                else:
                    eps += _epsilon(getattr(component, "epsilon_exact", None))
                    dlt += _delta(getattr(component, "delta_exact", None))
            if total_rho:
                return self.charge(eps, dlt, what=what, rho=total_rho)
        rho = getattr(guarantee, "rho", None)
        if rho is not None and not components:
            return self.charge_zcdp(rho, what=what)
        raise TypeError("as_zcdp=True needs a statement with a rho (or components with one); this one has "
                        "none: charge it with charge_guarantee(g, what=...)")

    def split(self, epsilon: object | None = None, delta: object | None = None,
              weights: Mapping[str, object] | None = None, *,
              delta_weights: Mapping[str, object] | None = None,
              rho: object | None = None) -> dict[str, tuple[Fraction, Fraction]]:
        """Shares of (ε, δ) (default: what remains) in proportion to ``weights``, exactly: e.g.
        ``split(1, 1e-6, {"selection": 1, "bounds": 1, "metrics": 2})``. ``delta_weights``
        splits δ differently (a pure-ε step gets weight 0). Nothing is charged: charge each
        share when its step runs. The shares sum exactly to the amounts split, and a split of
        more than remains is refused. A budget stated in ρ splits (ρ, δ) the same way: ``rho=``
        instead of ``epsilon``, and the shares are (ρ, δ)."""
        if not weights:
            raise ValueError("weights must name at least one step, e.g. {'selection': 1, 'metrics': 1}")
        left_eps, left_delta = self.remaining
        if self._rho is not None and epsilon is not None:
            raise ValueError("epsilon: a budget stated in rho splits (rho, delta): give rho=, e.g. "
                             "split(rho=0.1, weights={'counts': 1, 'sums': 1}), or nothing to split what remains")
        if self._rho is None and rho is not None:
            raise ValueError("rho: a budget in (epsilon, delta) splits (epsilon, delta): give epsilon, not rho")
        if rho is not None:
            epsilon = _rho(rho)
        eps = left_eps if epsilon is None else _epsilon(epsilon)
        dlt = left_delta if delta is None else _delta(delta)
        if eps > left_eps or dlt > left_delta:
            raise BudgetExceededError(f"cannot split ({_show(eps)}, {format_delta(dlt)}){' (rho, delta)' if rho is not None else ''}: only "
                                      f"({_show(left_eps)}, {format_delta(left_delta)}) remains")
        eps_shares = _proportions(weights, eps, "weights")
        delta_shares = _proportions(weights if delta_weights is None else delta_weights, dlt, "delta_weights")
        if set(delta_shares) != set(eps_shares):
            raise ValueError("delta_weights must name the same steps as weights")
        return {name: (eps_shares[name], delta_shares[name]) for name in eps_shares}

    def summary(self) -> str:
        """The ledger and totals, one line each (with ρ charges, how their total was converted)."""
        if self._rho is not None:
            return self._summary_rho()
        with self._lock:
            assert self._epsilon is not None
            conv = self._conversion
            rule = ("basic sequential composition" if conv.rho == 0 else
                    "basic sequential composition; rho-zCDP charges added and converted once, docs/privacy/zcdp.md")
            lines = [f"Budget: epsilon {_show(self._epsilon)}, delta {format_delta(self._delta)} ({rule})"]
            lines += [f"  {i}. {entry}" for i, entry in enumerate(self._ledger, start=1)]
            if conv.rho:
                lines.append(f"  zCDP: rho {_show(conv.rho)} in all, with delta {format_delta(self._delta - conv.delta_approx)} "
                             f"left for it, converts to epsilon {_show(conv.epsilon_z)}, delta {format_delta(conv.delta_z)} "
                             f"(certified); plus (epsilon, delta) charges ({_show(conv.xi)}, {format_delta(conv.delta_approx)})")
            lines.append(f"  spent: epsilon {_show(conv.epsilon)}, delta {format_delta(conv.delta)}; "
                         f"remaining: epsilon {_show(self._epsilon - conv.epsilon)}, "
                         f"delta {format_delta(self._delta - conv.delta)}")
            return "\n".join(lines)

    def _summary_rho(self) -> str:
        """The summary of a budget stated in ρ, with the (ε, δ) its total implies, for information."""
        assert self._rho is not None
        total_eps, total_delta = self.implied_dp()
        with self._lock:
            kind = "delta-approximate rho-zCDP" if self._delta else "rho-zCDP"
            lines = [f"Budget: rho {_show(self._rho)}, delta {format_delta(self._delta)} ({kind}; zCDP composition, "
                     "an (epsilon, delta)-DP charge costing min(epsilon**2/2, epsilon) and its delta, docs/privacy/zcdp.md); "
                     f"for information, it implies ({_show(total_eps)}, {format_delta(total_delta)})-DP "
                     f"(rho converted with delta {format_delta(INFORMATION_DELTA)} more, certified, Canonne, Kamath, "
                     "Steinke, NeurIPS 2020, Corollary 13)"]
            lines += [f"  {i}. {entry}" for i, entry in enumerate(self._ledger, start=1)]
            _, rho, dlt = self._totals
            lines.append(f"  spent: rho {_show(rho)}, delta {format_delta(dlt)}; remaining: rho "
                         f"{_show(self._rho - rho)}, delta {format_delta(self._delta - dlt)}")
            return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()


def _proportions(weights: Mapping[str, object], total: Fraction, name: str) -> dict[str, Fraction]:
    exact = {}
    for step, weight in weights.items():
        _what(step)
        exact[step] = check_nonnegative_real(f"{name}[{step!r}]", weight)[1]
    whole = sum(exact.values(), Fraction(0))
    if whole == 0:
        if total == 0:
            return {step: Fraction(0) for step in exact}
        raise ValueError(f"{name} must not all be 0")
    return {step: total * w / whole for step, w in exact.items()}
