"""The interfaces every partition-selection mechanism implements, and that the front ends talk to.

Two kinds, told apart with ``isinstance`` (never by probing attributes):

* :class:`CountMechanism` decides each partition from its number of distinct users n:
  ``apply(counts, rng=, public=)``. Those whose decision for a partition is an independent draw
  with a probability of n alone are also :class:`IndependentSelection` (``keep_probability``,
  ``min_users_to_release``): π_opt, the TSGD release, Laplace and Gaussian thresholding, public
  partitions, and the δ = 0 release of nothing (Desfontaines, Voss, Gipson, Mandayam,
  "Differentially private partition selection", PoPETs 2022; docs/privacy/pi-opt.md,
  docs/privacy/tsgd-release.md). The mixed release is not: a key's rule depends on whether it is
  public (docs/privacy/public-partitions.md).
* :class:`RowMechanism` needs each user's whole set of partitions: ``select_sets(sets, rng=)``
  (weighted Gaussian and Laplace, DP-SIPS, the policy mechanisms; docs/privacy/weighted.md).

:data:`SelectionMechanism` is either; :func:`dpselect.make_strategy` returns one, and every front
end (``select_partitions``, ``aggregate``, ``dpselect.spark``, the CLI) accepts such an object
wherever it accepts the mechanism's name. Every mechanism says how it treats keys known in
advance (``public_partitions``): "none" (it selects from the data only), "only" (it releases
exactly the listed keys: ``public``) or "mixed" (the listed keys and the data's own: ``mixed``).

:class:`SelectionStrategy` is the smaller, structural protocol a count strategy written outside
dpselect satisfies; :func:`dpselect.make_strategy` wraps such an object in
:class:`~dpselect.mechanisms.base.UserSuppliedStrategy`, a :class:`CountMechanism` whose
guarantee is labelled user-supplied, never certified.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Literal, Protocol, Union, runtime_checkable

import numpy as np
import numpy.typing as npt

from dpselect.core.guarantee import PrivacyGuarantee
from dpselect.core.params import PrivacyParams

if TYPE_CHECKING:  # pragma: no cover
    from dpselect.mechanisms.base import SelectionResult
    from dpselect.mechanisms.weighted import UserSets

__all__ = [
    "PublicPartitionsUse",
    "Mechanism",
    "CountMechanism",
    "IndependentSelection",
    "RowMechanism",
    "SelectionMechanism",
    "SelectionStrategy",
    "public_mask",
]

# How a mechanism treats keys known without looking at the data (``public_partitions=``).
PublicPartitionsUse = Literal["none", "only", "mixed"]


class Mechanism(ABC):
    """What every partition-selection mechanism has: a name, its validated parameters and its
    privacy statement."""

    name: str
    params: PrivacyParams
    # "none": selects from the data's keys only; "only": releases exactly the public keys it is
    # given; "mixed": the public keys and the data's own.
    public_partitions: PublicPartitionsUse = "none"

    @property
    def max_partitions_contributed(self) -> int:
        """κ: the most partitions one user may influence."""
        return self.params.max_partitions_contributed

    @property
    @abstractmethod
    def releases_counts(self) -> bool:
        """True for mechanisms that publish a noisy count with every released key."""

    @property
    @abstractmethod
    def guarantee(self) -> PrivacyGuarantee:
        """The privacy statement, with the paper and the page of docs/privacy/ it rests on."""

    @property
    def thresholds(self) -> dict[str, float]:
        """The mechanism's thresholds, for display (public parameters only); none by default."""
        return {}


class CountMechanism(Mechanism):
    """A mechanism that decides each partition from its number of distinct users alone."""

    @property
    @abstractmethod
    def count_cap(self) -> int | None:
        """Counts >= count_cap are treated alike, so counting may stop there; None: exact counts
        are needed (the mechanism releases them)."""

    @abstractmethod
    def apply(self, counts: npt.ArrayLike, *, rng: object | None = None,
              public: npt.ArrayLike | None = None) -> SelectionResult:
        """Decide every partition from its count. ``public[i]`` marks partition i as a key
        known without looking at the data (a bool array of the counts' shape, whose count may
        be 0): only a mechanism whose ``public_partitions`` is "only" or "mixed" takes them
        (:func:`public_mask`). ``rng``: None for the package CSPRNG."""


class IndependentSelection(CountMechanism):
    """A count mechanism that keeps every partition independently, with a probability of its
    count alone (the same function for every partition)."""

    @abstractmethod
    def keep_probability(self, counts: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The exact probability that a partition of each count is released, rounded to float64."""

    @property
    @abstractmethod
    def min_users_to_release(self) -> int | None:
        """The fewest distinct users a key needs to be released with probability at least 1/2
        (public parameters only); None if no count reaches it."""


class RowMechanism(Mechanism):
    """A mechanism that needs each user's whole set of partitions (raw rows), not counts: it
    bounds every user to κ partitions itself, so κ is enforced, never assumed."""

    @abstractmethod
    def select_sets(self, sets: UserSets, rng: object | None = None) -> npt.NDArray[np.bool_]:
        """keep[x] for every partition code x of ``sets``."""

    @abstractmethod
    def select_rows(self, users: npt.ArrayLike, partitions: npt.ArrayLike, n_partitions: int | None = None,
                    rng: object | None = None) -> npt.NDArray[np.bool_]:
        """keep[x] for every partition code x, from one (user code, partition code) per row."""


# What make_strategy returns and every front end accepts.
SelectionMechanism = Union[CountMechanism, RowMechanism]


@runtime_checkable
class SelectionStrategy(Protocol):
    """What a count strategy written outside dpselect provides (checked structurally), so that
    :func:`dpselect.make_strategy` can wrap it; every built-in :class:`CountMechanism` has these
    members too."""

    name: str
    params: PrivacyParams

    @property
    def max_partitions_contributed(self) -> int: ...

    @property
    def count_cap(self) -> int | None:
        """Counts >= count_cap are treated alike, so counting may stop there; None: exact
        counts are needed (the strategy releases them)."""

    @property
    def releases_counts(self) -> bool: ...

    @property
    def guarantee(self) -> PrivacyGuarantee: ...

    def apply(self, counts: npt.ArrayLike, *, rng: object | None = None) -> SelectionResult: ...


def public_mask(public: npt.ArrayLike | None, shape: tuple[int, ...], use: PublicPartitionsUse,
                name: str) -> npt.NDArray[np.bool_] | None:
    """``public`` as a bool array of the counts' ``shape`` (None when none was given), refused
    where the mechanism cannot honour it: a public key passed to a mechanism that selects from
    the data only ("none"), or a key not on the public list passed to the public release
    ("only"), which releases every count it is given (that key would be published with no
    selection at all)."""
    if public is None:
        return None
    mask = np.asarray(public)
    if mask.dtype != np.bool_ or mask.shape != shape:
        raise TypeError(f"public must be a bool array of the counts' shape {shape}")
    if use == "none" and mask.any():
        raise ValueError(f"strategy {name!r} selects keys from the data only: it takes no public partitions; "
                         "use strategy='public' or 'mixed'")
    if use == "only" and not mask.all():
        raise ValueError(f"strategy {name!r} releases every count it is given: each must be a public key "
                         "(public[i] True); use strategy='mixed' for keys of the data too")
    return mask
