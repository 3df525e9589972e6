"""Closed forms of the optimal rainbow-DP mechanism on a line graph ([ZGD+22] Theorems 4-5,
Corollary 1; [DMS21]; proofs in docs/privacy/rainbow.md).

The line of rainbow ``c = (c_1, ..., c_m)`` has datasets ``0, 1, 2, ...``; index 0 is the one
boundary dataset, whose distribution ``p`` (given in rainbow order: ``p[0]`` is the probability
of the most preferred colour) is fixed. Index ``i`` stands for "graph distance ``i`` from the
boundary" ([ZGD+22] Definition 8). The optimum does not depend on the line's length, so every function here
takes the distances to evaluate, as an int ``n`` (meaning ``0..n``) or an array of integers, and
evaluates them all at once with numpy.

Numerical stability: exponentials are only evaluated with arguments clipped to the regime they
belong to, and growth terms in log space, so that no intermediate overflows even for distances
of 1e9 or boundary probabilities of 1e-300. Decaying terms underflow
gracefully to 0.

Everything here is floating point. What runs in a mechanism is the quantised, exactly certified
table built by :mod:`dpselect.rainbow.mechanism`.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validate import check_delta, check_distances, check_distribution, check_epsilon, check_probability

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
    geometrically ([ZGD+22] for delta = 0; docs/privacy/rainbow.md, "The line with δ > 0")."""
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    # 1/(1+e^eps) = e^{-eps}/(1+e^{-eps}) without overflow for large eps.
    return (1.0 - delta) * math.exp(-epsilon) / (1.0 + math.exp(-epsilon))


def _log_switch_value(epsilon: float) -> float:
    """ln x* = -ln(1 + e^eps), computed without overflow."""
    return -(epsilon + math.log1p(math.exp(-epsilon)))


def _thresholds_pure(x: NDArray[np.float64], epsilon: float) -> NDArray[np.float64]:
    """eta(x) ([ZGD+22] eqs. (2), (3)) for epsilon > 0: +inf at x = 0, 0 above x*, else 1 + floor(ln(x*/x)/eps)."""
    eta = np.zeros_like(x)
    zero = x <= 0.0
    growing = (~zero) & (x <= switch_value(epsilon))
    with np.errstate(divide="ignore"):
        log_x = np.log(np.where(growing, x, 1.0))
    eta[growing] = 1.0 + np.floor((_log_switch_value(epsilon) - log_x[growing]) / epsilon)
    eta[zero] = np.inf
    return eta


#: The (epsilon, delta) line is evaluated at min(epsilon, 700). A table that is (700, delta)-DP is
#: (epsilon, delta)-DP for every epsilon >= 700, and the optimum for a larger epsilon differs from
#: it only in probabilities of order e^-700 (~1e-304), which float64 cannot carry through the DP
#: inequalities: an entry e^-800 would round to 0 and break the inequality it is tight in. The
#: package's float checker (``dp_violation``) uses the same cap.
_DELTA_EPSILON_CAP = 700.0

#: Growth-step counts above this are beyond every distance we evaluate (< 2**53): not refined.
_LARGE_STEPS = 2.0**54


def _delta_growth(
    x: NDArray[np.float64] | float, epsilon: float, delta: float, j: NDArray[np.float64] | float
) -> NDArray[np.float64]:
    """b_j = e^{j eps} x + delta (e^{j eps} - 1)/(e^eps - 1): a prefix after j growth steps from x.

    Each term is evaluated as one exponential of a non-positive argument times a ratio in [1, j]
    (``delta e^{(j-1) eps} (1 - e^{-j eps})/(1 - e^{-eps})``), so nothing overflows and every term
    keeps its relative precision (no subtraction). Exact ``x`` at j = 0. Meant for j <= eta,
    where b_j <= 1; beyond, the exponents are clipped at 0 (the value then only has to exceed x*).
    """
    x = np.asarray(x, dtype=np.float64)
    j = np.asarray(j, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        first = np.where(x > 0.0, np.exp(np.minimum(j * epsilon + np.log(x), 0.0)), 0.0)
        ratio = np.where(j > 0.0, np.expm1(-j * epsilon) / math.expm1(-epsilon), 0.0)
        second = np.exp(np.minimum((j - 1.0) * epsilon + math.log(delta), 0.0)) * ratio
    return np.where(j == 0.0, x, first + second)


def _thresholds_delta(x: NDArray[np.float64], epsilon: float, delta: float) -> NDArray[np.float64]:
    """Number of growth steps of the (eps, delta) binary map from x: eta = min{j >= 0 : b_j > x*_delta}.

    Growth (phi_delta(x) = e^eps x + delta) is the active branch while x <= x*_delta =
    (1 - delta)/(1 + e^eps). With c = delta/(e^eps - 1), b_j + c = e^{j eps}(x + c), so
    eta = 1 + floor(ln((x* + c)/(x + c))/eps) for x <= x*; this is evaluated in log space (no overflow
    for any eps, no underflow of c) and then corrected against the same float b_j that the table
    uses, so the table's regimes and its thresholds agree. ``epsilon`` is already capped.
    """
    x_star = switch_value(epsilon, delta)
    log_c = math.log(delta) - math.log(math.expm1(epsilon))
    log_top = float(np.logaddexp(math.log(x_star) if x_star > 0.0 else -math.inf, log_c))
    with np.errstate(divide="ignore", over="ignore"):
        steps = (log_top - np.logaddexp(np.log(x), log_c)) / epsilon
    eta = np.where(x > x_star, 0.0, np.maximum(1.0 + np.floor(np.minimum(steps, _LARGE_STEPS)), 1.0))
    refine = eta < _LARGE_STEPS
    for _ in range(8):
        down = refine & (eta > 0.0) & (_delta_growth(x, epsilon, delta, np.maximum(eta - 1.0, 0.0)) > x_star)
        up = refine & ~down & (_delta_growth(x, epsilon, delta, eta) <= x_star)
        if not (down.any() or up.any()):
            break
        eta = eta - down + up
    return eta


def index_threshold(x: ArrayLike, epsilon: float, delta: float = 0.0) -> NDArray[np.float64]:
    """Index threshold eta(x) of [ZGD+22] (eqs. (2), (3)), elementwise.

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
    return _thresholds_delta(values, min(epsilon, _DELTA_EPSILON_CAP), delta)


def prefix_thresholds(boundary: ArrayLike, epsilon: float, delta: float = 0.0) -> list[float]:
    """The thresholds eta_k = eta(F_k(0)) of the prefix sums F_k(0) = p_1 + ... + p_k, k = 1..m-1
    (for m = 3 these are eta_B and eta_R of [ZGD+22] eqs. (2), (3)). ``math.inf`` means never."""
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
    """Prefix recursion (docs/privacy/rainbow.md, "The line optimum") for delta = 0 and epsilon > 0
    (see _pure_line_grouped).

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


def _delta_prefix(
    x: float, y: float, epsilon: float, delta: float, i: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64], float]:
    """One prefix sum of the (eps, delta) line: F(i) = phi_delta^i(x) and its complement G(i) = 1 - F(i),
    each computed directly where it is small, and the number of growth steps eta.

    ``x`` = F(0), ``y`` = G(0) (a suffix sum of the boundary, not 1 - x, so that a tiny last
    colour keeps its digits). For epsilon > 0 (already capped at 700):

    * i < eta (growth): F = b_i of :func:`_delta_growth`, G = 1 - F (F <= x* <= 1/2: no cancellation);
    * i = eta (the switch): G = max(1 - b_eta, e^-eps (G(eta - 1) - delta)). The second term is the
      saturation branch of phi_delta; the true G(eta) is at least it, and taking the max keeps the
      constraint G(eta - 1) <= e^eps G(eta) + delta although 1 - b_eta loses all digits when
      b_eta is close to 1. F = min(b_eta, 1 - that term);
    * i > eta (saturation): G(eta + s) = e^{-s eps} G(eta) - delta (1 - e^{-s eps})/(e^eps - 1), floored
      at 0, from the same G(eta): every step is exactly G' = e^-eps (G - delta) up to rounding
      relative to e^{-s eps} G(eta), which is what the DP inequality multiplies by e^eps.
    """
    if epsilon == 0.0:
        return np.minimum(x + i * delta, 1.0), np.maximum(y - i * delta, 0.0), math.inf
    eta = float(_thresholds_delta(np.array([x]), epsilon, delta)[0])
    prefix = np.empty_like(i)
    rest = np.empty_like(i)
    growing = i < eta
    prefix[growing] = _delta_growth(x, epsilon, delta, i[growing])
    rest[growing] = 1.0 - prefix[growing]
    if not growing.all():
        if eta == 0.0:
            at_prefix, at_rest = x, y
        else:
            before = y if eta == 1.0 else 1.0 - float(_delta_growth(x, epsilon, delta, eta - 1.0))
            saturation = max(math.exp(-epsilon) * (before - delta), 0.0)
            grown = float(_delta_growth(x, epsilon, delta, eta))
            at_prefix, at_rest = min(grown, 1.0 - saturation), max(1.0 - grown, saturation)
        steps = i[~growing] - eta
        decayed = at_rest * np.exp(-steps * epsilon) - delta * (-np.expm1(-steps * epsilon) / math.expm1(epsilon))
        rest[~growing] = np.maximum(decayed, 0.0)
        prefix[~growing] = np.where(steps == 0.0, at_prefix, 1.0 - rest[~growing])
    boundary = i == 0.0
    prefix[boundary], rest[boundary] = x, y
    return prefix, rest, eta


def _delta_line(p: NDArray[np.float64], epsilon: float, delta: float, i: NDArray[np.float64]) -> NDArray[np.float64]:
    """The (eps, delta) line for m = 2 or 3 colours: prefix recursion F_k(i) = phi_delta^i(F_k(0)).

    Colour 1 is F_1 and colour m is G_{m-1}, both from :func:`_delta_prefix`. The middle colour of
    m = 3 (eta_2 <= eta_1) is computed without subtracting nearly equal numbers where it is small:
    e^{i eps} p_2 while both prefixes grow (i <= eta_2; the delta terms cancel exactly);
    G_1 - G_2 while F_1 grows and F_2 saturates (there it is large, or G_1 is protected at
    eta_1); and for i > eta_1 it decays as e^{-(i - eta_1) eps} P_2(eta_1) until G_2 reaches 0, after
    which it is G_1 (the min of the two is both cases at once).
    """
    epsilon = min(epsilon, _DELTA_EPSILON_CAP)
    suffix = np.cumsum(p[::-1])[::-1]  # G_k(0) = p_{k+1} + ... + p_m, computed directly
    prefix = np.clip(np.cumsum(p), 0.0, 1.0)
    if p.size == 2:
        first, second, _ = _delta_prefix(float(prefix[0]), float(suffix[1]), epsilon, delta, i)
        table = np.stack([first, second], axis=1)
    else:
        eta_1 = float(_thresholds_delta(prefix[:1], epsilon, delta)[0]) if epsilon > 0.0 else math.inf
        pivot = eta_1 if eta_1 < _LARGE_STEPS else None
        points = i if pivot is None else np.append(i, pivot)
        f_1_all, g_1_all, _ = _delta_prefix(float(prefix[0]), float(suffix[1]), epsilon, delta, points)
        _, g_2_all, eta_2 = _delta_prefix(float(prefix[1]), float(suffix[2]), epsilon, delta, points)
        f_1, g_1, g_2 = f_1_all[: i.size], g_1_all[: i.size], g_2_all[: i.size]
        if epsilon == 0.0:
            middle = np.maximum(g_1 - g_2, 0.0)
        else:
            eta_2 = min(eta_2, eta_1)
            log_p2 = math.log(p[1]) if p[1] > 0.0 else -math.inf

            def middle_at(
                index: NDArray[np.float64], g_first: NDArray[np.float64], g_second: NDArray[np.float64]
            ) -> NDArray[np.float64]:
                with np.errstate(invalid="ignore"):
                    both_grow = np.exp(np.minimum(index * epsilon + log_p2, 0.0))
                return np.where(index <= eta_2, both_grow, np.maximum(g_first - g_second, 0.0))

            middle = middle_at(i, g_1, g_2)
            if pivot is not None:
                at_pivot = float(middle_at(np.array([pivot]), g_1_all[-1:], g_2_all[-1:])[0])
                after = i > pivot
                middle[after] = np.minimum(at_pivot * np.exp(-(i[after] - pivot) * epsilon), g_1[after])
        table = np.stack([f_1, middle, g_2], axis=1)
    np.clip(table, 0.0, 1.0, out=table)
    table /= table.sum(axis=1, keepdims=True)
    return table


def line_probabilities(
    boundary: ArrayLike,
    epsilon: float,
    distances: ArrayLike | int,
    delta: float = 0.0,
) -> NDArray[np.float64]:
    """Optimal boundary-homogeneous mechanism on the line, any number of colours m >= 2.

    Prefix-sum recursion (docs/privacy/rainbow.md, "The line optimum"): every prefix sum
    F_k(i) = P(c_1) + ... + P(c_k) follows the binary optimum F_k(i) = phi^i(F_k(0)) independently,
    and colour k gets F_k(i) - F_{k-1}(i).

    Guarantee (delta = 0): epsilon-DP between consecutive indices, and the unique optimal
    (first-order stochastically dominant in rainbow order, hence lexicographically optimal)
    boundary-homogeneous mechanism (proof in docs/privacy/rainbow.md; uniqueness: [ZGD+22] Theorem 2).
    With delta > 0 the same recursion with phi_delta ([DMS21]; docs/privacy/rainbow.md) is used: proven for m = 2, only
    *numerically verified* (against the lexicographic LP) for m = 3, and refused for m >= 4
    (use :func:`dpselect.rainbow.lexicographic_lp` there). Every small entry is computed by its
    own formula (never as 1 minus a number close to 1), so the float table satisfies the
    (epsilon, delta) inequalities up to rounding (~1e-15) for every epsilon; above epsilon = 700
    the table for epsilon = 700 is returned (it is (epsilon, delta)-DP for every larger epsilon,
    and the two optima differ only in probabilities of order e^-700).

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
    return _delta_line(p, epsilon, delta, i)


def binary_line(p: float, epsilon: float, distances: ArrayLike | int, delta: float = 0.0) -> NDArray[np.float64]:
    """Binary optimum of [DMS21]: P_B(i) = phi^i(p) ([ZGD+22] eq. (12) with two colours), with the
    (epsilon, delta) version phi_delta when delta > 0. ``p`` is the boundary probability of the
    preferred answer. Returns (len(distances), 2): columns (preferred, other)."""
    preferred = check_probability(p, "p")
    return line_probabilities([preferred, 1.0 - preferred], epsilon, distances, delta)


def ternary_line(boundary: ArrayLike, epsilon: float, distances: ArrayLike | int) -> NDArray[np.float64]:
    """Three-colour closed form of [ZGD+22] (Theorems 4-5, Corollary 1), implemented literally:
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
