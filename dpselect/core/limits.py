"""How much work each mechanism may do to certify itself, decided from the public parameters alone.

The certified tables and thresholds grow as ε shrinks: pi_opt's keep table has about
(2/ε') ln(1/δ') entries, the TSGD release's noise 2k + 1 of them, Gaussian thresholding's table
needs one exact normal-CDF bound per count up to T + 15σ, and the weighted mechanisms' threshold
must fit their fixed-point grid. Each builder asks here *before* it builds anything, so that a
parameter set it cannot serve is refused in milliseconds, never after minutes of work, with a
ValueError that names the parameter, says what a key would need to be released, and gives the
range that works (docs/privacy/limits.md). The limits
keep every build under about half a minute on one core of a small machine (Gaussian
thresholding's under a minute).
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Callable

from dpselect.core.params import PrivacyParams

__all__ = [
    "MAX_KEEP_TABLE_ENTRIES",
    "MAX_RELEASE_THRESHOLD",
    "MAX_GAUSSIAN_ENTRIES",
    "MAX_WEIGHTED_THRESHOLD",
    "log_inverse",
    "smallest_epsilon",
    "epsilon_too_small",
]

# pi_opt's keep table (and Laplace thresholding's): ~12 µs per entry built and verified.
MAX_KEEP_TABLE_ENTRIES = 1 << 21
# The TSGD release's k (its noise has 2k + 1 values): ~100 µs per unit of k to build and certify.
MAX_RELEASE_THRESHOLD = 1 << 18
# Gaussian thresholding: ~3 ms per entry (an exact bound on Φ at 208 bits); enough for
# κ = 10^4 at ε = 1, δ = 1e-5 (about 8,200 entries).
MAX_GAUSSIAN_ENTRIES = 1 << 14
# The weighted mechanisms' threshold ρ in users, on the 2^-32 grid of their weighted counts:
# ρ · 2^32 plus a weighted count must stay within int64.
MAX_WEIGHTED_THRESHOLD = 1 << 30

# The largest ε the search below tries: every count-based table is capped at ε' = 200, and the
# Gaussian and weighted mechanisms stop at 50.
_EPSILON_TOP = Fraction(10) ** 4


def log_inverse(x: Fraction) -> float:
    """ln(1/x) for a rational 0 < x, without underflow (float(x) may be 0)."""
    return math.log(x.denominator) - math.log(x.numerator)


def smallest_epsilon(fits: Callable[[Fraction], bool], top: Fraction = _EPSILON_TOP) -> Fraction | None:
    """About the smallest ε (to 1 %) with ``fits(ε)``, for a test that is monotone in ε (False
    below some ε, True above); None when even ``top`` does not fit. A bisection on a log scale:
    about 20 tests, each from the parameters alone."""
    if not fits(top):
        return None
    lo, hi = Fraction(1, 10**330), top  # fits(hi); lo is below every float
    if fits(lo):
        return lo
    while hi > lo * Fraction(101, 100):
        # the geometric mean, rounded to a short rational so that the tests stay cheap
        mid = Fraction(math.exp((math.log(hi.numerator) - math.log(hi.denominator)
                                 + math.log(lo.numerator) - math.log(lo.denominator)) / 2))
        mid = Fraction(f"{float(mid):.3g}") if float(mid) > 0 else (lo + hi) / 2
        if not lo < mid < hi:
            break
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _short(x: float) -> str:
    """Two significant digits, rounded up (the bound given must work)."""
    if x <= 0:
        return "0"
    exponent = math.floor(math.log10(x))
    mantissa = math.ceil(x / 10.0**exponent * 10) / 10
    return f"{mantissa:g}e{exponent}" if not -4 <= exponent <= 4 else f"{mantissa * 10.0**exponent:.2g}"


def epsilon_too_small(params: PrivacyParams, strategy: str, detail: str,
                      fits: Callable[[Fraction], bool] | None = None, advice: str = "",
                      top: Fraction = _EPSILON_TOP) -> ValueError:
    """The refusal of an ε too small for ``strategy``: ``detail`` says what a key would need and
    why that cannot be served; ``fits(ε)`` (the user's ε, same δ and κ) finds the range that
    works, up to the largest ε the mechanism takes, ``top``."""
    floor = smallest_epsilon(fits, top) if fits is not None else None
    if floor is not None:
        works = f"epsilon >= {_short(float(floor))} works at this delta and max_partitions_contributed"
    elif fits is not None:
        works = "no epsilon works at this delta and max_partitions_contributed: raise delta"
    else:
        works = "raise epsilon"
    return ValueError(
        f"epsilon = {params.epsilon:g} is too small for strategy {strategy!r} at delta = {params.delta:g} and "
        f"max_partitions_contributed = {params.max_partitions_contributed}: {detail}; {works}"
        + (f"; {advice}" if advice else "")
    )
