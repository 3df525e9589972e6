"""Result objects: the estimate, what the private search chose, and the per-user privacy statement.

Φ-PDP and composition: docs/privacy/personalized.md, "Model" and "Tools". A
:class:`PrivacyStatement` records, as an exact function of a user's exact privacy level Φ(u),
the privacy loss the mechanism accounted for that user (sum over the composed releases of
sensitivity / noise scale). The guarantee is Φ-PDP: ``accounted_loss(u) <= Φ(u)`` for every
user, checked exactly by :meth:`verify`.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from .params import exact_value

__all__ = ["PAPER", "PRIVACY_DOC", "PersonalizedResult", "PrivacyStatement", "reference"]

#: The paper the mechanisms of this package come from.
PAPER = "Sun, Dong, Qiu, Yi, Personalized Truncation for Personalized Privacy (SIGMOD 2025)"

#: The shipped page with every privacy statement, its proof and the caveats.
PRIVACY_DOC = "docs/privacy/personalized.md"


def reference(mechanism: str) -> str:
    """The citation carried by a result: the paper, the mechanism, and the privacy page."""
    return f"{PAPER}, {mechanism}; {PRIVACY_DOC}"


@dataclass(frozen=True)
class PrivacyStatement:
    """Per-user privacy statement of one mechanism run (docs/privacy/personalized.md).

    ``loss_of`` maps a user's exact privacy level to the exact (rational) privacy loss the
    mechanism's composition charges that user; it depends on the user only through Φ(u).
    """

    phi: np.ndarray = field(repr=False)
    loss_of: Callable[[Fraction], Fraction] = field(repr=False)
    description: str
    reference: str
    privacy_guaranteed: bool

    def __repr__(self) -> str:
        levels = f"{self.phi.size} users, Φ in [{float(self.phi.min()):.4g}, {float(self.phi.max()):.4g}]"
        return (
            f"PrivacyStatement({self.description!r}, {levels}, privacy_guaranteed={self.privacy_guaranteed}, "
            f"reference={self.reference!r})"
        )

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
        Derived probability that the stated error bound fails (≤ β for L = t + 1).
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

    def __repr__(self) -> str:
        chosen = "none (clamped to 0)" if self.chosen_index is None else (
            f"{self.chosen_index} of {len(self.parameters)} (parameter {_short(self.chosen_parameter)})"
        )
        parts = [f"estimate={_short(self.estimate)}", f"method={self.method!r}"]
        if self.parameters:
            parts.append(f"chosen={chosen}")
        if self.beta is not None:
            parts.append(f"beta={self.beta:g}")
        if self.failure_probability is not None:
            parts.append(f"failure_probability<={self.failure_probability:.3g}")
        parts.append(f"privacy_guaranteed={self.privacy_guaranteed}")
        return f"PersonalizedResult({', '.join(parts)})"


def _short(value: object) -> str:
    """An int or Fraction as readable text: exact when short, else about 6 significant digits."""
    text = str(value)
    if len(text) <= 24:
        return text
    try:
        return f"~{float(value):.6g}"  # type: ignore[arg-type]
    except OverflowError:
        return f"<a {len(text)}-character number>"
