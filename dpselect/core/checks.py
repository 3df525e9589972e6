"""One vocabulary of parameter checks, shared by every public entry point (docs/errors.md).

The rule, the same wherever a parameter is taken:

* a parameter of the wrong type raises :class:`dpselect.errors.ParameterTypeError` (a
  ``TypeError``): a float κ such as 1.5 (never truncated to 1), a string ε, a bool anywhere a
  number is meant;
* a parameter of the right type with a value out of range raises
  :class:`dpselect.errors.ParameterError` (a ``ValueError``): κ = 0, ε < 0, δ ≥ 1, NaN, and an
  int too large for a float (10**400 is named, never a raw ``OverflowError``);
* the message starts with the parameter's name, then the reason, then (where it helps) what to
  pass instead, with the same words at every entry point: ``max_partitions_contributed must be
  a positive int, got float 1.5``, ``epsilon must be >= 0, got -1``, ``delta must be in [0, 1),
  got 1.5``.

Numbers are read exactly: a float as the decimal it is written as (its shortest repr), an int or
a :class:`fractions.Fraction` as itself (:func:`dpselect.core.exact.as_fraction`). An entry point
adds its own limits after these checks (the aggregation's ε ≤ 2**20, a mechanism's largest κ),
raising :class:`ParameterError` too, and checks everything before it reads data or charges a
budget.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Collection
from fractions import Fraction
from numbers import Number, Real

from dpselect.core.exact import as_fraction
from dpselect.errors import ParameterError, ParameterTypeError

__all__ = [
    "short",
    "check_real",
    "check_positive_real",
    "check_nonnegative_real",
    "check_epsilon",
    "check_delta",
    "check_level",
    "check_probability",
    "check_positive_int",
    "check_max_partitions_contributed",
    "check_max_contributions_per_partition",
    "check_choice",
]

# What the messages say of the float range (the largest double is about 1.797e308).
FLOAT_RANGE = "at most about 1.8e308"

# What κ and L∞ mean, said where they are refused.
_KAPPA_MEANING = ("the most partitions (keys) one privacy unit contributes to; choose it from public knowledge "
                  "of the data")
_LINF_MEANING = ("the most rows one privacy unit contributes to one partition; choose it from public "
                 "knowledge of the data")


def short(value: object) -> str:
    """A short form of a parameter for a message: an int of hundreds of digits is not printed whole."""
    if isinstance(value, int) and not isinstance(value, bool):
        text = str(abs(value))
        if len(text) > 30:
            return f"{'-' if value < 0 else ''}{text[0]}e{len(text) - 1} (an int of {len(text)} digits)"
    if isinstance(value, Fraction) and max(value.numerator.bit_length(), value.denominator.bit_length()) > 100:
        try:
            return f"{float(value):.6g} (a Fraction)"
        except OverflowError:
            return f"about {'-' if value < 0 else ''}1e{len(str(abs(value.numerator // value.denominator))) - 1} " \
                   "(a Fraction)"
    # Numbers as written (numpy scalars without their "np.float64(...)"), anything else as its repr.
    text = str(value) if isinstance(value, Number) and not isinstance(value, bool) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _type_name(value: object) -> str:
    return type(value).__name__


def _real_type(name: str, value: object, what: str = "a real number") -> None:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ParameterTypeError(f"{name} must be {what}, got {_type_name(value)}")


def _as_float(value: Real) -> float | None:
    """float(value), or None for an int or Fraction beyond the float range."""
    try:
        return float(value)
    except OverflowError:
        return None


def check_real(name: str, value: object, *, too_large: str = "") -> tuple[float, Fraction]:
    """A finite real: (its float, the exact rational it denotes). ``too_large`` is advice added
    to the message for a value beyond the floats."""
    _real_type(name, value)
    as_float = _as_float(value)  # type: ignore[arg-type]
    if as_float is None:
        raise ParameterError(f"{name} = {short(value)} is too large to represent as a float ({FLOAT_RANGE})"
                             f"{too_large}")
    if not math.isfinite(as_float):
        raise ParameterError(f"{name} must be finite, got {short(value)}")
    return as_float, as_fraction(value)  # type: ignore[arg-type]


def _finite_float(name: str, value: object) -> float | None:
    """Type and finiteness; the float (None when beyond the float range), signs not yet checked."""
    _real_type(name, value)
    as_float = _as_float(value)  # type: ignore[arg-type]
    if as_float is not None and not math.isfinite(as_float):
        raise ParameterError(f"{name} must be finite, got {short(value)}")
    return as_float


def check_nonnegative_real(name: str, value: object, *, too_large: str = "") -> tuple[float, Fraction]:
    """A finite real >= 0: (float, exact)."""
    _finite_float(name, value)
    if value < 0:  # type: ignore[operator]
        raise ParameterError(f"{name} must be >= 0, got {short(value)}")
    return check_real(name, value, too_large=too_large)


def check_positive_real(name: str, value: object, *, too_large: str = "") -> Fraction:
    """A finite real > 0, exactly (a noise scale, a variance, ρ, ...)."""
    _finite_float(name, value)
    if value <= 0:  # type: ignore[operator]
        raise ParameterError(f"{name} must be > 0, got {short(value)}")
    return check_real(name, value, too_large=too_large)[1]


def check_epsilon(value: object, *, name: str = "epsilon", positive: bool = False, zero_reason: str = "",
                  too_large: str = "") -> tuple[float, Fraction]:
    """ε: a finite real >= 0 (> 0 with ``positive``; ``zero_reason`` says why 0 is refused):
    (float, exact)."""
    as_float, exact = check_nonnegative_real(name, value, too_large=too_large)
    if positive and exact == 0:
        raise ParameterError(f"{name} must be > 0, got {short(value)}{zero_reason}")
    return as_float, exact


def check_delta(value: object, *, name: str = "delta", positive: bool = False,
                zero_reason: str = "") -> tuple[float, Fraction]:
    """δ: a real in [0, 1) ((0, 1) with ``positive``): (float, exact)."""
    as_float = _finite_float(name, value)
    if not 0 <= value < 1 or as_float is None or as_float >= 1:  # type: ignore[operator]
        raise ParameterError(f"{name} must be in [0, 1), got {short(value)}")
    exact = as_fraction(value)  # type: ignore[arg-type]
    if positive and exact == 0:
        raise ParameterError(f"{name} must be > 0, got {short(value)}{zero_reason}")
    return as_float, exact


def check_level(value: object, *, name: str = "level", float_below_one: bool = False) -> Fraction:
    """A confidence level, strictly between 0 and 1, exactly (read as the decimal written).
    ``float_below_one`` also refuses a level whose float rounds to 1, for code that computes
    with the float."""
    as_float = _finite_float(name, value)
    if not 0 < value < 1 or (float_below_one and not (as_float is not None and as_float < 1)):  # type: ignore[operator]
        raise ParameterError(f"{name} must be strictly between 0 and 1 (e.g. 0.95), got {short(value)}")
    return as_fraction(value)  # type: ignore[arg-type]


def check_probability(value: object, *, name: str, low_open: bool = False, high_open: bool = False,
                      what: str = "", advice: str = "") -> Fraction:
    """A probability in [0, 1] (an end excluded with ``low_open`` / ``high_open``), exactly.
    ``what`` says what it is the probability of; ``advice`` what to pass instead."""
    as_float = _finite_float(name, value)
    low_ok = 0 < value if low_open else 0 <= value  # type: ignore[operator]
    high_ok = value < 1 if high_open else value <= 1  # type: ignore[operator]
    if not (low_ok and high_ok) or as_float is None:
        interval = f"{'(' if low_open else '['}0, 1{')' if high_open else ']'}"
        raise ParameterError(f"{name} must be in {interval}{what}, got {short(value)}{advice}")
    return as_fraction(value)  # type: ignore[arg-type]


def check_positive_int(value: object, *, name: str, meaning: str = "") -> int:
    """An int >= 1 (Python or numpy integers; a float is refused, never truncated). ``meaning``
    says what the parameter is, in the message for a value below 1."""
    if isinstance(value, bool):
        raise ParameterTypeError(f"{name} must be a positive int, got bool {value!r}")
    try:
        as_int = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ParameterTypeError(f"{name} must be a positive int, got {_type_name(value)} {short(value)}") from None
    if as_int < 1:
        raise ParameterError(f"{name} must be >= 1, got {short(as_int)}{': ' + meaning if meaning else ''}")
    return as_int


def check_max_partitions_contributed(value: object, *, name: str = "max_partitions_contributed") -> int:
    """κ: the most partitions one privacy unit contributes to, an int >= 1."""
    return check_positive_int(value, name=name, meaning=_KAPPA_MEANING)


def check_max_contributions_per_partition(value: object, *, name: str = "max_contributions_per_partition") -> int:
    """L∞: the most rows one privacy unit contributes to one partition, an int >= 1."""
    return check_positive_int(value, name=name, meaning=_LINF_MEANING)


def check_choice(value: object, *, name: str, choices: Collection[str]) -> str:
    """One of a few names."""
    if not isinstance(value, str):
        raise ParameterTypeError(f"{name} must be one of {tuple(choices)}, got {_type_name(value)} {short(value)}")
    if value not in choices:
        raise ParameterError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value
