"""An exact (ε, δ) privacy budget accountant (docs/privacy/budget.md).

Basic sequential composition (Dwork and Roth, *The Algorithmic Foundations of Differential
Privacy*, 2014, Theorem 3.16): mechanisms that are (ε_i, δ_i)-DP on the same data are together
(Σ ε_i, Σ δ_i)-DP. :class:`Budget` keeps a ledger of charges in exact rational arithmetic and
refuses, before anything runs, any charge that would take the total above the budget: there is
no floating-point sum that could drift past it.

A charge records what it paid for; several steps of one release (partition selection, bounds,
noisy metrics) are usually planned together with :meth:`Budget.split`.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping

from dpselect.core.checks import check_delta, check_epsilon, check_nonnegative_real
from dpselect.core.guarantee import format_delta
from dpselect.errors import DPSelectError

__all__ = ["Budget", "BudgetExceededError", "Charge"]


class BudgetExceededError(DPSelectError, ValueError):
    """A charge would spend more than the budget has left (nothing was charged)."""


@dataclass(frozen=True)
class Charge:
    """One entry of the ledger: ``what`` was paid with (epsilon, delta)."""

    what: str
    epsilon: Fraction
    delta: Fraction

    def __str__(self) -> str:
        return f"{self.what}: epsilon {_show(self.epsilon)}, delta {format_delta(self.delta)}"


def _show(value: Fraction) -> str:
    """An exact value as a short decimal when it is one, else as a fraction with its float."""
    as_float = float(value)
    if Fraction(repr(as_float)) == value:
        return f"{as_float:g}" if Fraction(f"{as_float:g}") == value else repr(as_float)
    return f"{value} (~{as_float:.6g})"


def _epsilon(value: object) -> Fraction:
    """An amount of ε: a non-negative finite real, exactly (floats read as the decimal written)."""
    return check_epsilon(value)[1]


def _delta(value: object) -> Fraction:
    """An amount of δ: in [0, 1), exactly."""
    return check_delta(value)[1]


def _what(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("what must be a non-empty string saying what the charge pays for")
    return value


class Budget:
    """A total (ε, δ) to be spent by basic sequential composition, with a ledger.

    Thread-safe: charges are checked and recorded under one lock, so concurrent charges can
    never overspend together."""

    def __init__(self, epsilon: object, delta: object = 0) -> None:
        self._epsilon = check_epsilon(epsilon, positive=True, zero_reason=": a budget of 0 cannot pay for anything")[1]
        self._delta = _delta(delta)
        self._ledger: list[Charge] = []
        self._spent = (Fraction(0), Fraction(0))
        self._lock = threading.Lock()

    @property
    def epsilon(self) -> Fraction:
        """The total ε."""
        return self._epsilon

    @property
    def delta(self) -> Fraction:
        """The total δ."""
        return self._delta

    @property
    def spent(self) -> tuple[Fraction, Fraction]:
        """(ε, δ) charged so far."""
        with self._lock:
            return self._spent

    @property
    def remaining(self) -> tuple[Fraction, Fraction]:
        """(ε, δ) still available."""
        with self._lock:
            return self._epsilon - self._spent[0], self._delta - self._spent[1]

    @property
    def ledger(self) -> tuple[Charge, ...]:
        """Every charge, in order."""
        with self._lock:
            return tuple(self._ledger)

    def can_charge(self, epsilon: object, delta: object = 0) -> bool:
        """Whether a charge of (ε, δ) would fit now (a later charge may still be refused)."""
        eps, dlt = _epsilon(epsilon), _delta(delta)
        with self._lock:
            return self._spent[0] + eps <= self._epsilon and self._spent[1] + dlt <= self._delta

    def charge(self, epsilon: object, delta: object = 0, *, what: str) -> Charge:
        """Record a charge of (ε, δ) for ``what``, or raise :class:`BudgetExceededError` naming
        it and the overspend, charging nothing."""
        name = _what(what)
        eps, dlt = _epsilon(epsilon), _delta(delta)
        with self._lock:
            new_eps, new_delta = self._spent[0] + eps, self._spent[1] + dlt
            problems = []
            if new_eps > self._epsilon:
                problems.append(f"epsilon by {_show(new_eps - self._epsilon)} (it needs {_show(eps)}, "
                                f"{_show(self._epsilon - self._spent[0])} is left)")
            if new_delta > self._delta:
                problems.append(f"delta by {format_delta(new_delta - self._delta)} (it needs {format_delta(dlt)}, "
                                f"{format_delta(self._delta - self._spent[1])} is left)")
            if problems:
                raise BudgetExceededError(f"charging {name!r} would overspend the budget: " + "; ".join(problems)
                                          + ". Nothing was charged.")
            entry = Charge(name, eps, dlt)
            self._ledger.append(entry)
            self._spent = (new_eps, new_delta)
            return entry

    def charge_guarantee(self, guarantee: object, *, what: str) -> Charge:
        """Charge what a guarantee states: any object with ``epsilon_exact`` (or ``epsilon``)
        and ``delta_exact`` (a :class:`dpselect.core.guarantee.PrivacyGuarantee` or a
        :class:`dpselect.aggregation.noise.NoiseGuarantee`)."""
        epsilon = getattr(guarantee, "epsilon_exact", None)
        if epsilon is None:
            epsilon = getattr(guarantee, "epsilon", None)
        delta = getattr(guarantee, "delta_exact", None)
        if epsilon is None or delta is None:
            raise TypeError("guarantee must state an epsilon and a delta_exact (a zCDP-only statement must "
                            "be converted to (epsilon, delta) first)")
        return self.charge(epsilon, delta, what=what)

    def split(self, epsilon: object | None = None, delta: object | None = None,
              weights: Mapping[str, object] | None = None, *,
              delta_weights: Mapping[str, object] | None = None) -> dict[str, tuple[Fraction, Fraction]]:
        """Shares of (ε, δ) (default: what remains) in proportion to ``weights``, exactly: e.g.
        ``split(1, 1e-6, {"selection": 1, "bounds": 1, "metrics": 2})``. ``delta_weights``
        splits δ differently (a pure-ε step gets weight 0). Nothing is charged: charge each
        share when its step runs. The shares sum exactly to the amounts split, and a split of
        more than remains is refused."""
        if not weights:
            raise ValueError("weights must name at least one step, e.g. {'selection': 1, 'metrics': 1}")
        left_eps, left_delta = self.remaining
        eps = left_eps if epsilon is None else _epsilon(epsilon)
        dlt = left_delta if delta is None else _delta(delta)
        if eps > left_eps or dlt > left_delta:
            raise BudgetExceededError(f"cannot split ({_show(eps)}, {format_delta(dlt)}): only "
                                      f"({_show(left_eps)}, {format_delta(left_delta)}) remains")
        eps_shares = _proportions(weights, eps, "weights")
        delta_shares = _proportions(weights if delta_weights is None else delta_weights, dlt, "delta_weights")
        if set(delta_shares) != set(eps_shares):
            raise ValueError("delta_weights must name the same steps as weights")
        return {name: (eps_shares[name], delta_shares[name]) for name in eps_shares}

    def summary(self) -> str:
        """The ledger and totals, one line each."""
        with self._lock:
            lines = [f"Budget: epsilon {_show(self._epsilon)}, delta {format_delta(self._delta)} "
                     "(basic sequential composition)"]
            lines += [f"  {i}. {entry}" for i, entry in enumerate(self._ledger, start=1)]
            lines.append(f"  spent: epsilon {_show(self._spent[0])}, delta {format_delta(self._spent[1])}; "
                         f"remaining: epsilon {_show(self._epsilon - self._spent[0])}, "
                         f"delta {format_delta(self._delta - self._spent[1])}")
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
