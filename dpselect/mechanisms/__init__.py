"""Every partition-selection mechanism behind one interface (docs/privacy/): a
:class:`CountMechanism` (``apply`` on counts) or a :class:`RowMechanism` (``select_sets`` on each
user's set of partitions), :data:`SelectionMechanism` for either (:mod:`.protocols`).

Count-based, on arrays of distinct-user counts (:func:`make_strategy` by name):

* ``pi_opt`` (:class:`PiOptSelection`): the optimal keep/drop rule;
* ``release`` (:class:`TSGDRelease`): the TSGD thresholded release, keys and noisy counts;
* ``laplace`` / ``gaussian`` (:class:`LaplaceThresholding`, :class:`GaussianThresholding`):
  Google's thresholding rules, certified like the rest;
* ``public`` / ``mixed`` (:class:`PublicPartitions`, :class:`MixedRelease`): known keys;
* ``auto``: the mechanism :func:`recommend` finds releases the most.

On each user's set of partitions (``select_partitions``, the CLI, :func:`dpselect.select_rows`):

* ``weighted_gaussian`` / ``weighted_laplace`` (:class:`WeightedGaussian`, :class:`WeightedLaplace`);
* ``dp_sips`` (:class:`DPSIPS`): rounds of weighted Gaussian selection;
* ``cumulative_sips`` (:class:`CumulativeSIPS`): DP-SIPS rounds deciding on their accumulated
  noisy weights;
* ``policy_gaussian`` / ``policy_laplace``: sequential reference implementations.

Each module holds one family, beside its page in docs/privacy/.

Internal: not part of the public API (the README's "What semver covers"); import what you need from ``dpselect``. It may change in any release.
"""
from dpselect.mechanisms.base import (
    NoRelease,
    SelectionResult,
    TabledSelection,
    UserSuppliedStrategy,
)
from dpselect.mechanisms.protocols import (
    CountMechanism,
    IndependentSelection,
    Mechanism,
    RowMechanism,
    SelectionMechanism,
    SelectionStrategy,
)
from dpselect.mechanisms.gaussian import GaussianThresholding
from dpselect.mechanisms.laplace import LaplaceThresholding
from dpselect.mechanisms.pi_opt import PiOptSelection
from dpselect.mechanisms.public import MixedRelease, PublicPartitions
from dpselect.mechanisms.policy import PolicyGaussian, PolicyLaplace
from dpselect.mechanisms.registry import ROW_STRATEGIES, STRATEGIES, make_strategy
from dpselect.mechanisms.tsgd import TSGDRelease
from dpselect.mechanisms.cumulative import CumulativeSIPS
from dpselect.mechanisms.weighted import DPSIPS, UserSets, WeightedGaussian, WeightedLaplace

__all__ = [
    "Mechanism",
    "CountMechanism",
    "IndependentSelection",
    "RowMechanism",
    "SelectionMechanism",
    "SelectionResult",
    "SelectionStrategy",
    "TabledSelection",
    "NoRelease",
    "UserSuppliedStrategy",
    "PiOptSelection",
    "TSGDRelease",
    "LaplaceThresholding",
    "GaussianThresholding",
    "PublicPartitions",
    "MixedRelease",
    "WeightedGaussian",
    "WeightedLaplace",
    "DPSIPS",
    "CumulativeSIPS",
    "PolicyGaussian",
    "PolicyLaplace",
    "UserSets",
    "STRATEGIES",
    "ROW_STRATEGIES",
    "make_strategy",
]
