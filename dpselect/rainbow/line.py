"""Closed forms of the optimal rainbow-DP mechanism on a line graph (spec rainbow.md §3–§6.1).

The line of rainbow ``c = (c_1, ..., c_m)`` has datasets ``0, 1, 2, ...``; index 0 is the one
boundary dataset, whose distribution ``p`` (given in rainbow order: ``p[0]`` is the probability
of the most preferred colour) is fixed. Index ``i`` stands for "graph distance ``i`` from the
boundary" (spec §1.2). The optimum does not depend on the line's length, so every function here
takes the distances to evaluate, as an int ``n`` (meaning ``0..n``) or an array of integers, and
evaluates them all at once with numpy.

Numerical stability: exponentials are only evaluated with arguments clipped to the regime they
belong to, and growth terms in log space, so that no intermediate overflows even for distances
of 1e9 or boundary probabilities of 1e-300 (spec §5, "Overflow"). Decaying terms underflow
gracefully to 0.

Everything here is floating point. What runs in a mechanism is the quantised, exactly certified
table built by :mod:`dpselect.rainbow.mechanism`.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validate import check_delta, check_distances, check_distribution, check_epsilon

__all__ = [
    "switch_value",
    "index_threshold",
    "prefix_thresholds",
    "binary_line",
    "ternary_line",
    "line_probabilities",
]


def switch_value(epsilon: float, delta: float = 0.0) -> float:
    """Return x* = (1 - delta) / (1 + e^epsilon), where the binary optimum stops growing
    geometrically (spec rainbow.md §2 for delta = 0, §5 for delta > 0)."""
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    # 1/(1+e^eps) = e^{-eps}/(1+e^{-eps}) without overflow for large eps.
    return (1.0 - delta) * math.exp(-epsilon) / (1.0 + math.exp(-epsilon))


def _log_switch_value(epsilon: float) -> float:
    """ln x* = -ln(1 + e^eps), computed without overflow."""
    return -(epsilon + math.log1p(math.exp(-epsilon)))


def _thresholds_pure(x: NDArray[np.float64], epsilon: float) -> NDArray[np.float64]:
    """eta(x) of spec §3 for epsilon > 0: +inf at x = 0, 0 above x*, else 1 + floor(ln(x*/x)/eps)."""
    eta = np.zeros_like(x)
    zero = x <= 0.0
    growing = (~zero) & (x <= switch_value(epsilon))
    with np.errstate(divide="ignore"):
        log_x = np.log(np.where(growing, x, 1.0))
    eta[growing] = 1.0 + np.floor((_log_switch_value(epsilon) - log_x[growing]) / epsilon)
    eta[zero] = np.inf
    return eta


def _thresholds_delta(x: NDArray[np.float64], epsilon: float, delta: float) -> NDArray[np.float64]:
    """Number of growth steps of the (eps, delta) binary map (spec §5): the largest i >= 1 with
    b_{i-1} <= x*_delta, where b_k + c = e^{k eps} (x + c) and c = delta / (e^eps - 1); 0 above x*_delta."""
    c = delta / math.expm1(epsilon)
    x_star = switch_value(epsilon, delta)
    eta = np.zeros_like(x)
    growing = x <= x_star
    eta[growing] = 1.0 + np.floor((math.log(x_star + c) - np.log(x[growing] + c)) / epsilon)
    return eta


def index_threshold(x: ArrayLike, epsilon: float, delta: float = 0.0) -> NDArray[np.float64]:
    """Index threshold eta(x) of spec rainbow.md §3 (eqs. (2), (3)), elementwise.

    The number of steps along the line during which a prefix probability that starts at ``x``
    grows geometrically (by e^epsilon, plus delta when delta > 0). ``+inf`` for ``x = 0`` with
    delta = 0 (the prefix stays 0 for ever); 0 when ``x > x*``. With epsilon = 0 the line is
    constant (delta = 0) and eta is returned as +inf for every x.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    values = np.array(x, dtype=np.float64, copy=True)
    if np.any(~np.isfinite(values)) or np.any(values < 0) or np.any(values > 1):
        raise ValueError("x must hold probabilities in [0, 1]")
    if epsilon == 0.0:
        if delta == 0.0:
            return np.full_like(values, np.inf)
        # phi(x) = min(x + delta, 1): grows until it reaches 1.
        return np.ceil((1.0 - values) / delta)
    if delta == 0.0:
        return _thresholds_pure(values, epsilon)
    return _thresholds_delta(values, epsilon, delta)


def prefix_thresholds(boundary: ArrayLike, epsilon: float, delta: float = 0.0) -> list[float]:
    """The thresholds eta_k = eta(F_k(0)) of the prefix sums F_k(0) = p_1 + ... + p_k, k = 1..m-1
    (spec §6.1; for m = 3 these are eta_B and eta_R of eqs. (2), (3)). ``math.inf`` means never."""
    p = check_distribution(boundary, "boundary")
    prefixes = np.cumsum(p)[:-1]
    return [float(v) for v in index_threshold(np.clip(prefixes, 0.0, 1.0), epsilon, delta)]


def _safe_log(values: NDArray[np.float64]) -> NDArray[np.float64]:
    with np.errstate(divide="ignore"):
        return np.log(values)


#: Exponents below this are raised to it: numpy's exp leaves its fast vector path for results
#: in the subnormal range (10x slower), and e^-700 ~ 1e-304 is below any meaningful probability.
#: Raising the exponent is monotone, so consecutive ratios stay within e^eps (DP is kept).
_EXPONENT_FLOOR = -700.0


def _exp_nonpositive(exponent: NDArray[np.float64]) -> NDArray[np.float64]:
    """e^x for x <= 0, with x floored at -700 (see _EXPONENT_FLOOR)."""
    return np.exp(np.maximum(exponent, _EXPONENT_FLOOR))


def _pure_line(p: NDArray[np.float64], epsilon: float, i: NDArray[np.float64]) -> NDArray[np.float64]:
    """Prefix recursion of spec §6.1 for delta = 0 and epsilon > 0 (see _pure_line_grouped).

    The evaluation needs the distances grouped by regime (all i <= eta_k before any i > eta_k).
    Sorted input (e.g. ``0..n``, or a graph's unique distances) already is; other input is
    grouped by a stable sort on a small bucket code (numpy's radix sort: linear time) and the
    rows are put back in the caller's order.
    """
    m = p.size
    prefix = np.clip(np.concatenate(([0.0], np.cumsum(p)[:-1], [1.0])), 0.0, 1.0)  # F_0(0) .. F_m(0)
    eta = np.concatenate(([np.inf], _thresholds_pure(prefix[1:m], epsilon), [0.0]))
    if i.size < 2 or bool(np.all(i[1:] >= i[:-1])):
        return _pure_line_grouped(p, epsilon, i, prefix, eta)
    thresholds = np.unique(eta[np.isfinite(eta)])
    bucket = np.searchsorted(thresholds, i, side="left").astype(np.min_scalar_type(thresholds.size))
    order = np.argsort(bucket, kind="stable")
    table = np.empty((i.size, m), dtype=np.float64)
    table[order] = _pure_line_grouped(p, epsilon, i[order], prefix, eta)
    return table


def _pure_line_grouped(
    p: NDArray[np.float64],
    epsilon: float,
    i: NDArray[np.float64],
    prefix: NDArray[np.float64],
    eta: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Evaluate colour by colour, regime by regime, without subtracting nearly equal numbers.

    With F_k the prefix sums, G_k = 1 - F_k, eta_k = eta(F_k(0)) (non-increasing in k),
    F_0 = 0 (eta_0 = inf) and F_m = 1 (eta_m = 0, G_m = 0), colour k at index i is
      (a) e^{i eps} p_k                                   for i <= eta_k,
      (b) 1 - G_k(i) - F_{k-1}(i)                          for eta_k < i <= eta_{k-1},
      (c) e^{-(i - eta_{k-1}) eps} P_k(eta_{k-1})           for i > eta_{k-1},
    with F_k(i) = e^{i eps} F_k(0) while growing and G_k(i) = e^{-(i-eta_k) eps} G_k(eta_k) after.
    For m = 3 this is eqs. (12), (21)-(22), (29) (checked in the tests against ternary_line).
    ``i`` is grouped by regime, so each regime is a contiguous slice and each exponential is evaluated only
    where it is used, with a non-positive exponent (no overflow).
    """
    m = p.size
    log_prefix = _safe_log(prefix)
    log_p = _safe_log(p)
    # end[k] = number of distances <= eta_k: with the distances grouped by regime, the first end[k]
    # positions are exactly those.
    end = np.array([np.count_nonzero(i <= t) for t in eta])

    def grown(log_start: float, index: NDArray[np.float64] | float) -> NDArray[np.float64]:
        # e^{i eps} x, only ever called where it is <= 1; exactly 0 when x = 0.
        if log_start == -math.inf:
            return np.zeros(np.shape(index))
        return _exp_nonpositive(np.asarray(index) * epsilon + log_start)

    def rest_after(k: int) -> float:
        # G_k(eta_k) = 1 - e^{eta_k eps} F_k(0); 0 for k = m.
        return 0.0 if k == m else max(1.0 - float(grown(log_prefix[k], eta[k])), 0.0)

    def middle(k: int, index: NDArray[np.float64]) -> NDArray[np.float64]:
        # regime (b): F_k saturating, F_{k-1} still growing.
        value = 1.0 - rest_after(k) * _exp_nonpositive((eta[k] - index) * epsilon)
        if k > 1:
            value -= grown(log_prefix[k - 1], index)
        return np.maximum(value, 0.0)

    out = np.empty((i.size, m), dtype=np.float64)
    for k in range(1, m + 1):
        a_end, b_end = int(end[k]), int(end[k - 1])
        out[:a_end, k - 1] = grown(log_p[k - 1], i[:a_end])
        if b_end > a_end:
            out[a_end:b_end, k - 1] = middle(k, i[a_end:b_end])
        if b_end < i.size:
            eta_prev = float(eta[k - 1])
            at_prev = (
                float(grown(log_p[k - 1], eta_prev))
                if eta[k] == eta_prev
                else float(middle(k, np.array([eta_prev]))[0])
            )
            out[b_end:, k - 1] = at_prev * _exp_nonpositive((eta_prev - i[b_end:]) * epsilon)
    return out


def _delta_prefix(x: float, epsilon: float, delta: float, i: NDArray[np.float64]) -> NDArray[np.float64]:
    """phi_delta^i(x) of spec §5: growth b_i = x e^{i eps} + delta (e^{i eps}-1)/(e^eps-1) for
    i <= eta, then 1 - b_i + c = e^{-(i-eta) eps}(1 - b_eta + c) with c = delta/(e^eps-1),
    capped at 1. expm1 keeps the small-epsilon case free of cancellation."""
    if epsilon == 0.0:
        return np.minimum(x + i * delta, 1.0)
    eta = float(_thresholds_delta(np.array([x]), epsilon, delta)[0])
    c = delta / math.expm1(epsilon)
    steps = np.minimum(i, eta)
    growth = x * np.exp(steps * epsilon) + delta * (np.expm1(steps * epsilon) / math.expm1(epsilon))
    at_switch = 1.0 - (x * math.exp(eta * epsilon) + delta * math.expm1(eta * epsilon) / math.expm1(epsilon))
    decay_steps = np.maximum(i - eta, 0.0)
    remaining = at_switch * np.exp(-decay_steps * epsilon) + c * np.expm1(-decay_steps * epsilon)
    value = np.where(i <= eta, growth, 1.0 - np.maximum(remaining, 0.0))
    return np.minimum(value, 1.0)


def _delta_line(p: NDArray[np.float64], epsilon: float, delta: float, i: NDArray[np.float64]) -> NDArray[np.float64]:
    m = p.size
    prefix = np.clip(np.cumsum(p)[:-1], 0.0, 1.0)
    cumulative = [np.zeros(i.size)] + [_delta_prefix(float(x), epsilon, delta, i) for x in prefix] + [np.ones(i.size)]
    return np.stack([cumulative[k + 1] - cumulative[k] for k in range(m)], axis=1)


def line_probabilities(
    boundary: ArrayLike,
    epsilon: float,
    distances: ArrayLike | int,
    delta: float = 0.0,
) -> NDArray[np.float64]:
    """Optimal boundary-homogeneous mechanism on the line, any number of colours m >= 2.

    Algorithm A1 of spec rainbow.md §7 (prefix-sum recursion of §6.1): every prefix sum
    F_k(i) = P(c_1) + ... + P(c_k) follows the binary optimum F_k(i) = phi^i(F_k(0)) independently,
    and colour k gets F_k(i) - F_{k-1}(i).

    Guarantee (delta = 0): epsilon-DP between consecutive indices, and the unique optimal
    (first-order stochastically dominant in rainbow order, hence lexicographically optimal)
    boundary-homogeneous mechanism (spec §6.1, proof sketch; Theorem 2 of [ZGD+22]).
    With delta > 0 the same recursion with phi_delta (spec §5) is used: proven for m = 2, only
    *numerically verified* (against the lexicographic LP) for m = 3, and refused for m >= 4
    (use :func:`dpselect.rainbow.lexicographic_lp` there).

    Parameters
    ----------
    boundary
        Distribution at the boundary (index 0) in **rainbow order** (most preferred first).
    epsilon, delta
        Privacy parameters, epsilon finite >= 0 and 0 <= delta < 1.
    distances
        An int ``n`` (evaluate ``0..n``) or an array of non-negative integer distances.

    Returns
    -------
    (len(distances), m) float64 array; row r is the distribution at distance ``distances[r]``
    in rainbow order. Rows sum to 1 within ~1e-15.
    """
    p = check_distribution(boundary, "boundary")
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    i = check_distances(distances)
    if delta > 0.0 and p.size > 3:
        raise ValueError(
            f"the (epsilon, delta) closed form covers m <= 3 colours (m = 3 numerically verified only), got m = {p.size}; "
            "use dpselect.rainbow.lexicographic_lp for more colours"
        )
    if delta == 0.0 and epsilon == 0.0:
        return np.tile(p, (i.size, 1))  # 0-DP: every index must equal the boundary.
    if delta == 0.0:
        # Each entry is computed by its own regime formula (no cancellation), already in [0, 1];
        # rows sum to 1 within ~1e-15.
        return _pure_line(p, epsilon, i)
    table = _delta_line(p, epsilon, delta, i)
    np.clip(table, 0.0, 1.0, out=table)
    table /= table.sum(axis=1, keepdims=True)
    return table


def binary_line(p: float, epsilon: float, distances: ArrayLike | int, delta: float = 0.0) -> NDArray[np.float64]:
    """Binary optimum of [DMS21] (spec rainbow.md §5): P_B(i) = phi^i(p) by eq. (12), with the
    (epsilon, delta) version phi_delta when delta > 0. ``p`` is the boundary probability of the
    preferred answer. Returns (len(distances), 2): columns (preferred, other)."""
    if isinstance(p, bool) or not isinstance(p, (int, float, np.floating, np.integer)):
        raise TypeError(f"p must be a probability (a real number), got {type(p).__name__}")
    if not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p!r}")
    return line_probabilities([float(p), 1.0 - float(p)], epsilon, distances, delta)


def ternary_line(boundary: ArrayLike, epsilon: float, distances: ArrayLike | int) -> NDArray[np.float64]:
    """Three-colour closed form of [ZGD+22], implemented literally (algorithm A2, spec §4):
    first colour eq. (12), second colour eqs. (21)-(22) with its three regimes split at eta_R and
    eta_B (eqs. (2), (3)), third colour eq. (29). Pure epsilon only.

    ``boundary`` = (p_B, p_R, p_G) in rainbow order (blue preferred to red preferred to green).
    Returns (len(distances), 3) with columns (P_B, P_R, P_G). Agrees with
    :func:`line_probabilities` to float precision (tested); kept as an independent
    implementation of the paper's statement.
    """
    p = check_distribution(boundary, "boundary")
    if p.size != 3:
        raise ValueError(f"boundary must have 3 entries (p_B, p_R, p_G), got {p.size}")
    epsilon = check_epsilon(epsilon)
    i = check_distances(distances)
    if epsilon == 0.0:
        return np.tile(p, (i.size, 1))
    p_b, p_r, _ = p
    eta_b, eta_r = _thresholds_pure(np.array([p_b, min(p_b + p_r, 1.0)]), epsilon)
    log_b = math.log(p_b) if p_b > 0 else -math.inf
    log_br = math.log(p_b + p_r) if p_b + p_r > 0 else -math.inf
    log_r = math.log(p_r) if p_r > 0 else -math.inf

    def exp_growth(index: NDArray[np.float64] | float, log_x: float, eta: float) -> NDArray[np.float64]:
        return np.exp(np.minimum(index, eta) * epsilon + log_x)

    def decay(index: NDArray[np.float64] | float, eta: float) -> NDArray[np.float64]:
        # e^{-(i - eta) eps} for i >= eta; never used when eta is infinite (no saturation).
        if not math.isfinite(eta):
            return np.zeros_like(np.asarray(index, dtype=np.float64))
        return np.exp(-(np.maximum(index, eta) - eta) * epsilon)

    # eq. (12): first colour.
    blue_switch_rest = 1.0 - float(exp_growth(eta_b, log_b, eta_b)) if math.isfinite(eta_b) else 0.0
    blue = np.where(
        i <= eta_b,
        exp_growth(i, log_b, eta_b),
        1.0 - decay(i, eta_b) * blue_switch_rest,
    )
    # eq. (22) helper: green mass at eta_R; eq. (29): third colour.
    g_star = max(1.0 - float(exp_growth(eta_r, log_br, eta_r)), 0.0) if math.isfinite(eta_r) else 0.0
    green = np.where(
        i <= eta_r,
        1.0 - exp_growth(i, log_br, eta_r),
        decay(i, eta_r) * g_star,
    )

    def rho(index: NDArray[np.float64] | float) -> NDArray[np.float64]:
        # eq. (21) middle regime: blue grows, green at its floor e^{-eps} P_G(i-1).
        return 1.0 - exp_growth(index, log_b, eta_b) - decay(index, eta_r) * g_star

    if eta_r < eta_b:
        red_at_eta_b = float(rho(eta_b)) if math.isfinite(eta_b) else 0.0
    else:
        red_at_eta_b = float(exp_growth(eta_b, log_r, eta_b)) if math.isfinite(eta_b) else 0.0
    red = np.where(
        i <= eta_r,
        exp_growth(i, log_r, eta_r),
        np.where(
            i <= eta_b,
            rho(np.minimum(i, eta_b)),
            decay(i, eta_b) * red_at_eta_b,
        ),
    )
    table = np.stack([blue, red, green], axis=1)
    np.clip(table, 0.0, 1.0, out=table)
    table /= table.sum(axis=1, keepdims=True)
    return table
