"""dpselect: optimal, certified differentially private partition selection.

The public API, re-exported; see the modules for details.
"""
from dpselect.guarantee import PrivacyGuarantee
from dpselect.pipeline import select_partitions
from dpselect.rng import SecureRNG
from dpselect.selection import Crossovers, Release, crossovers, keep_probability, release, select
from dpselect.strategies import (
    PiOptSelection,
    SelectionResult,
    SelectionStrategy,
    TSGDRelease,
    make_strategy,
)
from dpselect.tables import CertificationError

__version__ = "0.1.0"

# Subpackages with their own optional dependencies load on first use: `dpselect.rainbow`,
# `dpselect.personalized`, `dpselect.testing`.
_LAZY_SUBMODULES = {"rainbow", "personalized", "testing"}


def __getattr__(name: str) -> object:
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"dpselect.{name}")
    raise AttributeError(f"module 'dpselect' has no attribute {name!r}")


__all__ = [
    "select_partitions",
    "select",
    "release",
    "keep_probability",
    "crossovers",
    "Crossovers",
    "Release",
    "make_strategy",
    "SelectionStrategy",
    "SelectionResult",
    "PiOptSelection",
    "TSGDRelease",
    "PrivacyGuarantee",
    "CertificationError",
    "SecureRNG",
]
