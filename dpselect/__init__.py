"""dpselect: optimal, certified differentially private partition selection.

The public API, re-exported; see the modules for details.
"""
from dpselect._version import __version__ as __version__  # `as`: re-exported


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
# `mean as mean`: re-exported although not in __all__ (below).
from dpselect.aggregation.metrics import Metric, count, count_distinct_units, mean as mean, sum as sum  # noqa: A004
# `min as min` / `max as max`: reached as dpselect.min / dpselect.max, not in __all__ (builtins).
from dpselect.aggregation.quantiles import max as max, median, min as min, quantile  # noqa: A004
from dpselect.aggregation.metrics import count_distinct, stddev, variance
# After aggregate: the SQL front end builds one aggregate call (duckdb and sqlglot load on first use).
from dpselect.sql import sql

# The public subpackages load on first use (`dpselect.spark` needs pyspark, `dpselect.rainbow`
# SciPy for its LP, ...): `import dpselect` stays fast and needs numpy only. Together with
# `__all__` they are the public API (the README's "What semver covers").
_LAZY_SUBMODULES = {"spark", "rainbow", "personalized", "audit", "testing", "datasets"}


def __getattr__(name: str) -> object:
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"dpselect.{name}")
    if f"dpselect.{name}" in _moved.MOVED:
        return _moved.moved_module(f"dpselect.{name}")
    raise AttributeError(f"module 'dpselect' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public API only: ``__all__``, the public subpackages, and the version (not the
    internal modules that imports leave as attributes)."""
    dunders = {name for name in globals() if name.startswith("__") and name.endswith("__")}
    return sorted({*__all__, *_LAZY_SUBMODULES, "sum", "mean", "min", "max", *dunders})


# ``sum`` and ``mean`` are reached as dpselect.sum / dpselect.mean, never by a star import (they
# would shadow the builtin sum).
__all__ = [
    "aggregate",
    "sql",
    "AggregateResult",
    "Budget",
    "BudgetExceededError",
    "Metric",
    "count",
    "count_distinct_units",
    "quantile",
    "median",
    "variance",
    "stddev",
    "count_distinct",
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
