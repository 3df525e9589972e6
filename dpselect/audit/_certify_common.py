"""What every certificate shares: the composition of per-partition δ over the affected partitions
(exactly, or by Bonferroni bounds), the budget split, the worst-ratio figures, the kernel handle's
shape, and an upper bound on a normal tail. Used by :mod:`dpselect.audit.certify` and the
certifiers of each mechanism family."""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from dpselect.audit._targets import Target
from dpselect.audit.results import Check

__all__ = ["Result", "budget_checks", "composed_delta", "composition_check", "float_ratio", "handle_check"]

# Exact powers (1 − δ')^m up to this many affected partitions; Bonferroni bounds beyond.
_EXACT_POWER_LIMIT = 4096

# What a certifier returns: (kind, checks, what was checked, what was not, extra figures).
Result = tuple[str, list[Check], list[str], list[str], dict[str, Any]]


def composed_delta(partition_delta: Fraction, partitions: int) -> tuple[Fraction, bool]:
    """(1 − (1 − δ')^m, True) exactly for m <= 4096, else (an upper bound, False): the partial
    sums of inclusion–exclusion Σ_j (−1)^{j+1} C(m, j) δ'^j stopped after an odd term are upper
    bounds (Bonferroni), summed until the next term is below 2^-400 δ'. Independent of
    :mod:`dpselect.core.params` (which uses a floored binary power)."""
    x, m = Fraction(partition_delta), int(partitions)
    if x == 0 or m == 0:
        return Fraction(0), True
    if m == 1:
        return x, True
    if m <= _EXACT_POWER_LIMIT:
        return 1 - (1 - x) ** m, True
    total, term, j = Fraction(0), Fraction(1), 0
    floor = x / 2**400
    while True:
        j += 1
        term = term * (m - j + 1) * x / j  # C(m, j) x^j
        total += term if j % 2 else -term
        if j % 2 and (term * (m - j) * x / (j + 1) < floor or j >= m):
            return min(total, m * x), False


def budget_checks(target: Target) -> tuple[list[Check], Any]:
    """ε split (affected × ε' <= ε, exactly) and claimed δ <= requested δ."""
    p = target.strategy.params
    m = p.affected_partitions
    checks = [Check("budget split (epsilon)", m * p.partition_epsilon <= p.epsilon_exact,
                    f"{m} affected partition(s) x epsilon' {float(p.partition_epsilon):.6g} = "
                    f"{float(m * p.partition_epsilon):.6g} <= epsilon {float(p.epsilon_exact):g}"),
              Check("claimed delta within the request", target.claimed_delta <= p.delta_exact,
                    f"claimed {float(target.claimed_delta):.6g} <= requested {float(p.delta_exact):.6g}")]
    return checks, p


def composition_check(per_partition: Fraction, m: int, claimed: Fraction, what: str) -> tuple[Check, Fraction]:
    total, exact = composed_delta(per_partition, m)
    how = "exactly" if exact else "by Bonferroni upper bounds"
    ok = total <= claimed
    return Check(f"composition of {what}", ok,
                 f"1 - (1 - {float(per_partition):.6g})^{m} = {float(total):.6g} ({how}) <= claimed "
                 f"{float(claimed):.6g}"), total


def float_ratio(ratio: Fraction | None, epsilon: Fraction) -> tuple[float | None, float | None]:
    """(ratio / e^ε', ln ratio) as floats."""
    if ratio is None or ratio <= 0:
        return None, None
    log_ratio = math.log(ratio.numerator) - math.log(ratio.denominator)
    return math.exp(log_ratio - float(epsilon)), log_ratio


def handle_check(strategy: Any, table: Any) -> Check | None:
    """The kernel handle was loaded from these words: its shape must agree with them."""
    handle = strategy._handle
    same = (int(handle.length) == table.length and int(handle.limbs) == table.limbs
            and bool(handle.tail_certain) == bool(table.tail_certain))
    return Check("kernel handle matches the table", same,
                 f"handle: {handle.length} entries x {handle.limbs} limb(s), tail certain {handle.tail_certain}; "
                 f"table: {table.length} x {table.limbs}, {table.tail_certain}")

