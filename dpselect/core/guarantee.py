"""The privacy statement every mechanism carries (OpenDP-style: a measurement and its map).

A :class:`PrivacyGuarantee` is data, not prose: the exact certified δ, the δ the caller asked
for, whether the contribution bound κ is *enforced* by dpselect (raw rows are bounded before
counting) or *assumed* of the caller's counts, whether dpselect certified the mechanism at all,
and whether the randomness was the secure CSPRNG. ``str()`` renders it for people; the printed
δ is always rounded *up*, so no reader ever sees a number below what was certified.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from dpselect.display import clip, readable_numbers
from dpselect.core.exact import as_fraction

__all__ = ["PrivacyGuarantee", "PAPER", "format_delta", "format_upper", "delta_upper_float"]

# The paper every partition-selection guarantee rests on.
PAPER = ("Desfontaines, Voss, Gipson, Mandayam, \"Differentially private partition selection\", "
         "PoPETs 2022")

ContributionBound = Literal["assumed", "enforced"]

_NEIGHBOURS = "add or remove all rows of one privacy unit (user)"
_NOT_DP = "NOT DP: deterministic test RNG"


def delta_upper_float(value: Fraction | float) -> float:
    """The smallest float that is >= value (a float conversion may round down)."""
    exact = Fraction(value)
    approx = float(exact)
    if Fraction(approx) < exact:
        approx = math.nextafter(approx, math.inf)
    return approx


def _round_up(exact: Fraction, digits: int) -> tuple[int, int]:
    """(m, e) with m a ``digits``-digit integer and m·10^(e − digits + 1) the smallest such
    number >= ``exact`` (> 0), computed exactly."""
    # Decimal exponent of the leading digit, then ceil of the scaled mantissa (exactly).
    exponent = math.floor(math.log10(delta_upper_float(exact)))
    scale = Fraction(10) ** (digits - 1 - exponent)
    while exact * scale >= 10**digits:  # log10 of a float can be off by one at a boundary
        exponent += 1
        scale = Fraction(10) ** (digits - 1 - exponent)
    while exact * scale < 10 ** (digits - 1):
        exponent -= 1
        scale = Fraction(10) ** (digits - 1 - exponent)
    mantissa = math.ceil(exact * scale)
    if mantissa == 10**digits:
        mantissa //= 10
        exponent += 1
    return mantissa, exponent


def format_delta(value: Fraction | float, digits: int = 4) -> str:
    """δ with ``digits`` significant digits, rounded up (never below the exact value)."""
    exact = Fraction(value)
    if exact <= 0:
        return "0"
    mantissa, exponent = _round_up(exact, digits)
    text = str(mantissa)
    lead, rest = text[0], text[1:].rstrip("0")
    body = f"{lead}.{rest}" if rest else lead
    return body if exponent == 0 else f"{body}e{exponent:+03d}"


def format_upper(value: Fraction | float, digits: int = 4) -> str:
    """A non-negative ε or δ for reading: ``digits`` significant digits, rounded up (never below
    the exact value), in plain decimals from 1e-4 to 1e6 ("0.2", "1", "1234") and as
    :func:`format_delta` writes it outside. A float stands for its shortest repr, as a
    parameter does (:func:`dpselect.core.exact.as_fraction`): 0.1 reads "0.1", not "0.1001"."""
    exact = as_fraction(value)
    if exact <= 0:
        return "0"
    mantissa, exponent = _round_up(exact, digits)
    if not -4 <= exponent < 6:
        return format_delta(exact, digits)
    shown = Fraction(mantissa) * Fraction(10) ** (exponent - digits + 1)
    places = max(digits - 1 - exponent, 0)
    whole, part = divmod(shown.numerator * 10**places // shown.denominator, 10**places)
    decimals = str(part).rjust(places, "0").rstrip("0") if places else ""
    return f"{whole}.{decimals}" if decimals else str(whole)


@dataclass(frozen=True)
class PrivacyGuarantee:
    """What a mechanism promises, and under which neighbouring relation.

    ``delta_exact`` is the certified δ: computed exactly on the quantized table that runs,
    never above ``requested_delta``. ``delta`` is a float upper bound of it (rounded up).
    ``contribution_bound`` says whether the κ of the statement is enforced by dpselect (raw rows
    are bounded before counting) or assumed of the caller's counts. ``certified`` is False for a
    mechanism dpselect did not build (its claim is the author's, not checked here), and
    ``privacy_guaranteed`` is False when the deterministic test RNG produced the result."""

    mechanism: str
    epsilon: float
    delta_exact: Fraction
    max_partitions_contributed: int
    reference: str
    requested_delta: float | None = None
    contribution_bound: ContributionBound = "assumed"
    neighbours: str = _NEIGHBOURS
    certified: bool = True
    privacy_guaranteed: bool = True
    notes: str = ""
    uncertified_reason: str = ""  # why a built-in mechanism's claim is not certified (else: user-supplied)
    certificate: str = "in exact rational arithmetic on the quantized table that runs"

    def __post_init__(self) -> None:
        if self.contribution_bound not in ("assumed", "enforced"):
            raise ValueError(f"contribution_bound must be 'assumed' or 'enforced', got {self.contribution_bound!r}")
        object.__setattr__(self, "delta_exact", Fraction(self.delta_exact))

    @property
    def delta(self) -> float:
        """The certified δ as a float, rounded up (never below the exact value)."""
        return delta_upper_float(self.delta_exact)

    @property
    def is_dp(self) -> bool:
        """True when the statement is dpselect's own, certified claim about a private run."""
        return self.certified and self.privacy_guaranteed

    def enforced(self) -> PrivacyGuarantee:
        """The same statement with κ enforced by dpselect's contribution bounding."""
        return dataclasses.replace(self, contribution_bound="enforced")

    def under_test_rng(self) -> PrivacyGuarantee:
        """The statement for a result computed with the deterministic test RNG: NOT DP."""
        return dataclasses.replace(self, privacy_guaranteed=False)

    def user_supplied(self) -> PrivacyGuarantee:
        """The statement of a mechanism dpselect did not build: relayed, never certified."""
        return dataclasses.replace(self, certified=False)

    def _kappa_text(self) -> str:
        k = self.max_partitions_contributed
        if self.contribution_bound == "enforced":
            return (f"each user's rows are bounded by dpselect to at most {k} partition(s), chosen "
                    "uniformly at random, before counting or weighting")
        return (f"each user is assumed to contribute to at most {k} partition(s) of the counts "
                "(bound contributions before counting; dpselect.select_partitions does)")

    def _delta_text(self) -> str:
        if not self.certified:
            return "dpselect has not checked this claim"
        text = f"delta is certified {self.certificate}"
        if self.requested_delta is not None and as_fraction(self.requested_delta) != self.delta_exact:
            text += (f" (shown rounded up); the requested delta was {self.requested_delta:g}: every rounding "
                     "(of tables, noise, thresholds and the budget split) goes toward privacy")
        return text

    def __str__(self) -> str:
        if not self.privacy_guaranteed:
            head = f"{_NOT_DP}. {self.mechanism} ran on a deterministic, seeded test generator: "
            head += "anyone with the seed can recompute the noise. Were it run with the secure "
            head += "generator, it would be "
        elif not self.certified and self.uncertified_reason:
            head = (f"NOT CERTIFIED BY DPSELECT ({self.uncertified_reason}): {self.mechanism} is, "
                    "in exact arithmetic, ")
        elif not self.certified:
            head = (f"USER-SUPPLIED, NOT CERTIFIED BY DPSELECT: {self.mechanism} is a strategy "
                    "dpselect did not build; its author claims it is ")
        else:
            head = f"{self.mechanism} is "
        text = (
            f"{head}({self.epsilon:g}, {format_delta(self.delta_exact)})-differentially private "
            f"(computational, ChaCha20 CSPRNG) for neighbouring datasets that {self.neighbours}; "
            f"{self._kappa_text()}. {self._delta_text()[0].upper()}{self._delta_text()[1:]}. "
            f"See {self.reference}."
        )
        return f"{text} {self.notes}".strip()

    def summary(self, limit: int = 150) -> str:
        """The statement in one line of at most ``limit`` characters (the mechanism's name is
        clipped to fit), its numbers rounded up for reading: the exact δ is ``delta_exact``,
        the full statement ``str()``."""
        tags = []
        if not self.privacy_guaranteed:
            tags.append(_NOT_DP)
        if not self.certified:
            tags.append("not certified" if self.uncertified_reason else "user-supplied, not certified")
        tag = f" [{'; '.join(tags)}]" if tags else ""
        head = f"(ε = {format_upper(self.epsilon)}, δ = {format_delta(self.delta_exact)})-DP "
        tail = f", κ = {self.max_partitions_contributed} ({self.contribution_bound}){tag}"
        mechanism = readable_numbers(" ".join(self.mechanism.split()))
        return f"{head}{clip(mechanism, max(limit - len(head) - len(tail), 20))}{tail}"

    def __repr__(self) -> str:
        return f"PrivacyGuarantee: {self.summary()} — str() for the statement"
