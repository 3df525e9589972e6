"""The TSGD thresholded release: keys and noisy counts (Desfontaines, Voss, Gipson, Mandayam,
"Differentially private partition selection", PoPETs 2022, Definitions 6–8, Theorems 4–6;
docs/privacy/tsgd-release.md)."""
from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpselect import _kernel
from dpselect._arrays import as_counts, check_out, run_batched
from dpselect.core.guarantee import PAPER, PrivacyGuarantee
from dpselect.mechanisms.base import BuiltInMechanism, SelectionResult, check_counts, result_for, users_for_probability
from dpselect.mechanisms.protocols import CountMechanism, IndependentSelection, public_mask
from dpselect.core.params import PrivacyParams
from dpselect.rng import resolve_rng
from dpselect.core.tables import TSGDTable, tsgd_table

__all__ = ["TSGDRelease", "NoisyRelease"]


class NoisyRelease(BuiltInMechanism, CountMechanism):
    """Drawing n + X for every count from a certified TSGD table and publishing it by a rule:
    n + X > threshold, or always. The shared machinery of the TSGD release, public partitions
    and the mixed release."""

    table: TSGDTable
    releases_counts = True
    count_cap = None

    def _load_noise(self, table: TSGDTable) -> None:
        self.table = table
        self._noise = _kernel.WeightTableHandle(table.cumulative)

    @property
    def k(self) -> int:
        """The noise is X ∈ [−k, k] (and k is the release threshold of the plain release)."""
        return self.table.k

    def _draw(self, counts: npt.ArrayLike, threshold: int, keep_all: bool,
              out: tuple[np.ndarray, np.ndarray] | None, rng: object | None) -> tuple[np.ndarray, np.ndarray]:
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
        generator.announce()
        state = generator.test_state
        k, handle = self.k, self._noise

        def kernel(c: np.ndarray, o: np.ndarray, x: np.ndarray) -> None:
            _kernel.release_into(c, handle, k, o, x, state, threshold, keep_all)

        run_batched(kernel, arr, [keep, noisy], parallel=state is None)
        return keep, noisy

    @functools.cached_property
    def _upper_tail(self) -> list[Fraction]:
        """tail[j] = P[X > j − k] for j = 0 .. 2k, exactly."""
        s = self.table.total
        cumulative = [int(v) for v in self.table.cumulative]
        return [Fraction(s - c, s) for c in cumulative]

    def _exact_above(self, n: int, threshold: int) -> Fraction:
        """P[n + X > threshold] exactly."""
        t = threshold - n  # P[X > t]
        if t < -self.k:
            return Fraction(1)
        if t >= self.k:
            return Fraction(0)
        return self._upper_tail[t + self.k]


class TSGDRelease(NoisyRelease, IndependentSelection):
    """Thresholded release with k-truncated symmetric geometric noise.

    For every partition present, X ~ TSGD(ε', k) is drawn from the certified integer table
    and (partition, n + X) is published iff n + X > k (k: the release threshold). The exact
    δ of this release for the quantized pmf, over every count n and both directions, is
    computed in rational arithmetic at construction and is at most δ' (so the total, composed
    over κ partitions, is at most δ): the released keys *and* noisy counts are (ε, δ)-DP
    (computational). Noisy counts are biased upwards near the threshold (only n + X > k is
    published); unbiased estimates need the truncation taken into account. With
    ``pre_threshold`` τ > 1 the rule is n + X > k + τ − 1: the TSGD release of max(0, n − τ + 1)
    (sensitivity 1), reported unshifted, so partitions with fewer than τ users are never kept."""

    name = "release"

    def __init__(self, params: PrivacyParams, pre_threshold: int = 1) -> None:
        self.params = params
        self.pre_threshold = pre_threshold
        self._load_noise(tsgd_table(params))

    @property
    def release_threshold(self) -> int:
        """A partition is published when its noisy count exceeds this."""
        return self.k + self.pre_threshold - 1

    @property
    def thresholds(self) -> dict[str, float]:
        return {"release_threshold": float(self.release_threshold)}

    @property
    def guarantee(self) -> PrivacyGuarantee:
        p = self.params
        t = self.release_threshold
        notes = f"Pre-threshold {self.pre_threshold}: partitions with fewer users are never released." \
            if self.pre_threshold > 1 else ""
        return PrivacyGuarantee(
            mechanism=f"TSGD thresholded release (release threshold {t}: a key is published when "
                      f"its noisy user count exceeds {t})",
            epsilon=float(p.epsilon_exact),
            delta_exact=p.compose(self.table.certified_delta),
            max_partitions_contributed=p.max_partitions_contributed,
            reference=f"{PAPER}, Theorem 6; docs/privacy/tsgd-release.md",
            requested_delta=p.delta,
            neighbours=p.neighbour_text,
            notes=notes,
        )

    def keep_probability(self, counts: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """P[n + X > release threshold] for each count: exact, rounded to float64."""
        arr = check_counts(counts, "n")
        t, k = self.release_threshold, self.k
        low = t - k  # counts <= low are never published, counts >= low + 2k + 1 always
        exact = self._float_tail
        wide = np.minimum(arr, np.uint64(low + 2 * k + 1)) if arr.dtype == np.uint64 else arr
        return exact[np.clip(wide.astype(np.int64) - low, 0, 2 * k + 1)]

    # On the instance (not an lru_cache on the method, whose class-wide cache keeps strategies alive).
    @functools.cached_property
    def _float_tail(self) -> npt.NDArray[np.float64]:
        """P[n + X > release threshold] as floats, for n = release threshold − k + j, j = 0 .. 2k + 1."""
        threshold = self.release_threshold
        low = threshold - self.k
        return np.array([float(self._exact_above(low + j, threshold)) for j in range(2 * self.k + 2)])

    def exact_keep_probability(self, n: int) -> Fraction:
        return self._exact_above(n, self.release_threshold)

    def users_for_release(self, probability: float | Fraction = Fraction(1, 2)) -> int | None:
        """The fewest distinct users a key needs to be released with at least ``probability``,
        exactly (counts above the threshold plus k are released surely)."""
        return users_for_probability(self.exact_keep_probability, probability, self.release_threshold + self.k + 1)

    @property
    def min_users_to_release(self) -> int:
        """The fewest distinct users a key needs to be released with probability at least 1/2:
        the release threshold plus one (the noise is symmetric, with P[X >= 0] > 1/2 > P[X > 0]).
        Public parameters only."""
        users = self.users_for_release(Fraction(1, 2))
        assert users is not None
        return users

    def release(self, counts: npt.ArrayLike, *, out: tuple[np.ndarray, np.ndarray] | None = None,
                rng: object | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self._draw(counts, self.release_threshold, False, out, rng)

    def apply(self, counts: npt.ArrayLike, *, rng: object | None = None,
              public: npt.ArrayLike | None = None) -> SelectionResult:
        arr = as_counts(counts)
        public_mask(public, arr.shape, self.public_partitions, self.name)
        keep, noisy = self.release(arr, rng=rng)
        return result_for(keep, noisy, self.guarantee, rng)

    def __repr__(self) -> str:
        tau = f", pre_threshold={self.pre_threshold}" if self.pre_threshold > 1 else ""
        return f"TSGDRelease({self.params!r}, release_threshold={self.release_threshold}{tau})"
