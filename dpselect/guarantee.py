"""The privacy statement every mechanism carries (OpenDP-style: a measurement and its map)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PrivacyGuarantee:
    """What a mechanism promises, and under which neighbouring relation.

    ``delta`` is the certified δ: computed exactly on the quantized table that runs, never
    above the δ the caller asked for."""

    mechanism: str
    epsilon: float
    delta: float
    max_partitions_contributed: int
    spec: str
    neighbours: str = "add or remove one privacy unit (user); each user in at most max_partitions_contributed partitions"
    notes: str = ""

    def __str__(self) -> str:
        text = (
            f"{self.mechanism} is ({self.epsilon:g}, {self.delta:.6g})-differentially private "
            f"(computational, ChaCha20 CSPRNG) for neighbouring datasets that {self.neighbours} "
            f"(= {self.max_partitions_contributed}). Certified on the exact table that runs; see {self.spec}."
        )
        return f"{text} {self.notes}".strip()
