"""Public partitions, and the mixed release of public and private partitions (Desfontaines,
Voss, Gipson, Mandayam, PoPETs 2022, §5; docs/privacy/public-partitions.md).

* :class:`PublicPartitions`: the list of keys is public, so there is nothing to select: every
  listed key is released with its noisy count n + X, X ~ TSGD(ε', k) from the certified table,
  whether or not it occurs in the data (a count of 0 for the absent ones).
* :class:`MixedRelease`: TSGD noise on every partition that is public or present in the data;
  a private-only partition is released iff n + X > k (the thresholded release, Theorem 6), a
  public one iff n + X > t for an analyst-chosen t. Because |X| <= k: t >= k guarantees no
  false positive (a public key absent from the data, n = 0, is never released); t <= −k
  guarantees no false negative (every public key present, n >= 1, is released). The paper's
  "t = 0 releases every public partition present in the data" holds only for n >= k + 1.

Privacy: the noise is added to the counts of a set that is the union of a public list and the
data's own partitions — exactly the thresholded release's situation: for a partition present
in both neighbours the noisy count is (ε', δ')-indistinguishable, the only value one side can
produce being the support edge (counted in the certified δ'); a public partition absent from
one side has count 0 there, which is again just a count changing by one; and a private
partition absent from one side is released with at most the certified δ'. The thresholds are
post-processing of public information. So both are (ε, δ)-DP with the release's certified δ.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dpselect.core.guarantee import PAPER, PrivacyGuarantee
from dpselect._arrays import as_counts
from dpselect.mechanisms.base import SelectionResult, check_counts, result_for
from dpselect.mechanisms.protocols import IndependentSelection, public_mask
from dpselect.mechanisms.tsgd import NoisyRelease
from dpselect.core.params import PrivacyParams
from dpselect.core.tables import tsgd_table

__all__ = ["PublicPartitions", "MixedRelease"]


class PublicPartitions(NoisyRelease, IndependentSelection):
    """Every public partition with its TSGD-noised count, present in the data or not.

    Guarantee: the noisy counts of the listed partitions are (ε, δ)-DP for adding or removing one
    user (in at most κ partitions), δ the certified δ of the TSGD table composed over κ
    (docs/privacy/public-partitions.md). No key set is selected: the keys are the caller's list,
    so every count it is given must be a listed key's (``apply``'s ``public`` mask, when given,
    must be all True)."""

    name = "public"
    public_partitions = "only"

    def __init__(self, params: PrivacyParams) -> None:
        self.params = params
        self._load_noise(tsgd_table(params, "public"))

    @property
    def thresholds(self) -> dict[str, float]:
        return {"noise_bound": float(self.k)}

    @property
    def guarantee(self) -> PrivacyGuarantee:
        p = self.params
        return PrivacyGuarantee(
            mechanism=f"public partitions with TSGD noisy counts (|noise| <= {self.k})",
            epsilon=float(p.epsilon_exact),
            delta_exact=p.compose(self.table.certified_delta),
            max_partitions_contributed=p.max_partitions_contributed,
            reference=f"{PAPER}, §5; docs/privacy/public-partitions.md",
            requested_delta=p.delta,
            neighbours=p.neighbour_text,
            notes="The released keys are the caller's public list, not selected from the data.",
        )

    def keep_probability(self, counts: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return np.ones(check_counts(counts, "n").shape, np.float64)

    @property
    def min_users_to_release(self) -> int:
        """0: every listed key is released, with or without users."""
        return 0

    def release(self, counts: npt.ArrayLike, *, out: tuple[np.ndarray, np.ndarray] | None = None,
                rng: object | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self._draw(counts, -self.k, True, out, rng)

    def apply(self, counts: npt.ArrayLike, *, rng: object | None = None,
              public: npt.ArrayLike | None = None) -> SelectionResult:
        arr = as_counts(counts)
        public_mask(public, arr.shape, self.public_partitions, self.name)
        keep, noisy = self.release(arr, rng=rng)
        return result_for(keep, noisy, self.guarantee, rng)

    def __repr__(self) -> str:
        return f"PublicPartitions({self.params!r}, noise_bound={self.k})"


class MixedRelease(NoisyRelease):
    """Public and private partitions at once: TSGD noise on all, private-only partitions
    released above k, public ones above ``public_threshold`` t.

    ``public_threshold``: t >= k means no public key absent from the data is ever released
    (no false positives); t <= −k means every public key present in the data is released (no
    false negatives); between, neither holds. Default: k (no false positives)."""

    name = "mixed"
    public_partitions = "mixed"

    def __init__(self, params: PrivacyParams, public_threshold: int | None = None) -> None:
        self.params = params
        self._load_noise(tsgd_table(params, "mixed"))
        t = self.k if public_threshold is None else public_threshold
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
            raise TypeError(f"public_threshold must be an integer, got {type(t).__name__}")
        self.public_threshold = max(int(t), -self.k - 1)  # below −k every public key is kept anyway

    @property
    def no_false_positives(self) -> bool:
        return self.public_threshold >= self.k

    @property
    def min_users_to_release(self) -> int:
        """The fewest distinct users a key *not on the public list* needs to be released with
        probability at least 1/2: k + 1, as in the thresholded release (public parameters only)."""
        return self.k + 1

    @property
    def no_false_negatives(self) -> bool:
        return self.public_threshold <= -self.k

    @property
    def thresholds(self) -> dict[str, float]:
        return {"release_threshold": float(self.k), "public_threshold": float(self.public_threshold)}

    @property
    def guarantee(self) -> PrivacyGuarantee:
        p = self.params
        promise = ("no public key absent from the data is released" if self.no_false_positives else
                   "every public key present in the data is released" if self.no_false_negatives else
                   "public keys may be missed or released without data")
        return PrivacyGuarantee(
            mechanism=(f"mixed public/private TSGD release (private keys above {self.k}, public keys above "
                       f"{self.public_threshold}: {promise})"),
            epsilon=float(p.epsilon_exact),
            delta_exact=p.compose(self.table.certified_delta),
            max_partitions_contributed=p.max_partitions_contributed,
            reference=f"{PAPER}, §5; docs/privacy/public-partitions.md",
            requested_delta=p.delta,
            neighbours=p.neighbour_text,
        )

    def release(self, counts: npt.ArrayLike, public: npt.ArrayLike, *, rng: object | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
        """``counts`` for every partition that is public or present; ``public[i]`` marks the
        public ones (their count may be 0)."""
        arr = np.asarray(counts)
        mask = np.asarray(public)
        if mask.dtype != np.bool_ or mask.shape != arr.shape:
            raise TypeError(f"public must be a bool array of the counts' shape {arr.shape}")
        keep = np.zeros(arr.shape, np.bool_)
        noisy = np.zeros(arr.shape, np.int64)
        for selected, threshold in ((~mask, self.k), (mask, self.public_threshold)):
            if selected.any():  # a threshold below −k keeps every value
                k_part, n_part = self._draw(arr[selected], max(threshold, -self.k), threshold < -self.k, None, rng)
                keep[selected], noisy[selected] = k_part, n_part
        return keep, noisy

    def apply(self, counts: npt.ArrayLike, *, rng: object | None = None,
              public: npt.ArrayLike | None = None) -> SelectionResult:
        arr = np.asarray(counts)
        mask = np.zeros(arr.shape, np.bool_) if public is None else public
        keep, noisy = self.release(arr, mask, rng=rng)
        return result_for(keep, noisy, self.guarantee, rng)

    def __repr__(self) -> str:
        return f"MixedRelease({self.params!r}, release_threshold={self.k}, public_threshold={self.public_threshold})"
