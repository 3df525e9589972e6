"""From samples of a mechanism's outputs on two neighbouring inputs to a lower bound on ε.

Each trial's output is reduced to a few scores (how many partitions were kept, the sum of the
released noisy counts, which keys were kept, ...). An event is {score >= c}, {score <= c} or,
for categorical scores, {score = c}. The first half of the trials (the pilot) picks, for each
direction, the event whose approximate bound on ε is largest; the second half (held out, hence
independent of that choice) gives the exact Clopper–Pearson bounds and the verdict. This is the
selection/estimation split of Ding, Wang, Wang, Zhang, Kifer ("Detecting violations of
differential privacy", CCS 2018), with Clopper–Pearson bounds as in Jagielski, Ullman, Oprea
(NeurIPS 2020).

False alarms: under the claim, for the held-out half, P[p1_lower > P[E|D]] <= α and
P[p0_upper < P[E|D']] <= α, whatever the pilot chose; if neither happens, ε_lb <= ε. Each
scenario computes four such bounds (two directions), so it refutes a correct mechanism with
probability at most 4α.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpselect.audit._stats import clopper_pearson_lower, clopper_pearson_upper, epsilon_lower_bound
from dpselect.audit.results import EventEstimate

__all__ = ["Side", "evaluate", "BOUNDS_PER_SCENARIO"]

BOUNDS_PER_SCENARIO = 4
_PILOT_Z = 2.0


@dataclass
class Side:
    """One neighbouring input's outputs, as scores per trial. ``exact``: the output is known
    without sampling (the empty release of a dataset without the partition), so frequencies are
    exact probabilities. ``categorical`` names the scores compared by equality only."""

    scores: dict[str, npt.NDArray[np.float64]]
    exact: bool = False


def _wilson(k: npt.NDArray[np.float64], n: int, z: float, upper: bool) -> npt.NDArray[np.float64]:
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    bound = (centre + spread if upper else centre - spread) / (1 + z * z / n)
    return np.clip(bound, 0.0, 1.0)


def _proxy(k1: npt.NDArray[np.float64], k0: npt.NDArray[np.float64], n: int, delta: float, exact1: bool,
           exact0: bool) -> npt.NDArray[np.float64]:
    """An approximate ε bound per candidate event (pilot ranking only)."""
    lo1 = k1 / n if exact1 else _wilson(k1, n, _PILOT_Z, upper=False)
    hi0 = k0 / n if exact0 else _wilson(k0, n, _PILOT_Z, upper=True)
    gap = lo1 - delta
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(gap <= 0, -1.0 + gap, np.where(hi0 <= 0, 1e6 + gap, np.log(gap / hi0)))
    return value


_Candidates = list[tuple[str, npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]]


def _candidates(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64], categorical: bool) -> _Candidates:
    """(kind, the values c, counts of the event in a, in b) for every event on one score."""
    values = np.unique(np.concatenate([a, b]))
    sa, sb = np.sort(a), np.sort(b)
    out: _Candidates = []
    below_a = np.searchsorted(sa, values, side="left").astype(np.float64)
    below_b = np.searchsorted(sb, values, side="left").astype(np.float64)
    upto_a = np.searchsorted(sa, values, side="right").astype(np.float64)
    upto_b = np.searchsorted(sb, values, side="right").astype(np.float64)
    if categorical:
        out.append(("==", values, upto_a - below_a, upto_b - below_b))
    else:
        out.append((">=", values, sa.size - below_a, sb.size - below_b))
        out.append(("<=", values, upto_a, upto_b))
    return out


def _count(x: npt.NDArray[np.float64], kind: str, c: float) -> int:
    if kind == ">=":
        return int(np.count_nonzero(x >= c))
    if kind == "<=":
        return int(np.count_nonzero(x <= c))
    return int(np.count_nonzero(x == c))


def _describe(score: str, kind: str, c: float) -> str:
    value = f"{c:.6g}" if not float(c).is_integer() else str(int(c))
    return f"{score} {kind} {value}"


def evaluate(scenario: str, neighbours: str, d: Side, d0: Side, delta: float, epsilon: float, alpha: float,
             categorical: frozenset[str] = frozenset()) -> EventEstimate:
    """The scenario's verdict: for both directions (D vs D', D' vs D) the pilot picks an event,
    the held-out half bounds it; the larger ε bound is returned."""
    n_trials = min(next(iter(d.scores.values())).size, next(iter(d0.scores.values())).size)
    half = n_trials // 2
    if half < 1:
        raise ValueError("an empirical scenario needs at least two trials per side")
    best: EventEstimate | None = None
    for label, one, zero in (("D vs D'", d, d0), ("D' vs D", d0, d)):
        choice: tuple[tuple[float, float], str, str, float] | None = None
        for score in one.scores:
            a_pilot, b_pilot = one.scores[score][:half], zero.scores[score][:half]
            for kind, values, ka, kb in _candidates(a_pilot, b_pilot, score in categorical):
                proxy = _proxy(ka, kb, half, delta, one.exact, zero.exact)
                i = int(np.argmax(proxy))
                key = (float(proxy[i]), float(ka[i]))
                if choice is None or key > choice[0]:
                    choice = (key, score, kind, float(values[i]))
        assert choice is not None
        _, score, kind, c = choice
        a_hold = one.scores[score][half:2 * half]
        b_hold = zero.scores[score][half:2 * half]
        hits, ref = _count(a_hold, kind, c), _count(b_hold, kind, c)
        p1 = hits / half if one.exact else clopper_pearson_lower(hits, half, alpha)
        p0 = ref / half if zero.exact else clopper_pearson_upper(ref, half, alpha)
        eps_lb = epsilon_lower_bound(p1, p0, delta)
        estimate = EventEstimate(scenario=scenario, neighbours=neighbours, direction=label,
                                 event=_describe(score, kind, c), trials=half, hits=hits, reference_hits=ref,
                                 p1_lower=p1, p0_upper=p0, alpha=alpha, epsilon_lb=eps_lb, claimed_epsilon=epsilon)
        if best is None or (eps_lb, p1) > (best.epsilon_lb, best.p1_lower):
            best = estimate
    assert best is not None
    return best


def split_alpha(false_alarm: float, scenarios: int) -> float:
    """α per one-sided bound so that ``scenarios`` scenarios refute a correct mechanism with
    probability at most ``false_alarm`` (union bound)."""
    if not 0 < false_alarm < 1:
        raise ValueError(f"the false-alarm probability must be in (0, 1), got {false_alarm}")
    return false_alarm / (BOUNDS_PER_SCENARIO * max(1, scenarios))

