"""The paper's closed forms: in floating point for reference, and the crossover points exactly.

Nothing here is what the kernel samples from (that is the certified table of
:mod:`dpselect.core.tables`). :func:`pi_opt_closed_form` evaluates Theorem 1 of Desfontaines et al.,
"Differentially private partition selection", PoPETs 2022, with expm1/log1p;
:func:`exact_crossovers` decides n1 and n2 exactly for rational ε and δ (docs/privacy/pi-opt.md).
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Callable, NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = ["Crossovers", "pi_opt_crossovers", "pi_opt_closed_form", "tsgd_threshold", "exact_crossovers", "exact_n1"]


class Crossovers(NamedTuple):
    """n1: end of the geometric growth; n2: last n with pi < 1 (Theorem 1, Lemma 1);
    k: the TSGD truncation and release threshold (Definition 7)."""

    n1: int
    n2: int
    k: int


def _log_term(epsilon: float, delta: float) -> float:
    """ln((e^ε + 2δ − 1) / ((e^ε + 1) δ)), with expm1 for small ε and e^−ε for large ε."""
    if epsilon < 1:
        em1 = math.expm1(epsilon)
        return math.log((em1 + 2 * delta) / ((em1 + 2) * delta))
    e = math.exp(-epsilon)
    return math.log1p((2 * delta - 1) * e) - math.log1p(e) - math.log(delta)


def _geometric_sum(n: npt.ArrayLike, epsilon: float) -> npt.NDArray[np.float64]:
    """(e^{nε} − 1) / (e^ε − 1) = Σ_{i<n} e^{iε} without overflowing the intermediate terms."""
    counts = np.asarray(n, dtype=np.float64)
    if epsilon < 1:
        return np.expm1(counts * epsilon) / math.expm1(epsilon)
    return np.exp((counts - 1) * epsilon) * -np.expm1(-counts * epsilon) / -math.expm1(-epsilon)


def _log1p_scaled(epsilon: float, factor: float) -> float:
    """ln(1 + (e^ε − 1) · factor) for factor > 0, stable for large ε."""
    if epsilon < 30:
        return math.log1p(math.expm1(epsilon) * factor)
    # (e^ε − 1)·factor = e^ε (1 − e^−ε) factor; the 1 inside the log is below 1e-13 relative
    return epsilon + math.log(factor) + math.log1p(-math.exp(-epsilon))


def pi_opt_crossovers(epsilon: float, delta: float) -> Crossovers:
    """n1, n2, k for ε > 0, 0 < δ < 1 in floating point (Theorem 1, Definition 7): an estimate;
    :func:`exact_crossovers` is exact."""
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError("crossovers need epsilon > 0 and 0 < delta < 1")
    log_term = _log_term(epsilon, delta)
    n1 = 1 + math.floor(log_term / epsilon)
    pi_n1 = min(1.0, delta * float(_geometric_sum(n1, epsilon)))
    n2 = n1 + math.floor(_log1p_scaled(epsilon, (1 - pi_n1) / delta) / epsilon) if pi_n1 < 1 else n1
    k = math.ceil(log_term / epsilon)
    return Crossovers(n1, n2, k)


def pi_opt_closed_form(n: npt.ArrayLike, epsilon: float, delta: float) -> npt.NDArray[np.float64]:
    """pi_opt(n) of Theorem 1 (Theorem 2 for ε = 0 or δ = 0), vectorized."""
    counts = np.asarray(n, dtype=np.float64)
    if delta == 0:
        return np.zeros_like(counts)
    if epsilon == 0:
        return np.minimum(1.0, counts * delta)
    n1, n2, _ = pi_opt_crossovers(epsilon, delta)
    pi_n1 = min(1.0, delta * float(_geometric_sum(n1, epsilon)))
    low = delta * _geometric_sum(np.minimum(counts, n1), epsilon)
    m = np.maximum(counts - n1, 0.0)
    # (1 + δ/(e^ε − 1)) written so that it stays finite for large ε
    scale = 1 + delta / math.expm1(epsilon) if epsilon < 700 else 1.0
    mid = -np.expm1(-m * epsilon) * scale + np.exp(-m * epsilon) * pi_n1
    out = np.where(counts <= n1, low, mid)
    out = np.where(counts > n2, 1.0, out)
    return np.clip(out, 0.0, 1.0)


def tsgd_threshold(epsilon: float, delta: float) -> int:
    """k of Definition 7: ceil((1/ε) ln((e^ε + 2δ − 1) / ((e^ε + 1) δ)))."""
    return pi_opt_crossovers(epsilon, delta).k


# ------------------------------------------------------------------ exact crossover points
#
# With y = e^ε, the crossovers are signs of sparse polynomials in y with rational coefficients:
#   n1 = 1 + max{m >= 0 : y^m <= X},  X = (y + 2δ − 1) / ((y + 1) δ)   (Theorem 1)
#      ⟺ Q_m(y) = δ y^(m+1) + δ y^m − y + (1 − 2δ) <= 0;
#   n2 = n1 + #{m >= 0 : pi(n1 + m) < 1 − δ}   (pi(n + 1) = 1 exactly when pi(n) >= 1 − δ)
#      ⟺ P_m(y) = δ y^(m+1) + δ y^n1 − y + (1 − 2δ) < 0
# (substituting the closed form of pi on n1 <= n <= n2). Both are increasing in m. For rational
# ε > 0, y is transcendental (Lindemann), so a polynomial that is not identically zero is not 0
# at y and its sign is found by refining rational bounds on y; an identically zero one (e.g. δ = 1/2
# at m = 0 in P) is recognised from its coefficients. k of the TSGD release (Definition 7) is
# ceil(ln X / ε) = n1, because ln X / ε is never an integer.

_Poly = dict[int, Fraction]  # exponent -> coefficient


def _poly(*terms: tuple[int, Fraction]) -> _Poly:
    """The polynomial Σ c y^e of (e, c) terms, adding the coefficients of equal exponents: the
    exponents m + 1, m, n1, 1 and 0 of the crossover tests coincide for small m (a dict literal
    would keep only the last of them)."""
    poly: _Poly = {}
    for exponent, coefficient in terms:
        poly[exponent] = poly.get(exponent, Fraction(0)) + coefficient
    return poly


def _sign_at_exp(poly: _Poly, eps: Fraction) -> int:
    """The sign of poly(e^eps), exactly (see the comment above)."""
    from dpselect.core.exact import exp_bounds, fixed_power

    terms = {e: c for e, c in poly.items() if c != 0}
    if not terms:
        return 0
    lead = terms[max(terms)]
    if len(terms) == 1 and 0 in terms:
        return 1 if lead > 0 else -1
    # Past Cauchy's root bound 1 + max|c| / |c_lead| the leading term decides: with e^ε > 2^ε,
    # ε > log2 of the bound is enough (and avoids bounding e^ε for astronomically large ε).
    ratio = max(abs(c) for c in terms.values()) / abs(lead)
    log2_bound = max(0, ratio.numerator.bit_length() - ratio.denominator.bit_length() + 2)
    if eps > log2_bound:
        return 1 if lead > 0 else -1
    magnitude = eps.denominator.bit_length() - eps.numerator.bit_length()  # ≈ log2(1/ε)
    bits = 96 + max(0, magnitude) + max(terms).bit_length()
    while bits <= 1 << 16:
        y_lo, y_hi = exp_bounds(eps, bits + 8)
        low = high = Fraction(0)
        for e, c in terms.items():  # y^e bounded by binary powering, every product rounded outward
            a = fixed_power(y_lo, e, bits, upper=False) * c
            b = fixed_power(y_hi, e, bits, upper=True) * c
            low, high = low + min(a, b), high + max(a, b)
        if low > 0:
            return 1
        if high < 0:
            return -1
        bits *= 2
    raise ArithmeticError("could not decide a crossover sign (please report this as a bug)")


def _first_true(test: Callable[[int], bool], guess: int, limit: int) -> int | None:
    """The smallest m in [0, limit] with test(m), for a test that is monotone (False then True),
    searched outward from ``guess``; None when even test(limit) is False."""
    guess = min(max(guess, 0), limit)
    if test(guess):
        hi, lo, step = guess, guess - 1, 1
        while lo >= 0 and test(lo):
            hi, lo, step = lo, lo - step, step * 2
        lo = max(lo, -1)
    else:
        lo, hi, step = guess, guess + 1, 1
        while hi <= limit and not test(hi):
            lo, hi, step = hi, hi + step, step * 2
        if hi > limit:
            if not test(limit):
                return None
            hi = limit
    while hi - lo > 1:  # test(lo) False (or lo = -1), test(hi) True
        mid = (lo + hi) // 2
        if test(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _float_n1_guess(eps: Fraction, delta: Fraction) -> int:
    """ln X / ε in floating point, for the exact search to start near the answer."""
    e, d = float(eps), float(delta)
    try:
        if e > 30:
            log_x = _log_term(e, d)
        else:
            em1 = math.expm1(e)
            log_x = math.log1p((1 - d) * em1 / ((2 + em1) * d)) if em1 > 0 else 0.0
        guess = log_x / e if e > 0 and log_x > 0 else (1 - d) / (2 * d)
        return int(min(guess, 2.0**62))
    except (OverflowError, ValueError, ZeroDivisionError):
        return int(min((1 - d) / (2 * d), 2.0**62))


def exact_n1(epsilon: Fraction, delta: Fraction, limit: int = 1 << 40) -> int | None:
    """n1 = 1 + ⌊t⌋ of Theorem 1 for rational ε > 0 and 0 < δ < 1, exactly; it is also k = ⌈t⌉
    of Definition 7 (t is never an integer). None when n1 would exceed ``limit``."""
    eps, delta = Fraction(epsilon), Fraction(delta)
    if not (eps > 0 and 0 < delta < 1):
        raise ValueError("crossovers need epsilon > 0 and 0 < delta < 1")

    def q_positive(m: int) -> bool:  # y^m > X
        return _sign_at_exp(_poly((m + 1, delta), (m, delta), (1, Fraction(-1)), (0, 1 - 2 * delta)), eps) > 0

    return _first_true(q_positive, _float_n1_guess(eps, delta), limit)  # = 1 + max{m : Q_m <= 0}: Q_0 < 0


def exact_crossovers(epsilon: Fraction, delta: Fraction, limit: int = 1 << 40) -> tuple[int, int]:
    """(n1, n2) of Theorem 1 for rational ε > 0 and 0 < δ < 1, exactly: pi_opt grows
    geometrically up to n1, and n2 is the last count with pi_opt(n) < 1 (n2 + 1 is the first
    count released surely). Raises ValueError when n2 would exceed ``limit``."""
    eps, delta = Fraction(epsilon), Fraction(delta)
    first = exact_n1(eps, delta, limit)
    if first is None:
        raise ValueError(f"pi_opt's crossover n1 exceeds {limit}")
    n1 = first

    def p_nonnegative(m: int) -> bool:  # pi(n1 + m) >= 1 − δ
        return _sign_at_exp(_poly((m + 1, delta), (n1, delta), (1, Fraction(-1)), (0, 1 - 2 * delta)), eps) >= 0

    count = _first_true(p_nonnegative, n1, limit)
    if count is None:
        raise ValueError(f"pi_opt's crossover n2 exceeds {limit}")
    return n1, n1 + count
