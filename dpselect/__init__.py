"""dpselect: optimal, certified differentially private partition selection.

The public API, re-exported; see the modules for details.
"""
from dpselect._version import __version__


def _check_built() -> None:
    """Fail with advice, not a confusing "circular import", when the C extension is missing.

    That happens when the source tree is imported without an in-place build: a fresh clone, or
    the repository root after a non-editable ``pip install .`` (the cwd comes first on sys.path
    and shadows the installed package).
    """
    try:
        # `import`, not `from dpselect import _rng`: the latter reports a missing submodule of a
        # partially initialised package as a "circular import".
        import dpselect._rng  # noqa: F401  (the extension every other one cimports)
    except ModuleNotFoundError as exc:
        if exc.name != "dpselect._rng":
            raise  # a missing dependency of the extension (numpy): its own message is right
        import os

        here = os.path.dirname(os.path.abspath(__file__))
        root = os.path.dirname(here)
        if os.path.exists(os.path.join(root, "pyproject.toml")):
            advice = (
                f"dpselect is being imported from its source tree at {here}, which has no "
                "compiled extension: build it in place with `pip install -e .`, or run from "
                "another directory so the installed package is imported"
            )
        else:
            advice = (
                f"dpselect at {here} has no compiled extension (dpselect._rng): the install is "
                "incomplete; reinstall it with `pip install --force-reinstall dpselect`"
            )
        raise ImportError(advice, name="dpselect", path=here) from None


_check_built()
from dpselect import _moved

_moved.install()  # old import paths of moved modules, with a DeprecationWarning
from dpselect.errors import DPSelectError, DPSelectWarning, ParameterError, ParameterTypeError
from dpselect.core.guarantee import PrivacyGuarantee
from dpselect.ingest.pipeline import select_partitions
from dpselect.rng import SecureRNG
from dpselect.selection import Crossovers, Release, crossovers, keep_probability, release, select, select_rows
from dpselect.explain import explain
from dpselect.mechanisms import (
    GaussianThresholding,
    LaplaceThresholding,
    MixedRelease,
    PiOptSelection,
    PublicPartitions,
    SelectionResult,
    SelectionStrategy,
    TSGDRelease,
    make_strategy,
)
from dpselect.mechanisms.recommend import recommend
from dpselect.core.tables import CertificationError
from dpselect.aggregation.aggregate import AggregateResult, aggregate
from dpselect.aggregation.budget import Budget, BudgetExceededError
from dpselect.aggregation.metrics import Metric, count, count_distinct_units, mean, sum  # noqa: A004

# Subpackages with their own optional dependencies load on first use: `dpselect.rainbow`,
# `dpselect.personalized`, `dpselect.testing`; `dpselect.datasets` (shipped example data) too.
_LAZY_SUBMODULES = {"rainbow", "personalized", "testing", "datasets"}


def __getattr__(name: str) -> object:
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"dpselect.{name}")
    if f"dpselect.{name}" in _moved.MOVED:
        return _moved.moved_module(f"dpselect.{name}")
    raise AttributeError(f"module 'dpselect' has no attribute {name!r}")


# ``sum`` and ``mean`` are reached as dpselect.sum / dpselect.mean, never by a star import (they
# would shadow the builtin sum).
__all__ = [
    "aggregate",
    "AggregateResult",
    "Budget",
    "BudgetExceededError",
    "Metric",
    "count",
    "count_distinct_units",
    "select_partitions",
    "select",
    "release",
    "select_rows",
    "keep_probability",
    "crossovers",
    "Crossovers",
    "Release",
    "make_strategy",
    "recommend",
    "explain",
    "SelectionStrategy",
    "SelectionResult",
    "PiOptSelection",
    "TSGDRelease",
    "LaplaceThresholding",
    "GaussianThresholding",
    "PublicPartitions",
    "MixedRelease",
    "PrivacyGuarantee",
    "CertificationError",
    "DPSelectError",
    "DPSelectWarning",
    "ParameterError",
    "ParameterTypeError",
    "SecureRNG",
]
