"""pi_opt: the optimal keep/drop rule (Desfontaines, Voss, Gipson, Mandayam, "Differentially
private partition selection", PoPETs 2022, Theorem 1 and Lemma 1; docs/privacy/pi-opt.md)."""
from __future__ import annotations

from dpselect.core.guarantee import PAPER, PrivacyGuarantee
from dpselect.mechanisms.base import TabledSelection
from dpselect.core.params import PrivacyParams
from dpselect.core.tables import keep_table, pre_thresholded

__all__ = ["PiOptSelection"]


class PiOptSelection(TabledSelection):
    """The optimal keep/drop rule pi_opt.

    Guarantee: each partition is kept independently with probability q[n]/2^w from the
    certified 128- or 192-bit keep table, which satisfies the four (ε', δ') inequalities between
    every count n and n + 1, checked in exact rational arithmetic by an independent verifier at
    construction; with at most κ partitions per user and ε' = ε/κ, δ' from ``delta_split``, the
    released key set is (ε, δ)-DP (computational: ChaCha20 CSPRNG). ε = 0 gives
    pi(n) = min(1, n δ') (Theorem 2). The table is never above pi_opt and within ~1e-13
    relative of it. With ``pre_threshold`` τ > 1, partitions with fewer than τ users are never
    kept and the rest are decided on n − (τ − 1)."""

    name = "pi_opt"

    def __init__(self, params: PrivacyParams, pre_threshold: int = 1) -> None:
        self.params = params
        self.pre_threshold = pre_threshold
        self._load(pre_thresholded(keep_table(params), pre_threshold))

    @property
    def thresholds(self) -> dict[str, float]:
        """The first count kept surely (n2 + 1 of Theorem 1, plus τ − 1)."""
        return {"kept_surely_from": float(self.table.length)}

    @property
    def guarantee(self) -> PrivacyGuarantee:
        p = self.params
        notes = []
        if p.epsilon_exact == 0:
            notes.append("epsilon = 0: keep probability min(1, n*delta') (Theorem 2).")
        if self.pre_threshold > 1:
            notes.append(f"Pre-threshold {self.pre_threshold}: partitions with fewer users are never released.")
        return PrivacyGuarantee(
            mechanism="pi_opt partition selection",
            epsilon=float(p.epsilon_exact),
            delta_exact=p.compose(p.partition_delta),
            max_partitions_contributed=p.max_partitions_contributed,
            reference=f"{PAPER}, Theorem 1 and Lemma 1; docs/privacy/pi-opt.md",
            requested_delta=p.delta,
            neighbours=p.neighbour_text,
            notes=" ".join(notes),
        )

    def __repr__(self) -> str:
        tau = f", pre_threshold={self.pre_threshold}" if self.pre_threshold > 1 else ""
        return f"PiOptSelection({self.params!r}, table_length={self.table.length}{tau})"
