"""What the built-in partition-selection mechanisms share.

A strategy is built from validated privacy parameters (its builder checks them, like Google's
``PartitionSelectionStrategy`` builders), owns the certified table or noise it samples from, and
carries its privacy guarantee (like an OpenDP measurement carries its privacy map). It
implements one of the interfaces of :mod:`dpselect.mechanisms.protocols`
(:class:`~dpselect.mechanisms.protocols.CountMechanism` or
:class:`~dpselect.mechanisms.protocols.RowMechanism`); front ends (:func:`dpselect.select`,
:func:`dpselect.release`, ``select_partitions``, ``aggregate``, Spark, the CLI) only talk to those.

Count-based mechanisms decide each partition from its number of distinct users n alone; most
of them are :class:`TabledSelection`: keep with probability q[n] / 2^w from a certified
fixed-point table, sampled by the C kernel with an exact lazy Bernoulli draw.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable

import numpy as np
import numpy.typing as npt

from dpselect import _kernel
from dpselect._arrays import as_counts, check_out, run_batched
from dpselect.core.guarantee import PAPER, PrivacyGuarantee
from dpselect.core.params import PrivacyParams
from dpselect.mechanisms.protocols import (CountMechanism, IndependentSelection, PublicPartitionsUse, SelectionStrategy,
                                           public_mask)
from dpselect.rng import resolve_rng
from dpselect.core.tables import KeepTable

__all__ = [
    "SelectionResult",
    "SelectionStrategy",
    "BuiltInMechanism",
    "TabledSelection",
    "NoRelease",
    "UserSuppliedStrategy",
    "result_for",
    "check_counts",
    "users_for_probability",
]


@dataclass(frozen=True)
class SelectionResult:
    """keep[i]: release partition i; noisy_counts[i]: its released count (0 where not kept),
    or None for strategies that release no counts. ``guarantee`` is the statement for *this*
    result: it says NOT DP when the deterministic test RNG made it, and "user-supplied, not
    certified" for a strategy dpselect did not build."""

    keep: npt.NDArray[np.bool_]
    noisy_counts: npt.NDArray[np.int64] | None
    guarantee: PrivacyGuarantee
    privacy_guaranteed: bool

    def __repr__(self) -> str:
        tag = "" if self.privacy_guaranteed else " [NOT DP: deterministic test RNG]"
        if not self.guarantee.certified:
            tag += " [user-supplied strategy, not certified by dpselect]"
        counts = ", with noisy counts" if self.noisy_counts is not None else ""
        return f"SelectionResult(kept {int(np.count_nonzero(self.keep))} of {self.keep.size}{counts}){tag}"


def result_for(keep: np.ndarray, noisy: np.ndarray | None, guarantee: PrivacyGuarantee,
               rng: object | None) -> SelectionResult:
    """A result whose guarantee tells the truth about the generator that made it."""
    private = resolve_rng(rng).privacy_guaranteed
    return SelectionResult(keep, noisy, guarantee if private else guarantee.under_test_rng(), private)


def check_counts(counts: npt.ArrayLike, name: str = "counts") -> np.ndarray:
    """Counts as an integer array, refusing negatives before anything is drawn."""
    arr = as_counts(counts, name)
    if arr.size and np.issubdtype(arr.dtype, np.signedinteger) and arr.min() < 0:
        raise ValueError(f"{name} must be non-negative (numbers of distinct users)")
    return arr


def users_for_probability(probability: Callable[[int], Fraction], level: object, limit: int) -> int | None:
    """The smallest count n in [0, limit] whose exact keep probability is at least ``level``, for
    a keep probability that does not decrease with n (every count-based mechanism's); None when
    even n = limit falls short. A bisection on exact values: O(log limit) table reads."""
    if isinstance(level, bool) or not isinstance(level, (int, float, Fraction)):
        raise TypeError(f"probability must be a number in (0, 1], got {type(level).__name__}")
    target = Fraction(level) if not isinstance(level, float) or math.isfinite(level) else Fraction(-1)
    if not 0 < target <= 1:
        raise ValueError(f"probability must be in (0, 1], got {level!r}")
    if probability(limit) < target:
        return None
    lo, hi = -1, limit  # probability(hi) >= target; lo below every count that reaches it
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probability(mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi


class BuiltInMechanism:
    """A mechanism dpselect builds (every class of :mod:`dpselect.mechanisms`). Pickling one
    (Spark ships it to its executors) records its constructor's arguments and builds it again
    there, once per process: its kernel handles do not pickle, and building runs the same checks
    and the same exact certification, so the copy is the same mechanism."""

    _arguments: tuple[tuple[Any, ...], tuple[tuple[str, Any], ...]]

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        self = super().__new__(cls)
        self._arguments = (args, tuple(sorted(kwargs.items())))
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        args, options = self._arguments
        return rebuild, (type(self), args, options)


@functools.lru_cache(maxsize=64)
def _rebuilt(cls: type, args: tuple[Any, ...], options: tuple[tuple[str, Any], ...]) -> Any:
    return cls(*args, **dict(options))


def rebuild(cls: type, args: tuple[Any, ...], options: tuple[tuple[str, Any], ...]) -> Any:
    """The mechanism ``cls(*args, **options)``, built once per process (mechanisms are immutable)."""
    try:
        hash((cls, args, options))
    except TypeError:  # an unhashable argument: built each time
        return cls(*args, **dict(options))
    return _rebuilt(cls, args, options)


class TabledSelection(BuiltInMechanism, IndependentSelection):
    """Keep/drop from a certified keep table: partition i is kept with probability
    q[min(n_i, N - 1)] / 2^w (OR-ed with n_i >= N when the table's tail is certain), each
    decision an exact Bernoulli draw in the C kernel. Subclasses build the table and state the
    guarantee; everything else — the kernel call, ``out=``, keep probabilities — is here."""

    releases_counts = False
    table: KeepTable

    def _load(self, table: KeepTable) -> None:
        self.table = table
        self._handle = table.handle()  # the kernel's private copy

    @property
    def count_cap(self) -> int:
        """Counts >= N behave alike (kept surely, or with the last entry's probability)."""
        return self.table.length

    def keep_probability(self, counts: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The kernel's exact keep probability for each count, rounded to float64."""
        return self.table.probabilities(check_counts(counts, "n"))

    def exact_keep_probability(self, n: int) -> Fraction:
        """The kernel's keep probability for a partition of n users, exactly."""
        return self.table.exact_probability(n)

    def users_for_release(self, probability: float | Fraction = Fraction(1, 2)) -> int | None:
        """The fewest distinct users a key needs to be released with at least ``probability``
        (exact, from the certified table: public parameters only); None if no count reaches it
        (a tail that saturates just below 1)."""
        return users_for_probability(self.exact_keep_probability, probability, self.table.length)

    @property
    def min_users_to_release(self) -> int:
        """The fewest distinct users a key needs to be released with probability at least 1/2.
        Depends on the public parameters only, so a GROUP BY may print it: "at these parameters
        a key needs at least N users to have a 50 % chance of release"."""
        users = self.users_for_release(Fraction(1, 2))
        assert users is not None  # every table reaches 1/2 (its last entry is within 2^-80 of 1)
        return users

    def select(self, counts: npt.ArrayLike, *, out: np.ndarray | None = None, rng: object | None = None) -> np.ndarray:
        arr = as_counts(counts)
        generator = resolve_rng(rng)
        keep = np.empty(arr.shape, np.bool_) if out is None else check_out(out, arr.shape, np.dtype(np.bool_), "out")
        if out is not None and np.may_share_memory(keep, arr):
            raise ValueError("out must not overlap counts")
        generator.announce()
        state = generator.test_state
        handle = self._handle

        def kernel(c: np.ndarray, o: np.ndarray) -> None:
            _kernel.select_into(c, handle, o, state)

        run_batched(kernel, arr, [keep], parallel=state is None)
        return keep

    def apply(self, counts: npt.ArrayLike, *, rng: object | None = None,
              public: npt.ArrayLike | None = None) -> SelectionResult:
        arr = as_counts(counts)
        public_mask(public, arr.shape, self.public_partitions, self.name)
        keep = self.select(arr, rng=rng)
        return result_for(keep, None, self.guarantee, rng)


class NoRelease(BuiltInMechanism, IndependentSelection):
    """δ = 0 with allow_no_release=True: pure DP can release no data-dependent key set
    (Theorem 2), so nothing is kept and no randomness is used. It stands for the mechanism
    ``name`` (which keys it would take, whether it would release counts)."""

    def __init__(self, params: PrivacyParams, name: str, releases_counts: bool,
                 public_partitions: PublicPartitionsUse = "none") -> None:
        self.params = params
        self.name = name
        self._releases_counts = releases_counts
        self.public_partitions = public_partitions

    @property
    def releases_counts(self) -> bool:
        return self._releases_counts

    @property
    def count_cap(self) -> int | None:
        return 1

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            mechanism=f"{self.name} with delta = 0 (releases nothing)",
            epsilon=0.0,
            delta_exact=Fraction(0),
            max_partitions_contributed=self.max_partitions_contributed,
            reference=f"{PAPER}, Theorem 2; docs/privacy/pi-opt.md",
            requested_delta=0.0,
        )

    def keep_probability(self, counts: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return np.zeros(check_counts(counts, "n").shape, np.float64)

    @property
    def min_users_to_release(self) -> None:
        """None: no key is ever released, whatever its number of users."""
        return None

    def users_for_release(self, probability: float | Fraction = Fraction(1, 2)) -> None:
        users_for_probability(lambda n: Fraction(0), probability, 0)  # the same checks of probability
        return None

    def apply(self, counts: npt.ArrayLike, *, rng: object | None = None,
              public: npt.ArrayLike | None = None) -> SelectionResult:
        arr = check_counts(counts)
        public_mask(public, arr.shape, self.public_partitions, self.name)
        noisy = np.zeros(arr.shape, np.int64) if self.releases_counts else None
        return result_for(np.zeros(arr.shape, bool), noisy, self.guarantee, rng)

    def __repr__(self) -> str:
        return f"NoRelease({self.name!r}, delta=0: releases nothing; {self.params!r})"


class UserSuppliedStrategy(CountMechanism):
    """A strategy dpselect did not build, passed through ``make_strategy``. Its own privacy
    claim is relayed, labelled "user-supplied, not certified by dpselect", and its results
    are checked for shape and type (a wrong result must not be published as if it were right).
    It selects from the data's keys only (no public partitions)."""

    def __init__(self, inner: SelectionStrategy) -> None:
        self.inner = inner
        self.name = f"user-supplied {inner.name}"
        self.params = inner.params

    @property
    def max_partitions_contributed(self) -> int:
        return self.inner.max_partitions_contributed

    @property
    def count_cap(self) -> int | None:
        return self.inner.count_cap

    @property
    def releases_counts(self) -> bool:
        return self.inner.releases_counts

    @property
    def guarantee(self) -> PrivacyGuarantee:
        claim = self.inner.guarantee
        if isinstance(claim, PrivacyGuarantee):
            return claim.user_supplied()
        p = self.params
        return PrivacyGuarantee(
            mechanism=self.name, epsilon=float(p.epsilon), delta_exact=p.delta_exact,
            max_partitions_contributed=p.max_partitions_contributed,
            reference="the strategy author's documentation", requested_delta=p.delta,
            certified=False, notes=f"Its own statement: {claim}",
        )

    def apply(self, counts: npt.ArrayLike, *, rng: object | None = None,
              public: npt.ArrayLike | None = None) -> SelectionResult:
        arr = as_counts(counts)
        public_mask(public, arr.shape, self.public_partitions, self.name)
        result = self.inner.apply(arr, rng=rng)
        keep = np.asarray(result.keep)
        if keep.dtype != np.bool_ or keep.shape != arr.shape:
            raise TypeError(f"strategy {self.name!r} returned keep of dtype {keep.dtype} and shape {keep.shape}; "
                            f"expected bool of shape {arr.shape}")
        noisy = result.noisy_counts
        if self.releases_counts:
            noisy = np.asarray(noisy)
            if noisy.shape != arr.shape or not np.issubdtype(noisy.dtype, np.integer):
                raise TypeError(f"strategy {self.name!r} returned noisy counts that are not integers of shape {arr.shape}")
            noisy = noisy.astype(np.int64, copy=False)
        private = bool(result.privacy_guaranteed) and resolve_rng(rng).privacy_guaranteed
        guarantee = self.guarantee if private else self.guarantee.under_test_rng()
        return SelectionResult(keep, noisy if self.releases_counts else None, guarantee, private)

    def __repr__(self) -> str:
        return f"UserSuppliedStrategy({self.inner!r}) [not certified by dpselect]"
