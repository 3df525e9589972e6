"""The bases of every exception and warning dpselect raises on purpose.

``except dpselect.DPSelectError`` catches any refusal of dpselect's own, whatever else it is:
each class keeps the built-in base that says what kind of failure it is (a ``ValueError`` for a
bad value, a ``TypeError`` for a wrong type, a ``RuntimeError`` for a certificate that failed),
so code that catches those keeps working. The parameter checks of every public entry point
(:mod:`dpselect.core.checks`) raise :class:`ParameterError` for a bad value and
:class:`ParameterTypeError` for a wrong type (docs/errors.md).

Warnings have their own base, :class:`DPSelectWarning` (a ``UserWarning``): a warning is not a
refusal, and ``warnings.simplefilter("error", dpselect.DPSelectWarning)`` turns dpselect's own
into errors without touching other libraries'.

Internal: import the classes from ``dpselect`` (they are in ``dpselect.__all__``); this module
may move.

This module imports nothing from the package, so every module (and the compiled extensions)
can import it.
"""
from __future__ import annotations

__all__ = ["DPSelectError", "DPSelectWarning", "ParameterError", "ParameterTypeError"]


class DPSelectError(Exception):
    """Base of every exception dpselect raises on purpose."""


class DPSelectWarning(UserWarning):
    """Base of every warning dpselect issues."""


class ParameterError(DPSelectError, ValueError):
    """A parameter of the right type with a value out of range (ε < 0, δ ≥ 1, κ = 0, ...); the
    message names the parameter, the reason and what to pass instead."""


class ParameterTypeError(DPSelectError, TypeError):
    """A parameter of the wrong type (a float κ such as 1.5, a string ε, ...); the message names
    the parameter and the type it needs."""
