"""The statistics of the empirical audits, in plain Python floats (no SciPy needed).

* Exact (Clopper–Pearson) one-sided confidence bounds for a binomial rate, by bisection on the
  binomial tail written as a regularized incomplete beta function (continued fraction, Lentz's
  method). Each bound is widened by a relative 1e-8 after the bisection, so float rounding can
  only make it more conservative.
* The lower bound on ε that two such bounds give at a claimed δ (Jagielski, Ullman, Oprea,
  "Auditing differentially private machine learning: how private is private SGD?", NeurIPS
  2020, §3): if P[E | D] <= e^ε P[E | D'] + δ for every event E, then
  ε >= ln((p1_lower − δ) / p0_upper) whenever both bounds hold.
* The Dvoretzky–Kiefer–Wolfowitz inequality with Massart's constant, for comparing two
  empirical distributions of consumed random bytes: P[sup |F̂ − F| > t] <= 2 exp(−2 n t²) for
  every distribution, discrete ones included.
"""
from __future__ import annotations

import math

__all__ = [
    "binomial_upper_tail",
    "binomial_lower_tail",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "epsilon_lower_bound",
    "dkw_threshold",
    "quick_lower",
    "quick_upper",
]

_CF_EPS = 1e-15
_CF_MAX_ITER = 200_000
_TINY = 1e-300
_WIDEN = 1e-8
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _CF_MAX_ITER + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _CF_EPS:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b}, x={x})")


def _stirling_tail(x: float) -> float:
    """ω(x) = lgamma(x) − [(x − 1/2) ln x − x + ln √(2π)], for x >= 10 (error < 1e-16)."""
    inv = 1.0 / x
    inv2 = inv * inv
    return inv * (1 / 12 - inv2 * (1 / 360 - inv2 * (1 / 1260 - inv2 / 1680)))


def _log_beta(a: float, b: float) -> float:
    """ln B(a, b) without the cancellation of lgamma(a) + lgamma(b) − lgamma(a + b) when a + b is
    large (the Stirling form with the ratios a/(a+b), b/(a+b) written through log1p)."""
    if a > b:
        a, b = b, a
    if b < 10.0:
        return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    s = a + b
    omega = _stirling_tail(b) - _stirling_tail(s)
    if a < 10.0:  # lgamma(b) − lgamma(a + b) by Stirling, lgamma(a) directly
        return (math.lgamma(a) + (b - 0.5) * math.log1p(-a / s) - a * math.log(s) + a + omega)
    return ((a - 0.5) * math.log(a / s) + (b - 0.5) * math.log1p(-a / s) - 0.5 * math.log(s) + _LOG_SQRT_2PI
            + _stirling_tail(a) + omega)


def _ibeta(a: float, b: float, x: float, y: float) -> float:
    """I_x(a, b), the regularized incomplete beta function, with y = 1 − x given separately (so
    that both logarithms keep their relative precision when x or y is tiny)."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    log_front = a * math.log(x) + b * math.log(y) - _log_beta(a, b)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _continued_fraction(b, a, y) / b


def binomial_upper_tail(n: int, k: int, p: float) -> float:
    """P[Bin(n, p) >= k]."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    return _ibeta(float(k), float(n - k + 1), p, 1.0 - p)


def binomial_lower_tail(n: int, k: int, p: float) -> float:
    """P[Bin(n, p) <= k]."""
    if k >= n:
        return 1.0
    if k < 0:
        return 0.0
    return _ibeta(float(n - k), float(k + 1), 1.0 - p, p)


def _check(k: int, n: int, alpha: float) -> None:
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {k} of {n}")
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")


def clopper_pearson_lower(k: int, n: int, alpha: float) -> float:
    """The exact one-sided lower confidence bound of level 1 − alpha for a binomial rate with
    k successes in n trials: the p with P[Bin(n, p) >= k] = alpha (0 when k = 0)."""
    _check(k, n, alpha)
    if k == 0:
        return 0.0
    if k == n:
        return math.exp(math.log(alpha) / n) * (1.0 - _WIDEN)
    lo, hi = 0.0, k / n  # the tail at p = k/n is about 1/2 > alpha
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if binomial_upper_tail(n, k, mid) > alpha:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-13 * hi:
            break
    return lo * (1.0 - _WIDEN)


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """The exact one-sided upper confidence bound of level 1 − alpha: the p with
    P[Bin(n, p) <= k] = alpha (1 when k = n)."""
    _check(k, n, alpha)
    if k == n:
        return 1.0
    if k == 0:
        return min(1.0, -math.expm1(math.log(alpha) / n) * (1.0 + _WIDEN))
    lo, hi = k / n, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if binomial_lower_tail(n, k, mid) > alpha:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return min(1.0, hi * (1.0 + _WIDEN))


def quick_lower(k: int, n: int, z: float) -> float:
    """A fast approximate lower bound (Wilson score), to rank candidate events on the pilot
    half; never used for a verdict."""
    if n == 0:
        return 0.0
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z * z / n))


def quick_upper(k: int, n: int, z: float) -> float:
    """The Wilson score upper bound (ranking only)."""
    if n == 0:
        return 1.0
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return min(1.0, (centre + spread) / (1 + z * z / n))


def epsilon_lower_bound(p1_lower: float, p0_upper: float, delta: float) -> float:
    """ln((p1_lower − δ) / p0_upper): the smallest ε compatible with P[E|D] >= p1_lower and
    P[E|D'] <= p0_upper under (ε, δ)-DP; 0 when the bounds show nothing (p1_lower <= δ), +inf
    when P[E|D'] is known to be 0 and p1_lower > δ (no ε can then explain the gap)."""
    gap = p1_lower - delta
    if gap <= 0.0:
        return 0.0
    if p0_upper <= 0.0:
        return math.inf
    return max(0.0, math.log(gap / p0_upper))


def dkw_threshold(n: int, alpha: float) -> float:
    """t with P[sup_x |F̂_n(x) − F(x)| > t] <= alpha (DKW with Massart's constant 2)."""
    if n < 1:
        raise ValueError("need at least one sample")
    return math.sqrt(math.log(2.0 / alpha) / (2.0 * n))
