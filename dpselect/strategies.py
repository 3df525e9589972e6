"""The strategy interface and the built-in mechanisms, under their long-standing import path.

Everything lives in :mod:`dpselect.mechanisms` (one module per mechanism family); this module
re-exports it so that ``from dpselect.strategies import make_strategy`` keeps working."""
from dpselect.mechanisms import (
    STRATEGIES,
    GaussianThresholding,
    LaplaceThresholding,
    MixedRelease,
    NoRelease,
    PiOptSelection,
    PublicPartitions,
    SelectionResult,
    SelectionStrategy,
    TabledSelection,
    TSGDRelease,
    UserSuppliedStrategy,
    make_strategy,
)

__all__ = [
    "SelectionStrategy",
    "SelectionResult",
    "TabledSelection",
    "NoRelease",
    "UserSuppliedStrategy",
    "PiOptSelection",
    "TSGDRelease",
    "LaplaceThresholding",
    "GaussianThresholding",
    "PublicPartitions",
    "MixedRelease",
    "make_strategy",
    "STRATEGIES",
]
