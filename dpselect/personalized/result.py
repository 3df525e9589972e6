"""Result objects: the estimate, what the private search chose, and the per-user privacy statement.

Spec: ``personalized.md`` §1 (Φ-PDP, composition). A :class:`PrivacyStatement` records, as an
exact function of a user's exact privacy level Φ(u), the privacy loss the mechanism accounted
for that user (sum over the composed releases of sensitivity / noise scale). The guarantee is
Φ-PDP: ``accounted_loss(u) <= Φ(u)`` for every user, checked exactly by :meth:`verify`.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from .params import exact_value

__all__ = ["PersonalizedResult", "PrivacyStatement"]


@dataclass(frozen=True)
class PrivacyStatement:
    """Per-user privacy statement of one mechanism run (spec personalized.md §1).

    ``loss_of`` maps a user's exact privacy level to the exact (rational) privacy loss the
    mechanism's composition charges that user; it depends on the user only through Φ(u).
    """

    phi: np.ndarray = field(repr=False)
    loss_of: Callable[[Fraction], Fraction] = field(repr=False)
    description: str
    spec: str
    privacy_guaranteed: bool

    def accounted_loss(self, user: int) -> Fraction:
        """Exact total privacy loss charged to ``user`` (an index into phi)."""
        return self.loss_of(exact_value(self.phi[user]))

    def verify(self, users: Iterable[int] | None = None) -> bool:
        """Exact check that every listed user (default: all) has accounted loss ≤ Φ(u).

        Runs once per distinct Φ value, in ``Fraction`` arithmetic: meant for tests and audits
        (pass ``users`` to audit a sample when there are millions of distinct levels).
        """
        chosen = self.phi if users is None else self.phi[np.asarray(list(users), dtype=np.int64)]
        for value in np.unique(chosen).tolist():
            exact = exact_value(value)
            if self.loss_of(exact) > exact:
                return False
        return True

    @property
    def epsilon_per_user(self) -> np.ndarray:
        """The guaranteed per-user levels Φ(u) (read-only)."""
        return self.phi


@dataclass(frozen=True)
class PersonalizedResult:
    """Output of a personalized-DP estimator.

    Attributes
    ----------
    estimate:
        The released estimate (an integer for integer data; may be a ``Fraction`` for baselines
        that clip at half-integers).
    method:
        Which mechanism produced it.
    chosen_index, chosen_parameter:
        The winning candidate of the private search and its threshold k_i (count) or noise
        scale parameter s_i (sum, join); ``None`` when the output was clamped to 0 or the
        mechanism has no search.
    parameters, noise_scales, shifts, noisy_candidates:
        The full candidate list: all candidates are released internally and composed, so they
        are as private as the estimate (post-processing of the composed releases).
    failure_probability:
        Derived probability that the error bound of the spec fails (≤ β for L = t + 1).
    privacy:
        The per-user privacy statement.
    privacy_guaranteed:
        False when the randomness came from a deterministic test RNG.
    """

    estimate: int | Fraction
    method: str
    chosen_index: int | None
    chosen_parameter: Fraction | None
    parameters: tuple[Fraction, ...]
    noise_scales: tuple[Fraction, ...]
    shifts: tuple[int, ...]
    noisy_candidates: tuple[int, ...]
    beta: float | None
    failure_probability: float | None
    privacy: PrivacyStatement
    privacy_guaranteed: bool
    details: dict[str, object] = field(default_factory=dict)

    def __float__(self) -> float:
        return float(self.estimate)
