"""Selection strategies: one interface for every way of deciding which partitions to release.

A strategy is built from validated privacy parameters (its builder checks them, like Google's
``PartitionSelectionStrategy`` builders), owns the certified table its kernel samples from, and
carries its privacy guarantee (like an OpenDP measurement carries its privacy map). Front ends
(:func:`dpselect.select`, :func:`dpselect.release`, ``select_partitions``, the CLI) only talk
to this interface, so a new mechanism plugs in by implementing it.
"""
from __future__ import annotations

import functools
from fractions import Fraction
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from dpselect import _kernel
from dpselect._arrays import as_counts, check_out, run_batched
from dpselect.guarantee import PAPER, PrivacyGuarantee
from dpselect.params import PrivacyParams, validate_params
from dpselect.rng import resolve_rng
from dpselect.tables import KeepTable, TSGDTable, keep_table, tsgd_table

__all__ = [
    "SelectionStrategy",
    "SelectionResult",
    "PiOptSelection",
    "TSGDRelease",
    "UserSuppliedStrategy",
    "make_strategy",
    "STRATEGIES",
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


def _result(keep: np.ndarray, noisy: np.ndarray | None, guarantee: PrivacyGuarantee, rng: object | None) -> SelectionResult:
    """A result whose guarantee tells the truth about the generator that made it."""
    private = resolve_rng(rng).privacy_guaranteed
    return SelectionResult(keep, noisy, guarantee if private else guarantee.under_test_rng(), private)


@runtime_checkable
class SelectionStrategy(Protocol):
    """What every selection mechanism provides."""

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


class _NoRelease:
    """δ = 0 with allow_no_release=True: pure DP can release no data-dependent key set
    (Theorem 2), so nothing is kept and no randomness is used."""

    def __init__(self, params: PrivacyParams, name: str, releases_counts: bool) -> None:
        self.params = params
        self.name = name
        self.releases_counts = releases_counts

    @property
    def max_partitions_contributed(self) -> int:
        return self.params.max_partitions_contributed

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

    def apply(self, counts: npt.ArrayLike, *, rng: object | None = None) -> SelectionResult:
        arr = as_counts(counts)
        if arr.size and arr.min() < 0:
            raise ValueError("counts must be non-negative")
        noisy = np.zeros(arr.shape, np.int64) if self.releases_counts else None
        return _result(np.zeros(arr.shape, bool), noisy, self.guarantee, rng)

    def __repr__(self) -> str:
        return f"NoRelease({self.name!r}, delta=0: releases nothing; {self.params!r})"


def _zero_delta(params: PrivacyParams, allow_no_release: bool, what: str) -> None:
    if params.delta_exact == 0 and not allow_no_release:
        raise ValueError(
            f"delta = 0: {what} can release no partition (Theorem 2 of Desfontaines et al., PoPETs "
            "2022: under pure DP the set of keys itself cannot depend on the data). Use delta > 0, "
            "or pass allow_no_release=True to get an empty selection on purpose."
        )


class PiOptSelection:
    """The optimal keep/drop rule pi_opt (Desfontaines, Voss, Gipson, Mandayam, PoPETs 2022,
    Theorem 1 and Lemma 1; docs/privacy/pi-opt.md).

    Guarantee: each partition is kept independently with probability q[n]/2^w from the
    certified 128- or 192-bit keep table, which satisfies the four (ε', δ') inequalities between
    every count n and n + 1, checked in exact rational arithmetic by an independent verifier at
    construction; with at most κ partitions per user and ε' = ε/κ, δ' from ``delta_split``, the
    released key set is (ε, δ)-DP (computational: ChaCha20 CSPRNG). ε = 0 gives
    pi(n) = min(1, n δ') (Theorem 2). The table is never above pi_opt and within ~1e-13
    relative of it."""

    name = "pi_opt"
    releases_counts = False

    def __init__(self, params: PrivacyParams) -> None:
        self.params = params
        self.table: KeepTable = keep_table(params)
        self._handle = _kernel.KeepTableHandle(self.table.words)  # the kernel's private copy

    @property
    def max_partitions_contributed(self) -> int:
        return self.params.max_partitions_contributed

    @property
    def count_cap(self) -> int:
        return self.table.length

    @property
    def guarantee(self) -> PrivacyGuarantee:
        p = self.params
        note = " epsilon = 0: keep probability min(1, n*delta') (Theorem 2)." if p.epsilon_exact == 0 else ""
        return PrivacyGuarantee(
            mechanism="pi_opt partition selection",
            epsilon=float(p.epsilon_exact),
            delta_exact=p.compose(p.partition_delta),
            max_partitions_contributed=p.max_partitions_contributed,
            reference=f"{PAPER}, Theorem 1 and Lemma 1; docs/privacy/pi-opt.md",
            requested_delta=p.delta,
            notes=note.strip(),
        )

    def keep_probability(self, counts: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The kernel's exact keep probability for each count, rounded to float64."""
        arr = as_counts(counts, "n")
        if arr.size and arr.min() < 0:
            raise ValueError("n must be non-negative (numbers of distinct users)")
        return self.table.probabilities(arr)

    def __repr__(self) -> str:
        return f"PiOptSelection({self.params!r}, table_length={self.table.length})"

    def select(self, counts: npt.ArrayLike, *, out: np.ndarray | None = None, rng: object | None = None) -> np.ndarray:
        arr = as_counts(counts)
        generator = resolve_rng(rng)
        keep = np.empty(arr.shape, np.bool_) if out is None else check_out(out, arr.shape, np.dtype(np.bool_), "out")
        if out is not None and np.may_share_memory(keep, arr):
            raise ValueError("out must not overlap counts")
        generator._announce()
        state = generator._test_state

        def kernel(c: np.ndarray, o: np.ndarray) -> None:
            _kernel.select_into(c, self._handle, o, state)

        run_batched(kernel, arr, [keep], parallel=state is None)
        return keep

    def apply(self, counts: npt.ArrayLike, *, rng: object | None = None) -> SelectionResult:
        keep = self.select(counts, rng=rng)
        return _result(keep, None, self.guarantee, rng)


class TSGDRelease:
    """Thresholded release with k-truncated symmetric geometric noise (Desfontaines et al.,
    PoPETs 2022, Definitions 6–8, Theorems 4–6; docs/privacy/tsgd-release.md).

    For every partition present, X ~ TSGD(ε', k) is drawn from the certified integer table
    and (partition, n + X) is published iff n + X > k (k: the release threshold). The exact
    δ of this release for the quantized pmf, over every count n and both directions, is
    computed in rational arithmetic at construction and is at most δ' (so the total, composed
    over κ partitions, is at most δ): the released keys *and* noisy counts are (ε, δ)-DP
    (computational). Noisy counts are biased upwards near the threshold (only n + X > k is
    published); unbiased estimates need the truncation taken into account."""

    name = "release"
    releases_counts = True
    count_cap = None

    def __init__(self, params: PrivacyParams) -> None:
        self.params = params
        self.table: TSGDTable = tsgd_table(params)
        self._handle = _kernel.WeightTableHandle(self.table.cumulative)

    @property
    def k(self) -> int:
        return self.table.k

    @property
    def max_partitions_contributed(self) -> int:
        return self.params.max_partitions_contributed

    @property
    def guarantee(self) -> PrivacyGuarantee:
        p = self.params
        return PrivacyGuarantee(
            mechanism=f"TSGD thresholded release (release threshold {self.k}: a key is published when "
                      f"its noisy user count exceeds {self.k})",
            epsilon=float(p.epsilon_exact),
            delta_exact=p.compose(self.table.certified_delta),
            max_partitions_contributed=p.max_partitions_contributed,
            reference=f"{PAPER}, Theorem 6; docs/privacy/tsgd-release.md",
            requested_delta=p.delta,
        )

    def release(
        self,
        counts: npt.ArrayLike,
        *,
        out: tuple[np.ndarray, np.ndarray] | None = None,
        rng: object | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        arr = as_counts(counts)
        generator = resolve_rng(rng)
        if out is None:
            keep = np.empty(arr.shape, np.bool_)
            noisy = np.empty(arr.shape, np.int64)
        else:
            if not isinstance(out, tuple) or len(out) != 2:
                raise TypeError("out must be a tuple (keep, noisy_counts) of preallocated arrays")
            keep = check_out(out[0], arr.shape, np.dtype(np.bool_), "out[0] (keep)")
            noisy = check_out(out[1], arr.shape, np.dtype(np.int64), "out[1] (noisy_counts)")
            if any(np.may_share_memory(a, b) for a, b in ((keep, arr), (noisy, arr), (keep, noisy))):
                raise ValueError("out arrays must not overlap counts or each other")
        generator._announce()
        state = generator._test_state
        k = self.k

        def kernel(c: np.ndarray, o: np.ndarray, x: np.ndarray) -> None:
            _kernel.release_into(c, self._handle, k, o, x, state)

        run_batched(kernel, arr, [keep, noisy], parallel=state is None)
        return keep, noisy

    def apply(self, counts: npt.ArrayLike, *, rng: object | None = None) -> SelectionResult:
        keep, noisy = self.release(counts, rng=rng)
        return _result(keep, noisy, self.guarantee, rng)

    def __repr__(self) -> str:
        return f"TSGDRelease({self.params!r}, release_threshold={self.k})"


class UserSuppliedStrategy:
    """A strategy dpselect did not build, passed through ``make_strategy``. Its own privacy
    claim is relayed, labelled "user-supplied, not certified by dpselect", and its results
    are checked for shape and type (a wrong result must not be published as if it were right)."""

    def __init__(self, inner: SelectionStrategy) -> None:
        self.inner = inner
        self.name = f"user-supplied {getattr(inner, 'name', type(inner).__name__)}"
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

    def apply(self, counts: npt.ArrayLike, *, rng: object | None = None) -> SelectionResult:
        arr = as_counts(counts)
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


STRATEGIES: dict[str, type] = {"pi_opt": PiOptSelection, "release": TSGDRelease}
_BUILT_IN = (PiOptSelection, TSGDRelease, _NoRelease)


def make_strategy(
    strategy: str | SelectionStrategy,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    max_partitions_contributed: int = 1,
    delta_split: str = "composition",
    allow_no_release: bool = False,
) -> SelectionStrategy:
    """Build a strategy by name ("pi_opt", "release") from validated parameters, or pass an
    already built strategy through (then the parameters must be omitted). A strategy object
    dpselect did not build is wrapped in :class:`UserSuppliedStrategy`: its guarantee is
    relayed as user-supplied, never as certified."""
    if not isinstance(strategy, str):
        if not isinstance(strategy, SelectionStrategy):
            raise TypeError(
                f"strategy must be one of {sorted(STRATEGIES)} or a SelectionStrategy, got {type(strategy).__name__}"
            )
        if epsilon is not None or delta is not None:
            raise ValueError("pass epsilon/delta either to the strategy or here, not both")
        if type(strategy) in _BUILT_IN or isinstance(strategy, UserSuppliedStrategy):
            return strategy
        return UserSuppliedStrategy(strategy)
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {sorted(STRATEGIES)}, got {strategy!r}")
    if epsilon is None or delta is None:
        raise TypeError("epsilon and delta are required")
    if not isinstance(allow_no_release, bool):
        raise TypeError("allow_no_release must be a bool")
    params = validate_params(epsilon, delta, max_partitions_contributed, delta_split)
    what = "pi_opt" if strategy == "pi_opt" else "the thresholded release"
    _zero_delta(params, allow_no_release, what)
    if params.delta_exact == 0:
        return _NoRelease(params, strategy, releases_counts=strategy == "release")  # type: ignore[return-value]
    return _built(strategy, params)


@functools.lru_cache(maxsize=64)
def _built(name: str, params: PrivacyParams) -> SelectionStrategy:
    """Strategies are immutable, so one instance per parameter set serves every call."""
    return STRATEGIES[name](params)
