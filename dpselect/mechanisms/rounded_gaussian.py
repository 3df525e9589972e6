"""Exact draws of the rounded continuous Gaussian: k = round((c + σZ)/g), Z standard normal.

Releasing round_g(c + σZ), the continuous Gaussian mechanism's output rounded to a grid of
width g, is post-processing of that mechanism, so its privacy is exactly the continuous
Gaussian's: the analytic Gaussian mechanism's (ε, δ) curve (Balle & Wang, "Improving the
Gaussian Mechanism for Differential Privacy: Analytical Calibration and Optimal Denoising",
ICML 2018, Theorem 8) holds as stated, with no allowance for floating-point noise. Unlike
c + σZ computed in floats, whose low-order bits can give the input away (Mironov, "On
Significance of the Least Significant Bits for Differential Privacy", CCS 2012), the rounded
value takes countably many values with irrational but computable probabilities

    P[k = K] = Φ(((K + ½)g − c)/σ) − Φ(((K − ½)g − c)/σ),

and is drawn here *exactly* in law from uniform bits, by inversion: k is the cell K with
Φ(b_K) <= U < Φ(b_{K+1}), b_K = ((K − ½)g − c)/σ, for U uniform on [0, 1) from the CSPRNG.

How U is compared with the irrational Φ(b), as in :mod:`dpselect.mechanisms.tail_draws`:

* a float guess of the cell, from a rational approximation of Φ⁻¹ (Acklam's) and one Halley
  step with the C library's erfc, only decides where to look;
* each of the guessed cell's two boundaries gets float bounds on min(Φ(b), 1 − Φ(b)) (with a
  flag for which side; values near 0 or 1 keep their relative precision) widened by a relative
  2^-30 margin, turned into integer cut points on the 2^64 scale of U's first 64 bits; U is
  surely in the cell, surely above it, or surely below it (the guess then moves one cell, for
  all unsettled draws at once), or
* rarely (probability about 2^-29·0.8·σ/g per draw), U's first 64 bits fall within a
  boundary's margin: the draw is then finished in integer arithmetic, U completed with fresh
  64-bit blocks and compared with rational bounds on Φ at the exact rational boundary
  (:func:`dpselect.core.exact.normal_cdf_bounds`), the cell found by a galloping then binary
  search over those exact comparisons, with one U throughout.

The one assumption is tail_draws' own: the C erfc is accurate to 2^-30 relative (its documented
error is a few ulps). Rounding the boundary to a double moves the tail by less than 2^-40
relative for |b| <= 40 (the tail's log-derivative is below |b| + 1); beyond 37 the tail is under
2^-990, the absolute slack added to every upper bound. No floating-point value decides a cell on
its own (docs/privacy/weighted.md explains the same technique for the Bernoulli draws).

Cells must be narrow against σ: g/σ <= 1/4. A wide cell's far boundary would put an exact
comparison at |b| in the thousands, where the normal tail's integer bound costs memory in
proportion to b² (and wide cells buy nothing: the rounding only adds g²/12 of variance). Narrow
cells cost speed only when very narrow, through the margin: the exact path is taken about
0.8·2^-29·σ/g of the time (2^-23 at σ/g = 64).

Internal: not part of the public API; it may change in any release.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpselect import _weighted
from dpselect.core.exact import normal_cdf_bounds
from dpselect.mechanisms.tail_draws import uniform_is_below
from dpselect.rng import resolve_rng

__all__ = ["rounded_gaussian_draws", "normal_quantile"]

_MARGIN = 2.0**-30  # relative width of the float interval around each boundary's tail
_TINY = 2.0**-990  # absolute slack: covers tails below the double range
_TWO64 = 2.0**64
_HALF = np.uint64(1 << 63)
_MAX_STEPS = 32  # float moves of one cell before a draw is handed to the exact search

# Limits that keep every integer of the float path inside int64 (docs: the checks below).
_MAX_CENTRE = 2**62
_MAX_CELL = 2**58
_MAX_SCALE_BITS = 54  # σ·2^unit_bits <= 2^54
_MAX_UNIT_BITS = 62
_WIDEST = Fraction(1, 4)  # g/σ

# Acklam's rational approximation of Φ⁻¹ (relative error below 1.15e-9 before the Halley step).
_A = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
      1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00)
_B = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
      6.680131188771972e+01, -1.328068155288572e+01)
_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
      -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00)
_P_LOW = 0.02425  # below: the tail formula in sqrt(−2 ln p)
_SQRT_2PI = math.sqrt(2 * math.pi)


def _polynomial(coefficients: tuple[float, ...], x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    total = np.full_like(x, coefficients[0])
    for c in coefficients[1:]:
        total = total * x + c
    return total


def normal_quantile(p: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Φ⁻¹(p) for 0 < p <= 1/2, element-wise, in double precision (a guess, decides nothing):
    Acklam's rational approximation, then one Halley step on Φ(x) − p with the C erfc."""
    x = np.empty_like(p)
    tail = p < _P_LOW
    q = np.sqrt(-2.0 * np.log(p[tail]))
    x[tail] = _polynomial(_C, q) / (_polynomial(_D, q) * q + 1.0)
    r = p[~tail] - 0.5
    s = r * r
    x[~tail] = _polynomial(_A, s) * r / (_polynomial(_B, s) * s + 1.0)
    # Halley: Φ(x) = P[Z > −x]; e^{x²/2} stays finite since |x| < 40 for p >= 2^-1000
    error = _weighted.normal_upper_tail(np.ascontiguousarray(-x)) - p
    step = error * _SQRT_2PI * np.exp(0.5 * x * x)
    result: npt.NDArray[np.float64] = x - step / (1.0 + 0.5 * x * step)
    return result


def _check(centre: object, unit_bits: object, sigma: object, cell: object) -> npt.NDArray[np.int64]:
    """Every argument checked before a byte is drawn; the centres as int64."""
    if isinstance(unit_bits, bool) or not isinstance(unit_bits, (int, np.integer)):
        raise TypeError(f"unit_bits must be an int, got {type(unit_bits).__name__}")
    if not 0 <= unit_bits <= _MAX_UNIT_BITS:
        raise ValueError(f"unit_bits must be between 0 and {_MAX_UNIT_BITS}, got {unit_bits}")
    if isinstance(sigma, bool) or not isinstance(sigma, (Fraction, int)):
        raise TypeError(f"sigma must be an exact Fraction (e.g. Fraction('2.5')), got {type(sigma).__name__}")
    if sigma <= 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    if isinstance(cell, bool) or not isinstance(cell, (int, np.integer)):
        raise TypeError(f"cell must be an int (the grid step in units of 2^-unit_bits), got {type(cell).__name__}")
    if not 1 <= cell <= _MAX_CELL:
        raise ValueError(f"cell must be between 1 and 2**58, got {cell}")
    scale = Fraction(sigma) * (1 << int(unit_bits))  # σ in units of 2^-unit_bits
    if scale > 1 << _MAX_SCALE_BITS:
        raise ValueError(f"sigma * 2**unit_bits must be at most 2**{_MAX_SCALE_BITS}, got about "
                         f"2**{math.log2(scale):.1f}: pass a smaller unit_bits")
    if Fraction(int(cell)) > _WIDEST * scale:
        raise ValueError(f"cell must be at most sigma * 2**unit_bits / 4 (cells narrow against the noise), got "
                         f"cell = {cell} for sigma * 2**unit_bits = {float(scale):.6g}: pass a smaller cell")
    if not isinstance(centre, np.ndarray):
        raise TypeError(f"centre must be a numpy array of integers, got {type(centre).__name__}")
    if centre.dtype.kind not in "iu":
        raise TypeError(f"centre must have an integer dtype, got {centre.dtype}")
    if centre.size and (int(centre.max()) > _MAX_CENTRE or int(centre.min()) < -_MAX_CENTRE):
        raise ValueError("centre values must lie within ±2**62 (units of 2^-unit_bits)")
    return centre.astype(np.int64).ravel()


def _cut_points(numerator: npt.NDArray[np.int64], scale2: float) -> tuple[
        npt.NDArray[np.bool_], npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """For boundaries b = numerator/scale2 (numerator exact, scale2 = 2σ·2^unit_bits): whether
    Φ(b) is read as 1 − t (b >= 0), and integer cut points low <= t·2^64 <= high of its tail
    t = P[Z > |b|] <= 1/2 (high >= 1 always)."""
    z = numerator.astype(np.float64) / scale2
    t = _weighted.normal_upper_tail(np.ascontiguousarray(np.abs(z)))
    # t <= 1/2, so t·2^64 <= 2^63: exact after the power-of-two scaling, exact as uint64 after floor/ceil.
    low = np.floor(np.clip(t * (1 - _MARGIN), 0.0, 0.5) * _TWO64).astype(np.uint64)
    high = np.ceil(np.clip(t * (1 + _MARGIN) + _TINY, 0.0, 0.5) * _TWO64).astype(np.uint64)
    return numerator >= 0, low, high


def _sides(u: npt.NDArray[np.uint64], numerator: npt.NDArray[np.int64], scale2: float) -> tuple[
        npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """(surely U < Φ(b), surely U >= Φ(b)) from U's first 64 bits u; neither: within the margin.

    Φ(b) = t for b < 0: U < t surely when u + 1 <= low (u < low), U >= t when u >= high. For
    b >= 0, Φ(b) = 1 − t is compared through v = 2^64 − 1 − u (no 2^64 − t in doubles, which
    would round away t's low bits): U < 1 − t surely when (u + 1)/2^64 <= 1 − high/2^64, i.e.
    v >= high; U >= 1 − t surely when u/2^64 >= 1 − low/2^64, i.e. v < low."""
    complement, low, high = _cut_points(numerator, scale2)
    v = ~u
    below = np.where(complement, v >= high, u < low)
    above = np.where(complement, v < low, u >= high)
    return below, above


def rounded_gaussian_draws(centre: npt.NDArray[np.int64], unit_bits: int, sigma: Fraction, cell: int,
                           rng: object | None = None) -> npt.NDArray[np.int64]:
    """k[i] = the index of the cell of width cell/2^unit_bits that contains c_i + σZ_i, i.e.
    Y_i = c_i/2^unit_bits + σZ_i rounded to the nearest multiple of g = cell/2^unit_bits:
    k[i] = round(Y_i / g), with Z_i iid standard normal, c_i = centre[i]. Exactly:
    P[k = K] = Φ(((K + ½)g − c)/σ) − Φ(((K − ½)g − c)/σ).

    ``centre`` in units of 2^-unit_bits (any integer array, |values| <= 2^62; the result has its
    shape), ``sigma`` an exact positive rational in real units (those of c/2^unit_bits), ``cell``
    a positive int with g <= σ/4. ``rng``: None (the CSPRNG) or the test generator."""
    values = _check(centre, unit_bits, sigma, cell)
    generator = resolve_rng(rng)
    shape = np.shape(centre)
    n = values.size
    if n == 0:
        return np.zeros(shape, np.int64)
    unit_bits, cell = int(unit_bits), int(cell)
    sigma = Fraction(sigma)
    u = np.frombuffer(generator.random_bytes(8 * n), dtype=">u8").astype(np.uint64)
    # c = (base·cell + offset)/2^unit_bits with 0 <= offset < cell: the cells are base + j, and the
    # lower boundary of cell j is ((j − ½)cell − offset)/2^unit_bits, 2× that an exact int64.
    base = values // cell
    offset = values - base * cell
    scale = float(sigma) * 2.0**unit_bits  # σ in units
    scale2 = 2.0 * scale
    # The guess: Φ⁻¹ at the middle of U's 64-bit interval, from the nearer end of [0, 1).
    upper_half = u >= _HALF
    nearer = np.where(upper_half, ~u, u)
    z = normal_quantile((nearer.astype(np.float64) + 0.5) / _TWO64)
    z = np.where(upper_half, -z, z)
    j = np.rint((z * scale + offset) / cell).astype(np.int64)

    cell64 = np.int64(cell)
    active = np.arange(n)
    exact: list[int] = []
    for _ in range(_MAX_STEPS):
        if not active.size:
            break
        ua, ja, oa = u[active], j[active], offset[active]
        lower = (2 * ja - 1) * cell64 - 2 * oa  # 2·(lower boundary) in units
        below_lower, above_lower = _sides(ua, lower, scale2)
        below_upper, above_upper = _sides(ua, lower + 2 * cell64, scale2)
        up = above_upper
        down = below_lower & ~up  # (both at once cannot happen: Φ(b_j) <= Φ(b_{j+1}))
        done = above_lower & below_upper
        unsure = ~(up | down | done)
        exact.extend(active[unsure].tolist())
        j[active[up]] += 1
        j[active[down]] -= 1
        active = active[up | down]
    exact.extend(active.tolist())  # still moving after _MAX_STEPS cells: the exact search too

    if exact:
        denominator = Fraction(1, 1 << (unit_bits + 1)) / sigma
        for i in sorted(exact):  # index order: the same bytes for the same seed
            j[i] = _exact_cell(int(u[i]), int(j[i]), int(offset[i]), cell, denominator, generator)
    return (base + j).reshape(shape)


def _exact_cell(prefix: int, start: int, offset: int, cell: int, denominator: Fraction,
                generator: object) -> int:
    """The cell j of U (first 64 bits ``prefix``): Φ(b_j) <= U < Φ(b_{j+1}), b_m the lower
    boundary of cell m, ((2m − 1)cell − 2·offset)·denominator exactly. The smallest m with
    U < Φ(b_m) is j + 1: found by galloping from the guess, then halving, every comparison exact
    and all of one U (its bits drawn as needed, kept for the next comparison)."""
    state = [prefix, 64]

    def below(m: int) -> bool:
        z = ((2 * m - 1) * cell - 2 * offset) * denominator
        result, state[0], state[1] = uniform_is_below(
            state[0], state[1], lambda bits: normal_cdf_bounds(z, bits), generator)
        return result

    step = 1
    if below(start + 1):  # the answer is at most start: gallop down to a boundary U is above
        high = start + 1
        low = high - step
        while below(low):
            high, step = low, 2 * step
            low = high - step
    else:  # gallop up to a boundary U is below
        low = start + 1
        high = low + step
        while not below(high):
            low, step = high, 2 * step
            high = low + step
    while high - low > 1:  # below(low) is false, below(high) true
        middle = (low + high) // 2
        if below(middle):
            high = middle
        else:
            low = middle
    return high - 1
